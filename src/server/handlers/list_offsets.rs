//! ListOffsets: earliest (-2), latest (-1, the high watermark; the last stable offset for
//! `read_committed`, v2+), max timestamp (-3), earliest local (-4) or the first offset at or
//! after a timestamp.
use std::rc::Rc;

use kafka_protocol::messages::list_offsets_response::*;
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::server::route::{on_authorized_leaders_by_topic, ListOffsets};
use crate::shard::partition_service::fetch::Isolation;
use crate::shard::partition_service::list_offsets::OffsetQuery;
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let isolation = if version >= 2 {
        Isolation::from_level(req.isolation_level)
    } else {
        Isolation::ReadUncommitted
    };
    let wanted = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partitions
                    .iter()
                    .map(|p| {
                        (
                            p.partition_index,
                            OffsetQuery {
                                timestamp: p.timestamp,
                                isolation,
                            },
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    // Kafka: DESCRIBE on the topic, else TOPIC_AUTHORIZATION_FAILED. A follower's request
    // (replica id >= 0; Strata's fetcher asks for log start offsets) passes with
    // CLUSTER_ACTION too, so brokers need no topic ACLs.
    let as_replica = req.replica_id.0 >= 0 && authz.allows_cluster(AclOperation::ClusterAction);
    let results = on_authorized_leaders_by_topic::<ListOffsets>(ctx, wanted, |t| {
        as_replica || authz.allows_topic(AclOperation::Describe, t)
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
                    ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(r.code())
                        .with_timestamp(r.timestamp)
                        .with_offset(r.offset)
                        // Leader epochs exist on the wire from v4 on.
                        .with_leader_epoch(if version >= 4 { r.leader_epoch } else { -1 })
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}
