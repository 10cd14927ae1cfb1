//! The records the coordinator writes to `__consumer_offsets`, in Kafka's own layout so the
//! log can be read by Kafka tooling:
//!
//! - offset commit: key `OffsetCommitKey` v1 = `[i16 1][str group][str topic][i32 partition]`,
//!   value `OffsetCommitValue` v3 = `[i16 3][i64 offset][i32 leader_epoch][str metadata]
//!   [i64 commit_timestamp]`;
//! - group metadata: key `GroupMetadataKey` v2 = `[i16 2][str group]`, value
//!   `GroupMetadataValue` v3 = `[i16 3][str protocol_type][i32 generation][nstr protocol]
//!   [nstr leader][i64 current_state_timestamp][i32 n] n × ([str member_id][nstr instance_id]
//!   [str client_id][str client_host][i32 rebalance_timeout][i32 session_timeout]
//!   [bytes subscription][bytes assignment])`.
//!
//! Strings are i16-length-prefixed (-1 = null), bytes i32-length-prefixed. A null record
//! value is a tombstone (offset deleted, group deleted). The log is compacted (the cleaner
//! keeps the last record per key and drops tombstones after delete.retention.ms); replay
//! reads whatever is left, in offset order, and the last write for a key wins.
//!
//! Decoding never trusts the bytes: every read is bounds-checked and returns `RecordError`.
use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use super::limits::GROUP_METADATA_BYTES_MAX;
use crate::protocol::cursor::{Cursor, Truncated};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record truncated")]
    Truncated,
    #[error("unknown record key version {0}")]
    UnknownKeyVersion(i16),
    #[error("unsupported record value version {0}")]
    UnknownValueVersion(i16),
    #[error("string is not UTF-8")]
    BadUtf8,
    #[error("negative length {0}")]
    BadLength(i32),
    #[error("field of {len} bytes exceeds {max}")]
    TooLarge { len: usize, max: usize },
}

/// Which record a key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
}

/// A committed offset as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// One member in a stored group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A group's membership as stored after a rebalance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp_ms: i64,
    pub members: Vec<StoredMember>,
}

const OFFSET_KEY_VERSION: i16 = 1;
const GROUP_KEY_VERSION: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_VALUE_VERSION: i16 = 3;

fn put_str(buf: &mut BytesMut, s: &str) {
    // Names are bounded well below i16::MAX by the request decoder; clamp rather than wrap.
    let len = s.len().min(i16::MAX as usize);
    buf.put_i16(len as i16);
    buf.put_slice(s.as_bytes().get(..len).unwrap_or_default());
}

fn put_nstr(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(buf, s),
        None => buf.put_i16(-1),
    }
}

fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    buf.put_i32(b.len() as i32);
    buf.put_slice(b);
}

pub fn encode_key(key: &RecordKey) -> Bytes {
    let mut buf = BytesMut::new();
    match key {
        RecordKey::Offset {
            group,
            topic,
            partition,
        } => {
            buf.put_i16(OFFSET_KEY_VERSION);
            put_str(&mut buf, group);
            put_str(&mut buf, topic);
            buf.put_i32(*partition);
        }
        RecordKey::Group { group } => {
            buf.put_i16(GROUP_KEY_VERSION);
            put_str(&mut buf, group);
        }
    }
    buf.freeze()
}

pub fn encode_offset(v: &OffsetValue) -> Bytes {
    let mut buf = BytesMut::with_capacity(32 + v.metadata.len());
    buf.put_i16(OFFSET_VALUE_VERSION);
    buf.put_i64(v.offset);
    buf.put_i32(v.leader_epoch);
    put_str(&mut buf, &v.metadata);
    buf.put_i64(v.commit_timestamp_ms);
    buf.freeze()
}

pub fn encode_group(v: &GroupValue) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(GROUP_VALUE_VERSION);
    put_str(&mut buf, &v.protocol_type);
    buf.put_i32(v.generation);
    put_nstr(&mut buf, v.protocol.as_deref());
    put_nstr(&mut buf, v.leader.as_deref());
    buf.put_i64(v.current_state_timestamp_ms);
    buf.put_i32(v.members.len() as i32);
    for m in &v.members {
        put_str(&mut buf, &m.member_id);
        put_nstr(&mut buf, m.group_instance_id.as_deref());
        put_str(&mut buf, &m.client_id);
        put_str(&mut buf, &m.client_host);
        buf.put_i32(m.rebalance_timeout_ms);
        buf.put_i32(m.session_timeout_ms);
        put_bytes(&mut buf, &m.subscription);
        put_bytes(&mut buf, &m.assignment);
    }
    buf.freeze()
}

/// The cursor over an untrusted `__consumer_offsets` record; its field readers below.
type Reader<'a> = Cursor<'a, RecordError>;

impl From<Truncated> for RecordError {
    fn from(_: Truncated) -> Self {
        RecordError::Truncated
    }
}

impl Reader<'_> {
    fn nstr(&mut self) -> Result<Option<String>, RecordError> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let b = self.take(len as usize)?;
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| RecordError::BadUtf8)
    }
    fn str(&mut self) -> Result<String, RecordError> {
        Ok(self.nstr()?.unwrap_or_default())
    }
    fn bytes(&mut self) -> Result<Bytes, RecordError> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(Bytes::new());
        }
        let len = len as usize;
        if len > GROUP_METADATA_BYTES_MAX {
            return Err(RecordError::TooLarge {
                len,
                max: GROUP_METADATA_BYTES_MAX,
            });
        }
        Ok(Bytes::copy_from_slice(self.take(len)?))
    }
}

pub fn decode_key(bytes: &[u8]) -> Result<RecordKey, RecordError> {
    let mut r = Reader::new(bytes);
    match r.i16()? {
        // Kafka's v0 and v1 offset keys share a layout.
        0 | OFFSET_KEY_VERSION => Ok(RecordKey::Offset {
            group: r.str()?,
            topic: r.str()?,
            partition: r.i32()?,
        }),
        GROUP_KEY_VERSION => Ok(RecordKey::Group { group: r.str()? }),
        v => Err(RecordError::UnknownKeyVersion(v)),
    }
}

pub fn decode_offset(bytes: &[u8]) -> Result<OffsetValue, RecordError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if version != OFFSET_VALUE_VERSION {
        return Err(RecordError::UnknownValueVersion(version));
    }
    Ok(OffsetValue {
        offset: r.i64()?,
        leader_epoch: r.i32()?,
        metadata: r.str()?,
        commit_timestamp_ms: r.i64()?,
    })
}

pub fn decode_group(bytes: &[u8]) -> Result<GroupValue, RecordError> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if version != GROUP_VALUE_VERSION {
        return Err(RecordError::UnknownValueVersion(version));
    }
    let protocol_type = r.str()?;
    let generation = r.i32()?;
    let protocol = r.nstr()?;
    let leader = r.nstr()?;
    let current_state_timestamp_ms = r.i64()?;
    let count = r.i32()?;
    if count < 0 {
        return Err(RecordError::BadLength(count));
    }
    let count = count as usize;
    if count > super::limits::GROUP_MEMBERS_MAX {
        return Err(RecordError::TooLarge {
            len: count,
            max: super::limits::GROUP_MEMBERS_MAX,
        });
    }
    let mut members = Vec::with_capacity(count);
    for _ in 0..count {
        members.push(StoredMember {
            member_id: r.str()?,
            group_instance_id: r.nstr()?,
            client_id: r.str()?,
            client_host: r.str()?,
            rebalance_timeout_ms: r.i32()?,
            session_timeout_ms: r.i32()?,
            subscription: r.bytes()?,
            assignment: r.bytes()?,
        });
    }
    Ok(GroupValue {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp_ms,
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys and values decode to what was encoded, and truncated input is an error, not a panic.
    #[test]
    fn round_trip_and_truncation() {
        let key = RecordKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 3,
        };
        assert_eq!(decode_key(&encode_key(&key)), Ok(key));
        let gk = RecordKey::Group { group: "g".into() };
        assert_eq!(decode_key(&encode_key(&gk)), Ok(gk));
        let ov = OffsetValue {
            offset: 42,
            leader_epoch: -1,
            metadata: "m".into(),
            commit_timestamp_ms: 7,
        };
        assert_eq!(decode_offset(&encode_offset(&ov)), Ok(ov));
        let gv = GroupValue {
            protocol_type: "consumer".into(),
            generation: 4,
            protocol: Some("range".into()),
            leader: Some("a".into()),
            current_state_timestamp_ms: 9,
            members: vec![StoredMember {
                member_id: "a".into(),
                group_instance_id: Some("i".into()),
                client_id: "c".into(),
                client_host: "/h".into(),
                rebalance_timeout_ms: 1,
                session_timeout_ms: 2,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        };
        let enc = encode_group(&gv);
        assert_eq!(decode_group(&enc), Ok(gv));
        for cut in 0..enc.len() {
            assert!(decode_group(&enc[..cut]).is_err());
        }
        assert_eq!(decode_key(&[0, 9]), Err(RecordError::UnknownKeyVersion(9)));
    }
}
