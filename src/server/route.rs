//! Fan-out of multi-partition requests to their owner shards, with the replies merged back
//! into request order (`FanOut`: Produce, Fetch and its long-poll wait, DescribeLogDirs), and
//! the per-partition operations that only a partition's leader answers (`on_leaders`:
//! ListOffsets, DeleteRecords, OffsetForLeaderEpoch, WriteTxnMarkers; and DescribeProducers,
//! which any replica answers).
//!
//! Every part sent to one shard travels in one op, in the order it was pushed, so a shard
//! sees a request's partitions in request order; the ops to the shards run concurrently.
use std::rc::Rc;

use crate::protocol::error::ErrorCode;
use crate::shard::mesh::{begin, Started};
use crate::shard::ops::{ShardOp, ShardReply};
use crate::shard::partition_service::describe_producers::ProducersResult;
use crate::shard::partition_service::epoch_ends::{EpochEndResult, EpochQuery};
use crate::shard::partition_service::list_offsets::OffsetQuery;
use crate::shard::partition_service::write_markers::{MarkerResult, MarkerWrite};
use crate::shard::partition_service::OffsetResult;
use crate::shard::{ShardCtx, TopicPartition};

/// Where one part went: slot `index` of the op sent to shard `shard`.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    shard: usize,
    index: usize,
}

/// The parts of a request grouped by owner shard, each remembering its slot.
pub struct FanOut<A> {
    per_shard: Vec<Vec<A>>,
}

impl<A> FanOut<A> {
    pub fn new(nr_shards: usize) -> Self {
        Self {
            per_shard: (0..nr_shards).map(|_| Vec::new()).collect(),
        }
    }

    /// Queues `part` for `shard` (clamped to the shards that exist); returns its slot.
    pub fn push(&mut self, shard: usize, part: A) -> Slot {
        let shard = shard.min(self.per_shard.len().saturating_sub(1));
        match self.per_shard.get_mut(shard) {
            Some(list) => {
                list.push(part);
                Slot {
                    shard,
                    index: list.len() - 1,
                }
            }
            // No shards at all: a slot no reply fills, so the part answers as lost.
            None => Slot {
                shard,
                index: usize::MAX,
            },
        }
    }

    /// Starts one op per shard that has parts (`make_op` builds it from the parts, in push
    /// order). When this returns, every op's synchronous part has run or is queued in order.
    pub async fn start(
        self,
        ctx: &Rc<ShardCtx>,
        mut make_op: impl FnMut(Vec<A>) -> ShardOp,
    ) -> Launched {
        let mut started = Vec::with_capacity(self.per_shard.len());
        for (shard, parts) in self.per_shard.into_iter().enumerate() {
            if parts.is_empty() {
                started.push(None);
            } else {
                started.push(Some(begin(ctx, shard, make_op(parts)).await));
            }
        }
        Launched { started }
    }
}

/// The ops a `FanOut` started, one per shard.
pub struct Launched {
    started: Vec<Option<Started>>,
}

impl Launched {
    /// Waits for every shard's reply; `results` takes the per-part results out of a reply
    /// (`None` for a reply of another kind, e.g. a shard that shut down). The ops are awaited
    /// together: one run on this shard progresses while another shard's reply is pending.
    pub async fn finish<R>(self, results: impl Fn(ShardReply) -> Option<Vec<R>>) -> Replies<R> {
        let results = &results;
        let per_shard = futures::future::join_all(self.started.into_iter().map(|s| async move {
            match s {
                Some(s) => results(s.finish().await)
                    .map(|r| r.into_iter().map(Some).collect())
                    .unwrap_or_default(),
                None => Vec::new(),
            }
        }))
        .await;
        Replies { per_shard }
    }

    /// Resolves when the first shard replies, whatever it says (a long poll's wake-up); never
    /// when no op was started.
    pub async fn any(self) {
        let waits: Vec<_> = self
            .started
            .into_iter()
            .flatten()
            .map(|s| Box::pin(s.finish()))
            .collect();
        if waits.is_empty() {
            futures::future::pending::<()>().await;
        } else {
            futures::future::select_all(waits).await;
        }
    }
}

/// The shards' replies, from which each part's result is taken once by its slot.
pub struct Replies<R> {
    per_shard: Vec<Vec<Option<R>>>,
}

impl<R> Replies<R> {
    /// The result for `slot`, or `None` if its shard did not answer it.
    pub fn take(&mut self, slot: Slot) -> Option<R> {
        self.per_shard
            .get_mut(slot.shard)
            .and_then(|r| r.get_mut(slot.index))
            .and_then(Option::take)
    }
}

/// A per-partition operation that the partition's leader answers (or, with
/// `ANY_REPLICA`, any broker holding a replica of it).
pub trait LeaderOp {
    /// Whether a follower answers too, from its own replica (Kafka's DescribeProducers:
    /// `ReplicaManager.activeProducerState` serves any hosted partition).
    const ANY_REPLICA: bool = false;
    /// What the request says about each partition.
    type Arg;
    /// What the leader answers for each partition.
    type Reply;
    fn op(parts: Vec<(TopicPartition, Self::Arg)>) -> ShardOp;
    fn results(reply: ShardReply) -> Option<Vec<Self::Reply>>;
    fn failed(e: ErrorCode) -> Self::Reply;
}

/// ListOffsets: the argument is the timestamp asked about and the isolation level.
pub struct ListOffsets;

impl LeaderOp for ListOffsets {
    type Arg = OffsetQuery;
    type Reply = OffsetResult;
    fn op(parts: Vec<(TopicPartition, OffsetQuery)>) -> ShardOp {
        ShardOp::ListOffsets { parts }
    }
    fn results(reply: ShardReply) -> Option<Vec<OffsetResult>> {
        match reply {
            ShardReply::Offsets(r) => Some(r),
            _ => None,
        }
    }
    fn failed(e: ErrorCode) -> OffsetResult {
        OffsetResult::failed(e)
    }
}

/// DeleteRecords: the argument is the offset to delete before (-1: the high watermark).
pub struct DeleteRecords;

impl LeaderOp for DeleteRecords {
    type Arg = i64;
    type Reply = OffsetResult;
    fn op(parts: Vec<(TopicPartition, i64)>) -> ShardOp {
        ShardOp::DeleteRecords { parts }
    }
    fn results(reply: ShardReply) -> Option<Vec<OffsetResult>> {
        ListOffsets::results(reply)
    }
    fn failed(e: ErrorCode) -> OffsetResult {
        OffsetResult::failed(e)
    }
}

/// WriteTxnMarkers: the argument is the marker to write.
pub struct WriteMarkers;

impl LeaderOp for WriteMarkers {
    type Arg = MarkerWrite;
    type Reply = MarkerResult;
    fn op(parts: Vec<(TopicPartition, MarkerWrite)>) -> ShardOp {
        ShardOp::WriteMarkers { parts }
    }
    fn results(reply: ShardReply) -> Option<Vec<MarkerResult>> {
        match reply {
            ShardReply::Markers(r) => Some(r),
            _ => None,
        }
    }
    fn failed(e: ErrorCode) -> MarkerResult {
        MarkerResult::failed(e)
    }
}

/// OffsetForLeaderEpoch.
pub struct EpochEnds;

impl LeaderOp for EpochEnds {
    type Arg = EpochQuery;
    type Reply = EpochEndResult;
    fn op(parts: Vec<(TopicPartition, EpochQuery)>) -> ShardOp {
        ShardOp::EpochEnds { parts }
    }
    fn results(reply: ShardReply) -> Option<Vec<EpochEndResult>> {
        match reply {
            ShardReply::EpochEnds(r) => Some(r),
            _ => None,
        }
    }
    fn failed(e: ErrorCode) -> EpochEndResult {
        EpochEndResult::failed(e)
    }
}

/// DescribeProducers: no argument.
pub struct DescribeProducers;

impl LeaderOp for DescribeProducers {
    // A follower's producer state is rebuilt from the batches it replicates, so it answers
    // for what it has fetched (`kafka-transactions.sh` may ask any replica).
    const ANY_REPLICA: bool = true;
    type Arg = ();
    type Reply = ProducersResult;
    fn op(parts: Vec<(TopicPartition, ())>) -> ShardOp {
        ShardOp::DescribeProducers { parts }
    }
    fn results(reply: ShardReply) -> Option<Vec<ProducersResult>> {
        match reply {
            ShardReply::Producers(r) => Some(r),
            _ => None,
        }
    }
    fn failed(e: ErrorCode) -> ProducersResult {
        ProducersResult::failed(e)
    }
}

/// Runs `O` for every `(topic, partition, argument)` on its leader's owner shard; results
/// come back in the order of `items`.
pub async fn on_leaders<O: LeaderOp>(
    ctx: &Rc<ShardCtx>,
    items: Vec<(String, i32, O::Arg)>,
) -> Vec<O::Reply> {
    let catalog = ctx.shared.catalog.load();
    let mut fan_out = FanOut::new(ctx.shared.nr_shards);
    let mut slots = Vec::with_capacity(items.len());
    for (topic, partition, arg) in items {
        let shard = catalog
            .topic(&topic)
            .and_then(|m| {
                usize::try_from(partition)
                    .ok()
                    .and_then(|i| m.partitions.get(i))
            })
            .map(|p| {
                // Offsets are the leader's to answer (followers' logs may lag).
                match catalog.local_shard(p) {
                    _ if p.offline.contains_key(&catalog.local_node) => {
                        Err(ErrorCode::KafkaStorageError)
                    }
                    Some(s) if O::ANY_REPLICA || p.leader == catalog.local_node => Ok(s as usize),
                    _ => Err(ErrorCode::NotLeaderOrFollower),
                }
            });
        slots.push(match shard {
            None => Err(ErrorCode::UnknownTopicOrPartition),
            Some(Err(e)) => Err(e),
            Some(Ok(s)) => Ok(fan_out.push(s, (TopicPartition { topic, partition }, arg))),
        });
    }
    let mut replies = fan_out.start(ctx, O::op).await.finish(O::results).await;
    slots
        .into_iter()
        .map(|slot| match slot {
            Err(e) => O::failed(e),
            Ok(slot) => replies
                .take(slot)
                .unwrap_or_else(|| O::failed(ErrorCode::NotLeaderOrFollower)),
        })
        .collect()
}

/// `on_leaders_by_topic` for the topics `allowed` marks (by the authorizer): every
/// partition of another topic answers TOPIC_AUTHORIZATION_FAILED without reaching a shard.
pub async fn on_authorized_leaders_by_topic<O: LeaderOp>(
    ctx: &Rc<ShardCtx>,
    topics: ByTopic<O::Arg>,
    allowed: impl Fn(&str) -> bool,
) -> Vec<Vec<O::Reply>> {
    // None: asked of the leaders; Some(n): n partitions refused.
    let mut shape: Vec<Option<usize>> = Vec::with_capacity(topics.len());
    let mut asked = Vec::with_capacity(topics.len());
    for (name, ps) in topics {
        if allowed(&name) {
            shape.push(None);
            asked.push((name, ps));
        } else {
            shape.push(Some(ps.len()));
        }
    }
    let mut done = on_leaders_by_topic::<O>(ctx, asked).await.into_iter();
    shape
        .into_iter()
        .map(|s| match s {
            None => done.next().unwrap_or_default(),
            Some(n) => (0..n)
                .map(|_| O::failed(ErrorCode::TopicAuthorizationFailed))
                .collect(),
        })
        .collect()
}

/// A request's topics, each with its `(partition, argument)` list.
pub type ByTopic<A> = Vec<(String, Vec<(i32, A)>)>;

/// `on_leaders` for requests shaped as topics of `(partition, argument)`; the results come
/// back in the same shape.
pub async fn on_leaders_by_topic<O: LeaderOp>(
    ctx: &Rc<ShardCtx>,
    topics: ByTopic<O::Arg>,
) -> Vec<Vec<O::Reply>> {
    let sizes: Vec<usize> = topics.iter().map(|(_, ps)| ps.len()).collect();
    let items = topics
        .into_iter()
        .flat_map(|(name, ps)| ps.into_iter().map(move |(p, arg)| (name.clone(), p, arg)))
        .collect();
    let mut flat = on_leaders::<O>(ctx, items).await.into_iter();
    sizes
        .into_iter()
        .map(|n| {
            (0..n)
                .map(|_| {
                    flat.next()
                        .unwrap_or_else(|| O::failed(ErrorCode::UnknownServerError))
                })
                .collect()
        })
        .collect()
}
