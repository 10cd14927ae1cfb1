//! Small files written atomically: write `<name>.tmp`, fsync it, rename over `<name>`, fsync
//! the directory. A crash leaves either the old or the new file, never a torn one (a leftover
//! `.tmp` is ignored and removed by recovery).
//!
//! Framed files (`write_framed`/`read_framed`) carry a magic, a length and a CRC-32 so a
//! flipped bit is detected as corruption instead of being decoded; payloads are rkyv.

use std::path::{Path, PathBuf};

use super::{Error, STATE_FILE_BYTES_MAX};

const MAGIC: &[u8; 4] = b"STS1";
const FRAME_HEADER_LEN: usize = 12;

/// Log start offset, persisted by DeleteRecords and retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct LogStartState {
    pub log_start_offset: i64,
}

pub(crate) const LOG_START_FILE: &str = "log_start_offset.state";

/// Writes `bytes` to `dir/name` atomically.
pub(crate) async fn write_atomic(dir: &Path, name: &str, bytes: Vec<u8>) -> Result<(), Error> {
    let tmp = dir.join(format!("{name}.tmp"));
    let dst = dir.join(name);
    let io = |op, p: &PathBuf| {
        let p = p.clone();
        move |e: glommio::GlommioError<()>| Error::io(p, op, e.into())
    };
    let file = glommio::io::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .buffered_open(&tmp)
        .await
        .map_err(io("create", &tmp))?;
    let len = bytes.len();
    let written = file.write_at(bytes, 0).await.map_err(io("write", &tmp))?;
    if written != len {
        return Err(Error::Io {
            path: tmp,
            op: "write",
            kind: std::io::ErrorKind::WriteZero,
            message: "short write".into(),
        });
    }
    file.fdatasync().await.map_err(io("fsync", &tmp))?;
    file.close().await.map_err(io("close", &tmp))?;
    glommio::io::rename(&tmp, &dst)
        .await
        .map_err(io("rename", &dst))?;
    sync_dir(dir).await
}

pub(crate) async fn sync_dir(dir: &Path) -> Result<(), Error> {
    // glommio opens directories with dirfd -1 rather than AT_FDCWD, so a relative path would
    // fail with EBADF: resolve it against the working directory first.
    let dir = &std::path::absolute(dir).map_err(|e| Error::io(dir, "resolve dir", e))?;
    let d = glommio::io::Directory::open(dir)
        .await
        .map_err(|e| Error::io(dir, "open dir", e.into()))?;
    d.sync()
        .await
        .map_err(|e| Error::io(dir, "fsync dir", e.into()))?;
    d.close()
        .await
        .map_err(|e| Error::io(dir, "close dir", e.into()))
}

/// Reads a whole small file through io_uring (buffered I/O; these files are not on the data
/// path); `None` if it does not exist. Bounded by `STATE_FILE_BYTES_MAX`.
pub(crate) async fn read_raw(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    let file = match glommio::io::BufferedFile::open(path).await {
        Ok(f) => f,
        Err(e) => {
            let e: std::io::Error = e.into();
            if e.kind() == std::io::ErrorKind::NotFound {
                return Ok(None);
            }
            return Err(Error::io(path, "open", e));
        }
    };
    let len = file
        .file_size()
        .await
        .map_err(|e| Error::io(path, "stat", e.into()))?;
    if len > STATE_FILE_BYTES_MAX as u64 {
        return Err(Error::corruption(
            path,
            0,
            format!("{len} bytes is too large"),
        ));
    }
    let bytes = file
        .read_at(0, len as usize)
        .await
        .map_err(|e| Error::io(path, "read", e.into()))?;
    let out = bytes.to_vec();
    file.close()
        .await
        .map_err(|e| Error::io(path, "close", e.into()))?;
    if out.len() as u64 != len {
        return Err(Error::corruption(path, out.len() as u64, "short read"));
    }
    Ok(Some(out))
}

/// Removes a file if it exists (asynchronously, through io_uring).
pub(crate) async fn remove_if_exists(path: &Path) -> Result<(), Error> {
    match glommio::io::remove(path).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let e: std::io::Error = e.into();
            if e.kind() == std::io::ErrorKind::NotFound {
                Ok(())
            } else {
                Err(Error::io(path, "remove", e))
            }
        }
    }
}

pub(crate) fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Checks magic, length and CRC; returns the payload.
pub(crate) fn unframe<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a [u8], Error> {
    let corrupt = |why: &str| Error::corruption(path, 0, why.to_string());
    let header = bytes
        .get(..FRAME_HEADER_LEN)
        .ok_or_else(|| corrupt("short header"))?;
    let (magic, rest) = header.split_at(4);
    if magic != MAGIC {
        return Err(corrupt("bad magic"));
    }
    let (len, crc) = rest.split_at(4);
    let len = u32::from_be_bytes(len.try_into().map_err(|_| corrupt("len"))?) as usize;
    let crc = u32::from_be_bytes(crc.try_into().map_err(|_| corrupt("crc"))?);
    let payload = bytes
        .get(FRAME_HEADER_LEN..FRAME_HEADER_LEN.saturating_add(len))
        .ok_or_else(|| corrupt("truncated payload"))?;
    if crc32fast::hash(payload) != crc {
        return Err(corrupt("CRC mismatch"));
    }
    Ok(payload)
}

pub(crate) async fn write_log_start(dir: &Path, log_start_offset: i64) -> Result<(), Error> {
    let payload = rkyv::to_bytes::<rkyv::rancor::Error>(&LogStartState { log_start_offset })
        .map_err(|e| Error::corruption(dir.join(LOG_START_FILE), 0, e.to_string()))?;
    write_atomic(dir, LOG_START_FILE, frame(&payload)).await
}

/// `Ok(None)` if absent; `Err(Corruption)` if present but unreadable.
pub(crate) async fn read_log_start(dir: &Path) -> Result<Option<i64>, Error> {
    let path = dir.join(LOG_START_FILE);
    let Some(bytes) = read_raw(&path).await? else {
        return Ok(None);
    };
    let payload = unframe(&path, &bytes)?;
    let state: LogStartState = decode(&path, payload)?;
    Ok(Some(state.log_start_offset))
}

/// rkyv-decodes with validation (bytecheck) from an aligned copy.
pub(crate) fn decode<T>(path: &Path, payload: &[u8]) -> Result<T, Error>
where
    T: rkyv::Archive,
    T::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rkyv::rancor::Error>>
        + rkyv::Deserialize<T, rkyv::api::high::HighDeserializer<rkyv::rancor::Error>>,
{
    let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(payload.len());
    aligned.extend_from_slice(payload);
    rkyv::from_bytes::<T, rkyv::rancor::Error>(&aligned)
        .map_err(|e| Error::corruption(path, 0, format!("rkyv: {e}")))
}

/// One offset persisted on its own (the high-watermark checkpoint, the truncate intent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct OffsetState {
    pub offset: i64,
}

/// High watermark, written lazily (see `Partition::set_hw`); may lag after a crash.
pub(crate) const HW_CHECKPOINT_FILE: &str = "hw-checkpoint";
/// Present only while `truncate_fully_and_start_at` runs: recovery finishes the job.
pub(crate) const TRUNCATE_FULLY_INTENT_FILE: &str = "truncate-fully.intent";
/// The offset below which the log may skip offsets (`Partition::gaps_below`): raised before
/// the cleaner swaps a cleaned segment in and before a follower appends a batch past a gap,
/// lowered by truncation. Recovery treats a gap at or above it as damage.
pub(crate) const GAPS_BELOW_FILE: &str = "offset-gaps-below";

pub(crate) async fn write_offset_file(dir: &Path, name: &str, offset: i64) -> Result<(), Error> {
    let payload = rkyv::to_bytes::<rkyv::rancor::Error>(&OffsetState { offset })
        .map_err(|e| Error::corruption(dir.join(name), 0, e.to_string()))?;
    write_atomic(dir, name, frame(&payload)).await
}

/// Rewrites an offset file that already exists in place: one write of the same length over
/// the old frame (and, if `sync`, an `fdatasync`), instead of `write_atomic`'s create, rename
/// and directory fsync. For the high-watermark checkpoint, which every partition rewrites
/// every `HW_CHECKPOINT_INTERVAL_MS`: with thousands of partitions the create-and-rename path
/// was a thousand new inodes, renames and journal commits a second beside the data's fsyncs
/// (`perf record`: inode allocation in the io_uring workers). The length never changes, so
/// `fdatasync` has no metadata to commit. Safe because the frame's CRC detects a torn write
/// and every reader of such a file treats an unreadable one as absent (the HW then starts
/// from the log start and is re-learned); the file is created atomically the first time.
/// Without `sync` the new frame reaches the disk with the kernel's writeback: a crash of the
/// process loses nothing (the page cache keeps it), a power cut may leave the previous
/// frame, which the caller must accept as a valid value (see `Partition::persist_hw_if_dirty`).
pub(crate) async fn overwrite_offset_file(
    dir: &Path,
    name: &str,
    offset: i64,
    sync: bool,
) -> Result<(), Error> {
    let payload = rkyv::to_bytes::<rkyv::rancor::Error>(&OffsetState { offset })
        .map_err(|e| Error::corruption(dir.join(name), 0, e.to_string()))?;
    let bytes = frame(&payload);
    let path = dir.join(name);
    let io = |op| {
        let p = path.clone();
        move |e: glommio::GlommioError<()>| Error::io(p, op, e.into())
    };
    let file = match glommio::io::OpenOptions::new()
        .write(true)
        .buffered_open(&path)
        .await
    {
        Ok(f) => f,
        Err(e) => {
            let e: std::io::Error = e.into();
            if e.kind() == std::io::ErrorKind::NotFound {
                return write_atomic(dir, name, bytes).await;
            }
            return Err(Error::io(&path, "open", e));
        }
    };
    let len = file.file_size().await.map_err(io("stat"))?;
    if len != bytes.len() as u64 {
        // Not a frame of this length (an older format, a damaged file): replace it whole.
        file.close().await.map_err(io("close"))?;
        return write_atomic(dir, name, bytes).await;
    }
    let want = bytes.len();
    let written = file.write_at(bytes, 0).await.map_err(io("write"))?;
    if written != want {
        return Err(Error::Io {
            path,
            op: "write",
            kind: std::io::ErrorKind::WriteZero,
            message: "short write".into(),
        });
    }
    if sync {
        file.fdatasync().await.map_err(io("fsync"))?;
    }
    file.close().await.map_err(io("close"))
}

/// `Ok(None)` if absent; `Err(Corruption)` if present but unreadable.
pub(crate) async fn read_offset_file(dir: &Path, name: &str) -> Result<Option<i64>, Error> {
    let path = dir.join(name);
    let Some(bytes) = read_raw(&path).await? else {
        return Ok(None);
    };
    let payload = unframe(&path, &bytes)?;
    let state: OffsetState = decode(&path, payload)?;
    Ok(Some(state.offset))
}
