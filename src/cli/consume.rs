//! `strata consume`: read records from one or all partitions of a topic and print them.
//!
//! Stops at the end of the log (the high watermark each partition had at its last fetch) unless
//! `--follow` or `--timeout-ms` is given; `--count` stops after that many records.

use std::io::{BufWriter, Write};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::{is_broken_pipe, ConnectArgs};
use crate::client::error::error_code_is_retriable;
use crate::client::{Client, ConsumedRecord, FetchOptions, OffsetSpec};

/// Kafka's OFFSET_OUT_OF_RANGE.
const OFFSET_OUT_OF_RANGE: i16 = 1;
/// How long one fetch may wait at the broker for new data when following.
const FOLLOW_WAIT_MS_MAX: u64 = 500;
/// How long one fetch waits when reading to the end of the log.
const DRAIN_WAIT_MS: i32 = 100;
/// Pause after a retriable partition error before fetching again.
const RETRY_BACKOFF: Duration = Duration::from_millis(200);
/// Consecutive fetch rounds with a retriable error before giving up (~10 s of backoff).
const ERROR_ROUNDS_MAX: u32 = 50;
/// Consecutive fetch rounds that make no progress while some partition is still below its
/// high watermark before a drain (no --follow) stops with a warning rather than spinning.
const STALL_ROUNDS_MAX: u32 = 50;

/// Where to start reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    Earliest,
    Latest,
    Offset(i64),
    /// First record at or after this many ms since the epoch.
    Timestamp(i64),
}

impl FromStr for StartFrom {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("expected earliest, latest, OFFSET or @TIMESTAMP_MS, got {s:?}");
        match s {
            "earliest" => Ok(StartFrom::Earliest),
            "latest" => Ok(StartFrom::Latest),
            _ => {
                if let Some(ts) = s.strip_prefix('@') {
                    ts.parse::<i64>()
                        .ok()
                        .filter(|t| *t >= 0)
                        .map(StartFrom::Timestamp)
                        .ok_or_else(bad)
                } else {
                    s.parse::<i64>()
                        .ok()
                        .filter(|o| *o >= 0)
                        .map(StartFrom::Offset)
                        .ok_or_else(bad)
                }
            }
        }
    }
}

/// `--format`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// The value, one record per line (with --print-key: key, TAB, value).
    Plain,
    /// One JSON object per line: topic, partition, offset, timestamp, key, value, headers.
    Json,
}

/// Read records from a topic and print them to stdout.
#[derive(clap::Args, Debug, Clone)]
pub struct ConsumeArgs {
    /// Topic to read.
    #[arg(long)]
    pub topic: String,
    /// Read only this partition (default: all).
    #[arg(long)]
    pub partition: Option<i32>,
    /// Start position: earliest, latest, an offset, or @TIMESTAMP_MS.
    #[arg(long, default_value = "earliest", value_parser = StartFrom::from_str)]
    pub from: StartFrom,
    /// Stop after this many records.
    #[arg(long)]
    pub count: Option<u64>,
    /// Keep reading, and exit once no record has arrived for this many ms (also with --follow).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Keep reading new records forever (until Ctrl-C or --count). Without --follow or
    /// --timeout-ms, consume exits at the end of the log.
    #[arg(long)]
    pub follow: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "plain")]
    pub format: OutputFormat,
    /// In plain format, print the key and a TAB before each value.
    #[arg(long)]
    pub print_key: bool,
    #[command(flatten)]
    pub connect: ConnectArgs,
}

fn lossy(b: &Option<bytes::Bytes>) -> Option<String> {
    b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())
}

/// One `--format json` line; field order is the documented one (serde keeps struct order).
#[derive(serde::Serialize)]
struct JsonRecord<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
    timestamp: i64,
    key: Option<String>,
    value: Option<String>,
    headers: Vec<JsonHeader<'a>>,
}

#[derive(serde::Serialize)]
struct JsonHeader<'a> {
    key: &'a str,
    value: Option<String>,
}

/// One record as the JSON output line (without the newline).
pub(crate) fn record_json(topic: &str, partition: i32, r: &ConsumedRecord) -> String {
    let record = JsonRecord {
        topic,
        partition,
        offset: r.offset,
        timestamp: r.timestamp_ms,
        key: lossy(&r.key),
        value: lossy(&r.value),
        headers: r
            .headers
            .iter()
            .map(|(k, v)| JsonHeader {
                key: k,
                value: lossy(v),
            })
            .collect(),
    };
    // Serializing plain strings and integers cannot fail; fall back to an empty object anyway
    // rather than panicking.
    serde_json::to_string(&record).unwrap_or_else(|_| "{}".to_owned())
}

struct Position {
    partition: i32,
    offset: i64,
    /// High watermark at the last fetch; `None` before the first.
    high_watermark: Option<i64>,
}

fn resolve_start(
    client: &mut Client,
    topic: &str,
    partitions: &[i32],
    from: StartFrom,
) -> anyhow::Result<Vec<Position>> {
    let spec = match from {
        StartFrom::Offset(o) => {
            return Ok(partitions
                .iter()
                .map(|&partition| Position {
                    partition,
                    offset: o,
                    high_watermark: None,
                })
                .collect())
        }
        StartFrom::Earliest => OffsetSpec::Earliest,
        StartFrom::Latest => OffsetSpec::Latest,
        StartFrom::Timestamp(ts) => OffsetSpec::Timestamp(ts),
    };
    let specs: Vec<_> = partitions.iter().map(|&p| (p, spec)).collect();
    let found = client.list_offsets(topic, &specs)?;
    // A timestamp after every record yields -1: start at the end, where such records will go.
    let missing: Vec<_> = found
        .iter()
        .filter(|(_, o)| *o < 0)
        .map(|&(p, _)| (p, OffsetSpec::Latest))
        .collect();
    let ends = if missing.is_empty() {
        Vec::new()
    } else {
        client.list_offsets(topic, &missing)?
    };
    Ok(found
        .into_iter()
        .map(|(partition, offset)| Position {
            partition,
            offset: if offset < 0 {
                ends.iter()
                    .find(|(p, _)| *p == partition)
                    .map_or(0, |(_, o)| *o)
            } else {
                offset
            },
            high_watermark: None,
        })
        .collect())
}

pub(super) fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    let mut client = args.connect.connect()?;
    let info = client.topic(&args.topic)?;
    let partitions: Vec<i32> = match args.partition {
        Some(p) => {
            if !info.partitions.iter().any(|q| q.partition == p) {
                bail!(
                    "topic {} has no partition {p} (it has {})",
                    args.topic,
                    info.partitions.len()
                );
            }
            vec![p]
        }
        None => info.partitions.iter().map(|p| p.partition).collect(),
    };
    let mut positions = resolve_start(&mut client, &args.topic, &partitions, args.from)?;
    let keep_going = args.follow || args.timeout_ms.is_some();
    let options = FetchOptions {
        max_wait_ms: if keep_going {
            let wait = args
                .timeout_ms
                .unwrap_or(FOLLOW_WAIT_MS_MAX)
                .min(FOLLOW_WAIT_MS_MAX);
            i32::try_from(wait).unwrap_or(DRAIN_WAIT_MS)
        } else {
            DRAIN_WAIT_MS
        },
        ..FetchOptions::default()
    };
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut printed: u64 = 0;
    let mut last_data = Instant::now();
    let mut error_rounds = 0u32;
    let mut stall_rounds = 0u32;
    loop {
        if args.count.is_some_and(|c| printed >= c) {
            break;
        }
        let wanted: Vec<(i32, i64)> = positions.iter().map(|p| (p.partition, p.offset)).collect();
        let fetched = client.fetch(&args.topic, &wanted, options)?;
        let before: Vec<i64> = positions.iter().map(|p| p.offset).collect();
        let mut got_data = false;
        let mut backoff = false;
        let mut last_code = 0i16;
        for f in fetched {
            let Some(pos) = positions.iter_mut().find(|p| p.partition == f.partition) else {
                continue;
            };
            if f.error_code == OFFSET_OUT_OF_RANGE {
                // Our position fell off the log (retention) or is past its end: restart at the
                // nearest valid end, as Kafka's auto.offset.reset would.
                let bounds = client.list_offsets(
                    &args.topic,
                    &[
                        (pos.partition, OffsetSpec::Earliest),
                        (pos.partition, OffsetSpec::Latest),
                    ],
                )?;
                let lo = bounds.iter().map(|b| b.1).min().unwrap_or(0);
                let hi = bounds.iter().map(|b| b.1).max().unwrap_or(0);
                let reset = if pos.offset < lo { lo } else { hi };
                eprintln!(
                    "warning: offset {} of {}-{} is out of range [{lo}, {hi}]; moving to {reset}",
                    pos.offset, args.topic, pos.partition
                );
                pos.offset = reset;
                continue;
            }
            if f.error_code != 0 {
                if error_code_is_retriable(f.error_code) {
                    backoff = true;
                    last_code = f.error_code;
                    continue;
                }
                return Err(crate::client::ClientError::Broker {
                    context: format!("fetch {}-{}", args.topic, f.partition),
                    code: f.error_code,
                    message: None,
                }
                .into());
            }
            pos.high_watermark = Some(f.high_watermark);
            for r in &f.records {
                if args.count.is_some_and(|c| printed >= c) {
                    break;
                }
                let line = match args.format {
                    OutputFormat::Json => record_json(&args.topic, f.partition, r),
                    OutputFormat::Plain => {
                        let value = lossy(&r.value).unwrap_or_default();
                        if args.print_key {
                            format!("{}\t{value}", lossy(&r.key).unwrap_or_default())
                        } else {
                            value
                        }
                    }
                };
                if let Err(e) = writeln!(out, "{line}") {
                    return if is_broken_pipe(&e) {
                        Ok(())
                    } else {
                        Err(e.into())
                    };
                }
                printed += 1;
                pos.offset = r.offset + 1;
                got_data = true;
            }
            // Skip past batches that held only control records or records we filtered.
            if args.count.is_none_or(|c| printed < c) {
                if let Some(next) = f.next_offset {
                    pos.offset = pos.offset.max(next);
                }
            }
        }
        if let Err(e) = out.flush() {
            return if is_broken_pipe(&e) {
                Ok(())
            } else {
                Err(e.into())
            };
        }
        if got_data {
            last_data = Instant::now();
        }
        if !keep_going
            && positions
                .iter()
                .all(|p| p.high_watermark.is_some_and(|hw| p.offset >= hw))
        {
            break;
        }
        if let Some(t) = args.timeout_ms {
            if last_data.elapsed() >= Duration::from_millis(t) {
                break;
            }
        }
        if backoff {
            error_rounds += 1;
            if error_rounds >= ERROR_ROUNDS_MAX {
                return Err(crate::client::ClientError::Broker {
                    context: format!(
                        "fetch {} (gave up after {error_rounds} retries)",
                        args.topic
                    ),
                    code: last_code,
                    message: None,
                }
                .into());
            }
            client.invalidate_metadata();
            std::thread::sleep(RETRY_BACKOFF);
            continue;
        }
        error_rounds = 0;
        let moved = positions.iter().zip(&before).any(|(p, b)| p.offset != *b);
        stall_rounds = if moved { 0 } else { stall_rounds + 1 };
        if !keep_going && stall_rounds >= STALL_ROUNDS_MAX {
            eprintln!(
                "warning: no progress after {stall_rounds} fetches although the broker reports more data; stopping"
            );
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn json_line_has_every_field_and_nulls() {
        // Proves the JSON shape: all fields present, null key/value as null, lossy UTF-8.
        let r = ConsumedRecord {
            offset: 7,
            timestamp_ms: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::from_static(b"hi \xff")),
            headers: vec![
                ("h".into(), Some(Bytes::from_static(b"v"))),
                ("n".into(), None),
            ],
        };
        let line = record_json("t", 2, &r);
        assert!(line.starts_with(r#"{"topic":"t","partition":2,"offset":7,"timestamp":"#));
        let v: serde_json::Value = serde_json::from_str(&line).expect("valid json");
        assert_eq!(
            v,
            serde_json::json!({
                "topic": "t", "partition": 2, "offset": 7, "timestamp": 1_700_000_000_000i64,
                "key": null, "value": "hi \u{fffd}",
                "headers": [{"key": "h", "value": "v"}, {"key": "n", "value": null}]
            })
        );
    }
}
