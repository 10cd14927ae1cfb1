//! DescribeTransactions (v0, KIP-664): each transactional id's state, as its coordinator
//! holds it — state name, timeout, start time, producer id and epoch, and the partitions in
//! the transaction (those still waiting for markers while it is PrepareCommit/PrepareAbort).
//! Per id the error is Kafka's: NOT_COORDINATOR (another broker coordinates it),
//! COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND (unknown or expiring).
use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_transactions_response::*;
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TransactionalId,
};

use super::{str_bytes, topic_name};
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::{txns, ShardCtx};
use crate::txn::{ErrorCode, TxnDescription};

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut states = Vec::with_capacity(req.transactional_ids.len());
    for id in req.transactional_ids {
        // Kafka: DESCRIBE on the transactional id.
        let result = if authz.allows_transactional_id(AclOperation::Describe, &id.0) {
            txns::describe(ctx, &id.0).await
        } else {
            Err(ErrorCode::TransactionalIdAuthorizationFailed)
        };
        states.push(transaction_state(id, result));
    }
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

fn transaction_state(
    id: TransactionalId,
    result: Result<TxnDescription, ErrorCode>,
) -> TransactionState {
    let base = TransactionState::default().with_transactional_id(id);
    let d = match result {
        Ok(d) => d,
        Err(e) => return base.with_error_code(e.code()),
    };
    // Partitions grouped by topic, in name order.
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for p in &d.partitions {
        by_topic.entry(&p.topic).or_default().push(p.partition);
    }
    let topics = by_topic
        .into_iter()
        .map(|(t, mut ps)| {
            ps.sort_unstable();
            TopicData::default()
                .with_topic(topic_name(t))
                .with_partitions(ps)
        })
        .collect();
    base.with_transaction_state(str_bytes(d.state.name()))
        .with_transaction_timeout_ms(d.timeout_ms)
        .with_transaction_start_time_ms(d.start_timestamp_ms)
        .with_producer_id(ProducerId(d.producer_id.0))
        .with_producer_epoch(d.producer_epoch.0)
        .with_topics(topics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::producer::{ProducerEpoch, ProducerId as Pid};
    use crate::server::handlers::round_trip;
    use crate::txn::state::TxnState;
    use crate::txn::TxnPartition;

    /// Proves a description's fields and its partitions (grouped by topic) reach the wire,
    /// and an error answer carries only its code.
    #[test]
    fn description_and_errors_encode() {
        let d = TxnDescription {
            transactional_id: "app".into(),
            state: TxnState::Ongoing,
            producer_id: Pid(5),
            producer_epoch: ProducerEpoch(1),
            timeout_ms: 60_000,
            start_timestamp_ms: 1_700_000_000_000,
            partitions: vec![
                TxnPartition {
                    topic: "b".into(),
                    partition: 1,
                },
                TxnPartition {
                    topic: "a".into(),
                    partition: 2,
                },
                TxnPartition {
                    topic: "b".into(),
                    partition: 0,
                },
            ],
        };
        let id = TransactionalId(str_bytes("app"));
        let response = DescribeTransactionsResponse::default().with_transaction_states(vec![
            transaction_state(id.clone(), Ok(d)),
            transaction_state(id, Err(ErrorCode::TransactionalIdNotFound)),
        ]);
        let back = round_trip(&response, 0);
        let s = &back.transaction_states[0];
        assert_eq!(s.error_code, 0);
        assert_eq!(s.transaction_state.as_str(), "Ongoing");
        assert_eq!((s.producer_id.0, s.producer_epoch), (5, 1));
        assert_eq!(s.transaction_timeout_ms, 60_000);
        let topics: Vec<(String, Vec<i32>)> = s
            .topics
            .iter()
            .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
            .collect();
        assert_eq!(
            topics,
            vec![("a".into(), vec![2]), ("b".into(), vec![0, 1])]
        );
        let e = &back.transaction_states[1];
        assert_eq!(e.error_code, ErrorCode::TransactionalIdNotFound.code());
        assert!(e.topics.is_empty());
    }
}
