//! Starting and stopping the shards: one pinned glommio executor per shard, the mesh
//! between them, each shard's listener, background jobs and graceful shutdown.
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use glommio::{LocalExecutorBuilder, Placement};
use thiserror::Error;
use tracing::{error, info, warn};

use super::mesh::{self, Builder, Mesh};
use super::{now_ms, ShardCtx, Shared};
use crate::cluster::catalog::CatalogStore;
use crate::config::Config;
use crate::limits::{MESH_CHANNEL_CAPACITY, SHUTDOWN_DRAIN_MS_MAX};

#[derive(Debug, Error)]
pub enum StartError {
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Catalog(#[from] crate::cluster::catalog::CatalogError),
    #[error("cannot start shard {shard}: {message}")]
    Executor { shard: usize, message: String },
}

/// A running broker; `stop` shuts it down gracefully.
pub struct Broker {
    handles: Vec<glommio::ExecutorJoinHandle<()>>,
    stops: Vec<flume::Sender<()>>,
}

impl Broker {
    /// Asks every shard to stop (stop accepting, drain in-flight requests, flush, close).
    pub fn stop(&self) {
        for s in &self.stops {
            let _ = s.send(());
        }
    }

    /// Waits for every shard to finish.
    pub fn join(self) {
        for h in self.handles {
            if let Err(e) = h.join() {
                error!("shard ended abnormally: {e}");
            }
        }
    }
}

/// Starts the broker: opens the catalog, then one executor per shard.
pub fn start(config: Config) -> Result<Broker, StartError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
        path: config.data_dir.clone(),
        source,
    })?;
    let nr_shards = if config.shards == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    } else {
        config.shards
    };
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let catalog = CatalogStore::open(&config.data_dir.join("strata.meta"), config.node_id)?;
    reassign_orphans(&catalog, nr_shards)?;
    super::groups::ensure_offsets_topic(&catalog, config.offsets_topic_num_partitions, nr_shards)?;
    let shared = Arc::new(Shared {
        config,
        nr_shards,
        catalog,
    });
    let builder: Builder =
        glommio::channels::channel_mesh::MeshBuilder::full(nr_shards, MESH_CHANNEL_CAPACITY);
    let mut handles = Vec::new();
    let mut stops = Vec::new();
    let (ready_tx, ready_rx) = flume::bounded::<Result<(), String>>(nr_shards);
    for shard in 0..nr_shards {
        let shared = shared.clone();
        let builder = builder.clone();
        let (stop_tx, stop_rx) = flume::bounded::<()>(1);
        let ready_tx = ready_tx.clone();
        stops.push(stop_tx);
        let handle = LocalExecutorBuilder::new(Placement::Fixed(shard % cpus))
            .name(&format!("strata-shard-{shard}"))
            .spawn(
                move || async move { shard_main(shard, shared, builder, stop_rx, ready_tx).await },
            )
            .map_err(|e| StartError::Executor {
                shard,
                message: e.to_string(),
            })?;
        handles.push(handle);
    }
    drop(ready_tx);
    let broker = Broker { handles, stops };
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
    Ok(broker)
}

/// Partitions whose recorded shard no longer exists (the broker restarted with fewer
/// shards) are placed again, explicitly, and the new placement is recorded.
fn reassign_orphans(catalog: &CatalogStore, nr_shards: usize) -> Result<(), StartError> {
    let local = catalog.load().local_node;
    let needs = catalog.load().topics.values().any(|t| {
        t.partitions
            .iter()
            .any(|p| p.shard_of(local).is_some_and(|s| s as usize >= nr_shards))
    });
    if !needs {
        return Ok(());
    }
    catalog
        .update(|c| {
            let mut load = c.shard_load(nr_shards);
            let names: Vec<String> = c.topics.keys().cloned().collect();
            for name in names {
                let Some(t) = c.topics.get(&name) else {
                    continue;
                };
                let mut t = (**t).clone();
                for p in t.partitions.iter_mut() {
                    let Some(i) = p.replicas.iter().position(|r| *r == local) else {
                        continue;
                    };
                    let Some(old) = p.shards.get_mut(i) else {
                        continue;
                    };
                    if *old as usize >= nr_shards {
                        if let Some(s) = crate::cluster::placement::place(&mut load, 1).first() {
                            warn!(
                                "partition of {name} moves from missing shard {old} to shard {s}"
                            );
                            *old = *s;
                        }
                    }
                }
                c.topics.insert(name, Arc::new(t));
            }
            Ok::<(), ()>(())
        })?
        .ok();
    Ok(())
}

async fn shard_main(
    shard: usize,
    shared: Arc<Shared>,
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

    // Recover every partition placed on this shard before accepting connections.
    let catalog = shared.catalog.load();
    for topic in catalog.topics.values() {
        let config = shared.topic_log_config(&topic.configs);
        for (i, p) in topic.partitions.iter().enumerate() {
            if catalog.local_shard(p) != Some(shard as u32) {
                continue;
            }
            if let Err(e) = ctx
                .open_partition(&topic.name, i as i32, config.clone())
                .await
            {
                let _ = ready_tx.send(Err(format!("cannot recover {}-{i}: {e}", topic.name)));
                return;
            }
        }
    }

    // Committed offsets and group metadata are rebuilt before this shard serves groups.
    super::groups::load(&ctx).await;

    let listener = match glommio::net::TcpListener::bind(shared.config.listen.as_str()) {
        Ok(l) => l,
        Err(e) => {
            let _ = ready_tx.send(Err(format!(
                "cannot listen on {}: {e}",
                shared.config.listen
            )));
            return;
        }
    };
    info!(shard, listen = %shared.config.listen, "shard ready");
    let _ = ready_tx.send(Ok(()));

    let retention = glommio::spawn_local(retention_loop(ctx.clone())).detach();
    let group_ticker = glommio::spawn_local(super::groups::ticker(ctx.clone())).detach();
    let acceptor = glommio::spawn_local(crate::server::accept_loop(ctx.clone(), listener)).detach();

    // Wait for the stop signal from the main thread.
    let _ = stop_rx.recv_async().await;
    info!(shard, "shutting down");
    ctx.shutting_down.set(true);
    ctx.shutdown_notify.notify_all();
    acceptor.cancel();
    // Connections finish the request they are serving, then close.
    let deadline = std::time::Instant::now() + Duration::from_millis(SHUTDOWN_DRAIN_MS_MAX);
    while ctx.connections.get() > 0 && std::time::Instant::now() < deadline {
        let notified = ctx.connections_changed.notified();
        futures_lite::future::or(notified, glommio::timer::sleep(Duration::from_millis(100))).await;
    }
    retention.cancel();
    group_ticker.cancel();
    for (topic, i, p) in ctx.all_partitions() {
        if let Err(e) = p.close().await {
            error!("closing {topic}-{i}: {e}");
        }
    }
    info!(shard, "stopped");
}

/// Applies retention (and time-based rolling) to this shard's partitions periodically.
async fn retention_loop(ctx: Rc<ShardCtx>) {
    let period = Duration::from_millis(ctx.shared.config.log_retention_check_interval_ms.max(100));
    loop {
        glommio::timer::sleep(period).await;
        for (topic, i, p) in ctx.all_partitions() {
            if let Err(e) = p.enforce_retention(now_ms()).await {
                warn!("retention on {topic}-{i}: {e}");
            }
            glommio::yield_if_needed().await;
        }
    }
}
