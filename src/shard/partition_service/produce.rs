//! Produce on the owner shard: validate a partition's batches (dense offsets, size,
//! magic, CRC), rewrite them in the topic's compression.type when needed, append them in
//! order (waiting for staging room when the disk is behind), then wait for durability and, for
//! acks=all, for the high watermark to pass them. The appends happen before `start` returns,
//! so requests that reach a shard in order are appended in that order.
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::limits::RECORDS_DECOMPRESSED_BYTES_MAX;
use crate::protocol::error::ErrorCode;
use crate::protocol::record_batch::{recompress, BatchError, BatchHeader, BatchIter, RecordsError};
use crate::shard::{replica, ShardCtx, TopicPartition};
use crate::storage::{AppendError, CompressionType, Partition};

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

/// Appends every part's records at once and returns a future for the rest (durability,
/// replication and staging waits); results come back in the order of `parts`.
pub fn start(
    ctx: Rc<ShardCtx>,
    acks: i16,
    timeout_ms: i32,
    parts: Vec<(TopicPartition, Option<Bytes>)>,
) -> impl std::future::Future<Output = Vec<ProduceResult>> + 'static {
    let now = ctx.shared.clock.wall_ms();
    let staged: Vec<(TopicPartition, Staged)> = parts
        .into_iter()
        .map(|(tp, records)| (tp.clone(), stage(&ctx, acks, tp, records, now)))
        .collect();
    async move {
        let deadline = Instant::now()
            + Duration::from_millis(
                timeout_ms.clamp(0, crate::limits::PRODUCE_TIMEOUT_MS_MAX) as u64
            );
        let mut out = Vec::with_capacity(staged.len());
        for (tp, s) in staged {
            let s = match s {
                Staged::NotOpen(tp, records) => {
                    // The metadata naming us leader may be newer than this shard's image.
                    replica::apply_metadata(&ctx).await;
                    match ctx.replicas.check_leader(&tp) {
                        // Kafka answers KAFKA_STORAGE_ERROR for a replica whose log is offline.
                        replica::LeaderCheck::Unknown => {
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
                replica::on_local_append(&ctx, &tp);
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
                            if !replica::wait_committed(&partition, last_offset, deadline).await {
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
        results
    }
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
    use replica::LeaderCheck;
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
    replica::on_local_append(ctx, &tp);
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
