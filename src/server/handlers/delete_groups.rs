//! DeleteGroups: each group is deleted by its coordinator if it has no members
//! (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND if unknown).
use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse, GroupId};

use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(req.groups_names.len());
    for g in req.groups_names {
        let group_id = g.0.to_string();
        // Kafka: DELETE on the group, else GROUP_AUTHORIZATION_FAILED.
        let error = if !authz.allows_group(AclOperation::Delete, &group_id) {
            Some(ErrorCode::GroupAuthorizationFailed)
        } else {
            match call_group(ctx, &group_id, GroupRequest::Delete(group_id.clone())).await {
                GroupReply::Delete(e) => e,
                GroupReply::Error(e) => Some(e),
                _ => Some(ErrorCode::UnknownServerError),
            }
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(GroupId(str_bytes(&group_id)))
                .with_error_code(error.map(|e| e.code()).unwrap_or(0)),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
