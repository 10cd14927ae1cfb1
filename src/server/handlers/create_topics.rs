//! CreateTopics: validate names, partition counts, replication factor and configs here, then
//! ask the active controller, which places the replicas and records the topic; each broker's
//! shards open their replicas as they apply the new metadata.
use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::create_topics_response::*;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse, TopicName};

use super::describe_configs::{topic_configs, TopicConfig};
use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::admin::{create_topic, CreatedTopic};
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

/// Authorization (Kafka's): CREATE on the cluster, or else on each topic
/// (TOPIC_AUTHORIZATION_FAILED for a topic without it); the created topic's configs (v5+)
/// only with DESCRIBE_CONFIGS on it (else `topic_config_error_code`).
pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    authz: &Authz,
    req: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let cluster_may_create = authz.allows_cluster(AclOperation::Create);
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.to_string();
        let configs: BTreeMap<String, String> = t
            .configs
            .iter()
            .filter_map(|c| {
                c.value
                    .as_ref()
                    .map(|v| (c.name.to_string(), v.to_string()))
            })
            .collect();
        let result = if !cluster_may_create && !authz.allows_topic(AclOperation::Create, &name) {
            Err(crate::server::admin::AdminError::new(
                ErrorCode::TopicAuthorizationFailed,
                "Authorization failed.",
            ))
        } else if !t.assignments.is_empty() {
            Err(crate::server::admin::AdminError::new(
                ErrorCode::InvalidRequest,
                "manual replica assignments are not supported; create the topic, then move replicas with AlterPartitionReassignments",
            ))
        } else {
            create_topic(
                ctx,
                &name,
                t.num_partitions,
                t.replication_factor,
                configs,
                req.validate_only,
            )
            .await
        };
        topics.push(match result {
            Ok(made) => {
                // KIP-525's configs are DescribeConfigs' answer: shown only to a principal
                // that may DESCRIBE_CONFIGS the topic (Kafka's ControllerApis).
                let describable = authz.allows_topic(AclOperation::DescribeConfigs, &name);
                created(version, t.name, &made, describable, || {
                    topic_configs(ctx, &made.meta.configs)
                })
            }
            Err(e) => CreatableTopicResult::default()
                .with_name(t.name)
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(&e.message)))
                .with_num_partitions(-1)
                .with_replication_factor(-1),
        });
    }
    CreateTopicsResponse::default().with_topics(topics)
}

/// The answer for a topic made (or, validate_only, that would be), as Kafka reports it
/// (KIP-525): the partition count and replication factor the controller chose, and from v5
/// on every topic setting in effect with its source. A principal without DESCRIBE_CONFIGS
/// on the topic gets none of these, only `topic_config_error_code` =
/// TOPIC_AUTHORIZATION_FAILED (the topic is still created: CREATE is what that needs).
fn created(
    version: i16,
    name: TopicName,
    made: &CreatedTopic,
    describable: bool,
    configs: impl FnOnce() -> Vec<TopicConfig>,
) -> CreatableTopicResult {
    let base = CreatableTopicResult::default()
        .with_name(name)
        .with_topic_id(made.meta.uuid());
    if !describable {
        if version < 5 {
            // Before v5 the answer has nothing to hide.
            return base;
        }
        return base
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_configs(Some(Vec::new()))
            .with_topic_config_error_code(ErrorCode::TopicAuthorizationFailed.code());
    }
    base.with_num_partitions(made.num_partitions)
        .with_replication_factor(made.replication_factor)
        .with_configs((version >= 5).then(|| {
            configs()
                .into_iter()
                .map(|c| {
                    CreatableTopicConfigs::default()
                        .with_name(str_bytes(c.name))
                        .with_value(Some(str_bytes(&c.value)))
                        .with_read_only(false)
                        .with_config_source(c.source)
                        .with_is_sensitive(false)
                })
                .collect()
        }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn made() -> CreatedTopic {
        CreatedTopic {
            meta: Arc::new(crate::cluster::catalog::TopicMeta {
                name: "t".into(),
                id: 7,
                partitions: Vec::new(),
                configs: BTreeMap::new(),
            }),
            num_partitions: 3,
            replication_factor: 2,
        }
    }

    fn one_config() -> Vec<TopicConfig> {
        vec![TopicConfig {
            name: "cleanup.policy",
            value: "delete".into(),
            source: 5,
        }]
    }

    /// Proves KIP-525's answer: with DESCRIBE_CONFIGS the v5+ result carries the partition
    /// count, replication factor and configs, no config error; without it (Kafka's
    /// ControllerApis) the topic id only, -1 for the counts, no configs and
    /// topic_config_error_code TOPIC_AUTHORIZATION_FAILED; before v5 nothing is hidden or
    /// flagged (the configs are not asked for at all).
    #[test]
    fn configs_shown_only_to_a_principal_that_may_describe_them() {
        let name = || TopicName(str_bytes("t"));
        let shown = created(5, name(), &made(), true, one_config);
        assert_eq!(shown.topic_config_error_code, 0);
        assert_eq!((shown.num_partitions, shown.replication_factor), (3, 2));
        assert_eq!(shown.configs.as_ref().map(Vec::len), Some(1));
        assert_eq!(shown.topic_id, uuid::Uuid::from_u128(7));

        let hidden = created(7, name(), &made(), false, || {
            panic!("configs looked up for a principal that may not see them")
        });
        assert_eq!(
            hidden.topic_config_error_code,
            ErrorCode::TopicAuthorizationFailed.code()
        );
        assert_eq!(hidden.error_code, 0);
        assert_eq!((hidden.num_partitions, hidden.replication_factor), (-1, -1));
        assert_eq!(hidden.configs, Some(Vec::new()));
        assert_eq!(hidden.topic_id, uuid::Uuid::from_u128(7));

        let old = created(4, name(), &made(), false, || panic!("no configs before v5"));
        assert_eq!(old.topic_config_error_code, 0);
        let old = created(4, name(), &made(), true, || panic!("no configs before v5"));
        assert_eq!(old.configs, None);
    }
}
