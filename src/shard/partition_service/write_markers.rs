//! WriteTxnMarkers on the partition leader: append the producer's COMMIT or ABORT marker
//! (a control batch that ends its open transaction; an abort goes into the aborted index),
//! then wait, as Kafka's acks=all, until the marker is durable and every in-sync replica has
//! it (the high watermark passed it). A marker on a `__consumer_offsets` partition then
//! completes the group coordinator's pending transactional offset commits of that producer
//! (`groups::complete_txn_offsets`).
//!
//! The appends of one op run in request order before anything awaits durability, so the
//! markers of one request share an fsync; the waits run concurrently.
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::owned_partition;
use crate::protocol::control::EndTxnMarker;
use crate::protocol::error::ErrorCode;
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::shard::{replica, until, ShardCtx, TopicPartition};
use crate::storage::{AppendError, Partition};

/// How long a marker may take to be appended, made durable and replicated (Kafka writes
/// markers with `request.timeout.ms`, 30 s by default).
pub const WRITE_MARKERS_TIMEOUT_MS: u64 = 30_000;

/// One marker for one partition.
#[derive(Debug, Clone, Copy)]
pub struct MarkerWrite {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub marker: EndTxnMarker,
}

/// The leader's answer for one partition's marker.
#[derive(Debug, Clone, Copy, Default)]
pub struct MarkerResult {
    pub error: Option<ErrorCode>,
}

impl MarkerResult {
    pub fn failed(e: ErrorCode) -> Self {
        Self { error: Some(e) }
    }
    /// The wire error code (0 for success).
    pub fn code(&self) -> i16 {
        crate::protocol::error::code(self.error)
    }
}

/// Writes each part's marker, in order; answers in the same order.
pub async fn write_markers(
    ctx: &Rc<ShardCtx>,
    parts: Vec<(TopicPartition, MarkerWrite)>,
) -> Vec<MarkerResult> {
    let clock = &*ctx.shared.clock;
    let deadline_ms = clock.monotonic_ms() + WRITE_MARKERS_TIMEOUT_MS;
    let mut appended = Vec::with_capacity(parts.len());
    for (tp, write) in parts {
        appended.push((
            tp.clone(),
            write,
            append_one(ctx, &tp, write, deadline_ms).await,
        ));
    }
    futures::future::join_all(
        appended
            .into_iter()
            .map(|(tp, write, a)| finish_one(ctx, tp, write, a, deadline_ms)),
    )
    .await
}

/// Checks this broker leads `tp` and appends the marker (waiting for staging room if the
/// disk is behind). Returns the partition and the marker's offset.
async fn append_one(
    ctx: &Rc<ShardCtx>,
    tp: &TopicPartition,
    write: MarkerWrite,
    deadline_ms: u64,
) -> Result<(Rc<Partition>, i64), ErrorCode> {
    use replica::LeaderCheck;
    let p = owned_partition(ctx, tp).await?;
    if matches!(ctx.replicas.check_leader(tp), LeaderCheck::Unknown) {
        // The metadata that routed the marker here may be newer than this shard's image.
        replica::apply_metadata(ctx).await;
    }
    match ctx.replicas.check_leader(tp) {
        LeaderCheck::Leader => {}
        LeaderCheck::NotLeader | LeaderCheck::Unknown => {
            return Err(ErrorCode::NotLeaderOrFollower)
        }
    }
    if !ctx.replicas.acks_all_allowed(tp) {
        return Err(ErrorCode::NotEnoughReplicas);
    }
    let clock = &*ctx.shared.clock;
    loop {
        match p.append_marker(
            write.producer_id,
            write.producer_epoch,
            write.marker,
            clock.wall_ms(),
        ) {
            Ok(outcome) => {
                replica::on_local_append(ctx, tp);
                return Ok((p, outcome.base_offset));
            }
            Err(AppendError::Backpressure { .. }) => {
                let room = until(clock, deadline_ms, p.wait_for_staging_room(1)).await;
                match room {
                    Some(Ok(())) => continue,
                    Some(Err(e)) => return Err(e.error_code()),
                    None => return Err(ErrorCode::RequestTimedOut),
                }
            }
            Err(e) => {
                tracing::debug!(topic = %tp.topic, partition = tp.partition, "marker refused: {e}");
                return Err(e.error_code());
            }
        }
    }
}

/// Waits for the marker to be durable and replicated, then completes the group
/// coordinator's pending offsets for a `__consumer_offsets` partition.
async fn finish_one(
    ctx: &Rc<ShardCtx>,
    tp: TopicPartition,
    write: MarkerWrite,
    appended: Result<(Rc<Partition>, i64), ErrorCode>,
    deadline_ms: u64,
) -> MarkerResult {
    let (p, offset) = match appended {
        Ok(a) => a,
        Err(e) => return MarkerResult::failed(e),
    };
    let clock = &*ctx.shared.clock;
    match until(clock, deadline_ms, p.wait_durable(offset)).await {
        Some(Ok(())) => {}
        Some(Err(e)) => return MarkerResult::failed(e.error_code()),
        None => return MarkerResult::failed(ErrorCode::RequestTimedOut),
    }
    let left = deadline_ms.saturating_sub(clock.monotonic_ms());
    let deadline = Instant::now() + Duration::from_millis(left);
    if !replica::wait_committed(&p, offset, deadline).await {
        return MarkerResult::failed(ErrorCode::RequestTimedOut);
    }
    if let Err(e) = ctx.replicas.acks_all_committed(&tp) {
        return MarkerResult::failed(e);
    }
    if tp.topic == crate::group::OFFSETS_TOPIC {
        crate::shard::groups::complete_txn_offsets(
            ctx,
            tp.partition,
            write.producer_id,
            write.marker.outcome,
        );
    }
    MarkerResult::default()
}
