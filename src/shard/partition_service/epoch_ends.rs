//! OffsetForLeaderEpoch on the leader: the largest leader epoch at or below the one asked
//! about, and the offset where it ends (a follower truncates there after a leader change).
use std::rc::Rc;

use super::OffsetResult;
use crate::shard::{replica, ShardCtx, TopicPartition};

/// Answers each part in order; the arguments are packed by `server::route::pack_epochs`, and
/// each answer's epoch travels in `OffsetResult.timestamp`.
pub fn epoch_ends(ctx: &Rc<ShardCtx>, parts: Vec<(TopicPartition, i64)>) -> Vec<OffsetResult> {
    parts
        .into_iter()
        .map(|(tp, arg)| {
            let (current, requested) = crate::server::route::unpack_epochs(arg);
            match replica::epoch_end(ctx, &tp, current, requested) {
                (Some(e), _, _) => OffsetResult::failed(e),
                (None, epoch, offset) => OffsetResult::ok(epoch as i64, offset),
            }
        })
        .collect()
}
