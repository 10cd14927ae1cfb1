//! `strata bench produce`: pre-built record batches sent over pipelined connections.
//!
//! Each batch shape is encoded once (kafka-protocol's encoder, all codecs) into a small pool;
//! for a non-idempotent producer the broker assigns offsets, so the same bytes are resent as
//! they are. Only e2e runs patch a batch per send (send time into the first value and the
//! batch timestamps, then the CRC-32C is recomputed).
//!
//! Each connection has a writer thread and a reader thread. The writer takes a permit (at most
//! `--max-in-flight` requests unanswered), stamps the send time, queues the in-flight entry and
//! writes the request; the reader reads responses in order (Kafka answers a connection's
//! requests in the order they came), matches correlation ids, records the latency and returns
//! the permit. With acks=0 the broker sends nothing back and there is no reader.

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use kafka_protocol::records::Compression;
use rand::{Rng, SeedableRng};

use super::args::{
    default_batch_records, effective_batch_records, KeyDistribution, ProducerArgs, RecordSize,
    RANDOM_KEY_BYTES,
};
use super::report::{error_kind, lock, SharedRecorder};
use super::wire::{self, ProducePrefix};
use crate::cli::AcksArg;
use crate::client::partitioner::partition_for_key;
use crate::client::records::{encode_batch, ProduceRecord};
use crate::clock::{Clock, SystemClock};
use crate::protocol::record_batch::compute_crc;

/// Distinct batch shapes built when sizes or keys vary.
pub const POOL_SHAPES: usize = 16;
/// Memory the batch pool may take.
pub const POOL_BYTES_MAX: usize = 1 << 30;
/// Bytes of a response the reader accepts.
const RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Bytes at the front of the first value that carry the e2e send time.
pub const E2E_STAMP_BYTES: usize = 8;

/// The send schedule of an open-loop connection: request `k` is due at `start + k·interval`.
/// A late sender does not skip requests; it sends the overdue ones back to back and their
/// latencies are corrected for the wait (see `report`).
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    pub start: Instant,
    pub interval: Duration,
}

impl Pacer {
    /// `records_per_request` records each time, `rate` records/s on this connection.
    pub fn new(start: Instant, rate: f64, records_per_request: usize) -> Pacer {
        let interval = Duration::from_secs_f64(records_per_request as f64 / rate.max(1e-9));
        Pacer { start, interval }
    }
    /// When request `k` is due.
    pub fn due(&self, k: u64) -> Instant {
        self.start + self.interval.mul_f64(k as f64)
    }
    /// How long to wait at `now` before request `k` (zero when it is due or late).
    pub fn wait(&self, k: u64, now: Instant) -> Duration {
        self.due(k).saturating_duration_since(now)
    }
}

/// One pre-built batch.
#[derive(Debug, Clone)]
pub struct PoolBatch {
    pub bytes: Bytes,
    pub records: u64,
    pub value_bytes: u64,
    /// With fixed keys, the partition its keys hash to.
    pub partition: Option<i32>,
    /// Where the first value starts (uncompressed, value ≥ 8 bytes): e2e stamps it.
    pub value_pos: Option<usize>,
}

fn fill_value(rng: &mut impl Rng, n: usize) -> Bytes {
    // Random capital letters, like Kafka's producer-perf-test: compressible but not trivially.
    Bytes::from(
        (0..n)
            .map(|_| rng.gen_range(b'A'..=b'Z'))
            .collect::<Vec<u8>>(),
    )
}

/// Builds the pool of batches for `partitions` partitions.
pub fn build_pool(
    record_size: RecordSize,
    keys: KeyDistribution,
    batch_records: usize,
    compression: Compression,
    partitions: i32,
    seed: u64,
) -> anyhow::Result<Vec<PoolBatch>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let timestamp_ms = SystemClock.wall_ms();
    let make = |rng: &mut rand::rngs::StdRng,
                key_for: &mut dyn FnMut(&mut rand::rngs::StdRng, usize) -> Option<Bytes>,
                partition| {
        let records: Vec<ProduceRecord> = (0..batch_records)
            .map(|i| {
                let size = record_size.sample(rng);
                ProduceRecord {
                    key: key_for(rng, i),
                    value: Some(fill_value(rng, size)),
                    headers: vec![],
                    timestamp_ms,
                }
            })
            .collect();
        let value_bytes = records
            .iter()
            .map(|r| r.value.as_ref().map_or(0, Bytes::len) as u64)
            .sum();
        let bytes = encode_batch(&records, compression)?;
        let value_pos = wire::first_value_position(&bytes, E2E_STAMP_BYTES);
        anyhow::Ok(PoolBatch {
            bytes,
            records: batch_records as u64,
            value_bytes,
            partition,
            value_pos,
        })
    };
    let mut pool = Vec::new();
    let mut pool_bytes = 0usize;
    let mut push = |b: PoolBatch, pool: &mut Vec<PoolBatch>| -> anyhow::Result<()> {
        pool_bytes += b.bytes.len();
        if pool_bytes > POOL_BYTES_MAX {
            bail!("pre-built batches would take more than {POOL_BYTES_MAX} bytes: lower --batch-size, the record size or the number of fixed keys");
        }
        pool.push(b);
        Ok(())
    };
    match keys {
        KeyDistribution::Fixed(n) => {
            let mut by_partition: std::collections::BTreeMap<i32, Vec<Bytes>> = Default::default();
            for j in 0..n {
                let key = Bytes::from(format!("key-{j}"));
                by_partition
                    .entry(partition_for_key(&key, partitions))
                    .or_default()
                    .push(key);
            }
            for (p, keys) in by_partition {
                let mut key_for =
                    |_: &mut rand::rngs::StdRng, i: usize| Some(keys[i % keys.len()].clone());
                let b = make(&mut rng, &mut key_for, Some(p))?;
                push(b, &mut pool)?;
            }
        }
        KeyDistribution::None | KeyDistribution::Random => {
            let shapes = if record_size.is_fixed() && keys == KeyDistribution::None {
                1
            } else {
                POOL_SHAPES
            };
            for _ in 0..shapes {
                let mut key_for = |rng: &mut rand::rngs::StdRng, _: usize| match keys {
                    KeyDistribution::Random => {
                        Some(Bytes::from(rng.gen::<[u8; RANDOM_KEY_BYTES]>().to_vec()))
                    }
                    _ => None,
                };
                let b = make(&mut rng, &mut key_for, None)?;
                push(b, &mut pool)?;
            }
        }
    }
    Ok(pool)
}

/// Stamps an e2e send time into a request frame whose batch starts at `batch_pos`: the first
/// value's first 8 bytes get `stamp_ns`, the batch timestamps get `wall_ms`, and the CRC is
/// recomputed.
pub fn stamp_batch(
    frame: &mut [u8],
    batch_pos: usize,
    value_pos: Option<usize>,
    stamp_ns: u64,
    wall_ms: i64,
) {
    let batch = &mut frame[batch_pos..];
    if let Some(pos) = value_pos {
        batch[pos..pos + E2E_STAMP_BYTES].copy_from_slice(&stamp_ns.to_be_bytes());
    }
    batch[27..35].copy_from_slice(&wall_ms.to_be_bytes());
    batch[35..43].copy_from_slice(&wall_ms.to_be_bytes());
    let crc = compute_crc(batch);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// What every producer connection shares.
pub struct ProduceShared {
    pub topic: String,
    pub client_id: String,
    pub acks: AcksArg,
    pub timeout_ms: i32,
    pub pool: Vec<PoolBatch>,
    pub max_in_flight: usize,
    /// Records/s per connection (open loop), or None (closed loop).
    pub rate_per_connection: Option<f64>,
    pub measure_from: Instant,
    /// Measured records to have acknowledged in all (`--records`); failed requests give back
    /// their claim.
    pub budget: Option<u64>,
    pub claimed: AtomicU64,
    pub stop: Arc<AtomicBool>,
    /// Records acknowledged (or written, acks=0) in all, warm-up included: e2e waits for them.
    pub sent_total: Arc<AtomicU64>,
    /// e2e: stamp send times relative to this instant.
    pub e2e_base: Option<Instant>,
}

/// One producer connection's assignment.
pub struct ProducerTask {
    pub index: usize,
    pub addr: String,
    pub version: i16,
    pub partitions: Vec<i32>,
    pub recorder: SharedRecorder,
}

struct InFlight {
    correlation_id: i32,
    sent: Instant,
    records: u64,
    value_bytes: u64,
    measured: bool,
}

fn acks_code(a: AcksArg) -> i16 {
    match a {
        AcksArg::None => 0,
        AcksArg::Leader => 1,
        AcksArg::All => -1,
    }
}

/// Runs one producer connection until stopped or out of budget.
pub fn run_producer(shared: Arc<ProduceShared>, task: ProducerTask) -> anyhow::Result<()> {
    let stream =
        TcpStream::connect(&task.addr).with_context(|| format!("connecting to {}", task.addr))?;
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let prefix = ProducePrefix::new(
        task.version,
        &shared.client_id,
        &shared.topic,
        acks_code(shared.acks),
        shared.timeout_ms,
    );
    // Partitions this connection may write: with fixed keys only those its keys hash to.
    let pool: Vec<&PoolBatch> = shared
        .pool
        .iter()
        .filter(|b| b.partition.is_none_or(|p| task.partitions.contains(&p)))
        .collect();
    if pool.is_empty() {
        return Ok(());
    }
    let records_per_request = pool[0].records;
    let pacer = shared
        .rate_per_connection
        .map(|rate| Pacer::new(Instant::now(), rate, records_per_request as usize));
    let expected_interval_us = pacer.map(|p| p.interval.as_micros().max(1) as u64);
    let with_responses = shared.acks != AcksArg::None;
    let (permit_tx, permit_rx) = mpsc::sync_channel::<()>(shared.max_in_flight);
    for _ in 0..shared.max_in_flight {
        let _ = permit_tx.send(());
    }
    let (inflight_tx, inflight_rx) = mpsc::channel::<InFlight>();
    let reader = if with_responses {
        let shared = shared.clone();
        let recorder = task.recorder.clone();
        let version = task.version;
        Some(
            std::thread::Builder::new()
                .name(format!("bench-prod-rd-{}", task.index))
                .spawn(move || {
                    read_responses(
                        stream,
                        version,
                        inflight_rx,
                        permit_tx,
                        &recorder,
                        &shared,
                        expected_interval_us,
                    )
                })?,
        )
    } else {
        drop((inflight_rx, permit_tx));
        None
    };
    let batch_pos = {
        let mut probe = Vec::new();
        prefix.build(&mut probe, 0, 0, &[]);
        probe.len()
    };
    let mut frame =
        Vec::with_capacity(batch_pos + pool.iter().map(|b| b.bytes.len()).max().unwrap_or(0));
    let mut correlation_id: i32 = 0;
    let mut k: u64 = 0;
    // Permits taken back from the reader while waiting out a spent budget.
    let mut held: usize = 0;
    let result = loop {
        if shared.stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        if let Some(p) = &pacer {
            let wait = p.wait(k, Instant::now());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
        let batch = pool[(k as usize) % pool.len()];
        let partition = batch
            .partition
            .unwrap_or_else(|| task.partitions[(task.index + k as usize) % task.partitions.len()]);
        if with_responses {
            if held > 0 {
                held -= 1;
            } else if permit_rx.recv().is_err() {
                break Ok(()); // the reader ended; its result says why
            }
        }
        let mut sent = Instant::now();
        let measured = sent >= shared.measure_from;
        if let (true, Some(budget)) = (measured, shared.budget) {
            if shared.claimed.fetch_add(batch.records, Ordering::Relaxed) >= budget {
                shared.claimed.fetch_sub(batch.records, Ordering::Relaxed);
                // `--records` counts acknowledged records: failed requests give their claim
                // back. Wait for this connection's requests to finish, then look again.
                held += 1;
                let mut reader_gone = false;
                while with_responses && held < shared.max_in_flight {
                    if permit_rx.recv().is_err() {
                        reader_gone = true;
                        break;
                    }
                    held += 1;
                }
                if reader_gone || shared.claimed.load(Ordering::Relaxed) >= budget {
                    break Ok(());
                }
                continue;
            }
            sent = Instant::now();
        }
        correlation_id = correlation_id.wrapping_add(1);
        prefix.build(&mut frame, correlation_id, partition, &batch.bytes);
        if let Some(base) = shared.e2e_base {
            stamp_batch(
                &mut frame,
                batch_pos,
                batch.value_pos,
                sent.duration_since(base).as_nanos() as u64,
                SystemClock.wall_ms(),
            );
        }
        if with_responses {
            let _ = inflight_tx.send(InFlight {
                correlation_id,
                sent,
                records: batch.records,
                value_bytes: batch.value_bytes,
                measured,
            });
        }
        if let Err(e) = writer.write_all(&frame) {
            break Err(anyhow!("writing to {}: {e}", task.addr));
        }
        if !with_responses {
            shared
                .sent_total
                .fetch_add(batch.records, Ordering::Relaxed);
            if measured {
                let mut r = lock(&task.recorder);
                r.records += batch.records;
                r.bytes += batch.value_bytes;
                r.requests += 1;
            }
        }
        k += 1;
    };
    drop(inflight_tx);
    let read_result = match reader {
        Some(h) => h.join().map_err(|_| anyhow!("reader thread panicked"))?,
        None => Ok(()),
    };
    result.and(read_result)
}

fn read_responses(
    stream: TcpStream,
    version: i16,
    inflight: mpsc::Receiver<InFlight>,
    permits: mpsc::SyncSender<()>,
    recorder: &SharedRecorder,
    shared: &ProduceShared,
    expected_interval_us: Option<u64>,
) -> anyhow::Result<()> {
    let addr = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    stream.set_read_timeout(Some(Duration::from_millis(
        shared.timeout_ms.max(0) as u64 + 30_000,
    )))?;
    let mut input = BufReader::with_capacity(256 * 1024, stream);
    let mut body = Vec::with_capacity(4096);
    while let Ok(entry) = inflight.recv() {
        let mut size = [0u8; 4];
        input
            .read_exact(&mut size)
            .with_context(|| format!("reading a produce response from {addr}"))?;
        let len = i32::from_be_bytes(size);
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| (4..=RESPONSE_BYTES_MAX).contains(&l))
            .ok_or_else(|| anyhow!("bad response size {len} from {addr}"))?;
        body.resize(len, 0);
        input.read_exact(&mut body)?;
        let now = Instant::now();
        let correlation_id = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        if correlation_id != entry.correlation_id {
            bail!(
                "{addr}: response correlation id {correlation_id}, expected {}",
                entry.correlation_id
            );
        }
        let outcome = wire::parse_produce_response(&body[4..], version)?;
        {
            let mut r = lock(recorder);
            if outcome.error_code != 0 {
                if entry.measured && shared.budget.is_some() {
                    shared.claimed.fetch_sub(entry.records, Ordering::Relaxed);
                }
                r.record_error(error_kind("produce", outcome.error_code), None);
            } else {
                shared
                    .sent_total
                    .fetch_add(entry.records, Ordering::Relaxed);
                if entry.measured {
                    r.records += entry.records;
                    r.bytes += entry.value_bytes;
                    r.requests += 1;
                    r.record_latency(
                        now.duration_since(entry.sent).as_micros() as u64,
                        1,
                        expected_interval_us,
                    );
                }
            }
        }
        let _ = permits.send(());
    }
    Ok(())
}

/// The batch size a run uses, from the arguments and the per-connection rate.
pub fn batch_records_for(args: &ProducerArgs) -> usize {
    let configured = args
        .batch_size
        .map_or_else(|| default_batch_records(args.record_size), |b| b as usize);
    effective_batch_records(
        configured,
        args.rate.map(|r| r / args.producers as f64),
        args.linger_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record_batch::validate;

    #[test]
    fn pacer_schedule_is_evenly_spaced_and_never_waits_when_late() {
        // Proves request k is due at start + k * batch/rate and a late sender gets zero wait.
        let start = Instant::now();
        let p = Pacer::new(start, 1000.0, 10); // 10 records per request at 1000/s: every 10 ms
        assert_eq!(p.interval, Duration::from_millis(10));
        assert_eq!(p.due(0), start);
        assert_eq!(p.due(100), start + Duration::from_secs(1));
        assert_eq!(p.wait(5, start), Duration::from_millis(50));
        assert_eq!(p.wait(5, start + Duration::from_secs(9)), Duration::ZERO);
    }

    #[test]
    fn pool_batches_are_valid_and_fixed_keys_stay_in_their_partition() {
        // Proves pre-built batches pass the broker's own validation, count their values, and
        // that fixed keys give one batch per partition their hash reaches.
        let pool = build_pool(
            RecordSize::Fixed(100),
            KeyDistribution::None,
            10,
            Compression::None,
            4,
            1,
        )
        .expect("pool");
        assert_eq!(pool.len(), 1);
        assert_eq!(pool[0].value_bytes, 1000);
        validate(&pool[0].bytes).expect("valid");
        let pool = build_pool(
            RecordSize::Uniform { min: 10, max: 20 },
            KeyDistribution::Random,
            5,
            Compression::Lz4,
            4,
            1,
        )
        .expect("pool");
        assert_eq!(pool.len(), POOL_SHAPES);
        assert!(pool.iter().all(|b| validate(&b.bytes).is_ok()
            && (50..=100).contains(&b.value_bytes)
            && b.value_pos.is_none()));
        let pool = build_pool(
            RecordSize::Fixed(8),
            KeyDistribution::Fixed(3),
            4,
            Compression::None,
            100,
            1,
        )
        .expect("pool");
        let parts: Vec<i32> = pool.iter().filter_map(|b| b.partition).collect();
        assert!(!parts.is_empty() && parts.len() <= 3);
        for j in 0..3 {
            assert!(parts.contains(&partition_for_key(format!("key-{j}").as_bytes(), 100)));
        }
    }

    #[test]
    fn stamped_batches_keep_a_valid_crc_and_carry_the_stamp() {
        // Proves e2e stamping rewrites the first value and timestamps and the CRC still holds.
        let pool = build_pool(
            RecordSize::Fixed(16),
            KeyDistribution::None,
            3,
            Compression::None,
            1,
            1,
        )
        .expect("pool");
        let b = &pool[0];
        let prefix = ProducePrefix::new(8, "c", "t", 1, 100);
        let mut frame = Vec::new();
        prefix.build(&mut frame, 1, 0, &b.bytes);
        let batch_pos = frame.len() - b.bytes.len();
        stamp_batch(&mut frame, batch_pos, b.value_pos, 0xDEAD_BEEF, 1234);
        let batch = &frame[batch_pos..];
        let header = validate(batch).expect("valid after stamping");
        assert_eq!(header.base_timestamp, 1234);
        let pos = wire::first_value_position(batch, 8).expect("pos");
        assert_eq!(&batch[pos..pos + 8], &0xDEAD_BEEFu64.to_be_bytes());
    }
}
