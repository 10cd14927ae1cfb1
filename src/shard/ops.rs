//! The operations one shard asks another to perform (the mesh's messages) and their
//! replies, and `start`, which hands each to the service that performs it: the partition
//! service for partitions, the group coordinator for groups. `start` runs the
//! ordering-sensitive part (appends) at once and returns a future for the rest.
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::LocalBoxFuture;

use super::partition_service::describe_producers::ProducersResult;
use super::partition_service::epoch_ends::{EpochEndResult, EpochQuery};
use super::partition_service::fetch::{FetchPart, FetchResult, Waiter};
use super::partition_service::list_offsets::OffsetQuery;
use super::partition_service::log_dirs::LogDirResult;
use super::partition_service::produce::ProduceResult;
use super::partition_service::write_markers::{MarkerResult, MarkerWrite};
use super::partition_service::{self as service, OffsetResult};
use super::{ShardCtx, TopicPartition};
use crate::storage::LogConfig;

pub enum ShardOp {
    /// A snapshot of the shard's metrics and partitions, for a scrape.
    Metrics,
    Produce {
        acks: i16,
        timeout_ms: i32,
        /// The request's transactional id: whom to ask when a transactional batch needs
        /// verifying (KIP-890).
        transactional_id: Option<String>,
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
        waiter: Waiter,
    },
    ListOffsets {
        parts: Vec<(TopicPartition, OffsetQuery)>,
    },
    DeleteRecords {
        parts: Vec<(TopicPartition, i64)>,
    },
    /// WriteTxnMarkers: append each marker on the partition's leader, acks=all.
    WriteMarkers {
        parts: Vec<(TopicPartition, MarkerWrite)>,
    },
    /// OffsetForLeaderEpoch.
    EpochEnds {
        parts: Vec<(TopicPartition, EpochQuery)>,
    },
    /// DescribeProducers: each partition's producer state, on its leader.
    DescribeProducers {
        parts: Vec<(TopicPartition, ())>,
    },
    /// DescribeLogDirs: each local replica's size and cleaner state.
    LogDirs {
        parts: Vec<TopicPartition>,
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
    /// A transaction request for the coordinator of its transactional id (this shard leads
    /// the id's `__transaction_state` partition).
    Txn {
        req: super::txns::TxnRequest,
    },
    /// DescribeTransactions / ListTransactions, answered from this shard's coordinator.
    TxnAdmin {
        req: super::txns::TxnAdminRequest,
    },
}

pub enum ShardReply {
    Produce(Vec<ProduceResult>),
    Fetch(Vec<FetchResult>),
    DataReady,
    Offsets(Vec<OffsetResult>),
    Markers(Vec<MarkerResult>),
    EpochEnds(Vec<EpochEndResult>),
    LogDirs(Vec<LogDirResult>),
    Producers(Vec<ProducersResult>),
    Done(Result<(), String>),
    Group(super::groups::GroupReply),
    Metrics(Box<crate::metrics::ShardSnapshot>),
    Txn(crate::txn::Response),
    TxnAdmin(super::txns::TxnAdminReply),
    /// The target shard is gone (shutting down).
    Unavailable,
}

/// Starts `op` on this shard. Appends happen before this returns.
pub fn start(ctx: &Rc<ShardCtx>, op: ShardOp) -> LocalBoxFuture<'static, ShardReply> {
    let ctx = ctx.clone();
    match op {
        ShardOp::Metrics => {
            Box::pin(async move { ShardReply::Metrics(Box::new(super::metrics::snapshot(&ctx))) })
        }
        ShardOp::Produce {
            acks,
            timeout_ms,
            transactional_id,
            parts,
        } => {
            let produced = service::produce::start(ctx, acks, timeout_ms, transactional_id, parts);
            Box::pin(async move { ShardReply::Produce(produced.await) })
        }
        ShardOp::Fetch { parts, max_bytes } => Box::pin(async move {
            ShardReply::Fetch(service::fetch::fetch(&ctx, parts, max_bytes).await)
        }),
        ShardOp::WaitForData {
            parts,
            timeout,
            waiter,
        } => Box::pin(async move {
            service::fetch::wait_for_data(&ctx, parts, timeout, waiter).await;
            ShardReply::DataReady
        }),
        ShardOp::ListOffsets { parts } => Box::pin(async move {
            ShardReply::Offsets(service::list_offsets::list_offsets(&ctx, parts).await)
        }),
        ShardOp::EpochEnds { parts } => {
            Box::pin(
                async move { ShardReply::EpochEnds(service::epoch_ends::epoch_ends(&ctx, parts)) },
            )
        }
        ShardOp::LogDirs { parts } => {
            Box::pin(
                async move { ShardReply::LogDirs(service::log_dirs::describe(&ctx, parts).await) },
            )
        }
        ShardOp::DescribeProducers { parts } => Box::pin(async move {
            ShardReply::Producers(
                service::describe_producers::describe_producers(&ctx, parts).await,
            )
        }),
        ShardOp::WriteMarkers { parts } => Box::pin(async move {
            ShardReply::Markers(service::write_markers::write_markers(&ctx, parts).await)
        }),
        ShardOp::DeleteRecords { parts } => Box::pin(async move {
            ShardReply::Offsets(service::delete_records::delete_records(&ctx, parts).await)
        }),
        ShardOp::OpenPartitions {
            topic,
            partitions,
            config,
        } => Box::pin(async move {
            ShardReply::Done(service::lifecycle::open(&ctx, &topic, partitions, config).await)
        }),
        ShardOp::DropPartitions { topic, partitions } => Box::pin(async move {
            ShardReply::Done(service::lifecycle::drop(&ctx, &topic, partitions).await)
        }),
        ShardOp::Group { partition, req } => super::groups::start(ctx, partition, req),
        ShardOp::Txn { req } => super::txns::start(ctx, req),
        ShardOp::TxnAdmin { req } => super::txns::start_admin(ctx, req),
        ShardOp::SetConfig { topic, config } => Box::pin(async move {
            service::lifecycle::set_config(&ctx, &topic, &config);
            ShardReply::Done(Ok(()))
        }),
    }
}
