//! Property tests of the cleaner's pure parts against an oracle: a log of random keyed
//! writes (overwrites, tombstones, keyless records, every codec, several producers) is
//! cleaned pass after pass with the real map and filter, as the shard's cleaner does, and
//! what a reader then sees is compared with what Kafka promises: per key exactly the last
//! record, tombstones until their horizon, offsets and timestamps unchanged. Batches are built
//! and read back with kafka-protocol's own encoder and decoder, an independent
//! implementation of the format.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, HashMap};

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use proptest::prelude::*;

use super::*;
use crate::protocol::record_batch::{validate, BatchIter};

/// One record as the test writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Write {
    key: Option<u8>,
    /// `None` is a tombstone.
    value: Option<Vec<u8>>,
    timestamp: i64,
}

#[derive(Debug, Clone)]
struct BatchSpec {
    compression: Compression,
    producer_id: i64,
    writes: Vec<Write>,
}

/// A segment of the model log: its base offset and its batches.
#[derive(Debug, Clone)]
struct Seg {
    base_offset: i64,
    batches: Vec<Vec<u8>>,
}

fn compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Gzip),
        Just(Compression::Snappy),
        Just(Compression::Lz4),
        Just(Compression::Zstd),
    ]
}

fn write() -> impl Strategy<Value = Write> {
    (
        prop_oneof![1 => Just(None), 8 => (0u8..6).prop_map(Some)],
        prop_oneof![1 => Just(None), 4 => proptest::collection::vec(any::<u8>(), 0..12).prop_map(Some)],
        0i64..1_000_000,
    )
        .prop_map(|(key, value, timestamp)| Write {
            key,
            value,
            timestamp,
        })
}

fn batch_spec() -> impl Strategy<Value = BatchSpec> {
    (
        compression(),
        prop_oneof![Just(-1i64), 1i64..4],
        proptest::collection::vec(write(), 1..6),
    )
        .prop_map(|(compression, producer_id, writes)| BatchSpec {
            compression,
            producer_id,
            writes,
        })
}

fn encode(spec: &BatchSpec, base_offset: i64) -> Vec<u8> {
    let records: Vec<Record> = spec
        .writes
        .iter()
        .enumerate()
        .map(|(i, w)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 3,
            producer_id: spec.producer_id,
            producer_epoch: if spec.producer_id < 0 { -1 } else { 0 },
            timestamp_type: TimestampType::Creation,
            offset: base_offset + i as i64,
            // The reference encoder splits a batch where offset - sequence changes.
            sequence: if spec.producer_id < 0 {
                -1
            } else {
                base_offset as i32
            }
            .wrapping_add(i as i32),
            timestamp: w.timestamp,
            key: w.key.map(|k| Bytes::from(vec![b'k', k])),
            value: w.value.clone().map(Bytes::from),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: spec.compression,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
    buf.to_vec()
}

/// Appends batches to the model log, `per_segment` batches to a segment, and returns each
/// written record as (offset, write).
fn append(
    log: &mut Vec<Seg>,
    specs: &[BatchSpec],
    per_segment: usize,
    next: &mut i64,
) -> Vec<(i64, Write)> {
    let mut written = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        if i % per_segment == 0 {
            log.push(Seg {
                base_offset: *next,
                batches: Vec::new(),
            });
        }
        let batch = encode(spec, *next);
        for (j, w) in spec.writes.iter().enumerate() {
            written.push((*next + j as i64, w.clone()));
        }
        *next += spec.writes.len() as i64;
        log.last_mut().unwrap().batches.push(batch);
    }
    written
}

/// One cleaner pass over the closed segments, as the shard's task runs it; returns the new
/// checkpoint, or `None` when there was nothing to clean.
fn pass(
    log: &mut Vec<Seg>,
    checkpoint: i64,
    map: &mut OffsetMap,
    now_ms: i64,
    producer_last: &HashMap<i64, i64>,
    group_bytes: u64,
) -> Option<i64> {
    let closed = log.len() - 1;
    let active_base = log[closed].base_offset;
    if checkpoint >= active_base {
        return None;
    }
    map.clear();
    'mapping: for seg in &log[..closed] {
        for batch in &seg.batches {
            if map_batch(map, batch, checkpoint, 1 << 20, &mut TxnTracker::default()).unwrap()
                == Mapped::Full
            {
                break 'mapping;
            }
        }
    }
    let end = map.latest_offset() + 1;
    assert!(end > checkpoint, "the map made no progress");
    let summaries: Vec<SegmentSummary> = log
        .iter()
        .enumerate()
        .map(|(i, s)| SegmentSummary {
            base_offset: s.base_offset,
            next_offset: log.get(i + 1).map_or(i64::MAX, |n| n.base_offset),
            size_bytes: s.batches.iter().map(|b| b.len() as u64).sum(),
            max_timestamp: -1,
            first_timestamp: -1,
        })
        .collect();
    let groups = group_segments(&summaries[..closed], end, group_bytes);
    let lookup = |pid: i64| producer_last.get(&pid).copied();
    let ctx = FilterContext {
        map,
        now_ms,
        delete_retention_ms: 1000,
        producer_last_offset: &lookup,
        producer_last_marker: &|_| None,
        decompressed_max: 1 << 20,
    };
    let mut stats = FilterStats::default();
    let mut rewritten = Vec::new();
    for group in &groups {
        let mut out = Vec::new();
        for seg in &log[group.clone()] {
            let input: Vec<u8> = seg.batches.concat();
            filter_segment(
                &input,
                &ctx,
                &mut TxnTracker::default(),
                &mut stats,
                &mut out,
            )
            .unwrap();
        }
        let batches = BatchIter::new(&out)
            .map(|item| {
                let (at, h) = item.unwrap();
                out[at..at + h.total_len()].to_vec()
            })
            .collect();
        rewritten.push(Seg {
            base_offset: log[group.start].base_offset,
            batches,
        });
    }
    let replaced = groups.last().map_or(0, |g| g.end);
    log.splice(..replaced, rewritten);
    Some(end)
}

/// Every record a reader sees, as (offset, key, value, timestamp), checked batch by batch.
fn read_all(log: &[Seg]) -> Vec<(i64, Option<Bytes>, Option<Bytes>, i64)> {
    let mut out = Vec::new();
    for seg in log {
        for batch in &seg.batches {
            let header = validate(batch).unwrap();
            assert!(header.base_offset >= seg.base_offset);
            let mut bytes = Bytes::copy_from_slice(batch);
            let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
            assert_eq!(set.records.len() as i32, header.records_count);
            for r in set.records {
                assert!(r.offset >= header.base_offset && r.offset <= header.last_offset());
                out.push((r.offset, r.key, r.value, r.timestamp));
            }
        }
    }
    out
}

/// What a reader must see: records below `cleaned_below` that are the last of their key
/// there (a tombstone only while `tombstone_kept` says so), then everything after.
fn oracle(
    written: &[(i64, Write)],
    cleaned_below: i64,
    tombstone_kept: impl Fn(i64) -> bool,
) -> Vec<(i64, Option<Bytes>, Option<Bytes>, i64)> {
    let mut last: HashMap<u8, i64> = HashMap::new();
    for (offset, w) in written.iter().filter(|(o, _)| *o < cleaned_below) {
        if let Some(k) = w.key {
            last.insert(k, *offset);
        }
    }
    written
        .iter()
        .filter(|(offset, w)| {
            *offset >= cleaned_below
                || w.key.is_some_and(|k| {
                    last[&k] == *offset && (w.value.is_some() || tombstone_kept(*offset))
                })
        })
        .map(|(offset, w)| {
            (
                *offset,
                w.key.map(|k| Bytes::from(vec![b'k', k])),
                w.value.clone().map(Bytes::from),
                w.timestamp,
            )
        })
        .collect()
}

fn clean_fully(
    log: &mut Vec<Seg>,
    checkpoint: &mut i64,
    map: &mut OffsetMap,
    now_ms: i64,
    producer_last: &HashMap<i64, i64>,
    group_bytes: u64,
) {
    let mut passes = 0;
    while let Some(end) = pass(log, *checkpoint, map, now_ms, producer_last, group_bytes) {
        *checkpoint = end;
        passes += 1;
        assert!(passes < 1000, "cleaning does not converge");
    }
}

/// The last offset of each producer's last batch, over the batches written.
fn producer_last_offsets(log: &[Seg]) -> HashMap<i64, i64> {
    let mut last = HashMap::new();
    for batch in log.iter().flat_map(|s| &s.batches) {
        let h = validate(batch).unwrap();
        if h.producer_id >= 0 {
            last.insert(h.producer_id, h.last_offset());
        }
    }
    last
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    // Proves cleaning to the end of the closed segments leaves exactly the last record per
    // key (tombstones included while young, keyless records gone), keeps the active segment,
    // every offset and timestamp, the batches' codecs, base and last offsets, and each
    // producer's last batch (empty if need be); then, after more writes and a pass past the
    // delete horizon, that the old tombstones are gone and the new ones stay. Small maps
    // force many partial passes; small group bounds force merged segments.
    #[test]
    fn cleaning_matches_the_oracle(
        first in proptest::collection::vec(batch_spec(), 1..24),
        second in proptest::collection::vec(batch_spec(), 1..12),
        per_segment in 1usize..5,
        map_bytes in prop_oneof![Just(200usize), Just(400), Just(1 << 16)],
        group_bytes in prop_oneof![Just(1u64), Just(600), Just(1 << 20)],
    ) {
        let mut log = Vec::new();
        let mut next = 0i64;
        let mut written = append(&mut log, &first, per_segment, &mut next);
        let originals: BTreeMap<i64, (i16, i64)> = log
            .iter()
            .flat_map(|s| &s.batches)
            .map(|b| { let h = validate(b).unwrap(); (h.base_offset, (h.compression(), h.last_offset())) })
            .collect();
        let producers = producer_last_offsets(&log);
        let mut map = OffsetMap::new(map_bytes);
        let mut checkpoint = 0i64;

        // Phase A: clean at time 0; every tombstone gets the horizon 0 + 1000.
        let active_a = log.last().unwrap().base_offset;
        clean_fully(&mut log, &mut checkpoint, &mut map, 0, &producers, group_bytes);
        prop_assert_eq!(checkpoint, active_a.max(0));
        prop_assert_eq!(read_all(&log), oracle(&written, active_a, |_| true));
        let offsets: Vec<i64> = read_all(&log).iter().map(|r| r.0).collect();
        prop_assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        for batch in log.iter().flat_map(|s| &s.batches) {
            let h = validate(batch).unwrap();
            let (codec, last) = originals[&h.base_offset];
            prop_assert_eq!(h.last_offset(), last, "last offset delta kept");
            if h.records_count > 0 {
                prop_assert_eq!(h.compression(), codec, "recompressed in the batch's codec");
            } else {
                prop_assert!(h.producer_id >= 0 && producers[&h.producer_id] == last);
            }
        }
        for (pid, last) in &producers {
            prop_assert!(
                log.iter().flat_map(|s| &s.batches).any(|b| validate(b).unwrap().last_offset() == *last),
                "producer {}'s last batch is gone", pid
            );
        }

        // Phase B: more writes, then a pass at time 5000: the tombstones stamped in phase A
        // expired, the ones cleaned for the first time now stay until 6000.
        written.extend(append(&mut log, &second, per_segment, &mut next));
        let producers = producer_last_offsets(&log);
        let active_b = log.last().unwrap().base_offset;
        clean_fully(&mut log, &mut checkpoint, &mut map, 5000, &producers, group_bytes);
        prop_assert_eq!(read_all(&log), oracle(&written, active_b, |offset| offset >= active_a));
    }
}

/// Proves a batch whose records all survive and carry no tombstone is written unchanged
/// (byte for byte), and that one whose records all go is dropped.
#[test]
fn untouched_and_emptied_batches() {
    let spec = BatchSpec {
        compression: Compression::Lz4,
        producer_id: -1,
        writes: vec![
            Write {
                key: Some(1),
                value: Some(b"a".to_vec()),
                timestamp: 10,
            },
            Write {
                key: Some(2),
                value: Some(b"b".to_vec()),
                timestamp: 11,
            },
        ],
    };
    let batch = encode(&spec, 0);
    let mut map = OffsetMap::new(1 << 12);
    map_batch(&mut map, &batch, 0, 1 << 20, &mut TxnTracker::default()).unwrap();
    let none = |_| None;
    let ctx = FilterContext {
        map: &map,
        now_ms: 0,
        delete_retention_ms: 0,
        producer_last_offset: &none,
        producer_last_marker: &none,
        decompressed_max: 1 << 20,
    };
    let mut stats = FilterStats::default();
    assert_eq!(
        filter_batch(&batch, &ctx, &mut TxnTracker::default(), &mut stats).unwrap(),
        Filtered::Keep
    );
    let later = encode(&spec, 2);
    map_batch(&mut map, &later, 0, 1 << 20, &mut TxnTracker::default()).unwrap();
    let ctx = FilterContext {
        map: &map,
        now_ms: 0,
        delete_retention_ms: 0,
        producer_last_offset: &none,
        producer_last_marker: &none,
        decompressed_max: 1 << 20,
    };
    assert_eq!(
        filter_batch(&batch, &ctx, &mut TxnTracker::default(), &mut stats).unwrap(),
        Filtered::Drop
    );
    assert_eq!(stats.records_read, 4);
    assert_eq!(stats.records_kept, 2);
}

/// A transactional batch of `pid` at `base` writing `(key, value)`s.
fn txn_batch(pid: i64, base: i64, writes: &[(u8, &str)], transactional: bool) -> Vec<u8> {
    let records: Vec<Record> = writes
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 3,
            producer_id: pid,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: base + i as i64,
            sequence: base as i32 + i as i32,
            timestamp: 10,
            key: Some(Bytes::from(vec![b'k', *k])),
            value: Some(Bytes::from(v.as_bytes().to_vec())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::Snappy,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
    buf.to_vec()
}

fn marker_batch(pid: i64, offset: i64, commit: bool) -> Vec<u8> {
    use crate::protocol::control::{build_end_txn_marker, EndTxnMarker, TxnOutcome};
    use crate::protocol::producer::{ProducerEpoch, ProducerId};
    let outcome = if commit {
        TxnOutcome::Commit
    } else {
        TxnOutcome::Abort
    };
    let marker = EndTxnMarker {
        outcome,
        coordinator_epoch: 0,
    };
    let mut b = build_end_txn_marker(ProducerId(pid), ProducerEpoch(0), marker, 10).to_vec();
    crate::protocol::record_batch::patch_base_offset(&mut b, offset);
    b
}

/// One pass over a one-segment model log as the partition runs it: one tracker maps, a
/// fresh one filters, both knowing the aborted transactions. Returns the new log.
fn txn_pass(
    log: &[u8],
    aborted: &[crate::storage::txn_index::AbortedTxn],
    producer_last: &HashMap<i64, i64>,
    now_ms: i64,
) -> Vec<u8> {
    let mut map = OffsetMap::new(1 << 12);
    let mut txns = TxnTracker::new(aborted.to_vec());
    for item in BatchIter::new(log) {
        let (at, h) = item.unwrap();
        let batch = &log[at..at + h.total_len()];
        assert_eq!(
            map_batch(&mut map, batch, 0, 1 << 20, &mut txns).unwrap(),
            Mapped::Whole
        );
    }
    let lookup = |pid: i64| producer_last.get(&pid).copied();
    let ctx = FilterContext {
        map: &map,
        now_ms,
        delete_retention_ms: 1000,
        producer_last_offset: &lookup,
        producer_last_marker: &|_| None,
        decompressed_max: 1 << 20,
    };
    let mut out = Vec::new();
    let mut stats = FilterStats::default();
    filter_segment(
        log,
        &ctx,
        &mut TxnTracker::new(aborted.to_vec()),
        &mut stats,
        &mut out,
    )
    .unwrap();
    out
}

fn batch_headers(log: &[u8]) -> Vec<crate::protocol::record_batch::BatchHeader> {
    BatchIter::new(log).map(|i| i.unwrap().1).collect()
}

/// Proves Kafka's transactional cleaning over three passes: an aborted transaction's
/// records go whatever their keys and never supersede a committed record; committed data is
/// compacted like any other and keeps its producer fields and transactional bit; a marker
/// stays while a batch of its transaction is left, then gets a delete horizon, then goes.
#[test]
fn transactions_are_cleaned_as_kafka_does() {
    let mut log = Vec::new();
    // pid 1 commits k1,k6 then k1; pid 3 commits k2 (superseded by pid 4's k2); pid 2 aborts
    // k1,k3 (must not supersede pid 1's k1).
    log.extend(txn_batch(1, 0, &[(1, "c1"), (6, "c1")], true));
    log.extend(marker_batch(1, 2, true));
    log.extend(txn_batch(1, 3, &[(1, "c2")], true));
    log.extend(marker_batch(1, 4, true));
    log.extend(txn_batch(3, 5, &[(2, "x")], true));
    log.extend(marker_batch(3, 6, true));
    log.extend(txn_batch(4, 7, &[(2, "y")], false));
    log.extend(txn_batch(2, 8, &[(1, "a"), (3, "a")], true));
    log.extend(marker_batch(2, 10, false));
    log.extend(txn_batch(4, 11, &[(5, "z")], false));
    let aborted = [crate::storage::txn_index::AbortedTxn {
        producer_id: 2,
        first_offset: 8,
        last_offset: 10,
        last_stable_offset: 11,
    }];
    let producers: HashMap<i64, i64> = [(1, 3), (4, 11)].into();
    let bases =
        |log: &[u8]| -> Vec<i64> { batch_headers(log).iter().map(|h| h.base_offset).collect() };

    let first = txn_pass(&log, &aborted, &producers, 0);
    assert_eq!(bases(&first), vec![0, 2, 3, 4, 6, 7, 10, 11]);
    let records = read_all_records(&first);
    assert_eq!(
        records,
        vec![
            (1, b"k\x06".to_vec(), b"c1".to_vec()),
            (3, b"k\x01".to_vec(), b"c2".to_vec()),
            (7, b"k\x02".to_vec(), b"y".to_vec()),
            (11, b"k\x05".to_vec(), b"z".to_vec()),
        ]
    );
    let h0 = batch_headers(&first)[0];
    assert!(h0.is_transactional() && h0.producer_id == 1 && h0.records_count == 1);
    assert!(batch_headers(&first)
        .iter()
        .all(|h| h.delete_horizon_ms().is_none()));

    // Pass 2: markers without data left (pid 3's commit, pid 2's abort) get a horizon.
    let second = txn_pass(&first, &aborted, &producers, 100);
    assert_eq!(bases(&second), vec![0, 2, 3, 4, 6, 7, 10, 11]);
    let horizons: Vec<(i64, Option<i64>)> = batch_headers(&second)
        .iter()
        .map(|h| (h.base_offset, h.delete_horizon_ms()))
        .collect();
    assert_eq!(
        horizons,
        vec![
            (0, None),
            (2, None),
            (3, None),
            (4, None),
            (6, Some(1100)),
            (7, None),
            (10, Some(1100)),
            (11, None)
        ]
    );
    assert!(batch_headers(&second)[4].is_control());
    // Before the horizon nothing more goes; at it, the two markers do.
    assert_eq!(
        bases(&txn_pass(&second, &aborted, &producers, 1099)),
        bases(&second)
    );
    let third = txn_pass(&second, &aborted, &producers, 1100);
    assert_eq!(bases(&third), vec![0, 2, 3, 4, 7, 11]);
    assert_eq!(read_all_records(&third), records);
}

/// Proves an aborted batch that is its producer's last is kept empty (sequence and epoch
/// survive), and then its marker stays too, pass after pass.
#[test]
fn aborted_last_batch_of_a_producer_is_kept_empty() {
    let mut log = Vec::new();
    log.extend(txn_batch(2, 0, &[(1, "a"), (3, "a")], true));
    log.extend(marker_batch(2, 2, false));
    log.extend(txn_batch(4, 3, &[(5, "z")], false));
    let aborted = [crate::storage::txn_index::AbortedTxn {
        producer_id: 2,
        first_offset: 0,
        last_offset: 2,
        last_stable_offset: 3,
    }];
    let producers: HashMap<i64, i64> = [(2, 1), (4, 3)].into();
    for now in [0, 5000, 10_000] {
        log = txn_pass(&log, &aborted, &producers, now);
        let headers = batch_headers(&log);
        let shape: Vec<(i64, i64, i32)> = headers
            .iter()
            .map(|h| (h.base_offset, h.last_offset(), h.records_count))
            .collect();
        assert_eq!(shape, vec![(0, 1, 0), (2, 2, 1), (3, 3, 1)], "now {now}");
        assert!(headers[0].is_transactional() && headers[0].base_sequence == 0);
    }
}

/// Every data record of a log as (offset, key, value).
fn read_all_records(log: &[u8]) -> Vec<(i64, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for item in BatchIter::new(log) {
        let (at, h) = item.unwrap();
        if h.is_control() {
            continue;
        }
        let batch = &log[at..at + h.total_len()];
        let records = crate::protocol::record_batch::decompressed_records(batch, 1 << 20).unwrap();
        for r in crate::protocol::record_batch::parse_records(&records, h.records_count).unwrap() {
            out.push((
                h.base_offset + r.offset_delta,
                r.key.unwrap().to_vec(),
                r.value.unwrap().to_vec(),
            ));
        }
    }
    out
}
