//! The global allocator, and the guard around request decoding.
//!
//! The kafka-protocol decoders reserve `Vec::with_capacity(n)` for an array count `n` read
//! off the wire before reading the elements. A hostile count (2^31 - 1) times an element
//! size asks for hundreds of GiB; the system allocator refuses, and Rust aborts the
//! process — one bad frame would take the broker down. So allocations of at least
//! `DECODE_ALLOCATION_LAZY_MIN` are served from `mmap(MAP_NORESERVE)`: address space that
//! costs nothing until touched. The decoder then runs out of input after a few elements,
//! returns an error, and the mapping is unmapped. `guarded` additionally turns any panic in
//! a decoder into an error.
use std::alloc::{GlobalAlloc, Layout, System};

use crate::limits::DECODE_ALLOCATION_LAZY_MIN;

pub struct StrataAlloc;

const PAGE: usize = 4096;

unsafe impl GlobalAlloc for StrataAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= DECODE_ALLOCATION_LAZY_MIN && layout.align() <= PAGE {
            let p = libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return std::ptr::null_mut();
            }
            return p as *mut u8;
        }
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= DECODE_ALLOCATION_LAZY_MIN && layout.align() <= PAGE {
            libc::munmap(ptr as *mut libc::c_void, layout.size());
            return;
        }
        System.dealloc(ptr, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= DECODE_ALLOCATION_LAZY_MIN && layout.align() <= PAGE {
            // Fresh anonymous mappings are zero-filled by the kernel.
            return self.alloc(layout);
        }
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let lazy = |size: usize| size >= DECODE_ALLOCATION_LAZY_MIN && layout.align() <= PAGE;
        if !lazy(layout.size()) && !lazy(new_size) {
            return System.realloc(ptr, layout, new_size);
        }
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        let new_ptr = self.alloc(new_layout);
        if !new_ptr.is_null() {
            std::ptr::copy_nonoverlapping(ptr, new_ptr, layout.size().min(new_size));
            self.dealloc(ptr, layout);
        }
        new_ptr
    }
}

/// Free heap memory above which `release_free_memory` hands it back to the kernel.
pub const FREE_HEAP_BYTES_TRIM_MIN: usize = 32 << 20;

/// Gives the kernel back the heap pages glibc holds free. Batches come and go by the
/// hundred megabytes; glibc keeps what they freed in its per-thread arenas (64 MiB heaps,
/// trimmed only at their top), so without this the resident size stays at the high-water
/// mark of every arena — measured 500 MB resident for 190 MB in use with a 128 MiB memory
/// budget. Called every `MEMORY_TRIM_INTERVAL_MS` by one shard; cheap when little is free (`mallinfo2` only).
pub fn release_free_memory() {
    // SAFETY: plain glibc calls without arguments that could be invalid.
    let free = unsafe { libc::mallinfo2() }.fordblks;
    if free >= FREE_HEAP_BYTES_TRIM_MIN {
        // SAFETY: as above.
        unsafe { libc::malloc_trim(0) };
    }
}

/// Runs a decoder, turning a panic inside it into an error: bytes from the network must
/// never be able to crash the broker.
pub fn guarded<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => Err(anyhow::anyhow!("decoder panicked on malformed input")),
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::MetadataRequest;
    use kafka_protocol::protocol::Decodable;

    /// A Metadata request claiming 2^31-1 topics decodes to an error instead of aborting.
    #[test]
    fn absurd_array_count_is_an_error() {
        let mut buf = bytes::Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0, 1, b'a']);
        let r = super::guarded(|| MetadataRequest::decode(&mut buf, 1));
        assert!(r.is_err());
    }
}
