//! Transactions in a partition log, on a real disk: open transactions in producer state, the
//! last stable offset, COMMIT/ABORT markers, the aborted-transaction index (`.txnindex`),
//! and all of them after a simulated crash, a follower's append, a truncation and retention.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::path::Path;

use bytes::BytesMut;

use super::tests::{make_batch, run, test_dir};
use super::txn_index::AbortedRange;
use super::*;
use crate::protocol::control::{EndTxnMarker, TxnOutcome};
use crate::protocol::producer::{ProducerEpoch, ProducerId};
use crate::protocol::record_batch::{compute_crc, ATTR_TRANSACTIONAL};

/// A transactional batch of `records` records for producer `pid`, epoch 0, from `seq`.
fn txn_batch(records: i32, pid: i64, seq: i32, payload: usize) -> BytesMut {
    let mut b = make_batch(records, 1_000, pid, 0, seq, payload);
    let attributes = i16::from_be_bytes([b[21], b[22]]) | ATTR_TRANSACTIONAL;
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

fn marker(outcome: TxnOutcome, coordinator_epoch: i32) -> EndTxnMarker {
    EndTxnMarker {
        outcome,
        coordinator_epoch,
    }
}

fn end_txn(p: &Partition, pid: i64, epoch: i16, outcome: TxnOutcome) -> i64 {
    p.append_marker(
        ProducerId(pid),
        ProducerEpoch(epoch),
        marker(outcome, 0),
        2_000,
    )
    .unwrap()
    .base_offset
}

fn aborted(pid: i64, first: i64) -> AbortedRange {
    AbortedRange {
        producer_id: pid,
        first_offset: first,
    }
}

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        preallocate_bytes: 8192,
        ..LogConfig::default()
    }
}

async fn durable(p: &Partition) {
    p.wait_durable(p.log_end_offset() - 1).await.unwrap();
}

/// An open transaction holds the LSO at its first offset while other data passes the HW;
/// an ABORT marker releases it and files (producer, first offset) in the aborted index, a
/// COMMIT releases it and files nothing; Fetch's range query finds exactly the overlapping
/// aborts.
#[test]
fn open_transactions_bound_the_lso_and_aborts_are_indexed() {
    run(|| async {
        let dir = test_dir();
        let p = Partition::open(dir.path().join("t-0"), LogConfig::default())
            .await
            .unwrap();
        p.append(txn_batch(3, 1, 0, 50), 0).unwrap(); // 0..=2, pid 1 opens at 0
        p.append(make_batch(1, 1_000, -1, -1, -1, 10), 0).unwrap(); // 3
        p.append(txn_batch(2, 2, 0, 50), 0).unwrap(); // 4..=5, pid 2 opens at 4
        durable(&p).await;
        assert_eq!(p.high_watermark(), 6);
        assert_eq!(p.last_stable_offset(), 0);
        assert_eq!(p.open_txn_first_offset(ProducerId(1)), Some(0));
        assert_eq!(end_txn(&p, 1, 0, TxnOutcome::Abort), 6);
        durable(&p).await;
        assert_eq!(p.last_stable_offset(), 4, "pid 2 still open");
        assert_eq!(p.open_txn_first_offset(ProducerId(1)), None);
        assert_eq!(end_txn(&p, 2, 0, TxnOutcome::Commit), 7);
        durable(&p).await;
        assert_eq!(p.last_stable_offset(), 8);
        assert_eq!(p.aborted_transactions(0, 8), vec![aborted(1, 0)]);
        assert_eq!(p.aborted_transactions(7, 8), vec![], "ended before 7");
        // A transaction continues with later batches of the same producer.
        p.append(txn_batch(1, 1, 3, 10), 0).unwrap(); // 8 opens
        p.append(txn_batch(1, 1, 4, 10), 0).unwrap(); // 9 continues
        durable(&p).await;
        assert_eq!(p.open_txn_first_offset(ProducerId(1)), Some(8));
        assert_eq!(end_txn(&p, 1, 0, TxnOutcome::Abort), 10);
        assert_eq!(
            p.aborted_transactions(0, 11),
            vec![aborted(1, 0), aborted(1, 8)]
        );
        p.close().await.unwrap();
    });
}

/// Kafka's refusals: a non-transactional batch while a transaction is open
/// (INVALID_TXN_STATE), a marker older than the producer's epoch (INVALID_PRODUCER_EPOCH),
/// a marker from an older coordinator (TRANSACTION_COORDINATOR_FENCED). A marker with a
/// newer epoch (the coordinator fenced the producer) ends the transaction and fences older
/// batches. Nothing refused is appended.
#[test]
fn marker_and_txn_state_refusals() {
    run(|| async {
        let dir = test_dir();
        let p = Partition::open(dir.path().join("t-0"), LogConfig::default())
            .await
            .unwrap();
        p.append(txn_batch(1, 1, 0, 10), 0).unwrap();
        let plain = make_batch(1, 1_000, 1, 0, 1, 10);
        assert!(matches!(
            p.append(plain, 0),
            Err(AppendError::InvalidTxnState {
                producer_id: ProducerId(1)
            })
        ));
        let m = |epoch, coordinator_epoch| {
            p.append_marker(
                ProducerId(1),
                ProducerEpoch(epoch),
                marker(TxnOutcome::Commit, coordinator_epoch),
                0,
            )
        };
        assert!(m(1, 5).is_ok(), "a bumped epoch ends the transaction");
        assert_eq!(
            m(0, 5).unwrap_err().error_code(),
            crate::protocol::error::ErrorCode::InvalidProducerEpoch
        );
        assert_eq!(
            m(1, 4).unwrap_err().error_code(),
            crate::protocol::error::ErrorCode::TransactionCoordinatorFenced
        );
        assert_eq!(p.log_end_offset(), 2);
        // The old epoch's data is fenced too.
        assert!(matches!(
            p.append(txn_batch(1, 1, 1, 10), 0),
            Err(AppendError::InvalidProducerEpoch { .. })
        ));
        p.close().await.unwrap();
    });
}

fn txnindex_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".txnindex"))
        .collect();
    names.sort();
    names
}

/// Fills a small-segment log with transactions spanning segments: pid 1 aborted from
/// offset 0 across several rolls, pid 2 committed, pid 3 left open; returns the end.
async fn fill_spanning(p: &Partition) -> i64 {
    let mut seq1 = 0;
    p.append(txn_batch(1, 1, seq1, 600), 0).unwrap();
    seq1 += 1;
    for i in 0..6 {
        p.append(txn_batch(1, 2, i, 600), 0).unwrap();
        p.append(txn_batch(1, 1, seq1, 600), 0).unwrap();
        seq1 += 1;
    }
    end_txn(p, 1, 0, TxnOutcome::Abort);
    end_txn(p, 2, 0, TxnOutcome::Commit);
    p.append(txn_batch(1, 3, 0, 600), 0).unwrap();
    p.append(make_batch(1, 1_000, -1, -1, -1, 600), 0).unwrap();
    durable(p).await;
    p.log_end_offset()
}

/// After a kill -9 (no close) and after a clean close, a reopened log has the same aborted
/// index (the abort's first offset lies segments before its marker) and the same open
/// transaction bounding the LSO; a closed segment's `.txnindex` exists exactly where an
/// abort marker is.
#[test]
fn aborted_index_and_open_txns_survive_crash_and_close() {
    for crash in [true, false] {
        run(move || async move {
            let dir = test_dir();
            let path = dir.path().join("t-0");
            let p = Partition::open(path.clone(), small()).await.unwrap();
            let end = fill_spanning(&p).await;
            let lso = p.last_stable_offset();
            let want = p.aborted_transactions(0, end);
            assert_eq!(want, vec![aborted(1, 0)]);
            assert_eq!(lso, p.open_txn_first_offset(ProducerId(3)).unwrap());
            if crash {
                p.crash().await;
            } else {
                p.close().await.unwrap();
            }
            let p = Partition::open(path.clone(), small()).await.unwrap();
            assert_eq!(p.log_end_offset(), end);
            assert_eq!(p.aborted_transactions(0, end), want, "crash={crash}");
            assert_eq!(p.last_stable_offset(), lso, "crash={crash}");
            // The open transaction can still be aborted after the restart.
            let m = end_txn(&p, 3, 0, TxnOutcome::Abort);
            durable(&p).await;
            assert_eq!(
                p.aborted_transactions(0, m + 1),
                vec![aborted(1, 0), aborted(3, lso)]
            );
            p.close().await.unwrap();
            assert!(!txnindex_files(&path).is_empty());
        });
    }
}

/// A closed segment's damaged `.txnindex` (cut mid-entry) is rebuilt from the log at open:
/// same entries as before, file rewritten.
#[test]
fn damaged_txnindex_is_rebuilt_from_the_log() {
    run(|| async {
        let dir = test_dir();
        let path = dir.path().join("t-0");
        let p = Partition::open(path.clone(), small()).await.unwrap();
        let end = fill_spanning(&p).await;
        // Push the marker's segment out of the active position.
        for _ in 0..4 {
            p.append(make_batch(1, 1_000, -1, -1, -1, 600), 0).unwrap();
        }
        durable(&p).await;
        let want = p.aborted_transactions(0, end);
        p.close().await.unwrap();
        let files = txnindex_files(&path);
        assert_eq!(files.len(), 1, "{files:?}");
        let file = path.join(&files[0]);
        let bytes = std::fs::read(&file).unwrap();
        std::fs::write(&file, &bytes[..bytes.len() - 5]).unwrap();
        let p = Partition::open(path.clone(), small()).await.unwrap();
        assert_eq!(p.aborted_transactions(0, end), want);
        assert_eq!(std::fs::read(&file).unwrap(), bytes, "rewritten");
        p.close().await.unwrap();
    });
}

/// A follower appending the leader's bytes (markers included) rebuilds the same open
/// transactions, LSO and aborted index.
#[test]
fn follower_append_tracks_transactions() {
    run(|| async {
        let dir = test_dir();
        let leader = Partition::open(dir.path().join("l"), small())
            .await
            .unwrap();
        let end = fill_spanning(&leader).await;
        let follower = Partition::open(dir.path().join("f"), small())
            .await
            .unwrap();
        let mut at = 0;
        while at < end {
            let r = leader.read_bounded(at, 1 << 20, end).await.unwrap();
            for c in r.chunks {
                let out = follower.append_replica(c, i32::MAX, 0).unwrap();
                at = out.log_end_offset;
            }
        }
        durable(&follower).await;
        assert_eq!(
            follower.aborted_transactions(0, end),
            leader.aborted_transactions(0, end)
        );
        assert_eq!(follower.last_stable_offset(), leader.last_stable_offset());
        leader.close().await.unwrap();
        follower.close().await.unwrap();
    });
}

/// Truncating below an ABORT marker removes its entry (and reopens the transaction: the LSO
/// falls back to its first offset); retention deleting the marker's segment removes its
/// `.txnindex` file with it.
#[test]
fn truncation_and_retention_drop_aborts_with_their_markers() {
    run(|| async {
        let dir = test_dir();
        let path = dir.path().join("t-0");
        let p = Partition::open(path.clone(), small()).await.unwrap();
        p.append(txn_batch(2, 1, 0, 10), 0).unwrap(); // 0..=1
        let m = end_txn(&p, 1, 0, TxnOutcome::Abort); // 2
        durable(&p).await;
        assert_eq!(p.aborted_transactions(0, 3), vec![aborted(1, 0)]);
        p.truncate_to(m).await.unwrap();
        assert_eq!(p.aborted_transactions(0, 3), vec![]);
        assert_eq!(p.open_txn_first_offset(ProducerId(1)), Some(0));
        assert_eq!(p.last_stable_offset(), 0);
        let m = end_txn(&p, 1, 0, TxnOutcome::Abort);
        assert_eq!(m, 2);
        // Roll past the marker's segment, then delete it.
        for _ in 0..8 {
            p.append(make_batch(1, 1_000, -1, -1, -1, 600), 0).unwrap();
        }
        durable(&p).await;
        p.close().await.unwrap();
        assert_eq!(txnindex_files(&path).len(), 1);
        let p = Partition::open(path.clone(), small()).await.unwrap();
        assert_eq!(p.aborted_transactions(0, 3), vec![aborted(1, 0)]);
        let hw = p.high_watermark();
        p.delete_records(hw - 1).await.unwrap();
        assert!(txnindex_files(&path).is_empty());
        assert_eq!(p.aborted_transactions(hw - 1, hw), vec![]);
        p.close().await.unwrap();
    });
}

/// A transactional batch of `records` keyed records (valid record bodies, which the cleaner
/// parses) for producer `pid`, epoch 0, from `seq`.
fn keyed_txn_batch(records: i64, pid: i64, seq: i32) -> BytesMut {
    use crate::protocol::produce_batch::{encode_batch, ProduceRecord};
    let rs = (0..records).map(|j| ProduceRecord {
        key: Some(bytes::Bytes::from(format!("txn-{pid}-{seq}-{j}"))),
        value: Some(bytes::Bytes::from(vec![b't'; 50])),
        headers: Vec::new(),
        timestamp_ms: 1_000,
    });
    let encoded = encode_batch(rs, kafka_protocol::records::Compression::None).unwrap();
    let mut b = BytesMut::from(&encoded[..]);
    let attributes = i16::from_be_bytes([b[21], b[22]]) | ATTR_TRANSACTIONAL;
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    b[43..51].copy_from_slice(&pid.to_be_bytes());
    b[51..53].copy_from_slice(&0i16.to_be_bytes());
    b[53..57].copy_from_slice(&seq.to_be_bytes());
    let crc = compute_crc(&b);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Proves the cleaner on a real log (Kafka's LogCleaner with transactions): an open
/// transaction holds the cleaner below the LSO; once it is decided, the aborted batches go
/// while their ABORT marker and its aborted-index entry stay; on a later pass the marker
/// (no data of its transaction left) gets a delete horizon, and on a pass after the horizon
/// it goes with its index entry; a restart finds the same log, index and LSO.
#[test]
fn cleaner_removes_aborted_data_then_its_marker() {
    use super::tests::{fill_keyed, headers, read_all, Unthrottled};
    use crate::protocol::record_batch::BatchHeader;
    run(|| async {
        let dir = test_dir();
        let path = dir.path().join("t-0");
        let config = LogConfig {
            cleanup_policy: CleanupPolicy {
                delete: false,
                compact: true,
            },
            delete_retention_ms: 1_000,
            ..small()
        };
        let p = Partition::open(path.clone(), config.clone()).await.unwrap();
        p.append(keyed_txn_batch(3, 1, 0), 0).unwrap(); // 0..=2, aborted
        let abort_at = end_txn(&p, 1, 0, TxnOutcome::Abort); // 3
        p.append(keyed_txn_batch(1, 2, 0), 0).unwrap(); // 4, pid 2 stays open
        fill_keyed(&p, 40).await;
        assert_eq!(p.last_stable_offset(), 4);
        let mut map = cleaner::OffsetMap::new(1 << 20);
        assert!(
            p.clean(&mut map, 0, &mut Unthrottled)
                .await
                .unwrap()
                .is_none(),
            "nothing below the LSO's segment"
        );
        assert_eq!(headers(&read_all(&p, 0, 4).await)[0].base_offset, 0);

        end_txn(&p, 2, 0, TxnOutcome::Commit);
        p.append(keyed_txn_batch(1, 1, 3), 0).unwrap(); // pid 1's last batch is now later
        end_txn(&p, 1, 0, TxnOutcome::Commit);
        fill_keyed(&p, 40).await;
        let leo = p.log_end_offset();
        assert_eq!(p.last_stable_offset(), leo);
        assert!(p
            .clean(&mut map, 0, &mut Unthrottled)
            .await
            .unwrap()
            .is_some());
        let at_marker = |hs: &[BatchHeader]| hs.iter().find(|h| h.base_offset == abort_at).copied();
        let hs = headers(&read_all(&p, 0, leo).await);
        assert!(
            hs.iter().all(|h| h.base_offset != 0),
            "the aborted batch is gone"
        );
        let m = at_marker(&hs).expect("the marker stays while its data went this pass");
        assert!(m.is_control() && m.delete_horizon_ms().is_none());
        assert_eq!(p.aborted_transactions(0, leo), vec![aborted(1, 0)]);

        fill_keyed(&p, 40).await;
        assert!(p
            .clean(&mut map, 0, &mut Unthrottled)
            .await
            .unwrap()
            .is_some());
        let leo = p.log_end_offset();
        let hs = headers(&read_all(&p, 0, leo).await);
        assert_eq!(at_marker(&hs).unwrap().delete_horizon_ms(), Some(1_000));

        fill_keyed(&p, 40).await;
        assert!(p
            .clean(&mut map, 5_000, &mut Unthrottled)
            .await
            .unwrap()
            .is_some());
        let leo = p.log_end_offset();
        let cleaned = read_all(&p, 0, leo).await;
        assert!(
            at_marker(&headers(&cleaned)).is_none(),
            "the marker went after its horizon"
        );
        assert_eq!(p.aborted_transactions(0, leo), vec![]);
        p.close().await.unwrap();

        let p = Partition::open(path, config).await.unwrap();
        assert_eq!(p.log_end_offset(), leo);
        assert_eq!(p.last_stable_offset(), leo);
        assert_eq!(read_all(&p, 0, leo).await, cleaned);
        assert_eq!(p.aborted_transactions(0, leo), vec![]);
        p.close().await.unwrap();
    });
}

/// KIP-890 verification on the partition (Kafka's `VerificationGuard`): with verification on,
/// a transactional batch that would open a transaction needs the producer's current guard;
/// once the transaction is open its later batches need none; an ABORT marker written while a
/// verification was in flight makes that verification's guard stale (the ABA case: "verified"
/// for the aborted transaction must not let the batch open a new one). A batch may not
/// overtake a lower sequence still verifying. Nothing refused is appended.
#[test]
fn verification_guards_transactional_appends() {
    use super::producer_state::TxnVerification::{Guard, Off};
    run(|| async {
        let dir = test_dir();
        let p = Partition::open(dir.path().join("t-0"), LogConfig::default())
            .await
            .unwrap();
        // No guard: refused (and with verification off, not checked).
        assert!(matches!(
            p.append_verified(txn_batch(1, 1, 0, 10), 0, Guard(None)),
            Err(AppendError::TxnNotVerified {
                producer_id: ProducerId(1)
            })
        ));
        assert_eq!(p.log_end_offset(), 0);
        // The verification's guard lets the batch open the transaction.
        let g = p
            .start_txn_verification(ProducerId(1), 0, 0, 0)
            .unwrap()
            .unwrap();
        p.append_verified(txn_batch(1, 1, 0, 10), 0, Guard(Some(g)))
            .unwrap();
        // Open now: no verification needed, the entry is gone.
        assert_eq!(
            p.start_txn_verification(ProducerId(1), 1, 0, 0).unwrap(),
            None
        );
        p.append_verified(txn_batch(1, 1, 1, 10), 0, Guard(None))
            .unwrap();
        // A verification for the next transaction starts, then the abort marker lands before
        // its answer: the stale guard is refused.
        end_txn(&p, 1, 0, TxnOutcome::Abort);
        let stale = p
            .start_txn_verification(ProducerId(1), 2, 0, 0)
            .unwrap()
            .unwrap();
        assert_ne!(stale, g);
        let end = p.log_end_offset();
        end_txn(&p, 1, 0, TxnOutcome::Abort);
        assert!(matches!(
            p.append_verified(txn_batch(1, 1, 2, 10), 0, Guard(Some(stale))),
            Err(AppendError::TxnNotVerified { .. })
        ));
        assert_eq!(p.log_end_offset(), end + 1, "only the marker");
        // Two batches of a new producer (any first sequence is accepted from one) verifying at
        // once: the higher sequence may not go first.
        let g2 = p
            .start_txn_verification(ProducerId(3), 5, 0, 0)
            .unwrap()
            .unwrap();
        assert_eq!(
            p.start_txn_verification(ProducerId(3), 0, 0, 0).unwrap(),
            Some(g2)
        );
        assert!(matches!(
            p.append_verified(txn_batch(1, 3, 5, 10), 0, Guard(Some(g2))),
            Err(AppendError::OutOfOrderSequence { first_seq: 5, .. })
        ));
        p.append_verified(txn_batch(5, 3, 0, 10), 0, Guard(Some(g2)))
            .unwrap();
        p.append_verified(txn_batch(1, 3, 5, 10), 0, Guard(None))
            .unwrap();
        // Verification off: the old behaviour, nothing checked.
        p.append_verified(txn_batch(1, 2, 0, 10), 0, Off).unwrap();
        assert_eq!(
            p.open_txn_first_offset(ProducerId(2)),
            Some(p.log_end_offset() - 1)
        );
        p.close().await.unwrap();
    });
}
