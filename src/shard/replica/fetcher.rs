//! The follower side: one fetcher task per leader broker, carrying every partition this
//! shard follows from it. Each partition's `FollowerState` says what to send (validate the
//! log with OffsetForLeaderEpoch, ListOffsets when there is nothing to validate against,
//! Fetch); the answers come back to it, and its commands (truncate, append, follow the
//! leader's log start) are carried out here.
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, info, warn};

use super::Role;
use crate::cluster::catalog::Catalog;
use crate::limits::{
    FETCHER_BACKOFF_MS, METADATA_POLL_MS, PEER_REQUEST_TIMEOUT_MS, PEER_SECURITY_WARN_INTERVAL_MS,
};
use crate::protocol::error::{error_from_code, ErrorCode};
use crate::protocol::ids::{LeaderEpoch, NodeId, Offset};
use crate::replication::follower::FollowerState;
use crate::replication::{durable_tag, FollowerCommand, ReplicaError};
use crate::shard::peer::PeerConnection;
use crate::shard::ShardCtx;
use crate::shard::TopicPartition;
use crate::storage::notify::Notify;
use crate::storage::{Partition, ReplicaAppendError, ReplicaAppendOutcome};

/// Versions of the requests a follower sends to its leader (both ends are Strata).
pub(super) const FETCH_VERSION: i16 = 12;

pub(super) const OFFSET_FOR_LEADER_EPOCH_VERSION: i16 = 4;

pub(super) const LIST_OFFSETS_VERSION: i16 = 7;

/// Kafka's replica.fetch.backoff.ms: how long a follower the leader refused waits before it
/// tries again.
pub(super) const FOLLOWER_RETRY_BACKOFF_MS: u64 = 1000;

pub(super) fn code_to_replica_error(code: i16) -> ReplicaError {
    match error_from_code(code) {
        ErrorCode::FencedLeaderEpoch => ReplicaError::FencedLeaderEpoch,
        ErrorCode::UnknownLeaderEpoch => ReplicaError::UnknownLeaderEpoch,
        ErrorCode::OffsetOutOfRange => ReplicaError::OffsetOutOfRange,
        _ => ReplicaError::NotLeaderOrFollower,
    }
}

/// Starts a fetcher for every leader this shard follows and has none for.
pub(super) fn start_fetchers(ctx: &Rc<ShardCtx>, catalog: &Catalog) {
    let leaders: HashSet<NodeId> = ctx
        .replicas
        .roles
        .borrow()
        .values()
        .filter_map(|r| match r {
            Role::Follower(f) if f.state.leader().get() >= 0 => Some(f.state.leader()),
            _ => None,
        })
        .collect();
    for leader in leaders {
        if leader == NodeId(catalog.local_node)
            || !ctx.replicas.fetchers.borrow_mut().insert(leader)
        {
            continue;
        }
        let ctx2 = ctx.clone();
        glommio::spawn_local(async move {
            fetcher(ctx2.clone(), leader).await;
            ctx2.replicas.fetchers.borrow_mut().remove(&leader);
        })
        .detach();
    }
}

/// What a fetcher must send for one partition.
pub(super) struct Pending {
    tp: TopicPartition,
    cmd: FollowerCommand,
    leader_epoch: LeaderEpoch,
    partition: Rc<Partition>,
}

pub(super) fn pending_for(ctx: &ShardCtx, leader: NodeId) -> Vec<Pending> {
    ctx.replicas
        .roles
        .borrow()
        .iter()
        .filter_map(|(tp, r)| match r {
            Role::Follower(f) if f.state.leader() == leader => f.next.clone().map(|cmd| Pending {
                tp: tp.clone(),
                cmd,
                leader_epoch: f.state.leader_epoch(),
                partition: f.partition.clone(),
            }),
            _ => None,
        })
        .collect()
}

pub(super) fn follows(ctx: &ShardCtx, leader: NodeId) -> bool {
    ctx.replicas
        .roles
        .borrow()
        .values()
        .any(|r| matches!(r, Role::Follower(f) if f.state.leader() == leader))
}

/// Runs `f` on the follower state of `tp` if it still follows `leader` at `epoch`.
pub(super) fn with_follower(
    ctx: &ShardCtx,
    tp: &TopicPartition,
    leader: NodeId,
    epoch: LeaderEpoch,
    f: impl FnOnce(&mut FollowerState, &Partition) -> Vec<FollowerCommand>,
) -> Vec<FollowerCommand> {
    match ctx.replicas.roles.borrow_mut().get_mut(tp) {
        Some(Role::Follower(fr))
            if fr.state.leader() == leader && fr.state.leader_epoch() == epoch =>
        {
            f(&mut fr.state, &fr.partition)
        }
        _ => Vec::new(),
    }
}

pub(super) fn set_next(
    ctx: &ShardCtx,
    tp: &TopicPartition,
    leader: NodeId,
    epoch: LeaderEpoch,
    next: Option<FollowerCommand>,
) {
    if let Some(Role::Follower(fr)) = ctx.replicas.roles.borrow_mut().get_mut(tp) {
        if fr.state.leader() == leader && fr.state.leader_epoch() == epoch {
            fr.stalled_at_ms = if next.is_none() {
                Some(ctx.shared.clock.monotonic_ms())
            } else {
                None
            };
            fr.next = next;
        }
    }
}

/// Followers the leader refused start over once the backoff has passed (see
/// `FollowerRole::stalled_at_ms`). A new metadata image replaces them anyway.
pub(super) fn retry_stalled_followers(ctx: &Rc<ShardCtx>) {
    let now = ctx.shared.clock.monotonic_ms();
    let mut restarted = false;
    for role in ctx.replicas.roles.borrow_mut().values_mut() {
        let Role::Follower(fr) = role else { continue };
        let Some(since) = fr.stalled_at_ms else {
            continue;
        };
        if fr.state.leader().get() < 0 || now.saturating_sub(since) < FOLLOWER_RETRY_BACKOFF_MS {
            continue;
        }
        let p = &fr.partition;
        let (state, first) = FollowerState::new(
            fr.state.leader(),
            fr.state.leader_epoch(),
            Offset(p.log_end_offset()),
            Offset(p.high_watermark()),
            p.latest_epoch().map(LeaderEpoch),
        );
        fr.state = state;
        fr.next = Some(first);
        fr.stalled_at_ms = None;
        restarted = true;
    }
    if restarted {
        start_fetchers(ctx, &ctx.shared.catalog.load());
    }
}

/// Carries out a follower's commands in order; the last request-type command becomes the
/// partition's next request.
pub(super) async fn run_follower_commands(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    p: &Rc<Partition>,
    leader: NodeId,
    epoch: LeaderEpoch,
    cmds: Vec<FollowerCommand>,
) {
    for cmd in cmds {
        match cmd {
            FollowerCommand::Truncate { to } => {
                info!(topic = %tp.topic, partition = tp.partition, %to, "truncating to the leader's history");
                if let Err(e) = p.truncate_to(to.get()).await {
                    warn!(topic = %tp.topic, partition = tp.partition, "truncate: {e}");
                }
            }
            FollowerCommand::TruncateFully { start } => {
                info!(topic = %tp.topic, partition = tp.partition, %start, "log behind the leader's start; starting over");
                if let Err(e) = p.truncate_fully_and_start_at(start.get()).await {
                    warn!(topic = %tp.topic, partition = tp.partition, "truncate fully: {e}");
                }
            }
            FollowerCommand::AdvanceHw(hw) => p.set_hw(hw.get().min(p.log_end_offset())),
            FollowerCommand::AwaitMetadata => set_next(ctx, tp, leader, epoch, None),
            request => set_next(ctx, tp, leader, epoch, Some(request)),
        }
    }
}

/// A connection to `leader` for the fetch loop or the durable-end reporter; `None` while the
/// catalog has no inter-broker address for it (the caller backs off and asks again).
async fn connect_to_leader(
    ctx: &ShardCtx,
    leader: NodeId,
) -> Option<Result<PeerConnection, crate::shard::peer::PeerError>> {
    // The address is copied out so the catalog snapshot is not held across the connect.
    let addr = {
        let catalog = ctx.shared.catalog.load();
        let broker = catalog.brokers.get(&leader.get())?;
        ctx.shared.peer_address(broker)?
    };
    let me = ctx.shared.config.node_id;
    Some(
        PeerConnection::connect(
            &ctx.shared.peer_security,
            &addr,
            &format!("strata-replica-{me}"),
            Duration::from_millis(PEER_REQUEST_TIMEOUT_MS),
        )
        .await,
    )
}

/// What one fetcher and its durable-end reporter share.
#[derive(Default)]
pub(super) struct Reports {
    /// The durable end each partition last reported to the leader, and in which leader
    /// epoch (the leader forgets reports of older epochs), by a Fetch (beside the fetch
    /// offset) or by the reporter: the reporter sends only what is newer.
    by_partition: RefCell<HashMap<TopicPartition, (LeaderEpoch, i64)>>,
    /// Notified when a Fetch goes out: fetch offsets moved, so more may become reportable.
    fetched: Notify,
}

pub(super) type Reported = Rc<Reports>;

/// One shard's fetcher for one leader: batches every partition this shard follows there
/// into one OffsetForLeaderEpoch, ListOffsets or Fetch at a time, while the durable-end
/// reporter (`report_durable`) tells the leader of each fsync on a connection of its own.
pub(super) async fn fetcher(ctx: Rc<ShardCtx>, leader: NodeId) {
    let reported: Reported = Rc::default();
    // The reporter never ends by itself: it stops when the fetch loop does.
    futures_lite::future::or(
        fetch_loop(ctx.clone(), leader, reported.clone()),
        report_durable(ctx, leader, reported),
    )
    .await;
}

async fn fetch_loop(ctx: Rc<ShardCtx>, leader: NodeId, reported: Reported) {
    let mut conn: Option<PeerConnection> = None;
    let mut security_warned: Option<std::time::Instant> = None;
    let backoff = Duration::from_millis(FETCHER_BACKOFF_MS);
    info!(shard = ctx.id, %leader, "replica fetcher started");
    loop {
        if ctx.shutting_down.get() || !follows(&ctx, leader) {
            info!(shard = ctx.id, %leader, "replica fetcher stopped");
            return;
        }
        let work = pending_for(&ctx, leader);
        if work.is_empty() {
            glommio::timer::sleep(Duration::from_millis(METADATA_POLL_MS)).await;
            continue;
        }
        if conn.is_none() {
            match connect_to_leader(&ctx, leader).await {
                None => {
                    glommio::timer::sleep(backoff).await;
                    continue;
                }
                Some(Ok(c)) => conn = Some(c),
                // Certificates or credentials that do not work are the operator's to
                // mend: said at warn, once per `PEER_SECURITY_WARN_INTERVAL_MS` per
                // fetcher (a retry comes every backoff); the network's failures at debug.
                Some(Err(e)) if e.is_security() => {
                    let due = security_warned.is_none_or(|at: std::time::Instant| {
                        at.elapsed() >= Duration::from_millis(PEER_SECURITY_WARN_INTERVAL_MS)
                    });
                    if due {
                        security_warned = Some(std::time::Instant::now());
                        warn!(%leader, "replica fetcher cannot connect: {e}");
                    }
                    glommio::timer::sleep(backoff).await;
                    continue;
                }
                Some(Err(e)) => {
                    debug!(%leader, "replica fetcher cannot connect: {e}");
                    glommio::timer::sleep(backoff).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let ok = if work
            .iter()
            .any(|w| matches!(w.cmd, FollowerCommand::SendOffsetForLeaderEpoch { .. }))
        {
            send_epoch_requests(&ctx, c, leader, &work).await
        } else if work
            .iter()
            .any(|w| matches!(w.cmd, FollowerCommand::SendListOffsets))
        {
            send_list_offsets(&ctx, c, leader, &work).await
        } else {
            send_fetch(&ctx, c, leader, &work, &reported).await
        };
        if !ok {
            conn = None;
            for w in &work {
                let cmds = with_follower(&ctx, &w.tp, leader, w.leader_epoch, |s, _| {
                    s.handle_timeout()
                });
                run_follower_commands(&ctx, &w.tp, &w.partition, leader, w.leader_epoch, cmds)
                    .await;
            }
            glommio::timer::sleep(backoff).await;
        }
    }
}

/// A replica request's per-topic entry (Fetch, OffsetForLeaderEpoch): the fetcher batches
/// every partition it follows from one leader into one request, and the protocol wants each
/// topic once with its partitions beneath it.
trait TopicEntry: Default {
    type Partition;
    fn name(&self) -> &str;
    fn named(topic: &str, first: Self::Partition) -> Self;
    fn push(&mut self, part: Self::Partition);
}

impl TopicEntry for FetchTopic {
    type Partition = FetchPartition;
    fn name(&self) -> &str {
        self.topic.as_str()
    }
    fn named(topic: &str, first: FetchPartition) -> Self {
        FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![first])
    }
    fn push(&mut self, part: FetchPartition) {
        self.partitions.push(part);
    }
}

impl TopicEntry for OffsetForLeaderTopic {
    type Partition = OffsetForLeaderPartition;
    fn name(&self) -> &str {
        self.topic.as_str()
    }
    fn named(topic: &str, first: OffsetForLeaderPartition) -> Self {
        OffsetForLeaderTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![first])
    }
    fn push(&mut self, part: OffsetForLeaderPartition) {
        self.partitions.push(part);
    }
}

/// Adds `part` under `topic`'s entry, creating the entry (in first-seen order) if needed.
/// Linear in the topics already in the request, as the loops this replaced were.
fn push_under_topic<T: TopicEntry>(topics: &mut Vec<T>, topic: &str, part: T::Partition) {
    match topics.iter_mut().find(|t| t.name() == topic) {
        Some(t) => t.push(part),
        None => topics.push(T::named(topic, part)),
    }
}

pub(super) async fn send_epoch_requests(
    ctx: &Rc<ShardCtx>,
    conn: &mut PeerConnection,
    leader: NodeId,
    work: &[Pending],
) -> bool {
    let asks: Vec<(&Pending, LeaderEpoch)> = work
        .iter()
        .filter_map(|w| match w.cmd {
            FollowerCommand::SendOffsetForLeaderEpoch { epoch } => Some((w, epoch)),
            _ => None,
        })
        .collect();
    let mut topics: Vec<OffsetForLeaderTopic> = Vec::new();
    for (w, epoch) in &asks {
        let part = OffsetForLeaderPartition::default()
            .with_partition(w.tp.partition)
            .with_current_leader_epoch(w.leader_epoch.get())
            .with_leader_epoch(epoch.get());
        push_under_topic(&mut topics, &w.tp.topic, part);
    }
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(ctx.shared.config.node_id))
        .with_topics(topics);
    let resp = match conn
        .call(
            &req,
            OFFSET_FOR_LEADER_EPOCH_VERSION,
            Duration::from_millis(PEER_REQUEST_TIMEOUT_MS),
        )
        .await
    {
        Ok(r) => r,
        Err(e) => {
            debug!(%leader, "OffsetForLeaderEpoch: {e}");
            return false;
        }
    };
    for (w, epoch) in asks {
        let answer = resp
            .topics
            .iter()
            .filter(|t| t.topic.as_str() == w.tp.topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition == w.tp.partition);
        let cmds = match answer {
            None => with_follower(ctx, &w.tp, leader, w.leader_epoch, |s, _| {
                s.handle_timeout()
            }),
            Some(a) if a.error_code != 0 => {
                let err = code_to_replica_error(a.error_code);
                with_follower(ctx, &w.tp, leader, w.leader_epoch, |s, _| {
                    s.handle_epoch_error(epoch, err)
                })
            }
            Some(a) => with_follower(ctx, &w.tp, leader, w.leader_epoch, |s, p| {
                s.handle_epoch_end(
                    epoch,
                    LeaderEpoch(a.leader_epoch),
                    Offset(a.end_offset),
                    Offset(p.log_end_offset()),
                    &p.epoch_cache(),
                )
            }),
        };
        run_follower_commands(ctx, &w.tp, &w.partition, leader, w.leader_epoch, cmds).await;
    }
    true
}

pub(super) async fn send_list_offsets(
    ctx: &Rc<ShardCtx>,
    conn: &mut PeerConnection,
    leader: NodeId,
    work: &[Pending],
) -> bool {
    for w in work
        .iter()
        .filter(|w| matches!(w.cmd, FollowerCommand::SendListOffsets))
    {
        let mut bounds = [Offset::ZERO; 2];
        for (slot, ts) in bounds.iter_mut().zip([-2i64, -1]) {
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(ctx.shared.config.node_id))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(w.tp.topic.clone())))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(w.tp.partition)
                        .with_current_leader_epoch(w.leader_epoch.get())
                        .with_timestamp(ts)])]);
            let resp = match conn
                .call(
                    &req,
                    LIST_OFFSETS_VERSION,
                    Duration::from_millis(PEER_REQUEST_TIMEOUT_MS),
                )
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    debug!(%leader, "ListOffsets: {e}");
                    return false;
                }
            };
            let Some(p) = resp.topics.first().and_then(|t| t.partitions.first()) else {
                return false;
            };
            if p.error_code != 0 {
                return false;
            }
            *slot = Offset(p.offset);
        }
        let cmds = with_follower(ctx, &w.tp, leader, w.leader_epoch, |s, p| {
            s.handle_log_bounds(bounds[0], bounds[1], Offset(p.log_end_offset()))
        });
        run_follower_commands(ctx, &w.tp, &w.partition, leader, w.leader_epoch, cmds).await;
    }
    true
}

pub(super) async fn send_fetch(
    ctx: &Rc<ShardCtx>,
    conn: &mut PeerConnection,
    leader: NodeId,
    work: &[Pending],
    reported: &Reported,
) -> bool {
    let config = &ctx.shared.config;
    let fetches: Vec<(&Pending, Offset)> = work
        .iter()
        .filter_map(|w| match w.cmd {
            FollowerCommand::Fetch { offset } => Some((w, offset)),
            _ => None,
        })
        .collect();
    let mut topics: Vec<FetchTopic> = Vec::new();
    for (w, offset) in &fetches {
        let mut part = FetchPartition::default()
            .with_partition(w.tp.partition)
            .with_current_leader_epoch(w.leader_epoch.get())
            .with_fetch_offset(offset.get())
            .with_log_start_offset(w.partition.log_start_offset())
            .with_partition_max_bytes(config.replica_fetch_max_bytes);
        // The fetch offset is our log end, appended but maybe not fsynced: the durable end
        // goes beside it, and the leader counts only that for its HW (acks=all). Left out
        // when the two are equal: the leader then takes the fetch offset, as from a
        // follower without the tag.
        let durable = Offset(w.partition.reportable_durable_end()).min(*offset);
        if durable < *offset {
            durable_tag::put(&mut part.unknown_tagged_fields, durable);
        }
        note_reported(reported, &w.tp, w.leader_epoch, durable.get());
        reported.fetched.notify_all();
        push_under_topic(&mut topics, &w.tp.topic, part);
    }
    // A leader with nothing new holds this fetch up to max.wait.ms: the durable end of an
    // fsync that completes meanwhile goes to it by the reporter (`report_durable`), so the
    // fetch long-polls for new records whether or not ours are synced yet.
    let wait = config.replica_fetch_wait_max_ms.max(0);
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(ctx.shared.config.node_id))
        .with_max_wait_ms(wait)
        .with_min_bytes(1)
        .with_max_bytes(config.replica_fetch_response_max_bytes)
        .with_session_epoch(-1)
        .with_topics(topics);
    let timeout = Duration::from_millis(PEER_REQUEST_TIMEOUT_MS + wait as u64);
    let resp = match conn.call(&req, FETCH_VERSION, timeout).await {
        Ok(r) => r,
        Err(e) => {
            debug!(%leader, "replica Fetch: {e}");
            return false;
        }
    };
    // Each answer is appended (staged; the flusher writes and fsyncs it per the flush
    // policy) and the next Fetch goes out at once from the new log end, reporting the
    // durable end beside it: waiting for the fsync before fetching again limited each
    // follower to replica.fetch.max.bytes per partition per fsync, and fsyncs queue
    // behind the leaders' on a shared disk (perf/RESULTS-replication.md, 2026-12-02).
    for (w, offset) in &fetches {
        let (w, offset) = (*w, *offset);
        let answer = resp
            .responses
            .iter()
            .filter(|t| t.topic.as_str() == w.tp.topic)
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == w.tp.partition);
        let Some(a) = answer else {
            continue;
        };
        if a.error_code != 0 {
            let err = code_to_replica_error(a.error_code);
            let cmds = with_follower(ctx, &w.tp, leader, w.leader_epoch, |s, _| {
                s.handle_fetch_error(offset, err)
            });
            run_follower_commands(ctx, &w.tp, &w.partition, leader, w.leader_epoch, cmds).await;
            continue;
        }
        let records: Bytes = a.records.clone().unwrap_or_default();
        let p = &w.partition;
        // Append only what answers the request we are waiting on, at our log end: a stale
        // or reordered answer must not be written.
        let expected = with_expected(ctx, &w.tp, leader, w.leader_epoch);
        if !records.is_empty() && expected == Some(offset) && p.log_end_offset() == offset.get() {
            // Batches past an offset gap (the leader's log was cleaned) are accepted once the
            // gap bound covering them is durable.
            if let Err(e) = p.prepare_replica_append(&records).await {
                warn!(topic = %w.tp.topic, partition = w.tp.partition, "replica append: {e}");
            }
            // A refusal (a batch the leader could not have written, a gap) is logged and the
            // fetch retried like a timeout; nothing of it is appended.
            if let Err(e) = append_fetched(ctx, w, leader, offset, records).await {
                warn!(topic = %w.tp.topic, partition = w.tp.partition, "replica append: {e}");
                let cmds = with_follower(ctx, &w.tp, leader, w.leader_epoch, |s, _| {
                    s.handle_timeout()
                });
                run_follower_commands(ctx, &w.tp, p, leader, w.leader_epoch, cmds).await;
                continue;
            }
        }
        let hw = Offset(a.high_watermark);
        let cmds = with_follower(ctx, &w.tp, leader, w.leader_epoch, |s, p| {
            s.handle_fetch_response(offset, Offset(p.log_end_offset()), hw)
        });
        run_follower_commands(ctx, &w.tp, p, leader, w.leader_epoch, cmds).await;
        follow_log_start(&w.tp, p, a.log_start_offset).await;
    }
    true
}

fn note_reported(reported: &Reported, tp: &TopicPartition, epoch: LeaderEpoch, durable: i64) {
    let mut reported = reported.by_partition.borrow_mut();
    match reported.get_mut(tp) {
        Some((e, r)) if *e == epoch => *r = (*r).max(durable),
        Some(r) => *r = (epoch, durable),
        None => {
            reported.insert(tp.clone(), (epoch, durable));
        }
    }
}

/// What the reporter may tell the leader about one partition.
struct Due {
    tp: TopicPartition,
    leader_epoch: LeaderEpoch,
    partition: Rc<Partition>,
    /// The fetch offset the follower's next Fetch will carry: its log end, every record below
    /// it fetched from this leader in this epoch (validated against its log first).
    fetch_offset: Offset,
    /// What the leader last heard is durable (-1: nothing yet).
    reported: i64,
}

/// The partitions this shard follows from `leader` whose next request is a Fetch: only then
/// is the log below the fetch offset known to be the leader's (the epoch check and any
/// truncation come first), so only then may a durable end be reported.
fn reportable(ctx: &ShardCtx, leader: NodeId, reported: &Reported) -> Vec<Due> {
    let reported = reported.by_partition.borrow();
    ctx.replicas
        .roles
        .borrow()
        .iter()
        .filter_map(|(tp, r)| match r {
            Role::Follower(f) if f.state.leader() == leader && f.partition.is_open() => {
                let fetch_offset = f.state.expected_fetch_offset()?;
                let leader_epoch = f.state.leader_epoch();
                Some(Due {
                    tp: tp.clone(),
                    leader_epoch,
                    partition: f.partition.clone(),
                    fetch_offset,
                    reported: match reported.get(tp) {
                        Some(&(epoch, durable)) if epoch == leader_epoch => durable,
                        _ => -1,
                    },
                })
            }
            _ => None,
        })
        .collect()
}

/// The durable-end reporter of one fetcher: as soon as an fsync of a partition followed from
/// `leader` completes, a Fetch that asks for no bytes (max.bytes 0, max.wait.ms 0) carries
/// the new durable end to the leader, which moves its HW (acks=all answers, consumers'
/// long polls) at once. The fetch itself cannot carry it promptly: it is long-polling at the
/// leader for new records, and the answer to a request on its connection must come first.
/// Its own connection, so a report never queues behind that long poll. Like the fetch's
/// tag, a report says only what is fsynced (Sync policy) and never past the fetch offset;
/// the leader keeps the largest report of an epoch, so the two paths may cross.
async fn report_durable(ctx: Rc<ShardCtx>, leader: NodeId, reported: Reported) {
    let me = ctx.shared.config.node_id;
    let mut conn: Option<PeerConnection> = None;
    let backoff = Duration::from_millis(FETCHER_BACKOFF_MS);
    loop {
        // Taken before looking, so a Fetch sent meanwhile is not missed.
        let fetched = reported.fetched.listen();
        let candidates = reportable(&ctx, leader, &reported);
        let due: Vec<(&Due, Offset)> = candidates
            .iter()
            .filter_map(|d| {
                let synced = Offset(d.partition.reportable_durable_end());
                durable_tag::report_due(d.fetch_offset, synced, Offset(d.reported))
                    .map(|durable| (d, durable))
            })
            .collect();
        if due.is_empty() {
            // Until some partition's fsynced end passes what was reported, below its fetch
            // offset (so that it is then due: a wait that could resolve with nothing due
            // would spin), or a Fetch moves fetch offsets. The bound only picks up partitions
            // that start being fetched (their fetches report meanwhile).
            let wait =
                Duration::from_millis(ctx.shared.config.replica_fetch_wait_max_ms.max(1) as u64);
            let syncs = candidates
                .iter()
                .filter(|d| d.reported < d.fetch_offset.get())
                .map(|d| Box::pin(d.partition.wait_synced_beyond(d.reported)))
                .collect::<Vec<_>>();
            let synced = async {
                if syncs.is_empty() {
                    std::future::pending::<()>().await;
                } else {
                    futures::future::select_all(syncs).await;
                }
            };
            futures_lite::future::or(
                futures_lite::future::or(synced, fetched),
                glommio::timer::sleep(wait),
            )
            .await;
            continue;
        }
        drop(fetched);
        if conn.is_none() {
            match connect_to_leader(&ctx, leader).await {
                None => {
                    glommio::timer::sleep(backoff).await;
                    continue;
                }
                Some(Ok(c)) => conn = Some(c),
                Some(Err(e)) => {
                    // The fetch loop says why at warn when it matters.
                    debug!(%leader, "durable-end reporter cannot connect: {e}");
                    glommio::timer::sleep(backoff).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let mut topics: Vec<FetchTopic> = Vec::new();
        for (d, durable) in &due {
            let mut part = FetchPartition::default()
                .with_partition(d.tp.partition)
                .with_current_leader_epoch(d.leader_epoch.get())
                .with_fetch_offset(d.fetch_offset.get())
                .with_log_start_offset(d.partition.log_start_offset())
                .with_partition_max_bytes(0);
            if *durable < d.fetch_offset {
                durable_tag::put(&mut part.unknown_tagged_fields, *durable);
            }
            push_under_topic(&mut topics, &d.tp.topic, part);
        }
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(me))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(0)
            .with_session_epoch(-1)
            .with_topics(topics);
        tracing::debug!(target: "e2e_trace", %leader, n = due.len(), "report");
        // The answer carries nothing we act on: errors (a new leader, a fenced epoch) are
        // the fetch loop's to handle, and it sees them on its own next answer.
        match c
            .call(
                &req,
                FETCH_VERSION,
                Duration::from_millis(PEER_REQUEST_TIMEOUT_MS),
            )
            .await
        {
            Ok(_) => {
                for (d, durable) in &due {
                    note_reported(&reported, &d.tp, d.leader_epoch, durable.get());
                }
            }
            Err(e) => {
                debug!(%leader, "durable-end report: {e}");
                conn = None;
                glommio::timer::sleep(backoff).await;
            }
        }
    }
}

/// Appends a fetched answer to the follower's log. When the log has no room (the shard's
/// memory budget or the log's staging buffer is full: the disk is behind), it waits for room
/// as a producer does, bounded by replica.fetch.wait.max.ms (no longer than a fetch waits for
/// data), then appends if the answer still continues the log, instead of dropping the
/// fetched bytes and fetching them again.
async fn append_fetched(
    ctx: &Rc<ShardCtx>,
    w: &Pending,
    leader: NodeId,
    offset: Offset,
    records: Bytes,
) -> Result<ReplicaAppendOutcome, ReplicaAppendError> {
    let p = &w.partition;
    let clock = &*ctx.shared.clock;
    let deadline_ms =
        clock.monotonic_ms() + ctx.shared.config.replica_fetch_wait_max_ms.max(0) as u64;
    loop {
        match p.append_replica(records.clone(), w.leader_epoch.get(), clock.wall_ms()) {
            Err(ReplicaAppendError::Backpressure { .. }) if clock.monotonic_ms() < deadline_ms => {
                let room = p.wait_for_staging_room(records.len());
                if let Some(Err(e)) = crate::shard::until(clock, deadline_ms, room).await {
                    return Err(ReplicaAppendError::Storage(e));
                }
                // Leadership or the log may have moved while we waited: append only an
                // answer that still continues our log (as before the wait).
                if with_expected(ctx, &w.tp, leader, w.leader_epoch) != Some(offset)
                    || p.log_end_offset() != offset.get()
                {
                    return Ok(ReplicaAppendOutcome {
                        first_offset: -1,
                        last_offset: -1,
                        batches: 0,
                        log_end_offset: p.log_end_offset(),
                    });
                }
            }
            result => return result,
        }
    }
}

/// The leader's log start moved (DeleteRecords, or its retention): move ours along, as
/// Kafka's followers do with the log start offset in every fetch response, never past our
/// own HW (only committed records are ever deleted).
pub(super) async fn follow_log_start(tp: &TopicPartition, p: &Partition, leader_log_start: i64) {
    let target = leader_log_start.min(p.high_watermark());
    if target <= p.log_start_offset() {
        return;
    }
    if let Err(e) = p.delete_records(target).await {
        warn!(topic = %tp.topic, partition = tp.partition, target, "following the leader's log start: {e}");
    }
}

pub(super) fn with_expected(
    ctx: &ShardCtx,
    tp: &TopicPartition,
    leader: NodeId,
    epoch: LeaderEpoch,
) -> Option<Offset> {
    match ctx.replicas.roles.borrow().get(tp) {
        Some(Role::Follower(f))
            if f.state.leader() == leader && f.state.leader_epoch() == epoch =>
        {
            f.state.expected_fetch_offset()
        }
        _ => None,
    }
}
