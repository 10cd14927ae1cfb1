//! The metadata log's own thread: it owns the raft-rs `RawNode`, the files and the machine,
//! and is the only code that touches them.
//!
//! Each turn it takes events (client requests, frames from peers, transport reports), ticks
//! raft every `tick_ms`, hands requests to the machine, and handles `Ready` in the order
//! raft-rs documents: send `messages`; install a snapshot; apply `committed_entries`; persist
//! `entries` then the `HardState` (fsynced) — only then send `persisted_messages`, which
//! promise that persistence (votes, append acks); `advance`; persist the new commit index;
//! send the `LightReady` messages and apply its committed entries.
//!
//! Invariants:
//! - The leader calls `handle_request` and `tick` only when everything in its log has been
//!   applied, one request at a time, so the machine always decides on the latest state.
//! - A request's answer is sent only after its entries are applied *here*, and a forwarded
//!   request's origin answers only after it has applied the leader's index itself.
//! - A proposal whose index is filled by another leader's entry (lost on a leadership change)
//!   is detected by the entry's term and retried, never answered as if it had committed.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ::raft::eraftpb::{ConfState, Entry, EntryType, Message, Snapshot};
use ::raft::{GetEntriesContext, RawNode, SnapshotStatus, StateRole, Storage};
use futures::channel::oneshot;

use super::storage::{DiskStorage, MemLog};
use super::transport::{Frame, ReplyStatus, Transport};
use super::RaftError;
use crate::clock::Clock;
use crate::cluster::machine::MetadataMachine;

/// Requests waiting for the leader (or for a leader) before new ones are refused.
pub const REQUEST_QUEUE_MAX: usize = 1024;
/// Forwarded requests remembered after they were answered, so a resent copy is answered
/// again instead of being carried out twice.
pub const ANSWERED_REMEMBERED_MAX: usize = 1024;
/// Largest raft entry proposed: it must fit in one frame with its message around it.
pub const ENTRY_BYTES_MAX: usize = super::transport::FRAME_BYTES_MAX - 4096;
/// Bytes of entries in one answer to an observer's fetch (at least one entry is sent).
pub const FETCH_BYTES_MAX: u64 = 1 << 20;
/// Events handled in one turn before raft's `Ready` is handled.
const EVENTS_PER_TURN_MAX: usize = 256;
/// Inner entries in one raft entry.
const BATCH_ENTRIES_MAX: usize = 1 << 20;
const BATCH_VERSION: u8 = 1;

pub type Reply = oneshot::Sender<Result<Vec<u8>, RaftError>>;

/// What the driver thread is told.
pub enum Event {
    Request {
        request: Vec<u8>,
        reply: Reply,
    },
    Frame(Frame),
    /// A frame from an observer (`Fetch` or `ClientForward`), answered on `reply`.
    Client {
        frame: Frame,
        reply: flume::Sender<Frame>,
    },
    SnapshotStatus {
        to: u64,
        ok: bool,
    },
    Unreachable {
        to: u64,
    },
    Shutdown,
}

/// State the driver publishes to `MetadataLog` handles on other threads.
pub struct Shared {
    /// Raft id of the leader, 0 when unknown.
    pub leader: AtomicU64,
    pub applied: AtomicU64,
    pub shutdown: Arc<AtomicBool>,
    pub caught_up: Mutex<bool>,
    pub caught_up_changed: Condvar,
}

impl Shared {
    pub fn set_caught_up(&self) {
        if let Ok(mut c) = self.caught_up.lock() {
            *c = true;
        }
        self.caught_up_changed.notify_all();
    }
}

pub struct DriverConfig {
    pub tick: Duration,
    pub election_ticks: usize,
    pub request_timeout: Duration,
    pub snapshot_every_entries: u64,
    /// Read for the controller's `now_ms`: monotonic milliseconds. Broker sessions and the
    /// rebalance interval are timeouts, so a wall-clock step (NTP, an operator) must not move
    /// them: with wall time, a step forward on the active controller expired every broker's
    /// session at once and fenced them all. The values never leave this process (a new
    /// active controller restarts every session), so the clock's origin does not matter.
    pub clock: Arc<dyn Clock>,
}

enum Origin {
    Local(Reply),
    /// Forwarded by peer `peer` (raft id) under its `request_id`.
    Remote {
        peer: u64,
        request_id: u64,
    },
    /// From an observer, answered on its connection.
    Conn(flume::Sender<Frame>),
    /// The caller was answered already (timed out); a late commit answers nobody.
    Abandoned,
}

struct Queued {
    request: Vec<u8>,
    origin: Origin,
    deadline: Instant,
}

/// A request the machine turned into entries, proposed at `index` in `term`.
struct Proposal {
    index: u64,
    term: u64,
    queued: Queued,
    response: Vec<u8>,
}

/// A local request sent to the leader, waiting for its reply.
struct Forwarded {
    request: Vec<u8>,
    reply: Reply,
    deadline: Instant,
    resend_at: Instant,
}

/// An answer held until this node has applied `index`.
struct Waiter {
    index: u64,
    reply: Reply,
    response: Vec<u8>,
    deadline: Instant,
}

/// Encodes the machine's entries for one request as one raft entry, so they commit together.
pub fn encode_batch(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + entries.iter().map(|e| e.len() + 4).sum::<usize>());
    out.push(BATCH_VERSION);
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e);
    }
    out
}

/// The inverse of [`encode_batch`]; committed data is checked, not trusted.
pub fn decode_batch(data: &[u8]) -> Result<Vec<&[u8]>, String> {
    fn u32_at(b: &[u8], at: usize) -> Option<usize> {
        let s = b.get(at..at + 4)?;
        Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize)
    }
    if data.first() != Some(&BATCH_VERSION) {
        return Err(format!("unknown batch version {:?}", data.first()));
    }
    let count = u32_at(data, 1).ok_or("short batch")?;
    if count > BATCH_ENTRIES_MAX {
        return Err(format!("batch of {count} entries"));
    }
    let mut at = 5;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let len = u32_at(data, at).ok_or("short batch")?;
        let entry = data.get(at + 4..at + 4 + len).ok_or("short batch")?;
        out.push(entry);
        at += 4 + len;
    }
    if at != data.len() {
        return Err("trailing bytes in batch".into());
    }
    Ok(out)
}

/// Tells an observer to send its request again (to the leader, once it knows it).
fn retry_frame() -> Frame {
    Frame::ForwardReply {
        request_id: 0,
        status: ReplyStatus::Retry,
        index: 0,
        response: Vec::new(),
    }
}

pub struct Driver {
    node: RawNode<MemLog>,
    disk: DiskStorage,
    machine: Box<dyn MetadataMachine>,
    transport: Option<Transport>,
    events: flume::Receiver<Event>,
    shared: Arc<Shared>,
    cfg: DriverConfig,
    conf_state: ConfState,
    self_id: u64,
    applied: u64,
    last_snapshot_index: u64,
    /// The commit index found on disk: catching up means applying at least this far.
    start_commit: u64,
    queue: VecDeque<Queued>,
    proposals: VecDeque<Proposal>,
    forwarded: HashMap<u64, Forwarded>,
    next_request_id: u64,
    waiters: Vec<Waiter>,
    /// ((origin, request id), index, response) of forwarded requests answered here.
    answered: VecDeque<((u64, u64), u64, Vec<u8>)>,
    is_leader: bool,
    /// `on_leadership(true)` was called and not yet undone.
    active: bool,
    catch_up_target: Option<u64>,
    read_index_sent_at: Option<Instant>,
    caught_up: bool,
}

impl Driver {
    /// The controller's time (see `DriverConfig::clock`).
    fn now_ms(&self) -> u64 {
        self.cfg.clock.monotonic_ms()
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        node: RawNode<MemLog>,
        disk: DiskStorage,
        machine: Box<dyn MetadataMachine>,
        transport: Option<Transport>,
        events: flume::Receiver<Event>,
        shared: Arc<Shared>,
        cfg: DriverConfig,
        conf_state: ConfState,
        self_id: u64,
        applied: u64,
        start_commit: u64,
    ) -> Driver {
        Driver {
            node,
            disk,
            machine,
            transport,
            events,
            shared,
            cfg,
            conf_state,
            self_id,
            applied,
            last_snapshot_index: applied,
            start_commit,
            queue: VecDeque::new(),
            proposals: VecDeque::new(),
            forwarded: HashMap::new(),
            // Ids differ across restarts of this node, so a leader's memory of answered
            // requests cannot match a new request by accident.
            next_request_id: rand::random::<u64>() >> 1,
            waiters: Vec::new(),
            answered: VecDeque::new(),
            is_leader: false,
            active: false,
            catch_up_target: None,
            read_index_sent_at: None,
            caught_up: false,
        }
    }

    /// Runs until shutdown or a storage failure; answers everything pending on the way out.
    pub fn run(mut self) {
        let mut next_tick = Instant::now() + self.cfg.tick;
        'outer: loop {
            if self.shared.shutdown.load(Ordering::Acquire) {
                break;
            }
            let wait = next_tick.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(wait) {
                Ok(ev) => {
                    if !self.handle_event(ev) {
                        break;
                    }
                }
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => break,
            }
            for _ in 0..EVENTS_PER_TURN_MAX {
                match self.events.try_recv() {
                    Ok(ev) => {
                        if !self.handle_event(ev) {
                            break 'outer;
                        }
                    }
                    Err(_) => break,
                }
            }
            let now = Instant::now();
            if now >= next_tick {
                next_tick = (next_tick + self.cfg.tick).max(now);
                self.node.tick();
                self.on_tick();
            }
            // A forwarded request's answer may name an index applied already.
            self.release_waiters();
            // Applying may make the leader idle again, which lets the next request in.
            loop {
                self.process_queue();
                match self.handle_ready() {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(e) => {
                        tracing::error!(error = %e, "metadata log stopped on a storage error");
                        break 'outer;
                    }
                }
            }
        }
        self.finish();
    }

    fn finish(mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.leader.store(0, Ordering::Release);
        if self.active {
            self.machine.on_leadership(false, self.now_ms());
        }
        for q in self.queue.drain(..) {
            if let Origin::Local(reply) = q.origin {
                let _ = reply.send(Err(RaftError::Shutdown));
            }
        }
        for p in self.proposals.drain(..) {
            if let Origin::Local(reply) = p.queued.origin {
                let _ = reply.send(Err(RaftError::Shutdown));
            }
        }
        for (_, f) in self.forwarded.drain() {
            let _ = f.reply.send(Err(RaftError::Shutdown));
        }
        for w in self.waiters.drain(..) {
            let _ = w.reply.send(Err(RaftError::Shutdown));
        }
        self.shared.caught_up_changed.notify_all();
        if let Some(t) = self.transport.take() {
            t.close();
        }
    }

    fn handle_event(&mut self, ev: Event) -> bool {
        match ev {
            Event::Shutdown => return false,
            Event::Request { request, reply } => {
                if self.queue.len() >= REQUEST_QUEUE_MAX {
                    let _ = reply.send(Err(RaftError::Overloaded));
                } else {
                    self.queue.push_back(Queued {
                        request,
                        origin: Origin::Local(reply),
                        deadline: Instant::now() + self.cfg.request_timeout,
                    });
                }
            }
            Event::Frame(Frame::Raft(m)) => self.step(m),
            Event::Frame(Frame::Forward {
                origin,
                request_id,
                request,
            }) => self.on_forward(origin, request_id, request),
            Event::Frame(Frame::ForwardReply {
                request_id,
                status,
                index,
                response,
            }) => {
                if let Some(mut f) = self.forwarded.remove(&request_id) {
                    match status {
                        ReplyStatus::Ok => self.waiters.push(Waiter {
                            index,
                            reply: f.reply,
                            response,
                            deadline: f.deadline,
                        }),
                        ReplyStatus::Retry => {
                            f.resend_at = Instant::now() + self.cfg.tick;
                            self.forwarded.insert(request_id, f);
                        }
                        ReplyStatus::TooLarge => {
                            let _ = f.reply.send(Err(RaftError::TooLarge {
                                len: 0,
                                max: ENTRY_BYTES_MAX,
                            }));
                        }
                    }
                }
            }
            Event::Client {
                frame: Frame::Fetch { from_index },
                reply,
            } => {
                let _ = reply.try_send(self.fetch_reply(from_index));
            }
            Event::Client {
                frame: Frame::ClientForward { request },
                reply,
            } => {
                if !self.is_leader || self.queue.len() >= REQUEST_QUEUE_MAX {
                    let _ = reply.try_send(retry_frame());
                } else {
                    self.queue.push_back(Queued {
                        request,
                        origin: Origin::Conn(reply),
                        deadline: Instant::now() + self.cfg.request_timeout,
                    });
                }
            }
            Event::Client { .. } => {}
            // Observer frames are only meaningful as `Client` events (they need an answer).
            Event::Frame(Frame::Fetch { .. } | Frame::FetchReply { .. })
            | Event::Frame(Frame::ClientForward { .. }) => {}
            Event::SnapshotStatus { to, ok } => {
                let status = if ok {
                    SnapshotStatus::Finish
                } else {
                    SnapshotStatus::Failure
                };
                self.node.report_snapshot(to, status);
            }
            Event::Unreachable { to } => self.node.report_unreachable(to),
        }
        true
    }

    fn step(&mut self, m: Message) {
        if m.to != self.self_id {
            tracing::debug!(to = m.to, "dropping a raft message meant for another node");
            return;
        }
        if let Err(e) = self.node.step(m) {
            tracing::debug!(error = %e, "metadata log ignored a raft message");
        }
    }

    fn on_forward(&mut self, origin: u64, request_id: u64, request: Vec<u8>) {
        // The origin resends after a while; the first copy may still be in progress here.
        let same = |o: &Origin| matches!(o, Origin::Remote { peer, request_id: r } if *peer == origin && *r == request_id);
        if self.queue.iter().any(|q| same(&q.origin))
            || self.proposals.iter().any(|p| same(&p.queued.origin))
        {
            return;
        }
        if let Some((_, index, response)) = self
            .answered
            .iter()
            .find(|(key, _, _)| *key == (origin, request_id))
        {
            let (index, response) = (*index, response.clone());
            self.reply_remote(origin, request_id, ReplyStatus::Ok, index, response);
            return;
        }
        if !self.is_leader || self.queue.len() >= REQUEST_QUEUE_MAX {
            self.reply_remote(origin, request_id, ReplyStatus::Retry, 0, Vec::new());
            return;
        }
        self.queue.push_back(Queued {
            request,
            origin: Origin::Remote {
                peer: origin,
                request_id,
            },
            deadline: Instant::now() + self.cfg.request_timeout,
        });
    }

    fn reply_remote(
        &self,
        peer: u64,
        request_id: u64,
        status: ReplyStatus,
        index: u64,
        response: Vec<u8>,
    ) {
        if let Some(t) = &self.transport {
            t.send(
                peer,
                &Frame::ForwardReply {
                    request_id,
                    status,
                    index,
                    response,
                },
            );
        }
    }

    /// Committed entries from `from_index`, or the snapshot if they were compacted away.
    fn fetch_reply(&self, from_index: u64) -> Frame {
        let leader = self.leader();
        let commit = self.node.raft.raft_log.committed;
        let store = self.node.store();
        let first = store.first_index().unwrap_or(1);
        if from_index < first && !store.snapshot.is_empty() {
            return Frame::FetchReply {
                leader,
                commit,
                snapshot: Some(store.snapshot.clone()),
                entries: Vec::new(),
            };
        }
        let high = commit.min(store.last_index().unwrap_or(0));
        let entries = if from_index >= first && from_index <= high {
            store
                .entries(
                    from_index,
                    high + 1,
                    FETCH_BYTES_MAX,
                    GetEntriesContext::empty(false),
                )
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        Frame::FetchReply {
            leader,
            commit,
            snapshot: None,
            entries,
        }
    }

    fn leader(&self) -> u64 {
        self.node.raft.leader_id
    }

    /// The leader has applied everything in its log, including its own term's first entry.
    fn idle_leader(&self) -> bool {
        self.is_leader && self.applied >= self.node.raft.raft_log.last_index()
    }

    fn on_tick(&mut self) {
        let now = Instant::now();
        if self.active && self.idle_leader() {
            let entries = self.machine.tick(self.now_ms());
            if !entries.is_empty() {
                if let Err(e) = self.node.propose(Vec::new(), encode_batch(&entries)) {
                    tracing::warn!(error = %e, "controller tick entries were not proposed");
                }
            }
        }
        // Catching up: ask the leader for its commit index (a read index) until applied.
        if !self.caught_up && self.leader() != 0 {
            let retry = self.cfg.tick * self.cfg.election_ticks as u32;
            if self
                .read_index_sent_at
                .is_none_or(|at| now.duration_since(at) >= retry)
            {
                self.node.read_index(b"catch-up".to_vec());
                self.read_index_sent_at = Some(now);
            }
        }
        self.expire(now);
        self.resend_forwarded(now);
    }

    fn expire(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.queue.len() {
            if self.queue[i].deadline <= now {
                if let Some(q) = self.queue.remove(i) {
                    if let Origin::Local(reply) = q.origin {
                        let _ = reply.send(Err(RaftError::Timeout));
                    }
                }
            } else {
                i += 1;
            }
        }
        // Proposals stay until their index is applied (they may still commit), but their
        // callers are answered on time; a late commit then answers nobody.
        for p in self.proposals.iter_mut() {
            if p.queued.deadline <= now {
                if let Origin::Local(reply) =
                    std::mem::replace(&mut p.queued.origin, Origin::Abandoned)
                {
                    let _ = reply.send(Err(RaftError::Timeout));
                }
            }
        }
        let expired: Vec<u64> = self
            .forwarded
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            if let Some(f) = self.forwarded.remove(&id) {
                let _ = f.reply.send(Err(RaftError::Timeout));
            }
        }
        let (late, keep): (Vec<_>, Vec<_>) =
            self.waiters.drain(..).partition(|w| w.deadline <= now);
        self.waiters = keep;
        for w in late {
            let _ = w.reply.send(Err(RaftError::Timeout));
        }
    }

    fn resend_forwarded(&mut self, now: Instant) {
        let due: Vec<u64> = self
            .forwarded
            .iter()
            .filter(|(_, f)| f.resend_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(mut f) = self.forwarded.remove(&id) else {
                continue;
            };
            if self.is_leader {
                self.queue.push_front(Queued {
                    request: f.request,
                    origin: Origin::Local(f.reply),
                    deadline: f.deadline,
                });
                continue;
            }
            f.resend_at = now + self.resend_interval();
            self.send_forward(id, &f.request);
            self.forwarded.insert(id, f);
        }
    }

    /// How long a forwarded request waits for its reply before it is sent again (to whoever
    /// leads by then); the leader drops duplicates it still holds.
    fn resend_interval(&self) -> Duration {
        self.cfg.tick * (2 * self.cfg.election_ticks as u32)
    }

    fn send_forward(&self, request_id: u64, request: &[u8]) {
        let leader = self.leader();
        if leader == 0 || leader == self.self_id {
            return;
        }
        if let Some(t) = &self.transport {
            t.send(
                leader,
                &Frame::Forward {
                    origin: self.self_id,
                    request_id,
                    request: request.to_vec(),
                },
            );
        }
    }

    /// Moves queued requests on: the idle leader hands the next one to the machine; a
    /// follower forwards local ones to the leader and turns remote ones away.
    fn process_queue(&mut self) {
        if self.is_leader && !self.active && self.idle_leader() {
            self.active = true;
            tracing::info!(
                node = self.self_id - 1,
                "this node is the active controller"
            );
            self.machine.on_leadership(true, self.now_ms());
        }
        while let Some(q) = self.queue.pop_front() {
            if self.is_leader {
                if !self.active || !self.idle_leader() {
                    self.queue.push_front(q);
                    return;
                }
                let (entries, response) = self.machine.handle_request(&q.request, self.now_ms());
                if entries.is_empty() {
                    let index = self.applied;
                    self.answer(q.origin, index, response);
                    continue;
                }
                let data = encode_batch(&entries);
                if data.len() > ENTRY_BYTES_MAX {
                    tracing::warn!(bytes = data.len(), "metadata request too large to propose");
                    self.reject_too_large(q.origin, data.len());
                    continue;
                }
                if let Err(e) = self.node.propose(Vec::new(), data) {
                    tracing::warn!(error = %e, "metadata log proposal dropped; will retry");
                    self.queue.push_front(q);
                    return;
                }
                let index = self.node.raft.raft_log.last_index();
                let term = self.node.raft.term;
                self.proposals.push_back(Proposal {
                    index,
                    term,
                    queued: q,
                    response,
                });
                // The next request waits until this one is applied.
                return;
            }
            match q.origin {
                Origin::Abandoned => {}
                Origin::Conn(reply) => {
                    let _ = reply.try_send(retry_frame());
                }
                Origin::Remote { peer, request_id } => {
                    self.reply_remote(peer, request_id, ReplyStatus::Retry, 0, Vec::new());
                }
                Origin::Local(reply) => {
                    if self.leader() == 0 {
                        self.queue.push_front(Queued {
                            request: q.request,
                            origin: Origin::Local(reply),
                            deadline: q.deadline,
                        });
                        return;
                    }
                    let id = self.next_request_id;
                    self.next_request_id += 1;
                    self.send_forward(id, &q.request);
                    self.forwarded.insert(
                        id,
                        Forwarded {
                            request: q.request,
                            reply,
                            deadline: q.deadline,
                            resend_at: Instant::now() + self.resend_interval(),
                        },
                    );
                }
            }
        }
    }

    fn reject_too_large(&mut self, origin: Origin, len: usize) {
        match origin {
            Origin::Local(reply) => {
                let _ = reply.send(Err(RaftError::TooLarge {
                    len,
                    max: ENTRY_BYTES_MAX,
                }));
            }
            Origin::Conn(reply) => {
                let _ = reply.try_send(Frame::ForwardReply {
                    request_id: 0,
                    status: ReplyStatus::TooLarge,
                    index: 0,
                    response: Vec::new(),
                });
            }
            Origin::Remote { peer, request_id } => {
                self.reply_remote(peer, request_id, ReplyStatus::TooLarge, 0, Vec::new())
            }
            Origin::Abandoned => {}
        }
    }

    /// Answers a request whose entries are applied here up to `index`.
    fn answer(&mut self, origin: Origin, index: u64, response: Vec<u8>) {
        match origin {
            Origin::Local(reply) => {
                let _ = reply.send(Ok(response));
            }
            Origin::Abandoned => {}
            Origin::Conn(reply) => {
                let _ = reply.try_send(Frame::ForwardReply {
                    request_id: 0,
                    status: ReplyStatus::Ok,
                    index,
                    response,
                });
            }
            Origin::Remote { peer, request_id } => {
                if self.answered.len() >= ANSWERED_REMEMBERED_MAX {
                    self.answered.pop_front();
                }
                self.answered
                    .push_back(((peer, request_id), index, response.clone()));
                self.reply_remote(peer, request_id, ReplyStatus::Ok, index, response)
            }
        }
    }

    fn send_messages(&self, msgs: Vec<Message>) {
        let Some(t) = &self.transport else { return };
        for m in msgs {
            let to = m.to;
            t.send(to, &Frame::Raft(m));
        }
    }

    fn on_role(&mut self, leader_id: u64, role: StateRole) {
        let previous = self.shared.leader.swap(leader_id, Ordering::AcqRel);
        if previous != leader_id && leader_id != 0 {
            // Requests sent to the old leader may be lost with it: send them again now.
            let now = Instant::now();
            for f in self.forwarded.values_mut() {
                f.resend_at = now;
            }
        }
        let leads = role == StateRole::Leader;
        if leads != self.is_leader {
            tracing::info!(
                node = self.self_id - 1,
                leader = leader_id.checked_sub(1),
                term = self.node.raft.term,
                "metadata log leadership changed"
            );
        }
        if !leads && self.active {
            self.active = false;
            self.machine.on_leadership(false, self.now_ms());
        }
        if !leads && self.is_leader {
            // Requests forwarded to us can no longer be decided here: their origins retry.
            let mut keep = VecDeque::new();
            for q in std::mem::take(&mut self.queue) {
                match q.origin {
                    Origin::Remote { peer, request_id } => {
                        self.reply_remote(peer, request_id, ReplyStatus::Retry, 0, Vec::new())
                    }
                    Origin::Abandoned => {}
                    Origin::Conn(reply) => {
                        let _ = reply.try_send(retry_frame());
                    }
                    Origin::Local(_) => keep.push_back(q),
                }
            }
            self.queue = keep;
        }
        self.is_leader = leads;
    }

    /// Handles one `Ready`; returns whether there was one.
    fn handle_ready(&mut self) -> Result<bool, RaftError> {
        if !self.node.has_ready() {
            return Ok(false);
        }
        let mut rd = self.node.ready();
        if let Some(ss) = rd.ss() {
            let (leader_id, role) = (ss.leader_id, ss.raft_state);
            self.on_role(leader_id, role);
        }
        self.send_messages(rd.take_messages());
        if !rd.snapshot().is_empty() {
            self.install_snapshot(rd.snapshot().clone())?;
        }
        self.apply(rd.take_committed_entries())?;
        if !rd.entries().is_empty() {
            self.disk.append(rd.entries())?;
            self.node.mut_store().mem.wl().append(rd.entries())?;
        }
        if let Some(hs) = rd.hs() {
            self.disk.save_state(hs, &self.conf_state)?;
            self.node.mut_store().mem.wl().set_hardstate(hs.clone());
        }
        for rs in rd.take_read_states() {
            let target = rs.index.max(self.start_commit);
            self.catch_up_target = Some(self.catch_up_target.unwrap_or(0).max(target));
        }
        // Votes and append acks promise what was just fsynced above.
        self.send_messages(rd.take_persisted_messages());
        let mut light = self.node.advance(rd);
        if let Some(commit) = light.commit_index() {
            let mut hs = self.node.store().mem.rl().hard_state().clone();
            hs.commit = commit;
            self.disk.save_state(&hs, &self.conf_state)?;
            self.node.mut_store().mem.wl().set_hardstate(hs);
        }
        self.send_messages(light.take_messages());
        self.apply(light.take_committed_entries())?;
        self.node.advance_apply();
        self.after_apply()?;
        Ok(true)
    }

    fn install_snapshot(&mut self, snap: Snapshot) -> Result<(), RaftError> {
        let meta = snap.get_metadata().clone();
        tracing::info!(
            index = meta.index,
            term = meta.term,
            "installing a metadata snapshot from the leader"
        );
        self.machine
            .restore(snap.get_data())
            .map_err(RaftError::Machine)?;
        // The snapshot is durable before the log that preceded it is dropped.
        self.disk.save_snapshot(&snap)?;
        self.node
            .mut_store()
            .mem
            .wl()
            .apply_snapshot(snap.clone())?;
        self.disk.rewrite_log(&[])?;
        self.conf_state = meta.get_conf_state().clone();
        let hs = self.node.store().mem.rl().hard_state().clone();
        self.disk.save_state(&hs, &self.conf_state)?;
        self.node.mut_store().snapshot = snap;
        self.applied = meta.index;
        self.last_snapshot_index = meta.index;
        self.shared.applied.store(meta.index, Ordering::Release);
        // Whether proposals the snapshot covers committed is unknown: they are answered
        // with a timeout, never retried blindly (that could apply them twice).
        while self
            .proposals
            .front()
            .is_some_and(|p| p.index <= meta.index)
        {
            if let Some(p) = self.proposals.pop_front() {
                if let Origin::Local(reply) = p.queued.origin {
                    let _ = reply.send(Err(RaftError::Timeout));
                }
            }
        }
        Ok(())
    }

    fn apply(&mut self, entries: Vec<Entry>) -> Result<(), RaftError> {
        for e in entries {
            if e.index <= self.applied {
                continue;
            }
            match e.get_entry_type() {
                EntryType::EntryNormal if e.get_data().is_empty() => {}
                EntryType::EntryNormal => {
                    let batch =
                        decode_batch(e.get_data()).map_err(|reason| RaftError::Corrupt {
                            path: std::path::PathBuf::from(format!("<entry {}>", e.index)),
                            reason,
                        })?;
                    for inner in batch {
                        self.machine.apply(e.index, inner);
                    }
                }
                other => {
                    tracing::warn!(index = e.index, ?other, "ignoring a configuration entry");
                }
            }
            self.applied = e.index;
            self.shared.applied.store(e.index, Ordering::Release);
            self.complete_proposals(e.index, e.term);
        }
        Ok(())
    }

    /// Settles proposals at or below `index`, which now holds an entry of `term`.
    fn complete_proposals(&mut self, index: u64, term: u64) {
        while self.proposals.front().is_some_and(|p| p.index <= index) {
            let Some(p) = self.proposals.pop_front() else {
                break;
            };
            if p.index == index && term == p.term {
                self.answer(p.queued.origin, index, p.response);
                continue;
            }
            // Another leader's entry took this index: the request never took effect.
            tracing::debug!(index = p.index, "metadata proposal lost to a leader change");
            match p.queued.origin {
                Origin::Abandoned => {}
                origin => self.queue.push_front(Queued {
                    request: p.queued.request,
                    origin,
                    deadline: p.queued.deadline,
                }),
            }
        }
    }

    /// Answers forwarded requests whose index this node has applied.
    fn release_waiters(&mut self) {
        let applied = self.applied;
        if self.waiters.iter().all(|w| w.index > applied) {
            return;
        }
        let (ready, waiting): (Vec<_>, Vec<_>) =
            self.waiters.drain(..).partition(|w| w.index <= applied);
        self.waiters = waiting;
        for w in ready {
            let _ = w.reply.send(Ok(w.response));
        }
    }

    fn after_apply(&mut self) -> Result<(), RaftError> {
        let applied = self.applied;
        self.release_waiters();
        if !self.caught_up && self.catch_up_target.is_some_and(|t| applied >= t) {
            self.caught_up = true;
            tracing::info!(applied, "metadata log caught up");
            self.shared.set_caught_up();
        }
        self.maybe_snapshot()
    }

    /// Every `snapshot_every_entries` applied entries: snapshot the machine, then drop the
    /// log before the snapshot, in memory and on disk.
    fn maybe_snapshot(&mut self) -> Result<(), RaftError> {
        let every = self.cfg.snapshot_every_entries;
        if every == 0 || self.applied < self.last_snapshot_index + every {
            return Ok(());
        }
        let index = self.applied;
        let term = self.node.store().term(index)?;
        let mut snap = Snapshot::default();
        snap.set_data(self.machine.snapshot().into());
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        self.disk.save_snapshot(&snap)?;
        // Keep the entry at `index` so MemStorage still knows its term.
        self.node.mut_store().mem.wl().compact(index)?;
        self.node.mut_store().snapshot = snap;
        let store = self.node.store();
        let (first, last) = (store.first_index()?, store.last_index()?);
        let kept = store.entries(first, last + 1, None, GetEntriesContext::empty(false))?;
        self.disk.rewrite_log(&kept)?;
        self.last_snapshot_index = index;
        tracing::debug!(index, kept = kept.len(), "metadata log compacted");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The controller's clock (broker sessions, the leader-rebalance interval) is monotonic
    /// time counted from the process start, not the wall clock: a wall-clock step on the
    /// active controller must not expire every broker's session at once. A wall-clock
    /// reading is about 1.7e12 ms; a monotonic one from this process's start is far below.
    #[test]
    fn controller_clock_is_monotonic_not_wall_time() {
        let ten_years_ms = 10 * 365 * 24 * 3600 * 1000u64;
        assert!(
            crate::clock::SystemClock.monotonic_ms() < ten_years_ms,
            "the controller reads the wall clock"
        );
    }

    /// Batches round-trip, and malformed committed data is an error, not a panic.
    #[test]
    fn batch_round_trip_and_garbage() {
        let entries = vec![b"a".to_vec(), Vec::new(), b"ccc".to_vec()];
        let data = encode_batch(&entries);
        let back = decode_batch(&data).expect("decode");
        assert_eq!(back, vec![&b"a"[..], &b""[..], &b"ccc"[..]]);
        assert!(decode_batch(&data[..data.len() - 1]).is_err());
        assert!(decode_batch(&[2, 0, 0, 0, 0]).is_err());
        assert!(decode_batch(&[1, 255, 255, 255, 255]).is_err());
        let mut trailing = data.clone();
        trailing.push(0);
        assert!(decode_batch(&trailing).is_err());
    }
}
