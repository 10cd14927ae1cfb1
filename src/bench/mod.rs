//! `strata bench`: a load harness that speaks only the Kafka protocol, so the same client
//! measures Strata and any Kafka-compatible peer side by side.
//!
//! - `produce`: pre-built batches over pipelined connections (see [`produce`]).
//! - `consume`: full fetches counted from batch headers (see [`consume`]).
//! - `e2e`: both at once; latency from send to receipt (see [`e2e`]).
//!
//! Metadata, topic creation, offsets and API-version negotiation go through the CLI's
//! [`crate::client::Client`]; only the hot path (Produce and Fetch) has its own lean encoding
//! ([`wire`]). Measurements and output live in [`report`]. The harness shares the machine
//! with the broker, so it allocates nothing per record and decodes no records.

pub mod args;
pub mod consume;
pub mod e2e;
pub mod produce;
pub mod report;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use kafka_protocol::messages::{FetchRequest, ProduceRequest};

use crate::client::{Client, ClientConfig, ClientError, OffsetSpec, TopicInfo};
use args::{CommonArgs, ConsumerArgs, From, ProducerArgs};
use consume::{ConsumeShared, ConsumerTask, PartitionRange};
use produce::{ProduceShared, ProducerTask};
use report::{lock, Meter, Reporter, Summary};

/// Client id the bench's connections send.
pub const CLIENT_ID: &str = "strata-bench";
/// Run length when neither `--records` nor `--duration` is given.
pub const DURATION_DEFAULT_S: f64 = 10.0;
/// e2e: how long consumers may take to catch up after producers stop.
pub const E2E_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// `strata bench ...`
#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// Produce as fast as acks allow (or at --rate) and report throughput and latency.
    Produce {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        producer: ProducerArgs,
    },
    /// Consume a topic and report throughput (drains to the end offsets seen at start unless
    /// --records/--duration say otherwise).
    Consume {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        consumer: ConsumerArgs,
        /// Where consumers start.
        #[arg(long, value_enum, default_value = "earliest")]
        from: From,
        /// Start every partition at this offset instead (clamped to the log), e.g. to time
        /// fetches in the middle of a large log.
        #[arg(long)]
        offset: Option<i64>,
    },
    /// Produce and consume at once; latency from send to receipt.
    E2e {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        producer: ProducerArgs,
        #[command(flatten)]
        consumer: ConsumerArgs,
    },
}

/// Runs a bench command and prints its summary.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    let (common, summary) = match cmd {
        BenchCommand::Produce { common, producer } => {
            let s = run_produce(&common, &producer)?;
            (common, s)
        }
        BenchCommand::Consume {
            common,
            consumer,
            from,
            offset,
        } => {
            let s = run_consume(&common, &consumer, from, offset)?;
            (common, s)
        }
        BenchCommand::E2e {
            common,
            producer,
            consumer,
        } => {
            let s = e2e::run(&common, &producer, &consumer)?;
            (common, s)
        }
    };
    if common.json {
        eprint!("{}", summary.text());
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print!("{}", summary.text());
    }
    if summary.records == 0 && summary.errors > 0 {
        bail!(
            "no record succeeded; last error: {}",
            summary.last_error.unwrap_or_default()
        );
    }
    Ok(())
}

/// Connects and makes sure the topic exists with at least the requested partitions' metadata.
pub(crate) fn prepare_topic(
    common: &CommonArgs,
    create: bool,
) -> anyhow::Result<(Client, TopicInfo)> {
    let mut client = Client::connect(ClientConfig::from_bootstrap(&common.bootstrap)?)?;
    match client.refresh_topic(&common.topic) {
        Ok(t) => return Ok((client, t)),
        Err(ClientError::UnknownTopic { .. }) if create => {}
        Err(e) => return Err(e.into()),
    }
    client
        .create_topic(
            &common.topic,
            common.partitions,
            common.replication_factor,
            &common.topic_configs,
        )
        .with_context(|| format!("creating topic {}", common.topic))?;
    let topic = client.wait_until_led(&common.topic, TOPIC_READY_TIMEOUT)?;
    Ok((client, topic))
}

/// How long a new topic may take until every partition's leader serves it: a bench needs
/// every partition led before it measures.
const TOPIC_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Partitions of `topic` grouped by leader address, with the Produce and Fetch versions to use
/// with that leader.
pub(crate) struct LeaderGroup {
    pub addr: String,
    pub produce_version: i16,
    pub fetch_version: i16,
    pub partitions: Vec<i32>,
}

pub(crate) fn leader_groups(
    client: &mut Client,
    topic: &TopicInfo,
) -> anyhow::Result<Vec<LeaderGroup>> {
    let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for p in &topic.partitions {
        if p.leader < 0 {
            bail!("partition {} of {} has no leader", p.partition, topic.name);
        }
        by_leader.entry(p.leader).or_default().push(p.partition);
    }
    let mut groups = Vec::new();
    for (leader, partitions) in by_leader {
        let conn = client.broker(leader)?;
        let addr = conn.addr().to_owned();
        let produce_version =
            conn.version_for::<ProduceRequest>(Some(wire::PRODUCE_VERSION_MAX))?;
        let fetch_version = conn.version_for::<FetchRequest>(Some(wire::FETCH_VERSION_MAX))?;
        if produce_version < wire::PRODUCE_VERSION_MIN || fetch_version < wire::FETCH_VERSION_MIN {
            bail!("broker {addr} speaks Produce v{produce_version} / Fetch v{fetch_version}; the bench needs Produce v3+ and Fetch v4+");
        }
        groups.push(LeaderGroup {
            addr,
            produce_version,
            fetch_version,
            partitions,
        });
    }
    Ok(groups)
}

/// The worker threads of one side of a run.
pub(crate) type Workers = Vec<JoinHandle<anyhow::Result<()>>>;

/// When measuring starts and (for duration runs) ends.
pub(crate) struct Window {
    pub measure_from: Instant,
    pub measure_until: Option<Instant>,
}

impl Window {
    pub fn new(common: &CommonArgs, default_duration: bool) -> Window {
        let measure_from = Instant::now() + Duration::from_secs_f64(common.warmup.max(0.0));
        let duration = common
            .duration
            .or(if default_duration && common.records.is_none() {
                Some(DURATION_DEFAULT_S)
            } else {
                None
            });
        Window {
            measure_from,
            measure_until: duration.map(|d| measure_from + Duration::from_secs_f64(d.max(0.0))),
        }
    }
}

/// Reports on `meter` (progress line, histogram log) while `handles` run through `window`;
/// returns the measured duration.
fn measure(
    common: &CommonArgs,
    meter: &mut Meter,
    handles: Vec<JoinHandle<anyhow::Result<()>>>,
    stop: &AtomicBool,
    window: &Window,
) -> anyhow::Result<Duration> {
    let reporter = Reporter::start(
        vec![meter.clone()],
        common.histogram_log.clone(),
        window.measure_from,
    )?;
    let end = supervise(handles, stop, window, meter)?;
    reporter.finish()?;
    Ok(end.saturating_duration_since(window.measure_from))
}

/// Waits for `handles`, setting `stop` when the window closes; returns when all are done.
/// A worker that stopped on an error (a connection lost, a bad response) is an error of the
/// run: it is counted in `meter` as well as printed.
pub(crate) fn supervise(
    handles: Vec<JoinHandle<anyhow::Result<()>>>,
    stop: &AtomicBool,
    window: &Window,
    meter: &mut Meter,
) -> anyhow::Result<Instant> {
    let mut first_err = None;
    while handles.iter().any(|h| !h.is_finished()) {
        if window
            .measure_until
            .is_some_and(|until| Instant::now() >= until)
        {
            stop.store(true, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let end = Instant::now();
    let end = window.measure_until.map_or(end, |u| end.min(u));
    let stopped = meter.add();
    for h in handles {
        let failure = match h.join() {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(_) => anyhow::anyhow!("a bench thread panicked"),
        };
        lock(&stopped).record_error(
            format!("{}: connection stopped", meter.name),
            Some(format!("{failure:#}")),
        );
        first_err = first_err.or(Some(failure));
    }
    if let Some(e) = first_err {
        eprintln!("warning: {e:#}");
    }
    Ok(end)
}

pub(crate) fn producer_config(
    common: &CommonArgs,
    p: &ProducerArgs,
    batch_records: usize,
) -> serde_json::Value {
    serde_json::json!({
        "bootstrap": common.bootstrap, "topic": common.topic, "partitions": common.partitions,
        "record_size": p.record_size.to_string(), "key_distribution": p.key_distribution.to_string(),
        "producers": p.producers, "batch_records": batch_records, "linger_ms": p.linger_ms,
        "max_in_flight": p.max_in_flight, "acks": format!("{:?}", p.acks), "compression": format!("{:?}", p.compression),
        "rate": p.rate, "warmup_s": common.warmup, "duration_s": common.duration, "records_limit": common.records,
    })
}

/// Spawns the producer connections; returns their handles and shared state.
// The arguments are the run's independent settings; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn_producers(
    common: &CommonArgs,
    p: &ProducerArgs,
    groups: &[LeaderGroup],
    partitions: i32,
    meter: &mut Meter,
    window: &Window,
    stop: Arc<AtomicBool>,
    e2e_base: Option<Instant>,
) -> anyhow::Result<(Workers, Arc<ProduceShared>)> {
    let batch_records = produce::batch_records_for(p);
    let pool = produce::build_pool(
        p.record_size,
        p.key_distribution,
        batch_records,
        p.compression.into(),
        partitions,
        0x5eed,
    )?;
    let shared = Arc::new(ProduceShared {
        topic: common.topic.clone(),
        client_id: CLIENT_ID.to_owned(),
        acks: p.acks,
        timeout_ms: p.request_timeout_ms,
        pool,
        max_in_flight: p.max_in_flight as usize,
        rate_per_connection: p.rate.map(|r| r / p.producers as f64),
        measure_from: window.measure_from,
        budget: common.records,
        claimed: AtomicU64::new(0),
        stop,
        sent_total: Arc::new(AtomicU64::new(0)),
        e2e_base,
    });
    let mut handles = Vec::new();
    for index in 0..p.producers as usize {
        let group = &groups[index % groups.len()];
        let task = ProducerTask {
            index,
            addr: group.addr.clone(),
            version: group.produce_version,
            partitions: group.partitions.clone(),
            recorder: meter.add(),
        };
        let shared = shared.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("bench-prod-{index}"))
                .spawn(move || produce::run_producer(shared, task))?,
        );
    }
    Ok((handles, shared))
}

/// Spawns the consumer connections over the ranges given per partition.
#[allow(clippy::too_many_arguments)]
pub(crate) fn spawn_consumers(
    common: &CommonArgs,
    c: &ConsumerArgs,
    groups: &[LeaderGroup],
    ranges: &BTreeMap<i32, PartitionRange>,
    meter: &mut Meter,
    window: &Window,
    stop: Arc<AtomicBool>,
    e2e_base: Option<Instant>,
) -> anyhow::Result<(Workers, Arc<ConsumeShared>)> {
    let shared = Arc::new(ConsumeShared {
        topic: common.topic.clone(),
        client_id: CLIENT_ID.to_owned(),
        max_wait_ms: c.fetch_max_wait_ms,
        max_bytes: c.fetch_max_bytes,
        partition_max_bytes: c.fetch_partition_max_bytes,
        measure_from: window.measure_from,
        budget: if e2e_base.is_some() {
            None
        } else {
            common.records
        },
        consumed: AtomicU64::new(0),
        consumed_total: Arc::new(AtomicU64::new(0)),
        stop,
        e2e_base,
    });
    // Each consumer reads from one leader; the partitions of a leader are dealt round-robin
    // among the consumers assigned to it.
    let consumers = (c.consumers as usize).max(groups.len());
    let mut handles = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let mine: Vec<usize> = (0..consumers).filter(|i| i % groups.len() == g).collect();
        for (slot, &index) in mine.iter().enumerate() {
            let task = ConsumerTask {
                index,
                addr: group.addr.clone(),
                version: group.fetch_version,
                ranges: group
                    .partitions
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| j % mine.len() == slot)
                    .filter_map(|(_, p)| ranges.get(p).copied())
                    .collect(),
                recorder: meter.add(),
            };
            let shared = shared.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("bench-cons-{index}"))
                    .spawn(move || consume::run_consumer(shared, task))?,
            );
        }
    }
    Ok((handles, shared))
}

/// Start (and, when draining, end) offsets of every partition.
pub(crate) fn partition_ranges(
    client: &mut Client,
    topic: &TopicInfo,
    from: From,
    drain: bool,
) -> anyhow::Result<BTreeMap<i32, PartitionRange>> {
    let ids: Vec<i32> = topic.partitions.iter().map(|p| p.partition).collect();
    let latest: BTreeMap<i32, i64> = client
        .list_offsets(
            &topic.name,
            &ids.iter()
                .map(|&p| (p, OffsetSpec::Latest))
                .collect::<Vec<_>>(),
        )?
        .into_iter()
        .collect();
    let start: BTreeMap<i32, i64> = match from {
        From::Latest => latest.clone(),
        From::Earliest => client
            .list_offsets(
                &topic.name,
                &ids.iter()
                    .map(|&p| (p, OffsetSpec::Earliest))
                    .collect::<Vec<_>>(),
            )?
            .into_iter()
            .collect(),
    };
    Ok(ids
        .iter()
        .map(|&p| {
            let s = start.get(&p).copied().unwrap_or(0).max(0);
            (
                p,
                PartitionRange {
                    partition: p,
                    start: s,
                    end: if drain { latest.get(&p).copied() } else { None },
                },
            )
        })
        .collect())
}

fn run_produce(common: &CommonArgs, p: &ProducerArgs) -> anyhow::Result<Summary> {
    let (mut client, topic) = prepare_topic(common, true)?;
    let groups = leader_groups(&mut client, &topic)?;
    let window = Window::new(common, true);
    let stop = Arc::new(AtomicBool::new(false));
    let mut meter = Meter::new("produce", p.acks != crate::cli::AcksArg::None);
    let (handles, _shared) = spawn_producers(
        common,
        p,
        &groups,
        topic.partitions.len() as i32,
        &mut meter,
        &window,
        stop.clone(),
        None,
    )?;
    let duration = measure(common, &mut meter, handles, &stop, &window)?;
    Ok(Summary::new(
        "produce",
        common.label.clone(),
        &meter.totals(),
        "record values",
        duration,
        producer_config(common, p, produce::batch_records_for(p)),
    ))
}

fn run_consume(
    common: &CommonArgs,
    c: &ConsumerArgs,
    from: From,
    offset: Option<i64>,
) -> anyhow::Result<Summary> {
    let (mut client, topic) = prepare_topic(common, false)?;
    let groups = leader_groups(&mut client, &topic)?;
    // Without a bound, drain from `from` to the end offsets seen now; from latest there is
    // nothing to drain, so follow the log for the default duration.
    let drain = common.records.is_none() && common.duration.is_none() && from == From::Earliest;
    let mut ranges = partition_ranges(&mut client, &topic, from, drain)?;
    if let Some(offset) = offset {
        for r in ranges.values_mut() {
            r.start = offset.clamp(0, r.end.unwrap_or(i64::MAX));
        }
    }
    let window = Window::new(common, !drain);
    let stop = Arc::new(AtomicBool::new(false));
    // Its latency is the Fetch round trip.
    let mut meter = Meter::new("consume", true);
    let (handles, _shared) = spawn_consumers(
        common,
        c,
        &groups,
        &ranges,
        &mut meter,
        &window,
        stop.clone(),
        None,
    )?;
    let duration = measure(common, &mut meter, handles, &stop, &window)?;
    let config = serde_json::json!({
        "bootstrap": common.bootstrap, "topic": common.topic, "partitions": topic.partitions.len(),
        "consumers": c.consumers, "from": format!("{from:?}"), "offset": offset, "drain": drain,
        "latency": "fetch request round trip",
        "fetch_max_bytes": c.fetch_max_bytes, "fetch_partition_max_bytes": c.fetch_partition_max_bytes,
    });
    Ok(Summary::new(
        "consume",
        common.label.clone(),
        &meter.totals(),
        "record batches",
        duration,
        config,
    ))
}
