//! The flusher: one background task per partition that does all segment I/O in offset
//! order — create and preallocate a segment file, direct-I/O write of the staged bytes
//! (partial last block included), `fdatasync`, then the indexes and producer snapshot of a
//! sealed segment — and advances the durable offset (and, under `HwMode::Local` with the
//! Sync policy, the high watermark). Everything staged when a pass starts rides on one
//! `fdatasync` (group commit). Under the Sync policy the segment file is O_DSYNC and the
//! pass's writes are that `fdatasync`: each write (of at most `WRITE_PIECE_BYTES`; a pass is
//! usually one) completes durable, one io_uring operation and one hand-off to the kernel's
//! worker instead of a write and an fsync. A failed write or fsync poisons the partition.
//!
//! Every `ACTIVE_CHECKPOINT_BYTES` of the active segment the pass also starts a checkpoint
//! (its indexes, aborted transactions and a producer snapshot, as of the bytes it made
//! durable) in a task of its own: those are three atomic file writes, six fsyncs, and the
//! partition's next passes (and so its acks) do not wait for them. At most one runs per
//! partition; sealing a segment, a truncation and closing wait for it (`checkpoint_idle`).

use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::storage::budget::WRITE_PIECE_BYTES;
use crate::storage::file_io::open_active_segment;
use crate::storage::foreground::ForegroundIo;
use crate::storage::index::OffsetIndex;
use crate::storage::producer_state::ProducerSnapshot;
use crate::storage::recovery::{write_indexes, write_producer_snapshot};
use crate::storage::segment::{preallocation_target, split_writes};
use crate::storage::state_file;
use crate::storage::time_index::TimeIndex;
use crate::storage::txn_index::{self, AbortedTxn};
use crate::storage::{
    Error, FlushPolicy, ACTIVE_CHECKPOINT_BYTES, HW_CHECKPOINT_INTERVAL_MS,
    NEVER_POLICY_WRITE_INTERVAL_MS, STAGING_WRITE_THRESHOLD_BYTES,
};

use super::{HwMode, Inner, Partition};

enum Step {
    Final,
    Flush { sync: bool },
    CheckpointHw,
    Wait { until: Option<Instant> },
}

/// An active segment's state as of the bytes one pass made durable, for crash recovery to
/// resume from instead of scanning the whole segment.
pub(super) struct ActiveCheckpoint {
    base: i64,
    /// The segment's size the indexes and snapshot describe.
    size: u64,
    index: OffsetIndex,
    time_index: TimeIndex,
    snapshot: ProducerSnapshot,
    aborted: Vec<AbortedTxn>,
}

impl Inner {
    fn advance_durable(&mut self, offset: i64) {
        self.durable_offset = self.durable_offset.max(offset);
        if self.hw_mode == HwMode::Local {
            self.high_watermark = self.high_watermark.max(self.durable_offset);
        }
    }
}

impl Partition {
    pub(super) async fn run_flusher(self: Rc<Self>) {
        let mut last_sync = Instant::now();
        let mut last_write = Instant::now();
        let mut last_hw_write = Instant::now();
        loop {
            let wakeup = self.flush_wakeup.listen();
            let (step, hw_deadline) = {
                let inner = self.inner.borrow();
                if inner.failed.is_some() {
                    break;
                }
                let now = Instant::now();
                let unwritten = inner.staged_bytes();
                let has_sealed = inner.segments.values().any(|s| s.sealed && !s.complete);
                let dirty = unwritten > 0 || inner.durable_offset < inner.next_offset;
                let hw_deadline = (inner.hw_mode == HwMode::Replicated
                    && !inner.truncating
                    && !inner.closing
                    && inner.high_watermark != inner.hw_persisted)
                    .then(|| last_hw_write + Duration::from_millis(HW_CHECKPOINT_INTERVAL_MS));
                let step = if inner.truncating {
                    // Drain everything to disk, then stay idle until the truncation ends.
                    if dirty || has_sealed {
                        Step::Flush { sync: true }
                    } else {
                        Step::Wait { until: None }
                    }
                } else if inner.closing {
                    Step::Final
                } else if has_sealed {
                    Step::Flush {
                        sync: inner.config.flush_policy == FlushPolicy::Sync,
                    }
                } else {
                    match inner.config.flush_policy {
                        FlushPolicy::Sync if dirty => Step::Flush { sync: true },
                        FlushPolicy::Sync => Step::Wait { until: None },
                        _ if unwritten >= STAGING_WRITE_THRESHOLD_BYTES as u64 => {
                            Step::Flush { sync: false }
                        }
                        FlushPolicy::IntervalMs(ms) => {
                            let deadline = last_sync + Duration::from_millis(ms);
                            if !dirty {
                                Step::Wait { until: None }
                            } else if now >= deadline {
                                Step::Flush { sync: true }
                            } else {
                                Step::Wait {
                                    until: Some(deadline),
                                }
                            }
                        }
                        FlushPolicy::Never => {
                            let deadline =
                                last_write + Duration::from_millis(NEVER_POLICY_WRITE_INTERVAL_MS);
                            if unwritten == 0 {
                                Step::Wait { until: None }
                            } else if now >= deadline {
                                Step::Flush { sync: false }
                            } else {
                                Step::Wait {
                                    until: Some(deadline),
                                }
                            }
                        }
                    }
                };
                (step, hw_deadline)
            };
            // A moved high watermark is checkpointed when nothing else is due, at most once
            // per HW_CHECKPOINT_INTERVAL_MS.
            let step = match (step, hw_deadline) {
                (Step::Wait { .. }, Some(d)) if Instant::now() >= d => Step::CheckpointHw,
                (Step::Wait { until }, Some(d)) => Step::Wait {
                    until: Some(until.map_or(d, |u| u.min(d))),
                },
                (step, _) => step,
            };
            self.flush_in_progress.set(matches!(
                step,
                Step::Final | Step::Flush { .. } | Step::CheckpointHw
            ));
            match step {
                Step::CheckpointHw => {
                    if let Err(e) = self.persist_hw_if_dirty(false).await {
                        tracing::warn!(error = %e, dir = %self.dir.display(), "hw checkpoint write failed");
                    }
                    last_hw_write = Instant::now();
                }
                Step::Final => {
                    // The last pass writes no checkpoint: closing writes the same state.
                    if let Err(e) = self.flush_pass(true).await {
                        self.fail(e);
                    }
                    break;
                }
                Step::Flush { sync } => {
                    match self.flush_pass(sync).await {
                        Ok(Some(checkpoint)) => Rc::clone(&self).start_checkpoint(checkpoint),
                        Ok(None) => {}
                        Err(e) => {
                            self.fail(e);
                            break;
                        }
                    }
                    last_write = Instant::now();
                    if sync {
                        last_sync = last_write;
                    }
                }
                Step::Wait { until: None } => wakeup.await,
                Step::Wait {
                    until: Some(deadline),
                } => {
                    let sleep =
                        glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
                    futures_lite::future::or(wakeup, sleep).await;
                }
            }
            if self.flush_in_progress.replace(false) {
                // A truncation waiting for the flusher to go idle re-checks.
                self.progress.notify_all();
            }
        }
        // Nothing of the log writes by path once the flusher is done (close, delete).
        self.checkpoint_idle().await;
        self.flush_in_progress.set(false);
        self.flusher_running.set(false);
        self.flusher_done.notify_all();
        self.progress.notify_all();
    }

    /// Writes (and, if `sync` or the segment is sealed, fsyncs) every incomplete segment
    /// in offset order, finishing sealed ones. Returns the active segment's checkpoint when
    /// one is due (and none is being written).
    async fn flush_pass(&self, sync: bool) -> Result<Option<ActiveCheckpoint>, Error> {
        loop {
            let (
                base,
                file,
                path,
                data,
                start,
                end_offset,
                size,
                sealed,
                prealloc,
                segment_bytes,
                checkpoint,
                durable_writes,
            ) = {
                let inner = self.inner.borrow();
                if inner.failed.is_some() {
                    // Poisoned (or a simulated crash): touch the files no more.
                    return Ok(None);
                }
                let Some(seg) = inner.segments.values().find(|s| !s.complete) else {
                    return Ok(None);
                };
                // Shared handles on the staged batches: the only copy is the one into the
                // DMA buffer that `write_at` makes.
                let data = if seg.unwritten() > 0 {
                    seg.staging.chunks()
                } else {
                    Vec::new()
                };
                let prealloc = inner.config.preallocate_bytes;
                let segment_bytes = inner.config.segment_bytes;
                let durable_writes = inner.config.flush_policy == FlushPolicy::Sync;
                // Copied in the same borrow as `next_offset`, so the indexes and the producer
                // snapshot describe exactly the bytes this pass makes durable.
                let checkpoint = (sync
                    && !seg.sealed
                    && !self.checkpoint_in_flight.get()
                    && seg.size - seg.checkpointed_size >= ACTIVE_CHECKPOINT_BYTES)
                    .then(|| ActiveCheckpoint {
                        base: seg.base_offset,
                        size: seg.size,
                        index: seg.index.clone(),
                        time_index: seg.time_index.clone(),
                        snapshot: inner.producers.snapshot(seg.next_offset),
                        aborted: seg.aborted.clone(),
                    });
                (
                    seg.base_offset,
                    seg.file.clone(),
                    seg.path.clone(),
                    data,
                    seg.staging.start,
                    seg.next_offset,
                    seg.size,
                    seg.sealed,
                    prealloc,
                    segment_bytes,
                    checkpoint,
                    durable_writes,
                )
            };
            if !sealed && data.is_empty() && !sync {
                return Ok(None);
            }
            let file = match file {
                Some(f) => f,
                None => {
                    let f = open_active_segment(&*self.fs, &path, true, durable_writes)
                        .await
                        .map_err(|e| Error::io(&path, "create", e))?;
                    // The new file's directory entry must be durable before data in it counts.
                    state_file::sync_dir(&self.dir).await?;
                    if let Some(seg) = self.inner.borrow_mut().segments.get_mut(&base) {
                        seg.file = Some(Rc::clone(&f));
                    }
                    f
                }
            };
            let wrote = !data.is_empty();
            if wrote {
                let reserved = self
                    .inner
                    .borrow()
                    .segments
                    .get(&base)
                    .map(|s| s.preallocated)
                    .unwrap_or(0);
                let data_len: usize = data.iter().map(|c| c.len()).sum();
                let end = start + data_len as u64;
                let target = preallocation_target(reserved, end, prealloc, segment_bytes);
                // Preallocation only speeds writes up: it is skipped rather than allowed to
                // eat into the free-space reserve, and a full disk does not fail the write
                // for it (the write itself then reports what the disk says).
                let disk = self.disk.borrow().clone();
                let target = target.filter(|t| {
                    disk.as_ref()
                        .is_none_or(|d| d.may_preallocate(t.saturating_sub(reserved.max(end))))
                });
                if let Some(target) = target {
                    match file.pre_allocate(target).await {
                        Ok(()) => {
                            if let Some(d) = &disk {
                                d.consume(target.saturating_sub(reserved.max(end)));
                            }
                            if let Some(seg) = self.inner.borrow_mut().segments.get_mut(&base) {
                                seg.preallocated = seg.preallocated.max(target);
                            }
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                            tracing::debug!(path = %path.display(), "no space to preallocate");
                        }
                        Err(e) => return Err(Error::io(&path, "fallocate", e)),
                    }
                }
                // Each write's aligned DMA buffer comes out of the shard's write pool, one
                // piece at a time, so many logs flushing at once cannot each hold a copy of
                // their staging beside it.
                let budget = Rc::clone(&self.budget.borrow());
                let mut at = start;
                let writes_started = Instant::now();
                for piece in split_writes(data, WRITE_PIECE_BYTES) {
                    let len: usize = piece.iter().map(|c| c.len()).sum();
                    let aligned = len.next_multiple_of(file.alignment().max(1) as usize);
                    let _room = budget.write_buffer(aligned).await;
                    let _foreground = ForegroundIo::begin();
                    file.write_at(&piece, at)
                        .await
                        .map_err(|e| Error::io(&path, "write", e))?;
                    at += len as u64;
                }
                if file.writes_durable() {
                    // These writes were the data sync: their time is what an fsync would show.
                    crate::metrics::with(|m| m.fsync_us(elapsed_us(writes_started)));
                }
                let mut inner = self.inner.borrow_mut();
                if let Some(seg) = inner.segments.get_mut(&base) {
                    seg.written_through(start, data_len, file.alignment());
                }
                inner.written_offset = inner.written_offset.max(end_offset);
                budget.mark_evictable();
                let limit = inner.config.tail_cache_bytes;
                let written = inner.written_offset;
                inner.cache.evict(limit, written);
                drop(inner);
                // Producers paused on a full staging buffer wait for this.
                self.progress.notify_all();
            }
            if sync || sealed {
                // Everything up to `end_offset` was in `data` or written before: one fsync
                // covers every batch staged when this pass copied the buffer (group commit).
                // Through an O_DSYNC file the writes just made were that fsync: the kernel
                // ran the same data sync (journal commit, cache flush) before completing
                // them, covering earlier writes through this file and its fallocate too.
                let started = std::time::Instant::now();
                if !wrote || !file.writes_durable() {
                    sync_segment(&*file, &path).await?;
                }
                self.inner.borrow_mut().advance_durable(end_offset);
                self.progress.notify_all();
                tracing::debug!(target: "e2e_trace", dir = %self.dir.display(), end = end_offset, us = elapsed_us(started), "durable");
                // Before any index or producer checkpoint below: recovery relies on data
                // those cover having its epochs in the epoch checkpoint.
                self.persist_epochs_if_dirty().await?;
            }
            if !sealed {
                // Its epochs are in the epoch checkpoint now (above), as recovery needs
                // before trusting the checkpoint's indexes and snapshot.
                return Ok(checkpoint);
            }
            // Finish the sealed segment: cut the preallocated tail, then (data durable first)
            // its index files and the producer snapshot as of its end, after any checkpoint
            // of it still being written (the same file names).
            self.checkpoint_idle().await;
            file.truncate(size)
                .await
                .map_err(|e| Error::io(&path, "truncate", e))?;
            sync_segment(&*file, &path).await?;
            let (index, time_index, snapshot, aborted) = {
                let mut inner = self.inner.borrow_mut();
                let Some(seg) = inner.segments.get_mut(&base) else {
                    continue;
                };
                (
                    seg.index.clone(),
                    seg.time_index.clone(),
                    seg.snapshot_at_seal.take(),
                    seg.aborted.clone(),
                )
            };
            // The aborted index before the offset and time indexes: recovery trusts a closed
            // segment's `.txnindex` (or its absence) once those exist.
            txn_index::write(&self.dir, base, &aborted).await?;
            write_indexes(&self.dir, base, &index, &time_index).await?;
            if let Some(snapshot) = snapshot {
                write_producer_snapshot(&self.dir, &snapshot).await?;
            }
            if let Some(seg) = self.inner.borrow_mut().segments.get_mut(&base) {
                seg.complete = true;
                seg.staging = Default::default();
            }
            glommio::yield_if_needed().await;
        }
    }
}

impl Partition {
    /// Writes `checkpoint` in a task of its own; the flusher goes on with the next pass.
    fn start_checkpoint(self: Rc<Self>, checkpoint: ActiveCheckpoint) {
        self.checkpoint_in_flight.set(true);
        glommio::spawn_local(async move {
            let result = self.write_checkpoint(&checkpoint).await;
            self.checkpoint_in_flight.set(false);
            match result {
                Ok(()) => {
                    let mut inner = self.inner.borrow_mut();
                    if let Some(seg) = inner.segments.get_mut(&checkpoint.base) {
                        seg.checkpointed_size = seg.checkpointed_size.max(checkpoint.size);
                    }
                }
                Err(e) => self.fail(e),
            }
            // `checkpoint_idle` (sealing, closing) and a truncation's quiesce wait on this.
            self.progress.notify_all();
        })
        .detach();
    }

    /// Bounds crash recovery of a large active segment: it resumes from here instead of
    /// scanning the whole segment. The aborted index first: recovery trusts its entries
    /// below the snapshot written last. A poisoned (or crashed, in tests) partition stops
    /// between the files, as a process killed there would.
    async fn write_checkpoint(&self, c: &ActiveCheckpoint) -> Result<(), Error> {
        let poisoned = || self.inner.borrow().failed.is_some();
        txn_index::write(&self.dir, c.base, &c.aborted).await?;
        if poisoned() {
            return Ok(());
        }
        write_indexes(&self.dir, c.base, &c.index, &c.time_index).await?;
        if poisoned() {
            return Ok(());
        }
        write_producer_snapshot(&self.dir, &c.snapshot).await
    }

    /// Waits until no active-segment checkpoint is being written.
    pub(super) async fn checkpoint_idle(&self) {
        while self.checkpoint_in_flight.get() {
            let listener = self.progress.listen();
            if !self.checkpoint_in_flight.get() {
                break;
            }
            listener.await;
        }
    }
}

/// `fdatasync` of a segment file, counted as foreground I/O and in the fsync histogram.
async fn sync_segment(
    file: &dyn crate::storage::file_io::SegmentFile,
    path: &std::path::Path,
) -> Result<(), Error> {
    let started = Instant::now();
    let _foreground = ForegroundIo::begin();
    file.sync_data()
        .await
        .map_err(|e| Error::io(path, "fdatasync", e))?;
    crate::metrics::with(|m| m.fsync_us(elapsed_us(started)));
    Ok(())
}

/// Microseconds since `started`, for the fsync latency histogram.
fn elapsed_us(started: std::time::Instant) -> u64 {
    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
}
