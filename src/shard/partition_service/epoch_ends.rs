//! OffsetForLeaderEpoch on the leader: the largest leader epoch at or below the one asked
//! about, and the offset where it ends (a follower truncates there after a leader change).
use std::rc::Rc;

use crate::protocol::error::ErrorCode;
use crate::shard::{replica, ShardCtx, TopicPartition};

/// One partition's question: the epoch asked about, in the leader epoch the requester
/// believes current (-1: no check).
#[derive(Debug, Clone, Copy)]
pub struct EpochQuery {
    pub current_leader_epoch: i32,
    pub leader_epoch: i32,
}

/// One partition's answer: the epoch found and where it ends, or the error.
#[derive(Debug, Clone)]
pub struct EpochEndResult {
    pub error: Option<ErrorCode>,
    pub leader_epoch: i32,
    pub end_offset: i64,
}

impl EpochEndResult {
    pub fn failed(e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            leader_epoch: -1,
            end_offset: -1,
        }
    }

    /// The wire error code (0 for success).
    pub fn code(&self) -> i16 {
        self.error.map(|e| e.code()).unwrap_or(0)
    }
}

/// Answers each part in order.
pub fn epoch_ends(
    ctx: &Rc<ShardCtx>,
    parts: Vec<(TopicPartition, EpochQuery)>,
) -> Vec<EpochEndResult> {
    parts
        .into_iter()
        .map(
            |(tp, q)| match replica::epoch_end(ctx, &tp, q.current_leader_epoch, q.leader_epoch) {
                Ok((leader_epoch, end_offset)) => EpochEndResult {
                    error: None,
                    leader_epoch,
                    end_offset,
                },
                Err(e) => EpochEndResult::failed(e),
            },
        )
        .collect()
}
