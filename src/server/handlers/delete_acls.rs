//! DeleteAcls (v1-3): delete every binding each filter matches, through the controller (so
//! every broker drops them). Needs ALTER on the cluster; each filter gets its own result: the
//! bindings it deleted, or INVALID_REQUEST for a bad filter. A binding two filters match is
//! deleted once and reported by the first.
use std::rc::Rc;

use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{DeleteAclsRequest, DeleteAclsResponse};

use super::create_acls::gate;
use super::str_bytes;
use crate::cluster::controller::{ControllerRequest, ControllerResponse, Status};
use crate::protocol::error::ErrorCode;
use crate::security::acl::{AclBinding, AclBindingFilter, AclOperation};
use crate::server::admin::controller;
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

pub fn validate(req: &DeleteAclsRequest) -> Vec<Result<AclBindingFilter, Status>> {
    req.filters
        .iter()
        .map(|f| {
            AclBindingFilter::from_wire(
                f.resource_type_filter,
                f.resource_name_filter.as_deref(),
                f.pattern_type_filter,
                f.principal_filter.as_deref(),
                f.host_filter.as_deref(),
                f.operation,
                f.permission_type,
            )
            .map_err(|e| Status::error(ErrorCode::InvalidRequest, e.0))
        })
        .collect()
}

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let results: Vec<Result<Vec<AclBinding>, Status>> = match gate(authz, AclOperation::Alter) {
        Err(status) => vec![Err(status); req.filters.len()],
        Ok(()) => delete(ctx, validate(&req)).await,
    };
    DeleteAclsResponse::default().with_filter_results(results.into_iter().map(result).collect())
}

fn result(r: Result<Vec<AclBinding>, Status>) -> DeleteAclsFilterResult {
    match r {
        Err(s) => DeleteAclsFilterResult::default()
            .with_error_code(s.error_code)
            .with_error_message(s.message.as_deref().map(str_bytes)),
        Ok(bindings) => DeleteAclsFilterResult::default().with_matching_acls(
            bindings
                .iter()
                .map(|b| {
                    DeleteAclsMatchingAcl::default()
                        .with_resource_type(b.pattern.resource_type.wire())
                        .with_resource_name(str_bytes(&b.pattern.name))
                        .with_pattern_type(b.pattern.pattern_type.wire())
                        .with_principal(str_bytes(&b.entry.principal))
                        .with_host(str_bytes(&b.entry.host))
                        .with_operation(b.entry.operation.wire())
                        .with_permission_type(b.entry.permission.wire())
                })
                .collect(),
        ),
    }
}

async fn delete(
    ctx: &Rc<ShardCtx>,
    checked: Vec<Result<AclBindingFilter, Status>>,
) -> Vec<Result<Vec<AclBinding>, Status>> {
    let filters: Vec<AclBindingFilter> = checked.iter().filter_map(|c| c.clone().ok()).collect();
    let count = filters.len();
    let mut answers: std::vec::IntoIter<Result<Vec<AclBinding>, Status>> = if count == 0 {
        Vec::new()
    } else {
        match controller(ctx, ControllerRequest::DeleteAcls { filters }).await {
            Ok(ControllerResponse::DeleteAcls { results }) if results.len() == count => {
                results.into_iter().map(Ok).collect()
            }
            Ok(other) => vec![
                Err(Status::error(
                    ErrorCode::UnknownServerError,
                    format!("unexpected controller response {other:?}"),
                ));
                count
            ],
            Err(e) => vec![Err(Status::error(e.code, e.message)); count],
        }
    }
    .into_iter();
    checked
        .into_iter()
        .map(|c| match c {
            Ok(_) => answers.next().unwrap_or(Ok(Vec::new())),
            Err(status) => Err(status),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;

    /// A filter with an UNKNOWN field is refused alone; results code at every version.
    #[test]
    fn filters_are_checked_one_by_one() {
        let f = |rt: i8| {
            DeleteAclsFilter::default()
                .with_resource_type_filter(rt)
                .with_pattern_type_filter(1)
                .with_operation(1)
                .with_permission_type(1)
        };
        let req = DeleteAclsRequest::default().with_filters(vec![f(2), f(0)]);
        let checked = validate(&req);
        assert!(checked[0].is_ok());
        assert!(checked[1].is_err());
        let b = AclBinding::from_wire(2, "t", 3, "User:a", "*", 3, 3).unwrap();
        let resp = DeleteAclsResponse::default().with_filter_results(vec![
            result(Ok(vec![b])),
            result(checked[1].clone().map(|_| vec![])),
        ]);
        assert_eq!(
            resp.filter_results[1].error_code,
            ErrorCode::InvalidRequest.code()
        );
        for v in 1..=3 {
            assert_eq!(super::super::round_trip(&resp, v), resp);
            assert_eq!(super::super::round_trip(&req, v), req);
        }
    }
}
