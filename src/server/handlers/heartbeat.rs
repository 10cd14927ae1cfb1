//! Heartbeat: keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin.
use std::rc::Rc;

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use crate::group::HeartbeatArgs;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: HeartbeatRequest,
) -> HeartbeatResponse {
    let group_id = req.group_id.0.to_string();
    // Kafka: READ on the group, else GROUP_AUTHORIZATION_FAILED.
    if !authz.allows_group(AclOperation::Read, &group_id) {
        return HeartbeatResponse::default()
            .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
    }
    let args = HeartbeatArgs {
        group_id: group_id.clone(),
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
        generation_id: req.generation_id,
    };
    let error = match call_group(ctx, &group_id, GroupRequest::Heartbeat(args)).await {
        GroupReply::Heartbeat(e) => e,
        GroupReply::Error(e) => Some(e),
        _ => Some(ErrorCode::UnknownServerError),
    };
    HeartbeatResponse::default().with_error_code(error.map(|e| e.code()).unwrap_or(0))
}
