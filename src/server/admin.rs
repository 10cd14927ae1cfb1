//! Topic administration shared by several handlers (CreateTopics, Metadata's auto-creation,
//! DeleteTopics, CreatePartitions, config changes): validate what the broker can, then ask the
//! active controller, which records the change in the metadata log. Shards open, drop and
//! reconfigure their replicas as they apply the new metadata (`shard::replica`).
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::cluster::catalog::TopicMeta;
use crate::cluster::controller::{ControllerRequest, ControllerResponse, CreatableTopic, Status};
use crate::config::{log_config_from, TOPIC_CONFIG_KEYS};
use crate::limits::TOPIC_PARTITIONS_MAX;
use crate::protocol::error::ErrorCode;
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

/// Kafka's topic name rule (`cluster::controller::validate_topic_name`), as an admin error.
pub fn validate_topic_name(name: &str) -> Result<(), AdminError> {
    crate::cluster::controller::validate_topic_name(name)
        .map_err(|e| AdminError::new(ErrorCode::InvalidTopicException, e.to_string()))
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

/// Sends `req` to the active controller, mapping transport failures to Kafka's codes.
pub async fn controller(
    ctx: &ShardCtx,
    req: ControllerRequest,
) -> Result<ControllerResponse, AdminError> {
    ctx.shared.quorum.request(req).await.map_err(|e| {
        AdminError::new(
            ErrorCode::RequestTimedOut,
            format!("the controller did not answer: {e}"),
        )
    })
}

fn status_to_result(status: Status) -> Result<(), AdminError> {
    if status.is_ok() {
        return Ok(());
    }
    Err(AdminError::new(
        crate::protocol::error::error_from_code(status.error_code),
        status.message.unwrap_or_default(),
    ))
}

fn unexpected(other: ControllerResponse) -> AdminError {
    AdminError::new(
        ErrorCode::UnknownServerError,
        format!("unexpected controller response {other:?}"),
    )
}

/// Creates a topic through the controller. Its partitions are opened by the shards of the
/// brokers holding replicas as they apply the new metadata.
/// What CreateTopics made (or, with validate_only, would make).
pub struct CreatedTopic {
    /// The topic as the catalog holds it; with validate_only, its name and configs only.
    pub meta: Arc<TopicMeta>,
    pub num_partitions: i32,
    pub replication_factor: i16,
}

pub async fn create_topic(
    ctx: &Rc<ShardCtx>,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<CreatedTopic, AdminError> {
    validate_topic_name(name)?;
    if partitions != -1 && !(1..=TOPIC_PARTITIONS_MAX).contains(&partitions) {
        return Err(AdminError::new(
            ErrorCode::InvalidPartitions,
            format!("number of partitions must be between 1 and {TOPIC_PARTITIONS_MAX}, got {partitions}"),
        ));
    }
    validate_topic_configs(ctx, &configs)?;
    let req = ControllerRequest::CreateTopics {
        topics: vec![CreatableTopic {
            name: name.to_string(),
            num_partitions: partitions,
            replication_factor,
            assignments: None,
            configs: configs.clone(),
        }],
        validate_only,
    };
    let result = match controller(ctx, req).await? {
        ControllerResponse::CreateTopics { topics } => topics
            .into_iter()
            .next()
            .ok_or_else(|| AdminError::new(ErrorCode::UnknownServerError, "empty answer"))?,
        other => return Err(unexpected(other)),
    };
    status_to_result(result.status)?;
    let meta = if validate_only {
        Arc::new(TopicMeta {
            name: name.into(),
            id: 0,
            partitions: vec![],
            configs,
        })
    } else {
        current_topic(ctx, name, "was deleted as it was created")?
    };
    Ok(CreatedTopic {
        meta,
        num_partitions: result.num_partitions,
        replication_factor: result.replication_factor,
    })
}

/// The topic as the latest metadata image has it, or UNKNOWN_TOPIC_OR_PARTITION saying
/// `topic `name` <why_missing>`.
fn current_topic(
    ctx: &Rc<ShardCtx>,
    name: &str,
    why_missing: &str,
) -> Result<Arc<TopicMeta>, AdminError> {
    ctx.shared
        .catalog
        .load()
        .topic(name)
        .cloned()
        .ok_or_else(|| {
            AdminError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("topic `{name}` {why_missing}"),
            )
        })
}

/// Deletes a topic through the controller; replicas are dropped as brokers apply it.
pub async fn delete_topic(ctx: &Rc<ShardCtx>, name: &str) -> Result<Arc<TopicMeta>, AdminError> {
    // The coordinator's own log: deleting it would lose every committed offset.
    if name == crate::group::OFFSETS_TOPIC {
        return Err(AdminError::new(
            ErrorCode::TopicAuthorizationFailed,
            format!("internal topic `{name}` cannot be deleted"),
        ));
    }
    let meta = current_topic(ctx, name, "does not exist")?;
    let req = ControllerRequest::DeleteTopics {
        names: vec![name.to_string()],
    };
    match controller(ctx, req).await? {
        ControllerResponse::DeleteTopics { topics } => {
            for t in topics {
                status_to_result(t.status)?;
            }
        }
        other => return Err(unexpected(other)),
    }
    Ok(meta)
}

/// Grows a topic to `count` partitions (CreatePartitions).
pub async fn add_partitions(
    ctx: &Rc<ShardCtx>,
    name: &str,
    count: i32,
    validate_only: bool,
) -> Result<(), AdminError> {
    if count > TOPIC_PARTITIONS_MAX {
        return Err(AdminError::new(
            ErrorCode::InvalidPartitions,
            format!("at most {TOPIC_PARTITIONS_MAX} partitions"),
        ));
    }
    let req = ControllerRequest::CreatePartitions {
        topic: name.to_string(),
        count,
        assignments: None,
        validate_only,
    };
    match controller(ctx, req).await? {
        ControllerResponse::CreatePartitions { status } => status_to_result(status),
        other => Err(unexpected(other)),
    }
}

/// Replaces a topic's config overrides; partitions pick them up as brokers apply it.
pub async fn set_topic_configs(
    ctx: &Rc<ShardCtx>,
    name: &str,
    configs: BTreeMap<String, String>,
) -> Result<(), AdminError> {
    validate_topic_configs(ctx, &configs)?;
    let req = ControllerRequest::AlterTopicConfigs {
        topic: name.to_string(),
        configs,
    };
    match controller(ctx, req).await? {
        ControllerResponse::AlterTopicConfigs { status } => status_to_result(status),
        other => Err(unexpected(other)),
    }
}

/// Replaces the broker's dynamic topic defaults (cluster-wide, as Kafka's default resource).
pub async fn set_broker_configs(
    ctx: &Rc<ShardCtx>,
    settings: BTreeMap<String, String>,
) -> Result<(), AdminError> {
    let req = ControllerRequest::AlterBrokerConfigs { configs: settings };
    match controller(ctx, req).await? {
        ControllerResponse::AlterBrokerConfigs { status } => status_to_result(status),
        other => Err(unexpected(other)),
    }
}
