//! OffsetCommit: partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION here; the rest go
//! to the group's coordinator, which answers once the commit is durable.
use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::*;
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use super::topic_name;
use crate::group::{CommitArgs, CommitOffset};
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group_id = req.group_id.0.to_string();
    // Kafka: READ on the group (else every partition GROUP_AUTHORIZATION_FAILED) and on
    // each topic (else its partitions TOPIC_AUTHORIZATION_FAILED).
    let group_ok = authz.allows_group(AclOperation::Read, &group_id);
    let catalog = ctx.shared.catalog.load();
    // (topic, partition, immediate error or index into the coordinator's results)
    let mut layout: Vec<(String, Vec<PartitionSlot>)> = Vec::new();
    let mut offsets = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let wanted = t.partitions.iter().map(|p| CommitOffset {
            topic: name.clone(),
            partition: p.partition_index,
            offset: p.committed_offset,
            leader_epoch: p.committed_leader_epoch,
            metadata: p.committed_metadata.as_ref().map(|s| s.to_string()),
        });
        let refused = if !group_ok {
            Some(ErrorCode::GroupAuthorizationFailed)
        } else if !authz.allows_topic(AclOperation::Read, &name) {
            Some(ErrorCode::TopicAuthorizationFailed)
        } else {
            None
        };
        let parts = match refused {
            Some(e) => wanted.map(|o| (o.partition, Err(e))).collect(),
            None => commit_slots(&catalog, &name, wanted, &mut offsets),
        };
        layout.push((name, parts));
    }
    let results: Vec<Option<ErrorCode>> = if offsets.is_empty() {
        Vec::new()
    } else {
        let n = offsets.len();
        let args = CommitArgs {
            group_id: group_id.clone(),
            member_id: req.member_id.to_string(),
            group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
            generation_id: req.generation_id_or_member_epoch,
            offsets,
        };
        match call_group(ctx, &group_id, GroupRequest::Commit(args)).await {
            GroupReply::Commit(r) => r,
            GroupReply::Error(e) => vec![Some(e); n],
            _ => vec![Some(ErrorCode::UnknownServerError); n],
        }
    };
    OffsetCommitResponse::default().with_topics(
        layout
            .into_iter()
            .map(|(name, parts)| {
                OffsetCommitResponseTopic::default()
                    .with_name(topic_name(&name))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(index, r)| {
                                let error = match r {
                                    Err(e) => Some(e),
                                    Ok(i) => results
                                        .get(i)
                                        .copied()
                                        .unwrap_or(Some(ErrorCode::UnknownServerError)),
                                };
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(index)
                                    .with_error_code(error.map(|e| e.code()).unwrap_or(0))
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// A partition of the request: an immediate error or its index in the coordinator's results.
pub(super) type PartitionSlot = (i32, Result<usize, ErrorCode>);

/// Lays out one topic of an OffsetCommit or TxnOffsetCommit: a partition the topic does not
/// have gets UNKNOWN_TOPIC_OR_PARTITION at once; the others join `offsets` (what goes to the
/// coordinator) and keep their index there, so answers come back in request order.
pub(super) fn commit_slots(
    catalog: &crate::cluster::catalog::Catalog,
    topic: &str,
    wanted: impl Iterator<Item = CommitOffset>,
    offsets: &mut Vec<CommitOffset>,
) -> Vec<PartitionSlot> {
    let count = catalog.topic(topic).map(|m| m.partitions.len() as i32);
    wanted
        .map(|o| {
            if !count.is_some_and(|n| (0..n).contains(&o.partition)) {
                return (o.partition, Err(ErrorCode::UnknownTopicOrPartition));
            }
            let slot = (o.partition, Ok(offsets.len()));
            offsets.push(o);
            slot
        })
        .collect()
}
