//! Measurement and reporting: per-connection recorders (HdrHistogram + counters), the
//! once-a-second reporter (live progress line, HdrHistogram interval log) and the final
//! summary (text or one JSON object).
//!
//! Latencies are recorded in microseconds in histograms covering 1 µs..=1 h with 3 significant
//! digits; a value above the range is clamped to it rather than lost. In open-loop runs each
//! sample is recorded with `record_correct(value, expected_interval)`, which adds the samples a
//! stalled sender failed to take (coordinated omission).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2Serializer;
use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency a histogram tracks: one hour, in µs.
pub const LATENCY_US_MAX: u64 = 3_600_000_000;
/// Significant decimal digits the histograms keep.
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;
/// How often the reporter wakes.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);

fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts; this cannot fail.
    Histogram::new_with_bounds(1, LATENCY_US_MAX, LATENCY_SIGNIFICANT_DIGITS)
        .unwrap_or_else(|e| panic!("histogram bounds: {e}"))
}

/// What one connection measured. Locked by its worker once per response and by the reporter
/// once per second, so the lock is uncontended.
pub struct Recorder {
    pub total: Histogram<u64>,
    pub interval: Histogram<u64>,
    pub records: u64,
    /// Bytes of record values (produce) or of record batches (consume).
    pub bytes: u64,
    pub requests: u64,
    pub errors: u64,
    pub last_error: Option<String>,
    /// Every error seen, counted by kind (`produce: NOT_LEADER_OR_FOLLOWER (retriable)`):
    /// a retriable error is an error of the run too, so none goes unreported.
    pub errors_by_kind: BTreeMap<String, u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            total: new_histogram(),
            interval: new_histogram(),
            records: 0,
            bytes: 0,
            requests: 0,
            errors: 0,
            last_error: None,
            errors_by_kind: BTreeMap::new(),
        }
    }
}

/// The kind under which a broker error code is counted: its name, marked when retriable.
pub fn error_kind(what: &str, code: i16) -> String {
    let name = crate::client::error_code_name(code);
    if crate::client::error::error_code_is_retriable(code) {
        format!("{what}: {name} (retriable)")
    } else {
        format!("{what}: {name}")
    }
}

impl Recorder {
    /// Records `count` samples of `latency_us`; with `expected_interval_us` (open loop), also
    /// the samples coordinated omission hid.
    pub fn record_latency(
        &mut self,
        latency_us: u64,
        count: u64,
        expected_interval_us: Option<u64>,
    ) {
        let value = latency_us.clamp(1, LATENCY_US_MAX);
        let count = count.max(1);
        for h in [&mut self.total, &mut self.interval] {
            // Clamped into range above, so recording cannot fail.
            let _ = match expected_interval_us {
                Some(interval) => h.record_n_correct(value, count, interval),
                None => h.record_n(value, count),
            };
        }
    }

    /// Counts one error of `kind`; `detail` (or the kind) becomes the last error shown.
    pub fn record_error(&mut self, kind: String, detail: Option<String>) {
        self.errors += 1;
        self.last_error = Some(detail.unwrap_or_else(|| kind.clone()));
        *self.errors_by_kind.entry(kind).or_insert(0) += 1;
    }
}

/// A shared recorder handle.
pub type SharedRecorder = Arc<Mutex<Recorder>>;

/// Locks a recorder; a worker that panicked while holding it leaves data that is still usable.
pub fn lock(r: &SharedRecorder) -> MutexGuard<'_, Recorder> {
    r.lock().unwrap_or_else(|p| p.into_inner())
}

/// A named set of recorders: one measurement (produce latency, e2e latency, consume rate).
#[derive(Clone)]
pub struct Meter {
    pub name: &'static str,
    pub recorders: Vec<SharedRecorder>,
    /// Whether this meter has latencies (consume alone does not).
    pub has_latency: bool,
}

impl Meter {
    pub fn new(name: &'static str, has_latency: bool) -> Self {
        Meter {
            name,
            recorders: Vec::new(),
            has_latency,
        }
    }
    pub fn add(&mut self) -> SharedRecorder {
        let r = SharedRecorder::default();
        self.recorders.push(r.clone());
        r
    }
    /// Sums of every recorder, with the merged total histogram.
    pub fn totals(&self) -> Totals {
        let mut t = Totals {
            histogram: new_histogram(),
            records: 0,
            bytes: 0,
            requests: 0,
            errors: 0,
            last_error: None,
            errors_by_kind: BTreeMap::new(),
        };
        for r in &self.recorders {
            let r = lock(r);
            // Same bounds on both sides, so adding cannot fail.
            let _ = t.histogram.add(&r.total);
            t.records += r.records;
            t.bytes += r.bytes;
            t.requests += r.requests;
            t.errors += r.errors;
            if r.last_error.is_some() {
                t.last_error = r.last_error.clone();
            }
            for (kind, n) in &r.errors_by_kind {
                *t.errors_by_kind.entry(kind.clone()).or_insert(0) += n;
            }
        }
        t
    }
    /// Takes and resets every recorder's interval histogram, merged; with the running counts.
    fn take_interval(&self) -> (Histogram<u64>, u64, u64) {
        let mut h = new_histogram();
        let (mut records, mut bytes) = (0, 0);
        for r in &self.recorders {
            let mut r = lock(r);
            let _ = h.add(&r.interval);
            r.interval.reset();
            records += r.records;
            bytes += r.bytes;
        }
        (h, records, bytes)
    }
}

/// Sums over a meter's recorders.
pub struct Totals {
    pub histogram: Histogram<u64>,
    pub records: u64,
    pub bytes: u64,
    pub requests: u64,
    pub errors: u64,
    pub last_error: Option<String>,
    pub errors_by_kind: BTreeMap<String, u64>,
}

/// Latency percentiles in µs.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Option<Latency> {
        if h.is_empty() {
            return None;
        }
        Some(Latency {
            count: h.len(),
            mean: (h.mean() * 10.0).round() / 10.0,
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            p9999: h.value_at_quantile(0.9999),
            max: h.max(),
        })
    }
}

/// The result of a run; `--json` prints it as one object.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub mode: &'static str,
    pub label: String,
    pub records: u64,
    /// Bytes behind `mb_per_sec`: record values (produce, e2e) or record batches (consume).
    pub bytes: u64,
    pub bytes_kind: &'static str,
    pub duration_s: f64,
    pub records_per_sec: f64,
    /// 10^6 bytes per second.
    pub mb_per_sec: f64,
    pub requests: u64,
    /// Every error of the run, retriable ones included (a retried request is still an error).
    pub errors: u64,
    /// `errors` by kind; empty when there was none.
    pub errors_by_kind: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The main latency: produce (send → response) or e2e (send → receipt).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<Latency>,
    /// Other measurements of the run (e2e: the produce side).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, serde_json::Value>,
    /// The settings of the run.
    pub config: serde_json::Value,
}

impl Summary {
    pub fn new(
        mode: &'static str,
        label: String,
        totals: &Totals,
        bytes_kind: &'static str,
        duration: Duration,
        config: serde_json::Value,
    ) -> Summary {
        let secs = duration.as_secs_f64().max(1e-9);
        Summary {
            mode,
            label,
            records: totals.records,
            bytes: totals.bytes,
            bytes_kind,
            duration_s: round3(secs),
            records_per_sec: round3(totals.records as f64 / secs),
            mb_per_sec: round3(totals.bytes as f64 / secs / 1e6),
            requests: totals.requests,
            errors: totals.errors,
            errors_by_kind: totals.errors_by_kind.clone(),
            last_error: totals.last_error.clone(),
            latency_us: Latency::of(&totals.histogram),
            extra: BTreeMap::new(),
            config,
        }
    }

    /// The human-readable summary.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{}: {} records in {:.2} s = {:.0} records/s, {:.2} MB/s ({}), {} requests, {} errors\n",
            self.mode,
            self.records,
            self.duration_s,
            self.records_per_sec,
            self.mb_per_sec,
            self.bytes_kind,
            self.requests,
            self.errors
        );
        if let Some(l) = &self.latency_us {
            s += &format!("  latency µs: {}\n", latency_line(l));
        }
        for (k, v) in &self.extra {
            s += &format!("  {k}: {v}\n");
        }
        for (kind, n) in &self.errors_by_kind {
            s += &format!("  error: {kind} x {n}\n");
        }
        if let Some(e) = &self.last_error {
            s += &format!("  last error: {e}\n");
        }
        s
    }

    /// Adds errors counted elsewhere (the produce side of e2e, a worker that stopped) to this
    /// run's errors, under `prefix`.
    pub fn add_errors(&mut self, prefix: &str, errors_by_kind: &BTreeMap<String, u64>) {
        for (kind, n) in errors_by_kind {
            self.errors += n;
            *self
                .errors_by_kind
                .entry(format!("{prefix}{kind}"))
                .or_insert(0) += n;
        }
    }
}

fn latency_line(l: &Latency) -> String {
    format!(
        "p50 {} p90 {} p99 {} p99.9 {} p99.99 {} max {} (mean {:.1}, n {})",
        l.p50, l.p90, l.p99, l.p999, l.p9999, l.max, l.mean, l.count
    )
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The once-a-second reporter thread: progress line on a terminal, interval log to a file.
pub struct Reporter {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Reporter {
    /// Starts reporting `meters` (the first one drives the progress line's rate).
    pub fn start(
        meters: Vec<Meter>,
        log: Option<PathBuf>,
        measure_from: Instant,
    ) -> anyhow::Result<Reporter> {
        let stop = Arc::new(AtomicBool::new(false));
        let file = match &log {
            Some(path) => Some(
                File::create(path)
                    .map_err(|e| anyhow::anyhow!("creating {}: {e}", path.display()))?,
            ),
            None => None,
        };
        let stop_flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("bench-report".into())
            .spawn(move || report_loop(meters, file, measure_from, &stop_flag))?;
        Ok(Reporter {
            stop,
            handle: Some(handle),
        })
    }

    /// Writes the last interval and stops.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Release);
        match self.handle.take() {
            Some(h) => h
                .join()
                .map_err(|_| anyhow::anyhow!("reporter thread panicked"))?,
            None => Ok(()),
        }
    }
}

fn report_loop(
    meters: Vec<Meter>,
    file: Option<File>,
    measure_from: Instant,
    stop: &AtomicBool,
) -> anyhow::Result<()> {
    let tty = std::io::stderr().is_terminal();
    let started_wall = SystemTime::now();
    let started = Instant::now();
    let mut out = file.map(BufWriter::new);
    let mut serializer = V2Serializer::new();
    let mut log = match out.as_mut() {
        Some(w) => Some(
            IntervalLogWriterBuilder::new()
                .add_comment("strata bench: latency in microseconds; one histogram per second per measurement (tag)")
                .with_start_time(started_wall)
                .with_base_time(started_wall)
                .with_max_value_divisor(1.0)
                .begin_log_with(w, &mut serializer)?,
        ),
        None => None,
    };
    let mut last_tick = started;
    let mut last_counts: Vec<(u64, u64)> = vec![(0, 0); meters.len()];
    loop {
        let stopping = stop.load(Ordering::Acquire);
        if !stopping {
            std::thread::sleep(Duration::from_millis(50));
            if last_tick.elapsed() < REPORT_INTERVAL {
                continue;
            }
        }
        let now = Instant::now();
        let elapsed = now.duration_since(last_tick).as_secs_f64().max(1e-9);
        let mut line = format!("[{:>5.0}s]", now.duration_since(started).as_secs_f64());
        if now < measure_from {
            line += " warm-up";
        }
        for (i, meter) in meters.iter().enumerate() {
            let (h, records, bytes) = meter.take_interval();
            let (r0, b0) = last_counts[i];
            last_counts[i] = (records, bytes);
            line += &format!(
                " {}: {:.0} rec/s {:.1} MB/s",
                meter.name,
                records.saturating_sub(r0) as f64 / elapsed,
                bytes.saturating_sub(b0) as f64 / elapsed / 1e6
            );
            if meter.has_latency && !h.is_empty() {
                line += &format!(" p99 {} µs", h.value_at_quantile(0.99));
            }
            if let (Some(log), true) = (log.as_mut(), meter.has_latency) {
                let start = last_tick.duration_since(started);
                let tag = Tag::new(meter.name);
                log.write_histogram(&h, start, now.duration_since(last_tick), tag)
                    .map_err(|e| anyhow::anyhow!("writing histogram log: {e:?}"))?;
            }
        }
        last_tick = now;
        if tty {
            eprint!("\r{line}\x1b[K");
        }
        if stopping {
            break;
        }
    }
    if tty {
        eprintln!();
    }
    drop(log);
    if let Some(mut w) = out {
        w.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinated_omission_correction_fills_the_gap() {
        // Proves record_latency with an expected interval adds the samples a stalled sender
        // missed: a 10 ms stall at a 1 ms interval yields 10 samples (10, 9, ..., 1 ms).
        let mut r = Recorder::default();
        r.record_latency(10_000, 1, Some(1_000));
        assert_eq!(r.total.len(), 10);
        assert_eq!(r.total.min(), r.total.lowest_equivalent(1_000));
        let mut plain = Recorder::default();
        plain.record_latency(10_000, 1, None);
        assert_eq!(plain.total.len(), 1);
        // A sample within the interval adds nothing.
        let mut fast = Recorder::default();
        fast.record_latency(500, 3, Some(1_000));
        assert_eq!(fast.total.len(), 3);
        // Out-of-range values are clamped, not dropped.
        fast.record_latency(u64::MAX, 1, None);
        assert_eq!(fast.total.len(), 4);
    }

    #[test]
    fn retriable_errors_are_counted_and_every_kind_is_listed() {
        // Proves a retriable broker error (NOT_LEADER_OR_FOLLOWER, 6) counts as an error of the
        // run like a fatal one, each kind is listed with its count in the text and the JSON, and
        // errors added from elsewhere (e2e's produce side) join the total.
        let mut meter = Meter::new("produce", true);
        let a = meter.add();
        let b = meter.add();
        lock(&a).record_error(error_kind("produce", 6), None);
        lock(&b).record_error(error_kind("produce", 6), None);
        lock(&b).record_error(error_kind("produce", 87), None);
        let mut summary = Summary::new(
            "produce",
            String::new(),
            &meter.totals(),
            "record values",
            Duration::from_secs(1),
            serde_json::json!({}),
        );
        assert_eq!(summary.errors, 3);
        let retriable = "produce: NOT_LEADER_OR_FOLLOWER (retriable)";
        assert_eq!(summary.errors_by_kind.get(retriable), Some(&2));
        assert_eq!(
            summary.errors_by_kind.get("produce: INVALID_RECORD"),
            Some(&1)
        );
        let text = summary.text();
        assert!(text.contains(", 3 errors"), "{text}");
        assert!(text.contains(&format!("error: {retriable} x 2")), "{text}");
        let mut other = BTreeMap::new();
        other.insert("produce: connection stopped".to_owned(), 1);
        summary.add_errors("", &other);
        assert_eq!(summary.errors, 4);
        let json = serde_json::to_value(&summary).expect("json");
        assert_eq!(json["errors_by_kind"][retriable], 2);
        assert_eq!(json["errors_by_kind"]["produce: connection stopped"], 1);
    }

    #[test]
    fn summary_json_has_the_documented_fields() {
        // Proves --json output carries records, records_per_sec, mb_per_sec and
        // latency_us.{p50,p99,p999,max}, with rates computed over the measured duration.
        let mut meter = Meter::new("produce", true);
        let r = meter.add();
        {
            let mut r = lock(&r);
            r.records = 2_000;
            r.bytes = 4_000_000;
            for v in 1..=100 {
                r.record_latency(v, 1, None);
            }
        }
        let s = Summary::new(
            "produce",
            "x".into(),
            &meter.totals(),
            "values",
            Duration::from_secs(2),
            serde_json::json!({}),
        );
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&s).expect("json")).expect("parse");
        assert_eq!(v["records"], 2000);
        assert_eq!(v["records_per_sec"], 1000.0);
        assert_eq!(v["mb_per_sec"], 2.0);
        for k in ["p50", "p90", "p99", "p999", "p9999", "max"] {
            assert!(v["latency_us"][k].is_u64(), "{k}");
        }
        assert_eq!(v["latency_us"]["max"], 100);
        assert_eq!(v["latency_us"]["p50"], 50);
        assert!(s.text().contains("1000 records/s"));
    }

    #[test]
    fn interval_log_is_readable() {
        // Proves the reporter writes an interval log that hdrhistogram's own parser reads back.
        let mut meter = Meter::new("produce", true);
        let r = meter.add();
        lock(&r).record_latency(123, 5, None);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("h.hlog");
        let rep = Reporter::start(vec![meter], Some(path.clone()), Instant::now()).expect("start");
        rep.finish().expect("finish");
        let text = std::fs::read(&path).expect("read");
        let mut n = 0;
        for item in hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&text) {
            if let hdrhistogram::serialization::interval_log::LogEntry::Interval(h) =
                item.expect("entry")
            {
                assert_eq!(h.tag().map(|t| t.as_str()), Some("produce"));
                n += 1;
            }
        }
        assert_eq!(n, 1);
    }
}
