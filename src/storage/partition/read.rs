//! Reading a partition: Fetch reads (whole batches from the tail cache or, through the
//! segment's sparse index, by direct I/O from its file), the long-poll waits on the high
//! watermark and the log end, ListOffsets by timestamp (time index, then the records of the
//! matching batch), and the lazy opening of a closed segment's file and indexes on first use.
//! A read never overlaps a truncation: it waits for one, and is redone if one overlapped it.

use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::limits::RECORDS_DECOMPRESSED_BYTES_MAX;
use crate::protocol::record_batch::{record_offsets_and_timestamps, BatchHeader};
use crate::storage::budget::{Charge, MemoryClass};
use crate::storage::file_io::SegmentFile;
use crate::storage::notify::Notify;
use crate::storage::recovery::{load_index, rebuild_closed_indexes};
use crate::storage::segment::{read_batches, read_chunk, ReadChunk};
use crate::storage::{Error, READ_CHUNK_BYTES_MAX, READ_CHUNK_BYTES_MIN};

use super::{Inner, Partition, ReadOutcome};

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

/// The next chunk of a sequential reader, read from disk while the fetch before it is being
/// sent. Reads bypass the page cache (direct I/O), so without this a consumer reading old
/// data waits for the disk, then the disk waits for the consumer: each fetch's read starts
/// only when the previous response is out. Started after a disk read that stopped because
/// the fetch was full; used by the next read at exactly the offset that fetch ends at.
/// One per partition: any other disk read of the partition drops it, as does eviction
/// (its buffer is charged to the memory budget as `Responses`, taken only if it fits, never
/// by evicting) and the end of the partition (dropping the task cancels the read).
pub(super) struct ReadAhead {
    segment_base: i64,
    /// The file it reads: the cleaner may replace a segment's file under the same base,
    /// and positions in one mean nothing in the other.
    file: Rc<dyn SegmentFile>,
    /// The fetch offset it serves and the file position of the batch holding it.
    offset: i64,
    pos: u64,
    /// `log_generation` when it started: a truncation since makes it stale.
    generation: u64,
    /// The read and the CRC checks run in this task, off the next fetch's path.
    task: glommio::Task<Result<ReadChunk, Error>>,
    charge: Charge,
}

impl ReadAhead {
    /// The memory it holds, given back when it is dropped.
    pub(super) fn bytes(&self) -> usize {
        self.charge.bytes()
    }

    #[cfg(test)]
    pub(super) fn offset(&self) -> i64 {
        self.offset
    }
}

/// Where a read-ahead starts: the segment (and the log generation it was found in), the
/// fetch offset it serves, the file position of the batch holding it, and the segment's end.
struct Place {
    segment_base: i64,
    generation: u64,
    offset: i64,
    pos: u64,
    end: u64,
}

/// Whether two handles are the same open file (compared by address only: the vtable part
/// of a `dyn` pointer may differ between codegen units for the same type).
fn same_file(a: &Rc<dyn SegmentFile>, b: &Rc<dyn SegmentFile>) -> bool {
    std::ptr::eq(Rc::as_ptr(a) as *const u8, Rc::as_ptr(b) as *const u8)
}

impl Partition {
    /// Whole batches from the one containing `offset`, below the high watermark, up to
    /// `max_bytes` but at least one (KIP-74). Slices of the tail cache or of read buffers.
    /// Same as `read_bounded(offset, max_bytes, high watermark)`.
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadOutcome, Error> {
        self.read_impl(offset, max_bytes, None).await
    }

    /// Like `read`, bounded by `upper` (exclusive; clamped to the log end) instead of the
    /// high watermark: only whole batches whose last offset is below `upper` are returned —
    /// a batch straddling it is not, as Kafka serves only whole batches below the HW.
    /// Consumers pass `high_watermark()`; a leader serving a follower passes `log_end_offset()`.
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

    /// Reads from the segment holding `offset`; when that segment has nothing at or past it
    /// (the log cleaner removed its last batches), goes on with the next segment, as a
    /// compacted log's offsets have gaps.
    async fn read_once(
        &self,
        mut offset: i64,
        max_bytes: usize,
        upper: Option<i64>,
    ) -> Result<ReadOutcome, Error> {
        loop {
            let (out, next_segment) = self.read_segment(offset, max_bytes, upper).await?;
            match next_segment {
                Some(next) if out.chunks.is_empty() && next > offset => offset = next,
                _ => return Ok(out),
            }
        }
    }

    async fn read_segment(
        &self,
        offset: i64,
        max_bytes: usize,
        upper: Option<i64>,
    ) -> Result<(ReadOutcome, Option<i64>), Error> {
        let mut load = None;
        let (
            file,
            path,
            mut pos,
            end,
            (hw, bound),
            log_start,
            interval,
            segment_next,
            (base, generation),
            mut ahead,
        ) = loop {
            if let Some(base) = load.take() {
                self.ensure_segment_ready(base).await?;
            }
            let mut inner = self.inner.borrow_mut();
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
                return Ok((out, None));
            }
            if inner
                .cache
                .first_offset()
                .is_some_and(|first| first <= offset)
            {
                out.chunks = inner.cache.read(offset, max_bytes, bound);
                return Ok((out, None));
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
            let mut pos = seg.index.lookup(seg.relative(offset)) as u64;
            let (base, generation) = (seg.base_offset, inner.log_generation);
            let (path, end) = (seg.path.clone(), seg.written.min(seg.size));
            let segment_next = (seg.next_offset < bound).then_some(seg.next_offset);
            // Any disk read takes the read-ahead: this one uses it if it is where this read
            // starts, else it is dropped (one sequential reader per partition is the case
            // it serves; two readers would only read for each other in vain).
            let ahead = inner.read_ahead.take().filter(|a| {
                a.segment_base == base
                    && a.offset == offset
                    && a.generation == generation
                    && same_file(&a.file, &file)
            });
            if let Some(a) = &ahead {
                pos = a.pos;
            }
            break (
                file,
                path,
                pos,
                end,
                (hw, bound),
                log_start,
                inner.config.index_interval_bytes,
                segment_next,
                (base, generation),
                ahead,
            );
        };
        let mut chunks = Vec::new();
        let mut total = 0usize;
        // Where this fetch stopped because it was full: the offset the reader asks for next
        // and the position of the batch holding it.
        let mut full_at = None;
        // The last offset of the last batch taken.
        let mut last: Option<i64> = None;
        'segment: while pos < end {
            let want = max_bytes
                .saturating_sub(total)
                .saturating_add(interval as usize);
            let chunk = match ahead.take() {
                // A read-ahead that failed is not trusted for the error either: the read
                // is done again, and reports its own.
                Some(a) => match a.task.await {
                    Ok(chunk) if !chunk.batches.is_empty() => chunk,
                    _ => read_chunk(&*file, &path, pos, end, want).await?,
                },
                None => read_chunk(&*file, &path, pos, end, want).await?,
            };
            if chunk.batches.is_empty() {
                break;
            }
            let mut at = pos;
            for (h, bytes) in chunk.batches {
                let here = at;
                at += bytes.len() as u64;
                if h.last_offset() < offset {
                    continue;
                }
                if h.last_offset() >= bound {
                    break 'segment;
                }
                if !chunks.is_empty() && total + bytes.len() > max_bytes {
                    full_at = last.map(|l| (l + 1, here));
                    break 'segment;
                }
                total += bytes.len();
                chunks.push(bytes);
                last = Some(h.last_offset());
                if total >= max_bytes {
                    full_at = Some((h.last_offset() + 1, at));
                    break 'segment;
                }
            }
            pos = chunk.next;
            // The batch after this read does not fit what is left: the fetch is full
            // (reading it would only leave it out).
            if let (Some(l), Some(next_len)) = (last, chunk.next_len) {
                if !chunks.is_empty() && total + next_len > max_bytes {
                    full_at = Some((l + 1, pos));
                    break;
                }
            }
        }
        if let Some((next_offset, next_pos)) = full_at.filter(|&(_, p)| p < end) {
            let at = Place {
                segment_base: base,
                generation,
                offset: next_offset,
                pos: next_pos,
                end,
            };
            self.start_read_ahead(&file, &path, at, max_bytes);
        }
        let out = ReadOutcome {
            chunks,
            high_watermark: hw,
            log_start_offset: log_start,
        };
        Ok((out, segment_next))
    }

    /// Starts reading the chunk a full fetch stopped before (see `ReadAhead`), if the
    /// memory budget has room for it now.
    fn start_read_ahead(
        &self,
        file: &Rc<dyn SegmentFile>,
        path: &Path,
        at: Place,
        fetch_bytes: usize,
    ) {
        let Place {
            segment_base,
            generation,
            offset,
            pos,
            end,
        } = at;
        let len = (fetch_bytes.clamp(READ_CHUNK_BYTES_MIN, READ_CHUNK_BYTES_MAX) as u64)
            .min(end - pos) as usize;
        let Some(charge) = self.budget.borrow().try_charge(MemoryClass::Responses, len) else {
            return;
        };
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return;
        };
        // A truncation that ran during this fetch may have cut what it would read.
        if inner.closing || inner.closed || inner.truncating || inner.log_generation != generation {
            return;
        }
        let (reading, path) = (Rc::clone(file), path.to_path_buf());
        let task =
            glommio::spawn_local(async move { read_chunk(&*reading, &path, pos, end, len).await });
        inner.read_ahead = Some(ReadAhead {
            segment_base,
            file: Rc::clone(file),
            offset,
            pos,
            generation,
            task,
            charge,
        });
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

    /// Resolves when the last stable offset passes `offset`, or at `deadline`, or when the
    /// partition closes or fails. `read_committed` consumer long polls: the LSO moves with
    /// the high watermark (`progress`) and with markers (`appended`).
    pub async fn wait_for_lso_beyond(&self, offset: i64, deadline: Instant) -> i64 {
        let ready = |inner: &Inner| {
            inner
                .producers
                .last_stable_offset(inner.high_watermark)
                .max(inner.log_start)
                > offset
        };
        let progress = self.wait_until(&self.progress, deadline, ready);
        let appended = self.wait_until(&self.appended, deadline, ready);
        futures_lite::future::or(progress, appended).await;
        self.last_stable_offset()
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
    pub(super) async fn ensure_segment_ready(&self, base: i64) -> Result<(), Error> {
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
                    self.gaps_below(),
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
}
