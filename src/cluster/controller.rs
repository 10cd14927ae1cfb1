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
use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::cluster::catalog::{Catalog, PartitionMeta};
use crate::cluster::placement::{assign_replicas, place_on, shard_loads, Candidate};
use crate::cluster::records::MetadataRecord;
use crate::config::TOPIC_CONFIG_KEYS;
use crate::limits::{PRODUCER_ID_BLOCK, TOPIC_PARTITIONS_MAX};
use crate::protocol::error::ErrorCode;

/// Topic config keys the controller itself reads (on top of the log settings brokers read).
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean.leader.election.enable";

/// Leader elections one batch may make beyond what its request strictly needs (leaderless
/// partitions after an unfencing, the optional preferred-leader rebalance), so one batch
/// stays small; the rest follow on the next ticks. Fencing a broker is never cut short: it
/// is one atomic batch.
pub const ELECTIONS_PER_BATCH_MAX: usize = 1000;

/// The outcome of one operation: a Kafka error code (0 = none) and a message for the client.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub error_code: i16,
    pub message: Option<String>,
}

impl Status {
    pub fn ok() -> Self {
        Self::default()
    }
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            error_code: code.code(),
            message: Some(message.into()),
        }
    }
    pub fn is_ok(&self) -> bool {
        self.error_code == 0
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatableTopic {
    pub name: String,
    /// -1 = the controller's default (or taken from `assignments`).
    pub num_partitions: i32,
    /// -1 = the controller's default (or taken from `assignments`).
    pub replication_factor: i16,
    /// Manual placement: replica lists by partition index, preferred leader first.
    pub assignments: Option<Vec<Vec<i32>>>,
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    /// The target replicas; `None` cancels the partition's ongoing reassignment.
    pub replicas: Option<Vec<i32>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControllerRequest {
    RegisterBroker {
        node_id: i32,
        host: String,
        port: i32,
        rack: Option<String>,
        shards: u32,
    },
    BrokerHeartbeat {
        node_id: i32,
    },
    UnregisterBroker {
        node_id: i32,
    },
    CreateTopics {
        topics: Vec<CreatableTopic>,
        validate_only: bool,
    },
    DeleteTopics {
        names: Vec<String>,
    },
    CreatePartitions {
        topic: String,
        /// The new total partition count.
        count: i32,
        /// Replica lists for the new partitions only.
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    },
    /// Replaces the topic's overrides with `configs` (the full new map).
    AlterTopicConfigs {
        topic: String,
        configs: BTreeMap<String, String>,
    },
    /// Replaces the broker-level dynamic topic defaults.
    AlterBrokerConfigs {
        configs: BTreeMap<String, String>,
    },
    /// A leader's ISR change (KIP-497).
    AlterPartition {
        broker_id: i32,
        /// Accepted and not checked: Strata brokers do not carry a registration epoch yet.
        broker_epoch: i64,
        topic: String,
        partition: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<i32>,
    },
    AlterPartitionReassignments {
        reassignments: Vec<Reassignment>,
    },
    /// `None` lists every ongoing reassignment.
    ListPartitionReassignments {
        partitions: Option<Vec<(String, i32)>>,
    },
    /// `None` = every partition. `preferred` = elect replicas[0]; otherwise an unclean
    /// election for leaderless partitions.
    ElectLeaders {
        partitions: Option<Vec<(String, i32)>>,
        preferred: bool,
    },
    AllocateProducerIds {
        broker_id: i32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateTopicResult {
    pub name: String,
    /// 0 when nothing was created (an error, or validate_only).
    pub topic_id: u128,
    pub num_partitions: i32,
    pub replication_factor: i16,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteTopicResult {
    pub name: String,
    pub topic_id: u128,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionResult {
    pub topic: String,
    pub partition: i32,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OngoingReassignment {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControllerResponse {
    RegisterBroker {
        status: Status,
    },
    /// `fenced`: whether the broker is fenced once this response's records are applied.
    BrokerHeartbeat {
        status: Status,
        fenced: bool,
    },
    UnregisterBroker {
        status: Status,
    },
    CreateTopics {
        topics: Vec<CreateTopicResult>,
    },
    DeleteTopics {
        topics: Vec<DeleteTopicResult>,
    },
    CreatePartitions {
        status: Status,
    },
    AlterTopicConfigs {
        status: Status,
    },
    AlterBrokerConfigs {
        status: Status,
    },
    /// `state` is the partition after the change (or as it is, when refused for a stale
    /// epoch, so the leader can catch up). NEW_LEADER_ELECTED when the change completed a
    /// reassignment that moved leadership away from the requester.
    AlterPartition {
        status: Status,
        state: Option<PartitionMeta>,
    },
    AlterPartitionReassignments {
        results: Vec<PartitionResult>,
    },
    ListPartitionReassignments {
        reassignments: Vec<OngoingReassignment>,
    },
    ElectLeaders {
        results: Vec<PartitionResult>,
    },
    AllocateProducerIds {
        status: Status,
        first_id: i64,
        count: i64,
    },
    /// The request could not be decoded or is not one the controller serves.
    Error {
        status: Status,
    },
}

impl ControllerRequest {
    pub fn encode(&self) -> Vec<u8> {
        // Plain data with string map keys: serialising cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

impl ControllerResponse {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    pub fn decode(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// A broker silent this long is fenced (Kafka's broker.session.timeout.ms).
    pub broker_session_timeout_ms: u64,
    /// Used for CreateTopics with replication factor -1.
    pub default_replication_factor: i16,
    /// Used for CreateTopics with -1 partitions.
    pub default_num_partitions: i32,
    /// Move leadership back to preferred replicas on tick (auto.leader.rebalance.enable).
    pub auto_leader_rebalance: bool,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            broker_session_timeout_ms: 6000,
            default_replication_factor: 1,
            default_num_partitions: 1,
            auto_leader_rebalance: false,
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
    /// Placement rotation: partitions placed so far by this controller.
    placement_sequence: usize,
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

fn unclean_allowed(c: &Catalog, topic: &str) -> bool {
    let topic_value = c
        .topic(topic)
        .and_then(|t| t.configs.get(UNCLEAN_LEADER_ELECTION));
    topic_value
        .or_else(|| c.broker_configs.get(UNCLEAN_LEADER_ELECTION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Kafka's leader choice for `p`: the first replica in assignment order that is in the ISR
/// and unfenced. Failing that, and only if `unclean`, the first unfenced replica; the ISR
/// then shrinks to that replica alone, since nothing else is known to hold its log. Sets
/// `leader = -1` when no replica qualifies.
fn elect(c: &Catalog, p: &mut PartitionMeta, unclean: bool) {
    if let Some(r) = p
        .replicas
        .iter()
        .find(|r| p.isr.contains(r) && is_unfenced(c, **r))
    {
        p.leader = *r;
        return;
    }
    if unclean {
        if let Some(r) = p.replicas.iter().find(|r| is_unfenced(c, **r)) {
            p.leader = *r;
            p.isr = vec![*r];
            return;
        }
    }
    p.leader = -1;
}

/// Finishes a reassignment once every target replica is in the ISR (Kafka's
/// PartitionChangeBuilder.tryCompleteReassignment): the assignment becomes the target, the
/// removed replicas leave the ISR, and a leader that was removed is replaced.
fn try_complete_reassignment(c: &Catalog, p: &mut PartitionMeta) {
    if p.adding.is_empty() && p.removing.is_empty() {
        return;
    }
    let target: Vec<i32> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| !p.removing.contains(r))
        .collect();
    if !target.iter().all(|r| p.isr.contains(r)) {
        return;
    }
    p.shards = target.iter().map(|r| p.shard_of(*r).unwrap_or(0)).collect();
    p.isr.retain(|r| target.contains(r));
    p.replicas = target;
    p.adding.clear();
    p.removing.clear();
    if !p.replicas.contains(&p.leader) {
        elect(c, p, false);
    }
}

/// The partition as it was before its ongoing reassignment (Kafka's
/// PartitionReassignmentRevert): the replicas being added leave the assignment and the ISR.
/// The original replicas keep their order within the reassignment's list. Should the ISR
/// hold only replicas being added, it becomes the original replicas, as Kafka does.
fn revert_reassignment(c: &Catalog, p: &PartitionMeta) -> PartitionMeta {
    let mut n = p.clone();
    if p.adding.is_empty() && p.removing.is_empty() {
        return n;
    }
    let original: Vec<i32> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| !p.adding.contains(r))
        .collect();
    n.shards = original
        .iter()
        .map(|r| p.shard_of(*r).unwrap_or(0))
        .collect();
    n.isr.retain(|r| original.contains(r));
    if n.isr.is_empty() {
        n.isr = original.clone();
    }
    n.replicas = original;
    n.adding.clear();
    n.removing.clear();
    if !n.replicas.contains(&n.leader) || !n.isr.contains(&n.leader) {
        elect(c, &mut n, false);
    }
    n
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

fn validate_configs(configs: &BTreeMap<String, String>) -> Result<(), Status> {
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
fn validate_assignments(
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
            placement_sequence: 0,
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
        if self.config.auto_leader_rebalance {
            let all: Vec<(String, usize)> = Self::all_partitions(&batch.work);
            for (topic, index) in all {
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
    /// they are committed. A refused request yields no records.
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
                rack,
                shards,
            } => {
                let status =
                    self.register_broker(&mut batch, node_id, host, port, rack, shards, now_ms);
                ControllerResponse::RegisterBroker { status }
            }
            ControllerRequest::BrokerHeartbeat { node_id } => {
                self.heartbeat(&mut batch, node_id, now_ms)
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
        };
        (batch.records, response)
    }

    #[allow(clippy::too_many_arguments)] // the fields of the request, passed as they came
    fn register_broker(
        &mut self,
        batch: &mut Batch,
        node_id: i32,
        host: String,
        port: i32,
        rack: Option<String>,
        shards: u32,
        now_ms: u64,
    ) -> Status {
        if node_id < 0 || shards == 0 || !(0..=i32::from(u16::MAX)).contains(&port) {
            return Status::error(
                ErrorCode::InvalidRequest,
                format!("invalid registration: node {node_id}, port {port}, {shards} shards"),
            );
        }
        // An unfenced broker registering again has restarted: it registers fenced, so it
        // first gives up its leaderships and ISR places, exactly as if it had been fenced,
        // and regains them through its heartbeats and its leaders' AlterPartition.
        let was_unfenced = is_unfenced(&batch.work, node_id);
        batch.push(MetadataRecord::RegisterBroker {
            node_id,
            host,
            port,
            rack,
            shards,
        });
        if was_unfenced {
            Self::leave_partitions(batch, node_id);
        }
        self.last_seen_ms.insert(node_id, now_ms);
        Status::ok()
    }

    fn heartbeat(&mut self, batch: &mut Batch, node_id: i32, now_ms: u64) -> ControllerResponse {
        let Some(broker) = batch.work.brokers.get(&node_id) else {
            return ControllerResponse::BrokerHeartbeat {
                status: Status::error(
                    ErrorCode::BrokerIdNotRegistered,
                    format!("broker {node_id} is not registered"),
                ),
                fenced: true,
            };
        };
        self.last_seen_ms.insert(node_id, now_ms);
        if broker.fenced {
            self.fencing.remove(&node_id);
            batch.push(MetadataRecord::UnfenceBroker { node_id });
            let mut budget = ELECTIONS_PER_BATCH_MAX;
            Self::elect_leaderless(batch, &mut budget);
        }
        // A fence proposed but not yet applied still lands; the next heartbeat undoes it.
        ControllerResponse::BrokerHeartbeat {
            status: Status::ok(),
            fenced: self.fencing.contains(&node_id),
        }
    }

    fn all_partitions(c: &Catalog) -> Vec<(String, usize)> {
        c.topics
            .values()
            .flat_map(|t| (0..t.partitions.len()).map(|i| (t.name.clone(), i)))
            .collect()
    }

    /// A fenced or departed broker gives up every leadership and ISR place, except that it
    /// stays the ISR of a partition whose only ISR member it is (leader -1): that ISR still
    /// names the one replica holding every acknowledged write. Expects `node` already fenced
    /// (or unregistered) in `batch`.
    fn leave_partitions(batch: &mut Batch, node: i32) {
        let mut touched = Vec::new();
        for t in batch.work.topics.values() {
            for (i, p) in t.partitions.iter().enumerate() {
                if p.leader == node || p.isr.contains(&node) {
                    touched.push((t.name.clone(), i, p.clone()));
                }
            }
        }
        for (topic, index, old) in touched {
            let mut new = old.clone();
            if new.isr.len() > 1 {
                new.isr.retain(|r| *r != node);
            }
            if new.leader == node {
                let unclean = unclean_allowed(&batch.work, &topic);
                elect(&batch.work, &mut new, unclean);
            }
            batch.change(&topic, index, &old, new);
        }
    }

    /// Elects a leader for each leaderless partition that has an eligible replica now,
    /// at most `budget` of them.
    fn elect_leaderless(batch: &mut Batch, budget: &mut usize) {
        let mut leaderless = Vec::new();
        for t in batch.work.topics.values() {
            for (i, p) in t.partitions.iter().enumerate() {
                if p.leader == -1 {
                    leaderless.push((t.name.clone(), i, p.clone()));
                }
            }
        }
        for (topic, index, old) in leaderless {
            if *budget == 0 {
                return;
            }
            let mut new = old.clone();
            let unclean = unclean_allowed(&batch.work, &topic);
            elect(&batch.work, &mut new, unclean);
            if new.leader != -1 {
                batch.change(&topic, index, &old, new);
                *budget -= 1;
            }
        }
    }

    fn unfenced_candidates(c: &Catalog) -> Vec<Candidate> {
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
    fn auto_assign(&mut self, c: &Catalog, count: usize, rf: i32) -> Result<Vec<Vec<i32>>, Status> {
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
    fn new_partitions(
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
            });
        }
        Ok(out)
    }

    fn create_topic(
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
    fn try_create_topic(
        &mut self,
        batch: &mut Batch,
        t: CreatableTopic,
        validate_only: bool,
    ) -> Result<(u128, i32, i16), Status> {
        crate::server::admin::validate_topic_name(&t.name)
            .map_err(|e| Status::error(e.code, e.message))?;
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
        let id = loop {
            let id: u128 = self.rng.gen();
            if id != 0 && batch.work.topic_by_id(id).is_none() {
                break id;
            }
        };
        batch.push(MetadataRecord::Topic {
            name: t.name,
            id,
            partitions,
            configs: t.configs,
        });
        Ok((id, count, rf))
    }

    fn delete_topic(batch: &mut Batch, name: String) -> DeleteTopicResult {
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

    fn create_partitions(
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
        let rf = existing
            .partitions
            .first()
            .map_or(i32::from(self.config.default_replication_factor), |p| {
                p.replicas.len() as i32
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

    /// Kafka's AlterPartition checks, in its order, then the ISR change (and the completion
    /// of a reassignment it makes possible).
    fn alter_partition(
        batch: &mut Batch,
        broker_id: i32,
        topic: &str,
        partition: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<i32>,
    ) -> (Status, Option<PartitionMeta>) {
        let (index, old) = match partition_of(&batch.work, topic, partition) {
            Ok(found) => found,
            Err(status) => return (status, None),
        };
        let refuse = |code, message: String| (Status::error(code, message), Some(old.clone()));
        if leader_epoch != old.leader_epoch {
            return refuse(
                ErrorCode::FencedLeaderEpoch,
                format!(
                    "leader epoch {leader_epoch} is not the current {}",
                    old.leader_epoch
                ),
            );
        }
        if broker_id != old.leader {
            return refuse(
                ErrorCode::InvalidRequest,
                format!("broker {broker_id} is not the leader ({})", old.leader),
            );
        }
        if partition_epoch != old.partition_epoch {
            return refuse(
                ErrorCode::InvalidUpdateVersion,
                format!(
                    "partition epoch {partition_epoch} is not the current {}",
                    old.partition_epoch
                ),
            );
        }
        let distinct: BTreeSet<&i32> = new_isr.iter().collect();
        if distinct.len() != new_isr.len() || !new_isr.contains(&old.leader) {
            return refuse(
                ErrorCode::InvalidRequest,
                format!("ISR {new_isr:?} repeats a broker or leaves out the leader"),
            );
        }
        if let Some(r) = new_isr.iter().find(|r| {
            !old.replicas.contains(r) || (!old.isr.contains(r) && !is_unfenced(&batch.work, **r))
        }) {
            return refuse(
                ErrorCode::IneligibleReplica,
                format!("broker {r} may not join the ISR (not a replica, or fenced)"),
            );
        }
        let mut new = old.clone();
        new.isr = new_isr;
        try_complete_reassignment(&batch.work, &mut new);
        let state = batch.change(topic, index, &old, new);
        let status = if state.leader != old.leader {
            Status::error(
                ErrorCode::NewLeaderElected,
                format!("the reassignment completed and {} leads now", state.leader),
            )
        } else {
            Status::ok()
        };
        (status, Some(state))
    }

    /// KIP-455: starts, replaces or cancels one partition's reassignment.
    fn reassign(
        batch: &mut Batch,
        loads: &mut BTreeMap<i32, Vec<usize>>,
        r: &Reassignment,
    ) -> Result<(), Status> {
        let (index, old) = partition_of(&batch.work, &r.topic, r.partition)?;
        let ongoing = !old.adding.is_empty() || !old.removing.is_empty();
        let Some(target) = &r.replicas else {
            if !ongoing {
                return Err(Status::error(
                    ErrorCode::NoReassignmentInProgress,
                    format!("no reassignment of {}-{} to cancel", r.topic, r.partition),
                ));
            }
            let reverted = revert_reassignment(&batch.work, &old);
            batch.change(&r.topic, index, &old, reverted);
            return Ok(());
        };
        validate_assignments(&batch.work, std::slice::from_ref(target), None)?;
        // A new target replaces an ongoing reassignment: it starts from the original replicas.
        let base = revert_reassignment(&batch.work, &old);
        let mut new = base.clone();
        if *target != base.replicas {
            let mut replicas = target.clone();
            replicas.extend(base.replicas.iter().filter(|b| !target.contains(b)));
            new.shards = replicas
                .iter()
                .map(|b| base.shard_of(*b).unwrap_or_else(|| place_on(loads, *b)))
                .collect();
            new.adding = target
                .iter()
                .copied()
                .filter(|t| !base.replicas.contains(t))
                .collect();
            new.removing = base
                .replicas
                .iter()
                .copied()
                .filter(|b| !target.contains(b))
                .collect();
            new.replicas = replicas;
            // Removing replicas only: done at once if the target is all in sync.
            try_complete_reassignment(&batch.work, &mut new);
        }
        batch.change(&r.topic, index, &old, new);
        Ok(())
    }

    fn list_reassignments(
        c: &Catalog,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Vec<OngoingReassignment> {
        let wanted: Vec<(String, i32)> = match partitions {
            Some(p) => p,
            None => Self::all_partitions(c)
                .into_iter()
                .map(|(t, i)| (t, i as i32))
                .collect(),
        };
        wanted
            .into_iter()
            .filter_map(|(topic, partition)| {
                let (_, p) = partition_of(c, &topic, partition).ok()?;
                (!p.adding.is_empty() || !p.removing.is_empty()).then_some(OngoingReassignment {
                    topic,
                    partition,
                    replicas: p.replicas,
                    adding: p.adding,
                    removing: p.removing,
                })
            })
            .collect()
    }

    /// Moves leadership to replicas[0] if it is in the ISR and unfenced.
    fn elect_preferred(batch: &mut Batch, topic: &str, index: usize) -> Result<(), Status> {
        let (_, old) = partition_of(&batch.work, topic, index as i32)?;
        let Some(preferred) = old.replicas.first().copied() else {
            return Err(Status::error(
                ErrorCode::PreferredLeaderNotAvailable,
                "no replicas",
            ));
        };
        if old.leader == preferred {
            return Err(Status::error(
                ErrorCode::ElectionNotNeeded,
                format!("{preferred} leads already"),
            ));
        }
        if !old.isr.contains(&preferred) || !is_unfenced(&batch.work, preferred) {
            return Err(Status::error(
                ErrorCode::PreferredLeaderNotAvailable,
                format!("preferred leader {preferred} is fenced or out of the ISR"),
            ));
        }
        let mut new = old.clone();
        new.leader = preferred;
        batch.change(topic, index, &old, new);
        Ok(())
    }

    /// Elects a leader for a leaderless partition, from outside the ISR if need be (the
    /// operator asked for an unclean election).
    fn elect_unclean(batch: &mut Batch, topic: &str, index: usize) -> Result<(), Status> {
        let (_, old) = partition_of(&batch.work, topic, index as i32)?;
        if old.leader != -1 {
            return Err(Status::error(
                ErrorCode::ElectionNotNeeded,
                format!("{} leads already", old.leader),
            ));
        }
        let mut new = old.clone();
        elect(&batch.work, &mut new, true);
        if new.leader == -1 {
            return Err(Status::error(
                ErrorCode::EligibleLeadersNotAvailable,
                "no replica is unfenced",
            ));
        }
        batch.change(topic, index, &old, new);
        Ok(())
    }

    fn elect_leaders(
        batch: &mut Batch,
        partitions: Option<Vec<(String, i32)>>,
        preferred: bool,
    ) -> Vec<PartitionResult> {
        // Asked for every partition, Kafka reports only those where something was tried.
        let all = partitions.is_none();
        let wanted: Vec<(String, i32)> = partitions.unwrap_or_else(|| {
            Self::all_partitions(&batch.work)
                .into_iter()
                .map(|(t, i)| (t, i as i32))
                .collect()
        });
        let mut results = Vec::with_capacity(wanted.len());
        for (topic, partition) in wanted {
            let outcome = match usize::try_from(partition) {
                Err(_) => Err(unknown_partition(&topic, partition)),
                Ok(index) if preferred => Self::elect_preferred(batch, &topic, index),
                Ok(index) => Self::elect_unclean(batch, &topic, index),
            };
            let status = outcome.err().unwrap_or_default();
            if all && status.error_code == ErrorCode::ElectionNotNeeded.code() {
                continue;
            }
            results.push(PartitionResult {
                topic,
                partition,
                status,
            });
        }
        results
    }

    fn allocate_producer_ids(batch: &mut Batch, broker_id: i32) -> ControllerResponse {
        let refuse = |status| ControllerResponse::AllocateProducerIds {
            status,
            first_id: -1,
            count: 0,
        };
        if !batch.work.brokers.contains_key(&broker_id) {
            return refuse(Status::error(
                ErrorCode::BrokerIdNotRegistered,
                format!("broker {broker_id} is not registered"),
            ));
        }
        let first_id = batch.work.producer_id_block_end.max(0);
        let Some(block_end) = first_id.checked_add(PRODUCER_ID_BLOCK) else {
            return refuse(Status::error(
                ErrorCode::UnknownServerError,
                "producer ids exhausted",
            ));
        };
        batch.push(MetadataRecord::ProducerIds { block_end });
        ControllerResponse::AllocateProducerIds {
            status: Status::ok(),
            first_id,
            count: PRODUCER_ID_BLOCK,
        }
    }
}
