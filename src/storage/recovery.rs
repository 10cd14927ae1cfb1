//! Opening a partition directory after a clean or unclean shutdown.
//!
//! - Closed segments: their `.index`/`.timeindex` are trusted if sane (whole entries,
//!   monotonic, inside the file); a missing or insane one is rebuilt by scanning the segment.
//!   Startup does not read closed segments' data otherwise, so it costs O(active segment).
//! - The active (last) segment is scanned from its last usable index entry (or from where
//!   the producer snapshot ends, if earlier): every batch's length and CRC are checked
//!   (`BatchIter`) and base offsets must increase. The file is cut at the first invalid
//!   byte (a torn write, a flipped bit, garbage, offsets going backwards), then
//!   re-preallocated, so stale bytes past the logical end can never be read back as data.
//!   Its index files are deleted if they described bytes that were cut.
//! - Offset gaps: Kafka's logs only require offsets to increase, since the log cleaner
//!   removes whole batches. Here a gap is accepted only where one can legitimately be: below
//!   the persisted `offset-gaps-below` bound, which the cleaner raises before it swaps a
//!   cleaned segment in and a follower raises before it appends a batch past a gap (its
//!   leader's log was cleaned). Above the bound a gap means damage (a stale but valid batch
//!   past the end, a segment cut by a truncation whose later segments survived a crash) and
//!   ends the log there. An unreadable bound accepts every gap (a warning): refusing them
//!   would cut a cleaned log at its first gap and lose data.
//! - A non-last segment found invalid while rebuilding becomes the end of the log: later
//!   segments are deleted.
//! - Producer state: the latest snapshot plus replay of batch headers after it.
//! - Leader epochs: the `(epoch, first offset)` changes seen in the scanned part of the
//!   active segment are returned, so the caller can repair a checkpoint that lags the log;
//!   `scan_epochs` rebuilds the whole cache from batch headers when the checkpoint is lost.
//! - A `truncate-fully.intent` file means `truncate_fully_and_start_at` was interrupted:
//!   it is finished first (every segment and the state describing them go, the log start
//!   becomes the intent's offset), so no truncated record ever comes back.

use std::collections::BTreeMap;
use std::path::Path;

use super::file_io::{open_active_segment, FileSystem, SegmentFile};
use super::index::OffsetIndex;
use super::producer_state::{ProducerSnapshot, ProducerStateTable};
use super::segment::{
    parse_segment_name, preallocation_target, segment_path, Segment, BATCH_READ_BYTES_MAX,
};
use super::state_file::{self, decode, read_raw, remove_if_exists, unframe};
use super::time_index::TimeIndex;
use super::txn_index::{self, AbortedTxn};
use super::{epoch_checkpoint, Error, FlushPolicy, LogConfig, READ_CHUNK_BYTES_MAX};
use crate::protocol::ids::{LeaderEpoch, Offset};
use crate::protocol::record_batch::{BatchError, BatchHeader, BatchIter, BATCH_HEADER_LEN};
use crate::replication::epoch_cache::EpochCache;

pub(crate) const PRODUCER_SNAPSHOT_FILE: &str = "producer_state.snapshot";

pub(crate) struct Recovered {
    pub segments: BTreeMap<i64, Segment>,
    pub log_start: i64,
    pub next_offset: i64,
    pub producers: ProducerStateTable,
    /// First offset of the active-segment region recovery scanned (batch by batch).
    pub epoch_scan_from: i64,
    /// `(leader epoch, base offset)` at each change of epoch in that region, in log order.
    pub scanned_epochs: Vec<(i32, i64)>,
    /// Offsets below this may be missing (see the module docs).
    pub gaps_below: i64,
}

/// Reads the gap bound: none (no file) means the log has no gaps; an unreadable file means
/// any gap is accepted, so a damaged state file never costs cleaned data.
pub(crate) async fn read_gaps_below(dir: &Path) -> i64 {
    match state_file::read_offset_file(dir, state_file::GAPS_BELOW_FILE).await {
        Ok(found) => found.unwrap_or(0),
        Err(e) => {
            tracing::warn!(error = %e, dir = %dir.display(), "offset gap bound unreadable; accepting every offset gap");
            i64::MAX
        }
    }
}

/// Finishes an interrupted `truncate_fully_and_start_at`: removes every segment and the
/// state that described them, persists the new log start, then drops the intent. Each step
/// is idempotent, so a crash during this is finished by the next recovery.
pub(crate) async fn finish_truncate_fully(dir: &Path, offset: i64) -> Result<(), Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "read dir", e))?;
    let mut doomed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, "read dir", e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stem = name
            .strip_suffix(".log")
            .or_else(|| name.strip_suffix(".index"))
            .or_else(|| name.strip_suffix(".timeindex"))
            .or_else(|| name.strip_suffix(".txnindex"));
        if stem.is_some_and(|s| s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit())) {
            doomed.push(entry.path());
        }
    }
    // Highest first, so an interrupted pass never leaves a gap below surviving data.
    doomed.sort_unstable();
    for path in doomed.iter().rev() {
        remove_if_exists(path).await?;
    }
    remove_if_exists(&dir.join(PRODUCER_SNAPSHOT_FILE)).await?;
    remove_if_exists(&dir.join(epoch_checkpoint::EPOCH_CHECKPOINT_FILE)).await?;
    remove_if_exists(&dir.join(state_file::GAPS_BELOW_FILE)).await?;
    state_file::write_log_start(dir, offset).await?;
    state_file::write_offset_file(dir, state_file::HW_CHECKPOINT_FILE, offset).await?;
    remove_if_exists(&dir.join(state_file::TRUNCATE_FULLY_INTENT_FILE)).await?;
    state_file::sync_dir(dir).await
}

/// Rebuilds the leader-epoch cache from every batch header in the log (a lost or corrupt
/// checkpoint). Reads all the data once; CRCs are checked as everywhere else.
pub(crate) async fn scan_epochs(
    dir: &Path,
    segments: &BTreeMap<i64, Segment>,
    gaps_below: i64,
    fs: &dyn FileSystem,
) -> Result<EpochCache, Error> {
    let mut cache = EpochCache::default();
    for seg in segments.values() {
        if seg.size == 0 {
            continue;
        }
        let (path, file) = segment_file(dir, seg, fs).await?;
        let mut changes = Vec::new();
        scan_valid(
            &*file,
            &path,
            0,
            seg.size,
            seg.base_offset,
            seg.base_offset,
            gaps_below,
            |h, _, _| note_epoch(&mut changes, h),
        )
        .await?;
        for (epoch, base) in changes {
            let epoch = LeaderEpoch(epoch);
            if cache.latest().is_none_or(|l| l.epoch != epoch) {
                cache.assign(epoch, Offset(base));
            }
        }
    }
    Ok(cache)
}

/// A segment's log file for a replay: the one it holds open, or opened read-only for this.
async fn segment_file(
    dir: &Path,
    seg: &Segment,
    fs: &dyn FileSystem,
) -> Result<(std::path::PathBuf, std::rc::Rc<dyn SegmentFile>), Error> {
    let path = segment_path(dir, seg.base_offset, "log");
    let file = match &seg.file {
        Some(f) => std::rc::Rc::clone(f),
        None => fs
            .open_segment(&path, false)
            .await
            .map_err(|e| Error::io(&path, "open", e))?,
    };
    Ok((path, file))
}

/// Rebuilds every segment's aborted-transaction index by replaying the whole log's batches
/// and markers from the first segment (a closed segment's index was damaged: its entries need
/// the open transactions at its start, which only a replay from the beginning knows), and
/// rewrites the closed segments' files. Reads all the data once; only after damage.
pub(crate) async fn rebuild_aborted_index(
    dir: &Path,
    segments: &mut BTreeMap<i64, Segment>,
    gaps_below: i64,
    fs: &dyn FileSystem,
) -> Result<(), Error> {
    let mut producers = ProducerStateTable::default();
    let last = segments.keys().next_back().copied();
    for seg in segments.values_mut() {
        let mut aborted = Vec::new();
        if seg.size > 0 {
            let (path, file) = segment_file(dir, seg, fs).await?;
            scan_valid(
                &*file,
                &path,
                0,
                seg.size,
                seg.base_offset,
                seg.base_offset,
                gaps_below,
                |h, _, batch| {
                    if let Some(done) = producers.replay(h, batch) {
                        if done.aborted {
                            aborted.push(AbortedTxn::from(done));
                        }
                    }
                },
            )
            .await?;
        }
        if Some(seg.base_offset) != last {
            txn_index::write(dir, seg.base_offset, &aborted).await?;
        }
        seg.aborted = aborted;
    }
    Ok(())
}

/// Appends `(epoch, base)` when the batch's leader epoch differs from the last one noted.
pub(crate) fn note_epoch(changes: &mut Vec<(i32, i64)>, h: &BatchHeader) {
    let epoch = h.partition_leader_epoch;
    if epoch >= 0 && changes.last().is_none_or(|&(e, _)| e != epoch) {
        changes.push((epoch, h.base_offset));
    }
}

pub(crate) async fn read_producer_snapshot(dir: &Path) -> Result<Option<ProducerSnapshot>, Error> {
    let path = dir.join(PRODUCER_SNAPSHOT_FILE);
    let Some(bytes) = read_raw(&path).await? else {
        return Ok(None);
    };
    let payload = unframe(&path, &bytes)?;
    decode::<ProducerSnapshot>(&path, payload).map(Some)
}

pub(crate) async fn write_producer_snapshot(dir: &Path, s: &ProducerSnapshot) -> Result<(), Error> {
    let path = dir.join(PRODUCER_SNAPSHOT_FILE);
    let payload = rkyv::to_bytes::<rkyv::rancor::Error>(s)
        .map_err(|e| Error::corruption(&path, 0, e.to_string()))?;
    state_file::write_atomic(dir, PRODUCER_SNAPSHOT_FILE, state_file::frame(&payload)).await
}

/// Writes a segment's index files atomically (call only once its data is durable).
pub(crate) async fn write_indexes(
    dir: &Path,
    base_offset: i64,
    index: &OffsetIndex,
    time_index: &TimeIndex,
) -> Result<(), Error> {
    state_file::write_atomic(dir, &format!("{base_offset:020}.index"), index.encode()).await?;
    state_file::write_atomic(
        dir,
        &format!("{base_offset:020}.timeindex"),
        time_index.encode(),
    )
    .await
}

/// Finishes a log cleaner swap interrupted by a crash. `<base>.log.swap` is only ever
/// renamed from a fully written, fsynced `.cleaned` file, so it is complete: the segments it
/// replaces (those starting inside its offset range) go, and it becomes `<base>.log`; its
/// index files are rebuilt on first use. Idempotent, so a crash in here is finished by the
/// next recovery.
async fn finish_swap(dir: &Path, name: &str, bases: &mut Vec<i64>) -> Result<(), Error> {
    let Some(base) = parse_segment_name(name) else {
        return Ok(());
    };
    let swap_path = dir.join(format!("{name}.swap"));
    let data = std::fs::read(&swap_path).map_err(|e| Error::io(&swap_path, "read", e))?;
    let mut end = base;
    let mut markers_kept = std::collections::BTreeSet::new();
    for item in BatchIter::new(&data) {
        match item {
            Ok((_, h)) => {
                end = end.max(h.last_offset() + 1);
                if h.is_control() && h.records_count > 0 {
                    markers_kept.insert(h.last_offset());
                }
            }
            Err(_) => break,
        }
    }
    tracing::warn!(path = %swap_path.display(), end, "finishing an interrupted cleaner swap");
    let replaced: Vec<i64> = bases
        .iter()
        .copied()
        .filter(|&b| b == base || (b > base && b < end))
        .collect();
    // The aborted indexes of the segments it replaces become its own before they go, less
    // the entries whose marker the cleaner removed (as the cleaner itself does).
    merge_txn_indexes(dir, base, &replaced, &markers_kept).await?;
    for b in &replaced {
        if *b == base {
            remove_segment_data_files(dir, *b).await?;
        } else {
            remove_segment_files(dir, *b).await?;
        }
    }
    bases.retain(|b| !replaced.contains(b));
    let log_path = segment_path(dir, base, "log");
    std::fs::rename(&swap_path, &log_path).map_err(|e| Error::io(&log_path, "rename", e))?;
    state_file::sync_dir(dir).await?;
    bases.push(base);
    Ok(())
}

/// Writes `base`'s `.txnindex` as the union of the `.txnindex` files of `sources` (which may
/// include `base` itself, maybe already merged), keeping the entries whose ABORT marker is in
/// `markers_kept` (the cleaned segment replacing them still holds it: an entry without its
/// marker would hide the producer's later records from read_committed readers). Entries are
/// told apart by their marker offset; a file that does not decode is skipped (the log's
/// markers are still there for a rebuild). Idempotent: a crash in here is redone.
pub(crate) async fn merge_txn_indexes(
    dir: &Path,
    base: i64,
    sources: &[i64],
    markers_kept: &std::collections::BTreeSet<i64>,
) -> Result<(), Error> {
    let mut merged: BTreeMap<i64, AbortedTxn> = BTreeMap::new();
    for &source in sources {
        match txn_index::read(dir, source, i64::MAX).await {
            Ok(entries) => merged.extend(entries.into_iter().map(|e| (e.last_offset, e))),
            Err(why) => {
                tracing::warn!(
                    segment = source,
                    why,
                    "aborted-transaction index not merged into the cleaned segment"
                )
            }
        }
    }
    let entries: Vec<AbortedTxn> = merged
        .into_values()
        .filter(|e| markers_kept.contains(&e.last_offset))
        .collect();
    txn_index::write(dir, base, &entries).await
}

/// Removes a segment's data and offset/time indexes, keeping its `.txnindex`.
pub(crate) async fn remove_segment_data_files(dir: &Path, base_offset: i64) -> Result<(), Error> {
    for ext in ["log", "index", "timeindex"] {
        remove_if_exists(&segment_path(dir, base_offset, ext)).await?;
    }
    Ok(())
}

pub(crate) async fn remove_segment_files(dir: &Path, base_offset: i64) -> Result<(), Error> {
    for ext in ["log", "index", "timeindex", "txnindex"] {
        remove_if_exists(&segment_path(dir, base_offset, ext)).await?;
    }
    Ok(())
}

/// Scans batches from `pos` to at most `file_len`, calling `on_batch` for each valid one
/// whose base offset continues the sequence from `expected_base`: exactly, or past a gap
/// that ends at or below `gaps_below`. Returns the end of the valid prefix. Reads are
/// bounded by `READ_CHUNK_BYTES_MAX` (or one batch, if larger).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn scan_valid(
    file: &dyn SegmentFile,
    path: &Path,
    mut pos: u64,
    file_len: u64,
    segment_base: i64,
    mut expected_base: i64,
    gaps_below: i64,
    mut on_batch: impl FnMut(&BatchHeader, u64, &[u8]),
) -> Result<u64, Error> {
    let mut len = READ_CHUNK_BYTES_MAX;
    while pos < file_len {
        let len_now = (len as u64).min(file_len - pos) as usize;
        let buf = file
            .read_at(pos, len_now)
            .await
            .map_err(|e| Error::io(path, "read", e))?;
        let at_file_end = pos + buf.len() as u64 >= file_len;
        let mut consumed = 0usize;
        let mut need_more = false;
        let mut invalid = false;
        for item in BatchIter::new(&buf) {
            match item {
                Ok((at, h)) => {
                    // Beyond what one segment may hold (relative offsets and positions are
                    // 4 bytes in the index): as invalid as a broken CRC.
                    let end_pos = pos + (at + h.total_len()) as u64;
                    // Offsets increase; they may skip some (whole batches the log cleaner
                    // removed) only below the gap bound.
                    if !offset_follows(expected_base, h.base_offset, gaps_below)
                        || h.last_offset() - segment_base > i32::MAX as i64
                        || end_pos > u32::MAX as u64
                    {
                        invalid = true;
                        break;
                    }
                    let whole = buf.get(at..at + h.total_len()).unwrap_or_default();
                    on_batch(&h, pos + at as u64, whole);
                    expected_base = h.last_offset() + 1;
                    consumed = at + h.total_len();
                }
                Err(BatchError::Truncated { .. }) if !at_file_end => {
                    need_more = true;
                    break;
                }
                Err(_) => {
                    invalid = true;
                    break;
                }
            }
        }
        pos += consumed as u64;
        if invalid {
            return Ok(pos);
        }
        len = READ_CHUNK_BYTES_MAX;
        if need_more && consumed == 0 {
            // One batch larger than the read: size the next read to it, if it is plausible.
            match buf.get(..BATCH_HEADER_LEN).map(BatchHeader::parse) {
                Some(Ok(h))
                    if h.total_len() <= BATCH_READ_BYTES_MAX
                        && pos + h.total_len() as u64 <= file_len =>
                {
                    len = h.total_len();
                }
                _ => return Ok(pos),
            }
        }
        glommio::yield_if_needed().await;
    }
    Ok(pos)
}

/// Whether a batch at `base_offset` may follow one that ended just below `expected`: right
/// after it, or past a gap the bound allows (every skipped offset is below `gaps_below`).
pub(crate) fn offset_follows(expected: i64, base_offset: i64, gaps_below: i64) -> bool {
    base_offset == expected || (base_offset > expected && base_offset <= gaps_below)
}

/// Cheap startup check of a closed segment's index files: both present with whole entries,
/// and the time index's last entry sane. `Some(last time index entry)` if usable.
async fn closed_index_summary(dir: &Path, base: i64, max_rel: u64) -> Option<Option<(i64, u32)>> {
    use super::{index, time_index};
    let index_len = std::fs::metadata(segment_path(dir, base, "index"))
        .ok()?
        .len();
    let tidx_path = segment_path(dir, base, "timeindex");
    let tidx_len = std::fs::metadata(&tidx_path).ok()?.len();
    if index_len % index::ENTRY_LEN as u64 != 0 || tidx_len % time_index::ENTRY_LEN as u64 != 0 {
        return None;
    }
    if tidx_len == 0 {
        return Some(None);
    }
    let file = glommio::io::BufferedFile::open(&tidx_path).await.ok()?;
    let last = file
        .read_at(
            tidx_len - time_index::ENTRY_LEN as u64,
            time_index::ENTRY_LEN,
        )
        .await
        .ok()?;
    let _ = file.close().await;
    let decoded = TimeIndex::decode(&last, max_rel).ok()?;
    Some(decoded.last())
}

/// Rebuilds a closed segment's indexes by scanning it, and persists them. `None` if the
/// segment does not hold valid batches all the way to `next_base` (or to a gap before it
/// that the bound allows: the cleaner removed its last batches).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn rebuild_closed_indexes(
    dir: &Path,
    file: &dyn SegmentFile,
    path: &Path,
    base: i64,
    file_len: u64,
    next_base: i64,
    gaps_below: i64,
    config: &LogConfig,
) -> Result<Option<Segment>, Error> {
    let mut seg = Segment::new(dir, base);
    let valid_end = scan_valid(
        file,
        path,
        0,
        file_len,
        base,
        base,
        gaps_below,
        |h, pos, _| seg.index_batch(h, pos, config.index_interval_bytes),
    )
    .await?;
    if seg.next_offset > next_base || !offset_follows(seg.next_offset, next_base, gaps_below) {
        return Ok(None);
    }
    seg.next_offset = next_base;
    seg.size = valid_end;
    if seg.offset_of_max_timestamp >= base {
        let rel = seg.relative(seg.offset_of_max_timestamp);
        seg.time_index.maybe_push(seg.max_timestamp, rel);
    }
    write_indexes(dir, base, &seg.index, &seg.time_index).await?;
    Ok(Some(seg))
}

pub(crate) async fn load_index(
    dir: &Path,
    base: i64,
    file_len: u64,
    max_rel: u64,
) -> Option<(OffsetIndex, TimeIndex)> {
    let idx_path = segment_path(dir, base, "index");
    let tidx_path = segment_path(dir, base, "timeindex");
    let index_bytes = read_raw(&idx_path).await.ok()??;
    let time_bytes = read_raw(&tidx_path).await.ok()??;
    let index = match OffsetIndex::decode(&index_bytes, file_len, max_rel) {
        Ok(i) => i,
        Err(why) => {
            tracing::warn!(path = %idx_path.display(), %why, "index is not sane; rebuilding");
            return None;
        }
    };
    let time_index = match TimeIndex::decode(&time_bytes, max_rel) {
        Ok(t) => t,
        Err(why) => {
            tracing::warn!(path = %tidx_path.display(), %why, "time index is not sane; rebuilding");
            return None;
        }
    };
    Some((index, time_index))
}

pub(crate) async fn recover(
    dir: &Path,
    config: &LogConfig,
    fs: &dyn FileSystem,
) -> Result<Recovered, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create dir", e))?;
    if let Some(offset) =
        state_file::read_offset_file(dir, state_file::TRUNCATE_FULLY_INTENT_FILE).await?
    {
        tracing::warn!(offset, dir = %dir.display(), "finishing an interrupted full truncation");
        finish_truncate_fully(dir, offset).await?;
    }
    let mut bases = Vec::new();
    let mut swaps = Vec::new();
    // Segments with an aborted-transaction index: only those files are read at startup.
    let mut txn_indexed = std::collections::HashSet::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "read dir", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, "read dir", e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".tmp") || name.ends_with(".log.cleaned") {
            // An atomic write that never got renamed, or a cleaned segment never swapped in:
            // the old file (if any) is the truth.
            remove_if_exists(&entry.path()).await?;
        } else if let Some(swap) = name.strip_suffix(".swap") {
            swaps.push(swap.to_string());
        } else if let Some(base) = parse_segment_name(name) {
            bases.push(base);
        } else if let Some(base) = name
            .strip_suffix(".txnindex")
            .and_then(|stem| parse_segment_name(&format!("{stem}.log")))
        {
            txn_indexed.insert(base);
        }
    }
    for swap in swaps {
        finish_swap(dir, &swap, &mut bases).await?;
    }
    // Read after the swaps: a `.swap` exists only once the bound covering it was persisted.
    let gaps_below = read_gaps_below(dir).await;
    bases.sort_unstable();

    let persisted_start = match state_file::read_log_start(dir).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(error = %e, "log start state unreadable; using the first segment");
            None
        }
    };
    let snapshot = match read_producer_snapshot(dir).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "producer snapshot unreadable; rebuilding from the active segment");
            None
        }
    };
    let mut log_start = persisted_start.unwrap_or_else(|| bases.first().copied().unwrap_or(0));

    // Segments wholly below the log start were being deleted when we stopped.
    while bases.len() > 1 && bases.get(1).is_some_and(|&next| next <= log_start) {
        let base = bases.remove(0);
        remove_segment_files(dir, base).await?;
    }

    let mut segments = BTreeMap::new();
    let mut producers = ProducerStateTable::default();
    let mut epoch_scan_from = log_start;
    let mut scanned_epochs = Vec::new();
    // A closed segment's `.txnindex` that does not decode: every index is rebuilt from the log.
    let mut rebuild_aborted = false;
    let mut i = 0;
    while let Some(&base) = bases.get(i) {
        let next_base = bases.get(i + 1).copied();
        let path = segment_path(dir, base, "log");
        let mut seg = Segment::new(dir, base);
        if let Some(next_base) = next_base {
            let max_rel = (next_base - base - 1).max(0) as u64;
            let file_len = std::fs::metadata(&path)
                .map_err(|e| Error::io(&path, "stat", e))?
                .len();
            // Closed segments are not opened and their offset index is not read here (both
            // happen on first use), so startup does not grow with the amount of data; only
            // the time index's last entry (the segment's largest timestamp) is read now.
            if let Some(last) = closed_index_summary(dir, base, max_rel).await {
                seg.index_loaded = false;
                seg.next_offset = next_base;
                seg.size = file_len;
                if let Some((ts, rel)) = last {
                    seg.max_timestamp = ts;
                    seg.offset_of_max_timestamp = base + rel as i64;
                }
            } else {
                let file = fs
                    .open_segment(&path, false)
                    .await
                    .map_err(|e| Error::io(&path, "open", e))?;
                let rebuilt = rebuild_closed_indexes(
                    dir, &*file, &path, base, file_len, next_base, gaps_below, config,
                )
                .await?;
                match rebuilt {
                    Some(rebuilt) => seg = rebuilt,
                    None => {
                        tracing::error!(path = %path.display(), "closed segment invalid; truncating the log here");
                        for &later in bases.get(i + 1..).unwrap_or_default() {
                            remove_segment_files(dir, later).await?;
                        }
                        bases.truncate(i + 1);
                        continue; // Recover this segment again, now as the active one.
                    }
                }
                seg.file = Some(file);
            }
            seg.written = seg.size;
            seg.sealed = true;
            seg.complete = true;
            if txn_indexed.contains(&base) {
                match txn_index::read(dir, base, next_base).await {
                    Ok(aborted) => seg.aborted = aborted,
                    Err(why) => {
                        tracing::warn!(
                            segment = base,
                            why,
                            "aborted-transaction index is not sane; rebuilding from the log"
                        );
                        rebuild_aborted = true;
                    }
                }
            }
            segments.insert(base, seg);
            i += 1;
            continue;
        }
        // The active segment: the flusher appends to it through this file.
        let sync_policy = config.flush_policy == FlushPolicy::Sync;
        let file = open_active_segment(fs, &path, false, sync_policy)
            .await
            .map_err(|e| Error::io(&path, "open", e))?;
        let file_len = file.size().await.map_err(|e| Error::io(&path, "stat", e))?;

        let loaded = load_index(dir, base, file_len, u32::MAX as u64).await;
        let mut index_trusted = loaded.is_some();
        // Its aborted index as of the last checkpoint: trusted below the producer snapshot
        // replay resumes from (written before that snapshot); markers past it are replayed.
        let checkpointed_aborts = if txn_indexed.contains(&base) {
            match txn_index::read(dir, base, i64::MAX).await {
                Ok(aborted) => Some(aborted),
                Err(why) => {
                    tracing::warn!(
                        segment = base,
                        why,
                        "aborted-transaction index is not sane; replaying the segment"
                    );
                    None
                }
            }
        } else {
            Some(Vec::new())
        };
        let snapshot_usable = snapshot
            .as_ref()
            .filter(|s| s.next_offset >= base && checkpointed_aborts.is_some());
        let mut replayed_aborts = Vec::new();
        let mut attempt = 0;
        let valid_end = loop {
            attempt += 1;
            seg = Segment::new(dir, base);
            producers = match snapshot_usable {
                Some(s) if attempt == 1 => ProducerStateTable::from_snapshot(s),
                _ => ProducerStateTable::default(),
            };
            let replay_from = match snapshot_usable {
                Some(s) if attempt == 1 => s.next_offset,
                _ => base,
            };
            let mut start = (0u64, base);
            if let (Some((index, time_index)), true) = (&loaded, index_trusted && attempt == 1) {
                let target = replay_from.saturating_sub(base).clamp(0, u32::MAX as i64) as u32;
                if let Some((rel, pos)) = index.floor_entry(target) {
                    // Trust the entry only if a valid batch with that offset starts there.
                    let head = file
                        .read_at(pos as u64, BATCH_HEADER_LEN)
                        .await
                        .map_err(|e| Error::io(&path, "read", e))?;
                    match BatchHeader::parse(&head) {
                        Ok(h) if h.base_offset == base + rel as i64 => {
                            seg.index = index.clone();
                            seg.index.truncate_to_position(pos);
                            seg.time_index = time_index.clone();
                            seg.time_index.truncate_to_relative(rel);
                            if let Some((ts, r)) = seg.time_index.last() {
                                seg.max_timestamp = ts;
                                seg.offset_of_max_timestamp = base + r as i64;
                            }
                            seg.bytes_since_index = config.index_interval_bytes as u64;
                            start = (pos as u64, base + rel as i64);
                        }
                        _ => index_trusted = false,
                    }
                }
            }
            seg.size = start.0;
            epoch_scan_from = start.1;
            scanned_epochs.clear();
            replayed_aborts.clear();
            let valid_end = scan_valid(
                &*file,
                &path,
                start.0,
                file_len,
                base,
                start.1,
                gaps_below,
                |h, pos, batch| {
                    note_epoch(&mut scanned_epochs, h);
                    seg.index_batch(h, pos, config.index_interval_bytes);
                    if h.base_offset >= replay_from {
                        if let Some(done) = producers.replay(h, batch) {
                            if done.aborted {
                                replayed_aborts.push(AbortedTxn::from(done));
                            }
                        }
                    }
                },
            )
            .await?;
            // A snapshot claiming more than the log holds (the tail was cut): replay from 0.
            if replay_from > seg.next_offset && attempt == 1 {
                continue;
            }
            seg.aborted = checkpointed_aborts
                .iter()
                .flatten()
                .filter(|a| a.last_offset < replay_from)
                .copied()
                .chain(replayed_aborts.iter().copied())
                .collect();
            break valid_end;
        };
        let describes_cut_bytes = loaded.as_ref().is_some_and(|(index, time_index)| {
            index.last().is_some_and(|(_, pos)| pos as u64 >= valid_end)
                || time_index
                    .last()
                    .is_some_and(|(_, rel)| base + rel as i64 >= seg.next_offset)
        });
        if !index_trusted || describes_cut_bytes {
            // The index files describe bytes we are about to cut (or were wrong): never
            // trust them again. Otherwise they stay, and a later crash resumes from them.
            remove_if_exists(&segment_path(dir, base, "index")).await?;
            remove_if_exists(&segment_path(dir, base, "timeindex")).await?;
        }
        if valid_end < file_len {
            // A direct-I/O write pads the last block with zeros, so a log closed cleanly
            // ends with up to one block of zeros past its last batch: that is not damage
            // and must not alarm the operator on every restart. Anything else is.
            let align = file.alignment().max(1);
            let padding_only = file_len - valid_end <= align && {
                let rest = file
                    .read_at(valid_end, (file_len - valid_end) as usize)
                    .await
                    .map_err(|e| Error::io(&path, "read", e))?;
                rest.len() as u64 == file_len - valid_end && rest.iter().all(|b| *b == 0)
            };
            if padding_only {
                tracing::debug!(path = %path.display(), valid_end, file_len, "cutting the zero padding of the last block");
            } else {
                tracing::warn!(path = %path.display(), valid_end, file_len, "truncating torn or invalid tail");
            }
        }
        // Cut the file to the logical end even when it looks clean: the tail of the last
        // block may hold zero padding from a previous direct-I/O write.
        file.truncate(valid_end)
            .await
            .map_err(|e| Error::io(&path, "truncate", e))?;
        // Reserve the next extent past the valid end again (the truncate released it).
        let reserve = preallocation_target(
            valid_end,
            valid_end + 1,
            config.preallocate_bytes,
            config.segment_bytes,
        );
        if let Some(target) = reserve {
            file.pre_allocate(target)
                .await
                .map_err(|e| Error::io(&path, "fallocate", e))?;
            seg.preallocated = target;
        }
        file.sync_data()
            .await
            .map_err(|e| Error::io(&path, "fsync", e))?;
        seg.size = valid_end;
        seg.written = valid_end;
        let align = file.alignment().max(1);
        let staging_start = valid_end - valid_end % align;
        seg.staging.start = staging_start;
        let tail_len = (valid_end - staging_start) as usize;
        if tail_len > 0 {
            let tail = file
                .read_at(staging_start, tail_len)
                .await
                .map_err(|e| Error::io(&path, "read", e))?;
            if tail.len() != tail_len {
                return Err(Error::corruption(
                    &path,
                    staging_start,
                    "short read of the last block",
                ));
            }
            seg.staging = super::segment::Staging::with_tail(staging_start, tail);
        }
        seg.file = Some(file);
        segments.insert(base, seg);
        i += 1;
    }

    let next_offset = segments
        .values()
        .next_back()
        .map(|s| s.next_offset)
        .unwrap_or(log_start);
    if segments.is_empty() {
        // A new (or fully truncated) log: its first segment file is created here, as Kafka
        // creates a partition's files when the partition is created, so the first produce
        // does not pay for a file creation and the directory fsync that makes it durable
        // (5,000 partitions: 5,000 creates and directory syncs in the first seconds of load).
        let mut seg = Segment::new(dir, log_start);
        let sync_policy = config.flush_policy == FlushPolicy::Sync;
        let file = open_active_segment(fs, &seg.path, true, sync_policy)
            .await
            .map_err(|e| Error::io(&seg.path, "create", e))?;
        state_file::sync_dir(dir).await?;
        seg.file = Some(file);
        segments.insert(log_start, seg);
    }
    let first_base = segments.keys().next().copied().unwrap_or(log_start);
    log_start = log_start.clamp(first_base, next_offset);
    producers.evict_below(log_start);
    if rebuild_aborted {
        rebuild_aborted_index(dir, &mut segments, gaps_below, fs).await?;
    }
    Ok(Recovered {
        segments,
        log_start,
        next_offset,
        producers,
        epoch_scan_from: epoch_scan_from.min(next_offset),
        scanned_epochs,
        gaps_below,
    })
}
