//! The state of one transactional id, following Kafka's `TransactionState` and
//! `TransactionMetadata` (KIP-98, KIP-360).
//!
//! [`TxnState`] is the lifecycle and its legal transitions; [`TxnFields`] is everything about a
//! transactional id that `__transaction_state` persists (plus the last epoch, which Kafka keeps
//! in memory only); [`TxnMetadata`] adds the in-memory pending transition.
//!
//! Every change is two-step, as in Kafka: `prepare_*` computes the next [`TxnFields`] (a
//! "transit") and marks the transition pending; the coordinator appends the transit to the log
//! and, once it is durable, calls [`TxnMetadata::complete`]. While a transition is pending
//! every other request for the id gets CONCURRENT_TRANSACTIONS, so at most one record per id
//! is in flight and the log order is the state order. `complete` asserts the transition's
//! invariants (legal edge, epoch same or bumped, partitions only grow while Ongoing): a
//! violation is a coordinator bug, and stopping beats persisting a wrong transaction state.
//! State read back from the log is not checked against these edges (a replay takes the last
//! record per id as it is).
use std::collections::BTreeSet;

use crate::protocol::producer::{ProducerEpoch, ProducerId};

/// A partition of a user topic taking part in a transaction.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnPartition {
    pub topic: String,
    pub partition: i32,
}

impl TxnPartition {
    pub fn new(topic: &str, partition: i32) -> Self {
        Self {
            topic: topic.to_string(),
            partition,
        }
    }
}

/// Kafka's `TransactionState`, with the byte ids `__transaction_state` stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction open (after InitProducerId, or expiry of the previous one).
    Empty,
    /// Partitions or offsets were added; the transaction is open.
    Ongoing,
    /// EndTxn(commit) accepted and durable; COMMIT markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a fence or a timeout accepted and durable; ABORT markers are being written.
    PrepareAbort,
    /// Every partition has its COMMIT marker.
    CompleteCommit,
    /// Every partition has its ABORT marker.
    CompleteAbort,
    /// The id expired (`transactional.id.expiration.ms`); a tombstone is being written.
    Dead,
    /// An epoch bump fencing the previous producer instance, on the way to PrepareAbort.
    /// Transient: Kafka never writes it to the log, and neither does Strata.
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// The `TransactionStatus` byte of `TransactionLogValue`.
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.id() == id)
    }

    /// The names DescribeTransactions and ListTransactions use.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The states this one may be entered from (Kafka's `validPreviousStates`). PrepareAbort
    /// from Empty and Complete* exists for transaction version 2 (KIP-890), where a client
    /// unsure of the state may abort; Strata's coordinator implements version 1 and never
    /// takes those edges, but the table is Kafka's so a log written by either reads the same.
    pub fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    pub fn can_transition_to(self, to: TxnState) -> bool {
        to.valid_previous().contains(&self)
    }

    /// Whether `transactional.id.expiration.ms` may remove an id resting in this state.
    pub fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }

    /// A transaction is open or its markers are not all written yet.
    pub fn is_pending_transaction(self) -> bool {
        matches!(
            self,
            TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
        )
    }
}

/// How a transaction ends; the control record type its markers carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnResult {
    Commit,
    Abort,
}

impl TxnResult {
    fn prepare_state(self) -> TxnState {
        match self {
            TxnResult::Commit => TxnState::PrepareCommit,
            TxnResult::Abort => TxnState::PrepareAbort,
        }
    }
}

/// What `__transaction_state` holds for one transactional id, plus `last_producer_epoch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnFields {
    pub producer_id: ProducerId,
    /// The producer id before the last transition (a rotation on epoch exhaustion changes
    /// it); lets a retried InitProducerId that lost its answer be recognised (KIP-360).
    pub prev_producer_id: ProducerId,
    /// Transaction version 2 only (the id a commit rotates to); kept as read.
    pub next_producer_id: ProducerId,
    /// Transaction version 2 only; kept as read.
    pub next_producer_epoch: ProducerEpoch,
    pub producer_epoch: ProducerEpoch,
    /// The epoch before the last InitProducerId bump, so that a retry of a successful
    /// InitProducerId gets the same answer. In memory only (Kafka does not persist it): after
    /// a failover such a retry is fenced, which Kafka accepts as rare.
    pub last_producer_epoch: ProducerEpoch,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TxnPartition>,
    /// Wall-clock ms of the first AddPartitions/AddOffsets of the open transaction; -1 when
    /// none is open.
    pub start_timestamp_ms: i64,
    /// Wall-clock ms of the last transition; `transactional.id.expiration.ms` counts from it.
    pub last_update_timestamp_ms: i64,
    /// The client's transaction version (0 or 1 here; 2 is KIP-890).
    pub client_transaction_version: i16,
}

/// In-memory metadata of one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub fields: TxnFields,
    /// The state a prepared transition is heading to, until `complete` or `abandon`.
    pub pending: Option<TxnState>,
    /// A fence bumped the epoch in memory but its PrepareAbort never became durable: the next
    /// fence must not bump again (the client never saw the bumped epoch), so epochs are not
    /// burnt by a coordinator that cannot write.
    pub has_failed_epoch_fence: bool,
}

/// Why a prepared transition was refused. Each maps to one Kafka error in the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("a transition is already pending")]
    Pending,
    #[error("illegal transition from {from:?} to {to:?}")]
    Illegal { from: TxnState, to: TxnState },
    #[error("producer fenced by a newer epoch")]
    Fenced,
}

impl TxnMetadata {
    /// A new id: a fresh producer id, no epoch yet (the first InitProducerId bumps it to 0).
    pub fn new(
        transactional_id: &str,
        producer_id: ProducerId,
        timeout_ms: i32,
        now_ms: i64,
    ) -> Self {
        Self {
            transactional_id: transactional_id.to_string(),
            fields: TxnFields {
                producer_id,
                prev_producer_id: ProducerId::NONE,
                next_producer_id: ProducerId::NONE,
                next_producer_epoch: ProducerEpoch::NONE,
                producer_epoch: ProducerEpoch::NONE,
                last_producer_epoch: ProducerEpoch::NONE,
                timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                start_timestamp_ms: -1,
                last_update_timestamp_ms: now_ms,
                client_transaction_version: 0,
            },
            pending: None,
            has_failed_epoch_fence: false,
        }
    }

    /// Metadata as read back from the log: nothing pending.
    pub fn loaded(transactional_id: &str, fields: TxnFields) -> Self {
        Self {
            transactional_id: transactional_id.to_string(),
            fields,
            pending: None,
            has_failed_epoch_fence: false,
        }
    }

    pub fn state(&self) -> TxnState {
        self.fields.state
    }

    /// Marks `next` pending and returns it, after checking the edge.
    fn prepare(&mut self, mut next: TxnFields) -> Result<TxnFields, TransitionError> {
        if self.pending.is_some() {
            return Err(TransitionError::Pending);
        }
        if !self.fields.state.can_transition_to(next.state) {
            return Err(TransitionError::Illegal {
                from: self.fields.state,
                to: next.state,
            });
        }
        next.prev_producer_id = self.fields.producer_id;
        self.pending = Some(next.state);
        Ok(next)
    }

    /// The fields of an Empty transaction (no partitions, not started) under the given producer
    /// id and epochs: what both InitProducerId paths (epoch bump, id rotation) prepare.
    fn empty_at(
        &self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        last_producer_epoch: ProducerEpoch,
        timeout_ms: i32,
        now_ms: i64,
    ) -> TxnFields {
        TxnFields {
            producer_id,
            producer_epoch,
            last_producer_epoch,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_timestamp_ms: -1,
            last_update_timestamp_ms: now_ms,
            ..self.fields.clone()
        }
    }

    /// InitProducerId on an id with no open transaction: bump the epoch (Kafka's
    /// `prepareIncrementProducerEpoch`). `expected` is the epoch a recovering producer says it
    /// has (KIP-360): equal to the current one, bump; equal to the last one, a retry of a bump
    /// that succeeded, answer the same epoch again; anything else is fenced. Callers rotate the
    /// producer id instead when the epoch is exhausted.
    pub fn prepare_increment_epoch(
        &mut self,
        timeout_ms: i32,
        expected: Option<ProducerEpoch>,
        now_ms: i64,
    ) -> Result<TxnFields, TransitionError> {
        let current = self.fields.producer_epoch;
        let (epoch, last) = match expected {
            None => (current.bumped(), ProducerEpoch::NONE),
            Some(e) if current == ProducerEpoch::NONE || e == current => {
                (current.bumped(), current)
            }
            Some(e) if e == self.fields.last_producer_epoch => {
                (current, self.fields.last_producer_epoch)
            }
            Some(_) => return Err(TransitionError::Fenced),
        };
        let next = self.empty_at(self.fields.producer_id, epoch, last, timeout_ms, now_ms);
        self.prepare(next)
    }

    /// InitProducerId when the epoch is exhausted: a new producer id at epoch 0 (Kafka's
    /// `prepareProducerIdRotation`). `record_last_epoch` keeps the old epoch as the last one,
    /// so that the recovering producer's retry (old id, old epoch) is recognised.
    pub fn prepare_rotate_producer_id(
        &mut self,
        new_producer_id: ProducerId,
        timeout_ms: i32,
        now_ms: i64,
        record_last_epoch: bool,
    ) -> Result<TxnFields, TransitionError> {
        assert!(
            !self.fields.state.is_pending_transaction(),
            "rotating the producer id of {} with a transaction open",
            self.transactional_id
        );
        let last = if record_last_epoch {
            self.fields.producer_epoch
        } else {
            ProducerEpoch::NONE
        };
        let next = self.empty_at(new_producer_id, ProducerEpoch(0), last, timeout_ms, now_ms);
        self.prepare(next)
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the transaction is (or stays) Ongoing with these
    /// partitions added; its start time is set by the first add.
    pub fn prepare_add_partitions(
        &mut self,
        added: &BTreeSet<TxnPartition>,
        now_ms: i64,
    ) -> Result<TxnFields, TransitionError> {
        let starts = matches!(
            self.fields.state,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        );
        let mut partitions = self.fields.partitions.clone();
        partitions.extend(added.iter().cloned());
        let next = TxnFields {
            state: TxnState::Ongoing,
            partitions,
            start_timestamp_ms: if starts {
                now_ms
            } else {
                self.fields.start_timestamp_ms
            },
            last_update_timestamp_ms: now_ms,
            ..self.fields.clone()
        };
        self.prepare(next)
    }

    /// Fences the current producer instance before aborting its open transaction (Kafka's
    /// `prepareFenceProducerEpoch` followed by the abort): the epoch is bumped in memory at
    /// once, so the old instance is refused from now on, and the abort that follows carries
    /// the bumped epoch. The bump is skipped after a fence whose write failed (the epoch was
    /// bumped then already) and at `MAX`, which must not overflow.
    pub fn fence_epoch(&mut self) -> Result<(), TransitionError> {
        if self.pending.is_some() {
            return Err(TransitionError::Pending);
        }
        if !self
            .fields
            .state
            .can_transition_to(TxnState::PrepareEpochFence)
        {
            return Err(TransitionError::Illegal {
                from: self.fields.state,
                to: TxnState::PrepareEpochFence,
            });
        }
        if !self.has_failed_epoch_fence && self.fields.producer_epoch != ProducerEpoch::MAX {
            self.fields.producer_epoch = self.fields.producer_epoch.bumped();
        }
        self.fields.last_producer_epoch = ProducerEpoch::NONE;
        // Kafka passes through PrepareEpochFence as a pending state only; the abort is
        // prepared at once, and it is the abort that is written.
        self.has_failed_epoch_fence = true;
        Ok(())
    }

    /// EndTxn (or a coordinator abort): Ongoing → PrepareCommit/PrepareAbort, partitions kept
    /// for the markers.
    pub fn prepare_end(
        &mut self,
        result: TxnResult,
        now_ms: i64,
    ) -> Result<TxnFields, TransitionError> {
        let next = TxnFields {
            state: result.prepare_state(),
            last_update_timestamp_ms: now_ms,
            ..self.fields.clone()
        };
        self.prepare(next)
    }

    /// Every marker is written: PrepareX → CompleteX, partitions cleared.
    pub fn prepare_complete(&mut self, now_ms: i64) -> Result<TxnFields, TransitionError> {
        let state = match self.fields.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            _ => TxnState::CompleteAbort,
        };
        let next = TxnFields {
            state,
            partitions: BTreeSet::new(),
            next_producer_id: ProducerId::NONE,
            last_update_timestamp_ms: now_ms,
            ..self.fields.clone()
        };
        self.prepare(next)
    }

    /// `transactional.id.expiration.ms` passed: Dead, on the way to a tombstone.
    pub fn prepare_dead(&mut self) -> Result<TxnFields, TransitionError> {
        let next = TxnFields {
            state: TxnState::Dead,
            partitions: BTreeSet::new(),
            ..self.fields.clone()
        };
        self.prepare(next)
    }

    /// The transit's record is durable: it becomes the state. Asserts Kafka's
    /// `completeTransitionTo` checks; a failure is a bug in this module.
    pub fn complete(&mut self, next: TxnFields) {
        let from = self.fields.state;
        assert_eq!(
            self.pending,
            Some(next.state),
            "{}: completing {:?} while {:?} is pending",
            self.transactional_id,
            next.state,
            self.pending
        );
        assert!(
            from.can_transition_to(next.state),
            "{}: {from:?} -> {:?}",
            self.transactional_id,
            next.state
        );
        let same_producer = next.producer_id == self.fields.producer_id
            && next.producer_epoch == self.fields.producer_epoch;
        match next.state {
            TxnState::Empty => {
                let bumped = next.producer_epoch == self.fields.producer_epoch.bumped()
                    || (next.producer_epoch == ProducerEpoch(0)
                        && next.producer_id != self.fields.producer_id);
                assert!(
                    (same_producer || bumped)
                        && next.partitions.is_empty()
                        && next.start_timestamp_ms == -1,
                    "{}: bad InitProducerId transition {next:?} from {:?}",
                    self.transactional_id,
                    self.fields
                );
            }
            TxnState::Ongoing => assert!(
                same_producer
                    && next.partitions.is_superset(&self.fields.partitions)
                    && next.timeout_ms == self.fields.timeout_ms,
                "{}: bad AddPartitions transition {next:?} from {:?}",
                self.transactional_id,
                self.fields
            ),
            TxnState::PrepareCommit | TxnState::PrepareAbort => assert!(
                same_producer
                    && next.partitions == self.fields.partitions
                    && next.start_timestamp_ms == self.fields.start_timestamp_ms,
                "{}: bad EndTxn transition {next:?} from {:?}",
                self.transactional_id,
                self.fields
            ),
            TxnState::CompleteCommit | TxnState::CompleteAbort => assert!(
                same_producer && next.start_timestamp_ms != -1,
                "{}: bad completion {next:?} from {:?}",
                self.transactional_id,
                self.fields
            ),
            TxnState::Dead | TxnState::PrepareEpochFence => panic!(
                "{}: {:?} is never completed (Dead is removed, a fence becomes an abort)",
                self.transactional_id, next.state
            ),
        }
        if matches!(next.state, TxnState::PrepareAbort) {
            // The abort a fence led to is durable: a later fence may bump again.
            self.has_failed_epoch_fence = false;
        }
        self.fields = next;
        self.pending = None;
    }

    /// The prepared transition's record could not be written: nothing changes but the
    /// pending mark (and, for a fence, the in-memory epoch bump, which stays so the fenced
    /// instance stays fenced).
    pub fn abandon(&mut self) {
        self.pending = None;
    }
}
