//! State-machine tests under a simulated clock: every test drives `Coordinator` through
//! `handle_*` and `tick` with explicit `now_ms` values and inspects the outputs.
use bytes::Bytes;

use super::*;
use crate::clock::Now;

const SESSION: i32 = 10_000;
const REBALANCE: i32 = 30_000;

struct Sim {
    c: Coordinator,
    now: i64,
    next_request: RequestId,
    out: Vec<Output>,
}

impl Sim {
    fn new() -> Self {
        Self::with_delay(100)
    }

    /// Lets the initial rebalance delay (and its extensions) run out.
    fn settle(&mut self) {
        for _ in 0..5 {
            self.advance(100);
        }
    }
    fn with_delay(delay: i64) -> Self {
        Self {
            c: Coordinator::new(GroupConfig {
                initial_rebalance_delay_ms: delay,
                ..GroupConfig::default()
            }),
            now: 1_000_000,
            next_request: 1,
            out: Vec::new(),
        }
    }

    fn join_args(member: &str, instance: Option<&str>, protocols: &[&str]) -> JoinArgs {
        JoinArgs {
            group_id: "g".into(),
            member_id: member.into(),
            group_instance_id: instance.map(str::to_string),
            client_id: "client".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: SESSION,
            rebalance_timeout_ms: REBALANCE,
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}"))))
                .collect(),
            require_known_member_id: true,
            supports_skip_assignment: false,
        }
    }

    /// Starts a join; returns its request id.
    fn join(&mut self, args: JoinArgs) -> RequestId {
        let r = self.next_request;
        self.next_request += 1;
        self.c
            .handle_join(r, 7, args, Now::at(self.now), &mut self.out);
        r
    }

    fn sync(&mut self, member: &str, generation: i32, assignments: &[(&str, &str)]) -> RequestId {
        let r = self.next_request;
        self.next_request += 1;
        let args = SyncArgs {
            group_id: "g".into(),
            member_id: member.into(),
            group_instance_id: None,
            generation_id: generation,
            protocol_type: None,
            protocol_name: None,
            assignments: assignments
                .iter()
                .map(|(m, a)| (m.to_string(), Bytes::from(a.to_string())))
                .collect(),
        };
        self.c
            .handle_sync(r, args, Now::at(self.now), &mut self.out);
        r
    }

    fn heartbeat(&mut self, member: &str, generation: i32) -> Option<ErrorCode> {
        self.c.handle_heartbeat(
            HeartbeatArgs {
                group_id: "g".into(),
                member_id: member.into(),
                group_instance_id: None,
                generation_id: generation,
            },
            Now::at(self.now),
        )
    }

    fn advance(&mut self, ms: i64) {
        self.now += ms;
        self.c.tick(Now::at(self.now), &mut self.out);
    }

    /// Takes the join answer for `r`, if produced.
    fn join_reply(&mut self, r: RequestId) -> Option<JoinResult> {
        let i = self
            .out
            .iter()
            .position(|o| matches!(o, Output::Join(id, _) if *id == r))?;
        match self.out.remove(i) {
            Output::Join(_, res) => Some(res),
            _ => None,
        }
    }

    fn sync_reply(&mut self, r: RequestId) -> Option<SyncResult> {
        let i = self
            .out
            .iter()
            .position(|o| matches!(o, Output::Sync(id, _) if *id == r))?;
        match self.out.remove(i) {
            Output::Sync(_, res) => Some(res),
            _ => None,
        }
    }

    /// Joins a new dynamic member through MEMBER_ID_REQUIRED; returns (member id, join request).
    fn join_new(&mut self) -> (String, RequestId) {
        let r = self.join(Self::join_args("", None, &["range"]));
        let res = self.join_reply(r).expect("immediate answer");
        assert_eq!(res.error, Some(ErrorCode::MemberIdRequired));
        assert!(!res.member_id.is_empty());
        let r2 = self.join(Self::join_args(&res.member_id, None, &["range"]));
        (res.member_id, r2)
    }

    /// Brings a group of `n` dynamic members to Stable; returns the member ids and generation.
    fn stable_group(&mut self, n: usize) -> (Vec<String>, i32) {
        let mut joins = Vec::new();
        for _ in 0..n {
            joins.push(self.join_new());
        }
        self.settle();
        let mut generation = -1;
        let mut leader = String::new();
        for (id, r) in &joins {
            let res = self.join_reply(*r).expect("join completes");
            assert_eq!(res.error, None, "{id}");
            generation = res.generation_id;
            leader = res.leader.clone();
        }
        let ids: Vec<String> = joins.iter().map(|(id, _)| id.clone()).collect();
        let assignments: Vec<(String, String)> = ids
            .iter()
            .map(|id| (id.clone(), format!("asg-{id}")))
            .collect();
        let refs: Vec<(&str, &str)> = assignments
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let mut syncs = Vec::new();
        for id in &ids {
            if *id != leader {
                syncs.push(self.sync(id, generation, &[]));
            }
        }
        syncs.push(self.sync(&leader, generation, &refs));
        for s in syncs {
            assert_eq!(self.sync_reply(s).expect("sync answered").error, None);
        }
        assert_eq!(self.c.group_state("g"), GroupState::Stable);
        (ids, generation)
    }

    fn appends(&mut self) -> Vec<LogRecord> {
        let mut records = Vec::new();
        self.out.retain(|o| match o {
            Output::Append { records: r, .. } => {
                records.extend(r.iter().cloned());
                false
            }
            _ => true,
        });
        records
    }
}

/// Kafka's hash: "abs(hashCode) % n" with Java's String.hashCode.
#[test]
fn partition_matches_java() {
    assert_eq!(java_string_hashcode(""), 0);
    assert_eq!(java_string_hashcode("hello"), 99_162_322);
    assert_eq!(java_string_hashcode("polygenelubricants"), i32::MIN);
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    assert_eq!(partition_for("hello", 50), 99_162_322 % 50);
}

/// A single member goes Empty → PreparingRebalance → CompletingRebalance → Stable and gets
/// the assignment it proposed as leader.
#[test]
fn single_member_join_sync_heartbeat() {
    let mut s = Sim::new();
    let (id, r) = s.join_new();
    assert!(
        s.join_reply(r).is_none(),
        "initial delayed join waits for the tick"
    );
    assert_eq!(s.c.group_state("g"), GroupState::PreparingRebalance);
    s.settle();
    let res = s.join_reply(r).expect("join completes");
    assert_eq!(res.generation_id, 1);
    assert_eq!(res.leader, id);
    assert_eq!(res.protocol_name.as_deref(), Some("range"));
    assert_eq!(res.members.len(), 1);
    assert_eq!(s.heartbeat(&id, 1), None, "heartbeat ok while completing");
    let sr = s.sync(&id, 1, &[(&id, "A")]);
    let sync = s.sync_reply(sr).expect("leader sync answered");
    assert_eq!(sync.assignment, Bytes::from("A"));
    assert_eq!(s.c.group_state("g"), GroupState::Stable);
    assert_eq!(s.heartbeat(&id, 1), None);
    assert_eq!(s.heartbeat(&id, 0), Some(ErrorCode::IllegalGeneration));
    assert_eq!(s.heartbeat("nobody", 1), Some(ErrorCode::UnknownMemberId));
    assert!(
        !s.appends().is_empty(),
        "group metadata persisted after sync"
    );
}

/// v0-v3 joins get a member id at once; unknown member ids are refused.
#[test]
fn member_id_required_only_for_v4() {
    let mut s = Sim::new();
    let mut args = Sim::join_args("", None, &["range"]);
    args.require_known_member_id = false;
    let r = s.join(args);
    s.settle();
    let res = s.join_reply(r).expect("completes");
    assert_eq!(res.error, None);
    assert!(!res.member_id.is_empty());
    let r = s.join(Sim::join_args("made-up", None, &["range"]));
    assert_eq!(
        s.join_reply(r).expect("answered").error,
        Some(ErrorCode::UnknownMemberId)
    );
}

/// A second member joining a stable group triggers a rebalance: the first member's heartbeat
/// says REBALANCE_IN_PROGRESS, both rejoin, the generation advances.
#[test]
fn rebalance_on_join() {
    let mut s = Sim::new();
    let (ids, generation) = s.stable_group(1);
    let (b, rb) = s.join_new();
    assert_eq!(s.c.group_state("g"), GroupState::PreparingRebalance);
    assert_eq!(
        s.heartbeat(&ids[0], generation),
        Some(ErrorCode::RebalanceInProgress)
    );
    let ra = s.join(Sim::join_args(&ids[0], None, &["range"]));
    let a_res = s.join_reply(ra).expect("all joined: completes at once");
    let b_res = s.join_reply(rb).expect("completes");
    assert_eq!(a_res.generation_id, generation + 1);
    assert_eq!(b_res.generation_id, generation + 1);
    assert_eq!(a_res.leader, ids[0]);
    assert_eq!(a_res.members.len(), 2, "leader sees every member");
    assert!(b_res.members.is_empty());
    assert_eq!(b, b_res.member_id);
}

/// A member that leaves triggers a rebalance; one that stops heartbeating is expired after
/// its session timeout and the survivors rebalance without it.
#[test]
fn rebalance_on_leave_and_expiry() {
    let mut s = Sim::new();
    let (ids, generation) = s.stable_group(3);
    let res = s.c.handle_leave(
        "g",
        vec![LeaveMember {
            member_id: ids[2].clone(),
            group_instance_id: None,
        }],
        Now::at(s.now),
        &mut s.out,
    );
    assert_eq!(res.members[0].2, None);
    assert_eq!(s.c.group_state("g"), GroupState::PreparingRebalance);
    let r0 = s.join(Sim::join_args(&ids[0], None, &["range"]));
    let r1 = s.join(Sim::join_args(&ids[1], None, &["range"]));
    let g2 = s.join_reply(r0).expect("done").generation_id;
    assert_eq!(g2, generation + 1);
    s.join_reply(r1).expect("done");
    let a = s.sync(&ids[1], g2, &[]);
    let b = s.sync(&ids[0], g2, &[(&ids[0], "x"), (&ids[1], "y")]);
    assert_eq!(s.sync_reply(a).expect("a").assignment, Bytes::from("y"));
    s.sync_reply(b).expect("b");
    // ids[1] stops heartbeating; ids[0] keeps going.
    for _ in 0..12 {
        s.advance(1000);
        if s.c.group_state("g") == GroupState::Stable {
            assert_eq!(s.heartbeat(&ids[0], g2), None);
        }
    }
    assert_eq!(s.c.group_state("g"), GroupState::PreparingRebalance);
    assert_eq!(
        s.heartbeat(&ids[0], g2),
        Some(ErrorCode::RebalanceInProgress)
    );
    let r = s.join(Sim::join_args(&ids[0], None, &["range"]));
    let res = s.join_reply(r).expect("sole survivor completes the join");
    assert_eq!(res.members.len(), 1);
    assert_eq!(res.generation_id, g2 + 1);
}

/// A member that does not rejoin within the rebalance timeout is dropped from the new
/// generation.
#[test]
fn rebalance_timeout_removes_laggards() {
    let mut s = Sim::new();
    let (ids, _) = s.stable_group(2);
    let (_c, rc) = s.join_new();
    let r0 = s.join(Sim::join_args(&ids[0], None, &["range"]));
    // ids[1] keeps heartbeating but never rejoins.
    for _ in 0..(REBALANCE / 1000 + 1) {
        s.advance(1000);
        let _ = s.heartbeat(&ids[1], 1);
    }
    let res = s.join_reply(r0).expect("timeout completes the join");
    assert_eq!(res.members.len(), 2);
    s.join_reply(rc).expect("new member answered");
    assert_eq!(s.heartbeat(&ids[1], 1), Some(ErrorCode::UnknownMemberId));
}

/// KIP-345: a static member restarting (empty member id, same instance id) in a stable group
/// gets the current generation and its old assignment, with no rebalance; its old member id
/// is fenced.
#[test]
fn static_member_rejoin_without_rebalance() {
    let mut s = Sim::new();
    // Two static members.
    let ra = s.join(Sim::join_args("", Some("ia"), &["range"]));
    let rb = s.join(Sim::join_args("", Some("ib"), &["range"]));
    s.settle();
    let a = s.join_reply(ra).expect("a");
    let b = s.join_reply(rb).expect("b");
    assert_eq!(a.error, None, "static members skip MEMBER_ID_REQUIRED");
    let generation = a.generation_id;
    let (leader, follower) = if a.leader == a.member_id {
        (a, b)
    } else {
        (b, a)
    };
    let sf = s.sync(&follower.member_id, generation, &[]);
    let sl = s.sync(
        &leader.member_id,
        generation,
        &[(&leader.member_id, "L"), (&follower.member_id, "F")],
    );
    s.sync_reply(sf).expect("f");
    s.sync_reply(sl).expect("l");
    let follower_instance = if follower.member_id.starts_with("client") {
        // Instance ids were given in join order; find the follower's.
        if leader.member_id == s.c.describe("g").members[0].member_id {
            "ib"
        } else {
            "ia"
        }
    } else {
        unreachable!()
    };
    // The follower restarts.
    let r = s.join(Sim::join_args("", Some(follower_instance), &["range"]));
    let res = s.join_reply(r).expect("answered at once");
    assert_eq!(res.error, None);
    assert_eq!(res.generation_id, generation, "no new generation");
    assert_ne!(res.member_id, follower.member_id);
    assert_eq!(s.c.group_state("g"), GroupState::Stable);
    let mut args = SyncArgs {
        group_id: "g".into(),
        member_id: res.member_id.clone(),
        group_instance_id: Some(follower_instance.into()),
        generation_id: generation,
        protocol_type: None,
        protocol_name: None,
        assignments: vec![],
    };
    let r = 999;
    s.c.handle_sync(r, args.clone(), Now::at(s.now), &mut s.out);
    assert_eq!(s.sync_reply(r).expect("sync").assignment, Bytes::from("F"));
    assert_eq!(s.heartbeat(&leader.member_id, generation), None);
    // The old incarnation is fenced.
    args.member_id = follower.member_id.clone();
    s.c.handle_sync(1000, args, Now::at(s.now), &mut s.out);
    assert_eq!(
        s.sync_reply(1000).expect("fenced").error,
        Some(ErrorCode::FencedInstanceId)
    );
}

/// Protocol selection by vote, and INCONSISTENT_GROUP_PROTOCOL for a join that shares no
/// protocol or a different protocol type.
#[test]
fn protocol_selection_and_inconsistent_protocol() {
    let mut s = Sim::new();
    let ra = s.join(Sim::join_args("", Some("a"), &["range", "roundrobin"]));
    let rb = s.join(Sim::join_args("", Some("b"), &["roundrobin", "range"]));
    let rc = s.join(Sim::join_args("", Some("c"), &["roundrobin"]));
    s.settle();
    for r in [ra, rb, rc] {
        assert_eq!(
            s.join_reply(r).expect("done").protocol_name.as_deref(),
            Some("roundrobin")
        );
    }
    let r = s.join(Sim::join_args("", None, &["sticky"]));
    assert_eq!(
        s.join_reply(r).expect("x").error,
        Some(ErrorCode::InconsistentGroupProtocol)
    );
    let mut args = Sim::join_args("", None, &["roundrobin"]);
    args.protocol_type = "connect".into();
    let r = s.join(args);
    assert_eq!(
        s.join_reply(r).expect("x").error,
        Some(ErrorCode::InconsistentGroupProtocol)
    );
    let mut args = Sim::join_args("", None, &[]);
    args.group_id = "fresh".into();
    let r = s.join(args);
    assert_eq!(
        s.join_reply(r).expect("x").error,
        Some(ErrorCode::InconsistentGroupProtocol),
        "no protocols at all"
    );
    assert_eq!(s.c.group_state("g"), GroupState::CompletingRebalance);
}

/// Session timeouts outside the configured bounds are refused.
#[test]
fn invalid_session_timeout() {
    let mut s = Sim::new();
    let mut args = Sim::join_args("", None, &["range"]);
    args.session_timeout_ms = 10;
    let r = s.join(args);
    assert_eq!(
        s.join_reply(r).expect("x").error,
        Some(ErrorCode::InvalidSessionTimeout)
    );
}

/// The initial delay waits for more members, then completes with all of them in one
/// generation.
#[test]
fn initial_rebalance_delay_gathers_members() {
    let mut s = Sim::with_delay(3000);
    let (_a, ra) = s.join_new();
    s.advance(1000);
    let (_b, rb) = s.join_new();
    s.advance(2500);
    assert!(
        s.join_reply(ra).is_none(),
        "extended: a member arrived during the delay"
    );
    s.advance(3000);
    let a = s.join_reply(ra).expect("a done");
    let b = s.join_reply(rb).expect("b done");
    assert_eq!(a.generation_id, 1);
    assert_eq!(b.generation_id, 1);
}

/// Commits are validated against member and generation, fetched back, and deleted.
#[test]
fn offset_commit_fetch_delete() {
    let mut s = Sim::new();
    let (ids, generation) = s.stable_group(1);
    let commit = |member: &str, generation: i32| CommitArgs {
        group_id: "g".into(),
        member_id: member.into(),
        group_instance_id: None,
        generation_id: generation,
        offsets: vec![CommitOffset {
            topic: "t".into(),
            partition: 0,
            offset: 42,
            leader_epoch: -1,
            metadata: Some("m".into()),
        }],
    };
    assert_eq!(
        s.c.handle_offset_commit(7, commit(&ids[0], generation + 1), Now::at(s.now))
            .err(),
        Some(ErrorCode::IllegalGeneration)
    );
    assert_eq!(
        s.c.handle_offset_commit(7, commit("ghost", generation), Now::at(s.now))
            .err(),
        Some(ErrorCode::UnknownMemberId)
    );
    let plan =
        s.c.handle_offset_commit(7, commit(&ids[0], generation), Now::at(s.now))
            .expect("accepted");
    assert_eq!(plan.results, vec![None]);
    assert_eq!(plan.records.len(), 1);
    // Not visible until durable.
    assert_eq!(s.c.handle_offset_fetch("g", None, false).len(), 0);
    s.c.apply_commit("g", 7, plan.accepted, 1, Now::at(s.now));
    let fetched =
        s.c.handle_offset_fetch("g", Some(vec![("t".into(), 0), ("t".into(), 1)]), false);
    assert_eq!(fetched[0].offset, 42);
    assert_eq!(fetched[1].offset, -1);
    // The group is subscribed (stable consumer group): its topic's offsets cannot be deleted.
    // Our test metadata is not a real subscription, so deletion is allowed for "t".
    let res =
        s.c.handle_offset_delete("g", vec![("t".into(), 0)], &mut s.out)
            .expect("group exists");
    assert_eq!(res, vec![None]);
    assert_eq!(s.c.handle_offset_fetch("g", None, false).len(), 0);
    assert_eq!(
        s.c.handle_offset_delete("nope", vec![], &mut s.out),
        Err(ErrorCode::GroupIdNotFound)
    );
    // A simple (generation -1) commit to an unknown group creates it.
    let mut simple = commit("", -1);
    simple.group_id = "simple".into();
    assert!(s.c.handle_offset_commit(7, simple, Now::at(s.now)).is_ok());
    assert_eq!(s.c.group_state("simple"), GroupState::Empty);
}

/// DeleteGroups refuses a group with members and deletes an empty one.
#[test]
fn delete_group() {
    let mut s = Sim::new();
    let (ids, _) = s.stable_group(1);
    assert_eq!(
        s.c.handle_delete_group("g", &mut s.out),
        Some(ErrorCode::NonEmptyGroup)
    );
    s.c.handle_leave(
        "g",
        vec![LeaveMember {
            member_id: ids[0].clone(),
            group_instance_id: None,
        }],
        Now::at(s.now),
        &mut s.out,
    );
    assert_eq!(s.c.group_state("g"), GroupState::Empty);
    s.appends();
    assert_eq!(s.c.handle_delete_group("g", &mut s.out), None);
    assert_eq!(s.c.group_state("g"), GroupState::Dead);
    let records = s.appends();
    assert!(records.iter().all(|r| r.value.is_none()), "tombstones only");
    assert_eq!(
        s.c.handle_delete_group("g", &mut s.out),
        Some(ErrorCode::GroupIdNotFound)
    );
}

/// What the coordinator writes, replayed into a fresh coordinator (with duplicates, as the
/// uncompacted log holds them), gives back the same offsets and membership.
#[test]
fn load_from_records_round_trip() {
    let mut s = Sim::new();
    let (ids, generation) = s.stable_group(2);
    for offset in [5, 9] {
        let plan =
            s.c.handle_offset_commit(
                7,
                CommitArgs {
                    group_id: "g".into(),
                    member_id: ids[0].clone(),
                    group_instance_id: None,
                    generation_id: generation,
                    offsets: vec![CommitOffset {
                        topic: "t".into(),
                        partition: 3,
                        offset,
                        leader_epoch: 1,
                        metadata: None,
                    }],
                },
                Now::at(s.now),
            )
            .expect("ok");
        s.out.push(Output::Append {
            partition: 7,
            records: plan.records.clone(),
        });
        s.c.apply_commit("g", 7, plan.accepted, offset, Now::at(s.now));
    }
    // Another group, created then deleted: its tombstones must win on replay.
    let mut gone = Sim::join_args("", None, &["range"]);
    gone.group_id = "gone".into();
    gone.require_known_member_id = false;
    let r = s.join(gone);
    s.settle();
    let gm = s.join_reply(r).expect("gone joined").member_id;
    s.c.handle_leave(
        "gone",
        vec![LeaveMember {
            member_id: gm,
            group_instance_id: None,
        }],
        Now::at(s.now),
        &mut s.out,
    );
    assert_eq!(s.c.handle_delete_group("gone", &mut s.out), None);
    let records = s.appends();
    let mut loaded = Coordinator::new(GroupConfig::default());
    for (i, r) in records.iter().enumerate() {
        loaded
            .load_record(7, i as i64, None, &r.key, r.value.as_deref(), Now::at(5))
            .expect("decodes");
    }
    loaded.finish_load(7, Now::at(5));
    assert_eq!(loaded.group_state("g"), GroupState::Stable);
    assert_eq!(loaded.group_state("gone"), GroupState::Dead);
    assert_eq!(loaded.generation("g"), generation);
    let f = loaded.handle_offset_fetch("g", None, false);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].offset, 9, "last write wins");
    let d = loaded.describe("g");
    assert_eq!(d.members.len(), 2);
    assert!(d.members.iter().all(|m| m.assignment.starts_with(b"asg-")));
    // A loaded member can keep heartbeating with its generation.
    assert_eq!(
        loaded.handle_heartbeat(
            HeartbeatArgs {
                group_id: "g".into(),
                member_id: ids[1].clone(),
                group_instance_id: None,
                generation_id: generation,
            },
            Now::at(6),
        ),
        None
    );
    // Garbage is an error, not a panic.
    assert!(loaded
        .load_record(7, 0, None, &[0, 1, 0], Some(&[1]), Now::at(5))
        .is_err());
}

/// Offsets of a group Empty for longer than the retention are expired with tombstones.
#[test]
fn offset_retention_for_empty_groups() {
    let mut s = Sim::new();
    let plan =
        s.c.handle_offset_commit(
            7,
            CommitArgs {
                group_id: "g".into(),
                member_id: String::new(),
                group_instance_id: None,
                generation_id: -1,
                offsets: vec![CommitOffset {
                    topic: "t".into(),
                    partition: 0,
                    offset: 1,
                    leader_epoch: -1,
                    metadata: None,
                }],
            },
            Now::at(s.now),
        )
        .expect("simple commit");
    s.c.apply_commit("g", 7, plan.accepted, 1, Now::at(s.now));
    s.c.expire_offsets(Now::at(s.now + 1000), &mut s.out);
    assert_eq!(s.c.handle_offset_fetch("g", None, false).len(), 1);
    let retention = s.c.config().offsets_retention_ms;
    s.c.expire_offsets(Now::at(s.now + retention + 1), &mut s.out);
    assert_eq!(s.c.handle_offset_fetch("g", None, false).len(), 0);
    let records = s.appends();
    assert!(!records.is_empty() && records.iter().all(|r| r.value.is_none()));
    assert_eq!(s.c.group_state("g"), GroupState::Dead);
}

/// SyncGroup from a stale generation or an unknown member, and Sync during a rebalance.
#[test]
fn sync_errors() {
    let mut s = Sim::new();
    let (ids, generation) = s.stable_group(1);
    let r = s.sync(&ids[0], generation - 1, &[]);
    assert_eq!(
        s.sync_reply(r).expect("x").error,
        Some(ErrorCode::IllegalGeneration)
    );
    let r = s.sync("ghost", generation, &[]);
    assert_eq!(
        s.sync_reply(r).expect("x").error,
        Some(ErrorCode::UnknownMemberId)
    );
    let (_b, _rb) = s.join_new();
    let r = s.sync(&ids[0], generation, &[]);
    assert_eq!(
        s.sync_reply(r).expect("x").error,
        Some(ErrorCode::RebalanceInProgress)
    );
}

/// KIP-345/KIP-814: a static *leader* restarting in a stable group is told the old leader id
/// before v9 (so it does not run an assignment that would never be propagated), and with v9
/// its new id plus skip_assignment and the member list; either way no rebalance happens.
#[test]
fn static_leader_rejoin() {
    for supports_skip in [false, true] {
        let mut s = Sim::new();
        let r = s.join(Sim::join_args("", Some("lead"), &["range"]));
        s.settle();
        let first = s.join_reply(r).expect("joined");
        let generation = first.generation_id;
        let sr = s.sync(&first.member_id, generation, &[(&first.member_id, "L")]);
        s.sync_reply(sr).expect("synced");
        let mut args = Sim::join_args("", Some("lead"), &["range"]);
        args.supports_skip_assignment = supports_skip;
        let r = s.join(args);
        let res = s.join_reply(r).expect("answered at once");
        assert_eq!(res.error, None);
        assert_eq!(res.generation_id, generation);
        assert_eq!(s.c.group_state("g"), GroupState::Stable);
        if supports_skip {
            assert_eq!(res.leader, res.member_id);
            assert!(res.skip_assignment);
            assert_eq!(res.members.len(), 1);
        } else {
            assert_eq!(res.leader, first.member_id, "the old leader id");
            assert!(!res.skip_assignment && res.members.is_empty());
        }
        assert_eq!(
            s.heartbeat(&first.member_id, generation),
            Some(ErrorCode::UnknownMemberId),
            "the old member id is gone"
        );
    }
}

/// LeaveGroup by instance id removes a static member; a mismatched member id for a known
/// instance is fenced; an unknown member gets UNKNOWN_MEMBER_ID.
#[test]
fn leave_errors_and_static_leave() {
    let mut s = Sim::new();
    let r = s.join(Sim::join_args("", Some("i1"), &["range"]));
    s.settle();
    let m = s.join_reply(r).expect("joined");
    let leave = |s: &mut Sim, member: &str, instance: Option<&str>| {
        s.c.handle_leave(
            "g",
            vec![LeaveMember {
                member_id: member.into(),
                group_instance_id: instance.map(str::to_string),
            }],
            Now::at(s.now),
            &mut s.out,
        )
        .members[0]
            .2
    };
    assert_eq!(
        leave(&mut s, "other", Some("i1")),
        Some(ErrorCode::FencedInstanceId)
    );
    assert_eq!(
        leave(&mut s, "ghost", None),
        Some(ErrorCode::UnknownMemberId)
    );
    assert_eq!(leave(&mut s, &m.member_id, Some("i1")), None);
    assert_eq!(s.c.group_state("g"), GroupState::Empty);
    // ListGroups filters: by state, and by KIP-848 type (all groups here are "classic").
    assert_eq!(s.c.list(&["Empty".into()], &[]).len(), 1);
    assert_eq!(s.c.list(&["Stable".into()], &[]).len(), 0);
    assert_eq!(s.c.list(&[], &["classic".into()]).len(), 1);
    assert_eq!(s.c.list(&[], &["consumer".into()]).len(), 0);
}

/// Sessions run on monotonic time: a wall-clock step of a day forward (NTP, an operator)
/// expires no member, while the same step of monotonic time expires them all.
#[test]
fn wall_clock_step_expires_no_session() {
    let mut s = Sim::new();
    let (ids, generation) = s.stable_group(2);
    let day_ms = 24 * 3600 * 1000;
    let stepped = Now {
        monotonic_ms: s.now + 1,
        wall_ms: s.now + day_ms,
    };
    s.c.tick(stepped, &mut s.out);
    assert_eq!(s.c.group_state("g"), GroupState::Stable);
    for id in &ids {
        assert_eq!(s.heartbeat(id, generation), None, "{id}");
    }
    s.advance(i64::from(SESSION) + 1);
    assert_ne!(s.c.group_state("g"), GroupState::Stable);
}

// ---------------------------------------------------------------- transactional offsets

use crate::protocol::control::TxnOutcome;
use crate::protocol::producer::{ProducerEpoch, ProducerId};

fn txn_args(group: &str, producer: i64, offsets: &[(i32, i64)]) -> TxnCommitArgs {
    TxnCommitArgs {
        group_id: group.into(),
        member_id: String::new(),
        group_instance_id: None,
        generation_id: -1,
        producer_id: ProducerId(producer),
        producer_epoch: ProducerEpoch(0),
        offsets: offsets
            .iter()
            .map(|&(partition, offset)| CommitOffset {
                topic: "t".into(),
                partition,
                offset,
                leader_epoch: -1,
                metadata: None,
            })
            .collect(),
    }
}

fn simple_commit(group: &str, partition: i32, offset: i64) -> CommitArgs {
    CommitArgs {
        group_id: group.into(),
        member_id: String::new(),
        group_instance_id: None,
        generation_id: -1,
        offsets: vec![CommitOffset {
            topic: "t".into(),
            partition,
            offset,
            leader_epoch: -1,
            metadata: None,
        }],
    }
}

/// (offset, error) OffsetFetch answers for partition `p` of topic "t".
fn fetched(c: &Coordinator, group: &str, p: i32, require_stable: bool) -> (i64, Option<ErrorCode>) {
    let f = c.handle_offset_fetch(group, Some(vec![("t".into(), p)]), require_stable);
    let f = f.first().expect("one partition asked, one answered");
    (f.offset, f.error)
}

/// Offsets committed in a transaction are pending: OffsetFetch with require_stable answers
/// UNSTABLE_OFFSET_COMMIT, without it the last committed offset; a COMMIT marker makes them
/// the committed ones, an ABORT drops them, and markers of other producers or partitions
/// change nothing.
#[test]
fn txn_offsets_are_pending_until_the_marker() {
    let mut s = Sim::new();
    let now = Now::at(s.now);
    let plan =
        s.c.handle_offset_commit(7, simple_commit("g", 0, 5), now)
            .expect("ok");
    s.c.apply_commit("g", 7, plan.accepted, 10, now);
    let plan =
        s.c.handle_txn_offset_commit(7, txn_args("g", 1, &[(0, 42), (1, 43)]), now)
            .expect("accepted");
    assert_eq!(plan.results, vec![None, None]);
    assert_eq!(plan.records.len(), 2);
    // Pending from the moment it is accepted, before its records are durable.
    assert_eq!(
        fetched(&s.c, "g", 0, true),
        (-1, Some(ErrorCode::UnstableOffsetCommit))
    );
    assert_eq!(fetched(&s.c, "g", 0, false), (5, None));
    assert_eq!(fetched(&s.c, "g", 1, false), (-1, None));
    s.c.txn_commit_appended("g", ProducerId(1), &plan.accepted, 11);
    // Every committed offset (topics: null) with require_stable: the pending one is unstable.
    let all = s.c.handle_offset_fetch("g", None, true);
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].error, Some(ErrorCode::UnstableOffsetCommit));
    // Another producer's marker, or one on another partition, leaves the transaction open.
    s.c.complete_txn(7, ProducerId(2), TxnOutcome::Commit);
    s.c.complete_txn(8, ProducerId(1), TxnOutcome::Commit);
    assert_eq!(
        fetched(&s.c, "g", 0, true),
        (-1, Some(ErrorCode::UnstableOffsetCommit))
    );
    s.c.complete_txn(7, ProducerId(1), TxnOutcome::Commit);
    assert_eq!(fetched(&s.c, "g", 0, true), (42, None));
    assert_eq!(fetched(&s.c, "g", 1, true), (43, None));
    // A second transaction, aborted: the offsets stay.
    let plan =
        s.c.handle_txn_offset_commit(7, txn_args("g", 1, &[(0, 99)]), now)
            .expect("accepted");
    s.c.txn_commit_appended("g", ProducerId(1), &plan.accepted, 13);
    assert_eq!(fetched(&s.c, "g", 0, false), (42, None));
    s.c.complete_txn(7, ProducerId(1), TxnOutcome::Abort);
    assert_eq!(fetched(&s.c, "g", 0, true), (42, None));
    // A commit whose write failed is no longer pending.
    let plan =
        s.c.handle_txn_offset_commit(7, txn_args("g", 3, &[(0, 7)]), now)
            .expect("accepted");
    assert_eq!(
        fetched(&s.c, "g", 0, true).1,
        Some(ErrorCode::UnstableOffsetCommit)
    );
    s.c.txn_commit_failed("g", ProducerId(3), &plan.accepted);
    assert_eq!(fetched(&s.c, "g", 0, true), (42, None));
    // A COMMIT for offsets never made durable does not apply them.
    s.c.handle_txn_offset_commit(7, txn_args("g", 4, &[(0, 8)]), now)
        .expect("accepted");
    s.c.complete_txn(7, ProducerId(4), TxnOutcome::Commit);
    assert_eq!(fetched(&s.c, "g", 0, true), (42, None));
}

/// Kafka's order between a transaction's offset and plain commits: on COMMIT the
/// transactional offset replaces the committed one only if its record is later in the log;
/// a plain commit written after it (before the marker) wins, and a plain commit that was
/// written earlier but becomes durable late does not undo the transaction's.
#[test]
fn txn_offset_vs_plain_commit_follows_log_order() {
    let mut s = Sim::new();
    let now = Now::at(s.now);
    let plan =
        s.c.handle_txn_offset_commit(7, txn_args("g", 1, &[(0, 100)]), now)
            .expect("accepted");
    s.c.txn_commit_appended("g", ProducerId(1), &plan.accepted, 10);
    let plain =
        s.c.handle_offset_commit(7, simple_commit("g", 0, 200), now)
            .expect("ok");
    s.c.apply_commit("g", 7, plain.accepted, 20, now);
    s.c.complete_txn(7, ProducerId(1), TxnOutcome::Commit);
    assert_eq!(
        fetched(&s.c, "g", 0, true),
        (200, None),
        "the later plain commit wins"
    );

    let early =
        s.c.handle_offset_commit(7, simple_commit("g", 1, 1), now)
            .expect("ok");
    let plan =
        s.c.handle_txn_offset_commit(7, txn_args("g", 2, &[(1, 300)]), now)
            .expect("accepted");
    s.c.txn_commit_appended("g", ProducerId(2), &plan.accepted, 31);
    s.c.complete_txn(7, ProducerId(2), TxnOutcome::Commit);
    s.c.apply_commit("g", 7, early.accepted, 30, now);
    assert_eq!(
        fetched(&s.c, "g", 1, true),
        (300, None),
        "the earlier record loses"
    );
}

/// TxnOffsetCommit v3+ member checks (KIP-447), as Kafka's classic group: an unknown group
/// with member fields is ILLEGAL_GENERATION; a wrong generation ILLEGAL_GENERATION, an
/// unknown member UNKNOWN_MEMBER_ID, an old static incarnation FENCED_INSTANCE_ID; no member
/// fields (v0-v2) are accepted in any state, and a rebalance does not refuse the commit.
#[test]
fn txn_commit_checks_member_and_generation() {
    let mut s = Sim::new();
    let now = Now::at(s.now);
    let mut unknown = txn_args("nope", 1, &[(0, 1)]);
    unknown.member_id = "m".into();
    unknown.generation_id = 1;
    assert_eq!(
        s.c.handle_txn_offset_commit(7, unknown, now).err(),
        Some(ErrorCode::IllegalGeneration)
    );
    let (ids, generation) = s.stable_group(2);
    let member = |id: &str, generation: i32, instance: Option<&str>| {
        let mut a = txn_args("g", 1, &[(0, 1)]);
        a.member_id = id.into();
        a.generation_id = generation;
        a.group_instance_id = instance.map(str::to_string);
        a
    };
    let now = Now::at(s.now);
    let cases = [
        (
            member(&ids[0], generation + 1, None),
            Some(ErrorCode::IllegalGeneration),
        ),
        (
            member("ghost", generation, None),
            Some(ErrorCode::UnknownMemberId),
        ),
        (
            member(&ids[0], generation, Some("i")),
            Some(ErrorCode::UnknownMemberId),
        ),
        (member(&ids[0], generation, None), None),
        (member("", -1, None), None),
    ];
    for (args, expected) in cases {
        let got = s.c.handle_txn_offset_commit(7, args.clone(), now).err();
        assert_eq!(got, expected, "{args:?}");
    }
    // A rebalance in progress does not refuse a transactional commit of the old generation's
    // members... but the generation must still match.
    let (_new, _r) = s.join_new();
    assert_eq!(s.c.group_state("g"), GroupState::PreparingRebalance);
    assert!(s
        .c
        .handle_txn_offset_commit(7, member(&ids[0], generation, None), Now::at(s.now))
        .is_ok());

    // A static member: another incarnation's member id is fenced.
    let mut st = Sim::new();
    let mut a = Sim::join_args("", Some("inst"), &["range"]);
    a.require_known_member_id = false;
    let r = st.join(a);
    st.settle();
    let res = st.join_reply(r).expect("joined");
    let now = Now::at(st.now);
    let mut fenced = txn_args("g", 1, &[(0, 1)]);
    fenced.member_id = "old-incarnation".into();
    fenced.generation_id = res.generation_id;
    fenced.group_instance_id = Some("inst".into());
    assert_eq!(
        st.c.handle_txn_offset_commit(7, fenced.clone(), now).err(),
        Some(ErrorCode::FencedInstanceId)
    );
    fenced.member_id = res.member_id.clone();
    assert!(st.c.handle_txn_offset_commit(7, fenced, now).is_ok());
}

/// Deleting an empty group (or one partition's offsets) writes tombstones for offsets pending
/// in open transactions too; a COMMIT marker afterwards brings nothing back, and expiry keeps
/// a group whose transaction is still open.
#[test]
fn tombstones_drop_pending_txn_offsets() {
    let mut s = Sim::new();
    let now = Now::at(s.now);
    let plan =
        s.c.handle_txn_offset_commit(7, txn_args("g", 1, &[(0, 5), (1, 6)]), now)
            .expect("accepted");
    s.c.txn_commit_appended("g", ProducerId(1), &plan.accepted, 3);
    let retention = s.c.config().offsets_retention_ms;
    s.c.expire_offsets(Now::at(s.now + retention + 1), &mut s.out);
    assert_eq!(
        s.c.group_state("g"),
        GroupState::Empty,
        "kept while pending"
    );
    s.appends();
    let res =
        s.c.handle_offset_delete("g", vec![("t".into(), 0)], &mut s.out);
    assert_eq!(res, Ok(vec![None]));
    assert_eq!(s.appends().len(), 1, "a tombstone for the pending offset");
    assert_eq!(fetched(&s.c, "g", 0, true), (-1, None));
    assert_eq!(s.c.handle_delete_group("g", &mut s.out), None);
    let records = s.appends();
    assert_eq!(records.len(), 2, "offset and group tombstones: {records:?}");
    s.c.complete_txn(7, ProducerId(1), TxnOutcome::Commit);
    assert_eq!(fetched(&s.c, "g", 1, false), (-1, None));
}

/// A commit plan's accepted offsets.
type Accepted = Vec<(String, i32, record::OffsetValue)>;

/// One entry of the simulated `__consumer_offsets` log of the oracle test.
#[derive(Debug, Clone)]
enum Entry {
    Record {
        key: Bytes,
        value: Option<Bytes>,
        txn: Option<ProducerId>,
    },
    Marker(ProducerId, TxnOutcome),
}

/// What the log says, computed from the log alone (the oracle): for a partition, among the
/// records after its last tombstone, the visible offset is the one of the latest record
/// that is either a plain commit already applied or a transactional one whose transaction's
/// marker (the producer's first marker after it) is COMMIT; it is unstable if a
/// transactional record after the tombstone has no marker yet.
fn oracle(log: &[Entry], applied: &[bool], partition: i32) -> (i64, bool) {
    use crate::group::record::{decode_key, decode_offset, RecordKey};
    let mut visible = -1;
    let mut unstable = false;
    for (i, e) in log.iter().enumerate() {
        let Entry::Record { key, value, txn } = e else {
            continue;
        };
        let Ok(RecordKey::Offset { partition: p, .. }) = decode_key(key) else {
            continue;
        };
        if p != partition {
            continue;
        }
        let Some(value) = value else {
            visible = -1;
            unstable = false;
            continue;
        };
        let offset = decode_offset(value).expect("decodes").offset;
        match txn {
            None if applied[i] => visible = offset,
            None => {}
            Some(pid) => {
                let end = log[i + 1..].iter().find_map(|e| match e {
                    Entry::Marker(m, outcome) if m == pid => Some(*outcome),
                    _ => None,
                });
                match end {
                    Some(TxnOutcome::Commit) => visible = offset,
                    Some(TxnOutcome::Abort) => {}
                    None => unstable = true,
                }
            }
        }
    }
    (visible, unstable)
}

/// Seeded random runs of plain commits (some made durable late), transactional commits of
/// three producers, COMMIT/ABORT markers and offset deletions on one group: after every step
/// the live coordinator answers OffsetFetch (with and without require_stable) as the oracle
/// reads the log, and a coordinator loaded from the log at any point answers the same as the
/// live one. The seed is printed on failure.
#[test]
fn txn_offsets_against_oracle_and_replay() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    const PARTITIONS: i32 = 3;
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut c = Coordinator::new(GroupConfig::default());
        let now = Now::at(1_000);
        let mut log: Vec<Entry> = Vec::new();
        let mut applied: Vec<bool> = Vec::new();
        // Plain commits appended but not yet applied: (log index, accepted).
        let mut late: Vec<(usize, Accepted)> = Vec::new();
        let mut open = [false; 3];
        for step in 0..200 {
            let value = rng.gen_range(0..1_000_000i64);
            let p = rng.gen_range(0..PARTITIONS);
            match rng.gen_range(0..10) {
                0..=2 => {
                    let plan = c
                        .handle_offset_commit(7, simple_commit("g", p, value), now)
                        .expect("simple commit");
                    for r in plan.records {
                        log.push(Entry::Record {
                            key: r.key,
                            value: r.value,
                            txn: None,
                        });
                        applied.push(false);
                    }
                    late.push((log.len() - 1, plan.accepted));
                }
                3..=5 => {
                    let producer = rng.gen_range(0..3usize);
                    let plan = c
                        .handle_txn_offset_commit(
                            7,
                            txn_args("g", producer as i64, &[(p, value)]),
                            now,
                        )
                        .expect("txn commit");
                    let pid = ProducerId(producer as i64);
                    for r in plan.records {
                        log.push(Entry::Record {
                            key: r.key,
                            value: r.value,
                            txn: Some(pid),
                        });
                        applied.push(false);
                    }
                    c.txn_commit_appended("g", pid, &plan.accepted, log.len() as i64 - 1);
                    open[producer] = true;
                }
                6..=7 => {
                    let producer = rng.gen_range(0..3usize);
                    if !open[producer] {
                        continue;
                    }
                    let outcome = if rng.gen_bool(0.5) {
                        TxnOutcome::Commit
                    } else {
                        TxnOutcome::Abort
                    };
                    let pid = ProducerId(producer as i64);
                    log.push(Entry::Marker(pid, outcome));
                    applied.push(false);
                    c.complete_txn(7, pid, outcome);
                    open[producer] = false;
                }
                8 => {
                    // Deletion happens with no plain commit in flight (a commit durable after
                    // a later tombstone would be a race of its own).
                    for (i, accepted) in late.drain(..) {
                        c.apply_commit("g", 7, accepted, i as i64, now);
                        applied[i] = true;
                    }
                    let mut out = Vec::new();
                    if c.handle_offset_delete("g", vec![("t".into(), p)], &mut out)
                        .is_err()
                    {
                        continue; // no group yet
                    }
                    for o in out {
                        if let Output::Append { records, .. } = o {
                            for r in records {
                                log.push(Entry::Record {
                                    key: r.key,
                                    value: r.value,
                                    txn: None,
                                });
                                applied.push(false);
                            }
                        }
                    }
                }
                _ => {
                    // Plain commits become durable, in any order.
                    while !late.is_empty() {
                        let (i, accepted) = late.swap_remove(rng.gen_range(0..late.len()));
                        c.apply_commit("g", 7, accepted, i as i64, now);
                        applied[i] = true;
                        if rng.gen_bool(0.5) {
                            break;
                        }
                    }
                }
            }
            for q in 0..PARTITIONS {
                let (visible, unstable) = oracle(&log, &applied, q);
                let stable = fetched(&c, "g", q, true);
                let expected = if unstable {
                    (-1, Some(ErrorCode::UnstableOffsetCommit))
                } else {
                    (visible, None)
                };
                assert_eq!(stable, expected, "seed {seed} step {step} partition {q}");
                // Without require_stable: the last committed offset, pending or not.
                assert_eq!(
                    fetched(&c, "g", q, false),
                    (visible, None),
                    "seed {seed} step {step} partition {q}"
                );
            }
            if late.is_empty() && rng.gen_bool(0.2) {
                // A new coordinator loading the log so far answers as the live one.
                let mut loaded = Coordinator::new(GroupConfig::default());
                for (i, e) in log.iter().enumerate() {
                    match e {
                        Entry::Record { key, value, txn } => loaded
                            .load_record(7, i as i64, *txn, key, value.as_deref(), now)
                            .expect("decodes"),
                        Entry::Marker(pid, outcome) => loaded.complete_txn(7, *pid, *outcome),
                    }
                }
                loaded.finish_load(7, now);
                for q in 0..PARTITIONS {
                    for require_stable in [false, true] {
                        assert_eq!(
                            fetched(&loaded, "g", q, require_stable),
                            fetched(&c, "g", q, require_stable),
                            "replay: seed {seed} step {step} partition {q}"
                        );
                    }
                }
            }
        }
    }
}

/// A deleted topic's offsets go from every group (Kafka's `onPartitionsDeleted`): committed
/// and transaction-pending ones, each with a tombstone; a COMMIT marker afterwards brings
/// nothing back, other topics' offsets stay, and a second call writes nothing.
#[test]
fn deleted_topics_lose_their_offsets_in_every_group() {
    let mut s = Sim::new();
    let now = Now::at(s.now);
    let plan =
        s.c.handle_offset_commit(7, simple_commit("g", 0, 5), now)
            .expect("ok");
    s.c.apply_commit("g", 7, plan.accepted, 10, now);
    let plan =
        s.c.handle_txn_offset_commit(7, txn_args("g", 1, &[(1, 6)]), now)
            .expect("accepted");
    s.c.txn_commit_appended("g", ProducerId(1), &plan.accepted, 11);
    let mut other = simple_commit("h", 0, 3);
    other.offsets[0].topic = "u".into();
    let plan = s.c.handle_offset_commit(7, other, now).expect("ok");
    s.c.apply_commit("h", 7, plan.accepted, 12, now);
    s.appends();

    let deleted: std::collections::HashSet<String> = ["t".to_string()].into();
    s.c.on_topics_deleted(&deleted, &mut s.out);
    let records = s.appends();
    assert_eq!(records.len(), 2, "tombstones for t-0 and t-1: {records:?}");
    assert!(records.iter().all(|r| r.value.is_none()));
    assert_eq!(fetched(&s.c, "g", 0, true), (-1, None));
    s.c.complete_txn(7, ProducerId(1), TxnOutcome::Commit);
    assert_eq!(fetched(&s.c, "g", 1, false), (-1, None));
    let h =
        s.c.handle_offset_fetch("h", Some(vec![("u".into(), 0)]), false);
    assert_eq!(h[0].offset, 3, "another topic's offset stays");
    s.c.on_topics_deleted(&deleted, &mut s.out);
    assert!(s.appends().is_empty(), "nothing left to remove");
}

/// Unloading a partition (its leadership moved) answers the members parked in a JoinGroup or
/// SyncGroup NOT_COORDINATOR, as Kafka does, instead of leaving their requests unanswered;
/// a shutdown does the same for every group.
#[test]
fn unload_and_shutdown_answer_parked_members() {
    let mut s = Sim::new();
    let (id, r) = s.join_new();
    assert!(s.join_reply(r).is_none(), "parked in the initial delay");
    s.c.unload_partition(8, &mut s.out);
    assert!(
        s.join_reply(r).is_none(),
        "another partition's unload leaves it parked"
    );
    s.c.unload_partition(7, &mut s.out);
    let res = s.join_reply(r).expect("answered on unload");
    assert_eq!(res.error, Some(ErrorCode::NotCoordinator));
    assert_eq!(res.member_id, id);
    assert_eq!(s.c.group_state("g"), GroupState::Dead);

    // Two members: the leader syncs first and is parked until the follower's SyncGroup.
    let mut s = Sim::new();
    let (ids, generation) = s.stable_group(2);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let ra = s.join(Sim::join_args(&a, None, &["range"]));
    let rb = s.join(Sim::join_args(&b, None, &["range"]));
    let leader = s.join_reply(ra).expect("rejoin completes").leader;
    let _ = s.join_reply(rb).expect("rejoin completes");
    let follower = if leader == a { b } else { a };
    let rs = s.sync(&follower, generation + 1, &[]);
    assert!(
        s.sync_reply(rs).is_none(),
        "the follower waits for the leader's assignment"
    );
    s.c.release_parked(&mut s.out);
    let res = s.sync_reply(rs).expect("answered on shutdown");
    assert_eq!(res.error, Some(ErrorCode::NotCoordinator));
    assert!(
        !s.out
            .iter()
            .any(|o| matches!(o, Output::Join(..) | Output::Sync(..))),
        "nothing else was parked"
    );
}
