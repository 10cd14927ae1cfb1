//! Cluster administration: AlterPartitionReassignments, ListPartitionReassignments and
//! ElectLeaders, sent to the controller (or the bootstrap broker, which forwards them).
//!
//! A request-wide error code becomes an error; per-partition codes are returned as they
//! came, because one partition failing does not undo the others.

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ElectLeadersRequest,
    ListPartitionReassignmentsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::error::{check_code, ClientError, Result};
use super::{str_of, Client};

/// How long the broker may take to finish an admin operation.
const ADMIN_TIMEOUT_MS: i32 = 30_000;
/// ElectLeaders `election_type` values.
const ELECTION_PREFERRED: i8 = 0;
const ELECTION_UNCLEAN: i8 = 1;

/// The outcome of an operation on one partition: error code 0 means it was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOutcome {
    pub topic: String,
    pub partition: i32,
    pub error_code: i16,
    pub message: Option<String>,
}

/// A partition whose replicas are being changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OngoingReassignment {
    pub topic: String,
    pub partition: i32,
    /// Every replica while the move lasts: the target ones and those being removed.
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// One partition to reassign; `replicas: None` cancels its ongoing reassignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignmentTarget {
    pub topic: String,
    pub partition: i32,
    pub replicas: Option<Vec<i32>>,
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

/// `(topic, partitions)` in first-seen topic order.
fn by_topic<T: Clone>(items: impl IntoIterator<Item = (String, T)>) -> Vec<(String, Vec<T>)> {
    let mut out: Vec<(String, Vec<T>)> = Vec::new();
    for (topic, item) in items {
        match out.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, v)) => v.push(item),
            None => out.push((topic, vec![item])),
        }
    }
    out
}

impl Client {
    /// Starts (or cancels) reassignments; one outcome per partition.
    pub fn alter_partition_reassignments(
        &mut self,
        targets: &[ReassignmentTarget],
    ) -> Result<Vec<PartitionOutcome>> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<AlterPartitionReassignmentsRequest>(None)?;
        let topics = by_topic(
            targets
                .iter()
                .map(|t| (t.topic.clone(), (t.partition, t.replicas.clone()))),
        )
        .into_iter()
        .map(|(topic, partitions)| {
            ReassignableTopic::default()
                .with_name(topic_name(&topic))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|(p, replicas)| {
                            ReassignablePartition::default()
                                .with_partition_index(p)
                                .with_replicas(
                                    replicas.map(|r| r.into_iter().map(BrokerId).collect()),
                                )
                        })
                        .collect(),
                )
        })
        .collect();
        let request = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(ADMIN_TIMEOUT_MS)
            .with_topics(topics);
        let response = conn.send(&request, version)?;
        check_code(
            response.error_code,
            response.error_message.as_ref().map(str_of),
            || "alter partition reassignments".to_owned(),
        )?;
        Ok(response
            .responses
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| PartitionOutcome {
                    topic: str_of(&t.name.0),
                    partition: p.partition_index,
                    error_code: p.error_code,
                    message: p.error_message.as_ref().map(str_of),
                })
            })
            .collect())
    }

    /// Ongoing reassignments of `partitions`, or of every partition when `None`.
    pub fn list_partition_reassignments(
        &mut self,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<OngoingReassignment>> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<ListPartitionReassignmentsRequest>(None)?;
        let topics = partitions.map(|list| {
            by_topic(list.iter().cloned())
                .into_iter()
                .map(|(topic, indexes)| {
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic_name(&topic))
                        .with_partition_indexes(indexes)
                })
                .collect()
        });
        let request = ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(ADMIN_TIMEOUT_MS)
            .with_topics(topics);
        let response = conn.send(&request, version)?;
        check_code(
            response.error_code,
            response.error_message.as_ref().map(str_of),
            || "list partition reassignments".to_owned(),
        )?;
        let ids = |b: &[BrokerId]| b.iter().map(|b| b.0).collect::<Vec<_>>();
        Ok(response
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(|p| OngoingReassignment {
                    topic: str_of(&t.name.0),
                    partition: p.partition_index,
                    replicas: ids(&p.replicas),
                    adding: ids(&p.adding_replicas),
                    removing: ids(&p.removing_replicas),
                })
            })
            .collect())
    }

    /// Elects leaders of `partitions` (every partition when `None`): the preferred replica,
    /// or with `unclean` any live replica of a leaderless partition. Asked for every
    /// partition, the broker reports only those where an election was tried.
    pub fn elect_leaders(
        &mut self,
        partitions: Option<&[(String, i32)]>,
        unclean: bool,
    ) -> Result<Vec<PartitionOutcome>> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<ElectLeadersRequest>(None)?;
        // v0 can only ask for preferred elections.
        if unclean && version == 0 {
            return Err(ClientError::Broker {
                context: format!("{} only speaks ElectLeaders v0", conn.addr()),
                code: kafka_protocol::error::ResponseError::UnsupportedVersion.code(),
                message: Some("unclean elections need ElectLeaders v1".to_owned()),
            });
        }
        let topic_partitions = partitions.map(|list| {
            by_topic(list.iter().cloned())
                .into_iter()
                .map(|(topic, partitions)| {
                    TopicPartitions::default()
                        .with_topic(topic_name(&topic))
                        .with_partitions(partitions)
                })
                .collect()
        });
        let election_type = if unclean {
            ELECTION_UNCLEAN
        } else {
            ELECTION_PREFERRED
        };
        let mut request = ElectLeadersRequest::default()
            .with_timeout_ms(ADMIN_TIMEOUT_MS)
            .with_topic_partitions(topic_partitions);
        if version >= 1 {
            request = request.with_election_type(election_type);
        }
        let response = conn.send(&request, version)?;
        check_code(response.error_code, None, || "elect leaders".to_owned())?;
        Ok(response
            .replica_election_results
            .iter()
            .flat_map(|t| {
                t.partition_result.iter().map(|p| PartitionOutcome {
                    topic: str_of(&t.topic.0),
                    partition: p.partition_id,
                    error_code: p.error_code,
                    message: p.error_message.as_ref().map(str_of),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Partitions are grouped under their topic in first-seen order, as one request entry
    /// per topic.
    #[test]
    fn partitions_group_by_topic_in_order() {
        let grouped = by_topic(vec![
            ("b".to_owned(), 1),
            ("a".to_owned(), 0),
            ("b".to_owned(), 0),
        ]);
        assert_eq!(
            grouped,
            vec![("b".to_owned(), vec![1, 0]), ("a".to_owned(), vec![0])]
        );
    }
}
