//! Replication logic: ISR, high watermark, log end offsets and leader epochs, as state
//! machines that take events and return commands; the shard carries out the I/O.
//!
//! - [`leader::LeaderState`]: one partition this broker leads — follower LEOs, the ISR
//!   (shrink, expand, one AlterPartition in flight as KIP-497 asks), the high watermark.
//! - [`follower::FollowerState`]: one partition this broker follows — validate the log
//!   against the leader with OffsetForLeaderEpoch (KIP-101/KIP-279), truncate, fetch.
//! - [`epoch_cache::EpochCache`]: the leader-epoch cache both of them rely on.
//! - [`durable_tag`]: the follower's durable end, beside its fetch offset in a Fetch.
//! - [`produce_lag::ProduceLag`]: how far acks=0/1 produce may run ahead of the HW
//!   (`replica_produce_lag_max_bytes`) before its answer waits for the followers.
//!
//! Ids are the newtypes of `protocol::ids`, so they cannot be mixed up: a replica (broker)
//! id is a `NodeId`, an offset an `Offset`, a leader epoch a `LeaderEpoch`; the partition
//! epoch (AlterPartition's version of the partition state) stays a plain `i32`, and a time is
//! `u64` milliseconds of a monotonic clock the caller passes in. The shard converts at the
//! storage and wire boundaries. Nothing here reads a clock or touches I/O, which is what lets
//! `sim.rs` run the whole protocol deterministically.
pub mod durable_tag;
pub mod epoch_cache;
pub mod follower;
pub mod leader;
pub mod produce_lag;

use crate::protocol::ids::{LeaderEpoch, NodeId, Offset};

#[cfg(test)]
mod sim;

/// What the leader asks its shard to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderCommand {
    /// The high watermark moved up to this offset: persist it lazily (a checkpoint), let
    /// consumers read below it, and complete `acks=all` produces whose last offset is below
    /// it (if the ISR still has `min.insync.replicas` members, else
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND, as Kafka does).
    AdvanceHw(Offset),
    /// Send AlterPartition to the controller proposing `new_isr`. The answer comes back as
    /// `handle_isr_committed` (accepted, or a newer metadata image) or `handle_alter_failed`.
    /// At most one is in flight per partition.
    AlterIsr {
        new_isr: Vec<NodeId>,
        leader_epoch: LeaderEpoch,
        partition_epoch: i32,
    },
}

/// What the follower asks its shard to do. Commands come in order; a `Truncate` is always
/// carried out before the `Fetch` that follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowerCommand {
    /// Send OffsetForLeaderEpoch for `epoch` (with the current leader epoch) to the leader.
    SendOffsetForLeaderEpoch { epoch: LeaderEpoch },
    /// Cut the local log so it ends at `to` (and the epoch cache with it:
    /// `truncate_from_end(to)`); the local HW drops to at most `to`.
    Truncate { to: Offset },
    /// Drop the whole local log and start it empty at `start` (the leader's log start is
    /// beyond our end, so nothing we hold can be kept).
    TruncateFully { start: Offset },
    /// Send Fetch from `offset` with the current leader epoch, reporting the durable end of
    /// the local log beside it (`durable_tag`). Append what comes back (recording each new
    /// batch epoch in the epoch cache), then call `handle_fetch_response`; the fsync follows
    /// on its own, and a later Fetch reports it.
    Fetch { offset: Offset },
    /// Ask the leader for its log start and end offsets (ListOffsets with the replica id),
    /// then call `handle_log_bounds`.
    SendListOffsets,
    /// The local high watermark moved to this offset.
    AdvanceHw(Offset),
    /// This leader or epoch is stale: stop fetching and wait for the next metadata image,
    /// which will create a new `FollowerState` (or `LeaderState`).
    AwaitMetadata,
}

/// Why a leader refused a follower's request, or why a follower's request failed. Each maps
/// to one Kafka error code in the protocol layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaError {
    /// The sender is not in the partition's replica set (NOT_LEADER_OR_FOLLOWER), or the
    /// receiver no longer leads the partition.
    #[error("not leader or follower")]
    NotLeaderOrFollower,
    /// The request carries an older leader epoch than the leader's (FENCED_LEADER_EPOCH).
    #[error("fenced leader epoch")]
    FencedLeaderEpoch,
    /// The request carries a newer leader epoch than the leader knows yet
    /// (UNKNOWN_LEADER_EPOCH): the leader's metadata lags; retry.
    #[error("unknown leader epoch")]
    UnknownLeaderEpoch,
    /// The fetch offset is past the leader's log end or before its log start
    /// (OFFSET_OUT_OF_RANGE).
    #[error("offset out of range")]
    OffsetOutOfRange,
}
