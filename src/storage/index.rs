//! Sparse offset index of one segment: entries `(relative offset: u32, position: u32)`,
//! big-endian, 8 bytes each — Kafka's `.index` layout. One entry per `index.interval.bytes`
//! of log; each entry names a batch's base offset and the byte position where it starts.
//!
//! Invariants: relative offsets and positions strictly increase (asserted on push). Lookup
//! is a binary search. A file loaded from disk is checked (`decode`): whole entries,
//! monotonic, pointing inside the segment; a file that fails is rebuilt by scanning.

/// Bytes per entry on disk.
pub(crate) const ENTRY_LEN: usize = 8;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct OffsetIndex {
    entries: Vec<(u32, u32)>,
}

impl OffsetIndex {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
    pub(crate) fn bytes(&self) -> usize {
        self.entries.len() * ENTRY_LEN
    }
    pub(crate) fn last(&self) -> Option<(u32, u32)> {
        self.entries.last().copied()
    }

    pub(crate) fn push(&mut self, relative_offset: u32, position: u32) {
        if let Some(&(r, p)) = self.entries.last() {
            assert!(
                relative_offset > r && position > p,
                "index entries must strictly increase"
            );
        }
        self.entries.push((relative_offset, position));
    }

    /// Position of the last indexed batch whose base offset is `<= relative_offset`, or 0.
    pub(crate) fn lookup(&self, relative_offset: u32) -> u32 {
        let n = self.entries.partition_point(|&(r, _)| r <= relative_offset);
        match n.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(&(_, p)) => p,
            None => 0,
        }
    }

    /// The last entry whose relative offset is `<= relative_offset`.
    pub(crate) fn floor_entry(&self, relative_offset: u32) -> Option<(u32, u32)> {
        let n = self.entries.partition_point(|&(r, _)| r <= relative_offset);
        n.checked_sub(1).and_then(|i| self.entries.get(i)).copied()
    }

    /// Drops entries at or past `position` (used when recovery truncates the segment).
    pub(crate) fn truncate_to_position(&mut self, position: u32) {
        let n = self.entries.partition_point(|&(_, p)| p < position);
        self.entries.truncate(n);
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes());
        for &(r, p) in &self.entries {
            out.extend_from_slice(&r.to_be_bytes());
            out.extend_from_slice(&p.to_be_bytes());
        }
        out
    }

    /// Kafka's sanity check: whole entries, strictly increasing, every position inside the
    /// segment (`segment_len`) and every relative offset below `max_relative_offset`.
    pub(crate) fn decode(
        bytes: &[u8],
        segment_len: u64,
        max_relative_offset: u64,
    ) -> Result<Self, String> {
        if !bytes.len().is_multiple_of(ENTRY_LEN) {
            return Err(format!(
                "length {} is not a multiple of {ENTRY_LEN}",
                bytes.len()
            ));
        }
        let mut entries = Vec::with_capacity(bytes.len() / ENTRY_LEN);
        let mut prev: Option<(u32, u32)> = None;
        for chunk in bytes.chunks_exact(ENTRY_LEN) {
            let (r, p) = chunk.split_at(4);
            let r = u32::from_be_bytes(r.try_into().map_err(|_| "entry")?);
            let p = u32::from_be_bytes(p.try_into().map_err(|_| "entry")?);
            if let Some((pr, pp)) = prev {
                if r <= pr || p <= pp {
                    return Err(format!(
                        "entry ({r},{p}) does not increase after ({pr},{pp})"
                    ));
                }
            }
            if p as u64 >= segment_len || r as u64 > max_relative_offset {
                return Err(format!("entry ({r},{p}) points outside the segment"));
            }
            prev = Some((r, p));
            entries.push((r, p));
        }
        Ok(Self { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Lookup equals the floor entry of a BTreeMap model, for random sparse indexes and
        /// random probes; encode/decode round-trips.
        #[test]
        fn lookup_matches_btreemap_model(
            gaps in proptest::collection::vec((1u32..1000, 1u32..5000), 0..200),
            probes in proptest::collection::vec(0u32..300_000, 1..50),
        ) {
            let mut index = OffsetIndex::default();
            let mut model = BTreeMap::new();
            let (mut r, mut p) = (0u32, 0u32);
            for (i, (dr, dp)) in gaps.iter().enumerate() {
                if i > 0 { r += dr; p += dp; }
                index.push(r, p);
                model.insert(r, p);
            }
            for probe in probes {
                let expected = model.range(..=probe).next_back().map(|(_, &p)| p).unwrap_or(0);
                prop_assert_eq!(index.lookup(probe), expected);
            }
            let decoded = OffsetIndex::decode(&index.encode(), u64::from(p) + 1, u64::from(r));
            prop_assert_eq!(decoded, Ok(index));
        }
    }

    /// Non-monotonic, out-of-segment and ragged files are rejected so recovery rebuilds them.
    #[test]
    fn decode_rejects_insane_files() {
        let mut idx = OffsetIndex::default();
        idx.push(1, 10);
        idx.push(5, 20);
        let good = idx.encode();
        assert!(OffsetIndex::decode(&good, 100, 10).is_ok());
        assert!(OffsetIndex::decode(&good, 20, 10).is_err());
        assert!(OffsetIndex::decode(&good, 100, 4).is_err());
        assert!(OffsetIndex::decode(&good[..7], 100, 10).is_err());
        let mut swapped = good[8..].to_vec();
        swapped.extend_from_slice(&good[..8]);
        assert!(OffsetIndex::decode(&swapped, 100, 10).is_err());
    }
}
