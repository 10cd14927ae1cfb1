//! The cleaner's two passes over batches, as pure functions: mapping the dirty section's
//! keys ([`map_batch`]) and filtering a segment's batches against that map ([`filter_batch`]),
//! with Kafka's rules (`LogCleaner.shouldRetainRecord`, `MemoryRecords.filterTo`).
//!
//! A record survives when it is past the map's latest offset (that part was not mapped, so
//! nothing is known to supersede it), or when it has a key, no later offset for its key was
//! mapped, and it is not a tombstone past its batch's delete horizon. Keyless records on a
//! compacted log are dropped. Offsets never change: a rewritten batch keeps its base offset
//! and its last offset delta (so the producer's last sequence stays readable), and lists only
//! the records that survive, in order, compressed again in the batch's own codec.
//!
//! Tombstones (KIP-534): the first time the cleaner keeps a tombstone in a batch that has no
//! delete horizon, it stamps one, `now + delete.retention.ms`, into the batch's base
//! timestamp (attribute bit 0x40), rewriting the records' timestamp deltas so every record
//! keeps its timestamp. A later pass drops the batch's tombstones once `now` reaches it.
//!
//! A batch left without records is kept, empty, when it is its producer's last batch (the
//! producer's sequence and epoch live in it, and idempotence must survive cleaning);
//! otherwise it goes.
//!
//! Transactions ([`TxnTracker`], Kafka's `CleanedTransactionMetadata`): the records of an
//! aborted transaction go whatever their keys, and are never mapped; a committed
//! transaction's records are compacted like any others, their batches keeping their
//! producer fields and transactional bit. A COMMIT/ABORT marker stays while any batch of its
//! transaction is left; after that it is treated like a tombstone: stamped with a delete
//! horizon on one pass, dropped on a pass after it (unless it is the last batch of a
//! producer that has written no data, whose epoch it carries).

use bytes::BytesMut;

use super::offset_map::{MapFull, OffsetMap};
use super::txn::TxnTracker;
use crate::protocol::record_batch::{
    build_batch, decompressed_records, encode_record, parse_records, validate, BatchHeader,
    RecordsError, ATTR_COMPRESSION_MASK, ATTR_DELETE_HORIZON,
};

/// What the cleaner knows when it filters: the map, the time, and the producers whose
/// last batch must survive.
pub struct FilterContext<'a> {
    pub map: &'a OffsetMap,
    /// Wall time of this pass, for delete horizons.
    pub now_ms: i64,
    /// delete.retention.ms of the log.
    pub delete_retention_ms: i64,
    /// For each producer with state, the last offset of its last data batch (Kafka's
    /// `lastRecordsOfActiveProducers`).
    pub producer_last_offset: &'a dyn Fn(i64) -> Option<i64>,
    /// For each producer with state but no data batch left in it, the offset of its last
    /// marker (Kafka keeps that control batch: it carries the producer's epoch).
    pub producer_last_marker: &'a dyn Fn(i64) -> Option<i64>,
    /// Bound on one batch's decompressed records.
    pub decompressed_max: usize,
}

/// What becomes of one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filtered {
    /// Written as it was.
    Keep,
    /// Written as these bytes instead (fewer records, or a delete horizon stamped).
    Rewrite(BytesMut),
    /// Not written.
    Drop,
}

/// Counts for one pass, for logs and metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FilterStats {
    pub batches_read: u64,
    pub records_read: u64,
    pub records_kept: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// Outcome of mapping one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapped {
    /// Every key of the batch is in the map and `latest_offset` covers the batch.
    Whole,
    /// The map filled up inside this batch: the keys before the full point are in, the
    /// batch is not counted as mapped, and mapping stops here.
    Full,
}

/// Adds the keys of one batch at or after `start_offset` to the map (Kafka's
/// `buildOffsetMapForSegment`). Control batches carry no data keys, and an aborted
/// transaction's records supersede nothing: both are skipped. `txns` walks the same
/// batches (every one, in order, including those below `start_offset`).
pub fn map_batch(
    map: &mut OffsetMap,
    batch: &[u8],
    start_offset: i64,
    decompressed_max: usize,
    txns: &mut TxnTracker,
) -> Result<Mapped, RecordsError> {
    let header = validate(batch)?;
    let aborted = if header.is_control() {
        txns.on_control_batch(&header, batch);
        false
    } else {
        txns.on_data_batch(&header)
    };
    if header.last_offset() < start_offset {
        return Ok(Mapped::Whole);
    }
    if !header.is_control() && !aborted && header.records_count > 0 {
        let records = decompressed_records(batch, decompressed_max)?;
        for record in parse_records(&records, header.records_count)? {
            let offset = header.base_offset.saturating_add(record.offset_delta);
            if let (Some(key), true) = (record.key, offset >= start_offset) {
                if map.put(key, offset) == Err(MapFull) {
                    return Ok(Mapped::Full);
                }
            }
        }
    }
    map.set_latest_offset(header.last_offset());
    Ok(Mapped::Whole)
}

/// Filters one whole, validated batch (see the module docs for the rules). `txns` walks
/// every batch of the pass, in order.
pub fn filter_batch(
    batch: &[u8],
    ctx: &FilterContext<'_>,
    txns: &mut TxnTracker,
    stats: &mut FilterStats,
) -> Result<Filtered, RecordsError> {
    let header = validate(batch)?;
    stats.batches_read += 1;
    stats.bytes_read += batch.len() as u64;
    let keep = |stats: &mut FilterStats| {
        stats.bytes_written += batch.len() as u64;
        Ok(Filtered::Keep)
    };
    let horizon = header.delete_horizon_ms();
    let deletes_expired = horizon.is_some_and(|h| ctx.now_ms >= h);
    // Kafka's `checkBatchRetention`: a discardable marker loses its record once past its
    // horizon; an aborted batch loses its records at once.
    let (discardable_marker, drop_records) = if header.is_control() {
        let discardable = txns.on_control_batch(&header, batch);
        (discardable, discardable && deletes_expired)
    } else {
        (false, txns.on_data_batch(&header))
    };
    let last_of_producer = header.producer_id >= 0
        && if header.is_control() {
            (ctx.producer_last_marker)(header.producer_id) == Some(header.last_offset())
        } else {
            (ctx.producer_last_offset)(header.producer_id) == Some(header.last_offset())
        };
    let records = decompressed_records(batch, ctx.decompressed_max)?;
    let parsed = parse_records(&records, header.records_count)?;
    stats.records_read += parsed.len() as u64;
    let latest = ctx.map.latest_offset();
    let mut kept = Vec::with_capacity(parsed.len());
    for record in &parsed {
        let offset = header.base_offset.saturating_add(record.offset_delta);
        let survives = !drop_records
            && (header.is_control()
                || offset > latest
                || record.key.is_some_and(|key| {
                    let newest = ctx.map.get(key).is_none_or(|mapped| offset >= mapped);
                    newest && (record.value.is_some() || !deletes_expired)
                }));
        if survives {
            kept.push(record);
        }
    }
    stats.records_kept += kept.len() as u64;
    let has_tombstone = !header.is_control() && kept.iter().any(|r| r.value.is_none());
    let stamp_horizon = (has_tombstone || discardable_marker) && horizon.is_none();
    // Kafka's DELETE_EMPTY: a batch left with no record goes unless it is its producer's
    // last (an empty one written by an earlier pass too).
    let goes = kept.is_empty() && !last_of_producer;
    if kept.len() == parsed.len() && !stamp_horizon && !goes {
        return keep(stats);
    }
    if kept.is_empty() {
        if !last_of_producer {
            return Ok(Filtered::Drop);
        }
        if header.records_count == 0 {
            return keep(stats);
        }
        // Kafka's `writeEmptyHeader`: no records, no codec, both timestamps the batch's max.
        let empty = BatchHeader {
            attributes: header.attributes & !ATTR_COMPRESSION_MASK & !ATTR_DELETE_HORIZON,
            base_timestamp: header.max_timestamp,
            records_count: 0,
            ..header
        };
        let out = build_batch(&empty, &[])?;
        stats.bytes_written += out.len() as u64;
        return Ok(Filtered::Rewrite(out));
    }
    let timestamp_of = |r: &&crate::protocol::record_batch::RecordView<'_>| {
        header.base_timestamp.saturating_add(r.timestamp_delta)
    };
    let new_horizon = if stamp_horizon {
        Some(ctx.now_ms.saturating_add(ctx.delete_retention_ms))
    } else {
        horizon
    };
    let base_timestamp = match (new_horizon, kept.first()) {
        (Some(h), _) => h,
        (None, Some(first)) => timestamp_of(first),
        (None, None) => header.base_timestamp,
    };
    let max_timestamp = if header.is_log_append_time() {
        header.max_timestamp
    } else {
        kept.iter()
            .map(timestamp_of)
            .max()
            .unwrap_or(header.max_timestamp)
    };
    let mut section = Vec::with_capacity(records.len());
    for record in &kept {
        let delta = timestamp_of(record).saturating_sub(base_timestamp);
        encode_record(&mut section, record, delta);
    }
    let attributes = match new_horizon {
        Some(_) => header.attributes | ATTR_DELETE_HORIZON,
        None => header.attributes & !ATTR_DELETE_HORIZON,
    };
    let rebuilt = BatchHeader {
        attributes,
        base_timestamp,
        max_timestamp,
        records_count: kept.len() as i32,
        ..header
    };
    let out = build_batch(&rebuilt, &section)?;
    stats.bytes_written += out.len() as u64;
    Ok(Filtered::Rewrite(out))
}
