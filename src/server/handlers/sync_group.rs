//! SyncGroup: the leader hands in the assignment; every member waits for its share.
use std::rc::Rc;

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use super::str_bytes;
use crate::group::{SyncArgs, SyncResult};
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: SyncGroupRequest,
) -> SyncGroupResponse {
    let group_id = req.group_id.0.to_string();
    let args = SyncArgs {
        group_id: group_id.clone(),
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
        generation_id: req.generation_id,
        protocol_type: req.protocol_type.as_ref().map(|s| s.to_string()),
        protocol_name: req.protocol_name.as_ref().map(|s| s.to_string()),
        assignments: req
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect(),
    };
    // Kafka: READ on the group, else GROUP_AUTHORIZATION_FAILED.
    let result = if !authz.allows_group(AclOperation::Read, &group_id) {
        SyncResult::error(ErrorCode::GroupAuthorizationFailed)
    } else {
        match call_group(ctx, &group_id, GroupRequest::Sync(args)).await {
            GroupReply::Sync(r) => r,
            GroupReply::Error(e) => SyncResult::error(e),
            _ => SyncResult::error(ErrorCode::UnknownServerError),
        }
    };
    SyncGroupResponse::default()
        .with_error_code(result.error.map(|e| e.code()).unwrap_or(0))
        .with_protocol_type(result.protocol_type.as_deref().map(str_bytes))
        .with_protocol_name(result.protocol_name.as_deref().map(str_bytes))
        .with_assignment(result.assignment)
}
