//! One memory budget per shard: every large buffer a shard holds on behalf of clients —
//! tail caches, staged (not yet written) batches, follower fetch data, requests being read
//! or queued (`queued_max_request_bytes` is the `Requests` class's own cap inside it), and
//! responses built but not yet written to their socket — is charged against it, so the
//! process stays bounded whatever the partition or connection count.
//!
//! A `Charge` is RAII: it is taken when the memory is allocated (or pinned) and released
//! when the holder drops it. Taking one never blocks and never fails silently:
//! - `try_charge` takes the bytes only if they fit;
//! - `charge_evicting` first asks the registered caches (`Evictable`) to drop written data
//!   they keep only to serve reads faster, then takes the bytes if they now fit;
//! - `charge_forced` takes them regardless, for memory that is already held and must be
//!   counted (a caller that can wait uses `room` instead);
//! - `acquire` / `Charge::grow` wait until the bytes fit (evicting caches first): a
//!   connection reading a request waits there, its socket unread, which is how a client over
//!   the budget is slowed instead of the broker growing. A class cap (`set_class_cap`)
//!   bounds a class below the limit; a single charge is clamped to its class cap, so an ask
//!   larger than could ever be free does not wait forever (the rest is read uncounted,
//!   bounded by `socket_request_max_bytes` for one request at a time).
//!
//! Writers that find no room wait on `room()` (the budget notifies on every release), so
//! reaching the budget evicts caches first, then slows writers; it never grows the process.
//!
//! Deadlock rule: a class that can hold bytes while it waits for storage (requests: a
//! produce holds its request while its append waits) is capped below the whole limit
//! (`limit() / 2`, see `set_class_cap`), so appends always find room once flushers and
//! evictions release theirs. Waiters re-check after every release and are not served in
//! strict FIFO order; callers ask in small steps (a connection grows its charge one read at a
//! time), so a small ask is not starved for long by a large one.
//!
//! Writes: a flush copies staged batches into an aligned DMA buffer for the duration of the
//! write. Those buffers come out of a write pool reserved from the budget up front
//! (`write_pool_bytes`, an eighth of the limit up to `WRITE_POOL_BYTES_MAX`), taken in
//! pieces of at most `WRITE_PIECE_BYTES` through a semaphore: five thousand partitions
//! flushing at once then wait for the pool instead of each holding a copy of its staging.
//!
//! Single-threaded (`Rc`, `Cell`): a budget belongs to one shard, like everything it counts.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use super::notify::{Listen, Notify};

/// What a charge is for; kept per class for metrics and for a class's own cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryClass {
    /// Batches a partition keeps in memory: appended ones (staged until written, then
    /// cached for tail reads) and replicated ones.
    Log,
    /// Request bytes being read from sockets or queued for dispatch, until their response
    /// is written.
    Requests,
    /// Responses built and waiting to be written to their socket (fetch data).
    Responses,
    /// What an open partition keeps whatever its traffic (`PARTITION_RESIDENT_BYTES` each:
    /// its segment map, indexes, flusher task, partial last block): charged so the budget
    /// holds with any partition count, the caches getting what is left.
    Partitions,
}

const CLASSES: usize = 4;

impl MemoryClass {
    fn index(self) -> usize {
        match self {
            MemoryClass::Log => 0,
            MemoryClass::Requests => 1,
            MemoryClass::Responses => 2,
            MemoryClass::Partitions => 3,
        }
    }
}

/// Something holding memory it can give back on demand (a partition's tail cache).
pub trait Evictable {
    /// Drops up to about `bytes` of memory it can rebuild (data already written to disk);
    /// returns the bytes released.
    fn evict(&self, bytes: usize) -> usize;
}

/// Evictables registered at most before the dead ones are pruned (bounds the registry).
const EVICTABLES_PRUNE_AT: usize = 1024;

pub struct MemoryBudget {
    limit: usize,
    used: Cell<usize>,
    by_class: [Cell<usize>; CLASSES],
    /// Most bytes each class may hold (`usize::MAX`: only the limit).
    class_caps: [Cell<usize>; CLASSES],
    /// Bumped on every release: writers waiting for room re-check.
    released: Notify,
    evictables: RefCell<Vec<Weak<dyn Evictable>>>,
    /// Where the next eviction round starts, so every cache gives back in turn.
    cursor: Cell<usize>,
    live_evictables_at_prune: Cell<usize>,
    /// False after an eviction round found nothing to evict, until a log reports newly
    /// written (so evictable) data: writers waiting at the limit then do not sweep every
    /// cache of the shard on every release.
    maybe_evictable: Cell<bool>,
    /// Bytes reserved for DMA write buffers (0: budget too small for a pool; writes are
    /// then charged as they happen).
    write_pool_bytes: usize,
    write_pool: Rc<glommio::sync::Semaphore>,
}

/// Largest piece of one write (one DMA buffer); a multiple of every direct-I/O alignment.
pub const WRITE_PIECE_BYTES: usize = 1 << 20;
/// The write pool is this share of the limit ...
const WRITE_POOL_SHARE: usize = 8;
/// ... up to this much: enough to keep the disk busy, more only holds copies.
pub const WRITE_POOL_BYTES_MAX: usize = 32 << 20;

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("limit", &self.limit)
            .field("used", &self.used.get())
            .finish()
    }
}

impl MemoryBudget {
    pub fn new(limit_bytes: usize) -> Rc<Self> {
        let pool = (limit_bytes / WRITE_POOL_SHARE).min(WRITE_POOL_BYTES_MAX);
        let pool = pool - pool % WRITE_PIECE_BYTES;
        Rc::new(Self {
            write_pool_bytes: pool,
            write_pool: Rc::new(glommio::sync::Semaphore::new(pool as u64)),
            limit: limit_bytes,
            used: Cell::new(0),
            by_class: [Cell::new(0), Cell::new(0), Cell::new(0), Cell::new(0)],
            class_caps: [
                Cell::new(usize::MAX),
                Cell::new(usize::MAX),
                Cell::new(usize::MAX),
                Cell::new(usize::MAX),
            ],
            released: Notify::default(),
            evictables: RefCell::new(Vec::new()),
            cursor: Cell::new(0),
            live_evictables_at_prune: Cell::new(0),
            maybe_evictable: Cell::new(true),
        })
    }

    /// A budget that never refuses (tools and tests that do not exercise the bound).
    pub fn unlimited() -> Rc<Self> {
        Self::new(usize::MAX)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
    pub fn used(&self) -> usize {
        self.used.get()
    }
    pub fn used_by(&self, class: MemoryClass) -> usize {
        self.by_class[class.index()].get()
    }
    /// Room for more charges: the limit less what is charged and the write pool.
    pub fn available(&self) -> usize {
        self.limit
            .saturating_sub(self.write_pool_bytes)
            .saturating_sub(self.used.get())
    }

    /// Caps `class` at `cap` bytes, and at most half the limit (the deadlock rule).
    pub fn set_class_cap(&self, class: MemoryClass, cap: usize) {
        self.class_caps[class.index()].set(cap.min(self.limit / 2));
    }

    pub fn class_cap(&self, class: MemoryClass) -> usize {
        self.class_caps[class.index()].get()
    }

    /// A charge of nothing, to `grow` later.
    pub fn empty(self: &Rc<Self>, class: MemoryClass) -> Charge {
        self.charge_forced(class, 0)
    }

    /// Takes `bytes` (clamped to the class cap), waiting until they fit.
    pub async fn acquire(self: &Rc<Self>, class: MemoryClass, bytes: usize) -> Charge {
        let mut c = self.empty(class);
        c.grow(bytes).await;
        c
    }

    /// Takes `bytes` for `class` if the class cap allows and they fit, evicting caches.
    fn take(self: &Rc<Self>, class: MemoryClass, bytes: usize) -> bool {
        if self.used_by(class).saturating_add(bytes) > self.class_cap(class) {
            return false;
        }
        if !self.make_room(bytes) {
            return false;
        }
        self.add(class, bytes);
        true
    }

    fn add(&self, class: MemoryClass, bytes: usize) {
        self.used.set(self.used.get().saturating_add(bytes));
        let c = &self.by_class[class.index()];
        c.set(c.get().saturating_add(bytes));
    }

    pub fn write_pool_bytes(&self) -> usize {
        self.write_pool_bytes
    }

    /// Room for one DMA write buffer of `bytes` (at most `WRITE_PIECE_BYTES`): a permit
    /// from the write pool, or a charge when the budget has no pool.
    pub(crate) async fn write_buffer(self: &Rc<Self>, bytes: usize) -> WriteBuffer {
        if self.write_pool_bytes == 0 {
            return WriteBuffer::Charged {
                _charge: self.charge_forced(MemoryClass::Log, bytes),
            };
        }
        let units = bytes.min(self.write_pool_bytes) as u64;
        // The semaphore is never closed, so acquiring cannot fail; if it ever did, the
        // write goes ahead charged instead.
        match self.write_pool.acquire_static_permit(units).await {
            Ok(p) => WriteBuffer::Pooled { _permit: p },
            Err(_) => WriteBuffer::Charged {
                _charge: self.charge_forced(MemoryClass::Log, bytes),
            },
        }
    }

    /// Registers a cache that `charge_evicting` may ask to give memory back.
    pub fn register(&self, evictable: Weak<dyn Evictable>) {
        let mut list = self.evictables.borrow_mut();
        if list.len() >= EVICTABLES_PRUNE_AT.max(2 * self.live_evictables_at_prune.get()) {
            list.retain(|w| w.strong_count() > 0);
            self.live_evictables_at_prune.set(list.len());
        }
        list.push(evictable);
    }

    /// Takes `bytes` if they fit under the limit.
    pub fn try_charge(self: &Rc<Self>, class: MemoryClass, bytes: usize) -> Option<Charge> {
        if bytes > self.available() {
            return None;
        }
        Some(self.charge_forced(class, bytes))
    }

    /// Takes `bytes` whether or not they fit (memory already held that must be counted).
    pub fn charge_forced(self: &Rc<Self>, class: MemoryClass, bytes: usize) -> Charge {
        self.add(class, bytes);
        Charge {
            budget: Rc::clone(self),
            class,
            bytes,
        }
    }

    /// Takes `bytes`, evicting registered caches first if they do not fit. `None` when even
    /// then there is no room: the caller waits (`room`) or refuses.
    ///
    /// Must not be called while the caller holds a borrow an `Evictable` needs (a
    /// partition calls it before borrowing its own state).
    pub fn charge_evicting(self: &Rc<Self>, class: MemoryClass, bytes: usize) -> Option<Charge> {
        if !self.make_room(bytes) {
            return None;
        }
        Some(self.charge_forced(class, bytes))
    }

    /// Whether `bytes` fit, after asking the registered caches to give memory back if not.
    fn make_room(&self, bytes: usize) -> bool {
        if bytes <= self.available() {
            return true;
        }
        if !self.maybe_evictable.get() {
            return false;
        }
        // Free a little more than asked, so a stream of appends at the limit does not run
        // an eviction round for every batch.
        let slack = (self.limit / EVICTION_SLACK_DIVISOR).min(EVICTION_SLACK_BYTES_MAX);
        let mut need = bytes.saturating_sub(self.available()).saturating_add(slack);
        let list: Vec<Weak<dyn Evictable>> = self.evictables.borrow().clone();
        let n = list.len();
        let start = self.cursor.get();
        // Two sweeps: the first asks each cache for a fair share, the second for the rest.
        for sweep in 0..2 {
            for i in 0..n {
                if need == 0 {
                    break;
                }
                let idx = (start + i) % n;
                let Some(e) = list.get(idx).and_then(Weak::upgrade) else {
                    continue;
                };
                let ask = if sweep == 0 {
                    need.div_ceil(n.max(1)).max(EVICTION_SHARE_BYTES_MIN)
                } else {
                    need
                };
                let freed = e.evict(ask.min(need));
                need = need.saturating_sub(freed);
                self.cursor.set((idx + 1) % n.max(1));
            }
        }
        if need > 0 {
            self.maybe_evictable.set(false);
        }
        bytes <= self.available()
    }

    /// A log wrote data it keeps cached: the next eviction round may find something, so
    /// writers waiting for room look again (they evict it).
    pub fn mark_evictable(&self) {
        self.maybe_evictable.set(true);
        self.released.notify_all();
    }
    /// Whether a log with nothing staged may take `bytes` it found no room for (a forced
    /// charge, so one batch always gets in): only while the budget stays within
    /// `limit / FORCED_SLACK_DIVISOR` over its room, or when the Log class holds nothing
    /// (the rest is fixed or drains on its own, so waiting could last forever). Past that the
    /// writer waits for flushers to make cached data evictable: five thousand partitions
    /// each forcing one batch in at the limit would otherwise overshoot it by five thousand
    /// batches.
    pub fn may_force(&self, bytes: usize) -> bool {
        let ceiling = self
            .limit
            .saturating_sub(self.write_pool_bytes)
            .saturating_add(self.limit / FORCED_SLACK_DIVISOR);
        self.used.get().saturating_add(bytes) <= ceiling || self.used_by(MemoryClass::Log) == 0
    }

    /// Resolves after the next release; listen before re-checking so none is missed.
    pub(crate) fn room(&self) -> Listen<'_> {
        self.released.listen()
    }

    fn release(&self, class: MemoryClass, bytes: usize) {
        self.used.set(self.used.get().saturating_sub(bytes));
        let c = &self.by_class[class.index()];
        c.set(c.get().saturating_sub(bytes));
        self.released.notify_all();
    }
}

/// Forced charges stop at this share of the limit over the budget's room (`may_force`).
const FORCED_SLACK_DIVISOR: usize = 32;
/// One eviction round frees this share of the limit beyond what was asked ...
const EVICTION_SLACK_DIVISOR: usize = 64;
/// ... but at most this much.
const EVICTION_SLACK_BYTES_MAX: usize = 4 << 20;
/// The smallest amount one cache is asked for in the fair-share sweep.
const EVICTION_SHARE_BYTES_MIN: usize = 64 << 10;

/// Held while a DMA write buffer exists.
pub(crate) enum WriteBuffer {
    Pooled {
        _permit: glommio::sync::StaticPermit,
    },
    Charged {
        _charge: Charge,
    },
}

/// Bytes counted against a budget until dropped.
pub struct Charge {
    budget: Rc<MemoryBudget>,
    class: MemoryClass,
    bytes: usize,
}

impl Charge {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `more` bytes, waiting until they fit. The total held is clamped to the class
    /// cap, so a caller never waits for more than could ever be free.
    pub async fn grow(&mut self, more: usize) {
        let budget = Rc::clone(&self.budget);
        let more = more.min(budget.class_cap(self.class).saturating_sub(self.bytes));
        loop {
            // Listen before checking, so a release between the check and the await wakes us.
            let room = budget.room();
            if self.try_grow(more) {
                return;
            }
            room.await;
        }
    }

    /// Takes `more` bytes if they fit now (evicting caches first).
    pub fn try_grow(&mut self, more: usize) -> bool {
        if more == 0 {
            return true;
        }
        if !self.budget.take(self.class, more) {
            return false;
        }
        self.bytes += more;
        true
    }

    /// Moves `bytes` (at most what is held) into a new charge of the same class.
    pub fn split(&mut self, bytes: usize) -> Charge {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Charge {
            budget: Rc::clone(&self.budget),
            class: self.class,
            bytes,
        }
    }

    /// Gives back `bytes` of this charge early (the holder shrank).
    pub fn shrink(&mut self, bytes: usize) {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        self.budget.release(self.class, bytes);
    }
}

impl std::fmt::Debug for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Charge({:?}, {})", self.class, self.bytes)
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.class, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache holding charges; evicting drops them (oldest first).
    struct Cache(RefCell<Vec<Charge>>);
    impl Evictable for Cache {
        fn evict(&self, bytes: usize) -> usize {
            let mut freed = 0;
            let mut held = self.0.borrow_mut();
            while freed < bytes && !held.is_empty() {
                freed += held.remove(0).bytes();
            }
            freed
        }
    }

    /// Charges add up per class, refuse past the limit, and are released on drop.
    #[test]
    fn charges_are_counted_and_released() {
        let b = MemoryBudget::new(100);
        let a = b.try_charge(MemoryClass::Log, 60).expect("fits");
        assert!(b.try_charge(MemoryClass::Requests, 41).is_none());
        let r = b.try_charge(MemoryClass::Requests, 40).expect("fits");
        assert_eq!((b.used(), b.used_by(MemoryClass::Log)), (100, 60));
        drop(a);
        assert_eq!((b.used(), b.used_by(MemoryClass::Requests)), (40, 40));
        let mut f = b.charge_forced(MemoryClass::Log, 200);
        assert_eq!(b.used(), 240);
        f.shrink(150);
        assert_eq!(b.used(), 90);
        drop((r, f));
        assert_eq!(b.used(), 0);
    }

    /// Past the limit, registered caches are asked to give memory back before a charge is
    /// refused; a dead cache is skipped; with nothing left to evict the charge is refused.
    #[test]
    fn charge_evicting_asks_caches_first() {
        let b = MemoryBudget::new(1 << 20);
        let cache = Rc::new(Cache(RefCell::new(Vec::new())));
        let as_evictable: Rc<dyn Evictable> = cache.clone();
        b.register(Rc::downgrade(&as_evictable));
        {
            let dead: Rc<dyn Evictable> = Rc::new(Cache(RefCell::new(Vec::new())));
            b.register(Rc::downgrade(&dead));
        }
        for _ in 0..16 {
            let c = b.try_charge(MemoryClass::Log, 64 << 10).expect("fits");
            cache.0.borrow_mut().push(c);
        }
        assert_eq!(b.available(), 0);
        let c = b
            .charge_evicting(MemoryClass::Log, 100 << 10)
            .expect("evicted room");
        assert!(cache.0.borrow().len() < 15, "evicted at least two entries");
        assert!(b.used() <= b.limit());
        let rest = b
            .try_charge(MemoryClass::Requests, b.available())
            .expect("fits");
        cache.0.borrow_mut().clear();
        let all = b.try_charge(MemoryClass::Log, b.available()).expect("fits");
        assert!(b.charge_evicting(MemoryClass::Log, 1).is_none());
        drop((c, rest, all));
        assert_eq!(b.used(), 0);
    }

    /// A class cap bounds the class (at most half the limit); charges grow, split and
    /// shrink exactly; a grow past the class cap is clamped to it rather than waiting for
    /// room that could never be free.
    #[test]
    fn forced_charges_stop_at_the_slack_unless_the_log_class_is_empty() {
        // Proves a log may force a batch in only while the budget stays within its slack
        // (limit / 32 over its room), so many logs at the limit cannot each add a batch, and
        // that with nothing in the Log class (the budget held by fixed partition charges)
        // forcing is still allowed, so appends cannot wait forever.
        let b = MemoryBudget::new(32 << 10);
        let slack = (32 << 10) / FORCED_SLACK_DIVISOR;
        let _fixed = b.charge_forced(MemoryClass::Partitions, 40 << 10);
        assert!(b.may_force(10 << 10), "the Log class is empty");
        let _one = b.charge_forced(MemoryClass::Log, 1);
        assert!(!b.may_force(1), "over the limit with Log bytes: wait");
        drop(_fixed);
        assert!(b.may_force((32 << 10) + slack - 1 - 1));
        assert!(!b.may_force((32 << 10) + slack));
    }

    #[test]
    fn class_caps_bound_and_clamp() {
        let b = MemoryBudget::new(1000);
        b.set_class_cap(MemoryClass::Requests, 10_000);
        assert_eq!(b.class_cap(MemoryClass::Requests), 500);
        let mut r = b.empty(MemoryClass::Requests);
        assert!(r.try_grow(300));
        assert!(!b.empty(MemoryClass::Requests).try_grow(201), "class cap");
        let part = r.split(100);
        assert_eq!((r.bytes(), part.bytes(), b.used()), (200, 100, 300));
        drop(part);
        r.shrink(50);
        assert_eq!(b.used_by(MemoryClass::Requests), 150);
        glommio::LocalExecutor::default().run(async {
            let mut big = b.empty(MemoryClass::Requests);
            drop(r);
            big.grow(1 << 20).await;
            assert_eq!(big.bytes(), 500, "clamped to the class cap");
        });
        assert_eq!(b.used(), 0);
    }

    /// A task waiting for bytes proceeds once another charge is dropped, and never takes
    /// bytes that are not free meanwhile.
    #[test]
    fn waiters_proceed_after_release() {
        glommio::LocalExecutor::default().run(async {
            let b = MemoryBudget::new(100);
            let held = b.acquire(MemoryClass::Requests, 50).await;
            let other = b.charge_forced(MemoryClass::Responses, 40);
            let b2 = b.clone();
            let waiter =
                glommio::spawn_local(
                    async move { b2.acquire(MemoryClass::Requests, 30).await.bytes() },
                );
            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
            assert_eq!(
                b.used(),
                90,
                "the waiter must not take bytes that are not free"
            );
            drop(other);
            assert_eq!(waiter.await, 30);
            drop(held);
            assert_eq!(b.used(), 0);
        });
    }
}
