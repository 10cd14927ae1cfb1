//! A shard's answer to a scrape: its registry (`crate::metrics::with`, this thread's) and
//! the state of its partitions, replicas, groups and memory budget, read at once without
//! awaiting, so one snapshot describes one moment of the shard.
use crate::limits::METRICS_GROUP_LAG_SERIES_MAX;
use crate::metrics::{GroupOffsetSnapshot, PartitionSnapshot, ShardSnapshot};
use crate::storage::DiskSpace;

use super::{ShardCtx, TopicPartition};

/// This shard's snapshot. Runs on the shard (the mesh brings the op here).
pub fn snapshot(ctx: &ShardCtx) -> ShardSnapshot {
    let mut s = ShardSnapshot {
        shard: ctx.id,
        consumer_groups: ctx.groups.group_count() as u64,
        offline_replicas: ctx.replicas.offline_count() as u64,
        memory_used_bytes: ctx.budget.used() as u64,
        memory_limit_bytes: ctx.budget.limit() as u64,
        ..Default::default()
    };
    crate::metrics::with(|m| m.snapshot_into(&mut s));
    // Each shard sends at most the scrape's bound; the render applies it again over all.
    let (offsets, omitted) = ctx.groups.committed_offsets(METRICS_GROUP_LAG_SERIES_MAX);
    s.group_offsets = offsets
        .into_iter()
        .map(|(group, topic, partition, committed)| GroupOffsetSnapshot {
            group,
            topic,
            partition,
            committed,
        })
        .collect();
    s.group_offsets_omitted = omitted as u64;
    let mut partitions = ctx.all_partitions();
    partitions.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    s.partitions = partitions
        .into_iter()
        .map(|(topic, partition, p)| {
            let tp = TopicPartition { topic, partition };
            let led = ctx.replicas.led_under_replicated(&tp);
            let (bytes_in, records_in, bytes_out) = p.traffic.get();
            PartitionSnapshot {
                high_watermark: p.high_watermark(),
                log_end_offset: p.log_end_offset(),
                log_start_offset: p.log_start_offset(),
                size_bytes: p.size_bytes(),
                bytes_in,
                records_in,
                bytes_out,
                leader: led.is_some(),
                under_replicated: led == Some(true),
                topic: tp.topic,
                partition: tp.partition,
            }
        })
        .collect();
    s
}

/// Partitions of the cluster with no leader, as this broker's metadata has them (Kafka's
/// OfflinePartitionsCount, which its controller reports).
pub fn offline_partitions(catalog: &crate::cluster::catalog::Catalog) -> u64 {
    catalog
        .topics
        .values()
        .flat_map(|t| &t.partitions)
        .filter(|p| p.leader < 0)
        .count() as u64
}

/// The data directory's space, as the shards last measured it.
pub fn disk(disk: &DiskSpace) -> crate::metrics::DiskSnapshot {
    crate::metrics::DiskSnapshot {
        free_bytes: disk.free_bytes(),
        total_bytes: disk.total_bytes(),
        reserve_bytes: disk.reserve_bytes(),
    }
}
