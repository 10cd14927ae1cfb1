//! DescribeProducers (v0, KIP-664): the producers a partition's replica on this broker holds
//! state for, leader or follower as in Kafka, each with its epoch, last sequence and
//! timestamp, the epoch of the coordinator that wrote its last marker and its open
//! transaction's first offset (-1 if none). Per partition the error is Kafka's:
//! UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (no replica here), KAFKA_STORAGE_ERROR.
use std::rc::Rc;

use kafka_protocol::messages::describe_producers_response::*;
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::server::route::{on_authorized_leaders_by_topic, DescribeProducers};
use crate::shard::partition_service::describe_producers::ProducersResult;
use crate::shard::ShardCtx;
use crate::storage::producer_state::ProducerView;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let wanted = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partition_indexes.iter().map(|&p| (p, ())).collect(),
            )
        })
        .collect();
    // Kafka: READ on the topic, else TOPIC_AUTHORIZATION_FAILED.
    let results = on_authorized_leaders_by_topic::<DescribeProducers>(ctx, wanted, |t| {
        authz.allows_topic(AclOperation::Read, t)
    })
    .await;
    let topics = req
        .topics
        .into_iter()
        .zip(results)
        .map(|(t, rs)| {
            let partitions = t
                .partition_indexes
                .iter()
                .zip(rs)
                .map(|(&p, r)| partition_response(p, r))
                .collect();
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

fn partition_response(partition: i32, r: ProducersResult) -> PartitionResponse {
    let base = PartitionResponse::default().with_partition_index(partition);
    match r.error {
        Some(e) => base.with_error_code(e.code()),
        None => base.with_active_producers(r.producers.iter().map(producer_state).collect()),
    }
}

fn producer_state(v: &ProducerView) -> ProducerState {
    ProducerState::default()
        .with_producer_id(ProducerId(v.producer_id.0))
        .with_producer_epoch(i32::from(v.epoch))
        .with_last_sequence(v.last_sequence)
        .with_last_timestamp(v.last_timestamp)
        .with_coordinator_epoch(v.coordinator_epoch)
        .with_current_txn_start_offset(v.txn_first_offset.unwrap_or(-1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::error::ErrorCode;
    use crate::server::handlers::round_trip;

    /// Proves a producer's fields land in Kafka's fields (no open transaction is -1) and an
    /// error partition carries no producers, through the v0 codec.
    #[test]
    fn producers_and_errors_encode_as_kafka_reads_them() {
        let ok = ProducersResult {
            error: None,
            producers: vec![
                ProducerView {
                    producer_id: crate::protocol::producer::ProducerId(7),
                    epoch: 2,
                    last_sequence: 41,
                    last_timestamp: 1_700_000_000_000,
                    coordinator_epoch: 3,
                    txn_first_offset: Some(10),
                },
                ProducerView {
                    producer_id: crate::protocol::producer::ProducerId(8),
                    epoch: 0,
                    last_sequence: 0,
                    last_timestamp: -1,
                    coordinator_epoch: -1,
                    txn_first_offset: None,
                },
            ],
        };
        let response =
            DescribeProducersResponse::default().with_topics(vec![TopicResponse::default()
                .with_partitions(vec![
                    partition_response(0, ok),
                    partition_response(1, ProducersResult::failed(ErrorCode::NotLeaderOrFollower)),
                ])]);
        let back = round_trip(&response, 0);
        let parts = &back.topics[0].partitions;
        let p = &parts[0].active_producers;
        assert_eq!(
            (p[0].producer_id.0, p[0].producer_epoch, p[0].last_sequence),
            (7, 2, 41)
        );
        assert_eq!(
            (p[0].coordinator_epoch, p[0].current_txn_start_offset),
            (3, 10)
        );
        assert_eq!(p[0].last_timestamp, 1_700_000_000_000);
        assert_eq!(p[1].current_txn_start_offset, -1);
        assert_eq!(parts[1].error_code, ErrorCode::NotLeaderOrFollower.code());
        assert!(parts[1].active_producers.is_empty());
    }
}
