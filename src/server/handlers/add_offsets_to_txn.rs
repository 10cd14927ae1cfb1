//! AddOffsetsToTxn: the `__consumer_offsets` partition of the group joins the producer's
//! transaction, so the offsets it commits with TxnOffsetCommit commit or abort with it.
//! Answered by the transaction coordinator of the id.
use std::rc::Rc;

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};

use crate::protocol::error::ErrorCode;
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::txns::{call_txn, TxnRequest};
use crate::shard::ShardCtx;
use crate::txn::AddOffsetsArgs;

/// The first version that may answer PRODUCER_FENCED (older: INVALID_PRODUCER_EPOCH).
const PRODUCER_FENCED_VERSION: i16 = 2;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    // Kafka: WRITE on the transactional id, then READ on the group.
    if !authz.allows_transactional_id(AclOperation::Write, &req.transactional_id) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ErrorCode::TransactionalIdAuthorizationFailed.code());
    }
    if !authz.allows_group(AclOperation::Read, &req.group_id) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
    }
    let args = AddOffsetsArgs {
        transactional_id: req.transactional_id.0.to_string(),
        producer_id: ProducerId(req.producer_id.0),
        producer_epoch: ProducerEpoch(req.producer_epoch),
        group_id: req.group_id.0.to_string(),
    };
    let error = call_txn(ctx, TxnRequest::AddOffsets(args)).await.error();
    AddOffsetsToTxnResponse::default().with_error_code(wire_error(
        error,
        version,
        PRODUCER_FENCED_VERSION,
    ))
}

/// The wire code of a coordinator answer: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for
/// versions before `fenced_since`, as Kafka answers them.
pub fn wire_error(error: Option<ErrorCode>, version: i16, fenced_since: i16) -> i16 {
    match error {
        Some(ErrorCode::ProducerFenced) if version < fenced_since => {
            ErrorCode::InvalidProducerEpoch.code()
        }
        e => crate::protocol::error::code(e),
    }
}
