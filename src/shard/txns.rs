//! The I/O around the transaction coordinator on one shard.
//!
//! Each shard runs one [`crate::txn::Coordinator`] for the transactional ids whose
//! `__transaction_state` partition it leads. Requests arrive as `ShardOp::Txn` (from any
//! shard, over the mesh); this module carries out the coordinator's [`Effect`]s:
//! - `Respond`: answers the waiting request (a oneshot per `RequestId`);
//! - `Append`: appends the record to the local `__transaction_state` partition through
//!   `internal_topic` (acks=all: durable and on every in-sync replica) and reports back with
//!   `handle_append_done`;
//! - `WriteMarkers`: writes the COMMIT/ABORT markers on each partition's leader (this
//!   broker's shards over the mesh, other brokers with a WriteTxnMarkers request), retrying
//!   the partitions that failed, and reports the written ones with `handle_markers_done`;
//! - `NeedProducerIds`: fetches a block of producer ids from the controller.
//!
//! Leadership of a `__transaction_state` partition (from the replica glue) loads it: the
//! partition is replayed into the coordinator, which answers COORDINATOR_LOAD_IN_PROGRESS
//! meanwhile; losing it unloads it (NOT_COORDINATOR). A ticker advances the coordinator's
//! timers (transaction timeouts, id expiry).
//!
//! RefCell borrows of the coordinator are confined to small synchronous blocks; none is held
//! across an `.await`.
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::WriteTxnMarkersRequest;
use tracing::{debug, info, warn};

use super::internal_topic::{self, AppendQueues, Host, KeyValue, TopicSpec};
use super::mesh::call;
use super::ops::{ShardOp, ShardReply};
use super::partition_service::write_markers::MarkerWrite;
use super::peer::PeerConnection;
use super::{ShardCtx, TopicPartition};
use crate::protocol::control::{EndTxnMarker, TxnOutcome};
use crate::txn::admin::ListFilter;
use crate::txn::verify::VerifyTxn;
use crate::txn::{
    AddOffsetsArgs, AddPartitionsArgs, AppendFailure, Coordinator, Effect, EndTxnArgs, ErrorCode,
    InitProducerIdArgs, MarkerRequest, ProducerIdBlock, RequestId, Response, TxnConfig,
    TxnDescription, TxnPartition, TxnResult, TxnState, TRANSACTION_STATE_TOPIC,
};

/// How often the coordinator's timers advance. Transaction timeouts are seconds and the
/// abort check runs every `transaction_abort_timed_out_transaction_cleanup_interval_ms`.
const TICK_MS: u64 = 100;

/// Requests one shard may hold waiting for their answer; past it new ones are refused with
/// COORDINATOR_NOT_AVAILABLE (the client retries).
const PENDING_REQUESTS_MAX: usize = 100_000;

/// How long a `__transaction_state` append may take to reach the in-sync replicas (Kafka's
/// transaction coordinator uses its request timeout, 30 s by default; a client's request
/// times out first, so 5 s as for group commits).
const TXN_COMMIT_TIMEOUT: Duration = Duration::from_millis(5000);

/// Pause between two rounds of markers for partitions that failed (no leader, leader
/// moving, a broker unreachable); Kafka retries its marker sends at its retry backoff.
const MARKER_RETRY_MS: u64 = 100;

/// Timeout of one WriteTxnMarkers request to another broker (connect and answer).
const MARKER_REQUEST_TIMEOUT: Duration = Duration::from_millis(10_000);

/// Pause before asking the controller again for producer ids after it refused.
const PRODUCER_IDS_RETRY: Duration = Duration::from_millis(500);

/// Where transaction records go.
const HOST: Host = Host {
    topic: TRANSACTION_STATE_TOPIC,
    queues: |ctx| &ctx.txns.appends,
    commit_timeout: TXN_COMMIT_TIMEOUT,
};

/// A client request for the coordinator of one transactional id. Plain owned data so it can
/// cross the mesh.
pub enum TxnRequest {
    InitProducerId(InitProducerIdArgs),
    AddPartitions(AddPartitionsArgs),
    AddOffsets(AddOffsetsArgs),
    EndTxn(EndTxnArgs),
}

impl TxnRequest {
    fn transactional_id(&self) -> &str {
        match self {
            TxnRequest::InitProducerId(a) => &a.transactional_id,
            TxnRequest::AddPartitions(a) => &a.transactional_id,
            TxnRequest::AddOffsets(a) => &a.transactional_id,
            TxnRequest::EndTxn(a) => &a.transactional_id,
        }
    }

    /// This request's answer when it cannot be served at all.
    pub fn failed(&self, e: ErrorCode) -> Response {
        match self {
            TxnRequest::InitProducerId(_) => Response::InitProducerId(Err(e)),
            TxnRequest::AddPartitions(_) => Response::AddPartitions(Err(e)),
            TxnRequest::AddOffsets(_) => Response::AddOffsets(Err(e)),
            TxnRequest::EndTxn(_) => Response::EndTxn(Err(e)),
        }
    }
}

/// One shard's transaction coordinator and its pending answers.
pub struct TxnShard {
    coordinator: RefCell<Coordinator>,
    waiters: RefCell<HashMap<RequestId, oneshot::Sender<Response>>>,
    next_request: Cell<RequestId>,
    /// `__transaction_state` partitions this shard leads: the leader epoch it loaded them at
    /// and the load's generation (a load that finds another generation was superseded).
    led: RefCell<HashMap<i32, (i32, u64)>>,
    next_generation: Cell<u64>,
    /// Appends waiting for room in their `__transaction_state` logs.
    appends: AppendQueues,
    /// Partitions of `__transaction_state` (the hash modulus).
    partitions: i32,
}

impl TxnShard {
    pub fn new(config: &crate::config::Config) -> Self {
        let partitions = config.transaction_state_log_num_partitions;
        let txn_config = TxnConfig {
            transaction_max_timeout_ms: config.transaction_max_timeout_ms,
            transactional_id_expiration_ms: config.transactional_id_expiration_ms,
            abort_timed_out_interval_ms: config
                .transaction_abort_timed_out_transaction_cleanup_interval_ms,
            remove_expired_interval_ms: config
                .transaction_remove_expired_transaction_cleanup_interval_ms,
            offsets_topic_partitions: config.offsets_topic_num_partitions,
        };
        Self {
            coordinator: RefCell::new(Coordinator::new(txn_config, partitions)),
            waiters: RefCell::new(HashMap::new()),
            next_request: Cell::new(1),
            led: RefCell::new(HashMap::new()),
            next_generation: Cell::new(1),
            appends: AppendQueues::default(),
            partitions: partitions.max(1),
        }
    }

    /// Registers a deferred answer; `None` if too many are pending.
    fn register(&self) -> Option<(RequestId, oneshot::Receiver<Response>)> {
        let mut waiters = self.waiters.borrow_mut();
        if waiters.len() >= PENDING_REQUESTS_MAX {
            return None;
        }
        let id = self.next_request.get();
        self.next_request.set(id.wrapping_add(1));
        let (tx, rx) = oneshot::channel();
        waiters.insert(id, tx);
        Some((id, rx))
    }
}

/// How `__transaction_state` is created.
fn state_topic(config: &crate::config::Config) -> TopicSpec {
    TopicSpec {
        name: TRANSACTION_STATE_TOPIC,
        partitions: config.transaction_state_log_num_partitions,
        replication_factor: usize::try_from(config.transaction_state_log_replication_factor)
            .unwrap_or(1),
        segment_bytes: config.transaction_state_log_segment_bytes,
        min_isr: usize::try_from(config.transaction_state_log_min_isr).ok(),
    }
}

/// Creates `__transaction_state` through the controller if it does not exist yet (as Kafka
/// does on the first FindCoordinator for a transactional id).
pub async fn ensure_state_topic(ctx: &Rc<ShardCtx>) -> Result<(), ErrorCode> {
    internal_topic::ensure(ctx, &state_topic(&ctx.shared.config)).await
}

/// The `__transaction_state` partition of `transactional_id` and its leader (the id's
/// coordinator), from the catalog.
pub fn coordinator_node(ctx: &ShardCtx, transactional_id: &str) -> Option<(i32, i32)> {
    let catalog = ctx.shared.catalog.load();
    let topic = catalog.topic(TRANSACTION_STATE_TOPIC)?;
    let partition = crate::txn::partition_for(transactional_id, ctx.txns.partitions);
    let pm = topic.partitions.get(usize::try_from(partition).ok()?)?;
    Some((partition, pm.leader))
}

/// The shard coordinating `transactional_id` on this broker; `None` if this broker does not
/// lead the id's partition (NOT_COORDINATOR: the client looks again).
fn coordinator_shard(ctx: &ShardCtx, transactional_id: &str) -> Option<usize> {
    let catalog = ctx.shared.catalog.load();
    let topic = catalog.topic(TRANSACTION_STATE_TOPIC)?;
    let partition = crate::txn::partition_for(transactional_id, ctx.txns.partitions);
    let pm = topic.partitions.get(usize::try_from(partition).ok()?)?;
    if pm.leader != catalog.local_node {
        return None;
    }
    Some(catalog.local_shard(pm)? as usize)
}

/// Sends `req` to the coordinator of its transactional id, wherever it lives on this
/// broker, and awaits the answer.
pub async fn call_txn(ctx: &Rc<ShardCtx>, req: TxnRequest) -> Response {
    let Some(shard) = coordinator_shard(ctx, req.transactional_id()) else {
        return req.failed(ErrorCode::NotCoordinator);
    };
    let unavailable = req.failed(ErrorCode::CoordinatorNotAvailable);
    match call(ctx, shard, ShardOp::Txn { req }).await {
        ShardReply::Txn(r) => r,
        _ => unavailable,
    }
}

/// A read-only question for the coordinators (DescribeTransactions, ListTransactions),
/// answered at once from their state.
pub enum TxnAdminRequest {
    Describe(String),
    List(ListFilter),
    /// AddPartitionsToTxn verify-only (KIP-890): read-only as well.
    Verify(VerifyTxn),
}

pub enum TxnAdminReply {
    Describe(Result<TxnDescription, ErrorCode>),
    List(Result<Vec<TxnDescription>, ErrorCode>),
    Verify(VerifyResult),
}

/// Each partition's answer to a verify-only question.
pub type VerifyResult = crate::txn::verify::TxnAnswer;

/// Whether `txn`'s partitions are in its ongoing transaction, asked of the shard
/// coordinating its id on this broker (NOT_COORDINATOR if none does).
pub async fn verify_partitions(ctx: &Rc<ShardCtx>, txn: VerifyTxn) -> VerifyResult {
    let Some(shard) = coordinator_shard(ctx, &txn.transactional_id) else {
        return Err(ErrorCode::NotCoordinator);
    };
    match call(
        ctx,
        shard,
        ShardOp::TxnAdmin {
            req: TxnAdminRequest::Verify(txn),
        },
    )
    .await
    {
        ShardReply::TxnAdmin(TxnAdminReply::Verify(r)) => r,
        _ => Err(ErrorCode::CoordinatorNotAvailable),
    }
}

/// DescribeTransactions for one id, asked of the shard coordinating it on this broker.
pub async fn describe(
    ctx: &Rc<ShardCtx>,
    transactional_id: &str,
) -> Result<TxnDescription, ErrorCode> {
    let Some(shard) = coordinator_shard(ctx, transactional_id) else {
        return Err(ErrorCode::NotCoordinator);
    };
    let req = TxnAdminRequest::Describe(transactional_id.to_string());
    match call(ctx, shard, ShardOp::TxnAdmin { req }).await {
        ShardReply::TxnAdmin(TxnAdminReply::Describe(r)) => r,
        _ => Err(ErrorCode::CoordinatorNotAvailable),
    }
}

/// ListTransactions: the ids every shard of this broker coordinates that `filter` keeps, by
/// id. A shard with nothing loaded answers an empty list, so asking all of them is exact.
pub async fn list_all(
    ctx: &Rc<ShardCtx>,
    filter: ListFilter,
) -> Result<Vec<TxnDescription>, ErrorCode> {
    let mut all = Vec::new();
    for shard in 0..ctx.shared.nr_shards {
        let req = TxnAdminRequest::List(filter.clone());
        match call(ctx, shard, ShardOp::TxnAdmin { req }).await {
            ShardReply::TxnAdmin(TxnAdminReply::List(r)) => all.extend(r?),
            _ => return Err(ErrorCode::CoordinatorNotAvailable),
        }
    }
    all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
    Ok(all)
}

/// Answers an admin question on this shard, from its coordinator's state.
pub fn start_admin(ctx: Rc<ShardCtx>, req: TxnAdminRequest) -> LocalBoxFuture<'static, ShardReply> {
    let now_wall_ms = ctx.shared.clock.now().wall_ms;
    let reply = {
        let c = ctx.txns.coordinator.borrow();
        match req {
            TxnAdminRequest::Describe(id) => TxnAdminReply::Describe(c.describe_checked(&id)),
            TxnAdminRequest::List(filter) => {
                TxnAdminReply::List(c.list_filtered(&filter, now_wall_ms))
            }
            TxnAdminRequest::Verify(txn) => {
                let partitions: Vec<TxnPartition> = txn.partitions.into_iter().collect();
                TxnAdminReply::Verify(c.verify_partitions(
                    &txn.transactional_id,
                    txn.producer_id,
                    txn.producer_epoch,
                    &partitions,
                ))
            }
        }
    };
    Box::pin(futures::future::ready(ShardReply::TxnAdmin(reply)))
}

/// Runs a transaction request on this (the coordinator's) shard.
pub fn start(ctx: Rc<ShardCtx>, req: TxnRequest) -> LocalBoxFuture<'static, ShardReply> {
    Box::pin(async move { ShardReply::Txn(serve(&ctx, req).await) })
}

async fn serve(ctx: &Rc<ShardCtx>, req: TxnRequest) -> Response {
    let ts = &ctx.txns;
    let unavailable = req.failed(ErrorCode::CoordinatorNotAvailable);
    let Some((id, rx)) = ts.register() else {
        return unavailable;
    };
    let now = ctx.shared.clock.now();
    let mut out = Vec::new();
    {
        let mut c = ts.coordinator.borrow_mut();
        match req {
            TxnRequest::InitProducerId(a) => c.handle_init_producer_id(id, a, now, &mut out),
            TxnRequest::AddPartitions(a) => c.handle_add_partitions(id, a, now, &mut out),
            TxnRequest::AddOffsets(a) => c.handle_add_offsets(id, a, now, &mut out),
            TxnRequest::EndTxn(a) => c.handle_end_txn(id, a, now, &mut out),
        }
    }
    run_effects(ctx, out);
    // The sender is dropped without an answer only if the shard stops.
    rx.await.unwrap_or(unavailable)
}

/// Carries out the coordinator's effects, in order (appends start now, so the log keeps the
/// order of the decisions).
fn run_effects(ctx: &Rc<ShardCtx>, out: Vec<Effect>) {
    for effect in out {
        match effect {
            Effect::Respond { request, response } => {
                let tx = ctx.txns.waiters.borrow_mut().remove(&request);
                if let Some(tx) = tx {
                    // The connection may have gone away; nothing to answer then.
                    let _ = tx.send(response);
                }
            }
            Effect::Append {
                id,
                partition,
                record,
            } => {
                let kv = KeyValue {
                    key: &record.key,
                    value: record.value.as_ref(),
                };
                let wait = internal_topic::append(ctx, HOST, partition, &[kv]);
                let ctx = ctx.clone();
                glommio::spawn_local(async move {
                    let durable = match wait {
                        Some(w) => w.await,
                        None => false,
                    };
                    let result = if durable {
                        Ok(())
                    } else if ctx.txns.led.borrow().contains_key(&partition) {
                        Err(AppendFailure::Unavailable)
                    } else {
                        Err(AppendFailure::NotLeader)
                    };
                    let mut out = Vec::new();
                    ctx.txns.coordinator.borrow_mut().handle_append_done(
                        id,
                        result,
                        ctx.shared.clock.now(),
                        &mut out,
                    );
                    run_effects(&ctx, out);
                })
                .detach();
            }
            Effect::WriteMarkers(req) => {
                glommio::spawn_local(write_markers(ctx.clone(), req)).detach();
            }
            Effect::NeedProducerIds => {
                glommio::spawn_local(fetch_producer_ids(ctx.clone())).detach();
            }
        }
    }
}

/// Asks the controller for a block of producer ids (one metadata-log write) until it gets
/// one or the shard stops; InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS meanwhile.
async fn fetch_producer_ids(ctx: Rc<ShardCtx>) {
    while !ctx.shutting_down.get() {
        match ctx.shared.quorum.allocate_producer_ids().await {
            Ok((first, count)) => {
                ctx.txns
                    .coordinator
                    .borrow_mut()
                    .add_producer_ids(ProducerIdBlock::new(first, count));
                debug!(shard = ctx.id, first, count, "producer id block");
                return;
            }
            Err(e) => {
                warn!("cannot allocate producer ids, will retry: {e}");
                glommio::timer::sleep(PRODUCER_IDS_RETRY).await;
            }
        }
    }
}

/// Whether the coordinator still waits for the markers of `req` (the transaction is still
/// prepared with this producer id and epoch, and this shard still coordinates it).
fn markers_wanted(ctx: &ShardCtx, req: &MarkerRequest) -> bool {
    let c = ctx.txns.coordinator.borrow();
    c.metadata(&req.transactional_id).is_some_and(|m| {
        let f = &m.fields;
        matches!(f.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
            && f.producer_id == req.producer_id
            && f.producer_epoch == req.producer_epoch
    })
}

/// Writes the markers of `req` on every partition, in rounds until each is written (or the
/// coordinator no longer wants them), reporting each round's written partitions.
async fn write_markers(ctx: Rc<ShardCtx>, req: MarkerRequest) {
    let mut remaining = req.partitions.clone();
    while !remaining.is_empty() && !ctx.shutting_down.get() && markers_wanted(&ctx, &req) {
        let (done, stop) = marker_round(&ctx, &req, &remaining).await;
        remaining.retain(|p| !done.contains(p) && !stop.contains(p));
        if !done.is_empty() {
            let mut out = Vec::new();
            ctx.txns.coordinator.borrow_mut().handle_markers_done(
                &req.transactional_id,
                req.producer_id,
                req.producer_epoch,
                &done,
                ctx.shared.clock.now(),
                &mut out,
            );
            run_effects(&ctx, out);
        }
        if !remaining.is_empty() {
            glommio::timer::sleep(Duration::from_millis(MARKER_RETRY_MS)).await;
        }
    }
}

/// What one partition's marker answer means for the coordinator.
enum MarkerOutcome {
    Written,
    /// Retry in the next round (no leader, leader moving, not enough replicas, ...).
    Retry,
    /// Never retry: this coordinator or this producer epoch is fenced on the partition
    /// (Kafka stops sending; a newer coordinator completes the transaction).
    Stop,
}

fn marker_outcome(error: Option<ErrorCode>) -> MarkerOutcome {
    match error {
        None => MarkerOutcome::Written,
        Some(ErrorCode::InvalidProducerEpoch | ErrorCode::TransactionCoordinatorFenced) => {
            MarkerOutcome::Stop
        }
        Some(_) => MarkerOutcome::Retry,
    }
}

/// One round: every remaining partition's marker sent to its leader. Returns the partitions
/// written (a deleted topic or partition counts as written, as in Kafka) and those never to
/// retry.
async fn marker_round(
    ctx: &Rc<ShardCtx>,
    req: &MarkerRequest,
    remaining: &[TxnPartition],
) -> (Vec<TxnPartition>, Vec<TxnPartition>) {
    let write = MarkerWrite {
        producer_id: req.producer_id,
        producer_epoch: req.producer_epoch,
        marker: EndTxnMarker {
            outcome: match req.result {
                TxnResult::Commit => TxnOutcome::Commit,
                TxnResult::Abort => TxnOutcome::Abort,
            },
            coordinator_epoch: req.coordinator_epoch,
        },
    };
    let catalog = ctx.shared.catalog.load();
    let mut done = Vec::new();
    let mut local: BTreeMap<usize, Vec<TxnPartition>> = BTreeMap::new();
    let mut remote: BTreeMap<i32, Vec<TxnPartition>> = BTreeMap::new();
    for tp in remaining {
        let pm = catalog.topic(&tp.topic).and_then(|t| {
            usize::try_from(tp.partition)
                .ok()
                .and_then(|i| t.partitions.get(i))
        });
        let Some(pm) = pm else {
            done.push(tp.clone());
            continue;
        };
        if pm.leader == catalog.local_node {
            if let Some(shard) = catalog.local_shard(pm) {
                local.entry(shard as usize).or_default().push(tp.clone());
            }
        } else if pm.leader >= 0 {
            remote.entry(pm.leader).or_default().push(tp.clone());
        }
    }
    let mut stop = Vec::new();
    let mut record = |tp: TxnPartition, error: Option<ErrorCode>| match marker_outcome(error) {
        MarkerOutcome::Written => done.push(tp),
        MarkerOutcome::Retry => {
            debug!(topic = %tp.topic, partition = tp.partition, ?error, "marker not written yet")
        }
        MarkerOutcome::Stop => {
            warn!(topic = %tp.topic, partition = tp.partition, ?error, txn = %req.transactional_id, "marker refused: coordinator or producer epoch fenced");
            stop.push(tp);
        }
    };
    for (shard, tps) in local {
        let parts = tps
            .iter()
            .map(|tp| {
                (
                    TopicPartition {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                    },
                    write,
                )
            })
            .collect();
        match call(ctx, shard, ShardOp::WriteMarkers { parts }).await {
            ShardReply::Markers(results) => {
                for (tp, r) in tps.into_iter().zip(results) {
                    record(tp, r.error);
                }
            }
            _ => debug!(shard, "markers: shard unavailable"),
        }
    }
    for (broker, tps) in remote {
        match remote_markers(ctx, broker, req, &tps).await {
            Ok(results) => {
                for (tp, error) in results {
                    record(tp, error);
                }
            }
            Err(e) => debug!(broker, "markers: {e}"),
        }
    }
    (done, stop)
}

/// Sends the markers for `tps` to `broker` with one WriteTxnMarkers v1 request; returns each
/// partition's error as the leader answered.
async fn remote_markers(
    ctx: &Rc<ShardCtx>,
    broker: i32,
    req: &MarkerRequest,
    tps: &[TxnPartition],
) -> Result<Vec<(TxnPartition, Option<ErrorCode>)>, String> {
    let addr = {
        let catalog = ctx.shared.catalog.load();
        let b = catalog
            .brokers
            .get(&broker)
            .ok_or_else(|| format!("broker {broker} unknown"))?;
        ctx.shared.peer_address(b).ok_or_else(|| {
            format!(
                "broker {broker} has no listener {}",
                ctx.shared.listeners.inter_broker
            )
        })?
    };
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in tps {
        by_topic
            .entry(tp.topic.as_str())
            .or_default()
            .push(tp.partition);
    }
    let topics = by_topic
        .into_iter()
        .map(|(name, partitions)| {
            WritableTxnMarkerTopic::default()
                .with_name(kafka_protocol::messages::TopicName(
                    kafka_protocol::protocol::StrBytes::from_string(name.to_string()),
                ))
                .with_partition_indexes(partitions)
        })
        .collect();
    let request =
        WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
            .with_producer_id(kafka_protocol::messages::ProducerId(req.producer_id.0))
            .with_producer_epoch(req.producer_epoch.0)
            .with_transaction_result(req.result == TxnResult::Commit)
            .with_coordinator_epoch(req.coordinator_epoch)
            .with_topics(topics)]);
    let me = ctx.shared.catalog.load().local_node;
    let mut conn = PeerConnection::connect(
        &ctx.shared.peer_security,
        &addr,
        &format!("strata-txn-markers-{me}"),
        MARKER_REQUEST_TIMEOUT,
    )
    .await
    .map_err(|e| e.to_string())?;
    let response = conn
        .call(&request, 1, MARKER_REQUEST_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let mut results = Vec::new();
    for m in response.markers {
        for t in m.topics {
            for p in t.partitions {
                let error = (p.error_code != 0)
                    .then(|| crate::protocol::error::error_from_code(p.error_code));
                let topic: &str = &t.name.0;
                results.push((TxnPartition::new(topic, p.partition_index), error));
            }
        }
    }
    Ok(results)
}

/// This broker now leads `__transaction_state`-`partition` at `leader_epoch` (the
/// coordinator epoch its markers carry): replay it into the coordinator (answering
/// COORDINATOR_LOAD_IN_PROGRESS meanwhile), then serve it; the markers of every prepared
/// transaction are sent again.
pub fn become_coordinator(ctx: &Rc<ShardCtx>, partition: i32, leader_epoch: i32) {
    let generation = ctx.txns.next_generation.get();
    {
        let mut led = ctx.txns.led.borrow_mut();
        if led.get(&partition).is_some_and(|(e, _)| *e == leader_epoch) {
            return;
        }
        ctx.txns.next_generation.set(generation + 1);
        led.insert(partition, (leader_epoch, generation));
    }
    let mut out = Vec::new();
    ctx.txns
        .coordinator
        .borrow_mut()
        .load_partition(partition, leader_epoch, &mut out);
    run_effects(ctx, out);
    let ctx = ctx.clone();
    glommio::spawn_local(async move {
        let Some(p) = ctx.local_partition(TRANSACTION_STATE_TOPIC, partition) else {
            resign(&ctx, partition);
            return;
        };
        let records =
            internal_topic::replay(TRANSACTION_STATE_TOPIC, partition, &p, |key, value| {
                let loaded = ctx
                    .txns
                    .coordinator
                    .borrow_mut()
                    .load_record(partition, key, value);
                if let Err(e) = loaded {
                    warn!(partition, "skipping transaction record: {e}");
                }
            })
            .await;
        // Leadership may have moved on (or come back at another epoch) while we read.
        let current = ctx.txns.led.borrow().get(&partition).map(|(_, g)| *g);
        if current != Some(generation) {
            return;
        }
        let mut out = Vec::new();
        ctx.txns
            .coordinator
            .borrow_mut()
            .finish_load(partition, ctx.shared.clock.now(), &mut out);
        run_effects(&ctx, out);
        info!(
            shard = ctx.id,
            partition, records, "transaction coordinator loaded"
        );
    })
    .detach();
}

/// This broker no longer leads `__transaction_state`-`partition`: forget its ids (waiters get
/// NOT_COORDINATOR; the new leader loads them from the log).
pub fn resign(ctx: &Rc<ShardCtx>, partition: i32) {
    if ctx.txns.led.borrow_mut().remove(&partition).is_none() {
        return;
    }
    let mut out = Vec::new();
    ctx.txns
        .coordinator
        .borrow_mut()
        .unload_partition(partition, &mut out);
    run_effects(ctx, out);
    info!(
        shard = ctx.id,
        partition, "no longer coordinating transactions"
    );
}

/// Advances the coordinator's timers every `TICK_MS` until the shard stops.
pub async fn ticker(ctx: Rc<ShardCtx>) {
    loop {
        glommio::timer::sleep(Duration::from_millis(TICK_MS)).await;
        if ctx.shutting_down.get() {
            return;
        }
        if ctx.txns.led.borrow().is_empty() {
            continue;
        }
        let mut out = Vec::new();
        ctx.txns
            .coordinator
            .borrow_mut()
            .tick(ctx.shared.clock.now(), &mut out);
        run_effects(&ctx, out);
    }
}
