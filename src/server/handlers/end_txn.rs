//! EndTxn: commit or abort the producer's transaction. The transaction coordinator writes
//! PrepareCommit/PrepareAbort to `__transaction_state`, answers once it is durable, then
//! writes the markers on every partition of the transaction and completes it.
use std::rc::Rc;

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse};

use super::add_offsets_to_txn::wire_error;
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::txns::{call_txn, TxnRequest};
use crate::shard::ShardCtx;
use crate::txn::{EndTxnArgs, TxnResult};

/// The first version that may answer PRODUCER_FENCED (older: INVALID_PRODUCER_EPOCH).
const PRODUCER_FENCED_VERSION: i16 = 2;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: EndTxnRequest,
) -> EndTxnResponse {
    // Kafka: WRITE on the transactional id.
    if !authz.allows_transactional_id(AclOperation::Write, &req.transactional_id) {
        return EndTxnResponse::default().with_error_code(
            crate::protocol::error::ErrorCode::TransactionalIdAuthorizationFailed.code(),
        );
    }
    let args = EndTxnArgs {
        transactional_id: req.transactional_id.0.to_string(),
        producer_id: ProducerId(req.producer_id.0),
        producer_epoch: ProducerEpoch(req.producer_epoch),
        result: if req.committed {
            TxnResult::Commit
        } else {
            TxnResult::Abort
        },
    };
    let error = call_txn(ctx, TxnRequest::EndTxn(args)).await.error();
    // v5's producer id and epoch (transaction version 2) are not sent: v5 is not advertised.
    EndTxnResponse::default().with_error_code(wire_error(error, version, PRODUCER_FENCED_VERSION))
}
