//! The Kafka-facing server of one shard: the accept loop, connections, request dispatch,
//! and one handler file per Kafka API under `handlers/`.
pub mod admin;
pub mod connection;
pub mod dispatch;
pub mod handlers;
pub mod route;
pub mod vectored;

use std::rc::Rc;
use std::time::Duration;

use tracing::{debug, warn};

use crate::limits::SHARD_CONNECTIONS_MAX;
use crate::shard::ShardCtx;

/// Accepts connections on this shard's listener (every shard binds the same port with
/// SO_REUSEPORT; the kernel spreads connections between them).
pub async fn accept_loop(ctx: Rc<ShardCtx>, listener: glommio::net::TcpListener) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                if ctx.connections.get() >= SHARD_CONNECTIONS_MAX {
                    warn!(
                        shard = ctx.id,
                        "connection limit {SHARD_CONNECTIONS_MAX} reached; refusing"
                    );
                    drop(stream);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let ctx = ctx.clone();
                glommio::spawn_local(async move {
                    ctx.connections.set(ctx.connections.get() + 1);
                    if let Err(e) = connection::serve(&ctx, stream).await {
                        debug!(shard = ctx.id, "connection closed: {e}");
                    }
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
