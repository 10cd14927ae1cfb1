//! InitProducerId for idempotent (non-transactional) producers: a producer id never handed
//! out before, epoch 0. Transactions are not implemented, so a transactional id is refused.
use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use crate::protocol::error::ErrorCode;
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let failed = |e: ErrorCode| {
        InitProducerIdResponse::default()
            .with_error_code(e.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    if req.transactional_id.is_some() {
        return failed(ErrorCode::TransactionalIdAuthorizationFailed);
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
