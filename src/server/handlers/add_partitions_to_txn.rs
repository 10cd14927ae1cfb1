//! AddPartitionsToTxn, the client versions (v0-3: one transaction per request; the v4+
//! broker-batched form is not implemented). Partitions the catalog does not know are answered
//! UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka does; otherwise
//! the transaction coordinator adds them all and one error (or none) answers every partition.
use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};

use super::add_offsets_to_txn::wire_error;
use crate::protocol::error::ErrorCode;
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::shard::txns::{call_txn, TxnRequest};
use crate::shard::ShardCtx;
use crate::txn::{AddPartitionsArgs, TxnPartition};

/// The first version that may answer PRODUCER_FENCED (older: INVALID_PRODUCER_EPOCH).
const PRODUCER_FENCED_VERSION: i16 = 2;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    req: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let known = {
        let catalog = ctx.shared.catalog.load();
        move |topic: &str, p: i32| {
            catalog.topic(topic).is_some_and(|t| {
                usize::try_from(p)
                    .ok()
                    .is_some_and(|i| i < t.partitions.len())
            })
        }
    };
    let topics = &req.v3_and_below_topics;
    let any_unknown = topics
        .iter()
        .any(|t| t.partitions.iter().any(|&p| !known(name(t), p)));
    let per_partition = |code_of: &dyn Fn(&str, i32) -> i16| -> Vec<AddPartitionsToTxnTopicResult> {
        topics
            .iter()
            .map(|t| {
                AddPartitionsToTxnTopicResult::default()
                    .with_name(t.name.clone())
                    .with_results_by_partition(
                        t.partitions
                            .iter()
                            .map(|&p| {
                                AddPartitionsToTxnPartitionResult::default()
                                    .with_partition_index(p)
                                    .with_partition_error_code(code_of(name(t), p))
                            })
                            .collect(),
                    )
            })
            .collect()
    };
    if any_unknown {
        let results = per_partition(&|topic, p| {
            if known(topic, p) {
                ErrorCode::OperationNotAttempted.code()
            } else {
                ErrorCode::UnknownTopicOrPartition.code()
            }
        });
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    let args = AddPartitionsArgs {
        transactional_id: req.v3_and_below_transactional_id.0.to_string(),
        producer_id: ProducerId(req.v3_and_below_producer_id.0),
        producer_epoch: ProducerEpoch(req.v3_and_below_producer_epoch),
        partitions: topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|&p| TxnPartition::new(name(t), p)))
            .collect(),
    };
    let error = call_txn(ctx, TxnRequest::AddPartitions(args)).await.error();
    let code = wire_error(error, version, PRODUCER_FENCED_VERSION);
    AddPartitionsToTxnResponse::default()
        .with_results_by_topic_v3_and_below(per_partition(&|_, _| code))
}

fn name(t: &AddPartitionsToTxnTopic) -> &str {
    &t.name.0
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{ProducerId, TransactionalId};

    use super::*;
    use crate::server::handlers::{round_trip, str_bytes, topic_name};

    /// The fields this handler reads and writes round-trip at every advertised version.
    #[test]
    fn client_versions_round_trip() {
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(str_bytes("t")))
            .with_v3_and_below_producer_id(ProducerId(4))
            .with_v3_and_below_producer_epoch(1)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(topic_name("a"))
                .with_partitions(vec![0, 2])]);
        let resp = AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(vec![
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic_name("a"))
                .with_results_by_partition(vec![AddPartitionsToTxnPartitionResult::default()
                    .with_partition_index(2)
                    .with_partition_error_code(51)]),
        ]);
        for v in 0..=3 {
            assert_eq!(round_trip(&req, v), req);
            assert_eq!(round_trip(&resp, v), resp);
        }
    }
}
