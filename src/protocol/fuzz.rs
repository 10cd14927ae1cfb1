//! One entry point that runs the whole request-decoding path the broker runs on bytes from
//! the network: frame header, then the body of every API the dispatcher decodes, then the
//! record batches inside a Produce request. Shared by the unit test below and the cargo-fuzz
//! target in `fuzz/`, so both exercise exactly the same code.
//!
//! Invariant under test: no input makes this panic or abort. Decoder panics are caught by
//! [`crate::alloc::guarded`] (so the broker survives them), but the unit test also counts
//! them, and the fuzz target aborts on any panic, so a decoder that relies on the guard is
//! still reported.
use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestKind};

use super::api_versions;
use super::frame::{parse_request, FrameError};
use super::record_batch::BatchIter;

/// Parses the header of `frame` (without its size prefix) and decodes its body if the
/// dispatcher would: ApiVersions at any version it supports, other APIs only inside
/// [`api_versions::SUPPORTED`]. Produce record sets are then split into batches.
pub fn decode_any(frame: Bytes) -> Result<(), FrameError> {
    let raw = parse_request(frame)?;
    let api = raw.api;
    let version = raw.header.request_api_version;
    if !api_versions::is_supported(api, version) {
        // The dispatcher answers unsupported ApiVersions requests without reading the body,
        // and refuses every other unsupported request.
        return Err(FrameError::BadHeader(format!(
            "{api:?} v{version} is not supported"
        )));
    }
    let mut body = raw.body.clone();
    let request =
        crate::alloc::guarded(|| RequestKind::decode(api, &mut body, version)).map_err(|e| {
            FrameError::BadBody {
                api,
                version,
                message: e.to_string(),
            }
        })?;
    if let RequestKind::Produce(produce) = request {
        for topic in &produce.topic_data {
            for partition in &topic.partition_data {
                let Some(records) = &partition.records else {
                    continue;
                };
                // Stop at the first error, as the produce path does.
                for item in BatchIter::new(records) {
                    if item.is_err() {
                        break;
                    }
                }
            }
        }
    }
    Ok(())
}

/// `(api, version)` for every request the broker decodes: the `SUPPORTED` table, which
/// includes ApiVersions.
pub fn decoded_versions() -> impl Iterator<Item = (ApiKey, i16)> {
    api_versions::SUPPORTED
        .iter()
        .flat_map(|&(api, lo, hi)| (lo..=hi).map(move |v| (api, v)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use std::cell::Cell;
    use std::sync::Once;

    use bytes::BytesMut;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, StrBytes};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    thread_local! {
        /// Panics raised on this thread, including those `guarded` later catches.
        static PANICS: Cell<usize> = const { Cell::new(0) };
    }

    /// Counts panics per thread, then defers to the previous hook so messages still print.
    fn count_panics() {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                PANICS.with(|c| c.set(c.get() + 1));
                previous(info);
            }));
        });
    }

    /// A Produce request carrying one real record batch, so mutations reach `BatchIter`.
    fn produce_request() -> ProduceRequest {
        let record = Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from_static(b"key")),
            value: Some(Bytes::from_static(b"value")),
            headers: Default::default(),
        };
        let mut batch = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut batch, [&record, &record], &options).unwrap();
        let partition = PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(batch.freeze()));
        let topic = TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![partition]);
        ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(1000)
            .with_topic_data(vec![topic])
    }

    fn default_request(api: ApiKey) -> RequestKind {
        match api {
            ApiKey::Produce => RequestKind::Produce(produce_request()),
            ApiKey::Fetch => RequestKind::Fetch(FetchRequest::default()),
            ApiKey::ListOffsets => RequestKind::ListOffsets(ListOffsetsRequest::default()),
            ApiKey::Metadata => RequestKind::Metadata(MetadataRequest::default()),
            ApiKey::ApiVersions => RequestKind::ApiVersions(ApiVersionsRequest::default()),
            ApiKey::CreateTopics => RequestKind::CreateTopics(CreateTopicsRequest::default()),
            ApiKey::DeleteTopics => RequestKind::DeleteTopics(DeleteTopicsRequest::default()),
            ApiKey::DeleteRecords => RequestKind::DeleteRecords(DeleteRecordsRequest::default()),
            ApiKey::InitProducerId => RequestKind::InitProducerId(InitProducerIdRequest::default()),
            ApiKey::WriteTxnMarkers => {
                RequestKind::WriteTxnMarkers(WriteTxnMarkersRequest::default())
            }
            ApiKey::AddPartitionsToTxn => {
                RequestKind::AddPartitionsToTxn(AddPartitionsToTxnRequest::default())
            }
            ApiKey::AddOffsetsToTxn => {
                RequestKind::AddOffsetsToTxn(AddOffsetsToTxnRequest::default())
            }
            ApiKey::EndTxn => RequestKind::EndTxn(EndTxnRequest::default()),
            ApiKey::DescribeConfigs => {
                RequestKind::DescribeConfigs(DescribeConfigsRequest::default())
            }
            ApiKey::IncrementalAlterConfigs => {
                RequestKind::IncrementalAlterConfigs(IncrementalAlterConfigsRequest::default())
            }
            ApiKey::CreatePartitions => {
                RequestKind::CreatePartitions(CreatePartitionsRequest::default())
            }
            ApiKey::DescribeCluster => {
                RequestKind::DescribeCluster(DescribeClusterRequest::default())
            }
            ApiKey::DescribeTopicPartitions => {
                RequestKind::DescribeTopicPartitions(DescribeTopicPartitionsRequest::default())
            }
            ApiKey::FindCoordinator => {
                RequestKind::FindCoordinator(FindCoordinatorRequest::default())
            }
            ApiKey::JoinGroup => RequestKind::JoinGroup(JoinGroupRequest::default()),
            ApiKey::SyncGroup => RequestKind::SyncGroup(SyncGroupRequest::default()),
            ApiKey::Heartbeat => RequestKind::Heartbeat(HeartbeatRequest::default()),
            ApiKey::LeaveGroup => RequestKind::LeaveGroup(LeaveGroupRequest::default()),
            ApiKey::OffsetCommit => RequestKind::OffsetCommit(OffsetCommitRequest::default()),
            ApiKey::OffsetFetch => RequestKind::OffsetFetch(OffsetFetchRequest::default()),
            ApiKey::DescribeGroups => RequestKind::DescribeGroups(DescribeGroupsRequest::default()),
            ApiKey::ListGroups => RequestKind::ListGroups(ListGroupsRequest::default()),
            ApiKey::DeleteGroups => RequestKind::DeleteGroups(DeleteGroupsRequest::default()),
            ApiKey::OffsetDelete => RequestKind::OffsetDelete(OffsetDeleteRequest::default()),
            ApiKey::TxnOffsetCommit => {
                RequestKind::TxnOffsetCommit(TxnOffsetCommitRequest::default())
            }
            ApiKey::ElectLeaders => RequestKind::ElectLeaders(ElectLeadersRequest::default()),
            ApiKey::OffsetForLeaderEpoch => {
                RequestKind::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest::default())
            }
            ApiKey::AlterPartitionReassignments => RequestKind::AlterPartitionReassignments(
                AlterPartitionReassignmentsRequest::default(),
            ),
            ApiKey::ListPartitionReassignments => {
                RequestKind::ListPartitionReassignments(ListPartitionReassignmentsRequest::default())
            }
            ApiKey::DescribeLogDirs => {
                RequestKind::DescribeLogDirs(DescribeLogDirsRequest::default())
            }
            ApiKey::DescribeProducers => {
                RequestKind::DescribeProducers(DescribeProducersRequest::default())
            }
            ApiKey::DescribeTransactions => {
                RequestKind::DescribeTransactions(DescribeTransactionsRequest::default())
            }
            ApiKey::SaslHandshake => RequestKind::SaslHandshake(
                SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
            ),
            ApiKey::SaslAuthenticate => RequestKind::SaslAuthenticate(
                SaslAuthenticateRequest::default()
                    .with_auth_bytes(Bytes::from_static(b"\0user\0pencil")),
            ),
            ApiKey::DescribeUserScramCredentials => RequestKind::DescribeUserScramCredentials(
                DescribeUserScramCredentialsRequest::default(),
            ),
            ApiKey::AlterUserScramCredentials => {
                RequestKind::AlterUserScramCredentials(AlterUserScramCredentialsRequest::default())
            }
            ApiKey::ListTransactions => {
                RequestKind::ListTransactions(ListTransactionsRequest::default())
            }
            ApiKey::DescribeClientQuotas => RequestKind::DescribeClientQuotas(
                DescribeClientQuotasRequest::default().with_components(vec![
                    describe_client_quotas_request::ComponentData::default()
                        .with_entity_type(StrBytes::from_static_str("client-id"))
                        .with_match_type(0)
                        .with_match(Some(StrBytes::from_static_str("app"))),
                ]),
            ),
            ApiKey::AlterClientQuotas => RequestKind::AlterClientQuotas(
                AlterClientQuotasRequest::default()
                    .with_validate_only(true)
                    .with_entries(vec![alter_client_quotas_request::EntryData::default()
                        .with_entity(vec![alter_client_quotas_request::EntityData::default()
                            .with_entity_type(StrBytes::from_static_str("user"))])
                        .with_ops(vec![alter_client_quotas_request::OpData::default()
                            .with_key(StrBytes::from_static_str("producer_byte_rate"))
                            .with_value(1024.0)])]),
            ),
            ApiKey::DescribeAcls => RequestKind::DescribeAcls(
                kafka_protocol::messages::DescribeAclsRequest::default()
                    .with_resource_type_filter(2)
                    .with_resource_name_filter(Some(StrBytes::from_static_str("t")))
                    .with_pattern_type_filter(2)
                    .with_operation(1)
                    .with_permission_type(1),
            ),
            ApiKey::CreateAcls => RequestKind::CreateAcls(
                kafka_protocol::messages::CreateAclsRequest::default().with_creations(vec![
                    kafka_protocol::messages::create_acls_request::AclCreation::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str("t"))
                        .with_resource_pattern_type(3)
                        .with_principal(StrBytes::from_static_str("User:alice"))
                        .with_host(StrBytes::from_static_str("*"))
                        .with_operation(3)
                        .with_permission_type(3),
                ]),
            ),
            ApiKey::DeleteAcls => RequestKind::DeleteAcls(
                kafka_protocol::messages::DeleteAclsRequest::default().with_filters(vec![
                    kafka_protocol::messages::delete_acls_request::DeleteAclsFilter::default()
                        .with_resource_type_filter(1)
                        .with_pattern_type_filter(1)
                        .with_operation(1)
                        .with_permission_type(1),
                ]),
            ),
            other => panic!("{other:?} is in SUPPORTED but has no test request"),
        }
    }

    /// A whole frame (without size prefix) for a default-valued request (Produce: one batch) of `api` v`version`.
    fn encode_frame(api: ApiKey, version: i16) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("strata-fuzz")));
        let mut out = BytesMut::new();
        header
            .encode(&mut out, api.request_header_version(version))
            .unwrap();
        default_request(api).encode(&mut out, version).unwrap();
        out.freeze()
    }

    /// One random edit: flip, overwrite, insert, delete, truncate, or splice in a large
    /// length/count (the values that stress pre-allocation).
    fn mutate(rng: &mut StdRng, frame: &mut Vec<u8>) {
        let len = frame.len();
        let at = if len == 0 { 0 } else { rng.gen_range(0..len) };
        match rng.gen_range(0..6) {
            0 if len > 0 => frame[at] ^= 1 << rng.gen_range(0..8),
            1 if len > 0 => frame[at] = rng.gen(),
            2 => frame.insert(at, rng.gen()),
            3 if len > 0 => {
                frame.remove(at);
            }
            4 => frame.truncate(at),
            _ => {
                let big: [u8; 4] = *[
                    [0x7f, 0xff, 0xff, 0xff],
                    [0xff, 0xff, 0xff, 0xff],
                    [0x80, 0, 0, 0],
                    [0xff, 0xff, 0xff, 0x0f],
                ]
                .get(rng.gen_range(0..4))
                .unwrap();
                let end = (at + 4).min(len);
                frame.splice(at..end, big);
            }
        }
    }

    // Proves every advertised (api, version) decodes its own default-valued encoding, so the
    // mutation test below starts from frames the broker really accepts. With
    // STRATA_FUZZ_SEEDS=<dir> it also writes those frames there as the fuzzer's seed corpus.
    #[test]
    fn every_supported_version_decodes_its_encoding() {
        let seeds = std::env::var_os("STRATA_FUZZ_SEEDS").map(std::path::PathBuf::from);
        for (api, version) in decoded_versions() {
            let frame = encode_frame(api, version);
            if let Some(dir) = &seeds {
                std::fs::create_dir_all(dir).unwrap();
                std::fs::write(dir.join(format!("{api:?}-v{version}")), &frame).unwrap();
            }
            if let Err(e) = decode_any(frame) {
                panic!("{api:?} v{version}: {e}");
            }
        }
    }

    // Proves 20k random byte strings and random mutations of valid requests of every
    // supported API and version never panic the decoder, not even inside `guarded`.
    #[test]
    fn random_and_mutated_frames_never_panic() {
        count_panics();
        let seed: u64 = std::env::var("STRATA_FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5eed_f00d);
        let mut rng = StdRng::seed_from_u64(seed);
        let valid: Vec<Vec<u8>> = decoded_versions()
            .map(|(api, version)| encode_frame(api, version).to_vec())
            .collect();
        let run = |frame: Vec<u8>| {
            let before = PANICS.with(Cell::get);
            let _ = decode_any(Bytes::from(frame.clone()));
            let after = PANICS.with(Cell::get);
            assert_eq!(
                before, after,
                "seed {seed}: decoder panicked on {frame:02x?}"
            );
        };
        for _ in 0..20_000 {
            let len = rng.gen_range(0..256);
            let mut frame: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            // Aim half of the random strings at a real API and version so they get past
            // the header check and reach a body decoder.
            if len >= 4 && rng.gen_bool(0.5) {
                let (api, version) = decoded_versions()
                    .nth(rng.gen_range(0..valid.len()))
                    .unwrap();
                frame[..2].copy_from_slice(&(api as i16).to_be_bytes());
                frame[2..4].copy_from_slice(&version.to_be_bytes());
            }
            run(frame);
        }
        for _ in 0..20_000 {
            let mut frame = valid[rng.gen_range(0..valid.len())].clone();
            for _ in 0..rng.gen_range(1..=4) {
                mutate(&mut rng, &mut frame);
            }
            run(frame);
        }
    }
}
