//! `strata bench e2e`: producers and consumers at once; latency from the moment a batch is
//! written to the socket until a consumer reads it back.
//!
//! Producer and consumer run in this one process, so the send time travels as nanoseconds
//! since a shared `Instant` in the first 8 bytes of the batch's first value (uncompressed
//! batches, values of 8 bytes or more); otherwise the batch's `baseTimestamp` gives
//! millisecond resolution. Consumers start at the end offsets seen before producing starts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::args::{CommonArgs, ConsumerArgs, From, ProducerArgs};
use super::report::{Latency, Meter, Reporter, Summary};
use super::{
    leader_groups, partition_ranges, prepare_topic, producer_config, spawn_consumers,
    spawn_producers, supervise, Window, E2E_DRAIN_TIMEOUT,
};

pub fn run(common: &CommonArgs, p: &ProducerArgs, c: &ConsumerArgs) -> anyhow::Result<Summary> {
    let (mut client, topic) = prepare_topic(common, true)?;
    let groups = leader_groups(&mut client, &topic)?;
    let ranges = partition_ranges(&mut client, &topic, From::Latest, false)?;
    let window = Window::new(common, true);
    let base = Instant::now();
    let produce_stop = Arc::new(AtomicBool::new(false));
    let consume_stop = Arc::new(AtomicBool::new(false));
    let mut e2e_meter = Meter::new("e2e", true);
    let (consumers, consume_shared) = spawn_consumers(
        common,
        c,
        &groups,
        &ranges,
        &mut e2e_meter,
        &window,
        consume_stop.clone(),
        Some(base),
    )?;
    let mut produce_meter = Meter::new("produce", p.acks != crate::cli::AcksArg::None);
    let (producers, produce_shared) = spawn_producers(
        common,
        p,
        &groups,
        topic.partitions.len() as i32,
        &mut produce_meter,
        &window,
        produce_stop.clone(),
        Some(base),
    )?;
    let reporter = Reporter::start(
        vec![e2e_meter.clone(), produce_meter.clone()],
        common.histogram_log.clone(),
        window.measure_from,
    )?;
    let end = supervise(producers, &produce_stop, &window, &mut produce_meter)?;
    // Let consumers read everything that was acknowledged, bounded in time.
    let drain_deadline = Instant::now() + E2E_DRAIN_TIMEOUT;
    let target = produce_shared.sent_total.load(Ordering::Relaxed);
    while consume_shared.consumed_total.load(Ordering::Relaxed) < target
        && Instant::now() < drain_deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    consume_stop.store(true, Ordering::Relaxed);
    let no_window = Window {
        measure_from: window.measure_from,
        measure_until: None,
    };
    supervise(consumers, &consume_stop, &no_window, &mut e2e_meter)?;
    reporter.finish()?;
    let duration = end.saturating_duration_since(window.measure_from);
    let consumed = e2e_meter.totals();
    let produced = produce_meter.totals();
    let mut summary = Summary::new(
        "e2e",
        common.label.clone(),
        &consumed,
        "record batches",
        duration,
        producer_config(common, p, super::produce::batch_records_for(p)),
    );
    summary
        .extra
        .insert("produce_records".into(), produced.records.into());
    summary.extra.insert(
        "produce_records_per_sec".into(),
        serde_json::json!((produced.records as f64 / duration.as_secs_f64().max(1e-9)).round()),
    );
    summary.extra.insert(
        "produce_mb_per_sec".into(),
        serde_json::json!(produced.bytes as f64 / duration.as_secs_f64().max(1e-9) / 1e6),
    );
    summary.extra.insert(
        "produce_latency_us".into(),
        serde_json::to_value(Latency::of(&produced.histogram))?,
    );
    summary
        .extra
        .insert("produce_errors".into(), produced.errors.into());
    // The produce side's errors are errors of the run too, listed with the consume side's.
    summary.add_errors("", &produced.errors_by_kind);
    Ok(summary)
}
