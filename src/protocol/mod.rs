//! The Kafka wire protocol: pure functions over bytes, no I/O and no executor types.
//! Message codecs come from the kafka-protocol crate; what is Strata's own lives here: the
//! record batch format, the table of versions we implement, framing and error mapping.
pub mod api_versions;
pub mod control;
pub mod cursor;
pub mod error;
pub mod frame;
pub mod fuzz;
pub mod ids;
pub mod inflate;
pub mod partition_key;
pub mod produce_batch;
pub mod producer;
pub mod record_batch;
pub mod throttle;

/// The tagged field Strata adds to a Metadata response partition (v9+, KIP-482) to say why
/// replicas are offline: a JSON object, node id -> reason, read by `strata cluster status`.
/// Kafka's message has no place for a reason, and clients skip tags they do not know; Kafka's
/// own tags on this structure count up from 0, so this number stays clear of them.
pub const OFFLINE_REASONS_TAG: i32 = 0x5354;

/// Encodes the offline reasons for `OFFLINE_REASONS_TAG`.
pub fn encode_offline_reasons(reasons: &std::collections::BTreeMap<i32, String>) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(reasons).unwrap_or_default())
}

/// Decodes `OFFLINE_REASONS_TAG`; bytes from the network that do not parse give no reasons.
pub fn decode_offline_reasons(bytes: &[u8]) -> std::collections::BTreeMap<i32, String> {
    serde_json::from_slice(bytes).unwrap_or_default()
}

/// The tagged fields Strata adds to a DescribeLogDirs response partition (v2+) of a
/// compacted log, read by `strata topic describe`: the cleaner's dirty ratio (an f64,
/// big-endian) and its checkpoint, where the last pass ended (an i64, big-endian; absent
/// before the first pass). Kafka shows neither on the wire; clients skip unknown tags.
pub const DIRTY_RATIO_TAG: i32 = 0x5355;
/// See [`DIRTY_RATIO_TAG`].
pub const CLEANER_CHECKPOINT_TAG: i32 = 0x5356;

/// Decodes an 8-byte big-endian tag value; anything else from the network gives `None`.
pub fn decode_tag_8(bytes: &[u8]) -> Option<[u8; 8]> {
    <[u8; 8]>::try_from(bytes).ok()
}
