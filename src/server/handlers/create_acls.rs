//! CreateAcls (v1-3, KIP-140): create ACL bindings. Each creation is checked as Kafka checks
//! it (`AclBinding::from_wire`: known types, a `Type:name` principal, the cluster resource
//! only as `kafka-cluster`); the valid ones go to the controller, which records them in the
//! metadata log, so every broker authorizes with them and they survive a restart.
//!
//! Kafka's gates come first: no authorizer configured answers SECURITY_DISABLED, and a
//! principal without ALTER on the cluster CLUSTER_AUTHORIZATION_FAILED, for every creation:
//! a client cannot grant itself ACLs.
use std::rc::Rc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{CreateAclsRequest, CreateAclsResponse};

use super::str_bytes;
use crate::cluster::controller::{ControllerRequest, ControllerResponse, Status};
use crate::protocol::error::ErrorCode;
use crate::security::acl::{AclBinding, AclOperation};
use crate::server::admin::controller;
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

/// Kafka's message for an ACL API on a broker without an authorizer.
pub const NO_AUTHORIZER: &str = "No Authorizer is configured on the broker";

/// The gate every ACL API passes: an authorizer, and `op` on the cluster.
pub fn gate(authz: &Authz, op: AclOperation) -> Result<(), Status> {
    if !authz.is_on() {
        return Err(Status::error(ErrorCode::SecurityDisabled, NO_AUTHORIZER));
    }
    if !authz.allows_cluster(op) {
        return Err(Status::error(
            ErrorCode::ClusterAuthorizationFailed,
            "Cluster authorization failed.",
        ));
    }
    Ok(())
}

/// Each creation checked: the binding, or why it is refused.
pub fn validate(req: &CreateAclsRequest) -> Vec<Result<AclBinding, Status>> {
    req.creations
        .iter()
        .map(|c| {
            AclBinding::from_wire(
                c.resource_type,
                &c.resource_name,
                c.resource_pattern_type,
                &c.principal,
                &c.host,
                c.operation,
                c.permission_type,
            )
            .map_err(|e| Status::error(ErrorCode::InvalidRequest, e.0))
        })
        .collect()
}

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: CreateAclsRequest,
) -> CreateAclsResponse {
    let results: Vec<Status> = match gate(authz, AclOperation::Alter) {
        Err(status) => vec![status; req.creations.len()],
        Ok(()) => create(ctx, validate(&req)).await,
    };
    CreateAclsResponse::default().with_results(
        results
            .into_iter()
            .map(|s| {
                AclCreationResult::default()
                    .with_error_code(s.error_code)
                    .with_error_message(s.message.as_deref().map(str_bytes))
            })
            .collect(),
    )
}

/// Sends the valid bindings to the controller; one status per creation, in order.
async fn create(ctx: &Rc<ShardCtx>, checked: Vec<Result<AclBinding, Status>>) -> Vec<Status> {
    let bindings: Vec<AclBinding> = checked.iter().filter_map(|c| c.clone().ok()).collect();
    let mut answers = if bindings.is_empty() {
        Vec::new()
    } else {
        let count = bindings.len();
        match controller(ctx, ControllerRequest::CreateAcls { bindings }).await {
            Ok(ControllerResponse::CreateAcls { results }) if results.len() == count => results,
            Ok(other) => vec![
                Status::error(
                    ErrorCode::UnknownServerError,
                    format!("unexpected controller response {other:?}"),
                );
                count
            ],
            Err(e) => vec![Status::error(e.code, e.message); count],
        }
    }
    .into_iter();
    checked
        .into_iter()
        .map(|c| match c {
            Ok(_) => answers.next().unwrap_or_default(),
            Err(status) => status,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kafka_protocol::messages::create_acls_request::AclCreation;

    /// A bad creation is refused alone with INVALID_REQUEST; the others pass; every
    /// advertised version codes the request.
    #[test]
    fn validation_is_per_creation() {
        let creation = |rt: i8, name: &str| {
            AclCreation::default()
                .with_resource_type(rt)
                .with_resource_name(str_bytes(name))
                .with_resource_pattern_type(3)
                .with_principal(str_bytes("User:alice"))
                .with_host(str_bytes("*"))
                .with_operation(3)
                .with_permission_type(3)
        };
        let req = CreateAclsRequest::default().with_creations(vec![
            creation(2, "t"),
            creation(4, "not-the-cluster"),
            creation(3, "g"),
        ]);
        let checked = validate(&req);
        assert!(checked[0].is_ok());
        assert_eq!(
            checked[1].as_ref().unwrap_err().error_code,
            ErrorCode::InvalidRequest.code()
        );
        assert!(checked[2].is_ok());
        for v in 1..=3 {
            assert_eq!(super::super::round_trip(&req, v), req);
        }
    }

    /// Without an authorizer the ACL APIs are SECURITY_DISABLED, as Kafka's.
    #[test]
    fn gate_without_authorizer() {
        let err = gate(&Authz::off(), AclOperation::Alter).unwrap_err();
        assert_eq!(err.error_code, ErrorCode::SecurityDisabled.code());
    }
}
