//! DescribeAcls (v1-3): the bindings a filter matches (Kafka's `AclBindingFilter`: ANY,
//! MATCH, or one pattern type; null fields match anything), grouped by resource pattern, from
//! this broker's metadata image. Needs DESCRIBE on the cluster; a bad filter is answered
//! INVALID_REQUEST at the top, with no resources.
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse};

use super::create_acls::gate;
use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::security::acl::{AclBindingFilter, AclOperation, Acls, ResourcePattern};
use crate::server::authz::Authz;

pub fn handle(authz: &Authz, req: &DescribeAclsRequest) -> DescribeAclsResponse {
    let refuse = |code: i16, message: &str| {
        DescribeAclsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(message)))
    };
    if let Err(status) = gate(authz, AclOperation::Describe) {
        return refuse(status.error_code, status.message.as_deref().unwrap_or(""));
    }
    let filter = AclBindingFilter::from_wire(
        req.resource_type_filter,
        req.resource_name_filter.as_deref(),
        req.pattern_type_filter,
        req.principal_filter.as_deref(),
        req.host_filter.as_deref(),
        req.operation,
        req.permission_type,
    );
    let filter = match filter {
        Ok(f) => f,
        Err(e) => return refuse(ErrorCode::InvalidRequest.code(), &e.0),
    };
    let empty = Acls::default();
    let acls = authz.acls().unwrap_or(&empty);
    DescribeAclsResponse::default().with_resources(describe(acls, &filter))
}

/// The matching bindings, one resource per pattern; bindings iterate ordered by pattern,
/// so a pattern's entries are consecutive.
pub fn describe(acls: &Acls, filter: &AclBindingFilter) -> Vec<DescribeAclsResource> {
    let mut out: Vec<(ResourcePattern, Vec<AclDescription>)> = Vec::new();
    for b in acls.matching(filter) {
        let entry = AclDescription::default()
            .with_principal(str_bytes(&b.entry.principal))
            .with_host(str_bytes(&b.entry.host))
            .with_operation(b.entry.operation.wire())
            .with_permission_type(b.entry.permission.wire());
        match out.last_mut() {
            Some((p, entries)) if *p == b.pattern => entries.push(entry),
            _ => out.push((b.pattern.clone(), vec![entry])),
        }
    }
    out.into_iter()
        .map(|(p, acls)| {
            DescribeAclsResource::default()
                .with_resource_type(p.resource_type.wire())
                .with_resource_name(str_bytes(&p.name))
                .with_pattern_type(p.pattern_type.wire())
                .with_acls(acls)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::security::acl::AclBinding;

    /// Entries of one pattern come out together; a MATCH filter on a name finds the
    /// literal, the wildcard and the prefix bindings; a bad filter is INVALID_REQUEST; every
    /// advertised version codes the answer.
    #[test]
    fn groups_by_pattern() {
        let b = |rt, name: &str, pt, p: &str, op| {
            AclBinding::from_wire(rt, name, pt, p, "*", op, 3).unwrap()
        };
        let acls = Acls::from(vec![
            b(2, "pay-eu", 3, "User:alice", 3),
            b(2, "pay-eu", 3, "User:bob", 4),
            b(2, "pay-", 4, "User:alice", 4),
            b(2, "*", 3, "User:*", 8),
            b(3, "g", 3, "User:alice", 3),
        ]);
        let all = describe(&acls, &AclBindingFilter::any());
        assert_eq!(all.len(), 4);
        let pay = all
            .iter()
            .find(|r| r.resource_name.as_str() == "pay-eu")
            .unwrap();
        assert_eq!(pay.acls.len(), 2);
        let matched = describe(
            &acls,
            &AclBindingFilter::from_wire(2, Some("pay-eu"), 2, None, None, 1, 1).unwrap(),
        );
        let names: Vec<&str> = matched.iter().map(|r| r.resource_name.as_str()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        let bad = DescribeAclsRequest::default().with_resource_type_filter(0);
        let a = Authz::new(
            std::sync::Arc::new(
                crate::security::acl::Authorizer::new("User:admin", false).unwrap(),
            ),
            std::sync::Arc::new(acls),
            crate::security::KafkaPrincipal::user("admin"),
            "h",
        );
        assert_eq!(
            handle(&a, &bad).error_code,
            ErrorCode::InvalidRequest.code()
        );
        // (The codec's defaults for the nullable filters are empty strings, not null.)
        let ok = DescribeAclsRequest::default()
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1);
        let resp = handle(&a, &ok);
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.resources.len(), 4);
        for v in 1..=3 {
            assert_eq!(super::super::round_trip(&resp, v), resp);
        }
    }
}
