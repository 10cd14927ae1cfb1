//! Transaction administration (KIP-664), as Kafka's admin client does it: ListTransactions
//! on every broker, DescribeTransactions on an id's coordinator (FindCoordinator key type 1),
//! DescribeProducers on a partition's leader, and the abort of a hanging transaction — a
//! WriteTxnMarkers ABORT sent to the partition's leader in the producer's name.

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, FindCoordinatorRequest,
    ListTransactionsRequest, ProducerId, TopicName, TransactionalId, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::connection::Connection;
use super::error::{check_code, ClientError, Result};
use super::Client;

/// FindCoordinator v3 carries one key (v4+ batches them; one is all the CLI needs).
const FIND_COORDINATOR_VERSION_CAP: i16 = 3;
/// FindCoordinator key type of a transactional id.
const KEY_TYPE_TRANSACTION: i8 = 1;

/// One transactional id as ListTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnListing {
    pub transactional_id: String,
    /// The broker coordinating it.
    pub coordinator: i32,
    pub producer_id: i64,
    pub state: String,
}

/// A transactional id as DescribeTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnInfo {
    pub transactional_id: String,
    pub coordinator: i32,
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// -1 if no transaction was started.
    pub start_time_ms: i64,
    pub partitions: Vec<(String, i32)>,
}

/// One producer of a partition as DescribeProducers reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerInfo {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// -1: no marker written yet.
    pub coordinator_epoch: i32,
    /// First offset of the open transaction; -1 if none.
    pub txn_start_offset: i64,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

impl Client {
    /// The coordinator of `transactional_id`: its node id and connection.
    fn txn_coordinator(&mut self, transactional_id: &str) -> Result<(i32, &mut Connection)> {
        let version = self
            .bootstrap
            .version_for::<FindCoordinatorRequest>(Some(FIND_COORDINATOR_VERSION_CAP))?;
        let request = FindCoordinatorRequest::default()
            .with_key(s(transactional_id))
            .with_key_type(KEY_TYPE_TRANSACTION);
        let response = self.bootstrap.send(&request, version)?;
        check_code(
            response.error_code,
            response.error_message.map(|m| m.to_string()),
            || format!("finding the coordinator of transactional id {transactional_id:?}"),
        )?;
        let node = response.node_id.0;
        if !self.brokers.contains_key(&node) {
            self.metadata(Some(&[]))?;
        }
        Ok((node, self.broker(node)?))
    }

    /// Every transactional id the cluster's brokers coordinate, by id.
    pub fn list_transactions(&mut self) -> Result<Vec<TxnListing>> {
        self.metadata(Some(&[]))?;
        let nodes: Vec<i32> = self.brokers.keys().copied().collect();
        let mut out = Vec::new();
        for node in nodes {
            let conn = self.broker(node)?;
            let version = conn.version_for::<ListTransactionsRequest>(None)?;
            // No duration filter (-1; v0 has no such field and ignores it).
            let request = ListTransactionsRequest::default().with_duration_filter(-1);
            let response = conn.send(&request, version)?;
            check_code(response.error_code, None, || {
                format!("listing transactions on broker {node}")
            })?;
            out.extend(response.transaction_states.into_iter().map(|t| TxnListing {
                transactional_id: t.transactional_id.0.to_string(),
                coordinator: node,
                producer_id: t.producer_id.0,
                state: t.transaction_state.to_string(),
            }));
        }
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(out)
    }

    /// The state of `transactional_id`, from its coordinator.
    pub fn describe_transaction(&mut self, transactional_id: &str) -> Result<TxnInfo> {
        let (node, conn) = self.txn_coordinator(transactional_id)?;
        let version = conn.version_for::<DescribeTransactionsRequest>(None)?;
        let request = DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s(transactional_id))]);
        let response = conn.send(&request, version)?;
        let t = response
            .transaction_states
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Broker {
                context: format!("describing transactional id {transactional_id:?}"),
                code: -1,
                message: Some("empty response".into()),
            })?;
        check_code(t.error_code, None, || {
            format!("describing transactional id {transactional_id:?}")
        })?;
        let mut partitions: Vec<(String, i32)> = t
            .topics
            .iter()
            .flat_map(|tp| {
                tp.partitions
                    .iter()
                    .map(move |&p| (tp.topic.0.to_string(), p))
            })
            .collect();
        partitions.sort();
        Ok(TxnInfo {
            transactional_id: transactional_id.to_owned(),
            coordinator: node,
            state: t.transaction_state.to_string(),
            producer_id: t.producer_id.0,
            producer_epoch: t.producer_epoch,
            timeout_ms: t.transaction_timeout_ms,
            start_time_ms: t.transaction_start_time_ms,
            partitions,
        })
    }

    /// The producers `topic`-`partition`'s leader holds state for.
    pub fn describe_producers(&mut self, topic: &str, partition: i32) -> Result<Vec<ProducerInfo>> {
        let leader = self.partition_leader(topic, partition)?;
        let conn = self.broker(leader)?;
        let version = conn.version_for::<DescribeProducersRequest>(None)?;
        let request = DescribeProducersRequest::default()
            .with_topics(vec![TopicRequest::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(vec![partition])]);
        let response = conn.send(&request, version)?;
        let context = || format!("describing the producers of {topic}-{partition}");
        let p = response
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| ClientError::Broker {
                context: context(),
                code: -1,
                message: Some("partition missing from the response".into()),
            })?;
        check_code(
            p.error_code,
            p.error_message.map(|m| m.to_string()),
            context,
        )?;
        Ok(p.active_producers
            .into_iter()
            .map(|ps| ProducerInfo {
                producer_id: ps.producer_id.0,
                producer_epoch: ps.producer_epoch,
                last_sequence: ps.last_sequence,
                last_timestamp: ps.last_timestamp,
                coordinator_epoch: ps.coordinator_epoch,
                txn_start_offset: ps.current_txn_start_offset,
            })
            .collect())
    }

    /// Aborts the open transaction of `producer` on `topic`-`partition`: the partition's
    /// leader writes an ABORT marker in the producer's name (Kafka's `Admin.abortTransaction`).
    /// The marker carries the producer's epoch and the coordinator epoch of its last marker
    /// (0 if none), so the partition takes it as it would take the coordinator's own.
    pub fn abort_transaction(
        &mut self,
        topic: &str,
        partition: i32,
        producer: &ProducerInfo,
    ) -> Result<()> {
        let leader = self.partition_leader(topic, partition)?;
        let conn = self.broker(leader)?;
        let version = conn.version_for::<WriteTxnMarkersRequest>(None)?;
        let epoch = i16::try_from(producer.producer_epoch).map_err(|_| ClientError::Broker {
            context: format!("aborting producer {}", producer.producer_id),
            code: -1,
            message: Some(format!(
                "producer epoch {} out of range",
                producer.producer_epoch
            )),
        })?;
        let marker = WritableTxnMarker::default()
            .with_producer_id(ProducerId(producer.producer_id))
            .with_producer_epoch(epoch)
            .with_transaction_result(false)
            .with_coordinator_epoch(producer.coordinator_epoch.max(0))
            .with_topics(vec![WritableTxnMarkerTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(vec![partition])]);
        let request = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
        let response = conn.send(&request, version)?;
        let context = || {
            format!(
                "aborting the transaction of producer {} on {topic}-{partition}",
                producer.producer_id
            )
        };
        let code = response
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition_index == partition)
            .map(|p| p.error_code)
            .ok_or_else(|| ClientError::Broker {
                context: context(),
                code: -1,
                message: Some("partition missing from the response".into()),
            })?;
        check_code(code, None, context)
    }

    /// The node leading `topic`-`partition`.
    fn partition_leader(&mut self, topic: &str, partition: i32) -> Result<i32> {
        let by_leader = self.group_by_leader(topic, [partition])?;
        by_leader
            .into_keys()
            .next()
            .ok_or_else(|| ClientError::NoLeader {
                topic: topic.to_owned(),
                partition,
            })
    }
}
