//! Brokers coming and going: registration (a restarted broker registers fenced and gives up
//! its leaderships), heartbeats (the first unfences), replicas a broker reports offline, the
//! leaderships and ISR places a fenced broker leaves, and producer-id blocks handed out to
//! brokers.
use super::election::{elect, unclean_allowed};
use super::{
    is_unfenced, partition_of, Batch, Controller, ControllerResponse, Status,
    ELECTIONS_PER_BATCH_MAX,
};
use crate::cluster::records::MetadataRecord;
use crate::limits::PRODUCER_ID_BLOCK;
use crate::protocol::error::ErrorCode;

impl Controller {
    #[allow(clippy::too_many_arguments)] // the fields of the request, passed as they came
    pub(super) fn register_broker(
        &mut self,
        batch: &mut Batch,
        node_id: i32,
        host: String,
        port: i32,
        listeners: Vec<crate::cluster::catalog::BrokerEndpoint>,
        rack: Option<String>,
        shards: u32,
        now_ms: u64,
    ) -> Status {
        if node_id < 0 || shards == 0 || !(0..=i32::from(u16::MAX)).contains(&port) {
            return Status::error(
                ErrorCode::InvalidRequest,
                format!("invalid registration: node {node_id}, port {port}, {shards} shards"),
            );
        }
        // An unfenced broker registering again has restarted: it registers fenced, so it
        // first gives up its leaderships and ISR places, exactly as if it had been fenced,
        // and regains them through its heartbeats and its leaders' AlterPartition.
        let was_unfenced = is_unfenced(&batch.work, node_id);
        self.shutting_down.remove(&node_id);
        batch.push(MetadataRecord::RegisterBroker {
            node_id,
            host,
            port,
            listeners,
            rack,
            shards,
        });
        if was_unfenced {
            Self::leave_partitions(batch, node_id);
        }
        // A restarted broker opens its replicas afresh (Kafka: a registration lists the log
        // dirs online again); it reports any it still cannot open.
        let mut marked = Vec::new();
        for t in batch.work.topics.values() {
            for (i, p) in t.partitions.iter().enumerate() {
                if p.offline.contains_key(&node_id) {
                    marked.push((t.name.clone(), i, p.clone()));
                }
            }
        }
        for (topic, index, old) in marked {
            let mut new = old.clone();
            new.offline.remove(&node_id);
            batch.change(&topic, index, &old, new);
        }
        self.last_seen_ms.insert(node_id, now_ms);
        Status::ok()
    }

    /// Marks `node_id`'s replica of the partition offline with `reason`: it leaves the ISR
    /// (unless it is the last member: Kafka keeps that one, the only replica known to hold
    /// every acknowledged write, and the partition stays leaderless) and, if it led, the
    /// leadership moves to another in-sync replica.
    pub(super) fn replica_offline(
        batch: &mut Batch,
        node_id: i32,
        topic: &str,
        partition: i32,
        reason: String,
    ) -> Status {
        let (index, old) = match partition_of(&batch.work, topic, partition) {
            Ok(found) => found,
            Err(status) => return status,
        };
        if !old.replicas.contains(&node_id) {
            return Status::error(
                ErrorCode::IneligibleReplica,
                format!("broker {node_id} holds no replica of {topic}-{partition}"),
            );
        }
        let mut new = old.clone();
        new.offline.insert(node_id, reason);
        if new.isr.len() > 1 {
            new.isr.retain(|r| *r != node_id);
        }
        if new.leader == node_id {
            let unclean = unclean_allowed(&batch.work, topic);
            elect(&batch.work, &mut new, unclean);
        }
        batch.change(topic, index, &old, new);
        Status::ok()
    }

    pub(super) fn heartbeat(
        &mut self,
        batch: &mut Batch,
        node_id: i32,
        now_ms: u64,
    ) -> ControllerResponse {
        let Some(broker) = batch.work.brokers.get(&node_id) else {
            return ControllerResponse::BrokerHeartbeat {
                status: Status::error(
                    ErrorCode::BrokerIdNotRegistered,
                    format!("broker {node_id} is not registered"),
                ),
                fenced: true,
            };
        };
        self.last_seen_ms.insert(node_id, now_ms);
        if self.shutting_down.contains(&node_id) {
            return ControllerResponse::BrokerHeartbeat {
                status: Status::ok(),
                fenced: broker.fenced || self.fencing.contains(&node_id),
            };
        }
        if broker.fenced {
            self.fencing.remove(&node_id);
            batch.push(MetadataRecord::UnfenceBroker { node_id });
            let mut budget = ELECTIONS_PER_BATCH_MAX;
            Self::elect_leaderless(batch, &mut budget);
        }
        // A fence proposed but not yet applied still lands; the next heartbeat undoes it.
        ControllerResponse::BrokerHeartbeat {
            status: Status::ok(),
            fenced: self.fencing.contains(&node_id),
        }
    }

    /// Kafka's controlled shutdown: a stopping broker is fenced at once and gives up its
    /// leaderships and ISR places, as a broker past its session timeout does, but while it
    /// still answers: clients and followers are told NOT_LEADER_OR_FOLLOWER and find the new
    /// leaders, and acks=all writes go on without waiting out the session timeout. When no
    /// other broker is unfenced nothing could take over, so it is left unfenced (a single
    /// node stops as before). Until it registers again, its heartbeats do not unfence it.
    pub(super) fn controlled_shutdown(
        &mut self,
        batch: &mut Batch,
        node_id: i32,
    ) -> ControllerResponse {
        if !batch.work.brokers.contains_key(&node_id) {
            return ControllerResponse::ControlledShutdown {
                status: Status::error(
                    ErrorCode::BrokerIdNotRegistered,
                    format!("broker {node_id} is not registered"),
                ),
                fenced: false,
            };
        }
        let others_unfenced = batch
            .work
            .brokers
            .values()
            .any(|b| b.node_id != node_id && !b.fenced);
        if others_unfenced {
            self.shutting_down.insert(node_id);
            if is_unfenced(&batch.work, node_id) {
                batch.push(MetadataRecord::FenceBroker { node_id });
                Self::leave_partitions(batch, node_id);
                self.fencing.insert(node_id);
            }
        }
        ControllerResponse::ControlledShutdown {
            status: Status::ok(),
            fenced: !is_unfenced(&batch.work, node_id),
        }
    }

    /// A fenced or departed broker gives up every leadership and ISR place, except that it
    /// stays the ISR of a partition whose only ISR member it is (leader -1): that ISR still
    /// names the one replica holding every acknowledged write. Expects `node` already fenced
    /// (or unregistered) in `batch`.
    pub(super) fn leave_partitions(batch: &mut Batch, node: i32) {
        let mut touched = Vec::new();
        for t in batch.work.topics.values() {
            for (i, p) in t.partitions.iter().enumerate() {
                if p.leader == node || p.isr.contains(&node) {
                    touched.push((t.name.clone(), i, p.clone()));
                }
            }
        }
        for (topic, index, old) in touched {
            let mut new = old.clone();
            if new.isr.len() > 1 {
                new.isr.retain(|r| *r != node);
            }
            if new.leader == node {
                let unclean = unclean_allowed(&batch.work, &topic);
                elect(&batch.work, &mut new, unclean);
            }
            batch.change(&topic, index, &old, new);
        }
    }

    pub(super) fn allocate_producer_ids(batch: &mut Batch, broker_id: i32) -> ControllerResponse {
        let refuse = |status| ControllerResponse::AllocateProducerIds {
            status,
            first_id: -1,
            count: 0,
        };
        if !batch.work.brokers.contains_key(&broker_id) {
            return refuse(Status::error(
                ErrorCode::BrokerIdNotRegistered,
                format!("broker {broker_id} is not registered"),
            ));
        }
        let first_id = batch.work.producer_id_block_end.max(0);
        let Some(block_end) = first_id.checked_add(PRODUCER_ID_BLOCK) else {
            return refuse(Status::error(
                ErrorCode::UnknownServerError,
                "producer ids exhausted",
            ));
        };
        batch.push(MetadataRecord::ProducerIds { block_end });
        ControllerResponse::AllocateProducerIds {
            status: Status::ok(),
            first_id,
            count: PRODUCER_ID_BLOCK,
        }
    }
}
