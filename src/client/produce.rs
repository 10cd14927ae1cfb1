//! Produce: send encoded record batches to partition leaders and check every partition's
//! error code.
//!
//! Kafka accepts exactly one record batch per partition per Produce request (v3+), so batches
//! for the same partition go out in successive requests, in the order given — which keeps the
//! order of records within a partition.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::error::{ClientError, Result};
use super::Client;

/// Produce v13 addresses topics by id only; we send names.
const PRODUCE_VERSION_CAP: i16 = 12;
/// Attempts per batch before a retriable error is returned to the caller.
pub const PRODUCE_ATTEMPTS_MAX: u32 = 5;
/// Pause between attempts, while leadership settles.
pub const PRODUCE_RETRY_BACKOFF: Duration = Duration::from_millis(200);

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
    /// leader. Returns one ack per batch, in the order given.
    ///
    /// Retriable failures (leader moved, connection lost) are retried up to
    /// [`PRODUCE_ATTEMPTS_MAX`] times with fresh metadata. Batches of one partition are never
    /// reordered: once one fails, the later ones wait for its retry. Like Kafka's producer
    /// without idempotence, a retry after a lost response can write a batch twice.
    pub fn produce(
        &mut self,
        topic: &str,
        batches: &[(i32, Bytes)],
        options: ProduceOptions,
    ) -> Result<Vec<PartitionAck>> {
        let mut acks: Vec<Option<PartitionAck>> = vec![None; batches.len()];
        let mut todo: Vec<usize> = (0..batches.len()).collect();
        let mut attempt = 0;
        while !todo.is_empty() {
            attempt += 1;
            let (left, last_err) =
                self.produce_attempt(topic, batches, &todo, options, &mut acks)?;
            if let Some(err) = last_err {
                if attempt >= PRODUCE_ATTEMPTS_MAX {
                    return Err(err);
                }
                self.invalidate_metadata();
                std::thread::sleep(PRODUCE_RETRY_BACKOFF);
            }
            todo = left;
        }
        Ok(acks.into_iter().flatten().collect())
    }

    /// One pass over `todo` (indexes into `batches`). Returns the indexes left to retry and the
    /// last retriable error; a non-retriable error ends the whole produce.
    fn produce_attempt(
        &mut self,
        topic: &str,
        batches: &[(i32, Bytes)],
        todo: &[usize],
        options: ProduceOptions,
        acks: &mut [Option<PartitionAck>],
    ) -> Result<(Vec<usize>, Option<ClientError>)> {
        let groups = match self.group_by_leader(topic, todo.iter().map(|&i| batches[i].0)) {
            Ok(g) => g,
            Err(e) if e.is_retriable() => return Ok((todo.to_vec(), Some(e))),
            Err(e) => return Err(e),
        };
        let mut left = Vec::new();
        let mut last_err = None;
        for (leader, partitions) in groups {
            // Round k holds the k-th batch of each partition: Kafka takes one batch per
            // partition per request.
            let mut rounds: Vec<Vec<usize>> = Vec::new();
            let mut per_partition: BTreeMap<i32, usize> = BTreeMap::new();
            for &i in todo.iter().filter(|&&i| partitions.contains(&batches[i].0)) {
                let k = per_partition.entry(batches[i].0).or_insert(0);
                if rounds.len() <= *k {
                    rounds.push(Vec::new());
                }
                rounds[*k].push(i);
                *k += 1;
            }
            let mut blocked: BTreeSet<i32> = BTreeSet::new();
            for round in rounds {
                let (send, wait): (Vec<usize>, Vec<usize>) = round
                    .into_iter()
                    .partition(|&i| !blocked.contains(&batches[i].0));
                left.extend(wait);
                if send.is_empty() {
                    continue;
                }
                match self.produce_to(leader, topic, batches, &send, options) {
                    Ok(results) => {
                        for (i, result) in results {
                            match result {
                                Ok(ack) => acks[i] = Some(ack),
                                Err(e) if e.is_retriable() => {
                                    blocked.insert(batches[i].0);
                                    left.push(i);
                                    last_err = Some(e);
                                }
                                Err(e) => return Err(e),
                            }
                        }
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
                        if !e.is_retriable() {
                            return Err(e);
                        }
                        blocked.extend(send.iter().map(|&i| batches[i].0));
                        left.extend(send);
                        last_err = Some(e);
                    }
                }
            }
        }
        left.sort_unstable();
        Ok((left, last_err))
    }

    /// Sends one request carrying `send` (at most one batch per partition) to `leader`.
    /// Returns each batch's own result; `Err` only when the request as a whole failed.
    #[allow(clippy::type_complexity)]
    fn produce_to(
        &mut self,
        leader: i32,
        topic: &str,
        batches: &[(i32, Bytes)],
        send: &[usize],
        options: ProduceOptions,
    ) -> Result<Vec<(usize, Result<PartitionAck>)>> {
        let conn = self.broker(leader)?;
        let version = conn.version_for::<ProduceRequest>(Some(PRODUCE_VERSION_CAP))?;
        let request = ProduceRequest::default()
            .with_acks(options.acks.code())
            .with_timeout_ms(options.timeout_ms)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partition_data(
                    send.iter()
                        .map(|&i| {
                            PartitionProduceData::default()
                                .with_index(batches[i].0)
                                .with_records(Some(batches[i].1.clone()))
                        })
                        .collect(),
                )]);
        if options.acks == Acks::None {
            conn.send_no_response(&request, version)?;
            return Ok(send
                .iter()
                .map(|&i| {
                    let ack = PartitionAck {
                        partition: batches[i].0,
                        base_offset: -1,
                        log_append_time_ms: -1,
                    };
                    (i, Ok(ack))
                })
                .collect());
        }
        let response = conn.send(&request, version)?;
        let mut results = Vec::with_capacity(send.len());
        for t in response.responses {
            for p in t.partition_responses {
                // Map the answer back to the batch we sent for that partition; an answer for a
                // partition we did not send is ignored rather than trusted.
                let Some(&i) = send.iter().find(|&&i| batches[i].0 == p.index) else {
                    continue;
                };
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
                    let err = ClientError::Broker {
                        context: format!("produce to {topic}-{}", p.index),
                        code: p.error_code,
                        message,
                    };
                    results.push((i, Err(err)));
                } else {
                    let ack = PartitionAck {
                        partition: p.index,
                        base_offset: p.base_offset,
                        log_append_time_ms: p.log_append_time_ms,
                    };
                    results.push((i, Ok(ack)));
                }
            }
        }
        // A partition the broker did not answer for is an error, not a silent success.
        for &i in send {
            if !results.iter().any(|(j, _)| *j == i) {
                let err = ClientError::Broker {
                    context: format!(
                        "produce to {topic}-{}: no answer for partition",
                        batches[i].0
                    ),
                    code: -1,
                    message: None,
                };
                results.push((i, Err(err)));
            }
        }
        Ok(results)
    }
}
