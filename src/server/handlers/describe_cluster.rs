//! DescribeCluster: the live brokers (their addresses on the request's listener) and the
//! active controller.
use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

/// DescribeCluster endpoint types (KIP-919): 1 brokers, 2 controllers.
const ENDPOINT_BROKERS: i8 = 1;

pub fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    req: DescribeClusterRequest,
    listener: &str,
    authz: &Authz,
) -> DescribeClusterResponse {
    // Kafka: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
    if !authz.allows_cluster(AclOperation::Describe) {
        return DescribeClusterResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_cluster_authorized_operations(i32::MIN);
    }
    let operations = if req.include_cluster_authorized_operations {
        authz.authorized_operations(
            crate::security::acl::ResourceType::Cluster,
            crate::security::acl::CLUSTER_NAME,
            crate::security::acl::CLUSTER_OPERATIONS,
        )
    } else {
        i32::MIN
    };
    let catalog = ctx.shared.catalog.load();
    let brokers = catalog
        .live_brokers()
        .filter_map(|b| {
            let (host, port) = b.endpoint(listener)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.node_id))
                    .with_host(str_bytes(host))
                    .with_port(port)
                    .with_rack(b.rack.as_deref().map(str_bytes)),
            )
        })
        .collect();
    let controller = catalog.controller_for_clients(ctx.shared.quorum.active_controller());
    let resp = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&catalog.cluster_id))
        .with_controller_id(BrokerId(controller))
        .with_endpoint_type(ENDPOINT_BROKERS)
        .with_cluster_authorized_operations(operations)
        .with_brokers(brokers);
    if version >= 1 && req.endpoint_type != ENDPOINT_BROKERS {
        return resp
            .with_error_code(ErrorCode::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes("only broker endpoints are served")));
    }
    resp
}
