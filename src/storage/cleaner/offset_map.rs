//! The cleaner's key -> last offset map (Kafka's `SkimpyOffsetMap`), bounded by
//! `log.cleaner.dedupe.buffer.size`.
//!
//! Keys are stored as a 128-bit hash, not as bytes, so every entry costs the same and the
//! bound is exact: the table is sized once from the byte budget and never grows past it.
//! Like Kafka (which keeps MD5 digests), a hash collision between two live keys would make
//! the cleaner drop the older key's record; at 128 bits that is far below the odds of a disk
//! flipping a bit undetected. The hashes only need to agree within one cleaning pass (the
//! map is built and used in the same process), so SipHash with two fixed keys suffices.
//!
//! When the map is full, the caller stops mapping and cleans only up to the last batch it
//! mapped whole ([`OffsetMap::latest_offset`]); the rest of the dirty section waits for the
//! next pass, as in Kafka.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// Bytes one slot of the table takes: the 16-byte key hash, the 8-byte offset and the
/// table's 1-byte control tag.
pub const OFFSET_MAP_SLOT_BYTES: usize = 16 + 8 + 1;

/// The table fills its slots to 7/8 at most before it would grow; the map stops at that
/// load instead (Kafka stops at `log.cleaner.io.buffer.load.factor`, 0.9).
const LOAD_NUMERATOR: usize = 7;
const LOAD_DENOMINATOR: usize = 8;

/// The key hash is already uniform: the table uses its low bits as they are.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// A 128-bit digest of a record key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyHash([u64; 2]);

impl Hash for KeyHash {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0[0]);
    }
}

impl KeyHash {
    pub fn of(key: &[u8]) -> Self {
        let mut low = std::hash::DefaultHasher::new();
        low.write(key);
        let mut high = std::hash::DefaultHasher::new();
        // A different prefix makes the second half independent of the first.
        high.write_u8(0xa5);
        high.write(key);
        Self([low.finish(), high.finish()])
    }
}

/// Key -> highest offset seen for it, in a fixed-size table.
pub struct OffsetMap {
    table: HashMap<KeyHash, i64, BuildHasherDefault<PassThrough>>,
    entries_max: usize,
    /// Last offset of the last batch mapped whole; -1 when nothing is mapped.
    latest_offset: i64,
}

/// The map has no room for another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapFull;

impl OffsetMap {
    /// A map that never uses more than `buffer_bytes` for its table. The table itself is
    /// allocated on first insert and kept across [`OffsetMap::clear`], so a shard that never
    /// cleans a compacted log never pays for it.
    pub fn new(buffer_bytes: usize) -> Self {
        Self {
            table: HashMap::default(),
            entries_max: Self::entries_for(buffer_bytes),
            latest_offset: -1,
        }
    }

    /// Keys a table of at most `buffer_bytes` holds: the table's slot count is a power of
    /// two, filled to 7/8.
    pub fn entries_for(buffer_bytes: usize) -> usize {
        let slots = buffer_bytes / OFFSET_MAP_SLOT_BYTES;
        if slots < LOAD_DENOMINATOR {
            return 0;
        }
        let slots_pow2 = 1usize << (usize::BITS - 1 - slots.leading_zeros());
        slots_pow2 / LOAD_DENOMINATOR * LOAD_NUMERATOR
    }

    pub fn entries_max(&self) -> usize {
        self.entries_max
    }
    pub fn len(&self) -> usize {
        self.table.len()
    }
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
    pub fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    /// Records that `key` was written at `offset` (later offsets win).
    pub fn put(&mut self, key: &[u8], offset: i64) -> Result<(), MapFull> {
        let hash = KeyHash::of(key);
        if let Some(slot) = self.table.get_mut(&hash) {
            *slot = (*slot).max(offset);
            return Ok(());
        }
        if self.table.len() >= self.entries_max {
            return Err(MapFull);
        }
        if self.table.capacity() == 0 {
            // One allocation of the whole budget: the table never rehashes while mapping.
            self.table.reserve(self.entries_max);
        }
        self.table.insert(hash, offset);
        Ok(())
    }

    /// The highest offset mapped for `key`, if any.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        self.table.get(&KeyHash::of(key)).copied()
    }

    pub fn set_latest_offset(&mut self, offset: i64) {
        self.latest_offset = self.latest_offset.max(offset);
    }

    /// Empties the map for the next pass, keeping its table.
    pub fn clear(&mut self) {
        self.table.clear();
        self.latest_offset = -1;
    }

    /// Bytes the table holds allocated now (0 before the first insert).
    pub fn allocated_bytes(&self) -> usize {
        self.table.capacity().div_ceil(LOAD_NUMERATOR) * LOAD_DENOMINATOR * OFFSET_MAP_SLOT_BYTES
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Proves the map holds exactly `entries_for(budget)` distinct keys, refuses the next
    /// new key, still accepts a later offset for a known key, and that its table fits the
    /// byte budget it was given.
    #[test]
    fn bound_is_exact_and_fits_the_budget() {
        for budget in [0usize, 100, 25 * 8, 4096, 1 << 20, 3 << 20] {
            let mut map = OffsetMap::new(budget);
            let n = map.entries_max();
            for i in 0..n {
                map.put(format!("k{i}").as_bytes(), i as i64).unwrap();
            }
            assert_eq!(map.put(b"one more", 1), Err(MapFull), "budget {budget}");
            if n > 0 {
                map.put(b"k0", 99).unwrap();
                assert_eq!(map.get(b"k0"), Some(99));
            }
            assert!(
                map.allocated_bytes() <= budget,
                "budget {budget}: {}",
                map.allocated_bytes()
            );
            map.clear();
            assert!(map.is_empty());
            assert_eq!(map.latest_offset(), -1);
        }
    }

    /// Proves the highest offset wins regardless of insertion order.
    #[test]
    fn later_offset_wins() {
        let mut map = OffsetMap::new(1 << 16);
        map.put(b"a", 5).unwrap();
        map.put(b"a", 3).unwrap();
        assert_eq!(map.get(b"a"), Some(5));
        assert_eq!(map.get(b"b"), None);
    }
}
