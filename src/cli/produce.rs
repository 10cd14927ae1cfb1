//! `strata produce`: lines from stdin become records.
//!
//! Records are buffered per partition and sent when a partition's buffer reaches
//! `--batch-size` records or [`BATCH_BYTES_MAX`] bytes, and at end of input. When stdin is a
//! terminal every line is sent at once, so typing a line is enough to see it consumed.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Read};
use std::time::Instant;

use anyhow::{bail, Context};
use bytes::Bytes;

use super::{parse_key_value, ConnectArgs};
use crate::client::partitioner::{partition_for_key, StickyPartitioner};
use crate::client::records::encode_batch;
use crate::client::{Acks, Client, Compression, ProduceOptions, ProduceRecord};
use crate::clock::{Clock, SystemClock};

/// Longest input line accepted; protects memory from a runaway stream without newlines.
pub const LINE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Most records per batch allowed on the command line.
pub const BATCH_RECORDS_MAX: u64 = 1_000_000;
/// Bytes of keys and values buffered for one partition before its batch is sent; stays under
/// Kafka's default `message.max.bytes` (~1 MiB) for uncompressed batches.
pub const BATCH_BYTES_MAX: usize = 900 * 1024;

/// `--acks`: how many replicas must have a batch before the broker answers.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcksArg {
    /// Do not wait for any answer.
    #[value(name = "0")]
    None,
    /// The leader wrote it.
    #[value(name = "1")]
    Leader,
    /// Every in-sync replica has it.
    #[value(name = "all", alias = "-1")]
    All,
}

/// `--compression`: codec of produced batches.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionArg {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl From<CompressionArg> for Compression {
    fn from(c: CompressionArg) -> Self {
        match c {
            CompressionArg::None => Compression::None,
            CompressionArg::Gzip => Compression::Gzip,
            CompressionArg::Snappy => Compression::Snappy,
            CompressionArg::Lz4 => Compression::Lz4,
            CompressionArg::Zstd => Compression::Zstd,
        }
    }
}

/// Write records read from stdin, one per line.
#[derive(clap::Args, Debug, Clone)]
pub struct ProduceArgs {
    /// Topic to write to.
    #[arg(long)]
    pub topic: String,
    /// Split each line into key and value at the first SEP (lines without SEP get a null key).
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
    /// Header KEY=VALUE added to every record; repeatable.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub header: Vec<(String, String)>,
    /// Write every record to this partition (default: murmur2 of the key, like Kafka's Java
    /// client; keyless records stick to one partition per batch, round-robin).
    #[arg(long)]
    pub partition: Option<i32>,
    /// Replicas that must have a batch before it counts as written.
    #[arg(long, value_enum, default_value = "all")]
    pub acks: AcksArg,
    /// Compression codec of the batches.
    #[arg(long, value_enum, default_value = "none")]
    pub compression: CompressionArg,
    /// Records per batch (per partition).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=BATCH_RECORDS_MAX))]
    pub batch_size: u64,
    #[command(flatten)]
    pub connect: ConnectArgs,
}

#[derive(Default)]
struct Pending {
    records: Vec<ProduceRecord>,
    bytes: usize,
}

struct Producer<'a> {
    client: &'a mut Client,
    topic: &'a str,
    compression: Compression,
    options: ProduceOptions,
    records_sent: u64,
    batches_sent: u64,
    bytes_sent: u64,
}

impl Producer<'_> {
    fn flush(&mut self, partition: i32, pending: &mut Pending) -> anyhow::Result<()> {
        if pending.records.is_empty() {
            return Ok(());
        }
        let batch = encode_batch(&pending.records, self.compression)?;
        self.bytes_sent += batch.len() as u64;
        self.client
            .produce(self.topic, &[(partition, batch)], self.options)?;
        self.records_sent += pending.records.len() as u64;
        self.batches_sent += 1;
        pending.records.clear();
        pending.bytes = 0;
        Ok(())
    }
}

/// Splits a line into (key, value) at the first `separator`.
fn split_line(line: &[u8], separator: Option<&[u8]>) -> (Option<Bytes>, Bytes) {
    if let Some(sep) = separator.filter(|s| !s.is_empty()) {
        if let Some(at) = line.windows(sep.len()).position(|w| w == sep) {
            let key = Bytes::copy_from_slice(line.get(..at).unwrap_or_default());
            let value = Bytes::copy_from_slice(line.get(at + sep.len()..).unwrap_or_default());
            return (Some(key), value);
        }
    }
    (None, Bytes::copy_from_slice(line))
}

pub(super) fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut client = args.connect.connect()?;
    // Like Kafka's console producer: a missing topic is created when the broker allows it.
    client.set_auto_create_topics(true);
    let info = client.topic(&args.topic)?;
    let partition_count = i32::try_from(info.partitions.len()).context("too many partitions")?;
    if partition_count == 0 {
        bail!("topic {} has no partitions", args.topic);
    }
    if let Some(p) = args.partition {
        if !(0..partition_count).contains(&p) {
            bail!(
                "topic {} has partitions 0..{}, not {p}",
                args.topic,
                partition_count - 1
            );
        }
    }
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let batch_size = if interactive {
        1
    } else {
        args.batch_size as usize
    };
    let headers: Vec<(String, Option<Bytes>)> = args
        .header
        .iter()
        .map(|(k, v)| (k.clone(), Some(Bytes::from(v.clone()))))
        .collect();
    let separator = args.key_separator.as_deref().map(str::as_bytes);

    let mut producer = Producer {
        client: &mut client,
        topic: &args.topic,
        compression: args.compression.into(),
        options: ProduceOptions {
            acks: match args.acks {
                AcksArg::None => Acks::None,
                AcksArg::Leader => Acks::Leader,
                AcksArg::All => Acks::All,
            },
            ..ProduceOptions::default()
        },
        records_sent: 0,
        batches_sent: 0,
        bytes_sent: 0,
    };
    let mut sticky = StickyPartitioner::new(partition_count);
    let mut pending: BTreeMap<i32, Pending> = BTreeMap::new();
    let mut reader = stdin.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(LINE_BYTES_MAX as u64 + 1)
            .read_until(b'\n', &mut line)
            .context("reading stdin")?;
        if read == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        } else if line.len() > LINE_BYTES_MAX {
            bail!("input line longer than {LINE_BYTES_MAX} bytes");
        }
        let (key, value) = split_line(&line, separator);
        let partition = match (args.partition, &key) {
            (Some(p), _) => p,
            (None, Some(k)) => partition_for_key(k, partition_count),
            (None, None) => sticky.partition(partition_count),
        };
        let buffer = pending.entry(partition).or_default();
        buffer.bytes += key.as_ref().map_or(0, Bytes::len) + value.len();
        buffer.records.push(ProduceRecord {
            key,
            value: Some(value),
            headers: headers.clone(),
            timestamp_ms: SystemClock.wall_ms(),
        });
        if buffer.records.len() >= batch_size || buffer.bytes >= BATCH_BYTES_MAX {
            producer.flush(partition, buffer)?;
            if args.partition.is_none() && partition == sticky.partition(partition_count) {
                sticky.next_batch(partition_count);
            }
        }
    }
    for (partition, buffer) in pending.iter_mut() {
        producer.flush(*partition, buffer)?;
    }
    eprintln!(
        "produced {} record(s) in {} batch(es), {} bytes on the wire, to {} in {:.1} ms (acks={}, compression={})",
        producer.records_sent,
        producer.batches_sent,
        producer.bytes_sent,
        args.topic,
        started.elapsed().as_secs_f64() * 1000.0,
        producer.options.acks.code(),
        format!("{:?}", args.compression).to_lowercase(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_at_the_first_separator() {
        // Proves key/value splitting: first separator only, multi-byte separators, no separator.
        let (k, v) = split_line(b"user-1:hello:world", Some(b":"));
        assert_eq!(k.as_deref(), Some(&b"user-1"[..]));
        assert_eq!(&v[..], b"hello:world");
        let (k, v) = split_line(b"a::b", Some(b"::"));
        assert_eq!((k.as_deref(), &v[..]), (Some(&b"a"[..]), &b"b"[..]));
        let (k, v) = split_line(b"no separator", Some(b"|"));
        assert_eq!((k, &v[..]), (None, &b"no separator"[..]));
        let (k, v) = split_line(b"x:y", None);
        assert_eq!((k, &v[..]), (None, &b"x:y"[..]));
    }
}
