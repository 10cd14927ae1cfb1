//! TxnOffsetCommit (v0-v4; KIP-98, member fields v3+ from KIP-447): a transactional producer
//! commits a consumer group's offsets inside its transaction. Partitions of unknown topics
//! get UNKNOWN_TOPIC_OR_PARTITION here (as Kafka's KafkaApis does); the rest go to the group's
//! coordinator, which appends them as a transactional batch of the producer (acks=all) and
//! holds them pending until the producer's COMMIT or ABORT marker reaches the group's
//! `__consumer_offsets` partition. Errors as Kafka's: NOT_COORDINATOR,
//! COORDINATOR_LOAD_IN_PROGRESS, INVALID_PRODUCER_EPOCH for an epoch older than the one the
//! partition has seen, and for v3+ ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID.
//!
//! With `transaction_partition_verification_enable` (KIP-890 part 1, on by default as in
//! Kafka) the coordinator first asks the transaction coordinator whether the group's
//! partition is in the producer's transaction (AddOffsetsToTxn added it): if not, the commit
//! is INVALID_TXN_STATE and nothing is pending, as Kafka 4.1 answers (`shard::groups`).
use std::rc::Rc;

use kafka_protocol::messages::txn_offset_commit_response::*;
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use crate::group::{CommitOffset, TxnCommitArgs};
use crate::protocol::error::ErrorCode;
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

use super::offset_commit::{commit_slots, PartitionSlot};

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let group_id = req.group_id.0.to_string();
    // Kafka: WRITE on the transactional id and READ on the group (else every partition
    // answers that error), READ on each topic (else TOPIC_AUTHORIZATION_FAILED).
    let refused_all = if !authz.allows_transactional_id(AclOperation::Write, &req.transactional_id)
    {
        Some(ErrorCode::TransactionalIdAuthorizationFailed)
    } else if !authz.allows_group(AclOperation::Read, &group_id) {
        Some(ErrorCode::GroupAuthorizationFailed)
    } else {
        None
    };
    let catalog = ctx.shared.catalog.load();
    let mut layout: Vec<(TopicNameBytes, Vec<PartitionSlot>)> = Vec::new();
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
        let refused = refused_all.or_else(|| {
            (!authz.allows_topic(AclOperation::Read, &name))
                .then_some(ErrorCode::TopicAuthorizationFailed)
        });
        let parts = match refused {
            Some(e) => wanted.map(|o| (o.partition, Err(e))).collect(),
            None => commit_slots(&catalog, &name, wanted, &mut offsets),
        };
        layout.push((t.name.clone(), parts));
    }
    let results: Vec<Option<ErrorCode>> = if offsets.is_empty() {
        Vec::new()
    } else {
        let n = offsets.len();
        let args = TxnCommitArgs {
            group_id: group_id.clone(),
            member_id: req.member_id.to_string(),
            group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
            generation_id: req.generation_id,
            producer_id: ProducerId(req.producer_id.0),
            producer_epoch: ProducerEpoch(req.producer_epoch),
            offsets,
        };
        let request = GroupRequest::TxnCommit {
            transactional_id: req.transactional_id.0.to_string(),
            args,
        };
        match call_group(ctx, &group_id, request).await {
            GroupReply::Commit(r) => r,
            GroupReply::Error(e) => vec![Some(e); n],
            _ => vec![Some(ErrorCode::UnknownServerError); n],
        }
    };
    let topics = layout
        .into_iter()
        .map(|(name, parts)| {
            let partitions = parts
                .into_iter()
                .map(|(index, slot)| {
                    let error = match slot {
                        Err(e) => Some(e),
                        Ok(i) => results
                            .get(i)
                            .copied()
                            .unwrap_or(Some(ErrorCode::UnknownServerError)),
                    };
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(index)
                        .with_error_code(crate::protocol::error::code(error))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

type TopicNameBytes = kafka_protocol::messages::TopicName;

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::txn_offset_commit_request::*;
    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::server::handlers::{round_trip, str_bytes, topic_name};

    /// The request and response round-trip at every advertised version; v3+ carry the member
    /// fields, v0-v2 decode them as "no member" (member id "", generation -1).
    #[test]
    fn round_trips_at_every_advertised_version() {
        let (lo, hi) =
            crate::protocol::api_versions::range(ApiKey::TxnOffsetCommit).expect("advertised");
        assert_eq!((lo, hi), (0, 4));
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(kafka_protocol::messages::TransactionalId(str_bytes("tx")))
            .with_group_id(kafka_protocol::messages::GroupId(str_bytes("g")))
            .with_producer_id(kafka_protocol::messages::ProducerId(7))
            .with_producer_epoch(2)
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(topic_name("t"))
                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(1)
                    .with_committed_offset(42)
                    .with_committed_metadata(Some(str_bytes("meta")))])]);
        for version in lo..=hi {
            // v0-v2 cannot carry member fields (the encoder refuses non-default ones).
            let req = if version >= 3 {
                req.clone()
                    .with_generation_id(3)
                    .with_member_id(str_bytes("m"))
                    .with_group_instance_id(Some(str_bytes("i")))
            } else {
                req.clone()
            };
            let back = round_trip(&req, version);
            assert_eq!(back.producer_id.0, 7);
            assert_eq!(back.topics[0].partitions[0].committed_offset, 42);
            if version >= 3 {
                assert_eq!(back.generation_id, 3);
                assert_eq!(back.member_id.to_string(), "m");
            } else {
                assert_eq!(back.generation_id, -1);
                assert_eq!(back.member_id.to_string(), "");
                assert_eq!(back.group_instance_id, None);
            }
            let resp = TxnOffsetCommitResponse::default().with_topics(vec![
                TxnOffsetCommitResponseTopic::default()
                    .with_name(topic_name("t"))
                    .with_partitions(vec![TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(1)
                        .with_error_code(47)]),
            ]);
            assert_eq!(round_trip(&resp, version), resp);
        }
    }
}
