//! `strata txn list|describe|abort` and `strata producers describe`: finding and aborting
//! hanging transactions, as Kafka's `kafka-transactions.sh` does.
//!
//! A transaction hangs when a partition holds an open transaction no coordinator will end
//! (its producer id unknown to every coordinator, or its partition not in the
//! coordinator's transaction); it holds the partition's last stable offset back, so
//! `read_committed` consumers stop there. `strata producers describe` shows each producer's
//! open transaction's first offset; `strata txn abort --start-offset` finds the producer
//! whose transaction starts there and has the partition's leader write its ABORT marker.

use std::fmt::Write as _;

use anyhow::{bail, Context};

use super::ConnectArgs;
use crate::client::{Client, ProducerInfo, TxnInfo, TxnListing};

/// Inspect transactions and abort hanging ones.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum TxnCommand {
    /// List transactional ids: id, coordinator, producer id, state.
    List {
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Show a transactional id's state, producer, timeout, start time and partitions.
    Describe {
        /// Transactional id.
        transactional_id: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Abort the open transaction that starts at OFFSET on a partition (a hanging one: its
    /// producer is gone and no coordinator will end it).
    Abort {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        /// First offset of the transaction (see `strata producers describe`).
        #[arg(long, value_name = "OFFSET")]
        start_offset: i64,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

/// Inspect the producers a partition tracks.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum ProducersCommand {
    /// Each producer of a partition (on its leader): id, epoch, last sequence, last
    /// timestamp, coordinator epoch and its open transaction's first offset.
    Describe {
        topic: String,
        partition: i32,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

pub(super) fn run(cmd: TxnCommand) -> anyhow::Result<()> {
    match cmd {
        TxnCommand::List { connect } => {
            let mut client = connect.connect()?;
            let listed = client.list_transactions().context("listing transactions")?;
            print!("{}", list_table(&listed)?);
            Ok(())
        }
        TxnCommand::Describe {
            transactional_id,
            connect,
        } => {
            let mut client = connect.connect()?;
            let info = client
                .describe_transaction(&transactional_id)
                .with_context(|| format!("describing transactional id {transactional_id:?}"))?;
            print!("{}", describe_text(&info)?);
            Ok(())
        }
        TxnCommand::Abort {
            topic,
            partition,
            start_offset,
            connect,
        } => {
            let mut client = connect.connect()?;
            abort(&mut client, &topic, partition, start_offset)
        }
    }
}

pub(super) fn run_producers(cmd: ProducersCommand) -> anyhow::Result<()> {
    match cmd {
        ProducersCommand::Describe {
            topic,
            partition,
            connect,
        } => {
            let mut client = connect.connect()?;
            let producers = client
                .describe_producers(&topic, partition)
                .with_context(|| format!("describing the producers of {topic}-{partition}"))?;
            print!("{}", producers_table(&producers)?);
            Ok(())
        }
    }
}

fn abort(
    client: &mut Client,
    topic: &str,
    partition: i32,
    start_offset: i64,
) -> anyhow::Result<()> {
    let producers = client
        .describe_producers(topic, partition)
        .with_context(|| format!("describing the producers of {topic}-{partition}"))?;
    let Some(producer) = producer_at(&producers, start_offset) else {
        bail!("no open transaction starts at offset {start_offset} on {topic}-{partition}");
    };
    client
        .abort_transaction(topic, partition, producer)
        .with_context(|| format!("aborting the transaction at {start_offset}"))?;
    println!(
        "aborted the transaction of producer {} (epoch {}) starting at offset {start_offset} on {topic}-{partition}",
        producer.producer_id, producer.producer_epoch
    );
    Ok(())
}

/// The producer whose open transaction starts at `start_offset`.
fn producer_at(producers: &[ProducerInfo], start_offset: i64) -> Option<&ProducerInfo> {
    producers
        .iter()
        .find(|p| p.txn_start_offset >= 0 && p.txn_start_offset == start_offset)
}

fn list_table(listed: &[TxnListing]) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(out, "TRANSACTIONAL-ID\tCOORDINATOR\tPRODUCER-ID\tSTATE")?;
    for t in listed {
        writeln!(
            out,
            "{}\t{}\t{}\t{}",
            t.transactional_id, t.coordinator, t.producer_id, t.state
        )?;
    }
    Ok(out)
}

fn describe_text(t: &TxnInfo) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(out, "Transactional id: {}", t.transactional_id)?;
    writeln!(out, "Coordinator: {}", t.coordinator)?;
    writeln!(out, "State: {}", t.state)?;
    writeln!(
        out,
        "Producer: id {} epoch {}",
        t.producer_id, t.producer_epoch
    )?;
    writeln!(out, "Timeout ms: {}", t.timeout_ms)?;
    if t.start_time_ms >= 0 {
        writeln!(out, "Started ms: {}", t.start_time_ms)?;
    } else {
        writeln!(out, "Started ms: -")?;
    }
    let partitions: Vec<String> = t
        .partitions
        .iter()
        .map(|(topic, p)| format!("{topic}-{p}"))
        .collect();
    writeln!(
        out,
        "Partitions: {}",
        if partitions.is_empty() {
            "-".to_owned()
        } else {
            partitions.join(",")
        }
    )?;
    Ok(out)
}

fn producers_table(producers: &[ProducerInfo]) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "PRODUCER-ID\tEPOCH\tCOORDINATOR-EPOCH\tLAST-SEQUENCE\tLAST-TIMESTAMP\tTXN-START-OFFSET"
    )?;
    for p in producers {
        let start = if p.txn_start_offset >= 0 {
            p.txn_start_offset.to_string()
        } else {
            "-".to_owned()
        };
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}",
            p.producer_id,
            p.producer_epoch,
            p.coordinator_epoch,
            p.last_sequence,
            p.last_timestamp,
            start
        )?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn producer(id: i64, start: i64) -> ProducerInfo {
        ProducerInfo {
            producer_id: id,
            producer_epoch: 0,
            last_sequence: 3,
            last_timestamp: 1_700_000_000_000,
            coordinator_epoch: -1,
            txn_start_offset: start,
        }
    }

    /// Proves abort picks the producer whose open transaction starts exactly at the offset,
    /// and none when no transaction starts there (or the offset is -1, "no transaction").
    #[test]
    fn abort_finds_the_transaction_by_its_start_offset() {
        let ps = [producer(1, -1), producer(2, 10), producer(3, 12)];
        assert_eq!(producer_at(&ps, 10).map(|p| p.producer_id), Some(2));
        assert_eq!(producer_at(&ps, 12).map(|p| p.producer_id), Some(3));
        assert!(producer_at(&ps, 11).is_none());
        assert!(producer_at(&ps, -1).is_none());
    }

    /// Proves the producers table shows "-" for a producer with no open transaction.
    #[test]
    fn producers_table_marks_no_transaction() {
        let text = producers_table(&[producer(7, -1), producer(8, 42)]).expect("table");
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows[1], "7\t0\t-1\t3\t1700000000000\t-");
        assert_eq!(rows[2], "8\t0\t-1\t3\t1700000000000\t42");
    }
}
