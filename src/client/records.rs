//! Building record batches for Produce and reading them back from Fetch, through
//! kafka-protocol's `RecordBatchEncoder`/`RecordBatchDecoder` (all codecs).
//!
//! A Fetch response may end in a partial batch (the broker cuts at `partition_max_bytes`); it is
//! dropped before decoding, and the consumer fetches it again from its offset next time.
//! Control records (transaction markers) are never handed to the user.

use bytes::{Buf, Bytes};
use kafka_protocol::records::{Compression, RecordBatchDecoder};

use crate::protocol::produce_batch;
pub use crate::protocol::produce_batch::ProduceRecord;

use super::error::{ClientError, Result};

/// Bytes before a batch's records that say how long it is: baseOffset (8) + batchLength (4).
const BATCH_LENGTH_PREFIX_BYTES: usize = 12;

/// A record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Encodes `records` as one v2 record batch (base offset 0; the leader assigns real offsets).
pub fn encode_batch(records: &[ProduceRecord], compression: Compression) -> Result<Bytes> {
    produce_batch::encode_batch(records.iter().cloned(), compression).map_err(|e| {
        ClientError::Records {
            message: e.to_string(),
        }
    })
}

/// The prefix of `data` made of whole batches; a trailing partial batch is cut off.
pub fn complete_batches(data: &Bytes) -> Bytes {
    let mut cursor = data.clone();
    let mut whole = 0usize;
    while cursor.remaining() >= BATCH_LENGTH_PREFIX_BYTES {
        let mut header = cursor.clone();
        header.advance(8);
        let batch_length = header.get_i32();
        let Ok(batch_length) = usize::try_from(batch_length) else {
            break;
        };
        let total = BATCH_LENGTH_PREFIX_BYTES + batch_length;
        if cursor.remaining() < total {
            break;
        }
        cursor.advance(total);
        whole += total;
    }
    data.slice(..whole)
}

/// Decodes the record batches of one partition, returning user records at or after
/// `from_offset` in offset order.
///
/// Returns also the offset after the last batch seen (including control-only batches), so a
/// consumer can move past batches that held nothing for the user.
pub fn decode_batches(
    data: &Bytes,
    from_offset: i64,
) -> Result<(Vec<ConsumedRecord>, Option<i64>)> {
    let mut whole = complete_batches(data);
    let mut out = Vec::new();
    let mut next_offset = None;
    while whole.has_remaining() {
        let set = RecordBatchDecoder::decode(&mut whole).map_err(|e| ClientError::Records {
            message: format!("decode: {e}"),
        })?;
        for record in set.records {
            next_offset =
                Some(next_offset.map_or(record.offset + 1, |n: i64| n.max(record.offset + 1)));
            if record.control || record.offset < from_offset {
                continue;
            }
            out.push(ConsumedRecord {
                offset: record.offset,
                timestamp_ms: record.timestamp,
                key: record.key,
                value: record.value,
                headers: record
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v))
                    .collect(),
            });
        }
    }
    Ok((out, next_offset))
}

/// Parses a compression name as the CLI and Kafka's `compression.type` spell it.
pub fn parse_compression(name: &str) -> Option<Compression> {
    match name.to_ascii_lowercase().as_str() {
        "none" => Some(Compression::None),
        "gzip" => Some(Compression::Gzip),
        "snappy" => Some(Compression::Snappy),
        "lz4" => Some(Compression::Lz4),
        "zstd" => Some(Compression::Zstd),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::NO_SEQUENCE;

    fn sample() -> Vec<ProduceRecord> {
        (0..50)
            .map(|i| ProduceRecord {
                key: if i % 3 == 0 {
                    None
                } else {
                    Some(Bytes::from(format!("key-{i}")))
                },
                value: if i == 7 {
                    None
                } else {
                    Some(Bytes::from(format!("value {i} ").repeat(i + 1)))
                },
                headers: vec![
                    ("h1".to_owned(), Some(Bytes::from_static(b"v1"))),
                    ("null".to_owned(), None),
                ],
                timestamp_ms: 1_700_000_000_000 + i as i64,
            })
            .collect()
    }

    #[test]
    fn batch_round_trips_across_all_codecs() {
        // Proves every codec encodes and decodes keys, values, nulls, headers and timestamps.
        let input = sample();
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let batch = encode_batch(&input, compression).expect("encode");
            let infos = RecordBatchDecoder::decode_batch_info(&mut batch.clone()).expect("info");
            assert_eq!(infos.len(), 1, "one batch, {compression:?}");
            assert_eq!(infos.first().map(|i| i.base_sequence), Some(NO_SEQUENCE));
            let (records, next) = decode_batches(&batch, 0).expect("decode");
            assert_eq!(next, Some(50), "{compression:?}");
            assert_eq!(records.len(), input.len(), "{compression:?}");
            for (i, (got, want)) in records.iter().zip(&input).enumerate() {
                assert_eq!(got.offset, i as i64);
                assert_eq!(got.key, want.key);
                assert_eq!(got.value, want.value);
                assert_eq!(got.headers, want.headers);
                assert_eq!(got.timestamp_ms, want.timestamp_ms);
            }
        }
    }

    #[test]
    fn partial_trailing_batch_is_dropped_and_offsets_filtered() {
        // Proves a fetch cut mid-batch decodes the whole batches only, and that records before
        // the requested offset are skipped.
        let input = sample();
        let first = encode_batch(&input[..10], Compression::None).expect("encode");
        let second = encode_batch(&input[10..], Compression::Lz4).expect("encode");
        let mut joined = BytesMut::new();
        joined.extend_from_slice(&first);
        joined.extend_from_slice(&second[..second.len() / 2]);
        let joined = joined.freeze();
        assert_eq!(complete_batches(&joined).len(), first.len());
        let (records, next) = decode_batches(&joined, 4).expect("decode");
        assert_eq!(records.first().map(|r| r.offset), Some(4));
        assert_eq!(records.len(), 6);
        assert_eq!(next, Some(10));
    }

    #[test]
    fn empty_batch_is_an_error_not_a_panic() {
        // Proves the encoder's internal `expect` on empty input is never reached.
        assert!(encode_batch(&[], Compression::None).is_err());
    }

    #[test]
    fn garbage_does_not_panic() {
        // Proves random bytes from the network give an error or nothing, never a panic.
        let junk = Bytes::from_static(&[
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 1, 2, 3, 4, 2, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,
            9, 9, 9,
        ]);
        let _ = decode_batches(&junk, 0);
    }
}
