//! A shard's answer to a scrape: its registry (`crate::metrics::with`, this thread's) and
//! the state of its partitions, replicas, groups and memory budget, read at once without
//! awaiting, so one snapshot describes one moment of the shard.
use crate::metrics::{PartitionSnapshot, ShardSnapshot};
use crate::storage::DiskSpace;

use super::{ShardCtx, TopicPartition};

/// This shard's snapshot. Runs on the shard (the mesh brings the op here).
pub fn snapshot(ctx: &ShardCtx) -> ShardSnapshot {
    let mut s = ShardSnapshot {
        shard: ctx.id,
        connections_open: ctx.connections.get() as u64,
        consumer_groups: ctx.groups.group_count() as u64,
        offline_replicas: ctx.replicas.offline_count() as u64,
        memory_used_bytes: ctx.budget.used() as u64,
        memory_limit_bytes: ctx.budget.limit() as u64,
        ..Default::default()
    };
    crate::metrics::with(|m| m.snapshot_into(&mut s));
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

/// The data directory's space, as the shards last measured it.
pub fn disk(disk: &DiskSpace) -> crate::metrics::DiskSnapshot {
    crate::metrics::DiskSnapshot {
        free_bytes: disk.free_bytes(),
        total_bytes: disk.total_bytes(),
        reserve_bytes: disk.reserve_bytes(),
    }
}
