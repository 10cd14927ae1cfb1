//! The group state machine, following Kafka's classic `GroupCoordinator` decision by decision
//! (error codes and their order of checks included), without any I/O.
//!
//! Time comes in as a [`Now`] on every call; nothing here sleeps or reads a clock. Timers
//! (session, join and sync deadlines, pending members, the offsets-retention interval) are
//! monotonic milliseconds, so a wall-clock step expires no session; wall time is used only
//! for what is a date and is stored in `__consumer_offsets`: commit timestamps, the group's
//! state timestamp, and the retention of offsets and empty groups measured from them.
use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use indexmap::IndexMap;

use crate::clock::Now;
use crate::protocol::control::TxnOutcome;
use crate::protocol::producer::ProducerId;

use super::limits::{
    GROUP_MEMBERS_MAX, GROUP_METADATA_BYTES_MAX, GROUP_NAME_LEN_MAX, GROUP_OFFSETS_MAX,
    GROUP_PENDING_MEMBERS_MAX, GROUP_TXN_OFFSETS_MAX, OFFSET_METADATA_BYTES_MAX, SHARD_GROUPS_MAX,
};
use super::record::{self, GroupValue, OffsetValue, RecordError, RecordKey, StoredMember};
use super::{
    CommitArgs, CommitPlan, ErrorCode, FetchedOffset, GroupConfig, GroupDescription, GroupListing,
    HeartbeatArgs, JoinArgs, JoinMember, JoinResult, LeaveMember, LeaveResult, LogRecord,
    MemberDescription, Output, RequestId, SyncArgs, SyncResult, TxnCommitArgs,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The names DescribeGroups and ListGroups use.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

#[derive(Debug, Clone)]
struct Member {
    id: String,
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    /// (protocol name, metadata) in the member's order of preference.
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    awaiting_join: Option<RequestId>,
    awaiting_sync: Option<RequestId>,
    /// The member is removed when `now` passes this without a heartbeat (unless it is
    /// waiting in a join or sync, which the rebalance timeouts bound instead).
    session_deadline_ms: i64,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
    fn same_protocols(&self, other: &[(String, Bytes)]) -> bool {
        self.protocols.as_slice() == other
    }
}

/// A committed offset and where its record sits in `__consumer_offsets`. A commit whose
/// record is earlier in the log never replaces it: an OffsetCommit that becomes durable after
/// a later one, or a transaction's offset committed by a marker after a plain commit written
/// since (Kafka's `CommitRecordMetadataAndOffset.olderThan`).
#[derive(Debug, Clone)]
struct Committed {
    value: OffsetValue,
    log_offset: i64,
}

/// An offset a producer committed inside its open transaction (TxnOffsetCommit): invisible
/// to OffsetFetch until the producer's COMMIT marker, dropped by its ABORT (Kafka's
/// `pendingTransactionalOffsetCommits`). `log_offset` is `None` until its record is durable;
/// one that never became durable is dropped even by a COMMIT (the client was never told it
/// was committed, so its transaction cannot have committed it).
#[derive(Debug, Clone)]
struct PendingTxnOffset {
    value: OffsetValue,
    log_offset: Option<i64>,
}

/// The initial delayed join of a group that was empty (group.initial.rebalance.delay.ms):
/// the join phase is extended by `delay_ms` while new members keep arriving, up to the
/// rebalance timeout in total.
#[derive(Debug, Clone)]
struct InitialDelay {
    delay_ms: i64,
    remaining_ms: i64,
}

#[derive(Debug, Clone)]
struct Group {
    id: String,
    partition: i32,
    state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: IndexMap<String, Member>,
    /// group.instance.id -> member id.
    static_members: HashMap<String, String>,
    /// KIP-394 member ids handed out with MEMBER_ID_REQUIRED, with their expiry.
    pending_members: HashMap<String, i64>,
    /// Members that have not sent SyncGroup for the current generation.
    pending_sync: HashSet<String>,
    sync_deadline_ms: Option<i64>,
    join_deadline_ms: Option<i64>,
    initial_delay: Option<InitialDelay>,
    new_member_added: bool,
    /// When the group entered its current state (offset retention counts from Empty).
    state_timestamp_ms: i64,
    offsets: HashMap<(String, i32), Committed>,
    /// Per producer with an open transaction, the offsets it committed in it (at most
    /// `GROUP_TXN_OFFSETS_MAX` in all).
    pending_txn: HashMap<ProducerId, HashMap<(String, i32), PendingTxnOffset>>,
}

impl Group {
    /// Answers `error` to every member's parked JoinGroup and SyncGroup.
    fn answer_parked(&mut self, error: ErrorCode, out: &mut Vec<Output>) {
        for m in self.members.values_mut() {
            if let Some(id) = m.awaiting_join.take() {
                out.push(Output::Join(id, JoinResult::error(&m.id, error)));
            }
            if let Some(id) = m.awaiting_sync.take() {
                out.push(Output::Sync(id, SyncResult::error(error)));
            }
        }
    }

    fn new(id: &str, partition: i32, now: Now) -> Self {
        Self {
            id: id.to_string(),
            partition,
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            pending_sync: HashSet::new(),
            sync_deadline_ms: None,
            join_deadline_ms: None,
            initial_delay: None,
            new_member_added: false,
            state_timestamp_ms: now.wall_ms,
            offsets: HashMap::new(),
            pending_txn: HashMap::new(),
        }
    }

    /// Whether some open transaction committed an offset for `key`.
    fn has_pending_txn(&self, key: &(String, i32)) -> bool {
        self.pending_txn.values().any(|m| m.contains_key(key))
    }

    fn pending_txn_count(&self) -> usize {
        self.pending_txn.values().map(HashMap::len).sum()
    }

    /// Makes `value` the committed offset of `key` unless the current one's record is later
    /// in the log.
    fn commit_offset(&mut self, key: (String, i32), value: OffsetValue, log_offset: i64) {
        if self
            .offsets
            .get(&key)
            .is_none_or(|c| c.log_offset < log_offset)
        {
            self.offsets.insert(key, Committed { value, log_offset });
        }
    }

    /// A tombstone for `key` (OffsetDelete, group deletion, retention): the committed
    /// offset and every open transaction's offset for it go, as Kafka's replay of the
    /// tombstone does.
    fn remove_offset(&mut self, key: &(String, i32)) -> bool {
        let had_pending = self.has_pending_txn(key);
        for m in self.pending_txn.values_mut() {
            m.remove(key);
        }
        self.pending_txn.retain(|_, m| !m.is_empty());
        self.offsets.remove(key).is_some() || had_pending
    }

    /// The producer's transaction ended: its offsets become the committed ones on a COMMIT
    /// (where no later commit was written since), and are dropped on an ABORT.
    fn complete_txn(&mut self, producer_id: ProducerId, outcome: TxnOutcome) {
        let Some(pending) = self.pending_txn.remove(&producer_id) else {
            return;
        };
        if outcome == TxnOutcome::Abort {
            return;
        }
        for (key, p) in pending {
            if let Some(log_offset) = p.log_offset {
                self.commit_offset(key, p.value, log_offset);
            }
        }
    }

    fn transition(&mut self, state: GroupState, now: Now) {
        self.state = state;
        self.state_timestamp_ms = now.wall_ms;
    }

    /// The error a request from `member_id` (with `instance_id`) gets before any other check:
    /// a dead group has no coordinator, and an old incarnation of a static member is fenced.
    fn access_error(&self, instance_id: Option<&str>, member_id: &str) -> Option<ErrorCode> {
        if self.state == GroupState::Dead {
            return Some(ErrorCode::CoordinatorNotAvailable);
        }
        self.is_static_member_fenced(instance_id, member_id)
            .then_some(ErrorCode::FencedInstanceId)
    }

    fn is_static_member_fenced(&self, instance_id: Option<&str>, member_id: &str) -> bool {
        instance_id
            .and_then(|i| self.static_members.get(i))
            .is_some_and(|existing| existing != member_id)
    }

    /// Protocols every member supports.
    fn candidate_protocols(&self) -> Vec<String> {
        let Some(first) = self.members.values().next() else {
            return Vec::new();
        };
        first
            .protocols
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == n))
            })
            .collect()
    }

    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        let candidates = self.candidate_protocols();
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(n, _)| candidates.contains(n))
    }

    /// Kafka's vote: each member votes for its most preferred candidate; most votes wins,
    /// ties going to the protocol listed first by the first member.
    fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: Vec<(String, usize)> = candidates.iter().map(|c| (c.clone(), 0)).collect();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(n)) {
                if let Some(v) = votes.iter_mut().find(|(c, _)| c == name) {
                    v.1 += 1;
                }
            }
        }
        let mut best: Option<(String, usize)> = None;
        for (name, count) in votes {
            if best.as_ref().is_none_or(|(_, b)| count > *b) {
                best = Some((name, count));
            }
        }
        best.map(|(n, _)| n)
    }

    fn max_rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms as i64)
            .max()
            .unwrap_or(0)
    }

    fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    fn join_members(&self) -> Vec<JoinMember> {
        let protocol = self.protocol.clone().unwrap_or_default();
        self.members
            .values()
            .map(|m| JoinMember {
                member_id: m.id.clone(),
                group_instance_id: m.instance_id.clone(),
                metadata: m.metadata_for(&protocol),
            })
            .collect()
    }

    fn join_result(&self, member_id: &str, with_members: bool) -> JoinResult {
        JoinResult {
            error: None,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            skip_assignment: false,
            member_id: member_id.to_string(),
            members: if with_members {
                self.join_members()
            } else {
                Vec::new()
            },
        }
    }

    /// The group's membership as the metadata record stores it.
    fn metadata_record(&self) -> LogRecord {
        let protocol = self.protocol.clone().unwrap_or_default();
        let value = GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            current_state_timestamp_ms: self.state_timestamp_ms,
            members: self
                .members
                .values()
                .map(|m| StoredMember {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata_for(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        };
        LogRecord {
            key: record::encode_key(&RecordKey::Group {
                group: self.id.clone(),
            }),
            value: Some(record::encode_group(&value)),
        }
    }

    fn persist_metadata(&self, out: &mut Vec<Output>) {
        out.push(Output::Append {
            partition: self.partition,
            records: vec![self.metadata_record()],
        });
    }

    /// Topics the members subscribe to, when the group uses the consumer protocol.
    fn subscribed_topics(&self) -> Option<HashSet<String>> {
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let protocol = self.protocol.clone()?;
        let mut topics = HashSet::new();
        for m in self.members.values() {
            for t in consumer_subscription_topics(&m.metadata_for(&protocol)) {
                topics.insert(t);
            }
        }
        Some(topics)
    }
}

/// The topics of a ConsumerProtocol subscription (`[i16 version][i32 n] n × [str topic]...`);
/// empty if the bytes do not parse.
pub fn consumer_subscription_topics(metadata: &[u8]) -> Vec<String> {
    use kafka_protocol::messages::ConsumerProtocolSubscription;
    use kafka_protocol::protocol::Decodable;
    let mut buf = Bytes::copy_from_slice(metadata);
    if buf.len() < 2 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([buf[0], buf[1]]);
    let _ = bytes::Buf::get_i16(&mut buf);
    match ConsumerProtocolSubscription::decode(&mut buf, version.clamp(0, 3)) {
        Ok(s) => s.topics.into_iter().map(|t| t.to_string()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Every group a shard coordinates.
pub struct Coordinator {
    config: GroupConfig,
    groups: HashMap<String, Group>,
    next_retention_check_ms: i64,
}

fn offset_key(group: &str, topic: &str, partition: i32) -> Bytes {
    record::encode_key(&RecordKey::Offset {
        group: group.to_string(),
        topic: topic.to_string(),
        partition,
    })
}

impl Coordinator {
    pub fn new(config: GroupConfig) -> Self {
        Self {
            config,
            groups: HashMap::new(),
            next_retention_check_ms: 0,
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// The state of a group (`Dead` if unknown), for tests and the glue.
    pub fn group_state(&self, group_id: &str) -> GroupState {
        self.groups
            .get(group_id)
            .map(|g| g.state)
            .unwrap_or(GroupState::Dead)
    }

    /// The generation of a group (-1 if unknown).
    pub fn generation(&self, group_id: &str) -> i32 {
        self.groups
            .get(group_id)
            .map(|g| g.generation)
            .unwrap_or(-1)
    }

    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Committed offsets as (group, topic, partition, offset), groups in name order and each
    /// group's partitions in order, at most `max` of them (for the lag metrics); the second
    /// value is how many more there were. The order keeps the series a bound cuts off the
    /// same from one scrape to the next.
    pub fn committed_offsets(&self, max: usize) -> (Vec<(String, String, i32, i64)>, usize) {
        let mut ids: Vec<&String> = self.groups.keys().collect();
        ids.sort();
        let mut out = Vec::new();
        let mut omitted = 0usize;
        for id in ids {
            let Some(group) = self.groups.get(id) else {
                continue;
            };
            if out.len() >= max {
                omitted = omitted.saturating_add(group.offsets.len());
                continue;
            }
            let mut keys: Vec<&(String, i32)> = group.offsets.keys().collect();
            keys.sort();
            for key in keys {
                let Some(c) = group.offsets.get(key) else {
                    continue;
                };
                if out.len() >= max {
                    omitted = omitted.saturating_add(1);
                } else {
                    out.push((id.clone(), key.0.clone(), key.1, c.value.offset));
                }
            }
        }
        (out, omitted)
    }

    fn new_member_id(client_id: &str) -> String {
        format!("{client_id}-{}", uuid::Uuid::new_v4())
    }

    // ---------------------------------------------------------------- JoinGroup

    /// JoinGroup. The answer arrives as `Output::Join(request, ..)`, now or when the join
    /// phase completes.
    pub fn handle_join(
        &mut self,
        request: RequestId,
        partition: i32,
        args: JoinArgs,
        now: Now,
        out: &mut Vec<Output>,
    ) {
        let reply = |out: &mut Vec<Output>, e: ErrorCode| {
            out.push(Output::Join(request, JoinResult::error(&args.member_id, e)));
        };
        if args.group_id.is_empty() || args.group_id.len() > GROUP_NAME_LEN_MAX {
            return reply(out, ErrorCode::InvalidGroupId);
        }
        if args.session_timeout_ms < self.config.session_timeout_ms_min
            || args.session_timeout_ms > self.config.session_timeout_ms_max
        {
            return reply(out, ErrorCode::InvalidSessionTimeout);
        }
        if args.member_id.len() > GROUP_NAME_LEN_MAX
            || args
                .protocols
                .iter()
                .any(|(n, m)| n.len() > GROUP_NAME_LEN_MAX || m.len() > GROUP_METADATA_BYTES_MAX)
        {
            return reply(out, ErrorCode::InvalidRequest);
        }
        let is_unknown = args.member_id.is_empty();
        if !self.groups.contains_key(&args.group_id) {
            if !is_unknown {
                return reply(out, ErrorCode::UnknownMemberId);
            }
            if self.groups.len() >= SHARD_GROUPS_MAX {
                return reply(out, ErrorCode::CoordinatorNotAvailable);
            }
            self.groups.insert(
                args.group_id.clone(),
                Group::new(&args.group_id, partition, now),
            );
        }
        let config = self.config.clone();
        let Some(group) = self.groups.get_mut(&args.group_id) else {
            return reply(out, ErrorCode::CoordinatorNotAvailable);
        };
        if group.state == GroupState::Dead {
            return reply(out, ErrorCode::CoordinatorNotAvailable);
        }
        if !group.supports_protocols(&args.protocol_type, &args.protocols) {
            return reply(out, ErrorCode::InconsistentGroupProtocol);
        }
        if is_unknown {
            join_unknown_member(group, &config, request, args, now, out);
        } else {
            join_known_member(group, &config, request, args, now, out);
        }
    }

    // ---------------------------------------------------------------- SyncGroup

    pub fn handle_sync(
        &mut self,
        request: RequestId,
        args: SyncArgs,
        now: Now,
        out: &mut Vec<Output>,
    ) {
        let reply = |out: &mut Vec<Output>, e: ErrorCode| {
            out.push(Output::Sync(request, SyncResult::error(e)));
        };
        let Some(group) = self.groups.get_mut(&args.group_id) else {
            return reply(out, ErrorCode::UnknownMemberId);
        };
        if let Some(e) = group.access_error(args.group_instance_id.as_deref(), &args.member_id) {
            return reply(out, e);
        }
        if !group.members.contains_key(&args.member_id) {
            return reply(out, ErrorCode::UnknownMemberId);
        }
        if args.generation_id != group.generation {
            return reply(out, ErrorCode::IllegalGeneration);
        }
        if args
            .protocol_type
            .as_ref()
            .is_some_and(|t| Some(t) != group.protocol_type.as_ref())
            || args
                .protocol_name
                .as_ref()
                .is_some_and(|n| Some(n) != group.protocol.as_ref())
        {
            return reply(out, ErrorCode::InconsistentGroupProtocol);
        }
        match group.state {
            GroupState::Empty | GroupState::Dead => reply(out, ErrorCode::UnknownMemberId),
            GroupState::PreparingRebalance => reply(out, ErrorCode::RebalanceInProgress),
            GroupState::CompletingRebalance => {
                group.pending_sync.remove(&args.member_id);
                let is_leader = group.leader.as_deref() == Some(args.member_id.as_str());
                if let Some(m) = group.members.get_mut(&args.member_id) {
                    m.session_deadline_ms = now.monotonic_ms + m.session_timeout_ms as i64;
                    // A retried SyncGroup replaces the earlier one, which gets an error.
                    if let Some(old) = m.awaiting_sync.replace(request) {
                        out.push(Output::Sync(
                            old,
                            SyncResult::error(ErrorCode::RebalanceInProgress),
                        ));
                    }
                }
                if is_leader {
                    let mut assignments: HashMap<String, Bytes> =
                        args.assignments.into_iter().collect();
                    for m in group.members.values_mut() {
                        m.assignment = assignments.remove(&m.id).unwrap_or_default();
                    }
                    group.transition(GroupState::Stable, now);
                    group.persist_metadata(out);
                    propagate_assignment(group, None, out);
                }
            }
            GroupState::Stable => {
                group.pending_sync.remove(&args.member_id);
                if let Some(m) = group.members.get_mut(&args.member_id) {
                    m.session_deadline_ms = now.monotonic_ms + m.session_timeout_ms as i64;
                    out.push(Output::Sync(
                        request,
                        SyncResult {
                            error: None,
                            protocol_type: group.protocol_type.clone(),
                            protocol_name: group.protocol.clone(),
                            assignment: m.assignment.clone(),
                        },
                    ));
                }
                if group.pending_sync.is_empty() {
                    group.sync_deadline_ms = None;
                }
            }
        }
    }

    // ---------------------------------------------------------------- Heartbeat

    pub fn handle_heartbeat(&mut self, args: HeartbeatArgs, now: Now) -> Option<ErrorCode> {
        let Some(group) = self.groups.get_mut(&args.group_id) else {
            return Some(ErrorCode::UnknownMemberId);
        };
        if let Some(e) = group.access_error(args.group_instance_id.as_deref(), &args.member_id) {
            return Some(e);
        }
        let state = group.state;
        let generation = group.generation;
        let Some(member) = group.members.get_mut(&args.member_id) else {
            return Some(ErrorCode::UnknownMemberId);
        };
        if args.generation_id != generation {
            return Some(ErrorCode::IllegalGeneration);
        }
        match state {
            GroupState::Empty | GroupState::Dead => Some(ErrorCode::UnknownMemberId),
            GroupState::PreparingRebalance => {
                member.session_deadline_ms = now.monotonic_ms + member.session_timeout_ms as i64;
                Some(ErrorCode::RebalanceInProgress)
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                member.session_deadline_ms = now.monotonic_ms + member.session_timeout_ms as i64;
                None
            }
        }
    }

    // ---------------------------------------------------------------- LeaveGroup

    pub fn handle_leave(
        &mut self,
        group_id: &str,
        members: Vec<LeaveMember>,
        now: Now,
        out: &mut Vec<Output>,
    ) -> LeaveResult {
        let config = self.config.clone();
        let Some(group) = self.groups.get_mut(group_id) else {
            return LeaveResult {
                error: None,
                members: members
                    .into_iter()
                    .map(|m| {
                        (
                            m.member_id,
                            m.group_instance_id,
                            Some(ErrorCode::UnknownMemberId),
                        )
                    })
                    .collect(),
            };
        };
        if group.state == GroupState::Dead {
            return LeaveResult {
                error: Some(ErrorCode::CoordinatorNotAvailable),
                members: Vec::new(),
            };
        }
        let mut results = Vec::with_capacity(members.len());
        for m in members {
            let error = match &m.group_instance_id {
                Some(instance) => match group.static_members.get(instance).cloned() {
                    None => Some(ErrorCode::UnknownMemberId),
                    // An unknown member id ("" from admin tools) may remove a static member
                    // by its instance id; a different known id is a fenced zombie.
                    Some(existing) if !m.member_id.is_empty() && existing != m.member_id => {
                        Some(ErrorCode::FencedInstanceId)
                    }
                    Some(existing) => {
                        remove_member_and_update(group, &config, &existing, now, out);
                        None
                    }
                },
                None => {
                    if group.pending_members.remove(&m.member_id).is_some() {
                        if group.state == GroupState::PreparingRebalance {
                            check_join_complete(group, now, out);
                        }
                        None
                    } else if group.members.contains_key(&m.member_id) {
                        remove_member_and_update(group, &config, &m.member_id, now, out);
                        None
                    } else {
                        Some(ErrorCode::UnknownMemberId)
                    }
                }
            };
            results.push((m.member_id, m.group_instance_id, error));
        }
        LeaveResult {
            error: None,
            members: results,
        }
    }

    // ---------------------------------------------------------------- Offsets

    /// OffsetCommit, first half: validates and builds the records. The caller appends them,
    /// waits for durability, then calls [`Coordinator::apply_commit`]; only then is the
    /// commit acknowledged. A group-level error answers every partition.
    pub fn handle_offset_commit(
        &mut self,
        partition: i32,
        args: CommitArgs,
        now: Now,
    ) -> Result<CommitPlan, ErrorCode> {
        if args.group_id.is_empty() || args.group_id.len() > GROUP_NAME_LEN_MAX {
            return Err(ErrorCode::InvalidGroupId);
        }
        if !self.groups.contains_key(&args.group_id) {
            if args.generation_id >= 0 {
                return Err(ErrorCode::IllegalGeneration);
            }
            if self.groups.len() >= SHARD_GROUPS_MAX {
                return Err(ErrorCode::CoordinatorNotAvailable);
            }
            // A commit outside group management (generation -1) creates an empty group.
            self.groups.insert(
                args.group_id.clone(),
                Group::new(&args.group_id, partition, now),
            );
        }
        let Some(group) = self.groups.get_mut(&args.group_id) else {
            return Err(ErrorCode::CoordinatorNotAvailable);
        };
        if let Some(e) = group.access_error(args.group_instance_id.as_deref(), &args.member_id) {
            return Err(e);
        }
        let simple = args.generation_id < 0 && group.state == GroupState::Empty;
        if !simple {
            if group.state == GroupState::CompletingRebalance {
                return Err(ErrorCode::RebalanceInProgress);
            }
            if !group.members.contains_key(&args.member_id) {
                return Err(ErrorCode::UnknownMemberId);
            }
            if args.generation_id != group.generation {
                return Err(ErrorCode::IllegalGeneration);
            }
            if let Some(m) = group.members.get_mut(&args.member_id) {
                m.session_deadline_ms = now.monotonic_ms + m.session_timeout_ms as i64;
            }
        }
        let mut plan = CommitPlan {
            partition: group.partition,
            results: Vec::with_capacity(args.offsets.len()),
            records: Vec::new(),
            accepted: Vec::new(),
        };
        for o in args.offsets {
            let metadata = o.metadata.unwrap_or_default();
            let key = (o.topic.clone(), o.partition);
            if metadata.len() > OFFSET_METADATA_BYTES_MAX {
                plan.results.push(Some(ErrorCode::OffsetMetadataTooLarge));
                continue;
            }
            if !group.offsets.contains_key(&key) && group.offsets.len() >= GROUP_OFFSETS_MAX {
                plan.results.push(Some(ErrorCode::OffsetMetadataTooLarge));
                continue;
            }
            let value = OffsetValue {
                offset: o.offset,
                leader_epoch: o.leader_epoch,
                metadata,
                commit_timestamp_ms: now.wall_ms,
            };
            plan.records.push(LogRecord {
                key: offset_key(&group.id, &o.topic, o.partition),
                value: Some(record::encode_offset(&value)),
            });
            plan.accepted.push((o.topic, o.partition, value));
            plan.results.push(None);
        }
        Ok(plan)
    }

    /// OffsetCommit, second half: the records are durable (their batch ends at
    /// `log_offset`), make the offsets visible.
    pub fn apply_commit(
        &mut self,
        group_id: &str,
        partition: i32,
        accepted: Vec<(String, i32, OffsetValue)>,
        log_offset: i64,
        now: Now,
    ) {
        if !self.groups.contains_key(group_id) {
            // Deleted while the commit was being written; Kafka re-creates it the same way.
            self.groups
                .insert(group_id.to_string(), Group::new(group_id, partition, now));
        }
        if let Some(group) = self.groups.get_mut(group_id) {
            for (topic, p, value) in accepted {
                group.commit_offset((topic, p), value, log_offset);
            }
        }
    }

    /// TxnOffsetCommit, first half: validates as Kafka's group coordinator does for a
    /// transactional commit, builds the records (the host appends them as a transactional
    /// batch of the producer) and holds the offsets pending for the producer at once, so
    /// OffsetFetch with `require_stable` sees them as unstable while they are written. Then
    /// [`Coordinator::txn_commit_appended`] or [`Coordinator::txn_commit_failed`]; the
    /// producer's marker ends them ([`Coordinator::complete_txn`]).
    ///
    /// Checks, in Kafka's order: a commit to an unknown group creates it only without member
    /// fields (else ILLEGAL_GENERATION); a dead group is COORDINATOR_NOT_AVAILABLE; member
    /// fields, when any is given and the group is not an empty one addressed without a
    /// generation, must name a member (static: FENCED_INSTANCE_ID for another incarnation,
    /// UNKNOWN_MEMBER_ID) of the current generation (ILLEGAL_GENERATION). Unlike
    /// OffsetCommit, no REBALANCE_IN_PROGRESS: a transaction's commit is not refused while
    /// the group rebalances.
    pub fn handle_txn_offset_commit(
        &mut self,
        partition: i32,
        args: TxnCommitArgs,
        now: Now,
    ) -> Result<CommitPlan, ErrorCode> {
        if args.group_id.is_empty() || args.group_id.len() > GROUP_NAME_LEN_MAX {
            return Err(ErrorCode::InvalidGroupId);
        }
        if !self.groups.contains_key(&args.group_id) {
            if !args.member_id.is_empty() || args.generation_id >= 0 {
                return Err(ErrorCode::IllegalGeneration);
            }
            if self.groups.len() >= SHARD_GROUPS_MAX {
                return Err(ErrorCode::CoordinatorNotAvailable);
            }
            self.groups.insert(
                args.group_id.clone(),
                Group::new(&args.group_id, partition, now),
            );
        }
        let Some(group) = self.groups.get_mut(&args.group_id) else {
            return Err(ErrorCode::CoordinatorNotAvailable);
        };
        if group.state == GroupState::Dead {
            return Err(ErrorCode::CoordinatorNotAvailable);
        }
        let simple = args.generation_id < 0 && group.state == GroupState::Empty;
        let has_member_fields = args.generation_id >= 0
            || !args.member_id.is_empty()
            || args.group_instance_id.is_some();
        if !simple && has_member_fields {
            if let Some(instance) = &args.group_instance_id {
                match group.static_members.get(instance) {
                    None => return Err(ErrorCode::UnknownMemberId),
                    Some(existing) if *existing != args.member_id => {
                        return Err(ErrorCode::FencedInstanceId)
                    }
                    Some(_) => {}
                }
            }
            if !group.members.contains_key(&args.member_id) {
                return Err(ErrorCode::UnknownMemberId);
            }
            if args.generation_id != group.generation {
                return Err(ErrorCode::IllegalGeneration);
            }
        }
        let mut plan = CommitPlan {
            partition: group.partition,
            results: Vec::with_capacity(args.offsets.len()),
            records: Vec::new(),
            accepted: Vec::new(),
        };
        let producer = args.producer_id;
        for o in args.offsets {
            let metadata = o.metadata.unwrap_or_default();
            let key = (o.topic.clone(), o.partition);
            if metadata.len() > OFFSET_METADATA_BYTES_MAX {
                plan.results.push(Some(ErrorCode::OffsetMetadataTooLarge));
                continue;
            }
            let known = group
                .pending_txn
                .get(&producer)
                .is_some_and(|m| m.contains_key(&key));
            if !known && group.pending_txn_count() >= GROUP_TXN_OFFSETS_MAX {
                plan.results.push(Some(ErrorCode::OffsetMetadataTooLarge));
                continue;
            }
            let value = OffsetValue {
                offset: o.offset,
                leader_epoch: o.leader_epoch,
                metadata,
                commit_timestamp_ms: now.wall_ms,
            };
            plan.records.push(LogRecord {
                key: offset_key(&group.id, &o.topic, o.partition),
                value: Some(record::encode_offset(&value)),
            });
            group.pending_txn.entry(producer).or_default().insert(
                key,
                PendingTxnOffset {
                    value: value.clone(),
                    log_offset: None,
                },
            );
            plan.accepted.push((o.topic, o.partition, value));
            plan.results.push(None);
        }
        Ok(plan)
    }

    /// TxnOffsetCommit, second half: the producer's records are durable in the batch ending
    /// at `log_offset`. Offsets replaced meanwhile by a newer commit of the same producer
    /// (or dropped by a marker) are left alone.
    pub fn txn_commit_appended(
        &mut self,
        group_id: &str,
        producer_id: ProducerId,
        accepted: &[(String, i32, OffsetValue)],
        log_offset: i64,
    ) {
        let Some(pending) = self
            .groups
            .get_mut(group_id)
            .and_then(|g| g.pending_txn.get_mut(&producer_id))
        else {
            return;
        };
        for (topic, p, value) in accepted {
            if let Some(e) = pending.get_mut(&(topic.clone(), *p)) {
                if e.log_offset.is_none() && e.value == *value {
                    e.log_offset = Some(log_offset);
                }
            }
        }
    }

    /// TxnOffsetCommit failed to be written: its offsets are no longer pending (Kafka's
    /// `failPendingTxnOffsetCommit`).
    pub fn txn_commit_failed(
        &mut self,
        group_id: &str,
        producer_id: ProducerId,
        accepted: &[(String, i32, OffsetValue)],
    ) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        if let Some(pending) = group.pending_txn.get_mut(&producer_id) {
            for (topic, p, value) in accepted {
                let key = (topic.clone(), *p);
                if pending
                    .get(&key)
                    .is_some_and(|e| e.log_offset.is_none() && e.value == *value)
                {
                    pending.remove(&key);
                }
            }
            if pending.is_empty() {
                group.pending_txn.remove(&producer_id);
            }
        }
    }

    /// The producer's COMMIT or ABORT marker is in `__consumer_offsets`-`partition` (written
    /// live, or read back while loading): every group of the partition applies or drops the
    /// offsets the producer committed in that transaction.
    pub fn complete_txn(&mut self, partition: i32, producer_id: ProducerId, outcome: TxnOutcome) {
        for g in self
            .groups
            .values_mut()
            .filter(|g| g.partition == partition)
        {
            g.complete_txn(producer_id, outcome);
        }
    }

    /// OffsetFetch: `None` partitions means every committed offset of the group. Unknown
    /// groups and partitions answer offset -1, as Kafka does. With `require_stable` (v7+,
    /// KIP-447), a partition with an offset pending in an open transaction answers
    /// UNSTABLE_OFFSET_COMMIT instead (the consumer retries until the transaction ends);
    /// without it, the last committed offset.
    pub fn handle_offset_fetch(
        &self,
        group_id: &str,
        partitions: Option<Vec<(String, i32)>>,
        require_stable: bool,
    ) -> Vec<FetchedOffset> {
        let group = self.groups.get(group_id);
        let found = |topic: &str, p: i32| -> FetchedOffset {
            let key = (topic.to_string(), p);
            let unstable = require_stable && group.is_some_and(|g| g.has_pending_txn(&key));
            match group.and_then(|g| g.offsets.get(&key)) {
                Some(c) if !unstable => FetchedOffset {
                    topic: topic.to_string(),
                    partition: p,
                    offset: c.value.offset,
                    leader_epoch: c.value.leader_epoch,
                    metadata: Some(c.value.metadata.clone()),
                    error: None,
                },
                _ => FetchedOffset {
                    topic: topic.to_string(),
                    partition: p,
                    offset: -1,
                    leader_epoch: -1,
                    metadata: Some(String::new()),
                    error: unstable.then_some(ErrorCode::UnstableOffsetCommit),
                },
            }
        };
        match partitions {
            Some(list) => list.iter().map(|(t, p)| found(t, *p)).collect(),
            None => {
                let mut all: Vec<FetchedOffset> = group
                    .map(|g| g.offsets.keys().map(|(t, p)| found(t, *p)).collect())
                    .unwrap_or_default();
                all.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
                all
            }
        }
    }

    /// OffsetDelete: per-partition results, or a group-level error.
    pub fn handle_offset_delete(
        &mut self,
        group_id: &str,
        partitions: Vec<(String, i32)>,
        out: &mut Vec<Output>,
    ) -> Result<Vec<Option<ErrorCode>>, ErrorCode> {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Err(ErrorCode::GroupIdNotFound);
        };
        let subscribed = match group.state {
            GroupState::Dead => return Err(ErrorCode::GroupIdNotFound),
            GroupState::Empty => HashSet::new(),
            _ => match group.subscribed_topics() {
                Some(t) => t,
                None => return Err(ErrorCode::NonEmptyGroup),
            },
        };
        let mut results = Vec::with_capacity(partitions.len());
        let mut records = Vec::new();
        for (topic, p) in partitions {
            if subscribed.contains(&topic) {
                results.push(Some(ErrorCode::GroupSubscribedToTopic));
                continue;
            }
            if group.remove_offset(&(topic.clone(), p)) {
                records.push(LogRecord {
                    key: offset_key(group_id, &topic, p),
                    value: None,
                });
            }
            results.push(None);
        }
        if !records.is_empty() {
            out.push(Output::Append {
                partition: group.partition,
                records,
            });
        }
        Ok(results)
    }

    /// Topics deleted from the cluster (Kafka's `onPartitionsDeleted`): in every group, the
    /// committed offsets of their partitions and any open transaction's offsets for them
    /// are removed with tombstones. A topic created again under the same name (Streams'
    /// application reset deletes and recreates its internal topics) is then consumed from
    /// the group's reset position, not from offsets that pointed into the old log.
    pub fn on_topics_deleted(&mut self, topics: &HashSet<String>, out: &mut Vec<Output>) {
        for group in self.groups.values_mut() {
            let mut keys: Vec<(String, i32)> = group
                .offsets
                .keys()
                .chain(group.pending_txn.values().flat_map(HashMap::keys))
                .filter(|(t, _)| topics.contains(t))
                .cloned()
                .collect();
            keys.sort_unstable();
            keys.dedup();
            let mut records = Vec::new();
            for key in keys {
                if group.remove_offset(&key) {
                    records.push(LogRecord {
                        key: offset_key(&group.id, &key.0, key.1),
                        value: None,
                    });
                }
            }
            if !records.is_empty() {
                out.push(Output::Append {
                    partition: group.partition,
                    records,
                });
            }
        }
    }

    // ---------------------------------------------------------------- Admin

    pub fn describe(&self, group_id: &str) -> GroupDescription {
        let Some(g) = self.groups.get(group_id) else {
            return GroupDescription {
                group_id: group_id.to_string(),
                state: GroupState::Dead.name(),
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            };
        };
        // As Kafka: member metadata and assignments are only shown once the group is stable.
        let stable = g.state == GroupState::Stable;
        let protocol = g.protocol.clone().unwrap_or_default();
        GroupDescription {
            group_id: group_id.to_string(),
            state: g.state.name(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            protocol: if stable {
                protocol.clone()
            } else {
                String::new()
            },
            members: g
                .members
                .values()
                .map(|m| MemberDescription {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata_for(&protocol)
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        }
    }

    pub fn list(&self, states: &[String], types: &[String]) -> Vec<GroupListing> {
        let mut out: Vec<GroupListing> = self
            .groups
            .values()
            .filter(|g| g.state != GroupState::Dead)
            .filter(|g| {
                states.is_empty()
                    || states
                        .iter()
                        .any(|s| s.eq_ignore_ascii_case(g.state.name()))
            })
            // KIP-848 group types: every group here is "classic" (a "consumer" filter asks
            // for new-protocol groups, which this coordinator does not run).
            .filter(|_| types.is_empty() || types.iter().any(|t| t.eq_ignore_ascii_case("classic")))
            .map(|g| GroupListing {
                group_id: g.id.clone(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                state: g.state.name(),
            })
            .collect();
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out
    }

    /// DeleteGroups for one group: only an empty group may be deleted; its offsets and
    /// metadata get tombstones.
    pub fn handle_delete_group(
        &mut self,
        group_id: &str,
        out: &mut Vec<Output>,
    ) -> Option<ErrorCode> {
        if group_id.is_empty() {
            return Some(ErrorCode::InvalidGroupId);
        }
        let Some(group) = self.groups.get(group_id) else {
            return Some(ErrorCode::GroupIdNotFound);
        };
        match group.state {
            GroupState::Dead => return Some(ErrorCode::GroupIdNotFound),
            GroupState::Empty => {}
            _ => return Some(ErrorCode::NonEmptyGroup),
        }
        // Tombstones for the offsets pending in open transactions too, as Kafka writes them:
        // replayed, they drop those offsets, so a later COMMIT marker brings none back.
        let mut keys: HashSet<&(String, i32)> = group.offsets.keys().collect();
        keys.extend(group.pending_txn.values().flat_map(HashMap::keys));
        let mut records: Vec<LogRecord> = keys
            .into_iter()
            .map(|(t, p)| LogRecord {
                key: offset_key(group_id, t, *p),
                value: None,
            })
            .collect();
        records.push(LogRecord {
            key: record::encode_key(&RecordKey::Group {
                group: group_id.to_string(),
            }),
            value: None,
        });
        out.push(Output::Append {
            partition: group.partition,
            records,
        });
        self.groups.remove(group_id);
        None
    }

    // ---------------------------------------------------------------- Time

    /// Advances every timer to `now`: initial delay and rebalance timeout of join phases,
    /// pending-sync timeouts, session expiry, pending-member expiry and offset retention.
    pub fn tick(&mut self, now: Now, out: &mut Vec<Output>) {
        for group in self.groups.values_mut() {
            tick_group(group, &self.config, now, out);
        }
        if now.monotonic_ms >= self.next_retention_check_ms {
            self.next_retention_check_ms =
                now.monotonic_ms + self.config.offsets_retention_check_interval_ms;
            self.expire_offsets(now, out);
        }
    }

    /// Offset retention (Kafka 2.1+): offsets of a group that has been Empty for
    /// `offsets_retention_ms` (counted from when it became Empty, or from the commit for a
    /// group never managed by the coordinator) are deleted with tombstones; a group left with
    /// nothing is removed.
    pub fn expire_offsets(&mut self, now: Now, out: &mut Vec<Output>) {
        let retention = self.config.offsets_retention_ms;
        let mut dead = Vec::new();
        for group in self.groups.values_mut() {
            if group.state != GroupState::Empty {
                continue;
            }
            let managed = group.protocol_type.is_some() || group.generation > 0;
            // An offset with a transactional commit pending is kept until the transaction
            // ends, as Kafka does.
            let expired: Vec<(String, i32)> = group
                .offsets
                .iter()
                .filter(|(k, c)| {
                    let base = if managed {
                        group.state_timestamp_ms
                    } else {
                        c.value.commit_timestamp_ms
                    };
                    base.saturating_add(retention) <= now.wall_ms && !group.has_pending_txn(k)
                })
                .map(|(k, _)| k.clone())
                .collect();
            let mut records = Vec::new();
            for (t, p) in expired {
                group.offsets.remove(&(t.clone(), p));
                records.push(LogRecord {
                    key: offset_key(&group.id, &t, p),
                    value: None,
                });
            }
            if group.offsets.is_empty()
                && group.pending_txn.is_empty()
                && group.state_timestamp_ms.saturating_add(retention) <= now.wall_ms
            {
                records.push(LogRecord {
                    key: record::encode_key(&RecordKey::Group {
                        group: group.id.clone(),
                    }),
                    value: None,
                });
                dead.push(group.id.clone());
            }
            if !records.is_empty() {
                out.push(Output::Append {
                    partition: group.partition,
                    records,
                });
            }
        }
        for id in dead {
            self.groups.remove(&id);
        }
    }

    // ---------------------------------------------------------------- Loading

    /// Applies one record read back from `__consumer_offsets` partition `partition`, stored
    /// at `log_offset`; `txn` is the producer whose transactional batch held it, if one did.
    /// Records must be given in log order, with the transaction markers among them
    /// ([`Coordinator::complete_txn`]): the last write for a key wins, so duplicates left by
    /// the (not yet compacted) log are harmless, and a transaction's offsets stay pending
    /// until its marker. Call [`Coordinator::finish_load`] afterwards.
    pub fn load_record(
        &mut self,
        partition: i32,
        log_offset: i64,
        txn: Option<ProducerId>,
        key: &[u8],
        value: Option<&[u8]>,
        now: Now,
    ) -> Result<(), RecordError> {
        match record::decode_key(key)? {
            RecordKey::Offset {
                group,
                topic,
                partition: p,
            } => match value {
                Some(v) => {
                    let v = record::decode_offset(v)?;
                    let g = self
                        .groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(&group, partition, now));
                    match txn {
                        Some(producer) => {
                            g.pending_txn.entry(producer).or_default().insert(
                                (topic, p),
                                PendingTxnOffset {
                                    value: v,
                                    log_offset: Some(log_offset),
                                },
                            );
                        }
                        None => g.commit_offset((topic, p), v, log_offset),
                    }
                }
                None => {
                    if let Some(g) = self.groups.get_mut(&group) {
                        g.remove_offset(&(topic, p));
                    }
                }
            },
            RecordKey::Group { group } => match value {
                Some(v) => {
                    let v = record::decode_group(v)?;
                    let g = self
                        .groups
                        .entry(group.clone())
                        .or_insert_with(|| Group::new(&group, partition, now));
                    g.protocol_type = Some(v.protocol_type).filter(|t| !t.is_empty());
                    g.generation = v.generation;
                    g.protocol = v.protocol;
                    g.leader = v.leader;
                    g.state_timestamp_ms = v.current_state_timestamp_ms;
                    g.members.clear();
                    g.static_members.clear();
                    for m in v.members {
                        if let Some(i) = &m.group_instance_id {
                            g.static_members.insert(i.clone(), m.member_id.clone());
                        }
                        let protocol = g.protocol.clone().unwrap_or_default();
                        g.members.insert(
                            m.member_id.clone(),
                            Member {
                                id: m.member_id,
                                instance_id: m.group_instance_id,
                                client_id: m.client_id,
                                client_host: m.client_host,
                                session_timeout_ms: m.session_timeout_ms,
                                rebalance_timeout_ms: m.rebalance_timeout_ms,
                                protocols: vec![(protocol, m.subscription)],
                                assignment: m.assignment,
                                awaiting_join: None,
                                awaiting_sync: None,
                                session_deadline_ms: 0,
                            },
                        );
                    }
                }
                None => {
                    // The group was deleted (or expired); offsets written after this record
                    // re-create it.
                    self.groups.remove(&group);
                }
            },
        }
        Ok(())
    }

    /// Forgets every group of `partition`: this broker no longer coordinates it. Members
    /// parked in a JoinGroup or SyncGroup are answered NOT_COORDINATOR, as Kafka's coordinator
    /// does when it unloads a group: they look for the new coordinator at once instead of
    /// waiting out their request timeout for an answer nobody would send.
    pub fn unload_partition(&mut self, partition: i32, out: &mut Vec<Output>) {
        self.groups.retain(|_, g| {
            if g.partition != partition {
                return true;
            }
            g.answer_parked(ErrorCode::NotCoordinator, out);
            false
        });
    }

    /// The broker is shutting down: every member parked in a JoinGroup or SyncGroup is
    /// answered NOT_COORDINATOR (it finds the coordinator again once it is back or moved), so
    /// no connection holds the shutdown for a rebalance that will not complete here.
    pub fn release_parked(&mut self, out: &mut Vec<Output>) {
        for g in self.groups.values_mut() {
            g.answer_parked(ErrorCode::NotCoordinator, out);
        }
    }

    /// Ends loading a partition: loaded members get a fresh session timeout from `now`
    /// (as Kafka schedules them on load), groups with members are Stable, others Empty.
    pub fn finish_load(&mut self, partition: i32, now: Now) {
        self.groups.retain(|_, g| {
            g.partition != partition
                || !g.members.is_empty()
                || !g.offsets.is_empty()
                || !g.pending_txn.is_empty()
                || g.generation > 0
        });
        for g in self
            .groups
            .values_mut()
            .filter(|g| g.partition == partition)
        {
            for m in g.members.values_mut() {
                m.session_deadline_ms = now.monotonic_ms + m.session_timeout_ms as i64;
            }
            if g.members.is_empty() {
                g.state = GroupState::Empty;
            } else {
                g.state = GroupState::Stable;
                if g.leader.as_ref().is_none_or(|l| !g.members.contains_key(l)) {
                    g.leader = g.members.keys().next().cloned();
                }
            }
        }
    }
}

// -------------------------------------------------------------------- join helpers

fn join_unknown_member(
    group: &mut Group,
    config: &GroupConfig,
    request: RequestId,
    args: JoinArgs,
    now: Now,
    out: &mut Vec<Output>,
) {
    let new_id = Coordinator::new_member_id(&args.client_id);
    if let Some(instance) = args.group_instance_id.clone() {
        if let Some(old_id) = group.static_members.get(&instance).cloned() {
            return update_static_member_and_rebalance(
                group, config, request, args, old_id, new_id, now, out,
            );
        }
        return add_member_and_rebalance(group, config, request, args, new_id, now, out);
    }
    if args.require_known_member_id {
        if group.pending_members.len() >= GROUP_PENDING_MEMBERS_MAX {
            out.push(Output::Join(
                request,
                JoinResult::error("", ErrorCode::GroupMaxSizeReached),
            ));
            return;
        }
        // KIP-394: hand out the id and wait for the member to come back with it, so a
        // client that never does cannot be counted as a member.
        group.pending_members.insert(
            new_id.clone(),
            now.monotonic_ms + args.session_timeout_ms as i64,
        );
        out.push(Output::Join(
            request,
            JoinResult::error(&new_id, ErrorCode::MemberIdRequired),
        ));
        return;
    }
    add_member_and_rebalance(group, config, request, args, new_id, now, out);
}

fn join_known_member(
    group: &mut Group,
    config: &GroupConfig,
    request: RequestId,
    args: JoinArgs,
    now: Now,
    out: &mut Vec<Output>,
) {
    let member_id = args.member_id.clone();
    if group.pending_members.remove(&member_id).is_some() {
        return add_member_and_rebalance(group, config, request, args, member_id, now, out);
    }
    if group.is_static_member_fenced(args.group_instance_id.as_deref(), &member_id) {
        out.push(Output::Join(
            request,
            JoinResult::error(&member_id, ErrorCode::FencedInstanceId),
        ));
        return;
    }
    let Some(member) = group.members.get(&member_id) else {
        out.push(Output::Join(
            request,
            JoinResult::error(&member_id, ErrorCode::UnknownMemberId),
        ));
        return;
    };
    let same = member.same_protocols(&args.protocols);
    let is_leader = group.leader.as_deref() == Some(member_id.as_str());
    match group.state {
        GroupState::PreparingRebalance => {
            update_member_and_rebalance(group, config, request, args, now, out)
        }
        GroupState::CompletingRebalance => {
            if same {
                // A retried join after the join phase: answer with the current generation.
                let result = group.join_result(&member_id, is_leader);
                out.push(Output::Join(request, result));
            } else {
                update_member_and_rebalance(group, config, request, args, now, out);
            }
        }
        GroupState::Stable => {
            if is_leader || !same {
                // The leader rejoining (e.g. its subscription changed) or changed metadata
                // forces a rebalance.
                update_member_and_rebalance(group, config, request, args, now, out);
            } else {
                if let Some(m) = group.members.get_mut(&member_id) {
                    m.session_deadline_ms = now.monotonic_ms + m.session_timeout_ms as i64;
                }
                let result = group.join_result(&member_id, false);
                out.push(Output::Join(request, result));
            }
        }
        GroupState::Empty | GroupState::Dead => {
            out.push(Output::Join(
                request,
                JoinResult::error(&member_id, ErrorCode::UnknownMemberId),
            ));
        }
    }
}

fn add_member_and_rebalance(
    group: &mut Group,
    config: &GroupConfig,
    request: RequestId,
    args: JoinArgs,
    member_id: String,
    now: Now,
    out: &mut Vec<Output>,
) {
    if group.members.len() >= GROUP_MEMBERS_MAX {
        out.push(Output::Join(
            request,
            JoinResult::error(&member_id, ErrorCode::GroupMaxSizeReached),
        ));
        return;
    }
    if group.members.is_empty() {
        group.protocol_type = Some(args.protocol_type.clone());
    }
    if let Some(instance) = &args.group_instance_id {
        group
            .static_members
            .insert(instance.clone(), member_id.clone());
    }
    group.members.insert(
        member_id.clone(),
        Member {
            id: member_id.clone(),
            instance_id: args.group_instance_id,
            client_id: args.client_id,
            client_host: args.client_host,
            session_timeout_ms: args.session_timeout_ms,
            rebalance_timeout_ms: args.rebalance_timeout_ms,
            protocols: args.protocols,
            assignment: Bytes::new(),
            awaiting_join: Some(request),
            awaiting_sync: None,
            session_deadline_ms: now.monotonic_ms + args.session_timeout_ms as i64,
        },
    );
    if group.leader.is_none() {
        group.leader = Some(member_id);
    }
    group.new_member_added = true;
    match group.state {
        GroupState::PreparingRebalance => check_join_complete(group, now, out),
        _ => prepare_rebalance(group, config, now, out),
    }
}

fn update_member_and_rebalance(
    group: &mut Group,
    config: &GroupConfig,
    request: RequestId,
    args: JoinArgs,
    now: Now,
    out: &mut Vec<Output>,
) {
    if let Some(m) = group.members.get_mut(&args.member_id) {
        m.protocols = args.protocols;
        m.rebalance_timeout_ms = args.rebalance_timeout_ms;
        m.session_timeout_ms = args.session_timeout_ms;
        m.session_deadline_ms = now.monotonic_ms + args.session_timeout_ms as i64;
        if let Some(old) = m.awaiting_join.replace(request) {
            // The client gave up on its earlier JoinGroup and sent another.
            out.push(Output::Join(
                old,
                JoinResult::error(&args.member_id, ErrorCode::RebalanceInProgress),
            ));
        }
    }
    match group.state {
        GroupState::PreparingRebalance => check_join_complete(group, now, out),
        _ => prepare_rebalance(group, config, now, out),
    }
}

/// KIP-345: a static member restarted (new member id, same instance id). The old member id is
/// fenced; in a stable group the member gets the current generation back without a rebalance.
#[allow(clippy::too_many_arguments)]
fn update_static_member_and_rebalance(
    group: &mut Group,
    config: &GroupConfig,
    request: RequestId,
    args: JoinArgs,
    old_id: String,
    new_id: String,
    now: Now,
    out: &mut Vec<Output>,
) {
    let current_leader = group.leader.clone().unwrap_or_default();
    let Some(index) = group.members.get_index_of(&old_id) else {
        return add_member_and_rebalance(group, config, request, args, new_id, now, out);
    };
    let Some(mut member) = group.members.shift_remove(&old_id) else {
        return;
    };
    // Fence whatever the old incarnation is still waiting on.
    if let Some(r) = member.awaiting_join.take() {
        out.push(Output::Join(
            r,
            JoinResult::error(&old_id, ErrorCode::FencedInstanceId),
        ));
    }
    if let Some(r) = member.awaiting_sync.take() {
        out.push(Output::Sync(
            r,
            SyncResult::error(ErrorCode::FencedInstanceId),
        ));
    }
    let was_leader = current_leader == old_id;
    let selected_protocol_supported = group
        .protocol
        .as_ref()
        .is_none_or(|p| args.protocols.iter().any(|(n, _)| n == p));
    member.id = new_id.clone();
    member.protocols = args.protocols;
    member.rebalance_timeout_ms = args.rebalance_timeout_ms;
    member.session_timeout_ms = args.session_timeout_ms;
    member.session_deadline_ms = now.monotonic_ms + args.session_timeout_ms as i64;
    member.client_id = args.client_id;
    member.client_host = args.client_host;
    member.awaiting_join = Some(request);
    group.members.insert(new_id.clone(), member);
    let last = group.members.len() - 1;
    group.members.move_index(last, index);
    if let Some(instance) = &args.group_instance_id {
        group
            .static_members
            .insert(instance.clone(), new_id.clone());
    }
    if was_leader {
        group.leader = Some(new_id.clone());
    }
    if group.pending_sync.remove(&old_id) {
        group.pending_sync.insert(new_id.clone());
    }
    match group.state {
        GroupState::Stable if selected_protocol_supported => {
            if let Some(m) = group.members.get_mut(&new_id) {
                m.awaiting_join = None;
            }
            group.persist_metadata(out);
            let skip = was_leader && args.supports_skip_assignment;
            let mut result = group.join_result(&new_id, skip);
            // Before KIP-814 the old leader id is returned so that a rejoining static leader
            // does not run an assignment a stable group would never propagate.
            result.leader = if skip { new_id.clone() } else { current_leader };
            result.skip_assignment = skip;
            out.push(Output::Join(request, result));
        }
        GroupState::PreparingRebalance => check_join_complete(group, now, out),
        _ => prepare_rebalance(group, config, now, out),
    }
}

// -------------------------------------------------------------------- rebalance helpers

fn prepare_rebalance(group: &mut Group, config: &GroupConfig, now: Now, out: &mut Vec<Output>) {
    if group.state == GroupState::CompletingRebalance {
        // Members waiting for an assignment that will never come are told to rejoin.
        for m in group.members.values_mut() {
            m.assignment = Bytes::new();
        }
        propagate_assignment(group, Some(ErrorCode::RebalanceInProgress), out);
    }
    let timeout = group.max_rebalance_timeout_ms();
    // With no configured delay the first join phase is an ordinary one.
    if group.state == GroupState::Empty && config.initial_rebalance_delay_ms > 0 {
        let delay = config.initial_rebalance_delay_ms.min(timeout.max(0));
        group.join_deadline_ms = Some(now.monotonic_ms + delay);
        group.initial_delay = Some(InitialDelay {
            delay_ms: delay,
            remaining_ms: (timeout - delay).max(0),
        });
        group.new_member_added = false;
    } else {
        group.join_deadline_ms = Some(now.monotonic_ms + timeout);
        group.initial_delay = None;
    }
    group.pending_sync.clear();
    group.sync_deadline_ms = None;
    group.transition(GroupState::PreparingRebalance, now);
    if group.initial_delay.is_none() {
        check_join_complete(group, now, out);
    }
}

/// Completes the join phase once every member has rejoined (not during the initial delay,
/// which waits for more members on purpose).
fn check_join_complete(group: &mut Group, now: Now, out: &mut Vec<Output>) {
    if group.state == GroupState::PreparingRebalance
        && group.initial_delay.is_none()
        && group.all_members_joined()
    {
        complete_join(group, now, out);
    }
}

fn complete_join(group: &mut Group, now: Now, out: &mut Vec<Output>) {
    // Members that did not rejoin in time are removed.
    let failed: Vec<String> = group
        .members
        .values()
        .filter(|m| m.awaiting_join.is_none())
        .map(|m| m.id.clone())
        .collect();
    for id in failed {
        remove_member(group, &id, out);
    }
    group.join_deadline_ms = None;
    group.initial_delay = None;
    group.generation += 1;
    if group.members.is_empty() {
        group.protocol = None;
        group.transition(GroupState::Empty, now);
        group.persist_metadata(out);
        return;
    }
    group.protocol = group.select_protocol();
    group.transition(GroupState::CompletingRebalance, now);
    if group
        .leader
        .as_ref()
        .is_none_or(|l| !group.members.contains_key(l))
    {
        group.leader = group.members.keys().next().cloned();
    }
    let leader = group.leader.clone().unwrap_or_default();
    let members = group.join_members();
    let base = group.join_result("", false);
    group.pending_sync = group.members.keys().cloned().collect();
    group.sync_deadline_ms = Some(now.monotonic_ms + group.max_rebalance_timeout_ms());
    for m in group.members.values_mut() {
        m.session_deadline_ms = now.monotonic_ms + m.session_timeout_ms as i64;
        if let Some(r) = m.awaiting_join.take() {
            let mut result = base.clone();
            result.member_id = m.id.clone();
            if m.id == leader {
                result.members = members.clone();
            }
            out.push(Output::Join(r, result));
        }
    }
}

/// Answers every member waiting in SyncGroup: with its assignment, or with `error`.
fn propagate_assignment(group: &mut Group, error: Option<ErrorCode>, out: &mut Vec<Output>) {
    for m in group.members.values_mut() {
        if let Some(r) = m.awaiting_sync.take() {
            let result = match error {
                Some(e) => SyncResult::error(e),
                None => SyncResult {
                    error: None,
                    protocol_type: group.protocol_type.clone(),
                    protocol_name: group.protocol.clone(),
                    assignment: m.assignment.clone(),
                },
            };
            out.push(Output::Sync(r, result));
        }
    }
}

/// Removes a member, answering whatever it is waiting on with UNKNOWN_MEMBER_ID.
fn remove_member(group: &mut Group, member_id: &str, out: &mut Vec<Output>) {
    let Some(m) = group.members.shift_remove(member_id) else {
        return;
    };
    if let Some(i) = &m.instance_id {
        if group.static_members.get(i).map(String::as_str) == Some(member_id) {
            group.static_members.remove(i);
        }
    }
    group.pending_sync.remove(member_id);
    if let Some(r) = m.awaiting_join {
        out.push(Output::Join(
            r,
            JoinResult::error(member_id, ErrorCode::UnknownMemberId),
        ));
    }
    if let Some(r) = m.awaiting_sync {
        out.push(Output::Sync(
            r,
            SyncResult::error(ErrorCode::UnknownMemberId),
        ));
    }
    if group.leader.as_deref() == Some(member_id) {
        group.leader = group.members.keys().next().cloned();
    }
}

fn remove_member_and_update(
    group: &mut Group,
    config: &GroupConfig,
    member_id: &str,
    now: Now,
    out: &mut Vec<Output>,
) {
    remove_member(group, member_id, out);
    match group.state {
        GroupState::Dead | GroupState::Empty => {}
        GroupState::Stable | GroupState::CompletingRebalance => {
            prepare_rebalance(group, config, now, out)
        }
        GroupState::PreparingRebalance => check_join_complete(group, now, out),
    }
}

fn tick_group(group: &mut Group, config: &GroupConfig, now: Now, out: &mut Vec<Output>) {
    // KIP-394 ids that were never used.
    let before = group.pending_members.len();
    group
        .pending_members
        .retain(|_, deadline| *deadline > now.monotonic_ms);
    if group.pending_members.len() != before {
        check_join_complete(group, now, out);
    }
    // Session expiry. Members waiting in a join or sync are bounded by the rebalance
    // timeouts below instead, as in Kafka.
    let expired: Vec<String> = group
        .members
        .values()
        .filter(|m| {
            m.session_deadline_ms <= now.monotonic_ms
                && m.awaiting_join.is_none()
                && m.awaiting_sync.is_none()
        })
        .map(|m| m.id.clone())
        .collect();
    for id in expired {
        remove_member_and_update(group, config, &id, now, out);
    }
    // The join phase's deadline: extend the initial delay while members keep arriving,
    // otherwise complete with whoever rejoined.
    if group.state == GroupState::PreparingRebalance
        && group
            .join_deadline_ms
            .is_some_and(|d| d <= now.monotonic_ms)
    {
        let extend = match &mut group.initial_delay {
            Some(delay) if group.new_member_added && delay.remaining_ms > 0 => {
                let step = delay.delay_ms.min(delay.remaining_ms).max(1);
                delay.remaining_ms -= step;
                Some(step)
            }
            _ => None,
        };
        match extend {
            Some(step) => {
                group.new_member_added = false;
                group.join_deadline_ms = Some(now.monotonic_ms + step);
            }
            None => complete_join(group, now, out),
        }
    }
    // Members that got a generation but never asked for their assignment.
    if matches!(
        group.state,
        GroupState::CompletingRebalance | GroupState::Stable
    ) && group
        .sync_deadline_ms
        .is_some_and(|d| d <= now.monotonic_ms)
    {
        group.sync_deadline_ms = None;
        let missing: Vec<String> = group.pending_sync.drain().collect();
        if !missing.is_empty() {
            for id in &missing {
                remove_member(group, id, out);
            }
            if group.members.is_empty() {
                group.generation += 1;
                group.protocol = None;
                group.transition(GroupState::Empty, now);
                group.persist_metadata(out);
            } else {
                prepare_rebalance(group, config, now, out);
            }
        }
    }
}
