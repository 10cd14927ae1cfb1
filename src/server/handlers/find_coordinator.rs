//! FindCoordinator: this single node coordinates every group (key type 0). v4+ batches keys
//! (`coordinator_keys`); older versions carry one `key`. Transaction coordinators (key type 1)
//! are not implemented: COORDINATOR_NOT_AVAILABLE.
use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::shard::groups::coordinator_for;
use crate::shard::ShardCtx;

const KEY_TYPE_GROUP: i8 = 0;

pub fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let (host, port) = ctx.shared.config.advertised();
    let node = BrokerId(ctx.shared.config.node_id);
    let answer = |key: &StrBytes| -> Coordinator {
        let error = if req.key_type != KEY_TYPE_GROUP {
            Some(ErrorCode::CoordinatorNotAvailable)
        } else if key.is_empty() {
            Some(ErrorCode::InvalidRequest)
        } else if coordinator_for(ctx, key).is_none() {
            Some(ErrorCode::CoordinatorNotAvailable)
        } else {
            None
        };
        match error {
            None => Coordinator::default()
                .with_key(key.clone())
                .with_node_id(node)
                .with_host(str_bytes(&host))
                .with_port(port),
            Some(e) => Coordinator::default()
                .with_key(key.clone())
                .with_node_id(BrokerId(-1))
                .with_host(str_bytes(""))
                .with_port(-1)
                .with_error_code(e.code()),
        }
    };
    if version >= 4 {
        let coordinators = req.coordinator_keys.iter().map(answer).collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let c = answer(&req.key);
    FindCoordinatorResponse::default()
        .with_error_code(c.error_code)
        .with_node_id(c.node_id)
        .with_host(c.host)
        .with_port(c.port)
}
