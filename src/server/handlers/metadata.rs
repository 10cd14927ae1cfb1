//! Metadata: brokers, topics (with ids), partitions and leaders. Unknown topics are created
//! when `auto_create_topics_enable` is on and the request allows it (v4+), as in Kafka.
use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::metadata_response::*;
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};

use super::{str_bytes, topic_name};
use crate::cluster::catalog::TopicMeta;
use crate::protocol::error::ErrorCode;
use crate::server::admin::create_topic;
use crate::shard::ShardCtx;

/// Kafka's "authorized operations not requested" marker.
const OPERATIONS_OMITTED: i32 = i32::MIN;

pub async fn handle(ctx: &Rc<ShardCtx>, version: i16, req: MetadataRequest) -> MetadataResponse {
    let config = &ctx.shared.config;
    let (host, port) = config.advertised();
    let node = BrokerId(config.node_id);
    let mut resp = MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(node)
            .with_host(str_bytes(&host))
            .with_port(port)])
        .with_cluster_id(Some(str_bytes(&ctx.shared.catalog.load().cluster_id)))
        .with_controller_id(node)
        .with_cluster_authorized_operations(OPERATIONS_OMITTED);

    // v0: an empty list means all topics; v1+: null means all topics.
    let all = match &req.topics {
        None => true,
        Some(t) => t.is_empty() && version == 0,
    };
    let catalog = ctx.shared.catalog.load();
    if all {
        for meta in catalog.topics.values() {
            resp.topics.push(topic_entry(ctx, meta));
        }
        return resp;
    }
    let auto_create =
        config.auto_create_topics_enable && (version < 4 || req.allow_auto_topic_creation);
    for requested in req.topics.unwrap_or_default() {
        let by_name = requested.name.as_ref().map(|n| n.0.to_string());
        let found = match &by_name {
            Some(name) => catalog.topic(name).cloned(),
            None => catalog.topic_by_id(requested.topic_id.as_u128()).cloned(),
        };
        let entry = match (found, by_name) {
            (Some(meta), _) => topic_entry(ctx, &meta),
            (None, Some(name)) if auto_create => {
                match create_topic(ctx, &name, -1, -1, BTreeMap::new(), false).await {
                    Ok(meta) => topic_entry(ctx, &meta),
                    // Another connection created it a moment ago.
                    Err(e) if e.code == ErrorCode::TopicAlreadyExists => {
                        match ctx.shared.catalog.load().topic(&name) {
                            Some(meta) => topic_entry(ctx, meta),
                            None => error_entry(
                                &name,
                                requested.topic_id,
                                ErrorCode::LeaderNotAvailable,
                            ),
                        }
                    }
                    Err(e) => error_entry(&name, requested.topic_id, e.code),
                }
            }
            (None, Some(name)) => {
                let code = match crate::server::admin::validate_topic_name(&name) {
                    Ok(()) => ErrorCode::UnknownTopicOrPartition,
                    Err(e) => e.code,
                };
                error_entry(&name, requested.topic_id, code)
            }
            (None, None) => MetadataResponseTopic::default()
                .with_error_code(ErrorCode::UnknownTopicId.code())
                .with_topic_id(requested.topic_id)
                .with_topic_authorized_operations(OPERATIONS_OMITTED),
        };
        resp.topics.push(entry);
    }
    resp
}

fn error_entry(name: &str, id: uuid::Uuid, code: ErrorCode) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(code.code())
        .with_name(Some(topic_name(name)))
        .with_topic_id(id)
        .with_topic_authorized_operations(OPERATIONS_OMITTED)
}

fn topic_entry(ctx: &ShardCtx, meta: &TopicMeta) -> MetadataResponseTopic {
    let node = BrokerId(ctx.shared.config.node_id);
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&meta.name)))
        .with_topic_id(meta.uuid())
        .with_is_internal(meta.name.starts_with("__"))
        .with_topic_authorized_operations(OPERATIONS_OMITTED)
        .with_partitions(
            (0..meta.partitions.len() as i32)
                .map(|i| {
                    MetadataResponsePartition::default()
                        .with_partition_index(i)
                        .with_leader_id(node)
                        .with_leader_epoch(0)
                        .with_replica_nodes(vec![node])
                        .with_isr_nodes(vec![node])
                })
                .collect(),
        )
}
