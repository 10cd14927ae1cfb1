//! Fetch on the owner shard: consumers read committed data (below the high watermark) from
//! the leader, in the leader epoch they name — `read_committed` ones only below the last
//! stable offset, with the aborted transactions overlapping what they read; followers read
//! everything and their fetch offset records their log end, and the durable end they report
//! beside it may move the high watermark. Also the long-poll wait (`wait_for_data`) a Fetch with `max.wait.ms` makes when
//! there is nothing to read yet.
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{check_leader_epoch, owned_partition};
use crate::protocol::error::ErrorCode;
use crate::shard::{replica, ShardCtx, TopicPartition};
use crate::storage::txn_index::AbortedRange;

pub struct FetchPart {
    pub tp: TopicPartition,
    pub offset: i64,
    pub max_bytes: usize,
    /// Kafka's replica id: a follower's node id (>= 0), -1 for consumers, -2 for a
    /// debugging consumer that may read any replica.
    pub replica_id: i32,
    /// A follower's durable end (`replication::durable_tag`): its fetch offset when it
    /// reported none. Unused for consumers.
    pub durable_offset: i64,
    /// The leader epoch the fetcher believes current, or -1 (no check).
    pub current_leader_epoch: i32,
    pub isolation: Isolation,
}

/// Fetch's and ListOffsets' `isolation_level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// 0: everything below the high watermark, aborted transactions included.
    #[default]
    ReadUncommitted,
    /// 1: only below the last stable offset, with the aborted transactions to drop.
    ReadCommitted,
}

impl Isolation {
    /// From the wire's `isolation_level` (anything but 1 reads uncommitted, as Kafka does).
    pub fn from_level(level: i8) -> Self {
        if level == 1 {
            Isolation::ReadCommitted
        } else {
            Isolation::ReadUncommitted
        }
    }
}

/// Kafka's replica id of a debugging consumer, which may read from followers.
pub const DEBUGGING_REPLICA_ID: i32 = -2;

#[derive(Debug, Clone, Default)]
pub struct FetchResult {
    pub error: Option<ErrorCode>,
    pub high_watermark: i64,
    /// -1 when unknown (an error).
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub chunks: Vec<Bytes>,
    /// `read_committed` only: the aborted transactions overlapping the data returned.
    pub aborted: Vec<AbortedRange>,
}

impl FetchResult {
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum()
    }
    pub fn error(e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            chunks: Vec::new(),
            aborted: Vec::new(),
        }
    }
}

/// Reads each part, at most `max_bytes` in all (the response's limit, applied before
/// reading); once it is spent the remaining parts report positions but read nothing.
pub async fn fetch(
    ctx: &Rc<ShardCtx>,
    parts: Vec<FetchPart>,
    max_bytes: usize,
) -> Vec<FetchResult> {
    // As Kafka's replica manager does: each partition reads at most what is left of
    // the response's limit. A partition's read returns at least one batch (KIP-74),
    // so the total may pass the limit by one batch; the handler trims the response.
    let mut left = max_bytes;
    let mut out = Vec::with_capacity(parts.len());
    for mut part in parts {
        part.max_bytes = part.max_bytes.min(left);
        let r = fetch_one(ctx, part, left > 0).await;
        left = left.saturating_sub(r.bytes());
        out.push(r);
    }
    out
}

/// Who waits for data, and so which bound must pass the fetch offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiter {
    /// A follower: any data (the log end).
    Follower,
    /// A `read_uncommitted` consumer: the high watermark.
    Consumer,
    /// A `read_committed` consumer: the last stable offset.
    CommittedConsumer,
}

/// Resolves when any of the partitions has data past the given offset, or on timeout:
/// committed data (past the high watermark, or the last stable offset for `read_committed`)
/// for consumers, any for followers.
pub async fn wait_for_data(
    ctx: &Rc<ShardCtx>,
    parts: Vec<(TopicPartition, i64)>,
    timeout: Duration,
    waiter: Waiter,
) {
    let mut waits = Vec::new();
    let deadline = Instant::now() + timeout;
    for (tp, offset) in parts {
        if let Ok(Some(p)) = ctx.partition(&tp.topic, tp.partition).await {
            waits.push(Box::pin(async move {
                match waiter {
                    Waiter::Follower => {
                        p.wait_for_log_end_beyond(offset, deadline).await;
                    }
                    Waiter::Consumer => {
                        p.wait_for_hw_beyond(offset, deadline).await;
                    }
                    Waiter::CommittedConsumer => {
                        p.wait_for_lso_beyond(offset, deadline).await;
                    }
                }
            }));
        }
    }
    if waits.is_empty() {
        glommio::timer::sleep(timeout).await;
    } else {
        futures::future::select_all(waits).await;
    }
}

/// Fetches one partition; with `read` false (the response is full) it does everything but
/// read: a follower's position is still recorded, and the partition's offsets reported.
async fn fetch_one(ctx: &Rc<ShardCtx>, part: FetchPart, read: bool) -> FetchResult {
    let p = match owned_partition(ctx, &part.tp).await {
        Ok(p) => p,
        Err(e) => return FetchResult::error(e),
    };
    let nothing = || {
        Ok(crate::storage::ReadOutcome {
            chunks: Vec::new(),
            high_watermark: p.high_watermark(),
            log_start_offset: p.log_start_offset(),
        })
    };
    let committed = part.isolation == Isolation::ReadCommitted && part.replica_id < 0;
    // Read before anything awaits, so the bound and the aborted transactions describe the
    // same log.
    let last_stable_offset = p.last_stable_offset();
    let read = if part.replica_id >= 0 {
        // A follower: its fetch offset is its log end, and its durable end may move our
        // high watermark; it reads everything we have, committed or not.
        match replica::on_follower_fetch(
            ctx,
            &part.tp,
            part.replica_id,
            part.offset,
            part.durable_offset,
            part.current_leader_epoch,
        ) {
            Ok(_) if !read => nothing(),
            Ok(_) => {
                p.read_bounded(part.offset, part.max_bytes, p.log_end_offset())
                    .await
            }
            Err(e) => return FetchResult::error(e),
        }
    } else {
        if part.replica_id != DEBUGGING_REPLICA_ID {
            // The metadata that routed this fetch here names us leader; this shard may not
            // have applied it yet (a topic just created), as in `start_produce`.
            if ctx.replicas.leader_epoch(&part.tp).is_none() {
                replica::apply_metadata(ctx).await;
            }
            if let Err(e) = check_leader_epoch(ctx, &part.tp, part.current_leader_epoch) {
                return FetchResult::error(e);
            }
        }
        if !read {
            nothing()
        } else if committed {
            p.read_bounded(part.offset, part.max_bytes, last_stable_offset)
                .await
        } else {
            p.read(part.offset, part.max_bytes).await
        }
    };
    if let (Ok(r), true) = (&read, part.replica_id < 0) {
        // Consumers' reads only: a follower's fetch is replication, not client traffic.
        let bytes: usize = r.chunks.iter().map(|c| c.len()).sum();
        p.traffic.fetched(bytes as u64);
    }
    match read {
        Ok(r) => FetchResult {
            error: None,
            high_watermark: r.high_watermark,
            last_stable_offset,
            log_start_offset: r.log_start_offset,
            aborted: if committed && !r.chunks.is_empty() {
                p.aborted_transactions(part.offset, last_stable_offset)
            } else {
                Vec::new()
            },
            chunks: r.chunks,
        },
        Err(e) => FetchResult {
            error: Some({
                match e {
                    crate::storage::Error::OffsetOutOfRange { .. } => {}
                    // A long poll woken by the log's close (deletion, reassignment away,
                    // shutdown: followers keep fetching from a stopping leader): expected,
                    // and the answer sends the reader to the new leader.
                    crate::storage::Error::Closed => {
                        tracing::debug!(topic = %part.tp.topic, partition = part.tp.partition, offset = part.offset, "read of a closed log")
                    }
                    _ => {
                        tracing::warn!(topic = %part.tp.topic, partition = part.tp.partition, offset = part.offset, "read failed: {e}")
                    }
                }
                e.error_code()
            }),
            high_watermark: p.high_watermark(),
            last_stable_offset,
            log_start_offset: p.log_start_offset(),
            chunks: Vec::new(),
            aborted: Vec::new(),
        },
    }
}
