//! Hosting of the coordinators' internal topics (`__consumer_offsets` for groups,
//! `__transaction_state` for transactions) on a shard: the I/O both coordinators share.
//!
//! - creating the topic through the controller (compacted, small segments), and forcing
//!   `cleanup.policy=compact` on one that is not;
//! - appending a coordinator's records as one batch with acks=all semantics: the returned
//!   future resolves once the batch is durable and on every in-sync replica. A log without
//!   room (the shard's memory budget or the log's staging buffer full) makes the append wait,
//!   bounded, as a producer's would, in a per-partition queue that keeps the decisions'
//!   order;
//! - replaying a led partition to its log end at election.
//!
//! Each coordinator keeps its own [`AppendQueues`] and passes a [`Host`] naming its topic and
//! how to find its queues from the shard context.
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use tracing::{info, warn};

use super::ShardCtx;
use crate::cluster::controller::{ControllerRequest, ControllerResponse};
use crate::cluster::quorum::QuorumError;
use crate::protocol::produce_batch::{encode_batch_as, EncodeError, ProduceRecord};
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::storage::producer_state::TxnVerification;
use crate::storage::{AppendError, Partition};

/// Appends one shard lets wait for room in its logs, per coordinator (see `append`); past it
/// an append fails at once (the request answers COORDINATOR_NOT_AVAILABLE, the client
/// retries).
const APPENDS_WAITING_MAX: usize = 10_000;

/// Bytes read per step while replaying a partition.
const LOAD_READ_BYTES: usize = 1024 * 1024;

const CLEANUP_POLICY: &str = "cleanup.policy";
const COMPACT: &str = "compact";

/// A future resolving once an append is durable and replicated (`false`: it failed).
pub type DurableWait = LocalBoxFuture<'static, bool>;

/// A future resolving to the batch's last offset once it is durable and on every in-sync
/// replica under the epoch it was appended at (`None`: it is not).
pub type CommittedWait = LocalBoxFuture<'static, Option<i64>>;

/// Which internal topic a coordinator writes, and where its append queues live.
#[derive(Clone, Copy)]
pub struct Host {
    pub topic: &'static str,
    /// The coordinator's queues in the shard context.
    pub queues: fn(&ShardCtx) -> &AppendQueues,
    /// How long an append may take to reach the in-sync replicas (Kafka's
    /// offsets.commit.timeout.ms / the transaction coordinator's request timeout).
    pub commit_timeout: Duration,
}

/// One record for an internal topic; `value: None` is a tombstone.
pub struct KeyValue<'a> {
    pub key: &'a Bytes,
    pub value: Option<&'a Bytes>,
}

/// Why an append could not even start.
#[derive(Debug)]
pub enum AppendStart {
    /// The partition is not open on this shard.
    NotOpen,
    /// The records could not be encoded as a batch.
    Encode(EncodeError),
    /// The log refused the batch, for another reason than room.
    Refused(AppendError),
    /// `APPENDS_WAITING_MAX` appends of this coordinator already wait for room on this shard.
    TooManyWaiting,
}

/// Per partition, the appends waiting for room in its log, oldest first. A partition is here
/// only while its queue is not empty and its drainer task runs.
#[derive(Default)]
pub struct AppendQueues {
    waiting: RefCell<HashMap<i32, VecDeque<WaitingAppend>>>,
}

/// An append the log refused for want of room: the drainer appends it once there is room,
/// before `deadline`, and sends the batch's last offset (or `None`: it failed).
struct WaitingAppend {
    batch: Bytes,
    /// A transactional offset commit's verification (`TxnVerification::Off` for the rest).
    verification: TxnVerification,
    /// On the broker's monotonic clock.
    deadline_ms: u64,
    done: oneshot::Sender<Option<i64>>,
}

/// `append_batch` of `records` as one plain batch, for a coordinator that needs to know only
/// whether it was committed: `None` if the append could not even start (logged).
pub fn append(
    ctx: &Rc<ShardCtx>,
    host: Host,
    partition: i32,
    records: &[KeyValue<'_>],
) -> Option<DurableWait> {
    let records = records.iter().map(|r| (r.key.clone(), r.value.cloned()));
    let wait = append_batch(ctx, host, partition, records, None, TxnVerification::Off).ok()?;
    Some(Box::pin(async move { wait.await.is_some() }))
}

/// Encodes `records` (key, value; `None` is a tombstone) as one uncompressed batch stamped
/// with the wall time and appends it to `host.topic`-`partition` now, so appends keep the
/// order of the state machine's decisions; the returned future resolves once the batch is
/// durable and on every in-sync replica. With `txn`, the batch is transactional and carries
/// that producer id and epoch (a TxnOffsetCommit); the log checks the epoch, as Kafka's does
/// for a coordinator's batch (an older one than it has seen is INVALID_PRODUCER_EPOCH), and
/// `verification` as for a client's transactional batch.
///
/// When the log has no room (its staging buffer or the shard's memory budget is full, as
/// under a produce load that outruns the disk), the batch waits for room, as a producer's
/// does, for at most `host.commit_timeout`, instead of failing: it joins the partition's
/// queue of waiting appends, and so does every later append of the partition until the queue
/// is empty, so the log keeps the decisions' order.
pub fn append_batch(
    ctx: &Rc<ShardCtx>,
    host: Host,
    partition: i32,
    records: impl IntoIterator<Item = (Bytes, Option<Bytes>)>,
    txn: Option<(ProducerId, ProducerEpoch)>,
    verification: TxnVerification,
) -> Result<CommittedWait, AppendStart> {
    let topic = host.topic;
    let Some(p) = ctx.local_partition(topic, partition) else {
        warn!(topic, partition, "partition is not open on this shard");
        return Err(AppendStart::NotOpen);
    };
    // Record timestamps are dates: wall time.
    let now = ctx.shared.clock.wall_ms();
    let records = records.into_iter().map(|(key, value)| ProduceRecord {
        key: Some(key),
        value,
        headers: Vec::new(),
        timestamp_ms: now,
    });
    let batch = encode_batch_as(records, Compression::None, txn).map_err(|e| {
        warn!(topic, partition, "cannot encode coordinator records: {e}");
        AppendStart::Encode(e)
    })?;
    let queued = (host.queues)(ctx).waiting.borrow().contains_key(&partition);
    let timeout = host.commit_timeout;
    // The epoch this append is made under: the batch counts as committed only if this broker
    // still leads at it once the high watermark passed the batch.
    let tp = super::TopicPartition {
        topic: topic.to_string(),
        partition,
    };
    let epoch = ctx.replicas.leader_epoch(&tp);
    if !queued {
        match p.append_coordinator(&batch, now, verification) {
            Ok(o) => {
                super::replica::on_local_append(ctx, &tp);
                return Ok(Box::pin(committed(
                    ctx.clone(),
                    tp,
                    epoch,
                    p,
                    o.last_offset,
                    timeout,
                )));
            }
            Err(AppendError::Backpressure { .. }) => {}
            Err(e) => {
                warn!(topic, partition, "cannot append coordinator records: {e}");
                return Err(AppendStart::Refused(e));
            }
        }
    }
    let appended = wait_for_room(ctx, host, partition, batch, verification)?;
    let ctx = ctx.clone();
    Ok(Box::pin(async move {
        match appended.await {
            Ok(Some(last)) => committed(ctx, tp, epoch, p, last, timeout).await,
            _ => None,
        }
    }))
}

fn appended_locally(ctx: &Rc<ShardCtx>, topic: &str, partition: i32) {
    let tp = super::TopicPartition {
        topic: topic.to_string(),
        partition,
    };
    super::replica::on_local_append(ctx, &tp);
}

/// Resolves once the batch ending at `last` is durable and on every in-sync replica, to
/// `last` (`None`: it is not).
async fn committed(
    ctx: Rc<ShardCtx>,
    tp: super::TopicPartition,
    leader_epoch: Option<i32>,
    p: Rc<Partition>,
    last: i64,
    timeout: Duration,
) -> Option<i64> {
    if let Err(e) = p.wait_durable(last).await {
        warn!(topic = %tp.topic, partition = tp.partition, "coordinator records not durable: {e}");
        return None;
    }
    // Committed means on every in-sync replica, as Kafka's acks=-1 appends of its
    // coordinators: a new coordinator must find what this one acknowledged. And under the
    // epoch it was appended at: a deposed leader's record may be truncated away while its
    // high watermark, now a follower's, passes the record's offset.
    let deadline = Instant::now() + timeout;
    let ok =
        super::replica::wait_committed_as_leader(&ctx, &tp, &p, last, leader_epoch, deadline).await;
    if !ok {
        warn!(topic = %tp.topic, partition = tp.partition, last, "coordinator records not committed under this leader");
    }
    ok.then_some(last)
}

/// Queues `batch` behind the partition's waiting appends (starting its drainer if it is the
/// first); `TooManyWaiting` if `APPENDS_WAITING_MAX` already wait for this coordinator on
/// this shard.
fn wait_for_room(
    ctx: &Rc<ShardCtx>,
    host: Host,
    partition: i32,
    batch: Bytes,
    verification: TxnVerification,
) -> Result<oneshot::Receiver<Option<i64>>, AppendStart> {
    let (done, appended) = oneshot::channel();
    let start_drainer = {
        let mut waiting = (host.queues)(ctx).waiting.borrow_mut();
        if waiting.values().map(VecDeque::len).sum::<usize>() >= APPENDS_WAITING_MAX {
            warn!(
                topic = host.topic,
                partition, "cannot append coordinator records: too many appends wait for memory"
            );
            return Err(AppendStart::TooManyWaiting);
        }
        let queue = waiting.entry(partition).or_default();
        queue.push_back(WaitingAppend {
            batch,
            verification,
            deadline_ms: ctx.shared.clock.monotonic_ms() + host.commit_timeout.as_millis() as u64,
            done,
        });
        queue.len() == 1
    };
    if start_drainer {
        glommio::spawn_local(drain_waiting_appends(ctx.clone(), host, partition)).detach();
    }
    Ok(appended)
}

/// Appends the partition's waiting batches in order, each once its log has room or failing
/// it at its deadline; ends (and forgets the queue) when the queue is empty.
async fn drain_waiting_appends(ctx: Rc<ShardCtx>, host: Host, partition: i32) {
    let topic = host.topic;
    loop {
        let front = {
            let mut waiting = (host.queues)(&ctx).waiting.borrow_mut();
            let front = waiting
                .get(&partition)
                .and_then(VecDeque::front)
                .map(|a| (a.batch.clone(), a.verification, a.deadline_ms));
            if front.is_none() {
                waiting.remove(&partition);
            }
            front
        };
        let Some((batch, verification, deadline_ms)) = front else {
            return;
        };
        let clock = &*ctx.shared.clock;
        let outcome = match ctx.local_partition(topic, partition) {
            None => Err("the partition is no longer open here".to_string()),
            Some(p) => {
                let room = p.wait_for_staging_room(batch.len());
                match super::until(clock, deadline_ms, room).await {
                    None => Err(format!(
                        "no room in the log within {:?}",
                        host.commit_timeout
                    )),
                    Some(Err(e)) => Err(e.to_string()),
                    Some(Ok(())) => {
                        match p.append_coordinator(&batch, clock.wall_ms(), verification) {
                            Ok(o) => {
                                appended_locally(&ctx, topic, partition);
                                Ok(o.last_offset)
                            }
                            // Another log took the room first: wait again, until the deadline.
                            Err(AppendError::Backpressure { .. })
                                if clock.monotonic_ms() < deadline_ms =>
                            {
                                continue
                            }
                            Err(e) => Err(e.to_string()),
                        }
                    }
                }
            }
        };
        if let Err(e) = &outcome {
            warn!(topic, partition, "cannot append coordinator records: {e}");
        }
        let done = (host.queues)(&ctx)
            .waiting
            .borrow_mut()
            .get_mut(&partition)
            .and_then(VecDeque::pop_front)
            .map(|a| a.done);
        if let Some(done) = done {
            // The requester may have gone; nothing to tell then.
            let _ = done.send(outcome.ok());
        }
    }
}

/// Replays `topic`-`partition` from its log start to its log end, calling `on_record(key,
/// value)` for each data record in log order; returns how many there were. A batch that does
/// not decode is skipped with a warning: one bad record must not make every coordinator key
/// of the partition unavailable.
pub async fn replay(
    topic: &'static str,
    partition: i32,
    p: &Rc<Partition>,
    mut on_record: impl FnMut(&[u8], Option<&[u8]>),
) -> usize {
    let mut offset = p.log_start_offset();
    // To the log end, as Kafka does: a new leader never truncates its own log, so records
    // past the high watermark become committed once the followers catch up. `read` would
    // stop at the local HW, which on a follower just promoted lags the old leader's: the
    // last records the old coordinator acknowledged would be missing.
    let end = p.log_end_offset();
    let mut count = 0;
    while offset < end {
        let read = match p.read_bounded(offset, LOAD_READ_BYTES, end).await {
            Ok(r) => r,
            Err(e) => {
                warn!(topic, partition, offset, "cannot read: {e}");
                break;
            }
        };
        let mut data = BytesMut::new();
        for c in &read.chunks {
            data.extend_from_slice(c);
        }
        let mut data: Bytes = data.freeze();
        let before = offset;
        while !data.is_empty() {
            let set = match RecordBatchDecoder::decode(&mut data) {
                Ok(s) => s,
                Err(e) => {
                    warn!(topic, partition, offset, "undecodable batch: {e}");
                    // Skip past what we could not decode by moving to the next offset.
                    offset += 1;
                    break;
                }
            };
            for r in set.records {
                offset = offset.max(r.offset + 1);
                if r.control {
                    continue;
                }
                let Some(key) = r.key else { continue };
                on_record(&key, r.value.as_deref());
                count += 1;
            }
        }
        if offset == before {
            // Nothing decodable at this position (e.g. an empty read): do not spin.
            break;
        }
        glommio::yield_if_needed().await;
    }
    count
}

/// How an internal topic is created.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    pub name: &'static str,
    pub partitions: i32,
    /// Replicas wanted (Kafka's *.replication.factor); fewer if fewer brokers are live.
    pub replication_factor: usize,
    /// segment.bytes (also the preallocated extent per partition).
    pub segment_bytes: u64,
    /// min.insync.replicas, capped by the replicas the topic gets; `None`: the broker's.
    pub min_isr: Option<usize>,
}

/// The CreateTopics request for `spec` with `rf` replicas.
pub fn create_request(spec: &TopicSpec, rf: i16) -> ControllerRequest {
    let mut configs = BTreeMap::new();
    // Compacted, as Kafka makes its internal topics: the cleaner keeps the last record per
    // key and drops tombstones after delete.retention.ms, so replay reads the live state,
    // not its history. Time retention does not apply (the policy has no `delete`): it would
    // drop live state.
    configs.insert(CLEANUP_POLICY.to_string(), COMPACT.to_string());
    // Small segments: coordinator records are small, every partition preallocates one
    // segment's extent at start, and only closed segments are cleaned.
    configs.insert("segment.bytes".to_string(), spec.segment_bytes.to_string());
    if let Some(min_isr) = spec.min_isr {
        let capped = min_isr.clamp(1, usize::try_from(rf).unwrap_or(1).max(1));
        configs.insert("min.insync.replicas".to_string(), capped.to_string());
    }
    ControllerRequest::CreateTopics {
        topics: vec![crate::cluster::controller::CreatableTopic {
            name: spec.name.to_string(),
            num_partitions: spec.partitions,
            replication_factor: rf,
            assignments: None,
            configs,
        }],
        validate_only: false,
    }
}

/// The overrides an existing internal topic gets so it is compacted, or `None` if it already
/// is. A topic created before it was compacted (by an older Strata, which kept every record
/// with retention.ms=-1) or altered since is put back: the coordinator's load time must not
/// grow with history, so the broker forces the policy of its own internal topic, keeping
/// every other override.
pub fn compacted(current: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    if current.get(CLEANUP_POLICY).map(String::as_str) == Some(COMPACT) {
        return None;
    }
    let mut configs = current.clone();
    configs.insert(CLEANUP_POLICY.to_string(), COMPACT.to_string());
    Some(configs)
}

/// The AlterTopicConfigs request that makes an existing topic compacted, if it is not yet.
fn alter_request(
    catalog: &crate::cluster::catalog::Catalog,
    name: &str,
) -> Option<ControllerRequest> {
    let topic = catalog.topic(name)?;
    let configs = compacted(&topic.configs)?;
    Some(ControllerRequest::AlterTopicConfigs {
        topic: name.to_string(),
        configs,
    })
}

fn altered(name: &str, answer: Result<ControllerResponse, QuorumError>) {
    match answer {
        Ok(ControllerResponse::AlterTopicConfigs { status }) if status.error_code == 0 => {
            info!("{name} is now compacted (cleanup.policy=compact)");
        }
        other => warn!("cannot make {name} compacted, will retry: {other:?}"),
    }
}

/// Whether CreateTopics created the topic or found it there: COORDINATOR_NOT_AVAILABLE
/// otherwise (the client retries).
fn created(answer: Result<ControllerResponse, QuorumError>) -> Result<(), crate::group::ErrorCode> {
    use crate::group::ErrorCode;
    match answer {
        Ok(ControllerResponse::CreateTopics { topics }) => {
            let code = topics.first().map(|t| t.status.error_code).unwrap_or(0);
            if code == 0 || code == ErrorCode::TopicAlreadyExists.code() {
                Ok(())
            } else {
                Err(ErrorCode::CoordinatorNotAvailable)
            }
        }
        _ => Err(ErrorCode::CoordinatorNotAvailable),
    }
}

/// Creates the topic through the controller if it does not exist yet (as Kafka does on the
/// first FindCoordinator), with as many replicas as there are live brokers, up to
/// `spec.replication_factor`; an existing one that is not compacted is altered.
pub async fn ensure(ctx: &Rc<ShardCtx>, spec: &TopicSpec) -> Result<(), crate::group::ErrorCode> {
    let catalog = ctx.shared.catalog.load();
    if catalog.topic(spec.name).is_some() {
        // Served meanwhile: its records are the same either way.
        if let Some(req) = alter_request(&catalog, spec.name) {
            altered(spec.name, ctx.shared.quorum.request(req).await);
        }
        return Ok(());
    }
    let live = catalog.live_brokers().count();
    let rf = live.clamp(1, spec.replication_factor.max(1)) as i16;
    created(ctx.shared.quorum.request(create_request(spec, rf)).await)
}

/// `ensure` for a single node before it serves (there is no one to wait for).
pub fn ensure_at_start(
    quorum: &crate::cluster::quorum::Quorum,
    catalog: &crate::cluster::catalog::CatalogStore,
    spec: &TopicSpec,
) -> Result<(), crate::group::ErrorCode> {
    let current = catalog.load();
    if current.topic(spec.name).is_some() {
        if let Some(req) = alter_request(&current, spec.name) {
            altered(spec.name, quorum.request_blocking(req));
        }
        return Ok(());
    }
    created(quorum.request_blocking(create_request(spec, 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new internal topic is created compacted; an existing one that is not (an older
    /// Strata's retention.ms=-1 topic, or one altered to delete) gets cleanup.policy=compact
    /// with its other overrides kept, and one already compacted is left alone.
    #[test]
    fn internal_topic_is_created_and_forced_compacted() {
        let spec = TopicSpec {
            name: "__consumer_offsets",
            partitions: 50,
            replication_factor: 3,
            segment_bytes: 1 << 20,
            min_isr: Some(2),
        };
        let ControllerRequest::CreateTopics { topics, .. } = create_request(&spec, 1) else {
            panic!("a CreateTopics request");
        };
        let created = &topics.first().expect("one topic").configs;
        assert_eq!(
            created.get("cleanup.policy").map(String::as_str),
            Some("compact")
        );
        // min.insync.replicas never exceeds the replicas the topic gets.
        assert_eq!(
            created.get("min.insync.replicas").map(String::as_str),
            Some("1")
        );
        assert_eq!(compacted(created), None);

        let old: BTreeMap<String, String> = [
            ("retention.ms".to_string(), "-1".to_string()),
            ("segment.bytes".to_string(), "1048576".to_string()),
        ]
        .into();
        let forced = compacted(&old).expect("altered");
        assert_eq!(
            forced.get("cleanup.policy").map(String::as_str),
            Some("compact")
        );
        assert_eq!(forced.get("retention.ms").map(String::as_str), Some("-1"));
        assert_eq!(
            forced.get("segment.bytes").map(String::as_str),
            Some("1048576")
        );

        let deleting: BTreeMap<String, String> =
            [("cleanup.policy".to_string(), "delete".to_string())].into();
        let forced = compacted(&deleting).expect("altered");
        assert_eq!(
            forced.get("cleanup.policy").map(String::as_str),
            Some("compact")
        );
    }
}
