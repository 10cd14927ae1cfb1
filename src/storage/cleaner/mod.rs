//! Log compaction (`cleanup.policy=compact`): Kafka's log cleaner.
//!
//! A pass over one log: map the keys of its dirty section to their last offset
//! ([`OffsetMap`], bounded by `log.cleaner.dedupe.buffer.size`; when it fills, the pass
//! covers only the prefix it mapped), then rewrite every closed segment below the mapped end
//! keeping, per key, only its last record ([`filter_batch`]); offsets never change. Which
//! log goes next, and which segments merge into one cleaned segment, is [`plan`].
//!
//! This module is sans-IO: batches in, batches out. The shard's cleaner task does the reads,
//! the rate limiting and the crash-safe swap of the rewritten segments.

pub mod filter;
pub mod fuzz;
pub mod offset_map;
pub mod pace;
pub mod plan;
pub mod txn;

#[cfg(test)]
mod tests;

pub use filter::{filter_batch, map_batch, FilterContext, FilterStats, Filtered, Mapped};
pub use offset_map::OffsetMap;
pub use pace::{DiskYield, Turn};
pub use plan::{choose_dirtiest, cleanable, group_segments, Cleanable, LogSummary, SegmentSummary};
pub use txn::TxnTracker;

use crate::protocol::record_batch::{BatchIter, RecordsError};

/// One batch written by [`filter_segment`]: where it sits in the output and what an index
/// entry needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenBatch {
    pub position: usize,
    pub len: usize,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
}

/// Filters a buffer of whole batches (a segment, or a chunk of one) into `out`, appending
/// the survivors in order, and returns what was written.
pub fn filter_segment(
    batches: &[u8],
    ctx: &FilterContext<'_>,
    txns: &mut TxnTracker,
    stats: &mut FilterStats,
    out: &mut Vec<u8>,
) -> Result<Vec<WrittenBatch>, RecordsError> {
    let mut written = Vec::new();
    for item in BatchIter::new(batches) {
        let (at, header) = item?;
        let batch = batches.get(at..at + header.total_len()).unwrap_or_default();
        let position = out.len();
        let header = match filter_batch(batch, ctx, txns, stats)? {
            Filtered::Drop => continue,
            Filtered::Keep => {
                out.extend_from_slice(batch);
                header
            }
            Filtered::Rewrite(bytes) => {
                out.extend_from_slice(&bytes);
                crate::protocol::record_batch::validate(&bytes)?
            }
        };
        written.push(WrittenBatch {
            position,
            len: out.len() - position,
            base_offset: header.base_offset,
            last_offset: header.last_offset(),
            max_timestamp: header.max_timestamp,
        });
    }
    Ok(written)
}
