//! `strata bench consume`: full fetches over one connection per consumer, counting records
//! from batch headers only.
//!
//! A fetch's next offset depends on the previous answer, so each connection has one Fetch in
//! flight; throughput comes from large `partition_max_bytes` and several connections. The
//! response is read into a reused buffer and walked in place (`wire`), never decoded into
//! records. In e2e runs each batch's send time is read from its first value (or, for
//! compressed batches, from `baseTimestamp` at millisecond resolution).

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use super::produce::E2E_STAMP_BYTES;
use super::report::{error_kind, lock, SharedRecorder};
use super::wire::{self, FetchPosition};
use crate::clock::{Clock, SystemClock};

/// Largest Fetch response accepted (the broker caps at 64 MiB; slack for framing).
const FETCH_RESPONSE_BYTES_MAX: usize = 80 * 1024 * 1024;
/// Consecutive failed fetches (each followed by a 50 ms pause) before a consumer gives up.
const FETCH_FAILURES_MAX: u32 = 100;
/// Kafka's OFFSET_OUT_OF_RANGE.
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// What every consumer connection shares.
pub struct ConsumeShared {
    pub topic: String,
    pub client_id: String,
    pub max_wait_ms: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
    pub measure_from: Instant,
    /// Measured records to read in all (`--records`).
    pub budget: Option<u64>,
    pub consumed: AtomicU64,
    /// Records read in all, warm-up included.
    pub consumed_total: Arc<AtomicU64>,
    pub stop: Arc<AtomicBool>,
    /// e2e: send stamps are relative to this instant.
    pub e2e_base: Option<Instant>,
}

/// One partition's range for a consumer.
#[derive(Debug, Clone, Copy)]
pub struct PartitionRange {
    pub partition: i32,
    pub start: i64,
    /// Stop this partition here (drain mode); None = follow the log.
    pub end: Option<i64>,
}

/// One consumer connection's assignment.
pub struct ConsumerTask {
    pub index: usize,
    pub addr: String,
    pub version: i16,
    pub ranges: Vec<PartitionRange>,
    pub recorder: SharedRecorder,
}

/// The e2e latency of one fetched batch, in µs: from the stamp in its first value when there
/// is one, else from its baseTimestamp (ms).
fn batch_latency_us(batch: &[u8], base: Instant, now: Instant) -> Option<u64> {
    if let Some(pos) = wire::first_value_position(batch, E2E_STAMP_BYTES) {
        let mut stamp = [0u8; 8];
        stamp.copy_from_slice(batch.get(pos..pos + 8)?);
        let sent_ns = u64::from_be_bytes(stamp);
        let now_ns = now.duration_since(base).as_nanos() as u64;
        return Some(now_ns.saturating_sub(sent_ns) / 1000);
    }
    let ts = i64::from_be_bytes(batch.get(27..35)?.try_into().ok()?);
    Some((SystemClock.wall_ms() - ts).max(0) as u64 * 1000)
}

/// Runs one consumer connection until its ranges are drained, the budget is used or stopped.
pub fn run_consumer(shared: Arc<ConsumeShared>, task: ConsumerTask) -> anyhow::Result<()> {
    if task.ranges.is_empty() {
        return Ok(());
    }
    let stream =
        TcpStream::connect(&task.addr).with_context(|| format!("connecting to {}", task.addr))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_millis(
        shared.max_wait_ms.max(0) as u64 + 30_000,
    )))?;
    let mut writer = stream.try_clone()?;
    let mut input = BufReader::with_capacity(1 << 20, stream);
    let mut positions: Vec<FetchPosition> = Vec::with_capacity(task.ranges.len());
    let mut offsets: Vec<(i32, i64, Option<i64>)> = task
        .ranges
        .iter()
        .map(|r| (r.partition, r.start, r.end))
        .collect();
    offsets.sort_unstable_by_key(|o| o.0);
    let mut request = Vec::new();
    let mut body: Vec<u8> = Vec::new();
    let mut correlation_id = 0i32;
    let mut failures = 0u32;
    while !shared.stop.load(Ordering::Relaxed) {
        positions.clear();
        positions.extend(
            offsets
                .iter()
                .filter(|(_, off, end)| end.is_none_or(|e| *off < e))
                .map(|&(partition, offset, _)| FetchPosition { partition, offset }),
        );
        if positions.is_empty() {
            break;
        }
        correlation_id = correlation_id.wrapping_add(1);
        wire::build_fetch(
            &mut request,
            task.version,
            correlation_id,
            &shared.client_id,
            &shared.topic,
            &positions,
            shared.max_wait_ms,
            shared.max_bytes,
            shared.partition_max_bytes,
        );
        let sent = Instant::now();
        writer
            .write_all(&request)
            .with_context(|| format!("sending a fetch to {}", task.addr))?;
        let mut size = [0u8; 4];
        input
            .read_exact(&mut size)
            .with_context(|| format!("reading a fetch response from {}", task.addr))?;
        let len = i32::from_be_bytes(size);
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| (4..=FETCH_RESPONSE_BYTES_MAX).contains(&l))
            .ok_or_else(|| anyhow!("bad fetch response size {len}"))?;
        body.resize(len, 0);
        input.read_exact(&mut body)?;
        let now = Instant::now();
        let got_id = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
        if got_id != correlation_id {
            bail!(
                "{}: fetch response correlation id {got_id}, expected {correlation_id}",
                task.addr
            );
        }
        let measured = sent >= shared.measure_from;
        let mut records = 0u64;
        let mut bytes = 0u64;
        // Every partition that answered an error: each is counted, retriable or not.
        let mut failures_now: Vec<(i32, i16)> = Vec::new();
        let mut latencies: Vec<(u64, u64)> = Vec::new();
        let top = wire::parse_fetch_response(&body[4..], task.version, |p| {
            if p.error_code != 0 {
                failures_now.push((p.partition, p.error_code));
                return;
            }
            let Ok(i) = offsets.binary_search_by_key(&p.partition, |o| o.0) else {
                return;
            };
            let from = offsets[i].1;
            let tally = wire::tally_batches(p.records, from, |batch, count| {
                if let (Some(base), true) = (shared.e2e_base, measured) {
                    if let Some(l) = batch_latency_us(batch, base, now) {
                        latencies.push((l, count));
                    }
                }
            });
            records += tally.records;
            bytes += tally.bytes;
            if let Some(next) = tally.next_offset {
                offsets[i].1 = next.max(from);
            }
        })?;
        shared.consumed_total.fetch_add(records, Ordering::Relaxed);
        {
            let mut r = lock(&task.recorder);
            if top != 0 {
                r.record_error(error_kind("fetch", top), None);
            }
            for &(partition, code) in &failures_now {
                r.record_error(
                    error_kind("fetch", code),
                    Some(format!(
                        "fetch partition {partition}: {}",
                        crate::client::error_code_name(code)
                    )),
                );
            }
            if let Some(&(partition, _)) = failures_now
                .iter()
                .find(|&&(_, code)| code == OFFSET_OUT_OF_RANGE)
            {
                bail!("partition {partition}: offset out of range");
            }
            if measured {
                r.records += records;
                r.bytes += bytes;
                r.requests += 1;
                if shared.e2e_base.is_some() {
                    for (l, count) in latencies {
                        r.record_latency(l, count, None);
                    }
                } else {
                    // Plain consume: the latency of each Fetch round trip.
                    r.record_latency(now.duration_since(sent).as_micros() as u64, 1, None);
                }
            }
        }
        if measured {
            if let Some(budget) = shared.budget {
                if shared.consumed.fetch_add(records, Ordering::Relaxed) + records >= budget {
                    shared.stop.store(true, Ordering::Relaxed);
                }
            }
        }
        if top != 0 || !failures_now.is_empty() {
            failures += 1;
            if failures >= FETCH_FAILURES_MAX {
                let (partition, code) = failures_now.last().copied().unwrap_or((-1, top));
                bail!(
                    "{}: {failures} fetches in a row failed; last: partition {partition}: {}",
                    task.addr,
                    crate::client::error_code_name(code)
                );
            }
            // Leadership or transient trouble: back off briefly instead of spinning.
            std::thread::sleep(Duration::from_millis(50));
        } else {
            failures = 0;
        }
    }
    Ok(())
}
