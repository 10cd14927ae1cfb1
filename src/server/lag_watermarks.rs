//! High watermarks of partitions this broker holds no replica of, for consumer-group lag.
//!
//! A group's coordinator knows what the group committed for every partition, but the high
//! watermark only of the partitions it holds a replica of. Kafka-style exporters report lag
//! for every committed partition, so at scrape time the coordinator asks each other leader,
//! as a consumer would: one ListOffsets (latest, READ_UNCOMMITTED: the high watermark) per
//! leader broker for all its partitions, concurrently, connecting and answering each bounded
//! by `METRICS_REMOTE_HW_TIMEOUT_MS`. The partitions asked for are at most
//! `METRICS_GROUP_LAG_SERIES_MAX` (the lag series bound), and the answers are reused for
//! `METRICS_REMOTE_HW_CACHE_MS`, so a scrape costs the cluster at most one small request per
//! broker, and back-to-back scrapes nothing. A leader that does not answer in time leaves
//! its partitions out of that scrape, as before.
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::debug;

use crate::limits::{METRICS_REMOTE_HW_CACHE_MS, METRICS_REMOTE_HW_TIMEOUT_MS};
use crate::shard::peer::PeerConnection;
use crate::shard::ShardCtx;

/// What the leaders answered, keyed by (topic, partition).
pub type HighWatermarks = HashMap<(String, i32), i64>;

/// ListOffsets v7 (the version the replica fetcher speaks to peers).
const LIST_OFFSETS_VERSION: i16 = 7;
/// ListOffsets' "latest" timestamp: the high watermark under READ_UNCOMMITTED.
const LATEST: i64 = -1;

thread_local! {
    /// This shard's last answers and when they were asked for.
    static CACHE: RefCell<Option<(Instant, HighWatermarks)>> = const { RefCell::new(None) };
}

/// The leaders' high watermarks of `wanted` (partitions with no replica here), from the
/// cache when it is fresh, else asked now.
pub async fn lookup(ctx: &Rc<ShardCtx>, wanted: Vec<(String, i32)>) -> HighWatermarks {
    if wanted.is_empty() {
        return HighWatermarks::new();
    }
    let fresh = Duration::from_millis(METRICS_REMOTE_HW_CACHE_MS);
    let cached = CACHE.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|(at, _)| at.elapsed() < fresh)
            .map(|(_, hws)| hws.clone())
    });
    if let Some(hws) = cached {
        return hws;
    }
    let by_leader = group_by_leader(ctx, wanted);
    let answers = futures::future::join_all(
        by_leader
            .into_iter()
            .map(|(addr, parts)| ask(ctx, ctx.shared.catalog.load().local_node, addr, parts)),
    )
    .await;
    let hws: HighWatermarks = answers.into_iter().flatten().collect();
    CACHE.with(|c| *c.borrow_mut() = Some((Instant::now(), hws.clone())));
    hws
}

/// `wanted` grouped by the address of each partition's leader, by topic; partitions with no
/// leader, led here, or of an unknown topic or broker are left out.
fn group_by_leader(
    ctx: &ShardCtx,
    wanted: Vec<(String, i32)>,
) -> BTreeMap<String, BTreeMap<String, Vec<i32>>> {
    let catalog = ctx.shared.catalog.load();
    let mut by_leader: BTreeMap<String, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for (topic, partition) in wanted {
        let leader = catalog
            .topic(&topic)
            .and_then(|t| {
                usize::try_from(partition)
                    .ok()
                    .and_then(|i| t.partitions.get(i))
            })
            .map(|p| p.leader)
            .filter(|l| *l >= 0 && *l != catalog.local_node);
        let Some(addr) = leader
            .and_then(|l| catalog.brokers.get(&l))
            .and_then(|b| ctx.shared.peer_address(b))
        else {
            continue;
        };
        by_leader
            .entry(addr)
            .or_default()
            .entry(topic)
            .or_default()
            .push(partition);
    }
    by_leader
}

/// One ListOffsets to the leader at `addr` for `parts`; what it answered without error.
async fn ask(
    ctx: &ShardCtx,
    me: i32,
    addr: String,
    parts: BTreeMap<String, Vec<i32>>,
) -> Vec<((String, i32), i64)> {
    let timeout = Duration::from_millis(METRICS_REMOTE_HW_TIMEOUT_MS);
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(0)
        .with_topics(
            parts
                .into_iter()
                .map(|(topic, partitions)| {
                    ListOffsetsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic)))
                        .with_partitions(
                            partitions
                                .into_iter()
                                .map(|p| {
                                    ListOffsetsPartition::default()
                                        .with_partition_index(p)
                                        .with_current_leader_epoch(-1)
                                        .with_timestamp(LATEST)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    // Connecting and the call each have the timeout.
    let answer = async {
        // As a broker (TLS, SASL on the inter-broker listener): its principal may describe
        // every topic, whatever the ACLs.
        let security = &ctx.shared.peer_security;
        let mut conn =
            PeerConnection::connect(security, &addr, &format!("strata-metrics-{me}"), timeout)
                .await?;
        conn.call(&request, LIST_OFFSETS_VERSION, timeout).await
    };
    let response = match answer.await {
        Ok(r) => r,
        Err(e) => {
            debug!(%addr, "high watermarks for consumer-group lag: {e}");
            return Vec::new();
        }
    };
    response
        .topics
        .into_iter()
        .flat_map(|t| {
            let topic = t.name.0.to_string();
            t.partitions
                .into_iter()
                .filter(|p| p.error_code == 0 && p.offset >= 0)
                .map(move |p| ((topic.clone(), p.partition_index), p.offset))
        })
        .collect()
}
