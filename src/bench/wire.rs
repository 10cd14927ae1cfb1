//! The bench's hot-path wire format: Produce (v3..=8) and Fetch (v4..=11) requests encoded by
//! hand into reused buffers, and their responses walked in place, without building message
//! structs per request. These are the last non-flexible versions, whose layout is fixed; the
//! client's kafka-protocol codecs stay in charge of everything else (ApiVersions, Metadata,
//! admin), and the tests below check this encoding against kafka-protocol's.
//!
//! Nothing read from the network is trusted: [`Cursor`] bounds-checks every read and parsing
//! fails with [`WireError`] instead of panicking.

use thiserror::Error;

use crate::protocol::record_batch::{BATCH_HEADER_LEN, LOG_OVERHEAD};

/// Highest Produce version encoded here (v9 becomes flexible).
pub const PRODUCE_VERSION_MAX: i16 = 8;
pub const PRODUCE_VERSION_MIN: i16 = 3;
/// Highest Fetch version encoded here (v12 becomes flexible).
pub const FETCH_VERSION_MAX: i16 = 11;
pub const FETCH_VERSION_MIN: i16 = 4;
const API_PRODUCE: i16 = 0;
const API_FETCH: i16 = 1;
/// Position of the correlation id in a request frame: size (4), api key (2), api version (2).
pub const CORRELATION_ID_POS: usize = 8;

/// Why a response could not be read.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum WireError {
    #[error("response truncated at byte {at}: need {need} more")]
    Truncated { at: usize, need: usize },
    #[error("invalid length {0} in response")]
    BadLength(i64),
}

/// A bounds-checked reader over a response body.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(WireError::Truncated {
                at: self.pos,
                need: n,
            })?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub fn i16(&mut self) -> Result<i16, WireError> {
        Ok(i16::from_be_bytes(self.array()?))
    }
    pub fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_be_bytes(self.array()?))
    }
    pub fn i64(&mut self) -> Result<i64, WireError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    /// A length-prefixed (i16) string, skipped; -1 is null.
    pub fn skip_string(&mut self) -> Result<(), WireError> {
        let len = self.i16()?;
        if len > 0 {
            self.take(len as usize)?;
        }
        Ok(())
    }
    /// An i32 array count; -1 (null) reads as 0.
    pub fn count(&mut self) -> Result<usize, WireError> {
        let n = self.i32()?;
        if n < -1 {
            return Err(WireError::BadLength(n as i64));
        }
        Ok(n.max(0) as usize)
    }
    /// i32-length-prefixed bytes; null reads as empty.
    pub fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(&[]);
        }
        self.take(n as usize)
    }
    /// A zig-zag varint (record fields).
    pub fn varint(&mut self) -> Result<i64, WireError> {
        let mut value: u64 = 0;
        for shift in (0..70).step_by(7) {
            let b = self.array::<1>()?[0];
            value |= u64::from(b & 0x7f) << shift.min(63);
            if b & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err(WireError::BadLength(-1))
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    // Topic and client ids are bounded far below i16::MAX by Kafka's own limits.
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The bytes of a Produce request up to the records of its single partition, built once per
/// connection; [`ProduceFrame::build`] appends partition and records for each send.
#[derive(Debug, Clone)]
pub struct ProducePrefix {
    prefix: Vec<u8>,
}

impl ProducePrefix {
    pub fn new(version: i16, client_id: &str, topic: &str, acks: i16, timeout_ms: i32) -> Self {
        let mut p = Vec::with_capacity(64 + topic.len());
        p.extend_from_slice(&[0; 4]); // frame size, patched per request
        p.extend_from_slice(&API_PRODUCE.to_be_bytes());
        p.extend_from_slice(&version.to_be_bytes());
        p.extend_from_slice(&[0; 4]); // correlation id, patched per request
        put_string(&mut p, client_id);
        p.extend_from_slice(&(-1i16).to_be_bytes()); // transactional_id: null
        p.extend_from_slice(&acks.to_be_bytes());
        p.extend_from_slice(&timeout_ms.to_be_bytes());
        p.extend_from_slice(&1i32.to_be_bytes()); // one topic
        put_string(&mut p, topic);
        p.extend_from_slice(&1i32.to_be_bytes()); // one partition
        ProducePrefix { prefix: p }
    }

    /// Writes into `out` (cleared first) the whole request frame for one batch.
    pub fn build(&self, out: &mut Vec<u8>, correlation_id: i32, partition: i32, batch: &[u8]) {
        out.clear();
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(&partition.to_be_bytes());
        out.extend_from_slice(&(batch.len() as i32).to_be_bytes());
        out.extend_from_slice(batch);
        let len = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&len.to_be_bytes());
        out[CORRELATION_ID_POS..CORRELATION_ID_POS + 4]
            .copy_from_slice(&correlation_id.to_be_bytes());
    }
}

/// Summary of a Produce response: the first partition error, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceOutcome {
    pub error_code: i16,
    pub base_offset: i64,
}

/// Reads a Produce response body (after the 4-byte correlation id).
pub fn parse_produce_response(body: &[u8], version: i16) -> Result<ProduceOutcome, WireError> {
    let mut c = Cursor::new(body);
    let mut outcome = ProduceOutcome {
        error_code: 0,
        base_offset: -1,
    };
    for _ in 0..c.count()? {
        c.skip_string()?;
        for _ in 0..c.count()? {
            let _index = c.i32()?;
            let error_code = c.i16()?;
            let base_offset = c.i64()?;
            if version >= 2 {
                c.i64()?; // log_append_time_ms
            }
            if version >= 5 {
                c.i64()?; // log_start_offset
            }
            if version >= 8 {
                for _ in 0..c.count()? {
                    c.i32()?;
                    c.skip_string()?;
                }
                c.skip_string()?;
            }
            if outcome.error_code == 0 {
                outcome = ProduceOutcome {
                    error_code,
                    base_offset,
                };
            }
        }
    }
    Ok(outcome)
}

/// One partition's position in a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchPosition {
    pub partition: i32,
    pub offset: i64,
}

/// Writes into `out` a whole Fetch request frame for `positions` of one topic (a full fetch,
/// no session).
#[allow(clippy::too_many_arguments)]
pub fn build_fetch(
    out: &mut Vec<u8>,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    topic: &str,
    positions: &[FetchPosition],
    max_wait_ms: i32,
    max_bytes: i32,
    partition_max_bytes: i32,
) {
    out.clear();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&API_FETCH.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    put_string(out, client_id);
    out.extend_from_slice(&(-1i32).to_be_bytes()); // replica_id: a consumer
    out.extend_from_slice(&max_wait_ms.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes()); // min_bytes
    out.extend_from_slice(&max_bytes.to_be_bytes());
    out.push(0); // isolation_level: read uncommitted
    if version >= 7 {
        out.extend_from_slice(&0i32.to_be_bytes()); // session_id
        out.extend_from_slice(&(-1i32).to_be_bytes()); // session_epoch: no session
    }
    out.extend_from_slice(&1i32.to_be_bytes());
    put_string(out, topic);
    out.extend_from_slice(&(positions.len() as i32).to_be_bytes());
    for p in positions {
        out.extend_from_slice(&p.partition.to_be_bytes());
        if version >= 9 {
            out.extend_from_slice(&(-1i32).to_be_bytes()); // current_leader_epoch: unknown
        }
        out.extend_from_slice(&p.offset.to_be_bytes());
        if version >= 5 {
            out.extend_from_slice(&(-1i64).to_be_bytes()); // log_start_offset
        }
        out.extend_from_slice(&partition_max_bytes.to_be_bytes());
    }
    if version >= 7 {
        out.extend_from_slice(&0i32.to_be_bytes()); // forgotten_topics_data
    }
    if version >= 11 {
        put_string(out, ""); // rack_id
    }
    let len = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&len.to_be_bytes());
}

/// One partition of a Fetch response, its records borrowed from the response buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchedPartition<'a> {
    pub partition: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub records: &'a [u8],
}

/// Walks a Fetch response body (after the correlation id), calling `each` per partition.
/// Returns the top-level error code (v7+; 0 before).
pub fn parse_fetch_response<'a>(
    body: &'a [u8],
    version: i16,
    mut each: impl FnMut(FetchedPartition<'a>),
) -> Result<i16, WireError> {
    let mut c = Cursor::new(body);
    c.i32()?; // throttle_time_ms
    let mut top_error = 0;
    if version >= 7 {
        top_error = c.i16()?;
        c.i32()?; // session_id
    }
    for _ in 0..c.count()? {
        c.skip_string()?;
        for _ in 0..c.count()? {
            let partition = c.i32()?;
            let error_code = c.i16()?;
            let high_watermark = c.i64()?;
            c.i64()?; // last_stable_offset (v4+)
            if version >= 5 {
                c.i64()?; // log_start_offset
            }
            for _ in 0..c.count()? {
                c.i64()?; // aborted producer_id
                c.i64()?; // first_offset
            }
            if version >= 11 {
                c.i32()?; // preferred_read_replica
            }
            let records = c.bytes()?;
            each(FetchedPartition {
                partition,
                error_code,
                high_watermark,
                records,
            });
        }
    }
    Ok(top_error)
}

/// What the batch headers of one partition's fetched records add up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchTally {
    /// Records in whole batches whose last offset is at or after the fetch offset.
    pub records: u64,
    /// Bytes of those batches.
    pub bytes: u64,
    /// The offset after the last whole batch, if any.
    pub next_offset: Option<i64>,
}

/// Counts records from batch headers only (`recordsCount`), never decoding records. A trailing
/// partial batch (the broker cuts at `partition_max_bytes`) is ignored. `each` sees every
/// counted batch (for e2e timestamps).
pub fn tally_batches(
    records: &[u8],
    fetch_offset: i64,
    mut each: impl FnMut(&[u8], u64),
) -> BatchTally {
    let mut tally = BatchTally::default();
    let mut rest = records;
    while rest.len() >= BATCH_HEADER_LEN {
        let mut c = Cursor::new(rest);
        let (Ok(base_offset), Ok(batch_length)) = (c.i64(), c.i32()) else {
            break;
        };
        let Some(total) = usize::try_from(batch_length)
            .ok()
            .and_then(|l| l.checked_add(LOG_OVERHEAD))
            .filter(|&t| t >= BATCH_HEADER_LEN && t <= rest.len())
        else {
            break;
        };
        let batch = &rest[..total];
        let last_offset_delta = i32::from_be_bytes([batch[23], batch[24], batch[25], batch[26]]);
        let count = i32::from_be_bytes([batch[57], batch[58], batch[59], batch[60]]);
        let last_offset = base_offset + i64::from(last_offset_delta);
        if last_offset >= fetch_offset {
            let counted = u64::try_from(count).unwrap_or(0);
            tally.records += counted;
            tally.bytes += total as u64;
            each(batch, counted);
        }
        tally.next_offset = Some(last_offset + 1);
        rest = &rest[total..];
    }
    tally
}

/// Where the first record's value starts inside an uncompressed batch, if it has one of at
/// least `min_len` bytes. Walks the first record's header: length, attributes,
/// timestampDelta, offsetDelta, key, valueLength (all varints but attributes).
pub fn first_value_position(batch: &[u8], min_len: usize) -> Option<usize> {
    let attributes = i16::from_be_bytes([*batch.get(21)?, *batch.get(22)?]);
    if attributes & 0x07 != 0 {
        return None;
    }
    let body = batch.get(BATCH_HEADER_LEN..)?;
    let mut c = Cursor::new(body);
    c.varint().ok()?; // record length
    c.take(1).ok()?; // attributes
    c.varint().ok()?; // timestamp delta
    c.varint().ok()?; // offset delta
    let key_len = c.varint().ok()?;
    if key_len > 0 {
        c.take(usize::try_from(key_len).ok()?).ok()?;
    }
    let value_len = c.varint().ok()?;
    if value_len < 0 || (value_len as usize) < min_len {
        return None;
    }
    Some(BATCH_HEADER_LEN + c.pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::records::{encode_batch, ProduceRecord};
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{
        FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, TopicName,
    };
    use kafka_protocol::protocol::{
        decode_request_header_from_buffer, Decodable, Encodable, StrBytes,
    };
    use kafka_protocol::records::Compression;

    fn batch(n: usize, value: &[u8], key: Option<&[u8]>) -> Bytes {
        let records: Vec<ProduceRecord> = (0..n)
            .map(|_| ProduceRecord {
                key: key.map(Bytes::copy_from_slice),
                value: Some(Bytes::copy_from_slice(value)),
                headers: vec![],
                timestamp_ms: 1_700_000_000_000,
            })
            .collect();
        encode_batch(&records, Compression::None).expect("encode")
    }

    #[test]
    fn produce_frames_decode_with_kafka_protocol() {
        // Proves the hand-built Produce v3..=8 frame is what kafka-protocol decodes: header,
        // acks, timeout, topic, partition and the exact batch bytes.
        let b = batch(3, b"hello", Some(b"k"));
        for version in PRODUCE_VERSION_MIN..=PRODUCE_VERSION_MAX {
            let prefix = ProducePrefix::new(version, "bench", "topic-a", -1, 1234);
            let mut frame = Vec::new();
            prefix.build(&mut frame, 77, 5, &b);
            let size = i32::from_be_bytes(frame[..4].try_into().expect("4"));
            assert_eq!(size as usize, frame.len() - 4);
            let mut body = Bytes::copy_from_slice(&frame[4..]);
            let header = decode_request_header_from_buffer(&mut body).expect("header");
            assert_eq!(header.correlation_id, 77);
            assert_eq!(header.request_api_version, version);
            let req = ProduceRequest::decode(&mut body, version).expect("decode");
            assert_eq!(req.acks, -1);
            assert_eq!(req.timeout_ms, 1234);
            assert_eq!(req.topic_data.len(), 1);
            let topic = &req.topic_data[0];
            assert_eq!(topic.name.0.as_str(), "topic-a");
            assert_eq!(topic.partition_data[0].index, 5);
            assert_eq!(topic.partition_data[0].records.as_deref(), Some(&b[..]));
        }
    }

    #[test]
    fn fetch_frames_decode_with_kafka_protocol() {
        // Proves the hand-built Fetch v4..=11 frame decodes to the same positions and limits.
        let positions = [
            FetchPosition {
                partition: 0,
                offset: 10,
            },
            FetchPosition {
                partition: 7,
                offset: 0,
            },
        ];
        for version in FETCH_VERSION_MIN..=FETCH_VERSION_MAX {
            let mut frame = Vec::new();
            build_fetch(
                &mut frame,
                version,
                9,
                "bench",
                "t",
                &positions,
                100,
                1 << 20,
                4096,
            );
            let mut body = Bytes::copy_from_slice(&frame[4..]);
            let header = decode_request_header_from_buffer(&mut body).expect("header");
            assert_eq!(header.correlation_id, 9);
            let req = FetchRequest::decode(&mut body, version).expect("decode");
            assert_eq!(req.max_wait_ms, 100);
            assert_eq!(req.max_bytes, 1 << 20);
            let parts = &req.topics[0].partitions;
            assert_eq!(req.topics[0].topic.0.as_str(), "t");
            assert_eq!(parts.len(), 2);
            assert_eq!((parts[1].partition, parts[1].fetch_offset), (7, 0));
            assert_eq!(parts[0].partition_max_bytes, 4096);
            assert_eq!(body.len(), 0, "v{version}: trailing bytes");
        }
    }

    #[test]
    fn produce_and_fetch_responses_parse() {
        // Proves the response walkers read kafka-protocol-encoded responses: error codes, base
        // offsets, high watermarks and the records slice of each partition.
        for version in PRODUCE_VERSION_MIN..=PRODUCE_VERSION_MAX {
            let resp =
                ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
                    .with_name(TopicName(StrBytes::from_static_str("t")))
                    .with_partition_responses(vec![
                        PartitionProduceResponse::default()
                            .with_index(0)
                            .with_base_offset(42),
                        PartitionProduceResponse::default()
                            .with_index(1)
                            .with_error_code(6)
                            .with_base_offset(-1),
                    ])]);
            let mut buf = BytesMut::new();
            resp.encode(&mut buf, version).expect("encode");
            let outcome = parse_produce_response(&buf, version).expect("parse");
            assert_eq!(
                outcome,
                ProduceOutcome {
                    error_code: 6,
                    base_offset: -1
                },
                "v{version}"
            );
        }
        let records = batch(4, b"v", None);
        for version in FETCH_VERSION_MIN..=FETCH_VERSION_MAX {
            let resp =
                FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                    .with_topic(TopicName(StrBytes::from_static_str("t")))
                    .with_partitions(vec![
                        PartitionData::default()
                            .with_partition_index(3)
                            .with_high_watermark(99)
                            .with_records(Some(records.clone())),
                        PartitionData::default()
                            .with_partition_index(4)
                            .with_error_code(1),
                    ])]);
            let mut buf = BytesMut::new();
            resp.encode(&mut buf, version).expect("encode");
            let mut seen = Vec::new();
            parse_fetch_response(&buf, version, |p| {
                seen.push((p.partition, p.error_code, p.high_watermark, p.records.len()))
            })
            .expect("parse");
            assert_eq!(
                seen,
                vec![(3, 0, 99, records.len()), (4, 1, 0, 0)],
                "v{version}"
            );
        }
    }

    #[test]
    fn tally_counts_whole_batches_from_headers() {
        // Proves records are counted from recordsCount, a cut-off tail batch is ignored and
        // batches wholly before the fetch offset are skipped.
        let a = batch(3, b"x", None);
        let b = batch(5, b"y", None);
        let mut b2 = b.to_vec();
        b2[..8].copy_from_slice(&3i64.to_be_bytes()); // base offset 3: offsets 3..=7
        let mut all = a.to_vec();
        all.extend_from_slice(&b2);
        all.extend_from_slice(&b2[..20]);
        let t = tally_batches(&all, 0, |_, _| {});
        assert_eq!(
            t,
            BatchTally {
                records: 8,
                bytes: (a.len() + b2.len()) as u64,
                next_offset: Some(8)
            }
        );
        let t = tally_batches(&all, 3, |_, _| {});
        assert_eq!((t.records, t.next_offset), (5, Some(8)));
        assert_eq!(
            tally_batches(&all[..30], 0, |_, _| {}),
            BatchTally::default()
        );
    }

    #[test]
    fn first_value_is_found_past_varint_header() {
        // Proves the first record's value position is found with and without a key, and that
        // compressed batches or short values give None.
        for key in [None, Some(&b"some-key"[..])] {
            let b = batch(2, b"0123456789", key);
            let pos = first_value_position(&b, 8).expect("position");
            assert_eq!(&b[pos..pos + 10], b"0123456789");
            assert_eq!(first_value_position(&b, 11), None);
        }
        let records = vec![ProduceRecord {
            value: Some(Bytes::from_static(b"0123456789")),
            ..Default::default()
        }];
        let z = encode_batch(&records, Compression::Gzip).expect("gzip");
        assert_eq!(first_value_position(&z, 8), None);
    }
}
