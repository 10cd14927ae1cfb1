//! ACL administration (KIP-140): CreateAcls, DescribeAcls and DeleteAcls, with the model of
//! `security::acl` on both ends, so what the CLI sends is checked by the same code the broker
//! uses.
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;

use super::error::{check_code, ClientError, Result};
use super::{str_of, Client};
use crate::security::acl::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, PatternFilter, PatternType,
    Permission, ResourcePattern, ResourceType,
};

/// Wire code of "any" in a filter.
const ANY: i8 = 1;
/// Wire code of the MATCH pattern filter.
const MATCH: i8 = 2;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

fn filter_pattern(p: PatternFilter) -> i8 {
    match p {
        PatternFilter::Any => ANY,
        PatternFilter::Match => MATCH,
        PatternFilter::Exactly(t) => t.wire(),
    }
}

fn bad_answer(message: String) -> ClientError {
    ClientError::Broker {
        context: "reading an ACL answer".into(),
        code: -1,
        message: Some(message),
    }
}

/// A binding from the wire fields a broker answers with.
#[allow(clippy::too_many_arguments)]
fn binding(
    rt: i8,
    name: &StrBytes,
    pt: i8,
    principal: &StrBytes,
    host: &StrBytes,
    op: i8,
    perm: i8,
) -> Result<AclBinding> {
    let resource_type =
        ResourceType::from_wire(rt).ok_or_else(|| bad_answer(format!("resource type {rt}")))?;
    let pattern_type =
        PatternType::from_wire(pt).ok_or_else(|| bad_answer(format!("pattern type {pt}")))?;
    let operation =
        AclOperation::from_wire(op).ok_or_else(|| bad_answer(format!("operation {op}")))?;
    let permission =
        Permission::from_wire(perm).ok_or_else(|| bad_answer(format!("permission {perm}")))?;
    Ok(AclBinding {
        pattern: ResourcePattern {
            resource_type,
            name: str_of(name),
            pattern_type,
        },
        entry: AccessControlEntry {
            principal: str_of(principal),
            host: str_of(host),
            operation,
            permission,
        },
    })
}

impl Client {
    /// Creates `bindings`; the first refused one is the error.
    pub fn create_acls(&mut self, bindings: &[AclBinding]) -> Result<()> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<CreateAclsRequest>(None)?;
        let creations = bindings
            .iter()
            .map(|b| {
                AclCreation::default()
                    .with_resource_type(b.pattern.resource_type.wire())
                    .with_resource_name(s(&b.pattern.name))
                    .with_resource_pattern_type(b.pattern.pattern_type.wire())
                    .with_principal(s(&b.entry.principal))
                    .with_host(s(&b.entry.host))
                    .with_operation(b.entry.operation.wire())
                    .with_permission_type(b.entry.permission.wire())
            })
            .collect();
        let response = conn.send(
            &CreateAclsRequest::default().with_creations(creations),
            version,
        )?;
        for (r, b) in response.results.iter().zip(bindings) {
            check_code(r.error_code, r.error_message.as_ref().map(str_of), || {
                format!("creating ACL {b}")
            })?;
        }
        Ok(())
    }

    /// The bindings `filter` matches.
    pub fn describe_acls(&mut self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<DescribeAclsRequest>(None)?;
        let request = DescribeAclsRequest::default()
            .with_resource_type_filter(filter.resource_type.map_or(ANY, ResourceType::wire))
            .with_resource_name_filter(filter.name.as_deref().map(s))
            .with_pattern_type_filter(filter_pattern(filter.pattern))
            .with_principal_filter(filter.principal.as_deref().map(s))
            .with_host_filter(filter.host.as_deref().map(s))
            .with_operation(filter.operation.map_or(ANY, AclOperation::wire))
            .with_permission_type(filter.permission.map_or(ANY, Permission::wire));
        let response = conn.send(&request, version)?;
        check_code(
            response.error_code,
            response.error_message.as_ref().map(str_of),
            || "describing ACLs".to_owned(),
        )?;
        let mut out = Vec::new();
        for r in &response.resources {
            for a in &r.acls {
                out.push(binding(
                    r.resource_type,
                    &r.resource_name,
                    r.pattern_type,
                    &a.principal,
                    &a.host,
                    a.operation,
                    a.permission_type,
                )?);
            }
        }
        Ok(out)
    }

    /// Deletes every binding `filter` matches; returns them.
    pub fn delete_acls(&mut self, filter: &AclBindingFilter) -> Result<Vec<AclBinding>> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<DeleteAclsRequest>(None)?;
        let f = DeleteAclsFilter::default()
            .with_resource_type_filter(filter.resource_type.map_or(ANY, ResourceType::wire))
            .with_resource_name_filter(filter.name.as_deref().map(s))
            .with_pattern_type_filter(filter_pattern(filter.pattern))
            .with_principal_filter(filter.principal.as_deref().map(s))
            .with_host_filter(filter.host.as_deref().map(s))
            .with_operation(filter.operation.map_or(ANY, AclOperation::wire))
            .with_permission_type(filter.permission.map_or(ANY, Permission::wire));
        let response = conn.send(&DeleteAclsRequest::default().with_filters(vec![f]), version)?;
        let mut out = Vec::new();
        for r in &response.filter_results {
            check_code(r.error_code, r.error_message.as_ref().map(str_of), || {
                "deleting ACLs".to_owned()
            })?;
            for m in &r.matching_acls {
                out.push(binding(
                    m.resource_type,
                    &m.resource_name,
                    m.pattern_type,
                    &m.principal,
                    &m.host,
                    m.operation,
                    m.permission_type,
                )?);
            }
        }
        Ok(out)
    }
}
