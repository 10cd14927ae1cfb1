//! What the controller is asked and what it answers: the requests brokers and admin
//! handlers send to the active controller over the metadata quorum, and the responses, both
//! serialised as JSON (`encode`/`decode`) because they travel between nodes.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cluster::catalog::PartitionMeta;
use crate::protocol::error::ErrorCode;
use crate::security::acl::{AclBinding, AclBindingFilter};
use crate::security::sasl::{ScramCredential, ScramMechanism};

/// The outcome of one operation: a Kafka error code (0 = none) and a message for the client.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub error_code: i16,
    pub message: Option<String>,
}

impl Status {
    pub fn ok() -> Self {
        Self::default()
    }
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error_code: code.code(),
            message: Some(message.into()),
        }
    }
    pub fn is_ok(&self) -> bool {
        self.error_code == 0
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatableTopic {
    pub name: String,
    /// -1 = the controller's default (or taken from `assignments`).
    pub num_partitions: i32,
    /// -1 = the controller's default (or taken from `assignments`).
    pub replication_factor: i16,
    /// Manual placement: replica lists by partition index, preferred leader first.
    pub assignments: Option<Vec<Vec<i32>>>,
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    /// The target replicas; `None` cancels the partition's ongoing reassignment.
    pub replicas: Option<Vec<i32>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControllerRequest {
    RegisterBroker {
        node_id: i32,
        host: String,
        port: i32,
        /// Every advertised listener; `host:port` is the inter-broker one.
        #[serde(default)]
        listeners: Vec<crate::cluster::catalog::BrokerEndpoint>,
        rack: Option<String>,
        shards: u32,
    },
    BrokerHeartbeat {
        node_id: i32,
    },
    /// Kafka's controlled shutdown (a heartbeat with WantShutDown): the broker is stopping
    /// and asks to be fenced now, so its leaderships move to the rest of their ISRs while it
    /// still answers, instead of after the session timeout.
    ControlledShutdown {
        node_id: i32,
    },
    UnregisterBroker {
        node_id: i32,
    },
    CreateTopics {
        topics: Vec<CreatableTopic>,
        validate_only: bool,
    },
    DeleteTopics {
        names: Vec<String>,
    },
    CreatePartitions {
        topic: String,
        /// The new total partition count.
        count: i32,
        /// Replica lists for the new partitions only.
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    },
    /// Replaces the topic's overrides with `configs` (the full new map).
    AlterTopicConfigs {
        topic: String,
        configs: BTreeMap<String, String>,
    },
    /// Replaces the broker-level dynamic topic defaults.
    AlterBrokerConfigs {
        configs: BTreeMap<String, String>,
    },
    /// SCRAM credentials to remove and to set, already validated by the broker (mechanism,
    /// iterations, no user named twice for one mechanism). The controller refuses a user's
    /// changes whole when one of its deletions names a credential that does not exist.
    AlterUserScramCredentials {
        deletions: Vec<(String, ScramMechanism)>,
        upsertions: Vec<(String, ScramMechanism, ScramCredential)>,
    },
    /// Client quota changes, one entry per entity, each already checked by the broker
    /// (entity, keys, values). Removing a key the entity lacks and setting a key to the
    /// value it has record nothing, as Kafka's controller.
    AlterClientQuotas {
        entries: Vec<(
            crate::security::quota::QuotaEntity,
            crate::security::quota::CheckedOps,
        )>,
    },
    /// ACL bindings to create, already checked by the broker (`AclBinding::from_wire`).
    CreateAcls {
        bindings: Vec<AclBinding>,
    },
    /// Deletes every binding each filter matches.
    DeleteAcls {
        filters: Vec<AclBindingFilter>,
    },
    /// A leader's ISR change (KIP-497).
    AlterPartition {
        broker_id: i32,
        /// Accepted and not checked: Strata brokers do not carry a registration epoch yet.
        broker_epoch: i64,
        topic: String,
        partition: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<i32>,
    },
    AlterPartitionReassignments {
        reassignments: Vec<Reassignment>,
    },
    /// `None` lists every ongoing reassignment.
    ListPartitionReassignments {
        partitions: Option<Vec<(String, i32)>>,
    },
    /// `None` = every partition. `preferred` = elect replicas[0]; otherwise an unclean
    /// election for leaderless partitions.
    ElectLeaders {
        partitions: Option<Vec<(String, i32)>>,
        preferred: bool,
    },
    AllocateProducerIds {
        broker_id: i32,
    },
    /// A broker cannot open its replica of a partition (Kafka: the replica's log dir went
    /// offline and the broker reported it): it leaves the ISR and may not lead until the
    /// broker registers again.
    ReplicaOffline {
        node_id: i32,
        topic: String,
        partition: i32,
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateTopicResult {
    pub name: String,
    /// 0 when nothing was created (an error, or validate_only).
    pub topic_id: u128,
    pub num_partitions: i32,
    pub replication_factor: i16,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteTopicResult {
    pub name: String,
    pub topic_id: u128,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionResult {
    pub topic: String,
    pub partition: i32,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OngoingReassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControllerResponse {
    RegisterBroker {
        status: Status,
    },
    /// `fenced`: whether the broker is fenced once this response's records are applied.
    BrokerHeartbeat {
        status: Status,
        fenced: bool,
    },
    /// `fenced`: whether the broker was fenced (it is not when no other broker could take
    /// its leaderships over).
    ControlledShutdown {
        status: Status,
        fenced: bool,
    },
    UnregisterBroker {
        status: Status,
    },
    CreateTopics {
        topics: Vec<CreateTopicResult>,
    },
    DeleteTopics {
        topics: Vec<DeleteTopicResult>,
    },
    CreatePartitions {
        status: Status,
    },
    AlterTopicConfigs {
        status: Status,
    },
    AlterBrokerConfigs {
        status: Status,
    },
    /// One status per user named in the request, in first-mention order.
    AlterUserScramCredentials {
        results: Vec<(String, Status)>,
    },
    /// One status per entry of the request, in its order.
    AlterClientQuotas {
        results: Vec<Status>,
    },
    /// One status per binding of the request, in its order.
    CreateAcls {
        results: Vec<Status>,
    },
    /// Per filter, in the request's order, the bindings it deleted.
    DeleteAcls {
        results: Vec<Vec<AclBinding>>,
    },
    /// `state` is the partition after the change (or as it is, when refused for a stale
    /// epoch, so the leader can catch up). NEW_LEADER_ELECTED when the change completed a
    /// reassignment that moved leadership away from the requester.
    AlterPartition {
        status: Status,
        state: Option<PartitionMeta>,
    },
    AlterPartitionReassignments {
        results: Vec<PartitionResult>,
    },
    ListPartitionReassignments {
        reassignments: Vec<OngoingReassignment>,
    },
    ElectLeaders {
        results: Vec<PartitionResult>,
    },
    AllocateProducerIds {
        status: Status,
        first_id: i64,
        count: i64,
    },
    ReplicaOffline {
        status: Status,
    },
    /// The request could not be decoded or is not one the controller serves.
    Error {
        status: Status,
    },
}

impl ControllerRequest {
    pub fn encode(&self) -> Vec<u8> {
        // Plain data with string map keys: serialising cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

impl ControllerResponse {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}
