//! A byte budget of one shard: a counter of bytes in use with a cap, and reservations that
//! give their bytes back when dropped.
//!
//! What it models: memory the shard holds on behalf of clients — request bytes being read or
//! queued (`queued_max_request_bytes`). A task that needs more than is left waits until
//! other reservations are dropped; that is how a client over the cap is slowed (its socket is
//! not read) instead of the broker growing.
//!
//! Invariant: `in_use` is the sum of the live reservations' sizes, and never exceeds the cap
//! through `acquire`/`grow` (the only ways to take bytes). Single-threaded: the shard's tasks
//! share it through an `Rc`; no borrow is held across an await.
//!
//! Liveness: waiters re-check after every release and are not served in strict FIFO order;
//! the callers ask in small steps (a connection grows its reservation one read at a time),
//! so a small ask cannot be starved for long by a large one, and a large ask is never larger
//! than the cap (`acquire` clamps it), so it cannot wait forever on an idle budget.
use std::cell::Cell;
use std::rc::Rc;

use crate::storage::notify::Notify;

pub struct ByteBudget {
    cap: usize,
    in_use: Cell<usize>,
    released: Notify,
}

impl ByteBudget {
    pub fn new(cap: usize) -> Rc<Self> {
        Rc::new(Self {
            cap,
            in_use: Cell::new(0),
            released: Notify::default(),
        })
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    pub fn in_use(&self) -> usize {
        self.in_use.get()
    }

    /// An empty reservation, to `grow` later.
    pub fn empty(self: &Rc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Takes `bytes` (at most the cap), waiting until they are free.
    pub async fn acquire(self: &Rc<Self>, bytes: usize) -> Reservation {
        let mut r = self.empty();
        r.grow(bytes).await;
        r
    }

    /// Takes `bytes` now if they are free.
    pub fn try_acquire(self: &Rc<Self>, bytes: usize) -> Option<Reservation> {
        let mut r = self.empty();
        r.try_grow(bytes).then_some(r)
    }

    fn take(&self, bytes: usize) -> bool {
        let used = self.in_use.get();
        if used.saturating_add(bytes) > self.cap {
            return false;
        }
        self.in_use.set(used + bytes);
        true
    }

    fn give_back(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        // A reservation only gives back what it took, so this cannot underflow; saturate
        // anyway rather than wrap if that were ever broken.
        self.in_use.set(self.in_use.get().saturating_sub(bytes));
        self.released.notify_all();
    }
}

/// Bytes taken from a `ByteBudget`; dropping it gives them back.
pub struct Reservation {
    budget: Rc<ByteBudget>,
    bytes: usize,
}

impl Reservation {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `more` bytes, waiting until they are free. The total held is clamped to the
    /// budget's cap, so a caller can never wait for more than could ever be free.
    pub async fn grow(&mut self, more: usize) {
        let more = more.min(self.budget.cap.saturating_sub(self.bytes));
        let budget = self.budget.clone();
        loop {
            // Listen before checking, so a release between the check and the await wakes us.
            let released = budget.released.listen();
            if self.try_grow(more) {
                return;
            }
            released.await;
        }
    }

    /// Takes `more` bytes if they are free now.
    pub fn try_grow(&mut self, more: usize) -> bool {
        if !self.budget.take(more) {
            return false;
        }
        self.bytes += more;
        true
    }

    /// Gives back `less` bytes (at most what is held).
    pub fn shrink(&mut self, less: usize) {
        let less = less.min(self.bytes);
        self.bytes -= less;
        self.budget.give_back(less);
    }

    /// Moves `bytes` (at most what is held) into a new reservation of the same budget.
    pub fn split(&mut self, bytes: usize) -> Reservation {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Reservation {
            budget: self.budget.clone(),
            bytes,
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reservations add up to `in_use`, never past the cap, and give their bytes back on
    /// shrink, split and drop.
    #[test]
    fn accounting_is_exact_and_capped() {
        let b = ByteBudget::new(100);
        let mut r = b.try_acquire(60).expect("fits");
        assert!(b.try_acquire(41).is_none());
        let s = b.try_acquire(40).expect("fits exactly");
        assert_eq!(b.in_use(), 100);
        r.shrink(10);
        assert_eq!((r.bytes(), b.in_use()), (50, 90));
        let part = r.split(20);
        assert_eq!((r.bytes(), part.bytes(), b.in_use()), (30, 20, 90));
        drop(part);
        drop(s);
        assert_eq!(b.in_use(), 30);
        assert!(r.try_grow(70));
        assert!(!r.try_grow(1));
        drop(r);
        assert_eq!(b.in_use(), 0);
    }

    /// A task waiting for bytes proceeds once another reservation is dropped, and an ask
    /// larger than the cap is clamped instead of waiting forever.
    #[test]
    fn waiters_proceed_after_release() {
        glommio::LocalExecutor::default().run(async {
            let b = ByteBudget::new(10);
            let held = b.acquire(8).await;
            let b2 = b.clone();
            let waiter = glommio::spawn_local(async move { b2.acquire(5).await.bytes() });
            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
            assert_eq!(
                b.in_use(),
                8,
                "the waiter must not take bytes that are not free"
            );
            drop(held);
            assert_eq!(waiter.await, 5);
            assert_eq!(b.in_use(), 0);
            let huge = b.acquire(1_000).await;
            assert_eq!(huge.bytes(), 10);
        });
    }
}
