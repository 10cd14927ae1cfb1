//! DescribeConfigs for topics (every topic-level setting, marking overrides) and for the
//! broker (dynamic topic defaults and the static settings).
use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::*;
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};

use super::str_bytes;
use crate::config::{BROKER_TOPIC_DEFAULTS, TOPIC_CONFIG_KEYS};
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

/// Kafka's ConfigResource types.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

/// Kafka's DescribeConfigs config sources.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// Kafka's config types (v3+).
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_BOOLEAN: i8 = 1;
const TYPE_DOUBLE: i8 = 6;
const TYPE_LIST: i8 = 7;

fn config_type(key: &str) -> i8 {
    match key {
        "cleanup.policy" | "log.cleanup.policy" => TYPE_LIST,
        "compression.type"
        | "message.timestamp.type"
        | "flush.policy"
        | "log.message.timestamp.type"
        | "log.flush.policy"
        | "advertised.listeners"
        | "listeners"
        | "log.dirs" => TYPE_STRING,
        "auto.create.topics.enable" => TYPE_BOOLEAN,
        "min.cleanable.dirty.ratio" | "log.cleaner.min.cleanable.ratio" => TYPE_DOUBLE,
        k if k.ends_with(".ms")
            || k.ends_with("retention.bytes")
            || k == "segment.bytes"
            || k == "log.segment.bytes" =>
        {
            TYPE_LONG
        }
        _ => TYPE_INT,
    }
}

fn entry(key: &str, value: String, source: i8, read_only: bool) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(key))
        .with_value(Some(str_bytes(&value)))
        .with_read_only(read_only)
        .with_config_source(source)
        .with_config_type(config_type(key))
}

/// One topic-level setting as DescribeConfigs (and CreateTopics v5+) report it.
pub struct TopicConfig {
    pub name: &'static str,
    pub value: String,
    /// Kafka's config source: the topic's own override, a dynamic broker default, or the
    /// built-in default.
    pub source: i8,
}

/// Every topic-level setting of a topic whose overrides are `overrides`, with the value in
/// effect and where it comes from.
pub fn topic_configs(ctx: &ShardCtx, overrides: &BTreeMap<String, String>) -> Vec<TopicConfig> {
    let catalog = ctx.shared.catalog.load();
    let defaults = ctx.shared.config.topic_defaults_map();
    let effective = ctx.shared.topic_settings(overrides);
    TOPIC_CONFIG_KEYS
        .iter()
        .map(|k| {
            let broker_dynamic = BROKER_TOPIC_DEFAULTS
                .iter()
                .any(|(b, t)| t == k && catalog.broker_configs.contains_key(*b));
            let (value, source) = if let Some(v) = overrides.get(*k) {
                (v.clone(), SOURCE_DYNAMIC_TOPIC)
            } else if broker_dynamic {
                (
                    effective.get(*k).cloned().unwrap_or_default(),
                    SOURCE_DYNAMIC_DEFAULT_BROKER,
                )
            } else {
                (
                    defaults.get(*k).cloned().unwrap_or_default(),
                    SOURCE_DEFAULT,
                )
            };
            TopicConfig {
                name: k,
                value,
                source,
            }
        })
        .collect()
}

pub fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    authz: &Authz,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let catalog = ctx.shared.catalog.load();
    let defaults = ctx.shared.config.topic_defaults_map();
    let mut results = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let name = r.resource_name.to_string();
        let wanted = |k: &str| {
            r.configuration_keys
                .as_ref()
                .is_none_or(|keys| keys.iter().any(|w| &**w == k))
        };
        let base = DescribeConfigsResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name.clone());
        // Kafka: DESCRIBE_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or the cluster,
        // for a broker (CLUSTER_AUTHORIZATION_FAILED).
        let refused = match r.resource_type {
            RESOURCE_TOPIC if !authz.allows_topic(AclOperation::DescribeConfigs, &name) => {
                Some(ErrorCode::TopicAuthorizationFailed)
            }
            RESOURCE_BROKER if !authz.allows_cluster(AclOperation::DescribeConfigs) => {
                Some(ErrorCode::ClusterAuthorizationFailed)
            }
            _ => None,
        };
        let result = match r.resource_type {
            _ if refused.is_some() => base
                .with_error_code(refused.map_or(0, |e| e.code()))
                .with_error_message(Some(str_bytes("Authorization failed."))),
            RESOURCE_TOPIC => match catalog.topic(&name) {
                None => base
                    .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                    .with_error_message(Some(str_bytes(&format!("topic `{name}` does not exist")))),
                Some(meta) => {
                    let configs = topic_configs(ctx, &meta.configs)
                        .into_iter()
                        .filter(|c| wanted(c.name))
                        .map(|c| entry(c.name, c.value, c.source, false))
                        .collect();
                    base.with_configs(configs)
                }
            },
            RESOURCE_BROKER => {
                if !name.is_empty() && name != ctx.shared.config.node_id.to_string() {
                    base.with_error_code(ErrorCode::InvalidRequest.code())
                        .with_error_message(Some(str_bytes(&format!(
                            "no broker with id `{name}` here"
                        ))))
                } else {
                    let mut configs: Vec<_> = BROKER_TOPIC_DEFAULTS
                        .iter()
                        .filter(|(b, _)| wanted(b))
                        .map(|(b, t)| match catalog.broker_configs.get(*b) {
                            Some(v) => entry(b, v.clone(), SOURCE_DYNAMIC_DEFAULT_BROKER, false),
                            None => entry(
                                b,
                                defaults.get(*t).cloned().unwrap_or_default(),
                                SOURCE_STATIC_BROKER,
                                false,
                            ),
                        })
                        .collect();
                    configs.extend(
                        ctx.shared
                            .config
                            .static_broker_settings()
                            .into_iter()
                            .filter(|(k, _)| wanted(k))
                            .map(|(k, v)| entry(k, v, SOURCE_STATIC_BROKER, true)),
                    );
                    base.with_configs(configs)
                }
            }
            other => base
                .with_error_code(ErrorCode::InvalidRequest.code())
                .with_error_message(Some(str_bytes(&format!(
                    "resource type {other} is not supported"
                )))),
        };
        results.push(result);
    }
    DescribeConfigsResponse::default().with_results(results)
}
