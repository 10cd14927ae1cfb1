//! DescribeLogDirs on the owner shard: each local replica's size on disk and, for a
//! compacted log, the cleaner's dirty ratio and checkpoint. Followers answer too: each
//! replica has its own log (and compacts it independently).
use std::rc::Rc;

use crate::protocol::error::ErrorCode;
use crate::shard::{ShardCtx, TopicPartition};
use crate::storage::CleanerState;

/// One replica's answer.
#[derive(Debug, Clone)]
pub struct LogDirResult {
    pub error: Option<ErrorCode>,
    pub size_bytes: i64,
    /// `None` unless the log is compacted.
    pub cleaner: Option<CleanerState>,
}

impl LogDirResult {
    pub fn failed(e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            size_bytes: -1,
            cleaner: None,
        }
    }
}

/// Answers each part in order; a replica this shard has not opened is unknown.
pub async fn describe(ctx: &Rc<ShardCtx>, parts: Vec<TopicPartition>) -> Vec<LogDirResult> {
    let now = ctx.shared.clock.wall_ms();
    let mut out = Vec::with_capacity(parts.len());
    for tp in parts {
        out.push(match ctx.local_partition(&tp.topic, tp.partition) {
            None => LogDirResult::failed(ErrorCode::UnknownTopicOrPartition),
            Some(p) => LogDirResult {
                error: None,
                size_bytes: i64::try_from(p.size_bytes()).unwrap_or(i64::MAX),
                cleaner: p.cleaner_state(now).await,
            },
        });
    }
    out
}
