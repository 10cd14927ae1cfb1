//! OffsetDelete: removes committed offsets of partitions the group no longer consumes
//! (GROUP_SUBSCRIBED_TO_TOPIC for a topic an active consumer group still subscribes to).
use std::rc::Rc;

use kafka_protocol::messages::offset_delete_response::*;
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use super::topic_name;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

/// A partition of the request: an immediate error or its index in the coordinator's results.
type PartitionSlot = (i32, Result<usize, ErrorCode>);

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let group_id = req.group_id.0.to_string();
    // Kafka: DELETE on the group (else GROUP_AUTHORIZATION_FAILED for the request), READ
    // on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions).
    if !authz.allows_group(AclOperation::Delete, &group_id) {
        return OffsetDeleteResponse::default()
            .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
    }
    let catalog = ctx.shared.catalog.load();
    let mut layout: Vec<(String, Vec<PartitionSlot>)> = Vec::new();
    let mut partitions = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let count = catalog.topic(&name).map(|m| m.partitions.len() as i32);
        let topic_ok = authz.allows_topic(AclOperation::Read, &name);
        let mut parts = Vec::new();
        for p in &t.partitions {
            if !topic_ok {
                parts.push((p.partition_index, Err(ErrorCode::TopicAuthorizationFailed)));
            } else if count.is_some_and(|n| (0..n).contains(&p.partition_index)) {
                parts.push((p.partition_index, Ok(partitions.len())));
                partitions.push((name.clone(), p.partition_index));
            } else {
                parts.push((p.partition_index, Err(ErrorCode::UnknownTopicOrPartition)));
            }
        }
        layout.push((name, parts));
    }
    let req = GroupRequest::DeleteOffsets {
        group_id: group_id.clone(),
        partitions,
    };
    let results = match call_group(ctx, &group_id, req).await {
        GroupReply::DeleteOffsets(Ok(r)) => r,
        GroupReply::DeleteOffsets(Err(e)) | GroupReply::Error(e) => {
            return OffsetDeleteResponse::default().with_error_code(e.code())
        }
        _ => {
            return OffsetDeleteResponse::default()
                .with_error_code(ErrorCode::UnknownServerError.code())
        }
    };
    OffsetDeleteResponse::default().with_topics(
        layout
            .into_iter()
            .map(|(name, parts)| {
                OffsetDeleteResponseTopic::default()
                    .with_name(topic_name(&name))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(index, r)| {
                                let e = match r {
                                    Err(e) => Some(e),
                                    Ok(i) => results.get(i).copied().flatten(),
                                };
                                partition_response(index, e)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

fn partition_response(index: i32, e: Option<ErrorCode>) -> OffsetDeleteResponsePartition {
    OffsetDeleteResponsePartition::default()
        .with_partition_index(index)
        .with_error_code(e.map(|e| e.code()).unwrap_or(0))
}
