//! Record batch v2 hot paths: what the produce path does to every incoming batch (full
//! validation including CRC-32C, then patching base offset and leader epoch in place), and
//! splitting a buffer of many batches as fetch and recovery do. Throughput is in bytes.
use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use strata::protocol::record_batch::{patch_base_offset, patch_leader_epoch, validate, BatchIter};

/// One uncompressed batch of `count` records, each with a `value_bytes` value.
fn batch(count: usize, value_bytes: usize) -> Vec<u8> {
    let value = Bytes::from(vec![0xa5; value_bytes]);
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 1,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(value.clone()),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).expect("encode batch");
    buf.to_vec()
}

fn validate_and_patch(c: &mut Criterion) {
    let mut group = c.benchmark_group("validate_and_patch");
    // 1 KiB records: 1, 16, 256 of them, and 1024 (a 1 MiB batch).
    for count in [1usize, 16, 256, 1024] {
        let mut buf = batch(count, 1024);
        group.throughput(Throughput::Bytes(buf.len() as u64));
        group.bench_with_input(BenchmarkId::new("records_1KiB", count), &count, |b, _| {
            let mut offset = 0i64;
            b.iter(|| {
                let header = validate(black_box(&buf)).expect("valid batch");
                patch_base_offset(&mut buf, offset);
                patch_leader_epoch(&mut buf, 3);
                offset += header.records_count as i64;
                black_box(header)
            })
        });
    }
    group.finish();
}

fn iterate(c: &mut Criterion) {
    // 1 MiB of small batches: 4 records of 64-byte values each (~450 bytes per batch).
    let one = batch(4, 64);
    let mut buf = Vec::with_capacity((1 << 20) + one.len());
    while buf.len() + one.len() <= 1 << 20 {
        buf.extend_from_slice(&one);
    }
    let batches = buf.len() / one.len();
    let mut group = c.benchmark_group("batch_iter");
    group.throughput(Throughput::Bytes(buf.len() as u64));
    group.bench_function(BenchmarkId::new("1MiB_of_small_batches", batches), |b| {
        b.iter(|| {
            let mut n = 0usize;
            for item in BatchIter::new(black_box(&buf)) {
                n += item.is_ok() as usize;
            }
            assert_eq!(n, batches);
            n
        })
    });
    group.finish();
}

criterion_group!(benches, validate_and_patch, iterate);
criterion_main!(benches);
