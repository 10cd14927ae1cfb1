//! The replicas one shard holds, and what this broker does for each: lead it (track follower
//! progress, move the high watermark, propose ISR changes) or follow it (validate the log
//! against the leader's epochs, truncate, fetch). The rules live in `crate::replication` as
//! state machines; this module carries out their commands — storage calls, Fetch and
//! OffsetForLeaderEpoch requests to the leader, AlterPartition requests to the controller.
//!
//! Roles come only from the metadata image (`apply_metadata`), applied in log order; a broker
//! takes no role before its image has caught up with the quorum (`cluster::quorum`), so a
//! restarted broker never leads from stale metadata. A role is replaced, never edited, when
//! the leader epoch changes.
//!
//! `RefCell` borrows of the role table are kept inside small synchronous helpers: never
//! across an `.await`.
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

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
use tracing::{debug, error, info, warn};

use super::ops::TopicPartition;
use super::peer::PeerConnection;
use super::ShardCtx;
use crate::cluster::catalog::{Catalog, PartitionMeta};
use crate::cluster::controller::{ControllerRequest, ControllerResponse};
use crate::limits::{
    FETCHER_BACKOFF_MS, METADATA_POLL_MS, PEER_REQUEST_TIMEOUT_MS, REPLICA_TICK_MS,
};
use crate::protocol::error::{error_from_code, ErrorCode};
use crate::replication::follower::FollowerState;
use crate::replication::leader::LeaderState;
use crate::replication::{FollowerCommand, LeaderCommand, ReplicaError};
use crate::storage::Partition;

/// Versions of the requests a follower sends to its leader (both ends are Strata).
const FETCH_VERSION: i16 = 12;
const OFFSET_FOR_LEADER_EPOCH_VERSION: i16 = 4;
const LIST_OFFSETS_VERSION: i16 = 7;

/// Kafka's replica.fetch.backoff.ms: how long a follower the leader refused waits before it
/// tries again.
const FOLLOWER_RETRY_BACKOFF_MS: u64 = 1000;

pub struct LeaderRole {
    pub state: LeaderState,
    pub partition: Rc<Partition>,
    /// The topic's min.insync.replicas.
    pub min_isr: usize,
}

pub struct FollowerRole {
    pub state: FollowerState,
    pub partition: Rc<Partition>,
    /// What to send the leader next; `None` while waiting for new metadata.
    pub next: Option<FollowerCommand>,
    /// When the leader last refused us (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH): the
    /// leader may simply not have applied the metadata naming it yet, so after a backoff
    /// the follower starts over (validate, then fetch), as Kafka's fetcher retries a failed
    /// partition after replica.fetch.backoff.ms.
    pub stalled_at_ms: Option<u64>,
}

pub enum Role {
    Leader(LeaderRole),
    Follower(FollowerRole),
}

/// One shard's replicas.
#[derive(Default)]
pub struct Replicas {
    roles: RefCell<HashMap<TopicPartition, Role>>,
    /// Leaders (node ids) this shard runs a fetcher for.
    fetchers: RefCell<HashSet<i32>>,
    applied_version: Cell<u64>,
    /// Serialises metadata application (the poller and request paths).
    applying: futures::lock::Mutex<()>,
    /// Replicas assigned here whose log could not be opened, with the reason (Kafka's
    /// offline replicas). Not opened again until the broker restarts, as Kafka keeps a
    /// failed log dir offline; requests for them get KAFKA_STORAGE_ERROR.
    offline: RefCell<HashMap<TopicPartition, String>>,
}

/// How a replica answers a request that needs its leader.
pub enum LeaderCheck {
    Leader,
    NotLeader,
    Unknown,
}

impl Replicas {
    /// Why this broker's replica of `tp` is offline, if it is.
    pub fn offline_reason(&self, tp: &TopicPartition) -> Option<String> {
        self.offline.borrow().get(tp).cloned()
    }

    /// Is this broker the leader of `tp` (as far as this shard has applied metadata)?
    pub fn check_leader(&self, tp: &TopicPartition) -> LeaderCheck {
        match self.roles.borrow().get(tp) {
            Some(Role::Leader(_)) => LeaderCheck::Leader,
            Some(Role::Follower(_)) => LeaderCheck::NotLeader,
            None => LeaderCheck::Unknown,
        }
    }

    /// The leader epoch of `tp` if this broker leads it.
    pub fn leader_epoch(&self, tp: &TopicPartition) -> Option<i32> {
        match self.roles.borrow().get(tp) {
            Some(Role::Leader(l)) => Some(l.state.leader_epoch()),
            _ => None,
        }
    }

    /// Whether an acks=all produce to `tp` may append now (ISR >= min.insync.replicas).
    pub fn acks_all_allowed(&self, tp: &TopicPartition) -> bool {
        match self.roles.borrow().get(tp) {
            Some(Role::Leader(l)) => l.state.acks_all_allowed(l.min_isr),
            _ => false,
        }
    }

    /// Kafka's check once the high watermark has passed an acks=all batch
    /// (`checkEnoughReplicasReachOffset`): the write is acknowledged only if this broker still
    /// leads `tp` with at least min.insync.replicas in the ISR. An ISR that shrank while the
    /// produce waited answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (the batch stays appended, and
    /// the producer may retry); lost leadership answers NOT_LEADER_OR_FOLLOWER.
    pub fn acks_all_committed(&self, tp: &TopicPartition) -> Result<(), ErrorCode> {
        match self.roles.borrow().get(tp) {
            Some(Role::Leader(l)) if l.state.acks_all_allowed(l.min_isr) => Ok(()),
            Some(Role::Leader(_)) => Err(ErrorCode::NotEnoughReplicasAfterAppend),
            _ => Err(ErrorCode::NotLeaderOrFollower),
        }
    }

    /// The high watermark a leader reports.
    pub fn leader_hw(&self, tp: &TopicPartition) -> Option<i64> {
        match self.roles.borrow().get(tp) {
            Some(Role::Leader(l)) => Some(l.state.hw()),
            _ => None,
        }
    }

    fn leader_commands(
        &self,
        tp: &TopicPartition,
        f: impl FnOnce(&mut LeaderState, &Partition) -> Vec<LeaderCommand>,
    ) -> Option<(Rc<Partition>, Vec<LeaderCommand>)> {
        match self.roles.borrow_mut().get_mut(tp) {
            Some(Role::Leader(l)) => {
                let cmds = f(&mut l.state, &l.partition);
                Some((l.partition.clone(), cmds))
            }
            _ => None,
        }
    }
}

/// The leader's log grew (an append): count it towards the high watermark.
pub fn on_local_append(ctx: &Rc<ShardCtx>, tp: &TopicPartition) {
    let now = ctx.shared.clock.monotonic_ms();
    if let Some((p, cmds)) = ctx
        .replicas
        .leader_commands(tp, |s, p| s.handle_local_leo(p.log_end(), now))
    {
        run_leader_commands(ctx, tp, &p, cmds);
    }
}

/// A follower's Fetch reached this leader: record its progress. The error is the one the
/// follower must see.
pub fn on_follower_fetch(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    replica: i32,
    fetch_offset: i64,
    current_leader_epoch: i32,
) -> Result<i64, ErrorCode> {
    let now = ctx.shared.clock.monotonic_ms();
    let mut outcome = Err(ErrorCode::NotLeaderOrFollower);
    let cmds = ctx.replicas.leader_commands(tp, |s, p| {
        // Our own log end first, so a follower at the end counts as caught up.
        let mut cmds = s.handle_local_leo(p.log_end(), now);
        match s.handle_follower_fetch(replica, fetch_offset, current_leader_epoch, now) {
            Ok(more) => {
                cmds.extend(more);
                outcome = Ok(s.hw());
            }
            Err(e) => outcome = Err(replica_error_code(e)),
        }
        cmds
    });
    debug!(topic = %tp.topic, partition = tp.partition, replica, fetch_offset, ?outcome, "follower fetch");
    if let Some((p, cmds)) = cmds {
        run_leader_commands(ctx, tp, &p, cmds);
    }
    outcome.map(|_| ctx.replicas.leader_hw(tp).unwrap_or(-1))
}

pub fn replica_error_code(e: ReplicaError) -> ErrorCode {
    match e {
        ReplicaError::NotLeaderOrFollower => ErrorCode::NotLeaderOrFollower,
        ReplicaError::FencedLeaderEpoch => ErrorCode::FencedLeaderEpoch,
        ReplicaError::UnknownLeaderEpoch => ErrorCode::UnknownLeaderEpoch,
        ReplicaError::OffsetOutOfRange => ErrorCode::OffsetOutOfRange,
    }
}

fn code_to_replica_error(code: i16) -> ReplicaError {
    match error_from_code(code) {
        ErrorCode::FencedLeaderEpoch => ReplicaError::FencedLeaderEpoch,
        ErrorCode::UnknownLeaderEpoch => ReplicaError::UnknownLeaderEpoch,
        ErrorCode::OffsetOutOfRange => ReplicaError::OffsetOutOfRange,
        _ => ReplicaError::NotLeaderOrFollower,
    }
}

fn run_leader_commands(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    p: &Rc<Partition>,
    cmds: Vec<LeaderCommand>,
) {
    for cmd in cmds {
        match cmd {
            LeaderCommand::AdvanceHw(hw) => p.set_hw(hw.min(p.log_end())),
            LeaderCommand::AlterIsr {
                new_isr,
                leader_epoch,
                partition_epoch,
            } => {
                let ctx = ctx.clone();
                let tp = tp.clone();
                glommio::spawn_local(async move {
                    alter_isr(ctx, tp, new_isr, leader_epoch, partition_epoch).await
                })
                .detach();
            }
        }
    }
}

/// Proposes an ISR change to the controller (KIP-497) and feeds the answer back. An answer
/// that may or may not have been applied (a timeout) is retried with the same epochs: the
/// controller refuses a stale one, and the metadata image then settles it.
async fn alter_isr(
    ctx: Rc<ShardCtx>,
    tp: TopicPartition,
    new_isr: Vec<i32>,
    leader_epoch: i32,
    partition_epoch: i32,
) {
    loop {
        if ctx.shutting_down.get() || ctx.replicas.leader_epoch(&tp) != Some(leader_epoch) {
            return;
        }
        info!(topic = %tp.topic, partition = tp.partition, ?new_isr, "proposing ISR change");
        let req = ControllerRequest::AlterPartition {
            broker_id: ctx.shared.config.node_id,
            broker_epoch: -1,
            topic: tp.topic.clone(),
            partition: tp.partition,
            leader_epoch,
            partition_epoch,
            new_isr: new_isr.clone(),
        };
        match ctx.shared.quorum.request(req).await {
            Ok(ControllerResponse::AlterPartition { status, state }) => {
                let code = error_from_code(status.error_code);
                let cmds = ctx.replicas.leader_commands(&tp, |s, _| {
                    if s.leader_epoch() != leader_epoch {
                        return Vec::new();
                    }
                    match (&state, status.is_ok()) {
                        (Some(st), true) => {
                            s.handle_isr_committed(st.isr.clone(), st.partition_epoch)
                        }
                        _ if matches!(
                            code,
                            ErrorCode::OperationNotAttempted | ErrorCode::IneligibleReplica
                        ) =>
                        {
                            s.handle_alter_failed()
                        }
                        // Stale epochs: the next metadata image carries the real state.
                        (Some(st), false) if st.partition_epoch > s.partition_epoch() => {
                            s.handle_isr_committed(st.isr.clone(), st.partition_epoch)
                        }
                        _ => Vec::new(),
                    }
                });
                if let Some((p, cmds)) = cmds {
                    run_leader_commands(&ctx, &tp, &p, cmds);
                }
                if !status.is_ok() {
                    debug!(topic = %tp.topic, partition = tp.partition, ?code, "ISR change refused");
                }
                return;
            }
            Ok(other) => {
                warn!("unexpected AlterPartition answer {other:?}");
                return;
            }
            Err(e) => {
                warn!(topic = %tp.topic, partition = tp.partition, "AlterPartition: {e}; retrying");
                glommio::timer::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Tells the controller this broker's replica of `tp` is offline (Kafka's broker reports a
/// failed log dir), so it leaves the ISR and another replica leads. Retried until the
/// controller has it, the replica is no longer offline here, or the shard stops.
async fn report_offline(ctx: Rc<ShardCtx>, tp: TopicPartition, reason: String) {
    loop {
        if ctx.shutting_down.get() || ctx.replicas.offline_reason(&tp).is_none() {
            return;
        }
        let req = ControllerRequest::ReplicaOffline {
            node_id: ctx.shared.config.node_id,
            topic: tp.topic.clone(),
            partition: tp.partition,
            reason: reason.clone(),
        };
        match ctx.shared.quorum.request(req).await {
            Ok(ControllerResponse::ReplicaOffline { status }) => {
                if !status.is_ok() {
                    // The topic went away or the replica moved: nothing left to report.
                    debug!(topic = %tp.topic, partition = tp.partition, ?status, "offline report refused");
                }
                return;
            }
            Ok(other) => {
                warn!("unexpected ReplicaOffline answer {other:?}");
                return;
            }
            Err(e) => {
                warn!(topic = %tp.topic, partition = tp.partition, "reporting offline replica: {e}; retrying");
                glommio::timer::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Waits until `last_offset` is committed (below the high watermark), or `deadline`.
pub async fn wait_committed(p: &Partition, last_offset: i64, deadline: Instant) -> bool {
    p.wait_for_hw_beyond(last_offset, deadline).await > last_offset
}

/// Applies the latest metadata image to this shard if it changed since the last one.
pub async fn apply_metadata(ctx: &Rc<ShardCtx>) {
    let _guard = ctx.replicas.applying.lock().await;
    let version = ctx.shared.catalog.version();
    if version == ctx.replicas.applied_version.get() && version != 0 {
        return;
    }
    let catalog = ctx.shared.catalog.load();
    let me = catalog.local_node;
    let live: HashSet<i32> = catalog.live_brokers().map(|b| b.node_id).collect();
    let mut wanted = HashSet::new();
    for topic in catalog.topics.values() {
        let config = ctx.shared.topic_log_config(&topic.configs);
        let min_isr = ctx
            .shared
            .config
            .min_insync_replicas_of(&ctx.shared.topic_settings(&topic.configs));
        for (i, pm) in topic.partitions.iter().enumerate() {
            if catalog.local_shard(pm) != Some(ctx.id as u32) {
                continue;
            }
            let tp = TopicPartition {
                topic: topic.name.clone(),
                partition: i as i32,
            };
            wanted.insert(tp.clone());
            if ctx.replicas.offline.borrow().contains_key(&tp) {
                continue;
            }
            let p = match ctx
                .open_partition(&tp.topic, tp.partition, config.clone())
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    let reason = format!("cannot open the log: {e}");
                    error!(
                        topic = %tp.topic,
                        partition = tp.partition,
                        "replica offline until restart: {reason}"
                    );
                    ctx.replicas
                        .offline
                        .borrow_mut()
                        .insert(tp.clone(), reason.clone());
                    let (ctx, tp) = (ctx.clone(), tp.clone());
                    glommio::spawn_local(async move { report_offline(ctx, tp, reason).await })
                        .detach();
                    continue;
                }
            };
            if p.config() != config {
                p.set_config(config.clone());
            }
            let ineligible: Vec<i32> = pm
                .replicas
                .iter()
                .copied()
                .filter(|r| !live.contains(r))
                .collect();
            update_role(ctx, &tp, &p, pm, me, min_isr, ineligible);
        }
    }
    // An offline replica that is no longer assigned here is forgotten: a topic created again
    // under the same name gets a fresh attempt.
    ctx.replicas
        .offline
        .borrow_mut()
        .retain(|tp, _| wanted.contains(tp));
    // Replicas this shard no longer holds: the topic was deleted or the replica moved away.
    let gone: Vec<(String, i32, Rc<Partition>)> = ctx
        .all_partitions()
        .into_iter()
        .filter(|(t, i, _)| {
            !wanted.contains(&TopicPartition {
                topic: t.clone(),
                partition: *i,
            })
        })
        .collect();
    for (topic, i, p) in gone {
        let tp = TopicPartition {
            topic: topic.clone(),
            partition: i,
        };
        let was = ctx.replicas.roles.borrow_mut().remove(&tp);
        if matches!(was, Some(Role::Leader(_))) && topic == crate::group::OFFSETS_TOPIC {
            super::groups::resign(ctx, i);
        }
        ctx.remove_partition(&topic, i);
        info!(topic = %topic, partition = i, "deleting replica no longer assigned here");
        if let Err(e) = p.delete().await {
            warn!("deleting {topic}-{i}: {e}");
        }
    }
    start_fetchers(ctx, &catalog);
    ctx.replicas.applied_version.set(version);
}

/// Takes the role `pm` gives this broker for `tp`, if it is not already in it.
fn update_role(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    p: &Rc<Partition>,
    pm: &PartitionMeta,
    me: i32,
    min_isr: usize,
    ineligible: Vec<i32>,
) {
    let now = ctx.shared.clock.monotonic_ms();
    let lag = ctx.shared.config.replica_lag_time_max_ms;
    let is_offsets = tp.topic == crate::group::OFFSETS_TOPIC;
    let mut roles = ctx.replicas.roles.borrow_mut();
    let current = roles.get_mut(tp);
    if pm.leader == me {
        if let Some(Role::Leader(l)) = current {
            if l.state.leader_epoch() == pm.leader_epoch {
                l.min_isr = min_isr;
                l.state.set_ineligible(ineligible);
                if pm.partition_epoch > l.state.partition_epoch() {
                    let cmds = l.state.handle_partition_change(
                        pm.replicas.clone(),
                        pm.isr.clone(),
                        pm.partition_epoch,
                    );
                    let part = l.partition.clone();
                    drop(roles);
                    run_leader_commands(ctx, tp, &part, cmds);
                }
                return;
            }
        }
        // Become leader: later appends carry the new epoch, which starts at our log end.
        let leo = p.log_end();
        if let Err(e) = p.set_leader_epoch(pm.leader_epoch) {
            // Leading would stamp an epoch the log contradicts: stay off (clients hear
            // NOT_LEADER_OR_FOLLOWER) until metadata or an operator resolves it.
            error!(topic = %tp.topic, partition = tp.partition, "cannot lead: {e}");
            roles.remove(tp);
            return;
        }
        let hw = p.hw().min(leo);
        let mut state = LeaderState::new(
            me,
            pm.leader_epoch,
            pm.partition_epoch,
            pm.replicas.clone(),
            pm.isr.clone(),
            leo,
            hw,
            leo,
            now,
            lag,
        );
        state.set_ineligible(ineligible);
        info!(topic = %tp.topic, partition = tp.partition, epoch = pm.leader_epoch, leo, hw, "leading");
        roles.insert(
            tp.clone(),
            Role::Leader(LeaderRole {
                state,
                partition: p.clone(),
                min_isr,
            }),
        );
        drop(roles);
        // With no other replica in the ISR the high watermark is our log end at once.
        on_local_append(ctx, tp);
        if is_offsets {
            super::groups::become_coordinator(ctx, tp.partition);
        }
        return;
    }
    if let Some(Role::Follower(f)) = current {
        if f.state.leader() == pm.leader && f.state.leader_epoch() == pm.leader_epoch {
            return;
        }
    }
    let was_leader = matches!(roles.get(tp), Some(Role::Leader(_)));
    let (state, first) = FollowerState::new(
        pm.leader,
        pm.leader_epoch,
        p.log_end(),
        p.hw(),
        p.latest_epoch(),
    );
    info!(topic = %tp.topic, partition = tp.partition, leader = pm.leader, epoch = pm.leader_epoch, "following");
    roles.insert(
        tp.clone(),
        Role::Follower(FollowerRole {
            state,
            partition: p.clone(),
            next: (pm.leader >= 0).then_some(first),
            stalled_at_ms: None,
        }),
    );
    drop(roles);
    if was_leader && is_offsets {
        super::groups::resign(ctx, tp.partition);
    }
}

/// Starts a fetcher for every leader this shard follows and has none for.
fn start_fetchers(ctx: &Rc<ShardCtx>, catalog: &Catalog) {
    let leaders: HashSet<i32> = ctx
        .replicas
        .roles
        .borrow()
        .values()
        .filter_map(|r| match r {
            Role::Follower(f) if f.state.leader() >= 0 => Some(f.state.leader()),
            _ => None,
        })
        .collect();
    for leader in leaders {
        if leader == catalog.local_node || !ctx.replicas.fetchers.borrow_mut().insert(leader) {
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

/// Polls for new metadata images and ticks the leaders, until the shard stops.
pub async fn metadata_loop(ctx: Rc<ShardCtx>) {
    let mut last_tick = Instant::now();
    loop {
        glommio::timer::sleep(Duration::from_millis(METADATA_POLL_MS)).await;
        if ctx.shutting_down.get() {
            return;
        }
        if ctx.shared.catalog.version() != ctx.replicas.applied_version.get() {
            apply_metadata(&ctx).await;
        }
        if last_tick.elapsed() >= Duration::from_millis(REPLICA_TICK_MS) {
            last_tick = Instant::now();
            tick_leaders(&ctx);
            retry_stalled_followers(&ctx);
        }
    }
}

/// Leaders check their own log end and their followers' lag (ISR shrink).
fn tick_leaders(ctx: &Rc<ShardCtx>) {
    let now = ctx.shared.clock.monotonic_ms();
    let tps: Vec<TopicPartition> = ctx
        .replicas
        .roles
        .borrow()
        .iter()
        .filter(|(_, r)| matches!(r, Role::Leader(_)))
        .map(|(tp, _)| tp.clone())
        .collect();
    for tp in tps {
        if let Some((p, cmds)) = ctx.replicas.leader_commands(&tp, |s, p| {
            let mut c = s.handle_local_leo(p.log_end(), now);
            c.extend(s.handle_tick(now));
            c
        }) {
            run_leader_commands(ctx, &tp, &p, cmds);
        }
    }
}

/// What a fetcher must send for one partition.
struct Pending {
    tp: TopicPartition,
    cmd: FollowerCommand,
    leader_epoch: i32,
    partition: Rc<Partition>,
}

fn pending_for(ctx: &ShardCtx, leader: i32) -> Vec<Pending> {
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

fn follows(ctx: &ShardCtx, leader: i32) -> bool {
    ctx.replicas
        .roles
        .borrow()
        .values()
        .any(|r| matches!(r, Role::Follower(f) if f.state.leader() == leader))
}

/// Runs `f` on the follower state of `tp` if it still follows `leader` at `epoch`.
fn with_follower(
    ctx: &ShardCtx,
    tp: &TopicPartition,
    leader: i32,
    epoch: i32,
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

fn set_next(
    ctx: &ShardCtx,
    tp: &TopicPartition,
    leader: i32,
    epoch: i32,
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
fn retry_stalled_followers(ctx: &Rc<ShardCtx>) {
    let now = ctx.shared.clock.monotonic_ms();
    let mut restarted = false;
    for role in ctx.replicas.roles.borrow_mut().values_mut() {
        let Role::Follower(fr) = role else { continue };
        let Some(since) = fr.stalled_at_ms else {
            continue;
        };
        if fr.state.leader() < 0 || now.saturating_sub(since) < FOLLOWER_RETRY_BACKOFF_MS {
            continue;
        }
        let p = &fr.partition;
        let (state, first) = FollowerState::new(
            fr.state.leader(),
            fr.state.leader_epoch(),
            p.log_end(),
            p.hw(),
            p.latest_epoch(),
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
async fn run_follower_commands(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    p: &Rc<Partition>,
    leader: i32,
    epoch: i32,
    cmds: Vec<FollowerCommand>,
) {
    for cmd in cmds {
        match cmd {
            FollowerCommand::Truncate { to } => {
                info!(topic = %tp.topic, partition = tp.partition, to, "truncating to the leader's history");
                if let Err(e) = p.truncate_to(to).await {
                    warn!(topic = %tp.topic, partition = tp.partition, "truncate: {e}");
                }
            }
            FollowerCommand::TruncateFully { start } => {
                info!(topic = %tp.topic, partition = tp.partition, start, "log behind the leader's start; starting over");
                if let Err(e) = p.truncate_fully_and_start_at(start).await {
                    warn!(topic = %tp.topic, partition = tp.partition, "truncate fully: {e}");
                }
            }
            FollowerCommand::AdvanceHw(hw) => p.set_hw(hw.min(p.log_end())),
            FollowerCommand::AwaitMetadata => set_next(ctx, tp, leader, epoch, None),
            request => set_next(ctx, tp, leader, epoch, Some(request)),
        }
    }
}

/// One shard's fetcher for one leader: batches every partition this shard follows there
/// into one OffsetForLeaderEpoch, ListOffsets or Fetch at a time.
async fn fetcher(ctx: Rc<ShardCtx>, leader: i32) {
    let me = ctx.shared.config.node_id;
    let mut conn: Option<PeerConnection> = None;
    let backoff = Duration::from_millis(FETCHER_BACKOFF_MS);
    info!(shard = ctx.id, leader, "replica fetcher started");
    loop {
        if ctx.shutting_down.get() || !follows(&ctx, leader) {
            info!(shard = ctx.id, leader, "replica fetcher stopped");
            return;
        }
        let work = pending_for(&ctx, leader);
        if work.is_empty() {
            glommio::timer::sleep(Duration::from_millis(METADATA_POLL_MS)).await;
            continue;
        }
        if conn.is_none() {
            let catalog = ctx.shared.catalog.load();
            let Some(b) = catalog.brokers.get(&leader) else {
                glommio::timer::sleep(backoff).await;
                continue;
            };
            let addr = format!("{}:{}", b.host, b.port);
            match PeerConnection::connect(
                &addr,
                &format!("strata-replica-{me}"),
                Duration::from_millis(PEER_REQUEST_TIMEOUT_MS),
            )
            .await
            {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    debug!(leader, "replica fetcher cannot connect: {e}");
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
            send_fetch(&ctx, c, leader, &work).await
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

async fn send_epoch_requests(
    ctx: &Rc<ShardCtx>,
    conn: &mut PeerConnection,
    leader: i32,
    work: &[Pending],
) -> bool {
    let asks: Vec<(&Pending, i32)> = work
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
            .with_current_leader_epoch(w.leader_epoch)
            .with_leader_epoch(*epoch);
        match topics.iter_mut().find(|t| t.topic.as_str() == w.tp.topic) {
            Some(t) => t.partitions.push(part),
            None => topics.push(
                OffsetForLeaderTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(w.tp.topic.clone())))
                    .with_partitions(vec![part]),
            ),
        }
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
            debug!(leader, "OffsetForLeaderEpoch: {e}");
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
                    a.leader_epoch,
                    a.end_offset,
                    p.log_end(),
                    &p.epoch_cache(),
                )
            }),
        };
        run_follower_commands(ctx, &w.tp, &w.partition, leader, w.leader_epoch, cmds).await;
    }
    true
}

async fn send_list_offsets(
    ctx: &Rc<ShardCtx>,
    conn: &mut PeerConnection,
    leader: i32,
    work: &[Pending],
) -> bool {
    for w in work
        .iter()
        .filter(|w| matches!(w.cmd, FollowerCommand::SendListOffsets))
    {
        let mut bounds = [0i64; 2];
        for (slot, ts) in bounds.iter_mut().zip([-2i64, -1]) {
            let req = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(ctx.shared.config.node_id))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(w.tp.topic.clone())))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(w.tp.partition)
                        .with_current_leader_epoch(w.leader_epoch)
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
                    debug!(leader, "ListOffsets: {e}");
                    return false;
                }
            };
            let Some(p) = resp.topics.first().and_then(|t| t.partitions.first()) else {
                return false;
            };
            if p.error_code != 0 {
                return false;
            }
            *slot = p.offset;
        }
        let cmds = with_follower(ctx, &w.tp, leader, w.leader_epoch, |s, p| {
            s.handle_log_bounds(bounds[0], bounds[1], p.log_end())
        });
        run_follower_commands(ctx, &w.tp, &w.partition, leader, w.leader_epoch, cmds).await;
    }
    true
}

async fn send_fetch(
    ctx: &Rc<ShardCtx>,
    conn: &mut PeerConnection,
    leader: i32,
    work: &[Pending],
) -> bool {
    let config = &ctx.shared.config;
    let fetches: Vec<(&Pending, i64)> = work
        .iter()
        .filter_map(|w| match w.cmd {
            FollowerCommand::Fetch { offset } => Some((w, offset)),
            _ => None,
        })
        .collect();
    let mut topics: Vec<FetchTopic> = Vec::new();
    for (w, offset) in &fetches {
        let part = FetchPartition::default()
            .with_partition(w.tp.partition)
            .with_current_leader_epoch(w.leader_epoch)
            .with_fetch_offset(*offset)
            .with_log_start_offset(w.partition.log_start())
            .with_partition_max_bytes(config.replica_fetch_max_bytes);
        match topics.iter_mut().find(|t| t.topic.as_str() == w.tp.topic) {
            Some(t) => t.partitions.push(part),
            None => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(w.tp.topic.clone())))
                    .with_partitions(vec![part]),
            ),
        }
    }
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
            debug!(leader, "replica Fetch: {e}");
            return false;
        }
    };
    // Append every partition's records first, then wait for all their fsyncs at once: one
    // partition's fdatasync at a time made a follower of many partitions fall behind its
    // leader under load (each sync also waits on the shared journal).
    let mut appended: Vec<(&Pending, i64, i64, i64)> = Vec::with_capacity(fetches.len());
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
        let mut last_offset = -1;
        if !records.is_empty() && expected == Some(offset) && p.log_end() == offset {
            // A refusal (a batch the leader could not have written, a gap) is logged and the
            // fetch retried like a timeout; nothing of it is appended.
            match p.append_replica(records, w.leader_epoch) {
                Ok(out) => last_offset = out.last_offset,
                Err(e) => {
                    warn!(topic = %w.tp.topic, partition = w.tp.partition, "replica append: {e}");
                    let cmds = with_follower(ctx, &w.tp, leader, w.leader_epoch, |s, _| {
                        s.handle_timeout()
                    });
                    run_follower_commands(ctx, &w.tp, p, leader, w.leader_epoch, cmds).await;
                    continue;
                }
            }
        }
        appended.push((w, offset, last_offset, a.high_watermark));
        follow_log_start(&w.tp, p, a.log_start_offset).await;
    }
    // Followers report only what is durable: the HW the leader computes from our fetch
    // offset then never counts bytes a crash could take back.
    let durable = futures::future::join_all(appended.iter().map(|(w, _, last, _)| async move {
        if *last < 0 {
            return true;
        }
        match w.partition.wait_durable(*last).await {
            Ok(_) => true,
            Err(e) => {
                warn!(topic = %w.tp.topic, partition = w.tp.partition, "replica not durable: {e}");
                false
            }
        }
    }))
    .await;
    for ((w, offset, _, hw), durable) in appended.into_iter().zip(durable) {
        if !durable {
            continue;
        }
        let cmds = with_follower(ctx, &w.tp, leader, w.leader_epoch, |s, p| {
            s.handle_fetch_response(offset, p.log_end(), hw)
        });
        run_follower_commands(ctx, &w.tp, &w.partition, leader, w.leader_epoch, cmds).await;
    }
    true
}

/// The leader's log start moved (DeleteRecords, or its retention): move ours along, as
/// Kafka's followers do with the log start offset in every fetch response, never past our
/// own HW (only committed records are ever deleted).
async fn follow_log_start(tp: &TopicPartition, p: &Partition, leader_log_start: i64) {
    let target = leader_log_start.min(p.hw());
    if target <= p.log_start() {
        return;
    }
    if let Err(e) = p.delete_records(target).await {
        warn!(topic = %tp.topic, partition = tp.partition, target, "following the leader's log start: {e}");
    }
}

fn with_expected(ctx: &ShardCtx, tp: &TopicPartition, leader: i32, epoch: i32) -> Option<i64> {
    match ctx.replicas.roles.borrow().get(tp) {
        Some(Role::Follower(f))
            if f.state.leader() == leader && f.state.leader_epoch() == epoch =>
        {
            f.state.expected_fetch_offset()
        }
        _ => None,
    }
}

/// The OffsetForLeaderEpoch answer of a leader for one partition: (error, epoch, end offset).
pub fn epoch_end(
    ctx: &ShardCtx,
    tp: &TopicPartition,
    current_leader_epoch: i32,
    requested: i32,
) -> (Option<ErrorCode>, i32, i64) {
    match ctx.replicas.roles.borrow().get(tp) {
        Some(Role::Leader(l)) => {
            let ours = l.state.leader_epoch();
            if current_leader_epoch >= 0 && current_leader_epoch < ours {
                return (Some(ErrorCode::FencedLeaderEpoch), -1, -1);
            }
            if current_leader_epoch > ours {
                return (Some(ErrorCode::UnknownLeaderEpoch), -1, -1);
            }
            let (e, o) = l.partition.end_offset_for_epoch(requested);
            (None, e, o)
        }
        Some(Role::Follower(_)) => (Some(ErrorCode::NotLeaderOrFollower), -1, -1),
        None => (Some(ErrorCode::UnknownTopicOrPartition), -1, -1),
    }
}
