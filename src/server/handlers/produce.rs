//! Produce: validate each partition's batches, append them on the owner shards (started in
//! request order, through `route::FanOut`), then wait for durability as `acks` and the
//! topic's flush policy require.
use std::rc::Rc;

use futures::future::LocalBoxFuture;
use futures::FutureExt;
use kafka_protocol::messages::produce_response::*;
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};

use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::server::route::{FanOut, Slot};
use crate::shard::ops::{ShardOp, ShardReply};
use crate::shard::partition_service::produce::ProduceResult;
use crate::shard::ShardCtx;
use crate::shard::TopicPartition;

/// Where a partition's answer comes from: an immediate error or its slot in the replies of
/// the owner shards.
enum Source {
    Error(ErrorCode),
    Shard(Slot),
    /// Refused: the disk is under its free-space reserve.
    DiskFull(ErrorCode),
}

/// The message a refused produce carries (what Redpanda answers too).
const DISK_FULL_MESSAGE: &str = "no disk space; bytes free less than storage_min_free_bytes";

/// Starts the appends and returns a future of the response (`None` for acks=0).
///
/// Authorization (Kafka's): a transactional produce needs WRITE on its transactional id
/// (else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and each topic WRITE
/// (else its partitions are TOPIC_AUTHORIZATION_FAILED, whether or not the topic exists).
pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: ProduceRequest,
) -> LocalBoxFuture<'static, Option<ProduceResponse>> {
    let acks = req.acks;
    let transactional_id = req
        .transactional_id
        .as_ref()
        .map(|id| id.0.to_string())
        .filter(|id| !id.is_empty());
    let txn_denied = transactional_id
        .as_deref()
        .is_some_and(|id| !authz.allows_transactional_id(AclOperation::Write, id));
    let catalog = ctx.shared.catalog.load();
    let nr_shards = ctx.shared.nr_shards;
    let mut fan_out: FanOut<(TopicPartition, Option<bytes::Bytes>)> = FanOut::new(nr_shards);
    let mut layout: Vec<(String, Vec<(i32, Source)>)> = Vec::with_capacity(req.topic_data.len());
    let invalid_acks = !(-1..=1).contains(&acks);
    // Under the free-space reserve every partition is refused before anything is appended
    // (as Redpanda does): the space left is kept for metadata, deletions and retention.
    let disk_full = ctx.shared.disk.produce_refused();
    if disk_full {
        ctx.shared.disk.log_refused(ctx.shared.clock.monotonic_ms());
    }
    // Produce v4 is where clients learned KAFKA_STORAGE_ERROR; older ones get a retriable
    // code they know.
    let disk_full_code = if version >= 4 {
        ErrorCode::KafkaStorageError
    } else {
        ErrorCode::BrokerNotAvailable
    };
    for topic in req.topic_data {
        let name = topic.name.0.to_string();
        let meta = catalog.topic(&name);
        let topic_denied = !authz.allows_topic(AclOperation::Write, &name);
        let mut parts = Vec::with_capacity(topic.partition_data.len());
        for p in topic.partition_data {
            let source = if invalid_acks {
                Source::Error(ErrorCode::InvalidRequiredAcks)
            } else if txn_denied {
                Source::Error(ErrorCode::TransactionalIdAuthorizationFailed)
            } else if topic_denied {
                Source::Error(ErrorCode::TopicAuthorizationFailed)
            } else if disk_full {
                Source::DiskFull(disk_full_code)
            } else if name == crate::group::OFFSETS_TOPIC
                || name == crate::txn::TRANSACTION_STATE_TOPIC
            {
                // Only the coordinators write their internal topics (Kafka: "Cannot append
                // to internal topic").
                Source::Error(ErrorCode::InvalidTopicException)
            } else {
                match meta.and_then(|m| {
                    usize::try_from(p.index)
                        .ok()
                        .and_then(|i| m.partitions.get(i))
                }) {
                    None => Source::Error(ErrorCode::UnknownTopicOrPartition),
                    // Our replica's log could not be opened: Kafka answers that before it
                    // looks at leadership (a replica in an offline log dir).
                    Some(pm) if pm.offline.contains_key(&catalog.local_node) => {
                        Source::Error(ErrorCode::KafkaStorageError)
                    }
                    Some(pm)
                        if pm.leader != catalog.local_node || catalog.local_shard(pm).is_none() =>
                    {
                        Source::Error(ErrorCode::NotLeaderOrFollower)
                    }
                    Some(pm) => Source::Shard(fan_out.push(
                        catalog.local_shard(pm).unwrap_or(0) as usize,
                        (
                            TopicPartition {
                                topic: name.clone(),
                                partition: p.index,
                            },
                            p.records,
                        ),
                    )),
                }
            };
            parts.push((p.index, source));
        }
        layout.push((name, parts));
    }
    // Start every shard's part now, in request order per shard.
    let timeout_ms = req.timeout_ms;
    let launched = fan_out
        .start(ctx, |parts| ShardOp::Produce {
            acks,
            timeout_ms,
            transactional_id: transactional_id.clone(),
            parts,
        })
        .await;
    let finish = async move {
        let mut replies = launched
            .finish(|reply| match reply {
                ShardReply::Produce(r) => Some(r),
                _ => None,
            })
            .await;
        let responses = layout
            .into_iter()
            .map(|(name, parts)| {
                TopicProduceResponse::default()
                    .with_name(super::topic_name(&name))
                    .with_partition_responses(
                        parts
                            .into_iter()
                            .map(|(index, source)| {
                                let r = match source {
                                    Source::Error(e) => Err(e),
                                    Source::DiskFull(e) => Ok(ProduceResult {
                                        error: Some(e),
                                        message: Some(DISK_FULL_MESSAGE.to_string()),
                                        base_offset: -1,
                                        log_append_time_ms: -1,
                                        log_start_offset: -1,
                                        record_errors: Vec::new(),
                                    }),
                                    Source::Shard(slot) => {
                                        replies.take(slot).ok_or(ErrorCode::RequestTimedOut)
                                    }
                                };
                                partition_response(index, r)
                            })
                            .collect(),
                    )
            })
            .collect();
        ProduceResponse::default().with_responses(responses)
    };
    if acks == 0 {
        // No response is sent, but the started work (opening a partition, appending) must
        // still run to completion, whatever becomes of the connection: a task of its own.
        // The connection's writer waits for it in its turn all the same (it includes waiting
        // for the followers when the partition's lag is past `replica_produce_lag_max_bytes`),
        // so past `connection_requests_in_flight_max` such requests the connection is not
        // read: the only back-pressure an acks=0 producer feels.
        let done = glommio::spawn_local(finish).detach();
        return async move {
            let _ = done.await;
            None
        }
        .boxed_local();
    }
    async move { Some(finish.await) }.boxed_local()
}

fn partition_response(index: i32, r: Result<ProduceResult, ErrorCode>) -> PartitionProduceResponse {
    let base = PartitionProduceResponse::default().with_index(index);
    match r {
        Ok(r) => base
            .with_error_code(r.error.map(|e| e.code()).unwrap_or(0))
            .with_error_message(r.message.as_deref().map(str_bytes))
            .with_base_offset(r.base_offset)
            .with_log_append_time_ms(r.log_append_time_ms)
            .with_log_start_offset(r.log_start_offset)
            .with_record_errors(
                r.record_errors
                    .iter()
                    .map(|e| {
                        BatchIndexAndErrorMessage::default()
                            .with_batch_index(e.batch_index)
                            .with_batch_index_error_message(Some(str_bytes(&e.message)))
                    })
                    .collect(),
            ),
        Err(e) => base
            .with_error_code(e.code())
            .with_base_offset(-1)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(-1),
    }
}
