//! `strata cluster status|reassign|elect`: the cluster's brokers and partition health,
//! partition reassignment, and leader elections — all over the Kafka protocol (Metadata,
//! ListPartitionReassignments, AlterPartitionReassignments, ElectLeaders), so they work
//! against any Kafka-compatible cluster.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::bail;
use serde_json::json;

use super::ConnectArgs;
use crate::client::{
    error_code_name, ClusterMetadata, OngoingReassignment, PartitionOutcome, ReassignmentTarget,
};

/// Kafka's ELECTION_NOT_NEEDED: the wanted leader leads already; not a failure.
const ELECTION_NOT_NEEDED: i16 = 84;

/// Inspect and operate the cluster.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum ClusterCommand {
    /// Brokers, the controller, and every partition's leader, replicas, ISR and reassignment.
    Status {
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Move a partition to new replicas, cancel a move, or list ongoing moves.
    Reassign(ReassignArgs),
    /// Elect leaders: the preferred replica (default), or --unclean for leaderless partitions.
    Elect {
        /// Only this topic (every partition of it unless --partition is given).
        #[arg(long)]
        topic: Option<String>,
        /// Only this partition of --topic.
        #[arg(long, requires = "topic", value_parser = clap::value_parser!(i32).range(0..))]
        partition: Option<i32>,
        /// Elect a leaderless partition's leader from outside the ISR. Acknowledged writes
        /// the new leader does not have are lost.
        #[arg(long)]
        unclean: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

/// `strata cluster reassign`: exactly one of --replicas, --cancel or --list.
#[derive(clap::Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("action").required(true).args(["replicas", "cancel", "list"])))]
pub struct ReassignArgs {
    /// Topic of the partition (with --list: only this topic).
    #[arg(long, required_unless_present = "list")]
    pub topic: Option<String>,
    /// Partition to reassign (with --list: only this partition).
    #[arg(long, required_unless_present = "list", value_parser = clap::value_parser!(i32).range(0..))]
    pub partition: Option<i32>,
    /// Target replicas, preferred leader first: broker ids separated by commas.
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "ID,ID,...")]
    pub replicas: Vec<i32>,
    /// Cancel the partition's ongoing reassignment (back to its original replicas).
    #[arg(long)]
    pub cancel: bool,
    /// List ongoing reassignments.
    #[arg(long)]
    pub list: bool,
    #[command(flatten)]
    pub connect: ConnectArgs,
}

pub(super) fn run(cmd: ClusterCommand) -> anyhow::Result<()> {
    match cmd {
        ClusterCommand::Status { json, connect } => {
            let mut client = connect.connect()?;
            let metadata = client.metadata(None)?;
            let reassignments = client.list_partition_reassignments(None);
            if json {
                println!("{}", status_json(&metadata, reassignments.as_deref().ok()));
            } else {
                print!("{}", status_text(&metadata, reassignments));
            }
        }
        ClusterCommand::Reassign(args) => reassign(args)?,
        ClusterCommand::Elect {
            topic,
            partition,
            unclean,
            connect,
        } => {
            let mut client = connect.connect()?;
            let partitions = match (topic, partition) {
                (Some(t), Some(p)) => Some(vec![(t, p)]),
                (Some(t), None) => {
                    let info = client.refresh_topic(&t)?;
                    Some(
                        info.partitions
                            .iter()
                            .map(|p| (t.clone(), p.partition))
                            .collect(),
                    )
                }
                (None, _) => None,
            };
            let outcomes = client.elect_leaders(partitions.as_deref(), unclean)?;
            if outcomes.is_empty() {
                println!("no election was needed");
            }
            report(&outcomes, "leader elected")?;
        }
    }
    Ok(())
}

fn reassign(args: ReassignArgs) -> anyhow::Result<()> {
    let mut client = args.connect.connect()?;
    if args.list {
        let listed = client.list_partition_reassignments(None)?;
        let shown: Vec<&OngoingReassignment> = listed
            .iter()
            .filter(|r| args.topic.as_ref().is_none_or(|t| *t == r.topic))
            .filter(|r| args.partition.is_none_or(|p| p == r.partition))
            .collect();
        if shown.is_empty() {
            println!("no reassignment in progress");
            return Ok(());
        }
        let rows = shown
            .iter()
            .map(|r| {
                vec![
                    r.topic.clone(),
                    r.partition.to_string(),
                    join(&r.replicas),
                    join(&r.adding),
                    join(&r.removing),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                &["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
                rows
            )
        );
        return Ok(());
    }
    // clap guarantees --topic and --partition outside --list.
    let (Some(topic), Some(partition)) = (args.topic, args.partition) else {
        bail!("--topic and --partition are required");
    };
    let replicas = (!args.cancel).then_some(args.replicas);
    let done = match &replicas {
        Some(r) => format!("reassignment to [{}] accepted", join(r)),
        None => "reassignment cancelled".to_owned(),
    };
    let outcomes = client.alter_partition_reassignments(&[ReassignmentTarget {
        topic,
        partition,
        replicas,
    }])?;
    report(&outcomes, &done)
}

/// Prints one line per partition; fails if any partition failed (ELECTION_NOT_NEEDED is
/// not a failure: the cluster is already as asked).
fn report(outcomes: &[PartitionOutcome], done: &str) -> anyhow::Result<()> {
    let mut failed = 0;
    for o in outcomes {
        let what = match o.error_code {
            0 => done.to_owned(),
            code => {
                if code != ELECTION_NOT_NEEDED {
                    failed += 1;
                }
                match &o.message {
                    Some(m) => format!("{}: {m}", error_code_name(code)),
                    None => error_code_name(code),
                }
            }
        };
        println!("{}-{}: {what}", o.topic, o.partition);
    }
    if failed > 0 {
        bail!("{failed} of {} partition(s) failed", outcomes.len());
    }
    Ok(())
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// Whether fewer replicas are in sync than assigned.
fn under_replicated(replicas: &[i32], isr: &[i32]) -> bool {
    isr.len() < replicas.len()
}

/// A partition's health word for the table.
fn health(leader: i32, replicas: &[i32], isr: &[i32]) -> &'static str {
    if leader < 0 {
        "OFFLINE"
    } else if under_replicated(replicas, isr) {
        "UNDER-REPLICATED"
    } else {
        "ok"
    }
}

/// Left-aligned columns, two spaces apart.
fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

type ReassignmentIndex<'a> = BTreeMap<(&'a str, i32), &'a OngoingReassignment>;

fn index(reassignments: &[OngoingReassignment]) -> ReassignmentIndex<'_> {
    reassignments
        .iter()
        .map(|r| ((r.topic.as_str(), r.partition), r))
        .collect()
}

fn status_text(
    metadata: &ClusterMetadata,
    reassignments: crate::client::Result<Vec<OngoingReassignment>>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Cluster: {}  Controller: {}",
        metadata.cluster_id.as_deref().unwrap_or("-"),
        metadata.controller_id
    );
    let _ = writeln!(out, "\nBrokers:");
    let brokers = metadata
        .brokers
        .values()
        .map(|b| {
            vec![
                b.node_id.to_string(),
                b.addr(),
                b.rack.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    out.push_str(&table(&["ID", "HOST:PORT", "RACK"], brokers));
    let ongoing = reassignments.as_deref().map(index).unwrap_or_default();
    let mut rows = Vec::new();
    let mut under = 0;
    let mut offline_reasons = Vec::new();
    for t in &metadata.topics {
        for p in &t.partitions {
            if under_replicated(&p.replicas, &p.isr) {
                under += 1;
            }
            for (node, reason) in &p.offline_reasons {
                offline_reasons.push(format!(
                    "{}-{} on broker {node}: {reason}",
                    t.name, p.partition
                ));
            }
            let moving = ongoing
                .get(&(t.name.as_str(), p.partition))
                .map_or("-".to_owned(), |r| {
                    format!("+[{}] -[{}]", join(&r.adding), join(&r.removing))
                });
            let or_dash = |ids: &[i32]| {
                if ids.is_empty() {
                    "-".to_owned()
                } else {
                    join(ids)
                }
            };
            rows.push(vec![
                t.name.clone(),
                p.partition.to_string(),
                p.leader.to_string(),
                or_dash(&p.replicas),
                or_dash(&p.isr),
                or_dash(&p.offline_replicas),
                moving,
                health(p.leader, &p.replicas, &p.isr).to_owned(),
            ]);
        }
    }
    let _ = writeln!(out, "\nPartitions:");
    out.push_str(&table(
        &[
            "TOPIC",
            "PARTITION",
            "LEADER",
            "REPLICAS",
            "ISR",
            "OFFLINE",
            "REASSIGNING",
            "STATUS",
        ],
        rows,
    ));
    let _ = writeln!(out, "\nUnder-replicated partitions: {under}");
    if !offline_reasons.is_empty() {
        let _ = writeln!(
            out,
            "\nOffline replicas (KAFKA_STORAGE_ERROR until the broker restarts):"
        );
        for line in offline_reasons {
            let _ = writeln!(out, "  {line}");
        }
    }
    if let Err(e) = reassignments {
        let _ = writeln!(out, "Reassignments: unavailable ({e})");
    }
    out
}

fn status_json(
    metadata: &ClusterMetadata,
    reassignments: Option<&[OngoingReassignment]>,
) -> serde_json::Value {
    let ongoing = reassignments.map(index).unwrap_or_default();
    let brokers: Vec<_> = metadata
        .brokers
        .values()
        .map(|b| json!({"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}))
        .collect();
    let partitions: Vec<_> = metadata
        .topics
        .iter()
        .flat_map(|t| {
            let ongoing = &ongoing;
            t.partitions.iter().map(move |p| {
                let reassignment = ongoing.get(&(t.name.as_str(), p.partition)).map(
                    |r| json!({"replicas": r.replicas, "adding": r.adding, "removing": r.removing}),
                );
                json!({
                    "topic": t.name,
                    "partition": p.partition,
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "replicas": p.replicas,
                    "isr": p.isr,
                    "offline_replicas": p.offline_replicas,
                    "offline_reasons": p.offline_reasons,
                    "under_replicated": under_replicated(&p.replicas, &p.isr),
                    "reassignment": reassignment,
                })
            })
        })
        .collect();
    json!({
        "cluster_id": metadata.cluster_id,
        "controller_id": metadata.controller_id,
        "brokers": brokers,
        "partitions": partitions,
        "reassignments_available": reassignments.is_some(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use clap::Parser;

    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: ClusterCommand,
    }

    fn parse(args: &[&str]) -> Result<ClusterCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("cluster").chain(args.iter().copied()))
            .map(|c| c.command)
    }

    /// `status` takes --bootstrap and --json.
    #[test]
    fn status_parses() {
        let cmd = parse(&["status", "--bootstrap", "h:1", "--json"]).unwrap();
        let ClusterCommand::Status { json, connect } = cmd else {
            panic!("not status")
        };
        assert!(json);
        assert_eq!(connect.bootstrap, "h:1");
    }

    /// `reassign` needs exactly one of --replicas/--cancel/--list, and a partition unless
    /// listing; --replicas splits on commas.
    #[test]
    fn reassign_parses_one_action() {
        let cmd = parse(&[
            "reassign",
            "--topic",
            "t",
            "--partition",
            "2",
            "--replicas",
            "3,1,2",
        ])
        .unwrap();
        let ClusterCommand::Reassign(a) = cmd else {
            panic!("not reassign")
        };
        assert_eq!(
            (a.topic.as_deref(), a.partition, a.replicas, a.cancel),
            (Some("t"), Some(2), vec![3, 1, 2], false)
        );
        let cancel = parse(&["reassign", "--topic", "t", "--partition", "0", "--cancel"]).unwrap();
        assert!(matches!(
            cancel,
            ClusterCommand::Reassign(ReassignArgs { cancel: true, .. })
        ));
        assert!(matches!(
            parse(&["reassign", "--list"]).unwrap(),
            ClusterCommand::Reassign(ReassignArgs { list: true, .. })
        ));
        for bad in [
            &["reassign", "--topic", "t", "--partition", "0"][..],
            &["reassign", "--topic", "t", "--replicas", "1"],
            &["reassign", "--partition", "0", "--replicas", "1"],
            &[
                "reassign",
                "--topic",
                "t",
                "--partition",
                "0",
                "--replicas",
                "1",
                "--cancel",
            ],
            &["reassign", "--list", "--cancel"],
            &["reassign", "--topic", "t", "--partition", "-1", "--cancel"],
            &[
                "reassign",
                "--topic",
                "t",
                "--partition",
                "0",
                "--replicas",
                "a",
            ],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    /// `elect` is preferred by default, takes --unclean, and --partition needs --topic.
    #[test]
    fn elect_parses() {
        let ClusterCommand::Elect {
            topic,
            partition,
            unclean,
            ..
        } = parse(&["elect"]).unwrap()
        else {
            panic!("not elect")
        };
        assert_eq!((topic, partition, unclean), (None, None, false));
        let ClusterCommand::Elect {
            topic,
            partition,
            unclean,
            ..
        } = parse(&["elect", "--topic", "t", "--partition", "1", "--unclean"]).unwrap()
        else {
            panic!("not elect")
        };
        assert_eq!(
            (topic.as_deref(), partition, unclean),
            (Some("t"), Some(1), true)
        );
        assert!(parse(&["elect", "--partition", "1"]).is_err());
    }

    /// A partition is under-replicated when fewer replicas are in sync than assigned, and
    /// offline without a leader.
    #[test]
    fn health_flags() {
        let cases = [
            (1, &[1, 2, 3][..], &[1, 2, 3][..], "ok"),
            (1, &[1, 2, 3], &[1, 2], "UNDER-REPLICATED"),
            (-1, &[1, 2, 3], &[1], "OFFLINE"),
        ];
        for (leader, replicas, isr, want) in cases {
            assert_eq!(health(leader, replicas, isr), want);
        }
    }

    /// Columns are padded to their widest cell and trailing space is trimmed.
    #[test]
    fn table_aligns_columns() {
        let t = table(&["A", "BB"], vec![vec!["xyz".into(), "1".into()]]);
        assert_eq!(t, "A    BB\nxyz  1\n");
    }
}
