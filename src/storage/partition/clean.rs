//! One cleaner pass over this partition's log (the rules are the pure `storage::cleaner`):
//! map the dirty section's keys, rewrite the closed segments below the mapped end into
//! `<base>.log.cleaned` beside them, and swap them in.
//!
//! Crash safety (Kafka's scheme): the cleaned file is written and fsynced under
//! `.log.cleaned`, the offset-gap bound raised over it (`gaps.rs`), the file renamed to
//! `.log.swap` (the directory fsynced), then the replaced
//! segments' files are removed and the `.swap` renamed to `.log`. Recovery deletes any
//! `.cleaned` (the old segments are intact) and finishes any `.swap` (it is complete; the
//! segments it replaces are removed), so a crash at any moment leaves the old segments or
//! the new one, never a mix. Offsets never change, so readers holding the old file keep
//! reading it (it stays open after the unlink) and see the same records or more.
//!
//! The pass never touches the active segment, and gives up (nothing swapped) when a
//! truncation, retention or DeleteRecords changed the segments it read meanwhile.

use std::rc::Rc;
use std::time::Instant;

use crate::limits::RECORDS_DECOMPRESSED_BYTES_MAX;
use crate::protocol::producer::ProducerId;
use crate::protocol::record_batch::BatchHeader;
use crate::storage::cleaner::{
    cleanable, filter_batch, group_segments, map_batch, Cleanable, FilterContext, FilterStats,
    Filtered, LogSummary, Mapped, OffsetMap, SegmentSummary, TxnTracker,
};
use crate::storage::file_io::SegmentFile;
use crate::storage::recovery::{
    merge_txn_indexes, remove_segment_data_files, remove_segment_files, write_indexes,
};
use crate::storage::segment::{read_batches, segment_path, Segment};
use crate::storage::state_file;
use crate::storage::txn_index::AbortedTxn;
use crate::storage::Error;

use super::Partition;

/// Largest read the cleaner issues, below the fetch path's `READ_CHUNK_BYTES_MAX`: the
/// disk serves one request at a time per queue slot, so a produce's write and fdatasync that
/// arrive behind a cleaner read wait for that read; 256 KiB is about 0.2 ms of this class
/// of disk (fio: 1.2 GB/s read), 1 MiB about 1 ms and 8 MiB about 7. Larger batches are
/// still read whole (read_batches re-reads sized to the batch).
pub(crate) const CLEANER_READ_CHUNK_BYTES: usize = 256 << 10;

/// Output the cleaner holds before writing it to the `.cleaned` file (aligned pieces); the
/// same bound as its reads, for the same reason.
pub(crate) const CLEANER_WRITE_CHUNK_BYTES: usize = 256 << 10;

/// The cleaner's checkpoint: where the last pass ended (the first dirty offset).
pub(crate) const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// Paces the cleaner's reads and writes (log.cleaner.io.max.bytes.per.second) and its use
/// of the shard's thread, yields the disk to the shard's foreground I/O, and takes the files
/// of the segments a pass replaced to free their space gradually.
pub trait CleanerThrottle {
    /// Called before each segment read: returns once the read may go (the shard's cleaner
    /// holds it back, bounded, while produce writes or fsyncs are in flight). Never waits by
    /// default (tests).
    fn before_read(&mut self) -> futures::future::LocalBoxFuture<'_, ()> {
        Box::pin(async {})
    }
    /// Takes the file of a segment the pass replaced (already unlinked, out of the log) and
    /// its size in bytes: its blocks are freed when the last handle closes. By default it is
    /// dropped here; the shard's cleaner shrinks it in steps first, so the filesystem does
    /// not free (and trim) a whole pass's worth of segments at once. The size comes from the
    /// log, not from the file: glommio's `file_size` stats the file's path, which now names
    /// the cleaned segment (or nothing).
    fn retire(&mut self, file: Rc<dyn SegmentFile>, size: u64) {
        drop((file, size));
    }
    /// Called after `bytes` were read or written; returns once the rate allows more.
    fn charge(&mut self, bytes: u64) -> futures::future::LocalBoxFuture<'_, ()>;
    /// Called after each batch the pass maps or filters: returns at once, or, once the
    /// cleaner has computed for its time slice, after the shard has polled its I/O and run
    /// whatever became ready (produce, fetch). Never waits by default (tests).
    fn pause(&mut self) -> futures::future::LocalBoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// Where one pass spent its time (debug logs; the "log cleaned" line).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassTimes {
    /// Waiting for segment reads (both the mapping and the filtering reads).
    pub read: std::time::Duration,
    /// Waiting for the cleaned segments' writes and their fdatasync.
    pub write: std::time::Duration,
    /// Renames, directory syncs, index writes and removals of the swaps.
    pub swap: std::time::Duration,
    /// Waiting in the throttle (rate and time slices).
    pub paced: std::time::Duration,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanReport {
    pub segments_cleaned: usize,
    pub end_offset: i64,
    pub stats: FilterStats,
    pub times: PassTimes,
}

/// A closed segment as the pass saw it.
#[derive(Clone)]
struct Closed {
    summary: SegmentSummary,
    file: Rc<dyn SegmentFile>,
}

impl Partition {
    /// The cleaner's view of this log: `None` unless it is compacted. Closed segments are
    /// those complete (durable, indexed); the first incomplete one and all after it count as
    /// active.
    pub fn cleanable(&self, now_ms: i64) -> Option<(Cleanable, f64)> {
        let inner = self.inner.borrow();
        if !inner.config.cleanup_policy.compact || inner.closed || inner.closing {
            return None;
        }
        let summaries = Self::summaries(&inner.segments);
        let log = LogSummary {
            log_start_offset: inner.log_start,
            log_end_offset: inner.next_offset,
            last_stable_offset: inner
                .producers
                .last_stable_offset(inner.high_watermark)
                .max(inner.log_start),
            checkpoint: self.cleaner_checkpoint.get(),
            segments: &summaries,
            min_compaction_lag_ms: inner.config.min_compaction_lag_ms,
            max_compaction_lag_ms: inner.config.max_compaction_lag_ms,
        };
        Some((
            cleanable(&log, now_ms),
            inner.config.min_cleanable_dirty_ratio,
        ))
    }

    /// Segment summaries in offset order; everything from the first incomplete segment on is
    /// folded into the last entry (the planner treats it as active).
    fn summaries(segments: &std::collections::BTreeMap<i64, Segment>) -> Vec<SegmentSummary> {
        let mut out: Vec<SegmentSummary> = Vec::new();
        let last = segments.keys().next_back().copied();
        for s in segments.values() {
            let summary = SegmentSummary {
                base_offset: s.base_offset,
                next_offset: s.next_offset,
                size_bytes: s.size,
                max_timestamp: s.max_timestamp,
                first_timestamp: s.first_append_ms.unwrap_or(s.max_timestamp),
            };
            out.push(summary);
            if !s.complete || Some(s.base_offset) == last {
                break;
            }
        }
        out
    }

    /// Reads the persisted cleaner checkpoint once (a missing file means never cleaned).
    pub async fn load_cleaner_checkpoint(&self) {
        if self.cleaner_checkpoint_loaded.get() {
            return;
        }
        self.cleaner_checkpoint_loaded.set(true);
        match state_file::read_offset_file(&self.dir, CLEANER_CHECKPOINT_FILE).await {
            Ok(found) => self.cleaner_checkpoint.set(found),
            Err(e) => {
                tracing::warn!(error = %e, "cleaner checkpoint unreadable; cleaning from the log start")
            }
        }
    }

    /// One cleaner pass, if the log has a cleanable section. `map` is the shard's offset map
    /// (cleared here); `now_ms` is wall time (delete horizons).
    pub async fn clean(
        &self,
        map: &mut OffsetMap,
        now_ms: i64,
        throttle: &mut dyn CleanerThrottle,
    ) -> Result<Option<CleanReport>, Error> {
        self.load_cleaner_checkpoint().await;
        let Some((plan, _)) = self.cleanable(now_ms) else {
            return Ok(None);
        };
        if plan.cleanable_bytes == 0 {
            return Ok(None);
        }
        let (generation, config) = {
            let inner = self.inner.borrow();
            (inner.log_generation, inner.config.clone())
        };
        let closed = self.closed_segments(plan.first_uncleanable_offset).await?;

        // Map the dirty section, stopping where the map fills.
        let mut times = PassTimes::default();
        let map_started = Instant::now();
        map.clear();
        let dirty: Vec<&Closed> = closed
            .iter()
            .filter(|s| s.summary.next_offset > plan.first_dirty_offset)
            .collect();
        let mut map_txns = TxnTracker::new(
            self.aborted_txns_between(
                dirty
                    .first()
                    .map_or(plan.first_dirty_offset, |s| s.summary.base_offset),
                plan.first_uncleanable_offset,
            ),
        );
        'mapping: for seg in dirty {
            let path = segment_path(&self.dir, seg.summary.base_offset, "log");
            let mut pos = 0u64;
            loop {
                paced(&mut times, throttle.before_read()).await;
                let started = Instant::now();
                let (batches, next) = read_batches(
                    &*seg.file,
                    &path,
                    pos,
                    seg.summary.size_bytes,
                    CLEANER_READ_CHUNK_BYTES,
                )
                .await?;
                times.read += started.elapsed();
                if batches.is_empty() {
                    break;
                }
                paced(&mut times, throttle.charge(next - pos)).await;
                for (_, bytes) in &batches {
                    let mapped = map_batch(
                        map,
                        bytes,
                        plan.first_dirty_offset,
                        RECORDS_DECOMPRESSED_BYTES_MAX,
                        &mut map_txns,
                    )
                    .map_err(|e| Error::corruption(&path, pos, e.to_string()))?;
                    if mapped == Mapped::Full {
                        break 'mapping;
                    }
                    paced(&mut times, throttle.pause()).await;
                }
                pos = next;
            }
        }
        tracing::debug!(
            dir = %self.dir.display(),
            keys = map.len(),
            ms = map_started.elapsed().as_millis() as u64,
            read_ms = times.read.as_millis() as u64,
            paced_ms = times.paced.as_millis() as u64,
            "cleaner mapped"
        );
        let end_offset = (map.latest_offset() + 1).min(plan.first_uncleanable_offset);
        if end_offset <= plan.first_dirty_offset {
            tracing::warn!(dir = %self.dir.display(), entries = map.entries_max(), "the cleaner's map cannot hold one batch's keys; log.cleaner.dedupe.buffer.size is too small");
            return Ok(None);
        }

        let summaries: Vec<SegmentSummary> = closed.iter().map(|c| c.summary).collect();
        let groups = group_segments(&summaries, end_offset, config.segment_bytes);
        let producers = self.inner.borrow().producers.clone();
        let lookup = |pid: i64| producers.last_offset_of(ProducerId(pid));
        let last_marker = |pid: i64| producers.last_marker_of(ProducerId(pid));
        let ctx = FilterContext {
            map,
            now_ms,
            delete_retention_ms: config.delete_retention_ms,
            producer_last_offset: &lookup,
            producer_last_marker: &last_marker,
            decompressed_max: RECORDS_DECOMPRESSED_BYTES_MAX,
        };
        // One walk over every group, from the log start: a transaction's batches are
        // walked before its marker even when they lie in an earlier group.
        let rewritten_end = groups
            .last()
            .and_then(|g| closed.get(g.end.saturating_sub(1)))
            .map_or(end_offset, |c| c.summary.next_offset);
        let mut txns = TxnTracker::new(self.aborted_txns_between(
            closed.first().map_or(0, |c| c.summary.base_offset),
            rewritten_end,
        ));
        let mut report = CleanReport {
            end_offset,
            times,
            ..CleanReport::default()
        };
        for group in groups {
            let Some(members) = closed.get(group) else {
                continue;
            };
            if !self
                .clean_group(
                    members,
                    (&ctx, &mut txns),
                    &mut report,
                    generation,
                    config.index_interval_bytes,
                    throttle,
                )
                .await?
            {
                return Ok(None);
            }
            report.segments_cleaned += members.len();
        }
        self.cleaner_checkpoint.set(Some(end_offset));
        state_file::write_offset_file(&self.dir, CLEANER_CHECKPOINT_FILE, end_offset).await?;
        Ok(Some(report))
    }

    /// The aborted transactions (whole index entries) that end at or after `from` and begin
    /// before `upper`, from every segment's aborted index from the one holding `from` on.
    fn aborted_txns_between(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        let inner = self.inner.borrow();
        let start = inner
            .segments
            .range(..=from)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        inner
            .segments
            .range(start..)
            .flat_map(|(_, s)| s.aborted.iter())
            .filter(|a| a.last_offset >= from && a.first_offset < upper)
            .copied()
            .collect()
    }

    /// The complete segments below `below`, each opened (a segment not used since startup
    /// is opened here).
    async fn closed_segments(&self, below: i64) -> Result<Vec<Closed>, Error> {
        let bases: Vec<i64> = {
            let inner = self.inner.borrow();
            let summaries = Self::summaries(&inner.segments);
            let closed = summaries.len().saturating_sub(1);
            summaries
                .iter()
                .take(closed)
                .filter(|s| s.base_offset < below)
                .map(|s| s.base_offset)
                .collect()
        };
        let mut out = Vec::with_capacity(bases.len());
        for base in bases {
            self.ensure_segment_ready(base).await?;
            let inner = self.inner.borrow();
            let Some(seg) = inner.segments.get(&base) else {
                continue;
            };
            let Some(file) = seg.file.clone() else {
                continue;
            };
            out.push(Closed {
                summary: SegmentSummary {
                    base_offset: seg.base_offset,
                    next_offset: seg.next_offset,
                    size_bytes: seg.size,
                    max_timestamp: seg.max_timestamp,
                    first_timestamp: -1,
                },
                file,
            });
        }
        Ok(out)
    }

    /// Rewrites `members` into one segment and swaps it in. False when the log changed
    /// meanwhile (nothing swapped; the `.cleaned` file is removed).
    async fn clean_group(
        &self,
        members: &[Closed],
        (ctx, txns): (&FilterContext<'_>, &mut TxnTracker),
        report: &mut CleanReport,
        generation: u64,
        index_interval_bytes: u32,
        throttle: &mut dyn CleanerThrottle,
    ) -> Result<bool, Error> {
        let Some(first) = members.first() else {
            return Ok(true);
        };
        let group_started = Instant::now();
        let CleanReport { stats, times, .. } = report;
        let before = *times;
        let base = first.summary.base_offset;
        let next_offset = members.last().map_or(base, |m| m.summary.next_offset);
        let mut seg = Segment::new(&self.dir, base);
        // Write beside the old segment, durably, before anything is renamed; in aligned
        // pieces, so the cleaner holds at most CLEANER_WRITE_CHUNK_BYTES of output.
        let log_path = segment_path(&self.dir, base, "log");
        let cleaned_path = self.dir.join(format!("{base:020}.log.cleaned"));
        let swap_path = self.dir.join(format!("{base:020}.log.swap"));
        let file = self
            .fs
            .open_segment(&cleaned_path, true)
            .await
            .map_err(|e| Error::io(&cleaned_path, "create", e))?;
        file.truncate(0)
            .await
            .map_err(|e| Error::io(&cleaned_path, "truncate", e))?;
        let alignment = file.alignment().max(1) as usize;
        let mut out: Vec<u8> = Vec::new();
        let mut out_pos = 0u64; // file position of out[0]
                                // Offsets of the markers (control batches with their record) the cleaned segment
                                // keeps: the aborted index keeps exactly the entries of these.
        let mut markers_kept = std::collections::BTreeSet::new();
        for member in members {
            let path = segment_path(&self.dir, member.summary.base_offset, "log");
            let mut pos = 0u64;
            loop {
                paced(times, throttle.before_read()).await;
                let started = Instant::now();
                let (batches, next) = read_batches(
                    &*member.file,
                    &path,
                    pos,
                    member.summary.size_bytes,
                    CLEANER_READ_CHUNK_BYTES,
                )
                .await?;
                times.read += started.elapsed();
                if batches.is_empty() {
                    break;
                }
                paced(times, throttle.charge(next - pos)).await;
                for (header, bytes) in &batches {
                    let written = match filter_batch(bytes, ctx, txns, stats)
                        .map_err(|e| Error::corruption(&path, pos, e.to_string()))?
                    {
                        Filtered::Drop => continue,
                        Filtered::Keep => {
                            out.extend_from_slice(bytes);
                            *header
                        }
                        Filtered::Rewrite(rewritten) => {
                            out.extend_from_slice(&rewritten);
                            BatchHeader::parse(&rewritten)
                                .map_err(|e| Error::corruption(&path, pos, e.to_string()))?
                        }
                    };
                    if written.is_control() && written.records_count > 0 {
                        markers_kept.insert(written.last_offset());
                    }
                    let at = out_pos + (out.len() - written.total_len()) as u64;
                    seg.index_batch(&written, at, index_interval_bytes);
                    paced(times, throttle.pause()).await;
                }
                if out.len() >= CLEANER_WRITE_CHUNK_BYTES {
                    let aligned = out.len() / alignment * alignment;
                    let rest = out.split_off(aligned);
                    let chunk = [bytes::Bytes::from(std::mem::replace(&mut out, rest))];
                    let started = Instant::now();
                    file.write_at(&chunk, out_pos)
                        .await
                        .map_err(|e| Error::io(&cleaned_path, "write", e))?;
                    times.write += started.elapsed();
                    out_pos += aligned as u64;
                    paced(times, throttle.charge(aligned as u64)).await;
                }
                pos = next;
            }
        }
        let size = out_pos + out.len() as u64;
        let started = Instant::now();
        if !out.is_empty() {
            let len = out.len() as u64;
            let chunk = [bytes::Bytes::from(out)];
            file.write_at(&chunk, out_pos)
                .await
                .map_err(|e| Error::io(&cleaned_path, "write", e))?;
            paced(times, throttle.charge(len)).await;
        }
        file.truncate(size)
            .await
            .map_err(|e| Error::io(&cleaned_path, "truncate", e))?;
        file.sync_data()
            .await
            .map_err(|e| Error::io(&cleaned_path, "fdatasync", e))?;
        times.write += started.elapsed();
        seg.next_offset = next_offset;
        if seg.offset_of_max_timestamp >= base {
            let rel = seg.relative(seg.offset_of_max_timestamp);
            seg.time_index.maybe_push(seg.max_timestamp, rel);
        }

        let swap_started = Instant::now();
        let _permit = self.lock_meta().await?;
        let unchanged = {
            let inner = self.inner.borrow();
            inner.log_generation == generation
                && !inner.closing
                && !inner.closed
                && members.iter().all(|m| {
                    inner.segments.get(&m.summary.base_offset).is_some_and(|s| {
                        s.complete
                            && s.size == m.summary.size_bytes
                            && s.next_offset == m.summary.next_offset
                    })
                })
        };
        if !unchanged {
            let _ = std::fs::remove_file(&cleaned_path);
            return Ok(false);
        }
        // The cleaned segment skips the offsets of the batches it dropped: recovery accepts
        // those gaps only below the persisted bound, so it covers them before the swap can
        // be seen.
        if next_offset > self.gaps_below() {
            self.set_gaps_below_locked(next_offset).await?;
        }
        std::fs::rename(&cleaned_path, &swap_path)
            .map_err(|e| Error::io(&swap_path, "rename", e))?;
        state_file::sync_dir(&self.dir).await?;
        // From here recovery finishes the swap: install it in memory first, so no reader is
        // sent to a file about to go.
        seg.size = size;
        seg.written = size;
        seg.file = Some(file);
        seg.path = log_path.clone();
        seg.sealed = true;
        seg.complete = true;
        seg.index_loaded = true;
        let (index, time_index) = (seg.index.clone(), seg.time_index.clone());
        {
            let mut inner = self.inner.borrow_mut();
            let mut aborted: Vec<AbortedTxn> = Vec::new();
            for m in members {
                // An abort stays indexed while its marker stays: a reader told of an aborted
                // transaction skips its producer's records until it reads the marker.
                if let Some(old) = inner.segments.remove(&m.summary.base_offset) {
                    aborted.extend(
                        old.aborted
                            .into_iter()
                            .filter(|a| markers_kept.contains(&a.last_offset)),
                    );
                }
            }
            aborted.sort_by_key(|a| a.last_offset);
            aborted.dedup_by_key(|a| a.last_offset);
            seg.aborted = aborted;
            inner.segments.insert(base, seg);
            // The tail cache still holds the batches as they were before cleaning; readers
            // must see the cleaned segment from now on.
            inner.cache.evict_below(next_offset);
        }
        let sources: Vec<i64> = members.iter().map(|m| m.summary.base_offset).collect();
        merge_txn_indexes(&self.dir, base, &sources, &markers_kept).await?;
        for m in members {
            if m.summary.base_offset == base {
                remove_segment_data_files(&self.dir, base).await?;
            } else {
                remove_segment_files(&self.dir, m.summary.base_offset).await?;
            }
        }
        std::fs::rename(&swap_path, &log_path).map_err(|e| Error::io(&log_path, "rename", e))?;
        write_indexes(&self.dir, base, &index, &time_index).await?;
        state_file::sync_dir(&self.dir).await?;
        times.swap += swap_started.elapsed();
        for m in members {
            throttle.retire(Rc::clone(&m.file), m.summary.size_bytes);
        }
        tracing::debug!(
            dir = %self.dir.display(),
            base,
            segments = members.len(),
            size,
            ms = group_started.elapsed().as_millis() as u64,
            read_ms = (times.read - before.read).as_millis() as u64,
            write_ms = (times.write - before.write).as_millis() as u64,
            swap_ms = (times.swap - before.swap).as_millis() as u64,
            paced_ms = (times.paced - before.paced).as_millis() as u64,
            "cleaner swapped a group"
        );
        Ok(true)
    }
}

/// Awaits a throttle's wait, counting the time in `times.paced`.
async fn paced(times: &mut PassTimes, wait: futures::future::LocalBoxFuture<'_, ()>) {
    let started = Instant::now();
    wait.await;
    times.paced += started.elapsed();
}

/// What an operator sees of a compacted log (`strata topic describe`, via DescribeLogDirs):
/// the dirty ratio the cleaner compares with `min.cleanable.dirty.ratio`, and its checkpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanerState {
    /// cleanable bytes / (clean + cleanable bytes), as the cleaner computes it now.
    pub dirty_ratio: f64,
    /// Where the last pass ended (the first dirty offset); `None` before the first pass.
    pub checkpoint: Option<i64>,
}

impl Partition {
    /// This log's cleaner state; `None` unless it is compacted.
    pub async fn cleaner_state(&self, now_ms: i64) -> Option<CleanerState> {
        self.load_cleaner_checkpoint().await;
        let (cleanable, _) = self.cleanable(now_ms)?;
        Some(CleanerState {
            dirty_ratio: cleanable.dirty_ratio(),
            checkpoint: self.cleaner_checkpoint.get(),
        })
    }

    /// Bytes of the log's segment files (DescribeLogDirs' partition size).
    pub fn size_bytes(&self) -> u64 {
        self.inner.borrow().segments.values().map(|s| s.size).sum()
    }
}
