//! The catalog: the metadata image every node holds — brokers, topics and their ids, each
//! partition's replicas (and the shard owning each replica), ISR, leader and epochs, config
//! overrides, the cluster id, the producer-id blocks handed out, SCRAM credentials, client
//! quotas and ACLs.
//!
//! It is never edited directly: the metadata log's thread applies committed records to it
//! (`cluster::apply`, in log order on every node) and publishes the result through
//! `CatalogStore`; the log itself is what persists it. Readers (every request, every shard)
//! take a lock-free snapshot (`ArcSwap`), so the data path never waits on the control plane.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::security::acl::Acls;
use crate::security::quota::ClientQuotas;
use crate::security::sasl::{ScramCredential, ScramMechanism};

fn no_client_quotas(q: &Arc<ClientQuotas>) -> bool {
    q.is_empty()
}

fn no_acls(a: &Arc<Acls>) -> bool {
    a.is_empty()
}

/// One partition's replica set and leadership, as the controller records it (Kafka's
/// PartitionRecord / PartitionChangeRecord state).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PartitionMeta {
    /// Assigned replicas (AR) by node id, preferred leader first.
    pub replicas: Vec<i32>,
    /// The shard that owns the partition on each replica's broker, parallel to `replicas`.
    pub shards: Vec<u32>,
    /// In-sync replicas, a subset of `replicas`.
    pub isr: Vec<i32>,
    /// Leader node id, or -1 when no replica may lead (offline).
    pub leader: i32,
    /// Bumped on every leader change; stamped into the batches the leader writes.
    pub leader_epoch: i32,
    /// Bumped on every change of this record (ISR, replicas, leader); AlterPartition
    /// requests carry it so stale ones are refused.
    pub partition_epoch: i32,
    /// Replicas being added / removed by an ongoing reassignment (KIP-455).
    #[serde(default)]
    pub adding: Vec<i32>,
    #[serde(default)]
    pub removing: Vec<i32>,
    /// Replicas whose broker cannot open their log, with the reason it reported (Kafka: a
    /// replica in an offline log dir). Such a replica is out of the ISR (unless it is the last
    /// member, which Kafka keeps) and may not lead, until its broker registers again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub offline: BTreeMap<i32, String>,
}

impl PartitionMeta {
    /// A partition with one replica, on `node`'s `shard`, led by it at epoch 0.
    pub fn single(node: i32, shard: u32) -> Self {
        Self {
            replicas: vec![node],
            shards: vec![shard],
            isr: vec![node],
            leader: node,
            leader_epoch: 0,
            partition_epoch: 0,
            adding: Vec::new(),
            removing: Vec::new(),
            offline: BTreeMap::new(),
        }
    }
    /// The shard owning this partition on `node`, if `node` holds a replica.
    pub fn shard_of(&self, node: i32) -> Option<u32> {
        self.replicas
            .iter()
            .position(|r| *r == node)
            .and_then(|i| self.shards.get(i).copied())
    }
}

/// One advertised listener of a broker (RegisterBrokerRecord's endpoints).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BrokerEndpoint {
    /// The listener's name, upper-cased (`PLAINTEXT`, `CLIENT`, ...).
    pub name: String,
    pub host: String,
    pub port: i32,
    /// Kafka's security protocol id: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL.
    pub security_protocol: i16,
}

/// A registered broker, as the controller records it (RegisterBrokerRecord).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BrokerMeta {
    pub node_id: i32,
    /// The inter-broker listener's advertised address: where other brokers reach this one.
    pub host: String,
    pub port: i32,
    /// Every advertised listener. Empty for a broker registered before listeners existed,
    /// which had one, at `host:port`.
    #[serde(default)]
    pub listeners: Vec<BrokerEndpoint>,
    #[serde(default)]
    pub rack: Option<String>,
    /// Shards (cores) the broker runs; partitions are placed on them.
    pub shards: u32,
    /// A fenced broker missed its heartbeats: it leads nothing and is out of every ISR.
    pub fenced: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopicMeta {
    pub name: String,
    /// Topic id (KIP-516), as the 128-bit value of its UUID.
    pub id: u128,
    pub partitions: Vec<PartitionMeta>,
    /// Topic-level overrides only, in Kafka's names; defaults come from the broker config.
    pub configs: BTreeMap<String, String>,
}

impl TopicMeta {
    pub fn uuid(&self) -> uuid::Uuid {
        uuid::Uuid::from_u128(self.id)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Catalog {
    pub cluster_id: String,
    pub topics: BTreeMap<String, Arc<TopicMeta>>,
    /// Producer ids below this may have been handed out; a restart continues above it.
    pub producer_id_block_end: i64,
    /// Broker-level topic defaults changed at runtime (IncrementalAlterConfigs on the
    /// broker), in Kafka's broker names; they override the config file.
    #[serde(default)]
    pub broker_configs: BTreeMap<String, String>,
    /// Registered brokers by node id.
    #[serde(default)]
    pub brokers: BTreeMap<i32, BrokerMeta>,
    /// SCRAM credentials by user and mechanism (AlterUserScramCredentials), so every broker
    /// authenticates the same users. A user with no mechanism left is removed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scram_credentials: BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
    /// Client quotas by entity (AlterClientQuotas). Behind an `Arc` that only a quota
    /// change replaces, so a connection knows its resolved quotas are current by pointer.
    #[serde(default, skip_serializing_if = "no_client_quotas")]
    pub client_quotas: Arc<ClientQuotas>,
    /// ACL bindings (CreateAcls/DeleteAcls), indexed by resource for the authorizer. Behind
    /// an `Arc` that only an ACL change replaces, like `client_quotas`.
    #[serde(default, skip_serializing_if = "no_acls")]
    pub acls: Arc<Acls>,
    /// This broker's node id; set locally, never replicated.
    #[serde(skip)]
    pub local_node: i32,
    /// This broker's shard count; set locally, never replicated.
    #[serde(skip)]
    pub local_shards: u32,
    /// Topic id -> name, derived from `topics` whenever a catalog is published, so Fetch
    /// v13+ (which names topics by id) resolves them without scanning every topic.
    #[serde(skip)]
    ids: std::collections::HashMap<u128, String>,
}

impl BrokerMeta {
    /// The broker's address on the listener `name`, as Metadata answers a client that came
    /// in on that listener; `None` when the broker has no such listener (Kafka leaves such
    /// a broker out of the answer).
    pub fn endpoint(&self, name: &str) -> Option<(&str, i32)> {
        if self.listeners.is_empty() {
            return Some((&self.host, self.port));
        }
        self.listeners
            .iter()
            .find(|l| l.name == name)
            .map(|l| (l.host.as_str(), l.port))
    }
}

impl Catalog {
    pub fn topic(&self, name: &str) -> Option<&Arc<TopicMeta>> {
        self.topics.get(name)
    }
    pub fn topic_by_id(&self, id: u128) -> Option<&Arc<TopicMeta>> {
        self.ids.get(&id).and_then(|name| self.topics.get(name))
    }
    /// Rebuilds the derived id index; called before a catalog is published, and after a
    /// catalog is read back from a file or a snapshot (the index is not serialised).
    pub(crate) fn reindex(&mut self) {
        self.ids = self
            .topics
            .values()
            .map(|t| (t.id, t.name.clone()))
            .collect();
    }
    /// Keeps the id index in step with one topic inserted under `name` (`Catalog::apply`).
    pub(crate) fn index_topic(&mut self, id: u128, name: &str) {
        self.ids.insert(id, name.to_string());
    }
    /// Keeps the id index in step with one topic removed.
    pub(crate) fn unindex_topic(&mut self, id: u128) {
        self.ids.remove(&id);
    }
    /// `user`'s SCRAM credential for `mechanism`, if set.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<&ScramCredential> {
        self.scram_credentials.get(user)?.get(&mechanism)
    }

    /// Brokers clients may be sent to: registered and not fenced (as KRaft's Metadata).
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerMeta> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// The controller id to tell clients. Clients send admin requests (CreateTopics, ...) to
    /// it, so it must be a live broker: the active controller when it is one (combined
    /// mode), else this broker, which forwards to the quorum — as KRaft brokers report a live
    /// broker, never a dedicated controller. -1 when neither is known.
    pub fn controller_for_clients(&self, active: Option<i32>) -> i32 {
        let live = |id: i32| self.live_brokers().any(|b| b.node_id == id);
        match active {
            Some(id) if live(id) => id,
            _ if live(self.local_node) => self.local_node,
            _ => self.live_brokers().map(|b| b.node_id).min().unwrap_or(-1),
        }
    }

    /// The shard of this broker owning `pm`, if this broker holds a replica. A shard number
    /// recorded when the broker ran more shards than it does now wraps around, so every
    /// replica still has exactly one owner.
    pub fn local_shard(&self, pm: &PartitionMeta) -> Option<u32> {
        pm.shard_of(self.local_node)
            .map(|s| s % self.local_shards.max(1))
    }
}

/// The catalog shared by all shards of this broker: the latest metadata image applied from
/// the metadata log. Readers take lock-free snapshots; the metadata log's thread publishes.
pub struct CatalogStore {
    current: ArcSwap<Catalog>,
    /// Bumped on every publish, so shards notice a new image with one atomic load.
    version: AtomicU64,
}

impl CatalogStore {
    /// An empty catalog for node `local_node`, until the metadata log publishes one.
    pub fn new(local_node: i32, local_shards: u32) -> Self {
        let catalog = Catalog {
            local_node,
            local_shards,
            ..Catalog::default()
        };
        Self {
            current: ArcSwap::from_pointee(catalog),
            version: AtomicU64::new(0),
        }
    }

    /// A consistent snapshot; cheap and lock-free.
    pub fn load(&self) -> Arc<Catalog> {
        self.current.load_full()
    }

    /// Counts publishes: a shard compares it with the last one it applied.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Publishes `catalog` as the new snapshot: the metadata log persists the catalog, and
    /// this only shows its latest applied state to the shards. `local_node` stays this
    /// store's. The caller keeps the derived id index current (`Catalog::apply` does; a
    /// catalog decoded from bytes needs `reindex`).
    pub fn publish(&self, mut catalog: Catalog) {
        let current = self.current.load();
        catalog.local_node = current.local_node;
        catalog.local_shards = current.local_shards;
        self.current.store(Arc::new(catalog));
        self.version.fetch_add(1, Ordering::AcqRel);
    }
}
