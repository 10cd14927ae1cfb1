//! AlterPartitionReassignments (v0): start or cancel moving partitions to new replica sets.
//!
//! The controller validates and records each partition's change; the reassignment then
//! completes as the new replicas join the ISR. The response carries one result per requested
//! partition, in request order. If the controller cannot be reached, the failure is reported
//! both at the top level and on every partition, as Kafka's error response does.
use std::rc::Rc;

use kafka_protocol::messages::alter_partition_reassignments_response::*;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, TopicName,
};

use super::str_bytes;
use crate::cluster::controller::{
    ControllerRequest, ControllerResponse, PartitionResult as Reassigned, Reassignment,
};
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::admin::{controller, AdminError};
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    // Kafka: ALTER on the cluster.
    if !authz.allows_cluster(AclOperation::Alter) {
        return response(
            &req,
            Err(AdminError::new(
                ErrorCode::ClusterAuthorizationFailed,
                "Cluster authorization failed.",
            )),
        );
    }
    let request = to_controller(&req);
    let outcome = match controller(ctx, request).await {
        Ok(ControllerResponse::AlterPartitionReassignments { results }) => Ok(results),
        Ok(other) => Err(AdminError::new(
            ErrorCode::UnknownServerError,
            format!("unexpected controller response {other:?}"),
        )),
        Err(e) => Err(e),
    };
    response(&req, outcome)
}

/// The controller's form of the request: one entry per partition, in request order.
/// Null replicas cancel the partition's ongoing reassignment.
pub fn to_controller(req: &AlterPartitionReassignmentsRequest) -> ControllerRequest {
    let reassignments = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| Reassignment {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                replicas: p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
            })
        })
        .collect();
    ControllerRequest::AlterPartitionReassignments { reassignments }
}

/// Builds the response for `req` from the controller's per-partition statuses, or from the
/// failure to get them. A partition the controller did not answer for is an internal error.
pub fn response(
    req: &AlterPartitionReassignmentsRequest,
    outcome: Result<Vec<Reassigned>, AdminError>,
) -> AlterPartitionReassignmentsResponse {
    let (top, statuses) = match outcome {
        Ok(statuses) => (None, statuses),
        Err(e) => (Some(e), Vec::new()),
    };
    let status_of = |topic: &TopicName, partition: i32| -> (i16, Option<String>) {
        if let Some(e) = &top {
            return (e.code.code(), Some(e.message.clone()));
        }
        statuses
            .iter()
            .find(|r| r.topic == topic.0.as_str() && r.partition == partition)
            .map(|r| (r.status.error_code, r.status.message.clone()))
            .unwrap_or((
                ErrorCode::UnknownServerError.code(),
                Some("the controller returned no result".into()),
            ))
    };
    let responses = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let (code, message) = status_of(&t.name, p.partition_index);
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                        .with_error_message(message.filter(|_| code != 0).map(|m| str_bytes(&m)))
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    let mut resp = AlterPartitionReassignmentsResponse::default().with_responses(responses);
    if let Some(e) = top {
        resp = resp
            .with_error_code(e.code.code())
            .with_error_message(Some(str_bytes(&e.message)));
    }
    resp
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use kafka_protocol::messages::alter_partition_reassignments_request::*;
    use kafka_protocol::messages::{ApiKey, BrokerId};

    use super::super::topic_name;
    use super::*;
    use crate::cluster::controller::Status;
    use crate::server::handlers::round_trip;

    fn request() -> AlterPartitionReassignmentsRequest {
        AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(1000)
            .with_topics(vec![ReassignableTopic::default()
                .with_name(topic_name("t"))
                .with_partitions(vec![
                    ReassignablePartition::default()
                        .with_partition_index(0)
                        .with_replicas(Some(vec![BrokerId(2), BrokerId(1)])),
                    ReassignablePartition::default()
                        .with_partition_index(1)
                        .with_replicas(None),
                ])])
    }

    /// At every advertised version the request decodes to the controller request it meant
    /// (targets and cancellations), and the response decodes with each partition's status.
    #[test]
    fn round_trips_at_every_advertised_version() {
        let (lo, hi) =
            crate::protocol::api_versions::range(ApiKey::AlterPartitionReassignments).unwrap();
        for version in lo..=hi {
            let req = round_trip(&request(), version);
            assert_eq!(
                to_controller(&req),
                ControllerRequest::AlterPartitionReassignments {
                    reassignments: vec![
                        Reassignment {
                            topic: "t".into(),
                            partition: 0,
                            replicas: Some(vec![2, 1]),
                        },
                        Reassignment {
                            topic: "t".into(),
                            partition: 1,
                            replicas: None,
                        },
                    ],
                }
            );
            let statuses = vec![
                Reassigned {
                    topic: "t".into(),
                    partition: 0,
                    status: Status::ok(),
                },
                Reassigned {
                    topic: "t".into(),
                    partition: 1,
                    status: Status::error(ErrorCode::NoReassignmentInProgress, "none"),
                },
            ];
            let resp = round_trip(&response(&req, Ok(statuses)), version);
            assert_eq!(resp.error_code, 0);
            let parts = &resp.responses[0].partitions;
            assert_eq!(
                (parts[0].error_code, parts[0].error_message.is_none()),
                (0, true)
            );
            assert_eq!(
                parts[1].error_code,
                ErrorCode::NoReassignmentInProgress.code()
            );
            assert_eq!(parts[1].error_message.as_deref(), Some("none"));
        }
    }

    /// A controller that cannot be reached fails the request and every partition in it.
    #[test]
    fn controller_failure_fails_every_partition() {
        let err = AdminError::new(ErrorCode::RequestTimedOut, "no answer");
        let resp = response(&request(), Err(err));
        assert_eq!(resp.error_code, ErrorCode::RequestTimedOut.code());
        for p in &resp.responses[0].partitions {
            assert_eq!(p.error_code, ErrorCode::RequestTimedOut.code());
        }
    }
}
