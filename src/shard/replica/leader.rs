//! The leader role: local appends and follower fetches feed `LeaderState` (follower LEOs,
//! ISR shrink and expand, the high watermark), its commands are carried out here, and a
//! leader answers OffsetForLeaderEpoch from its epoch cache.
use std::rc::Rc;
use std::time::Instant;

use tracing::debug;

use super::to_controller::alter_isr;
use super::Role;
use crate::protocol::error::ErrorCode;
use crate::protocol::ids::{LeaderEpoch, NodeId, Offset};
use crate::replication::{LeaderCommand, ReplicaError};
use crate::shard::ShardCtx;
use crate::shard::TopicPartition;
use crate::storage::Partition;

/// The leader's log grew (an append): count it towards the high watermark.
pub fn on_local_append(ctx: &Rc<ShardCtx>, tp: &TopicPartition) {
    let now = ctx.shared.clock.monotonic_ms();
    if let Some((p, cmds)) = ctx.replicas.leader_commands(tp, |s, p| {
        s.handle_local_leo(Offset(p.log_end_offset()), now)
    }) {
        run_leader_commands(ctx, tp, &p, cmds);
    }
}

/// A follower's Fetch reached this leader: record its progress, its log end
/// (`fetch_offset`) and its durable end (`durable_offset`, `replication::durable_tag`). The
/// error is the one the follower must see. The arguments are the request's wire numbers.
/// A newer durable end moves the HW here, before the fetch waits for data, so acks=all
/// produces it completes are answered at once, not when the long poll ends.
pub fn on_follower_fetch(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    replica: i32,
    fetch_offset: i64,
    durable_offset: i64,
    current_leader_epoch: i32,
) -> Result<i64, ErrorCode> {
    let now = ctx.shared.clock.monotonic_ms();
    let mut outcome = Err(ErrorCode::NotLeaderOrFollower);
    let cmds = ctx.replicas.leader_commands(tp, |s, p| {
        // Our own log end first, so a follower at the end counts as caught up.
        let mut cmds = s.handle_local_leo(Offset(p.log_end_offset()), now);
        match s.handle_follower_fetch(
            NodeId(replica),
            Offset(fetch_offset),
            Offset(durable_offset),
            LeaderEpoch(current_leader_epoch),
            now,
        ) {
            Ok(more) => {
                cmds.extend(more);
                outcome = Ok(s.high_watermark());
            }
            Err(e) => outcome = Err(replica_error_code(e)),
        }
        cmds
    });
    debug!(topic = %tp.topic, partition = tp.partition, replica, fetch_offset, durable_offset, ?outcome, "follower fetch");
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

pub(super) fn run_leader_commands(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    p: &Rc<Partition>,
    cmds: Vec<LeaderCommand>,
) {
    for cmd in cmds {
        match cmd {
            LeaderCommand::AdvanceHw(hw) => p.set_hw(hw.get().min(p.log_end_offset())),
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

/// Waits until `last_offset` is committed (below the high watermark), or `deadline`.
pub async fn wait_committed(p: &Partition, last_offset: i64, deadline: Instant) -> bool {
    p.wait_for_hw_beyond(last_offset, deadline).await > last_offset
}

/// A coordinator's acks=all append (`__consumer_offsets`, `__transaction_state`): waits until
/// `last_offset` is committed, then requires that this broker still leads `tp` at
/// `leader_epoch`, the epoch it appended under (`None`: it did not lead, so never committed).
/// A leader that lost its partition meanwhile (paused, cut off) becomes a follower, truncates
/// its own record away and then sees its high watermark pass `last_offset` on the new
/// leader's history: acknowledging then reports a write the new leader never had. Kafka's
/// delayed produce answers NOT_LEADER_OR_FOLLOWER once the partition is not led here.
pub async fn wait_committed_as_leader(
    ctx: &ShardCtx,
    tp: &TopicPartition,
    p: &Partition,
    last_offset: i64,
    leader_epoch: Option<i32>,
    deadline: Instant,
) -> bool {
    if leader_epoch.is_none() {
        return false;
    }
    wait_committed(p, last_offset, deadline).await && ctx.replicas.leader_epoch(tp) == leader_epoch
}

/// Leaders check their own log end and their followers' lag (ISR shrink).
pub(super) fn tick_leaders(ctx: &Rc<ShardCtx>) {
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
            let mut c = s.handle_local_leo(Offset(p.log_end_offset()), now);
            c.extend(s.handle_tick(now));
            c
        }) {
            run_leader_commands(ctx, &tp, &p, cmds);
        }
    }
}

/// The OffsetForLeaderEpoch answer of a leader for one partition: the epoch found at or below
/// `requested` and the offset where it ends.
pub fn epoch_end(
    ctx: &ShardCtx,
    tp: &TopicPartition,
    current_leader_epoch: i32,
    requested: i32,
) -> Result<(i32, i64), ErrorCode> {
    match ctx.replicas.roles.borrow().get(tp) {
        Some(Role::Leader(l)) => {
            let ours = l.state.leader_epoch().get();
            if current_leader_epoch >= 0 && current_leader_epoch < ours {
                return Err(ErrorCode::FencedLeaderEpoch);
            }
            if current_leader_epoch > ours {
                return Err(ErrorCode::UnknownLeaderEpoch);
            }
            Ok(l.partition.end_offset_for_epoch(requested))
        }
        Some(Role::Follower(_)) => Err(ErrorCode::NotLeaderOrFollower),
        None => Err(ErrorCode::UnknownTopicOrPartition),
    }
}
