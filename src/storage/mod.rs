//! Partition logs on disk: segments of Kafka v2 record batches, sparse offset and time
//! indexes, crash recovery, retention, idempotent-producer state and a tail cache.
//!
//! Everything here runs on one glommio shard: types are `!Send` and shared as
//! `Rc<Partition>`. The append path is synchronous (offsets are assigned and bytes staged in
//! memory); a per-partition flusher task does the direct I/O and `fdatasync` (group commit).
//! Under the Sync flush policy the active segment is open O_DSYNC, so the write is the data
//! sync (the kernel runs fdatasync's work before completing it) and no separate call is made.
//!
//! Invariants kept across the module:
//! - offsets are contiguous and strictly increasing across batches and segments;
//! - the high watermark never exceeds the log end, and nothing at or past it is served;
//! - a segment's data is durable before its index files or a producer snapshot that covers
//!   it are written (ordering enforced by awaiting, never by submission order);
//! - a partition whose flush failed is poisoned: it never acknowledges anything again,
//!   because after a failed `fdatasync` the kernel may have dropped the dirty pages.
//!
//! Files: `partition/` (the `Partition` API, split by concern: `append.rs`, `flush.rs`,
//! `read.rs`, `truncate.rs`, `retention.rs` for DeleteRecords and retention), `segment.rs` (one segment + direct-I/O batch reads), `index.rs` /
//! `time_index.rs` (sparse indexes), `recovery.rs` (open, scan, truncate, rebuild),
//! `producer_state.rs` (idempotence rules and open transactions, sans-IO), `txn_index.rs`
//! (the aborted-transaction index, `.txnindex`), `retention.rs` (which segments go,
//! pure), `tail_cache.rs`, `partition_dir.rs` (`partition.metadata`, the topic id a directory
//! belongs to, and deletion by renaming to `-delete` first), `state_file.rs` (atomic small files, rkyv; the HW checkpoint
//! and the full-truncation intent), `epoch_checkpoint.rs` (`leader-epoch-checkpoint`,
//! Kafka's text format), `file_io.rs` (the
//! fault-injectable direct-I/O trait), `notify.rs` (waiter wake-ups), `config.rs`.
//!
//! Replication support (`partition/`): leader epochs stamped into batches and kept in a
//! persisted leader-epoch cache (`epoch_checkpoint.rs`), follower appends that keep the
//! leader's offsets and epochs, crash-safe truncation, and a high watermark that the
//! replication layer may drive (`HwMode::Replicated`) with a lazily persisted checkpoint.
//!
//! Transactions (KIP-98): producer state tracks each producer's open transaction
//! (`producer_state`); COMMIT/ABORT markers (control batches) close them, an ABORT adds an
//! entry to its segment's aborted-transaction index (`txn_index.rs`, Kafka's `.txnindex`);
//! the last stable offset bounds what `read_committed` consumers see.

mod budget;
pub mod cleaner;
mod config;
mod epoch_checkpoint;
mod file_io;
pub mod foreground;
mod index;
pub mod notify;
mod partition;
pub mod partition_dir;
pub mod producer_state;
mod recovery;
mod retention;
mod segment;
pub mod space;
mod state_file;
mod tail_cache;
mod time_index;
pub mod txn_index;
pub mod txn_verification;

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod txn_tests;

use std::path::PathBuf;

pub use crate::replication::epoch_cache::{EpochCache, EpochEntry};
pub use budget::{Charge, Evictable, MemoryBudget, MemoryClass};
pub use config::{CleanupPolicy, CompressionType, FlushPolicy, LogConfig, TimestampType};
pub use file_io::{DmaFileSystem, FileSystem, IoFuture, SegmentFile};
pub use partition::{
    AppendOutcome, CleanReport, CleanerState, CleanerThrottle, HwMode, Partition, ReadOutcome,
    ReplicaAppendOutcome, TimestampOffset,
};
pub use space::DiskSpace;

use crate::protocol::error::ErrorCode;
use crate::protocol::producer::ProducerId;
use crate::protocol::record_batch::{BatchError, RecordsError};

/// Bytes staged in memory but not yet written, per partition. Past this, appends are refused
/// (`AppendError::Backpressure`) instead of growing memory without bound while the disk lags.
pub const STAGING_BYTES_MAX: usize = 64 << 20;
/// Under `IntervalMs`/`Never`, staged bytes past this are written (without fsync) right away,
/// so memory stays small even when nothing asks for durability.
pub const STAGING_WRITE_THRESHOLD_BYTES: usize = 1 << 20;
/// Under `Never`, staged data is written (not fsynced) at least this often.
pub const NEVER_POLICY_WRITE_INTERVAL_MS: u64 = 1000;
/// Smallest direct-I/O read issued for a fetch or a scan; amortises the io_uring round trip.
pub const READ_CHUNK_BYTES_MIN: usize = 64 << 10;
/// Largest single direct-I/O read; a fetch wanting more gets it in several reads.
pub const READ_CHUNK_BYTES_MAX: usize = 8 << 20;
/// Producers tracked per partition; past this the one with the oldest last offset is
/// forgotten (it then looks like a new producer, as after retention in Kafka).
pub const PRODUCERS_MAX: usize = 16_384;
/// Kafka keeps the metadata of the last five batches per producer for duplicate detection.
pub const PRODUCER_BATCHES_RETAINED: usize = 5;
/// After this many new bytes in the active segment (and an fsync), its indexes and a
/// producer snapshot are persisted, so crash recovery scans at most about this much.
pub const ACTIVE_CHECKPOINT_BYTES: u64 = 16 << 20;
/// The high-watermark checkpoint is rewritten at most this often (and on close/truncate).
pub const HW_CHECKPOINT_INTERVAL_MS: u64 = 5_000;
/// A small state file larger than this is treated as corrupt rather than read into memory.
pub const STATE_FILE_BYTES_MAX: usize = 64 << 20;

/// Bytes of record batches the storage layer copied on this thread (one shard), by where.
/// The produce path's budget is one copy of every appended byte (`into_log`: out of the
/// request into the batch the log owns, patched there) plus the copy into the aligned DMA
/// buffer that is written (`into_dma`, which also rewrites each partial last block once
/// more), plus at most one alignment unit per write to detach that partial block from its
/// batch (`partial_block`). Counted always: a few adds per batch, read by tests and benches.
pub mod copy_stats {
    use std::cell::Cell;

    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct CopyStats {
        pub into_log: u64,
        pub into_dma: u64,
        pub partial_block: u64,
    }

    thread_local! {
        static STATS: Cell<CopyStats> = const { Cell::new(CopyStats { into_log: 0, into_dma: 0, partial_block: 0 }) };
    }

    /// This thread's counters so far.
    pub fn get() -> CopyStats {
        STATS.with(|s| s.get())
    }

    fn update(f: impl FnOnce(&mut CopyStats)) {
        STATS.with(|s| {
            let mut v = s.get();
            f(&mut v);
            s.set(v);
        });
    }

    pub(crate) fn add_log(n: usize) {
        update(|s| s.into_log += n as u64);
    }
    pub(crate) fn add_dma(n: usize) {
        update(|s| s.into_dma += n as u64);
    }
    pub(crate) fn add_partial_block(n: usize) {
        update(|s| s.partial_block += n as u64);
    }
}

/// Storage failures. Clone so one flush failure can be handed to every waiter.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("I/O error during {op} on {path}: {message}")]
    Io {
        path: PathBuf,
        op: &'static str,
        kind: std::io::ErrorKind,
        message: String,
    },
    #[error("corruption in {path} at byte {position}: {reason}")]
    Corruption {
        path: PathBuf,
        position: u64,
        reason: String,
    },
    #[error("offset {offset} out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    #[error("partition is closed")]
    Closed,
    /// A truncation is running; appends are refused until it ends (a truncating replica is
    /// a follower, so producers are told to look for the leader).
    #[error("partition is being truncated")]
    Truncating,
    #[error("invalid log config: {0}")]
    InvalidConfig(String),
    /// Asked to lead in an epoch older than one the log already holds: leader epochs only
    /// grow, so the metadata or the log is wrong, and stamping it would break the cache.
    #[error("leader epoch {epoch} is older than the log's latest epoch {latest}")]
    EpochRegression { epoch: i32, latest: i32 },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, e: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            op,
            kind: e.kind(),
            message: e.to_string(),
        }
    }
    pub(crate) fn corruption(
        path: impl Into<PathBuf>,
        position: u64,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            path: path.into(),
            position,
            reason: reason.into(),
        }
    }
}

/// Why one append was refused. Each maps to one Kafka error code (`error_code`).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AppendError {
    #[error("batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: u32 },
    /// Kafka's RecordBatchTooLargeException: a batch must fit a segment, or `segment.bytes`
    /// would not bound segments (a batch bigger than it would fill a segment of its own, and
    /// on a compacted topic keep that segment active, never cleaned).
    #[error("batch of {size} bytes exceeds segment.bytes {max}")]
    RecordListTooLarge { size: usize, max: u64 },
    #[error("out of order sequence for producer {producer_id} epoch {epoch}: got {first_seq}, last {last_seq:?}")]
    OutOfOrderSequence {
        producer_id: ProducerId,
        epoch: i16,
        first_seq: i32,
        last_seq: Option<i32>,
    },
    #[error("producer {producer_id} epoch {epoch} is older than current epoch {current}")]
    InvalidProducerEpoch {
        producer_id: ProducerId,
        epoch: i16,
        current: i16,
    },
    /// A non-transactional batch from a producer whose transaction is open.
    #[error("producer {producer_id} has an open transaction: its batches must be transactional")]
    InvalidTxnState { producer_id: ProducerId },
    /// A transactional batch that would open a transaction the coordinator did not confirm
    /// (KIP-890 verification; Kafka's words).
    #[error("Record was not part of an ongoing transaction")]
    TxnNotVerified { producer_id: ProducerId },
    /// A marker from a transaction coordinator older than the one that wrote the last.
    #[error(
        "coordinator epoch {coordinator_epoch} is older than {current} for producer {producer_id}"
    )]
    CoordinatorFenced {
        producer_id: ProducerId,
        coordinator_epoch: i32,
        current: i32,
    },
    /// Not produced since KIP-360 (see `producer_state`); kept so the server's error mapping
    /// is complete.
    #[error("unknown producer id {producer_id}")]
    UnknownProducerId { producer_id: ProducerId },
    #[error("corrupt batch: {0}")]
    CorruptMessage(BatchError),
    /// The compressed records do not decompress, or inflate past
    /// `RECORDS_DECOMPRESSED_BYTES_MAX` (refused while inflating: a decompression bomb).
    #[error("records of the batch: {0}")]
    BadRecords(RecordsError),
    #[error("{staged_bytes} bytes staged, more than {max}: the disk is behind")]
    Backpressure { staged_bytes: usize, max: usize },
    #[error(transparent)]
    Storage(#[from] Error),
}

impl Error {
    /// The Kafka error a client should see for this failure: the one place a storage error
    /// becomes a wire code (storage sits above the codecs, which know no files).
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Error::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            // The replica went away under the request (its topic deleted, the replica moved,
            // the broker shutting down): retriable, the client looks for the leader again, as
            // Kafka answers for a partition this broker no longer hosts.
            Error::Closed => ErrorCode::NotLeaderOrFollower,
            _ => ErrorCode::KafkaStorageError,
        }
    }
}

/// Why a follower append (`Partition::append_replica`) was refused. Nothing was appended.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ReplicaAppendError {
    /// The batches do not continue the log: the first must start at the log end and each
    /// next one right after the previous.
    #[error("offset mismatch: expected base offset {expected}, got {got}")]
    OffsetMismatch { expected: i64, got: i64 },
    #[error("corrupt batch: {0}")]
    CorruptMessage(BatchError),
    #[error("{staged_bytes} bytes staged, more than {max}: the disk is behind")]
    Backpressure { staged_bytes: usize, max: usize },
    /// A batch claims a leader epoch newer than the leader it was fetched from: the field
    /// sits outside the CRC, so it is checked before it reaches the epoch cache.
    #[error(
        "batch at offset {offset} claims leader epoch {epoch}, newer than the leader's {leader_epoch}"
    )]
    BadLeaderEpoch {
        offset: i64,
        epoch: i32,
        leader_epoch: i32,
    },
    #[error(transparent)]
    Storage(#[from] Error),
}

impl AppendError {
    /// The Kafka error a producer should see for this rejection.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            AppendError::MessageTooLarge { .. } => ErrorCode::MessageTooLarge,
            AppendError::RecordListTooLarge { .. } => ErrorCode::RecordListTooLarge,
            AppendError::CorruptMessage(_) => ErrorCode::CorruptMessage,
            // Kafka's InvalidRecordException: not retriable, so a producer does not resend a
            // bomb; a payload its codec cannot read is corrupt.
            AppendError::BadRecords(RecordsError::TooLarge { .. }) => ErrorCode::InvalidRecord,
            AppendError::BadRecords(_) => ErrorCode::CorruptMessage,
            AppendError::UnknownProducerId { .. } => ErrorCode::UnknownProducerId,
            // The disk is behind: a retriable error makes the producer back off and resend.
            AppendError::Backpressure { .. } => ErrorCode::RequestTimedOut,
            AppendError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequenceNumber,
            AppendError::InvalidProducerEpoch { .. } => ErrorCode::InvalidProducerEpoch,
            AppendError::InvalidTxnState { .. } | AppendError::TxnNotVerified { .. } => {
                ErrorCode::InvalidTxnState
            }
            AppendError::CoordinatorFenced { .. } => ErrorCode::TransactionCoordinatorFenced,
            AppendError::Storage(s) => s.error_code(),
        }
    }
}
