//! The shard's log cleaner: a background task on the shard's own executor, in a task queue
//! of low shares so produce and fetch on the same shard go first, cleaning one compacted log
//! at a time — the dirtiest by `min.cleanable.dirty.ratio` (or one past
//! `max.compaction.lag.ms`) — and sleeping `log.cleaner.backoff.ms` when none needs it.
//!
//! Bounds: one key -> offset map per shard, `log.cleaner.dedupe.buffer.size` split over the
//! shards; reads plus writes paced to `log.cleaner.io.max.bytes.per.second` per shard.
//!
//! Yielding the disk to the foreground (produce and replication writes and fsyncs, counted
//! by `storage::foreground`): a segment read waits (bounded) while one is in flight, and
//! the files of the segments a pass replaced are not simply closed — the last close of an
//! unlinked file frees all its blocks, and ext4 mounted with `discard` trims them in the
//! next journal commit, which every produce fdatasync waits on. A releaser task shrinks
//! each file in small steps, paced and out of the foreground's way, then closes it.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::ShardCtx;
use crate::limits::{
    CLEANER_FOREGROUND_POLL_US, CLEANER_READ_FOREGROUND_WAIT_US,
    CLEANER_RELEASE_FOREGROUND_WAIT_MS, CLEANER_RELEASE_HELD_RECHECK_MS,
    CLEANER_RELEASE_STEP_BYTES, CLEANER_RELEASE_STEP_INTERVAL_MS,
};
use crate::storage::cleaner::{choose_dirtiest, DiskYield, OffsetMap, Turn};
use crate::storage::{foreground, CleanerThrottle, SegmentFile};

/// Shares of the cleaner's task queue (the default queue has 1000): under contention the
/// cleaner gets about 1% of the shard's CPU, and all of it when the shard is idle.
const CLEANER_TASK_QUEUE_SHARES: usize = 10;

/// Longest the cleaner computes (CRC checks, decompression, mapping, filtering) before it
/// lets the shard poll its I/O. Why a bound of our own: glommio polls its rings only
/// between runs of the task queues, and keeps running a queue that stays runnable until its
/// preempt timer fires (100 ms); the cleaner's queue shares only decide who runs next among
/// the runnable, and a produce whose fdatasync completed is not runnable until the ring is
/// polled. So the cleaner sleeps past its slice: its queue goes idle, the executor polls the
/// rings and runs produce and fetch first. A slice adds at most this much to a request that
/// arrives while the cleaner computes (the produce p50 on one shard is ~300-800 µs); at
/// 500 µs the busy/idle produce p99 ratio was 1.6-2.2x (perf/cleaner.sh), at 200 µs the
/// cleaner still cleans at the disk's pace while produce waits less behind each slice.
const CLEANER_CPU_SLICE: Duration = Duration::from_micros(200);

/// The cleaner's sleep past a slice: the shortest timer that still makes its queue idle
/// (a timer already due completes without suspending).
const CLEANER_SLICE_SLEEP: Duration = Duration::from_micros(50);

/// How often an idle releaser looks for replaced segment files.
const RELEASER_IDLE_POLL: Duration = Duration::from_millis(100);

/// Files of replaced segments waiting to be shrunk and closed, in the order the passes
/// replaced them. Bounded by the segments the shard's logs had: each entry is one open file
/// the log held before.
type Retired = Rc<RefCell<VecDeque<(Rc<dyn SegmentFile>, u64)>>>;

/// Sleeps until `pacer` lets the next piece of cleaner disk work go.
async fn yield_to_foreground(pacer: &mut DiskYield) {
    while let Turn::Wait(d) = pacer.turn(Instant::now(), foreground::in_flight()) {
        glommio::timer::sleep(d).await;
    }
}

/// Paces bytes to a rate over a sliding second, the cleaner's computing to slices, and its
/// reads around the foreground's I/O; hands replaced segment files to the releaser.
struct RateThrottle {
    bytes_per_second: u64,
    window_start: Instant,
    window_bytes: u64,
    slice_start: Instant,
    reads: DiskYield,
    retired: Retired,
}

impl RateThrottle {
    fn new(bytes_per_second: u64, retired: Retired) -> Self {
        Self {
            bytes_per_second,
            window_start: Instant::now(),
            window_bytes: 0,
            slice_start: Instant::now(),
            reads: DiskYield::new(
                Duration::ZERO,
                Duration::from_micros(CLEANER_READ_FOREGROUND_WAIT_US),
                Duration::from_micros(CLEANER_FOREGROUND_POLL_US),
            ),
            retired,
        }
    }
}

impl CleanerThrottle for RateThrottle {
    fn before_read(&mut self) -> futures::future::LocalBoxFuture<'_, ()> {
        Box::pin(yield_to_foreground(&mut self.reads))
    }

    fn retire(&mut self, file: Rc<dyn SegmentFile>, size: u64) {
        self.retired.borrow_mut().push_back((file, size));
    }

    fn charge(&mut self, bytes: u64) -> futures::future::LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            if self.bytes_per_second == 0 {
                return;
            }
            self.window_bytes += bytes;
            let elapsed = self.window_start.elapsed();
            // The time these bytes should have taken at the rate; sleep off the difference.
            let due =
                Duration::from_secs_f64(self.window_bytes as f64 / self.bytes_per_second as f64);
            if due > elapsed {
                glommio::timer::sleep(due - elapsed).await;
            }
            if self.window_start.elapsed() >= Duration::from_secs(1) {
                self.window_start = Instant::now();
                self.window_bytes = 0;
            }
        })
    }

    fn pause(&mut self) -> futures::future::LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            if self.slice_start.elapsed() >= CLEANER_CPU_SLICE {
                glommio::timer::sleep(CLEANER_SLICE_SLEEP).await;
                self.slice_start = Instant::now();
            }
        })
    }
}

/// Starts the cleaner task on the current shard (nothing when the cleaner is disabled).
pub fn spawn(ctx: Rc<ShardCtx>) -> Option<glommio::task::JoinHandle<()>> {
    if !ctx.shared.config.log_cleaner_enable {
        return None;
    }
    let queue = glommio::executor().create_task_queue(
        glommio::Shares::Static(CLEANER_TASK_QUEUE_SHARES),
        glommio::Latency::NotImportant,
        "log-cleaner",
    );
    let retired = Retired::default();
    match glommio::spawn_local_into(releaser_loop(ctx.clone(), retired.clone()), queue) {
        Ok(task) => drop(task.detach()),
        Err(e) => {
            warn!("cannot start the log cleaner's releaser: {e}");
            return None;
        }
    }
    glommio::spawn_local_into(cleaner_loop(ctx, retired), queue)
        .map_err(|e| warn!("cannot start the log cleaner: {e}"))
        .ok()
        .map(|t| t.detach())
}

/// Shrinks the files of replaced segments in `CLEANER_RELEASE_STEP_BYTES` steps, paced by
/// `DiskYield` (one step per `CLEANER_RELEASE_STEP_INTERVAL_MS`, not while a foreground
/// write or fsync is in flight, at most `CLEANER_RELEASE_FOREGROUND_WAIT_MS` late), then
/// closes them. Each step is followed by an fdatasync of the shrunk file, so the journal
/// commit that frees (and trims) its blocks runs now, in the foreground's gap, rather than
/// inside the next produce's fsync. A file is shrunk only once the releaser holds its last
/// handle: the log no longer lists it, so no reader can be reading it.
async fn releaser_loop(ctx: Rc<ShardCtx>, retired: Retired) {
    let mut steps = DiskYield::new(
        Duration::from_millis(CLEANER_RELEASE_STEP_INTERVAL_MS),
        Duration::from_millis(CLEANER_RELEASE_FOREGROUND_WAIT_MS),
        Duration::from_micros(CLEANER_FOREGROUND_POLL_US),
    );
    loop {
        if ctx.shutting_down.get() {
            // Whatever is left is closed as the queue drops: the kernel frees it at once.
            return;
        }
        let next = retired.borrow_mut().pop_front();
        let Some((file, mut size)) = next else {
            glommio::timer::sleep(RELEASER_IDLE_POLL).await;
            continue;
        };
        if Rc::strong_count(&file) > 1 {
            // The pass (or a fetch that began before the swap) still reads it.
            retired.borrow_mut().push_back((file, size));
            glommio::timer::sleep(Duration::from_millis(CLEANER_RELEASE_HELD_RECHECK_MS)).await;
            continue;
        }
        while size > 0 && !ctx.shutting_down.get() {
            yield_to_foreground(&mut steps).await;
            size = size.saturating_sub(CLEANER_RELEASE_STEP_BYTES);
            let shrunk = match file.truncate(size).await {
                Ok(()) => file.sync_data().await,
                Err(e) => Err(e),
            };
            if let Err(e) = shrunk {
                // Closing it frees the rest at once, as without the releaser.
                warn!("log cleaner: shrinking a replaced segment file: {e}");
                break;
            }
        }
        drop(file);
    }
}

async fn cleaner_loop(ctx: Rc<ShardCtx>, retired: Retired) {
    let config = &ctx.shared.config;
    let share = config.log_cleaner_dedupe_buffer_size / ctx.shared.nr_shards.max(1) as u64;
    let mut map = OffsetMap::new(usize::try_from(share).unwrap_or(usize::MAX));
    let mut throttle = RateThrottle::new(config.log_cleaner_io_max_bytes_per_second, retired);
    let backoff = Duration::from_millis(config.log_cleaner_backoff_ms.max(10));
    loop {
        if ctx.shutting_down.get() {
            return;
        }
        let now_ms = ctx.shared.clock.wall_ms();
        let mut candidates = Vec::new();
        for (topic, i, p) in ctx.all_partitions() {
            if p.cleanable(now_ms).is_none() {
                continue;
            }
            p.load_cleaner_checkpoint().await;
            if let Some((c, ratio)) = p.cleanable(now_ms) {
                candidates.push(((topic, i, p), c, ratio));
            }
        }
        let Some(((topic, i, p), plan)) = choose_dirtiest(candidates) else {
            glommio::timer::sleep(backoff).await;
            continue;
        };
        let started = Instant::now();
        match p.clean(&mut map, now_ms, &mut throttle).await {
            Ok(Some(report)) => {
                crate::metrics::with(|m| {
                    m.cleaned(report.stats.bytes_read, report.stats.bytes_written)
                });
                info!(
                topic = %topic,
                partition = i,
                dirty_ratio = plan.dirty_ratio(),
                end_offset = report.end_offset,
                segments = report.segments_cleaned,
                records_read = report.stats.records_read,
                records_kept = report.stats.records_kept,
                bytes_read = report.stats.bytes_read,
                bytes_written = report.stats.bytes_written,
                ms = started.elapsed().as_millis() as u64,
                read_ms = report.times.read.as_millis() as u64,
                write_ms = report.times.write.as_millis() as u64,
                swap_ms = report.times.swap.as_millis() as u64,
                paced_ms = report.times.paced.as_millis() as u64,
                "log cleaned"
                )
            }
            Ok(None) => glommio::timer::sleep(backoff).await,
            Err(e) => {
                warn!("log cleaner on {topic}-{i}: {e}");
                glommio::timer::sleep(backoff).await;
            }
        }
    }
}
