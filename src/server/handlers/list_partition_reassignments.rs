//! ListPartitionReassignments (v0): the partitions whose replica set is being changed, with
//! the full replica list and the replicas being added and removed.
//!
//! Null topics lists every ongoing reassignment. Partitions asked for that do not exist, or
//! that are not being reassigned, are left out of the answer, as Kafka's controller does.
use std::rc::Rc;

use kafka_protocol::messages::list_partition_reassignments_response::*;
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

use super::{str_bytes, topic_name};
use crate::cluster::controller::{ControllerRequest, ControllerResponse, OngoingReassignment};
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::admin::{controller, AdminError};
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    // Kafka: DESCRIBE on the cluster.
    if !authz.allows_cluster(AclOperation::Describe) {
        return response(Err(AdminError::new(
            ErrorCode::ClusterAuthorizationFailed,
            "Cluster authorization failed.",
        )));
    }
    let outcome = match controller(ctx, to_controller(&req)).await {
        Ok(ControllerResponse::ListPartitionReassignments { reassignments }) => Ok(reassignments),
        Ok(other) => Err(AdminError::new(
            ErrorCode::UnknownServerError,
            format!("unexpected controller response {other:?}"),
        )),
        Err(e) => Err(e),
    };
    response(outcome)
}

/// The controller's form of the request.
pub fn to_controller(req: &ListPartitionReassignmentsRequest) -> ControllerRequest {
    let partitions = req.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|p| (t.name.0.to_string(), *p))
            })
            .collect()
    });
    ControllerRequest::ListPartitionReassignments { partitions }
}

/// Groups the controller's list by topic, keeping its order; a failure to reach the
/// controller is a top-level error.
pub fn response(
    outcome: Result<Vec<OngoingReassignment>, AdminError>,
) -> ListPartitionReassignmentsResponse {
    let reassignments = match outcome {
        Ok(r) => r,
        Err(e) => {
            return ListPartitionReassignmentsResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(&e.message)))
        }
    };
    let brokers = |ids: &[i32]| ids.iter().copied().map(BrokerId).collect::<Vec<_>>();
    let mut topics: Vec<OngoingTopicReassignment> = Vec::new();
    for r in reassignments {
        let partition = OngoingPartitionReassignment::default()
            .with_partition_index(r.partition)
            .with_replicas(brokers(&r.replicas))
            .with_adding_replicas(brokers(&r.adding))
            .with_removing_replicas(brokers(&r.removing));
        match topics.last_mut() {
            Some(t) if t.name.0.as_str() == r.topic => t.partitions.push(partition),
            _ => topics.push(
                OngoingTopicReassignment::default()
                    .with_name(topic_name(&r.topic))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use kafka_protocol::messages::list_partition_reassignments_request::*;
    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::server::handlers::round_trip;

    fn ongoing(topic: &str, partition: i32) -> OngoingReassignment {
        OngoingReassignment {
            topic: topic.into(),
            partition,
            replicas: vec![4, 2, 3, 1],
            adding: vec![4],
            removing: vec![1],
        }
    }

    /// At every advertised version: null topics asks for everything, named partitions are
    /// passed on, and the answer decodes grouped by topic with adding/removing intact.
    #[test]
    fn round_trips_at_every_advertised_version() {
        let (lo, hi) =
            crate::protocol::api_versions::range(ApiKey::ListPartitionReassignments).unwrap();
        for version in lo..=hi {
            let all = round_trip(
                &ListPartitionReassignmentsRequest::default().with_topics(None),
                version,
            );
            assert_eq!(
                to_controller(&all),
                ControllerRequest::ListPartitionReassignments { partitions: None }
            );
            let some = round_trip(
                &ListPartitionReassignmentsRequest::default().with_topics(Some(vec![
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic_name("t"))
                        .with_partition_indexes(vec![0, 2]),
                ])),
                version,
            );
            assert_eq!(
                to_controller(&some),
                ControllerRequest::ListPartitionReassignments {
                    partitions: Some(vec![("t".into(), 0), ("t".into(), 2)])
                }
            );
            let resp = round_trip(
                &response(Ok(vec![ongoing("a", 0), ongoing("a", 1), ongoing("b", 0)])),
                version,
            );
            assert_eq!(resp.error_code, 0);
            assert_eq!(resp.topics.len(), 2);
            assert_eq!(resp.topics[0].partitions.len(), 2);
            let p = &resp.topics[1].partitions[0];
            assert_eq!(
                p.replicas,
                vec![BrokerId(4), BrokerId(2), BrokerId(3), BrokerId(1)]
            );
            assert_eq!(p.adding_replicas, vec![BrokerId(4)]);
            assert_eq!(p.removing_replicas, vec![BrokerId(1)]);
            let failed = round_trip(
                &response(Err(AdminError::new(ErrorCode::RequestTimedOut, "x"))),
                version,
            );
            assert_eq!(failed.error_code, ErrorCode::RequestTimedOut.code());
        }
    }
}
