//! ListOffsets on the leader: the log start, the high watermark (the last stable offset for
//! `read_committed`), the largest timestamp, or the first record stamped at or after a
//! timestamp (below the same bound), each with the leader epoch Kafka gives it.
use std::rc::Rc;

use super::fetch::Isolation;
use super::{owned_partition, OffsetResult};
use crate::protocol::error::ErrorCode;
use crate::shard::{ShardCtx, TopicPartition};
use crate::storage::Partition;

/// What ListOffsets asks of one partition.
#[derive(Debug, Clone, Copy)]
pub struct OffsetQuery {
    /// A timestamp, or one of the special values below.
    pub timestamp: i64,
    pub isolation: Isolation,
}

/// Answers each `(partition, query)` in order.
pub async fn list_offsets(
    ctx: &Rc<ShardCtx>,
    parts: Vec<(TopicPartition, OffsetQuery)>,
) -> Vec<OffsetResult> {
    let mut out = Vec::with_capacity(parts.len());
    for (tp, q) in parts {
        out.push(list_offset(ctx, &tp, q).await);
    }
    out
}

/// Kafka's special ListOffsets timestamps.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;

async fn list_offset(ctx: &Rc<ShardCtx>, tp: &TopicPartition, q: OffsetQuery) -> OffsetResult {
    let ts = q.timestamp;
    let err = OffsetResult::failed;
    let p = match owned_partition(ctx, tp).await {
        Ok(p) => p,
        Err(e) => return err(e),
    };
    // Each answer carries the leader epoch Kafka gives it: the current one for the high
    // watermark, the one the offset was written in otherwise (a consumer validates its
    // position against it after a leader change, KIP-320).
    let ok = OffsetResult::ok;
    let not_found = || ok(-1, -1);
    // What this consumer may read: Kafka's `lastFetchableOffset`.
    let fetchable = match q.isolation {
        Isolation::ReadCommitted => p.last_stable_offset(),
        Isolation::ReadUncommitted => p.high_watermark(),
    };
    let bounded = |r: OffsetResult| {
        if r.error.is_none() && r.offset >= fetchable {
            not_found()
        } else {
            r
        }
    };
    match ts {
        LATEST_TIMESTAMP => ok(-1, fetchable).with_leader_epoch(ctx.replicas.leader_epoch(tp)),
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
            let start = p.log_start_offset();
            ok(-1, start).with_leader_epoch(p.epoch_for_offset(start))
        }
        // The first record stamped with the largest timestamp (Kafka since KAFKA-16310),
        // found the way a timestamp lookup finds it.
        MAX_TIMESTAMP => match p.max_timestamp() {
            Some((t, _)) => bounded(timestamp_lookup(&p, t).await),
            None => not_found(),
        },
        t if t >= 0 => bounded(timestamp_lookup(&p, t).await),
        _ => err(ErrorCode::InvalidRequest),
    }
}

/// The first record stamped at or after `ts`, with the epoch it was written in.
async fn timestamp_lookup(p: &Partition, ts: i64) -> OffsetResult {
    match p.offset_for_timestamp(ts).await {
        Ok(Some(found)) => OffsetResult::ok(found.timestamp, found.offset)
            .with_leader_epoch(Some(found.leader_epoch)),
        Ok(None) => OffsetResult::ok(-1, -1),
        Err(e) => OffsetResult::failed(e.error_code()),
    }
}
