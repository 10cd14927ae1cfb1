//! A single-threaded broadcast notification: `listen()` captures a generation; the future
//! resolves once `notify_all()` has bumped it. Listening before checking the condition means
//! a notification between the check and the await is never lost. The one such primitive in
//! the crate: partitions (appends, flushes) and shards (shutdown, connection counts) use it.
//!
//! Bound: one registered waker per live listener; a dropped listener (e.g. a long poll that
//! timed out) removes its waker, so idle partitions do not accumulate wakers.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub struct Notify {
    generation: Cell<u64>,
    next_id: Cell<u64>,
    wakers: RefCell<Vec<(u64, Waker)>>,
}

impl Notify {
    pub fn notify_all(&self) {
        self.generation.set(self.generation.get().wrapping_add(1));
        let wakers = std::mem::take(&mut *self.wakers.borrow_mut());
        for (_, w) in wakers {
            w.wake();
        }
    }

    pub fn listen(&self) -> Listen<'_> {
        let id = self.next_id.get();
        self.next_id.set(id.wrapping_add(1));
        Listen {
            notify: self,
            generation: self.generation.get(),
            id,
        }
    }
}

pub struct Listen<'a> {
    notify: &'a Notify,
    generation: u64,
    id: u64,
}

impl Future for Listen<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.notify.generation.get() != self.generation {
            return Poll::Ready(());
        }
        let mut wakers = self.notify.wakers.borrow_mut();
        match wakers.iter_mut().find(|(id, _)| *id == self.id) {
            Some((_, w)) => w.clone_from(cx.waker()),
            None => wakers.push((self.id, cx.waker().clone())),
        }
        Poll::Pending
    }
}

impl Drop for Listen<'_> {
    fn drop(&mut self) {
        self.notify
            .wakers
            .borrow_mut()
            .retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener dropped before any notification (a closed connection's shutdown watch, a
    /// long poll that timed out) leaves no waker behind: otherwise every closed connection's
    /// task stays referenced until shutdown.
    #[test]
    fn a_dropped_listener_leaves_no_waker() {
        let notify = Notify::default();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..3 {
            let mut waiting = Box::pin(notify.listen());
            assert_eq!(waiting.as_mut().poll(&mut cx), Poll::Pending);
        }
        assert_eq!(notify.wakers.borrow().len(), 0);
        let mut waiting = Box::pin(notify.listen());
        assert_eq!(waiting.as_mut().poll(&mut cx), Poll::Pending);
        notify.notify_all();
        assert_eq!(waiting.as_mut().poll(&mut cx), Poll::Ready(()));
    }
}
