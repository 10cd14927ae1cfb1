//! Recent batches kept in memory as `Bytes`, so fetches at the tail never touch the disk.
//!
//! Invariants: entries are contiguous in offset order and end at the log end; an entry is
//! evicted only from the front, only when over `tail_cache_bytes` or when the shard's
//! memory budget asks, and only once its bytes are written to the segment file
//! (`written_offset`), so unwritten data is always readable.
//!
//! Accounting: every entry owns its own buffer (the log's copy of the batch, exactly its
//! size) and carries the budget `Charge` for it, so what the cache counts is what it pins.
//! The staging list of the active segment shares these buffers while they are unwritten.

use std::collections::VecDeque;

use bytes::Bytes;

use super::budget::Charge;

#[derive(Debug)]
pub(crate) struct CachedBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub bytes: Bytes,
    /// The budget charge for `bytes`, released when the entry goes.
    pub charge: Charge,
}

#[derive(Debug, Default)]
pub(crate) struct TailCache {
    batches: VecDeque<CachedBatch>,
    bytes: usize,
}

impl TailCache {
    /// First offset served from memory; `None` if empty.
    pub(crate) fn first_offset(&self) -> Option<i64> {
        self.batches.front().map(|b| b.base_offset)
    }

    pub(crate) fn push(&mut self, batch: CachedBatch) {
        if let Some(last) = self.batches.back() {
            // Offsets increase; a follower's may skip those its leader's cleaner removed.
            assert!(
                batch.base_offset > last.last_offset,
                "tail cache offsets must increase"
            );
        }
        self.bytes += batch.bytes.len();
        self.batches.push_back(batch);
    }

    pub(crate) fn evict(&mut self, limit_bytes: usize, written_offset: i64) {
        while self.bytes > limit_bytes {
            match self.batches.front() {
                Some(b) if b.last_offset < written_offset => {
                    self.bytes -= b.bytes.len();
                    self.batches.pop_front();
                }
                _ => break,
            }
        }
    }

    /// Evicts written batches from the front until about `want` bytes were released (the
    /// memory budget asks); returns the bytes released.
    pub(crate) fn evict_bytes(&mut self, want: usize, written_offset: i64) -> usize {
        let mut freed = 0;
        while freed < want {
            match self.batches.front() {
                Some(b) if b.last_offset < written_offset => {
                    freed += b.charge.bytes();
                    self.bytes -= b.bytes.len();
                    self.batches.pop_front();
                }
                _ => break,
            }
        }
        freed
    }

    /// Forgets everything (the log was truncated; the cache must never serve cut batches).
    pub(crate) fn clear(&mut self) {
        self.batches.clear();
        self.bytes = 0;
    }

    /// Drops batches wholly below the log start.
    pub(crate) fn evict_below(&mut self, log_start: i64) {
        while let Some(b) = self.batches.front() {
            if b.last_offset >= log_start {
                break;
            }
            self.bytes -= b.bytes.len();
            self.batches.pop_front();
        }
    }

    /// Whole batches from the one containing `offset`, each wholly below `upper` (exclusive;
    /// a batch straddling it is not returned), up to `max_bytes` but at least one (KIP-74).
    pub(crate) fn read(&self, offset: i64, max_bytes: usize, upper: i64) -> Vec<Bytes> {
        let start = self.batches.partition_point(|b| b.last_offset < offset);
        let mut out = Vec::new();
        let mut total = 0usize;
        for b in self.batches.range(start..) {
            if b.last_offset >= upper {
                break;
            }
            if !out.is_empty() && total + b.bytes.len() > max_bytes {
                break;
            }
            total += b.bytes.len();
            out.push(b.bytes.clone());
            if total >= max_bytes {
                break;
            }
        }
        out
    }

    /// The batches at or after `from_offset`, each starting below `high_watermark`, whose
    /// max timestamp is >= `timestamp`, in offset order: where a timestamp lookup looks
    /// inside for the first record that qualifies.
    pub(crate) fn timestamp_candidates(
        &self,
        from_offset: i64,
        timestamp: i64,
        high_watermark: i64,
    ) -> impl Iterator<Item = &CachedBatch> {
        let start = self
            .batches
            .partition_point(|b| b.last_offset < from_offset);
        self.batches
            .range(start..)
            .take_while(move |b| b.base_offset < high_watermark)
            .filter(move |b| b.max_timestamp >= timestamp)
    }
}
