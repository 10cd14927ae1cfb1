//! Aligned memory the log appends into and the direct-I/O writer writes from, so a produced
//! byte is copied once in user space: out of the request, into the buffer that is written.
//!
//! `AlignedBuf` is one heap allocation aligned for direct I/O. It is `Send + Sync` (plain
//! memory, unlike glommio's `DmaBuffer`), so slices of it travel as `Bytes` — to the tail
//! cache, into fetch responses crossing shards — and the same memory is handed to the
//! kernel by the writer (`file_io.rs`) without a copy.
//!
//! `LogBuffer` is a partition's append cursor: batches are copied one after another into
//! its current chunk, *file-congruent* — the byte at file position `p` sits at an address
//! equal to `p` modulo the alignment — so every whole aligned block of the file that lies in
//! one chunk is also an aligned block of memory, and the writer hands it to the kernel as
//! it is. Only blocks that straddle two chunks, and the partial last block of a write, are
//! assembled by copying (at most one alignment unit each).
//!
//! Safety: a chunk is written only through the cursor, only past `filled` (bytes no `Bytes`
//! covers yet), and `Bytes` are made only of filled bytes, which are never written again.
//! So every `&[u8]` handed out covers memory that no one writes while it lives.
//!
//! Chunk sizes start small (an idle partition pins little) and double while a partition
//! keeps filling them, up to `LOG_CHUNK_BYTES_MAX`; a batch larger than that gets a chunk
//! of its own size.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;

/// Alignment of every chunk: a multiple of any direct-I/O alignment we meet (512, 4096).
pub(crate) const CHUNK_ALIGN: usize = 4096;
/// The first chunk of a partition (or after it was idle) is at least this large ...
pub(crate) const LOG_CHUNK_BYTES_MIN: usize = 16 << 10;
/// ... and chunks double while they fill, up to this (one write piece).
pub(crate) const LOG_CHUNK_BYTES_MAX: usize = super::budget::WRITE_PIECE_BYTES;

/// One `CHUNK_ALIGN`-aligned heap allocation of a fixed size.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: plain heap memory with no thread affinity; shared access follows the module rule
// (filled bytes are never written again; unfilled bytes are written only by their owner).
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.capacity())
    }
}

impl AlignedBuf {
    /// `len` zeroed bytes (rounded up to `CHUNK_ALIGN`). Aborts like any allocation if the
    /// allocator fails.
    pub(crate) fn zeroed(len: usize) -> Self {
        Self::allocate(len, true)
    }

    /// `len` bytes (rounded up) left uninitialised: a log chunk, whose bytes are written
    /// (`LogBuffer::append`) before any reference to them is made, so appending does not
    /// pay for clearing memory it overwrites anyway.
    fn uninit(len: usize) -> Self {
        Self::allocate(len, false)
    }

    fn allocate(len: usize, zeroed: bool) -> Self {
        let size = len.max(1).next_multiple_of(CHUNK_ALIGN);
        // A size rounded to a power-of-two alignment always forms a valid layout unless it
        // overflows isize, which no caller's length (bounded by staging limits) comes near.
        let layout = Layout::from_size_align(size, CHUNK_ALIGN)
            .unwrap_or_else(|_| std::alloc::handle_alloc_error(Layout::new::<u8>()));
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe {
            if zeroed {
                std::alloc::alloc_zeroed(layout)
            } else {
                std::alloc::alloc(layout)
            }
        };
        let Some(ptr) = NonNull::new(ptr) else {
            std::alloc::handle_alloc_error(layout)
        };
        Self { ptr, layout }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.layout.size()
    }

    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The bytes `[off, off + len)` (clamped to the capacity) for reading.
    ///
    /// Callers keep to the module rule: only ranges no one is writing.
    fn slice(&self, off: usize, len: usize) -> &[u8] {
        let off = off.min(self.capacity());
        let len = len.min(self.capacity() - off);
        // SAFETY: in bounds of the allocation; no writer touches this range (module rule).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// Copies `src` to `[off, ..)` (cut at the capacity) and returns those bytes, now
    /// initialised, for editing.
    ///
    /// # Safety
    /// No `&[u8]` to any of these bytes may exist or be made while the result lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn fill(&self, off: usize, src: &[u8]) -> &mut [u8] {
        let off = off.min(self.capacity());
        let len = src.len().min(self.capacity() - off);
        let dst = self.ptr.as_ptr().add(off);
        // Raw copy first: the destination may be uninitialised, and a `&mut [u8]` to it
        // is made only once every byte is written.
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, len);
        std::slice::from_raw_parts_mut(dst, len)
    }

    /// Copies `bytes` to `[off, ..)` (cut at the capacity). Exclusive access: `&mut self`.
    pub(crate) fn write(&mut self, off: usize, bytes: &[u8]) {
        // SAFETY: `&mut self` means no other reference to this buffer exists.
        unsafe { self.fill(off, bytes) };
    }

    #[cfg(test)]
    pub(crate) fn as_slice(&self) -> &[u8] {
        self.slice(0, self.capacity())
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `allocate` with this very layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// The owner behind a `Bytes` made from a chunk: keeps the chunk alive, shows one range.
struct ChunkSlice {
    chunk: Arc<AlignedBuf>,
    off: usize,
    len: usize,
}

impl AsRef<[u8]> for ChunkSlice {
    fn as_ref(&self) -> &[u8] {
        self.chunk.slice(self.off, self.len)
    }
}

/// A partition's append cursor (see module doc).
#[derive(Default)]
pub(crate) struct LogBuffer {
    chunk: Option<Arc<AlignedBuf>>,
    /// Segment (base offset) the chunk's bytes belong to.
    segment: i64,
    /// File position of the chunk's first byte (a multiple of `CHUNK_ALIGN`).
    file_base: u64,
    /// Bytes of the chunk filled so far, counted from its first byte.
    filled: usize,
    /// Size of the next chunk if the current one fills up.
    next_capacity: usize,
}

impl std::fmt::Debug for LogBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogBuffer")
            .field("capacity", &self.chunk.as_ref().map(|c| c.capacity()))
            .field("file_base", &self.file_base)
            .field("filled", &self.filled)
            .finish()
    }
}

/// Where the next batch goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// After the last batch, in the current chunk.
    Fits,
    /// A new chunk of this many bytes.
    NewChunk { capacity: usize },
}

impl LogBuffer {
    /// Where a batch of `len` bytes at file position `pos` of segment `segment` would go,
    /// and so how much new memory it takes (for the budget, before appending).
    pub(crate) fn placement(&self, segment: i64, pos: u64, len: usize) -> Placement {
        if let Some(chunk) = &self.chunk {
            if self.segment == segment
                && self.file_base + self.filled as u64 == pos
                && self.filled + len <= chunk.capacity()
            {
                return Placement::Fits;
            }
        }
        let head = (pos % CHUNK_ALIGN as u64) as usize;
        let need = (head + len).next_multiple_of(CHUNK_ALIGN);
        let grow = if self.chunk.is_some() {
            self.next_capacity
        } else {
            LOG_CHUNK_BYTES_MIN
        };
        Placement::NewChunk {
            capacity: need.max(grow.clamp(LOG_CHUNK_BYTES_MIN, LOG_CHUNK_BYTES_MAX)),
        }
    }

    /// Copies `input` (the one copy) to file position `pos` of `segment`, lets `patch` edit
    /// the copy in place, and returns it as `Bytes`. A new chunk, when one is needed, has
    /// `capacity` bytes at least (a smaller one than `placement` said when the budget is
    /// short: the batch still fits).
    pub(crate) fn append(
        &mut self,
        segment: i64,
        pos: u64,
        input: &[u8],
        capacity: usize,
        patch: impl FnOnce(&mut [u8]),
    ) -> Bytes {
        if self.placement(segment, pos, input.len()) != Placement::Fits {
            let head = (pos % CHUNK_ALIGN as u64) as usize;
            let capacity = capacity.max(head + input.len());
            // A chunk that filled up makes the next one larger; one left early (a new
            // segment, a gap) does not.
            let filled_up = self.chunk.is_some()
                && self.segment == segment
                && self.file_base + self.filled as u64 == pos;
            self.next_capacity = if filled_up {
                (capacity * 2).min(LOG_CHUNK_BYTES_MAX)
            } else {
                LOG_CHUNK_BYTES_MIN
            };
            self.chunk = Some(Arc::new(AlignedBuf::uninit(capacity)));
            self.segment = segment;
            self.file_base = pos - head as u64;
            self.filled = head;
        }
        let Some(chunk) = self.chunk.clone() else {
            // Set just above.
            return Bytes::copy_from_slice(input);
        };
        let off = self.filled;
        // SAFETY: `[off, off + len)` is past `filled`, so no `Bytes` covers it yet (module
        // rule), and this `&mut` ends before the `Bytes` for it is made.
        let dst = unsafe { chunk.fill(off, input) };
        patch(dst);
        self.filled += input.len();
        Bytes::from_owner(ChunkSlice {
            chunk,
            off,
            len: input.len(),
        })
    }

    /// Whether `bytes` lies in the current chunk (which the cursor pins anyway).
    pub(crate) fn holds(&self, bytes: &Bytes) -> bool {
        self.chunk.as_ref().is_some_and(|c| {
            let start = c.as_ptr() as usize;
            let p = bytes.as_ptr() as usize;
            p >= start && p < start + c.capacity()
        })
    }

    /// Bytes of memory the current chunk takes.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.chunk.as_ref().map_or(0, |c| c.capacity())
    }

    /// Bytes of the current chunk not used by any batch.
    #[cfg(test)]
    pub(crate) fn unused(&self) -> usize {
        self.capacity().saturating_sub(self.filled)
    }

    /// Lets go of the current chunk (the next append starts a small one).
    pub(crate) fn release(&mut self) {
        self.chunk = None;
        self.filled = 0;
        self.next_capacity = LOG_CHUNK_BYTES_MIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches land file-congruent (address = file position modulo the alignment), back to
    /// back in one chunk while they fit, patched in place; a full chunk is followed by a
    /// larger one; a new segment starts a fresh chunk; the bytes read back are the input.
    #[test]
    fn appends_are_congruent_contiguous_and_patched() {
        let mut b = LogBuffer::default();
        let mut pos = 100u64;
        let mut prev: Option<Bytes> = None;
        for i in 0..8u8 {
            let input = vec![i; 3000];
            let out = b.append(7, pos, &input, LOG_CHUNK_BYTES_MIN, |d| d[0] = 0xee);
            assert_eq!(
                out.as_ptr() as usize % CHUNK_ALIGN,
                pos as usize % CHUNK_ALIGN
            );
            assert_eq!(out.first(), Some(&0xee));
            assert_eq!(out.get(1..), input.get(1..));
            if let Some(p) = &prev {
                if b.holds(p) {
                    assert_eq!(p.as_ptr() as usize + p.len(), out.as_ptr() as usize);
                }
            }
            prev = Some(out);
            pos += 3000;
        }
        let small = b.capacity();
        assert!(matches!(
            b.placement(7, pos, LOG_CHUNK_BYTES_MAX),
            Placement::NewChunk { capacity } if capacity > LOG_CHUNK_BYTES_MAX
        ));
        assert!(matches!(b.placement(8, 0, 10), Placement::NewChunk { .. }));
        let _ = b.append(8, 0, &[1; 10], LOG_CHUNK_BYTES_MIN, |_| {});
        assert!(b.capacity() >= LOG_CHUNK_BYTES_MIN && small >= LOG_CHUNK_BYTES_MIN);
        assert_eq!(b.unused(), b.capacity() - 10);
        b.release();
        assert_eq!(b.capacity(), 0);
    }
}
