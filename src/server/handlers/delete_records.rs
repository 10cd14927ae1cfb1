//! DeleteRecords: raise each partition's log start offset (-1 means the high watermark);
//! whole segments below it are removed.
use std::rc::Rc;

use kafka_protocol::messages::delete_records_response::*;
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::server::route::{on_leaders_by_topic, DeleteRecords};
use crate::shard::ShardCtx;

pub async fn handle(
    ctx: &Rc<ShardCtx>,
    _version: i16,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let wanted = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partitions
                    .iter()
                    .map(|p| (p.partition_index, p.offset))
                    .collect(),
            )
        })
        .collect();
    let results = on_leaders_by_topic::<DeleteRecords>(ctx, wanted).await;
    let topics = req
        .topics
        .into_iter()
        .zip(results)
        .map(|(t, rs)| {
            let partitions = t
                .partitions
                .iter()
                .zip(rs)
                .map(|(p, r)| {
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(r.code())
                        .with_low_watermark(r.offset)
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}
