//! Transaction verification state of one partition (KIP-890 part 1, Kafka's
//! `VerificationStateEntry` / `VerificationGuard`), sans-IO.
//!
//! A transactional batch from a producer with no transaction open on this partition would
//! open one. Before appending it, the leader asks the transaction coordinator whether the
//! partition is part of the producer's ongoing transaction; if the producer never added it
//! (a client bug, or a retry that outlived an abort), appending would leave a "hanging"
//! transaction holding the last stable offset back for ever.
//!
//! The question takes a round trip, and an ABORT marker may land meanwhile: "verified" for
//! the old transaction must not let the batch in after the marker. So each verification
//! gets a guard, unique per partition and producer, stored here and carried by the produce
//! request; the append goes through only if the guard is still the producer's current one.
//! The entry is removed when the producer's first transactional batch is appended (the
//! transaction is open: later batches need no verification) and when a marker ends its
//! transaction (a verification started before the marker is then stale: its guard no longer
//! matches).
//!
//! Bounded by `TXN_VERIFICATIONS_MAX` entries per partition; entries older than
//! `TXN_VERIFICATION_AGE_MS_MAX` are dropped when room is needed. Dropping an entry can only
//! refuse an append (its guard stops matching), never let one through.

use std::collections::HashMap;

use crate::limits::{TXN_VERIFICATIONS_MAX, TXN_VERIFICATION_AGE_MS_MAX};
use crate::protocol::producer::ProducerId;

/// Proof that one verification was started on this partition for one producer. Compared by
/// identity: two verifications never share a guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VerificationGuard(u64);

/// One producer's verification in progress (Kafka's `VerificationStateEntry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerificationEntry {
    pub guard: VerificationGuard,
    /// Wall-clock ms when the entry was created (age for eviction).
    pub created_ms: i64,
    /// The lowest first sequence seen among the batches verifying with this entry: a batch
    /// with a higher one must not be appended first (it would be out of order).
    pub lowest_sequence: i32,
    pub epoch: i16,
}

/// Why a verification could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{TXN_VERIFICATIONS_MAX} transaction verifications already pending on the partition")]
pub struct VerificationsFull;

#[derive(Debug, Clone, Default)]
pub struct Verifications {
    entries: HashMap<ProducerId, VerificationEntry>,
    next_guard: u64,
}

impl Verifications {
    /// The producer's entry, creating it if it has none (Kafka's
    /// `maybeCreateVerificationStateEntry`): an existing entry keeps its guard, so batches
    /// verifying concurrently share it; its lowest sequence and epoch follow the newest
    /// epoch and the lowest sequence of that epoch.
    pub fn start(
        &mut self,
        producer_id: ProducerId,
        sequence: i32,
        epoch: i16,
        now_ms: i64,
    ) -> Result<VerificationGuard, VerificationsFull> {
        if !self.entries.contains_key(&producer_id) && self.entries.len() >= TXN_VERIFICATIONS_MAX {
            self.expire(now_ms);
            if self.entries.len() >= TXN_VERIFICATIONS_MAX {
                return Err(VerificationsFull);
            }
        }
        let next = &mut self.next_guard;
        let entry = self.entries.entry(producer_id).or_insert_with(|| {
            *next += 1;
            VerificationEntry {
                guard: VerificationGuard(*next),
                created_ms: now_ms,
                lowest_sequence: sequence,
                epoch,
            }
        });
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.lowest_sequence = sequence;
        } else if epoch == entry.epoch {
            entry.lowest_sequence = entry.lowest_sequence.min(sequence);
        }
        Ok(entry.guard)
    }

    pub fn get(&self, producer_id: ProducerId) -> Option<&VerificationEntry> {
        self.entries.get(&producer_id)
    }

    /// Whether `guard` is the producer's current verification.
    pub fn matches(&self, producer_id: ProducerId, guard: Option<VerificationGuard>) -> bool {
        guard.is_some() && self.entries.get(&producer_id).map(|e| e.guard) == guard
    }

    /// The producer's transaction was opened or ended: any verification in flight is stale.
    pub fn clear(&mut self, producer_id: ProducerId) {
        self.entries.remove(&producer_id);
    }

    /// Drops entries older than `TXN_VERIFICATION_AGE_MS_MAX` (a verification answers within
    /// its request timeout, far less).
    pub fn expire(&mut self, now_ms: i64) {
        self.entries
            .retain(|_, e| now_ms.saturating_sub(e.created_ms) < TXN_VERIFICATION_AGE_MS_MAX);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn concurrent_verifications_share_a_guard_and_the_lowest_sequence() {
        let mut v = Verifications::default();
        let g1 = v.start(ProducerId(7), 5, 0, 0).unwrap();
        let g2 = v.start(ProducerId(7), 0, 0, 1).unwrap();
        assert_eq!(g1, g2);
        assert_eq!(v.get(ProducerId(7)).unwrap().lowest_sequence, 0);
        // A later, higher sequence does not raise it.
        v.start(ProducerId(7), 9, 0, 2).unwrap();
        assert_eq!(v.get(ProducerId(7)).unwrap().lowest_sequence, 0);
        // A newer epoch restarts the lowest sequence; an older one changes nothing.
        v.start(ProducerId(7), 3, 1, 3).unwrap();
        assert_eq!(v.get(ProducerId(7)).unwrap().lowest_sequence, 3);
        v.start(ProducerId(7), 0, 0, 4).unwrap();
        assert_eq!(
            (
                v.get(ProducerId(7)).unwrap().lowest_sequence,
                v.get(ProducerId(7)).unwrap().epoch
            ),
            (3, 1)
        );
        assert!(v.matches(ProducerId(7), Some(g1)));
        assert!(!v.matches(ProducerId(7), None));
        assert!(!v.matches(ProducerId(8), Some(g1)));
    }

    /// The ABA case: a verification started, a marker ended the transaction (clearing the
    /// entry), a new verification started; the first one's guard no longer matches.
    #[test]
    fn a_cleared_entry_makes_its_guard_stale() {
        let mut v = Verifications::default();
        let old = v.start(ProducerId(1), 0, 0, 0).unwrap();
        v.clear(ProducerId(1));
        assert!(!v.matches(ProducerId(1), Some(old)));
        let new = v.start(ProducerId(1), 0, 0, 0).unwrap();
        assert_ne!(old, new);
        assert!(!v.matches(ProducerId(1), Some(old)));
        assert!(v.matches(ProducerId(1), Some(new)));
    }

    #[test]
    fn bounded_old_entries_make_room() {
        let mut v = Verifications::default();
        for pid in 0..TXN_VERIFICATIONS_MAX as i64 {
            v.start(ProducerId(pid), 0, 0, 0).unwrap();
        }
        // Full, nothing old enough to drop: refused.
        assert_eq!(v.start(ProducerId(-5), 0, 0, 1), Err(VerificationsFull));
        // An existing producer still gets its guard.
        assert!(v.start(ProducerId(3), 0, 0, 1).is_ok());
        // Once the entries are old, they make room.
        assert!(v
            .start(ProducerId(-5), 0, 0, TXN_VERIFICATION_AGE_MS_MAX)
            .is_ok());
        assert_eq!(v.len(), 1);
    }
}
