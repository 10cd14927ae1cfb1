//! `strata acl add|list|remove`: ACL bindings, with the flags of Kafka's `kafka-acls.sh`
//! (`--allow-principal`, `--deny-principal`, `--allow-host`, `--deny-host`, `--operation`,
//! `--topic`, `--group`, `--cluster`, `--transactional-id`, `--resource-pattern-type`, and
//! the `--producer`/`--consumer` shortcuts). The broker records them in the metadata log.
use std::fmt::Write as _;

use anyhow::{bail, Context};

use super::ConnectArgs;
use crate::security::acl::{
    AclBinding, AclBindingFilter, AclOperation, PatternFilter, PatternType, Permission,
    ResourceType, CLUSTER_NAME,
};

/// The resources a command names (none: every resource, for list and remove).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ResourceArgs {
    #[arg(long)]
    pub topic: Vec<String>,
    #[arg(long)]
    pub group: Vec<String>,
    /// The cluster resource (`kafka-cluster`).
    #[arg(long)]
    pub cluster: bool,
    #[arg(long)]
    pub transactional_id: Vec<String>,
    /// LITERAL or PREFIXED (add); also ANY or MATCH for list and remove. Default LITERAL,
    /// as kafka-acls.sh.
    #[arg(long, default_value = "LITERAL")]
    pub resource_pattern_type: String,
}

impl ResourceArgs {
    fn resources(&self) -> Vec<(ResourceType, String)> {
        let mut out = Vec::new();
        out.extend(self.topic.iter().map(|t| (ResourceType::Topic, t.clone())));
        out.extend(self.group.iter().map(|g| (ResourceType::Group, g.clone())));
        if self.cluster {
            out.push((ResourceType::Cluster, CLUSTER_NAME.to_string()));
        }
        out.extend(
            self.transactional_id
                .iter()
                .map(|t| (ResourceType::TransactionalId, t.clone())),
        );
        out
    }

    fn pattern_filter(&self) -> anyhow::Result<PatternFilter> {
        Ok(
            match self.resource_pattern_type.to_ascii_uppercase().as_str() {
                "ANY" => PatternFilter::Any,
                "MATCH" => PatternFilter::Match,
                "LITERAL" => PatternFilter::Exactly(PatternType::Literal),
                "PREFIXED" => PatternFilter::Exactly(PatternType::Prefixed),
                other => {
                    bail!("--resource-pattern-type {other:?}: LITERAL, PREFIXED, ANY or MATCH")
                }
            },
        )
    }
}

/// Who an ACL is for.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct EntryArgs {
    /// Principal to allow (`User:alice`, `User:*`); repeatable.
    #[arg(long)]
    pub allow_principal: Vec<String>,
    /// Principal to deny; repeatable.
    #[arg(long)]
    pub deny_principal: Vec<String>,
    /// Hosts the allow entries apply to (default `*`).
    #[arg(long)]
    pub allow_host: Vec<String>,
    /// Hosts the deny entries apply to (default `*`).
    #[arg(long)]
    pub deny_host: Vec<String>,
    /// Operation (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
    /// DescribeConfigs, AlterConfigs, IdempotentWrite, All); repeatable. Default All.
    #[arg(long)]
    pub operation: Vec<String>,
}

impl EntryArgs {
    fn operations(&self) -> anyhow::Result<Vec<AclOperation>> {
        self.operation
            .iter()
            .map(|o| AclOperation::parse(o).with_context(|| format!("unknown operation {o:?}")))
            .collect()
    }

    /// (permission, principal, host) for every principal and host given.
    fn entries(&self) -> Vec<(Permission, String, String)> {
        let hosts = |h: &Vec<String>| {
            if h.is_empty() {
                vec!["*".to_string()]
            } else {
                h.clone()
            }
        };
        let mut out = Vec::new();
        for (perm, principals, hs) in [
            (
                Permission::Allow,
                &self.allow_principal,
                hosts(&self.allow_host),
            ),
            (
                Permission::Deny,
                &self.deny_principal,
                hosts(&self.deny_host),
            ),
        ] {
            for p in principals {
                for h in &hs {
                    out.push((perm, p.clone(), h.clone()));
                }
            }
        }
        out
    }
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum AclCommand {
    /// Create ACLs: every principal x host x operation x resource given.
    Add {
        #[command(flatten)]
        entry: EntryArgs,
        #[command(flatten)]
        resource: ResourceArgs,
        /// kafka-acls.sh's --producer: WRITE, DESCRIBE and CREATE on the topics (and WRITE,
        /// DESCRIBE on the transactional ids).
        #[arg(long)]
        producer: bool,
        /// kafka-acls.sh's --consumer: READ, DESCRIBE on the topics and READ on the groups.
        #[arg(long)]
        consumer: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// List ACLs of the resources given (every ACL when none).
    List {
        #[command(flatten)]
        resource: ResourceArgs,
        /// Only this principal's ACLs.
        #[arg(long)]
        principal: Option<String>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Remove ACLs: with principals, exactly those entries; without, every ACL of the
    /// resources given.
    Remove {
        #[command(flatten)]
        entry: EntryArgs,
        #[command(flatten)]
        resource: ResourceArgs,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

/// The bindings `strata acl add` creates.
fn bindings_to_add(
    entry: &EntryArgs,
    resource: &ResourceArgs,
    producer: bool,
    consumer: bool,
) -> anyhow::Result<Vec<AclBinding>> {
    let pattern_type = match resource.pattern_filter()? {
        PatternFilter::Exactly(t) => t,
        _ => bail!("--resource-pattern-type must be LITERAL or PREFIXED to add ACLs"),
    };
    let resources = resource.resources();
    if resources.is_empty() {
        bail!("name a resource: --topic, --group, --cluster or --transactional-id");
    }
    let entries = entry.entries();
    if entries.is_empty() {
        bail!("name a principal: --allow-principal or --deny-principal");
    }
    let explicit = entry.operations()?;
    let mut out = Vec::new();
    for (rt, name) in &resources {
        let ops: Vec<AclOperation> = if producer || consumer {
            use AclOperation::*;
            let mut ops = Vec::new();
            match rt {
                ResourceType::Topic if producer => ops.extend([Write, Describe, Create]),
                ResourceType::TransactionalId if producer => ops.extend([Write, Describe]),
                _ => {}
            }
            match rt {
                ResourceType::Topic if consumer => ops.extend([Read, Describe]),
                ResourceType::Group if consumer => ops.push(Read),
                _ => {}
            }
            ops
        } else if explicit.is_empty() {
            vec![AclOperation::All]
        } else {
            explicit.clone()
        };
        for (perm, principal, host) in &entries {
            for op in &ops {
                let b = AclBinding::from_wire(
                    rt.wire(),
                    name,
                    pattern_type.wire(),
                    principal,
                    host,
                    op.wire(),
                    perm.wire(),
                )
                .map_err(|e| anyhow::anyhow!("{e}"))?;
                if !out.contains(&b) {
                    out.push(b);
                }
            }
        }
    }
    Ok(out)
}

/// The filters of `list` (principal: only its entries) and `remove`.
fn filters(
    resource: &ResourceArgs,
    entries: &[(Option<Permission>, Option<String>, Option<String>)],
    operations: &[AclOperation],
) -> anyhow::Result<Vec<AclBindingFilter>> {
    let pattern = resource.pattern_filter()?;
    let resources: Vec<(Option<ResourceType>, Option<String>)> = {
        let r = resource.resources();
        if r.is_empty() {
            vec![(None, None)]
        } else {
            r.into_iter().map(|(t, n)| (Some(t), Some(n))).collect()
        }
    };
    let ops: Vec<Option<AclOperation>> = if operations.is_empty() {
        vec![None]
    } else {
        operations.iter().copied().map(Some).collect()
    };
    let mut out = Vec::new();
    for (rt, name) in &resources {
        for (perm, principal, host) in entries {
            for op in &ops {
                out.push(AclBindingFilter {
                    resource_type: *rt,
                    name: name.clone(),
                    // With no resource named, every pattern type.
                    pattern: if rt.is_none() {
                        PatternFilter::Any
                    } else {
                        pattern
                    },
                    principal: principal.clone(),
                    host: host.clone(),
                    operation: *op,
                    permission: *perm,
                });
            }
        }
    }
    Ok(out)
}

fn print(bindings: &[AclBinding]) -> anyhow::Result<()> {
    let mut out = String::new();
    writeln!(
        out,
        "{:<17} {:<24} {:<9} {:<20} {:<16} {:<17} PERMISSION",
        "RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION"
    )?;
    for b in bindings {
        writeln!(
            out,
            "{:<17} {:<24} {:<9} {:<20} {:<16} {:<17} {}",
            b.pattern.resource_type.name(),
            b.pattern.name,
            b.pattern.pattern_type.name(),
            b.entry.principal,
            b.entry.host,
            b.entry.operation.name(),
            b.entry.permission.name()
        )?;
    }
    print!("{out}");
    Ok(())
}

pub(super) fn run(cmd: AclCommand) -> anyhow::Result<()> {
    match cmd {
        AclCommand::Add {
            entry,
            resource,
            producer,
            consumer,
            connect,
        } => {
            let bindings = bindings_to_add(&entry, &resource, producer, consumer)?;
            let mut client = connect.connect()?;
            client.create_acls(&bindings)?;
            for b in &bindings {
                println!("added {b}");
            }
            Ok(())
        }
        AclCommand::List {
            resource,
            principal,
            connect,
        } => {
            let filters = filters(&resource, &[(None, principal, None)], &[])?;
            let mut client = connect.connect()?;
            let mut all: Vec<AclBinding> = Vec::new();
            for f in &filters {
                for b in client.describe_acls(f)? {
                    if !all.contains(&b) {
                        all.push(b);
                    }
                }
            }
            all.sort();
            print(&all)
        }
        AclCommand::Remove {
            entry,
            resource,
            connect,
        } => {
            if resource.resources().is_empty() {
                bail!("name a resource: --topic, --group, --cluster or --transactional-id");
            }
            let entries: Vec<(Option<Permission>, Option<String>, Option<String>)> =
                match entry.entries() {
                    e if e.is_empty() => vec![(None, None, None)],
                    e => e
                        .into_iter()
                        .map(|(perm, p, h)| (Some(perm), Some(p), Some(h)))
                        .collect(),
                };
            let filters = filters(&resource, &entries, &entry.operations()?)?;
            let mut client = connect.connect()?;
            let mut removed = 0;
            for f in &filters {
                for b in client.delete_acls(f)? {
                    println!("removed {b}");
                    removed += 1;
                }
            }
            if removed == 0 {
                println!("no ACL matched");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// kafka-acls.sh's expansion: every principal x host x operation x resource; --producer
    /// and --consumer stand for Kafka's operation sets; a binding that would be invalid
    /// (no resource, a pattern filter type) is refused before anything is sent.
    #[test]
    fn add_expands_as_kafka_acls() {
        let entry = EntryArgs {
            allow_principal: vec!["User:alice".into(), "User:bob".into()],
            operation: vec!["Read".into(), "describe".into()],
            ..Default::default()
        };
        let resource = ResourceArgs {
            topic: vec!["t".into()],
            resource_pattern_type: "PREFIXED".into(),
            ..Default::default()
        };
        let b = bindings_to_add(&entry, &resource, false, false).unwrap();
        assert_eq!(b.len(), 4);
        assert!(b
            .iter()
            .all(|b| b.pattern.pattern_type == PatternType::Prefixed));
        let consumer = ResourceArgs {
            topic: vec!["t".into()],
            group: vec!["g".into()],
            resource_pattern_type: "LITERAL".into(),
            ..Default::default()
        };
        let only_alice = EntryArgs {
            allow_principal: vec!["User:alice".into()],
            ..Default::default()
        };
        let b = bindings_to_add(&only_alice, &consumer, false, true).unwrap();
        let ops: Vec<_> = b
            .iter()
            .map(|b| (b.pattern.resource_type, b.entry.operation))
            .collect();
        assert_eq!(
            ops,
            [
                (ResourceType::Topic, AclOperation::Read),
                (ResourceType::Topic, AclOperation::Describe),
                (ResourceType::Group, AclOperation::Read)
            ]
        );
        assert!(bindings_to_add(&only_alice, &ResourceArgs::default(), false, false).is_err());
        let any = ResourceArgs {
            topic: vec!["t".into()],
            resource_pattern_type: "ANY".into(),
            ..Default::default()
        };
        assert!(bindings_to_add(&only_alice, &any, false, false).is_err());
    }
}
