//! DeleteRecords on the leader: moves a partition's log start offset forward, up to at most
//! the high watermark.
use std::rc::Rc;

use super::{owned_partition, OffsetResult};
use crate::protocol::error::ErrorCode;
use crate::shard::{ShardCtx, TopicPartition};

/// Deletes each `(partition, offset)` in order; answers the new log start offsets.
pub async fn delete_records(
    ctx: &Rc<ShardCtx>,
    parts: Vec<(TopicPartition, i64)>,
) -> Vec<OffsetResult> {
    let mut out = Vec::with_capacity(parts.len());
    for (tp, offset) in parts {
        out.push(delete_one(ctx, &tp, offset).await);
    }
    out
}

async fn delete_one(ctx: &Rc<ShardCtx>, tp: &TopicPartition, offset: i64) -> OffsetResult {
    let err = OffsetResult::failed;
    let p = match owned_partition(ctx, tp).await {
        Ok(p) => p,
        Err(e) => return err(e),
    };
    // -1 means "up to the high watermark", as in Kafka.
    let target = if offset == -1 {
        p.high_watermark()
    } else {
        offset
    };
    if target < 0 || target > p.high_watermark() {
        return err(ErrorCode::OffsetOutOfRange);
    }
    match p.delete_records(target).await {
        Ok(low) => OffsetResult::ok(-1, low),
        Err(e) => err(e.error_code()),
    }
}
