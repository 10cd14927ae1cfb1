//! Stray replicas: partition directories this broker holds that the metadata no longer
//! places on it. A topic deleted (or a replica moved away) while the broker was down leaves
//! its directory behind: no shard opens it, so nothing else would ever remove it, and a topic
//! created later under the same name must not find the old data (the topic id in
//! `partition.metadata` already keeps it from being served). Kafka (KRaft) compares its log
//! directories with the metadata image once the broker has caught up, and renames each stray
//! log `-stray` and deletes it (`LogManager.isStrayKraftReplica`); so does this broker, once
//! every shard has applied the caught-up image and opened the replicas placed on it.
//!
//! A directory is stray when the metadata has no topic of its name, the topic's id is not the
//! one in its `partition.metadata`, the topic has no such partition, or the partition has no
//! replica on this broker. A directory without `partition.metadata` (written before the file
//! existed) is judged by name alone, as a shard adopts it; one whose file cannot be read is
//! left alone, as a shard refuses to open it.
use std::path::Path;

use tracing::{info, warn};

use super::Shared;
use crate::cluster::catalog::Catalog;
use crate::storage::partition_dir::{
    partition_of_dir_name, read_topic_id_blocking, rename_as_stray,
};

/// Whether the directory of `topic`-`partition`, created for `dir_topic_id` (`None`: no
/// `partition.metadata`), holds no replica the metadata places on this broker.
pub fn is_stray(
    catalog: &Catalog,
    topic: &str,
    partition: i32,
    dir_topic_id: Option<u128>,
) -> bool {
    let Some(meta) = catalog.topic(topic) else {
        return true;
    };
    if dir_topic_id.is_some_and(|id| id != meta.id) {
        return true;
    }
    let assigned = usize::try_from(partition)
        .ok()
        .and_then(|i| meta.partitions.get(i))
        .is_some_and(|pm| catalog.local_shard(pm).is_some());
    !assigned
}

/// Renames every stray partition directory of the data directory `-stray` and removes it;
/// returns how many went. Run once the metadata has caught up and the shards have opened
/// their replicas. A directory an open log holds (claimed, `Shared::claim_dir`) is a replica
/// placed here and is skipped; one checked is claimed meanwhile, so a shard applying a newer
/// image that places a topic of that name here waits for the check (and, if the directory
/// was stray, creates a fresh one).
pub fn remove_stray_logs(shared: &Shared) -> usize {
    let data_dir = &shared.config.data_dir;
    let entries = match std::fs::read_dir(data_dir) {
        Ok(e) => e,
        Err(e) => {
            warn!(dir = %data_dir.display(), error = %e, "cannot look for stray logs");
            return 0;
        }
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = entry.file_name();
        let Some((topic, partition)) = name.to_str().and_then(partition_of_dir_name) else {
            continue;
        };
        let dir = entry.path();
        if !shared.claim_dir(&dir) {
            continue;
        }
        let catalog = shared.catalog.load();
        if remove_if_stray(&catalog, &dir, topic, partition) {
            removed += 1;
        }
        shared.release_dir(&dir);
    }
    removed
}

fn remove_if_stray(catalog: &Catalog, dir: &Path, topic: &str, partition: i32) -> bool {
    let dir_topic_id = match read_topic_id_blocking(dir) {
        Ok(id) => id,
        Err(e) => {
            warn!(dir = %dir.display(), error = %e, "cannot tell whether a log is stray; left alone");
            return false;
        }
    };
    if !is_stray(catalog, topic, partition, dir_topic_id) {
        return false;
    }
    let moved = match rename_as_stray(dir) {
        Ok(m) => m,
        Err(e) => {
            warn!(dir = %dir.display(), error = %e, "cannot move a stray log aside");
            return false;
        }
    };
    info!(
        topic,
        partition,
        dir = %moved.display(),
        "stray log: no replica of it is placed on this broker; deleting it"
    );
    crate::storage::partition_dir::remove_later(moved);
    true
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::cluster::catalog::{PartitionMeta, TopicMeta};

    const ME: i32 = 2;

    fn catalog(topics: &[(&str, u128, Vec<Vec<i32>>)]) -> Catalog {
        let mut c = Catalog::default();
        c.local_node = ME;
        c.local_shards = 1;
        let mut map = BTreeMap::new();
        for (name, id, placements) in topics {
            let partitions = placements
                .iter()
                .map(|replicas| PartitionMeta {
                    shards: vec![0; replicas.len()],
                    replicas: replicas.clone(),
                    isr: replicas.clone(),
                    ..PartitionMeta::single(1, 0)
                })
                .collect();
            let meta = TopicMeta {
                id: *id,
                name: name.to_string(),
                partitions,
                configs: BTreeMap::new(),
            };
            map.insert(name.to_string(), Arc::new(meta));
        }
        c.topics = map;
        c
    }

    /// Proves the four ways a directory is stray and the two ways it is not.
    #[test]
    fn stray_is_what_the_metadata_does_not_place_here() {
        let c = catalog(&[("t", 7, vec![vec![1, ME, 3], vec![1, 3]])]);
        // Placed here: the topic's own directory, or one written before partition.metadata.
        assert!(!is_stray(&c, "t", 0, Some(7)));
        assert!(!is_stray(&c, "t", 0, None));
        // The topic was deleted, or deleted and created again (another id).
        assert!(is_stray(&c, "gone", 0, Some(7)));
        assert!(is_stray(&c, "gone", 0, None));
        assert!(is_stray(&c, "t", 0, Some(8)));
        // The replica moved to other brokers; a partition the topic does not have.
        assert!(is_stray(&c, "t", 1, Some(7)));
        assert!(is_stray(&c, "t", 2, Some(7)));
        assert!(is_stray(&c, "t", -1, Some(7)));
    }
}
