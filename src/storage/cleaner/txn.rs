//! What the cleaner knows of transactions while it walks a log in offset order (Kafka's
//! `CleanedTransactionMetadata`): which data batches belong to an aborted transaction (their
//! records go, whatever their keys, and they are never mapped: an aborted record must not
//! supersede a committed one), and which COMMIT/ABORT markers may go because no batch of
//! their transaction is left.
//!
//! It is fed the aborted transactions overlapping the walked range (from the `.txnindex`
//! files), then every batch of that range in order. A marker whose transaction still has a
//! batch in the walked range is kept; otherwise it is "discardable": like a tombstone it gets
//! a delete horizon on one pass and goes on a pass after the horizon (KIP-534), so a reader
//! who saw the transaction's data before the cleaning still finds its marker.
//!
//! Safe because the walked range lies below the last stable offset (every transaction in it
//! is decided, its marker written and replicated) and every pass walks the log from its
//! start, so a transaction's batches are always walked before its marker.

use std::collections::{HashMap, HashSet};

use crate::protocol::control::{parse_end_txn_marker, TxnOutcome};
use crate::protocol::record_batch::BatchHeader;
use crate::storage::txn_index::AbortedTxn;

/// An aborted transaction the walk is inside of.
#[derive(Debug, Clone, Copy)]
struct OngoingAbort {
    /// Some batch of it was walked (its marker must stay this pass).
    observed: bool,
}

/// The transaction state of one walk (see the module docs).
#[derive(Debug, Default)]
pub struct TxnTracker {
    /// Aborted transactions not yet reached, by first offset descending (popped from the end).
    pending: Vec<AbortedTxn>,
    /// Producers inside an aborted transaction at the walk's position.
    aborted: HashMap<i64, OngoingAbort>,
    /// Producers with a walked transactional batch not yet followed by its COMMIT marker.
    committed: HashSet<i64>,
}

impl TxnTracker {
    /// A walk knowing these aborted transactions (any order; duplicates are harmless).
    pub fn new(mut aborted: Vec<AbortedTxn>) -> Self {
        aborted.sort_by_key(|a| std::cmp::Reverse((a.first_offset, a.last_offset)));
        Self {
            pending: aborted,
            ..Self::default()
        }
    }

    /// Moves the aborted transactions begun at or before `offset` into the ongoing set.
    fn reach(&mut self, offset: i64) {
        while self
            .pending
            .last()
            .is_some_and(|a| a.first_offset <= offset)
        {
            if let Some(a) = self.pending.pop() {
                // A producer has one transaction open at a time; an entry already ongoing
                // for it is the earlier one (its marker comes first).
                self.aborted
                    .entry(a.producer_id)
                    .or_insert(OngoingAbort { observed: false });
            }
        }
    }

    /// A data batch was walked: true when it belongs to an aborted transaction (its
    /// records go).
    pub fn on_data_batch(&mut self, header: &BatchHeader) -> bool {
        self.reach(header.last_offset());
        if !header.is_transactional() || header.producer_id < 0 {
            return false;
        }
        match self.aborted.get_mut(&header.producer_id) {
            Some(ongoing) => {
                ongoing.observed = true;
                true
            }
            None => {
                self.committed.insert(header.producer_id);
                false
            }
        }
    }

    /// A control batch was walked: true when it may go (after its delete horizon): it
    /// is empty (cleaned before), or its transaction has no batch left in the walk.
    pub fn on_control_batch(&mut self, header: &BatchHeader, batch: &[u8]) -> bool {
        self.reach(header.last_offset());
        if header.records_count == 0 {
            return true;
        }
        match parse_end_txn_marker(batch) {
            Ok(Some(marker)) => match marker.outcome {
                TxnOutcome::Abort => !self
                    .aborted
                    .remove(&header.producer_id)
                    .is_some_and(|o| o.observed),
                TxnOutcome::Commit => !self.committed.remove(&header.producer_id),
            },
            // Another control type, or one we cannot read: kept as it is.
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::protocol::control::{build_end_txn_marker, EndTxnMarker};
    use crate::protocol::record_batch::ATTR_TRANSACTIONAL;

    fn data(pid: i64, base: i64, count: i32, transactional: bool) -> BatchHeader {
        let mut h = BatchHeader::parse(&marker(pid, 0, TxnOutcome::Commit)).unwrap();
        h.attributes = if transactional { ATTR_TRANSACTIONAL } else { 0 };
        h.base_offset = base;
        h.last_offset_delta = count - 1;
        h.records_count = count;
        h
    }

    fn marker(pid: i64, offset: i64, outcome: TxnOutcome) -> Vec<u8> {
        let mut b = build_end_txn_marker(
            crate::protocol::producer::ProducerId(pid),
            crate::protocol::producer::ProducerEpoch(0),
            EndTxnMarker {
                outcome,
                coordinator_epoch: 0,
            },
            0,
        )
        .to_vec();
        crate::protocol::record_batch::patch_base_offset(&mut b, offset);
        b
    }

    fn on_marker(t: &mut TxnTracker, b: &[u8]) -> bool {
        let h = BatchHeader::parse(b).unwrap();
        t.on_control_batch(&h, b)
    }

    fn abort(pid: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        }
    }

    /// Proves an aborted transaction's batches are recognised (and no other producer's or
    /// non-transactional ones), its marker stays while a batch of it was walked, and a
    /// committed transaction's marker stays while any of its batches is walked.
    #[test]
    fn aborted_and_committed_markers() {
        // pid 1: aborted [0, 5] marker at 6; pid 2: committed 2..3, marker 7.
        let mut t = TxnTracker::new(vec![abort(1, 0, 6)]);
        assert!(t.on_data_batch(&data(1, 0, 2, true)));
        assert!(!t.on_data_batch(&data(2, 2, 2, true)));
        assert!(!t.on_data_batch(&data(3, 4, 1, false)));
        assert!(t.on_data_batch(&data(1, 5, 1, true)));
        assert!(!on_marker(&mut t, &marker(1, 6, TxnOutcome::Abort)));
        assert!(!on_marker(&mut t, &marker(2, 7, TxnOutcome::Commit)));
        // After the marker, pid 1's next transaction is not aborted.
        assert!(!t.on_data_batch(&data(1, 8, 1, true)));

        // A later pass: the aborted batches and the committed data are gone.
        let mut t = TxnTracker::new(vec![abort(1, 0, 6)]);
        assert!(on_marker(&mut t, &marker(1, 6, TxnOutcome::Abort)));
        assert!(on_marker(&mut t, &marker(2, 7, TxnOutcome::Commit)));
    }

    /// Proves two aborted transactions of one producer are told apart: the second is
    /// reached only after the first's marker, and a committed one in between is not aborted.
    #[test]
    fn one_producer_several_transactions() {
        let mut t = TxnTracker::new(vec![abort(1, 10, 12), abort(1, 0, 2)]);
        assert!(t.on_data_batch(&data(1, 0, 2, true)));
        assert!(!on_marker(&mut t, &marker(1, 2, TxnOutcome::Abort)));
        assert!(!t.on_data_batch(&data(1, 3, 2, true)));
        assert!(!on_marker(&mut t, &marker(1, 5, TxnOutcome::Commit)));
        assert!(on_marker(&mut t, &marker(1, 6, TxnOutcome::Commit)));
        assert!(t.on_data_batch(&data(1, 10, 2, true)));
        assert!(!on_marker(&mut t, &marker(1, 12, TxnOutcome::Abort)));
    }

    /// Proves a transaction begun before the walked range is still known as aborted.
    #[test]
    fn transaction_begun_before_the_walk() {
        let mut t = TxnTracker::new(vec![abort(4, 3, 40)]);
        assert!(t.on_data_batch(&data(4, 20, 5, true)));
        assert!(!on_marker(&mut t, &marker(4, 40, TxnOutcome::Abort)));
    }
}
