//! IncrementalAlterConfigs: SET / DELETE of topic-level settings, and of the broker's
//! dynamic topic defaults; APPEND / SUBTRACT of list-valued ones (`cleanup.policy`), as
//! Kafka: from the value set, else the default in effect, items kept in order and not
//! repeated (the Java admin and Kafka Streams use them).
use std::rc::Rc;

use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::str_bytes;
use crate::config::broker_key_to_topic_key;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::admin::{
    set_broker_configs, set_topic_configs, validate_topic_configs, AdminError,
};
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// Settings whose value is a comma-separated list (Kafka's type LIST), the only ones APPEND
/// and SUBTRACT apply to.
pub const LIST_KEYS: &[&str] = &["cleanup.policy", "log.cleanup.policy"];

/// The list `current` after APPEND (`append` true) or SUBTRACT of the comma-separated
/// `items`: appended items already present are not repeated; subtracting an absent item does
/// nothing. Empty items are dropped.
pub fn apply_list_op(current: &str, items: &str, append: bool) -> String {
    let split = |v: &str| -> Vec<String> {
        v.split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut list = split(current);
    for item in split(items) {
        if append {
            if !list.contains(&item) {
                list.push(item);
            }
        } else {
            list.retain(|i| *i != item);
        }
    }
    list.join(",")
}

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let name = r.resource_name.to_string();
        // Kafka: ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or the cluster, for
        // a broker (CLUSTER_AUTHORIZATION_FAILED).
        let refused = match r.resource_type {
            RESOURCE_TOPIC if !authz.allows_topic(AclOperation::AlterConfigs, &name) => {
                Some(ErrorCode::TopicAuthorizationFailed)
            }
            RESOURCE_BROKER if !authz.allows_cluster(AclOperation::AlterConfigs) => {
                Some(ErrorCode::ClusterAuthorizationFailed)
            }
            _ => None,
        };
        let result = match refused {
            Some(e) => Err(AdminError::new(e, "Authorization failed.")),
            None => alter(ctx, r.resource_type, &name, &r.configs, req.validate_only).await,
        };
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
            OP_APPEND | OP_SUBTRACT => {
                let append = c.config_operation == OP_APPEND;
                if !LIST_KEYS.contains(&key.as_str()) {
                    return Err(AdminError::new(
                        ErrorCode::InvalidConfig,
                        format!(
                            "can't {} to key `{key}`: its type is not LIST",
                            if append { "APPEND" } else { "SUBTRACT" }
                        ),
                    ));
                }
                let items = c.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
                let current = match settings.get(&key) {
                    Some(v) => v.clone(),
                    None => default_value(ctx, resource_type, &key),
                };
                settings.insert(key, apply_list_op(&current, &items, append));
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

/// The value `key` has when not set on the resource: for a topic, the broker's dynamic
/// default or else the static one; for the broker, the static one.
fn default_value(ctx: &ShardCtx, resource_type: i8, key: &str) -> String {
    let topic_key = if resource_type == RESOURCE_BROKER {
        broker_key_to_topic_key(key).unwrap_or(key)
    } else {
        key
    };
    let dynamic = if resource_type == RESOURCE_TOPIC {
        ctx.shared
            .topic_settings(&Default::default())
            .remove(topic_key)
    } else {
        None
    };
    dynamic
        .or_else(|| ctx.shared.config.topic_defaults_map().remove(topic_key))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::apply_list_op;

    /// Kafka's answers (checked against Kafka 4.1 on cleanup.policy): APPEND keeps order and
    /// skips items present, SUBTRACT removes every copy and may leave the list empty.
    #[test]
    fn list_ops_follow_kafka() {
        assert_eq!(apply_list_op("delete", "compact", true), "delete,compact");
        assert_eq!(
            apply_list_op("delete,compact", "delete", true),
            "delete,compact"
        );
        assert_eq!(
            apply_list_op("delete", "delete,compact", true),
            "delete,compact"
        );
        assert_eq!(apply_list_op("delete,compact", "delete", false), "compact");
        assert_eq!(apply_list_op("compact", "delete", false), "compact");
        assert_eq!(apply_list_op("compact", "compact", false), "");
        assert_eq!(apply_list_op("", "compact", true), "compact");
        assert_eq!(
            apply_list_op(" delete , compact ", "", true),
            "delete,compact"
        );
    }

    /// What SUBTRACT of the last item leaves is a valid policy (Kafka 4.1: keep everything).
    #[test]
    fn empty_cleanup_policy_is_neither() {
        let p = crate::storage::CleanupPolicy::parse("").expect("empty list");
        assert!(!p.delete && !p.compact);
        assert_eq!(crate::storage::CleanupPolicy::parse("delete,"), None);
    }
}
