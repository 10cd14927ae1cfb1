//! `strata group list|describe|delete|reset-offsets`.
//!
//! Works against any Kafka-compatible broker: the group's coordinator is found with
//! FindCoordinator, offsets are reset with a generation -1 OffsetCommit (which the coordinator
//! refuses while the group has members, and so does this command, first, with a clear error).

use std::fmt::Write as _;

use anyhow::{bail, Context};

use super::ConnectArgs;
use crate::client::{Client, CommittedOffset, OffsetSpec};

/// Manage consumer groups.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum GroupCommand {
    /// List groups: id, state, protocol type.
    List {
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Show a group's state, protocol and members, and per partition the committed offset,
    /// log end offset and lag.
    Describe {
        /// Group id.
        group: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Delete a group with no members, and its committed offsets.
    Delete {
        /// Group id.
        group: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Set a group's committed offsets (the group must have no active members).
    ResetOffsets {
        /// Group id.
        group: String,
        /// Only this topic (default: every topic the group has committed offsets for).
        #[arg(long)]
        topic: Option<String>,
        #[command(flatten)]
        target: ResetTarget,
        /// Print the plan without committing it.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

/// Where reset-offsets moves each partition; exactly one is required.
#[derive(clap::Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct ResetTarget {
    /// The log start offset.
    #[arg(long)]
    to_earliest: bool,
    /// The log end offset.
    #[arg(long)]
    to_latest: bool,
    /// This offset (clamped to the partition's [start, end]).
    #[arg(long, value_name = "N")]
    to_offset: Option<i64>,
    /// The first offset with a timestamp >= MS (milliseconds since the epoch); the end if none.
    #[arg(long, value_name = "MS")]
    to_datetime: Option<i64>,
}

pub(super) fn run(cmd: GroupCommand) -> anyhow::Result<()> {
    match cmd {
        GroupCommand::List { connect } => {
            let mut client = connect.connect()?;
            let groups = client.list_groups().context("listing groups")?;
            let mut out = String::new();
            for g in groups {
                writeln!(out, "{}\t{}\t{}", g.group_id, g.state, g.protocol_type)?;
            }
            print!("{out}");
            Ok(())
        }
        GroupCommand::Describe { group, connect } => {
            let mut client = connect.connect()?;
            print!("{}", describe(&mut client, &group)?);
            Ok(())
        }
        GroupCommand::Delete { group, connect } => {
            let mut client = connect.connect()?;
            client
                .delete_group(&group)
                .with_context(|| format!("deleting group {group:?}"))?;
            println!("deleted group {group}");
            Ok(())
        }
        GroupCommand::ResetOffsets {
            group,
            topic,
            target,
            dry_run,
            connect,
        } => {
            let mut client = connect.connect()?;
            reset_offsets(&mut client, &group, topic.as_deref(), &target, dry_run)
        }
    }
}

fn describe(client: &mut Client, group: &str) -> anyhow::Result<String> {
    let d = client
        .describe_group(group)
        .with_context(|| format!("describing group {group:?}"))?;
    let mut out = String::new();
    writeln!(out, "Group: {}", d.group_id)?;
    writeln!(out, "State: {}", d.state)?;
    writeln!(out, "Protocol type: {}", d.protocol_type)?;
    writeln!(out, "Protocol: {}", d.protocol)?;
    writeln!(out, "Members: {}", d.members.len())?;
    for m in &d.members {
        let assignment = if d.protocol_type == "consumer" {
            match m.consumer_assignment() {
                Some(a) => a
                    .iter()
                    .map(|(t, ps)| {
                        let ps: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
                        format!("{t}:{}", ps.join(","))
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
                None if m.assignment.is_empty() => "-".into(),
                None => format!("({} undecodable bytes)", m.assignment.len()),
            }
        } else {
            format!("({} bytes)", m.assignment.len())
        };
        writeln!(
            out,
            "  member={} instance={} client={} host={} assignment={}",
            m.member_id,
            m.group_instance_id.as_deref().unwrap_or("-"),
            m.client_id,
            m.client_host,
            assignment
        )?;
    }
    let offsets = client
        .group_offsets(group)
        .with_context(|| format!("fetching offsets of group {group:?}"))?;
    writeln!(out, "TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG")?;
    let mut topics: Vec<String> = offsets.iter().map(|o| o.topic.clone()).collect();
    topics.dedup();
    for topic in topics {
        let mine: Vec<&CommittedOffset> = offsets.iter().filter(|o| o.topic == topic).collect();
        let specs: Vec<(i32, OffsetSpec)> = mine
            .iter()
            .map(|o| (o.partition, OffsetSpec::Latest))
            .collect();
        let ends = client.list_offsets(&topic, &specs).ok();
        for o in mine {
            let end = ends
                .as_ref()
                .and_then(|e| e.iter().find(|(p, _)| *p == o.partition).map(|(_, e)| *e));
            let (end_s, lag_s) = match end {
                Some(e) if o.offset >= 0 => (e.to_string(), (e - o.offset).max(0).to_string()),
                Some(e) => (e.to_string(), "-".into()),
                None => ("-".into(), "-".into()),
            };
            writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}",
                o.topic, o.partition, o.offset, end_s, lag_s
            )?;
        }
    }
    Ok(out)
}

fn reset_offsets(
    client: &mut Client,
    group: &str,
    topic: Option<&str>,
    target: &ResetTarget,
    dry_run: bool,
) -> anyhow::Result<()> {
    let d = client
        .describe_group(group)
        .with_context(|| format!("describing group {group:?}"))?;
    if !d.members.is_empty() {
        bail!(
            "group {group:?} has {} active member(s) (state {}); stop its consumers before resetting offsets",
            d.members.len(),
            d.state
        );
    }
    let committed = client.group_offsets(group)?;
    let topics: Vec<String> = match topic {
        Some(t) => vec![t.to_string()],
        None => {
            let mut t: Vec<String> = committed.iter().map(|o| o.topic.clone()).collect();
            t.dedup();
            t
        }
    };
    if topics.is_empty() {
        bail!("group {group:?} has no committed offsets; name a topic with --topic");
    }
    let mut plan: Vec<(CommittedOffset, i64)> = Vec::new();
    for t in &topics {
        let info = client.topic(t)?;
        let parts: Vec<i32> = info.partitions.iter().map(|p| p.partition).collect();
        let at = |client: &mut Client, spec: OffsetSpec| {
            client.list_offsets(t, &parts.iter().map(|&p| (p, spec)).collect::<Vec<_>>())
        };
        let starts = at(client, OffsetSpec::Earliest)?;
        let ends = at(client, OffsetSpec::Latest)?;
        let by_time = match target.to_datetime {
            Some(ms) => Some(at(client, OffsetSpec::Timestamp(ms))?),
            None => None,
        };
        for &p in &parts {
            let find = |v: &[(i32, i64)]| v.iter().find(|(q, _)| *q == p).map(|(_, o)| *o);
            let start = find(&starts).unwrap_or(0);
            let end = find(&ends).unwrap_or(0);
            let new = if target.to_earliest {
                start
            } else if target.to_latest {
                end
            } else if let Some(n) = target.to_offset {
                n.clamp(start, end)
            } else {
                match by_time.as_deref().and_then(find) {
                    Some(o) if o >= 0 => o,
                    _ => end,
                }
            };
            let old = committed
                .iter()
                .find(|o| o.topic == *t && o.partition == p)
                .map(|o| o.offset)
                .unwrap_or(-1);
            plan.push((
                CommittedOffset {
                    topic: t.clone(),
                    partition: p,
                    offset: new,
                },
                old,
            ));
        }
    }
    let mut out = String::new();
    writeln!(out, "TOPIC\tPARTITION\tCURRENT\tNEW")?;
    for (o, old) in &plan {
        writeln!(out, "{}\t{}\t{}\t{}", o.topic, o.partition, old, o.offset)?;
    }
    print!("{out}");
    if dry_run {
        println!("(dry run: nothing committed)");
        return Ok(());
    }
    let offsets: Vec<CommittedOffset> = plan.into_iter().map(|(o, _)| o).collect();
    client
        .commit_group_offsets(group, &offsets)
        .with_context(|| format!("committing new offsets for group {group:?}"))?;
    println!("reset {} partition(s) of group {group}", offsets.len());
    Ok(())
}
