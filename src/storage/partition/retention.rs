//! Moving the log start forward: DeleteRecords and retention by time and size (the policy
//! itself, which segments may go, is the pure `storage::retention`). The new log start is
//! persisted before any segment file is unlinked, so a crash leaves extra files below the log
//! start (recovery deletes them), never a log start below missing data.

use crate::protocol::ids::Offset;
use crate::storage::recovery::remove_segment_files;
use crate::storage::retention::{segments_to_delete, SegmentSummary};
use crate::storage::state_file;
use crate::storage::Error;

use super::{HwMode, Inner, Partition};

impl Inner {
    /// Removes the complete, non-active segments wholly below `log_start`.
    fn take_segments_below(&mut self, log_start: i64) -> Vec<i64> {
        let last = self.segments.keys().next_back().copied();
        let doomed: Vec<i64> = self
            .segments
            .values()
            .filter(|s| Some(s.base_offset) != last && s.complete && s.next_offset <= log_start)
            .map(|s| s.base_offset)
            .collect();
        for b in &doomed {
            self.segments.remove(b);
        }
        doomed
    }
}

impl Partition {
    /// DeleteRecords: raises the log start to `before_offset` (-1 means the high watermark),
    /// persists it, deletes whole segments below it. Returns the new log start.
    pub async fn delete_records(&self, before_offset: i64) -> Result<i64, Error> {
        let _permit = self.lock_meta().await?;
        let (new_start, doomed) = {
            let mut inner = self.inner.borrow_mut();
            inner.check_open()?;
            let hw = inner.high_watermark;
            let target = if before_offset == -1 {
                hw
            } else {
                before_offset
            };
            if target < 0 || target > hw {
                return Err(Error::OffsetOutOfRange {
                    offset: before_offset,
                    log_start: inner.log_start,
                    log_end: hw,
                });
            }
            if target <= inner.log_start {
                return Ok(inner.log_start);
            }
            inner.log_start = target;
            inner.epoch_cache.truncate_from_start(Offset(target));
            inner.epoch_version += 1;
            inner.producers.evict_below(target);
            inner.cache.evict_below(target);
            let doomed = inner.take_segments_below(target);
            inner.recompute_max_timestamp();
            (target, doomed)
        };
        self.persist_and_remove(new_start, doomed).await?;
        Ok(new_start)
    }

    /// Retention by time and size (never the active segment), plus rolling by segment.ms.
    pub async fn enforce_retention(&self, now_ms: i64) -> Result<(), Error> {
        let _permit = self.lock_meta().await?;
        let (new_start, doomed) = {
            let mut inner = self.inner.borrow_mut();
            inner.check_open()?;
            let segment_ms = inner.config.segment_ms;
            let active = inner.active();
            let roll = active.size > 0
                && active
                    .first_append_ms
                    .is_some_and(|t| now_ms.saturating_sub(t) >= segment_ms);
            if roll {
                inner.roll(&self.dir);
                self.flush_wakeup.notify_all();
            }
            let summaries: Vec<SegmentSummary> = inner
                .segments
                .values()
                .map(|s| SegmentSummary {
                    size: s.size,
                    max_timestamp: s.max_timestamp,
                    deletable: s.complete,
                })
                .collect();
            // Retention by time and size is the `delete` policy; a compact-only log keeps
            // every segment (the cleaner shrinks them instead).
            let n = if inner.config.cleanup_policy.delete {
                segments_to_delete(&summaries, &inner.config, now_ms)
            } else {
                0
            };
            let Some(&new_start) = inner.segments.keys().nth(n) else {
                return Ok(());
            };
            if n == 0 || new_start <= inner.log_start {
                return Ok(());
            }
            if inner.hw_mode == HwMode::Replicated && new_start > inner.high_watermark {
                // Replicated: a durable segment may still be above the HW; it waits.
                return Ok(());
            }
            // Local: complete segments are durable, so this never passes the high watermark.
            assert!(
                new_start <= inner.high_watermark,
                "retention must not pass the high watermark"
            );
            inner.log_start = new_start;
            inner.epoch_cache.truncate_from_start(Offset(new_start));
            inner.epoch_version += 1;
            inner.producers.evict_below(new_start);
            inner.cache.evict_below(new_start);
            let doomed = inner.take_segments_below(new_start);
            inner.recompute_max_timestamp();
            (new_start, doomed)
        };
        self.persist_and_remove(new_start, doomed).await
    }

    /// Persists the log start before unlinking: a crash in between leaves files below the
    /// log start, which recovery deletes, never a log start below missing data.
    async fn persist_and_remove(&self, log_start: i64, doomed: Vec<i64>) -> Result<(), Error> {
        state_file::write_log_start(&self.dir, log_start).await?;
        // The epoch cache lost the epochs wholly below the new log start (Kafka's
        // truncateFromStart); a lagging file is harmless, recovery cuts nothing below.
        self.persist_epochs_if_dirty().await?;
        for base in doomed {
            remove_segment_files(&self.dir, base).await?;
        }
        Ok(())
    }
}
