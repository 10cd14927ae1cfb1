//! Which closed segments retention deletes, as a pure function over segment summaries.
//!
//! Kafka's rules: by `retention.ms`, a segment whose largest timestamp is older than
//! `now - retention.ms`; by `retention.bytes`, the oldest segments while the log would stay
//! at or above the limit without them. Only a prefix of the log is ever deleted (the log
//! stays contiguous) and never the active segment.

use super::LogConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentSummary {
    pub size: u64,
    pub max_timestamp: i64,
    /// Sealed and fully on disk; anything else stops the prefix.
    pub deletable: bool,
}

/// Number of leading segments to delete. `segments` is in offset order and includes the
/// active segment last.
pub(crate) fn segments_to_delete(
    segments: &[SegmentSummary],
    config: &LogConfig,
    now_ms: i64,
) -> usize {
    let Some((_, closed)) = segments.split_last() else {
        return 0;
    };
    let mut total: u64 = segments.iter().map(|s| s.size).sum();
    let mut n = 0;
    for s in closed {
        if !s.deletable {
            break;
        }
        let by_time = config.retention_ms >= 0
            && now_ms.saturating_sub(s.max_timestamp) > config.retention_ms;
        let by_size = config.retention_bytes >= 0
            && total.saturating_sub(s.size) >= config.retention_bytes as u64;
        if !(by_time || by_size) {
            break;
        }
        total -= s.size;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Table-driven: time and size limits delete a prefix, never the active segment, and
    /// stop at the first segment that is not deletable or not expired.
    #[test]
    fn retention_table() {
        let seg = |size, ts, deletable| SegmentSummary {
            size,
            max_timestamp: ts,
            deletable,
        };
        let cfg = |ms, bytes| LogConfig {
            retention_ms: ms,
            retention_bytes: bytes,
            ..LogConfig::default()
        };
        let cases = vec![
            (
                "forever",
                vec![seg(10, 0, true), seg(10, 0, true)],
                cfg(-1, -1),
                1000,
                0,
            ),
            (
                "time: old closed only",
                vec![seg(10, 0, true), seg(10, 0, true)],
                cfg(100, -1),
                1000,
                1,
            ),
            (
                "time: stops at young",
                vec![
                    seg(10, 0, true),
                    seg(10, 990, true),
                    seg(10, 0, true),
                    seg(1, 0, true),
                ],
                cfg(100, -1),
                1000,
                1,
            ),
            (
                "size",
                vec![seg(10, 0, true), seg(10, 0, true), seg(10, 0, true)],
                cfg(-1, 15),
                0,
                1,
            ),
            (
                "size exact",
                vec![seg(10, 0, true), seg(10, 0, true), seg(10, 0, true)],
                cfg(-1, 10),
                0,
                2,
            ),
            (
                "not deletable",
                vec![seg(10, 0, false), seg(10, 0, true)],
                cfg(100, -1),
                1000,
                0,
            ),
            ("empty", vec![], cfg(1, 1), 1000, 0),
        ];
        for (name, segs, config, now, expected) in cases {
            assert_eq!(
                segments_to_delete(&segs, &config, now),
                expected,
                "case {name}"
            );
        }
    }
}
