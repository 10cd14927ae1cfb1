//! Prometheus metrics, sans-IO: the per-shard registry the data path records into
//! (`registry`), the snapshots a scrape gathers from every shard, the text exposition format
//! 0.0.4 they are rendered in (`render`), the `/proc/self` parsers for the process metrics
//! (`process`) and the routes of the metrics listener (`route`).
//!
//! Thread-per-core: each shard records into its own registry with plain `Cell`s (no atomic,
//! no lock on the produce or fetch path), and a scrape asks every shard over the mesh for a
//! snapshot of its registry and its partitions, then merges and renders them. Nothing here
//! does I/O or knows the executor: the shard reads its state into a `ShardSnapshot`, the
//! server renders a `BrokerSnapshot` into text.
//!
//! Cardinality is bounded: series are per Kafka API (at most `METRICS_API_KEYS_MAX`), per
//! topic and partition this broker holds, per listener (at most `METRICS_LISTENERS_MAX`) and
//! authentication mechanism (a fixed set), per shard, and per consumer group's partition (at
//! most `METRICS_GROUP_LAG_SERIES_MAX` a scrape); never per client or per request.
pub mod process;
pub mod registry;
pub mod render;

pub use registry::{
    with, HistogramSnapshot, PartitionTraffic, ShardMetrics, AUTH_MECHANISM_LABELS,
    LATENCY_BOUNDS_US, LATENCY_BUCKETS,
};

/// What one shard reports to a scrape: its registry's counts and its partitions' state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShardSnapshot {
    pub shard: usize,
    /// Per Kafka API key seen on this shard (only keys with at least one request).
    pub apis: Vec<ApiSnapshot>,
    pub fsync: HistogramSnapshot,
    pub cleaner_bytes_read: u64,
    pub cleaner_bytes_written: u64,
    pub isr_shrinks: u64,
    pub isr_expands: u64,
    /// acks=0/1 produce answers held for the followers, and the milliseconds they waited.
    pub produce_lag_waits: u64,
    pub produce_lag_wait_ms: u64,
    /// Consumer groups this shard coordinates.
    pub consumer_groups: u64,
    /// Replicas assigned here whose log could not be opened.
    pub offline_replicas: u64,
    pub memory_used_bytes: u64,
    pub memory_limit_bytes: u64,
    pub partitions: Vec<PartitionSnapshot>,
    /// Per Kafka listener: connections and failed authentications on this shard.
    pub listeners: Vec<ListenerSnapshot>,
    /// How late the shard's probe timer ran (time a ready task waited for the shard).
    pub task_queue: HistogramSnapshot,
    /// Offsets committed by the consumer groups this shard coordinates (at most
    /// `METRICS_GROUP_LAG_SERIES_MAX`; `group_offsets_omitted` more were left out).
    pub group_offsets: Vec<GroupOffsetSnapshot>,
    pub group_offsets_omitted: u64,
}

/// One listener's connections and failed authentications on one shard.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListenerSnapshot {
    pub listener: String,
    pub open: u64,
    pub accepted: u64,
    pub refused: u64,
    /// (mechanism label, failures), one per `AUTH_MECHANISM_LABELS`.
    pub auth_failures: Vec<(&'static str, u64)>,
}

/// An offset a consumer group committed for one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupOffsetSnapshot {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
}

/// One Kafka API's counts on one shard.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiSnapshot {
    pub api_key: i16,
    pub requests: u64,
    pub errors: u64,
    pub latency: HistogramSnapshot,
}

/// One partition replica's state and traffic, as its shard holds it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionSnapshot {
    pub topic: String,
    pub partition: i32,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub log_start_offset: i64,
    pub size_bytes: u64,
    pub bytes_in: u64,
    pub records_in: u64,
    pub bytes_out: u64,
    /// This broker leads the partition.
    pub leader: bool,
    /// Led here with fewer replicas in sync than assigned (Kafka's UnderReplicatedPartitions).
    pub under_replicated: bool,
}

/// The data directory's filesystem, as the broker last measured it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskSnapshot {
    pub free_bytes: u64,
    pub total_bytes: u64,
    pub reserve_bytes: u64,
}

/// Everything one scrape renders.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrokerSnapshot {
    pub node_id: i32,
    pub shards: Vec<ShardSnapshot>,
    pub disk: DiskSnapshot,
    /// `None` when `/proc/self` could not be read.
    pub process: Option<process::ProcessSnapshot>,
    /// Partitions of the cluster with no leader, as this broker's metadata sees them.
    pub offline_partitions: u64,
    /// High watermarks of partitions with no replica here that consumer groups coordinated
    /// here committed offsets for, as their leaders answered (for consumer-group lag).
    pub remote_high_watermarks: std::collections::HashMap<(String, i32), i64>,
}

/// The partitions consumer groups coordinated here committed offsets for that have no
/// replica on this broker (so no high watermark here to compute lag with), sorted, each
/// once, at most `max`.
pub fn partitions_without_replica(shards: &[ShardSnapshot], max: usize) -> Vec<(String, i32)> {
    let local: std::collections::HashSet<(&str, i32)> = shards
        .iter()
        .flat_map(|s| &s.partitions)
        .map(|p| (p.topic.as_str(), p.partition))
        .collect();
    let wanted: std::collections::BTreeSet<(&str, i32)> = shards
        .iter()
        .flat_map(|s| &s.group_offsets)
        .map(|o| (o.topic.as_str(), o.partition))
        .filter(|k| !local.contains(k))
        .collect();
    wanted
        .into_iter()
        .take(max)
        .map(|(t, p)| (t.to_string(), p))
        .collect()
}

/// What a request to the metrics listener asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics`: the exposition.
    Metrics,
    /// `GET /v1/status/ready`: 200 once the broker serves (Redpanda's path, for load
    /// balancers).
    Ready,
    NotFound,
    MethodNotAllowed,
}

/// Routes a request by method and path (query string already cut). `HEAD` is accepted
/// wherever `GET` is, as HTTP servers must.
pub fn route(method: &str, path: &str) -> Route {
    let known = match path {
        "/metrics" => Route::Metrics,
        "/v1/status/ready" => Route::Ready,
        _ => return Route::NotFound,
    };
    match method {
        "GET" | "HEAD" => known,
        _ => Route::MethodNotAllowed,
    }
}

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        // Proves the two paths, HEAD as GET, 405 for other methods on them, 404 elsewhere.
        assert_eq!(route("GET", "/metrics"), Route::Metrics);
        assert_eq!(route("HEAD", "/metrics"), Route::Metrics);
        assert_eq!(route("GET", "/v1/status/ready"), Route::Ready);
        assert_eq!(route("POST", "/metrics"), Route::MethodNotAllowed);
        assert_eq!(route("GET", "/metrics/"), Route::NotFound);
        assert_eq!(route("GET", "/"), Route::NotFound);
    }
}
