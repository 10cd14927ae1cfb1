//! Transaction markers: the control batches (attributes bit 5) a partition leader writes for
//! WriteTxnMarkers to end a producer's transaction (KIP-98). One record per batch:
//!
//! ```text
//! key:   version i16 (0), type i16 (ABORT = 0, COMMIT = 1)
//! value: version i16 (0), coordinator_epoch i32
//! ```
//!
//! Other control types (Kafka's KRaft records: leader change, snapshot header/footer, ...)
//! are not markers; `parse_end_txn_marker` answers `None` for them. Pure functions: nothing
//! here trusts the bytes (a control batch may come from a leader's log or, refused, from a
//! client).

use bytes::BytesMut;
use thiserror::Error;

use super::producer::{ProducerEpoch, ProducerId};
use super::record_batch::{
    build_batch, decompressed_records, parse_records, BatchHeader, RecordsError, ATTR_CONTROL,
    ATTR_TRANSACTIONAL, BATCH_HEADER_LEN, MAGIC_V2,
};

/// Control record type of an ABORT marker.
pub const CONTROL_TYPE_ABORT: i16 = 0;
/// Control record type of a COMMIT marker.
pub const CONTROL_TYPE_COMMIT: i16 = 1;
/// The marker value version written (Kafka's `EndTransactionMarker` version 0).
const MARKER_VALUE_VERSION: i16 = 0;
/// The control key version written.
const CONTROL_KEY_VERSION: i16 = 0;
/// A control batch holds one record; reading one costs at most this much when inflating.
const CONTROL_BATCH_RECORDS_MAX_BYTES: usize = 4 << 10;

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOutcome {
    Commit,
    Abort,
}

/// An end-of-transaction marker as stored in a control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub outcome: TxnOutcome,
    /// The transaction coordinator's epoch (its `__transaction_state` leader epoch): a
    /// partition refuses markers from an older coordinator.
    pub coordinator_epoch: i32,
}

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum MarkerError {
    #[error("not a control batch")]
    NotControl,
    #[error("control batch records: {0}")]
    Records(#[from] RecordsError),
    #[error("control batch holds {0} records, not 1")]
    RecordCount(i32),
    #[error("control record {0}")]
    Malformed(&'static str),
}

fn read_i16(b: &[u8], at: usize) -> Option<i16> {
    let two: [u8; 2] = b.get(at..at + 2)?.try_into().ok()?;
    Some(i16::from_be_bytes(two))
}

fn read_i32(b: &[u8], at: usize) -> Option<i32> {
    let four: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(i32::from_be_bytes(four))
}

/// The marker a whole, validated control batch carries; `Ok(None)` for a control type that
/// is not COMMIT or ABORT.
pub fn parse_end_txn_marker(batch: &[u8]) -> Result<Option<EndTxnMarker>, MarkerError> {
    let header = BatchHeader::parse(batch).map_err(RecordsError::from)?;
    if !header.is_control() {
        return Err(MarkerError::NotControl);
    }
    if header.records_count != 1 {
        return Err(MarkerError::RecordCount(header.records_count));
    }
    let records = decompressed_records(batch, CONTROL_BATCH_RECORDS_MAX_BYTES)?;
    let parsed = parse_records(&records, 1)?;
    let record = parsed.first().ok_or(MarkerError::RecordCount(0))?;
    let key = record.key.ok_or(MarkerError::Malformed("has no key"))?;
    let kind = read_i16(key, 2).ok_or(MarkerError::Malformed("key is short"))?;
    let outcome = match kind {
        CONTROL_TYPE_ABORT => TxnOutcome::Abort,
        CONTROL_TYPE_COMMIT => TxnOutcome::Commit,
        _ => return Ok(None),
    };
    let value = record.value.ok_or(MarkerError::Malformed("has no value"))?;
    let version = read_i16(value, 0).ok_or(MarkerError::Malformed("value is short"))?;
    if version < 0 {
        return Err(MarkerError::Malformed("value version is negative"));
    }
    // Later value versions only add fields after the epoch (Kafka reads them the same way).
    let coordinator_epoch = read_i32(value, 2).ok_or(MarkerError::Malformed("value is short"))?;
    Ok(Some(EndTxnMarker {
        outcome,
        coordinator_epoch,
    }))
}

/// The outcome a control record's key names (`version i16, type i16`), for a reader that
/// decoded the batch's records already (the group coordinator's replay); `None` for a short
/// key or a control type that is not COMMIT or ABORT.
pub fn control_key_outcome(key: &[u8]) -> Option<TxnOutcome> {
    match read_i16(key, 2)? {
        CONTROL_TYPE_ABORT => Some(TxnOutcome::Abort),
        CONTROL_TYPE_COMMIT => Some(TxnOutcome::Commit),
        _ => None,
    }
}

/// Appends a zigzag varint.
fn put_varint(out: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// A whole marker batch for the producer, at offset 0 (the log assigns the offset), with
/// the CRC computed: attributes control + transactional, no sequence, one record stamped
/// `timestamp_ms`.
pub fn build_end_txn_marker(
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
    marker: EndTxnMarker,
    timestamp_ms: i64,
) -> BytesMut {
    let kind = match marker.outcome {
        TxnOutcome::Abort => CONTROL_TYPE_ABORT,
        TxnOutcome::Commit => CONTROL_TYPE_COMMIT,
    };
    let mut key = Vec::with_capacity(4);
    key.extend_from_slice(&CONTROL_KEY_VERSION.to_be_bytes());
    key.extend_from_slice(&kind.to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend_from_slice(&MARKER_VALUE_VERSION.to_be_bytes());
    value.extend_from_slice(&marker.coordinator_epoch.to_be_bytes());
    let mut body = Vec::with_capacity(24);
    body.push(0); // record attributes
    put_varint(&mut body, 0); // timestamp delta
    put_varint(&mut body, 0); // offset delta
    put_varint(&mut body, key.len() as i64);
    body.extend_from_slice(&key);
    put_varint(&mut body, value.len() as i64);
    body.extend_from_slice(&value);
    put_varint(&mut body, 0); // headers
    let mut records = Vec::with_capacity(body.len() + 2);
    put_varint(&mut records, body.len() as i64);
    records.extend_from_slice(&body);
    let header = BatchHeader {
        base_offset: 0,
        batch_length: 0,
        partition_leader_epoch: -1,
        magic: MAGIC_V2,
        crc: 0,
        attributes: ATTR_CONTROL | ATTR_TRANSACTIONAL,
        last_offset_delta: 0,
        base_timestamp: timestamp_ms,
        max_timestamp: timestamp_ms,
        producer_id: producer_id.0,
        producer_epoch: producer_epoch.0,
        base_sequence: -1,
        records_count: 1,
    };
    // Uncompressed: `build_batch` cannot fail for CODEC_NONE with a small records section.
    build_batch(&header, &records).unwrap_or_else(|_| {
        let mut b = BytesMut::with_capacity(BATCH_HEADER_LEN);
        b.resize(BATCH_HEADER_LEN, 0);
        b
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::protocol::record_batch::validate;

    /// A control key's type maps to COMMIT or ABORT; other types and short keys to `None`.
    #[test]
    fn control_key_outcomes() {
        assert_eq!(control_key_outcome(&[0, 0, 0, 1]), Some(TxnOutcome::Commit));
        assert_eq!(control_key_outcome(&[0, 0, 0, 0]), Some(TxnOutcome::Abort));
        assert_eq!(control_key_outcome(&[0, 0, 0, 3]), None);
        assert_eq!(control_key_outcome(&[0, 0, 1]), None);
    }

    /// A marker built here validates as a batch and parses back to the same marker, for
    /// both outcomes; its header says control + transactional, one record, no sequence.
    #[test]
    fn build_and_parse_round_trip() {
        for outcome in [TxnOutcome::Commit, TxnOutcome::Abort] {
            let m = EndTxnMarker {
                outcome,
                coordinator_epoch: 7,
            };
            let b = build_end_txn_marker(ProducerId(42), ProducerEpoch(3), m, 1_000);
            let h = validate(&b).unwrap();
            assert!(h.is_control() && h.is_transactional());
            assert_eq!((h.producer_id, h.producer_epoch), (42, 3));
            assert_eq!((h.records_count, h.base_sequence), (1, -1));
            assert_eq!(parse_end_txn_marker(&b).unwrap(), Some(m));
        }
    }

    /// Garbage after a valid header never panics: every truncation and bit flip of a
    /// marker's records section parses to an error or a marker, never a crash.
    #[test]
    fn damaged_markers_do_not_panic() {
        let m = EndTxnMarker {
            outcome: TxnOutcome::Abort,
            coordinator_epoch: 1,
        };
        let b = build_end_txn_marker(ProducerId(1), ProducerEpoch(0), m, 0);
        for cut in 0..b.len() {
            let _ = parse_end_txn_marker(&b[..cut]);
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0xff;
            let _ = parse_end_txn_marker(&c);
        }
        // A data batch is not a marker.
        let mut data = b.clone();
        data[22] &= !0x20;
        assert_eq!(parse_end_txn_marker(&data), Err(MarkerError::NotControl));
    }
}
