//! CreatePartitions: grow a topic; the controller places the new partitions' replicas over the
//! unfenced brokers (and each on its broker's least-loaded shard).
use std::rc::Rc;

use kafka_protocol::messages::create_partitions_response::*;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::admin::{add_partitions, AdminError};
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        // Kafka: ALTER on the topic, else TOPIC_AUTHORIZATION_FAILED.
        let r = if !authz.allows_topic(AclOperation::Alter, &name) {
            Err(AdminError::new(
                ErrorCode::TopicAuthorizationFailed,
                "Authorization failed.",
            ))
        } else if t.assignments.is_some() {
            Err(AdminError::new(
                ErrorCode::InvalidReplicaAssignment,
                "manual assignments are not supported; move replicas with AlterPartitionReassignments",
            ))
        } else {
            add_partitions(ctx, &name, t.count, req.validate_only).await
        };
        let mut entry = CreatePartitionsTopicResult::default().with_name(t.name);
        if let Err(e) = r {
            entry = entry
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(&e.message)));
        }
        results.push(entry);
    }
    CreatePartitionsResponse::default().with_results(results)
}
