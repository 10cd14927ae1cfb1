//! Per-topic log settings with Kafka's names and defaults. Plain data: validated on
//! `Partition::open`/`set_config`, read by the append path and the flusher on every use, so
//! a change applies to the next operation.

/// How appends become durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushPolicy {
    /// Group commit: acknowledge after the `fdatasync` that covers the batch.
    Sync,
    /// A timer writes and fsyncs every n ms; acks do not wait.
    IntervalMs(u64),
    /// Write lazily, fsync only at roll and close (durability comes from replication).
    Never,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// compression.type: the codec a leader stores produced batches in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompressionType {
    /// `producer`: every batch is kept in the codec it was sent with.
    #[default]
    Producer,
    /// `uncompressed` (codec 0) or a codec name: a batch in another codec is rewritten.
    Codec(i16),
}

impl CompressionType {
    /// Parses Kafka's topic-level value (`producer`, `uncompressed`, `gzip`, `snappy`,
    /// `lz4`, `zstd`).
    pub fn parse(name: &str) -> Option<Self> {
        use crate::protocol::record_batch::{
            CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD,
        };
        Some(match name {
            "producer" => Self::Producer,
            "uncompressed" => Self::Codec(CODEC_NONE),
            "gzip" => Self::Codec(CODEC_GZIP),
            "snappy" => Self::Codec(CODEC_SNAPPY),
            "lz4" => Self::Codec(CODEC_LZ4),
            "zstd" => Self::Codec(CODEC_ZSTD),
            _ => return None,
        })
    }

    /// The codec a batch sent in `sent` must be rewritten in, or `None` to keep it as sent.
    pub fn rewrite(self, sent: i16) -> Option<i16> {
        match self {
            Self::Codec(wanted) if wanted != sent => Some(wanted),
            _ => None,
        }
    }
}

/// cleanup.policy: what removes old records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// `delete`: retention by time and size removes whole segments.
    pub delete: bool,
    /// `compact`: the cleaner keeps the last record per key.
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: Self = Self {
        delete: true,
        compact: false,
    };
    pub const COMPACT: Self = Self {
        delete: false,
        compact: true,
    };

    /// Parses Kafka's list value: `delete`, `compact`, or both comma-separated in any order.
    /// The empty list (Kafka 4.1+, what SUBTRACT of the last item leaves) is neither: no
    /// retention and no compaction, segments kept indefinitely.
    pub fn parse(value: &str) -> Option<Self> {
        let mut policy = Self {
            delete: false,
            compact: false,
        };
        if value.trim().is_empty() {
            return Some(policy);
        }
        for item in value.split(',').map(str::trim) {
            match item {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                _ => return None,
            }
        }
        Some(policy)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct LogConfig {
    /// segment.bytes
    pub segment_bytes: u64,
    /// segment.ms
    pub segment_ms: i64,
    /// retention.ms; -1 keeps forever.
    pub retention_ms: i64,
    /// retention.bytes; -1 is unlimited.
    pub retention_bytes: i64,
    /// index.interval.bytes
    pub index_interval_bytes: u32,
    /// segment.index.bytes: a segment rolls when its index would exceed this.
    pub segment_index_bytes: u32,
    pub flush_policy: FlushPolicy,
    /// max.message.bytes: the largest batch accepted.
    pub max_message_bytes: u32,
    pub message_timestamp_type: TimestampType,
    /// fallocate extent for new segments (capped at segment_bytes).
    pub preallocate_bytes: u64,
    /// Recent batches kept in memory per partition for fetches.
    pub tail_cache_bytes: usize,
    /// compression.type
    pub compression: CompressionType,
    /// cleanup.policy
    pub cleanup_policy: CleanupPolicy,
    /// min.cleanable.dirty.ratio
    pub min_cleanable_dirty_ratio: f64,
    /// delete.retention.ms: how long a tombstone stays readable after its segment was
    /// first cleaned.
    pub delete_retention_ms: i64,
    /// min.compaction.lag.ms
    pub min_compaction_lag_ms: i64,
    /// max.compaction.lag.ms
    pub max_compaction_lag_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 604_800_000,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            index_interval_bytes: 4096,
            segment_index_bytes: 10_485_760,
            flush_policy: FlushPolicy::Sync,
            max_message_bytes: 1_048_588,
            message_timestamp_type: TimestampType::CreateTime,
            preallocate_bytes: 64 << 20,
            tail_cache_bytes: 32 << 20,
            compression: CompressionType::Producer,
            cleanup_policy: CleanupPolicy::DELETE,
            min_cleanable_dirty_ratio: 0.5,
            delete_retention_ms: 86_400_000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
        }
    }
}

impl LogConfig {
    /// Rejects settings that would break an invariant (a zero-sized segment could never hold
    /// a batch; an index smaller than one entry could never be written).
    pub fn validate(&self) -> Result<(), super::Error> {
        let bad = |m: &str| Err(super::Error::InvalidConfig(m.to_string()));
        // Kafka's minimum; a batch larger than a segment simply gets a segment of its own.
        if self.segment_bytes < 14 {
            return bad("segment.bytes must be at least 14");
        }
        if self.segment_bytes > u32::MAX as u64 {
            return bad("segment.bytes must fit the index's 4-byte positions");
        }
        if self.segment_ms <= 0 {
            return bad("segment.ms must be positive");
        }
        // Kafka's minimum; below one entry every segment simply holds one batch.
        if self.segment_index_bytes < 4 {
            return bad("segment.index.bytes must be at least 4");
        }
        if self.retention_ms < -1 || self.retention_bytes < -1 {
            return bad("retention.ms and retention.bytes must be >= -1");
        }
        if self.max_message_bytes == 0 {
            return bad("max.message.bytes must be positive");
        }
        if let FlushPolicy::IntervalMs(0) = self.flush_policy {
            return bad("flush interval must be positive");
        }
        Ok(())
    }
}
