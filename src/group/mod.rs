//! Consumer-group coordinator (Kafka's classic group protocol), sans-IO.
//!
//! [`Coordinator`] holds every group whose `__consumer_offsets` partition a shard owns: members,
//! generations, assignments and committed offsets. It never touches a socket, a file or a
//! clock: inputs are `handle_*` calls carrying a `clock::Now` (monotonic time for timers,
//! wall time for commit and state timestamps), and outputs are pushed onto a
//! `Vec<Output>` — "answer the JoinGroup/SyncGroup request with this id", "append these
//! records to partition p". Timeouts (initial rebalance delay, rebalance timeout, session
//! expiry, pending-sync expiry, offset retention) advance only in [`Coordinator::tick`], so
//! the whole state machine runs under a simulated clock in the unit tests.
//!
//! The shard glue (`crate::shard::groups`) owns the I/O: it holds the pending request futures
//! keyed by [`RequestId`], appends records to the log, waits for durability before
//! acknowledging offset commits, replays the log on start ([`Coordinator::load_record`]) and
//! calls `tick` periodically.
//!
//! States follow Kafka's `GroupCoordinator`: Empty → PreparingRebalance → CompletingRebalance
//! → Stable (→ Dead when deleted). Invariants: a member is in at most one of "awaiting join"
//! and "awaiting sync"; the leader, when set, is a member; a static instance id maps to
//! exactly one member id.
pub mod coordinator;
pub mod limits;
pub mod record;

#[cfg(test)]
mod tests;

use bytes::Bytes;

use crate::protocol::producer::{ProducerEpoch, ProducerId};

pub use coordinator::{Coordinator, GroupState};
pub use kafka_protocol::error::ResponseError as ErrorCode;

/// The internal topic holding committed offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Identifies a request whose answer may be deferred (JoinGroup, SyncGroup); the glue maps it
/// to the waiting connection.
pub type RequestId = u64;

/// Kafka's `String.hashCode()` of a group id (UTF-16 code units, wrapping arithmetic).
pub fn java_string_hashcode(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// The `__consumer_offsets` partition of a group: Kafka's
/// `Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount`, where `Utils.abs` maps
/// `i32::MIN` to 0.
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    let h = java_string_hashcode(group_id);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

/// Tunables, from the broker config.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// Kafka's group.initial.rebalance.delay.ms.
    pub initial_rebalance_delay_ms: i64,
    /// Kafka's group.min.session.timeout.ms.
    pub session_timeout_ms_min: i32,
    /// Kafka's group.max.session.timeout.ms.
    pub session_timeout_ms_max: i32,
    /// Kafka's offsets.retention.minutes, in ms.
    pub offsets_retention_ms: i64,
    /// Kafka's offsets.retention.check.interval.ms.
    pub offsets_retention_check_interval_ms: i64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            initial_rebalance_delay_ms: 3000,
            session_timeout_ms_min: 6000,
            session_timeout_ms_max: 1_800_000,
            offsets_retention_ms: 10080 * 60_000,
            offsets_retention_check_interval_ms: 600_000,
        }
    }
}

/// A record for the group's `__consumer_offsets` partition; `value: None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// What the coordinator asks its host to do.
#[derive(Debug)]
pub enum Output {
    Join(RequestId, JoinResult),
    Sync(RequestId, SyncResult),
    /// Append to partition `partition` of `__consumer_offsets`.
    Append {
        partition: i32,
        records: Vec<LogRecord>,
    },
}

#[derive(Debug, Clone)]
pub struct JoinArgs {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: a first join without a member id gets MEMBER_ID_REQUIRED (KIP-394).
    pub require_known_member_id: bool,
    /// v9+: a static leader that rejoins a stable group is told it is the leader but must
    /// skip the assignment (KIP-814).
    pub supports_skip_assignment: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinResult {
    pub error: Option<ErrorCode>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    pub members: Vec<JoinMember>,
}

impl JoinResult {
    pub fn error(member_id: &str, e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            generation_id: -1,
            member_id: member_id.to_string(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone)]
pub struct SyncArgs {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncResult {
    pub error: Option<ErrorCode>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub fn error(e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone)]
pub struct HeartbeatArgs {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
}

#[derive(Debug, Clone)]
pub struct LeaveMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveResult {
    /// Group-level error (COORDINATOR_NOT_AVAILABLE for a dead group).
    pub error: Option<ErrorCode>,
    pub members: Vec<(String, Option<String>, Option<ErrorCode>)>,
}

#[derive(Debug, Clone)]
pub struct CommitOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

#[derive(Debug, Clone)]
pub struct CommitArgs {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    pub offsets: Vec<CommitOffset>,
}

/// TxnOffsetCommit (KIP-98): offsets committed inside the producer's transaction. v0-v2
/// carry no member fields (member id "", generation -1, no instance id); v3+ (KIP-447) do,
/// and they are then validated as OffsetCommit's are.
#[derive(Debug, Clone)]
pub struct TxnCommitArgs {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation_id: i32,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub offsets: Vec<CommitOffset>,
}

/// An accepted commit: append `records`, wait for durability, then `apply_commit`.
#[derive(Debug)]
pub struct CommitPlan {
    pub partition: i32,
    /// Per requested offset, in request order: `None` if accepted.
    pub results: Vec<Option<ErrorCode>>,
    pub records: Vec<LogRecord>,
    pub accepted: Vec<(String, i32, record::OffsetValue)>,
}

/// One committed offset as OffsetFetch reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    /// UNSTABLE_OFFSET_COMMIT when `require_stable` asked about a partition with a pending
    /// transactional commit (offset -1 then).
    pub error: Option<ErrorCode>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberDescription>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    pub state: &'static str,
}
