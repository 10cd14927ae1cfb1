//! The I/O around the group coordinator on one shard.
//!
//! Each shard runs one [`crate::group::Coordinator`] for the groups whose `__consumer_offsets`
//! partition it owns. Requests for a group arrive here as `ShardOp::Group` (from any shard,
//! over the mesh) and this module:
//! - keeps the answers of deferred requests (JoinGroup, SyncGroup) as oneshot senders keyed
//!   by `RequestId` until the state machine emits them;
//! - appends the records the state machine asks for to the local `__consumer_offsets`
//!   partition, and acknowledges an OffsetCommit only after `wait_durable` of its batch (the
//!   same flush policy as produce); the offsets become visible only then. A log without
//!   room (the shard's memory budget or the log's staging buffer full) makes the append
//!   wait, bounded by `GROUP_COMMIT_TIMEOUT`, as a producer's would, not fail;
//! - replays this shard's `__consumer_offsets` partitions at start-up before any group request
//!   is served (until then: COORDINATOR_LOAD_IN_PROGRESS);
//! - runs one ticker task advancing the coordinator's timers.
//!
//! RefCell borrows of the coordinator are confined to small synchronous blocks; none is held
//! across an `.await`.
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use kafka_protocol::records::{RecordBatchDecoder, NO_SEQUENCE};
use tracing::{info, warn};

use super::internal_topic::{self, AppendQueues, AppendStart, CommittedWait, DurableWait, Host};
use super::mesh::call;
use super::ops::{ShardOp, ShardReply};
use super::txn_verify;
use super::ShardCtx;
use crate::clock::Now;
use crate::cluster::catalog::Catalog;
use crate::group::{
    CommitArgs, Coordinator, ErrorCode, FetchedOffset, GroupDescription, GroupListing,
    HeartbeatArgs, JoinArgs, JoinResult, LeaveMember, LeaveResult, LogRecord, Output, RequestId,
    SyncArgs, SyncResult, TxnCommitArgs, OFFSETS_TOPIC,
};
use crate::protocol::control::{control_key_outcome, TxnOutcome};
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::storage::producer_state::TxnVerification;
use crate::storage::Partition;

/// How often the coordinator's timers advance; session and rebalance timeouts are seconds,
/// so 100 ms is precise enough and cheap.
const TICK_MS: u64 = 100;

/// JoinGroup/SyncGroup answers one shard may hold at once; past it new ones are refused with
/// COORDINATOR_NOT_AVAILABLE (the client retries).
const PENDING_REQUESTS_MAX: usize = 100_000;

/// segment.bytes of `__consumer_offsets` (it is also the preallocated extent per partition).
const OFFSETS_SEGMENT_BYTES: u64 = 1024 * 1024;

/// How long the coordinator waits for its records to reach the in-sync replicas (Kafka's
/// offsets.commit.timeout.ms).
const GROUP_COMMIT_TIMEOUT: Duration = Duration::from_millis(5000);

/// Where group records go.
const HOST: Host = Host {
    topic: OFFSETS_TOPIC,
    queues: |ctx| &ctx.groups.appends,
    commit_timeout: GROUP_COMMIT_TIMEOUT,
};

/// Bytes read per step while replaying a partition.
const LOAD_READ_BYTES: usize = 1024 * 1024;

/// A request for the coordinator of one group (or, for `List`, of every group on a shard).
/// Plain owned data so it can cross the mesh.
pub enum GroupRequest {
    Join(JoinArgs),
    Sync(SyncArgs),
    Heartbeat(HeartbeatArgs),
    Leave {
        group_id: String,
        members: Vec<LeaveMember>,
    },
    Commit(CommitArgs),
    /// TxnOffsetCommit; answered as `GroupReply::Commit`. The transactional id is for
    /// verifying the commit with the transaction coordinator (KIP-890 part 1).
    TxnCommit {
        transactional_id: String,
        args: TxnCommitArgs,
    },
    Fetch {
        group_id: String,
        partitions: Option<Vec<(String, i32)>>,
        /// OffsetFetch v7+: pending transactional offsets answer UNSTABLE_OFFSET_COMMIT.
        require_stable: bool,
    },
    Describe(String),
    List {
        states: Vec<String>,
        types: Vec<String>,
    },
    Delete(String),
    DeleteOffsets {
        group_id: String,
        partitions: Vec<(String, i32)>,
    },
}

pub enum GroupReply {
    Join(JoinResult),
    Sync(SyncResult),
    Heartbeat(Option<ErrorCode>),
    Leave(LeaveResult),
    /// Per offset in request order.
    Commit(Vec<Option<ErrorCode>>),
    Fetch(Vec<FetchedOffset>),
    Describe(GroupDescription),
    List(Vec<GroupListing>),
    Delete(Option<ErrorCode>),
    DeleteOffsets(Result<Vec<Option<ErrorCode>>, ErrorCode>),
    /// The request could not be served at all (loading, shard unavailable, ...).
    Error(ErrorCode),
}

/// One shard's coordinator and its pending answers.
pub struct GroupShard {
    coordinator: RefCell<Coordinator>,
    waiters: RefCell<HashMap<RequestId, oneshot::Sender<GroupReply>>>,
    next_request: Cell<RequestId>,
    /// `__consumer_offsets` partitions this shard coordinates (it leads them): `false` while
    /// their groups are still being loaded from the log.
    led: RefCell<HashMap<i32, bool>>,
    /// Per `__consumer_offsets` partition, the appends waiting for room in its log (see
    /// `internal_topic::append_batch`).
    appends: AppendQueues,
    /// Topic id -> name as of the last metadata this shard applied, to see which topics
    /// were deleted since (by id: a topic deleted and created again under the same name
    /// between two applications is a deletion too).
    known_topics: RefCell<HashMap<u128, String>>,
}

impl GroupShard {
    pub fn new(config: crate::group::GroupConfig) -> Self {
        Self {
            coordinator: RefCell::new(Coordinator::new(config)),
            waiters: RefCell::new(HashMap::new()),
            next_request: Cell::new(1),
            led: RefCell::new(HashMap::new()),
            appends: AppendQueues::default(),
            known_topics: RefCell::new(HashMap::new()),
        }
    }

    /// Groups this shard's coordinator holds (for the metrics).
    pub fn group_count(&self) -> usize {
        self.coordinator.borrow().group_count()
    }

    /// Offsets committed to this shard's coordinator, at most `max`, and how many more
    /// there were (for the lag metrics).
    pub fn committed_offsets(&self, max: usize) -> (Vec<(String, String, i32, i64)>, usize) {
        self.coordinator.borrow().committed_offsets(max)
    }

    /// Registers a deferred answer; `None` if too many are pending.
    fn register(&self) -> Option<(RequestId, oneshot::Receiver<GroupReply>)> {
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

/// The `__consumer_offsets` partition of `group_id` and its leader (the group's coordinator),
/// from the catalog.
pub fn coordinator_node(ctx: &ShardCtx, group_id: &str) -> Option<(i32, i32)> {
    let catalog = ctx.shared.catalog.load();
    let topic = catalog.topic(OFFSETS_TOPIC)?;
    let partition = crate::group::partition_for(group_id, topic.partitions.len() as i32);
    let pm = topic.partitions.get(usize::try_from(partition).ok()?)?;
    Some((partition, pm.leader))
}

/// The shard and partition coordinating `group_id` on this broker; `None` if this broker
/// does not lead the group's partition (NOT_COORDINATOR: the client looks again).
pub fn coordinator_for(ctx: &ShardCtx, group_id: &str) -> Option<(usize, i32)> {
    let catalog = ctx.shared.catalog.load();
    let topic = catalog.topic(OFFSETS_TOPIC)?;
    let partition = crate::group::partition_for(group_id, topic.partitions.len() as i32);
    let pm = topic.partitions.get(usize::try_from(partition).ok()?)?;
    if pm.leader != catalog.local_node {
        return None;
    }
    let shard = catalog.local_shard(pm)? as usize;
    Some((shard, partition))
}

/// Sends `req` to the coordinator of `group_id`, wherever it lives, and awaits its reply.
pub async fn call_group(ctx: &Rc<ShardCtx>, group_id: &str, req: GroupRequest) -> GroupReply {
    let Some((shard, partition)) = coordinator_for(ctx, group_id) else {
        return GroupReply::Error(ErrorCode::NotCoordinator);
    };
    match call(ctx, shard, ShardOp::Group { partition, req }).await {
        ShardReply::Group(r) => r,
        _ => GroupReply::Error(ErrorCode::CoordinatorNotAvailable),
    }
}

/// Every group on every shard (ListGroups).
pub async fn list_all(
    ctx: &Rc<ShardCtx>,
    states: Vec<String>,
    types: Vec<String>,
) -> Result<Vec<GroupListing>, ErrorCode> {
    let mut all = Vec::new();
    for shard in 0..ctx.shared.nr_shards {
        let req = GroupRequest::List {
            states: states.clone(),
            types: types.clone(),
        };
        match call(ctx, shard, ShardOp::Group { partition: -1, req }).await {
            ShardReply::Group(GroupReply::List(l)) => all.extend(l),
            ShardReply::Group(GroupReply::Error(e)) => return Err(e),
            _ => return Err(ErrorCode::CoordinatorNotAvailable),
        }
    }
    all.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    Ok(all)
}

/// Runs a group request on this (the owner) shard.
pub fn start(
    ctx: Rc<ShardCtx>,
    partition: i32,
    req: GroupRequest,
) -> LocalBoxFuture<'static, ShardReply> {
    Box::pin(async move { ShardReply::Group(serve(&ctx, partition, req).await) })
}

async fn serve(ctx: &Rc<ShardCtx>, partition: i32, req: GroupRequest) -> GroupReply {
    let gs = &ctx.groups;
    if partition >= 0 {
        match gs.led.borrow().get(&partition) {
            None => return GroupReply::Error(ErrorCode::NotCoordinator),
            Some(false) => return GroupReply::Error(ErrorCode::CoordinatorLoadInProgress),
            Some(true) => {}
        }
    }
    let now = ctx.shared.clock.now();
    let mut out = Vec::new();
    match req {
        GroupRequest::Join(args) => {
            let Some((id, rx)) = gs.register() else {
                return GroupReply::Error(ErrorCode::CoordinatorNotAvailable);
            };
            gs.coordinator
                .borrow_mut()
                .handle_join(id, partition, args, now, &mut out);
            run_outputs(ctx, out);
            rx.await
                .unwrap_or(GroupReply::Error(ErrorCode::CoordinatorNotAvailable))
        }
        GroupRequest::Sync(args) => {
            let Some((id, rx)) = gs.register() else {
                return GroupReply::Error(ErrorCode::CoordinatorNotAvailable);
            };
            gs.coordinator
                .borrow_mut()
                .handle_sync(id, args, now, &mut out);
            run_outputs(ctx, out);
            rx.await
                .unwrap_or(GroupReply::Error(ErrorCode::CoordinatorNotAvailable))
        }
        GroupRequest::Heartbeat(args) => {
            GroupReply::Heartbeat(gs.coordinator.borrow_mut().handle_heartbeat(args, now))
        }
        GroupRequest::Leave { group_id, members } => {
            let r = gs
                .coordinator
                .borrow_mut()
                .handle_leave(&group_id, members, now, &mut out);
            run_outputs(ctx, out);
            GroupReply::Leave(r)
        }
        GroupRequest::Commit(args) => commit(ctx, partition, args, now).await,
        GroupRequest::TxnCommit {
            transactional_id,
            args,
        } => txn_commit(ctx, partition, &transactional_id, args).await,
        GroupRequest::Fetch {
            group_id,
            partitions,
            require_stable,
        } => GroupReply::Fetch(gs.coordinator.borrow().handle_offset_fetch(
            &group_id,
            partitions,
            require_stable,
        )),
        GroupRequest::Describe(group_id) => {
            GroupReply::Describe(gs.coordinator.borrow().describe(&group_id))
        }
        GroupRequest::List { states, types } => {
            GroupReply::List(gs.coordinator.borrow().list(&states, &types))
        }
        GroupRequest::Delete(group_id) => {
            let r = gs
                .coordinator
                .borrow_mut()
                .handle_delete_group(&group_id, &mut out);
            let waits = run_outputs(ctx, out);
            if r.is_none() && !wait_all(waits).await {
                return GroupReply::Delete(Some(ErrorCode::CoordinatorNotAvailable));
            }
            GroupReply::Delete(r)
        }
        GroupRequest::DeleteOffsets {
            group_id,
            partitions,
        } => {
            let r = gs
                .coordinator
                .borrow_mut()
                .handle_offset_delete(&group_id, partitions, &mut out);
            let waits = run_outputs(ctx, out);
            if r.is_ok() && !wait_all(waits).await {
                return GroupReply::DeleteOffsets(Err(ErrorCode::CoordinatorNotAvailable));
            }
            GroupReply::DeleteOffsets(r)
        }
    }
}

/// OffsetCommit: append, wait until durable, then make the offsets visible and answer.
async fn commit(ctx: &Rc<ShardCtx>, partition: i32, args: CommitArgs, now: Now) -> GroupReply {
    let group_id = args.group_id.clone();
    let count = args.offsets.len();
    let plan = ctx
        .groups
        .coordinator
        .borrow_mut()
        .handle_offset_commit(partition, args, now);
    let plan = match plan {
        Ok(p) => p,
        Err(e) => return GroupReply::Commit(vec![Some(e); count]),
    };
    if plan.records.is_empty() {
        return GroupReply::Commit(plan.results);
    }
    let durable = match append(
        ctx,
        plan.partition,
        &plan.records,
        None,
        TxnVerification::Off,
    ) {
        Ok(wait) => wait.await,
        Err(_) => None,
    };
    let Some(log_offset) = durable else {
        let failed = plan
            .results
            .iter()
            .map(|r| Some(r.unwrap_or(ErrorCode::CoordinatorNotAvailable)))
            .collect();
        return GroupReply::Commit(failed);
    };
    ctx.groups.coordinator.borrow_mut().apply_commit(
        &group_id,
        plan.partition,
        plan.accepted,
        log_offset,
        now,
    );
    GroupReply::Commit(plan.results)
}

/// TxnOffsetCommit: the offsets are pending for the producer from the moment they are
/// accepted; their records are appended as a transactional batch of the producer (so the
/// partition tracks its open transaction and the WriteTxnMarkers marker closes it), acks=all.
/// The producer's COMMIT or ABORT marker ends them (`complete_txn_offsets`).
///
/// With `transaction_partition_verification_enable` (KIP-890 part 1), as Kafka's group
/// coordinator does, the commit is first verified with the transaction coordinator: the
/// group's partition must be in the producer's ongoing transaction (AddOffsetsToTxn added
/// it), else INVALID_TXN_STATE and nothing is pending. Unverified, the batch would open a
/// transaction on `__consumer_offsets` that no marker ever ends: its offsets pending (and
/// the partition's last stable offset held) for ever, or ended by a later transaction's
/// marker they do not belong to. The append carries the verification's guard, so a marker
/// that ends the transaction meanwhile (an abort on timeout) makes the append fail instead
/// of opening a new transaction after it.
async fn txn_commit(
    ctx: &Rc<ShardCtx>,
    partition: i32,
    transactional_id: &str,
    args: TxnCommitArgs,
) -> GroupReply {
    let group_id = args.group_id.clone();
    let count = args.offsets.len();
    let producer = (args.producer_id, args.producer_epoch);
    let verification = match verify_txn_commit(ctx, partition, transactional_id, producer).await {
        Ok(v) => v,
        Err(e) => return GroupReply::Commit(vec![Some(e); count]),
    };
    // After the verification's round trip: the group may have changed meanwhile.
    let now = ctx.shared.clock.now();
    let plan = ctx
        .groups
        .coordinator
        .borrow_mut()
        .handle_txn_offset_commit(partition, args, now);
    let plan = match plan {
        Ok(p) => p,
        Err(e) => return GroupReply::Commit(vec![Some(e); count]),
    };
    if plan.records.is_empty() {
        return GroupReply::Commit(plan.results);
    }
    let appended = append(
        ctx,
        plan.partition,
        &plan.records,
        Some(producer),
        verification,
    );
    let written = match appended {
        Ok(wait) => wait.await.ok_or(ErrorCode::CoordinatorNotAvailable),
        Err(e) => Err(e),
    };
    let mut coordinator = ctx.groups.coordinator.borrow_mut();
    match written {
        Ok(log_offset) => {
            coordinator.txn_commit_appended(&group_id, producer.0, &plan.accepted, log_offset);
            GroupReply::Commit(plan.results)
        }
        Err(e) => {
            coordinator.txn_commit_failed(&group_id, producer.0, &plan.accepted);
            GroupReply::Commit(plan.results.iter().map(|r| Some(r.unwrap_or(e))).collect())
        }
    }
}

/// Kafka's `maybeStartTransactionVerification` for a transactional offset commit to
/// `__consumer_offsets`-`partition`: nothing to ask if verification is off or the producer
/// has a transaction open there at this epoch (the append still checks it is open), else
/// the transaction coordinator confirms the partition is in the transaction. Errors as
/// Kafka's group coordinator answers them (`handleOperationException`): NETWORK_EXCEPTION,
/// which older clients do not retry well, is COORDINATOR_LOAD_IN_PROGRESS (retried without a
/// coordinator lookup); a partition not in the transaction is INVALID_TXN_STATE.
async fn verify_txn_commit(
    ctx: &Rc<ShardCtx>,
    partition: i32,
    transactional_id: &str,
    (producer_id, producer_epoch): (ProducerId, ProducerEpoch),
) -> Result<TxnVerification, ErrorCode> {
    if !ctx.shared.config.transaction_partition_verification_enable {
        return Ok(TxnVerification::Off);
    }
    let Some(p) = ctx.local_partition(OFFSETS_TOPIC, partition) else {
        return Err(ErrorCode::NotCoordinator);
    };
    let now = ctx.shared.clock.wall_ms();
    // A coordinator's batch carries no sequence.
    let guard = match p.start_txn_verification(producer_id, NO_SEQUENCE, producer_epoch.0, now) {
        Ok(None) => return Ok(TxnVerification::Guard(None)),
        Ok(Some(guard)) => guard,
        Err(full) => {
            warn!(
                partition,
                "cannot verify a transactional offset commit: {full}"
            );
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
    };
    let tp = offsets_tp(partition);
    let answer = txn_verify::verify(ctx, transactional_id, producer_id, producer_epoch, vec![tp])
        .await
        .into_iter()
        .next()
        .map_or(Some(ErrorCode::NetworkException), |(_, e)| e);
    match answer {
        None => Ok(TxnVerification::Guard(Some(guard))),
        Some(ErrorCode::NetworkException) => Err(ErrorCode::CoordinatorLoadInProgress),
        Some(e) => Err(coordinator_error(e)),
    }
}

async fn wait_all(waits: Vec<DurableWait>) -> bool {
    let mut ok = true;
    for w in waits {
        ok &= w.await;
    }
    ok
}

/// Carries out the state machine's outputs: answers waiting requests and starts appends.
/// Returns the durability waits of the appends (callers that must not answer before the
/// records are durable await them; others let them run).
fn run_outputs(ctx: &Rc<ShardCtx>, out: Vec<Output>) -> Vec<DurableWait> {
    let mut waits: Vec<DurableWait> = Vec::new();
    let mut syncs = Vec::new();
    for o in out {
        match o {
            Output::Join(id, r) => answer(ctx, id, GroupReply::Join(r)),
            Output::Sync(id, r) => syncs.push((id, r)),
            Output::Append { partition, records } => {
                if let Ok(w) = append(ctx, partition, &records, None, TxnVerification::Off) {
                    waits.push(Box::pin(w.map(|o| o.is_some())));
                }
            }
        }
    }
    if waits.is_empty() || syncs.is_empty() {
        for (id, r) in syncs {
            answer(ctx, id, GroupReply::Sync(r));
        }
        return waits;
    }
    // As Kafka does, SyncGroup is answered only once the group metadata written with it is
    // durable: a coordinator that crashes right after must not have handed out an
    // assignment that it does not remember when it restarts.
    let durable = wait_all(waits).boxed_local().shared();
    let answers = durable.clone();
    let ctx2 = ctx.clone();
    glommio::spawn_local(async move {
        let ok = answers.await;
        for (id, r) in syncs {
            let r = if ok {
                r
            } else {
                SyncResult::error(ErrorCode::CoordinatorNotAvailable)
            };
            answer(&ctx2, id, GroupReply::Sync(r));
        }
    })
    .detach();
    vec![durable.boxed_local()]
}

fn answer(ctx: &ShardCtx, id: RequestId, reply: GroupReply) {
    let tx = ctx.groups.waiters.borrow_mut().remove(&id);
    if let Some(tx) = tx {
        // The connection may have gone away; nothing to answer then.
        let _ = tx.send(reply);
    }
}

/// Appends `records` to `__consumer_offsets`-`partition` as one batch now (so appends keep
/// the order of the state machine's decisions), through `internal_topic::append_batch`: the
/// future resolves once the batch is committed; with `txn`, a TxnOffsetCommit's
/// transactional batch. An append that cannot start answers the error the commit gets,
/// mapped as Kafka's coordinator maps log errors.
fn append(
    ctx: &Rc<ShardCtx>,
    partition: i32,
    records: &[LogRecord],
    txn: Option<(ProducerId, ProducerEpoch)>,
    verification: TxnVerification,
) -> Result<CommittedWait, ErrorCode> {
    let records = records.iter().map(|r| (r.key.clone(), r.value.clone()));
    internal_topic::append_batch(ctx, HOST, partition, records, txn, verification).map_err(|e| {
        match e {
            AppendStart::NotOpen => ErrorCode::NotCoordinator,
            AppendStart::Encode(_) => ErrorCode::UnknownServerError,
            AppendStart::Refused(e) => coordinator_error(e.error_code()),
            AppendStart::TooManyWaiting => ErrorCode::CoordinatorNotAvailable,
        }
    })
}

fn offsets_tp(partition: i32) -> super::TopicPartition {
    super::TopicPartition {
        topic: OFFSETS_TOPIC.to_string(),
        partition,
    }
}

/// Kafka's mapping of a log error met by a coordinator write to the error its client gets
/// (`GroupCoordinatorService.handleOperationException`): retriable ones become
/// COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR (the client looks for the coordinator
/// again), sizes an UNKNOWN_SERVER_ERROR; the rest, INVALID_PRODUCER_EPOCH first, pass.
fn coordinator_error(e: ErrorCode) -> ErrorCode {
    match e {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge => ErrorCode::UnknownServerError,
        other => other,
    }
}

/// Kafka's offsets.topic.replication.factor: `__consumer_offsets` gets this many replicas,
/// or as many brokers as are registered when it is created, if fewer.
const OFFSETS_TOPIC_REPLICATION_FACTOR: usize = 3;

/// How `__consumer_offsets` is made: compacted like every internal topic (see
/// `internal_topic::create_request` for why), small segments, the broker's min.insync.replicas.
fn offsets_topic(config: &crate::config::Config) -> super::internal_topic::TopicSpec {
    super::internal_topic::TopicSpec {
        name: OFFSETS_TOPIC,
        partitions: config.offsets_topic_num_partitions,
        replication_factor: OFFSETS_TOPIC_REPLICATION_FACTOR,
        segment_bytes: OFFSETS_SEGMENT_BYTES,
        min_isr: None,
    }
}

/// Creates `__consumer_offsets` through the controller if it does not exist yet (as Kafka
/// does on the first FindCoordinator), with as many replicas as there are live brokers, up
/// to Kafka's offsets.topic.replication.factor; an existing one that is not compacted (an
/// older Strata's) is altered, and groups are served meanwhile.
pub async fn ensure_offsets_topic(ctx: &Rc<ShardCtx>) -> Result<(), ErrorCode> {
    super::internal_topic::ensure(ctx, &offsets_topic(&ctx.shared.config)).await
}

/// A single node creates `__consumer_offsets` before it serves (there is no one to wait
/// for), so its groups are ready at once, as they were before clustering.
pub fn ensure_offsets_topic_at_start(
    quorum: &crate::cluster::quorum::Quorum,
    catalog: &crate::cluster::catalog::CatalogStore,
    config: &crate::config::Config,
) -> Result<(), ErrorCode> {
    super::internal_topic::ensure_at_start(quorum, catalog, &offsets_topic(config))
}

/// This broker now leads `__consumer_offsets`-`partition`: replay its groups into the
/// coordinator (answering COORDINATOR_LOAD_IN_PROGRESS meanwhile), then serve them. A record
/// that does not decode is skipped with a warning: one bad record must not make every group
/// of the partition unavailable.
pub fn become_coordinator(ctx: &Rc<ShardCtx>, partition: i32) {
    if ctx.groups.led.borrow().contains_key(&partition) {
        return;
    }
    ctx.groups.led.borrow_mut().insert(partition, false);
    let ctx = ctx.clone();
    glommio::spawn_local(async move {
        let Some(p) = ctx.local_partition(OFFSETS_TOPIC, partition) else {
            ctx.groups.led.borrow_mut().remove(&partition);
            return;
        };
        let records = load_partition(&ctx, partition, &p).await;
        // Leadership may have moved on while we read.
        if !ctx.groups.led.borrow().contains_key(&partition) {
            let mut out = Vec::new();
            ctx.groups
                .coordinator
                .borrow_mut()
                .unload_partition(partition, &mut out);
            run_outputs(&ctx, out);
            return;
        }
        ctx.groups
            .coordinator
            .borrow_mut()
            .finish_load(partition, ctx.shared.clock.now());
        ctx.groups.led.borrow_mut().insert(partition, true);
        if records > 0 {
            info!(
                shard = ctx.id,
                partition, records, "group coordinator loaded"
            );
        }
    })
    .detach();
}

/// The transaction hook of WriteTxnMarkers: a COMMIT or ABORT marker of `producer_id` is
/// durable and replicated on `__consumer_offsets`-`partition` (this shard owns it and is its
/// leader). Offsets the producer committed inside that transaction (TxnOffsetCommit, KIP-98 /
/// KIP-447) become visible on a commit and are dropped on an abort; until then OffsetFetch
/// with `require_stable` answers UNSTABLE_OFFSET_COMMIT for them. Called once per marker,
/// after the marker is durable, never for another topic.
///
/// While the partition's groups are still loading, nothing is done here: the marker is in
/// the log already (appended before its durability was awaited) and the load reads up to
/// the log end as it is when the load ends, so it applies the marker itself, in log order.
pub fn complete_txn_offsets(
    ctx: &Rc<ShardCtx>,
    partition: i32,
    producer_id: ProducerId,
    outcome: TxnOutcome,
) {
    let loaded = ctx.groups.led.borrow().get(&partition).copied();
    tracing::debug!(
        shard = ctx.id,
        partition,
        producer_id = producer_id.0,
        ?outcome,
        ?loaded,
        "transaction marker on __consumer_offsets"
    );
    if loaded == Some(true) {
        ctx.groups
            .coordinator
            .borrow_mut()
            .complete_txn(partition, producer_id, outcome);
    }
}

/// Waits (bounded) until every coordinator partition this shard leads has loaded, so a
/// starting broker answers group requests at once rather than with LOAD_IN_PROGRESS.
pub async fn wait_loaded(ctx: &Rc<ShardCtx>, limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    while ctx.groups.led.borrow().values().any(|loaded| !loaded)
        && std::time::Instant::now() < deadline
    {
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
}

/// This broker no longer leads `__consumer_offsets`-`partition`: forget its groups (the
/// new leader loads them from the log).
pub fn resign(ctx: &Rc<ShardCtx>, partition: i32) {
    if ctx.groups.led.borrow_mut().remove(&partition).is_some() {
        let mut out = Vec::new();
        ctx.groups
            .coordinator
            .borrow_mut()
            .unload_partition(partition, &mut out);
        run_outputs(ctx, out);
        info!(shard = ctx.id, partition, "no longer coordinating");
    }
}

/// The broker is shutting down: members parked in a JoinGroup or SyncGroup get
/// NOT_COORDINATOR now (see `Coordinator::release_parked`) rather than holding their
/// connection, and so the shutdown, to the drain deadline.
pub fn release_parked(ctx: &Rc<ShardCtx>) {
    let mut out = Vec::new();
    ctx.groups.coordinator.borrow_mut().release_parked(&mut out);
    run_outputs(ctx, out);
}

async fn load_partition(ctx: &Rc<ShardCtx>, partition: i32, p: &Rc<Partition>) -> usize {
    let mut offset = p.log_start_offset();
    // To the log end, as Kafka does: a new leader never truncates its own log, so records
    // past the high watermark become committed once the followers catch up. `read` would
    // stop at the local HW, which on a follower just promoted lags the old leader's: the
    // last commits the old coordinator acknowledged would be missing. The end is read again
    // each round: transaction markers may be appended while loading (WriteTxnMarkers is not
    // refused then), and the load must apply them (see `complete_txn_offsets`); the last
    // check and the caller's switch to "loaded" run with no await between them.
    let mut count = 0;
    loop {
        let end = p.log_end_offset();
        if offset >= end {
            break;
        }
        let read = match p.read_bounded(offset, LOAD_READ_BYTES, end).await {
            Ok(r) => r,
            Err(e) => {
                warn!(partition, offset, "cannot read __consumer_offsets: {e}");
                break;
            }
        };
        let mut data = BytesMut::new();
        for c in &read.chunks {
            data.extend_from_slice(c);
        }
        let mut data: Bytes = data.freeze();
        let before = offset;
        while !data.is_empty() {
            let set = match RecordBatchDecoder::decode(&mut data) {
                Ok(s) => s,
                Err(e) => {
                    warn!(
                        partition,
                        offset, "undecodable batch in __consumer_offsets: {e}"
                    );
                    // Skip past what we could not decode by moving to the next offset.
                    offset += 1;
                    break;
                }
            };
            let now = ctx.shared.clock.now();
            let mut coordinator = ctx.groups.coordinator.borrow_mut();
            for r in set.records {
                offset = offset.max(r.offset + 1);
                let producer = ProducerId(r.producer_id);
                if r.control {
                    // A transaction marker ends the producer's pending offsets here, in log
                    // order, as it did live.
                    let outcome = r.key.as_deref().and_then(control_key_outcome);
                    if let (Some(outcome), false) = (outcome, producer.is_none()) {
                        coordinator.complete_txn(partition, producer, outcome);
                    }
                    continue;
                }
                let Some(key) = r.key else { continue };
                let txn = (r.transactional && !producer.is_none()).then_some(producer);
                let loaded = coordinator.load_record(
                    partition,
                    r.offset,
                    txn,
                    &key,
                    r.value.as_deref(),
                    now,
                );
                if let Err(e) = loaded {
                    warn!(partition, offset = r.offset, "skipping group record: {e}");
                }
                count += 1;
            }
        }
        if offset == before {
            // Nothing decodable at this position (e.g. an empty read): do not spin.
            break;
        }
        glommio::yield_if_needed().await;
    }
    count
}

/// Called with each metadata image the shard applies: topics deleted since the last one
/// lose their committed offsets in every group this shard coordinates, as in Kafka. The
/// first image after a start only records what exists (a deletion while this broker was
/// down is not seen here, as in Kafka).
pub fn on_metadata(ctx: &Rc<ShardCtx>, catalog: &Catalog) {
    let now: HashMap<u128, String> = catalog
        .topics
        .values()
        .map(|t| (t.id, t.name.clone()))
        .collect();
    let deleted: HashSet<String> = {
        let mut known = ctx.groups.known_topics.borrow_mut();
        let deleted = known
            .iter()
            .filter(|(id, _)| !now.contains_key(id))
            .map(|(_, name)| name.clone())
            .collect();
        *known = now;
        deleted
    };
    if deleted.is_empty() {
        return;
    }
    info!(shard = ctx.id, topics = ?deleted, "removing committed offsets of deleted topics");
    let mut out = Vec::new();
    ctx.groups
        .coordinator
        .borrow_mut()
        .on_topics_deleted(&deleted, &mut out);
    // Like the ticker's records, these tombstones answer nobody.
    for w in run_outputs(ctx, out) {
        glommio::spawn_local(w).detach();
    }
}

/// Advances the coordinator's timers every `TICK_MS` until the shard stops.
pub async fn ticker(ctx: Rc<ShardCtx>) {
    loop {
        glommio::timer::sleep(Duration::from_millis(TICK_MS)).await;
        if ctx.shutting_down.get() {
            return;
        }
        let mut out = Vec::new();
        ctx.groups
            .coordinator
            .borrow_mut()
            .tick(ctx.shared.clock.now(), &mut out);
        // Timer-driven records (group metadata, expired offsets) need no answer; their
        // durability follows the partition's flush policy.
        for w in run_outputs(&ctx, out) {
            glommio::spawn_local(w).detach();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// `__consumer_offsets` is created compacted with its small segments (the compaction
    /// rules themselves are internal_topic's, tested there).
    #[test]
    fn offsets_topic_is_created_compacted() {
        let config = crate::config::Config::default();
        let spec = offsets_topic(&config);
        let crate::cluster::controller::ControllerRequest::CreateTopics { topics, .. } =
            super::super::internal_topic::create_request(&spec, 3)
        else {
            panic!("a CreateTopics request");
        };
        let topic = topics.first().expect("one topic");
        assert_eq!(topic.name, OFFSETS_TOPIC);
        assert_eq!(topic.num_partitions, config.offsets_topic_num_partitions);
        let created: &BTreeMap<String, String> = &topic.configs;
        assert_eq!(
            created.get("cleanup.policy").map(String::as_str),
            Some("compact")
        );
        assert_eq!(
            created.get("segment.bytes").map(String::as_str),
            Some("1048576")
        );
        assert_eq!(created.get("min.insync.replicas"), None);
    }
}
