//! One entry point that fuzzes the cleaner and the segment reader together, shared by the
//! cargo-fuzz target `clean_segment` (in `fuzz/`) and the unit test below, so both run the
//! same code.
//!
//! The input describes a segment: batches in every codec, from several producers, whose
//! records have one of a few keys or none, values or tombstones, and timestamps. The segment
//! is built with kafka-protocol's encoder (an independent implementation of the format),
//! cleaned twice with the cleaner's pure parts as the shard's task runs them (map the keys
//! into a map the input may make tiny, so it fills; then filter), the second pass later than
//! the first so tombstones' delete horizons can pass. After each pass the cleaned segment is
//! read back as recovery and consumers read it, and checked against an oracle of what Kafka
//! promises: every batch's CRC valid; batches keep their base and last offsets; offsets
//! strictly increasing; above the mapped end nothing changes; below it, per key exactly its
//! last record (a tombstone until its horizon), keyless records gone; timestamps unchanged.
//! Then one byte of the cleaned segment, where the input says, is flipped: the reader must
//! not panic, and a flip inside a batch's CRC-covered bytes must be caught.
//!
//! A broken invariant panics: that is the finding a fuzzer reports.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, HashMap};

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::{filter_segment, map_batch, FilterContext, FilterStats, Mapped, OffsetMap, TxnTracker};
use crate::protocol::record_batch::{
    decompressed_records, parse_records, record_offsets_and_timestamps, validate, BatchIter,
};
use crate::storage::cleaner::offset_map::OFFSET_MAP_SLOT_BYTES;

/// Bound on one batch's decompressed records (the inputs are tiny).
const DECOMPRESSED_MAX: usize = 1 << 20;
/// Batches one input builds, at most.
const BATCHES_MAX: u8 = 12;
/// Records per batch, at most.
const RECORDS_PER_BATCH_MAX: u8 = 8;
/// Bytes of CRC, magic-excluded header fields: a flip at or past this offset within a batch
/// (the CRC itself, attributes and everything after) must fail its CRC check.
const CRC_POS: usize = 17;

/// Reads the input as a stream of choices; past its end every choice is 0.
struct Choices<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from(self.byte()) << 8 | u16::from(self.byte())
    }
}

/// One record of the model log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    offset: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    timestamp: i64,
}

/// Runs the whole check on one input (see the module docs). Panics on a broken invariant.
pub fn clean_and_read(data: &[u8]) {
    let mut input = Choices { data, pos: 0 };
    let (segment, producer_last) = build_segment(&mut input);
    let map_bytes = usize::from(input.byte() % 40) * OFFSET_MAP_SLOT_BYTES;
    let delete_retention_ms = i64::from(input.u16());
    let now_first = 10_000 + i64::from(input.u16());
    let now_second = now_first + i64::from(input.u16()) * 2;
    let flip_at = usize::from(input.u16());
    let flip_bits = input.byte() | 1;

    let lookup = |pid: i64| producer_last.get(&pid).copied();
    let mut map = OffsetMap::new(map_bytes);
    let mut log = segment;
    // The offset-gap bound only rises (`gaps.rs`): a later pass whose map fills earlier
    // leaves the earlier pass's gaps above its own end.
    let mut gaps_below = i64::MIN;
    for now_ms in [now_first, now_second] {
        let before = read_back(&log, i64::MAX);
        map.clear();
        for item in BatchIter::new(&log) {
            let (at, h) = item.expect("the segment parses");
            let batch = &log[at..at + h.total_len()];
            if map_batch(
                &mut map,
                batch,
                0,
                DECOMPRESSED_MAX,
                &mut TxnTracker::default(),
            )
            .expect("maps")
                == Mapped::Full
            {
                break;
            }
        }
        let latest = map.latest_offset();
        if latest < 0 {
            // Not even one batch fits the map: the shard's cleaner makes no pass either.
            break;
        }
        let horizons = batch_horizons(&log);
        let ctx = FilterContext {
            map: &map,
            now_ms,
            delete_retention_ms,
            producer_last_offset: &lookup,
            producer_last_marker: &|_| None,
            decompressed_max: DECOMPRESSED_MAX,
        };
        let mut stats = FilterStats::default();
        let mut out = Vec::new();
        let written = filter_segment(&log, &ctx, &mut TxnTracker::default(), &mut stats, &mut out)
            .expect("filters");
        let expected = oracle(&before, map.entries_max(), latest, now_ms, &horizons);
        // Offsets never change: every written batch is one of the input's, same range.
        let input_ranges: Vec<(i64, i64)> = BatchIter::new(&log)
            .map(|item| {
                let (_, h) = item.unwrap();
                (h.base_offset, h.last_offset())
            })
            .collect();
        for w in &written {
            assert!(
                input_ranges.contains(&(w.base_offset, w.last_offset)),
                "batch {}..={} was not in the input",
                w.base_offset,
                w.last_offset
            );
        }
        gaps_below = gaps_below.max(latest + 1);
        let after = read_back(&out, gaps_below);
        assert_eq!(
            after, expected,
            "cleaned at {now_ms} with the map ending at {latest}"
        );
        log = out;
    }
    check_flipped(&log, flip_at, flip_bits);
}

/// Builds the segment the input describes; returns it and each producer's last offset.
fn build_segment(input: &mut Choices<'_>) -> (Vec<u8>, HashMap<i64, i64>) {
    let batches = 1 + input.byte() % BATCHES_MAX;
    let mut segment = Vec::new();
    let mut producer_last = HashMap::new();
    let mut next = i64::from(input.byte());
    for _ in 0..batches {
        let compression = match input.byte() % 5 {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            _ => Compression::Zstd,
        };
        let producer_id = match input.byte() % 3 {
            0 => -1,
            n => i64::from(n),
        };
        let count = 1 + input.byte() % RECORDS_PER_BATCH_MAX;
        let records: Vec<Record> = (0..i64::from(count))
            .map(|i| {
                let flags = input.byte();
                // 23 keys, more than a small map holds; one record in 24 keyless; a
                // sixth of values tombstones.
                let key = match flags % 24 {
                    23 => None,
                    k => Some(Bytes::from(vec![b'k', k])),
                };
                let value = (!(flags / 24).is_multiple_of(6)).then(|| {
                    let len = input.byte() % 24;
                    Bytes::from((0..len).map(|_| input.byte()).collect::<Vec<u8>>())
                });
                Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: 1,
                    producer_id,
                    producer_epoch: if producer_id < 0 { -1 } else { 0 },
                    timestamp_type: TimestampType::Creation,
                    offset: next + i,
                    // offset - sequence constant, so the encoder keeps one batch.
                    sequence: if producer_id < 0 {
                        -1
                    } else {
                        (next + i) as i32
                    },
                    timestamp: 1_000 + i64::from(input.byte()) * 7,
                    key,
                    value,
                    headers: Default::default(),
                }
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encodes");
        next += i64::from(count);
        if producer_id >= 0 {
            producer_last.insert(producer_id, next - 1);
        }
        segment.extend_from_slice(&buf);
    }
    (segment, producer_last)
}

/// Every record of a segment, checking what a reader relies on: the segment is whole
/// batches, each with a valid CRC, offsets strictly increasing (gaps allowed only below
/// `gaps_below`, where the cleaner removed batches, as recovery allows), and our reader and
/// kafka-protocol's decoder agree on each record.
fn read_back(segment: &[u8], gaps_below: i64) -> Vec<Written> {
    let mut out: Vec<Written> = Vec::new();
    let mut expected_base: Option<i64> = None;
    let mut consumed = 0;
    for item in BatchIter::new(segment) {
        let (at, h) = item.expect("a written segment parses");
        let batch = &segment[at..at + h.total_len()];
        validate(batch).expect("CRC valid");
        if let Some(e) = expected_base {
            assert!(
                crate::storage::recovery::offset_follows(e, h.base_offset, gaps_below),
                "batch at {} where {e} was expected (gaps allowed up to {gaps_below})",
                h.base_offset
            );
        }
        expected_base = Some(h.last_offset() + 1);
        let times = record_offsets_and_timestamps(batch, DECOMPRESSED_MAX).expect("readable");
        let ours = parse_records(
            &decompressed_records(batch, DECOMPRESSED_MAX).expect("inflates"),
            h.records_count,
        )
        .expect("records parse")
        .len();
        let mut bytes = Bytes::copy_from_slice(batch);
        let decoded = RecordBatchDecoder::decode(&mut bytes).expect("the reference decodes");
        assert_eq!(decoded.records.len(), ours);
        assert_eq!(decoded.records.len(), times.len());
        for (r, (offset, timestamp)) in decoded.records.iter().zip(times) {
            assert_eq!(r.offset, offset);
            assert!(offset >= h.base_offset && offset <= h.last_offset());
            if let Some(last) = out.last() {
                assert!(offset > last.offset, "offsets must increase");
            }
            out.push(Written {
                offset,
                key: r.key.clone(),
                value: r.value.clone(),
                timestamp,
            });
        }
        consumed = at + h.total_len();
    }
    assert_eq!(
        consumed,
        segment.len(),
        "the segment ends with a whole batch"
    );
    out
}

/// Each record's batch delete horizon, by offset (tombstones expire by their batch's).
fn batch_horizons(segment: &[u8]) -> BTreeMap<i64, Option<i64>> {
    BatchIter::new(segment)
        .map(|item| {
            let (_, h) = item.unwrap();
            (h.base_offset, h.delete_horizon_ms())
        })
        .collect()
}

/// What a pass must leave of `before`, mapped up to `latest` at `now_ms`: past `latest`
/// everything; up to it, no keyless record and per key only its last record, a tombstone
/// only until its batch's horizon. "Last" is as far as the map saw: keys in log order until
/// a new key finds it full (`entries_max`); a record whose key the map saw later (even in
/// the batch where it filled, past `latest`) is superseded, since that later record stays.
fn oracle(
    before: &[Written],
    entries_max: usize,
    latest: i64,
    now_ms: i64,
    horizons: &BTreeMap<i64, Option<i64>>,
) -> Vec<Written> {
    let mut last_of_key: HashMap<&Bytes, i64> = HashMap::new();
    for w in before {
        if let Some(k) = &w.key {
            if !last_of_key.contains_key(k) && last_of_key.len() >= entries_max {
                break;
            }
            last_of_key.insert(k, w.offset);
        }
    }
    before
        .iter()
        .filter(|w| {
            if w.offset > latest {
                return true;
            }
            let Some(k) = &w.key else { return false };
            let newest = last_of_key.get(k).is_none_or(|&o| w.offset >= o);
            // A dropped record always has a later one with its key.
            debug_assert!(newest || before.iter().any(|l| l.offset > w.offset && l.key == w.key));
            if !newest {
                return false;
            }
            let horizon = horizons
                .range(..=w.offset)
                .next_back()
                .and_then(|(_, h)| *h);
            w.value.is_some() || horizon.is_none_or(|h| now_ms < h)
        })
        .cloned()
        .collect()
}

/// Flips bits of one byte of the segment: reading must not panic, and a flip within a
/// batch's CRC-covered bytes (or the CRC) must fail that batch's check.
fn check_flipped(segment: &[u8], flip_at: usize, flip_bits: u8) {
    if segment.is_empty() {
        return;
    }
    let at = flip_at % segment.len();
    let mut bad = segment.to_vec();
    bad[at] ^= flip_bits;
    // Which batch held the byte, and where inside it.
    let hit = BatchIter::new(segment)
        .map(|item| item.unwrap())
        .find(|(pos, h)| (*pos..pos + h.total_len()).contains(&at));
    for item in BatchIter::new(&bad) {
        let Ok((pos, h)) = item else { break };
        let batch = &bad[pos..pos + h.total_len()];
        if let Ok(h) = validate(batch) {
            // What a consumer or the cleaner then does with it.
            let _ = record_offsets_and_timestamps(batch, DECOMPRESSED_MAX);
            if let Ok(records) = decompressed_records(batch, DECOMPRESSED_MAX) {
                let _ = parse_records(&records, h.records_count);
            }
        }
    }
    if let Some((pos, h)) = hit {
        if at >= pos + CRC_POS {
            let batch = &bad[pos..pos + h.total_len()];
            assert!(
                validate(batch).is_err(),
                "a flip at byte {} of a batch passed",
                at - pos
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the fuzz entry point holds its invariants on seeded random inputs (the same
    /// code the cargo-fuzz target runs), so `cargo test` exercises it without nightly.
    #[test]
    fn random_inputs_hold_the_invariants() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..600usize {
            let input: Vec<u8> = (0..len % 300)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 24) as u8
                })
                .collect();
            clean_and_read(&input);
        }
    }
}
