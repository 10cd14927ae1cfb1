//! Fan-out of per-partition requests to their owner shards, with the replies merged back
//! into request order.
use std::rc::Rc;

use crate::protocol::error::ErrorCode;
use crate::shard::mesh::begin;
use crate::shard::ops::{ShardOp, ShardReply};
use crate::shard::partition_service::OffsetResult;
use crate::shard::ShardCtx;
use crate::shard::TopicPartition;

/// The per-partition operations that answer with an offset.
#[derive(Clone, Copy)]
pub enum OffsetOp {
    ListOffsets,
    DeleteRecords,
    /// OffsetForLeaderEpoch; the argument packs the client's current leader epoch (high 32
    /// bits) and the epoch asked about (low 32 bits); see `pack_epochs`. The result's
    /// `timestamp` carries the epoch found.
    EpochEnd,
}

/// Packs the two epochs of an OffsetForLeaderEpoch partition into one offset argument.
pub fn pack_epochs(current_leader_epoch: i32, requested: i32) -> i64 {
    ((current_leader_epoch as i64) << 32) | (requested as u32 as i64)
}

/// The inverse of `pack_epochs`.
pub fn unpack_epochs(arg: i64) -> (i32, i32) {
    ((arg >> 32) as i32, arg as u32 as i32)
}

/// Runs `op` for every `(topic, partition, argument)` on its owner shard; results come back
/// in the order of `items`.
pub async fn offsets(
    ctx: &Rc<ShardCtx>,
    op: OffsetOp,
    items: Vec<(String, i32, i64)>,
) -> Vec<OffsetResult> {
    let catalog = ctx.shared.catalog.load();
    let nr = ctx.shared.nr_shards;
    let mut per_shard: Vec<Vec<(TopicPartition, i64)>> = (0..nr).map(|_| Vec::new()).collect();
    let mut slots = Vec::with_capacity(items.len());
    for (topic, partition, arg) in items {
        let shard = catalog
            .topic(&topic)
            .and_then(|m| {
                usize::try_from(partition)
                    .ok()
                    .and_then(|i| m.partitions.get(i))
            })
            .map(|p| {
                // Offsets are the leader's to answer (followers' logs may lag).
                match catalog.local_shard(p) {
                    _ if p.offline.contains_key(&catalog.local_node) => {
                        Err(ErrorCode::KafkaStorageError)
                    }
                    Some(s) if p.leader == catalog.local_node => Ok(s as usize),
                    _ => Err(ErrorCode::NotLeaderOrFollower),
                }
            })
            .map(|r| r.map(|s| s.min(nr.saturating_sub(1))));
        slots.push(match shard {
            None => Err(ErrorCode::UnknownTopicOrPartition),
            Some(Err(e)) => Err(e),
            Some(Ok(s)) => {
                per_shard[s].push((TopicPartition { topic, partition }, arg));
                Ok((s, per_shard[s].len() - 1))
            }
        });
    }
    let mut started = Vec::with_capacity(nr);
    for (shard, parts) in per_shard.into_iter().enumerate() {
        if parts.is_empty() {
            started.push(None);
            continue;
        }
        let op = match op {
            OffsetOp::ListOffsets => ShardOp::ListOffsets { parts },
            OffsetOp::DeleteRecords => ShardOp::DeleteRecords { parts },
            OffsetOp::EpochEnd => ShardOp::EpochEnds { parts },
        };
        started.push(Some(begin(ctx, shard, op).await));
    }
    let mut replies = Vec::with_capacity(nr);
    for s in started {
        replies.push(match s {
            Some(s) => match s.finish().await {
                ShardReply::Offsets(r) => r,
                _ => Vec::new(),
            },
            None => Vec::new(),
        });
    }
    let failed = OffsetResult::failed;
    slots
        .into_iter()
        .map(|slot| match slot {
            Err(e) => failed(e),
            Ok((s, i)) => replies
                .get(s)
                .and_then(|r| r.get(i))
                .cloned()
                .unwrap_or_else(|| failed(ErrorCode::NotLeaderOrFollower)),
        })
        .collect()
}

/// `offsets` for requests shaped as topics of `(partition, argument)`; the results come back
/// in the same shape.
pub async fn offsets_by_topic(
    ctx: &Rc<ShardCtx>,
    op: OffsetOp,
    topics: Vec<(String, Vec<(i32, i64)>)>,
) -> Vec<Vec<OffsetResult>> {
    let sizes: Vec<usize> = topics.iter().map(|(_, ps)| ps.len()).collect();
    let items = topics
        .into_iter()
        .flat_map(|(name, ps)| ps.into_iter().map(move |(p, arg)| (name.clone(), p, arg)))
        .collect();
    let mut flat = offsets(ctx, op, items).await.into_iter();
    sizes
        .into_iter()
        .map(|n| {
            (0..n)
                .map(|_| {
                    flat.next()
                        .unwrap_or_else(|| OffsetResult::failed(ErrorCode::UnknownServerError))
                })
                .collect()
        })
        .collect()
}
