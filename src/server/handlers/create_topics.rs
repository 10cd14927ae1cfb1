//! CreateTopics: validate names, partition counts, replication factor and configs here, then
//! ask the active controller, which places the replicas and records the topic; each broker's
//! shards open their replicas as they apply the new metadata.
use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::create_topics_response::*;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};

use super::describe_configs::topic_configs;
use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::admin::create_topic;
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

/// Authorization (Kafka's): CREATE on the cluster, or else on each topic
/// (TOPIC_AUTHORIZATION_FAILED for a topic without it).
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
            // What was made, as Kafka reports it (KIP-525): the partition count and
            // replication factor the controller chose, and from v5 on every topic setting
            // in effect with its source.
            Ok(made) => CreatableTopicResult::default()
                .with_name(t.name)
                .with_topic_id(made.meta.uuid())
                .with_num_partitions(made.num_partitions)
                .with_replication_factor(made.replication_factor)
                .with_configs((version >= 5).then(|| {
                    topic_configs(ctx, &made.meta.configs)
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
                })),
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
