//! InitProducerId. Without a transactional id (idempotent producers): a producer id never
//! handed out before, epoch 0. With one: the transaction coordinator of the id (the leader of
//! its `__transaction_state` partition) bumps the id's epoch, fencing the previous instance
//! and aborting its open transaction (`txn::Coordinator::handle_init_producer_id`).
use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::protocol::error::ErrorCode;
use crate::protocol::producer::{ProducerEpoch, ProducerId as Pid};
use crate::security::acl::{AclOperation, ResourceType};
use crate::server::authz::Authz;
use crate::shard::txns::{call_txn, TxnRequest};
use crate::shard::ShardCtx;
use crate::txn::{InitProducerIdArgs, ProducerIdAndEpoch, Response};

/// The first version that may answer PRODUCER_FENCED; older clients get
/// INVALID_PRODUCER_EPOCH instead, as Kafka answers them.
const PRODUCER_FENCED_VERSION: i16 = 4;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let failed = |e: ErrorCode| {
        let e = if e == ErrorCode::ProducerFenced && version < PRODUCER_FENCED_VERSION {
            ErrorCode::InvalidProducerEpoch
        } else {
            e
        };
        InitProducerIdResponse::default()
            .with_error_code(e.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    // Kafka 4: WRITE on the transactional id; an idempotent producer without one needs
    // IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
    match &req.transactional_id {
        Some(id) if !authz.allows_transactional_id(AclOperation::Write, id) => {
            return failed(ErrorCode::TransactionalIdAuthorizationFailed)
        }
        None if !authz.allows_cluster(AclOperation::IdempotentWrite)
            && !authz.allows_some(AclOperation::Write, ResourceType::Topic) =>
        {
            return failed(ErrorCode::ClusterAuthorizationFailed)
        }
        _ => {}
    }
    if let Some(transactional_id) = req.transactional_id {
        // v3+ (KIP-360): a producer recovering from an error sends the id and epoch it has.
        let current = (req.producer_id.0 >= 0).then_some(ProducerIdAndEpoch {
            producer_id: Pid(req.producer_id.0),
            epoch: ProducerEpoch(req.producer_epoch),
        });
        let args = InitProducerIdArgs {
            transactional_id: transactional_id.0.to_string(),
            transaction_timeout_ms: req.transaction_timeout_ms,
            current,
        };
        return match call_txn(ctx, TxnRequest::InitProducerId(args)).await {
            Response::InitProducerId(Ok(id)) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(id.producer_id.0))
                .with_producer_epoch(id.epoch.0),
            other => failed(other.error().unwrap_or(ErrorCode::UnknownServerError)),
        };
    }
    // As Kafka does for non-transactional producers, every call gets a fresh id (epoch 0),
    // including the epoch-bump retry of KIP-360.
    match ctx.shared.quorum.allocate_producer_id().await {
        Ok(id) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(_) => failed(ErrorCode::KafkaStorageError),
    }
}
