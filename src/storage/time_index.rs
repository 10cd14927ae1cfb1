//! Sparse time index of one segment: entries `(max timestamp so far: i64, relative offset:
//! u32)`, 12 bytes big-endian — Kafka's `.timeindex`. An entry is added next to an offset
//! index entry when the segment's max timestamp has grown, plus a final one when the
//! segment is sealed, so the last entry is the segment's largest timestamp.
//!
//! Invariants: timestamps and relative offsets strictly increase. An entry (t, o) means
//! every batch up to and including offset o has max timestamp <= t, and all batches before
//! o have max timestamp < t (entries are recorded at the first batch reaching a new maximum).

pub(crate) const ENTRY_LEN: usize = 12;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TimeIndex {
    entries: Vec<(i64, u32)>,
}

impl TimeIndex {
    pub(crate) fn bytes(&self) -> usize {
        self.entries.len() * ENTRY_LEN
    }
    pub(crate) fn last(&self) -> Option<(i64, u32)> {
        self.entries.last().copied()
    }

    /// Adds `(timestamp, relative_offset)` if the timestamp grows; ignores it otherwise.
    pub(crate) fn maybe_push(&mut self, timestamp: i64, relative_offset: u32) {
        match self.entries.last() {
            Some(&(t, r)) if timestamp <= t || relative_offset <= r => {}
            _ => self.entries.push((timestamp, relative_offset)),
        }
    }

    /// The last entry whose timestamp is strictly below `timestamp`: every batch up to its
    /// offset is too old, so a search for `timestamp` may start at that offset.
    pub(crate) fn floor_below(&self, timestamp: i64) -> Option<u32> {
        let n = self.entries.partition_point(|&(t, _)| t < timestamp);
        n.checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .map(|&(_, r)| r)
    }

    pub(crate) fn truncate_to_relative(&mut self, relative_offset_exclusive: u32) {
        let n = self
            .entries
            .partition_point(|&(_, r)| r < relative_offset_exclusive);
        self.entries.truncate(n);
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes());
        for &(t, r) in &self.entries {
            out.extend_from_slice(&t.to_be_bytes());
            out.extend_from_slice(&r.to_be_bytes());
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8], max_relative_offset: u64) -> Result<Self, String> {
        if !bytes.len().is_multiple_of(ENTRY_LEN) {
            return Err(format!(
                "length {} is not a multiple of {ENTRY_LEN}",
                bytes.len()
            ));
        }
        let mut out = Self::default();
        for chunk in bytes.chunks_exact(ENTRY_LEN) {
            let (t, r) = chunk.split_at(8);
            let t = i64::from_be_bytes(t.try_into().map_err(|_| "entry")?);
            let r = u32::from_be_bytes(r.try_into().map_err(|_| "entry")?);
            if let Some((pt, pr)) = out.last() {
                if t <= pt || r <= pr {
                    return Err(format!("entry ({t},{r}) does not increase"));
                }
            }
            if r as u64 > max_relative_offset {
                return Err(format!("entry ({t},{r}) points outside the segment"));
            }
            out.entries.push((t, r));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// floor_below returns the last entry strictly older than the probe; non-growing
    /// timestamps are ignored; decode round-trips and rejects decreasing files.
    #[test]
    fn floor_and_roundtrip() {
        let mut t = TimeIndex::default();
        t.maybe_push(100, 0);
        t.maybe_push(100, 5); // not growing: ignored
        t.maybe_push(200, 10);
        t.maybe_push(300, 20);
        assert_eq!(t.floor_below(50), None);
        assert_eq!(t.floor_below(100), None);
        assert_eq!(t.floor_below(101), Some(0));
        assert_eq!(t.floor_below(300), Some(10));
        assert_eq!(t.floor_below(i64::MAX), Some(20));
        assert_eq!(TimeIndex::decode(&t.encode(), 20), Ok(t.clone()));
        assert!(TimeIndex::decode(&t.encode(), 19).is_err());
        let mut bad = t.encode()[12..].to_vec();
        bad.extend_from_slice(&t.encode()[..12]);
        assert!(TimeIndex::decode(&bad, 20).is_err());
    }
}
