//! Command-line arguments of `strata bench` and the pure parsers behind them: record-size
//! distributions, key distributions and the batch-size default.
//!
//! Everything here is a pure function of its input, so it is unit-tested without a broker.

use std::fmt;
use std::str::FromStr;

use rand::Rng;

use crate::cli::{AcksArg, CompressionArg};
use crate::client::BOOTSTRAP_DEFAULT;

/// Largest record value the harness builds (Kafka's default `message.max.bytes` is ~1 MiB).
pub const RECORD_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Most records one pre-built batch may hold.
pub const BATCH_RECORDS_MAX: usize = 100_000;
/// Target bytes of record values per batch when `--batch-size` is not given.
pub const BATCH_VALUE_BYTES_DEFAULT: usize = 128 * 1024;
/// Most producer or consumer connections.
pub const CONNECTIONS_MAX: usize = 4096;
/// Most requests in flight on one connection.
pub const IN_FLIGHT_MAX: usize = 1024;

/// `--record-size`: the size of each record's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordSize {
    /// Every value is exactly this many bytes.
    Fixed(usize),
    /// Each value is uniformly distributed in `min..=max` bytes.
    Uniform { min: usize, max: usize },
}

impl RecordSize {
    /// The mean value size, for the batch-size default and rate arithmetic.
    pub fn mean(&self) -> f64 {
        match *self {
            RecordSize::Fixed(n) => n as f64,
            RecordSize::Uniform { min, max } => (min + max) as f64 / 2.0,
        }
    }

    /// Draws one value size.
    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        match *self {
            RecordSize::Fixed(n) => n,
            RecordSize::Uniform { min, max } => rng.gen_range(min..=max),
        }
    }

    /// Whether every draw gives the same size (then one batch shape is enough).
    pub fn is_fixed(&self) -> bool {
        matches!(self, RecordSize::Fixed(_))
    }
}

/// Parses a byte count: digits with an optional binary suffix (`k`/`KiB`, `m`/`MiB`).
fn parse_bytes(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let lower = s.to_ascii_lowercase();
    let (digits, multiplier) =
        if let Some(d) = lower.strip_suffix("kib").or(lower.strip_suffix('k')) {
            (d, 1024)
        } else if let Some(d) = lower.strip_suffix("mib").or(lower.strip_suffix('m')) {
            (d, 1024 * 1024)
        } else {
            (lower.as_str(), 1)
        };
    let n: usize = digits
        .trim()
        .parse()
        .map_err(|_| format!("expected a byte count like 100, 1KiB or 64k, got {s:?}"))?;
    n.checked_mul(multiplier)
        .ok_or_else(|| format!("{s:?} is too large"))
}

impl FromStr for RecordSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let check = |n: usize| {
            if n > RECORD_BYTES_MAX {
                Err(format!(
                    "record size {n} is above the maximum {RECORD_BYTES_MAX}"
                ))
            } else {
                Ok(n)
            }
        };
        if let Some(range) = s.strip_prefix("uniform:") {
            let (lo, hi) = range
                .split_once('-')
                .ok_or_else(|| format!("expected uniform:MIN-MAX, got {s:?}"))?;
            let (min, max) = (check(parse_bytes(lo)?)?, check(parse_bytes(hi)?)?);
            if min > max {
                return Err(format!("uniform:{min}-{max}: MIN is above MAX"));
            }
            return Ok(RecordSize::Uniform { min, max });
        }
        Ok(RecordSize::Fixed(check(parse_bytes(s)?)?))
    }
}

impl fmt::Display for RecordSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordSize::Fixed(n) => write!(f, "{n}"),
            RecordSize::Uniform { min, max } => write!(f, "uniform:{min}-{max}"),
        }
    }
}

/// `--key-distribution`: which keys records carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDistribution {
    /// Null keys; batches are spread over partitions round-robin.
    None,
    /// A random 16-byte key per record. Keys this random spread evenly over partitions, so
    /// batches still go round-robin (what the key hash would give on average).
    Random,
    /// N distinct keys (`key-0` .. `key-{N-1}`), each always in the partition Kafka's default
    /// partitioner (murmur2) picks for it: partitions that no key maps to get no traffic.
    Fixed(usize),
}

/// Length of a random key.
pub const RANDOM_KEY_BYTES: usize = 16;

impl FromStr for KeyDistribution {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(KeyDistribution::None),
            "random" => Ok(KeyDistribution::Random),
            _ => {
                let n = s
                    .strip_prefix("fixed:")
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| {
                        format!("expected none, random or fixed:N (N >= 1), got {s:?}")
                    })?;
                Ok(KeyDistribution::Fixed(n))
            }
        }
    }
}

impl fmt::Display for KeyDistribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDistribution::None => write!(f, "none"),
            KeyDistribution::Random => write!(f, "random"),
            KeyDistribution::Fixed(n) => write!(f, "fixed:{n}"),
        }
    }
}

/// `--from`: where consumers start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum From {
    Earliest,
    Latest,
}

/// Options shared by every bench mode.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Broker address(es) to bootstrap from, HOST:PORT[,HOST:PORT...].
    #[arg(long, env = "STRATA_BOOTSTRAP", default_value = BOOTSTRAP_DEFAULT)]
    pub bootstrap: String,
    /// Topic to use.
    #[arg(long, default_value = "strata-bench")]
    pub topic: String,
    /// Partitions of the topic; the topic is created with this many if it does not exist.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=100_000))]
    pub partitions: i32,
    /// Replication factor used when creating the topic.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i16,
    /// Topic config used when creating the topic, KEY=VALUE (repeatable).
    #[arg(long = "topic-config", value_name = "KEY=VALUE", value_parser = crate::cli::parse_key_value)]
    pub topic_configs: Vec<(String, String)>,
    /// Stop after this many records (measured, after warm-up).
    #[arg(long)]
    pub records: Option<u64>,
    /// Stop after this many seconds of measurement (after warm-up).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Seconds of load before measuring starts.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    pub warmup: f64,
    /// Print one JSON object with the results on stdout.
    #[arg(long)]
    pub json: bool,
    /// Write an HdrHistogram interval log (one histogram per second) to this file.
    #[arg(long, value_name = "FILE")]
    pub histogram_log: Option<std::path::PathBuf>,
    /// Label copied into the JSON output (for scripts).
    #[arg(long, default_value = "")]
    pub label: String,
}

/// Options of the producing side (produce and e2e).
#[derive(clap::Args, Debug, Clone)]
pub struct ProducerArgs {
    /// Value size: N bytes (100, 1KiB, 64k) or uniform:MIN-MAX.
    #[arg(long, default_value = "1024")]
    pub record_size: RecordSize,
    /// Keys: none, random (16 random bytes) or fixed:N (N distinct keys, murmur2-partitioned).
    #[arg(long, default_value = "none")]
    pub key_distribution: KeyDistribution,
    /// Producer connections.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=CONNECTIONS_MAX as u64))]
    pub producers: u64,
    /// Records per batch [default: as many as fit 128 KiB of values, 1..=10000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=BATCH_RECORDS_MAX as u64))]
    pub batch_size: Option<u64>,
    /// With --rate: a batch closes when full or this long after its first record arrived.
    #[arg(long, default_value_t = 5.0)]
    pub linger_ms: f64,
    /// Produce requests in flight per connection.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=IN_FLIGHT_MAX as u64))]
    pub max_in_flight: u64,
    /// Acknowledgement the broker waits for: 0, 1 or all.
    #[arg(long, value_enum, default_value = "all")]
    pub acks: AcksArg,
    /// Compression codec of the batches.
    #[arg(long, value_enum, default_value = "none")]
    pub compression: CompressionArg,
    /// Target records/s over all producers (open loop); latencies are corrected for
    /// coordinated omission. Without it producers send as fast as acks allow (closed loop).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Produce request timeout given to the broker.
    #[arg(long, default_value_t = 30_000)]
    pub request_timeout_ms: i32,
}

/// Options of the consuming side (consume and e2e).
#[derive(clap::Args, Debug, Clone)]
pub struct ConsumerArgs {
    /// Consumer connections; partitions are split among them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=CONNECTIONS_MAX as u64))]
    pub consumers: u64,
    /// Fetch max_bytes (whole response).
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub fetch_max_bytes: i32,
    /// Fetch partition_max_bytes.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub fetch_partition_max_bytes: i32,
    /// Fetch max_wait_ms (long poll when there is nothing new).
    #[arg(long, default_value_t = 100)]
    pub fetch_max_wait_ms: i32,
}

/// The batch size when `--batch-size` is not given: values of about 128 KiB per batch.
pub fn default_batch_records(record_size: RecordSize) -> usize {
    let mean = record_size.mean().max(1.0);
    ((BATCH_VALUE_BYTES_DEFAULT as f64 / mean) as usize).clamp(1, 10_000)
}

/// The batch actually sent in open-loop mode: with records arriving every `1/rate` s on one
/// connection, a batch closes after `batch_records` records or `linger` after its first one,
/// whichever comes first; periodic arrivals make that a fixed size, so it is built once.
pub fn effective_batch_records(
    batch_records: usize,
    rate_per_connection: Option<f64>,
    linger_ms: f64,
) -> usize {
    match rate_per_connection {
        Some(rate) if rate > 0.0 => {
            // Records that arrive within the linger window, counting the first one.
            let in_linger = (rate * linger_ms / 1000.0).floor() as usize + 1;
            batch_records.min(in_linger).max(1)
        }
        _ => batch_records,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_sizes_parse_fixed_suffixed_and_uniform() {
        // Proves the accepted spellings map to the right sizes and bad ones are refused.
        let table = [
            ("100", RecordSize::Fixed(100)),
            ("1KiB", RecordSize::Fixed(1024)),
            ("64k", RecordSize::Fixed(65536)),
            ("1m", RecordSize::Fixed(1 << 20)),
            (
                "uniform:100-1000",
                RecordSize::Uniform {
                    min: 100,
                    max: 1000,
                },
            ),
            (
                "uniform:1k-2k",
                RecordSize::Uniform {
                    min: 1024,
                    max: 2048,
                },
            ),
            ("0", RecordSize::Fixed(0)),
        ];
        for (s, want) in table {
            assert_eq!(s.parse::<RecordSize>(), Ok(want), "{s}");
        }
        for bad in [
            "",
            "abc",
            "uniform:5",
            "uniform:10-5",
            "-1",
            "32m",
            "uniform:1-99m",
        ] {
            assert!(bad.parse::<RecordSize>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "uniform:100-300".parse::<RecordSize>().map(|r| r.mean()),
            Ok(200.0)
        );
    }

    #[test]
    fn uniform_samples_stay_in_range() {
        // Proves sampling never leaves MIN..=MAX (seeded RNG, many draws).
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let dist = RecordSize::Uniform { min: 10, max: 20 };
        let draws: Vec<usize> = (0..10_000).map(|_| dist.sample(&mut rng)).collect();
        assert!(draws.iter().all(|&n| (10..=20).contains(&n)));
        assert!(draws.contains(&10) && draws.contains(&20));
    }

    #[test]
    fn key_distributions_parse() {
        // Proves the three forms parse and fixed:0 or junk is refused.
        assert_eq!("none".parse(), Ok(KeyDistribution::None));
        assert_eq!("random".parse(), Ok(KeyDistribution::Random));
        assert_eq!("fixed:16".parse(), Ok(KeyDistribution::Fixed(16)));
        for bad in ["fixed:0", "fixed:", "fixed:x", "rand"] {
            assert!(bad.parse::<KeyDistribution>().is_err(), "{bad}");
        }
    }

    #[test]
    fn batch_size_defaults_and_linger_cap() {
        // Proves the default batch fills ~128 KiB and open-loop batches are capped by linger.
        assert_eq!(default_batch_records(RecordSize::Fixed(100)), 1310);
        assert_eq!(default_batch_records(RecordSize::Fixed(1024)), 128);
        assert_eq!(default_batch_records(RecordSize::Fixed(65536)), 2);
        assert_eq!(default_batch_records(RecordSize::Fixed(0)), 10_000);
        assert_eq!(effective_batch_records(100, None, 5.0), 100);
        // 1000 rec/s, 5 ms linger: the first record plus 5 more arrive within the window.
        assert_eq!(effective_batch_records(100, Some(1000.0), 5.0), 6);
        assert_eq!(effective_batch_records(100, Some(1e6), 5.0), 100);
        assert_eq!(effective_batch_records(100, Some(1.0), 0.0), 1);
    }
}
