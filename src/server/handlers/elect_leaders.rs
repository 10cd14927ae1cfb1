//! ElectLeaders (v0-2): move leadership back to the preferred replica, or elect a leader
//! for a leaderless partition from outside the ISR (an unclean election, which may lose
//! acknowledged writes and is only done when the operator asks for it).
//!
//! v0 has no election type and means preferred. Null topic_partitions means every
//! partition; then, as in Kafka, partitions where no election was needed are left out.
//! Each partition's result carries the controller's status (ELECTION_NOT_NEEDED,
//! PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, ...). A request-wide
//! failure is set on every requested partition and, from v1, at the top level too (v0 has
//! no top-level error code).
use std::rc::Rc;

use kafka_protocol::messages::elect_leaders_response::*;
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};

use super::{str_bytes, topic_name};
use crate::cluster::controller::{
    ControllerRequest, ControllerResponse, PartitionResult as Elected, Status,
};
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::admin::{controller, AdminError};
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

/// ElectLeaders `election_type` values.
const ELECTION_PREFERRED: i8 = 0;
const ELECTION_UNCLEAN: i8 = 1;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: ElectLeadersRequest,
) -> ElectLeadersResponse {
    // Kafka: ALTER on the cluster.
    if !authz.allows_cluster(AclOperation::Alter) {
        return response(
            version,
            &req,
            Err(AdminError::new(
                ErrorCode::ClusterAuthorizationFailed,
                "Cluster authorization failed.",
            )),
        );
    }
    let outcome = match to_controller(version, &req) {
        Err(e) => Err(e),
        Ok(request) => match controller(ctx, request).await {
            Ok(ControllerResponse::ElectLeaders { results }) => Ok(results),
            Ok(other) => Err(AdminError::new(
                ErrorCode::UnknownServerError,
                format!("unexpected controller response {other:?}"),
            )),
            Err(e) => Err(e),
        },
    };
    response(version, &req, outcome)
}

/// The controller's form of the request; an unknown election type is refused.
pub fn to_controller(
    version: i16,
    req: &ElectLeadersRequest,
) -> Result<ControllerRequest, AdminError> {
    let preferred = match req.election_type {
        _ if version == 0 => true,
        ELECTION_PREFERRED => true,
        ELECTION_UNCLEAN => false,
        other => {
            return Err(AdminError::new(
                ErrorCode::InvalidRequest,
                format!("unknown election type {other}"),
            ))
        }
    };
    let partitions = req.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), *p)))
            .collect()
    });
    Ok(ControllerRequest::ElectLeaders {
        partitions,
        preferred,
    })
}

/// Builds the response at `version` from the controller's results (grouped by topic, in
/// the controller's order) or from a request-wide failure.
pub fn response(
    version: i16,
    req: &ElectLeadersRequest,
    outcome: Result<Vec<Elected>, AdminError>,
) -> ElectLeadersResponse {
    let (top, results) = match outcome {
        Ok(results) => (None, results),
        Err(e) => {
            let status = Status {
                error_code: e.code.code(),
                message: Some(e.message.clone()),
            };
            let every = req
                .topic_partitions
                .iter()
                .flatten()
                .flat_map(|t| {
                    t.partitions.iter().map(|p| Elected {
                        topic: t.topic.0.to_string(),
                        partition: *p,
                        status: status.clone(),
                    })
                })
                .collect();
            (Some(e), every)
        }
    };
    let mut topics: Vec<ReplicaElectionResult> = Vec::new();
    for r in results {
        let code = r.status.error_code;
        let partition = PartitionResult::default()
            .with_partition_id(r.partition)
            .with_error_code(code)
            .with_error_message(
                r.status
                    .message
                    .filter(|_| code != 0)
                    .map(|m| str_bytes(&m)),
            );
        match topics.last_mut() {
            Some(t) if t.topic.0.as_str() == r.topic => t.partition_result.push(partition),
            _ => topics.push(
                ReplicaElectionResult::default()
                    .with_topic(topic_name(&r.topic))
                    .with_partition_result(vec![partition]),
            ),
        }
    }
    let resp = ElectLeadersResponse::default().with_replica_election_results(topics);
    match top {
        Some(e) if version >= 1 => resp.with_error_code(e.code.code()),
        _ => resp,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::server::handlers::round_trip;

    fn request(election_type: i8, version: i16) -> ElectLeadersRequest {
        ElectLeadersRequest::default()
            .with_election_type(if version >= 1 { election_type } else { 0 })
            .with_timeout_ms(1000)
            .with_topic_partitions(Some(vec![TopicPartitions::default()
                .with_topic(topic_name("t"))
                .with_partitions(vec![0, 1])]))
    }

    /// At every advertised version the request decodes to the election it asks for
    /// (preferred for v0 and type 0, unclean for type 1), and per-partition statuses come
    /// back with their codes and messages.
    #[test]
    fn round_trips_at_every_advertised_version() {
        let (lo, hi) = crate::protocol::api_versions::range(ApiKey::ElectLeaders).unwrap();
        for version in lo..=hi {
            for (election_type, preferred) in [(0, true), (1, version == 0)] {
                let req = round_trip(&request(election_type, version), version);
                assert_eq!(
                    to_controller(version, &req).unwrap(),
                    ControllerRequest::ElectLeaders {
                        partitions: Some(vec![("t".into(), 0), ("t".into(), 1)]),
                        preferred,
                    },
                    "v{version} type {election_type}"
                );
                let results = vec![
                    Elected {
                        topic: "t".into(),
                        partition: 0,
                        status: Status::ok(),
                    },
                    Elected {
                        topic: "t".into(),
                        partition: 1,
                        status: Status::error(ErrorCode::ElectionNotNeeded, "1 leads already"),
                    },
                ];
                let resp = round_trip(&response(version, &req, Ok(results)), version);
                assert_eq!(resp.error_code, 0);
                assert_eq!(resp.replica_election_results.len(), 1);
                let parts = &resp.replica_election_results[0].partition_result;
                assert_eq!(
                    (parts[0].error_code, parts[0].error_message.is_none()),
                    (0, true)
                );
                assert_eq!(parts[1].error_code, ErrorCode::ElectionNotNeeded.code());
                assert_eq!(parts[1].error_message.as_deref(), Some("1 leads already"));
            }
            let all = round_trip(
                &ElectLeadersRequest::default().with_topic_partitions(None),
                version,
            );
            assert_eq!(
                to_controller(version, &all).unwrap(),
                ControllerRequest::ElectLeaders {
                    partitions: None,
                    preferred: true
                }
            );
        }
    }

    /// A request-wide failure lands on every requested partition, and at the top level only
    /// where the version has a top-level error code (v0 would not encode).
    #[test]
    fn request_failure_is_encodable_at_every_version() {
        let (lo, hi) = crate::protocol::api_versions::range(ApiKey::ElectLeaders).unwrap();
        for version in lo..=hi {
            let req = request(0, version);
            let err = AdminError::new(ErrorCode::RequestTimedOut, "no answer");
            let resp = round_trip(&response(version, &req, Err(err)), version);
            let want_top = if version >= 1 {
                ErrorCode::RequestTimedOut.code()
            } else {
                0
            };
            assert_eq!(resp.error_code, want_top);
            for p in &resp.replica_election_results[0].partition_result {
                assert_eq!(p.error_code, ErrorCode::RequestTimedOut.code());
            }
        }
    }

    /// An election type other than preferred or unclean is refused as an invalid request.
    #[test]
    fn unknown_election_type_is_invalid() {
        let req = request(7, 1);
        let err = to_controller(1, &req).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidRequest);
    }
}
