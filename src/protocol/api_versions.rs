//! The APIs and versions Strata implements. ApiVersions advertises exactly this table, and
//! the dispatcher refuses anything outside it, so the two can never disagree.
use kafka_protocol::messages::ApiKey;

/// (api, min version, max version) that the broker handles.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::Metadata, 0, 12),
    // v4 (KAFKA-17011) only lets SupportedFeatures.MinVersion be 0; Strata lists no features.
    // Kafka 4 clients open every connection with v4 and, refused, ask again with v3.
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
    // Between brokers: a transaction coordinator's COMMIT/ABORT markers (v1 only, as Kafka 4).
    (ApiKey::WriteTxnMarkers, 1, 1),
    // Transactions (transaction version 1). AddPartitionsToTxn v4+ is the broker-batched
    // form (KIP-890 part 1): partition leaders verify transactional produce with it. EndTxn v5
    // and InitProducerId v5 belong to transaction version 2.
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeCluster, 0, 1),
    // Replica sizes; Strata's tagged fields add a compacted log's cleaner state (v2+).
    (ApiKey::DescribeLogDirs, 1, 4),
    // Kafka 4's admin client describes topics with it (Metadata only as a fallback).
    (ApiKey::DescribeTopicPartitions, 0, 0),
    // Cluster administration, served by the active controller. AlterPartitionReassignments
    // stops at v0: v1's allow_replication_factor_change is not implemented.
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 0),
    (ApiKey::ListPartitionReassignments, 0, 0),
    // Consumer groups (classic protocol). FindCoordinator stops at v4 (v5/v6 add error
    // codes and key types for transactions and share groups, not implemented); OffsetCommit
    // starts at v2 and OffsetFetch at v1 because the codec does not go lower; DescribeGroups
    // stops at v5 (v6 belongs to KIP-848's new protocol).
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    // Offsets committed inside a transaction (KIP-98; member fields v3+, KIP-447). v5 means
    // the client relies on KIP-890's server-side transaction verification, not implemented.
    (ApiKey::TxnOffsetCommit, 0, 4),
    // Finding and aborting hanging transactions (KIP-664, `kafka-transactions.sh`);
    // ListTransactions v1 adds the duration filter (KIP-994), v2 the id pattern (KIP-1152).
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 2),
    // SASL authentication (server::sasl): the handshake v0 is followed by raw tokens, v1 by
    // SaslAuthenticate; SaslAuthenticate v1+ carries the session lifetime (KIP-368).
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    // SCRAM credentials in the metadata log (KIP-554).
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    // Client quotas in the metadata log (KIP-546); v1 is the flexible encoding.
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    // ACLs in the metadata log (KIP-140, pattern types KIP-290); v0 left with Kafka 4
    // (KIP-896), v2 is the flexible encoding.
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
];

/// The supported version range of `api`, if Strata implements it.
pub fn range(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == api)
        .map(|(_, lo, hi)| (*lo, *hi))
}

/// Whether `version` of `api` is implemented.
pub fn is_supported(api: ApiKey, version: i16) -> bool {
    range(api).is_some_and(|(lo, hi)| (lo..=hi).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every advertised range lies inside what the codec crate can encode and decode.
    #[test]
    fn advertised_ranges_are_codable() {
        for (api, lo, hi) in SUPPORTED {
            let codec = api.valid_versions();
            assert!(
                codec.min <= *lo && *hi <= codec.max,
                "{api:?} {lo}..{hi} vs {codec}"
            );
            assert!(lo <= hi);
        }
    }
}
