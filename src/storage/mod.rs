//! TEMPORARY in-memory stand-in with the storage API, so the server can be built while the
//! real direct-I/O storage is written on its own branch. Replaced when that lands.
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use thiserror::Error;

use crate::protocol::record_batch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPolicy {
    Sync,
    IntervalMs(u64),
    Never,
}
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}
#[derive(Clone, Debug)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: i64,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub index_interval_bytes: u32,
    pub segment_index_bytes: u32,
    pub flush_policy: FlushPolicy,
    pub max_message_bytes: u32,
    pub message_timestamp_type: TimestampType,
    pub preallocate_bytes: u64,
    pub tail_cache_bytes: usize,
}
impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 604_800_000,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            index_interval_bytes: 4096,
            segment_index_bytes: 10 << 20,
            flush_policy: FlushPolicy::Sync,
            max_message_bytes: 1_048_588,
            message_timestamp_type: TimestampType::CreateTime,
            preallocate_bytes: 64 << 20,
            tail_cache_bytes: 32 << 20,
        }
    }
}
#[derive(Debug, Clone)]
pub struct AppendOutcome {
    pub base_offset: i64,
    pub last_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    pub duplicate: bool,
}
#[derive(Debug, Clone, Default)]
pub struct ReadOutcome {
    pub chunks: Vec<Bytes>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}
#[derive(Debug, Error)]
pub enum Error {
    #[error("offset {offset} out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}
#[derive(Debug, Error)]
pub enum AppendError {
    #[error("message too large: {size} > {max}")]
    MessageTooLarge { size: usize, max: u32 },
    #[error("corrupt batch")]
    CorruptMessage,
    #[error("out of order sequence")]
    OutOfOrderSequence,
    #[error("invalid producer epoch")]
    InvalidProducerEpoch,
    #[error("storage: {0}")]
    Storage(#[from] Error),
}
pub struct Partition {
    batches: RefCell<Vec<(i64, Bytes)>>,
    next: Cell<i64>,
    config: RefCell<LogConfig>,
    notify: RefCell<Vec<std::task::Waker>>,
}
impl Partition {
    pub async fn open(_dir: PathBuf, config: LogConfig) -> Result<Rc<Partition>, Error> {
        Ok(Rc::new(Partition {
            batches: RefCell::new(Vec::new()),
            next: Cell::new(0),
            config: RefCell::new(config),
            notify: RefCell::new(Vec::new()),
        }))
    }
    pub fn append(&self, mut batch: BytesMut, _now_ms: i64) -> Result<AppendOutcome, AppendError> {
        let h = record_batch::validate(&batch).map_err(|_| AppendError::CorruptMessage)?;
        let base = self.next.get();
        record_batch::patch_base_offset(&mut batch, base);
        self.next.set(base + h.last_offset_delta as i64 + 1);
        self.batches.borrow_mut().push((base, batch.freeze()));
        for w in self.notify.borrow_mut().drain(..) {
            w.wake();
        }
        Ok(AppendOutcome {
            base_offset: base,
            last_offset: base + h.last_offset_delta as i64,
            log_append_time_ms: -1,
            log_start_offset: 0,
            duplicate: false,
        })
    }
    pub async fn wait_durable(&self, _last_offset: i64) -> Result<(), Error> {
        Ok(())
    }
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadOutcome, Error> {
        let end = self.next.get();
        if offset < 0 || offset > end {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start: 0,
                log_end: end,
            });
        }
        let mut out = ReadOutcome {
            chunks: vec![],
            high_watermark: end,
            log_start_offset: 0,
        };
        let mut total = 0;
        for (base, b) in self.batches.borrow().iter() {
            let h = record_batch::BatchHeader::parse(b)
                .map_err(|_| Error::Io(std::io::ErrorKind::InvalidData.into()))?;
            if h.last_offset() < offset || *base < 0 {
                continue;
            }
            if total > 0 && total + b.len() > max_bytes {
                break;
            }
            total += b.len();
            out.chunks.push(b.clone());
        }
        Ok(out)
    }
    pub fn high_watermark(&self) -> i64 {
        self.next.get()
    }
    pub fn log_end_offset(&self) -> i64 {
        self.next.get()
    }
    pub fn log_start_offset(&self) -> i64 {
        0
    }
    pub async fn wait_for_data(&self, offset: i64, timeout: Duration) {
        let deadline = std::time::Instant::now() + timeout;
        let fut = futures_lite::future::poll_fn(|cx| {
            if self.next.get() > offset {
                return std::task::Poll::Ready(());
            }
            self.notify.borrow_mut().push(cx.waker().clone());
            std::task::Poll::Pending
        });
        let timer =
            glommio::timer::sleep(deadline.saturating_duration_since(std::time::Instant::now()));
        futures_lite::future::or(fut, timer).await;
    }
    pub async fn offset_for_timestamp(&self, _ts: i64) -> Result<Option<(i64, i64)>, Error> {
        Ok(None)
    }
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        None
    }
    pub async fn delete_records(&self, before_offset: i64) -> Result<i64, Error> {
        Ok(before_offset)
    }
    pub async fn enforce_retention(&self, _now_ms: i64) -> Result<(), Error> {
        Ok(())
    }
    pub fn set_config(&self, config: LogConfig) {
        *self.config.borrow_mut() = config;
    }
    pub fn config(&self) -> LogConfig {
        self.config.borrow().clone()
    }
    pub async fn close(&self) -> Result<(), Error> {
        Ok(())
    }
    pub async fn delete(&self) -> Result<(), Error> {
        Ok(())
    }
}
