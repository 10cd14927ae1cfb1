//! The aborted-transaction index, Kafka's `.txnindex`: one file per segment listing the
//! transactions whose ABORT marker lies in that segment, in marker order. Each entry is
//! Kafka's 34 bytes: version i16 (0), producer id i64, first offset i64, last offset i64 (the
//! marker's offset), last stable offset i64 (the LSO right after the marker). Fetch with
//! `read_committed` answers the entries overlapping what it returns (`collect`), so the
//! consumer drops those producers' records.
//!
//! Written whole and atomically (temp file, fsync, rename) by the flusher once the data it
//! describes is durable: for a sealed segment before its offset and time indexes (so a
//! segment whose indexes exist has its complete `.txnindex`, or none when it holds no abort),
//! for the active segment with each checkpoint (recovery keeps the entries below the producer
//! snapshot it resumes from and rebuilds the rest by replaying markers). A file that does not
//! decode (length, order, offsets outside its segment) is rebuilt from the log.
//! Pure: encoding, decoding and the lookup; the file I/O is in `recovery` and `flush`.

use std::path::Path;

use super::producer_state::CompletedTxn;
use super::segment::segment_path;
use super::state_file::{self, read_raw, remove_if_exists};
use super::Error;

/// Bytes of one entry.
pub const ENTRY_LEN: usize = 34;
const ENTRY_VERSION: i16 = 0;

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

impl From<CompletedTxn> for AbortedTxn {
    fn from(done: CompletedTxn) -> Self {
        Self {
            producer_id: done.producer_id.0,
            first_offset: done.first_offset,
            last_offset: done.last_offset,
            last_stable_offset: done.last_stable_offset,
        }
    }
}

/// What Fetch returns for one aborted transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedRange {
    pub producer_id: i64,
    pub first_offset: i64,
}

pub fn encode(entries: &[AbortedTxn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * ENTRY_LEN);
    for e in entries {
        out.extend_from_slice(&ENTRY_VERSION.to_be_bytes());
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.first_offset.to_be_bytes());
        out.extend_from_slice(&e.last_offset.to_be_bytes());
        out.extend_from_slice(&e.last_stable_offset.to_be_bytes());
    }
    out
}

fn i64_at(chunk: &[u8], at: usize) -> Option<i64> {
    let eight: [u8; 8] = chunk.get(at..at + 8)?.try_into().ok()?;
    Some(i64::from_be_bytes(eight))
}

/// Decodes a segment's file: whole entries, markers inside `[base, next)` and increasing,
/// each first offset at or below its marker.
pub fn decode(bytes: &[u8], base: i64, next: i64) -> Result<Vec<AbortedTxn>, &'static str> {
    if !bytes.len().is_multiple_of(ENTRY_LEN) {
        return Err("not a whole number of entries");
    }
    let mut out: Vec<AbortedTxn> = Vec::with_capacity(bytes.len() / ENTRY_LEN);
    for chunk in bytes.chunks_exact(ENTRY_LEN) {
        let version = chunk
            .get(..2)
            .and_then(|v| <[u8; 2]>::try_from(v).ok())
            .map(i16::from_be_bytes)
            .unwrap_or(-1);
        if version != ENTRY_VERSION {
            return Err("unknown entry version");
        }
        let (Some(producer_id), Some(first_offset), Some(last_offset), Some(lso)) = (
            i64_at(chunk, 2),
            i64_at(chunk, 10),
            i64_at(chunk, 18),
            i64_at(chunk, 26),
        ) else {
            return Err("short entry");
        };
        if last_offset < base || last_offset >= next || first_offset > last_offset {
            return Err("entry outside its segment");
        }
        if out.last().is_some_and(|p| p.last_offset >= last_offset) {
            return Err("entries out of order");
        }
        out.push(AbortedTxn {
            producer_id,
            first_offset,
            last_offset,
            last_stable_offset: lso,
        });
    }
    Ok(out)
}

/// Adds to `out` the entries of one segment that overlap `[from, upper)`: the transaction
/// ends at or after `from` and begins before `upper`. Returns true when no later segment can
/// hold more (an entry whose last stable offset reaches `upper`: every transaction open then
/// began at or after it, Kafka's early stop).
pub fn collect(entries: &[AbortedTxn], from: i64, upper: i64, out: &mut Vec<AbortedRange>) -> bool {
    for e in entries {
        if e.last_offset >= from && e.first_offset < upper {
            out.push(AbortedRange {
                producer_id: e.producer_id,
                first_offset: e.first_offset,
            });
        }
        if e.last_stable_offset >= upper {
            return true;
        }
    }
    false
}

/// Writes (or, when empty, removes) a segment's `.txnindex`, atomically.
pub(crate) async fn write(dir: &Path, base: i64, entries: &[AbortedTxn]) -> Result<(), Error> {
    if entries.is_empty() {
        return remove_if_exists(&segment_path(dir, base, "txnindex")).await;
    }
    state_file::write_atomic(dir, &format!("{base:020}.txnindex"), encode(entries)).await
}

/// Reads a segment's `.txnindex`: `Ok(empty)` when there is none, `Err` when it does not
/// decode (the caller rebuilds it from the log).
pub(crate) async fn read(
    dir: &Path,
    base: i64,
    next: i64,
) -> Result<Vec<AbortedTxn>, &'static str> {
    match read_raw(&segment_path(dir, base, "txnindex")).await {
        Ok(None) => Ok(Vec::new()),
        Ok(Some(bytes)) => decode(&bytes, base, next),
        Err(_) => Err("unreadable"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn e(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    /// Entries round-trip; files that are cut, out of order or outside their segment are
    /// refused (the caller rebuilds them).
    #[test]
    fn encode_decode_and_sanity() {
        let entries = vec![e(1, 10, 20, 21), e(2, 15, 30, 31)];
        let bytes = encode(&entries);
        assert_eq!(bytes.len(), 2 * ENTRY_LEN);
        assert_eq!(decode(&bytes, 0, 100).unwrap(), entries);
        assert!(decode(&bytes[..ENTRY_LEN + 3], 0, 100).is_err());
        assert!(decode(&bytes, 25, 100).is_err(), "marker below the base");
        assert!(decode(&bytes, 0, 30).is_err(), "marker at the next segment");
        let reversed = encode(&[entries[1], entries[0]]);
        assert!(decode(&reversed, 0, 100).is_err());
    }

    /// `collect` answers the transactions overlapping the range and stops at an entry whose
    /// last stable offset reaches the upper bound.
    #[test]
    fn collect_overlaps() {
        let entries = vec![e(1, 0, 5, 6), e(2, 3, 9, 10), e(3, 12, 14, 15)];
        let mut out = Vec::new();
        assert!(collect(&entries, 6, 10, &mut out));
        assert_eq!(
            out,
            vec![AbortedRange {
                producer_id: 2,
                first_offset: 3
            }]
        );
        let mut out = Vec::new();
        assert!(!collect(&entries, 0, 100, &mut out));
        assert_eq!(out.len(), 3);
    }
}
