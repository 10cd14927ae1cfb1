//! The Kafka-facing server of one shard: the accept loop, connections, request dispatch,
//! and one handler file per Kafka API under `handlers/`.
pub mod admin;
pub mod admission;
pub mod authz;
pub mod connection;
pub mod dispatch;
pub mod handlers;
pub mod ingest;
pub mod lag_watermarks;
pub mod metrics_http;
pub mod oauth;
pub mod quota;
pub mod route;
pub mod sasl;
pub mod tls;
pub mod vectored;

use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use crate::limits::CONNECTION_REFUSED_LOG_INTERVAL_MS;
use crate::security::{Endpoint, Session};
use crate::shard::ShardCtx;

/// Accepts connections on this shard's socket of one listener (every shard binds the same
/// port with SO_REUSEPORT; the kernel spreads connections between them). Each connection
/// gets a `Session` naming the listener and its security protocol. A connection past
/// `max_connections` or `max_connections_per_ip` is accepted and closed at once — the client
/// sees a clean close rather than a SYN left unanswered — and logged, rate-limited.
///
/// `admission` counts client connections broker-wide (max_connections,
/// max_connections_per_ip); every shard's loop shares it.
pub async fn accept_loop(
    ctx: Rc<ShardCtx>,
    listener: glommio::net::TcpListener,
    endpoint: Endpoint,
    admission: Arc<admission::Admission>,
    tls: Option<Rc<tls::TlsContext>>,
) {
    // A TLS listener always has the shard's TLS context (start fails without it); the
    // check keeps a connection from ever being served in cleartext by mistake.
    let tls = match (endpoint.security_protocol.uses_tls(), tls) {
        (false, _) => None,
        (true, Some(tls)) => Some(tls),
        (true, None) => {
            warn!(shard = ctx.id, listener = %endpoint.name, "TLS listener without TLS settings: not accepting");
            return;
        }
    };
    let mut refusals = RefusalLog::default();
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let peer = match stream.peer_addr() {
                    Ok(addr) => addr,
                    // The peer is already gone.
                    Err(_) => continue,
                };
                let ip = peer.ip();
                let slot = match admission.admit(ip) {
                    Ok(slot) => slot,
                    Err(refusal) => {
                        drop(stream);
                        crate::metrics::with(|m| m.connection_refused(&endpoint.name));
                        refusals.note(ctx.id, &refusal);
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                crate::metrics::with(|m| m.connection_accepted(&endpoint.name));
                let ctx = ctx.clone();
                let listener_name = endpoint.name.clone();
                ctx.connections.set(ctx.connections.get() + 1);
                let session =
                    Session::new(&endpoint.name, endpoint.security_protocol, peer.to_string());
                // The acceptor is taken now, so a certificate reload is checked on accepts.
                let tls = tls.as_ref().map(|t| (t.clone(), t.acceptor(ctx.id)));
                glommio::spawn_local(async move {
                    let served = match tls {
                        None => connection::serve(&ctx, stream, session).await,
                        Some((tls, acceptor)) => {
                            tls::serve(&ctx, &tls, acceptor, stream, session).await
                        }
                    };
                    if let Err(e) = served {
                        debug!(shard = ctx.id, "connection closed: {e}");
                    }
                    drop(slot);
                    crate::metrics::with(|m| m.connection_closed(&listener_name));
                    ctx.connections.set(ctx.connections.get() - 1);
                    ctx.connections_changed.notify_all();
                })
                .detach();
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                warn!(shard = ctx.id, "accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Logs refused connections at most once per `CONNECTION_REFUSED_LOG_INTERVAL_MS`, with the
/// number refused since the last line.
#[derive(Default)]
struct RefusalLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl RefusalLog {
    fn note(&mut self, shard: usize, refusal: &admission::Refusal) {
        self.unlogged += 1;
        let now = Instant::now();
        let due = self.last.is_none_or(|t| {
            now.duration_since(t) >= Duration::from_millis(CONNECTION_REFUSED_LOG_INTERVAL_MS)
        });
        if due {
            info!(
                shard,
                refused = self.unlogged,
                "refusing connections: {refusal}"
            );
            self.last = Some(now);
            self.unlogged = 0;
        }
    }
}
