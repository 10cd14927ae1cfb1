//! One shard's counters and histograms, in plain `Cell`s.
//!
//! Each shard is one thread, so the registry is a thread-local: the shard's tasks record
//! into it wherever they are (a connection, the flusher, the cleaner) without a context
//! passed down, and the shard's answer to a scrape reads it. Recording is an index and an
//! add: no atomic, no lock, no map, no allocation. Counters wrap rather than panic (they
//! would need 2^64 events). Per-listener counts (connections, failed authentications) are
//! the exception: a short list found by name, for events that are not per request. Traffic per partition lives with the partition
//! (`PartitionTraffic`), so it needs no lookup either and goes when the partition does.
use std::cell::{Cell, RefCell};

use crate::limits::{METRICS_API_KEYS_MAX, METRICS_LISTENERS_MAX};

/// Upper bounds of the latency buckets, in microseconds (rendered in seconds): 100 µs to
/// 10 s, roughly 1-2.5-5 per decade, as Prometheus client libraries' defaults; a last
/// `+Inf` bucket takes the rest.
pub const LATENCY_BOUNDS_US: [u64; 15] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];
/// Buckets of a histogram: one per bound, plus `+Inf`.
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_US.len() + 1;

fn add(cell: &Cell<u64>, n: u64) {
    cell.set(cell.get().wrapping_add(n));
}

/// A latency histogram with the fixed `LATENCY_BOUNDS_US` buckets.
pub struct Histogram {
    /// Observations per bucket (not cumulative: the renderer accumulates).
    counts: [Cell<u64>; LATENCY_BUCKETS],
    sum_us: Cell<u64>,
}

impl Histogram {
    pub const fn new() -> Self {
        Self {
            counts: [const { Cell::new(0) }; LATENCY_BUCKETS],
            sum_us: Cell::new(0),
        }
    }

    pub fn observe_us(&self, us: u64) {
        let bucket = LATENCY_BOUNDS_US.partition_point(|&bound| bound < us);
        if let Some(c) = self.counts.get(bucket) {
            add(c, 1);
        }
        add(&self.sum_us, us);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            counts: std::array::from_fn(|i| self.counts.get(i).map_or(0, Cell::get)),
            sum_us: self.sum_us.get(),
        }
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// A histogram's counts at one moment; snapshots of several shards add up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Per bucket, not cumulative.
    pub counts: [u64; LATENCY_BUCKETS],
    pub sum_us: u64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, c| a.wrapping_add(*c))
    }

    pub fn merge(&mut self, other: &HistogramSnapshot) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.wrapping_add(*b);
        }
        self.sum_us = self.sum_us.wrapping_add(other.sum_us);
    }
}

/// One Kafka API's counters on one shard.
pub struct ApiCounters {
    requests: Cell<u64>,
    errors: Cell<u64>,
    latency: Histogram,
}

impl ApiCounters {
    const fn new() -> Self {
        Self {
            requests: Cell::new(0),
            errors: Cell::new(0),
            latency: Histogram::new(),
        }
    }
}

/// One shard's registry.
pub struct ShardMetrics {
    apis: [ApiCounters; METRICS_API_KEYS_MAX],
    fsync: Histogram,
    cleaner_bytes_read: Cell<u64>,
    cleaner_bytes_written: Cell<u64>,
    isr_shrinks: Cell<u64>,
    isr_expands: Cell<u64>,
    /// acks=0/1 produce answers held for the followers (`replica_produce_lag_max_bytes`),
    /// and the milliseconds they waited in all.
    produce_lag_waits: Cell<u64>,
    produce_lag_wait_ms: Cell<u64>,
    /// Per Kafka listener (at most `METRICS_LISTENERS_MAX`, named by `listeners`): its
    /// connections and failed authentications. A short list searched by name: connections
    /// and authentications are not per-request events.
    listeners: RefCell<Vec<ListenerCounters>>,
    /// How late the shard's probe timer fired: how long a task that became ready waited for
    /// the shard's CPU (see `server::metrics_http::queue_probe`).
    task_queue: Histogram,
}

/// One listener's counts on one shard.
#[derive(Debug, Clone, Default, PartialEq)]
struct ListenerCounters {
    name: String,
    open: u64,
    accepted: u64,
    refused: u64,
    /// Per mechanism label (`AUTH_MECHANISM_LABELS`), failed authentications.
    auth_failures: [u64; AUTH_MECHANISM_LABELS.len()],
}

/// The `mechanism` label values of failed authentications: the SASL mechanisms, `SSL` for
/// a TLS handshake or client certificate that failed, and `none` for a SASL exchange that
/// failed before a mechanism was chosen (an unsupported mechanism, a request before
/// authenticating). A fixed set: the client never chooses a label value.
pub const AUTH_MECHANISM_LABELS: [&str; 6] = [
    "PLAIN",
    "SCRAM-SHA-256",
    "SCRAM-SHA-512",
    "OAUTHBEARER",
    "SSL",
    "none",
];

thread_local! {
    static SHARD: ShardMetrics = const { ShardMetrics::new() };
}

/// Runs `f` on this thread's (this shard's) registry.
pub fn with<R>(f: impl FnOnce(&ShardMetrics) -> R) -> R {
    SHARD.with(f)
}

impl ShardMetrics {
    pub const fn new() -> Self {
        Self {
            apis: [const { ApiCounters::new() }; METRICS_API_KEYS_MAX],
            fsync: Histogram::new(),
            cleaner_bytes_read: Cell::new(0),
            cleaner_bytes_written: Cell::new(0),
            isr_shrinks: Cell::new(0),
            isr_expands: Cell::new(0),
            produce_lag_waits: Cell::new(0),
            produce_lag_wait_ms: Cell::new(0),
            listeners: RefCell::new(Vec::new()),
            task_queue: Histogram::new(),
        }
    }

    /// Runs `f` on the counters of `listener`, created at first use; past
    /// `METRICS_LISTENERS_MAX` listeners (more than a config can name in practice) the
    /// event is not counted rather than growing the list.
    fn on_listener(&self, listener: &str, f: impl FnOnce(&mut ListenerCounters)) {
        let mut all = self.listeners.borrow_mut();
        if let Some(l) = all.iter_mut().find(|l| l.name == listener) {
            f(l);
        } else if all.len() < METRICS_LISTENERS_MAX {
            let mut l = ListenerCounters {
                name: listener.to_string(),
                ..Default::default()
            };
            f(&mut l);
            all.push(l);
        }
    }

    fn api(&self, api_key: i16) -> Option<&ApiCounters> {
        usize::try_from(api_key).ok().and_then(|k| self.apis.get(k))
    }

    /// A request of `api_key` was answered after `latency_us` (`failed`: it could not be
    /// served, and the connection was closed). A key with no slot is not counted.
    pub fn request(&self, api_key: i16, latency_us: u64, failed: bool) {
        if let Some(a) = self.api(api_key) {
            add(&a.requests, 1);
            if failed {
                add(&a.errors, 1);
            }
            a.latency.observe_us(latency_us);
        }
    }

    /// A request that could not even be decoded (counted as a request and an error).
    pub fn request_refused(&self, api_key: i16) {
        if let Some(a) = self.api(api_key) {
            add(&a.requests, 1);
            add(&a.errors, 1);
        }
    }

    /// A connection was accepted on `listener` and is open until `connection_closed`.
    pub fn connection_accepted(&self, listener: &str) {
        self.on_listener(listener, |l| {
            l.accepted = l.accepted.wrapping_add(1);
            l.open = l.open.wrapping_add(1);
        });
    }

    pub fn connection_closed(&self, listener: &str) {
        self.on_listener(listener, |l| l.open = l.open.saturating_sub(1));
    }

    pub fn connection_refused(&self, listener: &str) {
        self.on_listener(listener, |l| l.refused = l.refused.wrapping_add(1));
    }

    /// An authentication failed on `listener`; `mechanism` is one of
    /// `AUTH_MECHANISM_LABELS` (anything else is counted as `none`).
    pub fn authentication_failed(&self, listener: &str, mechanism: &str) {
        let i = AUTH_MECHANISM_LABELS
            .iter()
            .position(|m| *m == mechanism)
            .unwrap_or(AUTH_MECHANISM_LABELS.len() - 1);
        self.on_listener(listener, |l| {
            if let Some(c) = l.auth_failures.get_mut(i) {
                *c = c.wrapping_add(1);
            }
        });
    }

    /// A task that became ready at some moment ran `us` later.
    pub fn task_queue_us(&self, us: u64) {
        self.task_queue.observe_us(us);
    }

    pub fn fsync_us(&self, us: u64) {
        self.fsync.observe_us(us);
    }

    pub fn cleaned(&self, bytes_read: u64, bytes_written: u64) {
        add(&self.cleaner_bytes_read, bytes_read);
        add(&self.cleaner_bytes_written, bytes_written);
    }

    pub fn isr_shrink(&self) {
        add(&self.isr_shrinks, 1);
    }

    pub fn isr_expand(&self) {
        add(&self.isr_expands, 1);
    }

    /// An acks=0/1 produce answer was held `ms` for the followers.
    pub fn produce_lag_waited(&self, ms: u64) {
        add(&self.produce_lag_waits, 1);
        add(&self.produce_lag_wait_ms, ms);
    }

    /// The registry's counts into `into` (the shard fills in the rest: connections open,
    /// partitions, memory).
    pub fn snapshot_into(&self, into: &mut super::ShardSnapshot) {
        into.apis = self
            .apis
            .iter()
            .enumerate()
            .filter(|(_, a)| a.requests.get() > 0)
            .filter_map(|(key, a)| {
                Some(super::ApiSnapshot {
                    api_key: i16::try_from(key).ok()?,
                    requests: a.requests.get(),
                    errors: a.errors.get(),
                    latency: a.latency.snapshot(),
                })
            })
            .collect();
        into.fsync = self.fsync.snapshot();
        into.cleaner_bytes_read = self.cleaner_bytes_read.get();
        into.cleaner_bytes_written = self.cleaner_bytes_written.get();
        into.isr_shrinks = self.isr_shrinks.get();
        into.isr_expands = self.isr_expands.get();
        into.produce_lag_waits = self.produce_lag_waits.get();
        into.produce_lag_wait_ms = self.produce_lag_wait_ms.get();
        into.task_queue = self.task_queue.snapshot();
        into.listeners = self
            .listeners
            .borrow()
            .iter()
            .map(|l| super::ListenerSnapshot {
                listener: l.name.clone(),
                open: l.open,
                accepted: l.accepted,
                refused: l.refused,
                auth_failures: AUTH_MECHANISM_LABELS
                    .iter()
                    .zip(l.auth_failures)
                    .map(|(m, n)| (*m, n))
                    .collect(),
            })
            .collect();
    }
}

impl Default for ShardMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Client traffic of one partition replica: produced bytes and records appended, bytes
/// fetched by consumers (followers' fetches are replication, not counted here). Counted per
/// batch and per read, never per record (a batch's record count comes from its offsets).
#[derive(Debug, Default)]
pub struct PartitionTraffic {
    bytes_in: Cell<u64>,
    records_in: Cell<u64>,
    bytes_out: Cell<u64>,
}

impl PartitionTraffic {
    pub fn appended(&self, bytes: u64, records: u64) {
        add(&self.bytes_in, bytes);
        add(&self.records_in, records);
    }

    pub fn fetched(&self, bytes: u64) {
        add(&self.bytes_out, bytes);
    }

    /// (bytes in, records in, bytes out).
    pub fn get(&self) -> (u64, u64, u64) {
        (
            self.bytes_in.get(),
            self.records_in.get(),
            self.bytes_out.get(),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn listeners_count_connections_and_failures_by_mechanism() {
        // Proves per-listener open/accepted/refused, failures per mechanism label, unknown
        // labels counted as `none`, and the listener bound.
        let m = ShardMetrics::new();
        m.connection_accepted("A");
        m.connection_accepted("A");
        m.connection_closed("A");
        m.connection_refused("B");
        m.authentication_failed("A", "SCRAM-SHA-512");
        m.authentication_failed("A", "made-up");
        for i in 0..METRICS_LISTENERS_MAX + 3 {
            m.connection_accepted(&format!("X{i}"));
        }
        let mut s = crate::metrics::ShardSnapshot::default();
        m.snapshot_into(&mut s);
        assert_eq!(s.listeners.len(), METRICS_LISTENERS_MAX);
        let a = &s.listeners[0];
        assert_eq!(
            (a.listener.as_str(), a.open, a.accepted, a.refused),
            ("A", 1, 2, 0)
        );
        let failed: Vec<_> = a.auth_failures.iter().filter(|f| f.1 > 0).collect();
        assert_eq!(failed, [&("SCRAM-SHA-512", 1), &("none", 1)]);
        assert_eq!((s.listeners[1].refused, s.listeners[1].open), (1, 0));
    }

    #[test]
    fn observations_land_in_the_first_bucket_whose_bound_holds_them() {
        // Proves the bucket choice at, below and above bounds (le is inclusive) and +Inf.
        let h = Histogram::new();
        for us in [0, 100, 101, 250, 10_000_000, 10_000_001, u64::MAX / 2] {
            h.observe_us(us);
        }
        let s = h.snapshot();
        assert_eq!(s.counts[0], 2); // 0 and 100
        assert_eq!(s.counts[1], 2); // 101 and 250
        assert_eq!(s.counts[LATENCY_BUCKETS - 2], 1); // 10 s
        assert_eq!(s.counts[LATENCY_BUCKETS - 1], 2); // past the last bound
        assert_eq!(s.count(), 7);
    }

    #[test]
    fn requests_are_counted_per_api_and_unknown_keys_are_ignored() {
        // Proves per-key counts, errors, that only used keys are reported, and that a key
        // out of range (negative, too large) is dropped rather than panicking.
        let m = ShardMetrics::new();
        m.request(0, 300, false);
        m.request(0, 50, true);
        m.request_refused(1);
        m.request(-1, 1, false);
        m.request(i16::MAX, 1, false);
        let mut s = crate::metrics::ShardSnapshot::default();
        m.snapshot_into(&mut s);
        assert_eq!(s.apis.len(), 2);
        assert_eq!(
            (s.apis[0].api_key, s.apis[0].requests, s.apis[0].errors),
            (0, 2, 1)
        );
        assert_eq!(s.apis[0].latency.sum_us, 350);
        assert_eq!(
            (s.apis[1].api_key, s.apis[1].requests, s.apis[1].errors),
            (1, 1, 1)
        );
        assert_eq!(s.apis[1].latency.count(), 0);
    }

    #[test]
    fn the_thread_local_registry_is_per_thread() {
        // Proves two threads (two shards) do not see each other's counts.
        with(|m| m.connection_accepted("L"));
        let other = std::thread::spawn(|| {
            let mut s = crate::metrics::ShardSnapshot::default();
            with(|m| m.snapshot_into(&mut s));
            s.listeners.len()
        })
        .join()
        .unwrap_or(usize::MAX);
        assert_eq!(other, 0);
        let mut s = crate::metrics::ShardSnapshot::default();
        with(|m| m.snapshot_into(&mut s));
        assert!(s
            .listeners
            .iter()
            .any(|l| l.listener == "L" && l.accepted >= 1));
    }
}
