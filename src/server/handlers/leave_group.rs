//! LeaveGroup: v0-v2 name one member (`member_id`); v3+ a batch (`members`, KIP-345), each
//! with its own error code.
use std::rc::Rc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use super::str_bytes;
use crate::group::LeaveMember;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: LeaveGroupRequest,
) -> LeaveGroupResponse {
    let group_id = req.group_id.0.to_string();
    // Kafka: READ on the group, else GROUP_AUTHORIZATION_FAILED.
    if !authz.allows_group(AclOperation::Read, &group_id) {
        return LeaveGroupResponse::default()
            .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
    }
    let members: Vec<LeaveMember> = if version >= 3 {
        req.members
            .iter()
            .map(|m| LeaveMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
            })
            .collect()
    } else {
        vec![LeaveMember {
            member_id: req.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let result = match call_group(
        ctx,
        &group_id,
        GroupRequest::Leave {
            group_id: group_id.clone(),
            members,
        },
    )
    .await
    {
        GroupReply::Leave(r) => r,
        GroupReply::Error(e) => {
            return LeaveGroupResponse::default().with_error_code(e.code());
        }
        _ => {
            return LeaveGroupResponse::default()
                .with_error_code(ErrorCode::UnknownServerError.code())
        }
    };
    if let Some(e) = result.error {
        return LeaveGroupResponse::default().with_error_code(e.code());
    }
    if version < 3 {
        // One member: its error is the response's.
        let code = result
            .members
            .first()
            .and_then(|m| m.2)
            .map(|e| e.code())
            .unwrap_or(0);
        return LeaveGroupResponse::default().with_error_code(code);
    }
    LeaveGroupResponse::default().with_members(
        result
            .members
            .into_iter()
            .map(|(id, instance, e)| {
                MemberResponse::default()
                    .with_member_id(str_bytes(&id))
                    .with_group_instance_id(instance.as_deref().map(str_bytes))
                    .with_error_code(e.map(|e| e.code()).unwrap_or(0))
            })
            .collect(),
    )
}
