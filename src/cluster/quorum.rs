//! This node's place in the cluster: it starts the metadata log (Raft) with the controller
//! behind it, registers the broker, heartbeats, and gives the shards one way to ask the
//! active controller for anything (`Quorum::request`).
//!
//! A node with no `controller_voters` is a one-voter quorum that needs no network: the same
//! code path as a cluster, so a single node and a cluster behave alike.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::cluster::catalog::CatalogStore;
use crate::cluster::controller::{
    Controller, ControllerConfig, ControllerRequest, ControllerResponse,
};
use crate::cluster::machine_impl::ControllerMachine;
use crate::cluster::raft::{ControllerSecurity, MetadataLog, RaftConfig, RaftError};
use crate::config::Config;

#[derive(Debug, Error)]
pub enum QuorumError {
    #[error("metadata log: {0}")]
    Raft(#[from] RaftError),
    #[error("the controller answered with something undecodable: {0}")]
    BadResponse(String),
    #[error("invalid cluster settings: {0}")]
    Config(String),
    #[error("the controller refused: {0}")]
    Refused(String),
}

/// Raft timing: ticks of 100 ms, elections after about a second of silence.
const RAFT_TICK_MS: u64 = 100;
const RAFT_ELECTION_TICKS: usize = 10;
const RAFT_HEARTBEAT_TICKS: usize = 2;
/// The metadata log is snapshotted (and compacted) after this many entries.
const METADATA_SNAPSHOT_EVERY_ENTRIES: u64 = 1000;
/// How long a request to the controller may take, leader changes included.
const CONTROLLER_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// How long a stopping broker waits for its controlled shutdown (Kafka retries its own for
/// up to about 15 s); past it, the session timeout fences the broker as if it had crashed.
const CONTROLLED_SHUTDOWN_WAIT_MS: u64 = 5_000;

pub struct Quorum {
    log: MetadataLog,
    node_id: i32,
    /// Producer ids this broker may hand out: [next, end).
    producer_ids: Mutex<(i64, i64)>,
    fenced: AtomicBool,
    stopping: Arc<AtomicBool>,
}

impl Quorum {
    /// Starts the metadata log and waits until this node has caught up with it.
    pub fn start(
        config: &Config,
        store: Arc<CatalogStore>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Quorum>, QuorumError> {
        let voters = config.voters().map_err(QuorumError::Config)?;
        let listen = if config.controller_listen.is_empty() {
            None
        } else {
            Some(
                config
                    .controller_listen
                    .parse()
                    .map_err(|e| QuorumError::Config(format!("controller_listen: {e}")))?,
            )
        };
        let controller = Controller::new(ControllerConfig {
            broker_session_timeout_ms: config.broker_session_timeout_ms,
            default_replication_factor: config.default_replication_factor,
            default_num_partitions: config.num_partitions,
            auto_leader_rebalance: config.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_ms: config
                .leader_imbalance_check_interval_seconds
                .saturating_mul(1000),
            leader_imbalance_per_broker_percentage: config.leader_imbalance_per_broker_percentage,
        });
        let machine = ControllerMachine::new(controller, store);
        let raft = RaftConfig {
            node_id: config.node_id as u64,
            listen,
            voters: voters.iter().map(|(id, a)| (*id as u64, *a)).collect(),
            dir: config.data_dir.join("strata.meta").join("raft"),
            tick_ms: RAFT_TICK_MS,
            election_ticks: RAFT_ELECTION_TICKS,
            heartbeat_ticks: RAFT_HEARTBEAT_TICKS,
            snapshot_every_entries: METADATA_SNAPSHOT_EVERY_ENTRIES,
            request_timeout_ms: CONTROLLER_REQUEST_TIMEOUT_MS,
            clock,
            security: ControllerSecurity::from_config(config).map_err(QuorumError::Config)?,
        };
        let log = MetadataLog::start(raft, Box::new(machine))?;
        // A broker must not serve from a stale image: wait (as long as it takes a quorum to
        // form — the other nodes may still be starting) until it has caught up.
        loop {
            match log.wait_caught_up(Duration::from_secs(5)) {
                Ok(()) => break,
                Err(RaftError::Timeout) => warn!("waiting for the controller quorum to form"),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Arc::new(Quorum {
            log,
            node_id: config.node_id,
            producer_ids: Mutex::new((0, 0)),
            fenced: AtomicBool::new(true),
            stopping: Arc::new(AtomicBool::new(false)),
        }))
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// The active controller's node id, if one is known.
    pub fn active_controller(&self) -> Option<i32> {
        self.log.active_controller().map(|id| id as i32)
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Relaxed)
    }

    /// Sends `req` to the active controller; resolves once its effects are applied here.
    pub async fn request(&self, req: ControllerRequest) -> Result<ControllerResponse, QuorumError> {
        let bytes = self.log.request(req.encode()).await?;
        ControllerResponse::decode(&bytes).map_err(|e| QuorumError::BadResponse(e.to_string()))
    }

    /// Blocking form of `request`, for threads outside the executors.
    pub fn request_blocking(
        &self,
        req: ControllerRequest,
    ) -> Result<ControllerResponse, QuorumError> {
        futures::executor::block_on(self.request(req))
    }

    /// Registers this broker (retrying until the controller accepts), then heartbeats from a
    /// thread of its own until `stop`.
    pub fn register_and_heartbeat(
        self: &Arc<Self>,
        host: String,
        port: i32,
        listeners: Vec<crate::cluster::catalog::BrokerEndpoint>,
        rack: Option<String>,
        shards: u32,
        interval: Duration,
    ) -> Result<std::thread::JoinHandle<()>, QuorumError> {
        loop {
            match self.request_blocking(ControllerRequest::RegisterBroker {
                node_id: self.node_id,
                host: host.clone(),
                port,
                listeners: listeners.clone(),
                rack: rack.clone(),
                shards,
            }) {
                Ok(ControllerResponse::RegisterBroker { status }) if status.is_ok() => break,
                Ok(other) => {
                    return Err(QuorumError::Refused(format!("registration: {other:?}")));
                }
                Err(e) => {
                    warn!("registering with the controller: {e}; retrying");
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        info!(node_id = self.node_id, "registered with the controller");
        // The first heartbeat unfences us; do it before serving so leaders get elected.
        self.heartbeat_once();
        let me = self.clone();
        std::thread::Builder::new()
            .name("strata-heartbeat".into())
            .spawn(move || {
                while !me.stopping.load(Ordering::Relaxed) {
                    std::thread::sleep(interval);
                    if me.stopping.load(Ordering::Relaxed) {
                        break;
                    }
                    me.heartbeat_once();
                }
            })
            .map_err(|e| QuorumError::Config(format!("heartbeat thread: {e}")))
    }

    fn heartbeat_once(&self) {
        match self.request_blocking(ControllerRequest::BrokerHeartbeat {
            node_id: self.node_id,
        }) {
            Ok(ControllerResponse::BrokerHeartbeat { status, fenced }) if status.is_ok() => {
                let was = self.fenced.swap(fenced, Ordering::Relaxed);
                if was != fenced {
                    info!(fenced, "broker fencing changed");
                }
            }
            Ok(other) => warn!("heartbeat refused: {other:?}"),
            // `stop` shut the metadata log down under a heartbeat in flight: expected, and no
            // reason for a clean shutdown to log a warning.
            Err(_) if self.stopping.load(Ordering::Relaxed) => {}
            Err(e) => warn!("heartbeat failed: {e}"),
        }
    }

    /// A producer id never handed out before: from this broker's block, asking the
    /// controller for a new block when it runs out.
    pub async fn allocate_producer_id(&self) -> Result<i64, QuorumError> {
        {
            let mut ids = self.producer_ids.lock().unwrap_or_else(|p| p.into_inner());
            if ids.0 < ids.1 {
                ids.0 += 1;
                return Ok(ids.0 - 1);
            }
        }
        match self
            .request(ControllerRequest::AllocateProducerIds {
                broker_id: self.node_id,
            })
            .await?
        {
            ControllerResponse::AllocateProducerIds {
                status,
                first_id,
                count,
            } if status.is_ok() && count > 0 => {
                let mut ids = self.producer_ids.lock().unwrap_or_else(|p| p.into_inner());
                *ids = (first_id + 1, first_id + count);
                Ok(first_id)
            }
            other => Err(QuorumError::Refused(format!("producer ids: {other:?}"))),
        }
    }

    /// A whole block of producer ids never handed out before, as `(first, count)`, for the
    /// transaction coordinator (which hands them out itself): one controller request, one
    /// metadata-log write per block.
    pub async fn allocate_producer_ids(&self) -> Result<(i64, i64), QuorumError> {
        match self
            .request(ControllerRequest::AllocateProducerIds {
                broker_id: self.node_id,
            })
            .await?
        {
            ControllerResponse::AllocateProducerIds {
                status,
                first_id,
                count,
            } if status.is_ok() && count > 0 => Ok((first_id, count)),
            other => Err(QuorumError::Refused(format!("producer ids: {other:?}"))),
        }
    }

    /// Kafka's controlled shutdown: stops heartbeating and asks the controller to fence this
    /// broker now, so its leaderships move to the rest of their ISRs while its shards still
    /// answer (with NOT_LEADER_OR_FOLLOWER, which sends clients and followers to the new
    /// leaders) instead of a session timeout later, during which produce to its partitions
    /// would fail. Waits at most CONTROLLED_SHUTDOWN_WAIT_MS: a controller that cannot be
    /// reached (the quorum lost) leaves it to the session timeout, as before.
    pub fn controlled_shutdown(self: &Arc<Self>) {
        self.stopping.store(true, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let me = self.clone();
        // On a thread of its own, so the wait is bounded whatever the metadata log does; a
        // request still pending when the wait ends fails when `stop` shuts the log down.
        let spawned = std::thread::Builder::new()
            .name("strata-shutdown".into())
            .spawn(move || {
                let _ = tx.send(me.request_blocking(ControllerRequest::ControlledShutdown {
                    node_id: me.node_id,
                }));
            });
        if let Err(e) = spawned {
            warn!("controlled shutdown not attempted: {e}");
            return;
        }
        match rx.recv_timeout(Duration::from_millis(CONTROLLED_SHUTDOWN_WAIT_MS)) {
            Ok(Ok(ControllerResponse::ControlledShutdown { status, fenced })) if status.is_ok() => {
                self.fenced.store(fenced, Ordering::Relaxed);
                if fenced {
                    info!("controlled shutdown: fenced, leaderships moved to the other in-sync replicas");
                } else {
                    info!("controlled shutdown: no other broker is unfenced, so none took over");
                }
            }
            Ok(Ok(other)) => warn!("controlled shutdown refused: {other:?}"),
            Ok(Err(e)) => warn!("controlled shutdown failed: {e}"),
            Err(_) => warn!(
                wait_ms = CONTROLLED_SHUTDOWN_WAIT_MS,
                "controlled shutdown not answered in time; the session timeout will fence \
                 this broker"
            ),
        }
    }

    /// Stops heartbeating and the metadata log.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.log.shutdown();
    }
}
