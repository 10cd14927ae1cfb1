//! Partition tests on a real disk (O_DIRECT needs one: tempdirs are created under the
//! crate's `target/` directory, never tmpfs), each inside a glommio `LocalExecutor`.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::file_io::{IoFuture, SegmentFile};
use super::*;
use crate::clock::{Clock, SystemClock};
use crate::protocol::ids::{LeaderEpoch, Offset};
use crate::protocol::record_batch::{
    patch_base_offset, patch_leader_epoch, validate, BatchHeader, BatchIter, BATCH_HEADER_LEN,
};

/// A valid v2 batch: `records` records (payload is opaque filler; `validate` does not decode
/// records), CreateTime `max_ts`, the given producer fields, CRC-32C over bytes 21.. .
pub(crate) fn make_batch(
    records: i32,
    max_ts: i64,
    pid: i64,
    epoch: i16,
    seq: i32,
    payload: usize,
) -> BytesMut {
    let total = BATCH_HEADER_LEN + payload;
    let mut b = Vec::with_capacity(total);
    b.extend_from_slice(&0i64.to_be_bytes()); // baseOffset
    b.extend_from_slice(&((total - 12) as i32).to_be_bytes()); // batchLength
    b.extend_from_slice(&(-1i32).to_be_bytes()); // partitionLeaderEpoch
    b.push(2); // magic
    b.extend_from_slice(&0u32.to_be_bytes()); // crc placeholder
    b.extend_from_slice(&0i16.to_be_bytes()); // attributes
    b.extend_from_slice(&(records - 1).to_be_bytes()); // lastOffsetDelta
    b.extend_from_slice(&max_ts.to_be_bytes()); // baseTimestamp
    b.extend_from_slice(&max_ts.to_be_bytes()); // maxTimestamp
    b.extend_from_slice(&pid.to_be_bytes());
    b.extend_from_slice(&epoch.to_be_bytes());
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(&records.to_be_bytes());
    b.extend((0..payload).map(|i| (i * 31 + records as usize) as u8));
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    validate(&b).unwrap();
    BytesMut::from(&b[..])
}

fn plain(records: i32, ts: i64, payload: usize) -> BytesMut {
    make_batch(records, ts, -1, -1, -1, payload)
}

/// What the log must store for `batch` appended at `base`: the client's bytes with
/// baseOffset and partitionLeaderEpoch patched.
fn stored(batch: &BytesMut, base: i64) -> Bytes {
    let mut b = batch.clone();
    patch_base_offset(&mut b, base);
    patch_leader_epoch(&mut b, 0);
    b.freeze()
}

/// A timestamp lookup's answer as `(offset, timestamp)`.
async fn offset_at(p: &Partition, ts: i64) -> Option<(i64, i64)> {
    p.offset_for_timestamp(ts)
        .await
        .unwrap()
        .map(|found| (found.offset, found.timestamp))
}

pub(crate) fn test_dir() -> tempfile::TempDir {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("tmp");
    std::fs::create_dir_all(&root).unwrap();
    tempfile::tempdir_in(root).unwrap()
}

/// How many segment data files (`*.log`) `dir` holds.
fn count_segment_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count()
}

pub(crate) fn run<F, Fut>(f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        preallocate_bytes: 8192,
        tail_cache_bytes: 2048,
        ..LogConfig::default()
    }
}

fn log_file(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}

fn concat(chunks: &[Bytes]) -> Vec<u8> {
    chunks.iter().flat_map(|c| c.iter().copied()).collect()
}

/// Reads every offset in [start, end) one by one and compares with `model`.
async fn check_all(p: &Partition, model: &[(i64, Bytes)]) {
    let start = p.log_start_offset();
    for &(base, ref bytes) in model.iter() {
        let last = BatchHeader::parse(bytes).unwrap().last_offset();
        if last < start {
            continue;
        }
        for o in base.max(start)..=last {
            let r = p.read(o, 1).await.unwrap();
            assert_eq!(r.chunks.len(), 1, "offset {o}");
            assert_eq!(&r.chunks[0], bytes, "offset {o}");
        }
    }
}

/// Append, group-commit durability and reads (tail cache and disk) agree with what was
/// appended; offsets are contiguous; bounds are enforced.
#[test]
fn append_read_roundtrip() {
    run(|| async {
        let dir = test_dir();
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        let mut model = Vec::new();
        for i in 0..50 {
            let b = plain(1 + i % 3, 1000 + i as i64, 100 + (i as usize * 7) % 300);
            let out = p.append(b.clone(), 0).unwrap();
            assert_eq!(
                out.base_offset,
                model
                    .last()
                    .map(|(_, bytes): &(i64, Bytes)| BatchHeader::parse(bytes)
                        .unwrap()
                        .last_offset()
                        + 1)
                    .unwrap_or(0)
            );
            model.push((out.base_offset, stored(&b, out.base_offset)));
            if i % 10 == 9 {
                p.wait_durable(out.last_offset).await.unwrap();
                assert!(p.high_watermark() > out.last_offset);
            }
        }
        let leo = p.log_end_offset();
        p.wait_durable(leo - 1).await.unwrap();
        assert_eq!(p.high_watermark(), leo);
        // Timestamps are 1000 + i for batch i: lookups from the tail cache and the disk.
        let base_of = |i: usize| model[i].0;
        assert_eq!(offset_at(&p, 1010).await, Some((base_of(10), 1010)));
        assert_eq!(offset_at(&p, 1049).await, Some((base_of(49), 1049)));
        assert_eq!(offset_at(&p, 1050).await, None);
        assert_eq!(p.max_timestamp(), Some((1049, leo - 1)));
        check_all(&p, &model).await;
        // A big read returns whole batches in order, within max_bytes.
        let r = p.read(0, 1500).await.unwrap();
        let got = concat(&r.chunks);
        assert!(got.len() <= 1500 && !got.is_empty());
        let expected: Vec<u8> = model
            .iter()
            .flat_map(|(_, b)| b.iter().copied())
            .take(got.len())
            .collect();
        assert_eq!(got, expected);
        // KIP-74: max_bytes smaller than a batch still returns one whole batch.
        assert_eq!(p.read(0, 1).await.unwrap().chunks.len(), 1);
        assert!(p.read(leo, 100).await.unwrap().chunks.is_empty());
        assert!(matches!(
            p.read(leo + 1, 100).await,
            Err(Error::OffsetOutOfRange { .. })
        ));
        assert!(matches!(
            p.append(plain(1, 0, 2_000_000), 0),
            Err(AppendError::MessageTooLarge { .. })
        ));
        assert!(
            std::fs::read_dir(dir.path()).unwrap().count() > 3,
            "segments rolled"
        );
        p.close().await.unwrap();
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        assert_eq!(p.log_end_offset(), leo);
        check_all(&p, &model).await;
        assert_eq!(offset_at(&p, 1010).await, Some((base_of(10), 1010)));
        assert_eq!(offset_at(&p, 1049).await, Some((base_of(49), 1049)));
        assert_eq!(p.max_timestamp(), Some((1049, leo - 1)));
        p.close().await.unwrap();
    });
}

/// Appends under `config`, closes or "crashes" (drops without close after durability).
async fn fill(dir: &Path, config: LogConfig, n: i32) -> (Vec<(i64, Bytes)>, Rc<Partition>) {
    let p = Partition::open(dir.to_path_buf(), config).await.unwrap();
    let mut model = Vec::new();
    for i in 0..n {
        let b = plain(2, 5000 + i as i64, 150);
        let out = p.append(b.clone(), 0).unwrap();
        model.push((out.base_offset, stored(&b, out.base_offset)));
    }
    let leo = p.log_end_offset();
    p.wait_durable(leo - 1).await.unwrap();
    (model, p)
}

/// Recovery from a damaged tail, for each kind of damage: open succeeds, the log ends at
/// the last valid batch, everything before is served, new appends continue contiguously,
/// and after another restart the new data is there (stale bytes never come back).
#[test]
fn recovery_from_damaged_tail() {
    for damage in [
        "torn",
        "flipped",
        "garbage",
        "valid_batch_wrong_offset",
        "zeros",
    ] {
        run(move || async move {
            let dir = test_dir();
            let config = LogConfig {
                segment_bytes: 1 << 20,
                ..small_config()
            };
            let (mut model, p) = fill(dir.path(), config.clone(), 20).await;
            p.close().await.unwrap();
            let path = log_file(dir.path(), 0);
            let logical: usize = model.iter().map(|(_, b)| b.len()).sum();
            let mut bytes = std::fs::read(&path).unwrap();
            bytes.truncate(logical);
            let last_len = model.last().unwrap().1.len();
            let keep = match damage {
                "torn" => {
                    bytes.truncate(logical - last_len / 2);
                    model.len() - 1
                }
                "flipped" => {
                    bytes[logical - 10] ^= 0x40;
                    model.len() - 1
                }
                "garbage" => {
                    bytes.extend((0..777).map(|i| (i * 7) as u8));
                    model.len()
                }
                "valid_batch_wrong_offset" => {
                    let mut b = plain(1, 1, 100);
                    patch_base_offset(&mut b, 9999);
                    bytes.extend_from_slice(&b);
                    model.len()
                }
                _ => {
                    bytes.extend(std::iter::repeat_n(0u8, 5000));
                    model.len()
                }
            };
            std::fs::write(&path, &bytes).unwrap();
            model.truncate(keep);
            let expected_leo = BatchHeader::parse(&model.last().unwrap().1)
                .unwrap()
                .last_offset()
                + 1;

            let p = Partition::open(dir.path().to_path_buf(), config.clone())
                .await
                .unwrap();
            assert_eq!(p.log_end_offset(), expected_leo, "{damage}");
            assert_eq!(p.high_watermark(), expected_leo, "{damage}");
            check_all(&p, &model).await;
            for _ in 0..3 {
                let b = plain(3, 9000, 64);
                let out = p.append(b.clone(), 0).unwrap();
                assert_eq!(out.base_offset, p.log_end_offset() - 3);
                model.push((out.base_offset, stored(&b, out.base_offset)));
            }
            p.wait_durable(p.log_end_offset() - 1).await.unwrap();
            check_all(&p, &model).await;
            p.close().await.unwrap();

            let p = Partition::open(dir.path().to_path_buf(), config)
                .await
                .unwrap();
            assert_eq!(p.log_end_offset(), expected_leo + 9, "{damage}");
            check_all(&p, &model).await;
            // The file holds exactly the valid batches: nothing stale survives.
            let file = std::fs::read(&path).unwrap();
            let valid: usize = BatchIter::new(&file)
                .map_while(Result::ok)
                .map(|(_, h)| h.total_len())
                .sum();
            assert_eq!(
                valid,
                model.iter().map(|(_, b)| b.len()).sum::<usize>(),
                "{damage}"
            );
            p.close().await.unwrap();
        });
    }
}

/// Closed segments with a missing, corrupt or insane index are rebuilt by scanning; all
/// data is served and lookups by offset and timestamp work afterwards.
#[test]
fn recovery_rebuilds_bad_indexes() {
    run(|| async {
        let dir = test_dir();
        let (model, p) = fill(dir.path(), small_config(), 60).await;
        p.close().await.unwrap();
        let mut bases: Vec<i64> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                e.unwrap()
                    .file_name()
                    .to_str()
                    .and_then(super::segment::parse_segment_name)
            })
            .collect();
        bases.sort();
        assert!(bases.len() >= 4, "need several segments, got {bases:?}");
        let idx = |b: i64, ext: &str| dir.path().join(format!("{b:020}.{ext}"));
        std::fs::remove_file(idx(bases[0], "index")).unwrap();
        std::fs::write(idx(bases[1], "index"), [0xffu8; 13]).unwrap();
        std::fs::write(idx(bases[2], "index"), [0u8; 16]).unwrap(); // not increasing
        std::fs::remove_file(idx(bases[1], "timeindex")).unwrap();
        std::fs::remove_file(idx(*bases.last().unwrap(), "index")).unwrap();
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        assert_eq!(p.log_end_offset(), 120);
        check_all(&p, &model).await;
        assert_eq!(offset_at(&p, 5000 + 31).await, Some((62, 5031)));
        assert_eq!(offset_at(&p, 0).await, Some((0, 5000)));
        assert_eq!(offset_at(&p, 99_999).await, None);
        assert_eq!(p.max_timestamp(), Some((5059, 119)));
        p.close().await.unwrap();
        assert!(idx(bases[0], "index").exists(), "rebuilt index persisted");
    });
}

/// Idempotent retries are detected after restarts: after a clean close (snapshot at close),
/// and after a crash (snapshot from the last roll plus replay of the active segment).
#[test]
fn idempotent_duplicates_survive_restart() {
    for clean in [true, false] {
        run(move || async move {
            let dir = test_dir();
            let config = LogConfig {
                segment_bytes: 2048,
                ..small_config()
            };
            let p = Partition::open(dir.path().to_path_buf(), config.clone())
                .await
                .unwrap();
            let mut outs = Vec::new();
            for seq in 0..20 {
                let b = make_batch(2, 1, 42, 3, seq * 2, 200);
                outs.push(p.append(b, 0).unwrap());
            }
            p.wait_durable(p.log_end_offset() - 1).await.unwrap();
            if clean {
                p.close().await.unwrap();
            } else {
                p.crash().await;
            }
            // Without close: a simulated kill -9 once every batch was durable; the snapshot
            // from the last roll plus replay of the active segment must rebuild the state.
            let p2 = Partition::open(dir.path().to_path_buf(), config)
                .await
                .unwrap();
            assert_eq!(p2.log_end_offset(), 40);
            let dup = p2.append(make_batch(2, 1, 42, 3, 38, 200), 0).unwrap();
            assert!(dup.duplicate);
            assert_eq!(
                (dup.base_offset, dup.last_offset),
                (outs[19].base_offset, outs[19].last_offset)
            );
            let dup = p2.append(make_batch(2, 1, 42, 3, 32, 200), 0).unwrap();
            assert!(dup.duplicate && dup.base_offset == outs[16].base_offset);
            assert!(matches!(
                p2.append(make_batch(1, 1, 42, 3, 41, 200), 0),
                Err(AppendError::OutOfOrderSequence { .. })
            ));
            assert!(matches!(
                p2.append(make_batch(1, 1, 42, 2, 40, 200), 0),
                Err(AppendError::InvalidProducerEpoch { .. })
            ));
            let next = p2.append(make_batch(1, 1, 42, 3, 40, 200), 0).unwrap();
            assert_eq!((next.base_offset, next.duplicate), (40, false));
            p2.close().await.unwrap();
        });
    }
}

/// DeleteRecords and retention raise the log start (persisted across restart), delete
/// whole segments only, never the active one, and reject offsets past the high watermark.
#[test]
fn delete_records_and_retention() {
    run(|| async {
        let dir = test_dir();
        let config = LogConfig {
            retention_ms: -1,
            ..small_config()
        };
        let (model, p) = fill(dir.path(), config.clone(), 60).await;
        let count = || count_segment_files(dir.path());
        let before = count();
        assert!(matches!(
            p.delete_records(121).await,
            Err(Error::OffsetOutOfRange { .. })
        ));
        assert_eq!(p.delete_records(45).await.unwrap(), 45);
        assert_eq!(p.log_start_offset(), 45);
        assert!(count() < before);
        assert!(matches!(
            p.read(44, 10).await,
            Err(Error::OffsetOutOfRange { .. })
        ));
        check_all(&p, &model).await;
        p.close().await.unwrap();
        let p = Partition::open(dir.path().to_path_buf(), config.clone())
            .await
            .unwrap();
        assert_eq!(p.log_start_offset(), 45);
        check_all(&p, &model).await;
        // Segments hold 19 batches (4009 bytes); 38 and 76 are closed, 114 is active (633 bytes).
        p.set_config(LogConfig {
            retention_bytes: 4000,
            ..config.clone()
        });
        p.enforce_retention(0).await.unwrap();
        let start = p.log_start_offset();
        assert_eq!(
            start, 76,
            "the segment holding 45 goes; the next would leave < 4000 bytes"
        );
        check_all(&p, &model).await;
        // Retention by time deletes every closed segment but never the active one.
        p.set_config(LogConfig {
            retention_ms: 10,
            ..config
        });
        p.enforce_retention(1_000_000).await.unwrap();
        assert_eq!(count(), 1);
        check_all(&p, &model).await;
        assert!(p.log_start_offset() < 120);
        // DeleteTopics: the directory goes away.
        p.delete().await.unwrap();
        assert!(!dir.path().exists());
    });
}

/// Long polls wake on new data (notification, no sleep loop) and time out otherwise;
/// LogAppendTime rewrites the timestamp and keeps the CRC valid.
#[test]
fn wait_for_data_and_log_append_time() {
    run(|| async {
        let dir = test_dir();
        let config = LogConfig {
            message_timestamp_type: TimestampType::LogAppendTime,
            ..small_config()
        };
        let p = Partition::open(dir.path().to_path_buf(), config)
            .await
            .unwrap();
        let start = std::time::Instant::now();
        p.wait_for_data(0, Duration::from_millis(50)).await;
        assert!(start.elapsed() >= Duration::from_millis(45));
        let p2 = Rc::clone(&p);
        let waiter = glommio::spawn_local(async move {
            p2.wait_for_data(0, Duration::from_secs(30)).await;
            p2.high_watermark()
        });
        glommio::timer::sleep(Duration::from_millis(5)).await;
        let out = p.append(plain(1, 7, 10), 123_456).unwrap();
        assert_eq!(out.log_append_time_ms, 123_456);
        assert_eq!(waiter.await, 1);
        let r = p.read(0, 100).await.unwrap();
        let h = validate(&r.chunks[0]).unwrap();
        assert!(h.is_log_append_time() && h.max_timestamp == 123_456);
        assert_eq!(p.max_timestamp(), Some((123_456, 0)));
        p.close().await.unwrap();
    });
}

#[derive(Default)]
struct FaultyFs {
    fail_sync: Rc<Cell<bool>>,
    syncs: Rc<Cell<u32>>,
    opens: Cell<u32>,
    /// `truncate` fails (nothing is cut).
    fail_truncate: Rc<Cell<bool>>,
    /// After the next successful `truncate`, every fdatasync fails (a crash right after
    /// the cut reached the page cache).
    fail_sync_after_truncate: Rc<Cell<bool>>,
    /// `open_segment_durable_writes` opens O_DSYNC, as the real file system does.
    durable_writes: bool,
}
struct FaultyFile {
    inner: Rc<dyn SegmentFile>,
    fail_sync: Rc<Cell<bool>>,
    syncs: Rc<Cell<u32>>,
    fail_truncate: Rc<Cell<bool>>,
    fail_sync_after_truncate: Rc<Cell<bool>>,
}
static DMA: DmaFileSystem = DmaFileSystem;

impl FileSystem for FaultyFs {
    fn open_segment<'a>(
        &'a self,
        path: &'a Path,
        create: bool,
    ) -> IoFuture<'a, Rc<dyn SegmentFile>> {
        self.open_faulty(path, create, false)
    }
    fn open_segment_durable_writes<'a>(
        &'a self,
        path: &'a Path,
        create: bool,
    ) -> IoFuture<'a, Rc<dyn SegmentFile>> {
        self.open_faulty(path, create, self.durable_writes)
    }
}
impl FaultyFs {
    fn open_faulty<'a>(
        &'a self,
        path: &'a Path,
        create: bool,
        dsync: bool,
    ) -> IoFuture<'a, Rc<dyn SegmentFile>> {
        self.opens.set(self.opens.get() + 1);
        Box::pin(async move {
            let inner = if dsync {
                DMA.open_segment_durable_writes(path, create).await?
            } else {
                DMA.open_segment(path, create).await?
            };
            let f: Rc<dyn SegmentFile> = Rc::new(FaultyFile {
                inner,
                fail_sync: Rc::clone(&self.fail_sync),
                syncs: Rc::clone(&self.syncs),
                fail_truncate: Rc::clone(&self.fail_truncate),
                fail_sync_after_truncate: Rc::clone(&self.fail_sync_after_truncate),
            });
            Ok(f)
        })
    }
}
impl SegmentFile for FaultyFile {
    fn alignment(&self) -> u64 {
        self.inner.alignment()
    }
    fn write_at<'a>(&'a self, chunks: &'a [Bytes], pos: u64) -> IoFuture<'a, ()> {
        self.inner.write_at(chunks, pos)
    }
    fn read_at(&self, pos: u64, len: usize) -> IoFuture<'_, Bytes> {
        self.inner.read_at(pos, len)
    }
    fn sync_data(&self) -> IoFuture<'_, ()> {
        self.syncs.set(self.syncs.get() + 1);
        if self.fail_sync.get() {
            return Box::pin(async { Err(std::io::Error::other("injected fdatasync failure")) });
        }
        self.inner.sync_data()
    }
    fn writes_durable(&self) -> bool {
        self.inner.writes_durable()
    }
    fn truncate(&self, len: u64) -> IoFuture<'_, ()> {
        if self.fail_truncate.get() {
            return Box::pin(async { Err(std::io::Error::other("injected truncate failure")) });
        }
        if self.fail_sync_after_truncate.get() {
            self.fail_sync.set(true);
        }
        self.inner.truncate(len)
    }
    fn pre_allocate(&self, len: u64) -> IoFuture<'_, ()> {
        self.inner.pre_allocate(len)
    }
    fn size(&self) -> IoFuture<'_, u64> {
        self.inner.size()
    }
}

/// A failed fdatasync is reported to every waiter, is never acknowledged, and poisons the
/// partition (no more appends); what was acknowledged before survives a reopen.
#[test]
fn failed_fsync_poisons_partition() {
    run(|| async {
        let dir = test_dir();
        let fail_sync = Rc::new(Cell::new(false));
        let fs = Rc::new(FaultyFs {
            fail_sync: Rc::clone(&fail_sync),
            ..FaultyFs::default()
        });
        let p = Partition::open_with(dir.path().to_path_buf(), small_config(), fs)
            .await
            .unwrap();
        let ok = p.append(plain(1, 1, 10), 0).unwrap();
        p.wait_durable(ok.last_offset).await.unwrap();
        fail_sync.set(true);
        let bad = p.append(plain(1, 1, 10), 0).unwrap();
        assert!(matches!(
            p.wait_durable(bad.last_offset).await,
            Err(Error::Io { .. })
        ));
        assert_eq!(p.high_watermark(), 1);
        assert!(matches!(
            p.append(plain(1, 1, 10), 0),
            Err(AppendError::Storage(Error::Io { .. }))
        ));
        assert!(p.close().await.is_err());
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        assert!(p.log_end_offset() >= 1);
        assert_eq!(p.read(0, 1).await.unwrap().chunks.len(), 1);
        p.close().await.unwrap();
    });
}

/// Group commit: 200 producers appending concurrently and each waiting for durability are
/// covered by a handful of fdatasyncs, not one per batch; every waiter is released.
#[test]
fn group_commit_shares_fsyncs() {
    run(|| async {
        let dir = test_dir();
        let fs = Rc::new(FaultyFs::default());
        let syncs = Rc::clone(&fs.syncs);
        let config = LogConfig {
            segment_bytes: 1 << 20,
            ..small_config()
        };
        let p = Partition::open_with(dir.path().to_path_buf(), config, fs)
            .await
            .unwrap();
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let p = Rc::clone(&p);
                glommio::spawn_local(async move {
                    let out = p.append(plain(1, i, 50), 0).unwrap();
                    p.wait_durable(out.last_offset).await.unwrap();
                    assert!(p.high_watermark() > out.last_offset);
                })
            })
            .collect();
        for t in tasks {
            t.await;
        }
        assert_eq!(p.high_watermark(), 200);
        assert!(
            syncs.get() <= 10,
            "{} fdatasyncs for 200 batches",
            syncs.get()
        );
        p.close().await.unwrap();
    });
}

/// Under the Sync policy the active segment is written O_DSYNC: every acknowledged batch is
/// durable without a separate fdatasync (the writes are the data sync), a segment seal still
/// syncs its truncation, and everything acknowledged is there after a reopen.
#[test]
fn durable_writes_replace_fdatasync() {
    run(|| async {
        let dir = test_dir();
        let fs = Rc::new(FaultyFs {
            durable_writes: true,
            ..FaultyFs::default()
        });
        let syncs = Rc::clone(&fs.syncs);
        let config = LogConfig {
            segment_bytes: 64 << 10,
            ..small_config()
        };
        assert_eq!(config.flush_policy, FlushPolicy::Sync);
        let p = Partition::open_with(dir.path().to_path_buf(), config.clone(), fs)
            .await
            .unwrap();
        for i in 0..50 {
            let out = p.append(plain(1, i, 50), 0).unwrap();
            p.wait_durable(out.last_offset).await.unwrap();
            assert_eq!(p.high_watermark(), out.last_offset + 1);
        }
        assert_eq!(syncs.get(), 0, "fdatasyncs beside O_DSYNC writes");
        // Larger batches roll the segment; sealing it syncs its truncation explicitly.
        let log_files = || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .filter(|e| e.as_ref().unwrap().path().extension() == Some("log".as_ref()))
                .count()
        };
        while log_files() < 2 {
            let out = p.append(plain(1, 99, 8 << 10), 0).unwrap();
            p.wait_durable(out.last_offset).await.unwrap();
        }
        let end = p.log_end_offset();
        assert!(syncs.get() >= 1, "a sealed segment's truncation is synced");
        p.close().await.unwrap();
        let p = Partition::open(dir.path().to_path_buf(), config)
            .await
            .unwrap();
        assert_eq!(p.log_end_offset(), end);
        let mut next = 0;
        while next < p.log_end_offset() {
            let r = p.read(next, 1 << 20).await.unwrap();
            let h = validate(&r.chunks[0]).unwrap();
            next = h.base_offset + h.records_count as i64;
        }
        assert_eq!(next, end);
        p.close().await.unwrap();
    });
}

/// IntervalMs and Never acknowledge at once (HW = log end) and still persist on close.
#[test]
fn relaxed_flush_policies() {
    for policy in [FlushPolicy::IntervalMs(20), FlushPolicy::Never] {
        run(move || async move {
            let dir = test_dir();
            let config = LogConfig {
                flush_policy: policy,
                ..small_config()
            };
            let (model, p) = fill(dir.path(), config.clone(), 30).await;
            assert_eq!(p.high_watermark(), 60);
            check_all(&p, &model).await;
            p.close().await.unwrap();
            let p = Partition::open(dir.path().to_path_buf(), config)
                .await
                .unwrap();
            assert_eq!(p.log_end_offset(), 60);
            check_all(&p, &model).await;
            p.close().await.unwrap();
        });
    }
}

mod model {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Append {
            records: i32,
            payload: usize,
        },
        DeleteRecords {
            fraction: u8,
        },
        Retention {
            bytes: i64,
        },
        Reopen {
            crash: bool,
        },
        /// Crash with batches maybe not yet durable.
        CrashNow,
        /// Follower truncation somewhere in [log start, log end].
        Truncate {
            fraction: u8,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (1i32..5, 0usize..700).prop_map(|(records, payload)| Op::Append { records, payload }),
            1 => any::<u8>().prop_map(|fraction| Op::DeleteRecords { fraction }),
            1 => (1000i64..6000).prop_map(|bytes| Op::Retention { bytes }),
            1 => any::<bool>().prop_map(|crash| Op::Reopen { crash }),
            1 => Just(Op::CrashNow),
            1 => any::<u8>().prop_map(|fraction| Op::Truncate { fraction }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        /// Random appends, rolls (small segments), DeleteRecords, retention, truncations and
        /// restarts (clean or abandoned after durability) against an in-memory model: every
        /// offset reads back the exact batch, and log start / log end match the model.
        #[test]
        fn log_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
            run(move || async move {
                let dir = test_dir();
                let config = LogConfig { retention_ms: -1, ..small_config() };
                let mut p = Partition::open(dir.path().to_path_buf(), config.clone()).await.unwrap();
                let mut model: Vec<(i64, Bytes)> = Vec::new();
                let mut next = 0i64;
                let mut start = 0i64;
                for (i, op) in ops.into_iter().enumerate() {
                    match op {
                        Op::CrashNow => {} // handled below, once the op is matched
                        Op::Append { records, payload } => {
                            let b = plain(records, i as i64, payload);
                            let out = p.append(b.clone(), 0).unwrap();
                            assert_eq!(out.base_offset, next);
                            next = out.last_offset + 1;
                            model.push((out.base_offset, stored(&b, out.base_offset)));
                        }
                        Op::DeleteRecords { fraction } => {
                            p.wait_durable(next - 1).await.unwrap();
                            let target = start + (next - start) * fraction as i64 / 255;
                            assert_eq!(p.delete_records(target).await.unwrap(), target.max(start));
                            start = target.max(start);
                        }
                        Op::Retention { bytes } => {
                            p.wait_durable(next - 1).await.unwrap();
                            p.set_config(LogConfig { retention_bytes: bytes, ..config.clone() });
                            p.enforce_retention(0).await.unwrap();
                            let new_start = p.log_start_offset();
                            assert!(new_start >= start);
                            assert!(new_start == start || model.iter().any(|(b, _)| *b == new_start));
                            start = new_start;
                            p.set_config(config.clone());
                        }
                        Op::Truncate { fraction } => {
                            let target = start + (next - start) * fraction as i64 / 255;
                            // Whole batches: the one holding the target goes entirely.
                            let expected = model
                                .iter()
                                .find(|(_, b)| BatchHeader::parse(b).unwrap().last_offset() >= target)
                                .map(|(base, _)| *base)
                                .filter(|_| target < next)
                                .unwrap_or(next);
                            assert_eq!(p.truncate_to(target).await.unwrap(), expected);
                            model.retain(|(b, _)| *b < expected);
                            next = expected;
                            start = start.min(expected);
                        }
                        Op::Reopen { crash } => {
                            p.wait_durable(next - 1).await.unwrap();
                            if crash {
                                p.crash().await;
                            } else {
                                p.close().await.unwrap();
                            }
                            p = Partition::open(dir.path().to_path_buf(), config.clone()).await.unwrap();
                        }
                    }
                    if let Op::CrashNow = op {
                        let durable = p.durable_offset();
                        p.crash().await;
                        p = Partition::open(dir.path().to_path_buf(), config.clone())
                            .await
                            .unwrap();
                        // Everything durable survives; the rest may be lost, whole batches only.
                        let leo = p.log_end_offset();
                        assert!(durable <= leo && leo <= next, "{durable} <= {leo} <= {next}");
                        assert!(leo == next || model.iter().any(|(b, _)| *b == leo));
                        model.retain(|(b, _)| *b < leo);
                        next = leo;
                    }
                    assert_eq!(p.log_end_offset(), next);
                    assert_eq!(p.log_start_offset(), start);
                }
                p.wait_durable(next - 1).await.unwrap();
                check_all(&p, &model).await;
                p.close().await.unwrap();
            });
        }
    }
}

/// Rolling by segment.index.bytes (index full); a batch bigger than segment.bytes is refused
/// with RECORD_LIST_TOO_LARGE (Kafka's RecordBatchTooLargeException) and changes nothing;
/// every offset still reads back after a restart.
#[test]
fn roll_by_index_full_and_oversized_batch_refused() {
    run(|| async {
        let dir = test_dir();
        let config = LogConfig {
            segment_bytes: 1 << 20,
            index_interval_bytes: 1,
            segment_index_bytes: 24, // 3 offset entries, 2 time entries
            ..small_config()
        };
        let p = Partition::open(dir.path().to_path_buf(), config.clone())
            .await
            .unwrap();
        let mut model = Vec::new();
        for i in 0..10 {
            let b = plain(1, i, 2000 + i as usize * 100);
            let out = p.append(b.clone(), 0).unwrap();
            model.push((out.base_offset, stored(&b, out.base_offset)));
        }
        p.set_config(LogConfig {
            segment_bytes: 1000,
            ..config.clone()
        });
        let end = p.log_end_offset();
        let refused = p.append(plain(1, 99, 5000), 0);
        assert!(
            matches!(
                refused,
                Err(AppendError::RecordListTooLarge { max: 1000, .. })
            ),
            "{refused:?}"
        );
        assert_eq!(
            refused.map_err(|e| e.error_code()).err(),
            Some(crate::protocol::error::ErrorCode::RecordListTooLarge)
        );
        assert_eq!(p.log_end_offset(), end, "a refused batch appends nothing");
        let b = plain(1, 99, 500);
        let out = p.append(b.clone(), 0).unwrap();
        model.push((out.base_offset, stored(&b, out.base_offset)));
        p.wait_durable(out.last_offset).await.unwrap();
        let logs = || count_segment_files(dir.path());
        assert!(logs() >= 5, "index-full rolls, got {}", logs());
        check_all(&p, &model).await;
        p.close().await.unwrap();
        let p = Partition::open(dir.path().to_path_buf(), config)
            .await
            .unwrap();
        check_all(&p, &model).await;
        p.close().await.unwrap();
    });
}

/// A large active segment is checkpointed (indexes + producer snapshot) after
/// ACTIVE_CHECKPOINT_BYTES, so a crash resumes from the checkpoint; data and idempotent
/// duplicate detection both survive.
#[test]
fn active_segment_checkpoint_survives_crash() {
    run(|| async {
        let dir = test_dir();
        let config = LogConfig {
            index_interval_bytes: 4096,
            ..LogConfig::default()
        };
        let p = Partition::open(dir.path().to_path_buf(), config.clone())
            .await
            .unwrap();
        let mut model = Vec::new();
        let batch_bytes = 1_000_000;
        let n = (ACTIVE_CHECKPOINT_BYTES as usize / batch_bytes + 2) as i32;
        for seq in 0..n {
            let b = make_batch(1, seq as i64, 7, 0, seq, batch_bytes);
            let out = p.append(b.clone(), 0).unwrap();
            model.push((out.base_offset, stored(&b, out.base_offset)));
            // One fsync per batch, so a checkpoint lands mid-segment.
            p.wait_durable(out.last_offset).await.unwrap();
        }
        // The checkpoint is written beside the flusher's passes, not in them.
        p.wait_checkpoint_idle().await;
        assert!(dir.path().join(format!("{:020}.index", 0)).exists());
        let snap = super::recovery::read_producer_snapshot(dir.path())
            .await
            .unwrap()
            .unwrap();
        assert!(snap.next_offset > 0 && snap.next_offset < n as i64);
        p.crash().await;
        let p = Partition::open(dir.path().to_path_buf(), config)
            .await
            .unwrap();
        assert_eq!(p.log_end_offset(), n as i64);
        check_all(&p, &model).await;
        let dup = p
            .append(make_batch(1, 0, 7, 0, n - 1, batch_bytes), 0)
            .unwrap();
        assert!(dup.duplicate && dup.base_offset == n as i64 - 1);
        p.close().await.unwrap();
    });
}

/// A segment sealed while its active-segment checkpoint may still be being written ends
/// with the index of the whole segment: sealing waits for the checkpoint, which writes the
/// same file names, so the older checkpoint never lands over the sealed segment's indexes.
#[test]
fn sealing_waits_for_active_checkpoint() {
    run(|| async {
        let dir = test_dir();
        let batch_bytes = 1_000_000;
        let config = LogConfig {
            index_interval_bytes: 4096,
            // Rolls four batches after the checkpoint's threshold.
            segment_bytes: (ACTIVE_CHECKPOINT_BYTES as usize + 4 * batch_bytes) as u64,
            ..LogConfig::default()
        };
        let p = Partition::open(dir.path().to_path_buf(), config.clone())
            .await
            .unwrap();
        let mut model = Vec::new();
        let until_checkpoint = (ACTIVE_CHECKPOINT_BYTES as usize / batch_bytes + 1) as i32;
        let mut last = 0;
        for seq in 0..until_checkpoint + 6 {
            let b = make_batch(1, seq as i64, 7, 0, seq, batch_bytes);
            let out = p.append(b.clone(), 0).unwrap();
            model.push((out.base_offset, stored(&b, out.base_offset)));
            last = out.last_offset;
            // Durable one by one up to the pass that starts the checkpoint; the rest (and
            // the roll) are appended while it may still be writing.
            if seq < until_checkpoint {
                p.wait_durable(last).await.unwrap();
            }
        }
        p.wait_durable(last).await.unwrap();
        p.close().await.unwrap();
        assert!(count_segment_files(dir.path()) >= 2, "the log rolled");
        let bytes = std::fs::read(dir.path().join(format!("{:020}.index", 0))).unwrap();
        let (last_relative, _) = super::index::OffsetIndex::decode(&bytes, u64::MAX, u64::MAX)
            .unwrap()
            .last()
            .unwrap();
        assert!(
            last_relative as i32 > until_checkpoint,
            "sealed index ends at {last_relative}, the checkpoint's point"
        );
        let p = Partition::open(dir.path().to_path_buf(), config)
            .await
            .unwrap();
        check_all(&p, &model).await;
        p.close().await.unwrap();
    });
}

/// Startup is O(active segment): reopening a log of many segments opens only the active
/// segment's file; a closed one is opened (and its index loaded) on first read.
#[test]
fn closed_segments_open_lazily() {
    run(|| async {
        let dir = test_dir();
        let (model, p) = fill(dir.path(), small_config(), 60).await;
        p.close().await.unwrap();
        let fs = Rc::new(FaultyFs::default());
        let p = Partition::open_with(
            dir.path().to_path_buf(),
            small_config(),
            Rc::clone(&fs) as Rc<dyn FileSystem>,
        )
        .await
        .unwrap();
        assert_eq!(fs.opens.get(), 1);
        assert_eq!(p.max_timestamp(), Some((5059, 119)));
        let r = p.read(0, 1).await.unwrap();
        assert_eq!(r.chunks[0], model[0].1);
        assert_eq!(fs.opens.get(), 2);
        p.read(1, 1).await.unwrap();
        assert_eq!(fs.opens.get(), 2);
        p.close().await.unwrap();
    });
}

// ---- replication: epochs, follower append, truncation, high watermark ----

/// Every batch in `[from, upper)`, read in as many bounded reads as it takes.
pub(crate) async fn read_all(p: &Partition, from: i64, upper: i64) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let r = p.read_bounded(offset, 1 << 20, upper).await.unwrap();
        let Some(last) = r.chunks.last() else {
            return out;
        };
        offset = BatchHeader::parse(last).unwrap().last_offset() + 1;
        out.extend(r.chunks);
    }
}

pub(crate) fn headers(chunks: &[Bytes]) -> Vec<BatchHeader> {
    chunks
        .iter()
        .map(|c| BatchHeader::parse(c).unwrap())
        .collect()
}

fn joined(chunks: &[Bytes]) -> Bytes {
    Bytes::from(concat(chunks))
}

fn entries(pairs: &[(i32, i64)]) -> Vec<EpochEntry> {
    pairs
        .iter()
        .map(|&(epoch, start_offset)| EpochEntry {
            epoch: LeaderEpoch(epoch),
            start_offset: Offset(start_offset),
        })
        .collect()
}

/// A leader stamps its epoch into each batch and records epoch starts; a follower fed the
/// leader's bytes stores them unchanged (same offsets, epochs, bytes, epoch cache, producer
/// state: a retry sent to it once it leads is a duplicate), ignores a trailing partial
/// batch, and rejects gaps, overlaps and corrupt batches without appending anything.
#[test]
fn follower_append_keeps_offsets_and_epochs_and_rejects_gaps() {
    run(|| async {
        let (ldir, fdir) = (test_dir(), test_dir());
        let leader = Partition::open(ldir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        leader.set_leader_epoch(3).unwrap();
        for seq in 0..6 {
            leader
                .append(make_batch(2, 100 + seq as i64, 42, 0, seq * 2, 120), 0)
                .unwrap();
        }
        leader.set_leader_epoch(5).unwrap();
        for seq in 6..12 {
            leader
                .append(make_batch(2, 100 + seq as i64, 42, 0, seq * 2, 120), 0)
                .unwrap();
        }
        let leo = leader.log_end_offset();
        assert_eq!(leo, 24);
        leader.wait_durable(leo - 1).await.unwrap();
        let all = read_all(&leader, 0, leo).await;
        let epochs: Vec<i32> = headers(&all)
            .iter()
            .map(|h| h.partition_leader_epoch)
            .collect();
        assert_eq!(epochs, [3, 3, 3, 3, 3, 3, 5, 5, 5, 5, 5, 5]);
        assert_eq!(leader.epoch_cache().entries(), entries(&[(3, 0), (5, 12)]));
        assert_eq!(leader.end_offset_for_epoch(3), (3, 12));
        assert_eq!(leader.end_offset_for_epoch(4), (3, 12));
        assert_eq!(leader.end_offset_for_epoch(5), (5, 24));

        let follower = Partition::open_with_mode(
            fdir.path().to_path_buf(),
            small_config(),
            Rc::new(DmaFileSystem),
            HwMode::Replicated,
        )
        .await
        .unwrap();
        // A gap: the first batch must start at the follower's log end (0).
        assert_eq!(
            follower.append_replica(joined(&all[2..4]), 5, SystemClock.wall_ms()),
            Err(ReplicaAppendError::OffsetMismatch {
                expected: 0,
                got: 4
            })
        );
        // A gap between batches of one response: nothing at all is appended.
        let mut gappy = all[0..2].to_vec();
        gappy.push(all[3].clone());
        assert_eq!(
            follower.append_replica(joined(&gappy), 5, SystemClock.wall_ms()),
            Err(ReplicaAppendError::OffsetMismatch {
                expected: 4,
                got: 6
            })
        );
        let mut corrupt = BytesMut::from(&all[0][..]);
        let n = corrupt.len();
        corrupt[n - 1] ^= 1;
        assert!(matches!(
            follower.append_replica(corrupt.freeze(), 5, SystemClock.wall_ms()),
            Err(ReplicaAppendError::CorruptMessage(_))
        ));
        assert_eq!(follower.log_end_offset(), 0);
        // Seven whole batches plus half of the eighth, as a size-limited Fetch returns.
        let mut first = concat(&all[..7]);
        first.extend_from_slice(&all[7][..all[7].len() / 2]);
        let out = follower
            .append_replica(Bytes::from(first), 5, SystemClock.wall_ms())
            .unwrap();
        assert_eq!(
            out,
            ReplicaAppendOutcome {
                first_offset: 0,
                last_offset: 13,
                batches: 7,
                log_end_offset: 14
            }
        );
        // Overlap (already have these offsets) is a mismatch too.
        assert!(matches!(
            follower.append_replica(joined(&all[6..8]), 5, SystemClock.wall_ms()),
            Err(ReplicaAppendError::OffsetMismatch {
                expected: 14,
                got: 12
            })
        ));
        let out = follower
            .append_replica(joined(&all[7..]), 5, SystemClock.wall_ms())
            .unwrap();
        assert_eq!((out.first_offset, out.log_end_offset), (14, 24));
        // Only a partial batch: nothing appended, not an error.
        let partial = follower
            .append_replica(all[0].slice(..30), 5, SystemClock.wall_ms())
            .unwrap();
        assert_eq!((partial.batches, partial.first_offset), (0, -1));
        follower.wait_durable(23).await.unwrap();
        assert_eq!(follower.durable_offset(), 24);
        // Replicated HW does not follow durability: nothing is visible to consumers yet.
        assert_eq!(follower.high_watermark(), 0);
        assert!(follower.read(0, 1 << 20).await.unwrap().chunks.is_empty());
        assert_eq!(read_all(&follower, 0, follower.log_end_offset()).await, all);
        assert_eq!(follower.epoch_cache(), leader.epoch_cache());
        assert_eq!(follower.latest_epoch(), Some(5));
        // Producer state came along: once leader, the follower dedups a retry.
        follower.set_leader_epoch(6).unwrap();
        let dup = follower
            .append(make_batch(2, 111, 42, 0, 22, 120), 0)
            .unwrap();
        assert!(dup.duplicate && dup.base_offset == 22);
        let next = follower
            .append(make_batch(2, 112, 42, 0, 24, 120), 0)
            .unwrap();
        assert_eq!((next.base_offset, next.duplicate), (24, false));
        assert_eq!(follower.end_offset_for_epoch(5), (5, 24));
        follower.close().await.unwrap();
        // Bytes and epochs survive a restart of the follower.
        let follower = Partition::open(fdir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        assert_eq!(read_all(&follower, 0, 24).await, all);
        assert_eq!(
            follower.epoch_cache().entries(),
            entries(&[(3, 0), (5, 12), (6, 24)])
        );
        follower.close().await.unwrap();
        leader.close().await.unwrap();
    });
}

/// truncate_to cuts whole batches (an offset inside a batch cuts that batch), deletes later
/// segments, lowers the HW, and appends continue from the new end; data below survives
/// reads, a clean restart, and a simulated kill -9 right after the truncation.
#[test]
fn truncate_then_append_again() {
    for crash in [false, true] {
        run(move || async move {
            let dir = test_dir();
            let (mut model, p) = fill(dir.path(), small_config(), 60).await;
            assert!(matches!(
                p.truncate_to(121).await,
                Err(Error::OffsetOutOfRange { .. })
            ));
            assert_eq!(p.truncate_to(120).await.unwrap(), 120, "log end: no-op");
            // Reads running alongside the truncation never return cut batches.
            let readers: Vec<_> = (0..4)
                .map(|i| {
                    let p = Rc::clone(&p);
                    glommio::spawn_local(async move { p.read(40 + i * 10, 1 << 20).await })
                })
                .collect();
            // Batches hold 2 records: offset 51 is inside the batch at 50.
            assert_eq!(p.truncate_to(51).await.unwrap(), 50);
            // The truncation takes the log before its first await, so every reader, spawned
            // before it but run after, waits for it and reads the truncated log.
            for reader in readers {
                if let Ok(r) = reader.await {
                    for chunk in &r.chunks {
                        assert!(BatchHeader::parse(chunk).unwrap().last_offset() < 50);
                    }
                }
            }
            assert_eq!(p.log_end_offset(), 50);
            assert_eq!(p.high_watermark(), 50);
            assert!(p.read(50, 100).await.unwrap().chunks.is_empty());
            assert!(matches!(
                p.read(51, 100).await,
                Err(Error::OffsetOutOfRange { .. })
            ));
            model.truncate(25);
            check_all(&p, &model).await;
            // Truncating exactly at a segment base (the segments hold 19 batches: 38).
            assert_eq!(p.truncate_to(38).await.unwrap(), 38);
            model.truncate(19);
            for i in 0..30 {
                let b = plain(3, 7000 + i, 90);
                let out = p.append(b.clone(), 0).unwrap();
                model.push((out.base_offset, stored(&b, out.base_offset)));
            }
            assert_eq!(p.log_end_offset(), 38 + 90);
            p.wait_durable(p.log_end_offset() - 1).await.unwrap();
            check_all(&p, &model).await;
            assert_eq!(p.truncate_to(38 + 45).await.unwrap(), 38 + 45);
            model.truncate(19 + 15);
            if crash {
                p.crash().await;
            } else {
                p.close().await.unwrap();
            }
            let p = Partition::open(dir.path().to_path_buf(), small_config())
                .await
                .unwrap();
            assert_eq!(p.log_end_offset(), 83);
            check_all(&p, &model).await;
            let b = plain(1, 1, 10);
            assert_eq!(p.append(b, 0).unwrap().base_offset, 83);
            p.close().await.unwrap();
        });
    }
}

/// Crash safety of truncation, with faults injected through the file layer: a failed cut
/// leaves the whole log (nothing was truncated yet); a crash once the cut reached the file
/// (every later fsync fails, later segments still on disk) comes back with the log ending
/// at the cut — recovery deletes the later segments itself. An interrupted full truncation
/// is finished by recovery. Truncated records never come back.
#[test]
fn truncate_and_reopen_never_resurrects() {
    run(|| async {
        let dir = test_dir();
        let (model, p) = fill(dir.path(), small_config(), 60).await;
        p.close().await.unwrap();
        let count_logs = || count_segment_files(dir.path());
        assert!(count_logs() >= 4);

        // 1. The cut itself fails: the partition is poisoned, the log is whole on reopen.
        let fs = Rc::new(FaultyFs::default());
        let p = Partition::open_with(dir.path().to_path_buf(), small_config(), fs.clone())
            .await
            .unwrap();
        fs.fail_truncate.set(true);
        assert!(p.truncate_to(41).await.is_err());
        assert!(p.append(plain(1, 1, 1), 0).is_err(), "poisoned");
        drop(p);
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        assert_eq!(p.log_end_offset(), 120);
        check_all(&p, &model).await;
        p.close().await.unwrap();

        // 2. Crash right after the cut: later segments are still on disk.
        let fs = Rc::new(FaultyFs::default());
        let p = Partition::open_with(dir.path().to_path_buf(), small_config(), fs.clone())
            .await
            .unwrap();
        fs.fail_sync_after_truncate.set(true);
        let before = count_logs();
        assert!(p.truncate_to(41).await.is_err());
        assert_eq!(
            count_logs(),
            before,
            "crashed before deleting later segments"
        );
        p.crash().await;
        drop(p);
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        assert_eq!(
            p.log_end_offset(),
            40,
            "the cut holds; nothing past it came back"
        );
        check_all(&p, &model[..20]).await;
        assert!(count_logs() <= 3);
        let out = p.append(plain(1, 1, 33), 0).unwrap();
        assert_eq!(out.base_offset, 40);
        p.wait_durable(40).await.unwrap();
        p.crash().await;
        drop(p);
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        assert_eq!(p.log_end_offset(), 41);
        assert_eq!(
            p.read(40, 1).await.unwrap().chunks[0],
            stored(&plain(1, 1, 33), 40)
        );
        p.close().await.unwrap();

        // 3. An interrupted full truncation (intent written, nothing else) is finished.
        super::state_file::write_offset_file(
            dir.path(),
            super::state_file::TRUNCATE_FULLY_INTENT_FILE,
            500,
        )
        .await
        .unwrap();
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        assert_eq!(
            (p.log_start_offset(), p.log_end_offset(), p.high_watermark()),
            (500, 500, 500)
        );
        assert_eq!(
            count_logs(),
            1,
            "the new active segment's file is created with the log, as at partition creation"
        );
        assert!(p.epoch_cache().entries().is_empty());
        assert_eq!(p.append(plain(1, 1, 5), 0).unwrap().base_offset, 500);
        // And the API itself.
        p.truncate_fully_and_start_at(900).await.unwrap();
        assert_eq!(
            (p.log_start_offset(), p.log_end_offset(), p.high_watermark()),
            (900, 900, 900)
        );
        assert_eq!(p.append(plain(2, 1, 5), 0).unwrap().base_offset, 900);
        p.wait_durable(901).await.unwrap();
        p.crash().await;
        drop(p);
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        assert_eq!((p.log_start_offset(), p.log_end_offset()), (900, 902));
        assert!(!dir
            .path()
            .join(super::state_file::TRUNCATE_FULLY_INTENT_FILE)
            .exists());
        p.close().await.unwrap();
    });
}

/// A follower never trusts the partitionLeaderEpoch of replicated batches (it sits outside
/// the CRC): a batch stamped with an epoch newer than the leader it was fetched from, or
/// older than the log's latest, is refused with a typed error and nothing is appended, so a
/// bad leader cannot poison the epoch cache and crash the shard when this replica later
/// leads.
#[test]
fn follower_refuses_batches_with_impossible_leader_epochs() {
    run(|| async {
        let dir = test_dir();
        let follower = Partition::open_with_mode(
            dir.path().to_path_buf(),
            small_config(),
            Rc::new(DmaFileSystem),
            HwMode::Replicated,
        )
        .await
        .unwrap();
        let stamped = |base: i64, epoch: i32| {
            let mut b = plain(2, 100, 40);
            patch_base_offset(&mut b, base);
            patch_leader_epoch(&mut b, epoch);
            b.freeze()
        };
        // Fetched from the leader of epoch 5: epoch 1_000_000 cannot be in its log.
        assert_eq!(
            follower.append_replica(stamped(0, 1_000_000), 5, SystemClock.wall_ms()),
            Err(ReplicaAppendError::BadLeaderEpoch {
                offset: 0,
                epoch: 1_000_000,
                leader_epoch: 5
            })
        );
        assert_eq!(
            (follower.log_end_offset(), follower.latest_epoch()),
            (0, None)
        );
        // Honest batches go in; leading later in a newer epoch works.
        follower
            .append_replica(stamped(0, 4), 5, SystemClock.wall_ms())
            .unwrap();
        follower
            .append_replica(stamped(2, 5), 5, SystemClock.wall_ms())
            .unwrap();
        assert_eq!(follower.latest_epoch(), Some(5));
        follower.set_leader_epoch(6).unwrap();
        // Asked to lead in an epoch older than the log holds: an error, not a panic.
        assert_eq!(
            follower.set_leader_epoch(3),
            Err(Error::EpochRegression {
                epoch: 3,
                latest: 5
            })
        );
        follower.close().await.unwrap();
    });
}

/// The leader-epoch cache is checkpointed in Kafka's text format, reloaded on open,
/// rebuilt from batch headers when the file is missing or corrupt, repaired when a crash
/// left it behind the log, and cut (and re-persisted) by truncation.
#[test]
fn epoch_cache_persisted_and_rebuilt() {
    run(|| async {
        let dir = test_dir();
        let path = dir.path().join("leader-epoch-checkpoint");
        let open = || Partition::open(dir.path().to_path_buf(), small_config());
        let p = open().await.unwrap();
        for (epoch, n) in [(1, 10), (4, 10), (7, 10)] {
            p.set_leader_epoch(epoch).unwrap();
            for i in 0..n {
                p.append(plain(2, i, 150), 0).unwrap();
            }
        }
        let expected = entries(&[(1, 0), (4, 20), (7, 40)]);
        assert_eq!(p.epoch_cache().entries(), expected);
        p.close().await.unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "0\n3\n1 0\n4 20\n7 40\n"
        );
        let p = open().await.unwrap();
        assert_eq!(p.epoch_cache().entries(), expected);
        assert_eq!(p.latest_epoch(), Some(7));
        p.close().await.unwrap();
        for damage in ["missing", "corrupt"] {
            if damage == "missing" {
                std::fs::remove_file(&path).unwrap();
            } else {
                std::fs::write(&path, "0\n3\n1 0\n4 x\n").unwrap();
            }
            let p = open().await.unwrap();
            assert_eq!(p.epoch_cache().entries(), expected, "{damage}");
            p.close().await.unwrap();
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                "0\n3\n1 0\n4 20\n7 40\n",
                "{damage}: rewritten"
            );
        }
        // A crash that left the checkpoint behind the log: recovery repairs it.
        let p = open().await.unwrap();
        p.set_leader_epoch(9).unwrap();
        let out = p.append(plain(2, 1, 150), 0).unwrap();
        p.wait_durable(out.last_offset).await.unwrap();
        p.crash().await;
        drop(p);
        std::fs::write(&path, "0\n3\n1 0\n4 20\n7 40\n").unwrap();
        let p = open().await.unwrap();
        assert_eq!(
            p.epoch_cache().entries(),
            entries(&[(1, 0), (4, 20), (7, 40), (9, 60)])
        );
        // Truncation drops epochs that start at or past the cut, on disk too.
        assert_eq!(p.truncate_to(30).await.unwrap(), 30);
        assert_eq!(p.epoch_cache().entries(), entries(&[(1, 0), (4, 20)]));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "0\n2\n1 0\n4 20\n");
        assert_eq!(p.end_offset_for_epoch(4), (4, 30));
        assert_eq!(p.end_offset_for_epoch(1), (1, 20));
        assert_eq!(
            p.end_offset_for_epoch(7),
            (-1, -1),
            "newer than any epoch left"
        );
        p.close().await.unwrap();
        let p = open().await.unwrap();
        assert_eq!(p.epoch_cache().entries(), entries(&[(1, 0), (4, 20)]));
        // A restart keeps stamping the latest epoch, never an older one.
        let out = p.append(plain(1, 1, 1), 0).unwrap();
        p.wait_durable(out.last_offset).await.unwrap();
        let r = p.read(out.base_offset, 1).await.unwrap();
        assert_eq!(
            BatchHeader::parse(&r.chunks[0])
                .unwrap()
                .partition_leader_epoch,
            4
        );
        p.close().await.unwrap();
    });
}

/// With a replication-driven HW, reads bounded by it return only whole batches wholly
/// below it (a straddling batch is not served), from the tail cache and from disk alike;
/// a long poll wakes when the HW moves; truncation lowers the HW; the HW checkpoint is
/// reloaded on open (min with the recovered log end).
#[test]
fn read_bounded_stops_at_hw_with_whole_batches() {
    run(|| async {
        let dir = test_dir();
        let config = LogConfig {
            tail_cache_bytes: 0,
            ..small_config()
        };
        let p = Partition::open_with_mode(
            dir.path().to_path_buf(),
            config.clone(),
            Rc::new(DmaFileSystem),
            HwMode::Replicated,
        )
        .await
        .unwrap();
        let mut model = Vec::new();
        for i in 0..20 {
            let b = plain(3, i, 100);
            let out = p.append(b.clone(), 0).unwrap();
            model.push((out.base_offset, stored(&b, out.base_offset)));
        }
        assert_eq!(p.high_watermark(), 0);
        let r = p.read_bounded(0, 1 << 20, 0).await.unwrap();
        assert!(r.chunks.is_empty());
        // HW 4 is inside the batch [3, 5]: only [0, 2] is served.
        p.set_hw(4);
        for upper_read in [true, false] {
            let r = if upper_read {
                p.read_bounded(0, 1 << 20, p.high_watermark())
                    .await
                    .unwrap()
            } else {
                p.read(0, 1 << 20).await.unwrap()
            };
            assert_eq!(r.chunks, vec![model[0].1.clone()]);
            assert_eq!(r.high_watermark, 4);
        }
        assert!(p
            .read_bounded(3, 1 << 20, 4)
            .await
            .unwrap()
            .chunks
            .is_empty());
        // Lower values are ignored: the HW is monotonic.
        p.set_hw(2);
        assert_eq!(p.high_watermark(), 4);
        // Follower reads go to the log end; the disk path (no tail cache) too.
        p.wait_durable(59).await.unwrap();
        let all = read_all(&p, 0, p.log_end_offset()).await;
        assert_eq!(all.len(), 20);
        let r = p.read_bounded(7, 1 << 20, 31).await.unwrap();
        assert_eq!(
            r.chunks,
            model[2..10]
                .iter()
                .map(|(_, b)| b.clone())
                .collect::<Vec<_>>()
        );
        // A long poll wakes when the HW passes its offset.
        let p2 = Rc::clone(&p);
        let waiter = glommio::spawn_local(async move {
            p2.wait_for_hw_beyond(10, std::time::Instant::now() + Duration::from_secs(30))
                .await
        });
        glommio::timer::sleep(Duration::from_millis(5)).await;
        p.set_hw(12);
        assert_eq!(waiter.await, 12);
        let start = std::time::Instant::now();
        let hw = p
            .wait_for_hw_beyond(40, std::time::Instant::now() + Duration::from_millis(30))
            .await;
        assert_eq!(hw, 12);
        assert!(start.elapsed() >= Duration::from_millis(25));
        let p3 = Rc::clone(&p);
        let leo_waiter = glommio::spawn_local(async move {
            p3.wait_for_log_end_beyond(60, std::time::Instant::now() + Duration::from_secs(30))
                .await
        });
        glommio::timer::sleep(Duration::from_millis(5)).await;
        p.append(plain(1, 0, 10), 0).unwrap();
        assert_eq!(leo_waiter.await, 61);
        // Truncation lowers the HW to the new end.
        p.set_hw(60);
        assert_eq!(p.truncate_to(9).await.unwrap(), 9);
        assert_eq!(p.high_watermark(), 9);
        p.set_hw(9);
        p.close().await.unwrap();
        let p = Partition::open_with_mode(
            dir.path().to_path_buf(),
            config.clone(),
            Rc::new(DmaFileSystem),
            HwMode::Replicated,
        )
        .await
        .unwrap();
        assert_eq!((p.high_watermark(), p.log_end_offset()), (9, 9));
        for i in 0..3 {
            p.append(plain(1, i, 10), 0).unwrap();
        }
        p.set_hw(11);
        p.close().await.unwrap();
        // A checkpoint past the recovered log end is cut to it; without one, HW = log start.
        super::state_file::write_offset_file(dir.path(), super::state_file::HW_CHECKPOINT_FILE, 99)
            .await
            .unwrap();
        let p = Partition::open_replicated(dir.path().to_path_buf(), config.clone())
            .await
            .unwrap();
        assert_eq!((p.high_watermark(), p.log_end_offset()), (12, 12));
        p.close().await.unwrap();
        std::fs::remove_file(dir.path().join(super::state_file::HW_CHECKPOINT_FILE)).unwrap();
        let p = Partition::open_replicated(dir.path().to_path_buf(), config)
            .await
            .unwrap();
        assert_eq!(p.high_watermark(), 0);
        p.close().await.unwrap();
    });
}

/// Producer state after truncation is what the log below the cut implies: the cut batch's
/// sequence is accepted again (not a duplicate), a retry of a surviving batch is a
/// duplicate with its original offsets, a producer whose epoch bump was cut is back at the
/// old epoch, and a producer untouched by the cut is unchanged — also after a restart.
#[test]
fn producer_state_after_truncate() {
    run(|| async {
        let dir = test_dir();
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        // pid 7: 10 batches of 2 (offsets 0..20); pid 8 at 20 (untouched, below the cut);
        // pid 9 epoch 0 at 22, epoch 1 at 24 (the bump is cut).
        for seq in 0..10 {
            p.append(make_batch(2, 1, 7, 0, seq * 2, 100), 0).unwrap();
        }
        p.append(make_batch(2, 1, 8, 3, 0, 100), 0).unwrap();
        p.append(make_batch(2, 1, 9, 0, 0, 100), 0).unwrap();
        p.append(make_batch(2, 1, 9, 1, 0, 100), 0).unwrap();
        p.append(make_batch(2, 1, 7, 0, 20, 100), 0).unwrap();
        assert_eq!(p.log_end_offset(), 28);
        assert_eq!(p.truncate_to(24).await.unwrap(), 24);
        let check = |p: Rc<Partition>| async move {
            // pid 9 is at epoch 0 again (its epoch-1 batch was cut), continuing at seq 2.
            assert!(matches!(
                p.append(make_batch(1, 1, 9, 0, 5, 100), 0),
                Err(AppendError::OutOfOrderSequence { .. })
            ));
            let dup = p.append(make_batch(2, 1, 9, 0, 0, 100), 0).unwrap();
            assert!(dup.duplicate && dup.base_offset == 22);
            // pid 7: the batch with seq 20 was cut; 18 is the last that survived.
            let dup = p.append(make_batch(2, 1, 7, 0, 18, 100), 0).unwrap();
            assert!(dup.duplicate && dup.base_offset == 18);
            // pid 8 untouched.
            let dup = p.append(make_batch(2, 1, 8, 3, 0, 100), 0).unwrap();
            assert!(dup.duplicate && dup.base_offset == 20);
        };
        check(Rc::clone(&p)).await;
        p.close().await.unwrap();
        let p = Partition::open(dir.path().to_path_buf(), small_config())
            .await
            .unwrap();
        check(Rc::clone(&p)).await;
        let out = p.append(make_batch(2, 1, 7, 0, 20, 100), 0).unwrap();
        assert_eq!((out.base_offset, out.duplicate), (24, false));
        let out = p.append(make_batch(1, 1, 9, 1, 0, 100), 0).unwrap();
        assert_eq!((out.base_offset, out.duplicate), (26, false));
        p.close().await.unwrap();
    });
}

/// The produce path copies each appended byte once into the log and once into the DMA
/// buffer, plus at most one alignment unit per write to detach (and later rewrite) the
/// partial last block; nothing else. Counted with the storage layer's copy counters.
#[test]
fn append_copies_each_byte_once_into_memory_and_once_into_dma() {
    run(|| async {
        let dir = test_dir();
        let config = LogConfig {
            segment_bytes: 64 << 20,
            ..LogConfig::default()
        };
        let p = Partition::open(dir.path().to_path_buf(), config)
            .await
            .unwrap();
        let before = copy_stats::get();
        let mut appended = 0u64;
        let mut writes = 0u64;
        for i in 0..20 {
            let b = plain(10, 1000 + i, 100_000 + i as usize * 37);
            appended += b.len() as u64;
            let out = p.append(b.freeze(), 0).unwrap();
            p.wait_durable(out.last_offset).await.unwrap();
            writes += 1;
        }
        let after = copy_stats::get();
        let into_log = after.into_log - before.into_log;
        let into_dma = after.into_dma - before.into_dma;
        let partial = after.partial_block - before.partial_block;
        assert_eq!(into_log, appended, "one copy into the log's buffer");
        assert!(into_dma >= appended, "every byte reaches the DMA buffer");
        assert!(
            into_dma - appended <= 4096 * writes && partial <= 4096 * writes,
            "only partial blocks are copied again: dma {into_dma} partial {partial} for {appended}"
        );
        p.close().await.unwrap();
    });
}

/// Bytes copied in user space per appended byte on the whole produce path, from the frame
/// the connection reads off the socket (`server/connection.rs`: the kernel's copy into the
/// request buffer, not counted) to the segment file: `parse_request` and the Produce decode
/// hand the record batches out as slices of the frame (checked: no copy), the handler and
/// the mesh move those `Bytes`, and the log copies each byte once into its own buffer
/// (`into_log`) and once into the aligned DMA buffer it writes (`into_dma`), plus under one
/// alignment unit per write to rewrite and detach the partial last block. So today the
/// path makes two copies of every byte; DESIGN.md asks for one (issue 10).
#[test]
fn produce_path_copies_each_byte_twice_from_the_frame() {
    use crate::protocol::frame::{decode_body, parse_request};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    const VERSION: i16 = 9;
    let frame_of = |batch: Bytes| {
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(VERSION)
            .with_correlation_id(1)
            .with_client_id(Some(StrBytes::from_static_str("copies")));
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(1000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch))])]);
        let mut frame = BytesMut::new();
        header
            .encode(&mut frame, ApiKey::Produce.request_header_version(VERSION))
            .unwrap();
        req.encode(&mut frame, VERSION).unwrap();
        frame.freeze()
    };
    run(move || async move {
        let dir = test_dir();
        let config = LogConfig {
            segment_bytes: 64 << 20,
            ..LogConfig::default()
        };
        let p = Partition::open(dir.path().to_path_buf(), config)
            .await
            .unwrap();
        let before = copy_stats::get();
        let (mut appended, mut writes) = (0u64, 0u64);
        for i in 0..20 {
            let frame = frame_of(plain(10, 1000 + i, 100_000 + i as usize * 37).freeze());
            let span = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
            let raw = parse_request(frame).unwrap();
            let req: ProduceRequest = decode_body(&raw).unwrap();
            let records = req.topic_data[0].partition_data[0].records.clone().unwrap();
            let at = records.as_ptr() as usize;
            assert!(
                span.contains(&at) && span.contains(&(at + records.len() - 1)),
                "the decoded records are a slice of the frame, not a copy"
            );
            appended += records.len() as u64;
            let out = p.append(&records, 0).unwrap();
            p.wait_durable(out.last_offset).await.unwrap();
            writes += 1;
        }
        let after = copy_stats::get();
        let copied = (after.into_log - before.into_log)
            + (after.into_dma - before.into_dma)
            + (after.partial_block - before.partial_block);
        let per_byte = copied as f64 / appended as f64;
        eprintln!("produce path: {per_byte:.4} bytes copied per appended byte");
        assert!(copied >= 2 * appended, "two copies of every byte");
        assert!(
            copied - 2 * appended <= 2 * 4096 * writes,
            "beyond two copies only partial blocks: {copied} for {appended}"
        );
        p.close().await.unwrap();
    });
}

/// Many logs on one budget: written batches are evicted from the tail caches so the
/// budget is never exceeded; everything stays readable (from disk); a log with staged
/// data over the budget is refused with Backpressure rather than growing.
#[test]
fn tail_caches_share_one_budget() {
    run(|| async {
        let dir = test_dir();
        let budget = MemoryBudget::new(1 << 20);
        let config = LogConfig {
            segment_bytes: 16 << 20,
            tail_cache_bytes: 32 << 20,
            ..LogConfig::default()
        };
        let mut logs = Vec::new();
        for i in 0..20 {
            let p = Partition::open(dir.path().join(format!("t-{i}")), config.clone())
                .await
                .unwrap();
            p.set_budget(Rc::clone(&budget));
            logs.push(p);
        }
        let mut model: Vec<Vec<(i64, Bytes)>> = vec![Vec::new(); logs.len()];
        for round in 0..10 {
            for (i, p) in logs.iter().enumerate() {
                let b = plain(1, round, 20_000);
                let out = p.append(b.clone(), 0).unwrap();
                p.wait_durable(out.last_offset).await.unwrap();
                model[i].push((out.base_offset, stored(&b, out.base_offset)));
                assert!(
                    budget.used() <= budget.limit(),
                    "used {} over {}",
                    budget.used(),
                    budget.limit()
                );
            }
        }
        for (p, m) in logs.iter().zip(&model) {
            check_all(p, m).await;
        }
        // Staged bytes cannot be evicted: fill the budget with one log's unwritten data
        // (no flush happens between these synchronous appends) until it is refused.
        let p = &logs[0];
        let mut refused = false;
        for _ in 0..100 {
            match p.append(plain(1, 0, 100_000), 0) {
                Ok(_) => {}
                Err(AppendError::Backpressure { .. }) => {
                    refused = true;
                    break;
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert!(refused, "appends past the budget wait");
        assert!(budget.used() <= budget.limit() + 100_000);
        p.wait_for_staging_room(100_000).await.unwrap();
        for p in logs {
            p.close().await.unwrap();
        }
        assert_eq!(budget.used(), 0, "closed logs release everything");
    });
}

/// `make_batch`'s header around `payload` compressed with `codec` (attributes' low bits),
/// CRC-32C recomputed.
fn compressed_batch(codec: i16, payload: &[u8]) -> BytesMut {
    let mut b = make_batch(1, 1_000, -1, -1, -1, 0).to_vec();
    b.extend_from_slice(payload);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    b[21..23].copy_from_slice(&codec.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    validate(&b).unwrap();
    BytesMut::from(&b[..])
}

/// A gzip batch of a few hundred KiB that inflates past RECORDS_DECOMPRESSED_BYTES_MAX is
/// refused at append with BadRecords(TooLarge) (INVALID_RECORD), a payload gzip cannot read
/// with CORRUPT_MESSAGE; neither is stored nor charged, and the log takes the next batch.
#[test]
fn decompression_bombs_are_refused_at_append() {
    use std::io::Write;
    run(|| async {
        let dir = test_dir();
        let p = Partition::open(dir.path().join("t-0"), LogConfig::default())
            .await
            .unwrap();
        let budget = MemoryBudget::new(64 << 20);
        p.set_budget(Rc::clone(&budget));
        let before = budget.used();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..(crate::limits::RECORDS_DECOMPRESSED_BYTES_MAX >> 20) + 1 {
            gz.write_all(&zeros).unwrap();
        }
        let bomb = compressed_batch(1, &gz.finish().unwrap());
        let err = p.append(&bomb, 0).unwrap_err();
        assert!(
            matches!(
                err,
                AppendError::BadRecords(
                    crate::protocol::record_batch::RecordsError::TooLarge { .. }
                )
            ),
            "{err}"
        );
        assert_eq!(
            err.error_code(),
            crate::protocol::error::ErrorCode::InvalidRecord
        );
        let err = p
            .append(compressed_batch(1, b"not gzip at all"), 0)
            .unwrap_err();
        assert_eq!(
            err.error_code(),
            crate::protocol::error::ErrorCode::CorruptMessage
        );
        assert_eq!(p.log_end_offset(), 0);
        assert_eq!(budget.used(), before, "nothing refused stays charged");
        let out = p.append(plain(1, 0, 100), 0).unwrap();
        assert_eq!(out.base_offset, 0);
        p.close().await.unwrap();
    });
}

// ---- compaction: offset gaps ----

/// Never waits: the tests clean at full speed.
pub(crate) struct Unthrottled;

impl CleanerThrottle for Unthrottled {
    fn charge(&mut self, _bytes: u64) -> futures::future::LocalBoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// Keeps the files of the segments a pass replaced, as the shard's releaser does.
#[derive(Default)]
struct Retiring(Vec<(Rc<dyn crate::storage::SegmentFile>, u64)>);

impl CleanerThrottle for Retiring {
    fn charge(&mut self, _bytes: u64) -> futures::future::LocalBoxFuture<'_, ()> {
        Box::pin(async {})
    }
    fn retire(&mut self, file: Rc<dyn crate::storage::SegmentFile>, size: u64) {
        self.0.push((file, size));
    }
}

/// A pass hands every segment it replaced to `retire`, and once the pass is over it holds
/// the last handle on each: the log no longer lists them, so the releaser may shrink them
/// to nothing (freeing their space in steps) and the log still serves the same batches.
#[test]
fn a_pass_retires_the_replaced_segment_files_and_lets_go_of_them() {
    run(|| async {
        let dir = test_dir();
        let config = LogConfig {
            cleanup_policy: CleanupPolicy {
                delete: false,
                compact: true,
            },
            ..small_config()
        };
        let p = Partition::open(dir.path().to_path_buf(), config)
            .await
            .unwrap();
        fill_keyed(&p, 40).await;
        let leo = p.log_end_offset();
        let mut map = cleaner::OffsetMap::new(1 << 20);
        let mut retiring = Retiring::default();
        let report = p
            .clean(&mut map, 1 << 40, &mut retiring)
            .await
            .unwrap()
            .expect("a dirty closed section to clean");
        assert!(report.segments_cleaned > 0);
        assert_eq!(retiring.0.len(), report.segments_cleaned);
        let cleaned = read_all(&p, 0, leo).await;
        for (file, size) in &retiring.0 {
            assert_eq!(Rc::strong_count(file), 1, "only the releaser holds it");
            assert!(*size > 0, "the replaced segment's size, from the log");
            file.truncate(0).await.unwrap();
            file.sync_data().await.unwrap();
        }
        retiring.0.clear();
        assert_eq!(read_all(&p, 0, leo).await, cleaned);
        p.close().await.unwrap();
    });
}

/// `batches` batches of 3 keyed records: even batches overwrite the same 3 keys, odd ones
/// write keys of their own, so cleaning removes every other batch (gaps all along the log).
pub(crate) async fn fill_keyed(p: &Partition, batches: i64) {
    use crate::protocol::produce_batch::{encode_batch, ProduceRecord};
    for i in 0..batches {
        let key = |j: i64| match i % 2 {
            0 => format!("hot-{j}"),
            _ => format!("cold-{i}-{j}"),
        };
        let records = (0..3).map(|j| ProduceRecord {
            key: Some(Bytes::from(key(j))),
            value: Some(Bytes::from(vec![b'v'; 100])),
            headers: Vec::new(),
            timestamp_ms: 1_000 + i,
        });
        let b = encode_batch(records, kafka_protocol::records::Compression::None).unwrap();
        p.append(BytesMut::from(&b[..]), 0).unwrap();
    }
    p.wait_durable(p.log_end_offset() - 1).await.unwrap();
}

/// Where the valid batches of a segment file end.
fn valid_len(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    BatchIter::new(&bytes)
        .map_while(Result::ok)
        .last()
        .map_or(0, |(at, h)| at + h.total_len())
}

/// Proves offset gaps are accepted exactly where cleaning made them: a cleaned log keeps
/// its gaps across restarts (the bound is persisted before the swap) and serves the same
/// batches; a stale valid batch past the bound is still cut as damage; a follower copying
/// the cleaned log refuses its gaps until `prepare_replica_append` raised the follower's own
/// bound, then stores the leader's batches unchanged and keeps them across a restart; and
/// a truncation lowers the bound so nothing past the cut can come back.
#[test]
fn cleaned_log_gaps_survive_restart_and_replicate() {
    run(|| async {
        let (ldir, fdir) = (test_dir(), test_dir());
        let config = LogConfig {
            cleanup_policy: CleanupPolicy {
                delete: false,
                compact: true,
            },
            ..small_config()
        };
        let leader = Partition::open(ldir.path().to_path_buf(), config.clone())
            .await
            .unwrap();
        fill_keyed(&leader, 40).await;
        let leo = leader.log_end_offset();
        let written = read_all(&leader, 0, leo).await;
        assert_eq!(leader.gaps_below(), 0);

        let mut map = cleaner::OffsetMap::new(1 << 20);
        let report = leader
            .clean(&mut map, 1 << 40, &mut Unthrottled)
            .await
            .unwrap()
            .expect("a dirty closed section to clean");
        assert!(report.stats.records_kept < report.stats.records_read);
        assert!(leader.gaps_below() >= report.end_offset);
        let cleaned = read_all(&leader, 0, leo).await;
        let bases: Vec<i64> = headers(&cleaned).iter().map(|h| h.base_offset).collect();
        assert!(cleaned.len() < written.len(), "batches were removed");
        assert!(bases.windows(2).all(|w| w[0] < w[1]), "{bases:?}");
        assert!(
            bases.first() > Some(&0),
            "the log now starts with a gap: {bases:?}"
        );
        // Every surviving batch lies inside a batch written (offsets never change).
        let spans: Vec<(i64, i64)> = headers(&written)
            .iter()
            .map(|h| (h.base_offset, h.last_offset()))
            .collect();
        for h in headers(&cleaned) {
            assert!(spans
                .iter()
                .any(|&(b, l)| b <= h.base_offset && h.last_offset() <= l));
        }
        leader.close().await.unwrap();

        // Restart: the gaps are accepted, the same batches served. A valid batch far past
        // the log end, behind the active segment's last batch, is still damage.
        let active = std::fs::read_dir(ldir.path())
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().to_str().map(str::to_string))
            .filter_map(|n| n.strip_suffix(".log").and_then(|s| s.parse::<i64>().ok()))
            .max()
            .unwrap();
        let path = log_file(ldir.path(), active);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.truncate(valid_len(&path));
        let mut stale = plain(1, 1, 100);
        patch_base_offset(&mut stale, leo + 1_000);
        bytes.extend_from_slice(&stale);
        std::fs::write(&path, &bytes).unwrap();
        let leader = Partition::open(ldir.path().to_path_buf(), config.clone())
            .await
            .unwrap();
        assert_eq!(leader.log_end_offset(), leo);
        assert_eq!(read_all(&leader, 0, leo + 2_000).await, cleaned);

        // A follower copying the cleaned log.
        let follower = Partition::open_replicated(fdir.path().to_path_buf(), config.clone())
            .await
            .unwrap();
        let all = joined(&cleaned);
        assert!(matches!(
            follower.append_replica(all.clone(), 0, 0),
            Err(ReplicaAppendError::OffsetMismatch { .. })
        ));
        assert_eq!(follower.log_end_offset(), 0, "nothing appended");
        follower.prepare_replica_append(&all).await.unwrap();
        let out = follower.append_replica(all.clone(), 0, 0).unwrap();
        assert_eq!(out.last_offset, leo - 1);
        follower.wait_durable(leo - 1).await.unwrap();
        follower.set_hw(leo);
        assert_eq!(read_all(&follower, 0, leo).await, cleaned);
        follower.close().await.unwrap();
        let follower = Partition::open_replicated(fdir.path().to_path_buf(), config.clone())
            .await
            .unwrap();
        assert_eq!(follower.log_end_offset(), leo);
        follower.set_hw(leo);
        assert_eq!(read_all(&follower, 0, leo).await, cleaned);

        // A truncation into the gapped part lowers the bound to the new end; the log ends at
        // the last batch kept and grows again from there.
        let hs = headers(&cleaned);
        let (cut, end_before) = hs
            .windows(2)
            .rev()
            .find(|w| w[1].base_offset > w[0].last_offset() + 1)
            .map(|w| (w[1].base_offset, w[0].last_offset() + 1))
            .expect("a gap between two batches");
        assert!(follower.gaps_below() >= cut);
        let new_end = follower.truncate_to(cut).await.unwrap();
        assert_eq!(
            new_end, end_before,
            "the log ends after the last batch kept"
        );
        assert_eq!(follower.gaps_below(), new_end);
        follower.close().await.unwrap();
        let follower = Partition::open_replicated(fdir.path().to_path_buf(), config)
            .await
            .unwrap();
        assert_eq!(follower.log_end_offset(), new_end);
        follower.set_hw(new_end);
        let kept: Vec<Bytes> = cleaned
            .iter()
            .filter(|c| BatchHeader::parse(c).unwrap().last_offset() < new_end)
            .cloned()
            .collect();
        assert_eq!(read_all(&follower, 0, new_end).await, kept);
        leader.close().await.unwrap();
        follower.close().await.unwrap();
    });
}

/// A reader draining old data from disk in full fetches gets each next chunk read ahead, and
/// what it reads is exactly the log: across a second reader elsewhere (which drops the
/// read-ahead), a truncation past the reader and new appends at the cut offsets (a stale
/// read-ahead is never used), and memory pressure (eviction drops it).
#[test]
fn read_ahead_serves_a_sequential_reader_exactly() {
    run(|| async {
        use super::budget::Evictable;
        let dir = test_dir();
        let config = LogConfig {
            segment_bytes: 64 << 10,
            ..small_config()
        };
        let (mut model, p) = fill(dir.path(), config.clone(), 1200).await;
        p.close().await.unwrap();
        let p = Partition::open(dir.path().to_path_buf(), config)
            .await
            .unwrap();
        let fetch = 16 << 10;
        // Reads from `offset` in full fetches until `stop` (or the end), checking each batch
        // against the model; returns where it stopped.
        async fn drain(
            p: &Partition,
            model: &[(i64, Bytes)],
            mut offset: i64,
            stop: i64,
            fetch: usize,
            saw_ahead: &mut bool,
        ) -> i64 {
            while offset < stop {
                let r = p.read(offset, fetch).await.unwrap();
                let Some(last) = r.chunks.last() else { break };
                let first = model.iter().position(|(b, _)| *b >= offset).unwrap();
                for (i, c) in r.chunks.iter().enumerate() {
                    assert_eq!(c, &model[first + i].1, "batch at offset {offset} + {i}");
                }
                assert!(concat(&r.chunks).len() <= fetch);
                offset = BatchHeader::parse(last).unwrap().last_offset() + 1;
                *saw_ahead |= p.read_ahead_offset() == Some(offset);
            }
            offset
        }
        let mut saw_ahead = false;
        let mut at = drain(&p, &model, 0, 600, fetch, &mut saw_ahead).await;
        assert!(saw_ahead, "full fetches from disk read ahead");
        // Another reader elsewhere takes the read-ahead; the first one goes on correctly.
        assert_eq!(&p.read(10, 1).await.unwrap().chunks[0], &model[5].1);
        at = drain(&p, &model, at, 900, fetch, &mut saw_ahead).await;
        // Memory pressure drops a pending read-ahead first.
        if p.read_ahead_offset().is_some() {
            assert!(p.evict(1) > 0);
            assert_eq!(p.read_ahead_offset(), None);
        }
        at = drain(&p, &model, at, 1000, fetch, &mut saw_ahead).await;
        // Cut the log just past the reader, then write different batches at the cut offsets.
        assert!(p.read_ahead_offset().is_some());
        let cut = at + 40;
        assert_eq!(p.truncate_to(cut).await.unwrap(), cut);
        assert_eq!(p.read_ahead_offset(), None);
        model.retain(|(b, _)| *b < cut);
        for i in 0..400 {
            let b = plain(2, 9000 + i, 170);
            let out = p.append(b.clone(), 0).unwrap();
            model.push((out.base_offset, stored(&b, out.base_offset)));
        }
        let leo = p.log_end_offset();
        p.wait_durable(leo - 1).await.unwrap();
        assert_eq!(drain(&p, &model, at, leo, fetch, &mut saw_ahead).await, leo);
        p.close().await.unwrap();
    });
}

/// The HW checkpoint is rewritten in place (same inode, no `.tmp` left), created atomically
/// when absent, replaced whole when its length is not a frame's, and a torn rewrite reads as
/// unreadable (so recovery falls back to the log start) rather than as a wrong offset.
#[test]
fn hw_checkpoint_is_overwritten_in_place() {
    use std::os::unix::fs::MetadataExt;
    run(|| async {
        let dir = test_dir();
        let name = super::state_file::HW_CHECKPOINT_FILE;
        let path = dir.path().join(name);
        super::state_file::overwrite_offset_file(dir.path(), name, 7, true)
            .await
            .unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        for hw in [8, 1 << 40, 0] {
            super::state_file::overwrite_offset_file(dir.path(), name, hw, hw == 0)
                .await
                .unwrap();
            assert_eq!(
                super::state_file::read_offset_file(dir.path(), name)
                    .await
                    .unwrap(),
                Some(hw)
            );
            assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
        }
        assert!(!dir.path().join(format!("{name}.tmp")).exists());
        // A file of another length is replaced, not patched.
        std::fs::write(&path, b"short").unwrap();
        super::state_file::overwrite_offset_file(dir.path(), name, 9, false)
            .await
            .unwrap();
        assert_eq!(
            super::state_file::read_offset_file(dir.path(), name)
                .await
                .unwrap(),
            Some(9)
        );
        // A torn write (the payload's last byte flipped) is detected, not decoded.
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert!(super::state_file::read_offset_file(dir.path(), name)
            .await
            .is_err());
    });
}
