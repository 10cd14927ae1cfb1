//! Appending to a partition: a leader's `append` (producer-state check, offsets and leader
//! epoch patched in place, staged in the active segment and the tail cache), a follower's
//! `append_replica` (the leader's batches unchanged), segment rolling, and the waits a
//! producer makes: for staging room (memory budget, `STAGING_BYTES_MAX`) and for durability.
//! Appends are synchronous and do no I/O; the flusher (`flush.rs`) writes what they stage.

use std::path::Path;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use crate::limits::RECORDS_DECOMPRESSED_BYTES_MAX;
use crate::protocol::control::{
    build_end_txn_marker, parse_end_txn_marker, EndTxnMarker, MarkerError,
};
use crate::protocol::ids::{LeaderEpoch, Offset};
use crate::protocol::inflate::inflated_len;
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::protocol::record_batch::RecordsError;
use crate::protocol::record_batch::{
    patch_base_offset, patch_leader_epoch, patch_log_append_time, validate, BatchError,
    BatchHeader, BATCH_HEADER_LEN, CODEC_NONE,
};
use crate::storage::budget::{Charge, MemoryClass};
use crate::storage::producer_state::{
    AppendOrigin, BatchIdentity, CompletedTxn, MarkerRefused, SequenceError, TxnVerification,
    Verdict, VerificationRefused,
};
use crate::storage::recovery::offset_follows;
use crate::storage::segment::Segment;
use crate::storage::tail_cache::CachedBatch;
use crate::storage::txn_index::AbortedTxn;
use crate::storage::txn_verification::{VerificationGuard, VerificationsFull};
use crate::storage::{
    AppendError, Error, FlushPolicy, ReplicaAppendError, TimestampType, STAGING_BYTES_MAX,
};

use super::{AppendOutcome, HwMode, Inner, Partition, ReplicaAppendOutcome};

/// A static description of why a control batch is not a marker (for `RecordsError`).
fn marker_error_why(e: &MarkerError) -> &'static str {
    match e {
        MarkerError::NotControl => "not a control batch",
        MarkerError::Records(_) => "control batch records do not decode",
        MarkerError::RecordCount(_) => "control batch must hold one record",
        MarkerError::Malformed(why) => why,
    }
}

impl Inner {
    /// Records that `epoch` starts at `base` if it is not the latest epoch already (Kafka
    /// assigns on every batch whose epoch differs from the latest one).
    fn assign_epoch(&mut self, epoch: i32, base: i64) {
        if epoch < 0
            || self
                .epoch_cache
                .latest()
                .is_some_and(|l| l.epoch == LeaderEpoch(epoch))
        {
            return;
        }
        self.epoch_cache.assign(LeaderEpoch(epoch), Offset(base));
        self.epoch_version += 1;
    }

    /// Files an ended transaction: an abort goes into the active segment's aborted index
    /// (the segment holding its marker, which was just appended there).
    fn note_completed(&mut self, done: CompletedTxn) {
        if done.aborted {
            self.active().aborted.push(AbortedTxn::from(done));
        }
    }

    pub(super) fn roll(&mut self, dir: &Path) {
        let next = self.next_offset;
        let snapshot = self.producers.snapshot(next);
        self.active().seal(snapshot);
        self.segments.insert(next, Segment::new(dir, next));
    }

    fn should_roll(&mut self, batch_len: usize, last_offset: i64, now_ms: i64) -> bool {
        let config = self.config.clone();
        let seg = self.active();
        if seg.size == 0 {
            return false;
        }
        seg.size + batch_len as u64 > config.segment_bytes
            || seg
                .first_append_ms
                .is_some_and(|t| now_ms.saturating_sub(t) >= config.segment_ms)
            || seg.index.bytes() + crate::storage::index::ENTRY_LEN
                > config.segment_index_bytes as usize
            || seg.time_index.bytes() + crate::storage::time_index::ENTRY_LEN
                > config.segment_index_bytes as usize
            || last_offset - seg.base_offset > i32::MAX as i64
    }
}

impl Partition {
    /// The budget charge for `len` more bytes in memory: evicting cached batches (of any
    /// log of the shard) if needed. With no room even then, a log with nothing staged
    /// still takes its batch while the budget's small forced slack allows
    /// (`MemoryBudget::may_force`: every log makes progress, and internal appends such as
    /// group commits do not stall behind producers); otherwise it is refused, and its
    /// producer waits (`wait_for_staging_room`) until a flush and eviction make room.
    /// Called before borrowing `inner`: eviction borrows every log of the shard.
    fn charge(&self, len: usize) -> Result<Charge, usize> {
        let budget = Rc::clone(&self.budget.borrow());
        if let Some(c) = budget.charge_evicting(MemoryClass::Log, len) {
            return Ok(c);
        }
        let staged = self.inner.borrow().staged_bytes() as usize;
        if staged == 0 && budget.may_force(len) {
            return Ok(budget.charge_forced(MemoryClass::Log, len));
        }
        Err(staged)
    }

    /// Appends one batch the caller validated (see module doc). Not yet durable on return.
    /// The batch (a slice of the request) is copied exactly once, into the buffer the log
    /// owns, and its offsets and leader epoch are patched there (outside the CRC); the tail
    /// cache and the segment's staging share that buffer until the flusher writes it.
    pub fn append(
        &self,
        batch: impl AsRef<[u8]>,
        now_ms: i64,
    ) -> Result<AppendOutcome, AppendError> {
        self.append_from(
            batch.as_ref(),
            now_ms,
            AppendOrigin::Client,
            TxnVerification::Off,
        )
    }

    /// `append` of a producer's batch under transaction verification (KIP-890): a
    /// transactional batch that would open a transaction is refused (`TxnNotVerified`) unless
    /// `verification` carries the producer's current guard (`start_txn_verification`).
    pub fn append_verified(
        &self,
        batch: impl AsRef<[u8]>,
        now_ms: i64,
        verification: TxnVerification,
    ) -> Result<AppendOutcome, AppendError> {
        self.append_from(batch.as_ref(), now_ms, AppendOrigin::Client, verification)
    }

    /// Starts verifying that this partition is in `producer_id`'s transaction: `None` if it
    /// has one open here at `epoch` already, else the guard the append must carry.
    pub fn start_txn_verification(
        &self,
        producer_id: ProducerId,
        sequence: i32,
        epoch: i16,
        now_ms: i64,
    ) -> Result<Option<VerificationGuard>, VerificationsFull> {
        self.inner
            .borrow_mut()
            .producers
            .start_verification(producer_id, sequence, epoch, now_ms)
    }

    /// `append` of a batch the broker's own coordinator wrote (Kafka's
    /// `AppendOrigin.COORDINATOR`): a transactional offset commit carries the producer's id
    /// and epoch but no sequence, so only the epoch is checked (an older one is
    /// `InvalidProducerEpoch`); its first transactional batch opens the producer's
    /// transaction on this partition as a client's would, and under verification only with
    /// the producer's current guard (`TxnNotVerified`), as a client's batch.
    pub fn append_coordinator(
        &self,
        batch: impl AsRef<[u8]>,
        now_ms: i64,
        verification: TxnVerification,
    ) -> Result<AppendOutcome, AppendError> {
        self.append_from(
            batch.as_ref(),
            now_ms,
            AppendOrigin::Coordinator,
            verification,
        )
    }

    fn append_from(
        &self,
        input: &[u8],
        now_ms: i64,
        origin: AppendOrigin,
        verification: TxnVerification,
    ) -> Result<AppendOutcome, AppendError> {
        let header = BatchHeader::parse(input).map_err(AppendError::CorruptMessage)?;
        if header.total_len() != input.len() {
            return Err(AppendError::CorruptMessage(BatchError::BadLength {
                len: header.batch_length as i64,
                min: input.len(),
            }));
        }
        if header.compression() != CODEC_NONE && !header.is_control() {
            // Kafka reads every record of a compressed batch before appending it; we only
            // check it inflates within the bound the broker's own readers use (ListOffsets
            // by time, recompression, the cleaner), counting into a fixed scratch buffer and
            // stopping as soon as it passes: a bomb costs CPU up to the bound, no memory.
            let payload = input.get(BATCH_HEADER_LEN..).unwrap_or_default();
            inflated_len(
                header.compression(),
                payload,
                RECORDS_DECOMPRESSED_BYTES_MAX,
            )
            .map_err(AppendError::BadRecords)?;
        }
        {
            let inner = self.inner.borrow();
            inner.check_open()?;
            let max = inner.config.max_message_bytes;
            if input.len() > max as usize {
                return Err(AppendError::MessageTooLarge {
                    size: input.len(),
                    max,
                });
            }
            let segment_bytes = inner.config.segment_bytes;
            if input.len() as u64 > segment_bytes {
                return Err(AppendError::RecordListTooLarge {
                    size: input.len(),
                    max: segment_bytes,
                });
            }
        }
        let charge = self
            .charge(input.len())
            .map_err(|staged| AppendError::Backpressure {
                staged_bytes: staged,
                max: self.budget.borrow().limit().min(STAGING_BYTES_MAX),
            })?;
        // A control batch here is a transaction marker the leader writes (`append_marker`;
        // Produce refuses clients' control batches): it carries no sequence, and ends the
        // producer's transaction once stored.
        let marker = if header.is_control() {
            match parse_end_txn_marker(input) {
                Ok(Some(m)) if header.producer_id >= 0 => Some(m),
                Ok(_) => None,
                Err(e) => {
                    return Err(AppendError::BadRecords(RecordsError::BadRecord {
                        index: 0,
                        why: marker_error_why(&e),
                    }))
                }
            }
        } else {
            None
        };
        let mut inner = self.inner.borrow_mut();
        inner.check_open()?;
        if let Some(m) = &marker {
            inner
                .producers
                .check_marker(
                    ProducerId(header.producer_id),
                    header.producer_epoch,
                    m.coordinator_epoch,
                )
                .map_err(|refused| match refused {
                    MarkerRefused::InvalidProducerEpoch { epoch, current } => {
                        AppendError::InvalidProducerEpoch {
                            producer_id: ProducerId(header.producer_id),
                            epoch,
                            current,
                        }
                    }
                    MarkerRefused::CoordinatorFenced {
                        coordinator_epoch,
                        current,
                    } => AppendError::CoordinatorFenced {
                        producer_id: ProducerId(header.producer_id),
                        coordinator_epoch,
                        current,
                    },
                })?;
        }
        let id = BatchIdentity {
            // Control batches carry no sequence: never checked as data.
            producer_id: if header.is_control() {
                ProducerId::NONE
            } else {
                ProducerId(header.producer_id)
            },
            ..BatchIdentity::of(&header)
        };
        match inner.producers.check_from(&id, origin) {
            Ok(Verdict::Duplicate {
                base_offset,
                last_offset,
            }) => {
                return Ok(AppendOutcome {
                    base_offset,
                    last_offset,
                    log_append_time_ms: -1,
                    log_start_offset: inner.log_start,
                    duplicate: true,
                })
            }
            Ok(_) => {}
            Err(SequenceError::InvalidProducerEpoch {
                producer_id,
                epoch,
                current,
            }) => {
                return Err(AppendError::InvalidProducerEpoch {
                    producer_id,
                    epoch,
                    current,
                })
            }
            Err(SequenceError::OutOfOrderSequence {
                producer_id,
                epoch,
                first_seq,
                last_seq,
            }) => {
                return Err(AppendError::OutOfOrderSequence {
                    producer_id,
                    epoch,
                    first_seq,
                    last_seq,
                })
            }
            Err(SequenceError::InvalidTxnState { producer_id }) => {
                return Err(AppendError::InvalidTxnState { producer_id })
            }
        }
        match inner.producers.check_verification(&id, verification) {
            Ok(()) => {}
            Err(VerificationRefused::NotVerified) => {
                return Err(AppendError::TxnNotVerified {
                    producer_id: id.producer_id,
                })
            }
            Err(VerificationRefused::OutOfOrder { lowest_sequence }) => {
                return Err(AppendError::OutOfOrderSequence {
                    producer_id: id.producer_id,
                    epoch: id.epoch,
                    first_seq: id.first_seq,
                    last_seq: Some(lowest_sequence.saturating_sub(1)),
                })
            }
        }
        let staged = inner.staged_bytes() as usize;
        // An empty buffer always takes one batch, however large, so nothing waits forever.
        if staged > 0 && staged + input.len() > STAGING_BYTES_MAX {
            return Err(AppendError::Backpressure {
                staged_bytes: staged,
                max: STAGING_BYTES_MAX,
            });
        }

        let base_offset = inner.next_offset;
        let leader_epoch = inner.leader_epoch;
        // The one copy of the produce path's record bytes (see `copy_stats`).
        let mut batch = BytesMut::from(input);
        crate::storage::copy_stats::add_log(input.len());
        patch_base_offset(&mut batch, base_offset);
        patch_leader_epoch(&mut batch, leader_epoch);
        let log_append_time_ms = match inner.config.message_timestamp_type {
            TimestampType::LogAppendTime => {
                patch_log_append_time(&mut batch, now_ms);
                now_ms
            }
            TimestampType::CreateTime => -1,
        };
        let h = BatchHeader::parse(&batch).map_err(AppendError::CorruptMessage)?;
        assert!(
            h.base_offset == base_offset && h.last_offset() >= base_offset,
            "offsets must increase"
        );
        if inner.should_roll(batch.len(), h.last_offset(), now_ms) {
            inner.roll(&self.dir);
        }
        let bytes = batch.freeze();
        let interval = inner.config.index_interval_bytes;
        inner.active().append(bytes.clone(), &h, interval, now_ms);
        inner.next_offset = h.last_offset() + 1;
        inner.assign_epoch(leader_epoch, base_offset);
        inner.producers.record(&id, base_offset, h.last_offset());
        if let Some(m) = marker {
            let done = inner.producers.complete_txn(
                ProducerId(header.producer_id),
                header.producer_epoch,
                m,
                base_offset,
            );
            inner.note_completed(done);
        }
        inner
            .producers
            .note_timestamp(ProducerId(header.producer_id), h.max_timestamp);
        if inner.max_timestamp.is_none_or(|(t, _)| h.max_timestamp > t) {
            inner.max_timestamp = Some((h.max_timestamp, h.last_offset()));
        }
        inner.cache.push(CachedBatch {
            base_offset,
            last_offset: h.last_offset(),
            max_timestamp: h.max_timestamp,
            bytes,
            charge,
        });
        let (limit, written) = (inner.config.tail_cache_bytes, inner.written_offset);
        inner.cache.evict(limit, written);
        self.disk_consume(h.total_len() as u64);
        let outcome = AppendOutcome {
            base_offset,
            last_offset: h.last_offset(),
            log_append_time_ms,
            log_start_offset: inner.log_start,
            duplicate: false,
        };
        let hw_moves =
            inner.hw_mode == HwMode::Local && inner.config.flush_policy != FlushPolicy::Sync;
        if hw_moves {
            inner.high_watermark = inner.next_offset;
        }
        let hw = inner.high_watermark;
        inner.producers.prune_replicated(hw);
        drop(inner);
        if hw_moves {
            self.progress.notify_all();
        }
        self.appended.notify_all();
        self.flush_wakeup.notify_all();
        tracing::debug!(target: "e2e_trace", dir = %self.dir.display(), end = outcome.last_offset + 1, "append");
        Ok(outcome)
    }

    /// WriteTxnMarkers on the leader: appends the producer's COMMIT or ABORT marker (a control
    /// batch), which ends its open transaction; an abort is filed in the aborted index. Refused
    /// with `InvalidProducerEpoch` for an epoch older than the producer's and
    /// `CoordinatorFenced` for a coordinator epoch older than the last marker's. Not yet
    /// durable on return, as `append`.
    pub fn append_marker(
        &self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        marker: EndTxnMarker,
        now_ms: i64,
    ) -> Result<AppendOutcome, AppendError> {
        let batch = build_end_txn_marker(producer_id, producer_epoch, marker, now_ms);
        self.append(&batch[..], now_ms)
    }

    /// Called on becoming leader: every later `append` stamps `epoch` into its batch, and
    /// the first of them records `(epoch, its base offset)` in the leader-epoch cache.
    /// Refuses an `epoch` older than the latest epoch in the log (stamping it would break the
    /// cache's ordering, and leader epochs only grow). The log's epochs come from batch
    /// headers, which a leader's bytes or a damaged disk could have made anything, so this
    /// is an error for the caller to report, never a panic.
    pub fn set_leader_epoch(&self, epoch: i32) -> Result<(), Error> {
        let mut inner = self.inner.borrow_mut();
        let latest = inner
            .epoch_cache
            .latest()
            .map(|l| l.epoch.get())
            .unwrap_or(-1);
        if epoch < 0 || epoch < latest {
            return Err(Error::EpochRegression { epoch, latest });
        }
        inner.leader_epoch = epoch;
        Ok(())
    }

    /// Appends batches fetched from the leader, unchanged (offsets, leader epochs, producer
    /// fields and timestamps are the leader's). Each whole batch is validated (length,
    /// magic, CRC); the first must start at the log end and each next one right after the
    /// previous (or past a gap below the gap bound: see `prepare_replica_append`), or
    /// nothing is appended. A trailing partial batch (a Fetch response cut at
    /// its size limit) is ignored. Producer state and the leader-epoch cache are updated
    /// from the batches, as recovery does, so this replica dedups correctly if it becomes
    /// leader. Not durable on return: `wait_durable(last_offset)` as for `append`.
    ///
    /// Each batch is copied out of the fetch response into a buffer of its own: the
    /// response (up to `replica_fetch_response_max_bytes`, many partitions) is then freed
    /// at once, instead of being pinned whole by whichever log cached its last slice.
    ///
    /// `leader_epoch` is the epoch of the leader the batches came from: no batch it sends can
    /// carry a newer one, so a batch that does is refused (`BadLeaderEpoch`) before its epoch
    /// reaches the cache.
    /// `now_ms` is wall-clock time, read by the caller's clock as for `append`: it only
    /// decides time-based segment rolls (`segment.ms`).
    ///
    /// Unlike `append`, a batch bigger than `segment.bytes` is taken (into a segment of its
    /// own): the leader accepted it, perhaps under an older config, and a follower mirrors
    /// the leader's log rather than stall on it.
    pub fn append_replica(
        &self,
        batches: Bytes,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<ReplicaAppendOutcome, ReplicaAppendError> {
        self.inner.borrow().check_open()?;
        let mut charge =
            self.charge(batches.len())
                .map_err(|staged| ReplicaAppendError::Backpressure {
                    staged_bytes: staged,
                    max: self.budget.borrow().limit().min(STAGING_BYTES_MAX),
                })?;
        let mut inner = self.inner.borrow_mut();
        inner.check_open()?;
        let mut parsed = Vec::new();
        let mut expected = inner.next_offset;
        let mut at = 0usize;
        let mut total = 0usize;
        while let Some(rest) = batches.get(at..).filter(|r| !r.is_empty()) {
            let len = match BatchHeader::parse(rest) {
                Ok(h) => h.total_len(),
                Err(BatchError::Truncated { .. }) => break,
                Err(e) => return Err(ReplicaAppendError::CorruptMessage(e)),
            };
            let Some(one) = rest.get(..len) else {
                break; // The trailing partial batch of a size-limited Fetch response.
            };
            let h = validate(one).map_err(ReplicaAppendError::CorruptMessage)?;
            if h.partition_leader_epoch > leader_epoch {
                return Err(ReplicaAppendError::BadLeaderEpoch {
                    offset: h.base_offset,
                    epoch: h.partition_leader_epoch,
                    leader_epoch,
                });
            }
            // Offsets increase; they skip some only where the leader's cleaner removed
            // batches, and `prepare_replica_append` raised the gap bound over those first.
            if !offset_follows(expected, h.base_offset, inner.gaps_below) {
                return Err(ReplicaAppendError::OffsetMismatch {
                    expected,
                    got: h.base_offset,
                });
            }
            expected = h.last_offset() + 1;
            parsed.push((h, Bytes::copy_from_slice(one)));
            at += len;
            total += len;
        }
        let staged = inner.staged_bytes() as usize;
        if staged > 0 && staged + total > STAGING_BYTES_MAX {
            return Err(ReplicaAppendError::Backpressure {
                staged_bytes: staged,
                max: STAGING_BYTES_MAX,
            });
        }
        let first_offset = parsed.first().map(|(h, _)| h.base_offset).unwrap_or(-1);
        let last_offset = parsed.last().map(|(h, _)| h.last_offset()).unwrap_or(-1);
        let count = parsed.len();
        for (h, bytes) in parsed {
            assert!(
                h.base_offset >= inner.next_offset && h.last_offset() >= h.base_offset,
                "replica offsets must increase"
            );
            if inner.should_roll(bytes.len(), h.last_offset(), now_ms) {
                inner.roll(&self.dir);
            }
            let interval = inner.config.index_interval_bytes;
            inner.active().append(bytes.clone(), &h, interval, now_ms);
            inner.next_offset = h.last_offset() + 1;
            inner.assign_epoch(h.partition_leader_epoch, h.base_offset);
            // Producer state and transactions follow the leader's batches and markers.
            if let Some(done) = inner.producers.replay(&h, &bytes) {
                inner.note_completed(done);
            }
            if inner.max_timestamp.is_none_or(|(t, _)| h.max_timestamp > t) {
                inner.max_timestamp = Some((h.max_timestamp, h.last_offset()));
            }
            // The charge taken for the whole input is split over the batches kept.
            let batch_charge = {
                let budget = Rc::clone(&self.budget.borrow());
                let c = budget.charge_forced(MemoryClass::Log, bytes.len());
                charge.shrink(bytes.len());
                c
            };
            inner.cache.push(CachedBatch {
                base_offset: h.base_offset,
                last_offset: h.last_offset(),
                max_timestamp: h.max_timestamp,
                bytes,
                charge: batch_charge,
            });
        }
        drop(charge);
        self.disk_consume(total as u64);
        let (limit, written) = (inner.config.tail_cache_bytes, inner.written_offset);
        inner.cache.evict(limit, written);
        let hw_moves = count > 0
            && inner.hw_mode == HwMode::Local
            && inner.config.flush_policy != FlushPolicy::Sync;
        if hw_moves {
            inner.high_watermark = inner.next_offset;
        }
        let hw = inner.high_watermark;
        inner.producers.prune_replicated(hw);
        let log_end_offset = inner.next_offset;
        drop(inner);
        if count > 0 {
            if hw_moves {
                self.progress.notify_all();
            }
            self.appended.notify_all();
            self.flush_wakeup.notify_all();
            tracing::debug!(target: "e2e_trace", dir = %self.dir.display(), end = log_end_offset, "rappend");
        }
        Ok(ReplicaAppendOutcome {
            first_offset,
            last_offset,
            batches: count,
            log_end_offset,
        })
    }

    /// Resolves once the staging buffer has room for `len` more bytes, so a producer that
    /// outruns the disk waits for the flusher instead of being refused.
    /// Also waits for room in the shard's memory budget (after evicting cached batches).
    pub async fn wait_for_staging_room(&self, len: usize) -> Result<(), Error> {
        let budget = Rc::clone(&self.budget.borrow());
        loop {
            let listener = self.progress.listen();
            let released = budget.room();
            let staged = {
                let inner = self.inner.borrow();
                if let Some(e) = &inner.failed {
                    return Err(e.clone());
                }
                if inner.closed {
                    return Err(Error::Closed);
                }
                inner.staged_bytes() as usize
            };
            if staged == 0 && budget.may_force(len) {
                return Ok(());
            }
            if staged + len <= STAGING_BYTES_MAX
                && budget.charge_evicting(MemoryClass::Log, len).is_some()
            {
                return Ok(());
            }
            // With nothing staged here, room comes from other logs' flushes (which make their
            // cached batches evictable and wake `released`) or from releases.
            self.flush_wakeup.notify_all();
            futures_lite::future::or(listener, released).await;
        }
    }

    /// Resolves once the fsynced end passes `offset` under the Sync flush policy, or the log
    /// closes or fails; under the other policies only then (nothing is synced per append, and
    /// a follower reports its log end in its fetches). A follower's durable-end reporter
    /// (`shard::replica::fetcher`) waits on it, so the leader hears of an fsync as soon as it
    /// completes.
    pub async fn wait_synced_beyond(&self, offset: i64) {
        loop {
            let listener = self.progress.listen();
            {
                let inner = self.inner.borrow();
                if inner.failed.is_some() || inner.closed {
                    return;
                }
                if inner.config.flush_policy == FlushPolicy::Sync
                    && inner.durable_offset.min(inner.next_offset) > offset
                {
                    return;
                }
            }
            listener.await;
        }
    }

    /// Whether the log may still be read and written (not closed, not poisoned).
    pub fn is_open(&self) -> bool {
        let inner = self.inner.borrow();
        !inner.closed && inner.failed.is_none()
    }

    /// Resolves once `last_offset` is durable per the flush policy (immediately unless Sync).
    pub async fn wait_durable(&self, last_offset: i64) -> Result<(), Error> {
        loop {
            let listener = self.progress.listen();
            {
                let inner = self.inner.borrow();
                if let Some(e) = &inner.failed {
                    return Err(e.clone());
                }
                if inner.config.flush_policy != FlushPolicy::Sync
                    || inner.durable_offset > last_offset
                {
                    return Ok(());
                }
                if inner.closed || (inner.closing && !self.flusher_running.get()) {
                    return Err(Error::Closed);
                }
            }
            listener.await;
        }
    }
}
