//! DescribeGroups: state, protocol and members of each group (an unknown group is "Dead"
//! with no error, as in Kafka).
use std::rc::Rc;

use kafka_protocol::messages::describe_groups_response::*;
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, GroupId};

use super::str_bytes;
use crate::security::acl::{AclOperation, ResourceType, GROUP_OPERATIONS};
use crate::server::authz::Authz;
use crate::shard::groups::{call_group, GroupReply, GroupRequest};
use crate::shard::ShardCtx;

/// Kafka's "authorized operations not requested" marker.
const OPERATIONS_OMITTED: i32 = i32::MIN;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    // Kafka: DESCRIBE on each group, else GROUP_AUTHORIZATION_FAILED; the group's
    // authorized operations when the request asks (v3+).
    let mut groups = Vec::with_capacity(req.groups.len());
    for g in req.groups {
        let group_id = g.0.to_string();
        let operations = if req.include_authorized_operations {
            authz.authorized_operations(ResourceType::Group, &group_id, GROUP_OPERATIONS)
        } else {
            OPERATIONS_OMITTED
        };
        let base = DescribedGroup::default()
            .with_group_id(GroupId(str_bytes(&group_id)))
            .with_authorized_operations(operations);
        if !authz.allows_group(AclOperation::Describe, &group_id) {
            groups.push(
                base.with_authorized_operations(OPERATIONS_OMITTED)
                    .with_error_code(
                        crate::protocol::error::ErrorCode::GroupAuthorizationFailed.code(),
                    ),
            );
            continue;
        }
        let entry = match call_group(ctx, &group_id, GroupRequest::Describe(group_id.clone())).await
        {
            GroupReply::Describe(d) => base
                .with_group_state(str_bytes(d.state))
                .with_protocol_type(str_bytes(&d.protocol_type))
                .with_protocol_data(str_bytes(&d.protocol))
                .with_members(
                    d.members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(str_bytes(&m.member_id))
                                .with_group_instance_id(
                                    m.group_instance_id.as_deref().map(str_bytes),
                                )
                                .with_client_id(str_bytes(&m.client_id))
                                .with_client_host(str_bytes(&m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment)
                        })
                        .collect(),
                ),
            GroupReply::Error(e) => base.with_error_code(e.code()),
            _ => base.with_error_code(crate::protocol::error::ErrorCode::UnknownServerError.code()),
        };
        groups.push(entry);
    }
    DescribeGroupsResponse::default().with_groups(groups)
}
