//! One file per Kafka API. Each handler takes the decoded request and returns the response
//! body; framing and version checks happen in `dispatch`.
pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_client_quotas;
pub mod alter_partition_reassignments;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod write_txn_markers;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

/// Wire string from a Rust string.
/// Encodes `value` at `version` and decodes it back, requiring every byte to be consumed:
/// the handlers' tests check each advertised version this way.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn round_trip<T>(value: &T, version: i16) -> T
where
    T: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::Decodable,
{
    let mut buf = bytes::BytesMut::new();
    value.encode(&mut buf, version).unwrap();
    let mut bytes = buf.freeze();
    let back = T::decode(&mut bytes, version).unwrap();
    assert!(bytes.is_empty(), "v{version} trailing bytes");
    back
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Wire topic name from a Rust string.
pub fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}
