//! `throttle_time_ms` in an encoded response: where it sits, and raising it in place.
//!
//! The request-time quota (`request_percentage`, KIP-124) is only known once a request has
//! been served — its cost is the time its handler took — so its throttle is decided after
//! the response is encoded. Rather than teach every handler about quotas, the dispatch path
//! raises the field in the encoded frame. In every response that has the field it is the
//! body's first field (OffsetDelete: after its top-level error code), at a fixed offset
//! after the frame's size prefix and response header, so no decoding is needed.
//!
//! Produce is the exception: the field is the body's last, after the partition responses
//! (then, in its flexible versions, the body's tagged fields, which Strata leaves empty), so
//! it is found from the frame's end. Produce sets its own byte-rate throttle there, and the
//! request-time throttle raises it when larger: the response carries the larger of the two,
//! as Kafka's (KIP-124: both are recorded, the answer and the mute take the max).
//! ApiVersions (the field after the API list) is answered before quotas are looked up.
use kafka_protocol::messages::ApiKey;

/// Where the field is in a response's body, and from which version it exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// The body's first field, from this version on.
    First(i16),
    /// After the body's leading 2-byte error code, from this version on.
    AfterErrorCode(i16),
    /// The body's last field (before an empty tagged-field section in flexible versions),
    /// from this version on.
    Last(i16),
}

fn field(api: ApiKey) -> Option<Field> {
    use ApiKey::*;
    use Field::*;
    Some(match api {
        Produce => Last(1),
        Fetch => First(1),
        ListOffsets => First(2),
        Metadata => First(3),
        OffsetCommit | OffsetFetch => First(3),
        FindCoordinator | Heartbeat | LeaveGroup | SyncGroup | DescribeGroups | ListGroups => {
            First(1)
        }
        JoinGroup => First(2),
        CreateTopics => First(2),
        DeleteTopics => First(1),
        OffsetForLeaderEpoch => First(2),
        DeleteGroups
        | DeleteRecords
        | InitProducerId
        | AddPartitionsToTxn
        | AddOffsetsToTxn
        | EndTxn
        | TxnOffsetCommit
        | DescribeAcls
        | CreateAcls
        | DeleteAcls
        | DescribeConfigs
        | AlterConfigs
        | DescribeLogDirs
        | CreatePartitions
        | ElectLeaders
        | IncrementalAlterConfigs
        | AlterPartitionReassignments
        | ListPartitionReassignments
        | DescribeClientQuotas
        | AlterClientQuotas
        | DescribeUserScramCredentials
        | AlterUserScramCredentials
        | DescribeCluster
        | DescribeProducers
        | DescribeTransactions
        | ListTransactions
        | DescribeTopicPartitions => First(0),
        OffsetDelete => AfterErrorCode(0),
        _ => return None,
    })
}

/// Does the response to `api` at `version` have a `throttle_time_ms` this module can find?
pub fn has_field(api: ApiKey, version: i16) -> bool {
    match field(api) {
        Some(Field::First(min) | Field::AfterErrorCode(min) | Field::Last(min)) => version >= min,
        None => false,
    }
}

/// Is the field found from the frame's end (it is in the last chunk of a chunked frame)?
pub fn is_last(api: ApiKey) -> bool {
    matches!(field(api), Some(Field::Last(_)))
}

/// The offset of `throttle_time_ms` in the encoded frame (size prefix included) of the
/// response to `api` at `version`, or `None` if that response has no such field here, or
/// (a field at the end) the frame is too short or ends in tagged fields it cannot skip.
pub fn offset(api: ApiKey, version: i16, frame: &[u8]) -> Option<usize> {
    // Size prefix, correlation id, and (response header v1) an empty tagged-field count.
    let flexible = api.response_header_version(version) >= 1;
    let header = 4 + 4 + usize::from(flexible);
    match field(api)? {
        Field::First(min) if version >= min => Some(header),
        Field::AfterErrorCode(min) if version >= min => Some(header + 2),
        Field::Last(min) if version >= min => {
            // A flexible body ends in its tagged-field count: 0 (one byte) is the only one
            // this knows how to step over.
            if flexible && frame.last() != Some(&0) {
                return None;
            }
            frame
                .len()
                .checked_sub(4 + usize::from(flexible))
                .filter(|at| *at >= header)
        }
        _ => None,
    }
}

/// Raises the `throttle_time_ms` of an encoded response frame to `ms` (a larger value
/// already there, say a byte-rate throttle, stays). `false` when the response has no such
/// field or the frame is too short to hold it (then nothing is changed).
pub fn raise(api: ApiKey, version: i16, frame: &mut [u8], ms: i32) -> bool {
    let Some(at) = offset(api, version, frame) else {
        return false;
    };
    let Some(field) = frame.get_mut(at..at + 4) else {
        return false;
    };
    let current = <[u8; 4]>::try_from(&*field).map_or(0, i32::from_be_bytes);
    if ms > current {
        field.copy_from_slice(&ms.to_be_bytes());
    }
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::protocol::api_versions::SUPPORTED;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::Encodable;

    /// Encodes a default response of `api` at `version`, raises its throttle to 1234, decodes
    /// it back and returns the decoded `throttle_time_ms` (None: no field to raise).
    macro_rules! round_trip {
        ($api:expr, $version:expr, $($name:ident => $ty:ty),* $(,)?) => {
            match $api {
                $(ApiKey::$name => {
                    let body = <$ty>::default();
                    let mut frame = BytesMut::new();
                    frame.put_i32(0);
                    let header_version = $api.response_header_version($version);
                    ResponseHeader::default()
                        .with_correlation_id(7)
                        .encode(&mut frame, header_version)
                        .unwrap();
                    let header_len = frame.len();
                    body.encode(&mut frame, $version).unwrap();
                    if !raise($api, $version, &mut frame, 1234) {
                        None
                    } else {
                        let mut rest = frame.split_off(header_len).freeze();
                        let back = <$ty as kafka_protocol::protocol::Decodable>::decode(
                            &mut rest, $version,
                        )
                        .unwrap();
                        Some(back.throttle_time_ms)
                    }
                })*
                other => panic!("{other:?}: add it to the test's list"),
            }
        };
    }

    /// Proves, for every API and version Strata serves except the ones with no field at a
    /// known place (ApiVersions, the SASL ones, WriteTxnMarkers), that the offset
    /// found is where the codec puts `throttle_time_ms`: raised in the bytes, decoded back.
    /// Versions before the field exists have no offset.
    #[test]
    fn the_field_is_where_the_codec_puts_it_for_every_served_version() {
        let skip = [
            ApiKey::ApiVersions,
            ApiKey::SaslHandshake,
            ApiKey::SaslAuthenticate,
            ApiKey::WriteTxnMarkers,
        ];
        let mut checked = 0;
        for (api, lo, hi) in SUPPORTED {
            if skip.contains(api) {
                for v in *lo..=*hi {
                    assert!(!has_field(*api, v), "{api:?} v{v}");
                }
                continue;
            }
            for v in *lo..=*hi {
                let got = round_trip!(*api, v,
                    Produce => ProduceResponse,
                    Fetch => FetchResponse,
                    ListOffsets => ListOffsetsResponse,
                    Metadata => MetadataResponse,
                    OffsetCommit => OffsetCommitResponse,
                    OffsetFetch => OffsetFetchResponse,
                    FindCoordinator => FindCoordinatorResponse,
                    JoinGroup => JoinGroupResponse,
                    Heartbeat => HeartbeatResponse,
                    LeaveGroup => LeaveGroupResponse,
                    SyncGroup => SyncGroupResponse,
                    DescribeGroups => DescribeGroupsResponse,
                    ListGroups => ListGroupsResponse,
                    DeleteGroups => DeleteGroupsResponse,
                    CreateTopics => CreateTopicsResponse,
                    DeleteTopics => DeleteTopicsResponse,
                    DeleteRecords => DeleteRecordsResponse,
                    InitProducerId => InitProducerIdResponse,
                    OffsetForLeaderEpoch => OffsetForLeaderEpochResponse,
                    AddPartitionsToTxn => AddPartitionsToTxnResponse,
                    AddOffsetsToTxn => AddOffsetsToTxnResponse,
                    EndTxn => EndTxnResponse,
                    TxnOffsetCommit => TxnOffsetCommitResponse,
                    DescribeAcls => DescribeAclsResponse,
                    CreateAcls => CreateAclsResponse,
                    DeleteAcls => DeleteAclsResponse,
                    DescribeConfigs => DescribeConfigsResponse,
                    AlterConfigs => AlterConfigsResponse,
                    DescribeLogDirs => DescribeLogDirsResponse,
                    CreatePartitions => CreatePartitionsResponse,
                    ElectLeaders => ElectLeadersResponse,
                    IncrementalAlterConfigs => IncrementalAlterConfigsResponse,
                    AlterPartitionReassignments => AlterPartitionReassignmentsResponse,
                    ListPartitionReassignments => ListPartitionReassignmentsResponse,
                    OffsetDelete => OffsetDeleteResponse,
                    DescribeClientQuotas => DescribeClientQuotasResponse,
                    AlterClientQuotas => AlterClientQuotasResponse,
                    DescribeUserScramCredentials => DescribeUserScramCredentialsResponse,
                    AlterUserScramCredentials => AlterUserScramCredentialsResponse,
                    DescribeCluster => DescribeClusterResponse,
                    DescribeProducers => DescribeProducersResponse,
                    DescribeTransactions => DescribeTransactionsResponse,
                    ListTransactions => ListTransactionsResponse,
                    DescribeTopicPartitions => DescribeTopicPartitionsResponse,
                );
                match got {
                    Some(ms) => {
                        assert_eq!(ms, 1234, "{api:?} v{v}");
                        checked += 1;
                    }
                    None => assert!(!has_field(*api, v), "{api:?} v{v}"),
                }
            }
        }
        assert!(checked > 100, "only {checked} versions checked");
    }

    #[test]
    fn a_larger_throttle_already_there_stays_and_short_frames_are_left_alone() {
        // Proves raise keeps the max and never indexes past a short frame.
        let at = offset(ApiKey::Metadata, 3, &[]).unwrap();
        let mut frame = vec![0u8; at + 4];
        frame[at..].copy_from_slice(&500i32.to_be_bytes());
        assert!(raise(ApiKey::Metadata, 3, &mut frame, 100));
        assert_eq!(&frame[at..], &500i32.to_be_bytes());
        assert!(raise(ApiKey::Metadata, 3, &mut frame, 900));
        assert_eq!(&frame[at..], &900i32.to_be_bytes());
        let mut short = vec![0u8; at + 3];
        assert!(!raise(ApiKey::Metadata, 3, &mut short, 900));
        assert_eq!(short, vec![0u8; at + 3]);
        assert!(!raise(ApiKey::Metadata, 2, &mut frame, 1));
    }

    /// Encodes a Produce response at `version` with one partition answered and a byte-rate
    /// throttle of `byte_ms` already set, as the Produce path does.
    fn produce_frame(version: i16, byte_ms: i32) -> BytesMut {
        use kafka_protocol::messages::produce_response::*;
        let body = ProduceResponse::default()
            .with_responses(vec![TopicProduceResponse::default()
                .with_name(TopicName(
                    kafka_protocol::protocol::StrBytes::from_static_str("t"),
                ))
                .with_partition_responses(vec![PartitionProduceResponse::default()
                    .with_index(3)
                    .with_base_offset(42)])])
            .with_throttle_time_ms(byte_ms);
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        ResponseHeader::default()
            .with_correlation_id(7)
            .encode(&mut frame, ApiKey::Produce.response_header_version(version))
            .unwrap();
        body.encode(&mut frame, version).unwrap();
        frame
    }

    fn produce_throttle(version: i16, frame: &BytesMut) -> (i32, i64) {
        let header = 4 + 4 + usize::from(ApiKey::Produce.response_header_version(version) >= 1);
        let mut rest = frame.clone().split_off(header).freeze();
        let back =
            <ProduceResponse as kafka_protocol::protocol::Decodable>::decode(&mut rest, version)
                .unwrap();
        let offset = back.responses[0].partition_responses[0].base_offset;
        (back.throttle_time_ms, offset)
    }

    /// Proves Produce's response carries the larger of its byte-rate throttle and the
    /// request-time one, at every served version (the field is found from the frame's end,
    /// past the partition responses and, flexible, the empty tagged fields), and that nothing
    /// else in the body moves.
    #[test]
    fn produce_carries_the_larger_of_byte_and_request_throttles() {
        let (lo, hi) = crate::protocol::api_versions::range(ApiKey::Produce).unwrap();
        for v in lo..=hi {
            let mut frame = produce_frame(v, 300);
            assert!(raise(ApiKey::Produce, v, &mut frame, 100), "v{v}");
            assert_eq!(
                produce_throttle(v, &frame),
                (300, 42),
                "v{v}: byte-rate larger"
            );
            assert!(raise(ApiKey::Produce, v, &mut frame, 900), "v{v}");
            assert_eq!(
                produce_throttle(v, &frame),
                (900, 42),
                "v{v}: request larger"
            );
        }
    }

    /// Proves a flexible Produce frame ending in tagged fields is left alone (the field is
    /// not where the end says), as is a frame too short to hold a header and the field.
    #[test]
    fn produce_frames_it_cannot_read_are_left_alone() {
        let mut frame = produce_frame(9, 0);
        let last = frame.len() - 1;
        frame[last] = 1;
        let before = frame.clone();
        assert!(!raise(ApiKey::Produce, 9, &mut frame, 500));
        assert_eq!(frame, before);
        let mut short = vec![0u8; 8];
        assert!(!raise(ApiKey::Produce, 3, &mut short, 500));
        assert_eq!(short, vec![0u8; 8]);
    }
}
