//! Durable storage of the metadata log in `RaftConfig::dir`, and the in-memory store raft-rs
//! reads from.
//!
//! Three files:
//! - `log`: append-only records `[u32 len][u32 crc32][Entry protobuf]`, indexes contiguous
//!   and increasing. raft-rs may replace an uncommitted suffix: the file is then truncated at
//!   the first replaced entry before the new ones are appended. Every append is fsynced
//!   before raft-rs is told it is persisted.
//! - `state`: `[u32 crc32][u32 hard state len][HardState][ConfState]`, written atomically.
//! - `snapshot`: `[u32 crc32][Snapshot protobuf]` (machine bytes, index, term, conf state),
//!   written atomically.
//!
//! Faults survived: kill -9 at any point. A torn or corrupt tail of `log` (short record, CRC
//! mismatch) is truncated away at open: only an unacknowledged append can be torn, because
//! appends are fsynced before anything depends on them. A corrupt `state` or `snapshot`
//! file is reported as `Corrupt`, never guessed at.
//!
//! A `lock` file is held with `flock` while the storage is open, so two logs (two processes,
//! or two instances in one process) can never write the same directory.
//!
//! After a snapshot the log is rewritten (temp file, fsync, rename, fsync dir) to hold only
//! the entries from the snapshot index on, so it does not grow without bound.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use ::raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use ::raft::storage::MemStorage;
use ::raft::{GetEntriesContext, RaftState, Storage, StorageError};
use protobuf::Message as _;

use super::RaftError;

/// The largest log record accepted when reading the log back; a larger length prefix can only
/// be corruption (entries are bounded by the frame limit long before this).
pub const LOG_RECORD_BYTES_MAX: usize = super::transport::FRAME_BYTES_MAX;

const LOG_FILE: &str = "log";
const STATE_FILE: &str = "state";
const SNAPSHOT_FILE: &str = "snapshot";
const LOCK_FILE: &str = "lock";
const RECORD_HEADER_BYTES: usize = 8;

/// What was found on disk at open.
pub struct Recovered {
    pub snapshot: Option<Snapshot>,
    pub hard_state: Option<HardState>,
    pub conf_state: Option<ConfState>,
    /// Entries in the log file, contiguous, possibly starting at or before the snapshot index.
    pub entries: Vec<Entry>,
}

/// The files in `dir` and where each entry of the log file starts.
pub struct DiskStorage {
    dir: PathBuf,
    log: File,
    log_bytes: u64,
    /// (entry index, byte offset of its record), one per entry in the file, in order.
    positions: Vec<(u64, u64)>,
    /// Holds the directory's exclusive lock until dropped.
    _lock: File,
}

/// Takes an exclusive, non-blocking `flock` on `dir/lock`.
fn lock_dir(dir: &Path) -> Result<File, RaftError> {
    use std::os::fd::AsRawFd;
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    // SAFETY: flock on a file descriptor this function owns; no memory is involved.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(RaftError::Io(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!("{} is in use by another metadata log", dir.display()),
        )));
    }
    Ok(f)
}

fn corrupt(path: &Path, reason: impl Into<String>) -> RaftError {
    RaftError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Reads a whole small file, or `None` if it does not exist.
fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, RaftError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn encode_record(entry: &Entry, out: &mut Vec<u8>) -> Result<(), RaftError> {
    let bytes = entry
        .write_to_bytes()
        .map_err(|e| RaftError::Transport(format!("encode entry: {e}")))?;
    let len = u32::try_from(bytes.len()).map_err(|_| RaftError::TooLarge {
        len: bytes.len(),
        max: LOG_RECORD_BYTES_MAX,
    })?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&bytes).to_le_bytes());
    out.extend_from_slice(&bytes);
    Ok(())
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl DiskStorage {
    /// Opens (creating if needed) the files in `dir`, truncating a torn log tail.
    pub fn open(dir: &Path) -> Result<(DiskStorage, Recovered), RaftError> {
        std::fs::create_dir_all(dir)?;
        let lock = lock_dir(dir)?;
        let snapshot = match read_optional(&dir.join(SNAPSHOT_FILE))? {
            None => None,
            Some(bytes) => Some(decode_snapshot(&dir.join(SNAPSHOT_FILE), &bytes)?),
        };
        let (hard_state, conf_state) = match read_optional(&dir.join(STATE_FILE))? {
            None => (None, None),
            Some(bytes) => {
                let (hs, cs) = decode_state(&dir.join(STATE_FILE), &bytes)?;
                (Some(hs), Some(cs))
            }
        };

        let log_path = dir.join(LOG_FILE);
        let mut log = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&log_path)?;
        let mut bytes = Vec::new();
        log.read_to_end(&mut bytes)?;
        let mut entries = Vec::new();
        let mut positions = Vec::new();
        let mut at = 0usize;
        let valid_bytes = loop {
            let Some(len) = read_u32(&bytes, at) else {
                break at;
            };
            let Some(crc) = read_u32(&bytes, at + 4) else {
                break at;
            };
            let len = len as usize;
            if len > LOG_RECORD_BYTES_MAX {
                break at;
            }
            let start = at + RECORD_HEADER_BYTES;
            let Some(body) = bytes.get(start..start + len) else {
                break at;
            };
            if crc32fast::hash(body) != crc {
                break at;
            }
            let Ok(entry) = Entry::parse_from_bytes(body) else {
                break at;
            };
            if let Some(last) = entries.last().map(|e: &Entry| e.index) {
                if entry.index != last + 1 {
                    return Err(corrupt(
                        &log_path,
                        format!("entry {} follows entry {last}", entry.index),
                    ));
                }
            }
            positions.push((entry.index, at as u64));
            entries.push(entry);
            at = start + len;
        };
        if valid_bytes < bytes.len() {
            // Only an append that was never fsynced (so never acknowledged) can be torn.
            tracing::warn!(
                path = %log_path.display(),
                valid_bytes,
                file_bytes = bytes.len(),
                "truncating a torn tail of the metadata log"
            );
            log.set_len(valid_bytes as u64)?;
            log.sync_all()?;
        }
        log.seek(SeekFrom::Start(valid_bytes as u64))?;
        let disk = DiskStorage {
            dir: dir.to_path_buf(),
            log,
            log_bytes: valid_bytes as u64,
            positions,
            _lock: lock,
        };
        Ok((
            disk,
            Recovered {
                snapshot,
                hard_state,
                conf_state,
                entries,
            },
        ))
    }

    /// Appends `entries` durably, first truncating any entries in the file they replace.
    pub fn append(&mut self, entries: &[Entry]) -> Result<(), RaftError> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        // raft-rs replaces an uncommitted suffix by appending from an earlier index.
        let keep = self
            .positions
            .partition_point(|&(index, _)| index < first.index);
        if keep < self.positions.len() {
            let offset = self.positions[keep].1;
            self.positions.truncate(keep);
            self.log.set_len(offset)?;
            self.log_bytes = offset;
            self.log.seek(SeekFrom::Start(offset))?;
        }
        if let Some(&(last, _)) = self.positions.last() {
            assert_eq!(
                first.index,
                last + 1,
                "metadata log appends must be contiguous"
            );
        }
        let mut buf = Vec::new();
        for entry in entries {
            let at = self.log_bytes + buf.len() as u64;
            encode_record(entry, &mut buf)?;
            self.positions.push((entry.index, at));
        }
        self.log.write_all(&buf)?;
        self.log.sync_data()?;
        self.log_bytes += buf.len() as u64;
        Ok(())
    }

    /// Replaces the log file with exactly `entries` (after a snapshot), atomically.
    pub fn rewrite_log(&mut self, entries: &[Entry]) -> Result<(), RaftError> {
        let path = self.dir.join(LOG_FILE);
        let tmp = path.with_extension("tmp");
        let mut buf = Vec::new();
        let mut positions = Vec::with_capacity(entries.len());
        for entry in entries {
            positions.push((entry.index, buf.len() as u64));
            encode_record(entry, &mut buf)?;
        }
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&buf)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        sync_dir(&self.dir)?;
        let mut log = OpenOptions::new().read(true).write(true).open(&path)?;
        log.seek(SeekFrom::End(0))?;
        self.log = log;
        self.log_bytes = buf.len() as u64;
        self.positions = positions;
        Ok(())
    }

    /// Saves the hard state and conf state atomically.
    pub fn save_state(&mut self, hs: &HardState, cs: &ConfState) -> Result<(), RaftError> {
        let hs_bytes = hs
            .write_to_bytes()
            .map_err(|e| RaftError::Transport(format!("encode hard state: {e}")))?;
        let cs_bytes = cs
            .write_to_bytes()
            .map_err(|e| RaftError::Transport(format!("encode conf state: {e}")))?;
        let mut body = Vec::with_capacity(4 + hs_bytes.len() + cs_bytes.len());
        body.extend_from_slice(&(hs_bytes.len() as u32).to_le_bytes());
        body.extend_from_slice(&hs_bytes);
        body.extend_from_slice(&cs_bytes);
        let mut out = crc32fast::hash(&body).to_le_bytes().to_vec();
        out.extend_from_slice(&body);
        write_atomically(&self.dir.join(STATE_FILE), &out)?;
        Ok(())
    }

    /// Saves a snapshot atomically.
    pub fn save_snapshot(&mut self, snap: &Snapshot) -> Result<(), RaftError> {
        let body = snap
            .write_to_bytes()
            .map_err(|e| RaftError::Transport(format!("encode snapshot: {e}")))?;
        let mut out = Vec::with_capacity(4 + body.len());
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.extend_from_slice(&body);
        write_atomically(&self.dir.join(SNAPSHOT_FILE), &out)?;
        Ok(())
    }

    /// Size of the log file.
    #[cfg(test)]
    pub fn log_bytes(&self) -> u64 {
        self.log_bytes
    }
}

fn decode_snapshot(path: &Path, bytes: &[u8]) -> Result<Snapshot, RaftError> {
    let crc = read_u32(bytes, 0).ok_or_else(|| corrupt(path, "short snapshot file"))?;
    let body = bytes.get(4..).unwrap_or_default();
    if crc32fast::hash(body) != crc {
        return Err(corrupt(path, "snapshot CRC mismatch"));
    }
    Snapshot::parse_from_bytes(body).map_err(|e| corrupt(path, format!("snapshot: {e}")))
}

fn decode_state(path: &Path, bytes: &[u8]) -> Result<(HardState, ConfState), RaftError> {
    let crc = read_u32(bytes, 0).ok_or_else(|| corrupt(path, "short state file"))?;
    let body = bytes.get(4..).unwrap_or_default();
    if crc32fast::hash(body) != crc {
        return Err(corrupt(path, "state CRC mismatch"));
    }
    let hs_len = read_u32(body, 0).ok_or_else(|| corrupt(path, "short state file"))? as usize;
    let hs_bytes = body
        .get(4..4 + hs_len)
        .ok_or_else(|| corrupt(path, "hard state length out of range"))?;
    let cs_bytes = body.get(4 + hs_len..).unwrap_or_default();
    let hs = HardState::parse_from_bytes(hs_bytes)
        .map_err(|e| corrupt(path, format!("hard state: {e}")))?;
    let cs = ConfState::parse_from_bytes(cs_bytes)
        .map_err(|e| corrupt(path, format!("conf state: {e}")))?;
    Ok((hs, cs))
}

/// The store raft-rs reads: raft-rs's `MemStorage` for entries and hard state, plus the latest
/// snapshot with the machine's bytes (MemStorage would hand out snapshots with no data).
pub struct MemLog {
    pub mem: MemStorage,
    pub snapshot: Snapshot,
}

impl Storage for MemLog {
    fn initial_state(&self) -> ::raft::Result<RaftState> {
        self.mem.initial_state()
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> ::raft::Result<Vec<Entry>> {
        self.mem.entries(low, high, max_size, context)
    }

    fn term(&self, idx: u64) -> ::raft::Result<u64> {
        let meta = self.snapshot.get_metadata();
        if idx == meta.index && meta.index > 0 {
            return Ok(meta.term);
        }
        self.mem.term(idx)
    }

    fn first_index(&self) -> ::raft::Result<u64> {
        self.mem.first_index()
    }

    fn last_index(&self) -> ::raft::Result<u64> {
        self.mem.last_index()
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> ::raft::Result<Snapshot> {
        if self.snapshot.get_metadata().index < request_index || self.snapshot.is_empty() {
            return Err(::raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

/// Writes a small file so that a crash leaves either the old or the new contents: temp
/// file, fsync, rename over the target, fsync the directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
