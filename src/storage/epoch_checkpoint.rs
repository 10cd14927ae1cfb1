//! `leader-epoch-checkpoint`: the partition's leader-epoch cache on disk, in Kafka's text
//! format — a version line (`0`), a line with the entry count, then one `epoch startOffset`
//! line per entry:
//!
//! ```text
//! 0
//! 2
//! 0 0
//! 3 120
//! ```
//!
//! Written atomically (`state_file::write_atomic`: temp, fsync, rename, fsync dir) whenever
//! the cache changes. A file that does not parse exactly is reported as corruption and the
//! caller rebuilds the cache from the batches' `partitionLeaderEpoch` fields; a checkpoint
//! that lags the log (a crash between an fsync of data and the checkpoint write) is repaired
//! by recovery from the batches it scans (see `Partition::open_with_mode`).

use std::path::Path;

use super::state_file::{self, read_raw};
use super::Error;
use crate::protocol::ids::{LeaderEpoch, Offset};
use crate::replication::epoch_cache::{EpochCache, EpochEntry};

pub(crate) const EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
const VERSION: i64 = 0;
/// A checkpoint with more entries than this is treated as corrupt (bounds the parse).
pub(crate) const EPOCH_ENTRIES_MAX: usize = 1 << 20;

pub(crate) fn encode(cache: &EpochCache) -> Vec<u8> {
    let mut out = format!("{VERSION}\n{}\n", cache.entries().len());
    for e in cache.entries() {
        out.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
    }
    out.into_bytes()
}

/// Parses the text format strictly: any deviation is an error, never a partial cache.
pub(crate) fn decode(bytes: &[u8]) -> Result<EpochCache, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    let mut lines = text.lines();
    let mut next = |what: &str| lines.next().ok_or_else(|| format!("missing {what}"));
    let version: i64 = next("version")?
        .trim()
        .parse()
        .map_err(|e| format!("version: {e}"))?;
    if version != VERSION {
        return Err(format!("unsupported version {version}"));
    }
    let count: usize = next("count")?
        .trim()
        .parse()
        .map_err(|e| format!("count: {e}"))?;
    if count > EPOCH_ENTRIES_MAX {
        return Err(format!("{count} entries is too many"));
    }
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let line = next("entry")?;
        let mut fields = line.split_whitespace();
        let (Some(epoch), Some(start), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(format!("entry {i} is not `epoch offset`"));
        };
        let epoch: i32 = epoch.parse().map_err(|e| format!("entry {i}: {e}"))?;
        let start_offset: i64 = start.parse().map_err(|e| format!("entry {i}: {e}"))?;
        let (epoch, start_offset) = (LeaderEpoch(epoch), Offset(start_offset));
        if let Some(prev) = entries.last() {
            let prev: &EpochEntry = prev;
            if epoch <= prev.epoch || start_offset <= prev.start_offset {
                return Err(format!("entry {i} does not increase"));
            }
        }
        if epoch < LeaderEpoch(0) || start_offset < Offset::ZERO {
            return Err(format!("entry {i} is negative"));
        }
        entries.push(EpochEntry {
            epoch,
            start_offset,
        });
    }
    if lines.any(|l| !l.trim().is_empty()) {
        return Err("trailing data".into());
    }
    Ok(EpochCache::from_entries(entries))
}

/// `Ok(None)` if absent; `Err(Corruption)` if present but not a valid checkpoint.
pub(crate) async fn read(dir: &Path) -> Result<Option<EpochCache>, Error> {
    let path = dir.join(EPOCH_CHECKPOINT_FILE);
    let Some(bytes) = read_raw(&path).await? else {
        return Ok(None);
    };
    decode(&bytes)
        .map(Some)
        .map_err(|why| Error::corruption(&path, 0, why))
}

pub(crate) async fn write(dir: &Path, cache: &EpochCache) -> Result<(), Error> {
    state_file::write_atomic(dir, EPOCH_CHECKPOINT_FILE, encode(cache)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text format round-trips, and damaged files are rejected rather than half-read.
    #[test]
    fn roundtrip_and_rejects_damage() {
        let cache = EpochCache::from_entries(vec![
            EpochEntry {
                epoch: LeaderEpoch(0),
                start_offset: Offset(0),
            },
            EpochEntry {
                epoch: LeaderEpoch(3),
                start_offset: Offset(120),
            },
        ]);
        let bytes = encode(&cache);
        assert_eq!(bytes, b"0\n2\n0 0\n3 120\n");
        assert_eq!(decode(&bytes), Ok(cache));
        assert_eq!(decode(b"0\n0\n"), Ok(EpochCache::default()));
        for bad in [
            &b""[..],
            b"1\n0\n",
            b"0\n2\n0 0\n",
            b"0\n1\n0\n",
            b"0\n2\n3 0\n1 5\n",
            b"0\n1\n0 0\n9 9\n",
            b"0\n1\nx 0\n",
        ] {
            assert!(decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
