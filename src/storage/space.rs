//! Free space on the data directory's filesystem, and the reserve kept below it.
//!
//! As Redpanda does (`storage_min_free_bytes`), client produce is refused once the free
//! space falls under a reserve, so the space that remains is there for what keeps the
//! broker operable: the metadata log (topic deletion is how an operator frees space), small
//! state files (high watermark, log start, epochs, producer snapshots), index files of
//! rolled segments, consumer-group commits and replication. Deleting a topic, DeleteRecords
//! or retention bring the free space back above the reserve, and produce resumes without a
//! restart.
//!
//! The reserve is `min(storage_min_free_bytes, STORAGE_RESERVE_SHARE_MAX of the
//! filesystem)`: the configured amount on a normal disk, and a tenth of a small one (a 300
//! MB test filesystem keeps 30 MB) so that a small disk is still usable.
//!
//! The free space is polled (`refresh`, `statvfs`) by one task and, between polls, lowered
//! by every append and preallocation (`consume`), so a fast producer cannot overshoot the
//! reserve by a poll period's worth of data. Shared by every shard: atomics, no locks.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// At most this share (1/N) of the filesystem is kept in reserve.
pub const STORAGE_RESERVE_SHARE_MAX: u64 = 10;
/// How often the free space is measured.
pub const DISK_SPACE_POLL_MS: u64 = 250;
/// A refused produce is logged at most this often.
const REFUSED_LOG_INTERVAL_MS: u64 = 10_000;

#[derive(Debug)]
pub struct DiskSpace {
    path: PathBuf,
    min_free_bytes: u64,
    /// Free bytes (for unprivileged use) at the last poll, less what was appended since.
    free: AtomicU64,
    total: AtomicU64,
    reserve: AtomicU64,
    /// Whether produce was being refused at the last check (for the log lines).
    refusing: AtomicBool,
    last_refused_log_ms: AtomicU64,
}

impl DiskSpace {
    /// Measures `path`'s filesystem once; an unreadable one counts as roomy (the writes
    /// themselves then report the error).
    pub fn new(path: &Path, min_free_bytes: u64) -> Self {
        let s = DiskSpace {
            path: path.to_path_buf(),
            min_free_bytes,
            free: AtomicU64::new(u64::MAX),
            total: AtomicU64::new(u64::MAX),
            reserve: AtomicU64::new(min_free_bytes),
            refusing: AtomicBool::new(false),
            last_refused_log_ms: AtomicU64::new(0),
        };
        s.refresh();
        s
    }

    /// Re-measures the free space (`statvfs`).
    pub fn refresh(&self) {
        let Some((free, total)) = statvfs(&self.path) else {
            return;
        };
        self.total.store(total, Ordering::Relaxed);
        self.reserve
            .store(reserve_for(self.min_free_bytes, total), Ordering::Relaxed);
        self.free.store(free, Ordering::Relaxed);
        let refused = self.produce_refused();
        if self.refusing.swap(refused, Ordering::Relaxed) && !refused {
            tracing::info!(
                free_bytes = free,
                reserve_bytes = self.reserve_bytes(),
                "free disk space is above the reserve again: produce accepted"
            );
        }
    }

    pub fn free_bytes(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }
    /// Size of the filesystem at the last poll (`u64::MAX` when it could not be measured).
    pub fn total_bytes(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
    pub fn reserve_bytes(&self) -> u64 {
        self.reserve.load(Ordering::Relaxed)
    }

    /// True while the free space is under the reserve: client produce is refused.
    pub fn produce_refused(&self) -> bool {
        self.free_bytes() < self.reserve_bytes()
    }

    /// Counts `bytes` about to be written (an append, a preallocation) until the next poll.
    pub fn consume(&self, bytes: u64) {
        let _ = self
            .free
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                Some(f.saturating_sub(bytes))
            });
    }

    /// Whether `bytes` more may be preallocated without eating into the reserve
    /// (preallocation only helps performance; data writes do not need it).
    pub fn may_preallocate(&self, bytes: u64) -> bool {
        self.free_bytes() >= self.reserve_bytes().saturating_add(bytes)
    }

    /// Logs a refused produce, at most once per `REFUSED_LOG_INTERVAL_MS`.
    pub fn log_refused(&self, now_ms: u64) {
        let last = self.last_refused_log_ms.load(Ordering::Relaxed);
        if last != 0 && now_ms.saturating_sub(last) < REFUSED_LOG_INTERVAL_MS {
            return;
        }
        self.last_refused_log_ms
            .store(now_ms.max(1), Ordering::Relaxed);
        tracing::warn!(
            free_bytes = self.free_bytes(),
            reserve_bytes = self.reserve_bytes(),
            data_dir = %self.path.display(),
            "refusing produce: free disk space is under storage_min_free_bytes \
             (delete topics or records, or lower retention, to free space)"
        );
    }
}

/// The reserve for a filesystem of `total` bytes (see the module doc).
pub fn reserve_for(min_free_bytes: u64, total: u64) -> u64 {
    min_free_bytes.min(total / STORAGE_RESERVE_SHARE_MAX)
}

/// (available bytes, total bytes) of the filesystem holding `path`.
fn statvfs(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // u64 on 64-bit Linux, the only target (glommio needs io_uring).
    let frsize = st.f_frsize;
    Some((
        st.f_bavail.saturating_mul(frsize),
        st.f_blocks.saturating_mul(frsize),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reserve is the configured amount, but at most a tenth of the filesystem.
    #[test]
    fn reserve_is_clamped_for_small_disks() {
        let gib = 1u64 << 30;
        assert_eq!(reserve_for(gib, 1000 * gib), gib);
        assert_eq!(reserve_for(gib, 300 << 20), 30 << 20);
        assert_eq!(reserve_for(0, 300 << 20), 0);
    }

    /// Appends lower the estimate until the next poll; under the reserve produce is refused.
    #[test]
    fn consume_lowers_the_estimate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = DiskSpace::new(dir.path(), 0);
        assert!(!s.produce_refused());
        let free = s.free_bytes();
        s.consume(1000);
        assert_eq!(s.free_bytes(), free - 1000);
        let strict = DiskSpace::new(dir.path(), u64::MAX);
        assert_eq!(
            strict.reserve_bytes(),
            strict.total.load(Ordering::Relaxed) / 10
        );
        strict.consume(u64::MAX);
        assert!(strict.produce_refused());
        assert!(!strict.may_preallocate(1));
    }
}
