//! Ingestion counters, per shard: what arrived, what did not parse, what was dropped.
//!
//! Each shard writes only its own cells (one writer, so a relaxed load and store is an
//! exact count without a locked read-modify-write on the hot path); any thread may read
//! every shard's cells and sum them (`GET /stats` on the HTTP listener, the drop log).
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// One shard's counters.
#[derive(Debug, Default)]
pub struct ShardCounters {
    /// Syslog messages received (every transport), parsed or not.
    pub syslog_messages: AtomicU64,
    /// Syslog messages that did not parse (kept, with a `parse-error` header).
    pub syslog_malformed: AtomicU64,
    /// Syslog messages cut at `syslog_message_max_bytes`.
    pub syslog_truncated: AtomicU64,
    /// UDP datagrams dropped because the shard's memory budget was spent.
    pub udp_dropped: AtomicU64,
    /// Records received over HTTP.
    pub http_records: AtomicU64,
    /// Records whose append failed (answered as failed to RELP and HTTP senders; lost for
    /// plain TCP and UDP senders, which cannot be told).
    pub append_failed: AtomicU64,
    /// Records appended and durable.
    pub appended: AtomicU64,
    /// Syslog, RELP and HTTP connections closed for silence (idle, or a partial frame
    /// pending too long).
    pub connections_timed_out: AtomicU64,
    /// Syslog connections refused because their listener held `syslog_connections_max`.
    pub connections_refused: AtomicU64,
}

impl ShardCounters {
    /// Adds `n` to a cell of this shard. Only the owning shard calls it.
    pub fn add(cell: &AtomicU64, n: u64) {
        cell.store(
            cell.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
}

/// The counters of every shard, and the connections each syslog listener holds (every
/// shard accepts on every listener, so those counts are shared: one atomic per listener,
/// touched at accept and close only).
#[derive(Debug)]
pub struct IngestStats {
    shards: Vec<ShardCounters>,
    listener_connections: Vec<AtomicU64>,
}

/// A sum over the shards, as `GET /stats` reports it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub syslog_messages: u64,
    pub syslog_malformed: u64,
    pub syslog_truncated: u64,
    pub udp_dropped: u64,
    pub http_records: u64,
    pub append_failed: u64,
    pub appended: u64,
    pub connections_timed_out: u64,
    pub connections_refused: u64,
    /// Syslog connections open now, all listeners.
    pub syslog_connections: u64,
}

impl IngestStats {
    /// Counters for `nr_shards` shards and `nr_listeners` syslog listeners.
    pub fn new(nr_shards: usize, nr_listeners: usize) -> Self {
        Self {
            shards: (0..nr_shards.max(1))
                .map(|_| ShardCounters::default())
                .collect(),
            listener_connections: (0..nr_listeners).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts one more connection on syslog listener `listener` unless it holds `max`
    /// already; `false`: refused. An unknown listener index is refused.
    pub fn try_open(&self, listener: usize, max: usize) -> bool {
        let max = u64::try_from(max).unwrap_or(u64::MAX);
        self.listener_connections.get(listener).is_some_and(|open| {
            open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
        })
    }

    /// One connection `try_open` counted on `listener` has closed.
    pub fn close(&self, listener: usize) {
        if let Some(open) = self.listener_connections.get(listener) {
            let _ = open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        }
    }

    /// The cells of `shard` (shard ids are below the count given to `new`; a larger one
    /// gets the last shard's, which only skews a count).
    pub fn shard(&self, shard: usize) -> &ShardCounters {
        let last = self.shards.len().saturating_sub(1);
        &self.shards[shard.min(last)]
    }

    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        for s in &self.shards {
            t.syslog_messages += get(&s.syslog_messages);
            t.syslog_malformed += get(&s.syslog_malformed);
            t.syslog_truncated += get(&s.syslog_truncated);
            t.udp_dropped += get(&s.udp_dropped);
            t.http_records += get(&s.http_records);
            t.append_failed += get(&s.append_failed);
            t.appended += get(&s.appended);
            t.connections_timed_out += get(&s.connections_timed_out);
            t.connections_refused += get(&s.connections_refused);
        }
        t.syslog_connections = self.listener_connections.iter().map(get).sum();
        t
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn totals_sum_the_shards() {
        // Proves each shard's cells add up in the totals.
        let s = IngestStats::new(2, 0);
        ShardCounters::add(&s.shard(0).udp_dropped, 2);
        ShardCounters::add(&s.shard(1).udp_dropped, 3);
        ShardCounters::add(&s.shard(1).syslog_malformed, 1);
        let t = s.totals();
        assert_eq!((t.udp_dropped, t.syslog_malformed), (5, 1));
    }

    #[test]
    fn a_listener_holds_at_most_its_bound() {
        // Proves try_open refuses past the bound, close frees a place, counts are per
        // listener, and an unknown listener is refused.
        let s = IngestStats::new(1, 2);
        assert!(s.try_open(0, 2) && s.try_open(0, 2));
        assert!(!s.try_open(0, 2));
        assert!(s.try_open(1, 2));
        s.close(0);
        assert!(s.try_open(0, 2));
        assert_eq!(s.totals().syslog_connections, 3);
        assert!(!s.try_open(7, 2));
        s.close(7);
    }
}
