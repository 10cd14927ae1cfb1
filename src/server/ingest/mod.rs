//! The I/O of the ingestion front doors (`crate::ingest` holds their sans-IO logic): the
//! syslog listeners (TCP, UDP, RELP) and the HTTP produce listener of one shard, and the
//! shard's batcher that appends what they receive.
//!
//! Every shard binds every configured address (SO_REUSEPORT, as the Kafka listener), so
//! the kernel spreads connections — and UDP senders, by their address — over the shards.
//! Nothing is accepted until the topics the syslog routes name exist: shard 0 creates the
//! missing ones through the controller (with the broker's defaults), and every shard waits
//! for them in its metadata before serving.
pub mod batcher;
pub mod http;
pub mod syslog;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures::AsyncReadExt;
use tracing::{debug, info, warn};

use crate::config::SyslogTransport;
use crate::ingest::idle::ReadWatch;
use crate::ingest::stats::ShardCounters;
use crate::server::admission::Admission;
use crate::shard::ShardCtx;

/// The sockets of one shard's ingestion listeners, bound at start.
pub struct Sockets {
    syslog: Vec<(SyslogTransport, Socket)>,
    http: Option<glommio::net::TcpListener>,
}

enum Socket {
    Tcp(glommio::net::TcpListener),
    Udp(glommio::net::UdpSocket),
}

/// Binds this shard's ingestion sockets (none when nothing is configured).
pub fn bind(ctx: &Rc<ShardCtx>) -> Result<Sockets, String> {
    let settings = ctx
        .shared
        .config
        .ingest_settings()
        .map_err(|e| e.to_string())?;
    let mut syslog = Vec::with_capacity(settings.syslog_listeners.len());
    for (transport, addr) in &settings.syslog_listeners {
        let socket = match transport {
            SyslogTransport::Udp => glommio::net::UdpSocket::bind(addr).map(Socket::Udp),
            SyslogTransport::Tcp | SyslogTransport::Relp => {
                glommio::net::TcpListener::bind(addr).map(Socket::Tcp)
            }
        }
        .map_err(|e| format!("cannot listen for syslog on {addr}: {e}"))?;
        syslog.push((*transport, socket));
    }
    let http = match settings.http_listen {
        Some(addr) => Some(
            glommio::net::TcpListener::bind(addr)
                .map_err(|e| format!("cannot listen for HTTP on {addr}: {e}"))?,
        ),
        None => None,
    };
    Ok(Sockets { syslog, http })
}

/// Starts the listeners of `sockets` and the batcher behind them; returns their tasks (to
/// cancel at shutdown).
pub fn start(
    ctx: &Rc<ShardCtx>,
    sockets: Sockets,
    admission: Arc<Admission>,
) -> Vec<glommio::task::JoinHandle<()>> {
    if sockets.syslog.is_empty() && sockets.http.is_none() {
        return Vec::new();
    }
    let (batcher, appender) = batcher::Batcher::start(ctx);
    let mut tasks = vec![appender];
    let ctx = ctx.clone();
    let settings = match ctx.shared.config.ingest_settings() {
        Ok(s) => Rc::new(s),
        Err(e) => {
            warn!("ingestion off: {e}");
            return tasks;
        }
    };
    let syslog_topics: Vec<String> = if sockets.syslog.is_empty() {
        Vec::new()
    } else {
        settings
            .routes
            .topics()
            .into_iter()
            .map(str::to_string)
            .collect()
    };
    tasks.push(
        glommio::spawn_local(async move {
            ensure_topics(&ctx, &syslog_topics).await;
            let mut listeners = Vec::new();
            // `index` is the listener's place in `syslog_listeners`, the same on every
            // shard: its connection count is shared.
            for (index, (transport, socket)) in sockets.syslog.into_iter().enumerate() {
                let (ctx, batcher, settings) = (ctx.clone(), batcher.clone(), settings.clone());
                let admission = admission.clone();
                listeners.push(glommio::spawn_local(async move {
                    match socket {
                        Socket::Udp(s) => syslog::udp_loop(ctx, batcher, settings, s).await,
                        Socket::Tcp(l) => {
                            let listener = syslog::Listener {
                                socket: l,
                                transport,
                                index,
                            };
                            syslog::accept_loop(ctx, batcher, settings, listener, admission).await
                        }
                    }
                }));
            }
            if let Some(listener) = sockets.http {
                let (ctx, batcher) = (ctx.clone(), batcher.clone());
                listeners.push(glommio::spawn_local(http::accept_loop(
                    ctx,
                    batcher,
                    listener,
                    admission.clone(),
                )));
            }
            futures::future::join_all(listeners).await;
        })
        .detach(),
    );
    tasks
}

/// Waits until every topic of `topics` is in this shard's metadata; shard 0 creates the
/// missing ones (retrying while the controller is not ready).
async fn ensure_topics(ctx: &Rc<ShardCtx>, topics: &[String]) {
    let mut logged = false;
    loop {
        let missing: Vec<&String> = {
            let catalog = ctx.shared.catalog.load();
            topics
                .iter()
                .filter(|t| catalog.topic(t).is_none())
                .collect()
        };
        if missing.is_empty() {
            if logged || ctx.id == 0 {
                info!(shard = ctx.id, "syslog topics ready: {topics:?}");
            }
            return;
        }
        if ctx.id == 0 {
            for topic in missing {
                match crate::server::admin::create_topic(
                    ctx,
                    topic,
                    -1,
                    -1,
                    Default::default(),
                    false,
                )
                .await
                {
                    Ok(_) => info!("created syslog topic {topic}"),
                    Err(e) if e.code == crate::protocol::error::ErrorCode::TopicAlreadyExists => {}
                    // At start the controller may not be ready yet: expected, retried,
                    // said once (not a warning: a clean start logs none).
                    Err(e) if !logged => {
                        info!(
                            "cannot create syslog topic {topic} yet, retrying: {}",
                            e.message
                        );
                        logged = true;
                    }
                    Err(_) => {}
                }
            }
        }
        glommio::timer::sleep(Duration::from_millis(100)).await;
    }
}

/// The peer of a stream, or an unspecified address when it is already gone.
fn peer_or_unspecified(stream: &glommio::net::TcpStream) -> SocketAddr {
    stream
        .peer_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

/// The deadlines of a new connection: `connections_max_idle_ms` to say something, and
/// `request_timeout_ms` for any frame it starts (see `crate::ingest::idle`).
fn read_watch(ctx: &ShardCtx) -> RefCell<ReadWatch> {
    let config = &ctx.shared.config;
    RefCell::new(ReadWatch::new(
        ctx.shared.clock.monotonic_ms(),
        config.connections_max_idle_ms,
        config.request_timeout_ms,
    ))
}

/// Reads at most `want` bytes onto the end of `buf`, waiting no longer than `watch` allows
/// (`answers_owed`: the peer waits for answers, so its silence is not idleness). `Ok(0)`:
/// the peer closed, or the broker is shutting down. A connection closed for silence is
/// counted (`connections_timed_out`). The caller reports what it decoded to `watch`.
async fn read_watched<R: futures::AsyncRead + Unpin>(
    ctx: &ShardCtx,
    reader: &mut R,
    buf: &mut BytesMut,
    want: usize,
    watch: &RefCell<ReadWatch>,
    answers_owed: &dyn Fn() -> bool,
) -> Result<usize, String> {
    let start = buf.len();
    buf.resize(start + want.max(1), 0);
    let result = {
        let mut read = pin!(reader.read(buf.get_mut(start..).unwrap_or_default()));
        loop {
            if ctx.shutting_down.get() {
                break Ok(0);
            }
            let now_ms = ctx.shared.clock.monotonic_ms();
            // A short borrow: nothing is held across the awaits below.
            let wait_ms = watch.borrow().poll_wait_ms(now_ms, answers_owed());
            let wait_ms = match wait_ms {
                Ok(w) => w,
                Err(silence) => {
                    let counters = ctx.shared.ingest_stats.shard(ctx.id);
                    ShardCounters::add(&counters.connections_timed_out, 1);
                    break Err(silence.to_string());
                }
            };
            // The timer and shutdown only wake the loop to look again; the read stays
            // pinned across wake-ups, so no byte it took is lost.
            let timer = async {
                match wait_ms {
                    Some(ms) => glommio::timer::sleep(Duration::from_millis(ms.max(1))).await,
                    None => futures::future::pending::<()>().await,
                }
                None
            };
            let shutdown = async {
                ctx.shutdown_notify.listen().await;
                None
            };
            let woke = futures_lite::future::or(
                async { Some(read.as_mut().await) },
                futures_lite::future::or(timer, shutdown),
            )
            .await;
            if let Some(r) = woke {
                break r.map_err(|e| e.to_string());
            }
        }
    };
    buf.truncate(start + *result.as_ref().unwrap_or(&0));
    result
}

/// Accepts connections on `listener`, admits each against the broker's connection limits
/// (the ones the Kafka listener applies) and, for a syslog listener, its own bound
/// (`syslog_connections_max`), and serves it in its own task; `what` names the listener in
/// the log.
async fn accept_admitted<F, Fut>(
    ctx: Rc<ShardCtx>,
    what: &'static str,
    listener: glommio::net::TcpListener,
    syslog_listener: Option<usize>,
    admission: Arc<Admission>,
    serve: F,
) where
    F: Fn(glommio::net::TcpStream, SocketAddr) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + 'static,
{
    let shard = ctx.id;
    let syslog_max = ctx.shared.config.syslog_connections_max;
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!(shard, "{what} accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // RELP answers and HTTP responses are small writes the sender waits for: without
        // TCP_NODELAY, Nagle's algorithm holds each until the peer's delayed ACK (~40 ms),
        // which caps a RELP window at a few thousand messages a second.
        let _ = stream.set_nodelay(true);
        let peer = peer_or_unspecified(&stream);
        let slot = match admission.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(refusal) => {
                debug!(%peer, "refusing {what} connection: {refusal}");
                continue;
            }
        };
        if let Some(index) = syslog_listener {
            if !ctx.shared.ingest_stats.try_open(index, syslog_max) {
                let counters = ctx.shared.ingest_stats.shard(shard);
                ShardCounters::add(&counters.connections_refused, 1);
                debug!(%peer, "refusing {what} connection: syslog_connections_max ({syslog_max}) reached");
                continue;
            }
        }
        let served = serve(stream, peer);
        let ctx = ctx.clone();
        glommio::spawn_local(async move {
            if let Err(e) = served.await {
                debug!(%peer, "{what} connection closed: {e}");
            }
            if let Some(index) = syslog_listener {
                ctx.shared.ingest_stats.close(index);
            }
            drop(slot);
        })
        .detach();
    }
}
