//! Produce on the owner shard: validate a partition's batches (dense offsets, size,
//! magic, CRC), rewrite them in the topic's compression.type when needed, append them in
//! order (waiting for staging room when the disk is behind), then wait for durability and, for
//! acks=all, for the high watermark to pass them. The appends happen before `start` returns,
//! so requests that reach a shard in order are appended in that order; one that must wait
//! (no staging room, partition still opening) keeps its place in the partition's line
//! (`append_order`) and later ones queue behind it instead of overtaking it.
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::append_order::{AppendOrder, LineFull, Ticket};
use crate::clock::Clock;
use crate::limits::RECORDS_DECOMPRESSED_BYTES_MAX;
use crate::protocol::error::ErrorCode;
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::protocol::record_batch::{
    null_key_positions, recompress, BatchError, BatchHeader, BatchIter, RecordsError,
};
use crate::shard::txn_verify;
use crate::shard::until;
use crate::shard::{replica, ShardCtx, TopicPartition};
use crate::storage::producer_state::TxnVerification;
use crate::storage::txn_verification::VerificationGuard;
use crate::storage::{AppendError, CompressionType, Partition};

#[derive(Debug, Clone)]
pub struct ProduceResult {
    pub error: Option<ErrorCode>,
    pub message: Option<String>,
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    /// The records that made the partition's batches refused (Produce v8+, KIP-467).
    pub record_errors: Vec<RecordError>,
}

/// One refused record: its position among the partition's records (counted from 0 across
/// its batches; Kafka's producers send one batch per partition) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: String,
}

impl ProduceResult {
    fn error(e: ErrorCode, message: Option<String>) -> Self {
        Self {
            error: Some(e),
            message,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
            record_errors: Vec::new(),
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
    /// The partition is placed here but not open yet: append after opening, in turn.
    NotOpen(TopicPartition, Option<Bytes>, Ticket),
    /// Waiting for its turn in the partition's line (`append_order`) and for room in the
    /// log's staging buffer: append the rest once both come.
    Waiting(Appending),
    /// A transactional batch that would open its producer's transaction here: the
    /// transaction coordinator must confirm the partition is in it first (KIP-890).
    Verifying(Verifying),
}

/// A part waiting for its transaction coordinator's verification. It holds its place in the
/// partition's line meanwhile: a producer pipelines its batches (Kafka reads one request per
/// connection at a time, Strata does not), and a later batch of the same producer, finding the
/// transaction open once this one's predecessor is in, must not be appended before this one.
struct Verifying {
    records: Option<Bytes>,
    ticket: Option<Ticket>,
    guard: VerificationGuard,
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
}

/// Where a part stands with transaction verification (KIP-890 part 1).
#[derive(Clone, Copy)]
enum Verify<'a> {
    /// `transaction_partition_verification_enable` is off.
    Off,
    /// On, not verified yet: the request's transactional id, if it has one.
    Start(Option<&'a str>),
    /// The coordinator confirmed the partition; the append carries this guard.
    Verified(VerificationGuard),
}

impl<'a> Verify<'a> {
    fn new(enabled: bool, transactional_id: Option<&'a str>) -> Self {
        if enabled {
            Verify::Start(transactional_id)
        } else {
            Verify::Off
        }
    }
}

/// Appends every part's records at once (those of a partition where nothing waits) and
/// returns a future for the rest (turns in line, staging waits, durability, replication);
/// results come back in the order of `parts`.
pub fn start(
    ctx: Rc<ShardCtx>,
    acks: i16,
    timeout_ms: i32,
    transactional_id: Option<String>,
    parts: Vec<(TopicPartition, Option<Bytes>)>,
) -> impl std::future::Future<Output = Vec<ProduceResult>> + 'static {
    let now = ctx.shared.clock.wall_ms();
    let deadline_ms = ctx.shared.clock.monotonic_ms()
        + timeout_ms.clamp(0, crate::limits::PRODUCE_TIMEOUT_MS_MAX) as u64;
    let verify_on = ctx.shared.config.transaction_partition_verification_enable;
    let staged: Vec<(TopicPartition, Staged)> = parts
        .into_iter()
        .map(|(tp, records)| {
            let s = stage(
                &ctx,
                acks,
                tp.clone(),
                records,
                now,
                None,
                Verify::new(verify_on, transactional_id.as_deref()),
            );
            (tp, s)
        })
        .collect();
    async move {
        // One verification question per producer for all of this request's parts here.
        let verdicts = verify_parts(&ctx, transactional_id.as_deref(), &staged).await;
        let id = transactional_id.as_deref();
        // Concurrently: a part waiting its turn on one partition must not hold up this
        // request's turn on another (which could deadlock two requests in opposite order).
        futures::future::join_all(staged.into_iter().map(|(tp, s)| {
            let verify = Verify::new(verify_on, id);
            finish(&ctx, acks, tp, s, deadline_ms, verify, &verdicts)
        }))
        .await
    }
}

/// The coordinator's answer for each part's partition (`None`: confirmed).
type Verdicts = std::collections::HashMap<TopicPartition, Option<ErrorCode>>;

/// Asks the transaction coordinator about every part that is `Staged::Verifying`, one
/// question per producer id and epoch.
async fn verify_parts(
    ctx: &Rc<ShardCtx>,
    transactional_id: Option<&str>,
    staged: &[(TopicPartition, Staged)],
) -> Verdicts {
    let mut verdicts = Verdicts::new();
    let Some(id) = transactional_id else {
        return verdicts;
    };
    let mut by_producer: std::collections::BTreeMap<
        (ProducerId, ProducerEpoch),
        Vec<TopicPartition>,
    > = Default::default();
    for (tp, s) in staged {
        if let Staged::Verifying(v) = s {
            by_producer
                .entry((v.producer_id, v.producer_epoch))
                .or_default()
                .push(tp.clone());
        }
    }
    let asks = by_producer
        .into_iter()
        .map(|((pid, epoch), tps)| txn_verify::verify(ctx, id, pid, epoch, tps));
    for answer in futures::future::join_all(asks).await {
        verdicts.extend(answer);
    }
    verdicts
}

/// One part after its synchronous append: opens the partition if needed, waits its turn
/// and for staging room, then for durability and, for acks=all, the high watermark.
async fn finish(
    ctx: &Rc<ShardCtx>,
    acks: i16,
    tp: TopicPartition,
    staged: Staged,
    deadline_ms: u64,
    verify: Verify<'_>,
    verdicts: &Verdicts,
) -> ProduceResult {
    let clock = &*ctx.shared.clock;
    let staged = match staged {
        Staged::NotOpen(tp, records, ticket) => {
            // The metadata naming us leader may be newer than this shard's image.
            replica::apply_metadata(ctx).await;
            match ctx.replicas.check_leader(&tp) {
                // Kafka answers KAFKA_STORAGE_ERROR for a replica whose log is offline.
                replica::LeaderCheck::Unknown => {
                    Staged::Failed(match ctx.replicas.offline_reason(&tp) {
                        Some(reason) => {
                            ProduceResult::error(ErrorCode::KafkaStorageError, Some(reason))
                        }
                        None => ProduceResult::error(ErrorCode::UnknownTopicOrPartition, None),
                    })
                }
                _ => stage(
                    ctx,
                    acks,
                    tp,
                    records,
                    clock.wall_ms(),
                    Some(ticket),
                    verify,
                ),
            }
        }
        other => other,
    };
    let staged = match staged {
        Staged::Verifying(v) => {
            let verdict = match verdicts.get(&tp) {
                Some(verdict) => *verdict,
                // Staged after opening the partition: asked on its own.
                None => match verify {
                    Verify::Start(Some(id)) => txn_verify::verify(
                        ctx,
                        id,
                        v.producer_id,
                        v.producer_epoch,
                        vec![tp.clone()],
                    )
                    .await
                    .into_iter()
                    .next()
                    .and_then(|(_, e)| e),
                    _ => Some(ErrorCode::InvalidTxnState),
                },
            };
            match verdict {
                None => stage(
                    ctx,
                    acks,
                    tp.clone(),
                    v.records,
                    clock.wall_ms(),
                    v.ticket,
                    Verify::Verified(v.guard),
                ),
                Some(e) => {
                    let (code, message) = crate::txn::verify::produce_error(e);
                    Staged::Failed(ProduceResult::error(code, message))
                }
            }
        }
        other => other,
    };
    let waited = matches!(staged, Staged::Waiting(_));
    let staged = finish_waiting(staged, clock, deadline_ms).await;
    if waited {
        replica::on_local_append(ctx, &tp);
    }
    match staged {
        Staged::Appended {
            partition,
            result,
            last_offset,
        } => {
            if acks != -1 {
                wait_for_followers(ctx, &tp, &partition, deadline_ms).await;
                return result;
            }
            match until(clock, deadline_ms, partition.wait_durable(last_offset)).await {
                // Durable here; acknowledged once every in-sync replica has it too (the high
                // watermark passed it).
                Some(Ok(())) => {
                    let left = deadline_ms.saturating_sub(clock.monotonic_ms());
                    let deadline = Instant::now() + Duration::from_millis(left);
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
            }
        }
        Staged::Failed(r) => r,
        Staged::NotOpen(..) | Staged::Waiting(_) | Staged::Verifying(_) => {
            ProduceResult::error(ErrorCode::UnknownTopicOrPartition, None)
        }
    }
}

/// An acks=0/1 append that left more than `replica_produce_lag_max_bytes` of client bytes
/// above `tp`'s high watermark waits here, before it is answered, for the in-sync followers
/// to fsync enough of them (`replication::produce_lag`): so a closed-loop producer is paced by
/// its followers too, not only by the leader's disk. Event-driven: the HW's own wake-ups
/// (a follower's fetch reporting its durable end, an ISR shrink) end it, as they complete
/// acks=all waiters. The wait ends too, and the produce is answered as it would have been,
/// when this broker stops leading `tp`, no other replica is left in the ISR, the partition
/// closes, or the time bound passes. Partitions alone in their ISR return at once.
async fn wait_for_followers(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    partition: &Partition,
    request_deadline_ms: u64,
) {
    let Some(target) = ctx.replicas.produce_lag_target(tp) else {
        return;
    };
    let Some(epoch) = ctx.replicas.leader_epoch(tp) else {
        return;
    };
    let clock = &*ctx.shared.clock;
    let start_ms = clock.monotonic_ms();
    // At most as long as a stuck follower stays in the ISR (replica_lag_time_max_ms), and at
    // most half of what is left of the request's timeout: clients send their own request
    // timeout there, and an answer that reaches them after it makes them send an
    // acknowledged write again.
    let deadline_ms = start_ms
        .saturating_add(ctx.shared.config.replica_lag_time_max_ms)
        .min(start_ms + request_deadline_ms.saturating_sub(start_ms) / 2);
    loop {
        let now_ms = clock.monotonic_ms();
        if now_ms >= deadline_ms || !ctx.replicas.produce_lag_holds(tp, epoch) {
            break;
        }
        // The HW wakes this; the tick looks again at the leadership and the ISR, whose loss
        // moves no HW here.
        let tick_ms = crate::limits::REPLICA_TICK_MS.min(deadline_ms - now_ms);
        let wake = Instant::now() + Duration::from_millis(tick_ms);
        if partition.wait_for_hw_beyond(target - 1, wake).await >= target {
            break;
        }
        if Instant::now() < wake {
            // Back early with the HW short of the target: the partition closed or failed.
            break;
        }
    }
    let waited_ms = clock.monotonic_ms().saturating_sub(start_ms);
    crate::metrics::with(|m| m.produce_lag_waited(waited_ms));
}

/// Checks this broker leads `tp` (and, for acks=all, that the ISR is large enough), then
/// appends its records in turn and counts them towards the high watermark. `ticket` is the
/// part's place in line if it has one already (it waited for the partition to open).
fn stage(
    ctx: &Rc<ShardCtx>,
    acks: i16,
    tp: TopicPartition,
    records: Option<Bytes>,
    now: i64,
    ticket: Option<Ticket>,
    verify: Verify<'_>,
) -> Staged {
    use replica::LeaderCheck;
    let not_open = |tp: TopicPartition, records, ticket: Option<Ticket>| {
        // Appends that reach the shard later must not overtake this one while it opens.
        match ticket.map_or_else(|| ctx.append_order.enqueue(&tp), Ok) {
            Ok(ticket) => Staged::NotOpen(tp, records, ticket),
            Err(full) => Staged::Failed(line_full(full)),
        }
    };
    let Some(p) = ctx.local_partition(&tp.topic, tp.partition) else {
        return not_open(tp, records, ticket);
    };
    match ctx.replicas.check_leader(&tp) {
        LeaderCheck::Leader => {}
        LeaderCheck::NotLeader => {
            return Staged::Failed(ProduceResult::error(ErrorCode::NotLeaderOrFollower, None))
        }
        LeaderCheck::Unknown => return not_open(tp, records, ticket),
    }
    // Kafka refuses before appending, so a refused write is never half-replicated.
    if acks == -1 && !ctx.replicas.acks_all_allowed(&tp) {
        return Staged::Failed(ProduceResult::error(
            ErrorCode::NotEnoughReplicas,
            Some("the in-sync replicas are fewer than min.insync.replicas".into()),
        ));
    }
    let verification = match verify {
        Verify::Off => TxnVerification::Off,
        Verify::Verified(guard) => TxnVerification::Guard(Some(guard)),
        Verify::Start(id) => match start_verification(&p, id, records.as_ref(), now) {
            Ok(None) => TxnVerification::Guard(None),
            Ok(Some(v)) => {
                let ticket = match ticket.map_or_else(|| ctx.append_order.enqueue(&tp), Ok) {
                    Ok(t) => t,
                    Err(full) => return Staged::Failed(line_full(full)),
                };
                return Staged::Verifying(Verifying {
                    records,
                    ticket: Some(ticket),
                    ..v
                });
            }
            Err(failed) => return Staged::Failed(failed),
        },
    };
    let staged = match prepare(&tp, p, records.as_ref(), verification) {
        Ok(appending) => append_in_order(&ctx.append_order, &tp, appending, ticket, now),
        Err(failed) => Staged::Failed(failed),
    };
    replica::on_local_append(ctx, &tp);
    staged
}

/// Kafka's `maybeStartTransactionVerification` for a part: if the request names a
/// transactional id and its first transactional batch would open its producer's
/// transaction, the verification to run (`records` left for the caller to fill); `None`
/// if nothing is to verify (the append still checks: a transactional batch with no
/// transaction open and no guard is refused).
fn start_verification(
    p: &Partition,
    transactional_id: Option<&str>,
    records: Option<&Bytes>,
    now: i64,
) -> Result<Option<Verifying>, ProduceResult> {
    let (Some(_), Some(records)) = (transactional_id, records) else {
        return Ok(None);
    };
    let first = BatchIter::new(records).find_map(|item| match item {
        Ok((_, h)) if h.is_transactional() && !h.is_control() && h.producer_id >= 0 => Some(h),
        _ => None,
    });
    let Some(h) = first else {
        return Ok(None);
    };
    let producer_id = ProducerId(h.producer_id);
    match p.start_txn_verification(producer_id, h.base_sequence, h.producer_epoch, now) {
        Ok(None) => Ok(None),
        Ok(Some(guard)) => Ok(Some(Verifying {
            records: None,
            ticket: None,
            guard,
            producer_id,
            producer_epoch: ProducerEpoch(h.producer_epoch),
        })),
        Err(full) => Err(ProduceResult::error(
            ErrorCode::NotEnoughReplicas,
            Some(full.to_string()),
        )),
    }
}

/// The answer to an append refused because too many wait for its partition already.
fn line_full(full: LineFull) -> ProduceResult {
    ProduceResult::error(ErrorCode::RequestTimedOut, Some(full.to_string()))
}

/// Appends now if nothing waits on the partition before this part; otherwise, or if the
/// log has no room, the part takes its place in line and waits (`Staged::Waiting`).
fn append_in_order(
    order: &AppendOrder,
    tp: &TopicPartition,
    mut appending: Appending,
    ticket: Option<Ticket>,
    now: i64,
) -> Staged {
    appending.ticket = match ticket {
        Some(t) => Some(t),
        None if order.is_waiting(tp) => match order.enqueue(tp) {
            Ok(t) => Some(t),
            Err(full) => return Staged::Failed(line_full(full)),
        },
        None => None,
    };
    if appending.ticket.as_ref().is_some_and(|t| !t.is_turn()) {
        return Staged::Waiting(appending);
    }
    match appending.advance(now) {
        Advanced::Done(staged) => staged,
        Advanced::Paused(mut appending) => {
            if appending.ticket.is_none() {
                // Nothing waited (checked above, synchronously): this part heads the line.
                match order.enqueue(tp) {
                    Ok(t) => appending.ticket = Some(t),
                    Err(full) => return Staged::Failed(line_full(full)),
                }
            }
            Staged::Waiting(appending)
        }
    }
}

/// Validates every batch of one partition's records (rewriting them in the topic's
/// compression.type when needed), ready to append in order.
fn prepare(
    tp: &TopicPartition,
    partition: Rc<Partition>,
    records: Option<&Bytes>,
    verification: TxnVerification,
) -> Result<Appending, ProduceResult> {
    let Some(records) = records.filter(|r| !r.is_empty()) else {
        return Err(ProduceResult::error(
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
                if header.is_control() {
                    // Only a partition leader writes transaction markers (WriteTxnMarkers);
                    // Kafka's `LogValidator` refuses them from clients with these words.
                    return Err(ProduceResult::error(
                        ErrorCode::InvalidRecord,
                        Some(format!(
                            "Clients are not allowed to write control records in topic \
                             partition {}-{}.",
                            tp.topic, tp.partition
                        )),
                    ));
                }
                if !header.is_dense() {
                    // Only the cleaner writes batches with gaps; a producer's are dense.
                    return Err(ProduceResult::error(
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
                    return Err(ProduceResult::error(
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
                return Err(ProduceResult::error(code, Some(e.to_string())));
            }
        }
    }
    if config.cleanup_policy.compact {
        refuse_keyless(tp, records, &ranges)?;
    }
    let (records, ranges) = if rewrite {
        apply_compression_type(records, &ranges, config.compression, max)?
    } else {
        (records.clone(), ranges)
    };
    Ok(Appending {
        partition,
        records,
        ranges,
        next: 0,
        first: None,
        last_offset: -1,
        ticket: None,
        verification,
    })
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

/// Completes a `Staged::Waiting`: waits (until `deadline_ms` on the clock's monotonic time)
/// for the part's turn in line, then for room in the log's staging buffer, and appends the
/// rest; a producer that outruns the disk is slowed down, not refused.
async fn finish_waiting(mut staged: Staged, clock: &dyn Clock, deadline_ms: u64) -> Staged {
    while let Staged::Waiting(appending) = staged {
        let waited = until(clock, deadline_ms, async {
            if let Some(ticket) = &appending.ticket {
                ticket.wait_turn().await;
            }
            appending
                .partition
                .wait_for_staging_room(appending.next_len())
                .await
        })
        .await;
        staged = match waited {
            Some(Ok(())) => match appending.advance(clock.wall_ms()) {
                Advanced::Done(staged) => staged,
                // Still at the head of its line (it holds its ticket): wait for room again.
                Advanced::Paused(appending) => Staged::Waiting(appending),
            },
            Some(Err(e)) => {
                Staged::Failed(ProduceResult::error(e.error_code(), Some(e.to_string())))
            }
            None => Staged::Failed(ProduceResult::error(ErrorCode::RequestTimedOut, None)),
        };
    }
    staged
}

/// A partition's validated batches, appended in order; it pauses when the log's staging
/// buffer is full (the disk is behind) and resumes once the flusher has made room. While it
/// waits it holds its `ticket` in the partition's line, so later appends queue behind it;
/// the ticket is released when it is done (appended or failed).
struct Appending {
    partition: Rc<Partition>,
    records: Bytes,
    ranges: Vec<std::ops::Range<usize>>,
    next: usize,
    first: Option<ProduceResult>,
    last_offset: i64,
    ticket: Option<Ticket>,
    /// Checked on every batch (KIP-890): the first transactional one opens the transaction.
    verification: TxnVerification,
}

/// Where `Appending::advance` stopped.
enum Advanced {
    /// Every batch appended, or one failed.
    Done(Staged),
    /// The log has no room for the next batch.
    Paused(Appending),
}

impl Appending {
    /// Appends as many remaining batches as the log takes now.
    fn advance(mut self, now: i64) -> Advanced {
        while let Some(range) = self.ranges.get(self.next).cloned() {
            let Some(slice) = self.records.get(range) else {
                self.next += 1;
                continue;
            };
            // The log copies the batch once, out of the request frame, into a buffer it owns
            // and patches (base offset, leader epoch) in place.
            match self
                .partition
                .append_verified(slice, now, self.verification)
            {
                Ok(o) => {
                    // One add per batch; its record count comes from its offsets.
                    let records = o
                        .last_offset
                        .saturating_sub(o.base_offset)
                        .saturating_add(1);
                    self.partition
                        .traffic
                        .appended(slice.len() as u64, u64::try_from(records).unwrap_or(0));
                    self.next += 1;
                    self.last_offset = o.last_offset;
                    if self.first.is_none() {
                        self.first = Some(ProduceResult {
                            error: None,
                            message: None,
                            base_offset: o.base_offset,
                            log_append_time_ms: o.log_append_time_ms,
                            log_start_offset: o.log_start_offset,
                            record_errors: Vec::new(),
                        });
                    }
                }
                Err(AppendError::Backpressure { .. }) => return Advanced::Paused(self),
                Err(e) => {
                    return Advanced::Done(Staged::Failed(ProduceResult::error(
                        e.error_code(),
                        Some(e.to_string()),
                    )))
                }
            }
        }
        Advanced::Done(match self.first {
            Some(result) => Staged::Appended {
                partition: self.partition,
                result,
                last_offset: self.last_offset,
            },
            None => Staged::Failed(ProduceResult::error(ErrorCode::CorruptMessage, None)),
        })
    }

    /// Bytes of the next batch to append.
    fn next_len(&self) -> usize {
        self.ranges.get(self.next).map(|r| r.len()).unwrap_or(0)
    }
}

/// A compacted topic refuses records without a key (the cleaner could never drop them):
/// every data batch's records are read, decompressed if they must be, and the partition's
/// whole records are refused with INVALID_RECORD when any key is null, naming each such
/// record as Kafka's `LogValidator` does. Followers never get here: they append what their
/// leader validated (`Partition::append_replica`).
fn refuse_keyless(
    tp: &TopicPartition,
    records: &Bytes,
    ranges: &[std::ops::Range<usize>],
) -> Result<(), ProduceResult> {
    let mut record_errors = Vec::new();
    let mut records_before = 0i32;
    for range in ranges {
        let batch = records.get(range.clone()).unwrap_or_default();
        let header = BatchHeader::parse(batch)
            .map_err(|e| ProduceResult::error(ErrorCode::CorruptMessage, Some(e.to_string())))?;
        if header.is_control() {
            continue;
        }
        let positions = null_key_positions(batch, RECORDS_DECOMPRESSED_BYTES_MAX).map_err(|e| {
            let code = match e {
                RecordsError::TooLarge { .. } => ErrorCode::InvalidRecord,
                _ => ErrorCode::CorruptMessage,
            };
            ProduceResult::error(code, Some(e.to_string()))
        })?;
        record_errors.extend(positions.into_iter().map(|position| RecordError {
            batch_index: records_before.saturating_add(position),
            message: format!(
                "Compacted topic cannot accept message without key in topic partition {}-{}.",
                tp.topic, tp.partition
            ),
        }));
        records_before = records_before.saturating_add(header.records_count.max(0));
    }
    if record_errors.is_empty() {
        return Ok(());
    }
    // Kafka's `LogValidator.processRecordErrors` wording, first three errors shown.
    let shown: Vec<String> = record_errors
        .iter()
        .take(3)
        .map(|e| {
            format!(
                "RecordError(batchIndex={}, message='{}')",
                e.batch_index, e.message
            )
        })
        .collect();
    let message = format!(
        "One or more records have been rejected due to {} record errors in total, and only \
         showing the first three errors at most: [{}]",
        record_errors.len(),
        shown.join(", ")
    );
    Err(ProduceResult {
        record_errors,
        ..ProduceResult::error(ErrorCode::InvalidRecord, Some(message))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use std::rc::Rc;

    use super::*;
    use crate::storage::tests::{make_batch, run, test_dir};
    use crate::storage::{LogConfig, MemoryBudget};

    /// A batch of one record carrying `payload` filler bytes (no producer id).
    fn batch(payload: usize) -> Bytes {
        make_batch(1, 1_000, -1, -1, -1, payload).freeze()
    }

    /// Proves a later produce to a partition cannot overtake an earlier one that is waiting
    /// for staging room: with a 1 MiB budget nearly full of unwritten data, a 100 KB batch is
    /// refused room and waits; a 1 KB batch that would fit must queue behind it, and once the
    /// flusher makes room the 100 KB batch gets the lower offset.
    #[test]
    fn a_waiting_append_is_not_overtaken() {
        run(|| async {
            let dir = test_dir();
            let budget = MemoryBudget::new(1 << 20);
            let p = Partition::open(dir.path().join("t-0"), LogConfig::default())
                .await
                .unwrap();
            p.set_budget(Rc::clone(&budget));
            // Fill the budget with unwritten batches (no await: the flusher cannot run) until
            // about 50 KB are left: room for 1 KB, not for 100 KB.
            while budget.available() > 150_000 {
                p.append(batch(100_000), 0).unwrap();
            }
            let filler =
                budget.available() - 50_000 - crate::protocol::record_batch::BATCH_HEADER_LEN;
            p.append(batch(filler), 0).unwrap();
            assert!(
                (20_000..100_000).contains(&budget.available()),
                "{}",
                budget.available()
            );

            let order = AppendOrder::default();
            let tp = TopicPartition {
                topic: "t".into(),
                partition: 0,
            };
            let stage = |payload| {
                let appending = prepare(
                    &tp,
                    Rc::clone(&p),
                    Some(&batch(payload)),
                    TxnVerification::Off,
                )
                .unwrap();
                append_in_order(&order, &tp, appending, None, 0)
            };
            let big = stage(100_000);
            assert!(matches!(big, Staged::Waiting(_)), "100 KB does not fit");
            let small = stage(1_000);
            assert!(matches!(small, Staged::Waiting(_)), "1 KB fits but queues");
            assert_eq!(order.waiting(&tp), 2);
            let clock = crate::clock::SystemClock;
            let deadline_ms = clock.monotonic_ms() + 60_000;
            let (big, small) = futures_lite::future::zip(
                finish_waiting(big, &clock, deadline_ms),
                finish_waiting(small, &clock, deadline_ms),
            )
            .await;
            let offset = |s: &Staged| match s {
                Staged::Appended { result, .. } => result.base_offset,
                _ => panic!("not appended"),
            };
            assert!(
                offset(&big) < offset(&small),
                "the earlier batch has the earlier offset: {} vs {}",
                offset(&big),
                offset(&small)
            );
            assert!(!order.is_waiting(&tp), "the line drained");
            // With nothing waiting, an append goes straight to the log again.
            assert!(matches!(stage(1_000), Staged::Appended { .. }));
            p.close().await.unwrap();
        });
    }
}
