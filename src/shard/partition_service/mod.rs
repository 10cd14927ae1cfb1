//! The partition service: what a shard does to the partitions it owns, on behalf of a
//! request that may have arrived on any shard (the mesh brings it here as a `ShardOp`).
//! One file per concern: produce (validate, append with staging waits, acks) and the
//! per-partition order of its waiting appends, fetch and the long-poll wait, list offsets
//! (timestamp lookup), delete records, leader-epoch ends, log dirs (size and cleaner state),
//! transaction markers (WriteTxnMarkers), and the partitions' lifecycle (open, drop,
//! reconfigure).
//!
//! Every operation answers per partition, in the order it was asked, with the error code a
//! client should see; none of them touches another shard's partitions.
pub mod append_order;
pub mod delete_records;
pub mod describe_producers;
pub mod epoch_ends;
pub mod fetch;
pub mod lifecycle;
pub mod list_offsets;
pub mod log_dirs;
pub mod produce;
pub mod write_markers;

use std::rc::Rc;

use crate::protocol::error::ErrorCode;
use crate::shard::{ShardCtx, TopicPartition};
use crate::storage::Partition;

#[derive(Debug, Clone)]
pub struct OffsetResult {
    pub error: Option<ErrorCode>,
    pub timestamp: i64,
    pub offset: i64,
    /// ListOffsets v4+: the leader epoch of the offset answered (-1 when unknown).
    pub leader_epoch: i32,
}

impl OffsetResult {
    pub fn failed(e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            timestamp: -1,
            offset: -1,
            leader_epoch: -1,
        }
    }
    pub fn ok(timestamp: i64, offset: i64) -> Self {
        Self {
            error: None,
            timestamp,
            offset,
            leader_epoch: -1,
        }
    }
    fn with_leader_epoch(self, leader_epoch: Option<i32>) -> Self {
        Self {
            leader_epoch: leader_epoch.unwrap_or(-1),
            ..self
        }
    }
    /// The wire error code (0 for success).
    pub fn code(&self) -> i16 {
        self.error.map(|e| e.code()).unwrap_or(0)
    }
}

/// The local partition for `tp`, or the error code a client should see.
async fn owned_partition(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
) -> Result<Rc<Partition>, ErrorCode> {
    if ctx.replicas.offline_reason(tp).is_some() {
        return Err(ErrorCode::KafkaStorageError);
    }
    match ctx.partition(&tp.topic, tp.partition).await {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(ErrorCode::UnknownTopicOrPartition),
        Err(e) => Err(e.error_code()),
    }
}

/// A client request for `tp` is served by its leader, in the leader epoch the client names
/// (KIP-320): an older one is fenced, a newer one means our metadata lags.
pub fn check_leader_epoch(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    current_leader_epoch: i32,
) -> Result<(), ErrorCode> {
    let Some(ours) = ctx.replicas.leader_epoch(tp) else {
        return Err(ErrorCode::NotLeaderOrFollower);
    };
    if current_leader_epoch >= 0 && current_leader_epoch < ours {
        return Err(ErrorCode::FencedLeaderEpoch);
    }
    if current_leader_epoch > ours {
        return Err(ErrorCode::UnknownLeaderEpoch);
    }
    Ok(())
}
