//! FindCoordinator: a group's coordinator (key type 0) is the leader of its
//! `__consumer_offsets` partition (`group::partition_for`); a transactional id's (key type 1)
//! is the leader of its `__transaction_state` partition (`txn::partition_for`, the same
//! hash). Each topic is created on the first request for its key type. v4+ batches keys
//! (`coordinator_keys`); older versions carry one `key`. Other key types (share groups) are
//! answered INVALID_REQUEST, as Kafka does for a key type it does not know.
use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::{coordinator_node, ensure_offsets_topic};
use crate::shard::{txns, ShardCtx};

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// The coordinator's address is its address on `listener`, the request's listener.
pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    req: FindCoordinatorRequest,
    listener: &str,
    authz: &Authz,
) -> FindCoordinatorResponse {
    // Kafka creates the offsets topic on the first FindCoordinator.
    // Kafka creates the transaction state topic on the first FindCoordinator for an id.
    let created = match req.key_type {
        KEY_TYPE_GROUP => ensure_offsets_topic(ctx).await,
        KEY_TYPE_TRANSACTION => txns::ensure_state_topic(ctx).await,
        _ => Ok(()),
    };
    let catalog = ctx.shared.catalog.load();
    let answer = |key: &StrBytes| -> Coordinator {
        // The coordinator is the leader of the key's partition of the internal topic.
        let node = if req.key_type == KEY_TYPE_TRANSACTION {
            txns::coordinator_node(ctx, key)
        } else {
            coordinator_node(ctx, key)
        };
        let leader = node
            .map(|(_, leader)| leader)
            .and_then(|l| catalog.brokers.get(&l))
            .filter(|b| !b.fenced)
            .and_then(|b| Some((b.node_id, b.endpoint(listener)?)));
        let known_type = req.key_type == KEY_TYPE_GROUP || req.key_type == KEY_TYPE_TRANSACTION;
        // Kafka: DESCRIBE on the group or transactional id named.
        let error = if !known_type || key.is_empty() {
            Some(ErrorCode::InvalidRequest)
        } else if req.key_type == KEY_TYPE_GROUP && !authz.allows_group(AclOperation::Describe, key)
        {
            Some(ErrorCode::GroupAuthorizationFailed)
        } else if req.key_type == KEY_TYPE_TRANSACTION
            && !authz.allows_transactional_id(AclOperation::Describe, key)
        {
            Some(ErrorCode::TransactionalIdAuthorizationFailed)
        } else if let Err(e) = created {
            Some(e)
        } else if leader.is_none() {
            Some(ErrorCode::CoordinatorNotAvailable)
        } else {
            None
        };
        match (error, leader) {
            (None, Some((node_id, (host, port)))) => Coordinator::default()
                .with_key(key.clone())
                .with_node_id(BrokerId(node_id))
                .with_host(str_bytes(host))
                .with_port(port),
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
