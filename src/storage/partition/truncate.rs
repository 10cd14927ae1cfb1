//! Truncation, for replication: `truncate_to` cuts the log at an offset (a follower dropping
//! what a failed leader never committed) and `truncate_fully_and_start_at` restarts an empty
//! log at an offset (a follower behind the leader's log start). Both quiesce the flusher
//! first, cut the files in a crash-safe order, then rebuild the in-memory log with the same
//! recovery code a restart runs.

use std::cell::Cell;
use std::collections::HashSet;

use crate::protocol::ids::Offset;
use crate::protocol::producer::ProducerId;
use crate::replication::epoch_cache::EpochCache;
use crate::storage::producer_state::ProducerStateTable;
use crate::storage::recovery::{
    finish_truncate_fully, recover, remove_segment_files, scan_valid, write_producer_snapshot,
    Recovered,
};
use crate::storage::segment::segment_path;
use crate::storage::state_file::{self, remove_if_exists};
use crate::storage::txn_index;
use crate::storage::Error;

use super::{Inner, Partition};

/// Ends a truncation: appends and the flusher resume. If the truncation's future is dropped
/// between its first and last file operation (`in_flight`), the files no longer match the
/// in-memory log, so the partition is poisoned; a reopen recovers the files consistently.
struct TruncatingGuard<'a>(&'a Partition, Cell<bool>);

impl TruncatingGuard<'_> {
    fn set_in_flight(&self, in_flight: bool) {
        self.1.set(in_flight);
    }
}

impl Drop for TruncatingGuard<'_> {
    fn drop(&mut self) {
        if self.1.get() {
            self.0.fail(Error::Closed);
        }
        {
            let mut inner = self.0.inner.borrow_mut();
            inner.truncating = false;
            inner.log_generation += 1;
        }
        self.0.flush_wakeup.notify_all();
        self.0.progress.notify_all();
        self.0.appended.notify_all();
    }
}

impl Inner {
    /// Replaces the log state with a fresh recovery of the directory (after a truncation).
    fn install_recovered(&mut self, rec: Recovered) {
        self.segments = rec.segments;
        self.log_start = rec.log_start;
        self.next_offset = rec.next_offset;
        self.durable_offset = rec.next_offset;
        self.written_offset = rec.next_offset;
        self.producers = rec.producers;
        self.gaps_below = rec.gaps_below;
        self.cache.clear();
        self.high_watermark = self
            .high_watermark
            .min(self.next_offset)
            .max(self.log_start);
        self.recompute_max_timestamp();
    }
}

impl Partition {
    /// Takes the log for a truncation: refuses appends, lets the flusher write and fsync
    /// everything staged (simplest way to handle in-flight appends: afterwards the files
    /// hold the whole log and the staging buffers only the partial last block), and waits
    /// until it is idle. It stays paused until the guard drops.
    async fn quiesce(&self) -> Result<TruncatingGuard<'_>, Error> {
        {
            let mut inner = self.inner.borrow_mut();
            inner.check_open()?;
            inner.truncating = true;
            inner.log_generation += 1;
            // Its bytes may be cut: it would not be used, and need not hold memory.
            inner.read_ahead = None;
        }
        let guard = TruncatingGuard(self, Cell::new(false));
        self.flush_wakeup.notify_all();
        loop {
            let listener = self.progress.listen();
            {
                let inner = self.inner.borrow();
                if let Some(e) = &inner.failed {
                    return Err(e.clone());
                }
                let drained = inner.durable_offset >= inner.next_offset
                    && inner.staged_bytes() == 0
                    && !inner.segments.values().any(|s| s.sealed && !s.complete)
                    && !self.flush_in_progress.get()
                    && !self.checkpoint_in_flight.get();
                if drained {
                    return Ok(guard);
                }
                if !self.flusher_running.get() {
                    return Err(Error::Closed);
                }
            }
            listener.await;
        }
    }

    /// Removes every record at or beyond `offset` and returns the new log end. Whole
    /// batches only: a batch containing `offset` goes entirely, so the new log end may be
    /// below `offset` (as in Kafka). `offset` must be in `[log start, log end]`; the log end
    /// itself is a no-op. The high watermark drops to the new log end if it was above; the
    /// epoch cache loses epochs starting at or past it; producer state is rebuilt.
    ///
    /// Crash-safe: once the cut segment is cut and fsynced, recovery sees it end before the
    /// next segment begins and deletes every later one itself, so no truncated record can
    /// come back; before that point nothing was removed. After an I/O error the partition is
    /// poisoned (the on-disk state is whatever recovery will make of it).
    pub async fn truncate_to(&self, offset: i64) -> Result<i64, Error> {
        let _permit = self.lock_meta().await?;
        {
            let inner = self.inner.borrow();
            inner.check_open()?;
            if offset < inner.log_start || offset > inner.next_offset {
                return Err(Error::OffsetOutOfRange {
                    offset,
                    log_start: inner.log_start,
                    log_end: inner.next_offset,
                });
            }
            if offset == inner.next_offset {
                return Ok(offset);
            }
        }
        let guard = self.quiesce().await?;
        guard.set_in_flight(true);
        let result = self.truncate_quiesced(offset).await;
        guard.set_in_flight(false);
        match result {
            Ok(leo) => Ok(leo),
            Err(e) => {
                self.fail(e.clone());
                Err(e)
            }
        }
    }

    async fn truncate_quiesced(&self, offset: i64) -> Result<i64, Error> {
        let base = self
            .inner
            .borrow()
            .segments
            .range(..=offset)
            .next_back()
            .map(|(b, _)| *b);
        let Some(base) = base else {
            return Err(Error::corruption(
                &self.dir,
                0,
                "no segment holds the offset",
            ));
        };
        self.ensure_segment_ready(base).await?;
        let (file, path, size, mut producers, later) = {
            let inner = self.inner.borrow();
            let Some(seg) = inner.segments.get(&base) else {
                return Err(Error::corruption(&self.dir, 0, "segment vanished"));
            };
            let later: Vec<i64> = inner.segments.range(base + 1..).map(|(b, _)| *b).collect();
            (
                seg.file.clone(),
                seg.path.clone(),
                seg.size,
                inner.producers.clone(),
                later,
            )
        };
        let Some(file) = file else {
            return Err(Error::corruption(&path, 0, "segment to cut has no file"));
        };
        // Producers whose last batch is cut are rebuilt from this segment below the cut;
        // every other entry is already exactly what it was at the cut.
        let affected: HashSet<ProducerId> =
            producers.remove_at_or_after(offset).into_iter().collect();
        let mut replayed = ProducerStateTable::default();
        let mut cut = None;
        // Where the kept part of the segment ends: the cut batch's base offset, or below it
        // when the cleaner removed the batches in between.
        let mut kept_end = base;
        let gaps_below = self.gaps_below();
        scan_valid(
            &*file,
            &path,
            0,
            size,
            base,
            base,
            gaps_below,
            |h, pos, batch| {
                if cut.is_some() {
                    return;
                }
                if h.last_offset() >= offset {
                    cut = Some((kept_end, pos));
                    return;
                }
                kept_end = h.last_offset() + 1;
                if affected.contains(&ProducerId(h.producer_id)) {
                    replayed.replay(h, batch);
                }
            },
        )
        .await?;
        // `offset` in a gap after this segment's last batch (cleaned away): cut after it.
        let cut = cut.or((!later.is_empty()).then_some((kept_end, size)));
        let Some((new_end, cut_pos)) = cut else {
            return Err(Error::corruption(
                &path,
                size,
                "no valid batch at the truncation offset",
            ));
        };
        // 0. No gap may follow the new end: lower the bound first, so later segments a crash
        //    leaves behind are seen past a gap and removed by recovery.
        if gaps_below > new_end {
            self.set_gaps_below_locked(new_end).await?;
        }
        // 1. The cut segment's index files describe bytes about to go: remove them (durably)
        //    first, so recovery scans the segment and sees where it really ends.
        remove_if_exists(&segment_path(&self.dir, base, "index")).await?;
        remove_if_exists(&segment_path(&self.dir, base, "timeindex")).await?;
        state_file::sync_dir(&self.dir).await?;
        // 2. The cut. Durable from here: a restart deletes the later segments by itself.
        file.truncate(cut_pos)
            .await
            .map_err(|e| Error::io(&path, "truncate", e))?;
        file.sync_data()
            .await
            .map_err(|e| Error::io(&path, "fdatasync", e))?;
        // 3. Later segments, highest first (an interrupted pass never leaves a gap).
        for b in later.iter().rev() {
            remove_segment_files(&self.dir, *b).await?;
        }
        state_file::sync_dir(&self.dir).await?;
        // 4. The cut segment's aborted index as of the new end (before the producer snapshot:
        //    recovery trusts its entries below the snapshot), then producer, epoch and HW
        //    state as of the new end.
        let kept_aborts: Vec<_> = self
            .inner
            .borrow()
            .segments
            .get(&base)
            .map(|s| {
                s.aborted
                    .iter()
                    .filter(|a| a.last_offset < new_end)
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        txn_index::write(&self.dir, base, &kept_aborts).await?;
        producers.absorb(replayed);
        write_producer_snapshot(&self.dir, &producers.snapshot(new_end)).await?;
        {
            let mut inner = self.inner.borrow_mut();
            inner.epoch_cache.truncate_from_end(Offset(new_end));
            inner.epoch_version += 1;
            if inner.high_watermark > new_end {
                inner.high_watermark = new_end;
            }
        }
        self.persist_epochs_if_dirty().await?;
        self.persist_hw_if_dirty(true).await?;
        // 5. The in-memory log, rebuilt by the code a restart runs (reads the snapshot
        //    written above, so producer state is exactly what a restart would have).
        let config = self.config();
        let rec = recover(&self.dir, &config, &*self.fs).await?;
        if rec.next_offset != new_end {
            return Err(Error::corruption(
                &path,
                cut_pos,
                format!(
                    "recovered log end {} after truncating to {new_end}",
                    rec.next_offset
                ),
            ));
        }
        let old_start = self.inner.borrow().log_start;
        if rec.log_start < old_start {
            // The log start was inside the cut batch: it comes down to the new end, and must
            // stay there after a restart (new records will fill the offsets in between).
            state_file::write_log_start(&self.dir, rec.log_start).await?;
        }
        self.inner.borrow_mut().install_recovered(rec);
        tracing::info!(dir = %self.dir.display(), offset, new_end, "log truncated");
        Ok(new_end)
    }

    /// For a follower whose whole log is behind the leader's log start: deletes every
    /// segment and starts an empty log at `offset` (log start = log end = HW = `offset`,
    /// empty epoch cache and producer state). Crash-safe through `truncate-fully.intent`,
    /// which recovery finishes if a crash interrupts this.
    pub async fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), Error> {
        let _permit = self.lock_meta().await?;
        {
            let inner = self.inner.borrow();
            inner.check_open()?;
            if offset < 0 {
                return Err(Error::OffsetOutOfRange {
                    offset,
                    log_start: inner.log_start,
                    log_end: inner.next_offset,
                });
            }
        }
        let guard = self.quiesce().await?;
        guard.set_in_flight(true);
        let result = async {
            state_file::write_offset_file(
                &self.dir,
                state_file::TRUNCATE_FULLY_INTENT_FILE,
                offset,
            )
            .await?;
            finish_truncate_fully(&self.dir, offset).await?;
            let config = self.config();
            recover(&self.dir, &config, &*self.fs).await
        }
        .await;
        guard.set_in_flight(false);
        match result {
            Ok(rec) => {
                let mut inner = self.inner.borrow_mut();
                inner.epoch_cache = EpochCache::default();
                inner.epoch_version += 1;
                inner.epoch_persisted = inner.epoch_version; // the file was removed
                inner.high_watermark = offset;
                inner.hw_persisted = offset;
                inner.install_recovered(rec);
                inner.high_watermark = inner.next_offset;
                Ok(())
            }
            Err(e) => {
                self.fail(e.clone());
                Err(e)
            }
        }
    }
}
