//! The metadata log's records (Kafka's KRaft metadata records, one per log entry).
//!
//! The active controller decides; these records carry its decisions, and every node replays
//! them in log order onto its `Catalog` (`Catalog::apply`). So a record says *what* happened,
//! with every value already chosen (topic ids, shards, epochs): applying one needs no clock,
//! no randomness and no other input, which is what keeps replicas of the catalog identical.
//!
//! Encoding is serde_json, the format the catalog file already uses. A record read back from
//! the log is never trusted: `decode` returns an error rather than panicking.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::cluster::catalog::{BrokerEndpoint, PartitionMeta};
use crate::security::acl::AclBinding;
use crate::security::quota::QuotaEntity;
use crate::security::sasl::{ScramCredential, ScramMechanism};

#[derive(Debug, Error)]
pub enum RecordError {
    #[error("undecodable metadata record: {0}")]
    Decode(String),
}

/// One metadata change. Kafka's names; Kafka's PartitionChangeRecord (a delta) is carried
/// here as the partition's whole new state, which makes a replayed or repeated change
/// idempotent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MetadataRecord {
    /// A broker (re-)registered. Registration leaves it fenced until it heartbeats.
    RegisterBroker {
        node_id: i32,
        host: String,
        port: i32,
        /// Every advertised listener (absent from records written before listeners).
        #[serde(default)]
        listeners: Vec<BrokerEndpoint>,
        rack: Option<String>,
        shards: u32,
    },
    /// The broker missed its session: it may lead nothing and join no ISR.
    FenceBroker {
        node_id: i32,
    },
    /// The broker heartbeats again.
    UnfenceBroker {
        node_id: i32,
    },
    /// The broker left the cluster for good.
    UnregisterBroker {
        node_id: i32,
    },
    /// A topic was created (or replaced whole).
    Topic {
        name: String,
        id: u128,
        partitions: Vec<PartitionMeta>,
        configs: BTreeMap<String, String>,
    },
    RemoveTopic {
        name: String,
    },
    /// Partitions appended to a topic (CreatePartitions), in partition order.
    AddPartitions {
        name: String,
        partitions: Vec<PartitionMeta>,
    },
    /// A partition's new leader/ISR/replica state.
    PartitionChange {
        topic: String,
        partition: i32,
        state: PartitionMeta,
    },
    /// A topic's full new set of config overrides.
    TopicConfig {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// The broker-level dynamic topic defaults, whole.
    BrokerConfigs {
        configs: BTreeMap<String, String>,
    },
    /// Producer ids below `block_end` have been handed out.
    ProducerIds {
        block_end: i64,
    },
    ClusterId {
        id: String,
    },
    /// A user's SCRAM credential for one mechanism was set (Kafka's
    /// UserScramCredentialRecord): salt, StoredKey, ServerKey and iterations, never the
    /// password.
    UserScramCredential {
        name: String,
        mechanism: ScramMechanism,
        credential: ScramCredential,
    },
    /// Kafka's RemoveUserScramCredentialRecord.
    RemoveUserScramCredential {
        name: String,
        mechanism: ScramMechanism,
    },
    /// One quota key of one entity set (`Some`) or removed (`None`): Kafka's
    /// ClientQuotaRecord (its `remove` flag is the `None`). The value is finite.
    ClientQuota {
        entity: QuotaEntity,
        key: String,
        value: Option<f64>,
    },
    /// An ACL binding was created (Kafka's AccessControlEntryRecord). The binding is its
    /// own identity: creating one that exists changes nothing.
    AccessControlEntry {
        binding: AclBinding,
    },
    /// Kafka's RemoveAccessControlEntryRecord.
    RemoveAccessControlEntry {
        binding: AclBinding,
    },
}

impl MetadataRecord {
    pub fn encode(&self) -> Vec<u8> {
        // Every field serialises (string map keys, no non-finite floats), so this cannot
        // fail; an empty entry would only be skipped by `decode`'s caller.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        serde_json::from_slice(bytes).map_err(|e| RecordError::Decode(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record kind survives encode/decode unchanged, including 128-bit topic ids.
    #[test]
    fn round_trips() {
        let p = PartitionMeta {
            replicas: vec![1, 2, 3],
            shards: vec![0, 1, 2],
            isr: vec![1, 3],
            leader: 3,
            leader_epoch: 4,
            partition_epoch: 9,
            adding: vec![3],
            removing: vec![2],
            offline: [(2, "cannot open".to_string())].into(),
        };
        let configs: BTreeMap<String, String> =
            [("retention.ms".to_string(), "1000".to_string())].into();
        let records = vec![
            MetadataRecord::RegisterBroker {
                node_id: 1,
                host: "h".into(),
                port: 9092,
                listeners: vec![BrokerEndpoint {
                    name: "CLIENT".into(),
                    host: "h".into(),
                    port: 9093,
                    security_protocol: 3,
                }],
                rack: Some("r1".into()),
                shards: 4,
            },
            MetadataRecord::FenceBroker { node_id: 1 },
            MetadataRecord::UnfenceBroker { node_id: 1 },
            MetadataRecord::UnregisterBroker { node_id: 1 },
            MetadataRecord::Topic {
                name: "t".into(),
                id: u128::MAX - 5,
                partitions: vec![p.clone()],
                configs: configs.clone(),
            },
            MetadataRecord::RemoveTopic { name: "t".into() },
            MetadataRecord::AddPartitions {
                name: "t".into(),
                partitions: vec![p.clone()],
            },
            MetadataRecord::PartitionChange {
                topic: "t".into(),
                partition: 0,
                state: p,
            },
            MetadataRecord::TopicConfig {
                name: "t".into(),
                configs: configs.clone(),
            },
            MetadataRecord::BrokerConfigs { configs },
            MetadataRecord::ProducerIds { block_end: 7000 },
            MetadataRecord::ClusterId { id: "abc".into() },
            MetadataRecord::UserScramCredential {
                name: "alice".into(),
                mechanism: ScramMechanism::Sha512,
                credential: ScramCredential {
                    salt: vec![1, 2],
                    stored_key: vec![3],
                    server_key: vec![4],
                    iterations: 4096,
                },
            },
            MetadataRecord::RemoveUserScramCredential {
                name: "alice".into(),
                mechanism: ScramMechanism::Sha256,
            },
            MetadataRecord::ClientQuota {
                entity: QuotaEntity {
                    user: Some(crate::security::quota::EntityName::Default),
                    client_id: Some(crate::security::quota::EntityName::Named("app".into())),
                },
                key: "producer_byte_rate".into(),
                value: Some(1048576.0),
            },
            MetadataRecord::ClientQuota {
                entity: QuotaEntity {
                    user: None,
                    client_id: Some(crate::security::quota::EntityName::Default),
                },
                key: "request_percentage".into(),
                value: None,
            },
            MetadataRecord::AccessControlEntry {
                binding: crate::security::acl::AclBinding::from_wire(
                    2,
                    "pay-",
                    4,
                    "User:alice",
                    "*",
                    3,
                    3,
                )
                .expect("binding"),
            },
            MetadataRecord::RemoveAccessControlEntry {
                binding: crate::security::acl::AclBinding::from_wire(
                    4,
                    "kafka-cluster",
                    3,
                    "User:*",
                    "10.0.0.1",
                    7,
                    2,
                )
                .expect("binding"),
            },
        ];
        for r in records {
            let back = MetadataRecord::decode(&r.encode()).expect("decode");
            assert_eq!(back, r);
        }
        assert!(MetadataRecord::decode(b"{not json").is_err());
        assert!(MetadataRecord::decode(b"").is_err());
    }
}
