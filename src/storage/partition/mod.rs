//! A partition's log: the `Partition` type, opening (recovery, epoch and HW checkpoints),
//! its accessors, configuration and close. The work is split by concern:
//! - `append.rs`: a leader's `append`, a follower's `append_replica`, segment rolling, the
//!   waits for staging room and durability;
//! - `flush.rs`: the flusher task (all segment I/O, group commit, index and snapshot writes);
//! - `read.rs`: Fetch reads, long-poll waits, ListOffsets by timestamp, lazy segment loading;
//! - `truncate.rs`: truncation for replication (`truncate_to`, `truncate_fully_and_start_at`);
//! - `clean.rs`: one log cleaner pass (compacted topics) and its crash-safe swap;
//! - `gaps.rs`: the bound below which offsets may be missing (cleaned batches);
//! - `retention.rs`: DeleteRecords and retention, which move the log start forward.
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

mod append;
mod clean;
mod flush;
mod gaps;
mod read;
mod retention;
mod truncate;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;

use super::budget::{Charge, Evictable, MemoryBudget, MemoryClass};
use super::epoch_checkpoint;
use super::file_io::{DmaFileSystem, FileSystem};
use super::notify::Notify;
use super::producer_state::{ProducerStateTable, ProducerView};
use super::recovery::{recover, scan_epochs, write_indexes, write_producer_snapshot};
use super::segment::Segment;
use super::space::DiskSpace;
use super::state_file;
use super::tail_cache::TailCache;
use super::txn_index::{self, AbortedRange};
use super::{Error, FlushPolicy, LogConfig};
use crate::limits::PARTITION_RESIDENT_BYTES;
use crate::protocol::ids::{LeaderEpoch, Offset};
use crate::protocol::producer::ProducerId;
use crate::replication::epoch_cache::EpochCache;

pub use clean::{CleanReport, CleanerState, CleanerThrottle};
pub use read::TimestampOffset;

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
    /// Offsets below this may be missing from the log (the cleaner removed their batches, or
    /// a follower copied a cleaned log); persisted in `offset-gaps-below` before any gap is
    /// written. See `recovery`.
    gaps_below: i64,
    /// The next chunk of a sequential disk reader, being read (see `read::ReadAhead`).
    read_ahead: Option<read::ReadAhead>,
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
    /// An active segment's checkpoint is being written (`flush::start_checkpoint`).
    checkpoint_in_flight: Cell<bool>,
    /// Serialises log-start persistence and segment deletion (DeleteRecords, retention,
    /// truncation).
    meta_lock: glommio::sync::Semaphore,
    /// Serialises writes of `leader-epoch-checkpoint` and `hw-checkpoint` (same temp names).
    state_lock: glommio::sync::Semaphore,
    /// The log end moved (appends); follower fetches long-poll on it.
    appended: Notify,
    /// The shard's memory budget: every batch this log holds in memory is charged to it.
    budget: RefCell<Rc<MemoryBudget>>,
    /// This log's fixed memory (`PARTITION_RESIDENT_BYTES`), charged to `budget` while open.
    resident: RefCell<Option<Charge>>,
    /// The data directory's free space: appends and preallocations lower its estimate, and
    /// preallocation never eats into the reserve.
    disk: RefCell<Option<Arc<DiskSpace>>>,
    /// Where the cleaner's last pass ended (the first dirty offset); `None` before the first
    /// pass. Persisted in `cleaner-offset-checkpoint`, read on first use.
    cleaner_checkpoint: Cell<Option<i64>>,
    cleaner_checkpoint_loaded: Cell<bool>,
    /// Client bytes and records in and out, for the metrics endpoint (the shard's produce
    /// and fetch count them; the log itself does not, so replication is not counted).
    pub traffic: crate::metrics::PartitionTraffic,
}

impl Evictable for Partition {
    /// Drops written batches from the front of the tail cache (reads then go to disk).
    /// A log busy in a borrow (the caller is inside it) gives nothing this time.
    fn evict(&self, bytes: usize) -> usize {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return 0;
        };
        // A read-ahead goes first: it is only a guess at what a reader wants next.
        let ahead = inner.read_ahead.take().map_or(0, |a| a.bytes());
        if ahead >= bytes {
            return ahead;
        }
        let written = inner.written_offset;
        ahead + inner.cache.evict_bytes(bytes - ahead, written)
    }
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

    fn active(&mut self) -> &mut Segment {
        // `open` always creates an active segment and nothing removes the last one.
        let Some((_, seg)) = self.segments.iter_mut().next_back() else {
            unreachable!("a partition always has an active segment")
        };
        seg
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
                c.truncate_from_end(Offset(rec.epoch_scan_from));
                for &(epoch, base) in &rec.scanned_epochs {
                    let epoch = LeaderEpoch(epoch);
                    if c.latest().is_none_or(|l| l.epoch != epoch) {
                        c.assign(epoch, Offset(base));
                    }
                }
                c.truncate_from_end(Offset(rec.next_offset));
                let changed = &c != checkpoint;
                (c, changed)
            }
            None => (
                scan_epochs(&dir, &rec.segments, rec.gaps_below, &*fs).await?,
                true,
            ),
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
            leader_epoch: epoch_cache.latest().map(|l| l.epoch.get()).unwrap_or(0),
            epoch_cache,
            epoch_version: 0,
            epoch_persisted: 0,
            truncating: false,
            log_generation: 0,
            gaps_below: rec.gaps_below,
            read_ahead: None,
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
            checkpoint_in_flight: Cell::new(false),
            meta_lock: glommio::sync::Semaphore::new(1),
            state_lock: glommio::sync::Semaphore::new(1),
            appended: Notify::default(),
            budget: RefCell::new(MemoryBudget::unlimited()),
            resident: RefCell::new(None),
            disk: RefCell::new(None),
            cleaner_checkpoint: Cell::new(None),
            cleaner_checkpoint_loaded: Cell::new(false),
            traffic: Default::default(),
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
    /// Its fixed memory is charged too (`PARTITION_RESIDENT_BYTES`, forced: the log is open
    /// already), so the caches give way as partitions are added.
    pub fn set_budget(self: &Rc<Self>, budget: Rc<MemoryBudget>) {
        let me: Rc<dyn Evictable> = self.clone();
        budget.register(Rc::downgrade(&me));
        let resident = budget.charge_forced(MemoryClass::Partitions, PARTITION_RESIDENT_BYTES);
        *self.resident.borrow_mut() = Some(resident);
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

    pub fn high_watermark(&self) -> i64 {
        self.inner.borrow().high_watermark
    }

    pub fn log_end_offset(&self) -> i64 {
        self.inner.borrow().next_offset
    }

    pub fn log_start_offset(&self) -> i64 {
        self.inner.borrow().log_start
    }

    /// The last stable offset: below it every transaction is decided (committed or aborted,
    /// its marker below the high watermark), so `read_committed` consumers read up to it.
    /// `min(first offset of any open or unreplicated transaction, high watermark)`, never
    /// below the log start.
    pub fn last_stable_offset(&self) -> i64 {
        let inner = self.inner.borrow();
        inner
            .producers
            .last_stable_offset(inner.high_watermark)
            .max(inner.log_start)
    }

    /// The aborted transactions overlapping `[from, upper)` (Fetch's `aborted_transactions`):
    /// the aborted indexes of the segment holding `from` and every later one, until an entry
    /// shows no later segment can add one. Bounded by the aborts in those segments.
    pub fn aborted_transactions(&self, from: i64, upper: i64) -> Vec<AbortedRange> {
        let inner = self.inner.borrow();
        let start = inner
            .segments
            .range(..=from)
            .next_back()
            .map(|(b, _)| *b)
            .unwrap_or(i64::MIN);
        let mut out = Vec::new();
        for seg in inner.segments.range(start..).map(|(_, s)| s) {
            if seg.base_offset >= upper && seg.aborted.is_empty() {
                continue;
            }
            if txn_index::collect(&seg.aborted, from, upper, &mut out) {
                break;
            }
        }
        out
    }

    /// The open transaction's first offset of a producer (DescribeProducers, tests).
    pub fn open_txn_first_offset(&self, producer_id: ProducerId) -> Option<i64> {
        self.inner
            .borrow()
            .producers
            .open_txn_first_offset(producer_id)
    }

    /// Every producer with state on this partition (DescribeProducers).
    pub fn producers(&self) -> Vec<ProducerView> {
        self.inner.borrow().producers.describe()
    }

    /// Offsets below this are fsynced: the durable log end, what a follower reports to its
    /// leader.
    pub fn durable_offset(&self) -> i64 {
        self.inner.borrow().durable_offset
    }

    /// The end a follower reports to its leader as durable: the fsynced end under the Sync
    /// flush policy; under the others nothing is promised to be synced, so the log end (the
    /// leader then counts what the follower has, as Kafka's does).
    pub fn reportable_durable_end(&self) -> i64 {
        let inner = self.inner.borrow();
        match inner.config.flush_policy {
            FlushPolicy::Sync => inner.durable_offset.min(inner.next_offset),
            _ => inner.next_offset,
        }
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
                inner.producers.prune_replicated(hw);
            }
            moved
        };
        if moved {
            tracing::debug!(target: "e2e_trace", dir = %self.dir.display(), hw, "hw");
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
        let inner = self.inner.borrow();
        inner
            .epoch_cache
            .epoch_for_offset(Offset(offset))
            .map(LeaderEpoch::get)
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.inner
            .borrow()
            .epoch_cache
            .latest()
            .map(|l| l.epoch.get())
    }

    /// OffsetForLeaderEpoch: the largest epoch <= `epoch` this log knows and where it ends
    /// (Kafka's `endOffsetFor`, against the current log end).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let inner = self.inner.borrow();
        let (found, end) = inner
            .epoch_cache
            .end_offset_for(LeaderEpoch(epoch), Offset(inner.next_offset));
        (found.get(), end.get())
    }

    /// Max timestamp in the log and its offset (ListOffsets MAX_TIMESTAMP).
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        self.inner.borrow().max_timestamp
    }

    /// Takes the metadata lock, which serialises the structural changes of the log
    /// (truncation, DeleteRecords, retention, cleaning swaps, snapshots). The semaphore
    /// fails only if closed, which reads as the partition being closed.
    async fn lock_meta(&self) -> Result<glommio::sync::Permit<'_>, Error> {
        self.meta_lock
            .acquire_permit(1)
            .await
            .map_err(|_| Error::Closed)
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
    /// A close already under way is waited for, so that once this returns nothing of the
    /// log writes by path any more (`delete` renames the directory next).
    pub async fn close(&self) -> Result<(), Error> {
        loop {
            let listener = {
                let mut inner = self.inner.borrow_mut();
                if inner.closed {
                    return Ok(());
                }
                if !inner.closing {
                    inner.closing = true;
                    break;
                }
                // `progress` is notified when the other close sets `closed`.
                self.progress.listen()
            };
            if self.inner.borrow().closed {
                return Ok(());
            }
            listener.await;
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
            inner.read_ahead = None;
        }
        self.resident.borrow_mut().take();
        self.progress.notify_all();
        result
    }

    async fn write_close_state(&self) -> Result<(), Error> {
        // Serialise with DeleteRecords/retention, which write the same log start file.
        let _permit = self.lock_meta().await?;
        let (base, index, time_index, snapshot, log_start, aborted) = {
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
                seg.aborted.clone(),
            )
        };
        if self
            .inner
            .borrow()
            .segments
            .get(&base)
            .is_some_and(|s| s.file.is_some())
        {
            txn_index::write(&self.dir, base, &aborted).await?;
            write_indexes(&self.dir, base, &index, &time_index).await?;
        }
        write_producer_snapshot(&self.dir, &snapshot).await?;
        self.persist_epochs_if_dirty().await?;
        self.persist_hw_if_dirty(true).await?;
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

    /// Writes `hw-checkpoint` if the (Replicated) high watermark moved since the last write;
    /// `fdatasync`s it if `sync` (closing, truncating) or if the high watermark went down.
    ///
    /// The flusher's periodic rewrite of a risen high watermark is not synced. Recovery clamps
    /// the checkpoint into the recovered log and takes it as a lower bound only (a leader's
    /// ISR, a follower's fetches move it up again), so the older, lower frame a power cut may
    /// leave costs nothing, while an `fdatasync` per partition per interval is a device cache
    /// flush each: at 5,000 partitions a thousand a second, a fifth of all the broker's
    /// flushes, beside the data's (`perf/RESULTS.md`). Kafka syncs one file for all
    /// partitions instead. A lowered one (a truncation) is synced: the higher frame it
    /// replaces could cover offsets the log's new history has not committed.
    async fn persist_hw_if_dirty(&self, sync: bool) -> Result<(), Error> {
        let _permit = self
            .state_lock
            .acquire_permit(1)
            .await
            .map_err(|_| Error::Closed)?;
        let (hw, lowered) = {
            let inner = self.inner.borrow();
            if inner.hw_mode != HwMode::Replicated || inner.high_watermark == inner.hw_persisted {
                return Ok(());
            }
            (
                inner.high_watermark,
                inner.high_watermark < inner.hw_persisted,
            )
        };
        state_file::overwrite_offset_file(
            &self.dir,
            state_file::HW_CHECKPOINT_FILE,
            hw,
            sync || lowered,
        )
        .await?;
        self.inner.borrow_mut().hw_persisted = hw;
        Ok(())
    }

    /// Deletes the log (DeleteTopics, a replica moved away): closes it, so nothing of it
    /// writes by path any more, then renames its directory to `<name>.<uuid>-delete`
    /// (`partition_dir::rename_for_delete`: the name is free at once for a topic created
    /// again, and a crash never leaves a half-deleted log under the live name) and removes
    /// the renamed directory on the removal thread. Returns the renamed path (`None` if the
    /// directory was already gone).
    pub async fn delete(&self) -> Result<Option<PathBuf>, Error> {
        if let Err(e) = self.close().await {
            tracing::warn!(error = %e, "flush failed while deleting the partition; deleting anyway");
        }
        let moved = match super::partition_dir::rename_for_delete(&self.dir).await {
            Ok(moved) => moved,
            Err(Error::Io {
                kind: std::io::ErrorKind::NotFound,
                ..
            }) => return Ok(None),
            Err(e) => return Err(e),
        };
        super::partition_dir::remove_later(moved.clone());
        Ok(Some(moved))
    }

    /// Test hook: waits until no active-segment checkpoint is being written.
    #[cfg(test)]
    pub(crate) async fn wait_checkpoint_idle(&self) {
        self.checkpoint_idle().await
    }

    /// Test hook: whether a read-ahead is pending, and for which fetch offset.
    #[cfg(test)]
    pub(crate) fn read_ahead_offset(&self) -> Option<i64> {
        self.inner.borrow().read_ahead.as_ref().map(|a| a.offset())
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
}
