//! Metadata: brokers, topics (with ids), partitions and leaders. Unknown topics are created
//! when `auto_create_topics_enable` is on and the request allows it (v4+), as in Kafka.
//!
//! Authorization (Kafka's): a topic the principal may not DESCRIBE is left out of an
//! all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named; creating a missing
//! one needs CREATE on the cluster or the topic (else TOPIC_AUTHORIZATION_FAILED); the
//! `authorized_operations` fields are filled when the request asks (v8+).
use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::metadata_response::*;
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};

use super::{str_bytes, topic_name};
use crate::cluster::catalog::{Catalog, PartitionMeta, TopicMeta};
use crate::protocol::error::ErrorCode;
use crate::protocol::{encode_offline_reasons, OFFLINE_REASONS_TAG};
use crate::security::acl::{
    AclOperation, ResourceType, CLUSTER_NAME, CLUSTER_OPERATIONS, TOPIC_OPERATIONS,
};
use crate::server::admin::create_topic;
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

/// Kafka's "authorized operations not requested" marker.
pub(super) const OPERATIONS_OMITTED: i32 = i32::MIN;

/// `listener` is the name of the listener the request came in on: brokers are answered with
/// their address on it, as Kafka does, and a broker without it is left out.
pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    req: MetadataRequest,
    listener: &str,
    authz: &Authz,
) -> MetadataResponse {
    let config = &ctx.shared.config;
    let catalog = ctx.shared.catalog.load();
    // Live (unfenced) brokers only, as KRaft does: clients must not be sent to a broker the
    // controller has fenced.
    let brokers = catalog
        .live_brokers()
        .filter_map(|b| {
            let (host, port) = b.endpoint(listener)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.node_id))
                    .with_host(str_bytes(host))
                    .with_port(port)
                    .with_rack(b.rack.as_deref().map(str_bytes)),
            )
        })
        .collect();
    let controller = catalog.controller_for_clients(ctx.shared.quorum.active_controller());
    let mut resp = MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(str_bytes(&catalog.cluster_id)))
        .with_controller_id(BrokerId(controller))
        .with_cluster_authorized_operations(OPERATIONS_OMITTED);
    if req.include_cluster_authorized_operations && (8..=10).contains(&version) {
        resp.cluster_authorized_operations =
            authz.authorized_operations(ResourceType::Cluster, CLUSTER_NAME, CLUSTER_OPERATIONS);
    }
    let with_ops = req.include_topic_authorized_operations && version >= 8;
    let ops = |name: &str| {
        if with_ops {
            authz.authorized_operations(ResourceType::Topic, name, TOPIC_OPERATIONS)
        } else {
            OPERATIONS_OMITTED
        }
    };
    let may_describe = |name: &str| authz.allows_topic(AclOperation::Describe, name);

    // v0: an empty list means all topics; v1+: null means all topics.
    let all = match &req.topics {
        None => true,
        Some(t) => t.is_empty() && version == 0,
    };
    if all {
        for meta in catalog.topics.values() {
            if may_describe(&meta.name) {
                resp.topics
                    .push(topic_entry(&catalog, meta, ops(&meta.name)));
            }
        }
        leaders_on_listener(&mut resp, &catalog, listener, version);
        return resp;
    }
    let auto_create =
        config.auto_create_topics_enable && (version < 4 || req.allow_auto_topic_creation);
    for requested in req.topics.unwrap_or_default() {
        // A topic id (v10+) wins over the name: the Java client sends the name field's
        // default, an empty string rather than null, beside the id it asks for.
        let by_name = if requested.topic_id.is_nil() {
            requested.name.as_ref().map(|n| n.0.to_string())
        } else {
            None
        };
        let found = match &by_name {
            Some(name) => catalog.topic(name).cloned(),
            None => catalog.topic_by_id(requested.topic_id.as_u128()).cloned(),
        };
        let entry = match (found, by_name) {
            (Some(meta), _) if !may_describe(&meta.name) => MetadataResponseTopic::default()
                .with_error_code(ErrorCode::TopicAuthorizationFailed.code())
                .with_name(requested.name.clone())
                .with_topic_id(requested.topic_id)
                .with_topic_authorized_operations(OPERATIONS_OMITTED),
            (Some(meta), _) => topic_entry(&ctx.shared.catalog.load(), &meta, ops(&meta.name)),
            (None, Some(name)) if !may_describe(&name) => error_entry(
                &name,
                requested.topic_id,
                ErrorCode::TopicAuthorizationFailed,
            ),
            (None, Some(name))
                if auto_create
                    && !authz.allows_cluster(AclOperation::Create)
                    && !authz.allows_topic(AclOperation::Create, &name) =>
            {
                error_entry(
                    &name,
                    requested.topic_id,
                    ErrorCode::TopicAuthorizationFailed,
                )
            }
            (None, Some(name)) if auto_create => {
                match create_topic(ctx, &name, -1, -1, BTreeMap::new(), false).await {
                    Ok(made) => topic_entry(&ctx.shared.catalog.load(), &made.meta, ops(&name)),
                    // Another connection created it a moment ago.
                    Err(e) if e.code == ErrorCode::TopicAlreadyExists => {
                        match ctx.shared.catalog.load().topic(&name) {
                            Some(meta) => topic_entry(&ctx.shared.catalog.load(), meta, ops(&name)),
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
    leaders_on_listener(&mut resp, &ctx.shared.catalog.load(), listener, version);
    resp
}

/// A client reaches brokers only through the listener it came in on: a partition whose
/// leader has no such listener is answered with no leader (-1) and, from Metadata v6,
/// LISTENER_NOT_FOUND (LEADER_NOT_AVAILABLE before: older clients do not know code 72);
/// replicas without it are offline to this client. Kafka does the same (KAFKA-7235): in a
/// cluster whose brokers do not all have the same listeners, a client would otherwise be
/// sent to a leader it cannot find among the brokers listed.
fn leaders_on_listener(
    resp: &mut MetadataResponse,
    catalog: &Catalog,
    listener: &str,
    version: i16,
) {
    let reachable = |node: i32| {
        catalog
            .brokers
            .get(&node)
            .is_some_and(|b| b.endpoint(listener).is_some())
    };
    let unreachable_leader = if version >= 6 {
        ErrorCode::ListenerNotFound
    } else {
        ErrorCode::LeaderNotAvailable
    };
    for p in resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
        let leader = p.leader_id.0;
        if leader >= 0 && !reachable(leader) {
            p.leader_id = BrokerId(-1);
            p.error_code = if catalog.brokers.contains_key(&leader) {
                unreachable_leader.code()
            } else {
                ErrorCode::LeaderNotAvailable.code()
            };
        }
        for r in &p.replica_nodes {
            if !reachable(r.0) && !p.offline_replicas.contains(r) {
                p.offline_replicas.push(*r);
            }
        }
    }
}

fn error_entry(name: &str, id: uuid::Uuid, code: ErrorCode) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(code.code())
        .with_name(Some(topic_name(name)))
        .with_topic_id(id)
        .with_topic_authorized_operations(OPERATIONS_OMITTED)
}

fn topic_entry(catalog: &Catalog, meta: &TopicMeta, ops: i32) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(&meta.name)))
        .with_topic_id(meta.uuid())
        .with_is_internal(is_internal(&meta.name))
        .with_topic_authorized_operations(ops)
        .with_partitions(
            meta.partitions
                .iter()
                .enumerate()
                .map(|(i, pm)| {
                    let mut tags = BTreeMap::new();
                    if !pm.offline.is_empty() {
                        tags.insert(OFFLINE_REASONS_TAG, encode_offline_reasons(&pm.offline));
                    }
                    MetadataResponsePartition::default()
                        .with_error_code(partition_error(pm))
                        .with_partition_index(i as i32)
                        .with_leader_id(BrokerId(pm.leader))
                        .with_leader_epoch(pm.leader_epoch)
                        .with_replica_nodes(broker_ids(&pm.replicas))
                        .with_isr_nodes(broker_ids(&pm.isr))
                        .with_offline_replicas(broker_ids(&offline_replicas(catalog, pm)))
                        .with_unknown_tagged_fields(tags)
                })
                .collect(),
        )
}

/// Whether clients should treat the topic as internal (Kafka's `Topic.isInternal`).
pub(super) fn is_internal(name: &str) -> bool {
    name.starts_with("__")
}

pub(super) fn broker_ids(nodes: &[i32]) -> Vec<BrokerId> {
    nodes.iter().map(|n| BrokerId(*n)).collect()
}

/// Replicas on fenced brokers, or whose broker cannot open their log, are offline.
pub(super) fn offline_replicas(catalog: &Catalog, pm: &PartitionMeta) -> Vec<i32> {
    pm.replicas
        .iter()
        .copied()
        .filter(|r| catalog.brokers.get(r).is_none_or(|b| b.fenced) || pm.offline.contains_key(r))
        .collect()
}

/// With no leader a partition is LEADER_NOT_AVAILABLE (clients retry), as Kafka reports it.
pub(super) fn partition_error(pm: &PartitionMeta) -> i16 {
    if pm.leader < 0 {
        ErrorCode::LeaderNotAvailable.code()
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing)]
    use super::*;
    use crate::cluster::catalog::{BrokerEndpoint, BrokerMeta};

    fn broker(node_id: i32, listeners: &[&str]) -> BrokerMeta {
        BrokerMeta {
            node_id,
            host: "h".into(),
            port: 9092,
            listeners: listeners
                .iter()
                .map(|name| BrokerEndpoint {
                    name: name.to_string(),
                    host: format!("h{node_id}"),
                    port: 9000 + node_id,
                    security_protocol: 0,
                })
                .collect(),
            rack: None,
            shards: 1,
            fenced: false,
        }
    }

    fn answer(leaders: &[i32]) -> MetadataResponse {
        let partitions = leaders
            .iter()
            .enumerate()
            .map(|(i, l)| {
                MetadataResponsePartition::default()
                    .with_partition_index(i as i32)
                    .with_leader_id(BrokerId(*l))
                    .with_replica_nodes(broker_ids(&[1, 2, 3]))
            })
            .collect();
        MetadataResponse::default().with_topics(vec![
            MetadataResponseTopic::default().with_partitions(partitions)
        ])
    }

    #[test]
    fn a_leader_without_the_listener_is_no_leader_and_listener_not_found() {
        // Proves Kafka's answer (KAFKA-7235) on a listener broker 3 lacks: its partitions
        // get leader -1 and LISTENER_NOT_FOUND from v6, LEADER_NOT_AVAILABLE before;
        // a leader the cluster does not know is LEADER_NOT_AVAILABLE in every version;
        // replicas without the listener are offline; on the listener all brokers have,
        // nothing changes.
        let mut catalog = Catalog::default();
        catalog
            .brokers
            .insert(1, broker(1, &["PLAINTEXT", "EXTRA"]));
        catalog
            .brokers
            .insert(2, broker(2, &["PLAINTEXT", "EXTRA"]));
        catalog.brokers.insert(3, broker(3, &["PLAINTEXT"]));
        let leaders = [1, 3, 9];

        let mut resp = answer(&leaders);
        leaders_on_listener(&mut resp, &catalog, "EXTRA", 12);
        let parts = &resp.topics[0].partitions;
        assert_eq!((parts[0].leader_id.0, parts[0].error_code), (1, 0));
        assert_eq!(
            (parts[1].leader_id.0, parts[1].error_code),
            (-1, ErrorCode::ListenerNotFound.code())
        );
        assert_eq!(
            (parts[2].leader_id.0, parts[2].error_code),
            (-1, ErrorCode::LeaderNotAvailable.code())
        );
        assert_eq!(parts[0].offline_replicas, broker_ids(&[3]));

        let mut old = answer(&leaders);
        leaders_on_listener(&mut old, &catalog, "EXTRA", 5);
        assert_eq!(
            old.topics[0].partitions[1].error_code,
            ErrorCode::LeaderNotAvailable.code()
        );

        let mut plain = answer(&leaders);
        leaders_on_listener(&mut plain, &catalog, "PLAINTEXT", 12);
        let parts = &plain.topics[0].partitions;
        assert_eq!((parts[1].leader_id.0, parts[1].error_code), (3, 0));
        assert!(parts[1].offline_replicas.is_empty());
    }
}
