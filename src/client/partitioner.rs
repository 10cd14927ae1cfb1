//! Choosing a partition for a record, exactly as Kafka's Java producer does, so a key lands on
//! the same partition whichever client wrote it.
//!
//! Keyed records: `toPositive(murmur2(key)) % partitions` (Java's `BuiltInPartitioner`).
//! Keyless records: sticky — one partition per batch, moving round-robin to the next partition
//! when a batch is closed, which keeps batches full without skewing the spread.

pub use crate::protocol::partition_key::{murmur2, partition_for_key, to_positive};

/// Spreads keyless records: the same partition for a whole batch, the next one after.
#[derive(Debug, Clone)]
pub struct StickyPartitioner {
    current: i32,
}

impl StickyPartitioner {
    /// Starts at a random partition so many short-lived producers do not all hit partition 0.
    pub fn new(partitions: i32) -> Self {
        let start = if partitions > 0 {
            rand::Rng::gen_range(&mut rand::thread_rng(), 0..partitions)
        } else {
            0
        };
        StickyPartitioner { current: start }
    }

    /// The partition for the next keyless record.
    pub fn partition(&self, partitions: i32) -> i32 {
        self.current.rem_euclid(partitions.max(1))
    }

    /// Called when a batch for the current partition is closed: move on.
    pub fn next_batch(&mut self, partitions: i32) {
        self.current = (self.current + 1).rem_euclid(partitions.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sticky_partitioner_moves_round_robin() {
        // Proves keyless records stay on one partition per batch and then visit every partition.
        let mut sticky = StickyPartitioner::new(3);
        let first = sticky.partition(3);
        let mut seen = vec![first];
        for _ in 0..2 {
            sticky.next_batch(3);
            seen.push(sticky.partition(3));
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 2]);
    }
}
