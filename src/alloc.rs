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

/// Free heap memory below which `release_free_memory` leaves it alone.
pub const FREE_HEAP_BYTES_TRIM_MIN: usize = 32 << 20;

/// What one look at the heap found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    /// Less than `FREE_HEAP_BYTES_TRIM_MIN` free, or less free than in use.
    Kept,
    /// The free pages were handed back.
    Trimmed,
}

/// Whether a heap with `free` bytes in free chunks and `in_use` bytes allocated is worth
/// trimming. Under a steady load glibc's arenas keep a working reserve of free chunks (measured
/// ~35 MB at 400 MB/s): trimming it every 250 ms only made the allocator fault the same pages
/// back in, and each `malloc_trim` took 6 ms (p50; p99 12 ms, uprobes on libc) while it held
/// the arenas' locks. What the trim is for is memory left behind when the load drops (the
/// high-water mark of a burst, or of thousands of partitions): then most of the heap is free.
/// So the resident heap stays within about twice what is in use.
pub fn worth_trimming(free: usize, in_use: usize) -> bool {
    free >= FREE_HEAP_BYTES_TRIM_MIN && free >= in_use
}

/// Gives the kernel back the heap pages glibc holds free when `worth_trimming` says so. Batches
/// come and go by the hundred megabytes; glibc keeps what they freed in its per-thread arenas
/// (64 MiB heaps, trimmed only at their top), so without this the resident size stays at the
/// high-water mark of every arena — measured 500 MB resident for 190 MB in use with a 128 MiB
/// memory budget. Cheap when it keeps the memory (`mallinfo2` only).
pub fn release_free_memory() -> Trim {
    // SAFETY: a plain glibc call without arguments.
    let info = unsafe { libc::mallinfo2() };
    if !worth_trimming(info.fordblks, info.uordblks) {
        return Trim::Kept;
    }
    let started = std::time::Instant::now();
    // SAFETY: as above.
    unsafe { libc::malloc_trim(0) };
    tracing::debug!(
        free = info.fordblks,
        in_use = info.uordblks,
        took_us = started.elapsed().as_micros() as u64,
        "heap trimmed"
    );
    Trim::Trimmed
}

/// How long the trimmer sleeps after a look at the heap (`release_free_memory`) that took
/// `look`: `MEMORY_TRIM_INTERVAL_MS`, or `MEMORY_TRIM_LOOK_COST_RATIO` times the look if that
/// is longer. `mallinfo2` walks every free chunk of every arena, holding that arena's lock
/// (a shard allocating a batch meanwhile waits): with 5,000 partitions it took 1-4 ms (p50),
/// 5-9 ms (p90) and up to 30 ms (uprobes on libc, seven brokers' runs; 0.5 ms at 16
/// partitions), so a fixed period would spend a share of a core on looking, and stall the
/// shards as often, that grows with the heap's fragmentation.
pub fn next_look_in(look: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_millis(crate::limits::MEMORY_TRIM_INTERVAL_MS)
        .max(look.saturating_mul(crate::limits::MEMORY_TRIM_LOOK_COST_RATIO))
}

/// Starts, once per process, the thread that calls `release_free_memory`, sleeping
/// `next_look_in` between looks. Its own thread, not a shard's housekeeping task: a trim walks
/// every arena (milliseconds when there is much to give back), and on a shard it stalled that
/// shard's event loop, and every request on it, for as long.
pub fn start_memory_trimmer() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("strata-trim".into())
            .spawn(move || {
                let mut pause = next_look_in(std::time::Duration::ZERO);
                loop {
                    std::thread::sleep(pause);
                    let started = std::time::Instant::now();
                    release_free_memory();
                    pause = next_look_in(started.elapsed());
                }
            });
        if let Err(e) = spawned {
            // The broker works without it; its resident size just keeps its high-water mark.
            tracing::warn!("cannot start the heap trimming thread: {e}");
        }
    });
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

    /// A working reserve under load is kept; what a finished burst left behind is trimmed.
    #[test]
    fn trims_only_a_heap_that_is_mostly_free() {
        const MB: usize = 1 << 20;
        assert!(
            !super::worth_trimming(35 * MB, 190 * MB),
            "the reserve of a steady load"
        );
        assert!(
            !super::worth_trimming(20 * MB, 0),
            "too little to be worth a trim"
        );
        assert!(
            super::worth_trimming(310 * MB, 190 * MB),
            "the high-water mark of a burst"
        );
        assert!(super::worth_trimming(64 * MB, 8 * MB), "the load stopped");
    }

    /// Looks at a small heap come every interval; a slow one stretches the pause so that
    /// looking takes at most 1/ratio of the thread's time.
    #[test]
    fn slow_looks_stretch_the_pause() {
        use crate::limits::{MEMORY_TRIM_INTERVAL_MS, MEMORY_TRIM_LOOK_COST_RATIO};
        use std::time::Duration;
        let interval = Duration::from_millis(MEMORY_TRIM_INTERVAL_MS);
        assert_eq!(super::next_look_in(Duration::ZERO), interval);
        assert_eq!(super::next_look_in(Duration::from_micros(200)), interval);
        let slow = Duration::from_millis(30);
        let pause = super::next_look_in(slow);
        assert_eq!(pause, slow * MEMORY_TRIM_LOOK_COST_RATIO);
        assert!(pause > interval);
        assert_eq!(super::next_look_in(Duration::MAX), Duration::MAX);
    }
}
