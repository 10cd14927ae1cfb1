//! Idempotent-producer state, sans-IO: per producer id, its epoch and the metadata of its
//! last `PRODUCER_BATCHES_RETAINED` batches. Follows Kafka's `ProducerStateManager` /
//! `ProducerAppendInfo`:
//!
//! - `producer_id < 0`: not idempotent, no checks.
//! - A batch with the same epoch and the same (first, last) sequence as one of the retained
//!   batches is a duplicate: the caller returns the original offsets and appends nothing.
//! - An epoch lower than the current one: `InvalidProducerEpoch`.
//! - A new (higher) epoch of a known producer must start at sequence 0.
//! - Same epoch: `first_seq` must be `last_seq + 1`, wrapping from `i32::MAX` to 0.
//! - An unknown producer is accepted with any sequence, as Kafka does since KIP-360 (its
//!   state may have been removed by retention or DeleteRecords; the client resets).
//!
//! Transactions (KIP-98): a transactional batch (attributes bit 4) of a producer with no open
//! transaction opens one at its base offset; a COMMIT or ABORT marker (a control batch,
//! `complete_txn`) closes it. A non-transactional batch while a transaction is open is
//! `InvalidTxnState`; a marker with an epoch older than the producer's is
//! `InvalidProducerEpoch`, and one from an older coordinator `CoordinatorFenced`. The open
//! transactions' first offsets, plus those of transactions whose marker is not yet below the
//! high watermark, bound the last stable offset (`last_stable_offset`).
//!
//! Faults: state is rebuilt from a snapshot plus replay of batch headers and markers
//! (`replay`), so a crash loses nothing that was in the log. Bounded by `PRODUCERS_MAX`
//! producers; `unreplicated` holds one entry per marker above the high watermark, so it is
//! bounded by the log above it (itself bounded by staging and replication lag).

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::txn_verification::{VerificationGuard, Verifications, VerificationsFull};
use super::{PRODUCERS_MAX, PRODUCER_BATCHES_RETAINED};
use crate::protocol::control::{parse_end_txn_marker, EndTxnMarker, TxnOutcome};
use crate::protocol::producer::ProducerId;
use crate::protocol::record_batch::BatchHeader;

#[derive(Debug, Clone, Copy, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct BatchMetadata {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ProducerEntry {
    pub producer_id: ProducerId,
    pub epoch: i16,
    /// Oldest first, at most `PRODUCER_BATCHES_RETAINED`.
    pub batches: Vec<BatchMetadata>,
    /// First offset of the producer's open transaction, if one is open.
    pub txn_first_offset: Option<i64>,
    /// Epoch of the coordinator that wrote this producer's last marker (-1: none yet).
    pub coordinator_epoch: i32,
    /// Offset of this producer's last marker (-1: none).
    pub last_marker_offset: i64,
}

impl ProducerEntry {
    fn new(producer_id: ProducerId, epoch: i16) -> Self {
        Self {
            producer_id,
            epoch,
            batches: Vec::new(),
            txn_first_offset: None,
            coordinator_epoch: -1,
            last_marker_offset: -1,
        }
    }

    fn last_batch_offset(&self) -> i64 {
        self.batches.last().map(|b| b.last_offset).unwrap_or(-1)
    }

    /// The last offset this producer wrote: a data batch or a marker.
    fn last_offset(&self) -> i64 {
        self.last_batch_offset().max(self.last_marker_offset)
    }
}

/// What the producer fields of one incoming batch say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchIdentity {
    pub producer_id: ProducerId,
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
    /// Attributes bit 4: the batch belongs to a transaction.
    pub transactional: bool,
}

impl BatchIdentity {
    /// The producer fields of a data batch's header.
    pub fn of(h: &BatchHeader) -> Self {
        Self {
            producer_id: ProducerId(h.producer_id),
            epoch: h.producer_epoch,
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            transactional: h.is_transactional(),
        }
    }
}

/// A transaction ended by a marker: Kafka's `CompletedTxn`, plus the last stable offset
/// right after it (what the aborted-transaction index stores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: ProducerId,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    /// The first offset of another open transaction, or `last_offset + 1` if none is open.
    pub last_stable_offset: i64,
    pub aborted: bool,
}

/// Why a marker was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerRefused {
    InvalidProducerEpoch {
        epoch: i16,
        current: i16,
    },
    CoordinatorFenced {
        coordinator_epoch: i32,
        current: i32,
    },
}

/// Who wrote a batch a leader appends (Kafka's `AppendOrigin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    /// A producer's batch (Produce): sequences are checked.
    Client,
    /// A coordinator's own batch (the group coordinator's transactional offset commits):
    /// it carries no sequence (the client never numbered it), so only the producer epoch
    /// is checked, as Kafka does for `AppendOrigin.COORDINATOR`.
    Coordinator,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// producer_id < 0: append without bookkeeping.
    NotIdempotent,
    /// In sequence: append, then `record` it.
    Append,
    /// Already in the log at these offsets.
    Duplicate { base_offset: i64, last_offset: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceError {
    InvalidProducerEpoch {
        producer_id: ProducerId,
        epoch: i16,
        current: i16,
    },
    OutOfOrderSequence {
        producer_id: ProducerId,
        epoch: i16,
        first_seq: i32,
        last_seq: Option<i32>,
    },
    /// A non-transactional batch from a producer with an open transaction.
    InvalidTxnState { producer_id: ProducerId },
}

/// Whether a client's transactional batch must have been verified with the transaction
/// coordinator (KIP-890; `transaction_partition_verification_enable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnVerification {
    /// Verification is off: no check.
    Off,
    /// On: a transactional batch that would open a transaction must carry the producer's
    /// current guard (`None`: the request started no verification).
    Guard(Option<VerificationGuard>),
}

/// Why a transactional batch was refused by the verification check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerificationRefused {
    /// No transaction open and no current verification (Kafka's "Record was not part of an
    /// ongoing transaction").
    NotVerified,
    /// A batch with a higher first sequence than another still verifying (Kafka's "earliest
    /// seen sequence").
    OutOfOrder { lowest_sequence: i32 },
}

/// A point-in-time copy: `next_offset` is the log end it covers (replay starts there).
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct ProducerSnapshot {
    pub next_offset: i64,
    pub producers: Vec<ProducerEntry>,
}

#[derive(Debug, Clone, Default)]
pub struct ProducerStateTable {
    producers: HashMap<ProducerId, ProducerEntry>,
    /// `(first offset, producer id)` of every open transaction (derived from `producers`).
    ongoing: BTreeSet<(i64, ProducerId)>,
    /// `(marker offset, first offset)` of ended transactions whose marker may still be at or
    /// above the high watermark, in marker order: they hold the last stable offset back until
    /// the marker is replicated (Kafka's `unreplicatedTxns`).
    unreplicated: VecDeque<(i64, i64)>,
    /// Largest timestamp of each producer's last batch or marker (DescribeProducers'
    /// `last_timestamp`). Kept beside the entries, not in them, so the snapshot format stays
    /// as it is: after a restart a producer reads -1 until it writes again (or its batches
    /// are replayed), which `find-hanging` treats as old, the safe side.
    last_timestamps: HashMap<ProducerId, i64>,
    /// Transaction verifications in progress, by producer id (leader only, in memory).
    verifications: Verifications,
}

/// One producer as DescribeProducers reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerView {
    pub producer_id: ProducerId,
    pub epoch: i16,
    /// Sequence of the last record of the last retained batch (-1: none).
    pub last_sequence: i32,
    /// -1 if unknown (see `ProducerStateTable::last_timestamps`).
    pub last_timestamp: i64,
    /// Epoch of the coordinator that wrote the last marker (-1: none yet).
    pub coordinator_epoch: i32,
    /// First offset of the open transaction, if one is open.
    pub txn_first_offset: Option<i64>,
}

fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    next_seq as i64 == last_seq as i64 + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

impl ProducerStateTable {
    pub fn len(&self) -> usize {
        self.producers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
    /// Last offset of the producer's last batch, if it has state (the log cleaner keeps
    /// that batch, maybe empty, so the producer's sequence survives cleaning).
    pub fn last_offset_of(&self, producer_id: ProducerId) -> Option<i64> {
        self.producers
            .get(&producer_id)
            .map(ProducerEntry::last_batch_offset)
            .filter(|&o| o >= 0)
    }

    /// The offset of a producer's last marker when it has no data batch left in its state
    /// (the cleaner keeps that marker: it is what carries the producer's epoch).
    pub fn last_marker_of(&self, producer_id: ProducerId) -> Option<i64> {
        self.producers
            .get(&producer_id)
            .filter(|e| e.batches.is_empty())
            .map(|e| e.last_marker_offset)
            .filter(|&o| o >= 0)
    }

    /// The open transaction's first offset of a producer, if it has one.
    pub fn open_txn_first_offset(&self, producer_id: ProducerId) -> Option<i64> {
        self.producers
            .get(&producer_id)
            .and_then(|e| e.txn_first_offset)
    }

    /// Kafka's `hasOngoingTransaction`: the producer has a transaction open here at `epoch`.
    pub fn has_ongoing_txn(&self, producer_id: ProducerId, epoch: i16) -> bool {
        self.producers
            .get(&producer_id)
            .is_some_and(|e| e.epoch == epoch && e.txn_first_offset.is_some())
    }

    /// Kafka's `maybeStartTransactionVerification`: `None` if the producer has a transaction
    /// open at `epoch` (nothing to verify), else the guard its verification carries.
    pub fn start_verification(
        &mut self,
        producer_id: ProducerId,
        sequence: i32,
        epoch: i16,
        now_ms: i64,
    ) -> Result<Option<VerificationGuard>, VerificationsFull> {
        if self.has_ongoing_txn(producer_id, epoch) {
            return Ok(None);
        }
        self.verifications
            .start(producer_id, sequence, epoch, now_ms)
            .map(Some)
    }

    /// Kafka's checks in `analyzeAndValidateProducerState` for a client's data batch
    /// (after duplicates): a transactional batch that would open a transaction needs the
    /// producer's current guard, and no batch may overtake a lower sequence still verifying.
    pub fn check_verification(
        &self,
        b: &BatchIdentity,
        verification: TxnVerification,
    ) -> Result<(), VerificationRefused> {
        let TxnVerification::Guard(guard) = verification else {
            return Ok(());
        };
        if b.producer_id.is_none() {
            return Ok(());
        }
        if let Some(e) = self.verifications.get(b.producer_id) {
            if b.first_seq > e.lowest_sequence {
                return Err(VerificationRefused::OutOfOrder {
                    lowest_sequence: e.lowest_sequence,
                });
            }
        }
        if b.transactional
            && !self.has_ongoing_txn(b.producer_id, b.epoch)
            && !self.verifications.matches(b.producer_id, guard)
        {
            return Err(VerificationRefused::NotVerified);
        }
        Ok(())
    }

    /// Verifications pending (for tests and metrics).
    pub fn verifications_pending(&self) -> usize {
        self.verifications.len()
    }

    /// Every producer with state, by producer id (DescribeProducers).
    pub fn describe(&self) -> Vec<ProducerView> {
        let mut all: Vec<ProducerView> = self
            .producers
            .values()
            .map(|e| ProducerView {
                producer_id: e.producer_id,
                epoch: e.epoch,
                last_sequence: e.batches.last().map(|b| b.last_seq).unwrap_or(-1),
                last_timestamp: self
                    .last_timestamps
                    .get(&e.producer_id)
                    .copied()
                    .unwrap_or(-1),
                coordinator_epoch: e.coordinator_epoch,
                txn_first_offset: e.txn_first_offset,
            })
            .collect();
        all.sort_by_key(|v| v.producer_id);
        all
    }

    /// Notes the largest timestamp of a producer's latest batch or marker; ignored for a
    /// producer without state (non-idempotent, or evicted).
    pub fn note_timestamp(&mut self, producer_id: ProducerId, timestamp: i64) {
        if self.producers.contains_key(&producer_id) {
            self.last_timestamps.insert(producer_id, timestamp);
        }
    }

    /// `min(high_watermark, first offset of every open transaction and of every ended one
    /// whose marker is not below the high watermark)`.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        let open = self.ongoing.iter().next().map(|&(first, _)| first);
        let unreplicated = self
            .unreplicated
            .iter()
            .filter(|&&(marker, _)| marker >= high_watermark)
            .map(|&(_, first)| first)
            .min();
        [Some(high_watermark), open, unreplicated]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(high_watermark)
    }

    /// Forgets ended transactions whose marker is below the high watermark.
    pub fn prune_replicated(&mut self, high_watermark: i64) {
        while self
            .unreplicated
            .front()
            .is_some_and(|&(marker, _)| marker < high_watermark)
        {
            self.unreplicated.pop_front();
        }
    }

    /// Removes a producer and its open transaction.
    fn remove(&mut self, producer_id: ProducerId) {
        self.last_timestamps.remove(&producer_id);
        if let Some(e) = self.producers.remove(&producer_id) {
            if let Some(first) = e.txn_first_offset {
                self.ongoing.remove(&(first, producer_id));
            }
        }
    }

    /// Inserts (or replaces) an entry, keeping `ongoing` in step.
    fn insert(&mut self, entry: ProducerEntry) {
        let timestamp = self.last_timestamps.get(&entry.producer_id).copied();
        self.remove(entry.producer_id);
        if let Some(t) = timestamp {
            self.last_timestamps.insert(entry.producer_id, t);
        }
        if let Some(first) = entry.txn_first_offset {
            self.ongoing.insert((first, entry.producer_id));
        }
        self.producers.insert(entry.producer_id, entry);
    }

    /// Whether a marker of this producer may be written: its epoch is not older than the
    /// producer's and its coordinator epoch not older than the last marker's. An unknown
    /// producer takes any marker (its state may be gone with retention).
    pub fn check_marker(
        &self,
        producer_id: ProducerId,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), MarkerRefused> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if epoch < entry.epoch {
            return Err(MarkerRefused::InvalidProducerEpoch {
                epoch,
                current: entry.epoch,
            });
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(MarkerRefused::CoordinatorFenced {
                coordinator_epoch,
                current: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Records a marker stored at `marker_offset` (unchecked: the caller ran `check_marker`,
    /// or replays the log): the producer's open transaction ends (a marker with no open
    /// transaction ends an empty one at its own offset, as Kafka does).
    pub fn complete_txn(
        &mut self,
        producer_id: ProducerId,
        epoch: i16,
        marker: EndTxnMarker,
        marker_offset: i64,
    ) -> CompletedTxn {
        if !self.producers.contains_key(&producer_id) && self.producers.len() >= PRODUCERS_MAX {
            self.evict_oldest();
        }
        let first = {
            let entry = self
                .producers
                .entry(producer_id)
                .or_insert_with(|| ProducerEntry::new(producer_id, epoch));
            if entry.epoch != epoch {
                // The coordinator bumped the epoch (fencing a producer): sequences restart.
                entry.epoch = epoch;
                entry.batches.clear();
            }
            entry.coordinator_epoch = marker.coordinator_epoch;
            entry.last_marker_offset = marker_offset;
            entry.txn_first_offset.take()
        };
        if let Some(first) = first {
            self.ongoing.remove(&(first, producer_id));
        }
        // A verification started before the marker belongs to the ended transaction.
        self.verifications.clear(producer_id);
        let first_offset = first.unwrap_or(marker_offset);
        self.unreplicated.push_back((marker_offset, first_offset));
        let last_stable_offset = self
            .ongoing
            .iter()
            .next()
            .map(|&(f, _)| f)
            .unwrap_or(marker_offset + 1);
        CompletedTxn {
            producer_id,
            first_offset,
            last_offset: marker_offset,
            last_stable_offset,
            aborted: marker.outcome == TxnOutcome::Abort,
        }
    }

    /// Replays one stored batch (recovery, truncation, a follower's append): a data batch is
    /// `record`ed, a marker `complete_txn`ed. `batch` is the whole batch `h` describes; a
    /// control batch that is not a readable marker changes nothing (its leader or the disk
    /// wrote it so; it is kept, as the log is, but cannot end a transaction).
    pub fn replay(&mut self, h: &BatchHeader, batch: &[u8]) -> Option<CompletedTxn> {
        if !h.is_control() {
            self.record(&BatchIdentity::of(h), h.base_offset, h.last_offset());
            self.note_timestamp(ProducerId(h.producer_id), h.max_timestamp);
            return None;
        }
        match parse_end_txn_marker(batch) {
            Ok(Some(marker)) if h.producer_id >= 0 => {
                let done = self.complete_txn(
                    ProducerId(h.producer_id),
                    h.producer_epoch,
                    marker,
                    h.base_offset,
                );
                self.note_timestamp(ProducerId(h.producer_id), h.max_timestamp);
                Some(done)
            }
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(offset = h.base_offset, "unreadable control batch: {e}");
                None
            }
        }
    }

    pub fn check(&self, b: &BatchIdentity) -> Result<Verdict, SequenceError> {
        self.check_from(b, AppendOrigin::Client)
    }

    /// `check` for a batch written by `origin`: a coordinator's batch has its epoch checked
    /// and nothing else (no sequence, no duplicate detection).
    pub fn check_from(
        &self,
        b: &BatchIdentity,
        origin: AppendOrigin,
    ) -> Result<Verdict, SequenceError> {
        if b.producer_id.is_none() {
            return Ok(Verdict::NotIdempotent);
        }
        let Some(entry) = self.producers.get(&b.producer_id) else {
            return Ok(Verdict::Append);
        };
        if origin == AppendOrigin::Coordinator {
            return if b.epoch < entry.epoch {
                Err(SequenceError::InvalidProducerEpoch {
                    producer_id: b.producer_id,
                    epoch: b.epoch,
                    current: entry.epoch,
                })
            } else {
                Ok(Verdict::Append)
            };
        }
        // Duplicates first, as Kafka does: a retried batch of the current epoch.
        if b.epoch == entry.epoch {
            if let Some(d) = entry
                .batches
                .iter()
                .find(|m| m.first_seq == b.first_seq && m.last_seq == b.last_seq)
            {
                return Ok(Verdict::Duplicate {
                    base_offset: d.base_offset,
                    last_offset: d.last_offset,
                });
            }
        }
        if b.epoch < entry.epoch {
            return Err(SequenceError::InvalidProducerEpoch {
                producer_id: b.producer_id,
                epoch: b.epoch,
                current: entry.epoch,
            });
        }
        let last_seq = entry.batches.last().map(|m| m.last_seq);
        let ok = if b.epoch != entry.epoch {
            b.first_seq == 0
        } else {
            match last_seq {
                Some(last) => in_sequence(last, b.first_seq),
                // Known epoch but no batches retained (e.g. all removed): any sequence.
                None => true,
            }
        };
        if ok && entry.txn_first_offset.is_some() && !b.transactional {
            Err(SequenceError::InvalidTxnState {
                producer_id: b.producer_id,
            })
        } else if ok {
            Ok(Verdict::Append)
        } else {
            Err(SequenceError::OutOfOrderSequence {
                producer_id: b.producer_id,
                epoch: b.epoch,
                first_seq: b.first_seq,
                last_seq,
            })
        }
    }

    /// Records an appended batch (also used to replay the log on recovery, unchecked).
    pub fn record(&mut self, b: &BatchIdentity, base_offset: i64, last_offset: i64) {
        if b.producer_id.is_none() {
            return;
        }
        if !self.producers.contains_key(&b.producer_id) && self.producers.len() >= PRODUCERS_MAX {
            self.evict_oldest();
        }
        let entry = self
            .producers
            .entry(b.producer_id)
            .or_insert_with(|| ProducerEntry::new(b.producer_id, b.epoch));
        if entry.epoch != b.epoch {
            entry.epoch = b.epoch;
            entry.batches.clear();
        }
        entry.batches.push(BatchMetadata {
            first_seq: b.first_seq,
            last_seq: b.last_seq,
            base_offset,
            last_offset,
        });
        if entry.batches.len() > PRODUCER_BATCHES_RETAINED {
            entry.batches.remove(0);
        }
        if b.transactional && entry.txn_first_offset.is_none() {
            // A transactional batch with no transaction open begins one.
            entry.txn_first_offset = Some(base_offset);
            self.ongoing.insert((base_offset, b.producer_id));
        }
        if b.transactional {
            // The transaction is open here now: its later batches need no verification.
            self.verifications.clear(b.producer_id);
        }
    }

    fn evict_oldest(&mut self) {
        let oldest = self
            .producers
            .values()
            .min_by_key(|e| e.last_offset())
            .map(|e| e.producer_id);
        if let Some(pid) = oldest {
            self.remove(pid);
        }
    }

    /// Forgets producers whose last batch lies wholly below the new log start (Kafka's
    /// `truncateHead`); their next batch is then accepted as from an unknown producer.
    pub fn evict_below(&mut self, log_start_offset: i64) {
        let doomed: Vec<ProducerId> = self
            .producers
            .values()
            .filter(|e| e.last_offset() < log_start_offset)
            .map(|e| e.producer_id)
            .collect();
        for pid in doomed {
            self.remove(pid);
        }
    }

    /// Truncation of the log at `offset`: forgets every producer whose last batch or marker
    /// is at or past it and returns their ids. A producer with nothing at or past `offset`
    /// keeps an exact entry (its retained batches, epoch and open transaction all come from
    /// below `offset`); the returned ones must be rebuilt from the log below `offset`
    /// (`absorb`).
    pub fn remove_at_or_after(&mut self, offset: i64) -> Vec<ProducerId> {
        let doomed: Vec<ProducerId> = self
            .producers
            .values()
            .filter(|e| e.last_offset() >= offset)
            .map(|e| e.producer_id)
            .collect();
        for pid in &doomed {
            self.remove(*pid);
        }
        self.unreplicated.retain(|&(marker, _)| marker < offset);
        doomed
    }

    /// Takes every entry of `other` (producers rebuilt by replaying part of the log).
    pub fn absorb(&mut self, other: ProducerStateTable) {
        for (pid, entry) in other.producers {
            if !self.producers.contains_key(&pid) && self.producers.len() >= PRODUCERS_MAX {
                self.evict_oldest();
            }
            self.insert(entry);
            if let Some(&t) = other.last_timestamps.get(&pid) {
                self.last_timestamps.insert(pid, t);
            }
        }
        self.unreplicated.extend(other.unreplicated);
        self.unreplicated.make_contiguous().sort_unstable();
    }

    pub fn snapshot(&self, next_offset: i64) -> ProducerSnapshot {
        let mut producers: Vec<ProducerEntry> = self.producers.values().cloned().collect();
        producers.sort_by_key(|e| e.producer_id);
        ProducerSnapshot {
            next_offset,
            producers,
        }
    }

    pub fn from_snapshot(s: &ProducerSnapshot) -> Self {
        let mut t = Self::default();
        for e in s.producers.iter().take(PRODUCERS_MAX) {
            let mut e = e.clone();
            let excess = e.batches.len().saturating_sub(PRODUCER_BATCHES_RETAINED);
            e.batches.drain(..excess);
            t.insert(e);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(producer_id: i64, epoch: i16, first_seq: i32, last_seq: i32) -> BatchIdentity {
        BatchIdentity {
            producer_id: ProducerId(producer_id),
            epoch,
            first_seq,
            last_seq,
            transactional: false,
        }
    }

    /// A coordinator's batches (no sequence) are checked on their epoch only: repeated
    /// NO_SEQUENCE batches are neither duplicates nor out of order, an older epoch is
    /// refused, and the first transactional one opens the producer's transaction.
    #[test]
    fn coordinator_batches_check_the_epoch_only() {
        let mut t = ProducerStateTable::default();
        let txn = BatchIdentity {
            transactional: true,
            ..id(9, 3, -1, -1)
        };
        for offset in [10, 11] {
            assert_eq!(
                t.check_from(&txn, AppendOrigin::Coordinator),
                Ok(Verdict::Append)
            );
            t.record(&txn, offset, offset);
        }
        assert_eq!(t.open_txn_first_offset(ProducerId(9)), Some(10));
        // The same batch from a client would be taken for a duplicate.
        assert!(matches!(t.check(&txn), Ok(Verdict::Duplicate { .. })));
        let stale = BatchIdentity { epoch: 2, ..txn };
        assert_eq!(
            t.check_from(&stale, AppendOrigin::Coordinator),
            Err(SequenceError::InvalidProducerEpoch {
                producer_id: ProducerId(9),
                epoch: 2,
                current: 3
            })
        );
        let newer = BatchIdentity { epoch: 4, ..txn };
        assert_eq!(
            t.check_from(&newer, AppendOrigin::Coordinator),
            Ok(Verdict::Append)
        );
    }

    /// Table-driven: each case sets up a history of appended batches, then checks one batch
    /// against the expected verdict — covering every rule in the module doc.
    #[test]
    fn sequence_rules_table() {
        use SequenceError::*;
        use Verdict::*;
        type Case = (
            &'static str,
            Vec<(BatchIdentity, i64)>,
            BatchIdentity,
            Result<Verdict, SequenceError>,
        );
        let ooo = |pid, epoch, first_seq, last_seq| {
            Err(OutOfOrderSequence {
                producer_id: ProducerId(pid),
                epoch,
                first_seq,
                last_seq,
            })
        };
        let cases: Vec<Case> = vec![
            (
                "non-idempotent",
                vec![],
                id(-1, -1, -1, -1),
                Ok(NotIdempotent),
            ),
            ("unknown producer seq 0", vec![], id(7, 0, 0, 4), Ok(Append)),
            (
                "unknown producer seq != 0 (KIP-360)",
                vec![],
                id(7, 0, 5, 9),
                Ok(Append),
            ),
            (
                "in sequence",
                vec![(id(7, 0, 0, 4), 0)],
                id(7, 0, 5, 9),
                Ok(Append),
            ),
            (
                "gap",
                vec![(id(7, 0, 0, 4), 0)],
                id(7, 0, 6, 9),
                ooo(7, 0, 6, Some(4)),
            ),
            (
                "replayed older seq, not retained identity",
                vec![(id(7, 0, 0, 4), 0)],
                id(7, 0, 0, 3),
                ooo(7, 0, 0, Some(4)),
            ),
            (
                "duplicate of last",
                vec![(id(7, 0, 0, 4), 10)],
                id(7, 0, 0, 4),
                Ok(Duplicate {
                    base_offset: 10,
                    last_offset: 14,
                }),
            ),
            (
                "duplicate of an older retained batch",
                vec![
                    (id(7, 0, 0, 1), 0),
                    (id(7, 0, 2, 3), 2),
                    (id(7, 0, 4, 5), 4),
                ],
                id(7, 0, 2, 3),
                Ok(Duplicate {
                    base_offset: 2,
                    last_offset: 3,
                }),
            ),
            (
                "evicted after five newer batches",
                (0..6)
                    .map(|i| (id(7, 0, i * 2, i * 2 + 1), i as i64 * 2))
                    .collect(),
                id(7, 0, 0, 1),
                ooo(7, 0, 0, Some(11)),
            ),
            (
                "fenced epoch",
                vec![(id(7, 3, 0, 0), 0)],
                id(7, 2, 1, 1),
                Err(InvalidProducerEpoch {
                    producer_id: ProducerId(7),
                    epoch: 2,
                    current: 3,
                }),
            ),
            (
                "new epoch starts at 0",
                vec![(id(7, 3, 0, 9), 0)],
                id(7, 4, 0, 0),
                Ok(Append),
            ),
            (
                "new epoch must start at 0",
                vec![(id(7, 3, 0, 9), 0)],
                id(7, 4, 10, 10),
                ooo(7, 4, 10, Some(9)),
            ),
            (
                "same seq in new epoch is not a duplicate",
                vec![(id(7, 3, 0, 0), 0)],
                id(7, 4, 0, 0),
                Ok(Append),
            ),
            (
                "wrap at i32::MAX",
                vec![(id(7, 0, i32::MAX - 1, i32::MAX), 0)],
                id(7, 0, 0, 3),
                Ok(Append),
            ),
            (
                "no wrap to 1",
                vec![(id(7, 0, i32::MAX - 1, i32::MAX), 0)],
                id(7, 0, 1, 3),
                ooo(7, 0, 1, Some(i32::MAX)),
            ),
            (
                "other producer independent",
                vec![(id(7, 0, 0, 4), 0)],
                id(8, 0, 0, 0),
                Ok(Append),
            ),
        ];
        for (name, history, probe, expected) in cases {
            let mut t = ProducerStateTable::default();
            for (b, base) in &history {
                let last = base + (b.last_seq as i64 - b.first_seq as i64).max(0);
                t.record(b, *base, last);
            }
            assert_eq!(t.check(&probe), expected, "case: {name}");
        }
    }

    /// A snapshot round-trips and `evict_below` forgets producers wholly below log start.
    #[test]
    fn snapshot_and_evict() {
        let mut t = ProducerStateTable::default();
        t.record(&id(1, 0, 0, 0), 0, 0);
        t.record(&id(2, 0, 0, 0), 5, 5);
        let s = t.snapshot(6);
        let back = ProducerStateTable::from_snapshot(&s);
        assert_eq!(back.snapshot(6), s);
        t.evict_below(3);
        assert_eq!(t.len(), 1);
        assert_eq!(t.check(&id(1, 0, 9, 9)), Ok(Verdict::Append));
    }

    fn txn(producer_id: i64, first_seq: i32, last_seq: i32) -> BatchIdentity {
        BatchIdentity {
            transactional: true,
            ..id(producer_id, 0, first_seq, last_seq)
        }
    }

    fn end(outcome: TxnOutcome) -> EndTxnMarker {
        EndTxnMarker {
            outcome,
            coordinator_epoch: 0,
        }
    }

    /// The LSO is the first offset of the oldest open transaction, and of an ended one until
    /// the high watermark passes its marker; a completed abort reports Kafka's last stable
    /// offset (the next open transaction's first offset, or just past the marker). A
    /// snapshot carries open transactions.
    #[test]
    fn last_stable_offset_follows_open_and_unreplicated_transactions() {
        let mut t = ProducerStateTable::default();
        t.record(&txn(1, 0, 1), 0, 1);
        t.record(&id(9, 0, 0, 0), 2, 2);
        t.record(&txn(2, 0, 0), 3, 3);
        t.record(&txn(1, 2, 2), 4, 4);
        assert_eq!(t.last_stable_offset(10), 0);
        assert_eq!(t.last_stable_offset(-1), -1, "never above the HW");
        let done = t.complete_txn(ProducerId(1), 0, end(TxnOutcome::Abort), 5);
        assert_eq!(
            done,
            CompletedTxn {
                producer_id: ProducerId(1),
                first_offset: 0,
                last_offset: 5,
                last_stable_offset: 3,
                aborted: true
            }
        );
        // Marker at 5 not yet below the HW (5): still holds the LSO at 0.
        assert_eq!(t.last_stable_offset(5), 0);
        assert_eq!(t.last_stable_offset(6), 3);
        let snap = t.snapshot(7);
        let back = ProducerStateTable::from_snapshot(&snap);
        assert_eq!(
            back.last_stable_offset(100),
            3,
            "open txn of 2 in the snapshot"
        );
        t.prune_replicated(6);
        let done = t.complete_txn(ProducerId(2), 0, end(TxnOutcome::Commit), 6);
        assert_eq!(done.last_stable_offset, 7);
        assert!(!done.aborted);
        assert_eq!(t.last_stable_offset(7), 7);
        // A marker with no open transaction ends an empty one at its own offset.
        let done = t.complete_txn(ProducerId(9), 0, end(TxnOutcome::Abort), 8);
        assert_eq!((done.first_offset, done.last_offset), (8, 8));
        // Truncation below a producer's marker forgets it (the caller replays the log).
        let mut gone = t.remove_at_or_after(6);
        gone.sort_unstable();
        assert_eq!(gone, vec![ProducerId(2), ProducerId(9)]);
        assert_eq!(t.last_stable_offset(100), 100);
    }

    /// DescribeProducers' view: last sequence, timestamp (noted, -1 when unknown),
    /// coordinator epoch of the last marker and the open transaction's first offset; a
    /// marker closes the transaction; an evicted producer loses its timestamp with it.
    #[test]
    fn describe_reports_each_producer() {
        let mut t = ProducerStateTable::default();
        t.record(&txn(1, 0, 4), 10, 14);
        t.note_timestamp(ProducerId(1), 1_700_000_000_000);
        t.record(&id(2, 3, 0, 0), 15, 15);
        t.note_timestamp(ProducerId(77), 5); // no state: ignored
        let d = t.describe();
        assert_eq!(d.len(), 2);
        assert_eq!(
            d[0],
            ProducerView {
                producer_id: ProducerId(1),
                epoch: 0,
                last_sequence: 4,
                last_timestamp: 1_700_000_000_000,
                coordinator_epoch: -1,
                txn_first_offset: Some(10),
            }
        );
        assert_eq!(
            (d[1].producer_id, d[1].epoch, d[1].last_timestamp),
            (ProducerId(2), 3, -1)
        );
        assert_eq!(d[1].txn_first_offset, None);
        let marker = EndTxnMarker {
            outcome: TxnOutcome::Abort,
            coordinator_epoch: 4,
        };
        t.complete_txn(ProducerId(1), 0, marker, 16);
        let d = t.describe();
        assert_eq!((d[0].coordinator_epoch, d[0].txn_first_offset), (4, None));
        t.evict_below(100);
        assert!(t.describe().is_empty());
        t.record(&id(1, 0, 0, 0), 100, 100);
        assert_eq!(t.describe()[0].last_timestamp, -1);
    }

    /// The snapshot file's bytes did not change when `producer_id` became a `ProducerId`:
    /// a snapshot written by a broker from before reads the same (and the other way round).
    /// `Old*` mirror the layout as it was, with a bare `i64`.
    #[test]
    fn snapshot_bytes_are_those_of_the_bare_i64_layout() {
        #[derive(rkyv::Archive, rkyv::Serialize)]
        struct OldEntry {
            producer_id: i64,
            epoch: i16,
            batches: Vec<BatchMetadata>,
            txn_first_offset: Option<i64>,
            coordinator_epoch: i32,
            last_marker_offset: i64,
        }
        #[derive(rkyv::Archive, rkyv::Serialize)]
        struct OldSnapshot {
            next_offset: i64,
            producers: Vec<OldEntry>,
        }
        let mut t = ProducerStateTable::default();
        t.record(&id(7, 2, 0, 4), 10, 14);
        t.record(&id(-1, 0, 0, 0), 15, 15);
        t.record(
            &BatchIdentity {
                transactional: true,
                ..id(i64::MAX, 0, 0, 0)
            },
            16,
            16,
        );
        let new = t.snapshot(17);
        let old = OldSnapshot {
            next_offset: new.next_offset,
            producers: new
                .producers
                .iter()
                .map(|e| OldEntry {
                    producer_id: e.producer_id.0,
                    epoch: e.epoch,
                    batches: e.batches.clone(),
                    txn_first_offset: e.txn_first_offset,
                    coordinator_epoch: e.coordinator_epoch,
                    last_marker_offset: e.last_marker_offset,
                })
                .collect(),
        };
        let new_bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&new).expect("encode");
        let old_bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&old).expect("encode");
        assert_eq!(new_bytes.as_slice(), old_bytes.as_slice());
        let back: ProducerSnapshot =
            rkyv::from_bytes::<ProducerSnapshot, rkyv::rancor::Error>(&old_bytes).expect("decode");
        assert_eq!(back, new);
    }
}
