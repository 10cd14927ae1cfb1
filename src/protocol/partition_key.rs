//! Kafka's default partitioner for keyed records, exactly as the Java producer computes it:
//! `toPositive(murmur2(key)) % partitions` (`BuiltInPartitioner`), so a key lands on the same
//! partition whichever client — or the broker's own ingestion — wrote it.

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
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
}
