//! The records of `__transaction_state`, byte for byte as Kafka writes them, so a log moved
//! between Kafka and Strata (or read by Kafka's tooling) means the same thing:
//!
//! - key `TransactionLogKey` v0: `[i16 0][str transactional_id]` (i16-length string);
//! - value `TransactionLogValue` v0: `[i16 0][i64 producer_id][i16 producer_epoch]
//!   [i32 timeout_ms][i8 state][i32 n, -1 = null] n × ([str topic][i32 m] m × [i32 partition])
//!   [i64 last_update_timestamp_ms][i64 start_timestamp_ms]`;
//! - value v1, the first flexible version: the same fields in the same order, but arrays and
//!   strings carry compact lengths (unsigned varint of length + 1, 0 = null), each topic entry
//!   ends with a (here empty) tagged-field section, and the value ends with tagged fields:
//!   tag 0 `PreviousProducerId` (i64, default -1), tag 1 `NextProducerId` (i64, default -1),
//!   tag 2 `ClientTransactionVersion` (i16, default 0), tag 3 `NextProducerEpoch` (i16,
//!   default -1); a field at its default is not written;
//! - a null value is a tombstone: the transactional id expired.
//!
//! Strata writes v1 (what Kafka writes since transaction version 1) and reads both. As Kafka
//! does, an Empty transaction's partitions are written as a null array, and read back as
//! none whatever the array holds.
//!
//! Decoding never trusts the bytes: every read is bounds-checked, lengths are capped by
//! `limits`, and an unknown tag is skipped by its size.
use std::collections::BTreeSet;

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use super::limits::{TRANSACTIONAL_ID_LEN_MAX, TXN_PARTITIONS_MAX};
use super::state::{TxnFields, TxnPartition, TxnState};
use crate::protocol::cursor::{Cursor, Truncated};
use crate::protocol::producer::{ProducerEpoch, ProducerId};

/// The only key version (and, since KIP-915, the record type id of a transaction record).
const KEY_VERSION: i16 = 0;
/// The value version Strata writes.
pub const VALUE_VERSION_WRITTEN: i16 = 1;

const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;
const TAG_NEXT_PRODUCER_EPOCH: u32 = 3;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record truncated")]
    Truncated,
    #[error("unknown record key version {0}")]
    UnknownKeyVersion(i16),
    #[error("unsupported record value version {0}")]
    UnknownValueVersion(i16),
    #[error("unknown transaction state {0}")]
    UnknownState(i8),
    #[error("string is not UTF-8")]
    BadUtf8,
    #[error("negative length {0}")]
    BadLength(i64),
    #[error("field of {len} elements exceeds {max}")]
    TooLarge { len: usize, max: usize },
    #[error("varint longer than 5 bytes")]
    BadVarint,
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// One `__transaction_state` record value, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: ProducerId,
    pub prev_producer_id: ProducerId,
    pub next_producer_id: ProducerId,
    pub next_producer_epoch: ProducerEpoch,
    pub producer_epoch: ProducerEpoch,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TxnPartition>,
    pub last_update_timestamp_ms: i64,
    pub start_timestamp_ms: i64,
    pub client_transaction_version: i16,
}

impl TxnLogValue {
    /// What a transition persists (the last epoch is in memory only, as in Kafka).
    pub fn from_fields(f: &TxnFields) -> Self {
        Self {
            producer_id: f.producer_id,
            prev_producer_id: f.prev_producer_id,
            next_producer_id: f.next_producer_id,
            next_producer_epoch: f.next_producer_epoch,
            producer_epoch: f.producer_epoch,
            timeout_ms: f.timeout_ms,
            state: f.state,
            partitions: f.partitions.clone(),
            last_update_timestamp_ms: f.last_update_timestamp_ms,
            start_timestamp_ms: f.start_timestamp_ms,
            client_transaction_version: f.client_transaction_version,
        }
    }

    /// The in-memory fields a replay starts from.
    pub fn into_fields(self) -> TxnFields {
        TxnFields {
            producer_id: self.producer_id,
            prev_producer_id: self.prev_producer_id,
            next_producer_id: self.next_producer_id,
            next_producer_epoch: self.next_producer_epoch,
            producer_epoch: self.producer_epoch,
            last_producer_epoch: ProducerEpoch::NONE,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions: self.partitions,
            start_timestamp_ms: self.start_timestamp_ms,
            last_update_timestamp_ms: self.last_update_timestamp_ms,
            client_transaction_version: self.client_transaction_version,
        }
    }
}

fn put_str(buf: &mut BytesMut, s: &str) {
    // Transactional ids and topic names are bounded far below i16::MAX on the way in;
    // clamp rather than wrap should one ever slip through.
    let len = s.len().min(i16::MAX as usize);
    buf.put_i16(len as i16);
    buf.put_slice(s.as_bytes().get(..len).unwrap_or_default());
}

fn put_uvarint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_compact_str(buf: &mut BytesMut, s: &str) {
    put_uvarint(buf, s.len() as u32 + 1);
    buf.put_slice(s.as_bytes());
}

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + transactional_id.len());
    buf.put_i16(KEY_VERSION);
    put_str(&mut buf, transactional_id);
    buf.freeze()
}

/// The partitions grouped by topic, in topic then partition order (Kafka groups them the
/// same way; its order is a hash map's, which readers do not depend on).
fn by_topic(partitions: &BTreeSet<TxnPartition>) -> Vec<(&str, Vec<i32>)> {
    let mut out: Vec<(&str, Vec<i32>)> = Vec::new();
    for p in partitions {
        match out.last_mut() {
            Some((topic, ids)) if *topic == p.topic => ids.push(p.partition),
            _ => out.push((&p.topic, vec![p.partition])),
        }
    }
    out
}

/// Encodes `value` as version `version` (0 or 1). Version 0 has no place for the tagged
/// fields; they are dropped, as Kafka drops them.
pub fn encode_value(value: &TxnLogValue, version: i16) -> Bytes {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i16(version);
    buf.put_i64(value.producer_id.0);
    buf.put_i16(value.producer_epoch.0);
    buf.put_i32(value.timeout_ms);
    buf.put_i8(value.state.id());
    let groups = (value.state != TxnState::Empty).then(|| by_topic(&value.partitions));
    if version == 0 {
        match &groups {
            None => buf.put_i32(-1),
            Some(groups) => {
                buf.put_i32(groups.len() as i32);
                for (topic, ids) in groups {
                    put_str(&mut buf, topic);
                    buf.put_i32(ids.len() as i32);
                    ids.iter().for_each(|id| buf.put_i32(*id));
                }
            }
        }
    } else {
        match &groups {
            None => put_uvarint(&mut buf, 0),
            Some(groups) => {
                put_uvarint(&mut buf, groups.len() as u32 + 1);
                for (topic, ids) in groups {
                    put_compact_str(&mut buf, topic);
                    put_uvarint(&mut buf, ids.len() as u32 + 1);
                    ids.iter().for_each(|id| buf.put_i32(*id));
                    put_uvarint(&mut buf, 0); // the topic entry's tagged fields: none
                }
            }
        }
    }
    buf.put_i64(value.last_update_timestamp_ms);
    buf.put_i64(value.start_timestamp_ms);
    if version >= 1 {
        let mut tags: Vec<(u32, Vec<u8>)> = Vec::new();
        if value.prev_producer_id != ProducerId::NONE {
            tags.push((
                TAG_PREVIOUS_PRODUCER_ID,
                value.prev_producer_id.0.to_be_bytes().to_vec(),
            ));
        }
        if value.next_producer_id != ProducerId::NONE {
            tags.push((
                TAG_NEXT_PRODUCER_ID,
                value.next_producer_id.0.to_be_bytes().to_vec(),
            ));
        }
        if value.client_transaction_version != 0 {
            tags.push((
                TAG_CLIENT_TRANSACTION_VERSION,
                value.client_transaction_version.to_be_bytes().to_vec(),
            ));
        }
        if value.next_producer_epoch != ProducerEpoch::NONE {
            tags.push((
                TAG_NEXT_PRODUCER_EPOCH,
                value.next_producer_epoch.0.to_be_bytes().to_vec(),
            ));
        }
        put_uvarint(&mut buf, tags.len() as u32);
        for (tag, data) in tags {
            put_uvarint(&mut buf, tag);
            put_uvarint(&mut buf, data.len() as u32);
            buf.put_slice(&data);
        }
    }
    buf.freeze()
}

/// The cursor over an untrusted `__transaction_state` record; its field readers below.
type Reader<'a> = Cursor<'a, RecordError>;

impl From<Truncated> for RecordError {
    fn from(_: Truncated) -> Self {
        RecordError::Truncated
    }
}

impl Reader<'_> {
    fn uvarint(&mut self) -> Result<u32, RecordError> {
        let mut v: u32 = 0;
        for i in 0..5 {
            let [b] = self.array::<1>()?;
            v |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(RecordError::BadVarint)
    }
    fn utf8(&mut self, len: usize) -> Result<String, RecordError> {
        if len > TRANSACTIONAL_ID_LEN_MAX {
            return Err(RecordError::TooLarge {
                len,
                max: TRANSACTIONAL_ID_LEN_MAX,
            });
        }
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| RecordError::BadUtf8)
    }
    fn str(&mut self) -> Result<String, RecordError> {
        let len = self.i16()?;
        let len = usize::try_from(len).map_err(|_| RecordError::BadLength(len.into()))?;
        self.utf8(len)
    }
    fn compact_str(&mut self) -> Result<String, RecordError> {
        let len = self.uvarint()?;
        let len = len.checked_sub(1).ok_or(RecordError::BadLength(-1))?;
        self.utf8(len as usize)
    }
    /// An array length: `None` for null; `Some(n)` capped by `max`.
    fn array_len(&mut self, compact: bool, max: usize) -> Result<Option<usize>, RecordError> {
        let len: i64 = if compact {
            i64::from(self.uvarint()?) - 1
        } else {
            i64::from(self.i32()?)
        };
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| RecordError::BadLength(len))?;
        if len > max {
            return Err(RecordError::TooLarge { len, max });
        }
        Ok(Some(len))
    }
    /// Skips a tagged-field section, calling `known` for each field first.
    fn tagged_fields(
        &mut self,
        mut known: impl FnMut(u32, &[u8]) -> Result<(), RecordError>,
    ) -> Result<(), RecordError> {
        let count = self.uvarint()?;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            let data = self.take(size)?;
            known(tag, data)?;
        }
        Ok(())
    }
}

pub fn decode_key(bytes: &[u8]) -> Result<String, RecordError> {
    let mut r = Reader::new(bytes);
    match r.i16()? {
        KEY_VERSION => r.str(),
        v => Err(RecordError::UnknownKeyVersion(v)),
    }
}

fn tag_i64(data: &[u8]) -> Result<i64, RecordError> {
    Ok(i64::from_be_bytes(
        data.try_into().map_err(|_| RecordError::Truncated)?,
    ))
}

fn tag_i16(data: &[u8]) -> Result<i16, RecordError> {
    Ok(i16::from_be_bytes(
        data.try_into().map_err(|_| RecordError::Truncated)?,
    ))
}

pub fn decode_value(bytes: &[u8]) -> Result<TxnLogValue, RecordError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if !(0..=1).contains(&version) {
        return Err(RecordError::UnknownValueVersion(version));
    }
    let flexible = version >= 1;
    let producer_id = ProducerId(r.i64()?);
    let producer_epoch = ProducerEpoch(r.i16()?);
    let timeout_ms = r.i32()?;
    let state_id = r.i8()?;
    let state = TxnState::from_id(state_id).ok_or(RecordError::UnknownState(state_id))?;
    let mut partitions = BTreeSet::new();
    if let Some(topics) = r.array_len(flexible, TXN_PARTITIONS_MAX)? {
        for _ in 0..topics {
            let topic = if flexible { r.compact_str()? } else { r.str()? };
            let ids = r
                .array_len(flexible, TXN_PARTITIONS_MAX)?
                .ok_or(RecordError::BadLength(-1))?;
            for _ in 0..ids {
                let partition = r.i32()?;
                partitions.insert(TxnPartition {
                    topic: topic.clone(),
                    partition,
                });
            }
            if partitions.len() > TXN_PARTITIONS_MAX {
                return Err(RecordError::TooLarge {
                    len: partitions.len(),
                    max: TXN_PARTITIONS_MAX,
                });
            }
            if flexible {
                r.tagged_fields(|_, _| Ok(()))?;
            }
        }
    }
    if state == TxnState::Empty {
        partitions.clear();
    }
    let last_update_timestamp_ms = r.i64()?;
    let start_timestamp_ms = r.i64()?;
    let mut value = TxnLogValue {
        producer_id,
        prev_producer_id: ProducerId::NONE,
        next_producer_id: ProducerId::NONE,
        next_producer_epoch: ProducerEpoch::NONE,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_timestamp_ms,
        start_timestamp_ms,
        client_transaction_version: 0,
    };
    if flexible {
        r.tagged_fields(|tag, data| {
            match tag {
                TAG_PREVIOUS_PRODUCER_ID => value.prev_producer_id = ProducerId(tag_i64(data)?),
                TAG_NEXT_PRODUCER_ID => value.next_producer_id = ProducerId(tag_i64(data)?),
                TAG_CLIENT_TRANSACTION_VERSION => value.client_transaction_version = tag_i16(data)?,
                TAG_NEXT_PRODUCER_EPOCH => {
                    value.next_producer_epoch = ProducerEpoch(tag_i16(data)?)
                }
                // A tag from a later Kafka: skipped, as its schema says readers must.
                _ => {}
            }
            Ok(())
        })?;
    }
    if !r.remaining().is_empty() {
        return Err(RecordError::Trailing(r.remaining().len()));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(state: TxnState) -> TxnLogValue {
        TxnLogValue {
            producer_id: ProducerId(1000),
            prev_producer_id: ProducerId::NONE,
            next_producer_id: ProducerId::NONE,
            next_producer_epoch: ProducerEpoch::NONE,
            producer_epoch: ProducerEpoch(3),
            timeout_ms: 60_000,
            state,
            partitions: [
                TxnPartition::new("a", 0),
                TxnPartition::new("a", 2),
                TxnPartition::new("b", 1),
            ]
            .into_iter()
            .collect(),
            last_update_timestamp_ms: 1_700_000_000_123,
            start_timestamp_ms: 1_700_000_000_000,
            client_transaction_version: 0,
        }
    }

    /// The key is Kafka's TransactionLogKey v0: version 0, then an i16-length string.
    #[test]
    fn key_golden_bytes() {
        assert_eq!(&encode_key("tx")[..], &[0, 0, 0, 2, b't', b'x']);
        assert_eq!(decode_key(&encode_key("tx")), Ok("tx".to_string()));
        assert_eq!(
            decode_key(&[0, 1, 0, 0]),
            Err(RecordError::UnknownKeyVersion(1))
        );
        assert_eq!(decode_key(&[0, 0, 0, 5, b'a']), Err(RecordError::Truncated));
    }

    /// Value v0, written out by hand from the schema (TransactionLogValue.json): fixed-width
    /// fields, i32 array lengths, i16 strings, no tagged fields.
    #[test]
    fn value_v0_golden_bytes() {
        let v = sample(TxnState::Ongoing);
        let mut want: Vec<u8> = vec![0, 0]; // version 0
        want.extend(1000i64.to_be_bytes());
        want.extend(3i16.to_be_bytes());
        want.extend(60_000i32.to_be_bytes());
        want.push(1); // Ongoing
        want.extend(2i32.to_be_bytes()); // two topics
        want.extend([0, 1, b'a']);
        want.extend(2i32.to_be_bytes());
        want.extend(0i32.to_be_bytes());
        want.extend(2i32.to_be_bytes());
        want.extend([0, 1, b'b']);
        want.extend(1i32.to_be_bytes());
        want.extend(1i32.to_be_bytes());
        want.extend(1_700_000_000_123i64.to_be_bytes());
        want.extend(1_700_000_000_000i64.to_be_bytes());
        assert_eq!(&encode_value(&v, 0)[..], &want[..]);
        assert_eq!(decode_value(&want), Ok(v));
    }

    /// Value v1, by hand from the schema: compact lengths (n + 1), a tagged-field section per
    /// topic entry and at the end, and only non-default tagged fields, in tag order.
    #[test]
    fn value_v1_golden_bytes() {
        let mut v = sample(TxnState::PrepareCommit);
        v.prev_producer_id = ProducerId(999);
        v.client_transaction_version = 1;
        let mut want: Vec<u8> = vec![0, 1]; // version 1
        want.extend(1000i64.to_be_bytes());
        want.extend(3i16.to_be_bytes());
        want.extend(60_000i32.to_be_bytes());
        want.push(2); // PrepareCommit
        want.push(3); // two topics, compact
        want.extend([2, b'a']);
        want.push(3);
        want.extend(0i32.to_be_bytes());
        want.extend(2i32.to_be_bytes());
        want.push(0); // no tags in the entry
        want.extend([2, b'b']);
        want.push(2);
        want.extend(1i32.to_be_bytes());
        want.push(0);
        want.extend(1_700_000_000_123i64.to_be_bytes());
        want.extend(1_700_000_000_000i64.to_be_bytes());
        want.push(2); // two tagged fields
        want.extend([0, 8]);
        want.extend(999i64.to_be_bytes());
        want.extend([2, 2]);
        want.extend(1i16.to_be_bytes());
        assert_eq!(&encode_value(&v, 1)[..], &want[..]);
        assert_eq!(decode_value(&want), Ok(v));
    }

    /// An Empty transaction's partitions are a null array (-1 in v0, 0 in v1), as Kafka
    /// writes them, and partitions found under Empty are ignored on read.
    #[test]
    fn empty_state_has_null_partitions() {
        let mut v = sample(TxnState::Empty);
        v.partitions.clear();
        let v0 = encode_value(&v, 0);
        assert_eq!(&v0[17..21], &(-1i32).to_be_bytes());
        let v1 = encode_value(&v, 1);
        assert_eq!(v1[17], 0);
        assert_eq!(decode_value(&v0), Ok(v.clone()));
        assert_eq!(decode_value(&v1), Ok(v.clone()));
        let ongoing = encode_value(&sample(TxnState::Ongoing), 1);
        let mut as_empty = ongoing.to_vec();
        as_empty[16] = 0; // state byte -> Empty
        assert!(decode_value(&as_empty)
            .expect("decodes")
            .partitions
            .is_empty());
    }

    /// A tag this version does not know is skipped by its size; a bad varint, a negative
    /// length, an unknown state or version, and trailing bytes are errors, not panics.
    #[test]
    fn unknown_tags_and_bad_input() {
        let v = sample(TxnState::Ongoing);
        let mut bytes = encode_value(&v, 1).to_vec();
        let tags_at = bytes.len() - 1;
        assert_eq!(bytes[tags_at], 0);
        bytes.truncate(tags_at);
        bytes.extend([1, 9, 3, 1, 2, 3]); // one field, tag 9, three bytes
        assert_eq!(decode_value(&bytes), Ok(v.clone()));
        let mut junk = bytes.clone();
        junk.push(0);
        assert_eq!(decode_value(&junk), Err(RecordError::Trailing(1)));
        assert_eq!(
            decode_value(&[0, 2]),
            Err(RecordError::UnknownValueVersion(2))
        );
        let mut bad_state = encode_value(&v, 0).to_vec();
        bad_state[16] = 9;
        assert_eq!(decode_value(&bad_state), Err(RecordError::UnknownState(9)));
        let mut negative = encode_value(&v, 0).to_vec();
        negative[17..21].copy_from_slice(&(-2i32).to_be_bytes());
        assert_eq!(decode_value(&negative), Err(RecordError::BadLength(-2)));
        let mut long_varint = encode_value(&v, 1).to_vec();
        long_varint.truncate(17);
        long_varint.extend([0xff; 6]);
        assert_eq!(decode_value(&long_varint), Err(RecordError::BadVarint));
    }

    fn arb_value() -> impl Strategy<Value = TxnLogValue> {
        (
            any::<i64>(),
            any::<i64>(),
            any::<i64>(),
            any::<i16>(),
            any::<i16>(),
            any::<i32>(),
            0usize..TxnState::ALL.len(),
            proptest::collection::btree_set(("[a-z._-]{1,12}", 0i32..64), 0..12),
            any::<i64>(),
            any::<i64>(),
            any::<i16>(),
        )
            .prop_map(
                |(pid, prev, next, next_epoch, epoch, timeout, s, parts, upd, start, ctv)| {
                    let state = TxnState::ALL[s];
                    TxnLogValue {
                        producer_id: ProducerId(pid),
                        prev_producer_id: ProducerId(prev),
                        next_producer_id: ProducerId(next),
                        next_producer_epoch: ProducerEpoch(next_epoch),
                        producer_epoch: ProducerEpoch(epoch),
                        timeout_ms: timeout,
                        state,
                        partitions: if state == TxnState::Empty {
                            BTreeSet::new()
                        } else {
                            parts
                                .into_iter()
                                .map(|(t, p)| TxnPartition {
                                    topic: t,
                                    partition: p,
                                })
                                .collect()
                        },
                        last_update_timestamp_ms: upd,
                        start_timestamp_ms: start,
                        client_transaction_version: ctv,
                    }
                },
            )
    }

    proptest! {
        /// Every value round-trips through v1 exactly, and through v0 with the tagged fields
        /// at their defaults; every strict prefix of an encoding is an error.
        #[test]
        fn round_trips(v in arb_value()) {
            let v1 = encode_value(&v, 1);
            prop_assert_eq!(decode_value(&v1), Ok(v.clone()));
            let v0 = encode_value(&v, 0);
            let back = decode_value(&v0).expect("v0 decodes");
            prop_assert_eq!(back, TxnLogValue {
                prev_producer_id: ProducerId::NONE,
                next_producer_id: ProducerId::NONE,
                next_producer_epoch: ProducerEpoch::NONE,
                client_transaction_version: 0,
                ..v
            });
            for cut in 0..v1.len() {
                prop_assert!(decode_value(&v1[..cut]).is_err());
            }
        }

        /// Arbitrary bytes never panic the decoders.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_value(&bytes);
            let _ = decode_key(&bytes);
        }
    }
}
