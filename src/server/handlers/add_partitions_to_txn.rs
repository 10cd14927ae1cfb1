//! AddPartitionsToTxn. The client versions (v0-3) carry one transaction; the broker-batched
//! versions (v4+, KIP-890) carry several, each either added as a client's would be or, with
//! `verify_only`, only checked: a partition leader asks whether its partitions are in the
//! producer's ongoing transaction before a transactional batch opens one there
//! (`shard::txn_verify`). Per transaction, partitions the catalog does not know are answered
//! UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as Kafka does;
//! otherwise the transaction coordinator adds them all and one error (or none) answers every
//! partition, or, verifying, answers each partition.
use std::rc::Rc;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};

use super::add_offsets_to_txn::wire_error;
use crate::protocol::error::ErrorCode;
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::txns::{call_txn, verify_partitions, TxnRequest};
use crate::shard::ShardCtx;
use crate::txn::verify::VerifyTxn;
use crate::txn::{AddPartitionsArgs, TxnPartition};

/// The first version that may answer PRODUCER_FENCED (older: INVALID_PRODUCER_EPOCH).
const PRODUCER_FENCED_VERSION: i16 = 2;

/// The first broker-batched version (several transactions, `verify_only`).
const BATCHED_VERSION: i16 = 4;

/// The first version that may answer TRANSACTION_ABORTABLE (older: INVALID_TXN_STATE).
const ABORTABLE_VERSION: i16 = 5;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    if version >= BATCHED_VERSION {
        // Kafka: the batched versions are brokers' (KIP-890 verification), so they need
        // CLUSTER_ACTION on the cluster.
        if !authz.allows_cluster(AclOperation::ClusterAction) {
            return AddPartitionsToTxnResponse::default()
                .with_error_code(ErrorCode::ClusterAuthorizationFailed.code());
        }
        let results = futures::future::join_all(
            req.transactions
                .iter()
                .map(|t| one_transaction(ctx, version, t)),
        )
        .await;
        return AddPartitionsToTxnResponse::default().with_results_by_transaction(results);
    }
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
    // Kafka: WRITE on the transactional id (else every partition
    // TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic (else its partitions
    // TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED).
    if !authz.allows_transactional_id(AclOperation::Write, &req.v3_and_below_transactional_id) {
        let code = ErrorCode::TransactionalIdAuthorizationFailed.code();
        return AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(per_partition(&|_, _| code));
    }
    let topic_denied = |topic: &str| !authz.allows_topic(AclOperation::Write, topic);
    if topics.iter().any(|t| topic_denied(name(t))) {
        let results = per_partition(&|topic, _| {
            if topic_denied(topic) {
                ErrorCode::TopicAuthorizationFailed.code()
            } else {
                ErrorCode::OperationNotAttempted.code()
            }
        });
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
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

/// One transaction of a broker-batched request (Kafka's per-transaction handling in
/// `handleAddPartitionsToTxnRequest`).
async fn one_transaction(
    ctx: &Rc<ShardCtx>,
    version: i16,
    t: &AddPartitionsToTxnTransaction,
) -> AddPartitionsToTxnResult {
    let partitions: Vec<TxnPartition> = t
        .topics
        .iter()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .map(|&p| TxnPartition::new(name(topic), p))
        })
        .collect();
    let known = {
        let catalog = ctx.shared.catalog.load();
        partitions
            .iter()
            .map(|p| {
                catalog.topic(&p.topic).is_some_and(|meta| {
                    usize::try_from(p.partition)
                        .ok()
                        .is_some_and(|i| i < meta.partitions.len())
                })
            })
            .collect::<Vec<bool>>()
    };
    let codes: Vec<(TxnPartition, i16)> = if known.iter().any(|k| !k) {
        partitions
            .into_iter()
            .zip(known)
            .map(|(p, k)| {
                let e = if k {
                    ErrorCode::OperationNotAttempted
                } else {
                    ErrorCode::UnknownTopicOrPartition
                };
                (p, e.code())
            })
            .collect()
    } else if t.verify_only {
        let txn = VerifyTxn {
            transactional_id: t.transactional_id.0.to_string(),
            producer_id: ProducerId(t.producer_id.0),
            producer_epoch: ProducerEpoch(t.producer_epoch),
            partitions: partitions.iter().cloned().collect(),
        };
        let wire = |e: Option<ErrorCode>| match e {
            Some(ErrorCode::TransactionAbortable) if version < ABORTABLE_VERSION => {
                ErrorCode::InvalidTxnState.code()
            }
            e => crate::protocol::error::code(e),
        };
        match verify_partitions(ctx, txn).await {
            Ok(answers) => answers.into_iter().map(|(p, e)| (p, wire(e))).collect(),
            Err(e) => {
                let code = wire(Some(e));
                partitions.into_iter().map(|p| (p, code)).collect()
            }
        }
    } else {
        let args = AddPartitionsArgs {
            transactional_id: t.transactional_id.0.to_string(),
            producer_id: ProducerId(t.producer_id.0),
            producer_epoch: ProducerEpoch(t.producer_epoch),
            partitions: partitions.clone(),
        };
        let error = call_txn(ctx, TxnRequest::AddPartitions(args)).await.error();
        let code = wire_error(error, version, PRODUCER_FENCED_VERSION);
        partitions.into_iter().map(|p| (p, code)).collect()
    };
    let mut by_topic: std::collections::BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> =
        Default::default();
    for (p, code) in codes {
        by_topic.entry(p.topic).or_default().push(
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(p.partition)
                .with_partition_error_code(code),
        );
    }
    AddPartitionsToTxnResult::default()
        .with_transactional_id(t.transactional_id.clone())
        .with_topic_results(
            by_topic
                .into_iter()
                .map(|(topic, results)| {
                    AddPartitionsToTxnTopicResult::default()
                        .with_name(super::topic_name(&topic))
                        .with_results_by_partition(results)
                })
                .collect(),
        )
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
