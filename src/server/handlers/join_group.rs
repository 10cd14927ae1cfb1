//! JoinGroup: routed to the group's coordinator shard, where it may wait for the join phase
//! to complete (rebalance). v4+ first joins get MEMBER_ID_REQUIRED (KIP-394); v9 adds
//! skip_assignment for a static leader rejoining a stable group (KIP-814).
use std::rc::Rc;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};

use super::str_bytes;
use crate::group::{JoinArgs, JoinResult};
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    client_id: &str,
    peer: &str,
    authz: &Authz,
    req: JoinGroupRequest,
) -> JoinGroupResponse {
    let group_id = req.group_id.0.to_string();
    let args = JoinArgs {
        group_id: group_id.clone(),
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
        client_id: client_id.to_string(),
        client_host: client_host(peer),
        session_timeout_ms: req.session_timeout_ms,
        // v0 has no rebalance timeout: Kafka uses the session timeout.
        rebalance_timeout_ms: if version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        },
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
        require_known_member_id: version >= 4,
        supports_skip_assignment: version >= 9,
    };
    // Kafka: READ on the group, else GROUP_AUTHORIZATION_FAILED.
    let result = if !authz.allows_group(AclOperation::Read, &group_id) {
        JoinResult::error(&req.member_id, ErrorCode::GroupAuthorizationFailed)
    } else {
        match call_group(ctx, &group_id, GroupRequest::Join(args)).await {
            GroupReply::Join(r) => r,
            GroupReply::Error(e) => JoinResult::error(&req.member_id, e),
            _ => JoinResult::error(&req.member_id, ErrorCode::UnknownServerError),
        }
    };
    JoinGroupResponse::default()
        .with_error_code(result.error.map(|e| e.code()).unwrap_or(0))
        .with_generation_id(result.generation_id)
        .with_protocol_type(result.protocol_type.as_deref().map(str_bytes))
        .with_protocol_name(
            result
                .protocol_name
                .as_deref()
                .map(str_bytes)
                // Before v7 the protocol name is not nullable.
                .or_else(|| (version < 7).then(|| str_bytes(""))),
        )
        .with_leader(str_bytes(&result.leader))
        .with_skip_assignment(result.skip_assignment)
        .with_member_id(str_bytes(&result.member_id))
        .with_members(
            result
                .members
                .into_iter()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(&m.member_id))
                        .with_group_instance_id(m.group_instance_id.as_deref().map(str_bytes))
                        .with_metadata(m.metadata)
                })
                .collect(),
        )
}

/// Kafka reports a member's host as `/<ip>`.
pub fn client_host(peer: &str) -> String {
    let ip = peer
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(peer)
        .trim_start_matches('[')
        .trim_end_matches(']');
    format!("/{ip}")
}
