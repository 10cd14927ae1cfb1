//! Producer identity as Kafka's record batch header carries it: a producer id (i64) and an
//! epoch (i16), with -1 meaning "none" for both. Newtypes so an epoch is never passed where a
//! producer id (or a partition leader epoch) is meant; they live in the protocol layer because
//! every layer that meets a batch (storage's producer state, the transaction coordinator,
//! replication) needs them and protocol is below all of those.

/// A producer id (batch header `producerId`). Allocated by the controller in blocks; -1 is
/// "not an idempotent producer". Archived by rkyv as its `i64` alone (storage's producer
/// snapshots hold it), so snapshots written before it was a newtype read the same.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
pub struct ProducerId(pub i64);

/// The bare number, as Kafka's logs and tools print a producer id.
impl std::fmt::Display for ProducerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl ProducerId {
    /// Kafka's `RecordBatch.NO_PRODUCER_ID`.
    pub const NONE: ProducerId = ProducerId(-1);

    pub fn is_none(self) -> bool {
        self.0 < 0
    }
}

/// A producer epoch (batch header `producerEpoch`). Bumped by InitProducerId and, with
/// transactions, on fencing; -1 is "no epoch yet".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerEpoch(pub i16);

impl ProducerEpoch {
    /// Kafka's `RecordBatch.NO_PRODUCER_EPOCH`.
    pub const NONE: ProducerEpoch = ProducerEpoch(-1);
    /// The largest epoch a batch may carry.
    pub const MAX: ProducerEpoch = ProducerEpoch(i16::MAX);

    /// Kafka's `TransactionMetadata.isEpochExhausted`: at `MAX - 1` one more bump is left,
    /// and the coordinator keeps it for fencing (an abort by the coordinator bumps the epoch
    /// once more), so a producer at this epoch gets a new producer id instead.
    pub fn is_exhausted(self) -> bool {
        self.0 >= i16::MAX - 1
    }

    /// The next epoch; `NONE` bumps to 0. Saturates at `MAX` (callers check `is_exhausted`
    /// first; saturating rather than wrapping keeps a bug from reusing epoch 0).
    pub fn bumped(self) -> ProducerEpoch {
        ProducerEpoch(self.0.saturating_add(1).max(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Epoch arithmetic at its edges: NONE bumps to 0, MAX saturates, exhaustion starts one
    /// below MAX (as Kafka's isEpochExhausted).
    #[test]
    fn epoch_edges() {
        assert_eq!(ProducerEpoch::NONE.bumped(), ProducerEpoch(0));
        assert_eq!(ProducerEpoch(5).bumped(), ProducerEpoch(6));
        assert_eq!(ProducerEpoch::MAX.bumped(), ProducerEpoch::MAX);
        assert!(!ProducerEpoch(i16::MAX - 2).is_exhausted());
        assert!(ProducerEpoch(i16::MAX - 1).is_exhausted());
        assert!(ProducerEpoch::MAX.is_exhausted());
        assert!(ProducerId::NONE.is_none());
        assert!(!ProducerId(0).is_none());
    }
}
