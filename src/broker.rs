//! A running broker, composed from the layers below it: the metadata quorum (`cluster`),
//! one pinned glommio executor per shard with the mesh between them (`shard`), and each
//! shard's Kafka listener (`server`); then background jobs and graceful shutdown.
//!
//! This is the top of the layering (only `main` sits above it), which is why it may start
//! both the shards and the server that runs on them.
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use glommio::LocalExecutorBuilder;
use thiserror::Error;
use tracing::{error, info, warn};

use crate::clock::SystemClock;
use crate::cluster::catalog::CatalogStore;
use crate::cluster::quorum::Quorum;
use crate::config::Config;
use crate::limits::{
    MESH_CHANNEL_CAPACITY, SHUTDOWN_CLOSES_IN_FLIGHT_MAX, SHUTDOWN_DRAIN_MS_MAX,
    SHUTDOWN_PEERS_POLL_MS, SHUTDOWN_PEERS_WAIT_MS,
};
use crate::server::admission::Admission;
use crate::shard::mesh::{self, Builder, Mesh};
use crate::shard::{ShardCtx, Shared};

#[derive(Debug, Error)]
pub enum StartError {
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Cluster(#[from] crate::cluster::quorum::QuorumError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("TLS settings: {message}")]
    Tls { message: String },
    #[error("OAUTHBEARER settings: {message}")]
    OAuth { message: String },
    #[error(transparent)]
    CpuSet(#[from] crate::shard::cpus::CpuSetError),
    #[error("cannot start shard {shard}: {message}")]
    Executor { shard: usize, message: String },
}

/// How long a starting shard waits for its coordinator partitions to load before serving.
const GROUP_LOAD_WAIT_SECS: u64 = 30;

/// A running broker; `stop` shuts it down gracefully.
pub struct Broker {
    handles: Vec<glommio::ExecutorJoinHandle<()>>,
    stops: Vec<flume::Sender<()>>,
    quorum: Arc<Quorum>,
    heartbeat: Option<std::thread::JoinHandle<()>>,
}

impl Broker {
    /// Asks every shard to stop (stop accepting, drain in-flight requests, flush, close);
    /// a registered broker first gives up its leaderships (controlled shutdown).
    pub fn stop(&self) {
        if self.heartbeat.is_some() {
            self.quorum.controlled_shutdown();
        }
        for s in &self.stops {
            let _ = s.send(());
        }
    }

    /// Waits for every shard to finish, then stops heartbeating and the metadata log.
    pub fn join(self) {
        for h in self.handles {
            if let Err(e) = h.join() {
                error!("shard ended abnormally: {e}");
            }
        }
        self.quorum.stop();
        if let Some(h) = self.heartbeat {
            let _ = h.join();
        }
    }
}

/// Starts the broker: opens the catalog, then one executor per shard.
pub fn start(mut config: Config) -> Result<Broker, StartError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
        path: config.data_dir.clone(),
        source,
    })?;
    // Every path below derives from the data directory, and some are opened through io_uring
    // relative to no directory (glommio's `Directory::open` passes dirfd -1, not AT_FDCWD, so
    // a relative path fails with EBADF). Resolving it once here makes `./data` behave exactly
    // like an absolute path everywhere: partitions, state files, the metadata log, deletion.
    config.data_dir =
        std::fs::canonicalize(&config.data_dir).map_err(|source| StartError::DataDir {
            path: config.data_dir.clone(),
            source,
        })?;
    // Logs a previous run renamed for deletion but did not finish removing (a crash or a
    // shutdown in between): no shard serves them; remove them before any shard starts.
    if let Err(e) = crate::storage::partition_dir::remove_deleted_dirs(&config.data_dir) {
        warn!("cannot look for deleted logs to remove: {e}");
    }
    // Where the shards run, decided before anything starts so that a cpuset outside the
    // process's CPUs fails the start with nothing to undo.
    let cpu_plan = crate::shard::cpus::plan(
        config.shards,
        config.cpuset_cpus()?.as_deref(),
        config.pin_shards,
        &crate::shard::cpus::process_affinity()?,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    )?;
    let nr_shards = cpu_plan.nr_shards;
    info!(shards = nr_shards, placement = %cpu_plan.describe(), "shard placement");
    crate::alloc::start_memory_trimmer();
    let roles = config.roles().map_err(|message| {
        StartError::Cluster(crate::cluster::quorum::QuorumError::Config(message))
    })?;
    let clock = SystemClock::shared();
    let catalog = Arc::new(CatalogStore::new(config.node_id, nr_shards as u32));
    // The metadata log first: a broker serves nothing until its metadata image has caught
    // up with the quorum (a restarted leader must not act on a stale image).
    let quorum = Quorum::start(&config, catalog.clone(), clock.clone())?;
    if !roles.broker {
        info!(node_id = config.node_id, "dedicated controller is running");
        return Ok(Broker {
            handles: Vec::new(),
            stops: Vec::new(),
            quorum,
            heartbeat: None,
        });
    }
    let listeners = config.listeners()?;
    // A missing or bad certificate fails the start here, not on the first TLS client.
    crate::server::tls::check(&config).map_err(|message| StartError::Tls { message })?;
    // And an unusable JWKS here, not on the first OAUTHBEARER client.
    crate::server::oauth::check(&config).map_err(|message| StartError::OAuth { message })?;
    // `host:port` of the registration is the inter-broker endpoint (what other brokers
    // dial); every advertised listener goes with it, for Metadata on each listener.
    let (host, port) = listeners
        .inter_broker_endpoint()
        .map(|e| (e.host.clone(), i32::from(e.port)))
        .unwrap_or_default();
    let endpoints = listeners
        .advertised
        .iter()
        .map(|e| crate::cluster::catalog::BrokerEndpoint {
            name: e.name.clone(),
            host: e.host.clone(),
            port: i32::from(e.port),
            security_protocol: e.security_protocol.id(),
        })
        .collect();
    let rack = (!config.rack.is_empty()).then(|| config.rack.clone());
    let heartbeat = quorum.register_and_heartbeat(
        host,
        port,
        endpoints,
        rack,
        nr_shards as u32,
        Duration::from_millis(config.broker_heartbeat_interval_ms.max(1)),
    )?;
    let single_node = config.voters().map(|v| v.len() <= 1).unwrap_or(false);
    if single_node {
        if let Err(e) =
            crate::shard::groups::ensure_offsets_topic_at_start(&quorum, &catalog, &config)
        {
            warn!("cannot create __consumer_offsets yet ({e:?}); the first FindCoordinator will");
        }
    }
    let max_connections = connections_within_open_files_limit(config.max_connections);
    let admission = Admission::new(max_connections, config.max_connections_per_ip);
    let disk = Arc::new(crate::storage::DiskSpace::new(
        &config.data_dir,
        config.storage_min_free_bytes,
    ));
    let quota_rates = crate::security::quota::RateRegistry::new(
        config.quota_window_num,
        config.quota_window_size_seconds * 1000,
    );
    // Validated with the rest of the config; built once, shared by every shard.
    let authorizer = config.acl_authorizer()?.map(Arc::new);
    // The certificate files are read here, so a bad one stops the start.
    let peer_security = crate::shard::peer::PeerSecurity::from_config(&config, &listeners)
        .map(Arc::new)
        .map_err(|message| StartError::Tls { message })?;
    let shared = Arc::new(Shared {
        authorizer,
        quota_rates,
        ingest_stats: crate::ingest::stats::IngestStats::new(
            nr_shards,
            config.syslog_listeners.len(),
        ),
        config,
        listeners,
        nr_shards,
        catalog,
        quorum: quorum.clone(),
        disk,
        clock,
        open_dirs: Default::default(),
        peer_security,
        shards_draining: std::sync::atomic::AtomicUsize::new(nr_shards),
    });
    let builder: Builder =
        glommio::channels::channel_mesh::MeshBuilder::full(nr_shards, MESH_CHANNEL_CAPACITY);
    let mut handles = Vec::new();
    let mut stops = Vec::new();
    let (ready_tx, ready_rx) = flume::bounded::<Result<(), String>>(nr_shards);
    for shard in 0..nr_shards {
        let shared = shared.clone();
        let admission = admission.clone();
        let builder = builder.clone();
        let (stop_tx, stop_rx) = flume::bounded::<()>(1);
        let ready_tx = ready_tx.clone();
        stops.push(stop_tx);
        let placement = cpu_plan
            .executor_placement(shard)
            .map_err(|message| StartError::Executor { shard, message })?;
        let mut executor =
            LocalExecutorBuilder::new(placement).name(&format!("strata-shard-{shard}"));
        let stall_ms = shared.config.reactor_stall_threshold_ms;
        if stall_ms > 0 {
            executor = executor.detect_stalls(Some(Box::new(StallThreshold(
                std::time::Duration::from_millis(stall_ms),
            ))));
        }
        let handle = executor
            .spawn(move || async move {
                shard_main(shard, shared, admission, builder, stop_rx, ready_tx).await
            })
            .map_err(|e| StartError::Executor {
                shard,
                message: e.to_string(),
            })?;
        handles.push(handle);
    }
    drop(ready_tx);
    let broker = Broker {
        handles,
        stops,
        quorum,
        heartbeat: Some(heartbeat),
    };
    for _ in 0..nr_shards {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(message)) => {
                broker.stop();
                broker.join();
                return Err(StartError::Executor { shard: 0, message });
            }
            Err(_) => {
                broker.stop();
                broker.join();
                return Err(StartError::Executor {
                    shard: 0,
                    message: "a shard exited during start-up".into(),
                });
            }
        }
    }
    // The image has caught up and every shard has opened the replicas placed on it: what
    // else holds a partition directory is a stray replica (its topic deleted, or the replica
    // moved, while this broker was down).
    let strays = crate::shard::stray::remove_stray_logs(&shared);
    if strays > 0 {
        info!(strays, "removed stray logs");
    }
    Ok(broker)
}

async fn shard_main(
    shard: usize,
    shared: Arc<Shared>,
    admission: Arc<Admission>,
    builder: Builder,
    stop_rx: flume::Receiver<()>,
    ready_tx: flume::Sender<Result<(), String>>,
) {
    let mesh = match Mesh::join(builder).await {
        Ok(m) => m,
        Err(()) => {
            let _ = ready_tx.send(Err(format!("shard {shard} could not join the mesh")));
            return;
        }
    };
    let ctx = Rc::new(ShardCtx::new(shard, shared.clone(), mesh));
    mesh::spawn_receivers(&ctx);

    // Open (recovering) every replica placed on this shard and take the roles the metadata
    // gives it before accepting connections.
    crate::shard::replica::apply_metadata(&ctx).await;
    crate::shard::groups::wait_loaded(&ctx, Duration::from_secs(GROUP_LOAD_WAIT_SECS)).await;

    // The TLS settings were checked at start; a file changed since fails this shard's start.
    let tls = match crate::server::tls::TlsContext::new(&shared.config) {
        Ok(t) => t.map(Rc::new),
        Err(e) => {
            let _ = ready_tx.send(Err(format!("TLS: {e}")));
            return;
        }
    };
    // Every shard binds every listener (SO_REUSEPORT); the kernel spreads the connections.
    let mut kafka_listeners = Vec::with_capacity(shared.listeners.bound.len());
    for endpoint in &shared.listeners.bound {
        match glommio::net::TcpListener::bind(endpoint.bind_address()) {
            Ok(l) => kafka_listeners.push((endpoint.clone(), l)),
            Err(e) => {
                let _ = ready_tx.send(Err(format!("cannot listen on {endpoint}: {e}")));
                return;
            }
        }
    }
    // Syslog and HTTP listeners, when configured (bound here so a bad address fails start).
    let ingest_sockets = match crate::server::ingest::bind(&ctx) {
        Ok(s) => s,
        Err(e) => {
            let _ = ready_tx.send(Err(e));
            return;
        }
    };
    let metrics_listener = match crate::server::metrics_http::bind(&ctx) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready_tx.send(Err(e));
            return;
        }
    };
    info!(
        shard,
        listeners = %shared.listeners.bound_text(),
        "shard ready"
    );
    let _ = ready_tx.send(Ok(()));

    let retention = glommio::spawn_local(retention_loop(ctx.clone())).detach();
    let cleaner = crate::shard::cleaner::spawn(ctx.clone());
    // One shard measures the free disk space for all.
    let disk_poll =
        (shard == 0).then(|| glommio::spawn_local(housekeeping_loop(ctx.clone())).detach());
    let group_ticker = glommio::spawn_local(crate::shard::groups::ticker(ctx.clone())).detach();
    let txn_ticker = glommio::spawn_local(crate::shard::txns::ticker(ctx.clone())).detach();
    let metadata = glommio::spawn_local(crate::shard::replica::metadata_loop(ctx.clone())).detach();
    let ingest = crate::server::ingest::start(&ctx, ingest_sockets, admission.clone());
    let metrics = metrics_listener.map(|l| {
        (
            glommio::spawn_local(crate::server::metrics_http::accept_loop(ctx.clone(), l)).detach(),
            glommio::spawn_local(crate::server::metrics_http::queue_probe()).detach(),
        )
    });
    let acceptors: Vec<_> = kafka_listeners
        .into_iter()
        .map(|(endpoint, listener)| {
            glommio::spawn_local(crate::server::accept_loop(
                ctx.clone(),
                listener,
                endpoint,
                admission.clone(),
                tls.clone(),
            ))
            .detach()
        })
        .collect();

    // Wait for the stop signal from the main thread.
    let _ = stop_rx.recv_async().await;
    info!(shard, "shutting down");
    ctx.shutting_down.set(true);
    ctx.shutdown_notify.notify_all();
    crate::shard::groups::release_parked(&ctx);
    for acceptor in acceptors {
        acceptor.cancel();
    }
    if let Some((accept, probe)) = metrics {
        accept.cancel();
        probe.cancel();
    }
    for task in ingest {
        task.cancel();
    }
    // Connections finish the request they are serving, then close.
    let deadline = std::time::Instant::now() + Duration::from_millis(SHUTDOWN_DRAIN_MS_MAX);
    while ctx.connections.get() > 0 && std::time::Instant::now() < deadline {
        let notified = ctx.connections_changed.listen();
        futures_lite::future::or(notified, glommio::timer::sleep(Duration::from_millis(100))).await;
    }
    // A shard that stopped here while another still drains would strand that shard's
    // connections: an op they started on this shard over the mesh (a fetch of one of its
    // partitions, a group request) would never be answered, and each such connection held
    // its shard's shutdown to the deadline (10 s seen in tests). So every shard keeps
    // serving the mesh until all are drained, each bound by the same deadline.
    shared.shards_draining.fetch_sub(1, Ordering::AcqRel);
    while shared.shards_draining.load(Ordering::Acquire) > 0
        && std::time::Instant::now() < deadline + Duration::from_millis(SHUTDOWN_PEERS_WAIT_MS)
    {
        glommio::timer::sleep(Duration::from_millis(SHUTDOWN_PEERS_POLL_MS)).await;
    }
    retention.cancel();
    if let Some(t) = cleaner {
        t.cancel();
    }
    if let Some(t) = disk_poll {
        t.cancel();
    }
    group_ticker.cancel();
    txn_ticker.cancel();
    metadata.cancel();
    // Each close flushes, fsyncs and writes the log's state files: one after another they
    // took 13 s on a shard of the internal topics under load (past a 15 s stop deadline), so
    // the shard closes several at once and their I/O overlaps.
    use futures::StreamExt;
    futures::stream::iter(ctx.all_partitions())
        .for_each_concurrent(SHUTDOWN_CLOSES_IN_FLIGHT_MAX, |(topic, i, p)| async move {
            if let Err(e) = p.close().await {
                error!("closing {topic}-{i}: {e}");
            }
        })
        .await;
    info!(shard, "stopped");
}

/// Re-measures the data directory's free space every `DISK_SPACE_POLL_MS` and logs the memory
/// budget's use now and then. (Freed heap memory is given back by `alloc`'s own thread.)
async fn housekeeping_loop(ctx: Rc<ShardCtx>) {
    let period = Duration::from_millis(crate::storage::space::DISK_SPACE_POLL_MS);
    let mut tick = 0u64;
    loop {
        glommio::timer::sleep(period).await;
        ctx.shared.disk.refresh();
        tick += 1;
        if tick.is_multiple_of(BUDGET_LOG_EVERY_TICKS) {
            use crate::storage::MemoryClass;
            let b = &ctx.budget;
            tracing::debug!(
                shard = ctx.id,
                limit = b.limit(),
                used = b.used(),
                log = b.used_by(MemoryClass::Log),
                requests = b.used_by(MemoryClass::Requests),
                responses = b.used_by(MemoryClass::Responses),
                partitions = b.used_by(MemoryClass::Partitions),
                write_pool = b.write_pool_bytes(),
                "memory budget"
            );
        }
    }
}

/// Housekeeping ticks between two debug lines of the memory budget's use (every 5 s).
const BUDGET_LOG_EVERY_TICKS: u64 = 20;

/// Applies retention (and time-based rolling) to this shard's partitions periodically.
async fn retention_loop(ctx: Rc<ShardCtx>) {
    let period = Duration::from_millis(ctx.shared.config.log_retention_check_interval_ms.max(100));
    loop {
        glommio::timer::sleep(period).await;
        for (topic, i, p) in ctx.all_partitions() {
            if let Err(e) = p.enforce_retention(ctx.shared.clock.wall_ms()).await {
                warn!("retention on {topic}-{i}: {e}");
            }
            glommio::yield_if_needed().await;
        }
    }
}

/// File descriptors the broker keeps for itself besides client connections (segments,
/// indexes, the metadata log, listeners, replica fetchers).
const FILES_BESIDES_CONNECTIONS: u64 = 4096;

/// Raises the soft open-files limit to the hard one, as servers commonly do (the usual soft
/// limit of 1024 would refuse connections long before `max_connections`), and returns the
/// connections to admit: `max_connections`, or fewer if the limit leaves no room for them.
/// Past the limit `accept` itself would fail and leave clients hanging in the backlog;
/// refusing at the admission count closes them cleanly instead.
fn connections_within_open_files_limit(max_connections: usize) -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by reference.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return max_connections;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    let room = lim
        .rlim_cur
        .saturating_sub(FILES_BESIDES_CONNECTIONS)
        .max(1);
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    if room < max_connections {
        info!(
            open_files_limit = lim.rlim_cur,
            max_connections,
            admitted = room,
            "the open-files limit leaves room for fewer connections than max_connections"
        );
    }
    max_connections.min(room)
}

/// `reactor_stall_threshold_ms`: glommio's stall detector with our threshold. Its report
/// (a WARN through the `log` bridge, with the stack of the task that kept the core) is
/// glommio's own; only the threshold is ours.
#[derive(Debug)]
struct StallThreshold(std::time::Duration);

impl glommio::StallDetectionHandler for StallThreshold {
    fn threshold(
        &self,
        _queue: glommio::TaskQueueHandle,
        _max_expected_runtime: std::time::Duration,
    ) -> Option<std::time::Duration> {
        Some(self.0)
    }
}
