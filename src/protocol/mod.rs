//! The Kafka wire protocol: pure functions over bytes, no I/O and no executor types.
//! Message codecs come from the kafka-protocol crate; what is Strata's own lives here: the
//! record batch format, the table of versions we implement, framing and error mapping.
pub mod api_versions;
pub mod error;
pub mod frame;
pub mod fuzz;
pub mod inflate;
pub mod partition_key;
pub mod produce_batch;
pub mod record_batch;

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
