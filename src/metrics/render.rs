//! The Prometheus text exposition format, version 0.0.4, of a `BrokerSnapshot`.
//!
//! Each family is written once: `# HELP`, `# TYPE`, then all its samples together (the
//! format requires a family's samples to be contiguous). Label values are escaped (`\`,
//! `"`, newline), help text too (`\`, newline). Histograms are written as Prometheus
//! expects: cumulative `_bucket{le="..."}` series ending in `le="+Inf"` (equal to
//! `_count`), then `_sum` (seconds) and `_count`. Shards' counts are summed; per-shard
//! gauges (connections, memory) keep a `shard` label.
use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};

use super::registry::{HistogramSnapshot, LATENCY_BOUNDS_US};
use super::BrokerSnapshot;

/// Renders a scrape's snapshot.
pub fn render(b: &BrokerSnapshot) -> String {
    let mut out = Out::default();
    requests(&mut out, b);
    connections(&mut out, b);
    topics(&mut out, b);
    partitions(&mut out, b);
    replication(&mut out, b);
    storage(&mut out, b);
    memory(&mut out, b);
    process(&mut out, b);
    out.text
}

/// A Kafka API's name as Kafka's metrics name it (`Produce`, `Fetch`, `ApiVersions`).
fn api_name(key: i16) -> String {
    match kafka_protocol::messages::ApiKey::try_from(key) {
        Ok(api) => format!("{api:?}"),
        Err(_) => format!("ApiKey{key}"),
    }
}

fn requests(out: &mut Out, b: &BrokerSnapshot) {
    let mut apis: BTreeMap<i16, (u64, u64, HistogramSnapshot)> = BTreeMap::new();
    for api in b.shards.iter().flat_map(|s| &s.apis) {
        let e = apis.entry(api.api_key).or_default();
        e.0 = e.0.wrapping_add(api.requests);
        e.1 = e.1.wrapping_add(api.errors);
        e.2.merge(&api.latency);
    }
    let named: Vec<(String, &(u64, u64, HistogramSnapshot))> =
        apis.iter().map(|(k, v)| (api_name(*k), v)).collect();
    out.family(
        "strata_requests_total",
        "counter",
        "Kafka requests received, by API.",
    );
    for (api, (n, _, _)) in &named {
        out.sample("strata_requests_total", &[("api", api.as_str())], n);
    }
    out.family(
        "strata_request_errors_total",
        "counter",
        "Kafka requests that could not be served (undecodable, unsupported, unencodable answer: the connection was closed), by API.",
    );
    for (api, (_, errors, _)) in &named {
        out.sample(
            "strata_request_errors_total",
            &[("api", api.as_str())],
            errors,
        );
    }
    out.family(
        "strata_request_latency_seconds",
        "histogram",
        "Time from a Kafka request's last byte read to its response ready to write, by API (a Fetch includes its long-poll wait, a Produce its durability and replication wait).",
    );
    for (api, (_, _, h)) in &named {
        out.histogram(
            "strata_request_latency_seconds",
            &[("api", api.as_str())],
            h,
        );
    }
}

fn connections(out: &mut Out, b: &BrokerSnapshot) {
    out.family(
        "strata_connections_open",
        "gauge",
        "Kafka client connections open, by listener and shard.",
    );
    for s in &b.shards {
        let shard = s.shard.to_string();
        for l in &s.listeners {
            out.sample(
                "strata_connections_open",
                &[("listener", l.listener.as_str()), ("shard", shard.as_str())],
                l.open,
            );
        }
    }
    // Per listener over all shards: (accepted, refused, failures per mechanism).
    let mut listeners: BTreeMap<&str, (u64, u64, BTreeMap<&str, u64>)> = BTreeMap::new();
    for l in b.shards.iter().flat_map(|s| &s.listeners) {
        let e = listeners.entry(l.listener.as_str()).or_default();
        e.0 = e.0.wrapping_add(l.accepted);
        e.1 = e.1.wrapping_add(l.refused);
        for (mechanism, n) in &l.auth_failures {
            let f = e.2.entry(*mechanism).or_default();
            *f = f.wrapping_add(*n);
        }
    }
    out.family(
        "strata_connections_accepted_total",
        "counter",
        "Kafka client connections accepted, by listener.",
    );
    for (listener, (accepted, _, _)) in &listeners {
        out.sample(
            "strata_connections_accepted_total",
            &[("listener", *listener)],
            accepted,
        );
    }
    out.family(
        "strata_connections_refused_total",
        "counter",
        "Kafka client connections refused by max_connections or max_connections_per_ip, by listener.",
    );
    for (listener, (_, refused, _)) in &listeners {
        out.sample(
            "strata_connections_refused_total",
            &[("listener", *listener)],
            refused,
        );
    }
    out.family(
        "strata_authentication_failures_total",
        "counter",
        "Failed authentications, by listener and mechanism: SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER; none: failed before a mechanism was chosen) and SSL (TLS handshake or client certificate).",
    );
    for (listener, (_, _, failures)) in &listeners {
        for (mechanism, n) in failures {
            out.sample(
                "strata_authentication_failures_total",
                &[("listener", *listener), ("mechanism", *mechanism)],
                n,
            );
        }
    }
}

fn topics(out: &mut Out, b: &BrokerSnapshot) {
    let mut topics: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for p in b.shards.iter().flat_map(|s| &s.partitions) {
        let e = topics.entry(p.topic.as_str()).or_default();
        e.0 = e.0.wrapping_add(p.bytes_in);
        e.1 = e.1.wrapping_add(p.records_in);
        e.2 = e.2.wrapping_add(p.bytes_out);
    }
    type Pick = fn(&(u64, u64, u64)) -> u64;
    let families: [(&str, &str, Pick); 3] = [
        (
            "strata_topic_bytes_in_total",
            "Bytes of record batches produced by clients and appended, by topic (partitions led or held on this broker since they were opened).",
            |t| t.0,
        ),
        (
            "strata_topic_records_in_total",
            "Records produced by clients and appended, by topic.",
            |t| t.1,
        ),
        (
            "strata_topic_bytes_out_total",
            "Bytes of record batches fetched by consumers (not followers), by topic.",
            |t| t.2,
        ),
    ];
    for (name, help, pick) in families {
        out.family(name, "counter", help);
        for (topic, t) in &topics {
            out.sample(name, &[("topic", *topic)], pick(t));
        }
    }
}

fn partitions(out: &mut Out, b: &BrokerSnapshot) {
    let mut rows: Vec<&super::PartitionSnapshot> =
        b.shards.iter().flat_map(|s| &s.partitions).collect();
    rows.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    type Pick = fn(&super::PartitionSnapshot) -> i128;
    let families: [(&str, &str, Pick); 4] = [
        (
            "strata_partition_high_watermark",
            "High watermark of each partition replica on this broker.",
            |p| p.high_watermark.into(),
        ),
        (
            "strata_partition_log_end_offset",
            "Log end offset (next offset to write) of each partition replica on this broker.",
            |p| p.log_end_offset.into(),
        ),
        (
            "strata_partition_log_start_offset",
            "Log start offset of each partition replica on this broker.",
            |p| p.log_start_offset.into(),
        ),
        (
            "strata_partition_size_bytes",
            "Bytes of each partition replica's segment files.",
            |p| p.size_bytes.into(),
        ),
    ];
    for (name, help, pick) in families {
        out.family(name, "gauge", help);
        for p in &rows {
            let partition = p.partition.to_string();
            out.sample(
                name,
                &[
                    ("topic", p.topic.as_str()),
                    ("partition", partition.as_str()),
                ],
                pick(p),
            );
        }
    }
}

fn replication(out: &mut Out, b: &BrokerSnapshot) {
    let parts = || b.shards.iter().flat_map(|s| &s.partitions);
    let sum = |f: fn(&super::ShardSnapshot) -> u64| {
        b.shards.iter().fold(0u64, |a, s| a.wrapping_add(f(s)))
    };
    out.gauge(
        "strata_leader_partitions",
        "Partitions this broker leads.",
        parts().filter(|p| p.leader).count(),
    );
    out.gauge(
        "strata_under_replicated_partitions",
        "Partitions this broker leads whose in-sync replicas are fewer than their replicas.",
        parts().filter(|p| p.under_replicated).count(),
    );
    out.gauge(
        "strata_offline_replicas",
        "Replicas assigned to this broker whose log could not be opened.",
        sum(|s| s.offline_replicas),
    );
    out.counter(
        "strata_isr_shrinks_total",
        "In-sync replica sets of partitions led here that the controller shrank.",
        sum(|s| s.isr_shrinks),
    );
    out.counter(
        "strata_isr_expands_total",
        "In-sync replica sets of partitions led here that the controller expanded.",
        sum(|s| s.isr_expands),
    );
    out.counter(
        "strata_produce_lag_waits_total",
        "acks=0/1 produce answers held until the in-sync followers were within replica_produce_lag_max_bytes.",
        sum(|s| s.produce_lag_waits),
    );
    out.counter(
        "strata_produce_lag_wait_seconds_total",
        "Time acks=0/1 produce answers were held for the in-sync followers.",
        seconds(sum(|s| s.produce_lag_wait_ms).saturating_mul(1000)),
    );
    out.gauge(
        "strata_offline_partitions",
        "Partitions of the cluster with no leader, as this broker's metadata sees them (every broker reports the cluster's count: aggregate with max, not sum).",
        b.offline_partitions,
    );
    out.gauge(
        "strata_consumer_groups",
        "Consumer groups this broker coordinates.",
        sum(|s| s.consumer_groups),
    );
    lag(out, b);
}

/// Consumer-group lag per partition, computed now: the partition's high watermark minus the
/// offset the group committed, for the groups this broker coordinates. The high watermark is
/// that of the partition's replica here, or for a partition with no replica here its
/// leader's (`remote_high_watermarks`); a partition with neither is left out. At most
/// `METRICS_GROUP_LAG_SERIES_MAX` series, the rest counted as omitted.
fn lag(out: &mut Out, b: &BrokerSnapshot) {
    // The leaders' answers first, so a replica here (fresher) wins over one.
    let hw: std::collections::HashMap<(&str, i32), i64> = b
        .remote_high_watermarks
        .iter()
        .map(|((t, p), hw)| ((t.as_str(), *p), *hw))
        .chain(
            b.shards
                .iter()
                .flat_map(|s| &s.partitions)
                .map(|p| ((p.topic.as_str(), p.partition), p.high_watermark)),
        )
        .collect();
    let mut omitted = b
        .shards
        .iter()
        .fold(0u64, |a, s| a.wrapping_add(s.group_offsets_omitted));
    let mut rows: Vec<&super::GroupOffsetSnapshot> =
        b.shards.iter().flat_map(|s| &s.group_offsets).collect();
    rows.sort_by(|x, y| (&x.group, &x.topic, x.partition).cmp(&(&y.group, &y.topic, y.partition)));
    out.family(
        "strata_consumergroup_lag",
        "gauge",
        "Records a consumer group has yet to consume: the partition's high watermark (this broker's replica's, else its leader's, asked at scrape time) minus the group's committed offset, for groups this broker coordinates (Kafka exporters' kafka_consumergroup_lag).",
    );
    let mut rendered = 0usize;
    for r in rows {
        let Some(high_watermark) = hw.get(&(r.topic.as_str(), r.partition)) else {
            continue;
        };
        if rendered >= crate::limits::METRICS_GROUP_LAG_SERIES_MAX {
            omitted = omitted.wrapping_add(1);
            continue;
        }
        rendered += 1;
        let partition = r.partition.to_string();
        out.sample(
            "strata_consumergroup_lag",
            &[
                ("group", r.group.as_str()),
                ("topic", r.topic.as_str()),
                ("partition", partition.as_str()),
            ],
            high_watermark.saturating_sub(r.committed).max(0),
        );
    }
    out.gauge(
        "strata_consumergroup_lag_series_omitted",
        "Committed offsets left out of strata_consumergroup_lag by its bound on series per scrape (METRICS_GROUP_LAG_SERIES_MAX).",
        omitted,
    );
}

fn storage(out: &mut Out, b: &BrokerSnapshot) {
    out.gauge(
        "strata_storage_free_bytes",
        "Free bytes of the data directory's filesystem (estimate between polls).",
        b.disk.free_bytes,
    );
    out.gauge(
        "strata_storage_total_bytes",
        "Size of the data directory's filesystem.",
        b.disk.total_bytes,
    );
    out.gauge(
        "strata_storage_reserve_bytes",
        "Free space kept in reserve: below it client produce is refused (storage_min_free_bytes).",
        b.disk.reserve_bytes,
    );
    let mut fsync = HistogramSnapshot::default();
    for s in &b.shards {
        fsync.merge(&s.fsync);
    }
    out.family(
        "strata_fsync_latency_seconds",
        "histogram",
        "Making partition segment data durable (group commits and segment seals): an fdatasync, or the O_DSYNC writes that replace it under the sync flush policy.",
    );
    out.histogram("strata_fsync_latency_seconds", &[], &fsync);
    let sum = |f: fn(&super::ShardSnapshot) -> u64| {
        b.shards.iter().fold(0u64, |a, s| a.wrapping_add(f(s)))
    };
    out.counter(
        "strata_cleaner_bytes_read_total",
        "Bytes the log cleaner read from compacted logs.",
        sum(|s| s.cleaner_bytes_read),
    );
    out.counter(
        "strata_cleaner_bytes_written_total",
        "Bytes the log cleaner wrote (cleaned segments).",
        sum(|s| s.cleaner_bytes_written),
    );
}

fn memory(out: &mut Out, b: &BrokerSnapshot) {
    out.family(
        "strata_shard_task_queue_seconds",
        "histogram",
        "How long a task that became ready waited for its shard, by shard: the lateness of a probe timer every 100 ms (a shard busy between yields delays every ready task as much).",
    );
    for s in &b.shards {
        let shard = s.shard.to_string();
        out.histogram(
            "strata_shard_task_queue_seconds",
            &[("shard", shard.as_str())],
            &s.task_queue,
        );
    }
    out.family(
        "strata_memory_used_bytes",
        "gauge",
        "Bytes charged to each shard's memory budget.",
    );
    for s in &b.shards {
        let shard = s.shard.to_string();
        out.sample(
            "strata_memory_used_bytes",
            &[("shard", shard.as_str())],
            s.memory_used_bytes,
        );
    }
    out.family(
        "strata_memory_limit_bytes",
        "gauge",
        "Each shard's memory budget (its share of memory_limit_bytes).",
    );
    for s in &b.shards {
        let shard = s.shard.to_string();
        out.sample(
            "strata_memory_limit_bytes",
            &[("shard", shard.as_str())],
            s.memory_limit_bytes,
        );
    }
}

fn process(out: &mut Out, b: &BrokerSnapshot) {
    let Some(p) = b.process else {
        return;
    };
    out.counter(
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        p.cpu_seconds,
    );
    out.gauge(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        p.resident_memory_bytes,
    );
}

#[derive(Default)]
struct Out {
    text: String,
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        debug_assert!(is_kind(kind), "{kind} is not a metric type");
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.text.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.text, " {value}");
    }

    fn counter(&mut self, name: &str, help: &str, value: impl Display) {
        self.family(name, "counter", help);
        self.sample(name, &[], value);
    }

    fn gauge(&mut self, name: &str, help: &str, value: impl Display) {
        self.family(name, "gauge", help);
        self.sample(name, &[], value);
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.text.push('{');
        let mut first = true;
        for (k, v) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
            if !first {
                self.text.push(',');
            }
            first = false;
            self.text.push_str(k);
            self.text.push_str("=\"");
            escape_label_into(&mut self.text, v);
            self.text.push('"');
        }
        self.text.push('}');
    }

    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &HistogramSnapshot) {
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, count) in h.counts.iter().enumerate() {
            cumulative = cumulative.wrapping_add(*count);
            let le = match LATENCY_BOUNDS_US.get(i) {
                Some(us) => seconds(*us),
                None => "+Inf".to_string(),
            };
            self.text.push_str(&bucket);
            self.labels(labels, Some(&le));
            let _ = writeln!(self.text, " {cumulative}");
        }
        self.sample(&format!("{name}_sum"), labels, seconds(h.sum_us));
        self.sample(&format!("{name}_count"), labels, cumulative);
    }
}

fn is_kind(s: &str) -> bool {
    matches!(s, "counter" | "gauge" | "histogram" | "summary" | "untyped")
}

/// Microseconds as decimal seconds (Rust prints floats without exponents).
fn seconds(us: u64) -> String {
    format!("{}", us as f64 / 1e6)
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label_into(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::metrics::{
        ApiSnapshot, GroupOffsetSnapshot, ListenerSnapshot, PartitionSnapshot, ShardSnapshot,
    };
    use std::collections::{HashMap, HashSet};

    fn broker() -> BrokerSnapshot {
        let mut h = HistogramSnapshot::default();
        h.counts[0] = 2;
        h.counts[3] = 1;
        h.sum_us = 1_200;
        let part = |topic: &str, partition, bytes_in| PartitionSnapshot {
            topic: topic.into(),
            partition,
            high_watermark: 10,
            log_end_offset: 11,
            log_start_offset: 0,
            size_bytes: 4096,
            bytes_in,
            records_in: 10,
            bytes_out: 7,
            leader: true,
            under_replicated: partition == 1,
        };
        BrokerSnapshot {
            node_id: 0,
            shards: vec![
                ShardSnapshot {
                    shard: 0,
                    apis: vec![ApiSnapshot {
                        api_key: 0,
                        requests: 3,
                        errors: 1,
                        latency: h,
                    }],
                    listeners: vec![ListenerSnapshot {
                        listener: "SASL".into(),
                        open: 2,
                        accepted: 5,
                        refused: 1,
                        auth_failures: vec![("PLAIN", 0), ("SCRAM-SHA-512", 3)],
                    }],
                    partitions: vec![part("t\"x\\y\nz", 0, 100), part("a", 1, 5)],
                    group_offsets: vec![
                        offset("g", "a", 0, 4),
                        offset("g", "a", 1, 10),
                        offset("g", "elsewhere", 0, 1),
                    ],
                    group_offsets_omitted: 2,
                    task_queue: h,
                    ..Default::default()
                },
                ShardSnapshot {
                    shard: 1,
                    apis: vec![
                        ApiSnapshot {
                            api_key: 0,
                            requests: 1,
                            errors: 0,
                            latency: h,
                        },
                        ApiSnapshot {
                            api_key: 1,
                            requests: 4,
                            ..Default::default()
                        },
                    ],
                    listeners: vec![ListenerSnapshot {
                        listener: "SASL".into(),
                        open: 1,
                        accepted: 1,
                        refused: 0,
                        auth_failures: vec![("PLAIN", 0), ("SCRAM-SHA-512", 1)],
                    }],
                    partitions: vec![part("a", 0, 50)],
                    group_offsets: vec![offset("h", "a", 0, 12)],
                    ..Default::default()
                },
            ],
            disk: Default::default(),
            process: Some(crate::metrics::process::ProcessSnapshot {
                cpu_seconds: 1.5,
                resident_memory_bytes: 1 << 20,
            }),
            offline_partitions: 3,
            remote_high_watermarks: Default::default(),
        }
    }

    fn offset(group: &str, topic: &str, partition: i32, committed: i64) -> GroupOffsetSnapshot {
        GroupOffsetSnapshot {
            group: group.into(),
            topic: topic.into(),
            partition,
            committed,
        }
    }

    /// A strict reader of the text format: every line is a HELP, a TYPE or a sample; a
    /// family's HELP and TYPE come once, before its samples, and its samples are
    /// contiguous; names and label names are valid; label values are well escaped; values
    /// parse as floats. Returns sample (name + labels as written) -> value.
    fn parse_strict(text: &str) -> HashMap<String, f64> {
        let valid_name = |n: &str| {
            !n.is_empty()
                && n.chars().enumerate().all(|(i, c)| {
                    c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
                })
        };
        let mut typed: HashMap<String, String> = HashMap::new();
        let mut closed: HashSet<String> = HashSet::new();
        let mut current: Option<String> = None;
        let mut samples = HashMap::new();
        assert!(text.ends_with('\n'));
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(valid_name(name), "{line}");
                assert!(
                    !typed.contains_key(name),
                    "HELP after TYPE or twice: {line}"
                );
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(is_kind(kind), "{line}");
                assert!(
                    typed.insert(name.into(), kind.into()).is_none(),
                    "TYPE twice: {line}"
                );
                if let Some(c) = current.replace(name.into()) {
                    closed.insert(c);
                }
                continue;
            }
            assert!(!line.starts_with('#') && !line.is_empty(), "{line}");
            let (series, value) = line.rsplit_once(' ').unwrap();
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("value {v:?} in {line}")),
            };
            let name = series.split('{').next().unwrap();
            assert!(valid_name(name), "{line}");
            let family = current.clone().expect("sample before any TYPE");
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|b| typed.get(*b).is_some_and(|k| k == "histogram"))
                .unwrap_or(name);
            assert_eq!(base, family, "sample outside its family: {line}");
            assert!(!closed.contains(base));
            if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
                let inner = labels.strip_prefix('{').unwrap().strip_suffix('}').unwrap();
                let mut chars = inner.chars().peekable();
                while chars.peek().is_some() {
                    let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
                    assert!(valid_name(&key), "{line}");
                    assert_eq!(chars.next(), Some('"'), "{line}");
                    loop {
                        match chars.next().expect("unterminated label value") {
                            '\\' => assert!(matches!(chars.next(), Some('\\' | '"' | 'n'))),
                            '"' => break,
                            '\n' => panic!("raw newline"),
                            _ => {}
                        }
                    }
                    match chars.next() {
                        Some(',') | None => {}
                        other => panic!("{other:?} after a label in {line}"),
                    }
                }
            }
            assert!(
                samples.insert(series.to_string(), value).is_none(),
                "duplicate {line}"
            );
        }
        samples
    }

    #[test]
    fn a_snapshot_renders_as_valid_exposition_with_merged_counts() {
        // Proves the output passes the strict reader, shards' counts are summed per API and
        // per topic, labels are escaped, and histograms are cumulative with +Inf == count.
        let text = render(&broker());
        let s = parse_strict(&text);
        assert_eq!(s["strata_requests_total{api=\"Produce\"}"], 4.0);
        assert_eq!(s["strata_requests_total{api=\"Fetch\"}"], 4.0);
        assert_eq!(s["strata_request_errors_total{api=\"Produce\"}"], 1.0);
        let b = "strata_request_latency_seconds_bucket{api=\"Produce\",le=";
        assert_eq!(s[&format!("{b}\"0.0001\"}}")], 4.0);
        assert_eq!(s[&format!("{b}\"0.0005\"}}")], 4.0);
        assert_eq!(s[&format!("{b}\"0.001\"}}")], 6.0);
        assert_eq!(s[&format!("{b}\"+Inf\"}}")], 6.0);
        assert_eq!(
            s["strata_request_latency_seconds_count{api=\"Produce\"}"],
            6.0
        );
        assert_eq!(
            s["strata_request_latency_seconds_sum{api=\"Produce\"}"],
            0.0024
        );
        assert_eq!(s["strata_topic_bytes_in_total{topic=\"a\"}"], 55.0);
        assert_eq!(
            s["strata_topic_bytes_in_total{topic=\"t\\\"x\\\\y\\nz\"}"],
            100.0
        );
        assert_eq!(
            s["strata_partition_high_watermark{topic=\"a\",partition=\"1\"}"],
            10.0
        );
        assert_eq!(s["strata_under_replicated_partitions"], 1.0);
        assert_eq!(s["strata_leader_partitions"], 3.0);
        assert_eq!(
            s["strata_connections_open{listener=\"SASL\",shard=\"0\"}"],
            2.0
        );
        assert_eq!(
            s["strata_connections_accepted_total{listener=\"SASL\"}"],
            6.0
        );
        assert_eq!(
            s["strata_connections_refused_total{listener=\"SASL\"}"],
            1.0
        );
        let failures = "strata_authentication_failures_total{listener=\"SASL\",mechanism=";
        assert_eq!(s[&format!("{failures}\"SCRAM-SHA-512\"}}")], 4.0);
        assert_eq!(s[&format!("{failures}\"PLAIN\"}}")], 0.0);
        // Lag: high watermark 10 minus the committed offset; a committed offset past the
        // high watermark is lag 0; a partition not held here has no series.
        let lag = "strata_consumergroup_lag{group=";
        assert_eq!(s[&format!("{lag}\"g\",topic=\"a\",partition=\"0\"}}")], 6.0);
        assert_eq!(s[&format!("{lag}\"g\",topic=\"a\",partition=\"1\"}}")], 0.0);
        assert_eq!(s[&format!("{lag}\"h\",topic=\"a\",partition=\"0\"}}")], 0.0);
        assert!(!text.contains("elsewhere"));
        assert_eq!(s["strata_consumergroup_lag_series_omitted"], 2.0);
        assert_eq!(s["strata_offline_partitions"], 3.0);
        assert_eq!(s["strata_shard_task_queue_seconds_count{shard=\"0\"}"], 3.0);
        assert_eq!(s["process_cpu_seconds_total"], 1.5);
        assert_eq!(s["strata_fsync_latency_seconds_count"], 0.0);
        assert!(text.contains("# TYPE strata_request_latency_seconds histogram\n"));
    }

    #[test]
    fn lag_of_a_partition_held_elsewhere_uses_its_leaders_high_watermark() {
        // Proves the partition with no replica here is the one asked of its leader, once
        // and bounded, and that its lag is computed from the leader's answer; a replica
        // here wins over a (staler) answer for the same partition.
        let mut b = broker();
        assert_eq!(
            crate::metrics::partitions_without_replica(&b.shards, 10),
            vec![("elsewhere".to_string(), 0)]
        );
        assert!(crate::metrics::partitions_without_replica(&b.shards, 0).is_empty());
        b.remote_high_watermarks = [
            (("elsewhere".to_string(), 0), 21),
            (("a".to_string(), 0), 99),
        ]
        .into_iter()
        .collect();
        let s = parse_strict(&render(&b));
        let lag = "strata_consumergroup_lag{group=";
        assert_eq!(
            s[&format!("{lag}\"g\",topic=\"elsewhere\",partition=\"0\"}}")],
            20.0
        );
        assert_eq!(s[&format!("{lag}\"g\",topic=\"a\",partition=\"0\"}}")], 6.0);
    }

    #[test]
    fn lag_series_are_bounded() {
        // Proves a scrape renders at most METRICS_GROUP_LAG_SERIES_MAX lag series and
        // counts the rest (plus what the shards already left out) as omitted.
        let max = crate::limits::METRICS_GROUP_LAG_SERIES_MAX;
        let mut b = broker();
        b.shards[1].group_offsets = (0..max + 5)
            .map(|i| offset(&format!("g{i:06}"), "a", 0, 1))
            .collect();
        let s = parse_strict(&render(&b));
        let lags = s
            .keys()
            .filter(|k| k.starts_with("strata_consumergroup_lag{"))
            .count();
        assert_eq!(lags, max);
        // 3 from shard 0 (2 held here) + max + 5: 7 past the bound, plus shard 0's 2.
        assert_eq!(s["strata_consumergroup_lag_series_omitted"], 9.0);
    }

    #[test]
    fn an_empty_broker_still_renders_every_family_header() {
        // Proves a broker with no shards' data yet renders a valid exposition (scrapes
        // before the first request must not fail) without the process families if unknown.
        let text = render(&BrokerSnapshot::default());
        let s = parse_strict(&text);
        assert_eq!(s["strata_fsync_latency_seconds_bucket{le=\"+Inf\"}"], 0.0);
        assert!(!text.contains("process_cpu_seconds_total"));
    }

    #[test]
    fn escaping() {
        // Proves label values escape backslash, quote and newline, and help text escapes
        // backslash and newline (quotes stay as they are).
        let mut s = String::new();
        escape_label_into(&mut s, "a\\b\"c\nd");
        assert_eq!(s, "a\\\\b\\\"c\\nd");
        assert_eq!(escape_help("x\\y\n\"z\""), "x\\\\y\\n\"z\"");
    }
}
