//! WriteTxnMarkers (v1; Kafka 4 removed v0): a transaction coordinator asks the leaders of a
//! transaction's partitions to write its COMMIT or ABORT marker. Each partition's marker is
//! appended on its leader's owner shard (`partition_service::write_markers`) and answered
//! once durable on the in-sync replicas; per partition the answer is Kafka's:
//! NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH (an epoch older
//! than the producer's), TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch),
//! NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR.
use std::rc::Rc;

use kafka_protocol::messages::write_txn_markers_response::*;
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use crate::protocol::control::{EndTxnMarker, TxnOutcome};
use crate::protocol::error::ErrorCode;
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::server::route::{on_leaders, WriteMarkers};
use crate::shard::partition_service::write_markers::{MarkerResult, MarkerWrite};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    // Kafka: only a broker (CLUSTER_ACTION on the cluster) writes markers; anyone else's
    // partitions answer CLUSTER_AUTHORIZATION_FAILED and nothing is written.
    let allowed = authz.allows_cluster(AclOperation::ClusterAction);
    // Every partition of every marker, in request order: one trip per owner shard.
    let mut items = Vec::new();
    for m in &req.markers {
        let write = MarkerWrite {
            producer_id: ProducerId(m.producer_id.0),
            producer_epoch: ProducerEpoch(m.producer_epoch),
            marker: EndTxnMarker {
                outcome: if m.transaction_result {
                    TxnOutcome::Commit
                } else {
                    TxnOutcome::Abort
                },
                coordinator_epoch: m.coordinator_epoch,
            },
        };
        for t in &m.topics {
            for &p in &t.partition_indexes {
                items.push((t.name.0.to_string(), p, write));
            }
        }
    }
    let (mut results, missing) = if allowed {
        let done = on_leaders::<WriteMarkers>(ctx, items).await;
        (done.into_iter(), ErrorCode::UnknownServerError)
    } else {
        (
            Vec::new().into_iter(),
            ErrorCode::ClusterAuthorizationFailed,
        )
    };
    let markers = req
        .markers
        .into_iter()
        .map(|m| {
            let topics = m
                .topics
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partition_indexes
                        .iter()
                        .map(|&p| {
                            let r = results
                                .next()
                                .unwrap_or_else(|| MarkerResult::failed(missing));
                            WritableTxnMarkerPartitionResult::default()
                                .with_partition_index(p)
                                .with_error_code(r.code())
                        })
                        .collect();
                    WritableTxnMarkerTopicResult::default()
                        .with_name(t.name)
                        .with_partitions(partitions)
                })
                .collect();
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(topics)
        })
        .collect();
    WriteTxnMarkersResponse::default().with_markers(markers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::handlers::round_trip;

    /// The request and response this handler reads and writes round-trip at v1, the only
    /// version (Kafka 4 sends v1; v0 is gone with KIP-896).
    #[test]
    fn v1_round_trips() {
        let req = WriteTxnMarkersRequest::default().with_markers(vec![
            kafka_protocol::messages::write_txn_markers_request::WritableTxnMarker::default()
                .with_producer_id(kafka_protocol::messages::ProducerId(7))
                .with_producer_epoch(2)
                .with_transaction_result(true)
                .with_coordinator_epoch(3),
        ]);
        assert_eq!(round_trip(&req, 1), req);
        let resp = WriteTxnMarkersResponse::default()
            .with_markers(vec![WritableTxnMarkerResult::default()
                .with_producer_id(kafka_protocol::messages::ProducerId(7))]);
        assert_eq!(round_trip(&resp, 1), resp);
    }
}
