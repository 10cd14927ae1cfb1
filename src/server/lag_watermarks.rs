//! High watermarks of partitions this broker holds no replica of, for consumer-group lag.
//!
//! A group's coordinator knows what the group committed for every partition, but the high
//! watermark only of the partitions it holds a replica of. Kafka-style exporters report lag
//! for every committed partition, so at scrape time the coordinator asks each other leader,
//! as a consumer would: one ListOffsets (latest, READ_UNCOMMITTED: the high watermark) per
//! leader broker for all its partitions.
//!
//! Bounds, so that a dead, slow or hung leader cannot hang `/metrics`:
//! - the whole round (connect, TLS, SASL and the call, of every leader) ends at one deadline,
//!   `METRICS_REMOTE_HW_TIMEOUT_MS` after it starts; a leader that has not answered by then
//!   leaves its partitions out of that scrape, and the scrape renders what the others said;
//! - at most `METRICS_REMOTE_HW_LEADERS_IN_FLIGHT_MAX` leaders are asked at once;
//! - the partitions asked for are at most `METRICS_GROUP_LAG_SERIES_MAX` (the lag series
//!   bound), and only answers for partitions asked are kept;
//! - a round's answers are reused for `METRICS_REMOTE_HW_CACHE_MS`, and while one scrape on
//!   a shard is asking, other scrapes on that shard reuse the last answers instead of starting
//!   a round of their own: back-to-back or concurrent scrapes cost the cluster one round.
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Duration;

use futures::StreamExt;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::debug;

use crate::limits::{
    METRICS_REMOTE_HW_CACHE_MS, METRICS_REMOTE_HW_LEADERS_IN_FLIGHT_MAX,
    METRICS_REMOTE_HW_TIMEOUT_MS,
};
use crate::shard::peer::PeerConnection;
use crate::shard::ShardCtx;

/// What the leaders answered, keyed by (topic, partition).
pub type HighWatermarks = HashMap<(String, i32), i64>;

/// The partitions to ask one leader for, by topic.
type Asked = BTreeMap<String, BTreeSet<i32>>;

/// ListOffsets v7 (the version the replica fetcher speaks to peers).
const LIST_OFFSETS_VERSION: i16 = 7;
/// ListOffsets' "latest" timestamp: the high watermark under READ_UNCOMMITTED.
const LATEST: i64 = -1;

/// One shard's memory of the last round, and whether a round is under way.
#[derive(Debug, Default)]
struct Cache {
    /// The last round's answers and the monotonic ms it ended at.
    last: Option<(u64, HighWatermarks)>,
    /// A scrape on this shard is asking the leaders now.
    asking: bool,
}

impl Cache {
    /// The answers a scrape at `now_ms` should use without asking: the last round's while
    /// fresh, and while another scrape is asking, the last round's whatever its age (or none
    /// yet). `None` means this scrape asks; `asking` is set until `finish` or `abandon`.
    fn reuse(&mut self, now_ms: u64) -> Option<HighWatermarks> {
        let fresh = self
            .last
            .as_ref()
            .filter(|(at_ms, _)| now_ms.saturating_sub(*at_ms) < METRICS_REMOTE_HW_CACHE_MS);
        if let Some((_, hws)) = fresh {
            return Some(hws.clone());
        }
        if self.asking {
            return Some(
                self.last
                    .as_ref()
                    .map(|(_, h)| h.clone())
                    .unwrap_or_default(),
            );
        }
        self.asking = true;
        None
    }

    /// The round that `reuse` started ended at `now_ms` with `hws`.
    fn finish(&mut self, now_ms: u64, hws: HighWatermarks) {
        self.last = Some((now_ms, hws));
        self.asking = false;
    }

    /// The round that `reuse` started was dropped (its scrape's client went away).
    fn abandon(&mut self) {
        self.asking = false;
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// Clears this shard's `asking` if the scrape that set it is dropped mid-round, so that a
/// scraper hanging up cannot leave every later scrape on the shard reusing stale answers.
struct Round {
    finished: bool,
}

impl Drop for Round {
    fn drop(&mut self) {
        if !self.finished {
            CACHE.with(|c| c.borrow_mut().abandon());
        }
    }
}

/// The leaders' high watermarks of `wanted` (partitions with no replica here), from the
/// cache when it is fresh, else asked now, within `METRICS_REMOTE_HW_TIMEOUT_MS`.
pub async fn lookup(ctx: &Rc<ShardCtx>, wanted: Vec<(String, i32)>) -> HighWatermarks {
    if wanted.is_empty() {
        return HighWatermarks::new();
    }
    let clock = ctx.shared.clock.clone();
    let started_ms = clock.monotonic_ms();
    // The borrow ends with the closure: nothing below holds it across an await.
    if let Some(hws) = CACHE.with(|c| c.borrow_mut().reuse(started_ms)) {
        return hws;
    }
    let mut round = Round { finished: false };
    let deadline_ms = started_ms.saturating_add(METRICS_REMOTE_HW_TIMEOUT_MS);
    let me = ctx.shared.catalog.load().local_node;
    let answers: Vec<Vec<((String, i32), i64)>> =
        futures::stream::iter(group_by_leader(ctx, wanted))
            .map(|(addr, asked)| ask(ctx, me, addr, asked, deadline_ms))
            .buffer_unordered(METRICS_REMOTE_HW_LEADERS_IN_FLIGHT_MAX)
            .collect()
            .await;
    let hws: HighWatermarks = answers.into_iter().flatten().collect();
    let ended_ms = clock.monotonic_ms();
    CACHE.with(|c| c.borrow_mut().finish(ended_ms, hws.clone()));
    round.finished = true;
    hws
}

/// `wanted` grouped by the address of each partition's leader, by topic; partitions with no
/// leader, led here, or of an unknown topic or broker are left out.
fn group_by_leader(ctx: &ShardCtx, wanted: Vec<(String, i32)>) -> BTreeMap<String, Asked> {
    let catalog = ctx.shared.catalog.load();
    let mut by_leader: BTreeMap<String, Asked> = BTreeMap::new();
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
            .insert(partition);
    }
    by_leader
}

/// The ListOffsets asking for the latest offset (the high watermark) of every partition in
/// `asked`, as a consumer (replica id -1, READ_UNCOMMITTED).
fn request(asked: &Asked) -> ListOffsetsRequest {
    ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(0)
        .with_topics(
            asked
                .iter()
                .map(|(topic, partitions)| {
                    ListOffsetsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.clone())))
                        .with_partitions(
                            partitions
                                .iter()
                                .map(|p| {
                                    ListOffsetsPartition::default()
                                        .with_partition_index(*p)
                                        .with_current_leader_epoch(-1)
                                        .with_timestamp(LATEST)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// One ListOffsets to the leader at `addr` for `asked`, given up at `deadline_ms`; what it
/// answered without error for partitions asked.
async fn ask(
    ctx: &ShardCtx,
    me: i32,
    addr: String,
    asked: Asked,
    deadline_ms: u64,
) -> Vec<((String, i32), i64)> {
    let clock = &*ctx.shared.clock;
    // A leader whose turn (past METRICS_REMOTE_HW_LEADERS_IN_FLIGHT_MAX) came at the
    // deadline is not asked at all.
    let left_ms = deadline_ms.saturating_sub(clock.monotonic_ms());
    if left_ms == 0 {
        debug!(%addr, "high watermarks for consumer-group lag: no time left to ask");
        return Vec::new();
    }
    let left = Duration::from_millis(left_ms);
    let request = request(&asked);
    let answer = async {
        // As a broker (TLS, SASL on the inter-broker listener): its principal may describe
        // every topic, whatever the ACLs.
        let security = &ctx.shared.peer_security;
        let mut conn =
            PeerConnection::connect(security, &addr, &format!("strata-metrics-{me}"), left).await?;
        conn.call(&request, LIST_OFFSETS_VERSION, left).await
    };
    // Each step above has `left` on its own; the deadline bounds them together.
    let response = match crate::shard::until(clock, deadline_ms, answer).await {
        Some(Ok(r)) => r,
        Some(Err(e)) => {
            debug!(%addr, "high watermarks for consumer-group lag: {e}");
            return Vec::new();
        }
        None => {
            debug!(%addr, "high watermarks for consumer-group lag: no answer in {METRICS_REMOTE_HW_TIMEOUT_MS} ms");
            return Vec::new();
        }
    };
    response
        .topics
        .into_iter()
        .filter_map(|t| {
            let topic = t.name.0.to_string();
            let partitions = asked.get(&topic)?;
            Some(
                t.partitions
                    .into_iter()
                    .filter(|p| {
                        p.error_code == 0
                            && p.offset >= 0
                            && partitions.contains(&p.partition_index)
                    })
                    .map(|p| ((topic.clone(), p.partition_index), p.offset))
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(hw: i64) -> HighWatermarks {
        [(("t".to_string(), 0), hw)].into_iter().collect()
    }

    #[test]
    fn one_round_at_a_time_and_answers_reused_while_fresh() {
        // Proves the cache's decisions, with time as an argument: the first scrape asks; a
        // scrape while it asks reuses (nothing yet) instead of starting a second round;
        // after the round, scrapes reuse its answers until METRICS_REMOTE_HW_CACHE_MS, then
        // one asks again while the others get the stale answers; an abandoned round lets
        // the next scrape ask.
        let mut c = Cache::default();
        assert_eq!(c.reuse(0), None);
        assert_eq!(c.reuse(10), Some(HighWatermarks::new()));
        c.finish(100, answers(7));
        assert_eq!(
            c.reuse(100 + METRICS_REMOTE_HW_CACHE_MS - 1),
            Some(answers(7))
        );
        assert_eq!(c.reuse(100 + METRICS_REMOTE_HW_CACHE_MS), None);
        assert_eq!(
            c.reuse(100 + METRICS_REMOTE_HW_CACHE_MS + 1),
            Some(answers(7))
        );
        c.abandon();
        assert_eq!(c.reuse(100 + METRICS_REMOTE_HW_CACHE_MS + 2), None);
        c.finish(9_000, answers(8));
        assert_eq!(c.reuse(9_001), Some(answers(8)));
    }

    #[test]
    fn request_asks_the_latest_offset_of_every_partition_asked() {
        // Proves the request names each asked partition once, by topic, with the "latest"
        // timestamp as a consumer (replica -1, READ_UNCOMMITTED) and no leader epoch check.
        let asked: Asked = [
            ("a".to_string(), [2, 0].into_iter().collect()),
            ("b".to_string(), [1].into_iter().collect()),
        ]
        .into_iter()
        .collect();
        let r = request(&asked);
        assert_eq!(r.replica_id, BrokerId(-1));
        assert_eq!(r.isolation_level, 0);
        let got: Vec<(String, i32, i64, i32)> = r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| {
                    (
                        t.name.0.to_string(),
                        p.partition_index,
                        p.timestamp,
                        p.current_leader_epoch,
                    )
                })
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("a".into(), 0, LATEST, -1),
                ("a".into(), 2, LATEST, -1),
                ("b".into(), 1, LATEST, -1)
            ]
        );
    }
}
