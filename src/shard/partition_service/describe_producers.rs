//! DescribeProducers on a replica (leader or follower): each producer the partition holds
//! state for, with its open transaction's first offset (how `kafka-transactions.sh` finds hanging transactions).
use std::rc::Rc;

use super::owned_partition;
use crate::protocol::error::ErrorCode;
use crate::shard::{ShardCtx, TopicPartition};
use crate::storage::producer_state::ProducerView;

/// One partition's answer: its producers, or the error.
#[derive(Debug, Clone)]
pub struct ProducersResult {
    pub error: Option<ErrorCode>,
    pub producers: Vec<ProducerView>,
}

impl ProducersResult {
    pub fn failed(e: ErrorCode) -> Self {
        Self {
            error: Some(e),
            producers: Vec::new(),
        }
    }
}

/// Answers each partition in order.
pub async fn describe_producers(
    ctx: &Rc<ShardCtx>,
    parts: Vec<(TopicPartition, ())>,
) -> Vec<ProducersResult> {
    let mut out = Vec::with_capacity(parts.len());
    for (tp, ()) in parts {
        out.push(match owned_partition(ctx, &tp).await {
            Ok(p) => ProducersResult {
                error: None,
                producers: p.producers(),
            },
            Err(e) => ProducersResult::failed(e),
        });
    }
    out
}
