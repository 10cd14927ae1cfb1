//! DeleteRecords: raise each partition's log start offset (-1 means the high watermark);
//! whole segments below it are removed.
use std::rc::Rc;

use kafka_protocol::messages::delete_records_response::*;
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::server::route::{on_authorized_leaders_by_topic, DeleteRecords};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let wanted = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partitions
                    .iter()
                    .map(|p| (p.partition_index, p.offset))
                    .collect(),
            )
        })
        .collect();
    // Kafka: DELETE on the topic, else TOPIC_AUTHORIZATION_FAILED.
    let results = on_authorized_leaders_by_topic::<DeleteRecords>(ctx, wanted, |t| {
        authz.allows_topic(AclOperation::Delete, t)
    })
    .await;
    let topics = req
        .topics
        .into_iter()
        .zip(results)
        .map(|(t, rs)| {
            let partitions = t
                .partitions
                .iter()
                .zip(rs)
                .map(|(p, r)| {
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(r.code())
                        .with_low_watermark(r.offset)
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}
