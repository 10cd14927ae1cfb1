//! Topics and their partitions: CreateTopics (name, configs and manual assignments checked,
//! replicas placed over the unfenced brokers, a fresh topic id), DeleteTopics and
//! CreatePartitions.
use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;

use super::{
    is_unfenced, Batch, Controller, CreatableTopic, CreateTopicResult, DeleteTopicResult, Status,
    TOPIC_ID_ATTEMPTS_MAX, UNCLEAN_LEADER_ELECTION,
};
use crate::cluster::catalog::{Catalog, PartitionMeta};
use crate::cluster::placement::{assign_replicas, place_on, shard_loads, Candidate};
use crate::cluster::records::MetadataRecord;
use crate::config::TOPIC_CONFIG_KEYS;
use crate::limits::{TOPIC_NAME_LEN_MAX, TOPIC_PARTITIONS_MAX};
use crate::protocol::error::ErrorCode;

/// A topic name Kafka would refuse (INVALID_TOPIC_EXCEPTION), with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("topic name `{name}` {reason}")]
pub struct InvalidTopicName {
    pub name: String,
    pub reason: &'static str,
}

/// Kafka's topic name rule: 1..=249 of `[a-zA-Z0-9._-]`, and not `.` or `..`. Lives with
/// the controller, which enforces it for every creation; the admin handlers check it early.
pub fn validate_topic_name(name: &str) -> Result<(), InvalidTopicName> {
    let bad = |reason| {
        Err(InvalidTopicName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > TOPIC_NAME_LEN_MAX {
        return bad("is longer than 249 characters");
    }
    if name == "." || name == ".." {
        return bad("is not allowed");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return bad("contains characters other than ASCII alphanumerics, '.', '_' and '-'");
    }
    Ok(())
}

pub(super) fn validate_configs(configs: &BTreeMap<String, String>) -> Result<(), Status> {
    for key in configs.keys() {
        if !TOPIC_CONFIG_KEYS.contains(&key.as_str()) && key != UNCLEAN_LEADER_ELECTION {
            return Err(Status::error(
                ErrorCode::InvalidConfig,
                format!("unknown topic config `{key}`"),
            ));
        }
    }
    Ok(())
}

/// Kafka's checks on a manual assignment: each list non-empty, without duplicates, of
/// registered brokers, all of the same length (`rf` when given).
pub(super) fn validate_assignments(
    c: &Catalog,
    assignments: &[Vec<i32>],
    rf: Option<usize>,
) -> Result<(), Status> {
    let bad = |m: String| Err(Status::error(ErrorCode::InvalidReplicaAssignment, m));
    let rf = rf.or_else(|| assignments.first().map(Vec::len));
    for (i, replicas) in assignments.iter().enumerate() {
        if replicas.is_empty() {
            return bad(format!("partition {i} has no replicas"));
        }
        let distinct: BTreeSet<&i32> = replicas.iter().collect();
        if distinct.len() != replicas.len() {
            return bad(format!("partition {i} names a broker twice: {replicas:?}"));
        }
        if let Some(r) = replicas.iter().find(|r| !c.brokers.contains_key(r)) {
            return bad(format!(
                "partition {i} names broker {r}, which is not registered"
            ));
        }
        if Some(replicas.len()) != rf {
            return bad(format!(
                "partition {i} has {} replicas; the others have {}",
                replicas.len(),
                rf.unwrap_or(0)
            ));
        }
    }
    Ok(())
}

impl Controller {
    pub(super) fn unfenced_candidates(c: &Catalog) -> Vec<Candidate> {
        c.brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| Candidate {
                node_id: b.node_id,
                rack: b.rack.clone(),
            })
            .collect()
    }

    /// Replica lists for `count` new partitions at `rf`, over the unfenced brokers.
    pub(super) fn auto_assign(
        &mut self,
        c: &Catalog,
        count: usize,
        rf: i32,
    ) -> Result<Vec<Vec<i32>>, Status> {
        let candidates = Self::unfenced_candidates(c);
        if rf < 1 || rf as usize > candidates.len() {
            return Err(Status::error(
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "Unable to replicate the partition {rf} time(s): the replication factor \
                     must be at least 1 and at most the {} unfenced broker(s)",
                    candidates.len()
                ),
            ));
        }
        let out = assign_replicas(&candidates, count, rf as usize, self.placement_sequence);
        self.placement_sequence = self.placement_sequence.wrapping_add(count);
        Ok(out)
    }

    /// Partition states for replica lists: a shard per replica (least loaded on its
    /// broker), ISR = the unfenced replicas, leader = the first of them, epochs 0.
    pub(super) fn new_partitions(
        c: &Catalog,
        loads: &mut BTreeMap<i32, Vec<usize>>,
        assignments: Vec<Vec<i32>>,
    ) -> Result<Vec<PartitionMeta>, Status> {
        let mut out = Vec::with_capacity(assignments.len());
        for (i, replicas) in assignments.into_iter().enumerate() {
            let isr: Vec<i32> = replicas
                .iter()
                .copied()
                .filter(|r| is_unfenced(c, *r))
                .collect();
            let Some(leader) = isr.first().copied() else {
                return Err(Status::error(
                    ErrorCode::InvalidReplicaAssignment,
                    format!("every broker assigned to partition {i} is fenced"),
                ));
            };
            out.push(PartitionMeta {
                shards: replicas.iter().map(|r| place_on(loads, *r)).collect(),
                replicas,
                isr,
                leader,
                leader_epoch: 0,
                partition_epoch: 0,
                adding: Vec::new(),
                removing: Vec::new(),
                offline: BTreeMap::new(),
            });
        }
        Ok(out)
    }

    pub(super) fn create_topic(
        &mut self,
        batch: &mut Batch,
        t: CreatableTopic,
        validate_only: bool,
    ) -> CreateTopicResult {
        let mut result = CreateTopicResult {
            name: t.name.clone(),
            topic_id: 0,
            num_partitions: t.num_partitions,
            replication_factor: t.replication_factor,
            status: Status::ok(),
        };
        match self.try_create_topic(batch, t, validate_only) {
            Ok((id, partitions, rf)) => {
                result.topic_id = id;
                result.num_partitions = partitions;
                result.replication_factor = rf;
            }
            Err(status) => result.status = status,
        }
        result
    }

    /// Returns (topic id, partitions, replication factor).
    pub(super) fn try_create_topic(
        &mut self,
        batch: &mut Batch,
        t: CreatableTopic,
        validate_only: bool,
    ) -> Result<(u128, i32, i16), Status> {
        validate_topic_name(&t.name)
            .map_err(|e| Status::error(ErrorCode::InvalidTopicException, e.to_string()))?;
        if batch.work.topic(&t.name).is_some() {
            return Err(Status::error(
                ErrorCode::TopicAlreadyExists,
                format!("topic `{}` already exists", t.name),
            ));
        }
        validate_configs(&t.configs)?;
        let assignments = match t.assignments.filter(|a| !a.is_empty()) {
            Some(assignments) => {
                if t.num_partitions != -1 || t.replication_factor != -1 {
                    return Err(Status::error(
                        ErrorCode::InvalidRequest,
                        "with a manual assignment, partitions and replication factor must be -1",
                    ));
                }
                if assignments.len() > TOPIC_PARTITIONS_MAX as usize {
                    return Err(Status::error(
                        ErrorCode::InvalidPartitions,
                        format!("at most {TOPIC_PARTITIONS_MAX} partitions"),
                    ));
                }
                validate_assignments(&batch.work, &assignments, None)?;
                assignments
            }
            None => {
                let partitions = match t.num_partitions {
                    -1 => self.config.default_num_partitions,
                    n => n,
                };
                if !(1..=TOPIC_PARTITIONS_MAX).contains(&partitions) {
                    return Err(Status::error(
                        ErrorCode::InvalidPartitions,
                        format!(
                            "number of partitions must be between 1 and \
                             {TOPIC_PARTITIONS_MAX}, got {partitions}"
                        ),
                    ));
                }
                let rf = match t.replication_factor {
                    -1 => self.config.default_replication_factor,
                    n => n,
                };
                self.auto_assign(&batch.work, partitions as usize, i32::from(rf))?
            }
        };
        let mut loads = shard_loads(&batch.work);
        let partitions = Self::new_partitions(&batch.work, &mut loads, assignments)?;
        let count = partitions.len() as i32;
        let rf = partitions.first().map_or(0, |p| p.replicas.len()) as i16;
        if validate_only {
            return Ok((0, count, rf));
        }
        // A collision among 2^128 random ids is all but impossible; the bound only keeps a
        // broken RNG from spinning the controller.
        let id = (0..TOPIC_ID_ATTEMPTS_MAX)
            .map(|_| self.rng.gen::<u128>())
            .find(|id| *id != 0 && batch.work.topic_by_id(*id).is_none())
            .ok_or_else(|| Status::error(ErrorCode::UnknownServerError, "no free topic id"))?;
        batch.push(MetadataRecord::Topic {
            name: t.name,
            id,
            partitions,
            configs: t.configs,
        });
        Ok((id, count, rf))
    }

    pub(super) fn delete_topic(batch: &mut Batch, name: String) -> DeleteTopicResult {
        let Some(topic_id) = batch.work.topic(&name).map(|t| t.id) else {
            return DeleteTopicResult {
                status: Status::error(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("topic `{name}` does not exist"),
                ),
                name,
                topic_id: 0,
            };
        };
        // The coordinator's own log: deleting it would lose every committed offset.
        if name == crate::group::OFFSETS_TOPIC {
            return DeleteTopicResult {
                status: Status::error(
                    ErrorCode::TopicAuthorizationFailed,
                    format!("internal topic `{name}` cannot be deleted"),
                ),
                name,
                topic_id,
            };
        }
        batch.push(MetadataRecord::RemoveTopic { name: name.clone() });
        DeleteTopicResult {
            name,
            topic_id,
            status: Status::ok(),
        }
    }

    pub(super) fn create_partitions(
        &mut self,
        batch: &mut Batch,
        topic: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), Status> {
        let Some(existing) = batch.work.topic(topic).cloned() else {
            return Err(Status::error(
                ErrorCode::UnknownTopicOrPartition,
                format!("topic `{topic}` does not exist"),
            ));
        };
        let have = existing.partitions.len();
        if !(0..=TOPIC_PARTITIONS_MAX).contains(&count) || (count as usize) <= have {
            return Err(Status::error(
                ErrorCode::InvalidPartitions,
                format!(
                    "topic `{topic}` has {have} partitions; the new count {count} must be \
                     larger and at most {TOPIC_PARTITIONS_MAX}"
                ),
            ));
        }
        let add = count as usize - have;
        // The topic's replication factor: partition 0's, counting a reassignment's target.
        let rf = existing
            .partitions
            .first()
            .map_or(i32::from(self.config.default_replication_factor), |p| {
                (p.replicas.len() - p.removing.len()) as i32
            });
        let assignments = match assignments {
            Some(a) => {
                if a.len() != add {
                    return Err(Status::error(
                        ErrorCode::InvalidReplicaAssignment,
                        format!("{} assignments given for {add} new partitions", a.len()),
                    ));
                }
                validate_assignments(&batch.work, &a, Some(rf as usize))?;
                a
            }
            None => self.auto_assign(&batch.work, add, rf)?,
        };
        let mut loads = shard_loads(&batch.work);
        let partitions = Self::new_partitions(&batch.work, &mut loads, assignments)?;
        if !validate_only {
            batch.push(MetadataRecord::AddPartitions {
                name: topic.to_string(),
                partitions,
            });
        }
        Ok(())
    }
}
