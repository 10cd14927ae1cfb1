//! ListGroups: every group of every shard, filtered by state (v4+) and type (v5+).
use std::rc::Rc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::str_bytes;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::groups::list_all;
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: ListGroupsRequest,
) -> ListGroupsResponse {
    // Kafka: DESCRIBE on the cluster lists every group; without it, the groups the
    // principal may DESCRIBE.
    let all = authz.allows_cluster(AclOperation::Describe);
    let states = req.states_filter.iter().map(|s| s.to_string()).collect();
    let types = req.types_filter.iter().map(|s| s.to_string()).collect();
    match list_all(ctx, states, types).await {
        Ok(groups) => ListGroupsResponse::default().with_groups(
            groups
                .into_iter()
                .filter(|g| all || authz.allows_group(AclOperation::Describe, &g.group_id))
                .map(|g| {
                    ListedGroup::default()
                        .with_group_id(GroupId(str_bytes(&g.group_id)))
                        .with_protocol_type(str_bytes(&g.protocol_type))
                        .with_group_state(str_bytes(g.state))
                        .with_group_type(str_bytes("classic"))
                })
                .collect(),
        ),
        Err(e) => ListGroupsResponse::default().with_error_code(e.code()),
    }
}
