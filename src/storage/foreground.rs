//! The shard's foreground disk I/O in flight: the flushers' segment writes and `fdatasync`s,
//! which acks=all produce, replication and the high watermark wait on. Counted so the log
//! cleaner can yield the disk to them (`storage::cleaner::pace`). One counter per thread,
//! which is one per shard (thread-per-core); a few `Cell` updates per flush.

use std::cell::Cell;

thread_local! {
    static IN_FLIGHT: Cell<u32> = const { Cell::new(0) };
}

/// Held for the duration of one foreground write or fsync.
pub struct ForegroundIo(());

impl ForegroundIo {
    pub fn begin() -> Self {
        IN_FLIGHT.with(|n| n.set(n.get().saturating_add(1)));
        ForegroundIo(())
    }
}

impl Drop for ForegroundIo {
    fn drop(&mut self) {
        IN_FLIGHT.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Whether any foreground write or fsync is in flight on this shard.
pub fn in_flight() -> bool {
    IN_FLIGHT.with(|n| n.get() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_nested_guards() {
        assert!(!in_flight());
        let a = ForegroundIo::begin();
        let b = ForegroundIo::begin();
        drop(a);
        assert!(in_flight());
        drop(b);
        assert!(!in_flight());
    }
}
