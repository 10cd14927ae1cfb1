//! Operations one shard performs on the partitions it owns, on behalf of a request that may
//! have arrived on any shard. `start` runs the ordering-sensitive part (appends) at once and
//! returns a future for the rest (durability waits, disk reads).
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::future::LocalBoxFuture;

use super::ShardCtx;
use crate::limits::RECORDS_DECOMPRESSED_BYTES_MAX;
use crate::protocol::error::ErrorCode;
use crate::protocol::record_batch::{recompress, BatchError, BatchHeader, BatchIter, RecordsError};
use crate::storage::{AppendError, CompressionType, LogConfig, Partition};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

pub struct FetchPart {
    pub tp: TopicPartition,
    pub offset: i64,
    pub max_bytes: usize,
    /// Kafka's replica id: a follower's node id (>= 0), -1 for consumers, -2 for a
    /// debugging consumer that may read any replica.
    pub replica_id: i32,
    /// The leader epoch the fetcher believes current, or -1 (no check).
    pub current_leader_epoch: i32,
}

/// Kafka's replica id of a debugging consumer, which may read from followers.
pub const DEBUGGING_REPLICA_ID: i32 = -2;

pub enum ShardOp {
    Produce {
        acks: i16,
        timeout_ms: i32,
        parts: Vec<(TopicPartition, Option<Bytes>)>,
    },
    /// Reads each part, at most `max_bytes` in all (the response's limit, applied before
    /// reading); once it is spent the remaining parts report positions but read nothing.
    Fetch {
        parts: Vec<FetchPart>,
        max_bytes: usize,
    },
    /// Resolves when any of the partitions has data past the given offset, or on timeout:
    /// committed data (past the high watermark) for consumers, any for followers.
    WaitForData {
        parts: Vec<(TopicPartition, i64)>,
        timeout: Duration,
        follower: bool,
    },
    ListOffsets {
        parts: Vec<(TopicPartition, i64)>,
    },
    DeleteRecords {
        parts: Vec<(TopicPartition, i64)>,
    },
    /// OffsetForLeaderEpoch; arguments packed by `server::route::pack_epochs`.
    EpochEnds {
        parts: Vec<(TopicPartition, i64)>,
    },
    OpenPartitions {
        topic: String,
        partitions: Vec<i32>,
        config: LogConfig,
    },
    DropPartitions {
        topic: String,
        partitions: Vec<i32>,
    },
    SetConfig {
        topic: String,
        config: LogConfig,
    },
    /// A consumer-group request for the coordinator of `__consumer_offsets`-`partition`
    /// (-1 for requests about every group of the shard, e.g. ListGroups).
    Group {
        partition: i32,
        req: super::groups::GroupRequest,
    },
}

#[derive(Debug, Clone)]
pub struct ProduceResult {
    pub error: Option<ErrorCode>,
    pub message: Option<String>,
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

impl ProduceResult {
    fn error(e: ErrorCode, message: Option<String>) -> Self {
        Self {
            error: Some(e),
            message,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct FetchResult {
    pub error: Option<ErrorCode>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub chunks: Vec<Bytes>,
}

impl FetchResult {
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum()
    }
    pub fn error(e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            high_watermark: -1,
            log_start_offset: -1,
            chunks: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct OffsetResult {
    pub error: Option<ErrorCode>,
    pub timestamp: i64,
    pub offset: i64,
    /// ListOffsets v4+: the leader epoch of the offset answered (-1 when unknown).
    pub leader_epoch: i32,
}

impl OffsetResult {
    pub fn failed(e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            timestamp: -1,
            offset: -1,
            leader_epoch: -1,
        }
    }
    pub fn ok(timestamp: i64, offset: i64) -> Self {
        Self {
            error: None,
            timestamp,
            offset,
            leader_epoch: -1,
        }
    }
    fn with_leader_epoch(self, leader_epoch: Option<i32>) -> Self {
        Self {
            leader_epoch: leader_epoch.unwrap_or(-1),
            ..self
        }
    }
    /// The wire error code (0 for success).
    pub fn code(&self) -> i16 {
        self.error.map(|e| e.code()).unwrap_or(0)
    }
}

pub enum ShardReply {
    Produce(Vec<ProduceResult>),
    Fetch(Vec<FetchResult>),
    DataReady,
    Offsets(Vec<OffsetResult>),
    Done(Result<(), String>),
    Group(super::groups::GroupReply),
    /// The target shard is gone (shutting down).
    Unavailable,
}

/// Starts `op` on this shard. Appends happen before this returns.
pub fn start(ctx: &Rc<ShardCtx>, op: ShardOp) -> LocalBoxFuture<'static, ShardReply> {
    let ctx = ctx.clone();
    match op {
        ShardOp::Produce {
            acks,
            timeout_ms,
            parts,
        } => start_produce(ctx, acks, timeout_ms, parts),
        ShardOp::Fetch { parts, max_bytes } => Box::pin(async move {
            // As Kafka's replica manager does: each partition reads at most what is left of
            // the response's limit. A partition's read returns at least one batch (KIP-74),
            // so the total may pass the limit by one batch; the handler trims the response.
            let mut left = max_bytes;
            let mut out = Vec::with_capacity(parts.len());
            for mut part in parts {
                part.max_bytes = part.max_bytes.min(left);
                let r = fetch_one(&ctx, part, left > 0).await;
                left = left.saturating_sub(r.bytes());
                out.push(r);
            }
            ShardReply::Fetch(out)
        }),
        ShardOp::WaitForData {
            parts,
            timeout,
            follower,
        } => Box::pin(async move {
            let mut waits = Vec::new();
            let deadline = Instant::now() + timeout;
            for (tp, offset) in parts {
                if let Ok(Some(p)) = ctx.partition(&tp.topic, tp.partition).await {
                    waits.push(Box::pin(async move {
                        if follower {
                            p.wait_for_log_end_beyond(offset, deadline).await;
                        } else {
                            p.wait_for_hw_beyond(offset, deadline).await;
                        }
                    }));
                }
            }
            if waits.is_empty() {
                glommio::timer::sleep(timeout).await;
            } else {
                futures::future::select_all(waits).await;
            }
            ShardReply::DataReady
        }),
        ShardOp::ListOffsets { parts } => Box::pin(async move {
            let mut out = Vec::with_capacity(parts.len());
            for (tp, ts) in parts {
                out.push(list_offset(&ctx, &tp, ts).await);
            }
            ShardReply::Offsets(out)
        }),
        ShardOp::EpochEnds { parts } => Box::pin(async move {
            let out = parts
                .into_iter()
                .map(|(tp, arg)| {
                    let (current, requested) = crate::server::route::unpack_epochs(arg);
                    match super::replica::epoch_end(&ctx, &tp, current, requested) {
                        (Some(e), _, _) => OffsetResult::failed(e),
                        (None, epoch, offset) => OffsetResult::ok(epoch as i64, offset),
                    }
                })
                .collect();
            ShardReply::Offsets(out)
        }),
        ShardOp::DeleteRecords { parts } => Box::pin(async move {
            let mut out = Vec::with_capacity(parts.len());
            for (tp, offset) in parts {
                out.push(delete_records(&ctx, &tp, offset).await);
            }
            ShardReply::Offsets(out)
        }),
        ShardOp::OpenPartitions {
            topic,
            partitions,
            config,
        } => Box::pin(async move {
            for p in partitions {
                if let Err(e) = ctx.open_partition(&topic, p, config.clone()).await {
                    return ShardReply::Done(Err(format!("cannot open {topic}-{p}: {e}")));
                }
            }
            ShardReply::Done(Ok(()))
        }),
        ShardOp::DropPartitions { topic, partitions } => Box::pin(async move {
            let mut result = Ok(());
            for i in partitions {
                match ctx.remove_partition(&topic, i) {
                    Some(p) => {
                        if let Err(e) = p.delete().await {
                            result = Err(format!("cannot delete {topic}-{i}: {e}"));
                        }
                    }
                    None => {
                        // Never opened on this run: remove whatever a previous run left.
                        let dir = ctx.shared.partition_dir(&topic, i);
                        if dir.exists() {
                            if let Err(e) = std::fs::remove_dir_all(&dir) {
                                result = Err(format!("cannot delete {}: {e}", dir.display()));
                            }
                        }
                    }
                }
            }
            ShardReply::Done(result)
        }),
        ShardOp::Group { partition, req } => super::groups::start(ctx, partition, req),
        ShardOp::SetConfig { topic, config } => Box::pin(async move {
            for (_, p) in ctx.topic_partitions(&topic) {
                p.set_config(config.clone());
            }
            ShardReply::Done(Ok(()))
        }),
    }
}

/// Outcome of appending one partition's records, before durability.
enum Staged {
    Appended {
        partition: Rc<Partition>,
        result: ProduceResult,
        last_offset: i64,
    },
    Failed(ProduceResult),
    /// The partition is placed here but not open yet: append after opening.
    NotOpen(TopicPartition, Option<Bytes>),
    /// The log's staging buffer is full: append the rest once the flusher makes room.
    Waiting(Appending),
}

fn start_produce(
    ctx: Rc<ShardCtx>,
    acks: i16,
    timeout_ms: i32,
    parts: Vec<(TopicPartition, Option<Bytes>)>,
) -> LocalBoxFuture<'static, ShardReply> {
    let now = ctx.shared.clock.wall_ms();
    let staged: Vec<(TopicPartition, Staged)> = parts
        .into_iter()
        .map(|(tp, records)| (tp.clone(), stage(&ctx, acks, tp, records, now)))
        .collect();
    Box::pin(async move {
        let deadline = Instant::now()
            + Duration::from_millis(
                timeout_ms.clamp(0, crate::limits::PRODUCE_TIMEOUT_MS_MAX) as u64
            );
        let mut out = Vec::with_capacity(staged.len());
        for (tp, s) in staged {
            let s = match s {
                Staged::NotOpen(tp, records) => {
                    // The metadata naming us leader may be newer than this shard's image.
                    super::replica::apply_metadata(&ctx).await;
                    match ctx.replicas.check_leader(&tp) {
                        // Kafka answers KAFKA_STORAGE_ERROR for a replica whose log is offline.
                        super::replica::LeaderCheck::Unknown => {
                            Staged::Failed(match ctx.replicas.offline_reason(&tp) {
                                Some(reason) => {
                                    ProduceResult::error(ErrorCode::KafkaStorageError, Some(reason))
                                }
                                None => {
                                    ProduceResult::error(ErrorCode::UnknownTopicOrPartition, None)
                                }
                            })
                        }
                        _ => stage(&ctx, acks, tp, records, ctx.shared.clock.wall_ms()),
                    }
                }
                other => other,
            };
            let waited = matches!(s, Staged::Waiting(_));
            let s = finish_waiting(&ctx, s, deadline).await;
            if waited {
                super::replica::on_local_append(&ctx, &tp);
            }
            out.push((tp, s));
        }
        let mut results = Vec::with_capacity(out.len());
        for (tp, s) in out {
            match s {
                Staged::Appended {
                    partition,
                    result,
                    last_offset,
                } => {
                    if acks != -1 {
                        results.push(result);
                        continue;
                    }
                    let wait = partition.wait_durable(last_offset);
                    let timer =
                        glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
                    let outcome = futures_lite::future::or(async { Some(wait.await) }, async {
                        timer.await;
                        None
                    })
                    .await;
                    results.push(match outcome {
                        // Durable here; acknowledged once every in-sync replica has it too
                        // (the high watermark passed it).
                        Some(Ok(())) => {
                            if !super::replica::wait_committed(&partition, last_offset, deadline)
                                .await
                            {
                                ProduceResult::error(ErrorCode::RequestTimedOut, None)
                            } else if let Err(e) = ctx.replicas.acks_all_committed(&tp) {
                                ProduceResult::error(e, None)
                            } else {
                                result
                            }
                        }
                        Some(Err(e)) => ProduceResult::error(e.error_code(), Some(e.to_string())),
                        None => ProduceResult::error(ErrorCode::RequestTimedOut, None),
                    });
                }
                Staged::Failed(r) => results.push(r),
                Staged::NotOpen(..) | Staged::Waiting(_) => results.push(ProduceResult::error(
                    ErrorCode::UnknownTopicOrPartition,
                    None,
                )),
            }
        }
        ShardReply::Produce(results)
    })
}

/// Checks this broker leads `tp` (and, for acks=all, that the ISR is large enough), then
/// appends its records and counts them towards the high watermark.
fn stage(
    ctx: &Rc<ShardCtx>,
    acks: i16,
    tp: TopicPartition,
    records: Option<Bytes>,
    now: i64,
) -> Staged {
    use super::replica::LeaderCheck;
    let Some(p) = ctx.local_partition(&tp.topic, tp.partition) else {
        return Staged::NotOpen(tp, records);
    };
    match ctx.replicas.check_leader(&tp) {
        LeaderCheck::Leader => {}
        LeaderCheck::NotLeader => {
            return Staged::Failed(ProduceResult::error(ErrorCode::NotLeaderOrFollower, None))
        }
        LeaderCheck::Unknown => return Staged::NotOpen(tp, records),
    }
    // Kafka refuses before appending, so a refused write is never half-replicated.
    if acks == -1 && !ctx.replicas.acks_all_allowed(&tp) {
        return Staged::Failed(ProduceResult::error(
            ErrorCode::NotEnoughReplicas,
            Some("the in-sync replicas are fewer than min.insync.replicas".into()),
        ));
    }
    let staged = append_all(p, records.as_ref(), now);
    super::replica::on_local_append(ctx, &tp);
    staged
}

/// Validates every batch of one partition's records, then appends them in order.
fn append_all(partition: Rc<Partition>, records: Option<&Bytes>, now: i64) -> Staged {
    let Some(records) = records.filter(|r| !r.is_empty()) else {
        return Staged::Failed(ProduceResult::error(
            ErrorCode::InvalidRecord,
            Some("produce request carries no record batch".into()),
        ));
    };
    let config = partition.config();
    let max = config.max_message_bytes as usize;
    let mut ranges = Vec::new();
    let mut rewrite = false;
    for item in BatchIter::new(records) {
        match item {
            Ok((pos, header)) => {
                if !header.is_dense() {
                    // Only the cleaner writes batches with gaps; a producer's are dense.
                    return Staged::Failed(ProduceResult::error(
                        ErrorCode::CorruptMessage,
                        Some(
                            BatchError::BadOffsetDelta {
                                delta: header.last_offset_delta,
                                count: header.records_count,
                            }
                            .to_string(),
                        ),
                    ));
                }
                rewrite |= !header.is_control()
                    && config.compression.rewrite(header.compression()).is_some();
                if header.total_len() > max {
                    return Staged::Failed(ProduceResult::error(
                        ErrorCode::MessageTooLarge,
                        Some(format!(
                            "batch of {} bytes exceeds max.message.bytes {max}",
                            header.total_len()
                        )),
                    ));
                }
                ranges.push(pos..pos + header.total_len());
            }
            Err(e) => {
                let code = match e {
                    BatchError::BadMagic(_) => ErrorCode::UnsupportedForMessageFormat,
                    _ => ErrorCode::CorruptMessage,
                };
                return Staged::Failed(ProduceResult::error(code, Some(e.to_string())));
            }
        }
    }
    let (records, ranges) = if rewrite {
        match apply_compression_type(records, &ranges, config.compression, max) {
            Ok(rewritten) => rewritten,
            Err(failed) => return Staged::Failed(failed),
        }
    } else {
        (records.clone(), ranges)
    };
    let appending = Appending {
        partition,
        records,
        ranges,
        next: 0,
        first: None,
        last_offset: -1,
    };
    appending.advance(now)
}

/// Rewrites a partition's validated batches in the topic's compression.type (Kafka's
/// broker-side recompression): a batch in another codec is decompressed and compressed again
/// (its offsets, timestamps and producer fields unchanged, its CRC recomputed); control
/// batches and batches already in the codec are copied as they are. Only called when some
/// batch needs it, so a topic whose producers send its codec pays nothing. Returns the new
/// records and each batch's range in them, or the error the producer hears.
fn apply_compression_type(
    records: &Bytes,
    ranges: &[std::ops::Range<usize>],
    compression: CompressionType,
    max_message_bytes: usize,
) -> Result<(Bytes, Vec<std::ops::Range<usize>>), ProduceResult> {
    let mut out = BytesMut::with_capacity(records.len());
    let mut out_ranges = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Some(batch) = records.get(range.clone()) else {
            continue;
        };
        let header = BatchHeader::parse(batch)
            .map_err(|e| ProduceResult::error(ErrorCode::CorruptMessage, Some(e.to_string())))?;
        let start = out.len();
        match compression.rewrite(header.compression()) {
            Some(codec) if !header.is_control() => {
                let rewritten =
                    recompress(batch, codec, RECORDS_DECOMPRESSED_BYTES_MAX).map_err(|e| {
                        let code = match e {
                            RecordsError::TooLarge { .. } => ErrorCode::MessageTooLarge,
                            RecordsError::Compress { .. } => ErrorCode::UnknownServerError,
                            _ => ErrorCode::CorruptMessage,
                        };
                        ProduceResult::error(code, Some(e.to_string()))
                    })?;
                if rewritten.len() > max_message_bytes {
                    return Err(ProduceResult::error(
                        ErrorCode::MessageTooLarge,
                        Some(format!(
                            "batch of {} bytes after recompression exceeds max.message.bytes \
                             {max_message_bytes}",
                            rewritten.len()
                        )),
                    ));
                }
                out.extend_from_slice(&rewritten);
            }
            _ => out.extend_from_slice(batch),
        }
        out_ranges.push(start..out.len());
    }
    Ok((out.freeze(), out_ranges))
}

/// Completes a `Staged::Waiting` by waiting (until `deadline`) for room in the log's staging
/// buffer: a producer that outruns the disk is slowed down, not refused.
async fn finish_waiting(ctx: &ShardCtx, mut staged: Staged, deadline: Instant) -> Staged {
    while let Staged::Waiting(appending) = staged {
        let room = appending
            .partition
            .wait_for_staging_room(appending.next_len());
        let timer = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
        let waited = futures_lite::future::or(async { Some(room.await) }, async {
            timer.await;
            None
        })
        .await;
        staged = match waited {
            Some(Ok(())) => appending.advance(ctx.shared.clock.wall_ms()),
            Some(Err(e)) => {
                Staged::Failed(ProduceResult::error(e.error_code(), Some(e.to_string())))
            }
            None => Staged::Failed(ProduceResult::error(ErrorCode::RequestTimedOut, None)),
        };
    }
    staged
}

/// A partition's validated batches, appended in order; it pauses when the log's staging
/// buffer is full (the disk is behind) and resumes once the flusher has made room.
struct Appending {
    partition: Rc<Partition>,
    records: Bytes,
    ranges: Vec<std::ops::Range<usize>>,
    next: usize,
    first: Option<ProduceResult>,
    last_offset: i64,
}

impl Appending {
    /// Appends as many remaining batches as the log takes now.
    fn advance(mut self, now: i64) -> Staged {
        while let Some(range) = self.ranges.get(self.next).cloned() {
            let Some(slice) = self.records.get(range) else {
                self.next += 1;
                continue;
            };
            // The log copies the batch once, out of the request frame, into a buffer it owns
            // and patches (base offset, leader epoch) in place.
            match self.partition.append(slice, now) {
                Ok(o) => {
                    self.next += 1;
                    self.last_offset = o.last_offset;
                    if self.first.is_none() {
                        self.first = Some(ProduceResult {
                            error: None,
                            message: None,
                            base_offset: o.base_offset,
                            log_append_time_ms: o.log_append_time_ms,
                            log_start_offset: o.log_start_offset,
                        });
                    }
                }
                Err(AppendError::Backpressure { .. }) => return Staged::Waiting(self),
                Err(e) => {
                    return Staged::Failed(ProduceResult::error(
                        e.error_code(),
                        Some(e.to_string()),
                    ))
                }
            }
        }
        match self.first {
            Some(result) => Staged::Appended {
                partition: self.partition,
                result,
                last_offset: self.last_offset,
            },
            None => Staged::Failed(ProduceResult::error(ErrorCode::CorruptMessage, None)),
        }
    }

    /// Bytes of the next batch to append.
    fn next_len(&self) -> usize {
        self.ranges.get(self.next).map(|r| r.len()).unwrap_or(0)
    }
}

/// The local partition for `tp`, or the error code a client should see.
async fn owned_partition(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
) -> Result<Rc<Partition>, ErrorCode> {
    if ctx.replicas.offline_reason(tp).is_some() {
        return Err(ErrorCode::KafkaStorageError);
    }
    match ctx.partition(&tp.topic, tp.partition).await {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(ErrorCode::UnknownTopicOrPartition),
        Err(e) => Err(e.error_code()),
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
    let read = if part.replica_id >= 0 {
        // A follower: its fetch offset is its (durable) log end, which may move our high
        // watermark; it reads everything we have, committed or not.
        match super::replica::on_follower_fetch(
            ctx,
            &part.tp,
            part.replica_id,
            part.offset,
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
                super::replica::apply_metadata(ctx).await;
            }
            if let Err(e) = check_leader_epoch(ctx, &part.tp, part.current_leader_epoch) {
                return FetchResult::error(e);
            }
        }
        if read {
            p.read(part.offset, part.max_bytes).await
        } else {
            nothing()
        }
    };
    match read {
        Ok(r) => FetchResult {
            error: None,
            high_watermark: r.high_watermark,
            log_start_offset: r.log_start_offset,
            chunks: r.chunks,
        },
        Err(e) => FetchResult {
            error: Some({
                if !matches!(e, crate::storage::Error::OffsetOutOfRange { .. }) {
                    tracing::warn!(topic = %part.tp.topic, partition = part.tp.partition, offset = part.offset, "read failed: {e}");
                }
                e.error_code()
            }),
            high_watermark: p.high_watermark(),
            log_start_offset: p.log_start_offset(),
            chunks: Vec::new(),
        },
    }
}

/// A client request for `tp` is served by its leader, in the leader epoch the client names
/// (KIP-320): an older one is fenced, a newer one means our metadata lags.
pub fn check_leader_epoch(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    current_leader_epoch: i32,
) -> Result<(), ErrorCode> {
    let Some(ours) = ctx.replicas.leader_epoch(tp) else {
        return Err(ErrorCode::NotLeaderOrFollower);
    };
    if current_leader_epoch >= 0 && current_leader_epoch < ours {
        return Err(ErrorCode::FencedLeaderEpoch);
    }
    if current_leader_epoch > ours {
        return Err(ErrorCode::UnknownLeaderEpoch);
    }
    Ok(())
}

/// Kafka's special ListOffsets timestamps.
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;
pub const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;

async fn list_offset(ctx: &Rc<ShardCtx>, tp: &TopicPartition, ts: i64) -> OffsetResult {
    let err = OffsetResult::failed;
    let p = match owned_partition(ctx, tp).await {
        Ok(p) => p,
        Err(e) => return err(e),
    };
    // Each answer carries the leader epoch Kafka gives it: the current one for the high
    // watermark, the one the offset was written in otherwise (a consumer validates its
    // position against it after a leader change, KIP-320).
    let ok = OffsetResult::ok;
    let not_found = || ok(-1, -1);
    match ts {
        LATEST_TIMESTAMP => {
            ok(-1, p.high_watermark()).with_leader_epoch(ctx.replicas.leader_epoch(tp))
        }
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
            let start = p.log_start_offset();
            ok(-1, start).with_leader_epoch(p.epoch_for_offset(start))
        }
        // The first record stamped with the largest timestamp (Kafka since KAFKA-16310),
        // found the way a timestamp lookup finds it.
        MAX_TIMESTAMP => match p.max_timestamp() {
            Some((t, _)) => timestamp_lookup(&p, t).await,
            None => not_found(),
        },
        t if t >= 0 => timestamp_lookup(&p, t).await,
        _ => err(ErrorCode::InvalidRequest),
    }
}

/// The first record stamped at or after `ts`, with the epoch it was written in.
async fn timestamp_lookup(p: &Partition, ts: i64) -> OffsetResult {
    match p.offset_for_timestamp(ts).await {
        Ok(Some(found)) => OffsetResult::ok(found.timestamp, found.offset)
            .with_leader_epoch(Some(found.leader_epoch)),
        Ok(None) => OffsetResult::ok(-1, -1),
        Err(e) => OffsetResult::failed(e.error_code()),
    }
}

async fn delete_records(ctx: &Rc<ShardCtx>, tp: &TopicPartition, offset: i64) -> OffsetResult {
    let err = OffsetResult::failed;
    let p = match owned_partition(ctx, tp).await {
        Ok(p) => p,
        Err(e) => return err(e),
    };
    // -1 means "up to the high watermark", as in Kafka.
    let target = if offset == -1 {
        p.high_watermark()
    } else {
        offset
    };
    if target < 0 || target > p.high_watermark() {
        return err(ErrorCode::OffsetOutOfRange);
    }
    match p.delete_records(target).await {
        Ok(low) => OffsetResult::ok(-1, low),
        Err(e) => err(e.error_code()),
    }
}
