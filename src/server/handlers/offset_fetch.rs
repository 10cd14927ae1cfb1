//! OffsetFetch: v0-v7 ask about one group, v8+ about several (each routed to its own
//! coordinator). `topics: null` means every committed offset of the group. With
//! `require_stable` (v7+, KIP-447) a partition whose offset is pending in an open transaction
//! answers UNSTABLE_OFFSET_COMMIT (a partition-level error; the consumer retries).
use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::offset_fetch_response::*;
use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse};

use super::{str_bytes, topic_name};
use crate::group::FetchedOffset;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

/// Authorization (Kafka's): DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED), and
/// DESCRIBE on each topic: a named partition of a topic without it answers
/// TOPIC_AUTHORIZATION_FAILED; asked for all, such topics are left out.
async fn fetch(
    ctx: &Rc<ShardCtx>,
    authz: &Authz,
    group_id: &str,
    partitions: Option<Vec<(String, i32)>>,
    require_stable: bool,
) -> Result<Vec<FetchedOffset>, ErrorCode> {
    if !authz.allows_group(AclOperation::Describe, group_id) {
        return Err(ErrorCode::GroupAuthorizationFailed);
    }
    let named = partitions.is_some();
    let req = GroupRequest::Fetch {
        group_id: group_id.to_string(),
        partitions,
        require_stable,
    };
    let mut offsets = match call_group(ctx, group_id, req).await {
        GroupReply::Fetch(r) => r,
        GroupReply::Error(e) => return Err(e),
        _ => return Err(ErrorCode::UnknownServerError),
    };
    if authz.is_on() {
        let may = |t: &str| authz.allows_topic(AclOperation::Describe, t);
        if named {
            for o in offsets.iter_mut().filter(|o| !may(&o.topic)) {
                o.offset = -1;
                o.leader_epoch = -1;
                o.metadata = None;
                o.error = Some(ErrorCode::TopicAuthorizationFailed);
            }
        } else {
            offsets.retain(|o| may(&o.topic));
        }
    }
    Ok(offsets)
}

/// Groups offsets by topic, keeping the order of first appearance.
/// Response topics for `offsets`, grouped by topic in first-seen order; with `error`, every
/// partition carries it instead of a committed offset.
fn topics_response(
    offsets: Vec<FetchedOffset>,
    error: Option<ErrorCode>,
) -> Vec<OffsetFetchResponseTopic> {
    by_topic(offsets)
        .into_iter()
        .map(|(t, ps)| {
            OffsetFetchResponseTopic::default()
                .with_name(topic_name(&t))
                .with_partitions(
                    ps.into_iter()
                        .map(|o| {
                            let p = OffsetFetchResponsePartition::default()
                                .with_partition_index(o.partition)
                                .with_committed_offset(o.offset);
                            match error.or(o.error) {
                                Some(e) => p.with_error_code(e.code()),
                                None => p
                                    .with_committed_leader_epoch(o.leader_epoch)
                                    .with_metadata(o.metadata.as_deref().map(str_bytes)),
                            }
                        })
                        .collect(),
                )
        })
        .collect()
}

fn by_topic(offsets: Vec<FetchedOffset>) -> Vec<(String, Vec<FetchedOffset>)> {
    let mut order: Vec<String> = Vec::new();
    let mut map: BTreeMap<String, Vec<FetchedOffset>> = BTreeMap::new();
    for o in offsets {
        if !map.contains_key(&o.topic) {
            order.push(o.topic.clone());
        }
        map.entry(o.topic.clone()).or_default().push(o);
    }
    order
        .into_iter()
        .map(|t| {
            let v = map.remove(&t).unwrap_or_default();
            (t, v)
        })
        .collect()
}

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: OffsetFetchRequest,
) -> OffsetFetchResponse {
    if version >= 8 {
        let mut groups = Vec::with_capacity(req.groups.len());
        for g in req.groups {
            let group_id = g.group_id.0.to_string();
            let partitions = g.topics.map(|ts| {
                ts.iter()
                    .flat_map(|t| {
                        let name = t.name.0.to_string();
                        t.partition_indexes.iter().map(move |p| (name.clone(), *p))
                    })
                    .collect()
            });
            let entry = match fetch(ctx, authz, &group_id, partitions, req.require_stable).await {
                Ok(offsets) => OffsetFetchResponseGroup::default()
                    .with_group_id(GroupId(str_bytes(&group_id)))
                    .with_topics(
                        by_topic(offsets)
                            .into_iter()
                            .map(|(t, ps)| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(topic_name(&t))
                                    .with_partitions(
                                        ps.into_iter()
                                            .map(|o| {
                                                OffsetFetchResponsePartitions::default()
                                                    .with_partition_index(o.partition)
                                                    .with_committed_offset(o.offset)
                                                    .with_committed_leader_epoch(o.leader_epoch)
                                                    .with_metadata(
                                                        o.metadata.as_deref().map(str_bytes),
                                                    )
                                                    .with_error_code(crate::protocol::error::code(
                                                        o.error,
                                                    ))
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                Err(e) => OffsetFetchResponseGroup::default()
                    .with_group_id(GroupId(str_bytes(&group_id)))
                    .with_error_code(e.code()),
            };
            groups.push(entry);
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let group_id = req.group_id.0.to_string();
    let partitions = req.topics.as_ref().map(|ts| {
        ts.iter()
            .flat_map(|t| {
                let name = t.name.0.to_string();
                t.partition_indexes.iter().map(move |p| (name.clone(), *p))
            })
            .collect::<Vec<_>>()
    });
    match fetch(
        ctx,
        authz,
        &group_id,
        partitions.clone(),
        req.require_stable,
    )
    .await
    {
        Ok(offsets) => OffsetFetchResponse::default().with_topics(topics_response(offsets, None)),
        Err(e) if version >= 2 => OffsetFetchResponse::default().with_error_code(e.code()),
        Err(e) => {
            // v0-v1 have no top-level error: every requested partition carries it.
            let offsets = partitions
                .unwrap_or_default()
                .into_iter()
                .map(|(topic, partition)| FetchedOffset {
                    topic,
                    partition,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: None,
                    error: None,
                })
                .collect();
            OffsetFetchResponse::default().with_topics(topics_response(offsets, Some(e)))
        }
    }
}
