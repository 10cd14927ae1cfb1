//! IncrementalAlterConfigs: SET / DELETE of topic-level settings, and of the broker's
//! dynamic topic defaults. List operations (APPEND / SUBTRACT) have no list-valued setting
//! to apply to and are refused.
use std::rc::Rc;

use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::str_bytes;
use crate::config::broker_key_to_topic_key;
use crate::protocol::error::ErrorCode;
use crate::server::admin::{
    set_broker_configs, set_topic_configs, validate_topic_configs, AdminError,
};
use crate::shard::ShardCtx;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let name = r.resource_name.to_string();
        let result = alter(ctx, r.resource_type, &name, &r.configs, req.validate_only).await;
        let mut resp = AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name);
        if let Err(e) = result {
            resp = resp
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(&e.message)));
        }
        responses.push(resp);
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

async fn alter(
    ctx: &Rc<ShardCtx>,
    resource_type: i8,
    name: &str,
    changes: &[kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig],
    validate_only: bool,
) -> Result<(), AdminError> {
    let catalog = ctx.shared.catalog.load();
    let mut settings = match resource_type {
        RESOURCE_TOPIC => catalog
            .topic(name)
            .map(|m| m.configs.clone())
            .ok_or_else(|| {
                AdminError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("topic `{name}` does not exist"),
                )
            })?,
        RESOURCE_BROKER => {
            if !name.is_empty() && name != ctx.shared.config.node_id.to_string() {
                return Err(AdminError::new(
                    ErrorCode::InvalidRequest,
                    format!("no broker with id `{name}` here"),
                ));
            }
            catalog.broker_configs.clone()
        }
        other => {
            return Err(AdminError::new(
                ErrorCode::InvalidRequest,
                format!("resource type {other} is not supported"),
            ))
        }
    };
    for c in changes {
        let key = c.name.to_string();
        if resource_type == RESOURCE_BROKER && broker_key_to_topic_key(&key).is_none() {
            return Err(AdminError::new(
                ErrorCode::InvalidConfig,
                format!("broker setting `{key}` cannot be changed at runtime; set it in the config file"),
            ));
        }
        match c.config_operation {
            OP_SET => {
                let value = c.value.as_ref().map(|v| v.to_string()).ok_or_else(|| {
                    AdminError::new(
                        ErrorCode::InvalidRequest,
                        format!("SET of `{key}` needs a value"),
                    )
                })?;
                settings.insert(key, value);
            }
            OP_DELETE => {
                settings.remove(&key);
            }
            op => {
                return Err(AdminError::new(
                    ErrorCode::InvalidRequest,
                    format!("operation {op} on `{key}` is not supported (only SET and DELETE)"),
                ))
            }
        }
    }
    if resource_type == RESOURCE_BROKER {
        let as_topic = settings
            .iter()
            .filter_map(|(k, v)| broker_key_to_topic_key(k).map(|t| (t.to_string(), v.clone())))
            .collect();
        validate_topic_configs(ctx, &as_topic)?;
        if validate_only {
            return Ok(());
        }
        return set_broker_configs(ctx, settings).await;
    }
    validate_topic_configs(ctx, &settings)?;
    if validate_only {
        return Ok(());
    }
    set_topic_configs(ctx, name, settings).await
}
