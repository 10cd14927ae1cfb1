//! A follower's durable end on the wire. Kafka's Fetch carries one follower position, the
//! fetch offset, and Kafka's followers never fsync, so for Kafka that is the whole story.
//! Strata's followers count only fsynced records towards the high watermark (acks=all means
//! synced on min.insync.replicas), yet they fetch onward as soon as an answer is appended:
//! the fetch offset is then the log end, and the fsynced end travels beside it in a private
//! tagged field of each Fetch partition (KIP-482 tagged fields, Fetch v12+). A leader that
//! does not know the tag ignores it; a follower that does not send it fetches only what is
//! durable, so its fetch offset is its durable end (`reported`).
use std::collections::BTreeMap;

use bytes::Bytes;

use crate::protocol::ids::Offset;

/// The tag: "ST" (Strata), far above the tags Kafka's Fetch partition defines (0 and 1).
pub const DURABLE_END_TAG: i32 = 0x5354;

/// Puts `durable` (the offset below which the follower's log is fsynced) in a Fetch
/// partition's tagged fields.
pub fn put(fields: &mut BTreeMap<i32, Bytes>, durable: Offset) {
    fields.insert(
        DURABLE_END_TAG,
        Bytes::copy_from_slice(&durable.get().to_be_bytes()),
    );
}

/// What a follower's Fetch partition reports as durable, given its `fetch_offset`: the tag
/// when present; without it (an older peer) the fetch offset, as it fetched only durable
/// records. A malformed tag (not 8 bytes) reports nothing durable (-1): the leader then
/// keeps what it knew, which is safe, where trusting the fetch offset would not be.
pub fn reported(fields: &BTreeMap<i32, Bytes>, fetch_offset: Offset) -> Offset {
    match fields.get(&DURABLE_END_TAG) {
        None => fetch_offset,
        Some(b) => match <[u8; 8]>::try_from(b.as_ref()) {
            Ok(raw) => Offset(i64::from_be_bytes(raw)),
            Err(_) => Offset::UNDEFINED,
        },
    }
}

/// What a follower's durable-end report (a Fetch that asks for no bytes, sent when an fsync
/// completes) should tell the leader about one partition: the fsynced end `synced`, never
/// past `fetch_offset` (the log end whose records are known to be the leader's), when it is
/// newer than what the leader last heard (`reported`, -1 for nothing); `None` otherwise.
pub fn report_due(fetch_offset: Offset, synced: Offset, reported: Offset) -> Option<Offset> {
    let durable = synced.min(fetch_offset);
    (durable > reported).then_some(durable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::FetchRequest;
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn round_trip(part: FetchPartition, version: i16) -> FetchPartition {
        let req = FetchRequest::default()
            .with_topics(vec![FetchTopic::default().with_partitions(vec![part])]);
        let mut buf = BytesMut::new();
        req.encode(&mut buf, version).expect("encode");
        let mut bytes = buf.freeze();
        let back = FetchRequest::decode(&mut bytes, version).expect("decode");
        back.topics[0].partitions[0].clone()
    }

    /// The tag survives the codec at the version followers send (12) and the newest one,
    /// next to Kafka's own tagged fields.
    #[test]
    fn durable_tag_round_trip() {
        for version in [12i16, 17] {
            let mut part = FetchPartition::default()
                .with_partition(3)
                .with_fetch_offset(1_000)
                .with_replica_directory_id(uuid::Uuid::from_u128(7));
            put(&mut part.unknown_tagged_fields, Offset(987));
            let back = round_trip(part, version);
            assert_eq!(back.fetch_offset, 1_000);
            assert_eq!(
                reported(&back.unknown_tagged_fields, Offset(back.fetch_offset)),
                Offset(987),
                "v{version}"
            );
        }
    }

    /// No tag: the fetch offset is the durable end (an older follower). A malformed one
    /// reports nothing.
    #[test]
    fn absent_tag_is_the_fetch_offset() {
        let back = round_trip(FetchPartition::default().with_fetch_offset(55), 12);
        assert!(back.unknown_tagged_fields.is_empty());
        assert_eq!(
            reported(&back.unknown_tagged_fields, Offset(55)),
            Offset(55)
        );
        let mut fields = BTreeMap::new();
        fields.insert(DURABLE_END_TAG, Bytes::from_static(b"abc"));
        assert_eq!(reported(&fields, Offset(55)), Offset::UNDEFINED);
    }

    /// A report goes only for a newer durable end, and never past the fetch offset: bytes
    /// past it may be an old epoch's, not yet checked against the leader's log.
    #[test]
    fn report_due_is_new_and_below_the_fetch_offset() {
        assert_eq!(
            report_due(Offset(100), Offset(80), Offset(50)),
            Some(Offset(80))
        );
        assert_eq!(report_due(Offset(100), Offset(80), Offset(80)), None);
        assert_eq!(report_due(Offset(100), Offset(70), Offset(80)), None);
        assert_eq!(
            report_due(Offset(60), Offset(80), Offset(50)),
            Some(Offset(60))
        );
        assert_eq!(report_due(Offset(60), Offset(80), Offset(60)), None);
        assert_eq!(
            report_due(Offset(10), Offset(0), Offset::UNDEFINED),
            Some(Offset(0))
        );
    }
}
