//! Per-shard batching of ingested records: one record batch per partition, appended through
//! the same shard op as a Kafka Produce (`ShardOp::Produce`, acks=all), never one request
//! per line.
//!
//! A record joins its partition's open batch on the shard that received it. The batch is
//! closed when it reaches `INGEST_BATCH_BYTES_MAX` / `INGEST_BATCH_RECORDS_MAX`, or when its
//! first record has waited `ingest_linger_ms`. Closed batches go into one FIFO queue per
//! shard, in the order they were closed, and one task (the appender) encodes each (in the
//! topic's `compression.type`; `producer` means uncompressed, since the broker is the
//! producer here) and starts its append on the partition's owner shard, one after another.
//! A partition has at most one batch appending at a time, started in queue order: that is
//! what keeps its records in the order they arrived (an append waiting for room in the
//! log's staging buffer could otherwise be passed by the next one), and while it waits
//! for durability the partition's next batch fills (group commit).
//!
//! Bounds: at most `INGEST_READY_BATCHES_MAX` closed batches wait in the queue (a sender
//! that closes another waits for room) and `INGEST_BATCHES_IN_FLIGHT_MAX` appends wait for
//! durability (the appender waits for one to finish). The bytes a connection read stay
//! charged to the shard's budget (`Rc<Charge>` carried by the records) until their
//! batch is durable, so a shard at its budget stops reading its sockets.
//!
//! Each record may carry an [`Ack`]: the sender (RELP, HTTP) learns its partition and offset,
//! or the error, once the batch is durable under the topic's policy (acks=all).
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::records::Compression;
use tracing::warn;

use crate::ingest::record::{encode_batch, IngestRecord};
use crate::ingest::stats::ShardCounters;
use crate::limits::{
    INGEST_BATCHES_IN_FLIGHT_MAX, INGEST_BATCH_BYTES_MAX, INGEST_BATCH_RECORDS_MAX,
    INGEST_READY_BATCHES_MAX,
};
use crate::shard::mesh::begin;
use crate::shard::ops::{ShardOp, ShardReply};
use crate::shard::ShardCtx;
use crate::shard::TopicPartition;
use crate::storage::notify::Notify;
use crate::storage::Charge;
use crate::storage::CompressionType;

/// Where one record landed: (partition, offset), or why it did not.
pub type RecordResult = Result<(i32, i64), String>;

/// The results of a group of records (one RELP message, one HTTP request), filled in as
/// their batches become durable.
pub struct AckSink {
    results: RefCell<Vec<Option<RecordResult>>>,
    left: Cell<usize>,
    done: Notify,
}

impl AckSink {
    pub fn new(records: usize) -> Rc<Self> {
        Rc::new(Self {
            results: RefCell::new(vec![None; records]),
            left: Cell::new(records),
            done: Notify::default(),
        })
    }

    /// The ack of record `index` of the group.
    pub fn ack(self: &Rc<Self>, index: usize) -> Ack {
        Ack {
            sink: self.clone(),
            index,
        }
    }

    fn set(&self, index: usize, result: RecordResult) {
        if let Some(slot) = self.results.borrow_mut().get_mut(index) {
            if slot.is_none() {
                *slot = Some(result);
                self.left.set(self.left.get().saturating_sub(1));
            }
        }
        if self.left.get() == 0 {
            self.done.notify_all();
        }
    }

    /// Fails record `index` (one that could not be submitted).
    pub fn fail_one(&self, index: usize, why: &str) {
        self.set(index, Err(why.to_string()));
    }

    /// Fails every record not yet answered (a record that could not be submitted).
    pub fn fail_rest(&self, why: &str) {
        let n = self.results.borrow().len();
        for i in 0..n {
            self.set(i, Err(why.to_string()));
        }
    }

    /// Waits until every record has its result, and returns them in order.
    pub async fn wait(&self) -> Vec<RecordResult> {
        while self.left.get() > 0 {
            let listen = self.done.listen();
            if self.left.get() == 0 {
                break;
            }
            listen.await;
        }
        self.results
            .borrow_mut()
            .drain(..)
            .map(|r| r.unwrap_or_else(|| Err("no result".into())))
            .collect()
    }
}

/// One record's place in its group.
pub struct Ack {
    sink: Rc<AckSink>,
    index: usize,
}

/// An open or closed batch of one partition.
struct Batch {
    tp: TopicPartition,
    records: Vec<IngestRecord>,
    acks: Vec<(usize, Ack)>,
    bytes: usize,
    /// Memory the records' bytes hold in the shard's budget, given back when durable.
    charges: Vec<Rc<Charge>>,
    /// Tells a linger timer whether the batch it was started for is still open.
    generation: u64,
}

pub struct Batcher {
    ctx: Rc<ShardCtx>,
    open: RefCell<HashMap<TopicPartition, Batch>>,
    closed: RefCell<VecDeque<Batch>>,
    /// Signalled when a batch is closed (the appender waits on it) and when the queue
    /// shrinks (senders waiting for room wait on it).
    queue_changed: Notify,
    in_flight: Cell<usize>,
    /// Partitions with a batch appending: the next batch of one waits for it (see
    /// `appender`).
    appending: RefCell<HashSet<TopicPartition>>,
    in_flight_changed: Notify,
    generation: Cell<u64>,
    linger: Duration,
    /// Keyless records' partition, per topic: the same for a while, then the next one.
    round_robin: RefCell<HashMap<String, i32>>,
}

impl Batcher {
    /// The batcher of this shard, with its appender task started.
    pub fn start(ctx: &Rc<ShardCtx>) -> (Rc<Self>, glommio::task::JoinHandle<()>) {
        let batcher = Rc::new(Self {
            ctx: ctx.clone(),
            open: RefCell::new(HashMap::new()),
            closed: RefCell::new(VecDeque::new()),
            queue_changed: Notify::default(),
            in_flight: Cell::new(0),
            appending: RefCell::new(HashSet::new()),
            in_flight_changed: Notify::default(),
            generation: Cell::new(0),
            linger: Duration::from_millis(ctx.shared.config.ingest_linger_ms),
            round_robin: RefCell::new(HashMap::new()),
        });
        let task = glommio::spawn_local(appender(batcher.clone())).detach();
        (batcher, task)
    }

    fn counters(&self) -> &ShardCounters {
        self.ctx.shared.ingest_stats.shard(self.ctx.id)
    }

    /// The partition count of `topic`, if it exists.
    pub fn partitions(&self, topic: &str) -> Option<i32> {
        let catalog = self.ctx.shared.catalog.load();
        catalog
            .topic(topic)
            .and_then(|m| i32::try_from(m.partitions.len()).ok())
            .filter(|n| *n > 0)
    }

    /// The partition of a record: by its key's murmur2 hash (Kafka's default partitioner,
    /// so a Java client would pick the same), or, without a key, one partition per topic
    /// that moves on each time a batch is closed.
    pub fn partition_for(&self, topic: &str, partitions: i32, key: Option<&[u8]>) -> i32 {
        match key {
            Some(k) => crate::protocol::partition_key::partition_for_key(k, partitions),
            None => {
                let rr = self.round_robin.borrow();
                rr.get(topic).copied().unwrap_or(0).rem_euclid(partitions)
            }
        }
    }

    /// Adds a record to its partition's batch. Waits (and so slows the sender) while the
    /// shard's queue of closed batches is full.
    pub async fn submit(
        self: &Rc<Self>,
        tp: TopicPartition,
        record: IngestRecord,
        ack: Option<Ack>,
        charge: Option<&Rc<Charge>>,
    ) {
        let (closed, new_generation) = self.add(tp, record, ack, charge);
        if let Some((tp, generation)) = new_generation {
            // The first record of a new batch: close it after the linger if still open.
            let me = self.clone();
            glommio::spawn_local(async move {
                glommio::timer::sleep(me.linger).await;
                me.close_if(&tp, generation);
            })
            .detach();
        }
        if closed {
            self.wait_for_room().await;
        }
    }

    /// Synchronous part of `submit`: returns whether a batch was closed, and the linger
    /// to start when a batch was opened.
    fn add(
        &self,
        tp: TopicPartition,
        record: IngestRecord,
        ack: Option<Ack>,
        charge: Option<&Rc<Charge>>,
    ) -> (bool, Option<(TopicPartition, u64)>) {
        let mut open = self.open.borrow_mut();
        let mut opened = None;
        let batch = open.entry(tp.clone()).or_insert_with(|| {
            let generation = self.generation.get().wrapping_add(1);
            self.generation.set(generation);
            opened = Some((tp.clone(), generation));
            Batch {
                tp: tp.clone(),
                records: Vec::new(),
                acks: Vec::new(),
                bytes: 0,
                charges: Vec::new(),
                generation,
            }
        });
        batch.bytes += record.size_estimate();
        if let Some(ack) = ack {
            batch.acks.push((batch.records.len(), ack));
        }
        batch.records.push(record);
        if let Some(c) = charge {
            if !batch.charges.last().is_some_and(|last| Rc::ptr_eq(last, c)) {
                batch.charges.push(c.clone());
            }
        }
        let full = batch.bytes >= INGEST_BATCH_BYTES_MAX
            || batch.records.len() >= INGEST_BATCH_RECORDS_MAX;
        if full {
            if let Some(batch) = open.remove(&tp) {
                drop(open);
                self.enqueue(batch);
            }
        }
        (full, opened)
    }

    fn close_if(&self, tp: &TopicPartition, generation: u64) {
        let batch = {
            let mut open = self.open.borrow_mut();
            match open.get(tp) {
                Some(b) if b.generation == generation => open.remove(tp),
                _ => None,
            }
        };
        if let Some(b) = batch {
            self.enqueue(b);
        }
    }

    fn enqueue(&self, batch: Batch) {
        // The next keyless record of this topic goes to the next partition.
        {
            let mut round_robin = self.round_robin.borrow_mut();
            match round_robin.get_mut(&batch.tp.topic) {
                Some(next) => *next = next.wrapping_add(1),
                None => {
                    round_robin.insert(batch.tp.topic.clone(), 1);
                }
            }
        }
        self.closed.borrow_mut().push_back(batch);
        self.queue_changed.notify_all();
    }

    async fn wait_for_room(&self) {
        while self.closed.borrow().len() > INGEST_READY_BATCHES_MAX {
            let listen = self.queue_changed.listen();
            if self.closed.borrow().len() <= INGEST_READY_BATCHES_MAX {
                break;
            }
            listen.await;
        }
    }

    /// Closes every open batch at once (shutdown, tests).
    pub fn close_all(&self) {
        let batches: Vec<Batch> = self.open.borrow_mut().drain().map(|(_, b)| b).collect();
        for b in batches {
            self.enqueue(b);
        }
    }
}

/// Takes closed batches in order and starts their appends, at most
/// `INGEST_BATCHES_IN_FLIGHT_MAX` at a time.
async fn appender(batcher: Rc<Batcher>) {
    loop {
        let next = batcher.closed.borrow_mut().pop_front();
        let Some(batch) = next else {
            let listen = batcher.queue_changed.listen();
            if batcher.closed.borrow().is_empty() {
                listen.await;
            }
            continue;
        };
        batcher.queue_changed.notify_all();
        // One batch per partition at a time: the owner shard starts ops in order, but an
        // append that finds the log's staging buffer full finishes later, and a second batch
        // could pass it. Meanwhile the partition's next batch grows (group commit).
        let blocked = |b: &Batcher| {
            b.in_flight.get() >= INGEST_BATCHES_IN_FLIGHT_MAX
                || b.appending.borrow().contains(&batch.tp)
        };
        while blocked(&batcher) {
            let listen = batcher.in_flight_changed.listen();
            if !blocked(&batcher) {
                break;
            }
            listen.await;
        }
        start_append(&batcher, batch).await;
        glommio::yield_if_needed().await;
    }
}

/// Encodes a batch and starts its append on the owner shard; a task waits for durability
/// and answers the acks.
async fn start_append(batcher: &Rc<Batcher>, batch: Batch) {
    let ctx = &batcher.ctx;
    let Batch {
        tp,
        records,
        acks,
        charges,
        ..
    } = batch;
    let (records, acks) = refuse_keyless(batcher, &tp, records, acks);
    if records.is_empty() {
        return;
    }
    let count = records.len();
    let target = owner_shard(ctx, &tp);
    let encoded = target.and_then(|shard| {
        let compression = topic_compression(ctx, &tp.topic);
        encode_batch(records, compression)
            .map(|bytes| (shard, bytes))
            .map_err(|e| format!("cannot encode the batch: {e}"))
    });
    let (shard, bytes): (usize, Bytes) = match encoded {
        Ok(x) => x,
        Err(why) => {
            finish(batcher, &tp, count, acks, Err(why));
            return;
        }
    };
    let op = ShardOp::Produce {
        acks: -1,
        timeout_ms: i32::try_from(ctx.shared.config.request_timeout_ms).unwrap_or(i32::MAX),
        transactional_id: None,
        parts: vec![(tp.clone(), Some(bytes))],
    };
    batcher.appending.borrow_mut().insert(tp.clone());
    let started = begin(ctx, shard, op).await;
    batcher.in_flight.set(batcher.in_flight.get() + 1);
    let me = batcher.clone();
    glommio::spawn_local(async move {
        let outcome = match started.finish().await {
            ShardReply::Produce(results) => match results.into_iter().next() {
                Some(r) => match r.error {
                    None => Ok(r.base_offset),
                    Some(e) => Err(match r.message {
                        Some(m) => format!("{e:?}: {m}"),
                        None => format!("{e:?}"),
                    }),
                },
                None => Err("no answer from the partition".into()),
            },
            ShardReply::Unavailable => Err("shard unavailable (shutting down)".into()),
            _ => Err("unexpected answer".into()),
        };
        finish(&me, &tp, count, acks, outcome);
        drop(charges);
        me.appending.borrow_mut().remove(&tp);
        me.in_flight.set(me.in_flight.get().saturating_sub(1));
        me.in_flight_changed.notify_all();
    })
    .detach();
}

/// On a compacted topic, fails each keyless record on its own (the partition would refuse the
/// whole batch with INVALID_RECORD, and one keyless line would lose its neighbours) and
/// returns the rest with their acks renumbered to their new places in the batch.
fn refuse_keyless(
    batcher: &Batcher,
    tp: &TopicPartition,
    records: Vec<IngestRecord>,
    acks: Vec<(usize, Ack)>,
) -> (Vec<IngestRecord>, Vec<(usize, Ack)>) {
    if records.iter().all(|r| r.key.is_some()) || !topic_compacted(&batcher.ctx, &tp.topic) {
        return (records, acks);
    }
    let why = format!(
        "InvalidRecord: Compacted topic cannot accept message without key in topic partition {}-{}.",
        tp.topic, tp.partition
    );
    // new_index[i]: where record i goes in the kept batch, None when it is refused.
    let mut new_index = Vec::with_capacity(records.len());
    let mut kept = Vec::with_capacity(records.len());
    for record in records {
        if record.key.is_some() {
            new_index.push(Some(kept.len()));
            kept.push(record);
        } else {
            new_index.push(None);
        }
    }
    let refused = new_index.iter().filter(|i| i.is_none()).count();
    ShardCounters::add(&batcher.counters().append_failed, refused as u64);
    warn!(
        topic = %tp.topic,
        partition = tp.partition,
        records = refused,
        "ingested records without a key refused: the topic is compacted"
    );
    let mut kept_acks = Vec::with_capacity(acks.len());
    for (i, ack) in acks {
        match new_index.get(i).copied().flatten() {
            Some(j) => kept_acks.push((j, ack)),
            None => ack.sink.set(ack.index, Err(why.clone())),
        }
    }
    (kept, kept_acks)
}

/// Whether `topic`'s cleanup.policy includes `compact`.
fn topic_compacted(ctx: &ShardCtx, topic: &str) -> bool {
    let catalog = ctx.shared.catalog.load();
    catalog.topic(topic).is_some_and(|meta| {
        ctx.shared
            .topic_log_config(&meta.configs)
            .cleanup_policy
            .compact
    })
}

/// Reports a batch's outcome to its acks and counters.
fn finish(
    batcher: &Batcher,
    tp: &TopicPartition,
    count: usize,
    acks: Vec<(usize, Ack)>,
    outcome: Result<i64, String>,
) {
    let counters = batcher.counters();
    match &outcome {
        Ok(_) => ShardCounters::add(&counters.appended, count as u64),
        Err(why) => {
            ShardCounters::add(&counters.append_failed, count as u64);
            warn!(
                topic = %tp.topic,
                partition = tp.partition,
                records = count,
                "ingested records not appended: {why}"
            );
        }
    }
    for (i, ack) in acks {
        let result = match &outcome {
            Ok(base) => Ok((tp.partition, base + i as i64)),
            Err(why) => Err(why.clone()),
        };
        ack.sink.set(ack.index, result);
    }
}

/// The shard of this broker that leads `tp`, or why there is none.
fn owner_shard(ctx: &ShardCtx, tp: &TopicPartition) -> Result<usize, String> {
    let catalog = ctx.shared.catalog.load();
    let pm = catalog
        .topic(&tp.topic)
        .and_then(|m| {
            usize::try_from(tp.partition)
                .ok()
                .and_then(|i| m.partitions.get(i))
        })
        .ok_or_else(|| format!("unknown partition {}-{}", tp.topic, tp.partition))?;
    if pm.leader != catalog.local_node {
        return Err(format!(
            "this broker does not lead {}-{} (node {} does)",
            tp.topic, tp.partition, pm.leader
        ));
    }
    let shard = catalog
        .local_shard(pm)
        .ok_or_else(|| format!("{}-{} has no shard here", tp.topic, tp.partition))?;
    Ok((shard as usize).min(ctx.shared.nr_shards.saturating_sub(1)))
}

/// The codec ingested batches of `topic` are written in: its `compression.type`, with
/// `producer` (the default) meaning uncompressed.
fn topic_compression(ctx: &ShardCtx, topic: &str) -> Compression {
    let catalog = ctx.shared.catalog.load();
    let Some(meta) = catalog.topic(topic) else {
        return Compression::None;
    };
    match ctx.shared.topic_log_config(&meta.configs).compression {
        CompressionType::Producer => Compression::None,
        CompressionType::Codec(codec) => match codec {
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            _ => Compression::None,
        },
    }
}
