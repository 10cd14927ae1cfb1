//! FindCoordinator: a group's coordinator (key type 0) is the leader of its
//! `__consumer_offsets` partition (`group::partition_for`), created on the first request. v4+ batches keys
//! (`coordinator_keys`); older versions carry one `key`. Transaction coordinators (key type 1)
//! are not implemented: COORDINATOR_NOT_AVAILABLE.
use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::shard::groups::{coordinator_node, ensure_offsets_topic};
use crate::shard::ShardCtx;

const KEY_TYPE_GROUP: i8 = 0;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    // Kafka creates the offsets topic on the first FindCoordinator.
    let created = if req.key_type == KEY_TYPE_GROUP {
        ensure_offsets_topic(ctx).await
    } else {
        Ok(())
    };
    let catalog = ctx.shared.catalog.load();
    let answer = |key: &StrBytes| -> Coordinator {
        // The coordinator is the leader of the group's `__consumer_offsets` partition.
        let leader = coordinator_node(ctx, key)
            .map(|(_, leader)| leader)
            .and_then(|l| catalog.brokers.get(&l))
            .filter(|b| !b.fenced);
        let error = if req.key_type != KEY_TYPE_GROUP {
            Some(ErrorCode::CoordinatorNotAvailable)
        } else if key.is_empty() {
            Some(ErrorCode::InvalidRequest)
        } else if let Err(e) = created {
            Some(e)
        } else if leader.is_none() {
            Some(ErrorCode::CoordinatorNotAvailable)
        } else {
            None
        };
        match (error, leader) {
            (None, Some(b)) => Coordinator::default()
                .with_key(key.clone())
                .with_node_id(BrokerId(b.node_id))
                .with_host(str_bytes(&b.host))
                .with_port(b.port),
            (e, _) => Coordinator::default()
                .with_key(key.clone())
                .with_node_id(BrokerId(-1))
                .with_host(str_bytes(""))
                .with_port(-1)
                .with_error_code(e.unwrap_or(ErrorCode::CoordinatorNotAvailable).code()),
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
