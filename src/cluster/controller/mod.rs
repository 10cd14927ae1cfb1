//! The active controller's decisions, as a pure (sans-IO) state machine, after Kafka's
//! QuorumController, ReplicationControlManager and PartitionChangeBuilder.
//!
//! `Controller` reads the applied catalog and returns the metadata records that carry a
//! decision out plus the response to send once they are committed; it never writes the
//! catalog itself, so the only way state changes is a record applied on every node. Time
//! and randomness come in as arguments (`now_ms`, a seeded RNG for topic ids), which is what
//! lets the tests drive it deterministically.
//!
//! Rules kept (Kafka's):
//! - Only a registered, unfenced broker in the ISR may become leader; the first such replica
//!   in assignment order wins. Unclean election (a replica outside the ISR) only when
//!   `unclean.leader.election.enable=true` for the topic or the broker, or on an explicit
//!   unclean ElectLeaders.
//! - A partition's last ISR member is never removed from the ISR: when it is fenced the
//!   partition goes leaderless (-1) with that ISR kept, so no acknowledged write is lost, and
//!   it leads again once it is back.
//! - Every change bumps `partition_epoch`; a leader change, or replicas leaving the
//!   assignment, also bumps `leader_epoch`.
//! - A broker registers fenced and is unfenced by its first heartbeat (Kafka's choice: a
//!   broker only takes leadership once it is heartbeating). A broker that heartbeats for
//!   nothing longer than the session timeout is fenced by `tick`.
//!
//! Several records from one call are computed against a working copy of the catalog onto
//! which each is applied as it is made, so later ones see earlier ones (two brokers fenced
//! in one tick, two topics placed in one request).
//!
//! Files, by concern: `messages` (requests and responses), `brokers` (registration,
//! heartbeats, fencing, offline replicas, producer ids), `topics` (create, delete, add
//! partitions), `isr` (AlterPartition), `reassignment` (KIP-455), `election` (leader choice,
//! ElectLeaders, preferred-leader rebalance). This file holds the state, the working-copy
//! `Batch` every change goes through, and the two entry points, `tick` and `handle_request`.
mod brokers;
mod election;
mod isr;
mod messages;
mod reassignment;
#[cfg(test)]
mod tests;
mod topics;

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use messages::{
    ControllerRequest, ControllerResponse, CreatableTopic, CreateTopicResult, DeleteTopicResult,
    OngoingReassignment, PartitionResult, Reassignment, Status,
};
pub use topics::validate_topic_name;

use crate::cluster::catalog::{Catalog, PartitionMeta};
use crate::cluster::placement::shard_loads;
use crate::cluster::records::MetadataRecord;
use crate::protocol::error::ErrorCode;
use topics::validate_configs;

/// Topic config keys the controller itself reads (on top of the log settings brokers read).
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean.leader.election.enable";

/// Leader elections one batch may make beyond what its request strictly needs (leaderless
/// partitions after an unfencing, the optional preferred-leader rebalance), so one batch
/// stays small; the rest follow on the next ticks. Fencing a broker is never cut short: it
/// is one atomic batch.
pub const ELECTIONS_PER_BATCH_MAX: usize = 1000;

/// Random topic ids drawn before giving up on finding an unused, nonzero one.
const TOPIC_ID_ATTEMPTS_MAX: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// A broker silent this long is fenced (Kafka's broker.session.timeout.ms).
    pub broker_session_timeout_ms: u64,
    /// Used for CreateTopics with replication factor -1.
    pub default_replication_factor: i16,
    /// Used for CreateTopics with -1 partitions.
    pub default_num_partitions: i32,
    /// Move leadership back to preferred replicas (auto.leader.rebalance.enable).
    pub auto_leader_rebalance: bool,
    /// How often the rebalance looks (leader.imbalance.check.interval.seconds, in ms).
    pub leader_imbalance_check_interval_ms: u64,
    /// A broker whose share of preferred partitions led by others exceeds this percentage
    /// gets them back (leader.imbalance.per.broker.percentage).
    pub leader_imbalance_per_broker_percentage: u32,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            broker_session_timeout_ms: 6000,
            default_replication_factor: 1,
            default_num_partitions: 1,
            auto_leader_rebalance: false,
            leader_imbalance_check_interval_ms: 300_000,
            leader_imbalance_per_broker_percentage: 10,
        }
    }
}

/// The controller's own state: nothing here is replicated. A new active controller starts
/// with every broker's heartbeat clock reset, so it fences no one for the time it was not
/// listening.
pub struct Controller {
    config: ControllerConfig,
    active: bool,
    /// Last heartbeat (or registration, or the start of this term) per broker.
    last_seen_ms: BTreeMap<i32, u64>,
    /// Brokers this controller proposed to fence whose fence is not applied yet, so a tick
    /// that runs before the apply does not propose it again.
    fencing: BTreeSet<i32>,
    /// Brokers in controlled shutdown: their heartbeats (one may still be in flight) do not
    /// unfence them; a registration (the restart) does.
    shutting_down: BTreeSet<i32>,
    /// Placement rotation: partitions placed so far by this controller.
    placement_sequence: usize,
    /// When this controller last looked for leader imbalance (its first tick starts the
    /// clock, so a new controller waits a whole interval, as Kafka's does).
    last_rebalance_ms: Option<u64>,
    rng: StdRng,
}

/// Records made by one call, applied as they are made to a working copy of the catalog.
struct Batch {
    work: Catalog,
    records: Vec<MetadataRecord>,
}

impl Batch {
    fn new(state: &Catalog) -> Self {
        Self {
            work: state.clone(),
            records: Vec::new(),
        }
    }
    fn push(&mut self, rec: MetadataRecord) {
        self.work.apply(&rec);
        self.records.push(rec);
    }
    /// Records `new` as partition `index`'s state if it differs from `old`, with epochs
    /// bumped; returns the state the partition ends up in.
    fn change(
        &mut self,
        topic: &str,
        index: usize,
        old: &PartitionMeta,
        new: PartitionMeta,
    ) -> PartitionMeta {
        match next_epochs(old, new) {
            None => old.clone(),
            Some(state) => {
                self.push(MetadataRecord::PartitionChange {
                    topic: topic.to_string(),
                    // Partition counts are bounded by TOPIC_PARTITIONS_MAX, far below i32.
                    partition: index as i32,
                    state: state.clone(),
                });
                state
            }
        }
    }
}

/// `new` with its epochs set from `old`'s (Kafka's PartitionChangeBuilder), or `None` when
/// nothing changed.
fn next_epochs(old: &PartitionMeta, mut new: PartitionMeta) -> Option<PartitionMeta> {
    new.leader_epoch = old.leader_epoch;
    new.partition_epoch = old.partition_epoch;
    if new == *old {
        return None;
    }
    // A replica that leaves the assignment must stop fetching: a new leader epoch fences it.
    let replica_removed = old.replicas.iter().any(|r| !new.replicas.contains(r));
    if new.leader != old.leader || replica_removed {
        new.leader_epoch = old.leader_epoch.saturating_add(1);
    }
    new.partition_epoch = old.partition_epoch.saturating_add(1);
    Some(new)
}

fn is_unfenced(c: &Catalog, node: i32) -> bool {
    c.brokers.get(&node).is_some_and(|b| !b.fenced)
}

fn unknown_partition(topic: &str, partition: i32) -> Status {
    Status::error(
        ErrorCode::UnknownTopicOrPartition,
        format!("partition {topic}-{partition} does not exist"),
    )
}

/// Looks up a partition by name and index.
fn partition_of(
    c: &Catalog,
    topic: &str,
    partition: i32,
) -> Result<(usize, PartitionMeta), Status> {
    usize::try_from(partition)
        .ok()
        .and_then(|i| {
            c.topic(topic)
                .and_then(|t| t.partitions.get(i))
                .map(|p| (i, p.clone()))
        })
        .ok_or_else(|| unknown_partition(topic, partition))
}

impl Controller {
    pub fn new(config: ControllerConfig) -> Self {
        Self::with_rng(config, StdRng::from_entropy())
    }

    /// A controller whose topic ids and cluster id come from `seed` (tests, simulation).
    pub fn with_seed(config: ControllerConfig, seed: u64) -> Self {
        Self::with_rng(config, StdRng::seed_from_u64(seed))
    }

    fn with_rng(config: ControllerConfig, rng: StdRng) -> Self {
        Self {
            config,
            active: false,
            last_seen_ms: BTreeMap::new(),
            fencing: BTreeSet::new(),
            shutting_down: BTreeSet::new(),
            placement_sequence: 0,
            last_rebalance_ms: None,
            rng,
        }
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    pub fn is_active(&self) -> bool {
        self.active
    }

    /// This node became or stopped being the active controller. On becoming active every
    /// broker's session restarts (at its first tick or heartbeat from now on), so brokers
    /// are not fenced for heartbeats that went to the previous controller.
    pub fn on_leadership(&mut self, active: bool, _now_ms: u64) {
        self.active = active;
        self.last_seen_ms.clear();
        self.fencing.clear();
        self.last_rebalance_ms = None;
    }

    /// Periodic work on the active controller: a cluster id if there is none, fencing
    /// brokers whose session expired, electing leaders for leaderless partitions that now
    /// have an eligible replica, and (if enabled) preferred-leader rebalancing.
    pub fn tick(&mut self, state: &Catalog, now_ms: u64) -> Vec<MetadataRecord> {
        if !self.active {
            return Vec::new();
        }
        let mut batch = Batch::new(state);
        if state.cluster_id.is_empty() {
            let id = uuid::Builder::from_random_bytes(self.rng.gen())
                .into_uuid()
                .simple()
                .to_string();
            batch.push(MetadataRecord::ClusterId { id });
        }
        self.fencing
            .retain(|id| state.brokers.get(id).is_some_and(|b| !b.fenced));
        self.last_seen_ms
            .retain(|id, _| state.brokers.contains_key(id));
        self.shutting_down
            .retain(|id| state.brokers.contains_key(id));
        let unfenced: Vec<i32> = state
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| b.node_id)
            .collect();
        for id in unfenced {
            let seen = *self.last_seen_ms.entry(id).or_insert(now_ms);
            let expired = now_ms.saturating_sub(seen) > self.config.broker_session_timeout_ms;
            if expired && !self.fencing.contains(&id) {
                batch.push(MetadataRecord::FenceBroker { node_id: id });
                Self::leave_partitions(&mut batch, id);
                self.fencing.insert(id);
            }
        }
        let mut budget = ELECTIONS_PER_BATCH_MAX;
        Self::elect_leaderless(&mut batch, &mut budget);
        if self.config.auto_leader_rebalance && self.rebalance_due(now_ms) {
            for (topic, index) in Self::imbalanced_partitions(
                &batch.work,
                self.config.leader_imbalance_per_broker_percentage,
            ) {
                if budget == 0 {
                    break;
                }
                if Self::elect_preferred(&mut batch, &topic, index).is_ok() {
                    budget -= 1;
                }
            }
        }
        batch.records
    }

    /// Turns one request into the records that carry it out and the response to send once
    /// they are committed. A refused operation adds no records (in a batch of topics, the
    /// others still go ahead, as in Kafka).
    pub fn handle_request(
        &mut self,
        state: &Catalog,
        req: ControllerRequest,
        now_ms: u64,
    ) -> (Vec<MetadataRecord>, ControllerResponse) {
        let mut batch = Batch::new(state);
        let response = match req {
            ControllerRequest::RegisterBroker {
                node_id,
                host,
                port,
                listeners,
                rack,
                shards,
            } => {
                let status = self.register_broker(
                    &mut batch, node_id, host, port, listeners, rack, shards, now_ms,
                );
                ControllerResponse::RegisterBroker { status }
            }
            ControllerRequest::BrokerHeartbeat { node_id } => {
                self.heartbeat(&mut batch, node_id, now_ms)
            }
            ControllerRequest::ControlledShutdown { node_id } => {
                self.controlled_shutdown(&mut batch, node_id)
            }
            ControllerRequest::UnregisterBroker { node_id } => {
                let status = if batch.work.brokers.contains_key(&node_id) {
                    batch.push(MetadataRecord::UnregisterBroker { node_id });
                    Self::leave_partitions(&mut batch, node_id);
                    self.last_seen_ms.remove(&node_id);
                    Status::ok()
                } else {
                    Status::error(
                        ErrorCode::BrokerIdNotRegistered,
                        format!("broker {node_id} is not registered"),
                    )
                };
                ControllerResponse::UnregisterBroker { status }
            }
            ControllerRequest::CreateTopics {
                topics,
                validate_only,
            } => {
                let topics = topics
                    .into_iter()
                    .map(|t| self.create_topic(&mut batch, t, validate_only))
                    .collect();
                ControllerResponse::CreateTopics { topics }
            }
            ControllerRequest::DeleteTopics { names } => {
                let topics = names
                    .into_iter()
                    .map(|name| Self::delete_topic(&mut batch, name))
                    .collect();
                ControllerResponse::DeleteTopics { topics }
            }
            ControllerRequest::CreatePartitions {
                topic,
                count,
                assignments,
                validate_only,
            } => {
                let status = self
                    .create_partitions(&mut batch, &topic, count, assignments, validate_only)
                    .err()
                    .unwrap_or_default();
                ControllerResponse::CreatePartitions { status }
            }
            ControllerRequest::AlterTopicConfigs { topic, configs } => {
                let status = if batch.work.topic(&topic).is_none() {
                    Status::error(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("topic `{topic}` does not exist"),
                    )
                } else if let Err(status) = validate_configs(&configs) {
                    status
                } else {
                    batch.push(MetadataRecord::TopicConfig {
                        name: topic,
                        configs,
                    });
                    Status::ok()
                };
                ControllerResponse::AlterTopicConfigs { status }
            }
            ControllerRequest::AlterBrokerConfigs { configs } => {
                batch.push(MetadataRecord::BrokerConfigs { configs });
                ControllerResponse::AlterBrokerConfigs {
                    status: Status::ok(),
                }
            }
            ControllerRequest::AlterUserScramCredentials {
                deletions,
                upsertions,
            } => ControllerResponse::AlterUserScramCredentials {
                results: Self::alter_scram(&mut batch, deletions, upsertions),
            },
            ControllerRequest::AlterClientQuotas { entries } => {
                ControllerResponse::AlterClientQuotas {
                    results: Self::alter_client_quotas(&mut batch, entries),
                }
            }
            ControllerRequest::CreateAcls { bindings } => {
                // Kafka's AclControlManager: a binding that exists already succeeds and
                // records nothing; one repeated in the request is recorded once.
                // Applying each record to the batch's image makes a repeat a no-op.
                let results = bindings
                    .into_iter()
                    .map(|binding| {
                        if batch.work.acls.contains(&binding) {
                            Status::ok()
                        } else if batch.work.acls.len() >= crate::limits::ACL_BINDINGS_MAX {
                            Status::error(
                                ErrorCode::PolicyViolation,
                                format!(
                                    "the cluster holds {} ACL bindings already, its limit",
                                    crate::limits::ACL_BINDINGS_MAX
                                ),
                            )
                        } else {
                            batch.push(MetadataRecord::AccessControlEntry { binding });
                            Status::ok()
                        }
                    })
                    .collect();
                ControllerResponse::CreateAcls { results }
            }
            ControllerRequest::DeleteAcls { filters } => {
                // A binding matched by two filters is deleted once, and reported by the
                // first that matched it (as Kafka's controller).
                let mut gone: Vec<crate::security::acl::AclBinding> = Vec::new();
                let results = filters
                    .iter()
                    .map(|f| {
                        let hits: Vec<_> = batch
                            .work
                            .acls
                            .matching(f)
                            .filter(|b| !gone.contains(b))
                            .cloned()
                            .collect();
                        gone.extend(hits.iter().cloned());
                        hits
                    })
                    .collect::<Vec<_>>();
                for binding in gone {
                    batch.push(MetadataRecord::RemoveAccessControlEntry { binding });
                }
                ControllerResponse::DeleteAcls { results }
            }
            ControllerRequest::AlterPartition {
                broker_id,
                broker_epoch: _,
                topic,
                partition,
                leader_epoch,
                partition_epoch,
                new_isr,
            } => {
                let (status, state) = Self::alter_partition(
                    &mut batch,
                    broker_id,
                    &topic,
                    partition,
                    leader_epoch,
                    partition_epoch,
                    new_isr,
                );
                ControllerResponse::AlterPartition { status, state }
            }
            ControllerRequest::AlterPartitionReassignments { reassignments } => {
                let mut loads = shard_loads(&batch.work);
                let results = reassignments
                    .into_iter()
                    .map(|r| {
                        let status = Self::reassign(&mut batch, &mut loads, &r)
                            .err()
                            .unwrap_or_default();
                        PartitionResult {
                            topic: r.topic,
                            partition: r.partition,
                            status,
                        }
                    })
                    .collect();
                ControllerResponse::AlterPartitionReassignments { results }
            }
            ControllerRequest::ListPartitionReassignments { partitions } => {
                ControllerResponse::ListPartitionReassignments {
                    reassignments: Self::list_reassignments(state, partitions),
                }
            }
            ControllerRequest::ElectLeaders {
                partitions,
                preferred,
            } => ControllerResponse::ElectLeaders {
                results: Self::elect_leaders(&mut batch, partitions, preferred),
            },
            ControllerRequest::AllocateProducerIds { broker_id } => {
                Self::allocate_producer_ids(&mut batch, broker_id)
            }
            ControllerRequest::ReplicaOffline {
                node_id,
                topic,
                partition,
                reason,
            } => ControllerResponse::ReplicaOffline {
                status: Self::replica_offline(&mut batch, node_id, &topic, partition, reason),
            },
        };
        (batch.records, response)
    }

    /// Records each user's SCRAM changes, deletions first (as Kafka's ScramControlManager),
    /// unless one of its deletions names no existing credential: then none of that user's
    /// changes is made and it gets RESOURCE_NOT_FOUND.
    fn alter_scram(
        batch: &mut Batch,
        deletions: Vec<(String, crate::security::sasl::ScramMechanism)>,
        upsertions: Vec<(
            String,
            crate::security::sasl::ScramMechanism,
            crate::security::sasl::ScramCredential,
        )>,
    ) -> Vec<(String, Status)> {
        let mut users: Vec<String> = Vec::new();
        for name in deletions
            .iter()
            .map(|(u, _)| u)
            .chain(upsertions.iter().map(|(u, _, _)| u))
        {
            if !users.contains(name) {
                users.push(name.clone());
            }
        }
        users
            .into_iter()
            .map(|user| {
                let missing = deletions
                    .iter()
                    .find(|(u, m)| *u == user && batch.work.scram_credential(u, *m).is_none());
                if let Some((_, m)) = missing {
                    let status = Status::error(
                        ErrorCode::ResourceNotFound,
                        format!(
                            "attempt to delete a user credential that does not exist: {user} {m}"
                        ),
                    );
                    return (user, status);
                }
                for (u, m) in deletions.iter().filter(|(u, _)| *u == user) {
                    batch.push(MetadataRecord::RemoveUserScramCredential {
                        name: u.clone(),
                        mechanism: *m,
                    });
                }
                for (u, m, c) in upsertions.iter().filter(|(u, _, _)| *u == user) {
                    batch.push(MetadataRecord::UserScramCredential {
                        name: u.clone(),
                        mechanism: *m,
                        credential: c.clone(),
                    });
                }
                (user, Status::ok())
            })
            .collect()
    }

    /// Records each entity's quota changes. An entity named a second time in one request is
    /// refused (Kafka: "Ignoring duplicate entity"); its first entry stands.
    fn alter_client_quotas(
        batch: &mut Batch,
        entries: Vec<(
            crate::security::quota::QuotaEntity,
            crate::security::quota::CheckedOps,
        )>,
    ) -> Vec<Status> {
        let mut done: Vec<crate::security::quota::QuotaEntity> = Vec::new();
        let mut results = Vec::with_capacity(entries.len());
        for (entity, ops) in entries {
            if done.contains(&entity) {
                results.push(Status::error(
                    ErrorCode::InvalidRequest,
                    format!("Ignoring duplicate entity {entity}"),
                ));
                continue;
            }
            for (key, value) in ops {
                let value = value.map(|v| v.0);
                let current = batch
                    .work
                    .client_quotas
                    .get(&entity)
                    .and_then(|q| q.get(&key))
                    .copied();
                let changes = match value {
                    None => current.is_some(),
                    Some(v) => current != Some(v),
                };
                if changes {
                    batch.push(MetadataRecord::ClientQuota {
                        entity: entity.clone(),
                        key,
                        value,
                    });
                }
            }
            done.push(entity);
            results.push(Status::ok());
        }
        results
    }

    fn all_partitions(c: &Catalog) -> Vec<(String, usize)> {
        c.topics
            .values()
            .flat_map(|t| (0..t.partitions.len()).map(|i| (t.name.clone(), i)))
            .collect()
    }
}
