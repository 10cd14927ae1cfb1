//! DescribeTopicPartitions (KIP-966): each topic's partitions with leader, epoch, replicas,
//! ISR and offline replicas, paged: at most `response_partition_limit` partitions per answer
//! (capped by `limits::DESCRIBE_TOPIC_PARTITIONS_LIMIT_MAX`), topics in name order, and a
//! cursor (topic, partition) where the next page starts. Kafka 4's admin client asks this
//! first whenever it describes topics (Kafka Connect and Debezium do on every start, as does
//! `kafka-topics --describe`) and falls back to Metadata only after an UNSUPPORTED_VERSION.
//!
//! As in Kafka: an empty topic list means every topic, and then unknown names cannot occur;
//! a named topic that does not exist is answered UNKNOWN_TOPIC_OR_PARTITION (or
//! INVALID_TOPIC_EXCEPTION for an invalid name) with no partitions; a cursor whose topic is
//! not among the named ones makes the whole request INVALID_REQUEST.
use std::collections::BTreeSet;
use std::rc::Rc;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
};

use super::metadata::{
    broker_ids, is_internal, offline_replicas, partition_error, OPERATIONS_OMITTED,
};
use super::topic_name;
use crate::cluster::catalog::{Catalog, TopicMeta};
use crate::limits::DESCRIBE_TOPIC_PARTITIONS_LIMIT_MAX;
use crate::protocol::error::ErrorCode;
use crate::security::acl::AclOperation;
use crate::server::authz::Authz;
use crate::shard::ShardCtx;

pub fn handle(
    ctx: &Rc<ShardCtx>,
    authz: &Authz,
    req: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    describe_as(&ctx.shared.catalog.load(), &req, authz)
}

/// The answer to `req` from one catalog snapshot, with authorization off.
#[cfg(test)]
pub(crate) fn describe(
    catalog: &Catalog,
    req: &DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    describe_as(catalog, req, &Authz::off())
}

/// The answer to `req` from one catalog snapshot. Authorization (Kafka's): topics the
/// principal may not DESCRIBE are left out of an all-topics answer and answered
/// TOPIC_AUTHORIZATION_FAILED when named.
pub(crate) fn describe_as(
    catalog: &Catalog,
    req: &DescribeTopicPartitionsRequest,
    authz: &Authz,
) -> DescribeTopicPartitionsResponse {
    let may = |t: &str| authz.allows_topic(AclOperation::Describe, t);
    let all_topics = req.topics.is_empty();
    let requested: BTreeSet<String> = if all_topics {
        catalog.topics.keys().filter(|t| may(t)).cloned().collect()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    let cursor = req
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.0.to_string(), c.partition_index));
    if let Some((topic, partition)) = &cursor {
        if *partition < 0 || (!all_topics && !requested.contains(topic)) {
            return invalid_request(&requested);
        }
    }

    let mut resp = DescribeTopicPartitionsResponse::default();
    let mut remaining = req
        .response_partition_limit
        .clamp(0, DESCRIBE_TOPIC_PARTITIONS_LIMIT_MAX);
    // Topics before the cursor's were answered by earlier pages.
    let from = cursor.as_ref().map(|(t, _)| t.as_str()).unwrap_or("");
    for name in requested.iter().filter(|n| n.as_str() >= from) {
        if remaining == 0 {
            // The page is full at a topic boundary: the next page starts at this topic.
            resp.next_cursor = Some(next(name, 0));
            break;
        }
        if !may(name) {
            resp.topics
                .push(error_topic(name, ErrorCode::TopicAuthorizationFailed));
            continue;
        }
        let Some(meta) = catalog.topic(name) else {
            resp.topics.push(missing_topic(name));
            continue;
        };
        let start = match &cursor {
            Some((t, p)) if t == name => *p,
            _ => 0,
        };
        let (partitions, more) = page(catalog, meta, start, remaining);
        remaining -= partitions.len() as i32;
        resp.topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(topic_name(name)))
                .with_topic_id(meta.uuid())
                .with_is_internal(is_internal(name))
                .with_topic_authorized_operations(if authz.is_on() {
                    // The request has no flag for it: Kafka always reports them.
                    authz.authorized_operations(
                        crate::security::acl::ResourceType::Topic,
                        name,
                        crate::security::acl::TOPIC_OPERATIONS,
                    )
                } else {
                    OPERATIONS_OMITTED
                })
                .with_partitions(partitions),
        );
        if let Some(partition) = more {
            resp.next_cursor = Some(next(name, partition));
            break;
        }
    }
    resp
}

/// The partitions of `meta` from `start`, at most `limit` of them, and the index the next
/// page starts at when some are left.
fn page(
    catalog: &Catalog,
    meta: &TopicMeta,
    start: i32,
    limit: i32,
) -> (Vec<DescribeTopicPartitionsResponsePartition>, Option<i32>) {
    let count = meta.partitions.len();
    let start = usize::try_from(start).unwrap_or(count).min(count);
    let end = start
        .saturating_add(usize::try_from(limit).unwrap_or(0))
        .min(count);
    let partitions = meta
        .partitions
        .iter()
        .enumerate()
        .skip(start)
        .take(end - start)
        .map(|(i, pm)| {
            DescribeTopicPartitionsResponsePartition::default()
                .with_error_code(partition_error(pm))
                .with_partition_index(i as i32)
                .with_leader_id(BrokerId(pm.leader))
                .with_leader_epoch(pm.leader_epoch)
                .with_replica_nodes(broker_ids(&pm.replicas))
                .with_isr_nodes(broker_ids(&pm.isr))
                // No eligible leader replicas (KIP-966's ELR is not implemented): empty lists,
                // as Kafka answers with ELR disabled.
                .with_eligible_leader_replicas(Some(Vec::new()))
                .with_last_known_elr(Some(Vec::new()))
                .with_offline_replicas(broker_ids(&offline_replicas(catalog, pm)))
        })
        .collect();
    (partitions, (end < count).then_some(end as i32))
}

fn next(topic: &str, partition: i32) -> Cursor {
    Cursor::default()
        .with_topic_name(topic_name(topic))
        .with_partition_index(partition)
}

fn missing_topic(name: &str) -> DescribeTopicPartitionsResponseTopic {
    let code = match crate::server::admin::validate_topic_name(name) {
        Ok(()) => ErrorCode::UnknownTopicOrPartition,
        Err(e) => e.code,
    };
    error_topic(name, code)
}

fn invalid_request(requested: &BTreeSet<String>) -> DescribeTopicPartitionsResponse {
    DescribeTopicPartitionsResponse::default().with_topics(
        requested
            .iter()
            .map(|name| error_topic(name, ErrorCode::InvalidRequest))
            .collect(),
    )
}

fn error_topic(name: &str, code: ErrorCode) -> DescribeTopicPartitionsResponseTopic {
    DescribeTopicPartitionsResponseTopic::default()
        .with_error_code(code.code())
        .with_name(Some(topic_name(name)))
        .with_is_internal(is_internal(name))
        .with_topic_authorized_operations(OPERATIONS_OMITTED)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use kafka_protocol::messages::describe_topic_partitions_request::{self, TopicRequest};

    use super::*;
    use crate::cluster::catalog::{BrokerMeta, PartitionMeta};
    use crate::server::handlers::round_trip;

    fn catalog(topics: &[(&str, usize)]) -> Catalog {
        let mut c = Catalog::default();
        c.brokers.insert(
            0,
            BrokerMeta {
                node_id: 0,
                host: "127.0.0.1".into(),
                port: 9092,
                listeners: Vec::new(),
                rack: None,
                shards: 1,
                fenced: false,
            },
        );
        for (i, (name, partitions)) in topics.iter().enumerate() {
            let meta = TopicMeta {
                name: name.to_string(),
                id: i as u128 + 1,
                partitions: vec![PartitionMeta::single(0, 0); *partitions],
                configs: BTreeMap::new(),
            };
            c.topics.insert(name.to_string(), Arc::new(meta));
        }
        c.reindex();
        c
    }

    fn request(
        topics: &[&str],
        limit: i32,
        cursor: Option<(&str, i32)>,
    ) -> DescribeTopicPartitionsRequest {
        DescribeTopicPartitionsRequest::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| TopicRequest::default().with_name(topic_name(t)))
                    .collect(),
            )
            .with_response_partition_limit(limit)
            .with_cursor(cursor.map(|(t, p)| {
                describe_topic_partitions_request::Cursor::default()
                    .with_topic_name(topic_name(t))
                    .with_partition_index(p)
            }))
    }

    /// (topic, error, [partition indexes]) of each answered topic, and the next cursor.
    type Page = (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>);

    fn summary(resp: &DescribeTopicPartitionsResponse) -> Page {
        let topics = resp
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().unwrap().0.to_string(),
                    t.error_code,
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect();
        let cursor = resp
            .next_cursor
            .as_ref()
            .map(|c| (c.topic_name.0.to_string(), c.partition_index));
        (topics, cursor)
    }

    /// Named topics come back in name order with every partition, leader, replicas and ISR
    /// filled in, ELR lists empty, and no cursor when everything fit.
    #[test]
    fn named_topics_in_name_order_with_their_partitions() {
        let c = catalog(&[("b", 2), ("a", 3)]);
        let resp = describe(&c, &request(&["b", "a"], 2000, None));
        let (topics, cursor) = summary(&resp);
        assert_eq!(
            topics,
            vec![("a".into(), 0, vec![0, 1, 2]), ("b".into(), 0, vec![0, 1])]
        );
        assert_eq!(cursor, None);
        let p = &resp.topics[0].partitions[1];
        assert_eq!(
            (p.leader_id, p.replica_nodes.clone(), p.isr_nodes.clone()),
            (BrokerId(0), vec![BrokerId(0)], vec![BrokerId(0)])
        );
        assert_eq!(p.eligible_leader_replicas, Some(vec![]));
        assert_eq!(resp.topics[0].topic_id, c.topic("a").unwrap().uuid());
    }

    /// Unknown names are answered per topic (UNKNOWN_TOPIC_OR_PARTITION, or
    /// INVALID_TOPIC_EXCEPTION for a name Kafka would refuse), without harming the others.
    #[test]
    fn unknown_and_invalid_names_answered_per_topic() {
        let c = catalog(&[("a", 1)]);
        let (topics, _) = summary(&describe(
            &c,
            &request(&["nope", "a", "bad/name"], 2000, None),
        ));
        assert_eq!(
            topics,
            vec![
                ("a".into(), 0, vec![0]),
                (
                    "bad/name".into(),
                    ErrorCode::InvalidTopicException.code(),
                    vec![]
                ),
                (
                    "nope".into(),
                    ErrorCode::UnknownTopicOrPartition.code(),
                    vec![]
                ),
            ]
        );
    }

    /// Paging: a limit smaller than the partitions splits the answer, the cursor points at the
    /// next partition (inside a topic) or the next topic (at a boundary), and following the
    /// cursors yields every partition exactly once, for the named and for all topics.
    #[test]
    fn cursor_pages_through_every_partition_once() {
        let c = catalog(&[("a", 3), ("b", 2), ("c", 4)]);
        for names in [vec![], vec!["a", "b", "c"]] {
            for limit in 1..=10 {
                let mut seen = Vec::new();
                let mut cursor: Option<(String, i32)> = None;
                for _ in 0..20 {
                    let req = request(
                        &names,
                        limit,
                        cursor.as_ref().map(|(t, p)| (t.as_str(), *p)),
                    );
                    let (topics, next) = summary(&describe(&c, &req));
                    let count: usize = topics.iter().map(|t| t.2.len()).sum();
                    assert!(count <= limit as usize, "limit {limit}: {topics:?}");
                    for (t, e, ps) in topics {
                        assert_eq!(e, 0);
                        seen.extend(ps.into_iter().map(|p| (t.clone(), p)));
                    }
                    cursor = next;
                    if cursor.is_none() {
                        break;
                    }
                }
                let want: Vec<(String, i32)> = [("a", 3), ("b", 2), ("c", 4)]
                    .iter()
                    .flat_map(|(t, n)| (0..*n).map(move |p| (t.to_string(), p)))
                    .collect();
                assert_eq!(seen, want, "names {names:?} limit {limit}");
            }
        }
        // A page that ends inside a topic, then one that ends at a topic boundary.
        assert_eq!(
            summary(&describe(&c, &request(&[], 2, None))).1,
            Some(("a".into(), 2))
        );
        assert_eq!(
            summary(&describe(&c, &request(&[], 3, None))).1,
            Some(("b".into(), 0))
        );
    }

    /// The server's cap applies whatever the client asks.
    #[test]
    fn limit_capped_by_the_broker() {
        let c = catalog(&[("big", DESCRIBE_TOPIC_PARTITIONS_LIMIT_MAX as usize + 5)]);
        let (topics, cursor) = summary(&describe(&c, &request(&["big"], i32::MAX, None)));
        assert_eq!(
            topics[0].2.len(),
            DESCRIBE_TOPIC_PARTITIONS_LIMIT_MAX as usize
        );
        assert_eq!(
            cursor,
            Some(("big".into(), DESCRIBE_TOPIC_PARTITIONS_LIMIT_MAX))
        );
    }

    /// A cursor naming a topic outside the request, or a negative partition, is INVALID_REQUEST
    /// for every named topic, as Kafka answers it.
    #[test]
    fn cursor_outside_the_request_is_invalid() {
        let c = catalog(&[("a", 1), ("b", 1)]);
        for req in [
            request(&["a"], 10, Some(("b", 0))),
            request(&["a"], 10, Some(("a", -1))),
        ] {
            let (topics, cursor) = summary(&describe(&c, &req));
            assert_eq!(
                topics,
                vec![("a".into(), ErrorCode::InvalidRequest.code(), vec![])]
            );
            assert_eq!(cursor, None);
        }
    }

    /// A partition without a leader is LEADER_NOT_AVAILABLE and a replica on a fenced broker
    /// is listed offline, as in Metadata.
    #[test]
    fn leaderless_partition_and_offline_replica() {
        let mut c = catalog(&[("a", 1)]);
        let mut meta = (**c.topic("a").unwrap()).clone();
        meta.partitions[0].leader = -1;
        meta.partitions[0].replicas = vec![0, 7];
        c.topics.insert("a".into(), Arc::new(meta));
        let resp = describe(&c, &request(&["a"], 10, None));
        let p = &resp.topics[0].partitions[0];
        assert_eq!(p.error_code, ErrorCode::LeaderNotAvailable.code());
        assert_eq!(p.offline_replicas, vec![BrokerId(7)]);
    }

    /// The response encodes and decodes at every advertised version.
    #[test]
    fn response_round_trips() {
        let c = catalog(&[("a", 3), ("b", 2)]);
        let resp = describe(&c, &request(&[], 4, None));
        let (lo, hi) = crate::protocol::api_versions::range(
            kafka_protocol::messages::ApiKey::DescribeTopicPartitions,
        )
        .unwrap();
        for v in lo..=hi {
            assert_eq!(round_trip(&resp, v), resp);
        }
    }
}
