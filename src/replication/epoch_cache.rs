//! The leader-epoch cache of one partition: for each leader epoch, the first offset written
//! in it (Kafka's `LeaderEpochFileCache`, KIP-101/KIP-279). A follower of a new leader asks
//! "where does my last epoch end on your log?" (OffsetForLeaderEpoch) and truncates its own
//! log there, so it drops exactly the records no committed history contains.
//!
//! Pure data: persistence is the storage layer's job. Invariant: epochs and start offsets
//! both strictly increase along `entries`.

/// Epoch value meaning "unknown" in Kafka's protocol.
pub const UNDEFINED_EPOCH: i32 = -1;
/// Offset value meaning "unknown" in Kafka's protocol.
pub const UNDEFINED_OFFSET: i64 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
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
    pub fn assign(&mut self, epoch: i32, start_offset: i64) {
        if epoch < 0 || start_offset < 0 {
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
    pub fn end_offset_for(&self, requested: i32, log_end: i64) -> (i32, i64) {
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
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.start_offset <= offset)
            .map(|e| e.epoch)
    }

    /// The log was truncated to end at `end_offset`: epochs starting there or later go.
    pub fn truncate_from_end(&mut self, end_offset: i64) {
        self.entries.retain(|e| e.start_offset < end_offset);
    }

    /// The log now starts at `start_offset` (retention, DeleteRecords): epochs wholly before
    /// it go, and the one that spans it now starts there.
    pub fn truncate_from_start(&mut self, start_offset: i64) {
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
            c.assign(*e, *o);
        }
        c
    }

    /// endOffsetFor follows Kafka's rules for latest, middle, older and unknown epochs.
    #[test]
    fn end_offsets_follow_kafka() {
        let c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert_eq!(c.end_offset_for(5, 30), (5, 30));
        assert_eq!(c.end_offset_for(3, 30), (3, 20));
        assert_eq!(c.end_offset_for(4, 30), (3, 20));
        assert_eq!(c.end_offset_for(0, 30), (0, 0));
        assert_eq!(c.end_offset_for(6, 30), (UNDEFINED_EPOCH, UNDEFINED_OFFSET));
        assert_eq!(
            c.end_offset_for(-1, 30),
            (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
        );
    }

    /// Assigning an older or overlapping epoch drops the entries it contradicts.
    #[test]
    fn assign_drops_contradicted_entries() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        c.assign(5, 25);
        assert_eq!(
            c.latest(),
            Some(EpochEntry {
                epoch: 5,
                start_offset: 20
            })
        );
        c.assign(6, 15);
        assert_eq!(
            c.entries(),
            &[
                EpochEntry {
                    epoch: 1,
                    start_offset: 0
                },
                EpochEntry {
                    epoch: 3,
                    start_offset: 10
                },
                EpochEntry {
                    epoch: 6,
                    start_offset: 15
                }
            ]
        );
    }

    /// Truncation from either end keeps the chain consistent with the log's new bounds.
    #[test]
    fn truncation() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        c.truncate_from_end(20);
        assert_eq!(
            c.latest(),
            Some(EpochEntry {
                epoch: 3,
                start_offset: 10
            })
        );
        c.truncate_from_start(12);
        assert_eq!(
            c.entries(),
            &[EpochEntry {
                epoch: 3,
                start_offset: 12
            }]
        );
    }
}
