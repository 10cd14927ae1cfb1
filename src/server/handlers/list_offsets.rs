//! ListOffsets: earliest (-2), latest (-1, the high watermark), max timestamp (-3),
//! earliest local (-4) or the first offset at or after a timestamp.
use std::rc::Rc;

use kafka_protocol::messages::list_offsets_response::*;
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::server::route::{offsets, OffsetOp};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    version: i16,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let items = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.to_string(), p.partition_index, p.timestamp))
        })
        .collect();
    let mut results = offsets(ctx, OffsetOp::ListOffsets, items).await.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let r = results.next();
                    ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(
                            r.as_ref()
                                .and_then(|r| r.error)
                                .map(|e| e.code())
                                .unwrap_or(0),
                        )
                        .with_timestamp(r.as_ref().map(|r| r.timestamp).unwrap_or(-1))
                        .with_offset(r.as_ref().map(|r| r.offset).unwrap_or(-1))
                        // Leader epochs exist on the wire from v4 on.
                        .with_leader_epoch(if version >= 4 { 0 } else { -1 })
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}
