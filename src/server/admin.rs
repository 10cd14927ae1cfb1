//! Topic administration shared by several handlers (CreateTopics, Metadata's auto-creation,
//! DeleteTopics, CreatePartitions, config changes): validate, record the change in the
//! catalog, then have the owner shards open, drop or reconfigure their partitions.
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::cluster::catalog::{Catalog, PartitionMeta, TopicMeta};
use crate::cluster::placement::place;
use crate::config::{log_config_from, TOPIC_CONFIG_KEYS};
use crate::limits::{TOPIC_NAME_LEN_MAX, TOPIC_PARTITIONS_MAX};
use crate::protocol::error::ErrorCode;
use crate::shard::mesh::call;
use crate::shard::ops::{ShardOp, ShardReply};
use crate::shard::ShardCtx;

/// An admin failure: the Kafka error code and a message for the client.
#[derive(Debug, Clone)]
pub struct AdminError {
    pub code: ErrorCode,
    pub message: String,
}

impl AdminError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Kafka's topic name rule: 1..=249 of `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), AdminError> {
    let bad = |why: &str| {
        Err(AdminError::new(
            ErrorCode::InvalidTopicException,
            format!("topic name `{name}` {why}"),
        ))
    };
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > TOPIC_NAME_LEN_MAX {
        return bad("is longer than 249 characters");
    }
    if name == "." || name == ".." {
        return bad("is not allowed");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return bad("contains characters other than ASCII alphanumerics, '.', '_' and '-'");
    }
    Ok(())
}

/// Checks topic-level overrides: known keys only, values that parse.
pub fn validate_topic_configs(
    ctx: &ShardCtx,
    configs: &BTreeMap<String, String>,
) -> Result<(), AdminError> {
    for key in configs.keys() {
        if !TOPIC_CONFIG_KEYS.contains(&key.as_str()) {
            return Err(AdminError::new(
                ErrorCode::InvalidConfig,
                format!("unknown topic config `{key}`"),
            ));
        }
    }
    log_config_from(configs, &ctx.shared.config)
        .map(|_| ())
        .map_err(|(key, why)| {
            AdminError::new(
                ErrorCode::InvalidConfig,
                format!("invalid value for {key}: {why}"),
            )
        })
}

/// Creates a topic and opens its partitions on their shards.
pub async fn create_topic(
    ctx: &Rc<ShardCtx>,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<Arc<TopicMeta>, AdminError> {
    validate_topic_name(name)?;
    let config = &ctx.shared.config;
    let partitions = if partitions == -1 {
        config.num_partitions
    } else {
        partitions
    };
    if !(1..=TOPIC_PARTITIONS_MAX).contains(&partitions) {
        return Err(AdminError::new(
            ErrorCode::InvalidPartitions,
            format!("number of partitions must be between 1 and {TOPIC_PARTITIONS_MAX}, got {partitions}"),
        ));
    }
    let rf = if replication_factor == -1 {
        config.default_replication_factor
    } else {
        replication_factor
    };
    if rf != 1 {
        return Err(AdminError::new(
            ErrorCode::InvalidReplicationFactor,
            format!("replication factor {rf} is larger than the 1 available broker"),
        ));
    }
    validate_topic_configs(ctx, &configs)?;
    if validate_only {
        if ctx.shared.catalog.load().topic(name).is_some() {
            return Err(AdminError::new(
                ErrorCode::TopicAlreadyExists,
                format!("topic `{name}` already exists"),
            ));
        }
        return Ok(Arc::new(TopicMeta {
            name: name.into(),
            id: 0,
            partitions: vec![],
            configs,
        }));
    }
    let nr_shards = ctx.shared.nr_shards;
    let meta = ctx
        .shared
        .catalog
        .update(|c: &mut Catalog| {
            if c.topics.contains_key(name) {
                return Err(AdminError::new(
                    ErrorCode::TopicAlreadyExists,
                    format!("topic `{name}` already exists"),
                ));
            }
            let mut load = c.shard_load(nr_shards);
            let shards = place(&mut load, partitions as usize);
            let meta = Arc::new(TopicMeta {
                name: name.to_string(),
                id: uuid::Uuid::new_v4().as_u128(),
                partitions: shards
                    .into_iter()
                    .map(|shard| PartitionMeta::single(c.local_node, shard))
                    .collect(),
                configs,
            });
            c.topics.insert(name.to_string(), meta.clone());
            Ok(meta)
        })
        .map_err(|e| AdminError::new(ErrorCode::KafkaStorageError, e.to_string()))??;
    open_partitions(ctx, &meta, 0).await?;
    Ok(meta)
}

/// Has each owner shard open the partitions of `meta` from index `from` on.
async fn open_partitions(
    ctx: &Rc<ShardCtx>,
    meta: &TopicMeta,
    from: usize,
) -> Result<(), AdminError> {
    let config = ctx.shared.topic_log_config(&meta.configs);
    for_each_owner(ctx, meta, from, |partitions| ShardOp::OpenPartitions {
        topic: meta.name.clone(),
        partitions,
        config: config.clone(),
    })
    .await
}

/// Sends each shard that owns partitions of `meta` (from index `from` on) the op built
/// from its partition list, and waits for every one to succeed.
async fn for_each_owner(
    ctx: &Rc<ShardCtx>,
    meta: &TopicMeta,
    from: usize,
    make_op: impl Fn(Vec<i32>) -> ShardOp,
) -> Result<(), AdminError> {
    let local = ctx.shared.config.node_id;
    for shard in 0..ctx.shared.nr_shards {
        let partitions: Vec<i32> = meta
            .partitions
            .iter()
            .enumerate()
            .skip(from)
            .filter(|(_, p)| p.shard_of(local) == Some(shard as u32))
            .map(|(i, _)| i as i32)
            .collect();
        if partitions.is_empty() {
            continue;
        }
        match call(ctx, shard, make_op(partitions)).await {
            ShardReply::Done(Ok(())) => {}
            ShardReply::Done(Err(e)) => {
                return Err(AdminError::new(ErrorCode::KafkaStorageError, e))
            }
            _ => {
                return Err(AdminError::new(
                    ErrorCode::KafkaStorageError,
                    format!("shard {shard} unavailable"),
                ))
            }
        }
    }
    Ok(())
}

/// Deletes a topic: removes it from the catalog, then its partitions from disk.
pub async fn delete_topic(ctx: &Rc<ShardCtx>, name: &str) -> Result<Arc<TopicMeta>, AdminError> {
    // The coordinator's own log: deleting it would lose every committed offset.
    if name == crate::group::OFFSETS_TOPIC {
        return Err(AdminError::new(
            ErrorCode::TopicAuthorizationFailed,
            format!("internal topic `{name}` cannot be deleted"),
        ));
    }
    let meta = ctx
        .shared
        .catalog
        .update(|c| {
            c.topics.remove(name).ok_or_else(|| {
                AdminError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("topic `{name}` does not exist"),
                )
            })
        })
        .map_err(|e| AdminError::new(ErrorCode::KafkaStorageError, e.to_string()))??;
    for_each_owner(ctx, &meta, 0, |partitions| ShardOp::DropPartitions {
        topic: name.to_string(),
        partitions,
    })
    .await?;
    Ok(meta)
}

/// Grows a topic to `count` partitions (CreatePartitions).
pub async fn add_partitions(
    ctx: &Rc<ShardCtx>,
    name: &str,
    count: i32,
    validate_only: bool,
) -> Result<(), AdminError> {
    let current = ctx
        .shared
        .catalog
        .load()
        .topic(name)
        .cloned()
        .ok_or_else(|| {
            AdminError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("topic `{name}` does not exist"),
            )
        })?;
    let have = current.partitions.len() as i32;
    if count <= have {
        return Err(AdminError::new(
            ErrorCode::InvalidPartitions,
            format!("topic `{name}` has {have} partitions; the new count {count} must be larger"),
        ));
    }
    if count > TOPIC_PARTITIONS_MAX {
        return Err(AdminError::new(
            ErrorCode::InvalidPartitions,
            format!("at most {TOPIC_PARTITIONS_MAX} partitions"),
        ));
    }
    if validate_only {
        return Ok(());
    }
    let nr_shards = ctx.shared.nr_shards;
    let local = ctx.shared.config.node_id;
    let meta = update_topic(
        ctx,
        name,
        |t, load| {
            let add = (count as usize).saturating_sub(t.partitions.len());
            t.partitions.extend(
                place(load, add)
                    .into_iter()
                    .map(|shard| PartitionMeta::single(local, shard)),
            );
        },
        nr_shards,
    )?;
    open_partitions(ctx, &meta, have as usize).await
}

/// Applies `change` to a copy of topic `name` (with the shards' current partition counts
/// for placement), records it in the catalog and returns the new version.
fn update_topic(
    ctx: &ShardCtx,
    name: &str,
    change: impl FnOnce(&mut TopicMeta, &mut [usize]),
    nr_shards: usize,
) -> Result<Arc<TopicMeta>, AdminError> {
    ctx.shared
        .catalog
        .update(|c| {
            let Some(t) = c.topics.get(name) else {
                return Err(AdminError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("topic `{name}` does not exist"),
                ));
            };
            let mut t = (**t).clone();
            let mut load = c.shard_load(nr_shards);
            change(&mut t, &mut load);
            let t = Arc::new(t);
            c.topics.insert(name.to_string(), t.clone());
            Ok(t)
        })
        .map_err(|e| AdminError::new(ErrorCode::KafkaStorageError, e.to_string()))?
}

/// Replaces a topic's config overrides and pushes the new log config to its partitions.
pub async fn set_topic_configs(
    ctx: &Rc<ShardCtx>,
    name: &str,
    configs: BTreeMap<String, String>,
) -> Result<(), AdminError> {
    validate_topic_configs(ctx, &configs)?;
    let meta = update_topic(ctx, name, |t, _| t.configs = configs, ctx.shared.nr_shards)?;
    let config = ctx.shared.topic_log_config(&meta.configs);
    for shard in 0..ctx.shared.nr_shards {
        call(
            ctx,
            shard,
            ShardOp::SetConfig {
                topic: name.to_string(),
                config: config.clone(),
            },
        )
        .await;
    }
    Ok(())
}

/// Replaces the broker's dynamic topic defaults and reconfigures every partition.
pub async fn set_broker_configs(
    ctx: &Rc<ShardCtx>,
    settings: BTreeMap<String, String>,
) -> Result<(), AdminError> {
    ctx.shared
        .catalog
        .update(|c| {
            c.broker_configs = settings;
            Ok::<(), AdminError>(())
        })
        .map_err(|e| AdminError::new(ErrorCode::KafkaStorageError, e.to_string()))??;
    let catalog = ctx.shared.catalog.load();
    for meta in catalog.topics.values() {
        let config = ctx.shared.topic_log_config(&meta.configs);
        for shard in 0..ctx.shared.nr_shards {
            call(
                ctx,
                shard,
                ShardOp::SetConfig {
                    topic: meta.name.clone(),
                    config: config.clone(),
                },
            )
            .await;
        }
    }
    Ok(())
}
