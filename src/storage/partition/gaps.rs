//! The offset-gap bound: offsets below `gaps_below` may be missing from the log, because
//! the log cleaner removed whole batches (here, or on the leader this follower copies).
//! Recovery accepts a gap only below it and treats any other gap as damage (see
//! `recovery`), so the bound is persisted (`offset-gaps-below`) before a gap is written:
//! by the cleaner before it swaps a cleaned segment in, by a follower before it appends a
//! batch past a gap. A truncation lowers it to the new log end before it cuts, so segments
//! a crash leaves behind the cut are still seen as past a gap and removed.

use crate::protocol::record_batch::{validate, BatchHeader};
use crate::storage::recovery::offset_follows;
use crate::storage::state_file::{self, GAPS_BELOW_FILE};
use crate::storage::Error;

use super::Partition;

impl Partition {
    /// Offsets below this may be missing from the log.
    pub fn gaps_below(&self) -> i64 {
        self.inner.borrow().gaps_below
    }

    /// Sets the bound to `offset` and persists it (durable on return). The caller holds
    /// `meta_lock`, which serialises writers of the file.
    pub(super) async fn set_gaps_below_locked(&self, offset: i64) -> Result<(), Error> {
        state_file::write_offset_file(&self.dir, GAPS_BELOW_FILE, offset).await?;
        self.inner.borrow_mut().gaps_below = offset;
        Ok(())
    }

    /// Before a follower appends `batches` (its leader's, from a Fetch answer): if they skip
    /// offsets past this log's end (the leader's log was cleaned), raises the bound over the
    /// gaps, durably, so `append_replica` and later recoveries accept them. Only batches
    /// whose CRC holds move the bound; everything else is left to `append_replica` to refuse.
    pub async fn prepare_replica_append(&self, batches: &[u8]) -> Result<(), Error> {
        let (mut expected, bound) = {
            let inner = self.inner.borrow();
            inner.check_open()?;
            (inner.next_offset, inner.gaps_below)
        };
        let mut needed = bound;
        let mut at = 0usize;
        while let Some(rest) = batches.get(at..).filter(|r| !r.is_empty()) {
            let Ok(h) = BatchHeader::parse(rest) else {
                break;
            };
            let Some(one) = rest.get(..h.total_len()) else {
                break;
            };
            if h.base_offset < expected {
                break;
            }
            if !offset_follows(expected, h.base_offset, needed) {
                if validate(one).is_err() {
                    break;
                }
                needed = h.base_offset;
            }
            expected = h.last_offset() + 1;
            at += h.total_len();
        }
        if needed <= bound {
            return Ok(());
        }
        let _permit = self.lock_meta().await?;
        if needed > self.gaps_below() {
            self.set_gaps_below_locked(needed).await?;
        }
        Ok(())
    }
}
