//! Choosing a partition for a record, exactly as Kafka's Java producer does, so a key lands on
//! the same partition whichever client wrote it.
//!
//! Keyed records: `toPositive(murmur2(key)) % partitions` (Java's `BuiltInPartitioner`).
//! Keyless records: sticky — one partition per batch, moving round-robin to the next partition
//! when a batch is closed, which keeps batches full without skewing the spread.

/// Kafka's `Utils.murmur2`: MurmurHash2, 32-bit, seed `0x9747b28c`, as a signed Java int.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;

    // Java truncates the length to an int; keys are far below 2^32 bytes, so `as` is exact.
    let mut h: u32 = SEED ^ (data.len() as u32);
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    // Java's switch falls through from 3 to 2 to 1.
    match *tail {
        [a, b, c] => {
            h ^= u32::from(c) << 16;
            h ^= u32::from(b) << 8;
            h ^= u32::from(a);
            h = h.wrapping_mul(M);
        }
        [a, b] => {
            h ^= u32::from(b) << 8;
            h ^= u32::from(a);
            h = h.wrapping_mul(M);
        }
        [a] => {
            h ^= u32::from(a);
            h = h.wrapping_mul(M);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit (not `abs`, which overflows on `MIN`).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition Kafka's default partitioner picks for `key` among `partitions` partitions.
///
/// # Panics
/// If `partitions` is not positive: a topic always has at least one partition, so a zero here
/// is a caller bug.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    assert!(partitions > 0, "a topic has at least one partition");
    to_positive(murmur2(key)) % partitions
}

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
    fn murmur2_matches_java_utils_test_vectors() {
        // Proves byte-for-byte agreement with Kafka's UtilsTest.testMurmur2 (plus the empty
        // key, whose value the Java client also gives).
        let cases: &[(&[u8], i32)] = &[
            (b"", 275_646_681),
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (&[12, 42, 56, 24, 109, 111], 274_204_207),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (input, want) in cases {
            assert_eq!(
                murmur2(input),
                *want,
                "murmur2({:?})",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn partition_for_key_uses_to_positive_not_abs() {
        // Proves negative hashes map through the sign-bit mask, as Java's toPositive does.
        assert_eq!(
            partition_for_key(b"21", 1 << 30),
            (-973_932_308i32 & 0x7fff_ffff) % (1 << 30)
        );
        assert_eq!(partition_for_key(b"foobar", 7), 1_357_151_166 % 7);
        assert_eq!(to_positive(i32::MIN), 0);
    }

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
