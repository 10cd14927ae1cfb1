//! DescribeCluster: this broker, which is also the controller.
use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::shard::ShardCtx;

/// DescribeCluster endpoint types (KIP-919): 1 brokers, 2 controllers.
const ENDPOINT_BROKERS: i8 = 1;

pub fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    req: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let config = &ctx.shared.config;
    let (host, port) = config.advertised();
    let node = BrokerId(config.node_id);
    let resp = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&ctx.shared.catalog.load().cluster_id))
        .with_controller_id(node)
        .with_endpoint_type(ENDPOINT_BROKERS)
        .with_cluster_authorized_operations(i32::MIN)
        .with_brokers(vec![DescribeClusterBroker::default()
            .with_broker_id(node)
            .with_host(str_bytes(&host))
            .with_port(port)]);
    if version >= 1 && req.endpoint_type != ENDPOINT_BROKERS {
        return resp
            .with_error_code(ErrorCode::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes("only broker endpoints are served")));
    }
    resp
}
