//! What to clean, as pure arithmetic over segment summaries (Kafka's `LogCleanerManager`):
//! each compacted log's clean and cleanable sections, its dirty ratio, which log is the
//! dirtiest, and how its segments are grouped into cleaned segments.
//!
//! - The clean section is `[log start, first dirty)`; `first dirty` is the cleaner's
//!   checkpoint (the end of the last pass), reset to the log start when it falls outside
//!   the log.
//! - The cleanable section ends at the first uncleanable offset: the active segment's base
//!   (the active segment is never cleaned), and, with `min.compaction.lag.ms`, the first
//!   dirty segment holding a record younger than the lag.
//! - dirty ratio = cleanable bytes / (clean + cleanable bytes). A log is cleaned when its
//!   ratio exceeds `min.cleanable.dirty.ratio`, or when its oldest dirty record is older than
//!   `max.compaction.lag.ms` (then regardless of the ratio); the highest ratio goes first.

use std::ops::Range;

/// What the planner needs of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentSummary {
    pub base_offset: i64,
    /// One past the last offset the segment covers.
    pub next_offset: i64,
    pub size_bytes: u64,
    /// Largest record timestamp in the segment (-1 if unknown or empty).
    pub max_timestamp: i64,
    /// Timestamp of the segment's first batch (-1 if unknown).
    pub first_timestamp: i64,
}

/// One compacted log as the planner sees it. `segments` are in offset order; the last one
/// is the active segment.
#[derive(Debug, Clone)]
pub struct LogSummary<'a> {
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    /// The last stable offset (at most the high watermark). Records at or past the high
    /// watermark may still be truncated away, and past the first open transaction's first
    /// offset may still be aborted: the segment holding it is not cleaned (Kafka cleans below
    /// the first unstable offset), so no record is ever removed because of a later one a
    /// truncation could take back, and every transaction the cleaner sees is decided.
    pub last_stable_offset: i64,
    /// Where the last pass ended (`None` before the first pass).
    pub checkpoint: Option<i64>,
    pub segments: &'a [SegmentSummary],
    pub min_compaction_lag_ms: i64,
    pub max_compaction_lag_ms: i64,
}

/// A log's cleanable range and sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cleanable {
    pub first_dirty_offset: i64,
    pub first_uncleanable_offset: i64,
    pub clean_bytes: u64,
    pub cleanable_bytes: u64,
    /// Its oldest dirty record is past `max.compaction.lag.ms`.
    pub overdue: bool,
}

impl Cleanable {
    /// cleanable / (clean + cleanable); 0 for an empty log.
    pub fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.cleanable_bytes;
        if total == 0 {
            0.0
        } else {
            self.cleanable_bytes as f64 / total as f64
        }
    }

    /// Kafka's condition for cleaning now.
    pub fn should_clean(&self, min_cleanable_dirty_ratio: f64) -> bool {
        self.cleanable_bytes > 0 && (self.overdue || self.dirty_ratio() > min_cleanable_dirty_ratio)
    }
}

/// The cleanable range of one log at wall time `now_ms`.
pub fn cleanable(log: &LogSummary<'_>, now_ms: i64) -> Cleanable {
    let first_dirty_offset = match log.checkpoint {
        Some(c) if c >= log.log_start_offset && c <= log.log_end_offset => c,
        _ => log.log_start_offset,
    };
    let (closed, active) = match log.segments.split_last() {
        Some((active, closed)) => (closed, Some(active)),
        None => (log.segments, None),
    };
    let mut first_uncleanable_offset = active.map_or(log.log_end_offset, |a| a.base_offset);
    if let Some(unstable) = closed
        .iter()
        .find(|s| s.next_offset > log.last_stable_offset)
    {
        first_uncleanable_offset = first_uncleanable_offset.min(unstable.base_offset);
    }
    let dirty_closed = || closed.iter().filter(|s| s.next_offset > first_dirty_offset);
    if log.min_compaction_lag_ms > 0 {
        let young_after = now_ms.saturating_sub(log.min_compaction_lag_ms);
        if let Some(young) = dirty_closed().find(|s| s.max_timestamp > young_after) {
            first_uncleanable_offset = first_uncleanable_offset.min(young.base_offset);
        }
    }
    let first_uncleanable_offset = first_uncleanable_offset.max(first_dirty_offset);
    let overlaps =
        |s: &&SegmentSummary, from: i64, to: i64| s.next_offset > from && s.base_offset < to;
    let clean_bytes = log
        .segments
        .iter()
        .filter(|s| overlaps(s, log.log_start_offset, first_dirty_offset))
        .map(|s| s.size_bytes)
        .sum();
    let cleanable_bytes = log
        .segments
        .iter()
        .filter(|s| overlaps(s, first_dirty_offset, first_uncleanable_offset))
        .map(|s| s.size_bytes)
        .sum();
    let overdue = log.max_compaction_lag_ms > 0
        && log.max_compaction_lag_ms < i64::MAX
        && dirty_closed()
            .next()
            .filter(|s| s.base_offset < first_uncleanable_offset)
            .is_some_and(|s| {
                s.first_timestamp >= 0
                    && s.first_timestamp < now_ms.saturating_sub(log.max_compaction_lag_ms)
            });
    Cleanable {
        first_dirty_offset,
        first_uncleanable_offset,
        clean_bytes,
        cleanable_bytes,
        overdue,
    }
}

/// The dirtiest of the logs that should be cleaned now: `(id, cleanable, min ratio)` per
/// log. Ties go to the first.
pub fn choose_dirtiest<K>(
    logs: impl IntoIterator<Item = (K, Cleanable, f64)>,
) -> Option<(K, Cleanable)> {
    let mut best: Option<(K, Cleanable)> = None;
    for (id, c, min_ratio) in logs {
        if !c.should_clean(min_ratio) {
            continue;
        }
        if best
            .as_ref()
            .is_none_or(|(_, b)| c.dirty_ratio() > b.dirty_ratio())
        {
            best = Some((id, c));
        }
    }
    best
}

/// Groups the segments that one pass rewrites — those starting below `end_offset` — into
/// runs that each become one cleaned segment (Kafka's `groupSegmentsBySize`): consecutive
/// segments while their total size stays within `segment_bytes_max` and their offsets
/// within what a segment's 4-byte relative offsets address. Returns index ranges into
/// `segments`; a segment larger than the bound is a group of its own.
pub fn group_segments(
    segments: &[SegmentSummary],
    end_offset: i64,
    segment_bytes_max: u64,
) -> Vec<Range<usize>> {
    let count = segments
        .iter()
        .take_while(|s| s.base_offset < end_offset)
        .count();
    let mut groups = Vec::new();
    let mut start = 0usize;
    while start < count {
        let Some(first) = segments.get(start) else {
            break;
        };
        let mut end = start + 1;
        let mut bytes = first.size_bytes;
        while let Some(next) = segments.get(end).filter(|_| end < count) {
            let offsets_fit = next.next_offset - 1 - first.base_offset <= i32::MAX as i64;
            if bytes + next.size_bytes > segment_bytes_max || !offsets_fit {
                break;
            }
            bytes += next.size_bytes;
            end += 1;
        }
        groups.push(start..end);
        start = end;
    }
    groups
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn seg(base: i64, next: i64, size: u64, max_ts: i64) -> SegmentSummary {
        SegmentSummary {
            base_offset: base,
            next_offset: next,
            size_bytes: size,
            max_timestamp: max_ts,
            first_timestamp: max_ts,
        }
    }

    fn log(segments: &[SegmentSummary], checkpoint: Option<i64>) -> LogSummary<'_> {
        LogSummary {
            log_start_offset: segments[0].base_offset,
            log_end_offset: segments.last().unwrap().next_offset,
            last_stable_offset: segments.last().unwrap().next_offset,
            checkpoint,
            segments,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
        }
    }

    /// Proves the active segment is never cleanable, the checkpoint splits clean from dirty,
    /// and a checkpoint outside the log falls back to the log start.
    #[test]
    fn sections_and_ratio() {
        let segs = [
            seg(0, 10, 100, 1),
            seg(10, 20, 100, 2),
            seg(20, 30, 100, 3),
            seg(30, 35, 50, 4),
        ];
        let c = cleanable(&log(&segs, None), 100);
        assert_eq!((c.first_dirty_offset, c.first_uncleanable_offset), (0, 30));
        assert_eq!((c.clean_bytes, c.cleanable_bytes), (0, 300));
        assert_eq!(c.dirty_ratio(), 1.0);
        let c = cleanable(&log(&segs, Some(20)), 100);
        assert_eq!((c.clean_bytes, c.cleanable_bytes), (200, 100));
        assert!((c.dirty_ratio() - 1.0 / 3.0).abs() < 1e-9);
        assert!(c.should_clean(0.3) && !c.should_clean(0.5));
        let c = cleanable(&log(&segs, Some(99)), 100);
        assert_eq!(c.first_dirty_offset, 0);
        let c = cleanable(&log(&segs, Some(30)), 100);
        assert_eq!(c.cleanable_bytes, 0);
        assert!(!c.should_clean(0.0));
    }

    /// Proves the segment holding the last stable offset (the high watermark, or an open
    /// transaction's first offset) and everything after it stay dirty: uncommitted records
    /// (which a truncation may take back) and undecided transactions never decide what goes.
    #[test]
    fn uncommitted_segments_are_not_cleanable() {
        let segs = [
            seg(0, 10, 100, 1),
            seg(10, 20, 100, 2),
            seg(20, 30, 100, 3),
            seg(30, 35, 50, 4),
        ];
        let mut l = log(&segs, None);
        for (stable, first_uncleanable) in [(35, 30), (30, 30), (25, 20), (10, 10), (0, 0)] {
            l.last_stable_offset = stable;
            let c = cleanable(&l, 100);
            assert_eq!(
                c.first_uncleanable_offset, first_uncleanable,
                "lso {stable}"
            );
        }
    }

    /// Proves min.compaction.lag.ms stops the cleanable section at the first segment holding
    /// a record younger than the lag, and max.compaction.lag.ms marks a log overdue so it is
    /// chosen below the ratio.
    #[test]
    fn compaction_lags() {
        let segs = [
            seg(0, 10, 100, 1_000),
            seg(10, 20, 100, 5_000),
            seg(20, 30, 100, 9_000),
            seg(30, 31, 1, 9_500),
        ];
        let mut l = log(&segs, Some(0));
        l.min_compaction_lag_ms = 4_000;
        let c = cleanable(&l, 10_000);
        assert_eq!(c.first_uncleanable_offset, 20);
        l.min_compaction_lag_ms = 0;
        l.max_compaction_lag_ms = 5_000;
        let c = cleanable(&l, 10_000);
        assert!(c.overdue);
        let mut checkpointed = log(&segs, Some(20));
        checkpointed.max_compaction_lag_ms = 5_000;
        let c = cleanable(&checkpointed, 10_000);
        assert!(!c.overdue);
        assert!(!c.should_clean(0.5));
    }

    /// Proves the dirtiest eligible log wins and ineligible ones are skipped.
    #[test]
    fn dirtiest_wins() {
        let mk = |clean, dirty| Cleanable {
            first_dirty_offset: 0,
            first_uncleanable_offset: 1,
            clean_bytes: clean,
            cleanable_bytes: dirty,
            overdue: false,
        };
        let logs = vec![
            ("a", mk(50, 50), 0.5),
            ("b", mk(10, 90), 0.5),
            ("c", mk(1, 99), 0.995),
        ];
        assert_eq!(choose_dirtiest(logs).map(|(k, _)| k), Some("b"));
        assert!(choose_dirtiest(vec![("a", mk(90, 10), 0.5)]).is_none());
    }

    /// Proves grouping stops at the end offset, at the size bound and never splits a
    /// segment.
    #[test]
    fn grouping() {
        let segs = [
            seg(0, 10, 40, 1),
            seg(10, 20, 40, 1),
            seg(20, 30, 40, 1),
            seg(30, 40, 200, 1),
            seg(40, 50, 10, 1),
        ];
        assert_eq!(group_segments(&segs, 45, 100), vec![0..2, 2..3, 3..4, 4..5]);
        assert_eq!(group_segments(&segs, 30, 1000), vec![0..3]);
        assert_eq!(group_segments(&segs, 0, 1000), Vec::<Range<usize>>::new());
    }
}
