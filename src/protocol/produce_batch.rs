//! Record batches as a producer builds them: records with key, value, headers and a
//! CreateTime timestamp, encoded as one v2 batch in a codec through kafka-protocol's
//! `RecordBatchEncoder`. Shared by the client (`strata produce`, `strata bench`), the
//! broker's own ingestion (syslog, HTTP) and its group and transaction coordinators, which
//! all hand a log batches as a producer would: base offset 0 (the leader assigns offsets), no
//! producer id (a coordinator's TxnOffsetCommit batch names the committing producer).
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};
use thiserror::Error;

use super::producer::{ProducerEpoch, ProducerId};

/// A record to produce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProduceRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Milliseconds since the epoch (CreateTime).
    pub timestamp_ms: i64,
}

impl ProduceRecord {
    /// Bytes the record adds to a batch, roughly: for batch-size bounds, not for encoding.
    pub fn size_estimate(&self) -> usize {
        const RECORD_OVERHEAD_BYTES: usize = 24;
        RECORD_OVERHEAD_BYTES
            + self.key.as_ref().map_or(0, Bytes::len)
            + self.value.as_ref().map_or(0, Bytes::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| 8 + k.len() + v.as_ref().map_or(0, Bytes::len))
                .sum::<usize>()
    }
}

/// Why a batch could not be built.
#[derive(Debug, Error)]
pub enum EncodeError {
    #[error("cannot encode an empty batch")]
    Empty,
    #[error("encode: {0}")]
    Encoder(String),
}

/// Encodes `records` as one v2 record batch in `compression`.
pub fn encode_batch(
    records: impl IntoIterator<Item = ProduceRecord>,
    compression: Compression,
) -> Result<Bytes, EncodeError> {
    encode_batch_as(records, compression, None)
}

/// As [`encode_batch`]; with `txn`, a transactional batch of that producer id and epoch and
/// still no sequence. Kafka's coordinators write a TxnOffsetCommit's records so (the log
/// checks only the epoch of a coordinator's batch); their other records are plain batches.
pub fn encode_batch_as(
    records: impl IntoIterator<Item = ProduceRecord>,
    compression: Compression,
    txn: Option<(ProducerId, ProducerEpoch)>,
) -> Result<Bytes, EncodeError> {
    let (producer_id, producer_epoch) = txn
        .map_or((NO_PRODUCER_ID, NO_PRODUCER_EPOCH), |(id, epoch)| {
            (id.0, epoch.0)
        });
    let mut bytes_estimate = 0usize;
    let records: Vec<Record> = records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            bytes_estimate += r.size_estimate();
            Record {
                transactional: txn.is_some(),
                control: false,
                delete_horizon: false,
                partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
                producer_id,
                producer_epoch,
                timestamp_type: TimestampType::Creation,
                // Offsets inside a produced batch are deltas from 0; the broker rewrites the base.
                offset: i as i64,
                // The encoder starts a new batch whenever `offset - sequence` changes, so the
                // sequence must advance with the offset; base sequence stays NO_SEQUENCE (-1).
                sequence: NO_SEQUENCE.wrapping_add(i as i32),
                timestamp: r.timestamp_ms,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (StrBytes::from_string(k), v))
                    .collect::<IndexMap<_, _>>(),
            }
        })
        .collect();
    if records.is_empty() {
        return Err(EncodeError::Empty);
    }
    let mut buf = BytesMut::with_capacity(64 + bytes_estimate);
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options)
        .map_err(|e| EncodeError::Encoder(e.to_string()))?;
    Ok(buf.freeze())
}
