//! Fetch and ListOffsets: reading records from partition leaders and finding offsets by time.
//!
//! Fetch uses the newest version both sides speak. From v13 topics are addressed by id, which
//! the metadata gives us; if the metadata carries no topic id (older brokers), Fetch stays at
//! v12, the last version that names topics. Every fetch is a full fetch (no incremental fetch
//! session), which is simple and correct for a CLI consumer.

use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::error::{ClientError, Result};
use super::records::{decode_batches, ConsumedRecord};
use super::{Client, FETCH_PARTITION_BYTES_DEFAULT, FETCH_RESPONSE_BYTES_DEFAULT};

/// The last Fetch version that names topics; v13+ use topic ids.
const FETCH_VERSION_BY_NAME_MAX: i16 = 12;
/// `replica_id` of an ordinary consumer.
const CONSUMER_REPLICA_ID: i32 = -1;
/// Attempts at a ListOffsets whose partition has no leader yet: with the backoff below, about
/// five seconds, longer than a single KRaft node takes to lead its partitions again after a
/// restart (the cold-read figure of `perf/peer.py` met that against Apache Kafka).
pub const LIST_OFFSETS_ATTEMPTS_MAX: u32 = 25;
/// Pause between those attempts.
pub const LIST_OFFSETS_RETRY_BACKOFF: Duration = Duration::from_millis(200);
/// ListOffsets timestamp meaning "the earliest offset".
pub const OFFSET_EARLIEST: i64 = -2;
/// ListOffsets timestamp meaning "the log end offset".
pub const OFFSET_LATEST: i64 = -1;

/// Which offset ListOffsets should find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    /// The first offset whose timestamp is at or after this many ms since the epoch.
    Timestamp(i64),
}

impl OffsetSpec {
    fn timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => OFFSET_EARLIEST,
            OffsetSpec::Latest => OFFSET_LATEST,
            OffsetSpec::Timestamp(ts) => ts,
        }
    }
}

/// Settings of a Fetch request.
#[derive(Debug, Clone, Copy)]
pub struct FetchOptions {
    /// How long the broker may hold the request waiting for `min_bytes`.
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
    /// 0 = read uncommitted, 1 = read committed.
    pub isolation_level: i8,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: FETCH_RESPONSE_BYTES_DEFAULT,
            partition_max_bytes: FETCH_PARTITION_BYTES_DEFAULT,
            isolation_level: 0,
        }
    }
}

/// What one partition returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPartition {
    pub partition: i32,
    /// 0, or the Kafka error code for this partition (e.g. OFFSET_OUT_OF_RANGE).
    pub error_code: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// User records at or after the requested offset.
    pub records: Vec<ConsumedRecord>,
    /// The offset after the last record in the returned batches (control records included);
    /// `None` if no whole batch came back.
    pub next_offset: Option<i64>,
}

impl Client {
    /// Fetches `topic` at `positions` — (partition, offset) pairs — from each partition's leader.
    pub fn fetch(
        &mut self,
        topic: &str,
        positions: &[(i32, i64)],
        options: FetchOptions,
    ) -> Result<Vec<FetchedPartition>> {
        let groups = self.group_by_leader(topic, positions.iter().map(|(p, _)| *p))?;
        let mut out = Vec::with_capacity(positions.len());
        for (leader, partitions) in groups {
            let wanted: Vec<(i32, i64)> = positions
                .iter()
                .copied()
                .filter(|(p, _)| partitions.contains(p))
                .collect();
            match self.fetch_from(leader, topic, &wanted, options) {
                Ok(mut fetched) => {
                    if fetched.iter().any(|f| is_leadership_error(f.error_code)) {
                        self.invalidate_metadata();
                    }
                    out.append(&mut fetched);
                }
                Err(e) => {
                    if matches!(
                        e,
                        ClientError::Io { .. }
                            | ClientError::Disconnected { .. }
                            | ClientError::Timeout { .. }
                    ) {
                        self.drop_broker(leader);
                    }
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    fn fetch_from(
        &mut self,
        leader: i32,
        topic: &str,
        wanted: &[(i32, i64)],
        options: FetchOptions,
    ) -> Result<Vec<FetchedPartition>> {
        let topic_id = self.topic(topic)?.topic_id;
        let cap = if topic_id.is_nil() {
            Some(FETCH_VERSION_BY_NAME_MAX)
        } else {
            None
        };
        let conn = self.broker(leader)?;
        let version = conn.version_for::<FetchRequest>(cap)?;
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(CONSUMER_REPLICA_ID))
            .with_max_wait_ms(options.max_wait_ms)
            .with_min_bytes(options.min_bytes)
            .with_max_bytes(options.max_bytes)
            .with_isolation_level(options.isolation_level)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(if version <= FETCH_VERSION_BY_NAME_MAX {
                    TopicName(StrBytes::from_string(topic.to_owned()))
                } else {
                    TopicName::default()
                })
                .with_topic_id(if version > FETCH_VERSION_BY_NAME_MAX {
                    topic_id
                } else {
                    uuid::Uuid::nil()
                })
                .with_partitions(
                    wanted
                        .iter()
                        .map(|&(partition, offset)| {
                            FetchPartition::default()
                                .with_partition(partition)
                                .with_current_leader_epoch(-1)
                                .with_fetch_offset(offset)
                                .with_last_fetched_epoch(-1)
                                .with_log_start_offset(-1)
                                .with_partition_max_bytes(options.partition_max_bytes)
                        })
                        .collect(),
                )]);
        let wait = Duration::from_millis(u64::try_from(options.max_wait_ms).unwrap_or(0));
        let response = conn.send_waiting(&request, version, wait)?;
        if response.error_code != 0 {
            return Err(ClientError::Broker {
                context: format!("fetch {topic}"),
                code: response.error_code,
                message: None,
            });
        }
        let mut out = Vec::new();
        for t in response.responses {
            // We asked about one topic; an answer about another is ignored, not trusted.
            let ours = if version > FETCH_VERSION_BY_NAME_MAX {
                t.topic_id == topic_id
            } else {
                t.topic.0.as_str() == topic
            };
            if !ours {
                continue;
            }
            for p in t.partitions {
                let from = wanted
                    .iter()
                    .find(|(q, _)| *q == p.partition_index)
                    .map_or(0, |(_, o)| *o);
                let (records, next_offset) = match (&p.records, p.error_code) {
                    (Some(bytes), 0) => decode_batches(bytes, from)?,
                    _ => (Vec::new(), None),
                };
                out.push(FetchedPartition {
                    partition: p.partition_index,
                    error_code: p.error_code,
                    high_watermark: p.high_watermark,
                    log_start_offset: p.log_start_offset,
                    records,
                    next_offset,
                });
            }
        }
        Ok(out)
    }

    /// Finds offsets: for each (partition, spec), the offset the spec names. For a timestamp
    /// later than every record, Kafka answers -1; this returns that as is. A partition
    /// without a leader yet (right after a broker restarts, or while leadership moves) is
    /// asked again with fresh metadata, as Kafka's clients do, for up to
    /// `LIST_OFFSETS_ATTEMPTS_MAX` attempts; any other error (an unknown topic) returns at once.
    pub fn list_offsets(
        &mut self,
        topic: &str,
        specs: &[(i32, OffsetSpec)],
    ) -> Result<Vec<(i32, i64)>> {
        let mut attempt = 1;
        loop {
            match self.list_offsets_once(topic, specs) {
                Err(e) if is_leader_moving(&e) && attempt < LIST_OFFSETS_ATTEMPTS_MAX => {
                    self.invalidate_metadata();
                    std::thread::sleep(LIST_OFFSETS_RETRY_BACKOFF);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn list_offsets_once(
        &mut self,
        topic: &str,
        specs: &[(i32, OffsetSpec)],
    ) -> Result<Vec<(i32, i64)>> {
        let groups = self.group_by_leader(topic, specs.iter().map(|(p, _)| *p))?;
        let mut out = Vec::with_capacity(specs.len());
        for (leader, partitions) in groups {
            let conn = self.broker(leader)?;
            let version = conn.version_for::<ListOffsetsRequest>(None)?;
            let request = ListOffsetsRequest::default()
                .with_replica_id(BrokerId(CONSUMER_REPLICA_ID))
                .with_isolation_level(0)
                .with_timeout_ms(30_000)
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(
                        specs
                            .iter()
                            .filter(|(p, _)| partitions.contains(p))
                            .map(|&(p, spec)| {
                                ListOffsetsPartition::default()
                                    .with_partition_index(p)
                                    .with_current_leader_epoch(-1)
                                    .with_timestamp(spec.timestamp())
                            })
                            .collect(),
                    )]);
            let response = conn.send(&request, version)?;
            for t in response.topics {
                for p in t.partitions {
                    if p.error_code != 0 {
                        if is_leadership_error(p.error_code) {
                            self.invalidate_metadata();
                        }
                        return Err(ClientError::Broker {
                            context: format!("list offsets of {topic}-{}", p.partition_index),
                            code: p.error_code,
                            message: None,
                        });
                    }
                    out.push((p.partition_index, p.offset));
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}

/// A partition whose leader is not (yet) where the metadata said: worth asking again.
fn is_leader_moving(err: &ClientError) -> bool {
    match err {
        ClientError::NoLeader { .. } => true,
        ClientError::Broker { code, .. } => is_leader_moving_code(*code),
        _ => false,
    }
}

/// LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, FENCED_ and UNKNOWN_LEADER_EPOCH.
fn is_leader_moving_code(code: i16) -> bool {
    matches!(code, 5 | 6 | 74 | 75)
}

/// Errors that mean "your metadata is stale": the leader moved, or the topic is unknown
/// (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID).
fn is_leadership_error(code: i16) -> bool {
    is_leader_moving_code(code) || matches!(code, 3 | 100)
}
