//! Kafka's ACL model and authorizer, sans-IO: resource patterns (topic, group, cluster,
//! transactional id; literal, prefixed, and the literal wildcard `*`), access control entries
//! (principal incl. `User:*`, host incl. `*`, operation, allow/deny), the filters
//! DescribeAcls and DeleteAcls match bindings with, the set of bindings the metadata log
//! holds (`Acls`, indexed by resource), and the decision (`Authorizer::authorize`).
//!
//! The decision is Kafka's (StandardAuthorizer): super users may do anything; a DENY entry
//! that matches wins over any ALLOW; an ALLOW for READ, WRITE, DELETE or ALTER also allows
//! DESCRIBE and one for ALTER_CONFIGS also DESCRIBE_CONFIGS (a DENY implies nothing); when
//! no binding at all names the resource (for any principal), `allow_everyone_if_no_acl_found`
//! decides.
//!
//! Invariants: `Acls`' index is derived from its bindings and rebuilt whenever they change or
//! are read back, so a check costs a few hash lookups (one per distinct prefix length of the
//! prefixed bindings of that resource type), never a scan of every binding.
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::session::KafkaPrincipal;

/// Kafka's name of the one cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The literal resource name that matches every name (Kafka's `WILDCARD_RESOURCE`).
pub const WILDCARD_RESOURCE: &str = "*";
/// The host that matches every host.
pub const WILDCARD_HOST: &str = "*";
/// The principal that matches every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// Kafka's `ResourceType` (the ones Strata authorizes), with their wire codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

impl ResourceType {
    pub const ALL: [ResourceType; 4] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
    ];

    pub fn wire(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
        }
    }

    pub fn from_wire(code: i8) -> Option<ResourceType> {
        Self::ALL.into_iter().find(|t| t.wire() == code)
    }

    /// Kafka's name (`ResourceType.toString()`).
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Topic => "TOPIC",
            ResourceType::Group => "GROUP",
            ResourceType::Cluster => "CLUSTER",
            ResourceType::TransactionalId => "TRANSACTIONAL_ID",
        }
    }
}

/// Kafka's `PatternType` of a stored binding: LITERAL (3) or PREFIXED (4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn wire(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_wire(code: i8) -> Option<PatternType> {
        match code {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PatternType::Literal => "LITERAL",
            PatternType::Prefixed => "PREFIXED",
        }
    }
}

/// Kafka's `AclOperation`, with its wire codes (ALL is 2; UNKNOWN 0 and ANY 1 are only for
/// filters and are not operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AclOperation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
    TwoPhaseCommit,
}

impl AclOperation {
    pub const ALL_OPS: [AclOperation; 14] = [
        AclOperation::All,
        AclOperation::Read,
        AclOperation::Write,
        AclOperation::Create,
        AclOperation::Delete,
        AclOperation::Alter,
        AclOperation::Describe,
        AclOperation::ClusterAction,
        AclOperation::DescribeConfigs,
        AclOperation::AlterConfigs,
        AclOperation::IdempotentWrite,
        AclOperation::CreateTokens,
        AclOperation::DescribeTokens,
        AclOperation::TwoPhaseCommit,
    ];

    pub fn wire(self) -> i8 {
        match self {
            AclOperation::All => 2,
            AclOperation::Read => 3,
            AclOperation::Write => 4,
            AclOperation::Create => 5,
            AclOperation::Delete => 6,
            AclOperation::Alter => 7,
            AclOperation::Describe => 8,
            AclOperation::ClusterAction => 9,
            AclOperation::DescribeConfigs => 10,
            AclOperation::AlterConfigs => 11,
            AclOperation::IdempotentWrite => 12,
            AclOperation::CreateTokens => 13,
            AclOperation::DescribeTokens => 14,
            AclOperation::TwoPhaseCommit => 15,
        }
    }

    pub fn from_wire(code: i8) -> Option<AclOperation> {
        Self::ALL_OPS.into_iter().find(|o| o.wire() == code)
    }

    /// Kafka's name (`READ`, `DESCRIBE_CONFIGS`, ...).
    pub fn name(self) -> &'static str {
        match self {
            AclOperation::All => "ALL",
            AclOperation::Read => "READ",
            AclOperation::Write => "WRITE",
            AclOperation::Create => "CREATE",
            AclOperation::Delete => "DELETE",
            AclOperation::Alter => "ALTER",
            AclOperation::Describe => "DESCRIBE",
            AclOperation::ClusterAction => "CLUSTER_ACTION",
            AclOperation::DescribeConfigs => "DESCRIBE_CONFIGS",
            AclOperation::AlterConfigs => "ALTER_CONFIGS",
            AclOperation::IdempotentWrite => "IDEMPOTENT_WRITE",
            AclOperation::CreateTokens => "CREATE_TOKENS",
            AclOperation::DescribeTokens => "DESCRIBE_TOKENS",
            AclOperation::TwoPhaseCommit => "TWO_PHASE_COMMIT",
        }
    }

    /// Parses Kafka's name, case-insensitively and with `-` or `_` (kafka-acls.sh accepts
    /// `Read`, `DescribeConfigs`, `describe_configs`).
    pub fn parse(text: &str) -> Option<AclOperation> {
        let norm: String = text
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .to_ascii_uppercase();
        Self::ALL_OPS
            .into_iter()
            .find(|o| o.name().replace('_', "") == norm)
    }

    /// Does an ALLOW entry for `self` allow `requested`? ALL allows everything; READ,
    /// WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    pub fn allows(self, requested: AclOperation) -> bool {
        self == AclOperation::All
            || self == requested
            || (requested == AclOperation::Describe
                && matches!(
                    self,
                    AclOperation::Read
                        | AclOperation::Write
                        | AclOperation::Delete
                        | AclOperation::Alter
                ))
            || (requested == AclOperation::DescribeConfigs && self == AclOperation::AlterConfigs)
    }

    /// Does a DENY entry for `self` deny `requested`? Only the operation itself or ALL:
    /// denying READ does not deny DESCRIBE.
    pub fn denies(self, requested: AclOperation) -> bool {
        self == AclOperation::All || self == requested
    }

    /// Kafka's `authorized_operations` bit for this operation (bit = wire code).
    pub fn bit(self) -> i32 {
        1 << self.wire()
    }
}

/// Kafka's `AclPermissionType`: DENY (2) or ALLOW (3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn wire(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    pub fn from_wire(code: i8) -> Option<Permission> {
        match code {
            2 => Some(Permission::Deny),
            3 => Some(Permission::Allow),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Permission::Deny => "DENY",
            Permission::Allow => "ALLOW",
        }
    }
}

/// What a binding applies to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

/// Who may (or may not) do what from where.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AccessControlEntry {
    /// `Type:name`, `User:*` for everyone.
    pub principal: String,
    /// A client IP as the broker sees it, or `*`.
    pub host: String,
    pub operation: AclOperation,
    pub permission: Permission,
}

impl AccessControlEntry {
    /// Does this entry name `principal` connecting from `host`?
    fn names(&self, principal: &KafkaPrincipal, host: &str) -> bool {
        let principal_ok = self.principal == WILDCARD_PRINCIPAL
            || self
                .principal
                .split_once(':')
                .is_some_and(|(t, n)| t == principal.principal_type && n == principal.name);
        principal_ok && (self.host == WILDCARD_HOST || self.host == host)
    }
}

/// One ACL: a resource pattern and an entry (Kafka's `AclBinding`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub entry: AccessControlEntry,
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(principal={}, host={}, operation={}, permissionType={}) on {}:{}:{}",
            self.entry.principal,
            self.entry.host,
            self.entry.operation.name(),
            self.entry.permission.name(),
            self.pattern.resource_type.name(),
            self.pattern.pattern_type.name(),
            self.pattern.name
        )
    }
}

/// Why a binding or filter from a request is refused (Kafka answers INVALID_REQUEST).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AclError(pub String);

impl AclBinding {
    /// A binding from CreateAcls' wire fields, checked as Kafka's controller checks one:
    /// every enum known and not ANY/UNKNOWN/MATCH, a principal `Type:name`, a non-empty
    /// resource name and host, and the cluster resource only as the literal `kafka-cluster`.
    #[allow(clippy::too_many_arguments)]
    pub fn from_wire(
        resource_type: i8,
        name: &str,
        pattern_type: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<AclBinding, AclError> {
        let bad = |m: String| AclError(m);
        let resource_type = ResourceType::from_wire(resource_type)
            .ok_or_else(|| bad(format!("Invalid resource type {resource_type}")))?;
        let pattern_type = PatternType::from_wire(pattern_type)
            .ok_or_else(|| bad(format!("Invalid pattern type {pattern_type}")))?;
        let operation = AclOperation::from_wire(operation)
            .ok_or_else(|| bad(format!("Invalid operation {operation}")))?;
        let permission = Permission::from_wire(permission)
            .ok_or_else(|| bad(format!("Invalid permission type {permission}")))?;
        if name.is_empty() {
            return Err(bad("Resource name should not be empty".into()));
        }
        if KafkaPrincipal::parse(principal).is_none() {
            return Err(bad(format!("Could not parse principal from `{principal}`")));
        }
        if host.is_empty() {
            return Err(bad("Host should not be empty".into()));
        }
        if resource_type == ResourceType::Cluster
            && (name != CLUSTER_NAME || pattern_type != PatternType::Literal)
        {
            return Err(bad(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            )));
        }
        Ok(AclBinding {
            pattern: ResourcePattern {
                resource_type,
                name: name.to_string(),
                pattern_type,
            },
            entry: AccessControlEntry {
                principal: principal.to_string(),
                host: host.to_string(),
                operation,
                permission,
            },
        })
    }
}

/// How a filter matches pattern types (Kafka's filter PatternType: ANY, MATCH, or one type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PatternFilter {
    /// Any pattern type; a name must equal the binding's.
    Any,
    /// Every binding that would apply to the named resource: the literal name, the literal
    /// wildcard, and every prefix of it.
    Match,
    Exactly(PatternType),
}

/// Kafka's `AclBindingFilter`: `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclBindingFilter {
    pub resource_type: Option<ResourceType>,
    pub name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<AclOperation>,
    pub permission: Option<Permission>,
}

/// One enum field of a filter from its wire code: ANY (1) is "any" (`None`); UNKNOWN (0) or
/// a code Kafka does not know is refused with Kafka's message ("Invalid operation filter 0").
fn filter_code<T>(
    code: i8,
    what: &str,
    from_wire: fn(i8) -> Option<T>,
) -> Result<Option<T>, AclError> {
    const ANY: i8 = 1;
    if code == ANY {
        return Ok(None);
    }
    from_wire(code)
        .map(Some)
        .ok_or_else(|| AclError(format!("Invalid {what} filter {code}")))
}

impl AclBindingFilter {
    /// The filter that matches every binding.
    pub fn any() -> AclBindingFilter {
        AclBindingFilter {
            resource_type: None,
            name: None,
            pattern: PatternFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    /// A filter from DescribeAcls'/DeleteAcls' wire fields: ANY (1) is "any"; UNKNOWN (0) or
    /// a code Kafka does not know is refused.
    #[allow(clippy::too_many_arguments)]
    pub fn from_wire(
        resource_type: i8,
        name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclBindingFilter, AclError> {
        /// PatternType's MATCH: any pattern that would match the filter's name.
        const MATCH: i8 = 2;
        let resource_type = filter_code(resource_type, "resource type", ResourceType::from_wire)?;
        let pattern = match pattern_type {
            MATCH => PatternFilter::Match,
            code => filter_code(code, "pattern type", PatternType::from_wire)?
                .map_or(PatternFilter::Any, PatternFilter::Exactly),
        };
        let operation = filter_code(operation, "operation", AclOperation::from_wire)?;
        let permission = filter_code(permission, "permission type", Permission::from_wire)?;
        Ok(AclBindingFilter {
            resource_type,
            name: name.map(str::to_string),
            pattern,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation,
            permission,
        })
    }

    /// Kafka's `ResourcePatternFilter.matches` and `AccessControlEntryFilter.matches`.
    pub fn matches(&self, b: &AclBinding) -> bool {
        let p = &b.pattern;
        let e = &b.entry;
        if self.resource_type.is_some_and(|t| t != p.resource_type) {
            return false;
        }
        if let PatternFilter::Exactly(t) = self.pattern {
            if t != p.pattern_type {
                return false;
            }
        }
        let name_ok = match (&self.name, self.pattern) {
            (None, _) => true,
            (Some(n), PatternFilter::Any | PatternFilter::Exactly(_)) => *n == p.name,
            (Some(n), PatternFilter::Match) => match p.pattern_type {
                PatternType::Literal => *n == p.name || p.name == WILDCARD_RESOURCE,
                PatternType::Prefixed => n.starts_with(p.name.as_str()),
            },
        };
        name_ok
            && self.principal.as_ref().is_none_or(|x| *x == e.principal)
            && self.host.as_ref().is_none_or(|x| *x == e.host)
            && self.operation.is_none_or(|x| x == e.operation)
            && self.permission.is_none_or(|x| x == e.permission)
    }
}

/// Entries by resource name, for one resource type and pattern type.
type ByName = HashMap<String, Vec<AccessControlEntry>>;

/// The index of one resource type: literal bindings by name (the wildcard `*` among them),
/// prefixed ones by prefix, and the distinct prefix lengths, so a lookup tries only those.
#[derive(Debug, Clone, Default)]
struct TypeIndex {
    literal: ByName,
    prefixed: ByName,
    prefix_lengths: BTreeSet<usize>,
}

/// Every ACL binding of the cluster, as the metadata log holds them, with an index by
/// resource. Serialised as the list of bindings; the index is rebuilt on reading.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "Vec<AclBinding>", into = "Vec<AclBinding>")]
pub struct Acls {
    bindings: BTreeSet<AclBinding>,
    index: BTreeMap<ResourceType, TypeIndex>,
}

impl PartialEq for Acls {
    fn eq(&self, other: &Acls) -> bool {
        self.bindings == other.bindings
    }
}

impl From<Vec<AclBinding>> for Acls {
    fn from(list: Vec<AclBinding>) -> Acls {
        let mut acls = Acls::default();
        for b in list {
            acls.bindings.insert(b);
        }
        acls.reindex();
        acls
    }
}

impl From<Acls> for Vec<AclBinding> {
    fn from(acls: Acls) -> Vec<AclBinding> {
        acls.bindings.into_iter().collect()
    }
}

impl Acls {
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    pub fn contains(&self, b: &AclBinding) -> bool {
        self.bindings.contains(b)
    }

    /// Adds a binding (already there: nothing changes).
    pub fn insert(&mut self, b: AclBinding) {
        if self.bindings.insert(b.clone()) {
            let t = self.index.entry(b.pattern.resource_type).or_default();
            let len = b.pattern.name.len();
            let map = match b.pattern.pattern_type {
                PatternType::Literal => &mut t.literal,
                PatternType::Prefixed => {
                    t.prefix_lengths.insert(len);
                    &mut t.prefixed
                }
            };
            map.entry(b.pattern.name).or_default().push(b.entry);
        }
    }

    /// Removes a binding (absent: nothing changes).
    pub fn remove(&mut self, b: &AclBinding) {
        if self.bindings.remove(b) {
            self.reindex();
        }
    }

    fn reindex(&mut self) {
        let bindings = std::mem::take(&mut self.bindings);
        self.index.clear();
        for b in bindings {
            self.insert(b);
        }
    }

    /// Every binding, in a stable order (resource type, name, pattern type, entry).
    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.bindings.iter()
    }

    /// The bindings `filter` matches.
    pub fn matching<'a>(
        &'a self,
        filter: &'a AclBindingFilter,
    ) -> impl Iterator<Item = &'a AclBinding> + 'a {
        self.bindings.iter().filter(move |b| filter.matches(b))
    }

    /// Calls `f` with every entry that applies to the resource `(resource_type, name)`: the
    /// literal name's, the literal wildcard's and each matching prefix's.
    fn for_each_entry(
        &self,
        resource_type: ResourceType,
        name: &str,
        mut f: impl FnMut(&AccessControlEntry),
    ) {
        let Some(t) = self.index.get(&resource_type) else {
            return;
        };
        for key in [name, WILDCARD_RESOURCE] {
            if let Some(entries) = t.literal.get(key) {
                entries.iter().for_each(&mut f);
            }
            if name == WILDCARD_RESOURCE {
                break;
            }
        }
        for &len in t.prefix_lengths.range(..=name.len()) {
            let Some(prefix) = name.get(..len) else {
                continue;
            };
            if let Some(entries) = t.prefixed.get(prefix) {
                entries.iter().for_each(&mut f);
            }
        }
    }
}

/// `super_users` and `allow_everyone_if_no_acl_found`: what decides besides the bindings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorizer {
    super_users: HashSet<KafkaPrincipal>,
    pub allow_everyone_if_no_acl_found: bool,
}

impl Authorizer {
    /// `super_users` as Kafka writes it: principals separated by `;`.
    pub fn new(super_users: &str, allow_everyone_if_no_acl_found: bool) -> Result<Self, AclError> {
        let mut set = HashSet::new();
        for text in super_users
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let p = KafkaPrincipal::parse(text).ok_or_else(|| {
                AclError(format!(
                    "{text:?} is not a principal (Type:name, e.g. User:admin)"
                ))
            })?;
            set.insert(p);
        }
        Ok(Authorizer {
            super_users: set,
            allow_everyone_if_no_acl_found,
        })
    }

    pub fn is_super_user(&self, principal: &KafkaPrincipal) -> bool {
        self.super_users.contains(principal)
    }

    /// Kafka's `authorizeByResourceType`: may `principal` do `operation` on *some* resource
    /// of `resource_type`? Yes when an ALLOW binding names it that no DENY binding of its
    /// covers (a DENY on the literal wildcard, on the same literal name, or on a prefix of
    /// the allowed name). A scan of that type's bindings: only InitProducerId asks, once per
    /// producer.
    pub fn authorize_some(
        &self,
        acls: &Acls,
        principal: &KafkaPrincipal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let of_type: Vec<&AclBinding> = acls
            .iter()
            .filter(|b| b.pattern.resource_type == resource_type)
            .collect();
        if of_type.is_empty() {
            return self.allow_everyone_if_no_acl_found;
        }
        let mine = |b: &&&AclBinding| b.entry.names(principal, host);
        let denies: Vec<&ResourcePattern> = of_type
            .iter()
            .filter(mine)
            .filter(|b| {
                b.entry.permission == Permission::Deny && b.entry.operation.denies(operation)
            })
            .map(|b| &b.pattern)
            .collect();
        let covered = |allow: &ResourcePattern| {
            denies.iter().any(|d| match d.pattern_type {
                PatternType::Literal => {
                    d.name == WILDCARD_RESOURCE
                        || (allow.pattern_type == PatternType::Literal && d.name == allow.name)
                }
                PatternType::Prefixed => allow.name.starts_with(d.name.as_str()),
            })
        };
        of_type
            .iter()
            .filter(mine)
            .filter(|b| {
                b.entry.permission == Permission::Allow && b.entry.operation.allows(operation)
            })
            .any(|b| !covered(&b.pattern))
    }

    /// May `principal`, connected from `host`, do `operation` on the resource?
    pub fn authorize(
        &self,
        acls: &Acls,
        principal: &KafkaPrincipal,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let mut any_for_resource = false;
        let mut denied = false;
        let mut allowed = false;
        acls.for_each_entry(resource_type, name, |e| {
            any_for_resource = true;
            if denied || !e.names(principal, host) {
                return;
            }
            match e.permission {
                Permission::Deny => denied |= e.operation.denies(operation),
                Permission::Allow => allowed |= e.operation.allows(operation),
            }
        });
        if denied {
            false
        } else if allowed {
            true
        } else {
            !any_for_resource && self.allow_everyone_if_no_acl_found
        }
    }
}

/// The operations Kafka reports in `authorized_operations` for a topic.
pub const TOPIC_OPERATIONS: &[AclOperation] = &[
    AclOperation::Read,
    AclOperation::Write,
    AclOperation::Create,
    AclOperation::Delete,
    AclOperation::Alter,
    AclOperation::Describe,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
];

/// The operations Kafka reports in `authorized_operations` for the cluster.
pub const CLUSTER_OPERATIONS: &[AclOperation] = &[
    AclOperation::Create,
    AclOperation::Alter,
    AclOperation::Describe,
    AclOperation::ClusterAction,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
    AclOperation::IdempotentWrite,
];

/// The operations Kafka reports in `authorized_operations` for a group.
pub const GROUP_OPERATIONS: &[AclOperation] = &[
    AclOperation::Read,
    AclOperation::Describe,
    AclOperation::Delete,
];

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn bind(
        rt: ResourceType,
        name: &str,
        pt: PatternType,
        principal: &str,
        host: &str,
        op: AclOperation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern {
                resource_type: rt,
                name: name.into(),
                pattern_type: pt,
            },
            entry: AccessControlEntry {
                principal: principal.into(),
                host: host.into(),
                operation: op,
                permission: perm,
            },
        }
    }

    fn topic_allow(name: &str, pt: PatternType, principal: &str, op: AclOperation) -> AclBinding {
        bind(
            ResourceType::Topic,
            name,
            pt,
            principal,
            "*",
            op,
            Permission::Allow,
        )
    }

    fn alice() -> KafkaPrincipal {
        KafkaPrincipal::user("alice")
    }

    fn can(a: &Authorizer, acls: &Acls, op: AclOperation, topic: &str) -> bool {
        a.authorize(acls, &alice(), "10.0.0.1", op, ResourceType::Topic, topic)
    }

    /// Every wire code round trips, and codes Kafka reserves for filters (0 UNKNOWN,
    /// 1 ANY, 2 MATCH) are not stored types.
    #[test]
    fn wire_codes_round_trip() {
        for t in ResourceType::ALL {
            assert_eq!(ResourceType::from_wire(t.wire()), Some(t));
        }
        for o in AclOperation::ALL_OPS {
            assert_eq!(AclOperation::from_wire(o.wire()), Some(o));
            assert_eq!(AclOperation::parse(o.name()), Some(o));
        }
        assert_eq!(
            AclOperation::parse("DescribeConfigs"),
            Some(AclOperation::DescribeConfigs)
        );
        assert_eq!(AclOperation::parse("read"), Some(AclOperation::Read));
        assert_eq!(AclOperation::from_wire(1), None);
        assert_eq!(PatternType::from_wire(2), None);
        assert_eq!(Permission::from_wire(1), None);
        assert_eq!(ResourceType::from_wire(1), None);
    }

    /// No binding at all: allow_everyone_if_no_acl_found decides; super users always pass;
    /// once any binding names the resource, a principal without one is refused.
    #[test]
    fn defaults_super_users_and_no_acl_found() {
        let acls = Acls::default();
        let closed = Authorizer::new("User:admin; User:bob", false).unwrap();
        let open = Authorizer::new("", true).unwrap();
        assert!(!can(&closed, &acls, AclOperation::Read, "t"));
        assert!(can(&open, &acls, AclOperation::Read, "t"));
        assert!(closed.is_super_user(&KafkaPrincipal::user("bob")));
        assert!(closed.authorize(
            &acls,
            &KafkaPrincipal::user("admin"),
            "h",
            AclOperation::Alter,
            ResourceType::Cluster,
            CLUSTER_NAME
        ));
        let mut acls = Acls::default();
        acls.insert(topic_allow(
            "t",
            PatternType::Literal,
            "User:bob",
            AclOperation::Read,
        ));
        assert!(
            !can(&open, &acls, AclOperation::Read, "t"),
            "t has an ACL now"
        );
        assert!(can(&open, &acls, AclOperation::Read, "other"));
        assert!(Authorizer::new("alice", false).is_err());
    }

    /// Literal, wildcard-literal and prefixed bindings apply to the names they should, and
    /// only those; principal `User:*` and host `*` match anyone, a host only itself.
    #[test]
    fn patterns_principals_and_hosts() {
        let a = Authorizer::new("", false).unwrap();
        let mut acls = Acls::default();
        acls.insert(topic_allow(
            "orders",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
        ));
        acls.insert(topic_allow(
            "pay-",
            PatternType::Prefixed,
            "User:alice",
            AclOperation::Write,
        ));
        acls.insert(topic_allow(
            "*",
            PatternType::Literal,
            "User:*",
            AclOperation::Describe,
        ));
        assert!(can(&a, &acls, AclOperation::Read, "orders"));
        assert!(!can(&a, &acls, AclOperation::Read, "orders2"));
        assert!(can(&a, &acls, AclOperation::Write, "pay-eu"));
        assert!(can(&a, &acls, AclOperation::Write, "pay-"));
        assert!(!can(&a, &acls, AclOperation::Write, "pay"));
        assert!(can(&a, &acls, AclOperation::Describe, "anything"));
        assert!(!can(&a, &acls, AclOperation::Read, "anything"));
        // A prefixed `*` is only the prefix `*`, not a wildcard.
        let mut star = Acls::default();
        star.insert(topic_allow(
            "*",
            PatternType::Prefixed,
            "User:alice",
            AclOperation::Read,
        ));
        assert!(!can(&a, &star, AclOperation::Read, "t"));
        assert!(can(&a, &star, AclOperation::Read, "*t"));
        // Hosts.
        let mut hosts = Acls::default();
        hosts.insert(bind(
            ResourceType::Topic,
            "t",
            PatternType::Literal,
            "User:alice",
            "10.0.0.1",
            AclOperation::Read,
            Permission::Allow,
        ));
        assert!(a.authorize(
            &hosts,
            &alice(),
            "10.0.0.1",
            AclOperation::Read,
            ResourceType::Topic,
            "t"
        ));
        assert!(!a.authorize(
            &hosts,
            &alice(),
            "10.0.0.2",
            AclOperation::Read,
            ResourceType::Topic,
            "t"
        ));
        // Another principal type with the same name is another principal.
        let svc = KafkaPrincipal {
            principal_type: "Service".into(),
            name: "alice".into(),
        };
        assert!(!a.authorize(
            &acls,
            &svc,
            "h",
            AclOperation::Read,
            ResourceType::Topic,
            "orders"
        ));
        // Resource types do not mix.
        assert!(!a.authorize(
            &acls,
            &alice(),
            "h",
            AclOperation::Read,
            ResourceType::Group,
            "orders"
        ));
    }

    /// Kafka's implications: READ/WRITE/DELETE/ALTER allow DESCRIBE, ALTER_CONFIGS allows
    /// DESCRIBE_CONFIGS, ALL allows everything; a DENY implies nothing but denies its own
    /// operation (or all, for ALL) over any ALLOW, including a wildcard's and a prefix's.
    #[test]
    fn implied_operations_and_deny_wins() {
        let a = Authorizer::new("", false).unwrap();
        for op in [
            AclOperation::Read,
            AclOperation::Write,
            AclOperation::Delete,
            AclOperation::Alter,
        ] {
            let acls = Acls::from(vec![topic_allow(
                "t",
                PatternType::Literal,
                "User:alice",
                op,
            )]);
            assert!(can(&a, &acls, AclOperation::Describe, "t"), "{op:?}");
            assert!(!can(&a, &acls, AclOperation::Create, "t"), "{op:?}");
        }
        let acls = Acls::from(vec![topic_allow(
            "t",
            PatternType::Literal,
            "User:alice",
            AclOperation::AlterConfigs,
        )]);
        assert!(can(&a, &acls, AclOperation::DescribeConfigs, "t"));
        assert!(!can(&a, &acls, AclOperation::Describe, "t"));
        let acls = Acls::from(vec![topic_allow(
            "t",
            PatternType::Literal,
            "User:alice",
            AclOperation::All,
        )]);
        assert!(can(&a, &acls, AclOperation::Delete, "t"));

        let mut acls = Acls::from(vec![topic_allow(
            "t",
            PatternType::Prefixed,
            "User:*",
            AclOperation::All,
        )]);
        acls.insert(bind(
            ResourceType::Topic,
            "t-secret",
            PatternType::Literal,
            "User:alice",
            "*",
            AclOperation::Read,
            Permission::Deny,
        ));
        assert!(!can(&a, &acls, AclOperation::Read, "t-secret"));
        assert!(
            can(&a, &acls, AclOperation::Describe, "t-secret"),
            "a DENY READ implies nothing"
        );
        assert!(can(&a, &acls, AclOperation::Read, "t-public"));
        acls.insert(bind(
            ResourceType::Topic,
            "*",
            PatternType::Literal,
            "User:*",
            "*",
            AclOperation::All,
            Permission::Deny,
        ));
        assert!(!can(&a, &acls, AclOperation::Describe, "t-public"));
        // A super user is not subject to a DENY.
        let su = Authorizer::new("User:alice", false).unwrap();
        assert!(can(&su, &acls, AclOperation::Read, "t-secret"));
    }

    /// Kafka's authorizeByResourceType (InitProducerId's "WRITE on any topic"): an ALLOW on
    /// some topic counts unless a DENY of the principal covers it (the wildcard, the same
    /// literal, or a prefix of it); no topic binding at all falls back to
    /// allow_everyone_if_no_acl_found.
    #[test]
    fn authorize_some_resource() {
        let a = Authorizer::new("", false).unwrap();
        let open = Authorizer::new("", true).unwrap();
        let some = |a: &Authorizer, acls: &Acls| {
            a.authorize_some(
                acls,
                &alice(),
                "h",
                AclOperation::Write,
                ResourceType::Topic,
            )
        };
        assert!(!some(&a, &Acls::default()));
        assert!(some(&open, &Acls::default()));
        let deny = |name: &str, pt| {
            bind(
                ResourceType::Topic,
                name,
                pt,
                "User:alice",
                "*",
                AclOperation::Write,
                Permission::Deny,
            )
        };
        let mut acls = Acls::from(vec![topic_allow(
            "pay-eu",
            PatternType::Literal,
            "User:alice",
            AclOperation::Write,
        )]);
        assert!(some(&a, &acls));
        assert!(!some(
            &open,
            &Acls::from(vec![topic_allow(
                "x",
                PatternType::Literal,
                "User:bob",
                AclOperation::Write
            )])
        ));
        acls.insert(deny("pay-", PatternType::Prefixed));
        assert!(
            !some(&a, &acls),
            "a DENY on a prefix covers the literal ALLOW"
        );
        let mut acls = Acls::from(vec![topic_allow(
            "pay-",
            PatternType::Prefixed,
            "User:alice",
            AclOperation::All,
        )]);
        acls.insert(deny("pay-eu", PatternType::Literal));
        assert!(
            some(&a, &acls),
            "a literal DENY does not cover a prefix ALLOW"
        );
        acls.insert(deny("*", PatternType::Literal));
        assert!(!some(&a, &acls));
    }

    /// Filters as Kafka's DescribeAcls/DeleteAcls apply them: ANY needs the exact name,
    /// MATCH finds every binding that applies to a name (literal, wildcard, prefixes), an
    /// exact pattern type only that type; entry fields compare exactly.
    #[test]
    fn filters_match_as_kafka() {
        let lit = topic_allow(
            "pay-eu",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
        );
        let pre = topic_allow(
            "pay-",
            PatternType::Prefixed,
            "User:alice",
            AclOperation::Read,
        );
        let wild = topic_allow("*", PatternType::Literal, "User:*", AclOperation::Read);
        let other = topic_allow(
            "other",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
        );
        let f = |name: Option<&str>, pt: i8| {
            AclBindingFilter::from_wire(2, name, pt, None, None, 1, 1).unwrap()
        };
        let hits = |f: &AclBindingFilter| {
            [&lit, &pre, &wild, &other]
                .iter()
                .map(|b| f.matches(b))
                .collect::<Vec<_>>()
        };
        assert_eq!(hits(&f(Some("pay-eu"), 2)), [true, true, true, false]);
        assert_eq!(hits(&f(Some("pay-eu"), 1)), [true, false, false, false]);
        assert_eq!(hits(&f(Some("pay-"), 4)), [false, true, false, false]);
        assert_eq!(hits(&f(None, 3)), [true, false, true, true]);
        assert_eq!(hits(&AclBindingFilter::any()), [true, true, true, true]);
        let by_principal =
            AclBindingFilter::from_wire(1, None, 1, Some("User:*"), None, 1, 1).unwrap();
        assert_eq!(hits(&by_principal), [false, false, true, false]);
        let by_op = AclBindingFilter::from_wire(1, None, 1, None, Some("*"), 4, 3).unwrap();
        assert_eq!(hits(&by_op), [false, false, false, false]);
        assert!(AclBindingFilter::from_wire(0, None, 1, None, None, 1, 1).is_err());
        assert!(AclBindingFilter::from_wire(1, None, 0, None, None, 1, 1).is_err());
        assert!(AclBindingFilter::from_wire(1, None, 1, None, None, 0, 1).is_err());
    }

    /// CreateAcls' checks: ANY/UNKNOWN/MATCH refused, a principal needs `Type:`, the cluster
    /// resource is only the literal `kafka-cluster`.
    #[test]
    fn bindings_from_wire_are_checked() {
        let ok = AclBinding::from_wire(2, "t", 3, "User:alice", "*", 3, 3).unwrap();
        assert_eq!(
            ok,
            topic_allow("t", PatternType::Literal, "User:alice", AclOperation::Read)
        );
        assert!(AclBinding::from_wire(1, "t", 3, "User:a", "*", 3, 3).is_err());
        assert!(AclBinding::from_wire(2, "t", 2, "User:a", "*", 3, 3).is_err());
        assert!(AclBinding::from_wire(2, "t", 3, "alice", "*", 3, 3).is_err());
        assert!(AclBinding::from_wire(2, "", 3, "User:a", "*", 3, 3).is_err());
        assert!(AclBinding::from_wire(2, "t", 3, "User:a", "*", 1, 3).is_err());
        assert!(AclBinding::from_wire(2, "t", 3, "User:a", "*", 3, 1).is_err());
        assert!(AclBinding::from_wire(4, "kafka-cluster", 3, "User:a", "*", 7, 3).is_ok());
        assert!(AclBinding::from_wire(4, "other", 3, "User:a", "*", 7, 3).is_err());
        assert!(AclBinding::from_wire(4, "kafka-cluster", 4, "User:a", "*", 7, 3).is_err());
    }

    /// Bindings serialise as a list and come back with a working index; removing one
    /// updates the index.
    #[test]
    fn serialisation_and_removal_keep_the_index() {
        let a = Authorizer::new("", false).unwrap();
        let b1 = topic_allow(
            "pay-",
            PatternType::Prefixed,
            "User:alice",
            AclOperation::Read,
        );
        let b2 = topic_allow(
            "orders",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
        );
        let acls = Acls::from(vec![b1.clone(), b2.clone(), b1.clone()]);
        assert_eq!(acls.len(), 2);
        let json = serde_json::to_string(&acls).unwrap();
        let mut back: Acls = serde_json::from_str(&json).unwrap();
        assert_eq!(back, acls);
        assert!(can(&a, &back, AclOperation::Read, "pay-x"));
        back.remove(&b1);
        assert!(!can(&a, &back, AclOperation::Read, "pay-x"));
        assert!(can(&a, &back, AclOperation::Read, "orders"));
    }

    fn arb_binding() -> impl Strategy<Value = AclBinding> {
        (
            prop::sample::select(vec![ResourceType::Topic, ResourceType::Group]),
            prop::sample::select(vec!["a", "ab", "abc", "b", "*", "a*"]),
            prop::sample::select(vec![PatternType::Literal, PatternType::Prefixed]),
            prop::sample::select(vec!["User:alice", "User:bob", "User:*"]),
            prop::sample::select(vec!["*", "h1", "h2"]),
            prop::sample::select(AclOperation::ALL_OPS.to_vec()),
            prop::sample::select(vec![Permission::Allow, Permission::Deny]),
        )
            .prop_map(|(rt, n, pt, p, h, o, perm)| bind(rt, n, pt, p, h, o, perm))
    }

    /// A model of Kafka's decision over a plain list (a scan of every binding), which the
    /// indexed authorizer must agree with.
    #[allow(clippy::too_many_arguments)]
    fn model(
        list: &[AclBinding],
        su: bool,
        open: bool,
        p: &KafkaPrincipal,
        host: &str,
        op: AclOperation,
        rt: ResourceType,
        name: &str,
    ) -> bool {
        if su {
            return true;
        }
        let applies = |b: &&AclBinding| {
            b.pattern.resource_type == rt
                && match b.pattern.pattern_type {
                    PatternType::Literal => b.pattern.name == name || b.pattern.name == "*",
                    PatternType::Prefixed => name.starts_with(&b.pattern.name),
                }
        };
        let mine = |b: &&&AclBinding| {
            (b.entry.principal == "User:*" || b.entry.principal == p.to_string())
                && (b.entry.host == "*" || b.entry.host == host)
        };
        let relevant: Vec<&AclBinding> = list.iter().filter(applies).collect();
        if relevant
            .iter()
            .filter(mine)
            .any(|b| b.entry.permission == Permission::Deny && b.entry.operation.denies(op))
        {
            return false;
        }
        if relevant
            .iter()
            .filter(mine)
            .any(|b| b.entry.permission == Permission::Allow && b.entry.operation.allows(op))
        {
            return true;
        }
        relevant.is_empty() && open
    }

    /// Proves each enum field of a filter decodes the same way: ANY (1) matches anything,
    /// a known code is that value, UNKNOWN (0) or an unknown code is refused with Kafka's
    /// message naming the field; MATCH (2) is the pattern type's own.
    #[test]
    fn filter_fields_decode_any_known_and_refuse_unknown() {
        let f = |rt, pt, op, perm| AclBindingFilter::from_wire(rt, None, pt, None, None, op, perm);
        let any = f(1, 1, 1, 1).unwrap();
        assert_eq!(
            (
                any.resource_type,
                any.pattern,
                any.operation,
                any.permission
            ),
            (None, PatternFilter::Any, None, None)
        );
        let known = f(2, 4, 3, 3).unwrap();
        assert_eq!(
            (
                known.resource_type,
                known.pattern,
                known.operation,
                known.permission
            ),
            (
                Some(ResourceType::Topic),
                PatternFilter::Exactly(PatternType::Prefixed),
                Some(AclOperation::Read),
                Some(Permission::Allow)
            )
        );
        assert_eq!(f(1, 2, 1, 1).unwrap().pattern, PatternFilter::Match);
        let err = |r: Result<AclBindingFilter, AclError>| r.err().map(|e| e.0);
        assert_eq!(
            err(f(0, 1, 1, 1)).as_deref(),
            Some("Invalid resource type filter 0")
        );
        assert_eq!(
            err(f(1, 0, 1, 1)).as_deref(),
            Some("Invalid pattern type filter 0")
        );
        assert_eq!(
            err(f(1, 1, 0, 1)).as_deref(),
            Some("Invalid operation filter 0")
        );
        assert_eq!(
            err(f(1, 1, 1, 9)).as_deref(),
            Some("Invalid permission type filter 9")
        );
    }

    proptest! {
        /// The indexed decision equals the scanning model for any set of bindings, and a
        /// DENY added for exactly the asked operation always refuses (deny wins).
        #[test]
        fn index_agrees_with_a_scan(
            list in prop::collection::vec(arb_binding(), 0..12),
            open in any::<bool>(),
            su in any::<bool>(),
            who in prop::sample::select(vec!["alice", "bob", "carol"]),
            host in prop::sample::select(vec!["h1", "h2"]),
            op in prop::sample::select(AclOperation::ALL_OPS[1..].to_vec()),
            rt in prop::sample::select(vec![ResourceType::Topic, ResourceType::Group]),
            name in prop::sample::select(vec!["a", "ab", "abc", "b", "*", "a*", "c"]),
        ) {
            let p = KafkaPrincipal::user(who);
            let a = Authorizer::new(if su { "User:alice;User:bob;User:carol" } else { "" }, open).unwrap();
            let acls = Acls::from(list.clone());
            let got = a.authorize(&acls, &p, host, op, rt, name);
            prop_assert_eq!(got, model(&list, su, open, &p, host, op, rt, name));
            let mut denied = acls.clone();
            denied.insert(bind(rt, name, PatternType::Literal, &p.to_string(), host, op, Permission::Deny));
            prop_assert_eq!(a.authorize(&denied, &p, host, op, rt, name), su);
        }
    }
}
