//! The transaction coordinator's decisions, following Kafka's `TransactionCoordinator`
//! (transaction version 1) check by check, error codes and their order included, without I/O.
//!
//! Time comes in as a [`Now`]: wall time for what `__transaction_state` stores (a
//! transaction's start, an id's last update) and for `transactional.id.expiration.ms`, a date
//! measured from a stored date; monotonic time for the transaction timeout of an open
//! transaction, so a wall-clock step does not abort every transaction at once. A replay
//! converts a stored start time into a monotonic deadline once, at load.
use std::collections::{BTreeSet, HashMap};

use crate::clock::Now;
use crate::group::OFFSETS_TOPIC;
use crate::protocol::producer::{ProducerEpoch, ProducerId};

use super::limits::{SHARD_TRANSACTIONAL_IDS_MAX, TRANSACTIONAL_ID_LEN_MAX, TXN_PARTITIONS_MAX};
use super::record::{self, RecordError, TxnLogValue, VALUE_VERSION_WRITTEN};
use super::state::{TransitionError, TxnFields, TxnMetadata, TxnPartition, TxnResult, TxnState};
use super::{
    AddOffsetsArgs, AddPartitionsArgs, AppendFailure, AppendId, Effect, EndTxnArgs, ErrorCode,
    InitProducerIdArgs, LogRecord, MarkerRequest, ProducerIdAndEpoch, RequestId, Response,
    TxnConfig, TxnDescription,
};

/// A block of producer ids handed out by the controller: `[next, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProducerIdBlock {
    pub next: i64,
    pub end: i64,
}

impl ProducerIdBlock {
    pub fn new(first: i64, len: i64) -> Self {
        Self {
            next: first,
            end: first.saturating_add(len.max(0)),
        }
    }

    fn take(&mut self) -> Option<ProducerId> {
        (self.next < self.end).then(|| {
            let id = self.next;
            self.next += 1;
            ProducerId(id)
        })
    }
}

/// What to do once an append is durable (or has failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// Answer InitProducerId with the new producer id and epoch.
    InitProducerId(RequestId),
    /// A fence (or a timeout) aborted the open transaction: send the markers, and answer the
    /// InitProducerId that fenced, if any, with CONCURRENT_TRANSACTIONS so it retries once
    /// the abort completes (Kafka's behaviour: the bumped epoch is never handed out here).
    FenceAbort(Option<RequestId>),
    AddPartitions(RequestId),
    AddOffsets(RequestId),
    /// EndTxn's Prepare record is durable: answer, then send the markers.
    EndTxn(RequestId),
    /// CompleteCommit/CompleteAbort written: nothing to answer.
    Complete,
    /// The tombstone of an expired id is durable: forget the id.
    Expire,
}

impl Then {
    /// The waiter of this append, if any, and its answer when the append fails with `e`.
    fn failed(self, e: ErrorCode) -> Option<(RequestId, Response)> {
        match self {
            Then::InitProducerId(r) | Then::FenceAbort(Some(r)) => {
                Some((r, Response::InitProducerId(Err(e))))
            }
            Then::AddPartitions(r) => Some((r, Response::AddPartitions(Err(e)))),
            Then::AddOffsets(r) => Some((r, Response::AddOffsets(Err(e)))),
            Then::EndTxn(r) => Some((r, Response::EndTxn(Err(e)))),
            Then::FenceAbort(None) | Then::Complete | Then::Expire => None,
        }
    }
}

#[derive(Debug, Clone)]
struct InFlight {
    id: AppendId,
    /// The fields the record carries; `None` for a tombstone.
    transit: Option<TxnFields>,
    then: Then,
    /// Monotonic time of the request, from which a transaction it opens times out.
    requested_ms: i64,
}

#[derive(Debug, Clone)]
struct Entry {
    partition: i32,
    meta: TxnMetadata,
    in_flight: Option<InFlight>,
    /// Monotonic ms past which an Ongoing transaction is aborted by the coordinator.
    deadline_ms: i64,
}

#[derive(Debug, Clone, Copy)]
struct PartitionState {
    coordinator_epoch: i32,
    loaded: bool,
}

/// The transaction coordinator of one shard: every transactional id whose
/// `__transaction_state` partition the shard leads.
#[derive(Debug)]
pub struct Coordinator {
    config: TxnConfig,
    /// Partitions of `__transaction_state` (the hash modulus).
    state_partitions: i32,
    partitions: HashMap<i32, PartitionState>,
    txns: HashMap<String, Entry>,
    appends: HashMap<AppendId, String>,
    next_append_id: AppendId,
    producer_ids: ProducerIdBlock,
    producer_ids_requested: bool,
    next_abort_check_ms: i64,
    next_expire_check_ms: i64,
}

fn respond(out: &mut Vec<Effect>, request: RequestId, response: Response) {
    out.push(Effect::Respond { request, response });
}

fn failure_code(f: AppendFailure) -> ErrorCode {
    match f {
        AppendFailure::NotLeader => ErrorCode::NotCoordinator,
        AppendFailure::Unavailable => ErrorCode::CoordinatorNotAvailable,
    }
}

impl Coordinator {
    pub fn new(config: TxnConfig, state_partitions: i32) -> Self {
        Self {
            config,
            state_partitions: state_partitions.max(1),
            partitions: HashMap::new(),
            txns: HashMap::new(),
            appends: HashMap::new(),
            next_append_id: 0,
            producer_ids: ProducerIdBlock::default(),
            producer_ids_requested: false,
            next_abort_check_ms: i64::MIN,
            next_expire_check_ms: i64::MIN,
        }
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// A new block of producer ids from the controller; replaces what is left of the old one.
    pub fn add_producer_ids(&mut self, block: ProducerIdBlock) {
        self.producer_ids = block;
        self.producer_ids_requested = false;
    }

    /// The id's metadata, if this shard coordinates it.
    pub fn metadata(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.txns.get(transactional_id).map(|e| &e.meta)
    }

    pub fn txn_count(&self) -> usize {
        self.txns.len()
    }

    fn allocate_producer_id(&mut self, out: &mut Vec<Effect>) -> Option<ProducerId> {
        let id = self.producer_ids.take();
        if id.is_none() && !self.producer_ids_requested {
            self.producer_ids_requested = true;
            out.push(Effect::NeedProducerIds);
        }
        id
    }

    /// Whether this shard coordinates `transactional_id` right now: NOT_COORDINATOR if it
    /// does not lead the id's partition, COORDINATOR_LOAD_IN_PROGRESS while replaying it.
    fn locate(&self, transactional_id: &str) -> Result<i32, ErrorCode> {
        let partition = super::partition_for(transactional_id, self.state_partitions);
        match self.partitions.get(&partition) {
            None => Err(ErrorCode::NotCoordinator),
            Some(p) if !p.loaded => Err(ErrorCode::CoordinatorLoadInProgress),
            Some(_) => Ok(partition),
        }
    }

    fn valid_id(transactional_id: &str) -> bool {
        !transactional_id.is_empty() && transactional_id.len() <= TRANSACTIONAL_ID_LEN_MAX
    }

    /// Records `transit` as the id's pending transition and asks for its append.
    fn append(
        &mut self,
        txn_id: &str,
        transit: Option<TxnFields>,
        then: Then,
        now: Now,
        out: &mut Vec<Effect>,
    ) {
        let Some(entry) = self.txns.get_mut(txn_id) else {
            return;
        };
        let id = self.next_append_id;
        self.next_append_id += 1;
        let value = transit
            .as_ref()
            .map(|f| record::encode_value(&TxnLogValue::from_fields(f), VALUE_VERSION_WRITTEN));
        entry.in_flight = Some(InFlight {
            id,
            transit,
            then,
            requested_ms: now.monotonic_ms,
        });
        self.appends.insert(id, txn_id.to_string());
        out.push(Effect::Append {
            id,
            partition: entry.partition,
            record: LogRecord {
                key: record::encode_key(txn_id),
                value,
            },
        });
    }

    /// InitProducerId with a transactional id (Kafka's `handleInitProducerId`).
    pub fn handle_init_producer_id(
        &mut self,
        request: RequestId,
        args: InitProducerIdArgs,
        now: Now,
        out: &mut Vec<Effect>,
    ) {
        let fail =
            |out: &mut Vec<Effect>, e| respond(out, request, Response::InitProducerId(Err(e)));
        let txn_id = args.transactional_id.as_str();
        if !Self::valid_id(txn_id) {
            return fail(out, ErrorCode::InvalidRequest);
        }
        let timeout_ms = args.transaction_timeout_ms;
        if timeout_ms <= 0 || timeout_ms > self.config.transaction_max_timeout_ms {
            return fail(out, ErrorCode::InvalidTransactionTimeout);
        }
        let partition = match self.locate(txn_id) {
            Ok(p) => p,
            Err(e) => return fail(out, e),
        };
        if !self.txns.contains_key(txn_id) {
            if self.txns.len() >= SHARD_TRANSACTIONAL_IDS_MAX {
                return fail(out, ErrorCode::CoordinatorNotAvailable);
            }
            // Kafka answers a missing block as a coordinator still loading: retriable.
            let Some(producer_id) = self.allocate_producer_id(out) else {
                return fail(out, ErrorCode::CoordinatorLoadInProgress);
            };
            let meta = TxnMetadata::new(txn_id, producer_id, timeout_ms, now.wall_ms);
            self.txns.insert(
                txn_id.to_string(),
                Entry {
                    partition,
                    meta,
                    in_flight: None,
                    deadline_ms: i64::MAX,
                },
            );
        }
        let Some(entry) = self.txns.get(txn_id) else {
            return;
        };
        let meta = &entry.meta;
        if meta.pending.is_some() || entry.in_flight.is_some() {
            return fail(out, ErrorCode::ConcurrentTransactions);
        }
        let f = &meta.fields;
        if let Some(current) = args.current {
            // KIP-360: a recovering producer keeps its id unless another instance took over.
            // Valid: the id was just created (no epoch yet, hand out the new one); it is the
            // current id (the epoch is checked by the bump); or it is the id before a rotation
            // and its epoch was exhausted (a retry whose answer was lost).
            let valid = f.producer_epoch == ProducerEpoch::NONE
                || current.producer_id == f.producer_id
                || (current.producer_id == f.prev_producer_id && current.epoch.is_exhausted());
            if !valid {
                return fail(out, ErrorCode::InvalidProducerIdMapping);
            }
        }
        match f.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                fail(out, ErrorCode::ConcurrentTransactions)
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let rotate = f.producer_epoch.is_exhausted()
                    && args.current.is_none_or(|c| c.epoch == f.producer_epoch);
                let transit = if rotate {
                    let Some(new_id) = self.allocate_producer_id(out) else {
                        return fail(out, ErrorCode::CoordinatorLoadInProgress);
                    };
                    let Some(entry) = self.txns.get_mut(txn_id) else {
                        return;
                    };
                    entry.meta.prepare_rotate_producer_id(
                        new_id,
                        timeout_ms,
                        now.wall_ms,
                        args.current.is_some(),
                    )
                } else {
                    let Some(entry) = self.txns.get_mut(txn_id) else {
                        return;
                    };
                    entry.meta.prepare_increment_epoch(
                        timeout_ms,
                        args.current.map(|c| c.epoch),
                        now.wall_ms,
                    )
                };
                match transit {
                    Ok(t) => self.append(txn_id, Some(t), Then::InitProducerId(request), now, out),
                    Err(TransitionError::Fenced) => fail(out, ErrorCode::ProducerFenced),
                    Err(_) => fail(out, ErrorCode::ConcurrentTransactions),
                }
            }
            TxnState::Ongoing => {
                // Fence the previous instance and abort its transaction; this epoch is never
                // handed out: the client is told to retry, and its retry bumps again once the
                // abort is complete (or rotates the id if the fence exhausted the epochs).
                self.fence_and_abort(txn_id, Some(request), now, out);
            }
            TxnState::Dead | TxnState::PrepareEpochFence => {
                fail(out, ErrorCode::ConcurrentTransactions)
            }
        }
    }

    /// Bumps the epoch of an Ongoing transaction and prepares its abort.
    fn fence_and_abort(
        &mut self,
        txn_id: &str,
        cause: Option<RequestId>,
        now: Now,
        out: &mut Vec<Effect>,
    ) {
        let Some(entry) = self.txns.get_mut(txn_id) else {
            return;
        };
        let prepared = entry
            .meta
            .fence_epoch()
            .and_then(|()| entry.meta.prepare_end(TxnResult::Abort, now.wall_ms));
        match prepared {
            Ok(t) => self.append(txn_id, Some(t), Then::FenceAbort(cause), now, out),
            Err(_) => {
                if let Some(r) = cause {
                    respond(
                        out,
                        r,
                        Response::InitProducerId(Err(ErrorCode::ConcurrentTransactions)),
                    );
                }
            }
        }
    }

    /// The checks AddPartitions, AddOffsets and EndTxn share, in Kafka's order: the id is
    /// known and this producer's (INVALID_PRODUCER_ID_MAPPING), the epoch is current
    /// (PRODUCER_FENCED), nothing is in flight (CONCURRENT_TRANSACTIONS).
    fn check_producer(
        &self,
        txn_id: &str,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
    ) -> Result<(), ErrorCode> {
        if !Self::valid_id(txn_id) {
            return Err(ErrorCode::InvalidRequest);
        }
        self.locate(txn_id)?;
        let entry = self
            .txns
            .get(txn_id)
            .ok_or(ErrorCode::InvalidProducerIdMapping)?;
        let f = &entry.meta.fields;
        if producer_id != f.producer_id {
            return Err(ErrorCode::InvalidProducerIdMapping);
        }
        if epoch != f.producer_epoch {
            return Err(ErrorCode::ProducerFenced);
        }
        if entry.meta.pending.is_some() || entry.in_flight.is_some() {
            return Err(ErrorCode::ConcurrentTransactions);
        }
        Ok(())
    }

    /// AddPartitionsToTxn (Kafka's `handleAddPartitionsToTransaction`).
    pub fn handle_add_partitions(
        &mut self,
        request: RequestId,
        args: AddPartitionsArgs,
        now: Now,
        out: &mut Vec<Effect>,
    ) {
        let added: BTreeSet<TxnPartition> = args.partitions.into_iter().collect();
        let result = self.add(
            &args.transactional_id,
            args.producer_id,
            args.producer_epoch,
            &added,
            Then::AddPartitions(request),
            now,
            out,
        );
        if let Err(e) = result {
            respond(out, request, Response::AddPartitions(Err(e)));
        }
    }

    /// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction, so
    /// that its offsets commit or abort with it.
    pub fn handle_add_offsets(
        &mut self,
        request: RequestId,
        args: AddOffsetsArgs,
        now: Now,
        out: &mut Vec<Effect>,
    ) {
        let partition =
            crate::group::partition_for(&args.group_id, self.config.offsets_topic_partitions);
        let added = BTreeSet::from([TxnPartition::new(OFFSETS_TOPIC, partition)]);
        let result = self.add(
            &args.transactional_id,
            args.producer_id,
            args.producer_epoch,
            &added,
            Then::AddOffsets(request),
            now,
            out,
        );
        if let Err(e) = result {
            respond(out, request, Response::AddOffsets(Err(e)));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        txn_id: &str,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        added: &BTreeSet<TxnPartition>,
        then: Then,
        now: Now,
        out: &mut Vec<Effect>,
    ) -> Result<(), ErrorCode> {
        self.check_producer(txn_id, producer_id, epoch)?;
        let entry = self
            .txns
            .get_mut(txn_id)
            .ok_or(ErrorCode::InvalidProducerIdMapping)?;
        let f = &entry.meta.fields;
        match f.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                return Err(ErrorCode::ConcurrentTransactions)
            }
            TxnState::Dead | TxnState::PrepareEpochFence => return Err(ErrorCode::InvalidTxnState),
            TxnState::Ongoing if added.is_subset(&f.partitions) => {
                // Nothing new: answer at once, no record (Kafka does the same).
                match then {
                    Then::AddPartitions(r) => respond(out, r, Response::AddPartitions(Ok(()))),
                    Then::AddOffsets(r) => respond(out, r, Response::AddOffsets(Ok(()))),
                    _ => {}
                }
                return Ok(());
            }
            _ => {}
        }
        if f.partitions.union(added).count() > TXN_PARTITIONS_MAX {
            return Err(ErrorCode::InvalidRequest);
        }
        let transit = entry
            .meta
            .prepare_add_partitions(added, now.wall_ms)
            .map_err(|_| ErrorCode::ConcurrentTransactions)?;
        self.append(txn_id, Some(transit), then, now, out);
        Ok(())
    }

    /// EndTxn (Kafka's `handleEndTransaction` for a client on transaction version 1).
    pub fn handle_end_txn(
        &mut self,
        request: RequestId,
        args: EndTxnArgs,
        now: Now,
        out: &mut Vec<Effect>,
    ) {
        let txn_id = args.transactional_id.as_str();
        let fail = |out: &mut Vec<Effect>, e| respond(out, request, Response::EndTxn(Err(e)));
        if let Err(e) = self.check_producer(txn_id, args.producer_id, args.producer_epoch) {
            return fail(out, e);
        }
        let Some(entry) = self.txns.get_mut(txn_id) else {
            return fail(out, ErrorCode::InvalidProducerIdMapping);
        };
        let commit = args.result == TxnResult::Commit;
        match entry.meta.fields.state {
            TxnState::Ongoing => match entry.meta.prepare_end(args.result, now.wall_ms) {
                Ok(t) => self.append(txn_id, Some(t), Then::EndTxn(request), now, out),
                Err(_) => fail(out, ErrorCode::ConcurrentTransactions),
            },
            // A retry of an EndTxn that completed: the same answer again.
            TxnState::CompleteCommit if commit => respond(out, request, Response::EndTxn(Ok(()))),
            TxnState::CompleteAbort if !commit => respond(out, request, Response::EndTxn(Ok(()))),
            // A retry while its markers are still being written.
            TxnState::PrepareCommit if commit => fail(out, ErrorCode::ConcurrentTransactions),
            TxnState::PrepareAbort if !commit => fail(out, ErrorCode::ConcurrentTransactions),
            _ => fail(out, ErrorCode::InvalidTxnState),
        }
    }

    /// The append `id` is durable (`Ok`) or failed: the transition completes or is abandoned,
    /// its waiter is answered, and markers follow a durable Prepare record.
    pub fn handle_append_done(
        &mut self,
        id: AppendId,
        result: Result<(), AppendFailure>,
        now: Now,
        out: &mut Vec<Effect>,
    ) {
        let Some(txn_id) = self.appends.remove(&id) else {
            return;
        };
        let Some(entry) = self.txns.get_mut(&txn_id) else {
            return;
        };
        let Some(in_flight) = entry.in_flight.take_if(|f| f.id == id) else {
            return;
        };
        let then = in_flight.then;
        let transit = match (result, in_flight.transit) {
            (Err(f), _) => {
                entry.meta.abandon();
                if let Some((r, response)) = then.failed(failure_code(f)) {
                    respond(out, r, response);
                }
                return;
            }
            (Ok(()), None) => {
                // The tombstone of an expired id is durable.
                self.txns.remove(&txn_id);
                return;
            }
            (Ok(()), Some(t)) => t,
        };
        let was = entry.meta.state();
        entry.meta.complete(transit);
        let f = &entry.meta.fields;
        if f.state == TxnState::Ongoing && was != TxnState::Ongoing {
            entry.deadline_ms = in_flight
                .requested_ms
                .saturating_add(i64::from(f.timeout_ms));
        }
        match then {
            Then::InitProducerId(r) => respond(
                out,
                r,
                Response::InitProducerId(Ok(ProducerIdAndEpoch {
                    producer_id: f.producer_id,
                    epoch: f.producer_epoch,
                })),
            ),
            Then::AddPartitions(r) => respond(out, r, Response::AddPartitions(Ok(()))),
            Then::AddOffsets(r) => respond(out, r, Response::AddOffsets(Ok(()))),
            Then::EndTxn(r) => {
                respond(out, r, Response::EndTxn(Ok(())));
                self.send_markers(&txn_id, now, out);
            }
            Then::FenceAbort(cause) => {
                if let Some(r) = cause {
                    respond(
                        out,
                        r,
                        Response::InitProducerId(Err(ErrorCode::ConcurrentTransactions)),
                    );
                }
                self.send_markers(&txn_id, now, out);
            }
            Then::Complete | Then::Expire => {}
        }
    }

    /// Asks for the markers of a prepared transaction, or, if every one is written, for its
    /// Complete record.
    fn send_markers(&mut self, txn_id: &str, now: Now, out: &mut Vec<Effect>) {
        let Some(entry) = self.txns.get_mut(txn_id) else {
            return;
        };
        let result = match entry.meta.state() {
            TxnState::PrepareCommit => TxnResult::Commit,
            TxnState::PrepareAbort => TxnResult::Abort,
            _ => return,
        };
        if entry.meta.fields.partitions.is_empty() {
            if let Ok(t) = entry.meta.prepare_complete(now.wall_ms) {
                self.append(txn_id, Some(t), Then::Complete, now, out);
            }
            return;
        }
        let coordinator_epoch = self
            .partitions
            .get(&entry.partition)
            .map(|p| p.coordinator_epoch)
            .unwrap_or(-1);
        let f = &entry.meta.fields;
        out.push(Effect::WriteMarkers(MarkerRequest {
            transactional_id: txn_id.to_string(),
            producer_id: f.producer_id,
            producer_epoch: f.producer_epoch,
            coordinator_epoch,
            result,
            partitions: f.partitions.iter().cloned().collect(),
        }));
    }

    /// Markers of `transactional_id`'s prepared transaction (`producer_id`/`epoch`, as in its
    /// `MarkerRequest`) are written on `done`. Once every partition has its marker the
    /// Complete record is appended. A report for another transaction is stale and ignored.
    pub fn handle_markers_done(
        &mut self,
        transactional_id: &str,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        done: &[TxnPartition],
        now: Now,
        out: &mut Vec<Effect>,
    ) {
        let Some(entry) = self.txns.get_mut(transactional_id) else {
            return;
        };
        let f = &mut entry.meta.fields;
        let prepared = matches!(f.state, TxnState::PrepareCommit | TxnState::PrepareAbort);
        if !prepared
            || entry.in_flight.is_some()
            || f.producer_id != producer_id
            || f.producer_epoch != epoch
            || f.partitions.is_empty()
        {
            return;
        }
        // In memory only, as Kafka's removePartition: the durable Prepare record keeps every
        // partition, so a new coordinator resends all markers (a partition ignores a repeat).
        for p in done {
            f.partitions.remove(p);
        }
        if f.partitions.is_empty() {
            self.send_markers(transactional_id, now, out);
        }
    }

    /// Advances timers: aborts transactions past their timeout, expires idle ids, retries a
    /// Complete record whose append failed.
    pub fn tick(&mut self, now: Now, out: &mut Vec<Effect>) {
        let mut ids: Vec<String> = self.txns.keys().cloned().collect();
        ids.sort();
        let abort_check = now.monotonic_ms >= self.next_abort_check_ms;
        if abort_check {
            self.next_abort_check_ms = now
                .monotonic_ms
                .saturating_add(self.config.abort_timed_out_interval_ms);
        }
        let expire_check = now.monotonic_ms >= self.next_expire_check_ms;
        if expire_check {
            self.next_expire_check_ms = now
                .monotonic_ms
                .saturating_add(self.config.remove_expired_interval_ms);
        }
        for id in ids {
            let Some(entry) = self.txns.get(&id) else {
                continue;
            };
            let loaded = self
                .partitions
                .get(&entry.partition)
                .is_some_and(|p| p.loaded);
            if !loaded || entry.in_flight.is_some() || entry.meta.pending.is_some() {
                continue;
            }
            let f = &entry.meta.fields;
            match f.state {
                TxnState::Ongoing if abort_check && entry.deadline_ms < now.monotonic_ms => {
                    self.fence_and_abort(&id, None, now, out);
                }
                TxnState::PrepareCommit | TxnState::PrepareAbort if f.partitions.is_empty() => {
                    self.send_markers(&id, now, out);
                }
                s if expire_check
                    && s.expiration_allowed()
                    && f.last_update_timestamp_ms
                        <= now
                            .wall_ms
                            .saturating_sub(self.config.transactional_id_expiration_ms) =>
                {
                    if let Some(entry) = self.txns.get_mut(&id) {
                        if entry.meta.prepare_dead().is_ok() {
                            self.append(&id, None, Then::Expire, now, out);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// This shard became leader of `partition` at `coordinator_epoch`: its ids are replayed
    /// next (`load_record`), and requests for them wait for `finish_load`.
    pub fn load_partition(
        &mut self,
        partition: i32,
        coordinator_epoch: i32,
        out: &mut Vec<Effect>,
    ) {
        self.unload_partition(partition, out);
        self.partitions.insert(
            partition,
            PartitionState {
                coordinator_epoch,
                loaded: false,
            },
        );
    }

    /// Replays one record of `partition` in log order; the last record per id wins and a
    /// tombstone removes the id. An undecodable record is an error for the host to log; it
    /// changes nothing.
    pub fn load_record(
        &mut self,
        partition: i32,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), RecordError> {
        let txn_id = record::decode_key(key)?;
        let Some(value) = value else {
            self.txns.remove(&txn_id);
            return Ok(());
        };
        let value = record::decode_value(value)?;
        match value.state {
            // Kafka never writes either; a Dead record can only mean the id is gone.
            TxnState::Dead => {
                self.txns.remove(&txn_id);
                return Ok(());
            }
            TxnState::PrepareEpochFence => return Err(RecordError::UnknownState(value.state.id())),
            _ => {}
        }
        if !self.txns.contains_key(&txn_id) && self.txns.len() >= SHARD_TRANSACTIONAL_IDS_MAX {
            return Err(RecordError::TooLarge {
                len: self.txns.len() + 1,
                max: SHARD_TRANSACTIONAL_IDS_MAX,
            });
        }
        let meta = TxnMetadata::loaded(&txn_id, value.into_fields());
        self.txns.insert(
            txn_id,
            Entry {
                partition,
                meta,
                in_flight: None,
                deadline_ms: i64::MAX,
            },
        );
        Ok(())
    }

    /// The replay of `partition` is done: open transactions get their deadlines (from their
    /// stored start time), and the markers of every prepared transaction are sent again.
    pub fn finish_load(&mut self, partition: i32, now: Now, out: &mut Vec<Effect>) {
        let Some(p) = self.partitions.get_mut(&partition) else {
            return;
        };
        p.loaded = true;
        let mut ids: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, e)| e.partition == partition)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        for id in ids {
            let Some(entry) = self.txns.get_mut(&id) else {
                continue;
            };
            let f = &entry.meta.fields;
            if f.state == TxnState::Ongoing {
                let ends_wall = f.start_timestamp_ms.saturating_add(i64::from(f.timeout_ms));
                let left = ends_wall.saturating_sub(now.wall_ms).max(0);
                entry.deadline_ms = now.monotonic_ms.saturating_add(left);
            }
            self.send_markers(&id, now, out);
        }
    }

    /// This shard no longer leads `partition`: its ids are forgotten and whoever waits on
    /// them is told NOT_COORDINATOR (the new leader replays the log).
    pub fn unload_partition(&mut self, partition: i32, out: &mut Vec<Effect>) {
        self.partitions.remove(&partition);
        let mut gone: Vec<String> = self
            .txns
            .iter()
            .filter(|(_, e)| e.partition == partition)
            .map(|(id, _)| id.clone())
            .collect();
        gone.sort();
        for id in gone {
            if let Some(entry) = self.txns.remove(&id) {
                if let Some(f) = entry.in_flight {
                    self.appends.remove(&f.id);
                    if let Some((r, response)) = f.then.failed(ErrorCode::NotCoordinator) {
                        respond(out, r, response);
                    }
                }
            }
        }
    }

    /// AddPartitionsToTxn with `verify_only` (KIP-890; Kafka's
    /// `handleVerifyPartitionsInTransaction`): is each partition part of the producer's
    /// ongoing transaction? Read-only. A partition counts once its addition is stored (a
    /// pending AddPartitions does not). Errors for all partitions: NOT_COORDINATOR or
    /// COORDINATOR_LOAD_IN_PROGRESS as for any request, INVALID_PRODUCER_ID_MAPPING for an
    /// unknown id or another producer, PRODUCER_FENCED for another epoch,
    /// CONCURRENT_TRANSACTIONS while the transaction commits or aborts. A partition not in the
    /// transaction is TRANSACTION_ABORTABLE.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        partitions: &[TxnPartition],
    ) -> Result<Vec<(TxnPartition, Option<ErrorCode>)>, ErrorCode> {
        if transactional_id.is_empty() {
            return Err(ErrorCode::InvalidRequest);
        }
        self.locate(transactional_id)?;
        let entry = self
            .txns
            .get(transactional_id)
            .ok_or(ErrorCode::InvalidProducerIdMapping)?;
        let f = &entry.meta.fields;
        if f.producer_id != producer_id {
            return Err(ErrorCode::InvalidProducerIdMapping);
        }
        if f.producer_epoch != producer_epoch {
            return Err(ErrorCode::ProducerFenced);
        }
        if matches!(f.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(ErrorCode::ConcurrentTransactions);
        }
        Ok(partitions
            .iter()
            .map(|p| {
                let error = (!f.partitions.contains(p)).then_some(ErrorCode::TransactionAbortable);
                (p.clone(), error)
            })
            .collect())
    }

    /// DescribeTransactions for one id: `None` if this shard does not know it.
    pub fn describe(&self, transactional_id: &str) -> Option<TxnDescription> {
        self.txns
            .get(transactional_id)
            .map(|e| describe(transactional_id, &e.meta))
    }

    /// DescribeTransactions for one id, with Kafka's errors: NOT_COORDINATOR if this shard
    /// does not lead the id's partition, COORDINATOR_LOAD_IN_PROGRESS while it replays it,
    /// TRANSACTIONAL_ID_NOT_FOUND for an unknown id or one being expired (Dead).
    pub fn describe_checked(&self, transactional_id: &str) -> Result<TxnDescription, ErrorCode> {
        self.locate(transactional_id)?;
        match self.txns.get(transactional_id) {
            Some(e) if e.meta.fields.state != TxnState::Dead => {
                Ok(describe(transactional_id, &e.meta))
            }
            _ => Err(ErrorCode::TransactionalIdNotFound),
        }
    }

    /// ListTransactions on this shard: the ids `filter` keeps, by id; while any of its
    /// partitions is loading, COORDINATOR_LOAD_IN_PROGRESS (Kafka answers the whole request
    /// so rather than list part of them).
    pub fn list_filtered(
        &self,
        filter: &super::admin::ListFilter,
        now_wall_ms: i64,
    ) -> Result<Vec<TxnDescription>, ErrorCode> {
        if self.partitions.values().any(|p| !p.loaded) {
            return Err(ErrorCode::CoordinatorLoadInProgress);
        }
        Ok(self
            .list()
            .into_iter()
            .filter(|d| filter.matches(d, now_wall_ms))
            .collect())
    }

    /// ListTransactions: every id this shard coordinates, by id.
    pub fn list(&self) -> Vec<TxnDescription> {
        let mut all: Vec<TxnDescription> = self
            .txns
            .iter()
            .map(|(id, e)| describe(id, &e.meta))
            .collect();
        all.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        all
    }
}

fn describe(transactional_id: &str, meta: &TxnMetadata) -> TxnDescription {
    let f = &meta.fields;
    TxnDescription {
        transactional_id: transactional_id.to_string(),
        state: f.state,
        producer_id: f.producer_id,
        producer_epoch: f.producer_epoch,
        timeout_ms: f.timeout_ms,
        start_timestamp_ms: f.start_timestamp_ms,
        partitions: f.partitions.iter().cloned().collect(),
    }
}
