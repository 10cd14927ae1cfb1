//! Consumer-group administration: FindCoordinator, ListGroups, DescribeGroups, OffsetFetch,
//! OffsetCommit (outside group management, generation -1) and DeleteGroups. Each error code
//! in a response becomes a typed error.

use bytes::Bytes;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest,
    GroupId, ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::connection::Connection;
use super::error::{check_code, ClientError, Result};
use super::Client;

/// FindCoordinator v3 carries one key (v4+ batches them; one is all the CLI needs).
const FIND_COORDINATOR_VERSION_CAP: i16 = 3;
/// OffsetFetch v8+ is the multi-group form; the single-group form is enough here.
const OFFSET_FETCH_VERSION_CAP: i16 = 7;
/// FindCoordinator key type of a consumer group.
const KEY_TYPE_GROUP: i8 = 0;

/// One group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    pub state: String,
}

/// One member as DescribeGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The raw assignment bytes.
    pub assignment: Bytes,
}

impl GroupMember {
    /// The assignment decoded as the standard ConsumerProtocol assignment (topic ->
    /// partitions), or `None` if the bytes are not one.
    pub fn consumer_assignment(&self) -> Option<Vec<(String, Vec<i32>)>> {
        decode_consumer_assignment(&self.assignment)
    }
}

/// Decodes a ConsumerProtocol assignment (`[i16 version]` then the versioned body).
pub fn decode_consumer_assignment(bytes: &[u8]) -> Option<Vec<(String, Vec<i32>)>> {
    let (head, _) = bytes.split_at_checked(2)?;
    let version = i16::from_be_bytes([*head.first()?, *head.get(1)?]).clamp(0, 3);
    let mut buf = Bytes::copy_from_slice(bytes.get(2..)?);
    let a = ConsumerProtocolAssignment::decode(&mut buf, version).ok()?;
    Some(
        a.assigned_partitions
            .into_iter()
            .map(|tp| (tp.topic.0.to_string(), tp.partitions))
            .collect(),
    )
}

/// A group as DescribeGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<GroupMember>,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

impl Client {
    /// The connection to the coordinator of `group`.
    pub fn group_coordinator(&mut self, group: &str) -> Result<&mut Connection> {
        let version = self
            .bootstrap
            .version_for::<FindCoordinatorRequest>(Some(FIND_COORDINATOR_VERSION_CAP))?;
        let request = FindCoordinatorRequest::default()
            .with_key(s(group))
            .with_key_type(KEY_TYPE_GROUP);
        let response = self.bootstrap.send(&request, version)?;
        check_code(
            response.error_code,
            response.error_message.map(|m| m.to_string()),
            || format!("finding the coordinator of group {group:?}"),
        )?;
        let node = response.node_id.0;
        if !self.brokers.contains_key(&node) {
            self.metadata(Some(&[]))?;
        }
        self.broker(node)
    }

    /// Every group the cluster's brokers know.
    pub fn list_groups(&mut self) -> Result<Vec<GroupListing>> {
        self.metadata(Some(&[]))?;
        let nodes: Vec<i32> = self.brokers.keys().copied().collect();
        let mut out = Vec::new();
        for node in nodes {
            let conn = self.broker(node)?;
            let version = conn.version_for::<ListGroupsRequest>(None)?;
            let response = conn.send(&ListGroupsRequest::default(), version)?;
            check_code(response.error_code, None, || "listing groups".into())?;
            out.extend(response.groups.into_iter().map(|g| GroupListing {
                group_id: g.group_id.0.to_string(),
                protocol_type: g.protocol_type.to_string(),
                state: g.group_state.to_string(),
            }));
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    pub fn describe_group(&mut self, group: &str) -> Result<GroupDescription> {
        let conn = self.group_coordinator(group)?;
        let version = conn.version_for::<DescribeGroupsRequest>(None)?;
        let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
        let response = conn.send(&request, version)?;
        let g = response
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Broker {
                context: format!("describing group {group:?}"),
                code: -1,
                message: Some("empty response".into()),
            })?;
        check_code(g.error_code, None, || format!("describing group {group:?}"))?;
        Ok(GroupDescription {
            group_id: g.group_id.0.to_string(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            protocol: g.protocol_data.to_string(),
            members: g
                .members
                .into_iter()
                .map(|m| GroupMember {
                    member_id: m.member_id.to_string(),
                    group_instance_id: m.group_instance_id.map(|i| i.to_string()),
                    client_id: m.client_id.to_string(),
                    client_host: m.client_host.to_string(),
                    assignment: m.member_assignment,
                })
                .collect(),
        })
    }

    /// Every committed offset of `group`.
    pub fn group_offsets(&mut self, group: &str) -> Result<Vec<CommittedOffset>> {
        let conn = self.group_coordinator(group)?;
        let version = conn.version_for::<OffsetFetchRequest>(Some(OFFSET_FETCH_VERSION_CAP))?;
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(None);
        let response = conn.send(&request, version)?;
        check_code(response.error_code, None, || {
            format!("fetching offsets of group {group:?}")
        })?;
        let mut out = Vec::new();
        for t in response.topics {
            for p in t.partitions {
                check_code(p.error_code, None, || {
                    format!("offset of {}-{}", t.name.0, p.partition_index)
                })?;
                out.push(CommittedOffset {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                });
            }
        }
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// Commits offsets for `group` outside group management (generation -1), as admin tools
    /// do; the coordinator refuses it while the group has members.
    pub fn commit_group_offsets(&mut self, group: &str, offsets: &[CommittedOffset]) -> Result<()> {
        let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
        for o in offsets {
            let partition = OffsetCommitRequestPartition::default()
                .with_partition_index(o.partition)
                .with_committed_offset(o.offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(s("")));
            match topics.iter_mut().find(|t| t.name.0.as_str() == o.topic) {
                Some(t) => t.partitions.push(partition),
                None => topics.push(
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(s(&o.topic)))
                        .with_partitions(vec![partition]),
                ),
            }
        }
        let conn = self.group_coordinator(group)?;
        let version = conn.version_for::<OffsetCommitRequest>(None)?;
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(s(""))
            .with_retention_time_ms(-1)
            .with_topics(topics);
        let response = conn.send(&request, version)?;
        for t in response.topics {
            for p in t.partitions {
                check_code(p.error_code, None, || {
                    format!(
                        "committing {}-{} for group {group:?}",
                        t.name.0, p.partition_index
                    )
                })?;
            }
        }
        Ok(())
    }

    pub fn delete_group(&mut self, group: &str) -> Result<()> {
        let conn = self.group_coordinator(group)?;
        let version = conn.version_for::<DeleteGroupsRequest>(None)?;
        let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(group))]);
        let response = conn.send(&request, version)?;
        for r in response.results {
            check_code(r.error_code, None, || format!("deleting group {group:?}"))?;
        }
        Ok(())
    }
}
