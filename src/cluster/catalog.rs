//! The catalog: topics, their ids, partition placement and config overrides.
//!
//! Readers (every request) take a lock-free snapshot (`ArcSwap`); writers (CreateTopics,
//! DeleteTopics, CreatePartitions, config changes — the control plane) serialise on a mutex,
//! persist the new catalog atomically (write temp, fsync, rename, fsync dir) and publish it.
//! The data path never takes the mutex.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::limits::PRODUCER_ID_BLOCK;

#[derive(Debug, Error)]
pub enum CatalogError {
    #[error("catalog I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("catalog file {path} is corrupt: {message}")]
    Corrupt { path: PathBuf, message: String },
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

/// A registered broker, as the controller records it (RegisterBrokerRecord).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BrokerMeta {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
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
    /// This broker's node id; set locally, never replicated.
    #[serde(skip)]
    pub local_node: i32,
    /// Topic id -> name, derived from `topics` whenever a catalog is published, so Fetch
    /// v13+ (which names topics by id) resolves them without scanning every topic.
    #[serde(skip)]
    ids: std::collections::HashMap<u128, String>,
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
    /// Partitions each shard of this broker owns, for balanced placement.
    pub fn shard_load(&self, nr_shards: usize) -> Vec<usize> {
        let mut load = vec![0; nr_shards];
        for t in self.topics.values() {
            for p in &t.partitions {
                if let Some(l) = p
                    .shard_of(self.local_node)
                    .and_then(|s| load.get_mut(s as usize))
                {
                    *l += 1;
                }
            }
        }
        load
    }
    /// The shard of this broker owning `pm`, if this broker holds a replica.
    pub fn local_shard(&self, pm: &PartitionMeta) -> Option<u32> {
        pm.shard_of(self.local_node)
    }
}

/// The catalog shared by all shards of this broker.
pub struct CatalogStore {
    path: PathBuf,
    current: ArcSwap<Catalog>,
    /// Serialises writers (control plane only).
    write: Mutex<()>,
    next_producer_id: AtomicI64,
}

const CATALOG_FILE: &str = "catalog.json";

impl CatalogStore {
    /// Loads the catalog from `meta_dir`, or starts an empty one.
    pub fn open(meta_dir: &Path, local_node: i32) -> Result<Self, CatalogError> {
        std::fs::create_dir_all(meta_dir).map_err(|source| CatalogError::Io {
            path: meta_dir.into(),
            source,
        })?;
        let path = meta_dir.join(CATALOG_FILE);
        let mut catalog = match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<Catalog>(&bytes).map_err(|e| CatalogError::Corrupt {
                    path: path.clone(),
                    message: e.to_string(),
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Catalog::default(),
            Err(source) => return Err(CatalogError::Io { path, source }),
        };
        catalog.local_node = local_node;
        if catalog.cluster_id.is_empty() {
            catalog.cluster_id = uuid::Uuid::new_v4().simple().to_string();
        }
        let next = catalog.producer_id_block_end.max(0);
        let store = Self {
            path,
            current: ArcSwap::from_pointee({
                catalog.reindex();
                catalog
            }),
            write: Mutex::new(()),
            next_producer_id: AtomicI64::new(next),
        };
        // Reserve the first block of producer ids before any is handed out.
        store.update(|c| {
            c.producer_id_block_end = next + PRODUCER_ID_BLOCK;
            Ok::<(), CatalogError>(())
        })??;
        Ok(store)
    }

    /// A consistent snapshot; cheap and lock-free.
    pub fn load(&self) -> Arc<Catalog> {
        self.current.load_full()
    }

    /// Applies `change` to a copy of the catalog, persists it, then publishes it. If `change`
    /// returns an error, nothing is written or published.
    pub fn update<T, E>(
        &self,
        change: impl FnOnce(&mut Catalog) -> Result<T, E>,
    ) -> Result<Result<T, E>, CatalogError> {
        // A poisoned lock only means another writer panicked; the catalog it guards is the
        // published snapshot, which is always whole, so carry on.
        let _guard = self.write.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = (*self.current.load_full()).clone();
        let value = match change(&mut next) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        self.persist(&next)?;
        next.reindex();
        self.current.store(Arc::new(next));
        Ok(Ok(value))
    }

    /// Publishes `catalog` as the new snapshot without writing the catalog file: in a cluster
    /// the metadata log is what persists the catalog, and this only shows its latest applied
    /// state to the shards. `local_node` stays this store's. The caller keeps the derived id
    /// index current (`Catalog::apply` does; a catalog decoded from bytes needs `reindex`).
    pub fn publish(&self, mut catalog: Catalog) {
        // Taken so a publish never interleaves with a local `update`'s read-modify-write.
        let _guard = self.write.lock().unwrap_or_else(|p| p.into_inner());
        catalog.local_node = self.current.load().local_node;
        self.current.store(Arc::new(catalog));
    }

    /// Hands out a producer id that was never handed out before, even across crashes: ids
    /// come from a block whose end is persisted before any id in it is used.
    pub fn allocate_producer_id(&self) -> Result<i64, CatalogError> {
        loop {
            let id = self.next_producer_id.fetch_add(1, Ordering::SeqCst);
            if id < self.load().producer_id_block_end {
                return Ok(id);
            }
            self.update(|c| {
                if id >= c.producer_id_block_end {
                    c.producer_id_block_end = id + PRODUCER_ID_BLOCK;
                }
                Ok::<(), CatalogError>(())
            })??;
            if id < self.load().producer_id_block_end {
                return Ok(id);
            }
        }
    }

    fn persist(&self, catalog: &Catalog) -> Result<(), CatalogError> {
        let io = |source| CatalogError::Io {
            path: self.path.clone(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(catalog).map_err(|e| CatalogError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        write_atomically(&self.path, &bytes).map_err(io)
    }
}

/// Writes a small file so that a crash leaves either the old or the new contents: temp
/// file, fsync, rename over the target, fsync the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Topics and producer id blocks survive a reopen; ids never repeat across reopens.
    #[test]
    fn persists_and_never_reuses_producer_ids() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first;
        {
            let s = CatalogStore::open(dir.path(), 0).expect("open");
            s.update(|c| {
                c.topics.insert(
                    "t".into(),
                    Arc::new(TopicMeta {
                        name: "t".into(),
                        id: 7,
                        partitions: vec![PartitionMeta::single(0, 0)],
                        configs: BTreeMap::new(),
                    }),
                );
                Ok::<(), ()>(())
            })
            .expect("persist")
            .expect("change");
            first = s.allocate_producer_id().expect("id");
        }
        let s = CatalogStore::open(dir.path(), 0).expect("reopen");
        assert!(s.load().topic("t").is_some());
        assert!(s.allocate_producer_id().expect("id") > first);
    }
}
