//! The controller driven through requests and ticks against the catalog its own records
//! build, checked against Kafka's rules and, in the property test, against invariants.
use super::*;
use crate::limits::PRODUCER_ID_BLOCK;

const TIMEOUT_MS: u64 = 6000;

/// A controller and the catalog its records build, with every record kept so a replay
/// can be checked against the live catalog.
struct Sim {
    controller: Controller,
    state: Catalog,
    log: Vec<MetadataRecord>,
    now_ms: u64,
}

impl Sim {
    fn new() -> Self {
        let config = ControllerConfig {
            broker_session_timeout_ms: TIMEOUT_MS,
            default_replication_factor: 3,
            ..ControllerConfig::default()
        };
        let mut controller = Controller::with_seed(config, 42);
        controller.on_leadership(true, 0);
        Self {
            controller,
            state: Catalog::default(),
            log: Vec::new(),
            now_ms: 0,
        }
    }

    fn commit(&mut self, records: Vec<MetadataRecord>) {
        for r in records {
            self.state.apply(&r);
            self.log.push(r);
        }
    }

    fn req(&mut self, r: ControllerRequest) -> ControllerResponse {
        let (records, response) = self.controller.handle_request(&self.state, r, self.now_ms);
        self.commit(records);
        response
    }

    fn tick(&mut self) {
        let records = self.controller.tick(&self.state, self.now_ms);
        self.commit(records);
    }

    /// Registers `nodes` (node, rack) with 2 shards each and heartbeats them unfenced.
    fn brokers(&mut self, nodes: &[(i32, Option<&str>)]) {
        for (node_id, rack) in nodes {
            self.req(ControllerRequest::RegisterBroker {
                node_id: *node_id,
                host: "localhost".into(),
                port: 9000 + node_id,
                listeners: Vec::new(),
                rack: rack.map(str::to_string),
                shards: 2,
            });
            self.heartbeat(*node_id);
        }
    }

    fn heartbeat(&mut self, node_id: i32) -> bool {
        match self.req(ControllerRequest::BrokerHeartbeat { node_id }) {
            ControllerResponse::BrokerHeartbeat { status, fenced } => {
                assert!(status.is_ok(), "{status:?}");
                fenced
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Moves time past the session timeout with only `alive` heartbeating, then ticks.
    fn expire_all_but(&mut self, alive: &[i32]) {
        self.now_ms += TIMEOUT_MS + 1;
        for id in alive {
            self.heartbeat(*id);
        }
        self.tick();
    }

    fn create(&mut self, t: CreatableTopic) -> CreateTopicResult {
        match self.req(ControllerRequest::CreateTopics {
            topics: vec![t],
            validate_only: false,
        }) {
            ControllerResponse::CreateTopics { mut topics } => topics.remove(0),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn create_assigned(&mut self, name: &str, assignments: Vec<Vec<i32>>) {
        let r = self.create(topic(name, -1, -1, Some(assignments)));
        assert!(r.status.is_ok(), "{r:?}");
    }

    fn partition(&self, name: &str, index: usize) -> PartitionMeta {
        self.state.topic(name).expect("topic").partitions[index].clone()
    }

    fn alter_isr(
        &mut self,
        name: &str,
        index: usize,
        new_isr: Vec<i32>,
    ) -> (Status, PartitionMeta) {
        let p = self.partition(name, index);
        self.alter_isr_at(
            name,
            index,
            p.leader,
            p.leader_epoch,
            p.partition_epoch,
            new_isr,
        )
    }

    fn alter_isr_at(
        &mut self,
        name: &str,
        index: usize,
        broker_id: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<i32>,
    ) -> (Status, PartitionMeta) {
        match self.req(ControllerRequest::AlterPartition {
            broker_id,
            broker_epoch: 0,
            topic: name.into(),
            partition: index as i32,
            leader_epoch,
            partition_epoch,
            new_isr,
        }) {
            ControllerResponse::AlterPartition { status, state } => (status, state.expect("state")),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn reassign(&mut self, name: &str, index: i32, replicas: Option<Vec<i32>>) -> Status {
        match self.req(ControllerRequest::AlterPartitionReassignments {
            reassignments: vec![Reassignment {
                topic: name.into(),
                partition: index,
                replicas,
            }],
        }) {
            ControllerResponse::AlterPartitionReassignments { mut results } => {
                results.remove(0).status
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    fn elect_preferred(&mut self, partitions: Option<Vec<(String, i32)>>) -> Vec<PartitionResult> {
        match self.req(ControllerRequest::ElectLeaders {
            partitions,
            preferred: true,
        }) {
            ControllerResponse::ElectLeaders { results } => results,
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Replaying every record onto an empty catalog gives the live catalog again.
    fn assert_replays(&self) {
        let mut fresh = Catalog::default();
        for r in &self.log {
            fresh.apply(r);
        }
        assert_eq!(fresh, self.state);
        let mut indexed = fresh.clone();
        indexed.reindex();
        assert_eq!(indexed, fresh, "apply keeps the id index current");
    }
}

fn topic(
    name: &str,
    partitions: i32,
    rf: i16,
    assignments: Option<Vec<Vec<i32>>>,
) -> CreatableTopic {
    CreatableTopic {
        name: name.into(),
        num_partitions: partitions,
        replication_factor: rf,
        assignments,
        configs: BTreeMap::new(),
    }
}

fn code(s: &Status) -> i16 {
    s.error_code
}

/// Auto placement over 3 brokers spreads leaders (2 each of 6) and replicas (6 each),
/// balances each broker's shards (3 and 3), and starts every partition with ISR = AR,
/// leader = first replica, epochs 0; over two racks, each RF-2 partition spans both.
#[test]
fn placement_spreads_leaders_replicas_shards_and_racks() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None), (3, None)]);
    let r = sim.create(topic("t", 6, 3, None));
    assert!(r.status.is_ok(), "{r:?}");
    assert_ne!(r.topic_id, 0);
    assert_eq!((r.num_partitions, r.replication_factor), (6, 3));
    let t = sim.state.topic("t").expect("topic").clone();
    let mut leaders = BTreeMap::new();
    let mut per_shard: BTreeMap<(i32, u32), usize> = BTreeMap::new();
    for p in &t.partitions {
        assert_eq!(p.isr, p.replicas);
        assert_eq!(p.leader, p.replicas[0]);
        assert_eq!((p.leader_epoch, p.partition_epoch), (0, 0));
        *leaders.entry(p.leader).or_insert(0) += 1;
        for (r, s) in p.replicas.iter().zip(&p.shards) {
            *per_shard.entry((*r, *s)).or_insert(0) += 1;
        }
    }
    assert_eq!(leaders.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
    assert_eq!(per_shard.len(), 6);
    assert!(per_shard.values().all(|n| *n == 3), "{per_shard:?}");
    // Single-partition topics in a row rotate their leaders.
    let firsts: BTreeSet<i32> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            sim.create(topic(n, 1, 1, None));
            sim.partition(n, 0).leader
        })
        .collect();
    assert_eq!(firsts.len(), 3);
    sim.assert_replays();

    let mut racks = Sim::new();
    racks.brokers(&[
        (1, Some("x")),
        (2, Some("x")),
        (3, Some("y")),
        (4, Some("y")),
    ]);
    racks.create(topic("r", 8, 2, None));
    for p in &racks.state.topic("r").expect("topic").partitions {
        let rack = |id: i32| racks.state.brokers[&id].rack.clone();
        assert_ne!(rack(p.replicas[0]), rack(p.replicas[1]), "{p:?}");
    }
}

/// Kafka's CreateTopics refusals: RF above the unfenced brokers (a fenced one does not
/// count), RF or partitions below 1, an existing name, bad manual assignments, and
/// counts given alongside an assignment. validate_only writes nothing.
#[test]
fn create_topics_refusals() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None), (3, None)]);
    let rf = ErrorCode::InvalidReplicationFactor.code();
    assert_eq!(code(&sim.create(topic("t", 1, 4, None)).status), rf);
    assert_eq!(code(&sim.create(topic("t", 1, 0, None)).status), rf);
    assert_eq!(
        code(&sim.create(topic("t", 0, 1, None)).status),
        ErrorCode::InvalidPartitions.code()
    );
    assert!(sim.create(topic("t", 1, -1, None)).status.is_ok());
    assert_eq!(
        code(&sim.create(topic("t", 1, 1, None)).status),
        ErrorCode::TopicAlreadyExists.code()
    );
    let bad = ErrorCode::InvalidReplicaAssignment.code();
    assert_eq!(
        code(
            &sim.create(topic("u", -1, -1, Some(vec![vec![1, 1]])))
                .status
        ),
        bad
    );
    assert_eq!(
        code(
            &sim.create(topic("u", -1, -1, Some(vec![vec![1, 9]])))
                .status
        ),
        bad
    );
    assert_eq!(
        code(
            &sim.create(topic("u", -1, -1, Some(vec![vec![1, 2], vec![3]])))
                .status
        ),
        bad
    );
    assert_eq!(
        code(&sim.create(topic("u", 1, -1, Some(vec![vec![1]]))).status),
        ErrorCode::InvalidRequest.code()
    );
    assert_eq!(
        code(&sim.create(topic("bad name!", 1, 1, None)).status),
        ErrorCode::InvalidTopicException.code()
    );
    let before = sim.log.len();
    let (records, response) = sim.controller.handle_request(
        &sim.state,
        ControllerRequest::CreateTopics {
            topics: vec![topic("v", 3, 3, None)],
            validate_only: true,
        },
        0,
    );
    assert!(records.is_empty(), "{response:?}");
    assert_eq!(sim.log.len(), before);
    sim.expire_all_but(&[1, 2]);
    assert!(sim.state.brokers[&3].fenced);
    assert_eq!(code(&sim.create(topic("w", 1, 3, None)).status), rf);
    sim.assert_replays();
}

/// Fencing a leader: it leaves the ISR, the first ISR replica in assignment order that
/// is unfenced leads, the leader epoch and partition epoch go up by one; a follower that
/// is fenced only leaves the ISR (partition epoch up, leader epoch unchanged).
#[test]
fn fencing_a_leader_elects_from_the_isr() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None), (3, None)]);
    sim.create_assigned("t", vec![vec![1, 2, 3], vec![2, 3, 1]]);
    sim.expire_all_but(&[2, 3]);
    assert!(sim.state.brokers[&1].fenced);
    let p = sim.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2, 3]));
    assert_eq!((p.leader_epoch, p.partition_epoch), (1, 1));
    let q = sim.partition("t", 1);
    assert_eq!((q.leader, q.isr.clone()), (2, vec![2, 3]));
    assert_eq!((q.leader_epoch, q.partition_epoch), (0, 1));
    // A second tick proposes nothing new.
    let before = sim.log.len();
    sim.tick();
    assert_eq!(sim.log.len(), before);
    // The fenced broker's heartbeat unfences it; it stays out of the ISR until its
    // leader adds it back, and the leader stays.
    assert!(!sim.heartbeat(1));
    assert!(!sim.state.brokers[&1].fenced);
    assert_eq!(sim.partition("t", 0).leader, 2);
    sim.assert_replays();
}

/// Fencing a partition's last ISR member leaves it leaderless (-1) with the ISR kept,
/// even though another replica is alive (it may lack acknowledged writes); the member's
/// return re-elects it. With unclean election enabled, the other replica leads instead
/// with an ISR of itself.
#[test]
fn last_isr_member_is_kept_and_re_elected() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None)]);
    sim.create_assigned("t", vec![vec![1, 2]]);
    let (status, p) = sim.alter_isr("t", 0, vec![1]);
    assert!(status.is_ok(), "{status:?}");
    assert_eq!(
        (p.isr.clone(), p.leader_epoch, p.partition_epoch),
        (vec![1], 0, 1)
    );
    sim.expire_all_but(&[2]);
    let p = sim.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (-1, vec![1]));
    assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
    // Ticks do not elect the out-of-sync replica.
    sim.tick();
    assert_eq!(sim.partition("t", 0).leader, -1);
    assert!(!sim.heartbeat(1));
    let p = sim.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (1, vec![1]));
    assert_eq!((p.leader_epoch, p.partition_epoch), (2, 3));
    sim.assert_replays();

    let mut unclean = Sim::new();
    unclean.brokers(&[(1, None), (2, None)]);
    let mut t = topic("t", -1, -1, Some(vec![vec![1, 2]]));
    t.configs
        .insert(UNCLEAN_LEADER_ELECTION.to_string(), "true".to_string());
    assert!(unclean.create(t).status.is_ok());
    unclean.alter_isr("t", 0, vec![1]);
    unclean.expire_all_but(&[2]);
    let p = unclean.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    unclean.assert_replays();
}

/// A new active controller gives every broker a fresh session: brokers last heard
/// long ago are not fenced at its first tick, only after a full timeout of silence.
#[test]
fn new_controller_grants_a_grace_period() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None)]);
    sim.now_ms = 100_000;
    sim.controller.on_leadership(false, sim.now_ms);
    sim.controller.on_leadership(true, sim.now_ms);
    sim.tick();
    assert!(!sim.state.brokers[&1].fenced);
    sim.now_ms += TIMEOUT_MS;
    sim.tick();
    assert!(!sim.state.brokers[&1].fenced);
    sim.now_ms += 1;
    sim.tick();
    assert!(sim.state.brokers[&1].fenced);
}

/// AlterPartition is refused, with the current state returned, for a stale leader
/// epoch (FENCED_LEADER_EPOCH), a stale partition epoch (INVALID_UPDATE_VERSION), a
/// requester that is not the leader or an ISR without it (INVALID_REQUEST), and an ISR
/// with a non-replica or a fenced newcomer (INELIGIBLE_REPLICA); a valid one bumps only
/// the partition epoch.
#[test]
fn alter_partition_refuses_stale_and_ineligible() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None), (3, None), (4, None)]);
    sim.create_assigned("t", vec![vec![1, 2, 3]]);
    let (ok, p) = sim.alter_isr("t", 0, vec![1, 2]);
    assert!(ok.is_ok());
    assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1));
    let check = |sim: &mut Sim, broker, le, pe, isr: Vec<i32>, want: ErrorCode| {
        let before = sim.partition("t", 0);
        let (status, state) = sim.alter_isr_at("t", 0, broker, le, pe, isr);
        assert_eq!(status.error_code, want.code(), "{status:?}");
        assert_eq!(state, before);
        assert_eq!(sim.partition("t", 0), before);
    };
    check(
        &mut sim,
        1,
        5,
        1,
        vec![1, 2, 3],
        ErrorCode::FencedLeaderEpoch,
    );
    check(
        &mut sim,
        1,
        0,
        0,
        vec![1, 2, 3],
        ErrorCode::InvalidUpdateVersion,
    );
    check(&mut sim, 2, 0, 1, vec![1, 2, 3], ErrorCode::InvalidRequest);
    check(&mut sim, 1, 0, 1, vec![2, 3], ErrorCode::InvalidRequest);
    check(&mut sim, 1, 0, 1, vec![1, 4], ErrorCode::IneligibleReplica);
    sim.expire_all_but(&[1, 2, 4]);
    check(
        &mut sim,
        1,
        0,
        1,
        vec![1, 2, 3],
        ErrorCode::IneligibleReplica,
    );
    sim.heartbeat(3);
    let (ok, p) = sim.alter_isr("t", 0, vec![1, 2, 3]);
    assert!(ok.is_ok(), "{ok:?}");
    assert_eq!(
        (p.isr, p.leader_epoch, p.partition_epoch),
        (vec![1, 2, 3], 0, 2)
    );
    sim.assert_replays();
}

/// KIP-455: a reassignment lists the union (target first) with adding/removing and a
/// shard for the new replica; it completes when the target is all in the ISR (the
/// removed leader replaced, NEW_LEADER_ELECTED, leader epoch up); cancelling restores
/// the original replica set; a removal-only target that is in sync completes at once.
#[test]
fn reassignment_add_complete_cancel() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None), (3, None), (4, None)]);
    sim.create_assigned("t", vec![vec![1, 2, 3], vec![1, 2, 3], vec![1, 2, 3]]);
    assert!(sim.reassign("t", 0, Some(vec![4, 2, 3])).is_ok());
    let p = sim.partition("t", 0);
    assert_eq!(p.replicas, vec![4, 2, 3, 1]);
    assert_eq!((p.adding.clone(), p.removing.clone()), (vec![4], vec![1]));
    assert_eq!(p.shards.len(), 4);
    assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (1, 0, 1));
    let listed = match sim.req(ControllerRequest::ListPartitionReassignments { partitions: None }) {
        ControllerResponse::ListPartitionReassignments { reassignments } => reassignments,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].partition, listed[0].adding.clone()),
        (0, vec![4])
    );
    // The new replica caught up: the leader adds it, which completes the reassignment.
    let (status, p) = sim.alter_isr("t", 0, vec![1, 2, 3, 4]);
    assert_eq!(status.error_code, ErrorCode::NewLeaderElected.code());
    assert_eq!(p.replicas, vec![4, 2, 3]);
    assert_eq!(p.isr, vec![2, 3, 4]);
    assert_eq!(p.leader, 4);
    assert!(p.adding.is_empty() && p.removing.is_empty());
    assert_eq!((p.leader_epoch, p.partition_epoch), (1, 2));
    assert_eq!(p.shards.len(), 3);

    // Cancel: back to the original set, the would-be replica out of the ISR.
    let original = sim.partition("t", 1);
    assert!(sim.reassign("t", 1, Some(vec![2, 3, 4])).is_ok());
    sim.alter_isr("t", 1, vec![1, 2, 3]);
    assert!(sim.reassign("t", 1, None).is_ok());
    let p = sim.partition("t", 1);
    let set = |v: &[i32]| v.iter().copied().collect::<BTreeSet<i32>>();
    assert_eq!(set(&p.replicas), set(&original.replicas));
    assert_eq!(p.shard_of(1), original.shard_of(1));
    assert!(p.adding.is_empty() && p.removing.is_empty());
    assert_eq!(p.leader, 1);
    assert_eq!(
        code(&sim.reassign("t", 1, None)),
        ErrorCode::NoReassignmentInProgress.code()
    );
    // The same replicas: nothing to do.
    let before = sim.log.len();
    let same = sim.partition("t", 1).replicas;
    assert!(sim.reassign("t", 1, Some(same)).is_ok());
    assert_eq!(sim.log.len(), before);

    // Removal only, all in sync: done at once.
    assert!(sim.reassign("t", 2, Some(vec![2, 3])).is_ok());
    let p = sim.partition("t", 2);
    assert_eq!(
        (p.replicas.clone(), p.isr.clone(), p.leader),
        (vec![2, 3], vec![2, 3], 2)
    );
    assert!(p.removing.is_empty());
    assert_eq!(
        code(&sim.reassign("t", 2, Some(vec![2, 9]))),
        ErrorCode::InvalidReplicaAssignment.code()
    );
    assert_eq!(
        code(&sim.reassign("t", 7, Some(vec![2]))),
        ErrorCode::UnknownTopicOrPartition.code()
    );
    sim.assert_replays();
}

/// Preferred election moves leadership back to replicas[0] only when it is in the ISR
/// and unfenced (PREFERRED_LEADER_NOT_AVAILABLE otherwise), reports ELECTION_NOT_NEEDED
/// when it leads already, and "all partitions" omits those.
#[test]
fn preferred_leader_election() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None), (3, None)]);
    sim.create_assigned("t", vec![vec![1, 2, 3]]);
    sim.expire_all_but(&[2, 3]);
    sim.heartbeat(1);
    assert_eq!(sim.partition("t", 0).leader, 2);
    let one = Some(vec![("t".to_string(), 0)]);
    let r = sim.elect_preferred(one.clone());
    assert_eq!(
        code(&r[0].status),
        ErrorCode::PreferredLeaderNotAvailable.code()
    );
    sim.alter_isr("t", 0, vec![2, 3, 1]);
    let epoch = sim.partition("t", 0).leader_epoch;
    let r = sim.elect_preferred(one.clone());
    assert!(r[0].status.is_ok(), "{r:?}");
    let p = sim.partition("t", 0);
    assert_eq!((p.leader, p.leader_epoch), (1, epoch + 1));
    let r = sim.elect_preferred(one);
    assert_eq!(code(&r[0].status), ErrorCode::ElectionNotNeeded.code());
    assert!(sim.elect_preferred(None).is_empty());
    let r = sim.elect_preferred(Some(vec![("nope".to_string(), 0)]));
    assert_eq!(
        code(&r[0].status),
        ErrorCode::UnknownTopicOrPartition.code()
    );
    sim.assert_replays();
}

/// Topic deletion, partition growth (with the topic's replication factor), config
/// changes and producer id blocks, each as records that replay to the same catalog.
#[test]
fn delete_grow_configure_and_producer_ids() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None), (3, None)]);
    sim.create(topic("t", 2, 2, None));
    sim.create(topic("gone", 1, 1, None));
    let id = sim.state.topic("gone").expect("topic").id;
    match sim.req(ControllerRequest::DeleteTopics {
        names: vec!["gone".into(), "never".into()],
    }) {
        ControllerResponse::DeleteTopics { topics } => {
            assert!(topics[0].status.is_ok());
            assert_eq!(topics[0].topic_id, id);
            assert_eq!(
                code(&topics[1].status),
                ErrorCode::UnknownTopicOrPartition.code()
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(sim.state.topic_by_id(id).is_none());
    let grow = |count, assignments| ControllerRequest::CreatePartitions {
        topic: "t".into(),
        count,
        assignments,
        validate_only: false,
    };
    let status = |r| match r {
        ControllerResponse::CreatePartitions { status } => status,
        other => panic!("unexpected {other:?}"),
    };
    assert!(status(sim.req(grow(4, None))).is_ok());
    let t = sim.state.topic("t").expect("topic").clone();
    assert_eq!(t.partitions.len(), 4);
    assert!(t.partitions.iter().all(|p| p.replicas.len() == 2));
    assert_eq!(
        code(&status(sim.req(grow(4, None)))),
        ErrorCode::InvalidPartitions.code()
    );
    assert_eq!(
        code(&status(sim.req(grow(5, Some(vec![vec![1]]))))),
        ErrorCode::InvalidReplicaAssignment.code()
    );
    assert!(status(sim.req(grow(5, Some(vec![vec![3, 1]])))).is_ok());
    assert_eq!(sim.partition("t", 4).replicas, vec![3, 1]);

    let configs: BTreeMap<String, String> = [("retention.ms".to_string(), "5".to_string())].into();
    sim.req(ControllerRequest::AlterTopicConfigs {
        topic: "t".into(),
        configs: configs.clone(),
    });
    assert_eq!(sim.state.topic("t").expect("topic").configs, configs);
    match sim.req(ControllerRequest::AlterTopicConfigs {
        topic: "t".into(),
        configs: [("no.such".to_string(), "1".to_string())].into(),
    }) {
        ControllerResponse::AlterTopicConfigs { status } => {
            assert_eq!(code(&status), ErrorCode::InvalidConfig.code())
        }
        other => panic!("unexpected {other:?}"),
    }
    sim.req(ControllerRequest::AlterBrokerConfigs {
        configs: configs.clone(),
    });
    assert_eq!(sim.state.broker_configs, configs);

    let mut next = 0;
    for _ in 0..2 {
        match sim.req(ControllerRequest::AllocateProducerIds { broker_id: 1 }) {
            ControllerResponse::AllocateProducerIds {
                status,
                first_id,
                count,
            } => {
                assert!(status.is_ok());
                assert_eq!((first_id, count), (next, PRODUCER_ID_BLOCK));
                next = first_id + count;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(sim.state.producer_id_block_end, next);
    // The first tick names the cluster.
    sim.tick();
    assert!(!sim.state.cluster_id.is_empty());
    sim.assert_replays();
}

/// A broker that registers again while unfenced (it restarted) comes back fenced and
/// gives up its leaderships, like a fenced broker; an unregistered broker's heartbeat
/// is refused.
#[test]
fn re_registration_fences() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None)]);
    sim.create_assigned("t", vec![vec![1, 2]]);
    sim.req(ControllerRequest::RegisterBroker {
        node_id: 1,
        host: "elsewhere".into(),
        port: 9999,
        listeners: Vec::new(),
        rack: None,
        shards: 4,
    });
    let b = &sim.state.brokers[&1];
    assert!(b.fenced);
    assert_eq!((b.host.as_str(), b.port, b.shards), ("elsewhere", 9999, 4));
    let p = sim.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    match sim.req(ControllerRequest::BrokerHeartbeat { node_id: 9 }) {
        ControllerResponse::BrokerHeartbeat { status, fenced } => {
            assert_eq!(code(&status), ErrorCode::BrokerIdNotRegistered.code());
            assert!(fenced);
        }
        other => panic!("unexpected {other:?}"),
    }
    sim.assert_replays();
}

/// Controlled shutdown (Kafka's WantShutDown): the stopping broker is fenced at once and its
/// leaderships go to the rest of the ISR, without waiting out the session timeout; a
/// heartbeat still in flight does not unfence it, its registration (the restart) does; the
/// last unfenced broker is not fenced (nothing could take over); an unknown broker is refused.
#[test]
fn controlled_shutdown_fences_at_once_until_registration() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None), (3, None)]);
    sim.create_assigned("t", vec![vec![1, 2, 3], vec![2, 1, 3]]);
    let shut_down =
        |sim: &mut Sim, node_id| match sim.req(ControllerRequest::ControlledShutdown { node_id }) {
            ControllerResponse::ControlledShutdown { status, fenced } => (code(&status), fenced),
            other => panic!("unexpected {other:?}"),
        };
    assert_eq!(shut_down(&mut sim, 1), (0, true));
    assert!(sim.state.brokers[&1].fenced);
    let p = sim.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2, 3]));
    assert_eq!(sim.partition("t", 1).isr, vec![2, 3]);
    // A heartbeat sent before the shutdown and answered after it leaves it fenced.
    assert!(sim.heartbeat(1));
    assert!(sim.state.brokers[&1].fenced);
    // Broker 2 stops too; broker 3 is then the only one left and stays unfenced.
    assert_eq!(shut_down(&mut sim, 2), (0, true));
    assert_eq!(shut_down(&mut sim, 3), (0, false));
    assert!(!sim.state.brokers[&3].fenced);
    assert_eq!(sim.partition("t", 0).leader, 3);
    // The restart registers and heartbeats as usual, and is unfenced.
    sim.brokers(&[(1, None)]);
    assert!(!sim.state.brokers[&1].fenced);
    assert_eq!(
        shut_down(&mut sim, 9).0,
        ErrorCode::BrokerIdNotRegistered.code()
    );
    sim.assert_replays();
}

/// Requests and responses survive their serde_json encoding unchanged.
#[test]
fn requests_and_responses_round_trip() {
    let requests = vec![
        ControllerRequest::CreateTopics {
            topics: vec![topic("t", -1, -1, Some(vec![vec![1, 2]]))],
            validate_only: true,
        },
        ControllerRequest::ElectLeaders {
            partitions: Some(vec![("t".into(), 3)]),
            preferred: false,
        },
        ControllerRequest::AlterPartition {
            broker_id: 1,
            broker_epoch: -1,
            topic: "t".into(),
            partition: 0,
            leader_epoch: 2,
            partition_epoch: 3,
            new_isr: vec![1, 2],
        },
        ControllerRequest::AlterPartitionReassignments {
            reassignments: vec![Reassignment {
                topic: "t".into(),
                partition: 0,
                replicas: None,
            }],
        },
    ];
    for r in requests {
        assert_eq!(ControllerRequest::decode(&r.encode()).expect("decode"), r);
    }
    let responses = vec![
        ControllerResponse::CreateTopics {
            topics: vec![CreateTopicResult {
                name: "t".into(),
                topic_id: u128::MAX,
                num_partitions: 1,
                replication_factor: 1,
                status: Status::error(ErrorCode::InvalidConfig, "x"),
            }],
        },
        ControllerResponse::AlterPartition {
            status: Status::ok(),
            state: Some(PartitionMeta::single(1, 0)),
        },
    ];
    for r in responses {
        assert_eq!(ControllerResponse::decode(&r.encode()).expect("decode"), r);
    }
}

/// With auto rebalance on, a tick moves leadership back to an in-sync preferred replica;
/// an explicit unclean election elects a live replica outside the ISR of a leaderless
/// partition (its ISR becomes just that replica) and is not needed where a leader exists.
#[test]
fn auto_rebalance_and_unclean_election() {
    let mut sim = Sim::new();
    sim.controller.config.auto_leader_rebalance = true;
    sim.controller.config.leader_imbalance_check_interval_ms = 0;
    sim.brokers(&[(1, None), (2, None)]);
    sim.create_assigned("t", vec![vec![1, 2]]);
    sim.expire_all_but(&[2]);
    assert_eq!(sim.partition("t", 0).leader, 2);
    sim.heartbeat(1);
    sim.tick();
    assert_eq!(sim.partition("t", 0).leader, 2, "1 is not in the ISR yet");
    sim.alter_isr("t", 0, vec![2, 1]);
    sim.tick();
    assert_eq!(sim.partition("t", 0).leader, 1);

    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None)]);
    sim.create_assigned("t", vec![vec![1, 2]]);
    sim.alter_isr("t", 0, vec![1]);
    sim.expire_all_but(&[2]);
    assert_eq!(sim.partition("t", 0).leader, -1);
    let unclean = |sim: &mut Sim| match sim.req(ControllerRequest::ElectLeaders {
        partitions: Some(vec![("t".into(), 0)]),
        preferred: false,
    }) {
        ControllerResponse::ElectLeaders { mut results } => results.remove(0).status,
        other => panic!("unexpected {other:?}"),
    };
    assert!(unclean(&mut sim).is_ok());
    let p = sim.partition("t", 0);
    assert_eq!((p.leader, p.isr), (2, vec![2]));
    assert_eq!(
        code(&unclean(&mut sim)),
        ErrorCode::ElectionNotNeeded.code()
    );
    sim.assert_replays();
}

/// Auto rebalance waits for its interval, and moves a broker's preferred partitions
/// back only when the share it does not lead is above the imbalance percentage.
#[test]
fn auto_rebalance_interval_and_threshold() {
    let mut sim = Sim::new();
    sim.controller.config.auto_leader_rebalance = true;
    sim.controller.config.leader_imbalance_check_interval_ms = 60_000;
    sim.controller.config.leader_imbalance_per_broker_percentage = 50;
    sim.brokers(&[(1, None), (2, None)]);
    // Broker 1 is preferred for four partitions and loses them all in a failover.
    sim.create_assigned("t", vec![vec![1, 2]; 4]);
    let moved = |sim: &Sim| {
        (0..4)
            .filter(|&i| sim.partition("t", i).leader != 1)
            .count()
    };
    sim.expire_all_but(&[2]);
    sim.heartbeat(1);
    for i in 0..4 {
        sim.alter_isr("t", i, vec![2, 1]);
    }
    assert_eq!(moved(&sim), 4);
    let pass = |sim: &mut Sim, ms: u64| {
        sim.now_ms += ms;
        sim.heartbeat(1);
        sim.heartbeat(2);
        sim.tick();
    };
    pass(&mut sim, 0); // starts the clock
    pass(&mut sim, 59_000);
    assert_eq!(moved(&sim), 4, "before the interval");
    sim.controller.config.leader_imbalance_per_broker_percentage = 100;
    pass(&mut sim, 1_000);
    assert_eq!(moved(&sim), 4, "4 of 4 not led is not above 100%");
    sim.controller.config.leader_imbalance_per_broker_percentage = 50;
    pass(&mut sim, 59_000);
    assert_eq!(moved(&sim), 4, "the last check restarted the interval");
    pass(&mut sim, 1_000);
    assert_eq!(moved(&sim), 0, "4 of 4 not led is above 50%");
    sim.assert_replays();
}

/// A replica its broker cannot open (KAFKA_STORAGE_ERROR) leaves the ISR and hands the
/// leadership to another in-sync replica; it may neither rejoin nor lead until its broker
/// registers again, which clears the mark. The last ISR member stays, leaderless.
#[test]
fn offline_replica_leaves_isr_and_leadership() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None), (3, None), (4, None)]);
    sim.create_assigned("t", vec![vec![1, 2, 3]]);
    let offline = |sim: &mut Sim, node_id: i32| match sim.req(ControllerRequest::ReplicaOffline {
        node_id,
        topic: "t".into(),
        partition: 0,
        reason: "cannot open the log: EIO".into(),
    }) {
        ControllerResponse::ReplicaOffline { status } => status,
        other => panic!("unexpected {other:?}"),
    };
    assert!(offline(&mut sim, 1).is_ok());
    let p = sim.partition("t", 0);
    assert_eq!(
        (p.leader, p.isr.clone(), p.leader_epoch),
        (2, vec![2, 3], 1)
    );
    assert_eq!(
        p.offline.get(&1).map(String::as_str),
        Some("cannot open the log: EIO")
    );
    // It may not rejoin the ISR, nor lead by preferred election.
    let (status, _) = sim.alter_isr("t", 0, vec![2, 3, 1]);
    assert_eq!(status.error_code, ErrorCode::IneligibleReplica.code());
    let results = sim.elect_preferred(Some(vec![("t".into(), 0)]));
    assert_eq!(
        results[0].status.error_code,
        ErrorCode::PreferredLeaderNotAvailable.code()
    );
    // A broker holding no replica of the partition is refused.
    assert_eq!(
        offline(&mut sim, 4).error_code,
        ErrorCode::IneligibleReplica.code()
    );
    // The last in-sync replica stays the ISR, with no leader, as Kafka keeps it.
    assert!(offline(&mut sim, 2).is_ok());
    assert!(offline(&mut sim, 3).is_ok());
    let p = sim.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (-1, vec![3]));
    // Registering again (a restart) clears the broker's marks; once unfenced it leads.
    sim.brokers(&[(3, None)]);
    let p = sim.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (3, vec![3]));
    assert_eq!(p.offline.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    sim.assert_replays();
}

/// Found by the model test: when only the replicas being added are in sync (the original
/// ones were shrunk out, then a restart fenced the last), undoing the reassignment, by a
/// cancel or by a new target, is refused rather than leaving an ISR of fenced or stale
/// replicas; letting it complete still works.
#[test]
fn cancel_refused_when_only_new_replicas_are_in_sync() {
    let mut sim = Sim::new();
    sim.brokers(&[(1, None), (2, None), (3, None)]);
    sim.create_assigned("t", vec![vec![1, 2]]);
    assert!(sim.reassign("t", 0, Some(vec![3, 2])).is_ok());
    sim.alter_isr("t", 0, vec![1, 3]);
    sim.req(ControllerRequest::RegisterBroker {
        node_id: 1,
        host: "h".into(),
        port: 1,
        listeners: Vec::new(),
        rack: None,
        shards: 2,
    });
    let p = sim.partition("t", 0);
    assert_eq!((p.leader, p.isr.clone()), (3, vec![3]));
    let refused = ErrorCode::InvalidReplicaAssignment.code();
    assert_eq!(code(&sim.reassign("t", 0, None)), refused);
    assert_eq!(code(&sim.reassign("t", 0, Some(vec![1, 2]))), refused);
    assert_eq!(sim.partition("t", 0), p);
    sim.heartbeat(2);
    let (status, done) = sim.alter_isr("t", 0, vec![3, 2]);
    assert!(status.is_ok(), "{status:?}");
    assert_eq!(
        (done.replicas, done.isr, done.leader),
        (vec![3, 2], vec![3, 2], 3)
    );
    sim.assert_replays();
}

/// One step of the model test below.
#[derive(Debug, Clone)]
enum Step {
    Register(i32),
    Heartbeat(i32),
    /// Time passes with only these brokers heartbeating; then a tick.
    Expire(Vec<i32>),
    Create(u8, i32, i16),
    /// The leader proposes ISR = leader plus the replicas picked by the mask.
    AlterIsr(u8, u8, u8),
    Reassign(u8, u8, Vec<i32>),
    Cancel(u8, u8),
    Preferred,
    Delete(u8),
    /// A broker reports it cannot open its replica of a partition.
    Offline(u8, u8, i32),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    let node = 1..=5i32;
    // Weighted so that most runs keep live brokers and topics and move replicas around,
    // with fencing and deletion rare enough not to end every story early.
    prop_oneof![
        1 => node.clone().prop_map(Step::Register),
        3 => node.prop_map(Step::Heartbeat),
        1 => proptest::sample::subsequence(vec![1, 2, 3, 4, 5], 2..5).prop_map(Step::Expire),
        2 => (0..4u8, 1..4i32, 1..4i16).prop_map(|(t, p, rf)| Step::Create(t, p, rf)),
        5 => (0..3u8, 0..3u8, any::<u8>()).prop_map(|(t, p, m)| Step::AlterIsr(t, p, m)),
        4 => (
            0..3u8,
            0..3u8,
            proptest::sample::subsequence(vec![1, 2, 3, 4], 1..4).prop_shuffle()
        )
            .prop_map(|(t, p, r)| Step::Reassign(t, p, r)),
        1 => (0..3u8, 0..3u8).prop_map(|(t, p)| Step::Cancel(t, p)),
        1 => Just(Step::Preferred),
        1 => (0..4u8).prop_map(Step::Delete),
        1 => (0..3u8, 0..3u8, 1..=5i32).prop_map(|(t, p, n)| Step::Offline(t, p, n)),
    ]
}

/// The invariants every applied catalog keeps, whatever happened before.
fn check_invariants(c: &Catalog, epochs: &mut BTreeMap<(u128, usize), (i32, i32)>) {
    for t in c.topics.values() {
        for (i, p) in t.partitions.iter().enumerate() {
            let replicas: BTreeSet<i32> = p.replicas.iter().copied().collect();
            assert_eq!(replicas.len(), p.replicas.len(), "duplicate replica {p:?}");
            assert_eq!(p.shards.len(), p.replicas.len(), "{p:?}");
            assert!(!p.isr.is_empty(), "empty ISR {p:?}");
            assert!(p.isr.iter().all(|r| replicas.contains(r)), "{p:?}");
            assert!(p.adding.iter().all(|r| replicas.contains(r)), "{p:?}");
            assert!(p.removing.iter().all(|r| replicas.contains(r)), "{p:?}");
            assert!(p.adding.iter().all(|r| !p.removing.contains(r)), "{p:?}");
            // A fenced broker stays in an ISR only as its last member.
            if p.isr.len() > 1 {
                assert!(
                    p.isr.iter().all(|r| is_unfenced(c, *r)),
                    "fenced in ISR {p:?}"
                );
            }
            if p.leader != -1 {
                assert!(p.isr.contains(&p.leader), "leader outside ISR {p:?}");
                assert!(is_unfenced(c, p.leader), "fenced leader {p:?}");
                assert!(!p.offline.contains_key(&p.leader), "offline leader {p:?}");
            }
            // An offline replica is a replica, and stays in an ISR only as its last member.
            assert!(p.offline.keys().all(|r| replicas.contains(r)), "{p:?}");
            if p.isr.len() > 1 {
                assert!(
                    p.isr.iter().all(|r| !p.offline.contains_key(r)),
                    "offline in ISR {p:?}"
                );
            }
            let before = epochs
                .insert((t.id, i), (p.leader_epoch, p.partition_epoch))
                .unwrap_or((0, 0));
            assert!(
                p.leader_epoch >= before.0 && p.partition_epoch >= before.1,
                "{p:?}"
            );
        }
    }
}

proptest::proptest! {
    // Failures are not written to proptest-regressions/: the ones found are kept as
    // unit tests (`cancel_refused_when_only_new_replicas_are_in_sync`).
    #![proptest_config(proptest::test_runner::Config {
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })]

    /// Any sequence of registrations, heartbeats, expiries, topic creations, ISR
    /// changes, reassignments, cancellations, elections and deletions keeps every
    /// partition well formed (ISR within the replicas and never empty, a leader in the
    /// ISR and unfenced, shards parallel to replicas), never moves an epoch back, and
    /// replays from its records to the same catalog.
    #[test]
    fn model_keeps_invariants(steps in proptest::collection::vec(step(), 1..60)) {
        // Start from a populated cluster so most steps act on something.
        let mut sim = Sim::new();
        sim.brokers(&[(1, None), (2, None), (3, None), (4, None)]);
        sim.create(topic("t0", 3, 2, None));
        sim.create(topic("t1", 2, 3, None));
        let mut epochs = BTreeMap::new();
        let name = |t: u8| format!("t{t}");
        for s in steps {
            match s {
                Step::Register(n) => {
                    sim.req(ControllerRequest::RegisterBroker {
                        node_id: n,
                        host: "h".into(),
                        port: 1,
                        listeners: Vec::new(),
                        rack: None,
                        shards: 2,
                    });
                }
                Step::Heartbeat(n) => {
                    sim.req(ControllerRequest::BrokerHeartbeat { node_id: n });
                }
                Step::Expire(alive) => {
                    sim.now_ms += TIMEOUT_MS + 1;
                    for n in alive {
                        sim.req(ControllerRequest::BrokerHeartbeat { node_id: n });
                    }
                    sim.tick();
                }
                Step::Create(t, p, rf) => {
                    sim.create(topic(&name(t), p, rf, None));
                }
                Step::AlterIsr(t, p, mask) => {
                    let Some(part) = sim
                        .state
                        .topic(&name(t))
                        .and_then(|x| x.partitions.get(p as usize))
                        .cloned()
                    else {
                        continue;
                    };
                    let isr: Vec<i32> = part
                        .replicas
                        .iter()
                        .enumerate()
                        .filter(|(i, r)| **r == part.leader || mask & (1 << i) != 0)
                        .map(|(_, r)| *r)
                        .collect();
                    sim.alter_isr(&name(t), p as usize, isr);
                }
                Step::Reassign(t, p, r) => {
                    if sim.state.topic(&name(t)).is_some() {
                        sim.reassign(&name(t), i32::from(p), Some(r));
                    }
                }
                Step::Cancel(t, p) => {
                    if sim.state.topic(&name(t)).is_some() {
                        sim.reassign(&name(t), i32::from(p), None);
                    }
                }
                Step::Preferred => {
                    sim.elect_preferred(None);
                }
                Step::Delete(t) => {
                    sim.req(ControllerRequest::DeleteTopics { names: vec![name(t)] });
                }
                Step::Offline(t, p, n) => {
                    sim.req(ControllerRequest::ReplicaOffline {
                        node_id: n,
                        topic: name(t),
                        partition: i32::from(p),
                        reason: "cannot open".into(),
                    });
                }
            }
            check_invariants(&sim.state, &mut epochs);
        }
        sim.assert_replays();
    }
}

/// CreateAcls records each new binding once (a repeat, in the request or already stored,
/// succeeds and records nothing); DeleteAcls removes what each filter matches, reporting a
/// binding under the first filter only, and records nothing for a filter matching nothing.
#[test]
fn acls_are_created_once_and_deleted_by_filter() {
    use crate::security::acl::{AclBinding, AclBindingFilter};
    let mut sim = Sim::new();
    let read = AclBinding::from_wire(2, "pay-", 4, "User:alice", "*", 3, 3).expect("valid");
    let write = AclBinding::from_wire(2, "pay-", 4, "User:alice", "*", 4, 3).expect("valid");
    let before = sim.log.len();
    let resp = sim.req(ControllerRequest::CreateAcls {
        bindings: vec![read.clone(), write.clone(), read.clone()],
    });
    let ControllerResponse::CreateAcls { results } = resp else {
        panic!("{resp:?}")
    };
    assert!(results.len() == 3 && results.iter().all(Status::is_ok));
    assert_eq!(sim.log.len() - before, 2);
    sim.req(ControllerRequest::CreateAcls {
        bindings: vec![read.clone()],
    });
    assert_eq!(
        sim.log.len() - before,
        2,
        "an existing binding records nothing"
    );
    assert_eq!(sim.state.acls.len(), 2);

    let by_op = AclBindingFilter::from_wire(2, Some("pay-"), 4, None, None, 3, 1).expect("valid");
    let resp = sim.req(ControllerRequest::DeleteAcls {
        filters: vec![by_op, AclBindingFilter::any(), AclBindingFilter::any()],
    });
    let ControllerResponse::DeleteAcls { results } = resp else {
        panic!("{resp:?}")
    };
    assert_eq!(results, vec![vec![read], vec![write], vec![]]);
    assert!(sim.state.acls.is_empty());
    let logged = sim.log.len();
    sim.req(ControllerRequest::DeleteAcls {
        filters: vec![AclBindingFilter::any()],
    });
    assert_eq!(sim.log.len(), logged);
}
