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

/// The counters of every shard.
#[derive(Debug)]
pub struct IngestStats {
    shards: Vec<ShardCounters>,
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
}

impl IngestStats {
    pub fn new(nr_shards: usize) -> Self {
        Self {
            shards: (0..nr_shards.max(1))
                .map(|_| ShardCounters::default())
                .collect(),
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
        }
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
        let s = IngestStats::new(2);
        ShardCounters::add(&s.shard(0).udp_dropped, 2);
        ShardCounters::add(&s.shard(1).udp_dropped, 3);
        ShardCounters::add(&s.shard(1).syslog_malformed, 1);
        let t = s.totals();
        assert_eq!((t.udp_dropped, t.syslog_malformed), (5, 1));
    }
}
