//! Deterministic simulation of one partition replicated over 3 or 5 brokers, driving the
//! real `LeaderState` and `FollowerState` through a faulty network.
//!
//! Everything random comes from one seeded splitmix64, time is a simulated clock, and the
//! run is a pure function of the seed: a failure prints `seed N`, and `STRATA_SIM_SEED=N`
//! replays exactly that run.
//!
//! Model. Each broker has an in-memory log of (epoch, value) records (durable: a crash keeps
//! it), an `EpochCache` and a HW. A controller (never crashes) elects leaders from the live
//! ISR only (no unclean election), bumping the leader and partition epochs, applies
//! AlterIsr with epoch checks, refuses to add a broker it sees as down, and rebroadcasts
//! metadata periodically. The network drops, delays (reordering) and duplicates data-path
//! messages and partitions brokers; AlterIsr is an exactly-once RPC (retried, deduplicated
//! by request id), as Kafka's AlterPartitionManager over one connection is. Producers append
//! to whichever broker believes it leads (zombies included); a record is acknowledged when
//! the HW passes it and the ISR has `min.insync.replicas` members.
//!
//! Invariants checked after every step:
//! (a) the committed prefix (every record any leader's HW ever passed) is intact on every
//!     member of the controller's ISR and on its leader; every ack is in it;
//! (b) a leader's HW never exceeds the LEO of a member of its ISR;
//! (c) a leader's HW is monotonic within its epoch;
//! (d) every broker agrees with the committed prefix below its own HW.
//! After the faults stop and everything heals, all replicas converge on one log, with the
//! whole log committed and every replica in the ISR.
use std::collections::HashMap;

use super::epoch_cache::EpochCache;
use super::follower::FollowerState;
use super::leader::LeaderState;
use super::{FollowerCommand, LeaderCommand, ReplicaError};
use crate::protocol::ids::{LeaderEpoch, NodeId, Offset};

const CONTROLLER: NodeId = NodeId(-1);
const STEP_MS: u64 = 5;
const LAG_TIME_MAX_MS: u64 = 100;
const REQUEST_TIMEOUT_MS: u64 = 60;
const METADATA_INTERVAL_MS: u64 = 50;
const FETCH_RECORDS_MAX: usize = 5;
const NET_DELAY_MS_MAX: u64 = 30;
const FAULT_STEPS: u64 = 300;
const HEAL_STEPS: u64 = 400;
const SEEDS: u64 = 500;

/// The index of broker `id` in `Sim::nodes` (brokers are numbered from 0).
fn idx(id: NodeId) -> usize {
    id.get() as usize
}

/// splitmix64: tiny, fast, and good enough to pick faults.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn permille(&mut self, p: u64) -> bool {
        self.below(1000) < p
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rec {
    epoch: LeaderEpoch,
    value: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    leader: Option<NodeId>,
    leader_epoch: LeaderEpoch,
    partition_epoch: i32,
    isr: Vec<NodeId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AlterAnswer {
    Accepted,
    /// Definitely not applied (a broker to add is fenced): `handle_alter_failed`.
    NotApplied,
    /// Stale epochs: the state changed under the request; wait for metadata.
    Stale,
}

#[derive(Debug, Clone)]
enum Payload {
    Fetch {
        epoch: LeaderEpoch,
        offset: Offset,
    },
    FetchData {
        epoch: LeaderEpoch,
        offset: Offset,
        records: Vec<Rec>,
        hw: Offset,
    },
    FetchError {
        epoch: LeaderEpoch,
        offset: Offset,
        error: ReplicaError,
    },
    EpochQuery {
        epoch: LeaderEpoch,
        requested: LeaderEpoch,
    },
    EpochAnswer {
        epoch: LeaderEpoch,
        requested: LeaderEpoch,
        found: LeaderEpoch,
        end: Offset,
    },
    EpochError {
        epoch: LeaderEpoch,
        requested: LeaderEpoch,
        error: ReplicaError,
    },
    ListOffsets {
        epoch: LeaderEpoch,
    },
    LogBounds {
        epoch: LeaderEpoch,
        start: Offset,
        end: Offset,
    },
    AlterIsr {
        id: u64,
        leader_epoch: LeaderEpoch,
        partition_epoch: i32,
        isr: Vec<NodeId>,
    },
    AlterAnswer {
        id: u64,
        answer: AlterAnswer,
        meta: Meta,
    },
    Metadata(Meta),
}

impl Payload {
    /// AlterIsr and its answer travel as an exactly-once RPC: never dropped or duplicated
    /// by the network (only lost with a partition or a crash, then retried).
    fn reliable(&self) -> bool {
        matches!(self, Payload::AlterIsr { .. } | Payload::AlterAnswer { .. })
    }
}

struct Msg {
    deliver_at_ms: u64,
    seq: u64,
    from: NodeId,
    to: NodeId,
    payload: Payload,
}

enum Role {
    Idle,
    Leader(LeaderState),
    Follower { state: FollowerState, sent_ms: u64 },
}

struct AlterInFlight {
    id: u64,
    payload: Payload,
    sent_ms: u64,
}

struct Node {
    id: NodeId,
    log: Vec<Rec>,
    cache: EpochCache,
    hw: Offset,
    up: bool,
    isolated: bool,
    role: Role,
    seen_leader_epoch: LeaderEpoch,
    seen_partition_epoch: i32,
    /// False from a restart until the broker has caught up with the controller's metadata.
    caught_up: bool,
    alter: Option<AlterInFlight>,
}

impl Node {
    fn leo(&self) -> Offset {
        Offset(self.log.len() as i64)
    }
}

struct Sim {
    seed: u64,
    rng: Rng,
    now_ms: u64,
    faults: bool,
    min_isr: usize,
    /// Per-seed multiplier (1..=3) of crash, partition and drop rates: calm runs and storms.
    intensity: u64,
    replicas: Vec<NodeId>,
    nodes: Vec<Node>,
    meta: Meta,
    alter_answers: HashMap<(NodeId, u64), (AlterAnswer, Meta)>,
    net: Vec<Msg>,
    seq: u64,
    next_alter_id: u64,
    next_value: u64,
    committed: Vec<Rec>,
    pending_acks: Vec<(NodeId, LeaderEpoch, Offset, Rec)>,
    acked: u64,
    hw_by_epoch: HashMap<(NodeId, LeaderEpoch), Offset>,
    elections: u64,
    truncations: u64,
    /// `STRATA_SIM_TRACE=1` prints every protocol event of the run (use with one seed).
    trace: bool,
}

impl Sim {
    fn new(seed: u64) -> Self {
        let mut rng = Rng(seed);
        let n: i32 = if rng.permille(300) { 5 } else { 3 };
        let min_isr = if n == 5 { 3 } else { 2 };
        let intensity = 1 + rng.below(3);
        let replicas: Vec<NodeId> = (0..n).map(NodeId).collect();
        let nodes = replicas
            .iter()
            .map(|&id| Node {
                id,
                log: Vec::new(),
                cache: EpochCache::default(),
                hw: Offset::ZERO,
                up: true,
                isolated: false,
                role: Role::Idle,
                seen_leader_epoch: LeaderEpoch::UNDEFINED,
                seen_partition_epoch: -1,
                caught_up: true,
                alter: None,
            })
            .collect();
        let meta = Meta {
            leader: Some(NodeId(0)),
            leader_epoch: LeaderEpoch(0),
            partition_epoch: 0,
            isr: replicas.clone(),
        };
        let mut sim = Self {
            seed,
            rng,
            now_ms: 0,
            faults: true,
            min_isr,
            intensity,
            replicas,
            nodes,
            meta,
            alter_answers: HashMap::new(),
            net: Vec::new(),
            seq: 0,
            next_alter_id: 0,
            next_value: 0,
            committed: Vec::new(),
            pending_acks: Vec::new(),
            acked: 0,
            hw_by_epoch: HashMap::new(),
            elections: 0,
            truncations: 0,
            trace: std::env::var_os("STRATA_SIM_TRACE").is_some(),
        };
        sim.broadcast_metadata();
        sim
    }

    fn fail(&self, what: String) -> ! {
        panic!("seed {}: t={}ms: {what}", self.seed, self.now_ms)
    }

    fn trace(&self, event: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("t={} {}", self.now_ms, event());
        }
    }

    fn node(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[idx(id)]
    }

    fn reachable(&self, id: NodeId) -> bool {
        id == CONTROLLER || {
            let n = &self.nodes[idx(id)];
            n.up && !n.isolated
        }
    }

    fn send(&mut self, from: NodeId, to: NodeId, payload: Payload) {
        if !self.reachable(from) || !self.reachable(to) {
            return;
        }
        let lossy = self.faults && !payload.reliable();
        if lossy && self.rng.permille(25 * self.intensity) {
            return;
        }
        let copies = if lossy && self.rng.permille(30) { 2 } else { 1 };
        for _ in 0..copies {
            let delay = 1 + self.rng.below(NET_DELAY_MS_MAX);
            self.seq += 1;
            self.net.push(Msg {
                deliver_at_ms: self.now_ms + delay,
                seq: self.seq,
                from,
                to,
                payload: payload.clone(),
            });
        }
    }

    fn broadcast_metadata(&mut self) {
        for id in self.replicas.clone() {
            let meta = self.meta.clone();
            self.send(CONTROLLER, id, Payload::Metadata(meta));
        }
    }

    fn run(&mut self) {
        for _ in 0..FAULT_STEPS {
            self.step();
        }
        self.faults = false;
        for i in 0..self.nodes.len() {
            self.nodes[i].isolated = false;
            if !self.nodes[i].up {
                self.restart(NodeId(i as i32));
            }
        }
        for _ in 0..HEAL_STEPS {
            self.step();
        }
        self.check_converged();
    }

    fn step(&mut self) {
        self.now_ms += STEP_MS;
        if self.faults {
            self.inject_faults();
        }
        self.controller_step();
        // Producers keep writing through the first half of the healed phase, then stop so
        // the replicas can converge.
        if self.now_ms < (FAULT_STEPS + HEAL_STEPS / 2) * STEP_MS {
            self.produce();
        }
        self.deliver();
        self.tick_nodes();
        self.resolve_acks();
        self.check_invariants();
    }

    fn inject_faults(&mut self) {
        let n = self.nodes.len();
        for i in 0..n {
            let id = NodeId(i as i32);
            if self.nodes[i].up && self.rng.permille(4 * self.intensity) {
                self.nodes[i].up = false;
                self.trace(|| format!("crash {id}"));
            } else if !self.nodes[i].up && self.rng.permille(40) {
                self.trace(|| format!("restart {id}"));
                self.restart(id);
            }
            if !self.nodes[i].isolated && self.rng.permille(3 * self.intensity) {
                self.nodes[i].isolated = true;
                self.trace(|| format!("isolate {id}"));
            } else if self.nodes[i].isolated && self.rng.permille(50) {
                self.nodes[i].isolated = false;
                self.trace(|| format!("heal {id}"));
            }
        }
    }

    /// A restarted broker keeps its durable log, epoch cache and HW, and takes no role until
    /// it has caught up with the controller's metadata, as a KRaft broker replays the
    /// metadata log before it acts. Resuming leadership from the metadata it had before the
    /// crash would be unsafe: the AlterIsr it had in flight died with the process, so its
    /// ISR could miss a follower the controller had already added.
    fn restart(&mut self, id: NodeId) {
        let node = self.node(id);
        node.up = true;
        node.role = Role::Idle;
        node.seen_leader_epoch = LeaderEpoch::UNDEFINED;
        node.seen_partition_epoch = -1;
        node.alter = None;
        node.caught_up = false;
    }

    fn controller_step(&mut self) {
        let leader_ok = self.meta.leader.is_some_and(|l| self.reachable(l));
        if !leader_ok {
            let failed = self.meta.leader;
            let candidates: Vec<NodeId> = self
                .meta
                .isr
                .iter()
                .copied()
                .filter(|&r| Some(r) != failed && self.reachable(r))
                .collect();
            if candidates.is_empty() {
                if failed.is_some() {
                    // Offline: no live ISR member; never elect outside the ISR.
                    self.meta.leader = None;
                    self.meta.leader_epoch = self.meta.leader_epoch.next();
                    self.meta.partition_epoch += 1;
                    self.broadcast_metadata();
                }
            } else {
                let pick = candidates[self.rng.below(candidates.len() as u64) as usize];
                if let Some(f) = failed {
                    self.meta.isr.retain(|&r| r != f);
                }
                self.meta.leader = Some(pick);
                self.meta.leader_epoch = self.meta.leader_epoch.next();
                self.meta.partition_epoch += 1;
                self.elections += 1;
                self.trace(|| format!("controller elects {:?}", self.meta));
                self.broadcast_metadata();
            }
        }
        if self.now_ms.is_multiple_of(METADATA_INTERVAL_MS) {
            self.broadcast_metadata();
        }
    }

    fn produce(&mut self) {
        if !self.rng.permille(500) {
            return;
        }
        let leaders: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].up && matches!(self.nodes[i].role, Role::Leader(_)))
            .collect();
        if leaders.is_empty() {
            return;
        }
        let i = leaders[self.rng.below(leaders.len() as u64) as usize];
        let min_isr = self.min_isr;
        self.next_value += 1;
        let value = self.next_value;
        let node = &mut self.nodes[i];
        let Role::Leader(leader) = &mut node.role else {
            return;
        };
        if !leader.acks_all_allowed(min_isr) {
            return;
        }
        let rec = Rec {
            epoch: leader.leader_epoch(),
            value,
        };
        let offset = Offset(node.log.len() as i64);
        node.log.push(rec);
        let commands = leader.handle_local_leo(offset.next(), self.now_ms);
        let epoch = rec.epoch;
        let id = NodeId(i as i32);
        self.pending_acks.push((id, epoch, offset, rec));
        self.leader_commands(id, commands);
    }

    fn deliver(&mut self) {
        let now = self.now_ms;
        let mut ready: Vec<Msg> = Vec::new();
        let mut i = 0;
        while i < self.net.len() {
            if self.net[i].deliver_at_ms <= now {
                ready.push(self.net.swap_remove(i));
            } else {
                i += 1;
            }
        }
        ready.sort_by_key(|m| (m.deliver_at_ms, m.seq));
        for msg in ready {
            if !self.reachable(msg.from) || !self.reachable(msg.to) {
                continue;
            }
            if msg.to == CONTROLLER {
                self.controller_receive(msg.from, msg.payload);
            } else {
                self.node_receive(msg.to, msg.from, msg.payload);
            }
        }
    }

    fn controller_receive(&mut self, from: NodeId, payload: Payload) {
        let Payload::AlterIsr {
            id,
            leader_epoch,
            partition_epoch,
            isr,
        } = payload
        else {
            return;
        };
        if let Some((answer, meta)) = self.alter_answers.get(&(from, id)).cloned() {
            // A retry of a request already decided gets the same answer.
            self.send(CONTROLLER, from, Payload::AlterAnswer { id, answer, meta });
            return;
        }
        let answer = if self.meta.leader != Some(from)
            || leader_epoch != self.meta.leader_epoch
            || partition_epoch != self.meta.partition_epoch
        {
            AlterAnswer::Stale
        } else if !isr.contains(&from)
            || isr.iter().any(|r| !self.replicas.contains(r))
            || isr
                .iter()
                .any(|&r| !self.meta.isr.contains(&r) && !self.reachable(r))
        {
            AlterAnswer::NotApplied
        } else {
            self.meta.isr = isr;
            self.meta.partition_epoch += 1;
            AlterAnswer::Accepted
        };
        let meta = self.meta.clone();
        self.trace(|| format!("controller alter #{id} from {from}: {answer:?} -> {meta:?}"));
        self.alter_answers
            .insert((from, id), (answer, meta.clone()));
        self.send(CONTROLLER, from, Payload::AlterAnswer { id, answer, meta });
        if answer == AlterAnswer::Accepted {
            self.broadcast_metadata();
        }
    }

    fn node_receive(&mut self, to: NodeId, from: NodeId, payload: Payload) {
        match payload {
            // Until it has caught up, a restarted broker ignores pushed metadata: it may be
            // older than what the broker knew before the crash.
            Payload::Metadata(meta) if self.nodes[idx(to)].caught_up => {
                self.apply_metadata(to, meta)
            }
            Payload::Metadata(_) => {}
            Payload::AlterAnswer { id, answer, meta } => {
                let node = self.node(to);
                if node.alter.as_ref().map(|a| a.id) != Some(id) {
                    return;
                }
                node.alter = None;
                let commands = match (&mut node.role, answer) {
                    (Role::Leader(l), AlterAnswer::NotApplied) => l.handle_alter_failed(),
                    _ => Vec::new(),
                };
                self.leader_commands(to, commands);
                // Accepted or stale: the metadata tells what the controller holds.
                self.apply_metadata(to, meta);
            }
            Payload::Fetch { epoch, offset } => self.serve_fetch(to, from, epoch, offset),
            Payload::EpochQuery { epoch, requested } => {
                let node = &self.nodes[idx(to)];
                let reply = match &node.role {
                    Role::Leader(l) if l.leader_epoch() == epoch => {
                        let (found, end) = node.cache.end_offset_for(requested, node.leo());
                        Payload::EpochAnswer {
                            epoch,
                            requested,
                            found,
                            end,
                        }
                    }
                    _ => Payload::EpochError {
                        epoch,
                        requested,
                        error: self.epoch_error(to, epoch),
                    },
                };
                self.send(to, from, reply);
            }
            Payload::ListOffsets { epoch } => {
                let node = &self.nodes[idx(to)];
                if matches!(&node.role, Role::Leader(l) if l.leader_epoch() == epoch) {
                    let end = node.leo();
                    self.send(
                        to,
                        from,
                        Payload::LogBounds {
                            epoch,
                            start: Offset::ZERO,
                            end,
                        },
                    );
                }
            }
            Payload::FetchData {
                epoch,
                offset,
                records,
                hw,
            } => {
                if !self.is_follower_of(to, from, epoch) {
                    return;
                }
                self.trace(|| format!("node {to} fetched {offset}+{} hw {hw}", records.len()));
                let node = self.node(to);
                let Role::Follower { state, .. } = &mut node.role else {
                    return;
                };
                if state.expected_fetch_offset() != Some(offset) {
                    return;
                }
                if offset != Offset(node.log.len() as i64) {
                    let leo = node.log.len();
                    self.fail(format!(
                        "node {to} expects a fetch at {offset} but its log ends at {leo}"
                    ));
                }
                for rec in records {
                    let at = Offset(node.log.len() as i64);
                    node.cache.assign(rec.epoch, at);
                    node.log.push(rec);
                }
                let leo = Offset(node.log.len() as i64);
                let commands = state.handle_fetch_response(offset, leo, hw);
                self.follower_commands(to, commands);
            }
            Payload::FetchError {
                epoch,
                offset,
                error,
            } => {
                if self.is_follower_of(to, from, epoch) {
                    if let Role::Follower { state, .. } = &mut self.node(to).role {
                        let commands = state.handle_fetch_error(offset, error);
                        self.follower_commands(to, commands);
                    }
                }
            }
            Payload::EpochAnswer {
                epoch,
                requested,
                found,
                end,
            } => {
                if self.is_follower_of(to, from, epoch) {
                    self.trace(|| format!("node {to} epoch {requested} ends at {found}/{end}"));
                    let node = self.node(to);
                    let leo = node.leo();
                    if let Role::Follower { state, .. } = &mut node.role {
                        let commands =
                            state.handle_epoch_end(requested, found, end, leo, &node.cache);
                        self.follower_commands(to, commands);
                    }
                }
            }
            Payload::EpochError {
                epoch,
                requested,
                error,
            } => {
                if self.is_follower_of(to, from, epoch) {
                    if let Role::Follower { state, .. } = &mut self.node(to).role {
                        let commands = state.handle_epoch_error(requested, error);
                        self.follower_commands(to, commands);
                    }
                }
            }
            Payload::LogBounds { epoch, start, end } => {
                if self.is_follower_of(to, from, epoch) {
                    let node = self.node(to);
                    let leo = node.leo();
                    if let Role::Follower { state, .. } = &mut node.role {
                        let commands = state.handle_log_bounds(start, end, leo);
                        self.follower_commands(to, commands);
                    }
                }
            }
            Payload::AlterIsr { .. } => {}
        }
    }

    fn is_follower_of(&self, id: NodeId, leader: NodeId, epoch: LeaderEpoch) -> bool {
        matches!(&self.nodes[idx(id)].role,
            Role::Follower { state, .. } if state.leader() == leader && state.leader_epoch() == epoch)
    }

    /// The error a broker that does not lead `epoch` answers with.
    fn epoch_error(&self, id: NodeId, epoch: LeaderEpoch) -> ReplicaError {
        let seen = self.nodes[idx(id)].seen_leader_epoch;
        if epoch < seen {
            ReplicaError::FencedLeaderEpoch
        } else if epoch > seen {
            ReplicaError::UnknownLeaderEpoch
        } else {
            ReplicaError::NotLeaderOrFollower
        }
    }

    fn serve_fetch(&mut self, to: NodeId, from: NodeId, epoch: LeaderEpoch, offset: Offset) {
        let now = self.now_ms;
        let node = &mut self.nodes[idx(to)];
        let result = match &mut node.role {
            // The simulated followers fetch only what is durable: both ends are the same.
            Role::Leader(l) => l.handle_follower_fetch(from, offset, offset, epoch, now),
            _ => Err(ReplicaError::NotLeaderOrFollower),
        };
        match result {
            Ok(commands) => {
                self.leader_commands(to, commands);
                let node = &self.nodes[idx(to)];
                let Role::Leader(l) = &node.role else {
                    return;
                };
                let start = offset.get() as usize;
                let end = (start + FETCH_RECORDS_MAX).min(node.log.len());
                let records = node.log[start..end].to_vec();
                let hw = l.high_watermark();
                self.send(
                    to,
                    from,
                    Payload::FetchData {
                        epoch,
                        offset,
                        records,
                        hw,
                    },
                );
            }
            Err(ReplicaError::NotLeaderOrFollower) if !matches!(node.role, Role::Leader(_)) => {
                let error = self.epoch_error(to, epoch);
                self.send(
                    to,
                    from,
                    Payload::FetchError {
                        epoch,
                        offset,
                        error,
                    },
                );
            }
            Err(error) => self.send(
                to,
                from,
                Payload::FetchError {
                    epoch,
                    offset,
                    error,
                },
            ),
        }
    }

    fn apply_metadata(&mut self, id: NodeId, meta: Meta) {
        self.trace(|| {
            let n = &self.nodes[idx(id)];
            format!(
                "node {id} (seen {}/{}, leo {}, hw {}) gets {meta:?}",
                n.seen_leader_epoch,
                n.seen_partition_epoch,
                n.leo(),
                n.hw
            )
        });
        let now = self.now_ms;
        let replicas = self.replicas.clone();
        let node = self.node(id);
        if meta.leader_epoch > node.seen_leader_epoch {
            node.seen_leader_epoch = meta.leader_epoch;
            node.seen_partition_epoch = meta.partition_epoch;
            node.alter = None;
            match meta.leader {
                Some(l) if l == id => {
                    // Kafka's maybeAssignEpochStartOffset: the new epoch starts at our LEO.
                    let leo = node.leo();
                    node.cache.assign(meta.leader_epoch, leo);
                    node.role = Role::Leader(LeaderState::new(
                        id,
                        meta.leader_epoch,
                        meta.partition_epoch,
                        replicas,
                        meta.isr,
                        leo,
                        node.hw,
                        leo,
                        now,
                        LAG_TIME_MAX_MS,
                    ));
                }
                Some(l) => {
                    let latest = node.cache.latest().map(|e| e.epoch);
                    let (state, first) =
                        FollowerState::new(l, meta.leader_epoch, node.leo(), node.hw, latest);
                    node.role = Role::Follower {
                        state,
                        sent_ms: now,
                    };
                    self.follower_commands(id, vec![first]);
                }
                None => node.role = Role::Idle,
            }
        } else if meta.leader_epoch == node.seen_leader_epoch
            && meta.partition_epoch >= node.seen_partition_epoch
        {
            node.seen_partition_epoch = meta.partition_epoch;
            if let Role::Leader(l) = &mut node.role {
                let commands = l.handle_isr_committed(meta.isr, meta.partition_epoch);
                self.leader_commands(id, commands);
            }
        }
    }

    fn leader_commands(&mut self, id: NodeId, commands: Vec<LeaderCommand>) {
        for command in commands {
            self.trace(|| format!("leader {id}: {command:?}"));
            match command {
                LeaderCommand::AdvanceHw(hw) => {
                    let node = &mut self.nodes[idx(id)];
                    let Role::Leader(l) = &node.role else {
                        continue;
                    };
                    let epoch = l.leader_epoch();
                    if hw > node.leo() {
                        let leo = node.leo();
                        self.fail(format!("leader {id} HW {hw} past its LEO {leo}"));
                    }
                    node.hw = hw;
                    let key = (id, epoch);
                    let previous = self
                        .hw_by_epoch
                        .get(&key)
                        .copied()
                        .unwrap_or(Offset(i64::MIN));
                    if hw < previous {
                        self.fail(format!(
                            "leader {id} epoch {epoch} HW went {previous} -> {hw}"
                        ));
                    }
                    self.hw_by_epoch.insert(key, hw);
                    self.commit(id, hw);
                }
                LeaderCommand::AlterIsr {
                    new_isr,
                    leader_epoch,
                    partition_epoch,
                } => {
                    self.next_alter_id += 1;
                    let payload = Payload::AlterIsr {
                        id: self.next_alter_id,
                        leader_epoch,
                        partition_epoch,
                        isr: new_isr,
                    };
                    self.node(id).alter = Some(AlterInFlight {
                        id: self.next_alter_id,
                        payload: payload.clone(),
                        sent_ms: self.now_ms,
                    });
                    self.send(id, CONTROLLER, payload);
                }
            }
        }
    }

    /// Leader `id` passed `hw`: its records below agree with, or extend, the committed prefix.
    fn commit(&mut self, id: NodeId, hw: Offset) {
        for offset in 0..hw.get() as usize {
            let rec = self.nodes[idx(id)].log[offset];
            match self.committed.get(offset) {
                Some(&c) if c != rec => self.fail(format!(
                    "leader {id} commits {rec:?} at {offset} over committed {c:?}"
                )),
                Some(_) => {}
                None => self.committed.push(rec),
            }
        }
    }

    fn follower_commands(&mut self, id: NodeId, commands: Vec<FollowerCommand>) {
        let now = self.now_ms;
        for command in commands {
            self.trace(|| format!("follower {id}: {command:?}"));
            let node = &mut self.nodes[idx(id)];
            let Role::Follower { state, sent_ms } = &mut node.role else {
                return;
            };
            let leader = state.leader();
            let epoch = state.leader_epoch();
            match command {
                FollowerCommand::SendOffsetForLeaderEpoch { epoch: requested } => {
                    *sent_ms = now;
                    self.send(id, leader, Payload::EpochQuery { epoch, requested });
                }
                FollowerCommand::Fetch { offset } => {
                    *sent_ms = now;
                    self.send(id, leader, Payload::Fetch { epoch, offset });
                }
                FollowerCommand::SendListOffsets => {
                    *sent_ms = now;
                    self.send(id, leader, Payload::ListOffsets { epoch });
                }
                FollowerCommand::Truncate { to } => {
                    node.log.truncate(to.get() as usize);
                    node.cache.truncate_from_end(to);
                    node.hw = node.hw.min(to);
                    self.truncations += 1;
                }
                FollowerCommand::TruncateFully { start } => {
                    if start != Offset::ZERO {
                        self.fail(format!("node {id} truncates fully to {start}"));
                    }
                    node.log.clear();
                    node.cache = EpochCache::default();
                    node.hw = Offset::ZERO;
                    self.truncations += 1;
                }
                FollowerCommand::AdvanceHw(hw) => {
                    if hw > node.leo() {
                        self.fail(format!("follower {id} HW {hw} past its LEO"));
                    }
                    node.hw = hw;
                }
                FollowerCommand::AwaitMetadata => {}
            }
        }
    }

    fn tick_nodes(&mut self) {
        let now = self.now_ms;
        for i in 0..self.nodes.len() {
            let id = NodeId(i as i32);
            if !self.nodes[i].up {
                continue;
            }
            if !self.nodes[i].caught_up && self.reachable(id) {
                self.nodes[i].caught_up = true;
                let meta = self.meta.clone();
                self.apply_metadata(id, meta);
            }
            let node = &mut self.nodes[i];
            match &mut node.role {
                Role::Leader(l) => {
                    let commands = l.handle_tick(now);
                    self.leader_commands(id, commands);
                }
                Role::Follower { state, sent_ms } => {
                    if now.saturating_sub(*sent_ms) > REQUEST_TIMEOUT_MS {
                        *sent_ms = now;
                        let commands = state.handle_timeout();
                        self.follower_commands(id, commands);
                    }
                }
                Role::Idle => {}
            }
            let node = &mut self.nodes[i];
            if let Some(alter) = &mut node.alter {
                if now.saturating_sub(alter.sent_ms) > REQUEST_TIMEOUT_MS {
                    alter.sent_ms = now;
                    let payload = alter.payload.clone();
                    self.send(id, CONTROLLER, payload);
                }
            }
        }
    }

    fn resolve_acks(&mut self) {
        let pending = std::mem::take(&mut self.pending_acks);
        for (id, epoch, offset, rec) in pending {
            let node = &self.nodes[idx(id)];
            let leader = match &node.role {
                Role::Leader(l) if node.up && l.leader_epoch() == epoch => l,
                // Leadership lost: the producer gets an error and retries; not acked.
                _ => continue,
            };
            if leader.high_watermark() <= offset {
                self.pending_acks.push((id, epoch, offset, rec));
                continue;
            }
            if !leader.acks_all_allowed(self.min_isr) {
                continue; // NOT_ENOUGH_REPLICAS_AFTER_APPEND
            }
            if self.committed.get(offset.get() as usize) != Some(&rec) {
                self.fail(format!(
                    "acked {rec:?} at {offset} is not the committed record"
                ));
            }
            self.acked += 1;
        }
    }

    fn check_invariants(&mut self) {
        let committed_len = self.committed.len();
        // (a) the controller's ISR and leader hold the whole committed prefix.
        let mut holders = self.meta.isr.clone();
        holders.extend(self.meta.leader);
        for &r in &holders {
            let log = &self.nodes[idx(r)].log;
            if log.len() < committed_len || log[..committed_len] != self.committed[..] {
                self.fail(format!(
                    "ISR member {r} lost committed data: log len {} committed {committed_len}",
                    log.len()
                ));
            }
        }
        for node in &self.nodes {
            // (d) agreement below each broker's own HW.
            let hw = node.hw.get() as usize;
            if hw > node.log.len() || hw > committed_len || node.log[..hw] != self.committed[..hw] {
                self.fail(format!(
                    "node {} disagrees below its HW {hw} (log {}, committed {committed_len})",
                    node.id,
                    node.log.len()
                ));
            }
            if let Role::Leader(l) = &node.role {
                // (b) HW within every ISR member's LEO; (c) monotonic in its epoch.
                for &m in l.isr() {
                    let leo = self.nodes[idx(m)].leo();
                    if l.high_watermark() > leo {
                        self.fail(format!(
                            "leader {} HW {} past ISR member {m}'s LEO {leo}",
                            node.id,
                            l.high_watermark()
                        ));
                    }
                }
                let recorded = self.hw_by_epoch.get(&(node.id, l.leader_epoch())).copied();
                if recorded.is_some_and(|h| h != l.high_watermark()) {
                    self.fail(format!("leader {} HW changed without AdvanceHw", node.id));
                }
            }
        }
    }

    fn check_converged(&mut self) {
        let Some(leader) = self.meta.leader else {
            self.fail("no leader after healing".to_string());
        };
        let reference = self.nodes[idx(leader)].log.clone();
        let mut isr = self.meta.isr.clone();
        isr.sort_unstable();
        if isr != self.replicas {
            self.fail(format!("ISR {isr:?} after healing"));
        }
        if self.committed.len() != reference.len() {
            self.fail(format!(
                "committed {} of leader's {} records after healing",
                self.committed.len(),
                reference.len()
            ));
        }
        for node in &self.nodes {
            if node.log != reference || node.hw != Offset(reference.len() as i64) {
                self.fail(format!(
                    "node {} did not converge: log {} hw {}, leader {leader} log {}",
                    node.id,
                    node.log.len(),
                    node.hw,
                    reference.len()
                ));
            }
        }
    }
}

/// `STRATA_SIM_SEED=N` replays one seed; `STRATA_SIM_SEEDS=N` runs seeds 0..N (a soak).
fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("STRATA_SIM_SEED") {
        return vec![s.trim().parse().expect("STRATA_SIM_SEED is a u64")];
    }
    let count = std::env::var("STRATA_SIM_SEEDS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(SEEDS);
    (0..count).collect()
}

/// Many seeded runs of crashes, partitions, drops, delays and duplicates keep every
/// committed record on every replica that can lead, then converge once healed.
#[test]
fn simulation_keeps_committed_data() {
    let (mut acked, mut elections, mut truncations) = (0, 0, 0);
    for seed in seeds() {
        let mut sim = Sim::new(seed);
        sim.run();
        acked += sim.acked;
        elections += sim.elections;
        truncations += sim.truncations;
    }
    // The faults must actually exercise the protocol, or the run proves little.
    assert!(acked > 0 && elections > 0 && truncations > 0);
    eprintln!("sim: acked {acked}, elections {elections}, truncations {truncations}");
}

/// The same seed gives the same run: the simulation is deterministic.
#[test]
fn simulation_is_deterministic() {
    let run = |seed| {
        let mut sim = Sim::new(seed);
        sim.run();
        (sim.committed.clone(), sim.acked, sim.elections, sim.now_ms)
    };
    assert_eq!(run(42), run(42));
}
