//! Opening, dropping and reconfiguring the partitions the catalog places on this shard.
use std::rc::Rc;

use crate::shard::ShardCtx;
use crate::storage::LogConfig;

/// Opens (recovering) each partition of `topic` placed here.
pub async fn open(
    ctx: &Rc<ShardCtx>,
    topic: &str,
    partitions: Vec<i32>,
    config: LogConfig,
) -> Result<(), String> {
    let topic_id = ctx.shared.catalog.load().topic(topic).map_or(0, |t| t.id);
    for p in partitions {
        if let Err(e) = ctx.open_partition(topic, p, topic_id, config.clone()).await {
            return Err(format!("cannot open {topic}-{p}: {e}"));
        }
    }
    Ok(())
}

/// Forgets and deletes each partition of a deleted topic, open or not.
pub async fn drop(ctx: &Rc<ShardCtx>, topic: &str, partitions: Vec<i32>) -> Result<(), String> {
    let mut result = Ok(());
    for i in partitions {
        match ctx.remove_partition(topic, i) {
            Some(p) => {
                if let Err(e) = p.delete().await {
                    result = Err(format!("cannot delete {topic}-{i}: {e}"));
                }
                ctx.shared.release_dir(&ctx.shared.partition_dir(topic, i));
            }
            None => {
                // Never opened on this run: remove whatever a previous run left, unless
                // another shard's log holds the directory (a topic of the same name
                // created again there).
                let dir = ctx.shared.partition_dir(topic, i);
                if dir.exists() && ctx.shared.claim_dir(&dir) {
                    match crate::storage::partition_dir::rename_for_delete(&dir).await {
                        Ok(moved) => crate::storage::partition_dir::remove_later(moved),
                        Err(e) => result = Err(format!("cannot delete {}: {e}", dir.display())),
                    }
                    ctx.shared.release_dir(&dir);
                }
            }
        }
    }
    result
}

/// Applies a topic's new log config to its partitions open here.
pub fn set_config(ctx: &Rc<ShardCtx>, topic: &str, config: &LogConfig) {
    for (_, p) in ctx.topic_partitions(topic) {
        p.set_config(config.clone());
    }
}
