//! DescribeLogDirs: this broker's one log dir (the data dir) and the replicas it holds in it,
//! each with its size on disk, asked of the shard that owns it. A compacted log's partition
//! also carries Strata's tagged fields (v2+): the cleaner's dirty ratio and checkpoint,
//! which `strata topic describe` shows. Partitions this broker holds no replica of are left
//! out, as Kafka does.
use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::describe_log_dirs_response::*;
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse};

use super::{str_bytes, topic_name};
use crate::protocol::{CLEANER_CHECKPOINT_TAG, DIRTY_RATIO_TAG};
use crate::server::route::FanOut;
use crate::shard::ops::{ShardOp, ShardReply};
use crate::shard::partition_service::log_dirs::LogDirResult;
use crate::shard::{ShardCtx, TopicPartition};

/// Kafka's answer for a volume size it cannot measure.
const UNKNOWN_VOLUME_BYTES: i64 = -1;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    req: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    let catalog = ctx.shared.catalog.load();
    // (topic, partitions asked about); `None` asks about every topic.
    let wanted: Vec<(String, Option<Vec<i32>>)> = match req.topics {
        Some(topics) => topics
            .into_iter()
            .map(|t| (t.topic.0.to_string(), Some(t.partitions)))
            .collect(),
        None => catalog
            .topics
            .keys()
            .map(|name| (name.clone(), None))
            .collect(),
    };
    let mut fan_out = FanOut::new(ctx.shared.nr_shards);
    let mut layout = Vec::with_capacity(wanted.len());
    for (name, partitions) in wanted {
        let Some(meta) = catalog.topic(&name) else {
            continue;
        };
        let indexes: Vec<i32> = match partitions {
            Some(p) => p,
            None => (0..i32::try_from(meta.partitions.len()).unwrap_or(i32::MAX)).collect(),
        };
        let mut slots = Vec::new();
        for index in indexes {
            let local = usize::try_from(index)
                .ok()
                .and_then(|i| meta.partitions.get(i))
                .and_then(|pm| catalog.local_shard(pm));
            if let Some(shard) = local {
                let tp = TopicPartition {
                    topic: name.clone(),
                    partition: index,
                };
                slots.push((index, fan_out.push(shard as usize, tp)));
            }
        }
        if !slots.is_empty() {
            layout.push((name, slots));
        }
    }
    let mut replies = fan_out
        .start(ctx, |parts| ShardOp::LogDirs { parts })
        .await
        .finish(|reply| match reply {
            ShardReply::LogDirs(r) => Some(r),
            _ => None,
        })
        .await;
    let topics = layout
        .into_iter()
        .filter_map(|(name, slots)| {
            let partitions: Vec<DescribeLogDirsPartition> = slots
                .into_iter()
                .filter_map(|(index, slot)| {
                    replies
                        .take(slot)
                        .and_then(|r| partition(index, r, version))
                })
                .collect();
            (!partitions.is_empty()).then(|| {
                DescribeLogDirsTopic::default()
                    .with_name(topic_name(&name))
                    .with_partitions(partitions)
            })
        })
        .collect();
    let disk = &ctx.shared.disk;
    let measured = |b: u64| i64::try_from(b).ok().filter(|&b| b != i64::MAX);
    let result = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(&ctx.shared.config.data_dir.to_string_lossy()))
        .with_topics(topics)
        .with_total_bytes(measured(disk.total_bytes()).unwrap_or(UNKNOWN_VOLUME_BYTES))
        .with_usable_bytes(measured(disk.free_bytes()).unwrap_or(UNKNOWN_VOLUME_BYTES));
    DescribeLogDirsResponse::default().with_results(vec![result])
}

/// One replica's entry; a replica the shard has not opened (yet) is left out.
fn partition(index: i32, r: LogDirResult, version: i16) -> Option<DescribeLogDirsPartition> {
    if r.error.is_some() {
        return None;
    }
    let mut p = DescribeLogDirsPartition::default()
        .with_partition_index(index)
        .with_partition_size(r.size_bytes)
        .with_offset_lag(0);
    // Tagged fields exist from v2 (the first flexible version).
    if let (Some(cleaner), true) = (r.cleaner, version >= 2) {
        p.unknown_tagged_fields.insert(
            DIRTY_RATIO_TAG,
            Bytes::copy_from_slice(&cleaner.dirty_ratio.to_be_bytes()),
        );
        if let Some(checkpoint) = cleaner.checkpoint {
            p.unknown_tagged_fields.insert(
                CLEANER_CHECKPOINT_TAG,
                Bytes::copy_from_slice(&checkpoint.to_be_bytes()),
            );
        }
    }
    Some(p)
}
