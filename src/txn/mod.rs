//! Transaction coordinator (KIP-98 with KIP-360's producer recovery), sans-IO.
//!
//! [`Coordinator`] holds every transactional id whose `__transaction_state` partition a shard
//! leads. Like the group coordinator it touches no socket, file or clock: inputs are
//! `handle_*` calls carrying a [`crate::clock::Now`], outputs are [`Effect`]s pushed onto a
//! `Vec` — append this record to partition p of `__transaction_state`, write these COMMIT or
//! ABORT markers to these partitions, answer request r with this. Timers (transaction
//! timeouts, id expiry) advance only in [`Coordinator::tick`], so the state machine runs under
//! a simulated clock in its tests.
//!
//! The host (shard glue, a later piece) owns the I/O: it appends each `Effect::Append` and
//! reports back with [`Coordinator::handle_append_done`] once the record is durable on the
//! in-sync replicas (or failed); it sends WriteTxnMarkers and reports the partitions done with
//! [`Coordinator::handle_markers_done`]; it replays each led partition at election through
//! `load_partition`/`load_record`/`finish_load`; it feeds producer-id blocks from the
//! controller with [`Coordinator::add_producer_ids`].
//!
//! Invariants: at most one transition per transactional id is in flight (others get
//! CONCURRENT_TRANSACTIONS), so the log's order per id is the state's order; the state only
//! changes once its record is durable; every request gets exactly one `Effect::Respond`;
//! markers are only requested for a transaction whose PrepareCommit/PrepareAbort is durable,
//! and the CompleteCommit/CompleteAbort is written only after every marker was.
//! Faults survived: a failed append leaves the state as it was (a fence keeps its in-memory
//! epoch bump); losing leadership drops the partition's ids and answers their waiters with
//! NOT_COORDINATOR; a new leader's replay resends the markers of every prepared transaction.
//!
//! Implemented: transaction version 1 (the client never bumps the epoch at EndTxn). Not yet:
//! version 2 (KIP-890: epoch bump per transaction, implicit partition adds, abort from Empty).
pub mod admin;
pub mod coordinator;
pub mod limits;
pub mod record;
pub mod state;
pub mod verify;

#[cfg(test)]
mod tests;

use bytes::Bytes;

pub use coordinator::{Coordinator, ProducerIdBlock};
pub use kafka_protocol::error::ResponseError as ErrorCode;
pub use state::{TxnPartition, TxnResult, TxnState};

use crate::protocol::producer::{ProducerEpoch, ProducerId};

/// The internal topic holding transaction state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The `__transaction_state` partition of a transactional id: the same hash as groups use
/// for `__consumer_offsets` (Kafka's `Utils.abs(transactionalId.hashCode) % partitions`).
pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
    crate::group::partition_for(transactional_id, partitions)
}

/// Identifies a request awaiting its answer; the host maps it to the connection.
pub type RequestId = u64;

/// Identifies one `Effect::Append`, so a late completion for a superseded append (after a
/// partition moved away and back) is recognised and ignored.
pub type AppendId = u64;

/// Tunables, from the broker config (Kafka's names).
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// transaction.max.timeout.ms: larger client timeouts get INVALID_TRANSACTION_TIMEOUT.
    pub transaction_max_timeout_ms: i32,
    /// transactional.id.expiration.ms: an id idle this long (no transaction open) is removed.
    pub transactional_id_expiration_ms: i64,
    /// transaction.abort.timed.out.transaction.cleanup.interval.ms.
    pub abort_timed_out_interval_ms: i64,
    /// transaction.remove.expired.transaction.cleanup.interval.ms.
    pub remove_expired_interval_ms: i64,
    /// Partitions of `__consumer_offsets`, to find a group's partition for AddOffsetsToTxn.
    pub offsets_topic_partitions: i32,
}

impl Default for TxnConfig {
    fn default() -> Self {
        Self {
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            abort_timed_out_interval_ms: 10_000,
            remove_expired_interval_ms: 3_600_000,
            offsets_topic_partitions: 50,
        }
    }
}

/// A record for a `__transaction_state` partition; `value: None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// A producer's identity as InitProducerId answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    pub producer_id: ProducerId,
    pub epoch: ProducerEpoch,
}

/// InitProducerId with a transactional id.
#[derive(Debug, Clone)]
pub struct InitProducerIdArgs {
    pub transactional_id: String,
    pub transaction_timeout_ms: i32,
    /// v3+ (KIP-360): the id and epoch a producer recovering from an error already has.
    pub current: Option<ProducerIdAndEpoch>,
}

/// AddPartitionsToTxn for one transaction (a v4+ batch is split into these by the handler).
#[derive(Debug, Clone)]
pub struct AddPartitionsArgs {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub partitions: Vec<TxnPartition>,
}

/// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction.
#[derive(Debug, Clone)]
pub struct AddOffsetsArgs {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub group_id: String,
}

/// EndTxn.
#[derive(Debug, Clone)]
pub struct EndTxnArgs {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub result: TxnResult,
}

/// An answer to a client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    InitProducerId(Result<ProducerIdAndEpoch, ErrorCode>),
    /// One error for every partition of the request, as Kafka answers v1 clients.
    AddPartitions(Result<(), ErrorCode>),
    AddOffsets(Result<(), ErrorCode>),
    EndTxn(Result<(), ErrorCode>),
}

impl Response {
    /// The error carried, if any.
    pub fn error(&self) -> Option<ErrorCode> {
        match self {
            Response::InitProducerId(r) => r.err(),
            Response::AddPartitions(r) | Response::AddOffsets(r) | Response::EndTxn(r) => r.err(),
        }
    }
}

/// Markers to write: one WriteTxnMarkers entry per partition leader, with these fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerRequest {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// The coordinator's `__transaction_state` leader epoch: partitions refuse markers from
    /// an older coordinator (a zombie after failover).
    pub coordinator_epoch: i32,
    pub result: TxnResult,
    pub partitions: Vec<TxnPartition>,
}

/// Why an append failed, as the host reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendFailure {
    /// This broker no longer leads the partition: NOT_COORDINATOR to the waiter.
    NotLeader,
    /// The write did not reach the in-sync replicas in time, or storage failed:
    /// COORDINATOR_NOT_AVAILABLE to the waiter (Kafka's mapping; the client retries).
    Unavailable,
}

/// What the coordinator asks its host to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Append `record` to `partition` of `__transaction_state` (acks=all), then call
    /// `handle_append_done(id, ..)`.
    Append {
        id: AppendId,
        partition: i32,
        record: LogRecord,
    },
    /// Write these markers, then call `handle_markers_done` with the partitions written
    /// (retrying the others; a deleted partition counts as written).
    WriteMarkers(MarkerRequest),
    /// Answer this request.
    Respond {
        request: RequestId,
        response: Response,
    },
    /// The producer-id block ran out: fetch another and pass it to `add_producer_ids`.
    NeedProducerIds,
}

/// A transactional id as DescribeTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnDescription {
    pub transactional_id: String,
    pub state: TxnState,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub timeout_ms: i32,
    pub start_timestamp_ms: i64,
    pub partitions: Vec<TxnPartition>,
}
