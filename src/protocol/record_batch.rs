//! Kafka record batch v2 ("magic 2"): the unit that producers send, the log stores and
//! consumers fetch.
//!
//! Layout (big-endian), per Kafka's `DefaultRecordBatch`:
//!
//! ```text
//! 0  baseOffset           i64   -- patched by the broker, outside the CRC
//! 8  batchLength          i32   -- bytes after this field
//! 12 partitionLeaderEpoch i32   -- patched by the broker, outside the CRC
//! 16 magic                i8    -- must be 2
//! 17 crc                  u32   -- CRC-32C of bytes 21..end
//! 21 attributes           i16   -- bits 0-2 compression, 3 timestamp type, 4 transactional, 5 control
//! 23 lastOffsetDelta      i32
//! 27 baseTimestamp        i64
//! 35 maxTimestamp         i64
//! 43 producerId           i64
//! 51 producerEpoch        i16
//! 53 baseSequence         i32
//! 57 recordsCount         i32
//! 61 records...
//! ```
//!
//! Everything here is a pure function over bytes. Nothing trusts the input: every accessor
//! goes through [`BatchHeader::parse`], which checks the length before reading a field.

use thiserror::Error;

/// Size of the fixed batch header, up to and including `recordsCount`.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes before `batchLength`'s payload starts: baseOffset (8) + batchLength (4).
pub const LOG_OVERHEAD: usize = 12;
/// The only message format Strata stores and serves.
pub const MAGIC_V2: i8 = 2;
/// Offset of the first byte covered by the CRC.
const CRC_START: usize = 21;

const BASE_OFFSET_POS: usize = 0;
const BATCH_LENGTH_POS: usize = 8;
const LEADER_EPOCH_POS: usize = 12;
const MAGIC_POS: usize = 16;
const CRC_POS: usize = 17;
const ATTRIBUTES_POS: usize = 21;
const LAST_OFFSET_DELTA_POS: usize = 23;
const BASE_TIMESTAMP_POS: usize = 27;
const MAX_TIMESTAMP_POS: usize = 35;
const PRODUCER_ID_POS: usize = 43;
const PRODUCER_EPOCH_POS: usize = 51;
const BASE_SEQUENCE_POS: usize = 53;
const RECORDS_COUNT_POS: usize = 57;

/// Attribute bits.
pub const ATTR_COMPRESSION_MASK: i16 = 0x07;
pub const ATTR_TIMESTAMP_TYPE_LOG_APPEND: i16 = 0x08;
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
pub const ATTR_CONTROL: i16 = 0x20;
/// Set by the log cleaner: `baseTimestamp` is the batch's delete horizon (KIP-534).
pub const ATTR_DELETE_HORIZON: i16 = 0x40;

/// Why a batch was rejected.
#[derive(Debug, Error, PartialEq, Eq, Clone)]
pub enum BatchError {
    #[error("batch truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("batch length {len} is invalid (minimum {min})")]
    BadLength { len: i64, min: usize },
    #[error("unsupported magic {0}")]
    BadMagic(i8),
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadCrc { stored: u32, computed: u32 },
    #[error("invalid record count {0}")]
    BadRecordCount(i32),
    #[error("last offset delta {delta} does not match record count {count}")]
    BadOffsetDelta { delta: i32, count: i32 },
    #[error("unknown compression codec {0}")]
    BadCompression(i16),
}

fn read_i16(buf: &[u8], pos: usize) -> i16 {
    // Callers only pass positions below BATCH_HEADER_LEN after `parse` checked the length.
    let mut b = [0u8; 2];
    b.copy_from_slice(&buf[pos..pos + 2]);
    i16::from_be_bytes(b)
}
fn read_i32(buf: &[u8], pos: usize) -> i32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[pos..pos + 4]);
    i32::from_be_bytes(b)
}
fn read_i64(buf: &[u8], pos: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[pos..pos + 8]);
    i64::from_be_bytes(b)
}

/// The decoded fixed header of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// `batchLength` as stored: the whole batch occupies `LOG_OVERHEAD + batch_length` bytes.
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Reads the header fields. Checks only that the header bytes are present and that
    /// `batchLength` is at least a header's worth; see [`validate`] for the full check.
    #[allow(clippy::indexing_slicing)] // length checked on the first line
    pub fn parse(buf: &[u8]) -> Result<Self, BatchError> {
        if buf.len() < BATCH_HEADER_LEN {
            return Err(BatchError::Truncated {
                need: BATCH_HEADER_LEN,
                have: buf.len(),
            });
        }
        let batch_length = read_i32(buf, BATCH_LENGTH_POS);
        if (batch_length as i64) < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i64 {
            return Err(BatchError::BadLength {
                len: batch_length as i64,
                min: BATCH_HEADER_LEN - LOG_OVERHEAD,
            });
        }
        Ok(Self {
            base_offset: read_i64(buf, BASE_OFFSET_POS),
            batch_length,
            partition_leader_epoch: read_i32(buf, LEADER_EPOCH_POS),
            magic: buf[MAGIC_POS] as i8,
            crc: read_i32(buf, CRC_POS) as u32,
            attributes: read_i16(buf, ATTRIBUTES_POS),
            last_offset_delta: read_i32(buf, LAST_OFFSET_DELTA_POS),
            base_timestamp: read_i64(buf, BASE_TIMESTAMP_POS),
            max_timestamp: read_i64(buf, MAX_TIMESTAMP_POS),
            producer_id: read_i64(buf, PRODUCER_ID_POS),
            producer_epoch: read_i16(buf, PRODUCER_EPOCH_POS),
            base_sequence: read_i32(buf, BASE_SEQUENCE_POS),
            records_count: read_i32(buf, RECORDS_COUNT_POS),
        })
    }

    /// Total bytes the batch occupies on the wire and on disk.
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }
    /// Compression codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_TIMESTAMP_TYPE_LOG_APPEND != 0
    }
    /// Records fill the batch's offset range, as a producer must send them (Kafka's
    /// `LogValidator` refuses "inconsistent batch offset range"); only the cleaner writes
    /// sparse batches.
    pub fn is_dense(&self) -> bool {
        self.records_count == 0 || self.last_offset_delta == self.records_count - 1
    }
    /// The delete horizon a cleaned batch carries (KIP-534): when the attribute bit is set,
    /// `baseTimestamp` holds the time after which its tombstones may be removed.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & ATTR_DELETE_HORIZON != 0).then_some(self.base_timestamp)
    }
    /// Sequence of the last record, wrapping at `i32::MAX` as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return -1;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        if last > i32::MAX as i64 {
            (last - i32::MAX as i64 - 1) as i32
        } else {
            last as i32
        }
    }
}

/// CRC-32C over the CRC-covered part of a whole batch (`buf` is exactly one batch).
pub fn compute_crc(batch: &[u8]) -> u32 {
    batch.get(CRC_START..).map(crc32c::crc32c).unwrap_or(0)
}

/// Fully validates one batch that occupies `buf` exactly: header, magic, length, CRC-32C,
/// record count and compression codec. Does not decompress or decode records.
pub fn validate(buf: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(buf)?;
    if header.total_len() != buf.len() {
        return Err(if header.total_len() > buf.len() {
            BatchError::Truncated {
                need: header.total_len(),
                have: buf.len(),
            }
        } else {
            BatchError::BadLength {
                len: header.batch_length as i64,
                min: BATCH_HEADER_LEN,
            }
        });
    }
    if header.magic != MAGIC_V2 {
        return Err(BatchError::BadMagic(header.magic));
    }
    let computed = compute_crc(buf);
    if computed != header.crc {
        return Err(BatchError::BadCrc {
            stored: header.crc,
            computed,
        });
    }
    if header.records_count < 0 {
        return Err(BatchError::BadRecordCount(header.records_count));
    }
    // A batch may hold fewer records than its offset range: the log cleaner removes records
    // but keeps `lastOffsetDelta` (Kafka's `overrideLastOffset`), so producer state still
    // sees the batch's last sequence. A producer's batch must be dense: see
    // [`BatchHeader::is_dense`], which the produce path checks.
    if header.last_offset_delta < 0
        || header.records_count as i64 > header.last_offset_delta as i64 + 1
    {
        return Err(BatchError::BadOffsetDelta {
            delta: header.last_offset_delta,
            count: header.records_count,
        });
    }
    if header.compression() > 4 {
        return Err(BatchError::BadCompression(header.compression()));
    }
    Ok(header)
}

/// Writes `base_offset` into the batch header. Outside the CRC, so the client's checksum
/// stays valid. `batch` must hold at least a header (checked by `validate` earlier).
pub fn patch_base_offset(batch: &mut [u8], base_offset: i64) {
    if let Some(slot) = batch.get_mut(BASE_OFFSET_POS..BASE_OFFSET_POS + 8) {
        slot.copy_from_slice(&base_offset.to_be_bytes());
    }
}

/// Writes `partitionLeaderEpoch` into the batch header (outside the CRC).
pub fn patch_leader_epoch(batch: &mut [u8], epoch: i32) {
    if let Some(slot) = batch.get_mut(LEADER_EPOCH_POS..LEADER_EPOCH_POS + 4) {
        slot.copy_from_slice(&epoch.to_be_bytes());
    }
}

/// Sets the LogAppendTime timestamp type and `maxTimestamp`. These are inside the CRC, so
/// the CRC is recomputed, exactly as Kafka's broker does for `LogAppendTime` topics.
pub fn patch_log_append_time(batch: &mut [u8], now_ms: i64) {
    if batch.len() < BATCH_HEADER_LEN {
        return;
    }
    let attributes = read_i16(batch, ATTRIBUTES_POS) | ATTR_TIMESTAMP_TYPE_LOG_APPEND;
    batch[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Compression codec ids as the attributes' low bits carry them.
pub const CODEC_NONE: i16 = 0;
pub const CODEC_GZIP: i16 = 1;
pub const CODEC_SNAPPY: i16 = 2;
pub const CODEC_LZ4: i16 = 3;
pub const CODEC_ZSTD: i16 = 4;

/// Why the records inside a batch could not be read or rewritten. The batch header and CRC
/// may be fine: these are about the (possibly compressed) record payload.
#[derive(Debug, Error, PartialEq, Eq, Clone)]
pub enum RecordsError {
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("cannot decompress the records (codec {codec}): {message}")]
    Decompress { codec: i16, message: String },
    #[error("cannot compress the records (codec {codec}): {message}")]
    Compress { codec: i16, message: String },
    #[error("record {index} is malformed: {why}")]
    BadRecord { index: i32, why: &'static str },
    #[error("decompressed records are {len} bytes, above the bound of {max}")]
    TooLarge { len: usize, max: usize },
}

/// The records section of one whole, validated batch, decompressed. Bounded while it
/// inflates: a payload whose output passes `decompressed_max` bytes is refused as soon as it
/// does (see [`super::inflate`]), so a decompression bomb cannot grow the broker past the bound.
pub fn decompressed_records(
    batch: &[u8],
    decompressed_max: usize,
) -> Result<bytes::Bytes, RecordsError> {
    let header = validate(batch)?;
    let payload = batch.get(BATCH_HEADER_LEN..).unwrap_or_default();
    let codec = header.compression();
    if codec == CODEC_NONE {
        if payload.len() > decompressed_max {
            return Err(RecordsError::TooLarge {
                len: payload.len(),
                max: decompressed_max,
            });
        }
        return Ok(bytes::Bytes::copy_from_slice(payload));
    }
    // Grows with the output (never by what the payload claims), up to the bound.
    let mut out = Vec::with_capacity(payload.len().saturating_mul(4).min(decompressed_max));
    super::inflate::inflate(codec, payload, decompressed_max, &mut |piece| {
        out.extend_from_slice(piece)
    })?;
    Ok(out.into())
}

/// Reads a zigzag varint (Kafka's record fields) at `*pos`, advancing it.
fn read_varlong(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut raw: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        raw |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

/// `(offset, timestamp)` of each record of one whole, validated batch, in order; a
/// LogAppendTime batch stamps every record with its max timestamp, as Kafka reads it.
pub fn record_offsets_and_timestamps(
    batch: &[u8],
    decompressed_max: usize,
) -> Result<Vec<(i64, i64)>, RecordsError> {
    let header = validate(batch)?;
    let records = decompressed_records(batch, decompressed_max)?;
    let mut out = Vec::new();
    let mut pos = 0usize;
    for index in 0..header.records_count {
        let bad = |why| RecordsError::BadRecord { index, why };
        let len = read_varlong(&records, &mut pos).ok_or(bad("truncated length"))?;
        let len = usize::try_from(len).map_err(|_| bad("negative length"))?;
        let end = pos.checked_add(len).ok_or(bad("length overflows"))?;
        let body = records.get(pos..end).ok_or(bad("truncated record"))?;
        // attributes (1 byte), then the timestamp and offset deltas.
        let mut at = 1usize;
        let timestamp_delta = read_varlong(body, &mut at).ok_or(bad("truncated timestamp"))?;
        let offset_delta = read_varlong(body, &mut at).ok_or(bad("truncated offset"))?;
        let timestamp = if header.is_log_append_time() {
            header.max_timestamp
        } else {
            header.base_timestamp.saturating_add(timestamp_delta)
        };
        out.push((header.base_offset.saturating_add(offset_delta), timestamp));
        pos = end;
    }
    Ok(out)
}

/// The positions (0-based, in the batch) of the records of one whole, validated batch whose
/// key is null: what a compacted topic refuses (Kafka's `LogValidator.validateKey`).
/// Compressed batches are decompressed, within `decompressed_max`. Control batches carry
/// no data records and yield nothing.
pub fn null_key_positions(batch: &[u8], decompressed_max: usize) -> Result<Vec<i32>, RecordsError> {
    let header = validate(batch)?;
    if header.is_control() || header.records_count <= 0 {
        return Ok(Vec::new());
    }
    let records = decompressed_records(batch, decompressed_max)?;
    Ok(parse_records(&records, header.records_count)?
        .iter()
        .zip(0i32..)
        .filter(|(record, _)| record.key.is_none())
        .map(|(_, index)| index)
        .collect())
}

/// Writes `bytes` at `pos` of `buf`, if it fits (callers write inside a header they built).
fn put_at(buf: &mut [u8], pos: usize, bytes: &[u8]) {
    if let Some(slot) = buf.get_mut(pos..pos + bytes.len()) {
        slot.copy_from_slice(bytes);
    }
}

/// Rewrites one whole, validated batch with its records compressed by `codec` (Kafka's
/// broker-side recompression for a topic's `compression.type`). Offsets, timestamps,
/// producer id, epoch and sequence stay as they were; the attributes name the new codec and
/// the CRC is recomputed, since both sit inside it.
pub fn recompress(
    batch: &[u8],
    codec: i16,
    decompressed_max: usize,
) -> Result<bytes::BytesMut, RecordsError> {
    let header = validate(batch)?;
    let records = decompressed_records(batch, decompressed_max)?;
    let attributes = (header.attributes & !ATTR_COMPRESSION_MASK) | codec;
    build_batch(
        &BatchHeader {
            attributes,
            ..header
        },
        &records,
    )
}

/// Encodes a whole batch from `header` and its uncompressed records section, compressing
/// the records with the codec `header.attributes` names. Every header field is written as
/// given except `batchLength` and `crc`, which are computed (and `magic`, always 2).
pub fn build_batch(header: &BatchHeader, records: &[u8]) -> Result<bytes::BytesMut, RecordsError> {
    use bytes::BufMut;
    use kafka_protocol::compression::{self as codecs, Compressor};
    let codec = header.compression();
    let mut out = bytes::BytesMut::with_capacity(BATCH_HEADER_LEN + records.len());
    out.put_i64(header.base_offset);
    out.put_i32(0); // batchLength, written below
    out.put_i32(header.partition_leader_epoch);
    out.put_i8(MAGIC_V2);
    out.put_u32(0); // crc, written below
    out.put_i16(header.attributes);
    out.put_i32(header.last_offset_delta);
    out.put_i64(header.base_timestamp);
    out.put_i64(header.max_timestamp);
    out.put_i64(header.producer_id);
    out.put_i16(header.producer_epoch);
    out.put_i32(header.base_sequence);
    out.put_i32(header.records_count);
    let fill = |tmp: &mut bytes::BytesMut| {
        tmp.put_slice(records);
        Ok(())
    };
    let fail = |e: anyhow::Error| RecordsError::Compress {
        codec,
        message: e.to_string(),
    };
    match codec {
        CODEC_NONE => out.put_slice(records),
        CODEC_GZIP => codecs::Gzip::compress(&mut out, fill).map_err(fail)?,
        CODEC_SNAPPY => codecs::Snappy::compress(&mut out, fill).map_err(fail)?,
        CODEC_LZ4 => codecs::Lz4::compress(&mut out, fill).map_err(fail)?,
        CODEC_ZSTD => codecs::Zstd::compress(&mut out, fill).map_err(fail)?,
        other => return Err(BatchError::BadCompression(other).into()),
    }
    let batch_length =
        i32::try_from(out.len() - LOG_OVERHEAD).map_err(|_| RecordsError::TooLarge {
            len: out.len(),
            max: i32::MAX as usize,
        })?;
    put_at(&mut out, BATCH_LENGTH_POS, &batch_length.to_be_bytes());
    let crc = compute_crc(&out);
    put_at(&mut out, CRC_POS, &crc.to_be_bytes());
    Ok(out)
}

/// One record of a decompressed records section (Kafka's `DefaultRecord`), borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i64,
    /// `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// `None` for a null value: a tombstone.
    pub value: Option<&'a [u8]>,
    /// Everything after `offsetDelta` as stored: key, value and headers. Re-encoding a
    /// record with another timestamp delta copies this unchanged.
    pub tail: &'a [u8],
}

/// Parses the `count` records of a decompressed records section. Bounded by the input: a
/// length that runs past the section is `BadRecord`, never a panic.
pub fn parse_records(records: &[u8], count: i32) -> Result<Vec<RecordView<'_>>, RecordsError> {
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0).min(records.len()));
    let mut pos = 0usize;
    for index in 0..count {
        let bad = |why| RecordsError::BadRecord { index, why };
        let len = read_varlong(records, &mut pos).ok_or(bad("truncated length"))?;
        let len = usize::try_from(len).map_err(|_| bad("negative length"))?;
        let end = pos.checked_add(len).ok_or(bad("length overflows"))?;
        let body = records.get(pos..end).ok_or(bad("truncated record"))?;
        let attributes = *body.first().ok_or(bad("empty record"))? as i8;
        let mut at = 1usize;
        let timestamp_delta = read_varlong(body, &mut at).ok_or(bad("truncated timestamp"))?;
        let offset_delta = read_varlong(body, &mut at).ok_or(bad("truncated offset"))?;
        let tail = body.get(at..).unwrap_or_default();
        let key = read_nullable_bytes(body, &mut at).ok_or(bad("truncated key"))?;
        let value = read_nullable_bytes(body, &mut at).ok_or(bad("truncated value"))?;
        out.push(RecordView {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            tail,
        });
        pos = end;
    }
    if pos != records.len() {
        return Err(RecordsError::BadRecord {
            index: count,
            why: "bytes after the last record",
        });
    }
    Ok(out)
}

/// Reads a varint length and that many bytes; length -1 is null.
fn read_nullable_bytes<'a>(buf: &'a [u8], pos: &mut usize) -> Option<Option<&'a [u8]>> {
    let len = read_varlong(buf, pos)?;
    if len < 0 {
        return Some(None);
    }
    let end = pos.checked_add(usize::try_from(len).ok()?)?;
    let bytes = buf.get(*pos..end)?;
    *pos = end;
    Some(Some(bytes))
}

/// Appends a zigzag varint (Kafka's record fields).
fn write_varlong(out: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// Appends one record to an uncompressed records section: `record` with its timestamp
/// delta replaced by `timestamp_delta` (the cleaner moves a batch's base timestamp to its
/// delete horizon, so the deltas of the records it keeps are rewritten).
pub fn encode_record(out: &mut Vec<u8>, record: &RecordView<'_>, timestamp_delta: i64) {
    let mut head = Vec::with_capacity(24);
    head.push(record.attributes as u8);
    write_varlong(&mut head, timestamp_delta);
    write_varlong(&mut head, record.offset_delta);
    write_varlong(out, (head.len() + record.tail.len()) as i64);
    out.extend_from_slice(&head);
    out.extend_from_slice(record.tail);
}

/// Splits a buffer holding zero or more whole batches (a Produce partition's `records`, or
/// a region of a segment) into batches. Stops with an error at the first malformed one; the
/// caller decides whether that means "reject the request" or "truncate the log here".
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    /// Byte position of the next batch within the buffer.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for BatchIter<'a> {
    /// (position of the batch in the buffer, its validated header)
    type Item = Result<(usize, BatchHeader), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.buf.get(self.pos..)?;
        if rest.is_empty() {
            return None;
        }
        let result = BatchHeader::parse(rest).and_then(|header| {
            let len = header.total_len();
            let one = rest.get(..len).ok_or(BatchError::Truncated {
                need: len,
                have: rest.len(),
            })?;
            validate(one).map(|h| (len, h))
        });
        match result {
            Ok((len, h)) => {
                let at = self.pos;
                self.pos += len;
                Some(Ok((at, h)))
            }
            Err(e) => {
                // Nothing after a malformed batch can be located, so the iterator ends
                // here rather than yielding the same error forever.
                self.pos = self.buf.len();
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Property tests: batches come from kafka-protocol's own encoder (an independent
    //! implementation of the format), so these check Strata's parser against the reference
    //! layout rather than against itself.
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use bytes::{Bytes, BytesMut};
    use indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };
    use proptest::prelude::*;

    /// Everything needed to build one batch, and to know what its header must say.
    #[derive(Debug, Clone)]
    struct BatchSpec {
        compression: Compression,
        base_offset: i64,
        leader_epoch: i32,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
        transactional: bool,
        records: Vec<RecordSpec>,
    }

    type Headers = IndexMap<StrBytes, Option<Bytes>>;

    #[derive(Debug, Clone)]
    struct RecordSpec {
        timestamp: i64,
        key: Option<Bytes>,
        value: Option<Bytes>,
        headers: Headers,
    }

    fn compression() -> impl Strategy<Value = Compression> {
        prop_oneof![
            Just(Compression::None),
            Just(Compression::Gzip),
            Just(Compression::Snappy),
            Just(Compression::Lz4),
            Just(Compression::Zstd),
        ]
    }

    fn opt_bytes(len_max: usize) -> impl Strategy<Value = Option<Bytes>> {
        proptest::option::of(
            proptest::collection::vec(any::<u8>(), 0..len_max).prop_map(Bytes::from),
        )
    }

    fn record_spec() -> impl Strategy<Value = RecordSpec> {
        (
            0i64..(1 << 41),
            opt_bytes(32),
            opt_bytes(128),
            proptest::collection::vec(("[a-z]{0,8}", opt_bytes(16)), 0..4),
        )
            .prop_map(|(timestamp, key, value, headers)| RecordSpec {
                timestamp,
                key,
                value,
                headers: headers
                    .into_iter()
                    .map(|(k, v)| (StrBytes::from_string(k), v))
                    .collect(),
            })
    }

    fn batch_spec(records_max: usize) -> impl Strategy<Value = BatchSpec> {
        (
            compression(),
            0i64..(i64::MAX / 2),
            -1i32..1000,
            -1i64..1_000_000,
            -1i16..100,
            prop_oneof![Just(-1i32), 0i32..=i32::MAX],
            any::<bool>(),
            proptest::collection::vec(record_spec(), 1..=records_max),
        )
            .prop_map(
                |(
                    compression,
                    base_offset,
                    leader_epoch,
                    producer_id,
                    producer_epoch,
                    base_sequence,
                    transactional,
                    records,
                )| BatchSpec {
                    compression,
                    base_offset,
                    leader_epoch,
                    producer_id,
                    producer_epoch,
                    base_sequence,
                    transactional,
                    records,
                },
            )
    }

    impl BatchSpec {
        /// The records as kafka-protocol models them, with offsets from `base_offset`.
        /// Sequences advance with the offset (wrapping like the reference encoder), so the
        /// encoder keeps them in one batch.
        fn records(&self, base_offset: i64, leader_epoch: i32) -> Vec<Record> {
            self.records
                .iter()
                .enumerate()
                .map(|(i, r)| Record {
                    transactional: self.transactional,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: leader_epoch,
                    producer_id: self.producer_id,
                    producer_epoch: self.producer_epoch,
                    // The reference encoder never sets the timestamp-type attribute bit.
                    timestamp_type: TimestampType::Creation,
                    offset: base_offset + i as i64,
                    sequence: self.base_sequence.wrapping_add(i as i32),
                    timestamp: r.timestamp,
                    key: r.key.clone(),
                    value: r.value.clone(),
                    headers: r.headers.clone(),
                })
                .collect()
        }

        fn encode(&self) -> Vec<u8> {
            let mut buf = BytesMut::new();
            let options = RecordEncodeOptions {
                version: 2,
                compression: self.compression,
            };
            RecordBatchEncoder::encode(
                &mut buf,
                &self.records(self.base_offset, self.leader_epoch),
                &options,
            )
            .unwrap();
            buf.to_vec()
        }
    }

    fn decode_one(batch: &[u8]) -> Vec<Record> {
        let mut bytes = Bytes::copy_from_slice(batch);
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        assert!(bytes.is_empty(), "decoder left bytes behind");
        set.records
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        // Proves validate accepts every batch the reference encoder produces, for every codec,
        // and that each header field reads back as written.
        #[test]
        fn validate_accepts_encoded_batches(spec in batch_spec(24)) {
            let batch = spec.encode();
            let header = validate(&batch).unwrap();
            let n = spec.records.len() as i32;
            let timestamps = spec.records.iter().map(|r| r.timestamp);
            prop_assert_eq!(header.total_len(), batch.len());
            prop_assert_eq!(header.base_offset, spec.base_offset);
            prop_assert_eq!(header.partition_leader_epoch, spec.leader_epoch);
            prop_assert_eq!(header.magic, MAGIC_V2);
            prop_assert_eq!(header.crc, compute_crc(&batch));
            prop_assert_eq!(header.compression(), spec.compression as i16);
            prop_assert_eq!(header.is_transactional(), spec.transactional);
            prop_assert!(!header.is_control());
            prop_assert!(!header.is_log_append_time());
            prop_assert_eq!(header.records_count, n);
            prop_assert_eq!(header.last_offset_delta, n - 1);
            prop_assert_eq!(header.last_offset(), spec.base_offset + n as i64 - 1);
            prop_assert_eq!(header.base_timestamp, timestamps.clone().min().unwrap());
            prop_assert_eq!(header.max_timestamp, timestamps.max().unwrap());
            prop_assert_eq!(header.producer_id, spec.producer_id);
            prop_assert_eq!(header.producer_epoch, spec.producer_epoch);
            prop_assert_eq!(header.base_sequence, spec.base_sequence);
        }

        // Proves null_key_positions names exactly the records the reference encoder wrote
        // without a key, by their place in the batch, in every codec.
        #[test]
        fn null_key_positions_match_the_spec(spec in batch_spec(24)) {
            let batch = spec.encode();
            let expected: Vec<i32> = spec
                .records
                .iter()
                .zip(0i32..)
                .filter(|(r, _)| r.key.is_none())
                .map(|(_, i)| i)
                .collect();
            prop_assert_eq!(null_key_positions(&batch, 1 << 20).unwrap(), expected);
        }

        // Proves base offset and leader epoch patches leave the CRC valid and that the
        // reference decoder then sees every record at its new offset and epoch, unchanged.
        #[test]
        fn patches_keep_crc_and_round_trip(
            spec in batch_spec(16),
            new_base in 0i64..(i64::MAX / 2),
            new_epoch in 0i32..i32::MAX,
        ) {
            let mut batch = spec.encode();
            let crc_before = validate(&batch).unwrap().crc;
            patch_base_offset(&mut batch, new_base);
            patch_leader_epoch(&mut batch, new_epoch);
            let header = validate(&batch).unwrap();
            prop_assert_eq!(header.crc, crc_before);
            prop_assert_eq!(header.base_offset, new_base);
            prop_assert_eq!(header.partition_leader_epoch, new_epoch);
            prop_assert_eq!(decode_one(&batch), spec.records(new_base, new_epoch));
        }

        // Proves every single-bit flip from the CRC field onwards is rejected (checked
        // exhaustively for each batch), and that flips before it are caught exactly where
        // the format says: length and magic are checked, base offset and epoch are not.
        #[test]
        fn any_flipped_bit_is_detected(spec in batch_spec(4)) {
            let batch = spec.encode();
            let mut copy = batch.clone();
            for byte in 0..batch.len() {
                for bit in 0..8 {
                    copy[byte] ^= 1 << bit;
                    let result = validate(&copy);
                    let outside_crc = (BASE_OFFSET_POS..BATCH_LENGTH_POS).contains(&byte)
                        || (LEADER_EPOCH_POS..MAGIC_POS).contains(&byte);
                    if outside_crc {
                        prop_assert!(result.is_ok(), "byte {} bit {}: {:?}", byte, bit, result);
                    } else {
                        prop_assert!(result.is_err(), "byte {} bit {} accepted", byte, bit);
                    }
                    copy[byte] ^= 1 << bit;
                }
            }
            prop_assert_eq!(copy, batch);
        }

        // Proves every proper prefix of a batch is rejected by validate and by BatchIter,
        // and that neither panics on any cut (checked exhaustively for each batch).
        #[test]
        fn truncation_is_rejected(spec in batch_spec(8)) {
            let batch = spec.encode();
            for cut in 0..batch.len() {
                let prefix = &batch[..cut];
                prop_assert!(validate(prefix).is_err(), "prefix of {} accepted", cut);
                let items: Vec<_> = BatchIter::new(prefix).take(2).collect();
                if cut == 0 {
                    prop_assert!(items.is_empty());
                } else {
                    prop_assert!(items[0].is_err(), "iter accepted prefix of {}", cut);
                }
            }
        }

        // Proves BatchIter over N concatenated batches yields exactly N headers at the right
        // byte positions, and a cut anywhere after the k-th batch yields k batches, then one
        // error (unless the cut falls on a boundary), then nothing.
        #[test]
        fn iter_splits_concatenation(
            specs in proptest::collection::vec(batch_spec(6), 1..8),
            cut_seed in any::<prop::sample::Index>(),
        ) {
            let mut buf = Vec::new();
            let mut starts = Vec::new();
            for spec in &specs {
                starts.push(buf.len());
                buf.extend_from_slice(&spec.encode());
            }
            let got: Vec<_> = BatchIter::new(&buf).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(got.len(), specs.len());
            for (i, (pos, header)) in got.iter().enumerate() {
                prop_assert_eq!(*pos, starts[i]);
                prop_assert_eq!(header.base_offset, specs[i].base_offset);
                prop_assert_eq!(header.records_count, specs[i].records.len() as i32);
            }

            let cut = cut_seed.index(buf.len());
            // Batch i is whole when the next one starts at or before the cut.
            let whole = starts.iter().filter(|&&s| s <= cut).count() - 1;
            let mut iter = BatchIter::new(&buf[..cut]);
            for _ in 0..whole {
                prop_assert!(iter.next().unwrap().is_ok());
            }
            match iter.next() {
                None => prop_assert!(starts.contains(&cut)),
                Some(item) => prop_assert!(item.is_err() && !starts.contains(&cut)),
            }
            prop_assert!(iter.next().is_none(), "iterator continued after its end or error");
        }

        // Proves recompress rewrites a batch into any codec without changing what it holds:
        // the result validates (its CRC recomputed), names the new codec, keeps every other
        // header field, and the reference decoder reads the same records from it.
        #[test]
        fn recompress_keeps_records_and_header(spec in batch_spec(16), codec in 0i16..=4) {
            let batch = spec.encode();
            let before = validate(&batch).unwrap();
            let out = recompress(&batch, codec, 1 << 20).unwrap();
            let after = validate(&out).unwrap();
            prop_assert_eq!(after.compression(), codec);
            prop_assert_eq!(
                after.attributes & !ATTR_COMPRESSION_MASK,
                before.attributes & !ATTR_COMPRESSION_MASK
            );
            let unchanged = BatchHeader {
                batch_length: before.batch_length,
                crc: before.crc,
                attributes: before.attributes,
                ..after
            };
            prop_assert_eq!(unchanged, before);
            prop_assert_eq!(decode_one(&out), spec.records(spec.base_offset, spec.leader_epoch));
        }

        // Proves record_offsets_and_timestamps reads each record's offset and timestamp,
        // through every codec, exactly as the reference decoder does.
        #[test]
        fn record_timestamps_match_the_reference(spec in batch_spec(16)) {
            let batch = spec.encode();
            let want: Vec<(i64, i64)> =
                decode_one(&batch).iter().map(|r| (r.offset, r.timestamp)).collect();
            prop_assert_eq!(record_offsets_and_timestamps(&batch, 1 << 20).unwrap(), want);
        }

        // Proves patch_log_append_time sets the timestamp type and max timestamp, recomputes
        // the CRC so the batch stays valid, and leaves every other header field alone.
        #[test]
        fn log_append_time_keeps_batch_valid(spec in batch_spec(8), now_ms in 0i64..i64::MAX) {
            let mut batch = spec.encode();
            let before = validate(&batch).unwrap();
            patch_log_append_time(&mut batch, now_ms);
            let after = validate(&batch).unwrap();
            prop_assert!(after.is_log_append_time());
            prop_assert_eq!(after.max_timestamp, now_ms);
            prop_assert_eq!(after.crc, compute_crc(&batch));
            prop_assert_eq!(
                BatchHeader {
                    crc: before.crc,
                    attributes: before.attributes | ATTR_TIMESTAMP_TYPE_LOG_APPEND,
                    max_timestamp: now_ms,
                    ..before
                },
                BatchHeader { crc: before.crc, ..after }
            );
            let decoded = decode_one(&batch);
            prop_assert!(decoded.iter().all(|r| r.timestamp_type == TimestampType::LogAppend));
        }

        // Proves last_sequence adds the offset delta and wraps past i32::MAX back to 0 (as
        // Kafka's DefaultRecordBatch.incrementSequence does), and is -1 without a sequence.
        #[test]
        fn last_sequence_wraps(base in -5i32..=i32::MAX, delta in 0i32..10_000) {
            let header = BatchHeader {
                base_offset: 0,
                batch_length: (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32,
                partition_leader_epoch: 0,
                magic: MAGIC_V2,
                crc: 0,
                attributes: 0,
                last_offset_delta: delta,
                base_timestamp: 0,
                max_timestamp: 0,
                producer_id: 0,
                producer_epoch: 0,
                base_sequence: base,
                records_count: delta + 1,
            };
            let expected = if base < 0 {
                -1
            } else {
                ((base as i64 + delta as i64) % (i32::MAX as i64 + 1)) as i32
            };
            prop_assert_eq!(header.last_sequence(), expected);
        }
    }

    // Proves the wrap on a real encoded batch whose sequences straddle i32::MAX.
    #[test]
    fn last_sequence_wraps_on_encoded_batch() {
        let spec = BatchSpec {
            compression: Compression::None,
            base_offset: 100,
            leader_epoch: 0,
            producer_id: 7,
            producer_epoch: 0,
            base_sequence: i32::MAX - 1,
            transactional: false,
            records: (0..4)
                .map(|i| RecordSpec {
                    timestamp: i,
                    key: None,
                    value: Some(Bytes::from_static(b"v")),
                    headers: Headers::new(),
                })
                .collect(),
        };
        let header = validate(&spec.encode()).unwrap();
        assert_eq!(header.base_sequence, i32::MAX - 1);
        assert_eq!(header.last_sequence(), 1);
    }

    /// Records that cannot be read are errors, never panics: a compressed payload that does
    /// not decompress (its CRC made valid again, as a producer could send it), records cut
    /// short, and a payload that inflates past the bound.
    #[test]
    fn unreadable_records_are_errors() {
        let spec = BatchSpec {
            compression: Compression::Gzip,
            base_offset: 0,
            leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            records: (0..20)
                .map(|i| RecordSpec {
                    timestamp: 1000 + i,
                    key: None,
                    value: Some(Bytes::from(vec![b'x'; 500])),
                    headers: Headers::default(),
                })
                .collect(),
        };
        let batch = spec.encode();
        let fix_crc = |b: &mut Vec<u8>| {
            let crc = compute_crc(b);
            b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        };
        let mut garbled = batch.clone();
        garbled[BATCH_HEADER_LEN + 12] ^= 0xff;
        fix_crc(&mut garbled);
        assert!(record_offsets_and_timestamps(&garbled, 1 << 20).is_err());
        assert!(recompress(&garbled, CODEC_ZSTD, 1 << 20).is_err());
        let mut cut = recompress(&batch, CODEC_NONE, 1 << 20).unwrap().to_vec();
        cut.truncate(cut.len() - 300);
        let batch_length = (cut.len() - LOG_OVERHEAD) as i32;
        cut[BATCH_LENGTH_POS..BATCH_LENGTH_POS + 4].copy_from_slice(&batch_length.to_be_bytes());
        fix_crc(&mut cut);
        assert!(matches!(
            record_offsets_and_timestamps(&cut, 1 << 20),
            Err(RecordsError::BadRecord { .. })
        ));
        assert!(matches!(
            record_offsets_and_timestamps(&batch, 1000),
            Err(RecordsError::TooLarge { .. })
        ));
    }
}
