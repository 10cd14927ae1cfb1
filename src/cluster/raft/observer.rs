//! An observer: a node that is not a voter (a broker-only node in a layout with dedicated
//! controllers). It takes no part in raft; its thread pulls committed entries (or the
//! snapshot, when they were compacted away) from a voter with `Fetch` frames — from the
//! leader once it knows it — and applies them to its machine in order. Requests are sent to
//! the leader as `ClientForward` frames and answered once this node has applied the index
//! the leader reports, exactly as on a voter.
//!
//! Observers keep nothing on disk: after a restart they fetch the snapshot and entries
//! again. Only committed entries are ever sent to them, so nothing they apply is undone.
//! One forwarded request is in flight at a time, and the loop waits for its answer.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::driver::{decode_batch, Event, Reply, Shared};
use super::transport::{ClientConnection, Frame, ReplyStatus};
use super::RaftError;
use crate::cluster::machine::MetadataMachine;

/// How long a fetch may take before the observer tries another voter.
const FETCH_TIMEOUT: Duration = Duration::from_millis(2000);
/// Requests waiting on an observer before new ones are refused.
const PENDING_REQUESTS_MAX: usize = 1024;

struct Pending {
    request: Vec<u8>,
    reply: Reply,
    deadline: Instant,
}

struct Waiter {
    index: u64,
    reply: Reply,
    response: Vec<u8>,
    deadline: Instant,
}

pub struct Observer {
    pub machine: Box<dyn MetadataMachine>,
    pub events: flume::Receiver<Event>,
    pub shared: Arc<Shared>,
    /// (raft id, address) of every voter.
    pub voters: Vec<(u64, SocketAddr)>,
    pub tick: Duration,
    pub request_timeout: Duration,
    applied: u64,
    leader: u64,
    next_voter: usize,
    fetch: Option<ClientConnection>,
    forward: Option<ClientConnection>,
    security: Arc<super::ControllerSecurity>,
    pending: VecDeque<Pending>,
    waiters: Vec<Waiter>,
    caught_up: bool,
}

impl Observer {
    pub fn new(
        machine: Box<dyn MetadataMachine>,
        events: flume::Receiver<Event>,
        shared: Arc<Shared>,
        voters: Vec<(u64, SocketAddr)>,
        tick: Duration,
        request_timeout: Duration,
        security: Arc<super::ControllerSecurity>,
    ) -> Observer {
        Observer {
            machine,
            events,
            shared,
            voters,
            tick,
            request_timeout,
            applied: 0,
            leader: 0,
            next_voter: 0,
            fetch: None,
            forward: None,
            security,
            pending: VecDeque::new(),
            waiters: Vec::new(),
            caught_up: false,
        }
    }

    fn addr_of(&self, id: u64) -> Option<SocketAddr> {
        self.voters.iter().find(|(v, _)| *v == id).map(|(_, a)| *a)
    }

    pub fn run(mut self) {
        let mut wait = Duration::ZERO;
        loop {
            if self.shared.shutdown.load(Ordering::Acquire) {
                break;
            }
            match self.events.recv_timeout(wait) {
                Ok(ev) => {
                    if !self.handle_event(ev) {
                        break;
                    }
                }
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => break,
            }
            while let Ok(ev) = self.events.try_recv() {
                if !self.handle_event(ev) {
                    return self.finish();
                }
            }
            let fetched = self.fetch_once();
            self.forward_one();
            self.settle(Instant::now());
            // More may be waiting right behind a full fetch; otherwise poll once a tick.
            wait = if fetched { Duration::ZERO } else { self.tick };
        }
        self.finish();
    }

    fn finish(mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        for p in self.pending.drain(..) {
            let _ = p.reply.send(Err(RaftError::Shutdown));
        }
        for w in self.waiters.drain(..) {
            let _ = w.reply.send(Err(RaftError::Shutdown));
        }
        self.shared.caught_up_changed.notify_all();
    }

    fn handle_event(&mut self, ev: Event) -> bool {
        match ev {
            Event::Shutdown => return false,
            Event::Request { request, reply } => {
                if self.pending.len() >= PENDING_REQUESTS_MAX {
                    let _ = reply.send(Err(RaftError::Overloaded));
                } else {
                    self.pending.push_back(Pending {
                        request,
                        reply,
                        deadline: Instant::now() + self.request_timeout,
                    });
                }
            }
            _ => {}
        }
        true
    }

    /// One fetch; returns whether it brought entries.
    fn fetch_once(&mut self) -> bool {
        // Read from the leader when it is known: its commit index is the one to catch up to.
        let want = self.addr_of(self.leader).or_else(|| {
            let a = self.voters.get(self.next_voter % self.voters.len().max(1));
            a.map(|(_, a)| *a)
        });
        let Some(want) = want else { return false };
        if self.fetch.as_ref().is_none_or(|c| c.addr != want) {
            self.fetch = Some(ClientConnection::new(want, self.security.clone()));
        }
        let Some(conn) = self.fetch.as_mut() else {
            return false;
        };
        let answer = conn.call(
            &Frame::Fetch {
                from_index: self.applied + 1,
            },
            FETCH_TIMEOUT,
        );
        let (leader, commit, snapshot, entries) = match answer {
            Ok(Frame::FetchReply {
                leader,
                commit,
                snapshot,
                entries,
            }) => (leader, commit, snapshot, entries),
            Ok(_) | Err(_) => {
                // Try the next voter; forget a leader we cannot reach.
                self.next_voter += 1;
                self.leader = 0;
                self.shared.leader.store(0, Ordering::Release);
                return false;
            }
        };
        self.leader = leader;
        self.shared.leader.store(leader, Ordering::Release);
        if let Some(snap) = snapshot {
            let index = snap.get_metadata().index;
            if index > self.applied {
                if let Err(e) = self.machine.restore(snap.get_data()) {
                    tracing::error!(error = %e, "observer cannot restore the metadata snapshot");
                    return false;
                }
                self.applied = index;
            }
        }
        let brought = !entries.is_empty();
        for e in entries {
            if e.index != self.applied + 1 {
                break;
            }
            if !e.get_data().is_empty() {
                match decode_batch(e.get_data()) {
                    Ok(batch) => {
                        for inner in batch {
                            self.machine.apply(e.index, inner);
                        }
                    }
                    Err(reason) => {
                        tracing::error!(index = e.index, %reason, "observer got a bad entry");
                        return false;
                    }
                }
            }
            self.applied = e.index;
        }
        self.shared.applied.store(self.applied, Ordering::Release);
        if !self.caught_up && leader != 0 && self.applied >= commit {
            self.caught_up = true;
            tracing::info!(applied = self.applied, "metadata observer caught up");
            self.shared.set_caught_up();
        }
        brought
    }

    /// Sends the oldest pending request to the leader and waits for its answer.
    fn forward_one(&mut self) {
        let Some(p) = self.pending.pop_front() else {
            return;
        };
        let now = Instant::now();
        if p.deadline <= now {
            let _ = p.reply.send(Err(RaftError::Timeout));
            return;
        }
        let Some(addr) = self.addr_of(self.leader) else {
            self.pending.push_front(p);
            return;
        };
        if self.forward.as_ref().is_none_or(|c| c.addr != addr) {
            self.forward = Some(ClientConnection::new(addr, self.security.clone()));
        }
        let Some(conn) = self.forward.as_mut() else {
            self.pending.push_front(p);
            return;
        };
        let answer = conn.call(
            &Frame::ClientForward {
                request: p.request.clone(),
            },
            p.deadline - now,
        );
        match answer {
            Ok(Frame::ForwardReply {
                status: ReplyStatus::Ok,
                index,
                response,
                ..
            }) => self.waiters.push(Waiter {
                index,
                reply: p.reply,
                response,
                deadline: p.deadline,
            }),
            Ok(Frame::ForwardReply {
                status: ReplyStatus::TooLarge,
                ..
            }) => {
                let _ = p.reply.send(Err(RaftError::TooLarge {
                    len: p.request.len(),
                    max: super::driver::ENTRY_BYTES_MAX,
                }));
            }
            // Not the leader any more, or no answer in time: the deadline decides.
            _ => self.pending.push_front(p),
        }
    }

    fn settle(&mut self, now: Instant) {
        let applied = self.applied;
        for w in std::mem::take(&mut self.waiters) {
            if w.index <= applied {
                let _ = w.reply.send(Ok(w.response));
            } else if w.deadline <= now {
                let _ = w.reply.send(Err(RaftError::Timeout));
            } else {
                self.waiters.push(w);
            }
        }
        while self.pending.front().is_some_and(|p| p.deadline <= now) {
            if let Some(p) = self.pending.pop_front() {
                let _ = p.reply.send(Err(RaftError::Timeout));
            }
        }
    }
}
