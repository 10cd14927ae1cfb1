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
//!
//! Files, by concern: this one holds the role table and takes roles from the metadata
//! (`apply_metadata`, `metadata_loop`); `leader` is the leader role (local appends and
//! follower fetches feed `replication::leader::LeaderState`, the high watermark moves, the
//! OffsetForLeaderEpoch answer); `fetcher` is the follower side (one fetcher task per leader
//! broker driving `replication::follower::FollowerState`: validate epochs, truncate, fetch);
//! `to_controller` is what replicas tell the controller (ISR changes, offline replicas).
//!
//! This stays in `shard/` rather than beside the state machines in `replication/` because
//! it is executor glue: it spawns glommio tasks, holds peer connections and the shard's
//! context, and `replication/` must import no executor (`tests/layers.rs`).
mod fetcher;
mod leader;
mod to_controller;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

use super::ShardCtx;
use crate::cluster::catalog::PartitionMeta;
use crate::limits::{METADATA_POLL_MS, REPLICA_TICK_MS};
use crate::protocol::error::ErrorCode;
use crate::protocol::ids::{LeaderEpoch, NodeId, Offset};
use crate::replication::follower::FollowerState;
use crate::replication::leader::LeaderState;
use crate::replication::produce_lag::ProduceLag;
use crate::replication::{FollowerCommand, LeaderCommand};
use crate::shard::TopicPartition;
use crate::storage::Partition;
use fetcher::{retry_stalled_followers, start_fetchers};
pub use leader::{
    epoch_end, on_follower_fetch, on_local_append, replica_error_code, wait_committed,
    wait_committed_as_leader,
};
use leader::{run_leader_commands, tick_leaders};
use to_controller::report_offline;

pub struct LeaderRole {
    pub state: LeaderState,
    pub partition: Rc<Partition>,
    /// The topic's min.insync.replicas.
    pub min_isr: usize,
    /// Client bytes above the high watermark: acks=0/1 produce waits past
    /// `replica_produce_lag_max_bytes`.
    pub produce_lag: ProduceLag,
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
    /// Leaders this shard runs a fetcher for.
    fetchers: RefCell<HashSet<NodeId>>,
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
    /// The catalog version this shard last applied (`CatalogStore::version`); 0 before the
    /// first application.
    pub fn applied_version(&self) -> u64 {
        self.applied_version.get()
    }

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

    /// The leader epoch of `tp` if this broker leads it (a wire number: the partition
    /// service compares it with the epochs requests carry).
    pub fn leader_epoch(&self, tp: &TopicPartition) -> Option<i32> {
        match self.roles.borrow().get(tp) {
            Some(Role::Leader(l)) => Some(l.state.leader_epoch().get()),
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

    /// After a client's acks=0/1 append to `tp` (its bytes already counted in the
    /// partition's traffic): the high watermark the produce's answer must wait for, if the
    /// client bytes above the HW exceed `replica_produce_lag_max_bytes` while another replica
    /// is in the ISR. `None` if this broker does not lead `tp`, or nothing is to wait for.
    pub fn produce_lag_target(&self, tp: &TopicPartition) -> Option<i64> {
        match self.roles.borrow_mut().get_mut(tp) {
            Some(Role::Leader(l)) => {
                let followers_in_isr = l.state.isr().len() > 1;
                let (bytes, _, _) = l.partition.traffic.get();
                l.produce_lag
                    .on_append(
                        Offset(l.partition.log_end_offset()),
                        bytes,
                        l.state.high_watermark(),
                        followers_in_isr,
                    )
                    .map(Offset::get)
            }
            _ => None,
        }
    }

    /// Whether an acks=0/1 produce waiting for `tp`'s followers (`produce_lag_target`) must
    /// go on waiting: this broker still leads `tp` at `leader_epoch` with another replica in
    /// the ISR. A lost leadership or a shrunk ISR ends the wait.
    pub fn produce_lag_holds(&self, tp: &TopicPartition, leader_epoch: i32) -> bool {
        match self.roles.borrow().get(tp) {
            Some(Role::Leader(l)) => {
                l.state.leader_epoch().get() == leader_epoch && l.state.isr().len() > 1
            }
            _ => false,
        }
    }

    /// The high watermark a leader reports.
    pub fn leader_hw(&self, tp: &TopicPartition) -> Option<i64> {
        match self.roles.borrow().get(tp) {
            Some(Role::Leader(l)) => Some(l.state.high_watermark().get()),
            _ => None,
        }
    }

    /// For the metrics: `Some(under-replicated)` if this broker leads `tp`.
    pub fn led_under_replicated(&self, tp: &TopicPartition) -> Option<bool> {
        match self.roles.borrow().get(tp) {
            Some(Role::Leader(l)) => Some(l.state.isr().len() < l.state.replicas().len()),
            _ => None,
        }
    }

    /// Replicas assigned here whose log is offline.
    pub fn offline_count(&self) -> usize {
        self.offline.borrow().len()
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

/// Applies the latest metadata image to this shard if it changed since the last one.
pub async fn apply_metadata(ctx: &Rc<ShardCtx>) {
    let _guard = ctx.replicas.applying.lock().await;
    let version = ctx.shared.catalog.version();
    if version == ctx.replicas.applied_version.get() && version != 0 {
        return;
    }
    let catalog = ctx.shared.catalog.load();
    let me = NodeId(catalog.local_node);
    // A topic deleted and created again under the same name since this shard opened its
    // log (both changes may arrive in one image): the open log is the old topic's, and must
    // go before the new topic's opens in a fresh directory of the same name.
    for (topic, i, p) in ctx.stale_partitions(&catalog) {
        forget_replica(ctx, &topic, i, p, "of a topic deleted and created again").await;
    }
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
                .open_partition(&tp.topic, tp.partition, topic.id, config.clone())
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
            let ineligible: Vec<NodeId> = pm
                .replicas
                .iter()
                .copied()
                .filter(|r| !live.contains(r))
                .map(NodeId)
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
        forget_replica(ctx, &topic, i, p, "no longer assigned here").await;
    }
    super::groups::on_metadata(ctx, &catalog);
    start_fetchers(ctx, &catalog);
    ctx.replicas.applied_version.set(version);
}

/// Drops this shard's replica of `topic`-`i` (its role, the coordinator it hosted) and
/// deletes its log.
async fn forget_replica(ctx: &Rc<ShardCtx>, topic: &str, i: i32, p: Rc<Partition>, why: &str) {
    let tp = TopicPartition {
        topic: topic.to_string(),
        partition: i,
    };
    let was = ctx.replicas.roles.borrow_mut().remove(&tp);
    if matches!(was, Some(Role::Leader(_))) && topic == crate::group::OFFSETS_TOPIC {
        super::groups::resign(ctx, i);
    }
    if matches!(was, Some(Role::Leader(_))) && topic == crate::txn::TRANSACTION_STATE_TOPIC {
        super::txns::resign(ctx, i);
    }
    ctx.remove_partition(topic, i);
    info!(topic = %topic, partition = i, "deleting replica {why}");
    if let Err(e) = p.delete().await {
        warn!("deleting {topic}-{i}: {e}");
    }
    ctx.shared.release_dir(&ctx.shared.partition_dir(topic, i));
}

/// Takes the role `pm` gives this broker for `tp`, if it is not already in it.
fn update_role(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    p: &Rc<Partition>,
    pm: &PartitionMeta,
    me: NodeId,
    min_isr: usize,
    ineligible: Vec<NodeId>,
) {
    let now = ctx.shared.clock.monotonic_ms();
    let lag = ctx.shared.config.replica_lag_time_max_ms;
    let is_offsets = tp.topic == crate::group::OFFSETS_TOPIC;
    let is_txn_state = tp.topic == crate::txn::TRANSACTION_STATE_TOPIC;
    // The metadata's numbers, typed once here.
    let (leader, leader_epoch) = (NodeId(pm.leader), LeaderEpoch(pm.leader_epoch));
    let mut roles = ctx.replicas.roles.borrow_mut();
    let current = roles.get_mut(tp);
    if leader == me {
        if let Some(Role::Leader(l)) = current {
            if l.state.leader_epoch() == leader_epoch {
                l.min_isr = min_isr;
                l.state.set_ineligible(ineligible);
                if pm.partition_epoch > l.state.partition_epoch() {
                    let cmds = l.state.handle_partition_change(
                        NodeId::from_wire_list(&pm.replicas),
                        NodeId::from_wire_list(&pm.isr),
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
        let leo = Offset(p.log_end_offset());
        if let Err(e) = p.set_leader_epoch(pm.leader_epoch) {
            // Leading would stamp an epoch the log contradicts: stay off (clients hear
            // NOT_LEADER_OR_FOLLOWER) until metadata or an operator resolves it.
            error!(topic = %tp.topic, partition = tp.partition, "cannot lead: {e}");
            roles.remove(tp);
            return;
        }
        let hw = Offset(p.high_watermark()).min(leo);
        let mut state = LeaderState::new(
            me,
            leader_epoch,
            pm.partition_epoch,
            NodeId::from_wire_list(&pm.replicas),
            NodeId::from_wire_list(&pm.isr),
            leo,
            hw,
            leo,
            now,
            lag,
        );
        state.set_ineligible(ineligible);
        info!(topic = %tp.topic, partition = tp.partition, epoch = pm.leader_epoch, %leo, %hw, "leading");
        roles.insert(
            tp.clone(),
            Role::Leader(LeaderRole {
                state,
                partition: p.clone(),
                min_isr,
                produce_lag: ProduceLag::new(
                    ctx.shared.config.replica_produce_lag_max_bytes,
                    crate::limits::PRODUCE_LAG_MARKS_MAX,
                ),
            }),
        );
        drop(roles);
        // With no other replica in the ISR the high watermark is our log end at once.
        on_local_append(ctx, tp);
        if is_offsets {
            super::groups::become_coordinator(ctx, tp.partition);
        }
        if is_txn_state {
            super::txns::become_coordinator(ctx, tp.partition, pm.leader_epoch);
        }
        return;
    }
    if let Some(Role::Follower(f)) = current {
        if f.state.leader() == leader && f.state.leader_epoch() == leader_epoch {
            return;
        }
    }
    let was_leader = matches!(roles.get(tp), Some(Role::Leader(_)));
    let (state, first) = FollowerState::new(
        leader,
        leader_epoch,
        Offset(p.log_end_offset()),
        Offset(p.high_watermark()),
        p.latest_epoch().map(LeaderEpoch),
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
    if was_leader && is_txn_state {
        super::txns::resign(ctx, tp.partition);
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
