//! `strata quota set|list|remove`: client quotas (Kafka's `kafka-configs.sh --entity-type
//! users/clients --alter --add-config producer_byte_rate=...` and `--describe`). An entity is
//! a user, a client id, or both; `--user-default` / `--client-default` name the defaults
//! (`<default>`). The broker records them in the metadata log.
use std::fmt::Write as _;

use anyhow::{bail, Context};

use super::ConnectArgs;
use crate::client::{QuotaEntityParts, QuotaMatch};

/// Which entity a command acts on (or, for `list`, filters by).
#[derive(clap::Args, Debug, Clone)]
pub struct EntityArgs {
    /// The user (principal name, e.g. `alice` for `User:alice`).
    #[arg(long, conflicts_with = "user_default")]
    pub user: Option<String>,
    /// The default for every user (`<default>`).
    #[arg(long)]
    pub user_default: bool,
    /// The client id.
    #[arg(long, conflicts_with = "client_default")]
    pub client_id: Option<String>,
    /// The default for every client id (`<default>`).
    #[arg(long)]
    pub client_default: bool,
}

impl EntityArgs {
    /// (type, name or default) per component given.
    fn parts(&self) -> QuotaEntityParts {
        let mut out = Vec::new();
        if self.user.is_some() || self.user_default {
            out.push(("user".to_string(), self.user.clone()));
        }
        if self.client_id.is_some() || self.client_default {
            out.push(("client-id".to_string(), self.client_id.clone()));
        }
        out
    }

    fn entity(&self) -> anyhow::Result<QuotaEntityParts> {
        let parts = self.parts();
        if parts.is_empty() {
            bail!("name an entity: --user, --user-default, --client-id and/or --client-default");
        }
        Ok(parts)
    }
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum QuotaCommand {
    /// Set quota keys of an entity: producer_byte_rate, consumer_byte_rate (bytes/s),
    /// request_percentage (% of one handler thread), controller_mutation_rate.
    Set {
        #[command(flatten)]
        entity: EntityArgs,
        /// KEY=VALUE, repeatable (e.g. producer_byte_rate=1048576).
        #[arg(long = "config", required = true, value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Only check the change (the broker's validate_only).
        #[arg(long)]
        validate_only: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// List quotas: of the entities matching the given components (all when none).
    List {
        #[command(flatten)]
        entity: EntityArgs,
        /// Only entities with exactly the given components.
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Remove quota keys of an entity (every key it has when no --config is given).
    Remove {
        #[command(flatten)]
        entity: EntityArgs,
        /// KEY, repeatable.
        #[arg(long = "config", value_name = "KEY")]
        keys: Vec<String>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

/// `user=alice, client-id=<default>`, as kafka-configs names entities.
fn entity_name(parts: &[(String, Option<String>)]) -> String {
    parts
        .iter()
        .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("<default>")))
        .collect::<Vec<_>>()
        .join(", ")
}

fn parse_config(text: &str) -> anyhow::Result<(String, Option<f64>)> {
    let (key, value) = text
        .split_once('=')
        .with_context(|| format!("--config {text:?}: expected KEY=VALUE"))?;
    let value: f64 = value
        .trim()
        .parse()
        .with_context(|| format!("--config {text:?}: the value is not a number"))?;
    Ok((key.trim().to_string(), Some(value)))
}

pub(super) fn run(cmd: QuotaCommand) -> anyhow::Result<()> {
    match cmd {
        QuotaCommand::Set {
            entity,
            configs,
            validate_only,
            connect,
        } => {
            let parts = entity.entity()?;
            let ops = configs
                .iter()
                .map(|c| parse_config(c))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let mut client = connect.connect()?;
            client
                .alter_client_quotas(&parts, &ops, validate_only)
                .with_context(|| format!("setting quotas of {}", entity_name(&parts)))?;
            let verb = if validate_only { "validated" } else { "set" };
            for (k, v) in &ops {
                println!(
                    "{verb} {k}={} for {}",
                    v.unwrap_or(0.0),
                    entity_name(&parts)
                );
            }
            Ok(())
        }
        QuotaCommand::List {
            entity,
            strict,
            connect,
        } => {
            let filter: Vec<QuotaMatch> = entity
                .parts()
                .into_iter()
                .map(|(t, n)| (t, Some(n)))
                .collect();
            let mut client = connect.connect()?;
            let mut entries = client.describe_client_quotas(&filter, strict)?;
            entries.sort_by_key(|a| entity_name(&a.entity));
            let mut out = String::new();
            writeln!(out, "{:<40} {:<26} VALUE", "ENTITY", "KEY")?;
            for e in &entries {
                for (k, v) in &e.values {
                    writeln!(out, "{:<40} {k:<26} {v}", entity_name(&e.entity))?;
                }
            }
            print!("{out}");
            Ok(())
        }
        QuotaCommand::Remove {
            entity,
            keys,
            connect,
        } => {
            let parts = entity.entity()?;
            let mut client = connect.connect()?;
            let keys = if keys.is_empty() {
                let filter: Vec<QuotaMatch> = parts
                    .iter()
                    .map(|(t, n)| (t.clone(), Some(n.clone())))
                    .collect();
                client
                    .describe_client_quotas(&filter, true)?
                    .into_iter()
                    .flat_map(|e| e.values.into_iter().map(|(k, _)| k))
                    .collect()
            } else {
                keys
            };
            let ops: Vec<(String, Option<f64>)> = keys.iter().map(|k| (k.clone(), None)).collect();
            client
                .alter_client_quotas(&parts, &ops, false)
                .with_context(|| format!("removing quotas of {}", entity_name(&parts)))?;
            println!("removed {} from {}", keys.join(", "), entity_name(&parts));
            Ok(())
        }
    }
}
