//! `strata log dump`: prints the records stored in one partition directory, or in one
//! segment file, read straight from the files (like Kafka's kafka-dump-log.sh). It needs no
//! running broker, so tests can compare replicas byte for byte after a cluster is stopped.
//! `--keys` prints only each record's offset and key (and whether it is a tombstone): what
//! the cleaner keeps of a compacted log is visible at a glance.
use std::path::{Path, PathBuf};

use anyhow::Context;
use base64::Engine;
use bytes::Bytes;

use crate::protocol::record_batch::BatchIter;

#[derive(clap::Args, Debug)]
pub struct LogDumpArgs {
    /// A partition directory, `<data-dir>/<topic>-<partition>`, or one of its segment
    /// files (`<base offset>.log`).
    #[arg(long, value_name = "PATH")]
    pub dir: PathBuf,
    /// One JSON object per record: offset, leader_epoch, key and value (base64 or null).
    #[arg(long)]
    pub json: bool,
    /// Only each record's offset and key, and `tombstone` for a null value (with --json:
    /// offset, key and tombstone).
    #[arg(long)]
    pub keys: bool,
    /// One line per batch instead of per record (with --json, one object): its offsets,
    /// producer fields, transactional and control bits, record count, delete horizon, and
    /// for a transaction marker its outcome. What the cleaner kept of a transactional log.
    #[arg(long, conflicts_with = "keys")]
    pub batches: bool,
}

#[derive(clap::Subcommand, Debug)]
pub enum LogCommand {
    /// Print every record of a partition directory's segments.
    Dump(LogDumpArgs),
}

pub fn run(cmd: LogCommand) -> anyhow::Result<()> {
    match cmd {
        LogCommand::Dump(args) => dump(&args),
    }
}

fn segment_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if dir.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    // Segment names are zero-padded base offsets, so name order is offset order.
    files.sort();
    Ok(files)
}

fn dump(args: &LogDumpArgs) -> anyhow::Result<()> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let printable = |b: &Option<Bytes>| {
        b.as_ref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_else(|| "null".into())
    };
    let text = |b: &Option<Bytes>| match b {
        None => serde_json::Value::Null,
        Some(b) => serde_json::Value::String(b64.encode(b)),
    };
    for file in segment_files(&args.dir)? {
        let data = Bytes::from(
            std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?,
        );
        // Stop at the first batch that does not parse: preallocated zeroes or a torn tail,
        // which recovery would cut off too.
        for item in BatchIter::new(&data) {
            let Ok((at, header)) = item else { break };
            let batch = data.slice(at..at + header.total_len());
            if args.batches {
                print_batch(&header, &batch, args.json);
                continue;
            }
            let (records, _) =
                crate::client::records::decode_batches(&batch, 0).with_context(|| {
                    format!("decoding the batch at byte {at} of {}", file.display())
                })?;
            for r in records {
                if args.keys && args.json {
                    println!(
                        "{}",
                        serde_json::json!({
                            "offset": r.offset,
                            "key": text(&r.key),
                            "tombstone": r.value.is_none(),
                        })
                    );
                } else if args.keys {
                    println!(
                        "offset {} key {}{}",
                        r.offset,
                        printable(&r.key),
                        if r.value.is_none() { " tombstone" } else { "" }
                    );
                } else if args.json {
                    println!(
                        "{}",
                        serde_json::json!({
                            "offset": r.offset,
                            "leader_epoch": header.partition_leader_epoch,
                            "key": text(&r.key),
                            "value": text(&r.value),
                        })
                    );
                } else {
                    println!(
                        "offset {} epoch {} key {} value {}",
                        r.offset,
                        header.partition_leader_epoch,
                        printable(&r.key),
                        printable(&r.value),
                    );
                }
            }
        }
    }
    Ok(())
}

/// One line of `--batches`.
fn print_batch(header: &crate::protocol::record_batch::BatchHeader, batch: &[u8], json: bool) {
    use crate::protocol::control::{parse_end_txn_marker, TxnOutcome};
    let marker = match parse_end_txn_marker(batch) {
        Ok(Some(m)) if m.outcome == TxnOutcome::Commit => Some("COMMIT"),
        Ok(Some(_)) => Some("ABORT"),
        _ => None,
    };
    let horizon = header.delete_horizon_ms();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "base_offset": header.base_offset,
                "last_offset": header.last_offset(),
                "producer_id": header.producer_id,
                "producer_epoch": header.producer_epoch,
                "base_sequence": header.base_sequence,
                "transactional": header.is_transactional(),
                "control": header.is_control(),
                "records": header.records_count,
                "delete_horizon_ms": horizon,
                "marker": marker,
            })
        );
    } else {
        println!(
            "batch {}..{} producer {} epoch {} sequence {} records {}{}{}{}{}",
            header.base_offset,
            header.last_offset(),
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.records_count,
            if header.is_transactional() {
                " transactional"
            } else {
                ""
            },
            if header.is_control() { " control" } else { "" },
            marker.map(|m| format!(" {m}")).unwrap_or_default(),
            horizon
                .map(|h| format!(" delete-horizon {h}"))
                .unwrap_or_default(),
        );
    }
}
