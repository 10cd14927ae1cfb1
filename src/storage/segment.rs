//! One segment: a `.log` file of contiguous Kafka v2 batches starting at `base_offset`, its
//! sparse offset and time indexes in memory, and (while it is the active segment or not yet
//! fully written) the bytes staged for the flusher.
//!
//! Staging: `staging` holds the file bytes from `staging.start` (aligned down) to `size`,
//! as a list of shared `Bytes` — the very batches the tail cache holds, never a copy. It
//! always begins with the partial last block already on disk, so a flush rewrites that
//! block whole, with the new data after it (direct I/O cannot write part of a block). After
//! a write, the fully written aligned prefix is dropped from the front and the partial last
//! block (less than one alignment unit) is copied into its own small buffer, so an idle
//! partition pins at most that much and never a whole batch or request. Appends only ever
//! extend the back, so a flush in flight never sees bytes move under it.
//!
//! Invariants: `written <= size`; `staging.start + staging.len() == size`; offsets in the
//! segment are `[base_offset, next_offset)`; `size` fits in u32 (index positions).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use super::file_io::SegmentFile;
use super::index::OffsetIndex;
use super::producer_state::ProducerSnapshot;
use super::time_index::TimeIndex;
use super::txn_index::AbortedTxn;
use super::{Error, READ_CHUNK_BYTES_MAX, READ_CHUNK_BYTES_MIN};
use crate::protocol::record_batch::{validate, BatchHeader, BATCH_HEADER_LEN};

pub(crate) fn segment_path(dir: &Path, base_offset: i64, ext: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}.{ext}"))
}

/// Parses `<20 digits>.log`.
pub(crate) fn parse_segment_name(name: &str) -> Option<i64> {
    let stem = name.strip_suffix(".log")?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

pub(crate) struct Segment {
    pub base_offset: i64,
    /// One past the last offset stored.
    pub next_offset: i64,
    /// Logical bytes (staged or written).
    pub size: u64,
    /// Bytes handed to the file (maybe not yet fsynced).
    pub written: u64,
    /// Opened lazily by the flusher (creation is async; append is not).
    pub file: Option<Rc<dyn SegmentFile>>,
    pub path: PathBuf,
    /// False for closed segments found at startup until first use (lazy load).
    pub index_loaded: bool,
    pub index: OffsetIndex,
    pub time_index: TimeIndex,
    pub bytes_since_index: u64,
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
    pub staging: Staging,
    /// No more appends; the flusher finishes it (fsync, truncate, index files).
    pub sealed: bool,
    /// Sealed, durable, truncated to size, index files written: safe to delete or trust.
    pub complete: bool,
    /// `size` when the active segment's indexes and a producer snapshot were last persisted.
    pub checkpointed_size: u64,
    /// Wall time of the first append, for segment.ms.
    pub first_append_ms: Option<i64>,
    /// Producer state as of `next_offset`, written by the flusher once this segment is durable.
    pub snapshot_at_seal: Option<ProducerSnapshot>,
    /// Bytes of the file reserved with fallocate so far.
    pub preallocated: u64,
    /// Transactions whose ABORT marker is in this segment, in marker order (`.txnindex`).
    pub aborted: Vec<AbortedTxn>,
}

/// First extent reserved for a new segment. Reservation then doubles with the segment, up
/// to `LogConfig::preallocate_bytes` per extent: a busy partition appends into large
/// extents, while ten thousand idle ones do not each hold a large extent of disk.
pub(crate) const PREALLOCATE_INITIAL_BYTES: u64 = 1 << 20;

/// How far to reserve so that a write ending at `end` lands in allocated space, given
/// `current` bytes already reserved; `None` when nothing more is needed.
pub(crate) fn preallocation_target(
    current: u64,
    end: u64,
    extent_max: u64,
    segment_bytes: u64,
) -> Option<u64> {
    if extent_max == 0 || end <= current {
        return None;
    }
    let grow = current.max(PREALLOCATE_INITIAL_BYTES).min(extent_max);
    Some((current + grow).max(end).min(segment_bytes.max(end)))
}

impl Segment {
    pub(crate) fn new(dir: &Path, base_offset: i64) -> Self {
        Self {
            base_offset,
            next_offset: base_offset,
            size: 0,
            written: 0,
            file: None,
            path: segment_path(dir, base_offset, "log"),
            index_loaded: true,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            bytes_since_index: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            staging: Staging::default(),
            sealed: false,
            complete: false,
            checkpointed_size: 0,
            first_append_ms: None,
            snapshot_at_seal: None,
            preallocated: 0,
            aborted: Vec::new(),
        }
    }

    /// Offset relative to the segment base, clamped to the u32 range. Appends and recovery
    /// never let a segment hold offsets past `base + i32::MAX`, so the clamp only matters
    /// for lookups, where a floor search with a clamped key is still correct.
    pub(crate) fn relative(&self, offset: i64) -> u32 {
        (offset - self.base_offset).clamp(0, u32::MAX as i64) as u32
    }

    pub(crate) fn unwritten(&self) -> u64 {
        self.size - self.written
    }

    /// Updates the indexes for one batch stored at `position` (shared by append and recovery).
    pub(crate) fn index_batch(
        &mut self,
        h: &BatchHeader,
        position: u64,
        index_interval_bytes: u32,
    ) {
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
            self.offset_of_max_timestamp = h.last_offset();
        }
        if self.bytes_since_index >= index_interval_bytes as u64
            || self.index.len() == 0 && position == 0
        {
            let rel = self.relative(h.base_offset);
            let need = self.index.last().map(|(r, _)| rel > r).unwrap_or(true);
            if need {
                self.index.push(rel, position as u32);
                if self.offset_of_max_timestamp >= self.base_offset {
                    let r = self.relative(self.offset_of_max_timestamp);
                    self.time_index.maybe_push(self.max_timestamp, r);
                }
                self.bytes_since_index = 0;
            }
        }
        self.bytes_since_index += h.total_len() as u64;
        self.next_offset = h.last_offset() + 1;
    }

    /// Stages one batch (already patched) at the end of the segment, without copying it.
    pub(crate) fn append(
        &mut self,
        bytes: Bytes,
        h: &BatchHeader,
        index_interval_bytes: u32,
        now_ms: i64,
    ) {
        // Offsets increase; a follower's may skip those its leader's cleaner removed (the
        // partition checked the gap bound).
        assert!(h.base_offset >= self.next_offset, "offsets must increase");
        let position = self.size;
        self.index_batch(h, position, index_interval_bytes);
        self.size += bytes.len() as u64;
        self.staging.push(bytes);
        self.first_append_ms.get_or_insert(now_ms);
    }

    /// Seals the segment: the time index gets a final entry so its last entry is the
    /// segment's largest timestamp (what retention and recovery read back).
    pub(crate) fn seal(&mut self, snapshot: ProducerSnapshot) {
        if self.offset_of_max_timestamp >= self.base_offset {
            let r = self.relative(self.offset_of_max_timestamp);
            self.time_index.maybe_push(self.max_timestamp, r);
        }
        self.sealed = true;
        self.snapshot_at_seal = Some(snapshot);
    }

    /// After `len` staged bytes starting at `start` were written: drop the fully written
    /// aligned prefix, keep the partial last block for the next rewrite.
    pub(crate) fn written_through(&mut self, start: u64, len: usize, alignment: u64) {
        let end = start + len as u64;
        self.written = self.written.max(end);
        let keep_from = end - end % alignment.max(1);
        self.staging.drop_before(keep_from);
        let written_kept = self.written.saturating_sub(self.staging.start) as usize;
        self.staging.compact_front(written_kept);
    }
}

/// Splits `chunks` (written from an aligned position) into writes of at most `piece` bytes
/// each (`piece` a multiple of the alignment, so every write but the last ends aligned).
/// Only `Bytes` handles are sliced: nothing is copied.
pub(crate) fn split_writes(chunks: Vec<Bytes>, piece: usize) -> Vec<Vec<Bytes>> {
    let piece = piece.max(1);
    let mut out = Vec::new();
    let mut cur: Vec<Bytes> = Vec::new();
    let mut cur_len = 0usize;
    for mut c in chunks {
        while !c.is_empty() {
            let take = (piece - cur_len).min(c.len());
            cur.push(c.split_to(take));
            cur_len += take;
            if cur_len == piece {
                out.push(std::mem::take(&mut cur));
                cur_len = 0;
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The staged bytes of a segment: shared batches in file order, from `start` on.
#[derive(Debug, Default)]
pub(crate) struct Staging {
    /// File position of the first staged byte (aligned).
    pub start: u64,
    chunks: VecDeque<Bytes>,
    len: usize,
    /// The first chunk is a small buffer of our own (the partial block), not a batch.
    front_owned: bool,
}

impl Staging {
    /// Staging that starts at `start` with `tail` (the partial last block read back at open).
    pub(crate) fn with_tail(start: u64, tail: Bytes) -> Self {
        let mut s = Staging {
            start,
            ..Staging::default()
        };
        s.push(tail);
        s.front_owned = true;
        s
    }

    pub(crate) fn push(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.len += bytes.len();
        self.chunks.push_back(bytes);
    }

    /// The staged bytes as shared chunks (no copy), for one write.
    pub(crate) fn chunks(&self) -> Vec<Bytes> {
        self.chunks.iter().cloned().collect()
    }

    /// Forgets everything before file position `keep_from` (written and not to be
    /// rewritten). What remains of the written part is less than one alignment unit; it is
    /// copied out of the batches it came from, so they are not pinned by the staging.
    pub(crate) fn drop_before(&mut self, keep_from: u64) {
        let mut drop = (keep_from.saturating_sub(self.start) as usize).min(self.len);
        self.start += drop as u64;
        self.len -= drop;
        while drop > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            if front.len() <= drop {
                drop -= front.len();
                self.chunks.pop_front();
                self.front_owned = false;
            } else {
                bytes::Buf::advance(front, drop);
                drop = 0;
            }
        }
    }

    /// Copies the first `len` staged bytes (the rewritten partial block, already written)
    /// into one small buffer of their own, releasing the batches they were part of.
    pub(crate) fn compact_front(&mut self, len: usize) {
        let len = len.min(self.len);
        if len == 0 || (self.front_owned && self.chunks.front().is_some_and(|c| c.len() >= len)) {
            return;
        }
        let mut head = bytes::BytesMut::with_capacity(len);
        let mut need = len;
        while need > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            let take = front.len().min(need);
            head.extend_from_slice(front.get(..take).unwrap_or_default());
            need -= take;
            if take == front.len() {
                self.chunks.pop_front();
            } else {
                bytes::Buf::advance(front, take);
            }
        }
        super::copy_stats::add_partial_block(len);
        self.chunks.push_front(head.freeze());
        self.front_owned = true;
    }
}

/// Reads whole batches from `file` starting at `pos`, never past `end`. Returns the batches
/// found in one read (at least one if any starts before `end`, re-reading larger when the
/// first batch does not fit) and the position after them. Every batch is CRC-checked:
/// bytes from disk are not trusted.
pub(crate) async fn read_batches(
    file: &dyn SegmentFile,
    path: &Path,
    pos: u64,
    end: u64,
    want_bytes: usize,
) -> Result<(Vec<(BatchHeader, Bytes)>, u64), Error> {
    let chunk = read_chunk(file, path, pos, end, want_bytes).await?;
    Ok((chunk.batches, chunk.next))
}

/// What one `read_chunk` found.
pub(crate) struct ReadChunk {
    /// Whole, CRC-checked batches in file order.
    pub batches: Vec<(BatchHeader, Bytes)>,
    /// The file position after them.
    pub next: u64,
    /// The total length of the batch at `next` when its header was in the read but the
    /// batch was not: a fetch that cannot take that many more bytes is full, and need not
    /// read it only to leave it out.
    pub next_len: Option<usize>,
}

/// `read_batches`, also telling the length of the batch that follows when the read saw its
/// header.
pub(crate) async fn read_chunk(
    file: &dyn SegmentFile,
    path: &Path,
    pos: u64,
    end: u64,
    want_bytes: usize,
) -> Result<ReadChunk, Error> {
    let mut len = want_bytes.clamp(READ_CHUNK_BYTES_MIN, READ_CHUNK_BYTES_MAX);
    loop {
        if pos >= end {
            return Ok(ReadChunk {
                batches: Vec::new(),
                next: pos,
                next_len: None,
            });
        }
        let len_now = (len as u64).min(end - pos) as usize;
        let buf = file
            .read_at(pos, len_now)
            .await
            .map_err(|e| Error::io(path, "read", e))?;
        if buf.len() < len_now {
            return Err(Error::corruption(
                path,
                pos + buf.len() as u64,
                "file shorter than the segment",
            ));
        }
        let mut out = Vec::new();
        let mut at = 0usize;
        let mut next_len = None;
        while let Some(rest) = buf.get(at..).filter(|r| r.len() >= BATCH_HEADER_LEN) {
            let here = pos + at as u64;
            let h = BatchHeader::parse(rest)
                .map_err(|e| Error::corruption(path, here, e.to_string()))?;
            let total = h.total_len();
            if here + total as u64 > end {
                return Err(Error::corruption(
                    path,
                    here,
                    "batch extends past the segment end",
                ));
            }
            let Some(one) = rest.get(..total) else {
                next_len = Some(total);
                break;
            };
            let h = validate(one).map_err(|e| Error::corruption(path, here, e.to_string()))?;
            out.push((h, buf.slice(at..at + total)));
            at += total;
        }
        if !out.is_empty() {
            return Ok(ReadChunk {
                batches: out,
                next: pos + at as u64,
                next_len,
            });
        }
        // The first batch did not fit in this read: read again, sized to it.
        let need = match buf.get(..BATCH_HEADER_LEN) {
            Some(head) => BatchHeader::parse(head)
                .map_err(|e| Error::corruption(path, pos, e.to_string()))?
                .total_len(),
            None => BATCH_HEADER_LEN,
        };
        if need as u64 > end - pos || need > BATCH_READ_BYTES_MAX || need <= len_now {
            return Err(Error::corruption(path, pos, "truncated or oversized batch"));
        }
        len = need;
    }
}

/// No batch read back from disk may be larger than this (bounds the buffer a corrupt
/// length field can make us allocate).
pub(crate) const BATCH_READ_BYTES_MAX: usize = super::STAGING_BYTES_MAX;

#[cfg(test)]
mod preallocation_tests {
    use super::*;

    /// Writes are cut at exact piece boundaries, keep every byte in order, and copy nothing.
    #[test]
    fn split_writes_cuts_at_pieces() {
        let chunks: Vec<Bytes> = [5usize, 3, 9, 1]
            .iter()
            .enumerate()
            .map(|(i, n)| Bytes::from(vec![i as u8; *n]))
            .collect();
        let all: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
        let pieces = split_writes(chunks, 4);
        let lens: Vec<usize> = pieces
            .iter()
            .map(|p| p.iter().map(|c| c.len()).sum())
            .collect();
        assert_eq!(lens, vec![4, 4, 4, 4, 2]);
        let joined: Vec<u8> = pieces.iter().flatten().flat_map(|c| c.to_vec()).collect();
        assert_eq!(joined, all);
        assert!(split_writes(Vec::new(), 4).is_empty());
    }

    /// Reservation starts small, doubles, is capped per extent and by the segment size,
    /// and always covers the write.
    #[test]
    fn grows_geometrically_within_bounds() {
        let mib = 1 << 20;
        assert_eq!(preallocation_target(0, 4096, 64 * mib, 1 << 30), Some(mib));
        assert_eq!(
            preallocation_target(mib, mib + 1, 64 * mib, 1 << 30),
            Some(2 * mib)
        );
        assert_eq!(
            preallocation_target(128 * mib, 128 * mib + 1, 64 * mib, 1 << 30),
            Some(192 * mib)
        );
        assert_eq!(
            preallocation_target(mib, 10 * mib, 64 * mib, 1 << 30),
            Some(10 * mib)
        );
        assert_eq!(preallocation_target(0, 4096, 64 * mib, 8192), Some(8192));
        assert_eq!(
            preallocation_target(0, 20_000, 64 * mib, 8192),
            Some(20_000)
        );
        assert_eq!(preallocation_target(mib, 4096, 64 * mib, 1 << 30), None);
        assert_eq!(preallocation_target(0, 4096, 0, 1 << 30), None);
    }
}
