//! DeleteRecords: raise each partition's log start offset (-1 means the high watermark);
//! whole segments below it are removed.
use std::rc::Rc;

use kafka_protocol::messages::delete_records_response::*;
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::server::route::{offsets, OffsetOp};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let items = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.0.to_string(), p.partition_index, p.offset))
        })
        .collect();
    let mut results = offsets(ctx, OffsetOp::DeleteRecords, items)
        .await
        .into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let r = results.next();
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(
                            r.as_ref()
                                .and_then(|r| r.error)
                                .map(|e| e.code())
                                .unwrap_or(0),
                        )
                        .with_low_watermark(r.as_ref().map(|r| r.offset).unwrap_or(-1))
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}
