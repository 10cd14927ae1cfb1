//! `strata topic create|list|describe|delete|alter`.

use std::fmt::Write as _;

use anyhow::{bail, Context};

use super::{parse_key_value, ConnectArgs};
use crate::client::{Client, ConfigSource, OffsetSpec, TopicInfo};

/// Manage topics.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        /// Topic name.
        name: String,
        /// Number of partitions.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..))]
        partitions: i32,
        /// Replicas per partition.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i16).range(1..))]
        replication_factor: i16,
        /// Topic config KEY=VALUE (Kafka names, e.g. retention.ms=86400000); repeatable.
        #[arg(long, value_name = "KEY=VALUE", value_parser = parse_key_value)]
        config: Vec<(String, String)>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// List topic names, one per line.
    List {
        /// Also list internal topics (`__consumer_offsets`, ...).
        #[arg(long)]
        internal: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Show a topic's partitions (leader, replicas, ISR, log start/end offsets) and configs.
    Describe {
        /// Topic name.
        name: String,
        /// Print every config, not only those set on the topic.
        #[arg(long)]
        all_configs: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Delete a topic and all its data.
    Delete {
        /// Topic name.
        name: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Add partitions or change configs of a topic.
    Alter {
        /// Topic name.
        name: String,
        /// New total number of partitions (can only grow).
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        partitions: Option<i32>,
        /// Set topic config KEY=VALUE; repeatable.
        #[arg(long, value_name = "KEY=VALUE", value_parser = parse_key_value)]
        config: Vec<(String, String)>,
        /// Remove a topic config override (back to the broker default); repeatable.
        #[arg(long, value_name = "KEY")]
        delete_config: Vec<String>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

/// How long `topic create` waits for the new topic's leaders before it returns anyway.
const TOPIC_CREATE_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

pub(super) fn run(cmd: TopicCommand) -> anyhow::Result<()> {
    match cmd {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            config,
            connect,
        } => {
            let mut client = connect.connect()?;
            client.create_topic(&name, partitions, replication_factor, &config)?;
            // The next command (produce, cluster status, ...) should find the topic served.
            // The topic exists either way: a partition without a leader for now (a replica
            // offline, brokers down) is said, not an error.
            if let Err(e) = client.wait_until_led(&name, TOPIC_CREATE_READY_WAIT) {
                eprintln!("note: {e}");
            }
            eprintln!(
                "created topic {name} ({partitions} partition{}, replication factor {replication_factor})",
                if partitions == 1 { "" } else { "s" }
            );
        }
        TopicCommand::List { internal, connect } => {
            let mut client = connect.connect()?;
            for topic in client.list_topics()? {
                if internal || !topic.is_internal {
                    println!("{}", topic.name);
                }
            }
        }
        TopicCommand::Describe {
            name,
            all_configs,
            connect,
        } => {
            let mut client = connect.connect()?;
            print!("{}", describe(&mut client, &name, all_configs)?);
        }
        TopicCommand::Delete { name, connect } => {
            let mut client = connect.connect()?;
            client.delete_topic(&name)?;
            eprintln!("deleted topic {name}");
        }
        TopicCommand::Alter {
            name,
            partitions,
            config,
            delete_config,
            connect,
        } => {
            if partitions.is_none() && config.is_empty() && delete_config.is_empty() {
                bail!("nothing to alter: give --partitions, --config or --delete-config");
            }
            let mut client = connect.connect()?;
            if let Some(count) = partitions {
                client
                    .create_partitions(&name, count)
                    .with_context(|| format!("growing {name} to {count} partitions"))?;
                eprintln!("topic {name} now has {count} partitions");
            }
            if !config.is_empty() || !delete_config.is_empty() {
                client.alter_topic_configs(&name, &config, &delete_config)?;
                eprintln!(
                    "topic {name}: set {} config(s), removed {}",
                    config.len(),
                    delete_config.len()
                );
            }
        }
    }
    Ok(())
}

/// Whether a config was set on the topic rather than inherited. Kafka reports topic overrides
/// as DYNAMIC_TOPIC_CONFIG; some compatible brokers report UNKNOWN, so only sources that are
/// certainly inherited are hidden.
fn is_topic_override(source: ConfigSource) -> bool {
    !matches!(
        source,
        ConfigSource::Default
            | ConfigSource::StaticBroker
            | ConfigSource::DynamicBroker
            | ConfigSource::DynamicDefaultBroker
    )
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// The text of `topic describe`. Configs and offsets are best effort: a broker that lacks
/// DescribeConfigs or ListOffsets still gets its partitions described.
fn describe(client: &mut Client, name: &str, all_configs: bool) -> anyhow::Result<String> {
    let info: TopicInfo = client.refresh_topic(name)?;
    let replication = info.partitions.first().map_or(0, |p| p.replicas.len());
    let mut out = String::new();
    writeln!(
        out,
        "Topic: {}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {}",
        info.name,
        info.topic_id,
        info.partitions.len(),
        replication
    )?;
    match client.describe_topic_configs(name) {
        Ok(configs) => {
            let shown: Vec<String> = configs
                .iter()
                .filter(|c| all_configs || is_topic_override(c.source))
                .map(|c| {
                    let value = if c.sensitive {
                        "(sensitive)"
                    } else {
                        c.value.as_deref().unwrap_or("(null)")
                    };
                    if all_configs {
                        format!("{}={} ({:?})", c.name, value, c.source)
                    } else {
                        format!("{}={}", c.name, value)
                    }
                })
                .collect();
            writeln!(out, "Configs: {}", shown.join(","))?;
        }
        Err(e) => writeln!(out, "Configs: (unavailable: {e})")?,
    }
    let partitions: Vec<i32> = info.partitions.iter().map(|p| p.partition).collect();
    let offsets = |client: &mut Client, spec| {
        client.list_offsets(
            name,
            &partitions.iter().map(|&p| (p, spec)).collect::<Vec<_>>(),
        )
    };
    let starts = offsets(client, OffsetSpec::Earliest);
    let ends = offsets(client, OffsetSpec::Latest);
    let lookup = |r: &Result<Vec<(i32, i64)>, _>, p: i32| -> String {
        match r {
            Ok(v) => v
                .iter()
                .find(|(q, _)| *q == p)
                .map_or("?".to_owned(), |(_, o)| o.to_string()),
            Err(_) => "?".to_owned(),
        }
    };
    // Compacted logs only; a broker without DescribeLogDirs just shows none.
    let cleaner = client
        .describe_cleaner(name, &partitions)
        .unwrap_or_default();
    for p in &info.partitions {
        let cleaner_text =
            cleaner
                .iter()
                .find(|c| c.partition == p.partition)
                .map_or(String::new(), |c| {
                    format!(
                        "\tDirtyRatio: {:.3}\tCleanerCheckpoint: {}",
                        c.dirty_ratio,
                        c.checkpoint.map_or("none".to_owned(), |o| o.to_string())
                    )
                });
        writeln!(
            out,
            "\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}\tLogStartOffset: {}\tLogEndOffset: {}{}{}",
            p.partition,
            p.leader,
            join(&p.replicas),
            join(&p.isr),
            lookup(&starts, p.partition),
            lookup(&ends, p.partition),
            cleaner_text,
            if p.offline_replicas.is_empty() {
                String::new()
            } else {
                format!("\tOffline: {}", join(&p.offline_replicas))
            }
        )?;
    }
    if let Err(e) = starts.as_ref().and(ends.as_ref()) {
        writeln!(out, "(offsets unavailable: {e})")?;
    }
    Ok(out)
}
