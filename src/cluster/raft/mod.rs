//! The metadata log: a Raft-replicated log (raft-rs) that drives a [`MetadataMachine`].
//!
//! [`MetadataLog`] is a cheap handle; the work happens on one dedicated thread (`driver`)
//! that owns the raft-rs `RawNode`, the files (`storage`) and the machine, and on the
//! transport's threads (`transport`). Requests go to the leader — directly, or forwarded over
//! TCP — which asks the machine for entries, proposes them as one raft entry (so they commit
//! atomically), and answers once they are applied; the origin answers its caller once *it*
//! has applied that index too, so a read of local state right after sees the change.
//!
//! Kafka node ids start at 0 and raft-rs ids at 1: raft id = node id + 1, everywhere inside.
//!
//! Faults survived: kill -9 (entries, hard state, conf state and snapshots are fsynced before
//! anything depends on them; a torn log tail is truncated at start), loss of a minority of
//! voters, lost or duplicated frames, leader changes during a request (it is retried until
//! `request_timeout_ms`). A node that is not among the voters runs as an observer
//! (`observer`): it pulls committed entries from the voters and forwards its requests.
//! Not supported yet: changing the voter set at run time.

mod driver;
mod observer;
mod secure;
mod storage;
mod transport;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ::raft::eraftpb::{ConfState, Snapshot};
use ::raft::storage::MemStorage;
use ::raft::RawNode;

use crate::clock::{Clock, SystemClock};
use crate::cluster::machine::MetadataMachine;
use driver::{Driver, DriverConfig, Event, Shared};
pub use secure::ControllerSecurity;
use storage::{DiskStorage, MemLog};
use transport::{Transport, FRAME_BYTES_MAX};

/// Queued events (requests, frames from peers) before frames are dropped and requests wait.
pub const EVENT_QUEUE_MAX: usize = 4096;
/// Largest request accepted (it must fit in a forwarded frame with room for its header).
pub const REQUEST_BYTES_MAX: usize = FRAME_BYTES_MAX - 64;
/// raft-rs flow control: bytes of entries per append message, and appends in flight.
const RAFT_MSG_BYTES_MAX: u64 = 1 << 20;
const RAFT_INFLIGHT_MSGS_MAX: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    #[error("metadata log I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("metadata log request timed out")]
    Timeout,
    #[error("this node is not a voter of the metadata log")]
    NotVoter,
    #[error("the metadata log is shut down")]
    Shutdown,
    #[error("metadata log file {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("metadata log transport: {0}")]
    Transport(String),
    #[error("raft: {0}")]
    Raft(#[from] ::raft::Error),
    #[error("metadata machine: {0}")]
    Machine(String),
    #[error("bad metadata log config: {0}")]
    Config(String),
    #[error("the metadata log has too many requests waiting")]
    Overloaded,
    #[error("{len} bytes exceed the limit of {max}")]
    TooLarge { len: usize, max: usize },
}

#[derive(Debug, Clone)]
pub struct RaftConfig {
    /// Kafka node.id (>= 0); raft-rs sees node_id + 1.
    pub node_id: u64,
    /// `--controller-listen`; None = a single voter with no network.
    pub listen: Option<SocketAddr>,
    /// `--controller-voters 1@h:p,2@h:p,3@h:p`; empty = just this node.
    pub voters: Vec<(u64, SocketAddr)>,
    /// `<data>/strata.meta/raft`.
    pub dir: PathBuf,
    pub tick_ms: u64,
    /// Election timeout in ticks (raft-rs randomises it in [n, 2n)).
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    /// Snapshot and compact after this many applied entries since the last snapshot (0 = never).
    pub snapshot_every_entries: u64,
    pub request_timeout_ms: u64,
    /// The controller's clock: its monotonic time drives broker sessions and the
    /// leader-rebalance interval (`Controller::tick`, `handle_request`).
    pub clock: Arc<dyn Clock>,
    /// How connections on the controller quorum's port are secured (both ways).
    pub security: Arc<ControllerSecurity>,
}

impl RaftConfig {
    /// A single-voter log in `dir` with the usual timings.
    pub fn single(node_id: u64, dir: PathBuf) -> RaftConfig {
        RaftConfig {
            node_id,
            listen: None,
            voters: Vec::new(),
            dir,
            tick_ms: 100,
            election_ticks: 10,
            heartbeat_ticks: 2,
            snapshot_every_entries: 1000,
            request_timeout_ms: 10_000,
            clock: SystemClock::shared(),
            security: ControllerSecurity::plaintext(),
        }
    }
}

struct Threads {
    driver: Option<JoinHandle<()>>,
    listener: Option<JoinHandle<()>>,
}

struct Inner {
    events: flume::Sender<Event>,
    shared: Arc<Shared>,
    threads: Mutex<Threads>,
    listen_addr: Option<SocketAddr>,
    is_voter: bool,
}

/// A handle on the metadata log; clones share it.
#[derive(Clone)]
pub struct MetadataLog {
    inner: Arc<Inner>,
}

/// Forwards raft-rs's slog records to `tracing`, with their key-values.
struct TracingDrain;

struct KvText(String);

impl slog::Serializer for KvText {
    fn emit_arguments(&mut self, key: slog::Key, val: &std::fmt::Arguments) -> slog::Result {
        use std::fmt::Write;
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record, values: &slog::OwnedKVList) -> Result<(), slog::Never> {
        use slog::KV;
        let mut kv = KvText(String::new());
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let msg = record.msg();
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{msg}{}", kv.0)
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Info => tracing::info!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Debug => tracing::debug!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Trace => tracing::trace!(target: "raft", "{msg}{}", kv.0),
        }
        Ok(())
    }
}

fn raft_id(node_id: u64) -> u64 {
    node_id + 1
}

impl MetadataLog {
    /// Opens the log in `cfg.dir`, restores the machine from the snapshot and log found
    /// there, and starts the raft thread (and, with `listen`, the network).
    pub fn start(
        cfg: RaftConfig,
        machine: Box<dyn MetadataMachine>,
    ) -> Result<MetadataLog, RaftError> {
        let listener = match cfg.listen {
            Some(addr) => Some(TcpListener::bind(addr)?),
            None => None,
        };
        Self::start_with_listener(cfg, machine, listener)
    }

    /// As [`MetadataLog::start`], on an already bound listener (tests bind port 0 first).
    pub(crate) fn start_with_listener(
        cfg: RaftConfig,
        mut machine: Box<dyn MetadataMachine>,
        listener: Option<TcpListener>,
    ) -> Result<MetadataLog, RaftError> {
        if cfg.tick_ms == 0 || cfg.heartbeat_ticks == 0 || cfg.election_ticks <= cfg.heartbeat_ticks
        {
            return Err(RaftError::Config(
                "need tick_ms > 0 and election_ticks > heartbeat_ticks > 0".into(),
            ));
        }
        let self_id = raft_id(cfg.node_id);
        let voters: Vec<u64> = if cfg.voters.is_empty() {
            vec![self_id]
        } else {
            cfg.voters.iter().map(|&(id, _)| raft_id(id)).collect()
        };
        if !voters.contains(&self_id) {
            return Self::start_observer(&cfg, machine);
        }
        let peers: Vec<(u64, SocketAddr)> = cfg
            .voters
            .iter()
            .map(|&(id, addr)| (raft_id(id), addr))
            .filter(|&(id, _)| id != self_id)
            .collect();
        if !peers.is_empty() && listener.is_none() {
            return Err(RaftError::Config(
                "several voters need a controller listen address".into(),
            ));
        }

        let (mut disk, recovered) = DiskStorage::open(&cfg.dir)?;
        let mem = MemStorage::new();
        let mut snapshot = Snapshot::default();
        if let Some(snap) = recovered.snapshot {
            machine
                .restore(snap.get_data())
                .map_err(RaftError::Machine)?;
            mem.wl().apply_snapshot(snap.clone())?;
            snapshot = snap;
        }
        let snap_index = snapshot.get_metadata().index;
        let fresh = recovered.hard_state.is_none() && snapshot.is_empty();
        let conf_state = match (&recovered.conf_state, snapshot.is_empty()) {
            (Some(cs), _) => cs.clone(),
            (None, false) => snapshot.get_metadata().get_conf_state().clone(),
            (None, true) => ConfState::from((voters.clone(), Vec::<u64>::new())),
        };
        let entries: Vec<_> = recovered
            .entries
            .into_iter()
            .filter(|e| e.index > snap_index)
            .collect();
        let corrupt = |reason: String| RaftError::Corrupt {
            path: cfg.dir.clone(),
            reason,
        };
        if let Some(first) = entries.first() {
            if first.index != snap_index + 1 {
                return Err(corrupt(format!(
                    "log starts at {} after a snapshot at {snap_index}",
                    first.index
                )));
            }
        }
        mem.wl().append(&entries)?;
        let last_index = entries.last().map_or(snap_index, |e| e.index);
        let mut hs = recovered.hard_state.unwrap_or_default();
        // A snapshot may be taken before the commit index that covers it is saved.
        hs.commit = hs.commit.max(snap_index);
        if hs.commit > last_index {
            return Err(corrupt(format!(
                "commit index {} beyond the last entry {last_index}",
                hs.commit
            )));
        }
        mem.wl().set_hardstate(hs.clone());
        mem.wl().set_conf_state(conf_state.clone());
        if fresh {
            disk.save_state(&hs, &conf_state)?;
        }
        if conf_state.voters != voters {
            tracing::warn!(
                configured = ?voters,
                stored = ?conf_state.voters,
                "metadata log voters differ from the configured ones; keeping the stored ones"
            );
        }
        let single_voter = conf_state.voters == [self_id];

        let raft_cfg = ::raft::Config {
            id: self_id,
            election_tick: cfg.election_ticks,
            heartbeat_tick: cfg.heartbeat_ticks,
            applied: snap_index,
            max_size_per_msg: RAFT_MSG_BYTES_MAX,
            max_inflight_msgs: RAFT_INFLIGHT_MSGS_MAX,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        raft_cfg.validate()?;
        let logger = slog::Logger::root(slog::Fuse(TracingDrain), slog::o!());
        let store = MemLog { mem, snapshot };
        let mut node = RawNode::new(&raft_cfg, store, &logger)?;
        if single_voter {
            // Nobody else can vote: become leader now rather than after an election timeout.
            node.campaign()?;
        }

        let shutdown = Arc::new(AtomicBool::new(false));
        let (tx, rx) = flume::bounded(EVENT_QUEUE_MAX);
        let transport = if peers.is_empty() {
            None
        } else {
            Some(Transport::new(
                &peers,
                tx.clone(),
                shutdown.clone(),
                cfg.security.clone(),
            )?)
        };
        let shared = Arc::new(Shared {
            leader: AtomicU64::new(0),
            applied: AtomicU64::new(snap_index),
            shutdown: shutdown.clone(),
            caught_up: Mutex::new(false),
            caught_up_changed: Condvar::new(),
        });
        let listen_addr = match &listener {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let listener_thread = match listener {
            Some(l) => Some(transport::spawn_listener(
                l,
                tx.clone(),
                shutdown.clone(),
                cfg.security.clone(),
            )?),
            None => None,
        };
        let driver = Driver::new(
            node,
            disk,
            machine,
            transport,
            rx,
            shared.clone(),
            DriverConfig {
                tick: Duration::from_millis(cfg.tick_ms),
                election_ticks: cfg.election_ticks,
                request_timeout: Duration::from_millis(cfg.request_timeout_ms),
                snapshot_every_entries: cfg.snapshot_every_entries,
                clock: cfg.clock.clone(),
            },
            conf_state,
            self_id,
            snap_index,
            hs.commit,
        );
        let driver_thread = std::thread::Builder::new()
            .name(format!("raft-{}", cfg.node_id))
            .spawn(move || driver.run())?;
        Ok(MetadataLog {
            inner: Arc::new(Inner {
                events: tx,
                shared,
                threads: Mutex::new(Threads {
                    driver: Some(driver_thread),
                    listener: listener_thread,
                }),
                listen_addr,
                is_voter: true,
            }),
        })
    }

    /// A node outside the voter set follows the log without voting (see `observer`).
    fn start_observer(
        cfg: &RaftConfig,
        machine: Box<dyn MetadataMachine>,
    ) -> Result<MetadataLog, RaftError> {
        let (tx, rx) = flume::bounded(EVENT_QUEUE_MAX);
        let shared = Arc::new(Shared {
            leader: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            shutdown: Arc::new(AtomicBool::new(false)),
            caught_up: Mutex::new(false),
            caught_up_changed: Condvar::new(),
        });
        let voters = cfg
            .voters
            .iter()
            .map(|&(id, addr)| (raft_id(id), addr))
            .collect();
        let observer = observer::Observer::new(
            machine,
            rx,
            shared.clone(),
            voters,
            Duration::from_millis(cfg.tick_ms),
            Duration::from_millis(cfg.request_timeout_ms),
            cfg.security.clone(),
        );
        let thread = std::thread::Builder::new()
            .name(format!("raft-observer-{}", cfg.node_id))
            .spawn(move || observer.run())?;
        Ok(MetadataLog {
            inner: Arc::new(Inner {
                events: tx,
                shared,
                threads: Mutex::new(Threads {
                    driver: Some(thread),
                    listener: None,
                }),
                listen_addr: None,
                is_voter: false,
            }),
        })
    }

    /// Sends `request` to the active controller and returns the machine's response once
    /// its entries are committed and applied on this node.
    pub async fn request(&self, request: Vec<u8>) -> Result<Vec<u8>, RaftError> {
        if request.len() > REQUEST_BYTES_MAX {
            return Err(RaftError::TooLarge {
                len: request.len(),
                max: REQUEST_BYTES_MAX,
            });
        }
        if self.inner.shared.shutdown.load(Ordering::Acquire) {
            return Err(RaftError::Shutdown);
        }
        let (reply, answer) = futures::channel::oneshot::channel();
        self.inner
            .events
            .send_async(Event::Request { request, reply })
            .await
            .map_err(|_| RaftError::Shutdown)?;
        answer.await.map_err(|_| RaftError::Shutdown)?
    }

    /// Kafka node id of the raft leader, if known.
    pub fn active_controller(&self) -> Option<u64> {
        self.inner
            .shared
            .leader
            .load(Ordering::Acquire)
            .checked_sub(1)
    }

    /// False for an observer (a node outside `voters`).
    pub fn is_voter(&self) -> bool {
        self.inner.is_voter
    }

    pub fn applied_index(&self) -> u64 {
        self.inner.shared.applied.load(Ordering::Acquire)
    }

    /// Blocks until this node has applied everything the leader had committed when asked
    /// (a raft read index) and everything committed on disk at start, or until `timeout`.
    pub fn wait_caught_up(&self, timeout: Duration) -> Result<(), RaftError> {
        let shared = &self.inner.shared;
        let guard = shared.caught_up.lock().map_err(|_| RaftError::Shutdown)?;
        let (guard, _) = shared
            .caught_up_changed
            .wait_timeout_while(guard, timeout, |caught_up| {
                !*caught_up && !shared.shutdown.load(Ordering::Acquire)
            })
            .map_err(|_| RaftError::Shutdown)?;
        if *guard {
            Ok(())
        } else if shared.shutdown.load(Ordering::Acquire) {
            Err(RaftError::Shutdown)
        } else {
            Err(RaftError::Timeout)
        }
    }

    /// Stops the raft thread and the network; pending requests fail with `Shutdown`.
    /// Returns when the listener's port is free again.
    pub fn shutdown(&self) {
        self.inner.shared.shutdown.store(true, Ordering::Release);
        let _ = self.inner.events.try_send(Event::Shutdown);
        let Ok(mut threads) = self.inner.threads.lock() else {
            return;
        };
        if let Some(t) = threads.driver.take() {
            let _ = t.join();
        }
        if let Some(t) = threads.listener.take() {
            // Wake the blocking accept so it sees the flag.
            if let Some(mut addr) = self.inner.listen_addr {
                if addr.ip().is_unspecified() {
                    addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
                }
                let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(500));
            }
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests;
