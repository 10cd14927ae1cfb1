//! The leader-epoch cache of one partition: for each leader epoch, the first offset written
//! in it (Kafka's `LeaderEpochFileCache`, KIP-101/KIP-279). A follower of a new leader asks
//! "where does my last epoch end on your log?" (OffsetForLeaderEpoch) and truncates its own
//! log there, so it drops exactly the records no committed history contains.
//!
//! Pure data: persistence is the storage layer's job. Invariant: epochs and start offsets
//! both strictly increase along `entries`.
use crate::protocol::ids::{LeaderEpoch, Offset};

/// Epoch value meaning "unknown" in Kafka's protocol.
pub const UNDEFINED_EPOCH: LeaderEpoch = LeaderEpoch::UNDEFINED;
/// Offset value meaning "unknown" in Kafka's protocol.
pub const UNDEFINED_OFFSET: Offset = Offset::UNDEFINED;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: LeaderEpoch,
    pub start_offset: Offset,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    entries: Vec<EpochEntry>,
}

impl EpochCache {
    pub fn from_entries(mut entries: Vec<EpochEntry>) -> Self {
        // Keep only a strictly increasing chain, so a damaged checkpoint cannot break the
        // invariant the lookups rely on.
        entries.sort_by_key(|e| (e.epoch, e.start_offset));
        let mut cache = Self::default();
        for e in entries {
            cache.assign(e.epoch, e.start_offset);
        }
        cache
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Records that `epoch` starts at `start_offset`. Called for the first batch of each
    /// epoch appended (by the leader, or copied by a follower). Entries it contradicts — a
    /// later or equal epoch, or one starting at or after `start_offset` — are dropped: the
    /// log beneath them was truncated and rewritten.
    pub fn assign(&mut self, epoch: LeaderEpoch, start_offset: Offset) {
        if epoch < LeaderEpoch(0) || start_offset < Offset::ZERO {
            return;
        }
        if let Some(last) = self.entries.last() {
            if last.epoch == epoch && last.start_offset <= start_offset {
                return;
            }
        }
        self.entries
            .retain(|e| e.epoch < epoch && e.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
    }

    /// Kafka's `endOffsetFor`: the largest epoch at most `requested` that this log knows,
    /// and the offset where it ends (the start of the next epoch, or `log_end` for the
    /// latest). A requested epoch newer than any known gives UNDEFINED.
    pub fn end_offset_for(&self, requested: LeaderEpoch, log_end: Offset) -> (LeaderEpoch, Offset) {
        if requested == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
        }
        match self.entries.last() {
            None => return (UNDEFINED_EPOCH, UNDEFINED_OFFSET),
            Some(last) if last.epoch == requested => return (requested, log_end),
            _ => {}
        }
        let Some(higher) = self.entries.iter().find(|e| e.epoch > requested) else {
            return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
        };
        match self.entries.iter().rev().find(|e| e.epoch <= requested) {
            None => (requested, higher.start_offset),
            Some(floor) => (floor.epoch, higher.start_offset),
        }
    }

    /// The epoch the record at `offset` was written in: the latest one starting at or
    /// before it (Kafka's `epochForOffset`); `None` before the first known epoch.
    pub fn epoch_for_offset(&self, offset: Offset) -> Option<LeaderEpoch> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.start_offset <= offset)
            .map(|e| e.epoch)
    }

    /// The log was truncated to end at `end_offset`: epochs starting there or later go.
    pub fn truncate_from_end(&mut self, end_offset: Offset) {
        self.entries.retain(|e| e.start_offset < end_offset);
    }

    /// The log now starts at `start_offset` (retention, DeleteRecords): epochs wholly before
    /// it go, and the one that spans it now starts there.
    pub fn truncate_from_start(&mut self, start_offset: Offset) {
        let keep_from = self
            .entries
            .iter()
            .rposition(|e| e.start_offset <= start_offset);
        if let Some(i) = keep_from {
            self.entries.drain(..i);
            if let Some(first) = self.entries.first_mut() {
                first.start_offset = start_offset;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(pairs: &[(i32, i64)]) -> EpochCache {
        let mut c = EpochCache::default();
        for (e, o) in pairs {
            c.assign(LeaderEpoch(*e), Offset(*o));
        }
        c
    }

    fn entry(epoch: i32, start_offset: i64) -> EpochEntry {
        EpochEntry {
            epoch: LeaderEpoch(epoch),
            start_offset: Offset(start_offset),
        }
    }

    /// endOffsetFor follows Kafka's rules for latest, middle, older and unknown epochs.
    #[test]
    fn end_offsets_follow_kafka() {
        let c = cache(&[(1, 0), (3, 10), (5, 20)]);
        let end = |epoch, log_end| c.end_offset_for(LeaderEpoch(epoch), Offset(log_end));
        assert_eq!(end(5, 30), (LeaderEpoch(5), Offset(30)));
        assert_eq!(end(3, 30), (LeaderEpoch(3), Offset(20)));
        assert_eq!(end(4, 30), (LeaderEpoch(3), Offset(20)));
        assert_eq!(end(0, 30), (LeaderEpoch(0), Offset(0)));
        assert_eq!(end(6, 30), (UNDEFINED_EPOCH, UNDEFINED_OFFSET));
        assert_eq!(end(-1, 30), (UNDEFINED_EPOCH, UNDEFINED_OFFSET));
    }

    /// Assigning an older or overlapping epoch drops the entries it contradicts.
    #[test]
    fn assign_drops_contradicted_entries() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        c.assign(LeaderEpoch(5), Offset(25));
        assert_eq!(c.latest(), Some(entry(5, 20)));
        c.assign(LeaderEpoch(6), Offset(15));
        assert_eq!(c.entries(), &[entry(1, 0), entry(3, 10), entry(6, 15)]);
    }

    /// Truncation from either end keeps the chain consistent with the log's new bounds.
    #[test]
    fn truncation() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        c.truncate_from_end(Offset(20));
        assert_eq!(c.latest(), Some(entry(3, 10)));
        c.truncate_from_start(Offset(12));
        assert_eq!(c.entries(), &[entry(3, 12)]);
    }
}
