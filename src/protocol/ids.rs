//! Replication identities as Kafka's wire carries them — an offset (i64), a partition leader
//! epoch (i32), a broker node id (i32) — as newtypes, so the replication state machines and
//! the glue that drives them cannot pass an epoch where an offset is meant, or a node id
//! where an epoch is (the OffsetForLeaderEpoch path carries all three side by side). They
//! live in the protocol layer beside `producer.rs` because every layer that meets them
//! (replication, storage's epoch checkpoint, the shard glue) sits above it.
//!
//! Conversions are explicit and happen at the boundaries: `Offset(n)` when a number comes
//! off the wire or out of storage, `.get()` when it goes back. There is no `From<i64>`: an
//! implicit conversion would let the types mix again. Arithmetic is only what an offset
//! means: the next one, or one a count of records further.
use std::fmt;

/// A record offset in a partition's log (also a log end offset or a high watermark: the
/// offset one past the last record). -1 is Kafka's "unknown".
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset(pub i64);

impl Offset {
    /// Kafka's `UNDEFINED_EPOCH_OFFSET` (-1): no offset known.
    pub const UNDEFINED: Offset = Offset(-1);
    pub const ZERO: Offset = Offset(0);

    pub const fn get(self) -> i64 {
        self.0
    }

    /// The offset after this one.
    pub const fn next(self) -> Offset {
        Offset(self.0 + 1)
    }

    /// The offset `records` further on.
    pub const fn plus(self, records: i64) -> Offset {
        Offset(self.0 + records)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A partition leader epoch (batch header `partitionLeaderEpoch`, the epoch fields of
/// Fetch, OffsetForLeaderEpoch and AlterPartition). Not the partition epoch, which counts
/// every change of the partition's state, and not a producer epoch. -1 is "unknown".
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaderEpoch(pub i32);

impl LeaderEpoch {
    /// Kafka's `UNDEFINED_EPOCH` (-1).
    pub const UNDEFINED: LeaderEpoch = LeaderEpoch(-1);

    pub const fn get(self) -> i32 {
        self.0
    }

    /// The epoch after this one (the controller elects a new leader).
    pub const fn next(self) -> LeaderEpoch {
        LeaderEpoch(self.0 + 1)
    }
}

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A broker's node id (`node.id`, a replica id in the metadata). -1 is "none" (no leader).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub i32);

impl NodeId {
    pub const fn get(self) -> i32 {
        self.0
    }

    /// A replica list as the metadata carries it.
    pub fn from_wire_list(ids: &[i32]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    /// A replica list for the wire (AlterPartition's ISR).
    pub fn to_wire_list(ids: &[NodeId]) -> Vec<i32> {
        ids.iter().map(|id| id.0).collect()
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arithmetic an offset has, and the order every id keeps from its number.
    #[test]
    fn offsets_and_order() {
        assert_eq!(Offset(4).next(), Offset(5));
        assert_eq!(Offset(4).plus(3), Offset(7));
        assert!(Offset::UNDEFINED < Offset::ZERO);
        assert!(LeaderEpoch::UNDEFINED < LeaderEpoch(0));
        assert_eq!(LeaderEpoch::UNDEFINED.next(), LeaderEpoch(0));
        assert_eq!(
            NodeId::to_wire_list(&NodeId::from_wire_list(&[3, 1])),
            [3, 1]
        );
        assert_eq!(Offset(12).to_string(), "12");
    }
}
