//! OffsetCommit: partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION here; the rest go
//! to the group's coordinator, which answers once the commit is durable.
use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::*;
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use super::topic_name;
use crate::group::{CommitArgs, CommitOffset};
use crate::protocol::error::ErrorCode;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

/// A partition of the request: an immediate error or its index in the coordinator's results.
type PartitionSlot = (i32, Result<usize, ErrorCode>);

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let group_id = req.group_id.0.to_string();
    let catalog = ctx.shared.catalog.load();
    // (topic, partition, immediate error or index into the coordinator's results)
    let mut layout: Vec<(String, Vec<PartitionSlot>)> = Vec::new();
    let mut offsets = Vec::new();
    for t in &req.topics {
        let name = t.name.0.to_string();
        let count = catalog.topic(&name).map(|m| m.partitions.len() as i32);
        let mut parts = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let known = count.is_some_and(|n| (0..n).contains(&p.partition_index));
            if !known {
                parts.push((p.partition_index, Err(ErrorCode::UnknownTopicOrPartition)));
                continue;
            }
            parts.push((p.partition_index, Ok(offsets.len())));
            offsets.push(CommitOffset {
                topic: name.clone(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: p.committed_metadata.as_ref().map(|s| s.to_string()),
            });
        }
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
