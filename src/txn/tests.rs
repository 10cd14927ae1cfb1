//! The transaction coordinator driven by a test host: every transition with its records,
//! markers and answers, the error codes in Kafka's order, fencing, timeouts, expiry, epoch
//! exhaustion, failures of the log, failover replay, and a seeded random run against an
//! oracle.
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::record::{self, TxnLogValue};
use super::*;
use crate::clock::Now;
use crate::protocol::producer::{ProducerEpoch, ProducerId};

const COORDINATOR_EPOCH: i32 = 7;

fn tp(topic: &str, partition: i32) -> TxnPartition {
    TxnPartition::new(topic, partition)
}

fn pe(producer_id: i64, epoch: i16) -> ProducerIdAndEpoch {
    ProducerIdAndEpoch {
        producer_id: ProducerId(producer_id),
        epoch: ProducerEpoch(epoch),
    }
}

/// A host that appends to an in-memory log and, unless told otherwise, acknowledges appends
/// and markers at once.
struct Host {
    c: Coordinator,
    now: Now,
    next_request: RequestId,
    /// Durable records, in log order, per `__transaction_state` partition.
    log: BTreeMap<i32, Vec<LogRecord>>,
    responses: HashMap<RequestId, Response>,
    markers: Vec<MarkerRequest>,
    /// Appends not yet acknowledged (when `hold_appends`).
    held: VecDeque<Effect>,
    hold_appends: bool,
    hold_markers: bool,
    need_ids: usize,
}

impl Host {
    fn new() -> Self {
        Self::with_partitions(1, &[0])
    }

    fn with_partitions(state_partitions: i32, led: &[i32]) -> Self {
        let mut c = Coordinator::new(TxnConfig::default(), state_partitions);
        c.add_producer_ids(ProducerIdBlock::new(1000, 100));
        let now = Now {
            monotonic_ms: 5_000,
            wall_ms: 1_700_000_000_000,
        };
        let mut out = Vec::new();
        for p in led {
            c.load_partition(*p, COORDINATOR_EPOCH, &mut out);
            c.finish_load(*p, now, &mut out);
        }
        assert!(out.is_empty());
        Self {
            c,
            now,
            next_request: 0,
            log: BTreeMap::new(),
            responses: HashMap::new(),
            markers: Vec::new(),
            held: VecDeque::new(),
            hold_appends: false,
            hold_markers: false,
            need_ids: 0,
        }
    }

    fn advance(&mut self, ms: i64) {
        self.now.monotonic_ms += ms;
        self.now.wall_ms += ms;
    }

    fn run(&mut self, effects: Vec<Effect>) {
        let mut queue: VecDeque<Effect> = effects.into();
        while let Some(e) = queue.pop_front() {
            match e {
                Effect::Append { .. } if self.hold_appends => self.held.push_back(e),
                Effect::Append {
                    id,
                    partition,
                    record,
                } => {
                    self.log.entry(partition).or_default().push(record);
                    let mut out = Vec::new();
                    self.c.handle_append_done(id, Ok(()), self.now, &mut out);
                    queue.extend(out);
                }
                Effect::WriteMarkers(m) => {
                    if self.hold_markers {
                        self.markers.push(m);
                    } else {
                        let mut out = Vec::new();
                        self.c.handle_markers_done(
                            &m.transactional_id,
                            m.producer_id,
                            m.producer_epoch,
                            &m.partitions,
                            self.now,
                            &mut out,
                        );
                        self.markers.push(m);
                        queue.extend(out);
                    }
                }
                Effect::Respond { request, response } => {
                    let earlier = self.responses.insert(request, response);
                    assert!(earlier.is_none(), "request {request} answered twice");
                }
                Effect::NeedProducerIds => self.need_ids += 1,
            }
        }
    }

    /// Acknowledges the oldest held append with `result`.
    fn release(&mut self, result: Result<(), AppendFailure>) {
        let Some(Effect::Append {
            id,
            partition,
            record,
        }) = self.held.pop_front()
        else {
            panic!("no held append");
        };
        if result.is_ok() {
            self.log.entry(partition).or_default().push(record);
        }
        let mut out = Vec::new();
        self.c.handle_append_done(id, result, self.now, &mut out);
        self.run(out);
    }

    fn request(
        &mut self,
        f: impl FnOnce(&mut Coordinator, RequestId, Now, &mut Vec<Effect>),
    ) -> RequestId {
        let r = self.next_request;
        self.next_request += 1;
        let mut out = Vec::new();
        f(&mut self.c, r, self.now, &mut out);
        self.run(out);
        r
    }

    fn answer(&self, r: RequestId) -> Option<Response> {
        self.responses.get(&r).cloned()
    }

    fn init_request(&mut self, id: &str, current: Option<ProducerIdAndEpoch>) -> RequestId {
        let args = InitProducerIdArgs {
            transactional_id: id.to_string(),
            transaction_timeout_ms: 60_000,
            current,
        };
        self.request(|c, r, now, out| c.handle_init_producer_id(r, args, now, out))
    }

    fn init(
        &mut self,
        id: &str,
        current: Option<ProducerIdAndEpoch>,
    ) -> Result<ProducerIdAndEpoch, ErrorCode> {
        let r = self.init_request(id, current);
        match self.answer(r) {
            Some(Response::InitProducerId(res)) => res,
            other => panic!("InitProducerId answered {other:?}"),
        }
    }

    fn add_request(
        &mut self,
        id: &str,
        p: ProducerIdAndEpoch,
        parts: &[TxnPartition],
    ) -> RequestId {
        let args = AddPartitionsArgs {
            transactional_id: id.to_string(),
            producer_id: p.producer_id,
            producer_epoch: p.epoch,
            partitions: parts.to_vec(),
        };
        self.request(|c, r, now, out| c.handle_add_partitions(r, args, now, out))
    }

    fn add(
        &mut self,
        id: &str,
        p: ProducerIdAndEpoch,
        parts: &[TxnPartition],
    ) -> Result<(), ErrorCode> {
        let r = self.add_request(id, p, parts);
        match self.answer(r) {
            Some(Response::AddPartitions(res)) => res,
            other => panic!("AddPartitions answered {other:?}"),
        }
    }

    fn end_request(&mut self, id: &str, p: ProducerIdAndEpoch, result: TxnResult) -> RequestId {
        let args = EndTxnArgs {
            transactional_id: id.to_string(),
            producer_id: p.producer_id,
            producer_epoch: p.epoch,
            result,
        };
        self.request(|c, r, now, out| c.handle_end_txn(r, args, now, out))
    }

    fn end(&mut self, id: &str, p: ProducerIdAndEpoch, result: TxnResult) -> Result<(), ErrorCode> {
        let r = self.end_request(id, p, result);
        match self.answer(r) {
            Some(Response::EndTxn(res)) => res,
            other => panic!("EndTxn answered {other:?}"),
        }
    }

    fn tick(&mut self) {
        let mut out = Vec::new();
        self.c.tick(self.now, &mut out);
        self.run(out);
    }

    fn state(&self, id: &str) -> Option<TxnState> {
        self.c.metadata(id).map(|m| m.state())
    }

    /// The states of `id`'s records in the log, in order (`None` for a tombstone).
    fn logged_states(&self, id: &str) -> Vec<Option<TxnState>> {
        let key = record::encode_key(id);
        self.log
            .values()
            .flatten()
            .filter(|r| r.key == key)
            .map(|r| {
                r.value.as_ref().map(|v| {
                    record::decode_value(v)
                        .expect("our own record decodes")
                        .state
                })
            })
            .collect()
    }

    fn last_logged(&self, id: &str) -> Option<TxnLogValue> {
        let key = record::encode_key(id);
        self.log
            .values()
            .flatten()
            .rfind(|r| r.key == key)
            .and_then(|r| r.value.as_ref())
            .map(|v| record::decode_value(v).expect("decodes"))
    }

    /// A new coordinator that replays this host's log, as a new leader would.
    fn replayed(&self) -> (Coordinator, Vec<Effect>) {
        let mut c = Coordinator::new(TxnConfig::default(), self.c_partitions());
        let mut out = Vec::new();
        for (p, records) in &self.log {
            c.load_partition(*p, COORDINATOR_EPOCH + 1, &mut out);
            for r in records {
                c.load_record(*p, &r.key, r.value.as_deref())
                    .expect("replays");
            }
            c.finish_load(*p, self.now, &mut out);
        }
        (c, out)
    }

    fn c_partitions(&self) -> i32 {
        1
    }
}

/// The state table is Kafka's: each state's id byte, and the edges validPreviousStates
/// allows, no more.
#[test]
fn state_ids_and_edges() {
    use TxnState::*;
    for s in TxnState::ALL {
        assert_eq!(TxnState::from_id(s.id()), Some(s));
    }
    assert_eq!(TxnState::from_id(8), None);
    let edges: Vec<(TxnState, TxnState)> = TxnState::ALL
        .into_iter()
        .flat_map(|a| TxnState::ALL.into_iter().map(move |b| (a, b)))
        .filter(|(a, b)| a.can_transition_to(*b))
        .collect();
    let want = [
        (Empty, Empty),
        (Empty, Ongoing),
        (Empty, PrepareAbort),
        (Empty, Dead),
        (Ongoing, Ongoing),
        (Ongoing, PrepareCommit),
        (Ongoing, PrepareAbort),
        (Ongoing, PrepareEpochFence),
        (PrepareCommit, CompleteCommit),
        (PrepareAbort, CompleteAbort),
        (CompleteCommit, Empty),
        (CompleteCommit, Ongoing),
        (CompleteCommit, PrepareAbort),
        (CompleteCommit, Dead),
        (CompleteAbort, Empty),
        (CompleteAbort, Ongoing),
        (CompleteAbort, PrepareAbort),
        (CompleteAbort, Dead),
        (PrepareEpochFence, PrepareAbort),
    ];
    assert_eq!(edges.len(), want.len(), "{edges:?}");
    for e in want {
        assert!(edges.contains(&e), "missing {e:?}");
    }
    assert!(Empty.expiration_allowed() && CompleteAbort.expiration_allowed());
    assert!(!Ongoing.expiration_allowed() && !PrepareCommit.expiration_allowed());
}

/// A whole committed transaction: InitProducerId (Empty, epoch 0), AddPartitions (Ongoing,
/// once per new partition), EndTxn answered once PrepareCommit is durable, COMMIT markers with
/// the coordinator epoch, then CompleteCommit; a second InitProducerId bumps the epoch.
#[test]
fn commit_lifecycle() {
    let mut h = Host::new();
    let p = h.init("t", None).expect("init");
    assert_eq!(p, pe(1000, 0));
    assert_eq!(h.state("t"), Some(TxnState::Empty));
    h.add("t", p, &[tp("a", 0), tp("a", 1)]).expect("add");
    assert_eq!(h.state("t"), Some(TxnState::Ongoing));
    let logged = h.logged_states("t").len();
    h.add("t", p, &[tp("a", 1)]).expect("re-add");
    assert_eq!(h.logged_states("t").len(), logged, "nothing new: no record");
    h.add("t", p, &[tp("b", 0)]).expect("add b");
    h.hold_markers = true;
    h.end("t", p, TxnResult::Commit).expect("commit");
    assert_eq!(h.state("t"), Some(TxnState::PrepareCommit));
    let m = h.markers.pop().expect("markers requested");
    assert_eq!(m.result, TxnResult::Commit);
    assert_eq!(m.coordinator_epoch, COORDINATOR_EPOCH);
    assert_eq!((m.producer_id, m.producer_epoch), (p.producer_id, p.epoch));
    assert_eq!(m.partitions, vec![tp("a", 0), tp("a", 1), tp("b", 0)]);
    // Markers land in two steps; the Complete record waits for the last.
    let mut out = Vec::new();
    h.c.handle_markers_done("t", p.producer_id, p.epoch, &[tp("a", 0)], h.now, &mut out);
    assert!(out.is_empty());
    h.c.handle_markers_done(
        "t",
        p.producer_id,
        p.epoch,
        &[tp("a", 1), tp("b", 0)],
        h.now,
        &mut out,
    );
    h.run(out);
    assert_eq!(h.state("t"), Some(TxnState::CompleteCommit));
    use TxnState::*;
    let states: Vec<TxnState> = h.logged_states("t").into_iter().flatten().collect();
    assert_eq!(
        states,
        vec![Empty, Ongoing, Ongoing, PrepareCommit, CompleteCommit]
    );
    assert!(h.last_logged("t").expect("logged").partitions.is_empty());
    assert_eq!(h.init("t", None), Ok(pe(1000, 1)));
}

/// EndTxn in each state answers as Kafka does: a retry of a completed end succeeds, a
/// retry while markers are pending is CONCURRENT_TRANSACTIONS, the other result is
/// INVALID_TXN_STATE, and nothing open is INVALID_TXN_STATE.
#[test]
fn end_txn_in_every_state() {
    let mut h = Host::new();
    let p = h.init("t", None).expect("init");
    assert_eq!(
        h.end("t", p, TxnResult::Commit),
        Err(ErrorCode::InvalidTxnState)
    );
    h.add("t", p, &[tp("a", 0)]).expect("add");
    h.hold_markers = true;
    h.end("t", p, TxnResult::Abort).expect("abort");
    assert_eq!(
        h.end("t", p, TxnResult::Abort),
        Err(ErrorCode::ConcurrentTransactions)
    );
    assert_eq!(
        h.end("t", p, TxnResult::Commit),
        Err(ErrorCode::InvalidTxnState)
    );
    assert_eq!(
        h.add("t", p, &[tp("a", 1)]),
        Err(ErrorCode::ConcurrentTransactions)
    );
    assert_eq!(h.init("t", None), Err(ErrorCode::ConcurrentTransactions));
    let m = h.markers.pop().expect("markers");
    assert_eq!(m.result, TxnResult::Abort);
    let mut out = Vec::new();
    h.c.handle_markers_done(
        "t",
        m.producer_id,
        m.producer_epoch,
        &m.partitions,
        h.now,
        &mut out,
    );
    h.run(out);
    assert_eq!(h.state("t"), Some(TxnState::CompleteAbort));
    assert_eq!(h.end("t", p, TxnResult::Abort), Ok(()));
    assert_eq!(
        h.end("t", p, TxnResult::Commit),
        Err(ErrorCode::InvalidTxnState)
    );
    // A new transaction starts from CompleteAbort.
    h.add("t", p, &[tp("a", 0)]).expect("add again");
    assert_eq!(h.state("t"), Some(TxnState::Ongoing));
}

/// The producer checks come in Kafka's order and with its codes: unknown id or another
/// producer id is INVALID_PRODUCER_ID_MAPPING, an old epoch PRODUCER_FENCED, an append in
/// flight CONCURRENT_TRANSACTIONS; bad ids and timeouts are refused before anything else.
#[test]
fn producer_checks() {
    let mut h = Host::new();
    let p = h.init("t", None).expect("init");
    assert_eq!(
        h.add("nobody", p, &[tp("a", 0)]),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        h.add("t", pe(9, 0), &[tp("a", 0)]),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        h.add("t", pe(1000, 3), &[tp("a", 0)]),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        h.end("t", pe(1000, 3), TxnResult::Commit),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(h.add("", p, &[tp("a", 0)]), Err(ErrorCode::InvalidRequest));
    assert_eq!(h.init("", None), Err(ErrorCode::InvalidRequest));
    for timeout in [0, -1, 900_001] {
        let args = InitProducerIdArgs {
            transactional_id: "t".into(),
            transaction_timeout_ms: timeout,
            current: None,
        };
        let r = h.request(|c, r, now, out| c.handle_init_producer_id(r, args, now, out));
        assert_eq!(
            h.answer(r),
            Some(Response::InitProducerId(Err(
                ErrorCode::InvalidTransactionTimeout
            )))
        );
    }
    h.hold_appends = true;
    let first = h.add_request("t", p, &[tp("a", 0)]);
    assert_eq!(h.answer(first), None, "waits for its record");
    assert_eq!(
        h.add("t", p, &[tp("a", 1)]),
        Err(ErrorCode::ConcurrentTransactions)
    );
    assert_eq!(h.init("t", None), Err(ErrorCode::ConcurrentTransactions));
    h.release(Ok(()));
    assert_eq!(h.answer(first), Some(Response::AddPartitions(Ok(()))));
}

/// Requests for an id whose partition this shard does not lead get NOT_COORDINATOR; while
/// the partition replays, COORDINATOR_LOAD_IN_PROGRESS.
#[test]
fn not_coordinator_and_loading() {
    let (mine, other) = ("t", "u");
    let p_mine = partition_for(mine, 2);
    let p_other = partition_for(other, 2);
    assert_ne!(p_mine, p_other, "pick two ids on different partitions");
    let mut h = Host::with_partitions(2, &[p_mine]);
    assert!(h.init(mine, None).is_ok());
    assert_eq!(h.init(other, None), Err(ErrorCode::NotCoordinator));
    let mut out = Vec::new();
    h.c.load_partition(p_other, 3, &mut out);
    assert_eq!(
        h.init(other, None),
        Err(ErrorCode::CoordinatorLoadInProgress)
    );
    h.c.finish_load(p_other, h.now, &mut out);
    assert!(h.init(other, None).is_ok());
}

/// A second instance of a producer whose transaction is open fences the first: the epoch is
/// bumped at once (the old instance is refused), the transaction is aborted with markers at
/// the bumped epoch, the new instance is told to retry, and its retry gets one more epoch.
#[test]
fn new_instance_fences_and_aborts() {
    let mut h = Host::new();
    let old = h.init("t", None).expect("init");
    h.add("t", old, &[tp("a", 0)]).expect("add");
    h.hold_markers = true;
    assert_eq!(h.init("t", None), Err(ErrorCode::ConcurrentTransactions));
    assert_eq!(h.state("t"), Some(TxnState::PrepareAbort));
    let m = h.markers.pop().expect("abort markers");
    assert_eq!(
        (m.result, m.producer_epoch),
        (TxnResult::Abort, ProducerEpoch(1))
    );
    assert_eq!(
        h.add("t", old, &[tp("a", 1)]),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        h.end("t", old, TxnResult::Commit),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        h.init("t", None),
        Err(ErrorCode::ConcurrentTransactions),
        "markers pending"
    );
    let mut out = Vec::new();
    h.c.handle_markers_done(
        "t",
        m.producer_id,
        m.producer_epoch,
        &m.partitions,
        h.now,
        &mut out,
    );
    h.run(out);
    assert_eq!(h.state("t"), Some(TxnState::CompleteAbort));
    assert_eq!(h.init("t", None), Ok(pe(1000, 2)));
}

/// An Ongoing transaction past transaction.timeout.ms is fenced and aborted by the
/// coordinator at its next check; the producer then gets PRODUCER_FENCED.
#[test]
fn timed_out_transaction_is_aborted() {
    let mut h = Host::new();
    let p = h.init("t", None).expect("init");
    h.add("t", p, &[tp("a", 0)]).expect("add");
    h.tick();
    assert_eq!(h.state("t"), Some(TxnState::Ongoing), "not yet");
    h.advance(60_000 + 10_001);
    h.tick();
    assert_eq!(h.state("t"), Some(TxnState::CompleteAbort));
    let m = h.markers.last().expect("markers");
    assert_eq!(
        (m.result, m.producer_epoch),
        (TxnResult::Abort, ProducerEpoch(1))
    );
    assert_eq!(
        h.end("t", p, TxnResult::Commit),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(h.init("t", None), Ok(pe(1000, 2)));
}

/// An id idle past transactional.id.expiration.ms (Empty or Complete*) is removed with a
/// tombstone; an open transaction is never expired; a later InitProducerId starts afresh.
#[test]
fn idle_ids_expire_with_a_tombstone() {
    let mut h = Host::new();
    let p = h.init("idle", None).expect("init");
    let q = h.init("busy", None).expect("init");
    h.add("busy", q, &[tp("a", 0)]).expect("add");
    let week = TxnConfig::default().transactional_id_expiration_ms;
    h.advance(week + 1);
    h.tick();
    assert_eq!(h.state("idle"), None);
    assert_eq!(
        h.logged_states("idle").last(),
        Some(&None),
        "tombstone written"
    );
    // "busy" timed out meanwhile and was aborted, but not expired in the same pass.
    assert_eq!(h.state("busy"), Some(TxnState::CompleteAbort));
    let fresh = h.init("idle", None).expect("init again");
    assert_ne!(fresh.producer_id, p.producer_id);
    assert_eq!(fresh.epoch, ProducerEpoch(0));
}

/// At an exhausted epoch InitProducerId rotates to a new producer id at epoch 0 (Kafka
/// keeps the last epoch for fencing); a KIP-360 retry that lost this answer (old id, old
/// epoch) gets the same new id and epoch, not another bump.
#[test]
fn exhausted_epoch_rotates_producer_id() {
    let mut h = Host::new();
    let mut out = Vec::new();
    let value = TxnLogValue {
        producer_id: ProducerId(500),
        prev_producer_id: ProducerId::NONE,
        next_producer_id: ProducerId::NONE,
        next_producer_epoch: ProducerEpoch::NONE,
        producer_epoch: ProducerEpoch(i16::MAX - 1),
        timeout_ms: 60_000,
        state: TxnState::CompleteCommit,
        partitions: BTreeSet::new(),
        last_update_timestamp_ms: h.now.wall_ms,
        start_timestamp_ms: h.now.wall_ms,
        client_transaction_version: 0,
    };
    h.c.load_partition(0, COORDINATOR_EPOCH, &mut out);
    h.c.load_record(
        0,
        &record::encode_key("t"),
        Some(&record::encode_value(&value, 1)),
    )
    .expect("loads");
    h.c.finish_load(0, h.now, &mut out);
    let old = pe(500, i16::MAX - 1);
    let rotated = h.init("t", Some(old)).expect("rotates");
    assert_eq!(rotated, pe(1000, 0));
    assert_eq!(
        h.last_logged("t").expect("logged").prev_producer_id,
        ProducerId(500)
    );
    assert_eq!(
        h.init("t", Some(old)),
        Ok(rotated),
        "retry answered the same"
    );
    assert_eq!(
        h.init("t", Some(pe(500, 3))),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
}

/// KIP-360 recovery: a producer presenting its current id and epoch gets the next epoch; a
/// retry of that (answer lost) gets the same; an older epoch is fenced; another producer id
/// is not its mapping.
#[test]
fn recovering_producer_keeps_its_id() {
    let mut h = Host::new();
    let p = h.init("t", None).expect("init");
    let p1 = h.init("t", Some(p)).expect("bump");
    assert_eq!(p1, pe(1000, 1));
    assert_eq!(h.init("t", Some(p)), Ok(p1), "a retry of the bump");
    let p2 = h.init("t", Some(p1)).expect("bump again");
    assert_eq!(p2, pe(1000, 2));
    assert_eq!(h.init("t", Some(p)), Err(ErrorCode::ProducerFenced));
    assert_eq!(
        h.init("t", Some(pe(77, 2))),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    // For an id the coordinator just created, any presented id is accepted (the producer
    // lost its state with UNKNOWN_PRODUCER_ID and gets the new one).
    assert_eq!(h.init("new", Some(pe(77, 5))), Ok(pe(1001, 0)));
}

/// Without producer ids InitProducerId for a new id is COORDINATOR_LOAD_IN_PROGRESS (as Kafka
/// answers while its block is on the way) and the host is asked, once, for a block.
#[test]
fn producer_id_blocks() {
    let mut h = Host::new();
    h.c.add_producer_ids(ProducerIdBlock::new(5, 1));
    assert_eq!(h.init("a", None), Ok(pe(5, 0)));
    assert_eq!(h.init("b", None), Err(ErrorCode::CoordinatorLoadInProgress));
    assert_eq!(h.init("c", None), Err(ErrorCode::CoordinatorLoadInProgress));
    assert_eq!(h.need_ids, 1);
    h.c.add_producer_ids(ProducerIdBlock::new(100, 10));
    assert_eq!(h.init("b", None), Ok(pe(100, 0)));
}

/// AddOffsetsToTxn adds the group's `__consumer_offsets` partition (the group hash).
#[test]
fn add_offsets_adds_the_group_partition() {
    let mut h = Host::new();
    let p = h.init("t", None).expect("init");
    let args = AddOffsetsArgs {
        transactional_id: "t".into(),
        producer_id: p.producer_id,
        producer_epoch: p.epoch,
        group_id: "g".into(),
    };
    let r = h.request(|c, r, now, out| c.handle_add_offsets(r, args, now, out));
    assert_eq!(h.answer(r), Some(Response::AddOffsets(Ok(()))));
    let want = tp(
        crate::group::OFFSETS_TOPIC,
        crate::group::partition_for("g", 50),
    );
    assert_eq!(h.c.describe("t").expect("known").partitions, vec![want]);
}

/// A failed append changes nothing but answers the waiter (COORDINATOR_NOT_AVAILABLE or
/// NOT_COORDINATOR); a failed fence keeps its in-memory epoch bump so the old instance stays
/// fenced, and the retried fence does not bump a second time.
#[test]
fn failed_appends() {
    let mut h = Host::new();
    let p = h.init("t", None).expect("init");
    h.hold_appends = true;
    let r = h.init_request("t", None);
    h.release(Err(AppendFailure::Unavailable));
    assert_eq!(
        h.answer(r),
        Some(Response::InitProducerId(Err(
            ErrorCode::CoordinatorNotAvailable
        )))
    );
    assert_eq!(
        h.c.metadata("t").expect("known").fields.producer_epoch,
        p.epoch
    );
    let r = h.add_request("t", p, &[tp("a", 0)]);
    h.release(Err(AppendFailure::NotLeader));
    assert_eq!(
        h.answer(r),
        Some(Response::AddPartitions(Err(ErrorCode::NotCoordinator)))
    );
    assert_eq!(h.state("t"), Some(TxnState::Empty));
    let r = h.add_request("t", p, &[tp("a", 0)]);
    h.release(Ok(()));
    assert_eq!(h.answer(r), Some(Response::AddPartitions(Ok(()))));
    // The fence's PrepareAbort fails: epoch 1 in memory, Ongoing on disk.
    let r = h.init_request("t", None);
    h.release(Err(AppendFailure::Unavailable));
    assert_eq!(
        h.answer(r),
        Some(Response::InitProducerId(Err(
            ErrorCode::CoordinatorNotAvailable
        )))
    );
    let meta = h.c.metadata("t").expect("known");
    assert_eq!(
        (meta.state(), meta.fields.producer_epoch),
        (TxnState::Ongoing, ProducerEpoch(1))
    );
    assert_eq!(h.add("t", p, &[tp("a", 1)]), Err(ErrorCode::ProducerFenced));
    h.hold_appends = false;
    assert_eq!(h.init("t", None), Err(ErrorCode::ConcurrentTransactions));
    assert_eq!(
        h.markers.last().expect("markers").producer_epoch,
        ProducerEpoch(1),
        "no second bump"
    );
    assert_eq!(h.init("t", None), Ok(pe(1000, 2)));
}

/// Losing the partition answers waiters NOT_COORDINATOR and forgets its ids; a late append
/// completion is ignored. A new leader replaying the log has the same state, resends the
/// markers of a prepared transaction, and times out an open one from its stored start.
#[test]
fn failover_replay() {
    let mut h = Host::new();
    let a = h.init("a", None).expect("init");
    h.add("a", a, &[tp("x", 0)]).expect("add");
    let b = h.init("b", None).expect("init");
    h.add("b", b, &[tp("y", 0), tp("y", 1)]).expect("add");
    h.hold_markers = true;
    h.end("b", b, TxnResult::Commit).expect("commit");
    let c = h.init("c", None).expect("init");
    h.hold_appends = true;
    let waiting = h.add_request("c", c, &[tp("z", 0)]);
    let mut out = Vec::new();
    h.c.unload_partition(0, &mut out);
    h.run(out);
    assert_eq!(
        h.answer(waiting),
        Some(Response::AddPartitions(Err(ErrorCode::NotCoordinator)))
    );
    assert_eq!(h.c.txn_count(), 0);
    h.hold_appends = false;
    h.release(Ok(())); // the write landed after all; nobody waits for it
    assert_eq!(h.c.txn_count(), 0);

    let (mut c2, out) = h.replayed();
    let resent: Vec<&MarkerRequest> = out
        .iter()
        .filter_map(|e| match e {
            Effect::WriteMarkers(m) => Some(m),
            _ => None,
        })
        .collect();
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0].transactional_id, "b");
    assert_eq!(resent[0].result, TxnResult::Commit);
    assert_eq!(resent[0].coordinator_epoch, COORDINATOR_EPOCH + 1);
    assert_eq!(resent[0].partitions, vec![tp("y", 0), tp("y", 1)]);
    assert_eq!(c2.metadata("a").expect("a").state(), TxnState::Ongoing);
    assert_eq!(
        c2.metadata("c").expect("c").state(),
        TxnState::Ongoing,
        "the late write counts"
    );
    let mut out = Vec::new();
    let later = Now {
        monotonic_ms: h.now.monotonic_ms + 60_001,
        wall_ms: h.now.wall_ms + 60_001,
    };
    c2.tick(later, &mut out);
    let aborted: Vec<String> = out
        .iter()
        .filter_map(|e| match e {
            Effect::Append { record, .. } => {
                let v = record::decode_value(record.value.as_ref()?).ok()?;
                (v.state == TxnState::PrepareAbort).then(|| record::decode_key(&record.key).ok())?
            }
            _ => None,
        })
        .collect();
    assert_eq!(aborted, vec!["a".to_string(), "c".to_string()]);
}

/// What a random run does next.
#[derive(Debug, Clone, Copy)]
enum Op {
    Init { id: usize, recover: bool },
    Add { id: usize, topic: usize },
    Offsets { id: usize },
    End { id: usize, commit: bool },
    ReleaseAppend { fail: bool },
    DeliverMarkers,
    Tick { ms: i64 },
    Failover,
}

fn random_op(rng: &mut StdRng, ids: usize) -> Op {
    let id = rng.gen_range(0..ids);
    match rng.gen_range(0..100) {
        0..=4 => Op::Init {
            id,
            recover: rng.gen_bool(0.5),
        },
        5..=31 => Op::Add {
            id,
            topic: rng.gen_range(0..4),
        },
        32..=36 => Op::Offsets { id },
        37..=51 => Op::End {
            id,
            commit: rng.gen_bool(0.6),
        },
        52..=74 => Op::ReleaseAppend {
            fail: rng.gen_bool(0.1),
        },
        75..=89 => Op::DeliverMarkers,
        90..=97 => Op::Tick {
            ms: rng.gen_range(0..6_000),
        },
        _ => Op::Failover,
    }
}

/// Seeded random operations from several producer instances per id, with appends that
/// complete late or fail, markers delivered late, timeouts and failovers, checked against
/// an oracle: every request is answered once; each id's records follow legal edges; an Ok
/// answer never goes to an epoch older than one already handed out for that producer id
/// (fencing); every partition acknowledged to a transaction is in its Prepare record and
/// gets its marker with that record's result; and a replay of the log equals the live state.
#[test]
fn random_operations_against_oracle() {
    let seeds: Vec<u64> = match std::env::var("TXN_SEED") {
        Ok(s) => vec![s.parse().expect("TXN_SEED is a number")],
        Err(_) => (0..40).collect(),
    };
    for seed in seeds {
        run_random(seed, 600);
    }
}

fn run_random(seed: u64, steps: usize) {
    let ids = ["t0", "t1", "t2"];
    let topics = ["a", "b", "c", "d"];
    let mut rng = StdRng::seed_from_u64(seed);
    let mut h = Host::new();
    h.hold_appends = true;
    h.hold_markers = true;
    // Each id has two producer instances; each remembers what InitProducerId gave it.
    let mut instances: HashMap<(usize, usize), ProducerIdAndEpoch> = HashMap::new();
    // The instance that last got an answer to InitProducerId, per id: the live one, used
    // most of the time (the other is a zombie).
    let mut live: HashMap<usize, usize> = HashMap::new();
    let pick = |rng: &mut StdRng, live: &HashMap<usize, usize>, id: usize| -> usize {
        let l = live.get(&id).copied().unwrap_or(0);
        if rng.gen_bool(0.85) {
            l
        } else {
            1 - l
        }
    };
    // Highest epoch handed out per producer id.
    let mut handed: HashMap<ProducerId, ProducerEpoch> = HashMap::new();
    // Requests in flight: request -> (id, the instance an InitProducerId is for, producer,
    // partitions).
    type Asked = (usize, Option<usize>, ProducerIdAndEpoch, Vec<TxnPartition>);
    let mut asked: HashMap<RequestId, Asked> = HashMap::new();
    // Per id, partitions acknowledged since the last Prepare record.
    let mut acked: HashMap<usize, BTreeSet<TxnPartition>> = HashMap::new();
    // Partitions that got their marker, per (id, producer, epoch, result).
    type MarkerKey = (String, ProducerId, ProducerEpoch, TxnResult);
    let mut delivered: HashMap<MarkerKey, BTreeSet<TxnPartition>> = HashMap::new();
    let mut requests = 0usize;
    let mut coordinator_epoch = COORDINATOR_EPOCH;
    for step in 0..steps {
        let op = random_op(&mut rng, ids.len());
        let ctx = format!("seed {seed} step {step} {op:?}");
        match op {
            Op::Init { id, recover } => {
                let inst = pick(&mut rng, &live, id);
                let current = if recover {
                    instances.get(&(id, inst)).copied()
                } else {
                    None
                };
                let r = h.init_request(ids[id], current);
                asked.insert(r, (id, Some(inst), current.unwrap_or(pe(-1, -1)), vec![]));
                requests += 1;
            }
            Op::Add { id, topic } => {
                let inst = pick(&mut rng, &live, id);
                let Some(p) = instances.get(&(id, inst)).copied() else {
                    continue;
                };
                let parts = vec![tp(topics[topic], rng.gen_range(0..2))];
                let r = h.add_request(ids[id], p, &parts);
                asked.insert(r, (id, None, p, parts));
                requests += 1;
            }
            Op::Offsets { id } => {
                let inst = pick(&mut rng, &live, id);
                let Some(p) = instances.get(&(id, inst)).copied() else {
                    continue;
                };
                let args = AddOffsetsArgs {
                    transactional_id: ids[id].to_string(),
                    producer_id: p.producer_id,
                    producer_epoch: p.epoch,
                    group_id: "g".into(),
                };
                let r = h.request(|c, r, now, out| c.handle_add_offsets(r, args, now, out));
                let part = tp(
                    crate::group::OFFSETS_TOPIC,
                    crate::group::partition_for("g", 50),
                );
                asked.insert(r, (id, None, p, vec![part]));
                requests += 1;
            }
            Op::End { id, commit } => {
                let inst = pick(&mut rng, &live, id);
                let Some(p) = instances.get(&(id, inst)).copied() else {
                    continue;
                };
                let result = if commit {
                    TxnResult::Commit
                } else {
                    TxnResult::Abort
                };
                let r = h.end_request(ids[id], p, result);
                asked.insert(r, (id, None, p, vec![]));
                requests += 1;
            }
            Op::ReleaseAppend { fail } => {
                if !h.held.is_empty() {
                    h.release(if fail {
                        Err(AppendFailure::Unavailable)
                    } else {
                        Ok(())
                    });
                }
            }
            Op::DeliverMarkers => {
                if !h.markers.is_empty() {
                    // Some of a request's partitions get their marker now, the rest later.
                    let mut m = h.markers.remove(rng.gen_range(0..h.markers.len()));
                    let cut = rng.gen_range(1..=m.partitions.len());
                    let later = m.partitions.split_off(cut);
                    delivered
                        .entry((
                            m.transactional_id.clone(),
                            m.producer_id,
                            m.producer_epoch,
                            m.result,
                        ))
                        .or_default()
                        .extend(m.partitions.iter().cloned());
                    let mut out = Vec::new();
                    h.c.handle_markers_done(
                        &m.transactional_id,
                        m.producer_id,
                        m.producer_epoch,
                        &m.partitions,
                        h.now,
                        &mut out,
                    );
                    if !later.is_empty() {
                        h.markers.push(MarkerRequest {
                            partitions: later,
                            ..m
                        });
                    }
                    h.run(out);
                }
            }
            Op::Tick { ms } => {
                h.advance(ms);
                h.tick();
            }
            Op::Failover => {
                // Held appends land or not at random, then a new leader replays the log.
                while !h.held.is_empty() {
                    let ok = rng.gen_bool(0.5);
                    let Some(Effect::Append {
                        partition, record, ..
                    }) = h.held.pop_front()
                    else {
                        unreachable!()
                    };
                    if ok {
                        h.log.entry(partition).or_default().push(record);
                    }
                }
                let mut out = Vec::new();
                h.c.unload_partition(0, &mut out);
                h.markers.clear();
                coordinator_epoch += 1;
                h.c.load_partition(0, coordinator_epoch, &mut out);
                for r in h.log.get(&0).cloned().unwrap_or_default() {
                    h.c.load_record(0, &r.key, r.value.as_deref())
                        .expect("replays");
                }
                h.c.finish_load(0, h.now, &mut out);
                h.run(out);
                // What was acknowledged before is still in the log; partitions acknowledged
                // since the last Prepare stay owed.
            }
        }
        // Oracle: look at every answer that arrived.
        let mut answered: Vec<RequestId> = asked
            .keys()
            .copied()
            .filter(|r| h.responses.contains_key(r))
            .collect();
        answered.sort();
        for r in answered {
            let Some((id, inst, p, parts)) = asked.remove(&r) else {
                continue;
            };
            let response = h.responses.get(&r).cloned().expect("answered");
            match response {
                Response::InitProducerId(Ok(got)) => {
                    let top = handed.entry(got.producer_id).or_insert(ProducerEpoch::NONE);
                    assert!(
                        got.epoch >= *top,
                        "{ctx}: epoch went back: {got:?} after {top:?}"
                    );
                    *top = got.epoch;
                    if let Some(inst) = inst {
                        instances.insert((id, inst), got);
                        live.insert(id, inst);
                    }
                }
                Response::AddPartitions(Ok(()))
                | Response::AddOffsets(Ok(()))
                | Response::EndTxn(Ok(())) => {
                    let top = handed
                        .get(&p.producer_id)
                        .copied()
                        .unwrap_or(ProducerEpoch::NONE);
                    assert!(
                        p.epoch >= top,
                        "{ctx}: zombie {p:?} got Ok, epoch {top:?} handed out"
                    );
                    acked.entry(id).or_default().extend(parts);
                }
                _ => {}
            }
        }
        // Oracle: records per id follow legal edges, and every Prepare holds what was acked.
        for (i, id) in ids.iter().enumerate() {
            let states = h.logged_states(id);
            // A Complete record only after every partition of its Prepare has its marker.
            let key = record::encode_key(id);
            let values: Vec<Option<TxnLogValue>> = h
                .log
                .values()
                .flatten()
                .filter(|r| r.key == key)
                .map(|r| {
                    r.value
                        .as_ref()
                        .map(|v| record::decode_value(v).expect("decodes"))
                })
                .collect();
            for pair in values.windows(2) {
                if let [Some(prepare), Some(complete)] = pair {
                    let result = match complete.state {
                        TxnState::CompleteCommit => TxnResult::Commit,
                        TxnState::CompleteAbort => TxnResult::Abort,
                        _ => continue,
                    };
                    let marked = delivered
                        .get(&(
                            id.to_string(),
                            prepare.producer_id,
                            prepare.producer_epoch,
                            result,
                        ))
                        .cloned()
                        .unwrap_or_default();
                    assert!(
                        prepare.partitions.is_subset(&marked),
                        "{ctx}: {id} completed with {marked:?} of {:?}",
                        prepare.partitions
                    );
                }
            }
            let mut prev: Option<TxnState> = None;
            for s in &states {
                match (prev, s) {
                    (None, Some(s)) => assert_eq!(*s, TxnState::Empty, "{ctx}: {id} starts {s:?}"),
                    (Some(a), Some(b)) => assert!(
                        a.can_transition_to(*b),
                        "{ctx}: {id} {a:?} -> {b:?} in {states:?}"
                    ),
                    (_, None) => {}
                }
                prev = *s;
            }
            if let Some(last) = h.last_logged(id) {
                if matches!(last.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
                    if let Some(acked) = acked.get(&i) {
                        assert!(
                            acked.is_subset(&last.partitions),
                            "{ctx}: {id} acked {acked:?} not in {:?}",
                            last.partitions
                        );
                    }
                }
                if matches!(
                    last.state,
                    TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Empty
                ) {
                    acked.remove(&i);
                }
            }
        }
        // Oracle: every marker asked for matches the last durable Prepare record of its id.
        for m in &h.markers {
            let last = h
                .last_logged(&m.transactional_id)
                .expect("marker for a logged id");
            let want = match m.result {
                TxnResult::Commit => TxnState::PrepareCommit,
                TxnResult::Abort => TxnState::PrepareAbort,
            };
            assert_eq!(last.state, want, "{ctx}: {m:?}");
            assert_eq!(
                (last.producer_id, last.producer_epoch),
                (m.producer_id, m.producer_epoch),
                "{ctx}"
            );
            assert!(
                m.partitions.iter().all(|p| last.partitions.contains(p)),
                "{ctx}"
            );
            assert_eq!(m.coordinator_epoch, coordinator_epoch, "{ctx}");
        }
        // Oracle: with nothing in flight, a replay of the log is the live state (but for the
        // in-memory-only parts: the last epoch, a fence whose write failed, and markers
        // already written).
        if h.held.is_empty() {
            let (replayed, _) = h.replayed();
            for id in ids {
                let live = h.c.metadata(id);
                let back = replayed.metadata(id);
                match (live, back) {
                    (None, None) => {}
                    (Some(l), Some(b)) => {
                        if l.has_failed_epoch_fence
                            || matches!(l.state(), TxnState::PrepareCommit | TxnState::PrepareAbort)
                        {
                            continue;
                        }
                        let strip = |f: &state::TxnFields| state::TxnFields {
                            last_producer_epoch: ProducerEpoch::NONE,
                            ..f.clone()
                        };
                        assert_eq!(strip(&l.fields), strip(&b.fields), "{ctx}: {id}");
                    }
                    (l, b) => {
                        // An id created by InitProducerId whose first record failed exists in
                        // memory only, as in Kafka.
                        let l = l.expect("only live may lack a record");
                        assert!(
                            b.is_none() && l.fields.producer_epoch == ProducerEpoch::NONE,
                            "{ctx}: {id} {l:?}"
                        );
                    }
                }
            }
        }
    }
    // Drain: everything in flight completes and every request has its one answer.
    h.hold_appends = false;
    while !h.held.is_empty() {
        h.release(Ok(()));
    }
    assert_eq!(
        h.responses.len(),
        requests,
        "seed {seed}: every request answered once"
    );
    if std::env::var("TXN_STATS").is_ok() {
        let mut states: BTreeMap<&str, usize> = BTreeMap::new();
        for r in h.log.values().flatten() {
            let name = r
                .value
                .as_ref()
                .map(|v| record::decode_value(v).expect("decodes").state.name())
                .unwrap_or("tombstone");
            *states.entry(name).or_default() += 1;
        }
        let mut answers: BTreeMap<String, usize> = BTreeMap::new();
        for r in h.responses.values() {
            *answers.entry(format!("{:?}", r.error())).or_default() += 1;
        }
        eprintln!("seed {seed}: records {states:?} answers {answers:?}");
    }
}

/// DescribeTransactions and ListTransactions answer as Kafka's coordinator does: the
/// described fields of an open transaction, TRANSACTIONAL_ID_NOT_FOUND for an unknown id,
/// NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS by partition, filters applied, and no
/// listing at all while a partition loads.
#[test]
fn describe_and_list_for_admins() {
    use super::admin::{ListFilter, ListQuery};
    let (mine, other) = ("t", "u");
    let p_mine = partition_for(mine, 2);
    let p_other = partition_for(other, 2);
    let mut h = Host::with_partitions(2, &[p_mine]);
    let p = h.init(mine, None).expect("init");
    h.add(mine, p, &[tp("a", 1), tp("a", 0)]).expect("add");
    let d = h.c.describe_checked(mine).expect("described");
    assert_eq!(d.state, TxnState::Ongoing);
    assert_eq!((d.producer_id, d.producer_epoch), (p.producer_id, p.epoch));
    assert_eq!(d.timeout_ms, 60_000);
    assert_eq!(d.start_timestamp_ms, h.now.wall_ms);
    let mut parts = d.partitions.clone();
    parts.sort_by_key(|x| x.partition);
    assert_eq!(parts, vec![tp("a", 0), tp("a", 1)]);

    assert_eq!(
        h.c.describe_checked(other).err(),
        Some(ErrorCode::NotCoordinator)
    );
    // Another id on a led partition that was never initialised.
    let unknown = (0..1000)
        .map(|i| format!("x{i}"))
        .find(|id| partition_for(id, 2) == p_mine)
        .expect("an id on the led partition");
    assert_eq!(
        h.c.describe_checked(&unknown).err(),
        Some(ErrorCode::TransactionalIdNotFound)
    );

    let all = ListFilter::parse(ListQuery {
        duration_ms: -1,
        ..ListQuery::default()
    })
    .expect("filter")
    .0;
    let listed = h.c.list_filtered(&all, h.now.wall_ms).expect("listed");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].transactional_id, mine);
    let committed = ListFilter::parse(ListQuery {
        state_names: vec!["CompleteCommit".into()],
        duration_ms: -1,
        ..ListQuery::default()
    })
    .expect("filter")
    .0;
    assert!(h
        .c
        .list_filtered(&committed, h.now.wall_ms)
        .expect("listed")
        .is_empty());
    h.end(mine, p, TxnResult::Commit).expect("commit");
    assert_eq!(
        h.c.list_filtered(&committed, h.now.wall_ms)
            .expect("listed")
            .len(),
        1
    );

    let mut out = Vec::new();
    h.c.load_partition(p_other, 3, &mut out);
    assert_eq!(
        h.c.describe_checked(other).err(),
        Some(ErrorCode::CoordinatorLoadInProgress)
    );
    assert_eq!(
        h.c.list_filtered(&all, h.now.wall_ms).err(),
        Some(ErrorCode::CoordinatorLoadInProgress)
    );
    h.c.finish_load(p_other, h.now, &mut out);
    assert_eq!(
        h.c.list_filtered(&all, h.now.wall_ms)
            .expect("listed")
            .len(),
        1
    );
}

/// Verify-only AddPartitionsToTxn (KIP-890): only partitions whose addition is stored count;
/// another producer, another epoch, a commit under way and an id elsewhere answer Kafka's
/// errors; nothing is appended.
#[test]
fn verify_partitions_answers_as_kafka() {
    let mut h = Host::with_partitions(1, &[0]);
    let v = |h: &Host, id: &str, p: ProducerIdAndEpoch, parts: &[TxnPartition]| {
        h.c.verify_partitions(id, p.producer_id, p.epoch, parts)
    };
    assert_eq!(
        v(&h, "t", pe(1000, 0), &[tp("a", 0)]),
        Err(ErrorCode::InvalidProducerIdMapping),
        "unknown id"
    );
    assert_eq!(v(&h, "", pe(1000, 0), &[]), Err(ErrorCode::InvalidRequest));
    let p = h.init("t", None).expect("init");
    assert_eq!(
        v(&h, "t", p, &[tp("a", 0)]),
        Ok(vec![(tp("a", 0), Some(ErrorCode::TransactionAbortable))]),
        "never added: the hanging-transaction case"
    );
    // A pending addition does not count until it is stored.
    h.hold_appends = true;
    let r = h.add_request("t", p, &[tp("a", 0)]);
    assert_eq!(
        v(&h, "t", p, &[tp("a", 0)]),
        Ok(vec![(tp("a", 0), Some(ErrorCode::TransactionAbortable))])
    );
    h.release(Ok(()));
    assert!(h.answer(r).is_some());
    h.hold_appends = false;
    let logged = h.log.values().map(Vec::len).sum::<usize>();
    assert_eq!(
        v(&h, "t", p, &[tp("a", 0), tp("a", 1)]),
        Ok(vec![
            (tp("a", 0), None),
            (tp("a", 1), Some(ErrorCode::TransactionAbortable))
        ])
    );
    assert_eq!(h.log.values().map(Vec::len).sum::<usize>(), logged);
    assert_eq!(
        v(&h, "t", pe(p.producer_id.0 + 1, p.epoch.0), &[tp("a", 0)]),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        v(&h, "t", pe(p.producer_id.0, p.epoch.0 + 1), &[tp("a", 0)]),
        Err(ErrorCode::ProducerFenced)
    );
    h.hold_markers = true;
    h.end("t", p, TxnResult::Abort).expect("abort");
    assert_eq!(
        v(&h, "t", p, &[tp("a", 0)]),
        Err(ErrorCode::ConcurrentTransactions)
    );
    // Another coordinator's id.
    let h2 = Host::with_partitions(2, &[]);
    assert_eq!(
        v(&h2, "t", p, &[tp("a", 0)]),
        Err(ErrorCode::NotCoordinator)
    );
}
