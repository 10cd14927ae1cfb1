//! OffsetForLeaderEpoch (KIP-101/KIP-279/KIP-320): for each partition, the largest leader
//! epoch this leader knows at or below the one asked about, and the offset where it ends. A
//! follower of a new leader truncates there; a consumer uses it to detect a log that was
//! truncated under it. Only the leader answers, in the epoch the requester names.
use std::rc::Rc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::server::route::{on_authorized_leaders_by_topic, EpochEnds};
use crate::shard::partition_service::epoch_ends::EpochQuery;
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let cluster_action = authz.allows_cluster(AclOperation::ClusterAction);
    let wanted = req
        .topics
        .iter()
        .map(|t| {
            (
                t.topic.0.to_string(),
                t.partitions
                    .iter()
                    .map(|p| {
                        (
                            p.partition,
                            EpochQuery {
                                current_leader_epoch: p.current_leader_epoch,
                                leader_epoch: p.leader_epoch,
                            },
                        )
                    })
                    .collect(),
            )
        })
        .collect();
    let results = on_authorized_leaders_by_topic::<EpochEnds>(ctx, wanted, |t| {
        // Kafka: CLUSTER_ACTION on the cluster (followers), or DESCRIBE on the topic.
        cluster_action || authz.allows_topic(AclOperation::Describe, t)
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
                    EpochEndOffset::default()
                        .with_error_code(r.code())
                        .with_partition(p.partition)
                        .with_leader_epoch(r.leader_epoch)
                        .with_end_offset(r.end_offset)
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
