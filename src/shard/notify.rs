//! A single-threaded "wake everyone waiting" primitive for tasks of one shard (shutdown,
//! connection counts). Waiters re-check their condition after waking, so spurious wake-ups
//! are harmless.
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Notify {
    generation: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl Notify {
    /// Wakes every task currently waiting.
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in waiters {
            w.wake();
        }
    }

    /// Resolves at the next `notify_all` after this call.
    pub fn notified(&self) -> Notified<'_> {
        Notified {
            notify: self,
            generation: self.generation.get(),
        }
    }
}

pub struct Notified<'a> {
    notify: &'a Notify,
    generation: u64,
}

impl Future for Notified<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.generation.get() != self.generation {
            return Poll::Ready(());
        }
        let mut waiters = self.notify.waiters.borrow_mut();
        if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
            waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
