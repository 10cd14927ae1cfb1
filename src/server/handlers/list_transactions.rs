//! ListTransactions (v0-v2): every transactional id this broker coordinates (all its shards'
//! `__transaction_state` partitions), filtered by state and producer id, by duration (v1,
//! KIP-994: only transactions running longer than it) and by an id pattern (v2, a regular
//! expression the whole id must match). Unknown state names come back in
//! `unknown_state_filters`; a pattern that does not compile is INVALID_REGULAR_EXPRESSION;
//! while a partition loads the answer is COORDINATOR_LOAD_IN_PROGRESS, as in Kafka.
use std::rc::Rc;

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};

use super::str_bytes;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::{txns, ShardCtx};
use crate::txn::admin::{ListFilter, ListQuery};
use crate::txn::{ErrorCode, TxnDescription};

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let query = ListQuery {
        state_names: req.state_filters.iter().map(|s| s.to_string()).collect(),
        producer_ids: req.producer_id_filters.iter().map(|p| p.0).collect(),
        // Fields a version does not carry decode as their defaults; say so explicitly.
        duration_ms: if version >= 1 {
            req.duration_filter
        } else {
            -1
        },
        id_pattern: if version >= 2 {
            req.transactional_id_pattern.map(|p| p.to_string())
        } else {
            None
        },
    };
    let (filter, unknown) = match ListFilter::parse(query) {
        Ok(f) => f,
        Err(e) => return ListTransactionsResponse::default().with_error_code(e.code()),
    };
    // Kafka: the transactions whose id the principal may DESCRIBE.
    let listed = txns::list_all(ctx, filter).await.map(|mut all| {
        all.retain(|d| authz.allows_transactional_id(AclOperation::Describe, &d.transactional_id));
        all
    });
    response(listed, unknown)
}

fn response(
    listed: Result<Vec<TxnDescription>, ErrorCode>,
    unknown_states: Vec<String>,
) -> ListTransactionsResponse {
    let base = ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown_states.iter().map(|s| str_bytes(s)).collect());
    match listed {
        Ok(all) => base.with_transaction_states(
            all.into_iter()
                .map(|d| {
                    TransactionState::default()
                        .with_transactional_id(TransactionalId(str_bytes(&d.transactional_id)))
                        .with_producer_id(ProducerId(d.producer_id.0))
                        .with_transaction_state(str_bytes(d.state.name()))
                })
                .collect(),
        ),
        Err(e) => base.with_error_code(e.code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::producer::{ProducerEpoch, ProducerId as Pid};
    use crate::server::handlers::round_trip;
    use crate::txn::state::TxnState;

    /// Proves listings and unknown state names reach every advertised version, and a load in
    /// progress is reported as the response's error.
    #[test]
    fn listings_encode_in_every_version() {
        let d = TxnDescription {
            transactional_id: "app".into(),
            state: TxnState::CompleteCommit,
            producer_id: Pid(9),
            producer_epoch: ProducerEpoch(0),
            timeout_ms: 60_000,
            start_timestamp_ms: 0,
            partitions: Vec::new(),
        };
        for version in 0..=2 {
            let back = round_trip(&response(Ok(vec![d.clone()]), vec!["Nope".into()]), version);
            assert_eq!(back.error_code, 0);
            let t = &back.transaction_states[0];
            assert_eq!(t.transactional_id.0.as_str(), "app");
            assert_eq!(t.producer_id.0, 9);
            assert_eq!(t.transaction_state.as_str(), "CompleteCommit");
            assert_eq!(back.unknown_state_filters[0].as_str(), "Nope");
        }
        let loading = response(Err(ErrorCode::CoordinatorLoadInProgress), Vec::new());
        assert_eq!(
            round_trip(&loading, 1).error_code,
            ErrorCode::CoordinatorLoadInProgress.code()
        );
    }
}
