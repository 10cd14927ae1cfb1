//! Produce: send encoded record batches to partition leaders and check every partition's
//! error code.
//!
//! Kafka accepts exactly one record batch per partition per Produce request (v3+), so batches
//! for the same partition go out in successive requests, in the order given — which keeps the
//! order of records within a partition.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::error::{ClientError, Result};
use super::Client;

/// Produce v13 addresses topics by id only; we send names.
const PRODUCE_VERSION_CAP: i16 = 12;

/// How many replicas must have a batch before the broker answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// The broker sends no response at all.
    None,
    Leader,
    /// Every in-sync replica.
    All,
}

impl Acks {
    pub fn code(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Settings of a Produce request.
#[derive(Debug, Clone, Copy)]
pub struct ProduceOptions {
    pub acks: Acks,
    /// How long the broker may wait for replication (acks=all).
    pub timeout_ms: i32,
}

impl Default for ProduceOptions {
    fn default() -> Self {
        ProduceOptions {
            acks: Acks::All,
            timeout_ms: 30_000,
        }
    }
}

/// The broker's answer for one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionAck {
    pub partition: i32,
    /// Offset of the batch's first record; -1 when acks=0 (unknown).
    pub base_offset: i64,
    pub log_append_time_ms: i64,
}

impl Client {
    /// Sends `batches` — (partition, encoded record batch) pairs — to `topic`, grouped by
    /// leader. Returns one ack per batch, in request order per leader.
    pub fn produce(
        &mut self,
        topic: &str,
        batches: &[(i32, Bytes)],
        options: ProduceOptions,
    ) -> Result<Vec<PartitionAck>> {
        let groups = self.group_by_leader(topic, batches.iter().map(|(p, _)| *p))?;
        let mut acks = Vec::with_capacity(batches.len());
        for (leader, partitions) in groups {
            // Split into rounds so that no request carries two batches for one partition.
            let mut rounds: Vec<BTreeMap<i32, Bytes>> = Vec::new();
            let mut taken: BTreeMap<i32, usize> = BTreeMap::new();
            for (partition, batch) in batches.iter().filter(|(p, _)| partitions.contains(p)) {
                let round = taken.entry(*partition).or_insert(0);
                if rounds.len() <= *round {
                    rounds.push(BTreeMap::new());
                }
                if let Some(r) = rounds.get_mut(*round) {
                    r.insert(*partition, batch.clone());
                }
                *round += 1;
            }
            for round in rounds {
                match self.produce_to(leader, topic, round, options) {
                    Ok(mut a) => acks.append(&mut a),
                    Err(e) => {
                        if matches!(
                            e,
                            ClientError::Io { .. }
                                | ClientError::Disconnected { .. }
                                | ClientError::Timeout { .. }
                        ) {
                            self.drop_broker(leader);
                        }
                        if e.kafka_code().is_some() {
                            // NOT_LEADER and friends: the next call re-reads metadata.
                            self.invalidate_metadata();
                        }
                        return Err(e);
                    }
                }
            }
        }
        Ok(acks)
    }

    fn produce_to(
        &mut self,
        leader: i32,
        topic: &str,
        round: BTreeMap<i32, Bytes>,
        options: ProduceOptions,
    ) -> Result<Vec<PartitionAck>> {
        let conn = self.broker(leader)?;
        let version = conn.version_for::<ProduceRequest>(Some(PRODUCE_VERSION_CAP))?;
        let partitions: Vec<i32> = round.keys().copied().collect();
        let request = ProduceRequest::default()
            .with_acks(options.acks.code())
            .with_timeout_ms(options.timeout_ms)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partition_data(
                    round
                        .into_iter()
                        .map(|(index, records)| {
                            PartitionProduceData::default()
                                .with_index(index)
                                .with_records(Some(records))
                        })
                        .collect(),
                )]);
        if options.acks == Acks::None {
            conn.send_no_response(&request, version)?;
            return Ok(partitions
                .into_iter()
                .map(|partition| PartitionAck {
                    partition,
                    base_offset: -1,
                    log_append_time_ms: -1,
                })
                .collect());
        }
        let response = conn.send(&request, version)?;
        let mut acks = Vec::new();
        for t in response.responses {
            for p in t.partition_responses {
                if p.error_code != 0 {
                    let mut message = p.error_message.as_ref().map(|m| m.as_str().to_owned());
                    if let Some(first) = p.record_errors.first() {
                        let detail = first
                            .batch_index_error_message
                            .as_ref()
                            .map_or("", |m| m.as_str());
                        message = Some(format!(
                            "{} (record {}: {detail})",
                            message.unwrap_or_default(),
                            first.batch_index
                        ));
                    }
                    return Err(ClientError::Broker {
                        context: format!("produce to {topic}-{}", p.index),
                        code: p.error_code,
                        message,
                    });
                }
                acks.push(PartitionAck {
                    partition: p.index,
                    base_offset: p.base_offset,
                    log_append_time_ms: p.log_append_time_ms,
                });
            }
        }
        Ok(acks)
    }
}
