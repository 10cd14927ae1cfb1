//! Shards: one glommio executor per core, each owning a disjoint set of partitions, their
//! connections and their memory.
//!
//! A shard's state (`ShardCtx`) is `Rc`-shared between that shard's tasks only. What all
//! shards share is immutable (`Shared::config`) or read lock-free (`CatalogStore` snapshots).
//! Work for a partition that another shard owns crosses the channel mesh (`mesh`). The
//! invariant the asserts protect: a shard only ever opens and serves partitions the catalog
//! places on it.
pub mod cleaner;
pub mod cpus;
pub mod groups;
pub mod internal_topic;
pub mod mesh;
pub mod metrics;
pub mod ops;
pub mod partition_service;
pub mod peer;
pub mod replica;
pub mod stray;
pub mod txn_verify;
pub mod txns;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use crate::cluster::catalog::CatalogStore;
use crate::config::{log_config_from, Config};
use crate::limits::PARTITION_DIR_RELEASE_WAIT_MS;
use crate::storage::partition_dir::Prepared;
use crate::storage::{LogConfig, MemoryBudget, Partition};

/// A topic's partition: the key under which a shard holds, routes and replicates it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

/// `wait`'s output, or `None` once the clock's monotonic time reaches `deadline_ms`: the one
/// bounded wait of the shard's tasks (produce, group and follower appends waiting for room).
pub(crate) async fn until<T>(
    clock: &dyn crate::clock::Clock,
    deadline_ms: u64,
    wait: impl std::future::Future<Output = T>,
) -> Option<T> {
    let left = std::time::Duration::from_millis(deadline_ms.saturating_sub(clock.monotonic_ms()));
    let timer = glommio::timer::sleep(left);
    futures_lite::future::or(async { Some(wait.await) }, async {
        timer.await;
        None
    })
    .await
}

/// State every shard shares (read-only or lock-free).
pub struct Shared {
    pub config: Config,
    /// The listeners, resolved from `config` once at start.
    pub listeners: crate::security::Listeners,
    pub nr_shards: usize,
    /// The latest metadata image, published by the metadata log's thread.
    pub catalog: Arc<CatalogStore>,
    /// The way to the active controller (and this node's registration).
    pub quorum: Arc<crate::cluster::quorum::Quorum>,
    /// Free space of the data directory and the reserve under which produce is refused.
    pub disk: Arc<crate::storage::DiskSpace>,
    /// The broker's clocks: monotonic for timers (replica lag, group sessions), wall for
    /// record timestamps and retention.
    pub clock: Arc<dyn crate::clock::Clock>,
    /// Syslog and HTTP ingestion counters, one set per shard.
    pub ingest_stats: crate::ingest::stats::IngestStats,
    /// The client quotas' measured rates, broker-wide: every shard serving a client adds
    /// to the same rate (`security::quota::rate` says why).
    pub quota_rates: crate::security::quota::RateRegistry,
    /// The ACL authorizer (`authorizer = "acl"`), or `None`: then nothing is checked, and
    /// a request pays one branch for it (`server::authz`).
    pub authorizer: Option<Arc<crate::security::acl::Authorizer>>,
    /// Partition directories an open log holds, broker-wide (see `claim_dir`).
    pub open_dirs: std::sync::Mutex<std::collections::HashSet<PathBuf>>,
    /// How connections to the other brokers are secured (the inter-broker listener's TLS
    /// and SASL), shared by every shard's peer connections.
    pub peer_security: Arc<peer::PeerSecurity>,
    /// Shards whose connections are not yet drained at shutdown. A shard keeps running (so
    /// it keeps serving its peers' mesh ops) until this is 0: a connection on another shard
    /// may be waiting for an op this shard started, such as a fetch of one of its partitions.
    pub shards_draining: std::sync::atomic::AtomicUsize,
}

impl Shared {
    /// Where this broker reaches broker `b` (replica fetches, transaction markers): its
    /// address on the inter-broker listener, as Kafka's `inter.broker.listener.name`.
    pub fn peer_address(&self, b: &crate::cluster::catalog::BrokerMeta) -> Option<String> {
        b.endpoint(&self.listeners.inter_broker)
            .map(|(host, port)| match host.contains(':') {
                true => format!("[{host}]:{port}"),
                false => format!("{host}:{port}"),
            })
    }

    pub fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        self.config.data_dir.join(format!("{topic}-{partition}"))
    }

    /// Claims `dir` for one open log; `false` if another shard's log holds it. Directory
    /// names repeat when a topic is deleted and created again under the same name, and the
    /// new replica may be placed on another shard than the old one: it must not open the
    /// old log's files before their shard has deleted them.
    pub fn claim_dir(&self, dir: &std::path::Path) -> bool {
        // A poisoned lock only means another shard panicked mid-insert; the set is intact.
        let mut dirs = self.open_dirs.lock().unwrap_or_else(|e| e.into_inner());
        dirs.insert(dir.to_path_buf())
    }

    /// Gives `dir` back (its log was deleted, or failed to open).
    pub fn release_dir(&self, dir: &std::path::Path) {
        let mut dirs = self.open_dirs.lock().unwrap_or_else(|e| e.into_inner());
        dirs.remove(dir);
    }

    /// The effective log config of a topic: its overrides over the broker defaults.
    pub fn topic_log_config(
        &self,
        overrides: &std::collections::BTreeMap<String, String>,
    ) -> LogConfig {
        let settings = self.topic_settings(overrides);
        // Overrides were validated when they were set; if a later broker default makes the
        // combination invalid, fall back to the defaults rather than refuse to serve.
        log_config_from(&settings, &self.config)
            .or_else(|_| self.config.topic_defaults())
            .unwrap_or_default()
    }
}

impl Shared {
    /// A topic's effective settings in Kafka's topic-level names, with where each comes
    /// from: topic override > dynamic broker default > config file.
    pub fn topic_settings(
        &self,
        overrides: &std::collections::BTreeMap<String, String>,
    ) -> std::collections::BTreeMap<String, String> {
        let mut settings = std::collections::BTreeMap::new();
        for (broker_key, value) in &self.catalog.load().broker_configs {
            if let Some(topic_key) = crate::config::broker_key_to_topic_key(broker_key) {
                settings.insert(topic_key.to_string(), value.clone());
            }
        }
        for (k, v) in overrides {
            settings.insert(k.clone(), v.clone());
        }
        settings
    }
}

/// An open log and the id of the topic it belongs to: a name may since have been deleted
/// and given to a new topic, whose log this is not.
struct OpenLog {
    topic_id: u128,
    log: Rc<Partition>,
}

/// One shard's state.
pub struct ShardCtx {
    pub id: usize,
    pub shared: Arc<Shared>,
    /// topic -> partition index -> open partition. Only partitions placed on this shard.
    partitions: RefCell<HashMap<String, HashMap<i32, OpenLog>>>,
    /// Serialises opening partitions so two requests never open the same one twice.
    open_lock: futures::lock::Mutex<()>,
    pub mesh: mesh::Mesh,
    pub shutting_down: Cell<bool>,
    pub shutdown_notify: crate::storage::notify::Notify,
    pub connections: Cell<usize>,
    pub connections_changed: crate::storage::notify::Notify,
    /// The consumer-group coordinator for the `__consumer_offsets` partitions placed here.
    pub groups: groups::GroupShard,
    /// The transaction coordinator for the `__transaction_state` partitions led here.
    pub txns: txns::TxnShard,
    /// This shard's transaction verifications (KIP-890), as a partition leader.
    pub txn_verify: txn_verify::VerifyShard,
    /// Leader and follower state of this shard's replicas, and its replica fetchers.
    pub replicas: replica::Replicas,
    /// Produce appends waiting their turn, per partition (keeps a partition's appends in the
    /// order their requests reached this shard).
    pub append_order: partition_service::append_order::AppendOrder,
    /// This shard's share of `memory_limit_bytes`: every partition's in-memory batches are
    /// charged to it, and the connections' request bytes (capped by
    /// `queued_max_request_bytes`) and responses waiting to be written.
    pub budget: Rc<MemoryBudget>,
}

impl ShardCtx {
    pub fn new(id: usize, shared: Arc<Shared>, mesh: mesh::Mesh) -> Self {
        Self {
            id,
            shared: shared.clone(),
            partitions: RefCell::new(HashMap::new()),
            open_lock: futures::lock::Mutex::new(()),
            mesh,
            shutting_down: Cell::new(false),
            shutdown_notify: crate::storage::notify::Notify::default(),
            connections: Cell::new(0),
            connections_changed: crate::storage::notify::Notify::default(),
            groups: groups::GroupShard::new(shared.config.group_config()),
            txns: txns::TxnShard::new(&shared.config),
            txn_verify: txn_verify::VerifyShard::default(),
            replicas: replica::Replicas::default(),
            append_order: Default::default(),
            budget: {
                let budget =
                    MemoryBudget::new(shared.config.shard_memory_limit_bytes(shared.nr_shards));
                budget.set_class_cap(
                    crate::storage::MemoryClass::Requests,
                    shared.config.queued_max_request_bytes,
                );
                budget
            },
        }
    }

    /// The open partition, if this shard has it open as the log of the topic the latest
    /// metadata names so. Requests are routed by the latest metadata, which this shard may
    /// not have applied yet: a topic deleted and created again under the same name is then
    /// still open here as the old topic's log, and serving it would answer for the new
    /// topic with the old one's records. `None` then, and the callers apply the metadata
    /// (which deletes the old log and opens the new one) before serving.
    pub fn local_partition(&self, topic: &str, partition: i32) -> Option<Rc<Partition>> {
        let map = self.partitions.borrow();
        let open = map.get(topic)?.get(&partition)?;
        // Up to date with the latest image: the open log is its topic's (a cheap atomic
        // compare on the data path; the catalog is read only while the shard lags).
        if self.shared.catalog.version() != self.replicas.applied_version() {
            let current = self.shared.catalog.load().topic(topic).map(|t| t.id);
            if current != Some(open.topic_id) {
                return None;
            }
        }
        Some(open.log.clone())
    }

    /// Whether a log of `topic`-`partition` is open here, whichever topic of that name it
    /// belongs to.
    fn holds(&self, topic: &str, partition: i32) -> bool {
        self.partitions
            .borrow()
            .get(topic)
            .is_some_and(|m| m.contains_key(&partition))
    }

    /// The partition, opening it first if the catalog places it here but it is not open yet
    /// (a request racing topic creation). `None` if the catalog does not place it here.
    pub async fn partition(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
    ) -> Result<Option<Rc<Partition>>, crate::storage::Error> {
        if let Some(p) = self.local_partition(topic, partition) {
            return Ok(Some(p));
        }
        if self.holds(topic, partition) {
            // Open as an older topic of this name (see `local_partition`): applying the
            // metadata deletes that log and opens this topic's.
            replica::apply_metadata(self).await;
            if let Some(p) = self.local_partition(topic, partition) {
                return Ok(Some(p));
            }
        }
        let catalog = self.shared.catalog.load();
        let Some(meta) = catalog.topic(topic) else {
            return Ok(None);
        };
        let Some(pm) = usize::try_from(partition)
            .ok()
            .and_then(|i| meta.partitions.get(i))
        else {
            return Ok(None);
        };
        if catalog.local_shard(pm) != Some(self.id as u32) {
            return Ok(None);
        }
        let config = self.shared.topic_log_config(&meta.configs);
        self.open_partition(topic, partition, meta.id, config)
            .await
            .map(Some)
    }

    /// Opens (recovering) a partition of topic `topic_id` placed on this shard, once. Its
    /// directory's `partition.metadata` must name the same topic: a directory another topic
    /// of this name left (a broker down while it was deleted and created again) is moved
    /// aside for deletion and the log starts empty (`storage::partition_dir::prepare`).
    pub async fn open_partition(
        &self,
        topic: &str,
        partition: i32,
        topic_id: u128,
        config: LogConfig,
    ) -> Result<Rc<Partition>, crate::storage::Error> {
        let _guard = self.open_lock.lock().await;
        let dir = self.shared.partition_dir(topic, partition);
        {
            let map = self.partitions.borrow();
            if let Some(open) = map.get(topic).and_then(|m| m.get(&partition)) {
                if open.topic_id == topic_id {
                    return Ok(open.log.clone());
                }
                // The old topic's log must be deleted first (`replica::apply_metadata` does).
                return Err(crate::storage::Error::io(
                    dir,
                    "open",
                    std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        "still open as the log of a deleted topic of the same name",
                    ),
                ));
            }
        }
        let deadline = self.shared.clock.monotonic_ms() + PARTITION_DIR_RELEASE_WAIT_MS;
        while !self.shared.claim_dir(&dir) {
            if self.shared.clock.monotonic_ms() >= deadline {
                return Err(crate::storage::Error::io(
                    dir,
                    "claim dir",
                    std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        "still held by a deleted replica of the same name on another shard",
                    ),
                ));
            }
            glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
        }
        let opened = async {
            match crate::storage::partition_dir::prepare(&dir, topic_id).await? {
                Prepared::ReplacedStale { stale_id, moved_to } => {
                    tracing::warn!(
                        topic,
                        partition,
                        stale_topic_id = %uuid::Uuid::from_u128(stale_id),
                        topic_id = %uuid::Uuid::from_u128(topic_id),
                        moved_to = %moved_to.display(),
                        "the directory held a deleted topic's log of the same name: never served, deleting it"
                    );
                    crate::storage::partition_dir::remove_later(moved_to);
                }
                Prepared::Adopted => {
                    tracing::info!(
                        topic,
                        partition,
                        "recorded the topic id of a log written without one"
                    );
                }
                Prepared::Created | Prepared::Existing => {}
            }
            // Every log is a replica: the replication layer (`replica`) moves its high
            // watermark.
            Partition::open_replicated(dir.clone(), config).await
        };
        let p = match opened.await {
            Ok(p) => p,
            Err(e) => {
                self.shared.release_dir(&dir);
                return Err(e);
            }
        };
        p.set_budget(Rc::clone(&self.budget));
        p.set_disk_space(Arc::clone(&self.shared.disk));
        self.partitions
            .borrow_mut()
            .entry(topic.to_string())
            .or_default()
            .insert(
                partition,
                OpenLog {
                    topic_id,
                    log: p.clone(),
                },
            );
        Ok(p)
    }

    /// Forgets a partition (it has been deleted); returns it so the caller can delete it.
    pub fn remove_partition(&self, topic: &str, partition: i32) -> Option<Rc<Partition>> {
        let mut map = self.partitions.borrow_mut();
        let removed = map.get_mut(topic).and_then(|m| m.remove(&partition));
        if map.get(topic).is_some_and(|m| m.is_empty()) {
            map.remove(topic);
        }
        removed.map(|open| open.log)
    }

    /// Every open partition of this shard.
    pub fn all_partitions(&self) -> Vec<(String, i32, Rc<Partition>)> {
        let map = self.partitions.borrow();
        let mut out = Vec::new();
        for (t, parts) in map.iter() {
            for (i, open) in parts.iter() {
                out.push((t.clone(), *i, open.log.clone()));
            }
        }
        out
    }

    /// Open logs of a topic the catalog now knows under another id: the name was deleted and
    /// given to a new topic since they were opened.
    pub fn stale_partitions(
        &self,
        catalog: &crate::cluster::catalog::Catalog,
    ) -> Vec<(String, i32, Rc<Partition>)> {
        let map = self.partitions.borrow();
        let mut out = Vec::new();
        for (t, parts) in map.iter() {
            let Some(meta) = catalog.topic(t) else {
                continue;
            };
            for (i, open) in parts.iter() {
                if open.topic_id != meta.id {
                    out.push((t.clone(), *i, open.log.clone()));
                }
            }
        }
        out
    }

    /// Partitions of one topic open on this shard.
    pub fn topic_partitions(&self, topic: &str) -> Vec<(i32, Rc<Partition>)> {
        self.partitions
            .borrow()
            .get(topic)
            .map(|m| m.iter().map(|(i, open)| (*i, open.log.clone())).collect())
            .unwrap_or_default()
    }
}
