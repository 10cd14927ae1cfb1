//! A partition's log: the segments, the append path, the flusher (group commit), reads,
//! timestamp lookup, DeleteRecords and retention.
//!
//! Shape: `append` is synchronous — it checks producer state, assigns offsets by patching
//! the header in place, stages the bytes in the active segment and the tail cache, and
//! returns. A background flusher task per partition does all segment I/O in offset order:
//! create + preallocate the file, direct-I/O write of the staged bytes (partial last block
//! included), `fdatasync`, then advances the durable offset and wakes waiters. Everything
//! staged when a flush starts rides on one `fdatasync` (group commit).
//!
//! Invariants:
//! - no `RefCell` borrow is held across an `.await`: every await works on values copied out
//!   of `Inner` by a short synchronous block;
//! - `log_start <= high_watermark <= next_offset`, and the high watermark never decreases
//!   except when a truncation cuts the log below it;
//! - a segment's file exists only once every earlier segment is complete (durable, truncated,
//!   indexed), so recovery may trust every segment but the last;
//! - segment data is fsynced before its index files and the producer snapshot covering it;
//! - after a failed write or fsync the partition is poisoned (sticky error): nothing more is
//!   acknowledged, because the kernel may have dropped the dirty pages.
//!
//! Faults survived: crash at any point (recovery), failed I/O (sticky error to every waiter),
//! a slow disk (appends refused past `STAGING_BYTES_MAX` instead of unbounded memory).
//!
//! Replication: the leader stamps its epoch into every batch it appends and records the
//! first offset of each epoch in the leader-epoch cache (persisted by the flusher right after
//! the fsync that made the data durable, before any index or producer checkpoint, so data a
//! checkpoint covers always has its epochs in `leader-epoch-checkpoint`). A follower appends
//! the leader's batches unchanged (`append_replica`). `truncate_to` cuts the log crash-safely:
//! with the flusher drained and paused, the cut segment's index files go, the segment is cut
//! and fsynced (from then on recovery itself sees the cut segment end early and deletes every
//! later one), later segments go, then producer, epoch and HW state are rewritten and the
//! in-memory log is rebuilt by the same recovery code a restart runs. The high watermark is
//! either kept by durability (`HwMode::Local`, single node) or driven by the replication
//! layer (`HwMode::Replicated`), and then persisted lazily to `hw-checkpoint`.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::budget::WRITE_PIECE_BYTES;
use super::budget::{Charge, Evictable, MemoryBudget, MemoryClass};
use super::epoch_checkpoint;
use super::file_io::{DmaFileSystem, FileSystem};
use super::notify::Notify;
use super::producer_state::{BatchIdentity, ProducerStateTable, SequenceError, Verdict};
use super::recovery::{
    finish_truncate_fully, load_index, rebuild_closed_indexes, recover, remove_segment_files,
    scan_epochs, scan_valid, write_indexes, write_producer_snapshot, Recovered,
};
use super::retention::{segments_to_delete, SegmentSummary};
use super::segment::{preallocation_target, read_batches, segment_path, split_writes, Segment};
use super::space::DiskSpace;
use super::state_file::{self, remove_if_exists};
use super::tail_cache::{CachedBatch, TailCache};
use super::{
    AppendError, Error, FlushPolicy, LogConfig, ReplicaAppendError, TimestampType,
    ACTIVE_CHECKPOINT_BYTES, HW_CHECKPOINT_INTERVAL_MS, NEVER_POLICY_WRITE_INTERVAL_MS,
    READ_CHUNK_BYTES_MIN, STAGING_BYTES_MAX, STAGING_WRITE_THRESHOLD_BYTES,
};
use crate::limits::RECORDS_DECOMPRESSED_BYTES_MAX;
use crate::protocol::record_batch::{
    patch_base_offset, patch_leader_epoch, patch_log_append_time, record_offsets_and_timestamps,
    validate, BatchError, BatchHeader,
};
use crate::replication::epoch_cache::EpochCache;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    pub base_offset: i64,
    pub last_offset: i64,
    /// -1 under CreateTime (and for duplicates).
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    /// The batch was a retry of one already in the log; offsets are the original ones.
    pub duplicate: bool,
}

/// What `append_replica` stored. Offsets are -1 when nothing was appended (only a trailing
/// partial batch, or no bytes at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaAppendOutcome {
    pub first_offset: i64,
    pub last_offset: i64,
    pub batches: usize,
    pub log_end_offset: i64,
}

/// Who moves the high watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HwMode {
    /// Single node: the high watermark follows durability (Sync) or the log end (otherwise),
    /// and on open it is the recovered log end. Not checkpointed.
    Local,
    /// The replication layer sets it (`set_hw`); appends and fsyncs never move it. On open
    /// it is `min(hw-checkpoint, recovered log end)`, or the log start if there is none: it
    /// may lag after a crash (as in Kafka), never lead.
    Replicated,
}

#[derive(Debug, Clone, Default)]
pub struct ReadOutcome {
    pub chunks: Vec<Bytes>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

struct Inner {
    config: LogConfig,
    segments: BTreeMap<i64, Segment>,
    log_start: i64,
    next_offset: i64,
    high_watermark: i64,
    /// Every offset below is fsynced.
    durable_offset: i64,
    /// Every offset below is written to its file (maybe not fsynced); the tail cache may
    /// drop batches below it.
    written_offset: i64,
    producers: ProducerStateTable,
    cache: TailCache,
    failed: Option<Error>,
    closing: bool,
    closed: bool,
    max_timestamp: Option<(i64, i64)>,
    hw_mode: HwMode,
    /// Value last written to `hw-checkpoint` (Replicated mode only).
    hw_persisted: i64,
    /// Stamped into every batch `append` stores.
    leader_epoch: i32,
    epoch_cache: EpochCache,
    /// Bumped on every change of `epoch_cache`; the checkpoint is current when they match.
    epoch_version: u64,
    epoch_persisted: u64,
    /// A truncation owns the log: appends are refused and the flusher only drains.
    truncating: bool,
    /// Bumped when a truncation starts and when it ends: a read that saw it change may
    /// hold cut batches and is redone.
    log_generation: u64,
}

impl Inner {
    fn staged_bytes(&self) -> u64 {
        self.segments
            .values()
            .rev()
            .take_while(|s| !s.complete)
            .map(|s| s.unwritten())
            .sum()
    }

    fn check_open(&self) -> Result<(), Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.closing || self.closed {
            return Err(Error::Closed);
        }
        if self.truncating {
            return Err(Error::Truncating);
        }
        Ok(())
    }

    /// Records that `epoch` starts at `base` if it is not the latest epoch already (Kafka
    /// assigns on every batch whose epoch differs from the latest one).
    fn assign_epoch(&mut self, epoch: i32, base: i64) {
        if epoch < 0 || self.epoch_cache.latest().is_some_and(|l| l.epoch == epoch) {
            return;
        }
        self.epoch_cache.assign(epoch, base);
        self.epoch_version += 1;
    }

    /// Replaces the log state with a fresh recovery of the directory (after a truncation).
    fn install_recovered(&mut self, rec: Recovered) {
        self.segments = rec.segments;
        self.log_start = rec.log_start;
        self.next_offset = rec.next_offset;
        self.durable_offset = rec.next_offset;
        self.written_offset = rec.next_offset;
        self.producers = rec.producers;
        self.cache.clear();
        self.high_watermark = self
            .high_watermark
            .min(self.next_offset)
            .max(self.log_start);
        self.recompute_max_timestamp();
    }

    fn active(&mut self) -> &mut Segment {
        // `open` always creates an active segment and nothing removes the last one.
        let Some((_, seg)) = self.segments.iter_mut().next_back() else {
            unreachable!("a partition always has an active segment")
        };
        seg
    }

    fn roll(&mut self, dir: &Path) {
        let next = self.next_offset;
        let snapshot = self.producers.snapshot(next);
        self.active().seal(snapshot);
        self.segments.insert(next, Segment::new(dir, next));
    }

    fn should_roll(&mut self, batch_len: usize, last_offset: i64, now_ms: i64) -> bool {
        let config = self.config.clone();
        let seg = self.active();
        if seg.size == 0 {
            return false;
        }
        seg.size + batch_len as u64 > config.segment_bytes
            || seg
                .first_append_ms
                .is_some_and(|t| now_ms.saturating_sub(t) >= config.segment_ms)
            || seg.index.bytes() + super::index::ENTRY_LEN > config.segment_index_bytes as usize
            || seg.time_index.bytes() + super::time_index::ENTRY_LEN
                > config.segment_index_bytes as usize
            || last_offset - seg.base_offset > i32::MAX as i64
    }

    fn recompute_max_timestamp(&mut self) {
        self.max_timestamp = self
            .segments
            .values()
            .filter(|s| s.offset_of_max_timestamp >= 0)
            .map(|s| (s.max_timestamp, s.offset_of_max_timestamp))
            .fold(None, |acc: Option<(i64, i64)>, (t, o)| match acc {
                Some((at, _)) if at >= t => acc,
                _ => Some((t, o)),
            });
    }

    fn advance_durable(&mut self, offset: i64) {
        self.durable_offset = self.durable_offset.max(offset);
        if self.hw_mode == HwMode::Local {
            self.high_watermark = self.high_watermark.max(self.durable_offset);
        }
    }

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

/// ListOffsets' answer for a timestamp: the record found and the leader epoch of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: i32,
}

/// The first record of one whole stored `batch` at or after `min_offset` whose timestamp is
/// >= `ts`, provided it lies below `high_watermark`.
fn record_at_or_after(
    batch: &[u8],
    ts: i64,
    min_offset: i64,
    high_watermark: i64,
) -> Option<TimestampOffset> {
    let header = BatchHeader::parse(batch).ok()?;
    let found = match record_offsets_and_timestamps(batch, RECORDS_DECOMPRESSED_BYTES_MAX) {
        Ok(records) => records
            .into_iter()
            .find(|&(offset, timestamp)| offset >= min_offset && timestamp >= ts),
        // The CRC covers the payload, so a batch whose records do not decode came that way
        // from its producer; its start is the closest answer (a consumer seeking there reads
        // the same batch).
        Err(e) => {
            tracing::warn!(
                base_offset = header.base_offset,
                "timestamp lookup cannot read the records of a batch: {e}"
            );
            Some((header.base_offset.max(min_offset), header.max_timestamp))
        }
    };
    let (offset, timestamp) = found?;
    (offset < high_watermark).then_some(TimestampOffset {
        timestamp,
        offset,
        leader_epoch: header.partition_leader_epoch,
    })
}

pub struct Partition {
    dir: PathBuf,
    fs: Rc<dyn FileSystem>,
    inner: RefCell<Inner>,
    /// High watermark moved, durability advanced, a flush failed, or the partition closed.
    progress: Notify,
    /// Work for the flusher.
    flush_wakeup: Notify,
    flusher: RefCell<Option<glommio::task::JoinHandle<()>>>,
    flusher_done: Notify,
    flusher_running: std::cell::Cell<bool>,
    /// The flusher is inside a pass (data, index, snapshot or checkpoint I/O).
    flush_in_progress: Cell<bool>,
    /// Serialises log-start persistence and segment deletion (DeleteRecords, retention,
    /// truncation).
    meta_lock: glommio::sync::Semaphore,
    /// Serialises writes of `leader-epoch-checkpoint` and `hw-checkpoint` (same temp names).
    state_lock: glommio::sync::Semaphore,
    /// The log end moved (appends); follower fetches long-poll on it.
    appended: Notify,
    /// The shard's memory budget: every batch this log holds in memory is charged to it.
    budget: RefCell<Rc<MemoryBudget>>,
    /// The data directory's free space: appends and preallocations lower its estimate, and
    /// preallocation never eats into the reserve.
    disk: RefCell<Option<Arc<DiskSpace>>>,
}

enum Step {
    Final,
    Flush { sync: bool },
    CheckpointHw,
    Wait { until: Option<Instant> },
}

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

impl Partition {
    /// Opens (creating if absent) the partition directory and recovers it.
    pub async fn open(dir: PathBuf, config: LogConfig) -> Result<Rc<Partition>, Error> {
        Self::open_with(dir, config, Rc::new(DmaFileSystem)).await
    }

    /// Opens a replica's log: the high watermark is driven by `set_hw` (see `HwMode`).
    pub async fn open_replicated(dir: PathBuf, config: LogConfig) -> Result<Rc<Partition>, Error> {
        Self::open_with_mode(dir, config, Rc::new(DmaFileSystem), HwMode::Replicated).await
    }

    /// `open` with an injected file layer (tests use it to inject faults).
    pub async fn open_with(
        dir: PathBuf,
        config: LogConfig,
        fs: Rc<dyn FileSystem>,
    ) -> Result<Rc<Partition>, Error> {
        Self::open_with_mode(dir, config, fs, HwMode::Local).await
    }

    pub async fn open_with_mode(
        dir: PathBuf,
        config: LogConfig,
        fs: Rc<dyn FileSystem>,
        hw_mode: HwMode,
    ) -> Result<Rc<Partition>, Error> {
        config.validate()?;
        let rec = recover(&dir, &config, &*fs).await?;
        let loaded = match epoch_checkpoint::read(&dir).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "leader-epoch checkpoint unreadable; rebuilding from batches");
                None
            }
        };
        let (epoch_cache, epochs_changed) = match &loaded {
            Some(checkpoint) => {
                // The checkpoint may lag the log (crash between an fsync and its write) or
                // lead it (entries for data the crash lost). Everything before the scanned
                // region is covered by the checkpoint (it is written before any index or
                // producer checkpoint), so redo the scanned region from its batches.
                let mut c = checkpoint.clone();
                c.truncate_from_end(rec.epoch_scan_from);
                for &(epoch, base) in &rec.scanned_epochs {
                    if c.latest().is_none_or(|l| l.epoch != epoch) {
                        c.assign(epoch, base);
                    }
                }
                c.truncate_from_end(rec.next_offset);
                let changed = &c != checkpoint;
                (c, changed)
            }
            None => (scan_epochs(&dir, &rec.segments, &*fs).await?, true),
        };
        if epochs_changed {
            epoch_checkpoint::write(&dir, &epoch_cache).await?;
        }
        let high_watermark = match hw_mode {
            HwMode::Local => rec.next_offset,
            HwMode::Replicated => {
                let checkpoint = match state_file::read_offset_file(
                    &dir,
                    state_file::HW_CHECKPOINT_FILE,
                )
                .await
                {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::warn!(error = %e, "hw checkpoint unreadable; starting from the log start");
                        None
                    }
                };
                checkpoint
                    .unwrap_or(rec.log_start)
                    .clamp(rec.log_start, rec.next_offset)
            }
        };
        let mut inner = Inner {
            config,
            segments: rec.segments,
            log_start: rec.log_start,
            next_offset: rec.next_offset,
            high_watermark,
            durable_offset: rec.next_offset,
            written_offset: rec.next_offset,
            producers: rec.producers,
            cache: TailCache::default(),
            failed: None,
            closing: false,
            closed: false,
            max_timestamp: None,
            hw_mode,
            hw_persisted: high_watermark,
            // Until `set_leader_epoch`, keep stamping the latest epoch this log knows (0 for
            // a new log), so a restart never stamps an older epoch than it already holds.
            leader_epoch: epoch_cache.latest().map(|l| l.epoch).unwrap_or(0),
            epoch_cache,
            epoch_version: 0,
            epoch_persisted: 0,
            truncating: false,
            log_generation: 0,
        };
        inner.recompute_max_timestamp();
        let p = Rc::new(Partition {
            dir,
            fs,
            inner: RefCell::new(inner),
            progress: Notify::default(),
            flush_wakeup: Notify::default(),
            flusher: RefCell::new(None),
            flusher_done: Notify::default(),
            flusher_running: std::cell::Cell::new(true),
            flush_in_progress: Cell::new(false),
            meta_lock: glommio::sync::Semaphore::new(1),
            state_lock: glommio::sync::Semaphore::new(1),
            appended: Notify::default(),
            budget: RefCell::new(MemoryBudget::unlimited()),
            disk: RefCell::new(None),
        });
        let task = glommio::spawn_local(Rc::clone(&p).run_flusher()).detach();
        *p.flusher.borrow_mut() = Some(task);
        Ok(p)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Counts this log's in-memory batches against `budget` (the shard's) from now on, and
    /// lets the budget evict its tail cache when the shard is short of memory.
    pub fn set_budget(self: &Rc<Self>, budget: Rc<MemoryBudget>) {
        let me: Rc<dyn Evictable> = self.clone();
        budget.register(Rc::downgrade(&me));
        *self.budget.borrow_mut() = budget;
    }

    /// Counts this log's appends and preallocations against `disk`'s free-space estimate,
    /// and keeps preallocation out of its reserve.
    pub fn set_disk_space(&self, disk: Arc<DiskSpace>) {
        *self.disk.borrow_mut() = Some(disk);
    }

    fn disk_consume(&self, bytes: u64) {
        if let Some(d) = self.disk.borrow().as_ref() {
            d.consume(bytes);
        }
    }

    /// The budget charge for `len` more bytes in memory: evicting cached batches (of any
    /// log of the shard) if needed. With no room even then, a log with nothing staged
    /// still takes its batch (so every log makes progress and internal appends never stall
    /// behind producers); one with staged bytes is refused, and its producer waits
    /// (`wait_for_staging_room`) until a flush and eviction make room.
    /// Called before borrowing `inner`: eviction borrows every log of the shard.
    fn charge(&self, len: usize) -> Result<Charge, usize> {
        let budget = Rc::clone(&self.budget.borrow());
        if let Some(c) = budget.charge_evicting(MemoryClass::Log, len) {
            return Ok(c);
        }
        let staged = self.inner.borrow().staged_bytes() as usize;
        if staged == 0 {
            return Ok(budget.charge_forced(MemoryClass::Log, len));
        }
        Err(staged)
    }

    /// Appends one batch the caller validated (see module doc). Not yet durable on return.
    /// The batch (a slice of the request) is copied exactly once, into the buffer the log
    /// owns, and its offsets and leader epoch are patched there (outside the CRC); the tail
    /// cache and the segment's staging share that buffer until the flusher writes it.
    pub fn append(
        &self,
        batch: impl AsRef<[u8]>,
        now_ms: i64,
    ) -> Result<AppendOutcome, AppendError> {
        let input = batch.as_ref();
        let header = BatchHeader::parse(input).map_err(AppendError::CorruptMessage)?;
        if header.total_len() != input.len() {
            return Err(AppendError::CorruptMessage(BatchError::BadLength {
                len: header.batch_length as i64,
                min: input.len(),
            }));
        }
        {
            let inner = self.inner.borrow();
            inner.check_open()?;
            let max = inner.config.max_message_bytes;
            if input.len() > max as usize {
                return Err(AppendError::MessageTooLarge {
                    size: input.len(),
                    max,
                });
            }
        }
        let charge = self
            .charge(input.len())
            .map_err(|staged| AppendError::Backpressure {
                staged_bytes: staged,
                max: self.budget.borrow().limit().min(STAGING_BYTES_MAX),
            })?;
        let mut inner = self.inner.borrow_mut();
        inner.check_open()?;
        let id = BatchIdentity {
            // Control batches (transaction markers) carry no sequence: never checked.
            producer_id: if header.is_control() {
                -1
            } else {
                header.producer_id
            },
            epoch: header.producer_epoch,
            first_seq: header.base_sequence,
            last_seq: header.last_sequence(),
        };
        match inner.producers.check(&id) {
            Ok(Verdict::Duplicate {
                base_offset,
                last_offset,
            }) => {
                return Ok(AppendOutcome {
                    base_offset,
                    last_offset,
                    log_append_time_ms: -1,
                    log_start_offset: inner.log_start,
                    duplicate: true,
                })
            }
            Ok(_) => {}
            Err(SequenceError::InvalidProducerEpoch {
                producer_id,
                epoch,
                current,
            }) => {
                return Err(AppendError::InvalidProducerEpoch {
                    producer_id,
                    epoch,
                    current,
                })
            }
            Err(SequenceError::OutOfOrderSequence {
                producer_id,
                epoch,
                first_seq,
                last_seq,
            }) => {
                return Err(AppendError::OutOfOrderSequence {
                    producer_id,
                    epoch,
                    first_seq,
                    last_seq,
                })
            }
        }
        let staged = inner.staged_bytes() as usize;
        // An empty buffer always takes one batch, however large, so nothing waits forever.
        if staged > 0 && staged + input.len() > STAGING_BYTES_MAX {
            return Err(AppendError::Backpressure {
                staged_bytes: staged,
                max: STAGING_BYTES_MAX,
            });
        }

        let base_offset = inner.next_offset;
        let leader_epoch = inner.leader_epoch;
        // The one copy of the produce path's record bytes (see `copy_stats`).
        let mut batch = BytesMut::from(input);
        super::copy_stats::add_log(input.len());
        patch_base_offset(&mut batch, base_offset);
        patch_leader_epoch(&mut batch, leader_epoch);
        let log_append_time_ms = match inner.config.message_timestamp_type {
            TimestampType::LogAppendTime => {
                patch_log_append_time(&mut batch, now_ms);
                now_ms
            }
            TimestampType::CreateTime => -1,
        };
        let h = BatchHeader::parse(&batch).map_err(AppendError::CorruptMessage)?;
        assert!(
            h.base_offset == base_offset && h.last_offset() >= base_offset,
            "offsets must increase"
        );
        if inner.should_roll(batch.len(), h.last_offset(), now_ms) {
            inner.roll(&self.dir);
        }
        let bytes = batch.freeze();
        let interval = inner.config.index_interval_bytes;
        inner.active().append(bytes.clone(), &h, interval, now_ms);
        inner.next_offset = h.last_offset() + 1;
        inner.assign_epoch(leader_epoch, base_offset);
        inner.producers.record(&id, base_offset, h.last_offset());
        if inner.max_timestamp.is_none_or(|(t, _)| h.max_timestamp > t) {
            inner.max_timestamp = Some((h.max_timestamp, h.last_offset()));
        }
        inner.cache.push(CachedBatch {
            base_offset,
            last_offset: h.last_offset(),
            max_timestamp: h.max_timestamp,
            bytes,
            charge,
        });
        let (limit, written) = (inner.config.tail_cache_bytes, inner.written_offset);
        inner.cache.evict(limit, written);
        self.disk_consume(h.total_len() as u64);
        let outcome = AppendOutcome {
            base_offset,
            last_offset: h.last_offset(),
            log_append_time_ms,
            log_start_offset: inner.log_start,
            duplicate: false,
        };
        let hw_moves =
            inner.hw_mode == HwMode::Local && inner.config.flush_policy != FlushPolicy::Sync;
        if hw_moves {
            inner.high_watermark = inner.next_offset;
        }
        drop(inner);
        if hw_moves {
            self.progress.notify_all();
        }
        self.appended.notify_all();
        self.flush_wakeup.notify_all();
        Ok(outcome)
    }

    /// Called on becoming leader: every later `append` stamps `epoch` into its batch, and
    /// the first of them records `(epoch, its base offset)` in the leader-epoch cache.
    /// Refuses an `epoch` older than the latest epoch in the log (stamping it would break the
    /// cache's ordering, and leader epochs only grow). The log's epochs come from batch
    /// headers, which a leader's bytes or a damaged disk could have made anything, so this
    /// is an error for the caller to report, never a panic.
    pub fn set_leader_epoch(&self, epoch: i32) -> Result<(), Error> {
        let mut inner = self.inner.borrow_mut();
        let latest = inner.epoch_cache.latest().map(|l| l.epoch).unwrap_or(-1);
        if epoch < 0 || epoch < latest {
            return Err(Error::EpochRegression { epoch, latest });
        }
        inner.leader_epoch = epoch;
        Ok(())
    }

    /// Appends batches fetched from the leader, unchanged (offsets, leader epochs, producer
    /// fields and timestamps are the leader's). Each whole batch is validated (length,
    /// magic, CRC); the first must start at the log end and each next one right after the
    /// previous, or nothing is appended. A trailing partial batch (a Fetch response cut at
    /// its size limit) is ignored. Producer state and the leader-epoch cache are updated
    /// from the batches, as recovery does, so this replica dedups correctly if it becomes
    /// leader. Not durable on return: `wait_durable(last_offset)` as for `append`.
    ///
    /// Each batch is copied out of the fetch response into a buffer of its own: the
    /// response (up to `replica_fetch_response_max_bytes`, many partitions) is then freed
    /// at once, instead of being pinned whole by whichever log cached its last slice.
    ///
    /// `leader_epoch` is the epoch of the leader the batches came from: no batch it sends can
    /// carry a newer one, so a batch that does is refused (`BadLeaderEpoch`) before its epoch
    /// reaches the cache.
    pub fn append_replica(
        &self,
        batches: Bytes,
        leader_epoch: i32,
    ) -> Result<ReplicaAppendOutcome, ReplicaAppendError> {
        self.inner.borrow().check_open()?;
        let mut charge =
            self.charge(batches.len())
                .map_err(|staged| ReplicaAppendError::Backpressure {
                    staged_bytes: staged,
                    max: self.budget.borrow().limit().min(STAGING_BYTES_MAX),
                })?;
        let mut inner = self.inner.borrow_mut();
        inner.check_open()?;
        let mut parsed = Vec::new();
        let mut expected = inner.next_offset;
        let mut at = 0usize;
        let mut total = 0usize;
        while let Some(rest) = batches.get(at..).filter(|r| !r.is_empty()) {
            let len = match BatchHeader::parse(rest) {
                Ok(h) => h.total_len(),
                Err(BatchError::Truncated { .. }) => break,
                Err(e) => return Err(ReplicaAppendError::CorruptMessage(e)),
            };
            let Some(one) = rest.get(..len) else {
                break; // The trailing partial batch of a size-limited Fetch response.
            };
            let h = validate(one).map_err(ReplicaAppendError::CorruptMessage)?;
            if h.partition_leader_epoch > leader_epoch {
                return Err(ReplicaAppendError::BadLeaderEpoch {
                    offset: h.base_offset,
                    epoch: h.partition_leader_epoch,
                    leader_epoch,
                });
            }
            if h.base_offset != expected {
                return Err(ReplicaAppendError::OffsetMismatch {
                    expected,
                    got: h.base_offset,
                });
            }
            expected = h.last_offset() + 1;
            parsed.push((h, Bytes::copy_from_slice(one)));
            at += len;
            total += len;
        }
        let staged = inner.staged_bytes() as usize;
        if staged > 0 && staged + total > STAGING_BYTES_MAX {
            return Err(ReplicaAppendError::Backpressure {
                staged_bytes: staged,
                max: STAGING_BYTES_MAX,
            });
        }
        let first_offset = parsed.first().map(|(h, _)| h.base_offset).unwrap_or(-1);
        let last_offset = parsed.last().map(|(h, _)| h.last_offset()).unwrap_or(-1);
        let count = parsed.len();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        for (h, bytes) in parsed {
            assert!(
                h.base_offset == inner.next_offset && h.last_offset() >= h.base_offset,
                "replica offsets must continue the log"
            );
            if inner.should_roll(bytes.len(), h.last_offset(), now_ms) {
                inner.roll(&self.dir);
            }
            let interval = inner.config.index_interval_bytes;
            inner.active().append(bytes.clone(), &h, interval, now_ms);
            inner.next_offset = h.last_offset() + 1;
            inner.assign_epoch(h.partition_leader_epoch, h.base_offset);
            if !h.is_control() {
                let id = BatchIdentity {
                    producer_id: h.producer_id,
                    epoch: h.producer_epoch,
                    first_seq: h.base_sequence,
                    last_seq: h.last_sequence(),
                };
                inner.producers.record(&id, h.base_offset, h.last_offset());
            }
            if inner.max_timestamp.is_none_or(|(t, _)| h.max_timestamp > t) {
                inner.max_timestamp = Some((h.max_timestamp, h.last_offset()));
            }
            // The charge taken for the whole input is split over the batches kept.
            let batch_charge = {
                let budget = Rc::clone(&self.budget.borrow());
                let c = budget.charge_forced(MemoryClass::Log, bytes.len());
                charge.shrink(bytes.len());
                c
            };
            inner.cache.push(CachedBatch {
                base_offset: h.base_offset,
                last_offset: h.last_offset(),
                max_timestamp: h.max_timestamp,
                bytes,
                charge: batch_charge,
            });
        }
        drop(charge);
        self.disk_consume(total as u64);
        let (limit, written) = (inner.config.tail_cache_bytes, inner.written_offset);
        inner.cache.evict(limit, written);
        let hw_moves = count > 0
            && inner.hw_mode == HwMode::Local
            && inner.config.flush_policy != FlushPolicy::Sync;
        if hw_moves {
            inner.high_watermark = inner.next_offset;
        }
        let log_end_offset = inner.next_offset;
        drop(inner);
        if count > 0 {
            if hw_moves {
                self.progress.notify_all();
            }
            self.appended.notify_all();
            self.flush_wakeup.notify_all();
        }
        Ok(ReplicaAppendOutcome {
            first_offset,
            last_offset,
            batches: count,
            log_end_offset,
        })
    }

    /// Resolves once the staging buffer has room for `len` more bytes, so a producer that
    /// outruns the disk waits for the flusher instead of being refused.
    /// Also waits for room in the shard's memory budget (after evicting cached batches).
    pub async fn wait_for_staging_room(&self, len: usize) -> Result<(), Error> {
        let budget = Rc::clone(&self.budget.borrow());
        loop {
            let listener = self.progress.listen();
            let released = budget.room();
            let staged = {
                let inner = self.inner.borrow();
                if let Some(e) = &inner.failed {
                    return Err(e.clone());
                }
                if inner.closed {
                    return Err(Error::Closed);
                }
                inner.staged_bytes() as usize
            };
            if staged == 0 {
                return Ok(());
            }
            if staged + len <= STAGING_BYTES_MAX
                && budget.charge_evicting(MemoryClass::Log, len).is_some()
            {
                return Ok(());
            }
            self.flush_wakeup.notify_all();
            futures_lite::future::or(listener, released).await;
        }
    }

    /// Resolves once `last_offset` is durable per the flush policy (immediately unless Sync).
    pub async fn wait_durable(&self, last_offset: i64) -> Result<(), Error> {
        loop {
            let listener = self.progress.listen();
            {
                let inner = self.inner.borrow();
                if let Some(e) = &inner.failed {
                    return Err(e.clone());
                }
                if inner.config.flush_policy != FlushPolicy::Sync
                    || inner.durable_offset > last_offset
                {
                    return Ok(());
                }
                if inner.closed || (inner.closing && !self.flusher_running.get()) {
                    return Err(Error::Closed);
                }
            }
            listener.await;
        }
    }

    /// Whole batches from the one containing `offset`, below the high watermark, up to
    /// `max_bytes` but at least one (KIP-74). Slices of the tail cache or of read buffers.
    /// Same as `read_bounded(offset, max_bytes, high watermark)`.
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadOutcome, Error> {
        self.read_impl(offset, max_bytes, None).await
    }

    /// Like `read`, bounded by `upper` (exclusive; clamped to the log end) instead of the
    /// high watermark: only whole batches whose last offset is below `upper` are returned —
    /// a batch straddling it is not, as Kafka serves only whole batches below the HW.
    /// Consumers pass `hw()`; a leader serving a follower passes `log_end()`.
    pub async fn read_bounded(
        &self,
        offset: i64,
        max_bytes: usize,
        upper: i64,
    ) -> Result<ReadOutcome, Error> {
        self.read_impl(offset, max_bytes, Some(upper)).await
    }

    /// Reads never overlap a truncation: one waits for a running truncation to end, and a
    /// read that a truncation overlapped (its file positions may be cut, its batches gone)
    /// is redone against the new log.
    async fn read_impl(
        &self,
        offset: i64,
        max_bytes: usize,
        upper: Option<i64>,
    ) -> Result<ReadOutcome, Error> {
        loop {
            let listener = self.progress.listen();
            let generation = {
                let inner = self.inner.borrow();
                (!inner.truncating).then_some(inner.log_generation)
            };
            let Some(generation) = generation else {
                listener.await;
                continue;
            };
            drop(listener);
            let result = self.read_once(offset, max_bytes, upper).await;
            if self.inner.borrow().log_generation == generation {
                return result;
            }
        }
    }

    async fn read_once(
        &self,
        offset: i64,
        max_bytes: usize,
        upper: Option<i64>,
    ) -> Result<ReadOutcome, Error> {
        let mut load = None;
        let (file, path, mut pos, end, hw, log_start, interval) = loop {
            if let Some(base) = load.take() {
                self.ensure_segment_ready(base).await?;
            }
            let inner = self.inner.borrow();
            if inner.closed {
                return Err(Error::Closed);
            }
            let (hw, log_start) = (inner.high_watermark, inner.log_start);
            let bound = upper.unwrap_or(hw).min(inner.next_offset);
            if offset < log_start || offset > inner.next_offset {
                return Err(Error::OffsetOutOfRange {
                    offset,
                    log_start,
                    log_end: inner.next_offset,
                });
            }
            let mut out = ReadOutcome {
                chunks: Vec::new(),
                high_watermark: hw,
                log_start_offset: log_start,
            };
            if offset >= bound {
                return Ok(out);
            }
            if inner
                .cache
                .first_offset()
                .is_some_and(|first| first <= offset)
            {
                out.chunks = inner.cache.read(offset, max_bytes, bound);
                return Ok(out);
            }
            let Some((_, seg)) = inner.segments.range(..=offset).next_back() else {
                return Err(Error::OffsetOutOfRange {
                    offset,
                    log_start,
                    log_end: inner.next_offset,
                });
            };
            let (Some(file), true) = (seg.file.clone(), seg.index_loaded) else {
                // A closed segment not used since startup: open it and load its index, then
                // look again (retention may have run meanwhile).
                load = Some(seg.base_offset);
                continue;
            };
            let pos = seg.index.lookup(seg.relative(offset)) as u64;
            break (
                file,
                seg.path.clone(),
                pos,
                seg.written.min(seg.size),
                (hw, bound),
                log_start,
                inner.config.index_interval_bytes,
            );
        };
        let (hw, bound) = hw;
        let mut chunks = Vec::new();
        let mut total = 0usize;
        'segment: while pos < end {
            let want = max_bytes
                .saturating_sub(total)
                .saturating_add(interval as usize);
            let (batches, next) = read_batches(&*file, &path, pos, end, want).await?;
            if batches.is_empty() {
                break;
            }
            for (h, bytes) in batches {
                if h.last_offset() < offset {
                    continue;
                }
                if h.last_offset() >= bound
                    || (!chunks.is_empty() && total + bytes.len() > max_bytes)
                {
                    break 'segment;
                }
                total += bytes.len();
                chunks.push(bytes);
                if total >= max_bytes {
                    break 'segment;
                }
            }
            pos = next;
        }
        Ok(ReadOutcome {
            chunks,
            high_watermark: hw,
            log_start_offset: log_start,
        })
    }

    pub fn high_watermark(&self) -> i64 {
        self.inner.borrow().high_watermark
    }
    pub fn log_end_offset(&self) -> i64 {
        self.inner.borrow().next_offset
    }
    pub fn log_start_offset(&self) -> i64 {
        self.inner.borrow().log_start
    }
    /// Offsets below this are fsynced.
    pub fn durable_offset(&self) -> i64 {
        self.inner.borrow().durable_offset
    }
    /// The log end that is fsynced: what a follower reports to its leader.
    pub fn durable_end(&self) -> i64 {
        self.durable_offset()
    }
    pub fn log_end(&self) -> i64 {
        self.log_end_offset()
    }
    pub fn log_start(&self) -> i64 {
        self.log_start_offset()
    }
    pub fn hw(&self) -> i64 {
        self.high_watermark()
    }
    pub fn hw_mode(&self) -> HwMode {
        self.inner.borrow().hw_mode
    }

    /// Sets the high watermark (the replication layer: min LEO over the ISR on a leader,
    /// min(leader's HW, own LEO) on a follower) and switches the partition to
    /// `HwMode::Replicated` for good. Monotonic: a lower value is ignored (only truncation
    /// lowers it). Panics if `hw` is past the log end: that would serve unwritten offsets.
    /// Persisted lazily, at most every `HW_CHECKPOINT_INTERVAL_MS`, and on close/truncation.
    pub fn set_hw(&self, hw: i64) {
        let moved = {
            let mut inner = self.inner.borrow_mut();
            assert!(
                hw <= inner.next_offset,
                "high watermark {hw} past the log end {}",
                inner.next_offset
            );
            inner.hw_mode = HwMode::Replicated;
            let moved = hw > inner.high_watermark;
            if moved {
                inner.high_watermark = hw;
            }
            moved
        };
        if moved {
            self.progress.notify_all();
            // The flusher schedules the checkpoint write.
            self.flush_wakeup.notify_all();
        }
    }

    /// A copy of the leader-epoch cache.
    pub fn epoch_cache(&self) -> EpochCache {
        self.inner.borrow().epoch_cache.clone()
    }
    /// The leader epoch the record at `offset` was written in, if the cache knows it.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.inner.borrow().epoch_cache.epoch_for_offset(offset)
    }
    pub fn latest_epoch(&self) -> Option<i32> {
        self.inner.borrow().epoch_cache.latest().map(|l| l.epoch)
    }
    /// OffsetForLeaderEpoch: the largest epoch <= `epoch` this log knows and where it ends
    /// (Kafka's `endOffsetFor`, against the current log end).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let inner = self.inner.borrow();
        inner.epoch_cache.end_offset_for(epoch, inner.next_offset)
    }

    /// Resolves when the high watermark passes `offset` (returns it), or at `deadline`, or
    /// when the partition closes or fails. Consumer long polls.
    pub async fn wait_for_hw_beyond(&self, offset: i64, deadline: Instant) -> i64 {
        self.wait_until(&self.progress, deadline, |inner| {
            inner.high_watermark > offset
        })
        .await;
        self.high_watermark()
    }

    /// Resolves when the log end passes `offset` (returns it), or at `deadline`, or when the
    /// partition closes or fails. A leader long-polling for a follower's fetch.
    pub async fn wait_for_log_end_beyond(&self, offset: i64, deadline: Instant) -> i64 {
        self.wait_until(&self.appended, deadline, |inner| inner.next_offset > offset)
            .await;
        self.log_end_offset()
    }

    /// Resolves when the high watermark moves past `offset`, or after `timeout`.
    pub async fn wait_for_data(&self, offset: i64, timeout: Duration) {
        self.wait_for_hw_beyond(offset, Instant::now() + timeout)
            .await;
    }

    /// Waits on `notify` until `ready` holds (or the partition closes or fails), or until
    /// `deadline`. The listener is taken before the check so no wake-up is missed.
    async fn wait_until(&self, notify: &Notify, deadline: Instant, ready: impl Fn(&Inner) -> bool) {
        let wait = async {
            loop {
                let listener = notify.listen();
                {
                    let inner = self.inner.borrow();
                    if ready(&inner) || inner.closed || inner.failed.is_some() {
                        return;
                    }
                }
                listener.await;
            }
        };
        let sleep = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
        futures_lite::future::or(wait, sleep).await;
    }

    /// Kafka's ListOffsets by timestamp: the first record (at or after the log start, below
    /// the high watermark) whose timestamp is >= `ts`. Batches whose max timestamp qualifies
    /// are opened to find the record inside, so a batch stamped T1 < T2 answers its second
    /// record for T2, not its base offset.
    pub async fn offset_for_timestamp(&self, ts: i64) -> Result<Option<TimestampOffset>, Error> {
        let mut load = None;
        let (file, path, mut pos, end, from_offset, hw, log_start) = loop {
            if let Some(base) = load.take() {
                self.ensure_segment_ready(base).await?;
            }
            let inner = self.inner.borrow();
            if inner.closed {
                return Err(Error::Closed);
            }
            let (hw, log_start) = (inner.high_watermark, inner.log_start);
            let Some(seg) = inner.segments.values().find(|s| {
                s.next_offset > log_start && s.offset_of_max_timestamp >= 0 && s.max_timestamp >= ts
            }) else {
                return Ok(None);
            };
            if !seg.index_loaded || seg.file.is_none() {
                load = Some(seg.base_offset);
                continue;
            }
            let from = seg
                .time_index
                .floor_below(ts)
                .map(|r| seg.base_offset + r as i64)
                .unwrap_or(seg.base_offset);
            let from = from.max(log_start);
            if inner
                .cache
                .first_offset()
                .is_some_and(|first| first <= from)
            {
                return Ok(inner
                    .cache
                    .timestamp_candidates(from, ts, hw)
                    .find_map(|b| record_at_or_after(&b.bytes, ts, log_start, hw)));
            }
            let Some(file) = seg.file.clone() else {
                return Err(Error::corruption(
                    &seg.path,
                    0,
                    "segment below the tail cache has no file",
                ));
            };
            let pos = seg.index.lookup(seg.relative(from)) as u64;
            break (
                file,
                seg.path.clone(),
                pos,
                seg.written.min(seg.size),
                from,
                hw,
                log_start,
            );
        };
        while pos < end {
            let (batches, next) =
                read_batches(&*file, &path, pos, end, READ_CHUNK_BYTES_MIN).await?;
            if batches.is_empty() {
                break;
            }
            for (h, bytes) in batches {
                if h.last_offset() < from_offset {
                    continue;
                }
                if h.base_offset >= hw {
                    return Ok(None);
                }
                if h.max_timestamp >= ts {
                    if let Some(found) = record_at_or_after(&bytes, ts, log_start, hw) {
                        return Ok(Some(found));
                    }
                }
            }
            pos = next;
            glommio::yield_if_needed().await;
        }
        // The rest of that segment may not be written yet: it is in the tail cache.
        let inner = self.inner.borrow();
        let found = inner
            .cache
            .timestamp_candidates(from_offset, ts, hw)
            .find_map(|b| record_at_or_after(&b.bytes, ts, log_start, hw));
        Ok(found)
    }

    /// Opens a closed segment's file and loads (or, if insane, rebuilds) its indexes on first
    /// use. Two concurrent callers may both load; the results are identical, last one wins.
    async fn ensure_segment_ready(&self, base: i64) -> Result<(), Error> {
        let Some((need_file, need_index, path, size, next_offset)) =
            self.inner.borrow().segments.get(&base).map(|s| {
                (
                    s.file.is_none(),
                    !s.index_loaded,
                    s.path.clone(),
                    s.size,
                    s.next_offset,
                )
            })
        else {
            return Ok(());
        };
        if need_file {
            let file = self
                .fs
                .open_segment(&path, false)
                .await
                .map_err(|e| Error::io(&path, "open", e))?;
            if let Some(seg) = self.inner.borrow_mut().segments.get_mut(&base) {
                seg.file.get_or_insert(file);
            }
        }
        if !need_index {
            return Ok(());
        }
        let max_rel = (next_offset - base - 1).max(0) as u64;
        let (index, time_index) = match load_index(&self.dir, base, size, max_rel).await {
            Some(loaded) => loaded,
            None => {
                let file = self
                    .inner
                    .borrow()
                    .segments
                    .get(&base)
                    .and_then(|s| s.file.clone());
                let Some(file) = file else { return Ok(()) };
                let config = self.config();
                let rebuilt = rebuild_closed_indexes(
                    &self.dir,
                    &*file,
                    &path,
                    base,
                    size,
                    next_offset,
                    &config,
                )
                .await?;
                let Some(seg) = rebuilt else {
                    return Err(Error::corruption(
                        &path,
                        0,
                        "closed segment does not hold valid batches up to the next segment",
                    ));
                };
                (seg.index, seg.time_index)
            }
        };
        if let Some(seg) = self.inner.borrow_mut().segments.get_mut(&base) {
            seg.index = index;
            seg.time_index = time_index;
            seg.index_loaded = true;
        }
        Ok(())
    }

    /// Max timestamp in the log and its offset (ListOffsets MAX_TIMESTAMP).
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        self.inner.borrow().max_timestamp
    }

    /// DeleteRecords: raises the log start to `before_offset` (-1 means the high watermark),
    /// persists it, deletes whole segments below it. Returns the new log start.
    pub async fn delete_records(&self, before_offset: i64) -> Result<i64, Error> {
        let _permit = self
            .meta_lock
            .acquire_permit(1)
            .await
            .map_err(|_| Error::Closed)?;
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
            inner.epoch_cache.truncate_from_start(target);
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
        let _permit = self
            .meta_lock
            .acquire_permit(1)
            .await
            .map_err(|_| Error::Closed)?;
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
            let n = segments_to_delete(&summaries, &inner.config, now_ms);
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
            inner.epoch_cache.truncate_from_start(new_start);
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

    pub fn set_config(&self, config: LogConfig) {
        if let Err(e) = self.try_set_config(config) {
            tracing::warn!(error = %e, dir = %self.dir.display(), "ignoring invalid log config");
        }
    }

    pub fn try_set_config(&self, config: LogConfig) -> Result<(), Error> {
        config.validate()?;
        let hw_moved = {
            let mut inner = self.inner.borrow_mut();
            // Leaving Sync: the high watermark becomes the log end at once (it never moves
            // back, so entering Sync keeps it where it is until durability catches up).
            let moved = inner.hw_mode == HwMode::Local
                && config.flush_policy != FlushPolicy::Sync
                && inner.high_watermark < inner.next_offset;
            if moved {
                inner.high_watermark = inner.next_offset;
            }
            inner.config = config;
            moved
        };
        if hw_moved {
            self.progress.notify_all();
        }
        self.flush_wakeup.notify_all();
        Ok(())
    }

    pub fn config(&self) -> LogConfig {
        self.inner.borrow().config.clone()
    }

    /// Flushes and fsyncs everything, writes the active segment's indexes, a producer
    /// snapshot and the log start, and stops the flusher. Idempotent.
    pub async fn close(&self) -> Result<(), Error> {
        {
            let mut inner = self.inner.borrow_mut();
            if inner.closed || inner.closing {
                return Ok(());
            }
            inner.closing = true;
        }
        self.flush_wakeup.notify_all();
        while self.flusher_running.get() {
            let listener = self.flusher_done.listen();
            if !self.flusher_running.get() {
                break;
            }
            listener.await;
        }
        self.flusher.borrow_mut().take();
        let result = self.write_close_state().await;
        {
            // A closed log serves nothing: give its memory back to the shard's budget.
            let mut inner = self.inner.borrow_mut();
            inner.closed = true;
            inner.cache.clear();
        }
        self.progress.notify_all();
        result
    }

    async fn write_close_state(&self) -> Result<(), Error> {
        // Serialise with DeleteRecords/retention, which write the same log start file.
        let _permit = self
            .meta_lock
            .acquire_permit(1)
            .await
            .map_err(|_| Error::Closed)?;
        let (base, index, time_index, snapshot, log_start) = {
            let mut inner = self.inner.borrow_mut();
            if let Some(e) = &inner.failed {
                return Err(e.clone());
            }
            let next = inner.next_offset;
            let snapshot = inner.producers.snapshot(next);
            let log_start = inner.log_start;
            let seg = inner.active();
            (
                seg.base_offset,
                seg.index.clone(),
                seg.time_index.clone(),
                snapshot,
                log_start,
            )
        };
        if self
            .inner
            .borrow()
            .segments
            .get(&base)
            .is_some_and(|s| s.file.is_some())
        {
            write_indexes(&self.dir, base, &index, &time_index).await?;
        }
        write_producer_snapshot(&self.dir, &snapshot).await?;
        self.persist_epochs_if_dirty().await?;
        self.persist_hw_if_dirty().await?;
        state_file::write_log_start(&self.dir, log_start).await
    }

    /// Writes `leader-epoch-checkpoint` if the cache changed since it was last written.
    async fn persist_epochs_if_dirty(&self) -> Result<(), Error> {
        let _permit = self
            .state_lock
            .acquire_permit(1)
            .await
            .map_err(|_| Error::Closed)?;
        let (version, cache) = {
            let inner = self.inner.borrow();
            if inner.epoch_version == inner.epoch_persisted {
                return Ok(());
            }
            (inner.epoch_version, inner.epoch_cache.clone())
        };
        epoch_checkpoint::write(&self.dir, &cache).await?;
        let mut inner = self.inner.borrow_mut();
        inner.epoch_persisted = inner.epoch_persisted.max(version);
        Ok(())
    }

    /// Writes `hw-checkpoint` if the (Replicated) high watermark moved since the last write.
    async fn persist_hw_if_dirty(&self) -> Result<(), Error> {
        let _permit = self
            .state_lock
            .acquire_permit(1)
            .await
            .map_err(|_| Error::Closed)?;
        let hw = {
            let inner = self.inner.borrow();
            if inner.hw_mode != HwMode::Replicated || inner.high_watermark == inner.hw_persisted {
                return Ok(());
            }
            inner.high_watermark
        };
        state_file::write_offset_file(&self.dir, state_file::HW_CHECKPOINT_FILE, hw).await?;
        self.inner.borrow_mut().hw_persisted = hw;
        Ok(())
    }

    // ---- truncation ----

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
                    && !self.flush_in_progress.get();
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
        let _permit = self
            .meta_lock
            .acquire_permit(1)
            .await
            .map_err(|_| Error::Closed)?;
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
        let affected: HashSet<i64> = producers.remove_at_or_after(offset).into_iter().collect();
        let mut replayed = ProducerStateTable::default();
        let mut cut = None;
        scan_valid(&*file, &path, 0, size, base, base, |h, pos| {
            if cut.is_some() {
                return;
            }
            if h.last_offset() >= offset {
                cut = Some((h.base_offset, pos));
            } else if !h.is_control() && affected.contains(&h.producer_id) {
                let id = BatchIdentity {
                    producer_id: h.producer_id,
                    epoch: h.producer_epoch,
                    first_seq: h.base_sequence,
                    last_seq: h.last_sequence(),
                };
                replayed.record(&id, h.base_offset, h.last_offset());
            }
        })
        .await?;
        let Some((new_end, cut_pos)) = cut else {
            return Err(Error::corruption(
                &path,
                size,
                "no valid batch at the truncation offset",
            ));
        };
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
        // 4. Producer, epoch and HW state as of the new end.
        producers.absorb(replayed);
        write_producer_snapshot(&self.dir, &producers.snapshot(new_end)).await?;
        {
            let mut inner = self.inner.borrow_mut();
            inner.epoch_cache.truncate_from_end(new_end);
            inner.epoch_version += 1;
            if inner.high_watermark > new_end {
                inner.high_watermark = new_end;
            }
        }
        self.persist_epochs_if_dirty().await?;
        self.persist_hw_if_dirty().await?;
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
        let _permit = self
            .meta_lock
            .acquire_permit(1)
            .await
            .map_err(|_| Error::Closed)?;
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

    /// close + remove the directory (DeleteTopics).
    pub async fn delete(&self) -> Result<(), Error> {
        if let Err(e) = self.close().await {
            tracing::warn!(error = %e, "flush failed while deleting the partition; deleting anyway");
        }
        std::fs::remove_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, "remove dir", e))
    }

    // ---- flusher ----

    async fn run_flusher(self: Rc<Self>) {
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
                    if let Err(e) = self.persist_hw_if_dirty().await {
                        tracing::warn!(error = %e, dir = %self.dir.display(), "hw checkpoint write failed");
                    }
                    last_hw_write = Instant::now();
                }
                Step::Final => {
                    if let Err(e) = self.flush_pass(true).await {
                        self.fail(e);
                    }
                    break;
                }
                Step::Flush { sync } => {
                    if let Err(e) = self.flush_pass(sync).await {
                        self.fail(e);
                        break;
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
        self.flush_in_progress.set(false);
        self.flusher_running.set(false);
        self.flusher_done.notify_all();
        self.progress.notify_all();
    }

    /// Test hook simulating `kill -9`: stops all I/O where it stands (an in-flight write or
    /// fsync completes, nothing after it starts) without flushing or writing any state.
    #[cfg(test)]
    pub(crate) async fn crash(&self) {
        self.inner.borrow_mut().failed = Some(Error::Closed);
        self.flush_wakeup.notify_all();
        self.progress.notify_all();
        while self.flusher_running.get() {
            let listener = self.flusher_done.listen();
            if !self.flusher_running.get() {
                break;
            }
            listener.await;
        }
    }

    fn fail(&self, e: Error) {
        tracing::error!(error = %e, dir = %self.dir.display(), "flush failed; partition is poisoned");
        self.inner.borrow_mut().failed = Some(e);
        self.progress.notify_all();
    }

    /// Writes (and, if `sync` or the segment is sealed, fsyncs) every incomplete segment
    /// in offset order, finishing sealed ones.
    async fn flush_pass(&self, sync: bool) -> Result<(), Error> {
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
            ) = {
                let inner = self.inner.borrow();
                if inner.failed.is_some() {
                    // Poisoned (or a simulated crash): touch the files no more.
                    return Ok(());
                }
                let Some(seg) = inner.segments.values().find(|s| !s.complete) else {
                    return Ok(());
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
                // Copied in the same borrow as `next_offset`, so the indexes and the producer
                // snapshot describe exactly the bytes this pass makes durable.
                let checkpoint = (sync
                    && !seg.sealed
                    && seg.size - seg.checkpointed_size >= ACTIVE_CHECKPOINT_BYTES)
                    .then(|| {
                        (
                            seg.index.clone(),
                            seg.time_index.clone(),
                            inner.producers.snapshot(seg.next_offset),
                        )
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
                )
            };
            if !sealed && data.is_empty() && !sync {
                return Ok(());
            }
            let file = match file {
                Some(f) => f,
                None => {
                    let f = self
                        .fs
                        .open_segment(&path, true)
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
            if !data.is_empty() {
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
                for piece in split_writes(data, WRITE_PIECE_BYTES) {
                    let len: usize = piece.iter().map(|c| c.len()).sum();
                    let aligned = len.next_multiple_of(file.alignment().max(1) as usize);
                    let _room = budget.write_buffer(aligned).await;
                    file.write_at(&piece, at)
                        .await
                        .map_err(|e| Error::io(&path, "write", e))?;
                    at += len as u64;
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
                file.sync_data()
                    .await
                    .map_err(|e| Error::io(&path, "fdatasync", e))?;
                self.inner.borrow_mut().advance_durable(end_offset);
                self.progress.notify_all();
                // Before any index or producer checkpoint below: recovery relies on data
                // those cover having its epochs in the epoch checkpoint.
                self.persist_epochs_if_dirty().await?;
            }
            if !sealed {
                if let Some((index, time_index, snapshot)) = checkpoint {
                    // Bounds crash recovery of a large active segment: it resumes from here
                    // instead of scanning the whole segment.
                    write_indexes(&self.dir, base, &index, &time_index).await?;
                    write_producer_snapshot(&self.dir, &snapshot).await?;
                    if let Some(seg) = self.inner.borrow_mut().segments.get_mut(&base) {
                        seg.checkpointed_size = size;
                    }
                }
                return Ok(());
            }
            // Finish the sealed segment: cut the preallocated tail, then (data durable first)
            // its index files and the producer snapshot as of its end.
            file.truncate(size)
                .await
                .map_err(|e| Error::io(&path, "truncate", e))?;
            file.sync_data()
                .await
                .map_err(|e| Error::io(&path, "fdatasync", e))?;
            let (index, time_index, snapshot) = {
                let mut inner = self.inner.borrow_mut();
                let Some(seg) = inner.segments.get_mut(&base) else {
                    continue;
                };
                (
                    seg.index.clone(),
                    seg.time_index.clone(),
                    seg.snapshot_at_seal.take(),
                )
            };
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

impl Evictable for Partition {
    /// Drops written batches from the front of the tail cache (reads then go to disk).
    /// A log busy in a borrow (the caller is inside it) gives nothing this time.
    fn evict(&self, bytes: usize) -> usize {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return 0;
        };
        let written = inner.written_offset;
        inner.cache.evict_bytes(bytes, written)
    }
}
