//! The metrics listener of one shard (`metrics_listen`): `GET /metrics` answers the
//! Prometheus text format, `GET /v1/status/ready` says the broker serves; any other path is
//! 404 and any other method 405. Every shard binds the address (SO_REUSEPORT), so whichever
//! shard the kernel hands a scrape to gathers every shard's snapshot over the mesh
//! (`ShardOp::Metrics`), merges and renders them (`crate::metrics`).
//!
//! Bounds: at most `METRICS_CONNECTIONS_PER_SHARD_MAX` connections per shard (more are
//! accepted and closed at once), a request head of at most `METRICS_HEAD_BYTES_MAX` (parsed
//! by the HTTP ingestion's parser), no request body, and a head must arrive within
//! `request_timeout_ms` (idle keep-alive connections close after `connections_max_idle_ms`).
//! A scrape's answer is a few hundred bytes per partition.
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{AsyncReadExt, AsyncWriteExt};
use tracing::{debug, warn};

use crate::ingest::http::{parse_request_head, response};
use crate::limits::{
    METRICS_CONNECTIONS_PER_SHARD_MAX, METRICS_HEAD_BYTES_MAX, METRICS_QUEUE_PROBE_INTERVAL_MS,
};
use crate::metrics::{self, BrokerSnapshot, Route};
use crate::shard::mesh;
use crate::shard::ops::{ShardOp, ShardReply};
use crate::shard::ShardCtx;

/// Binds this shard's metrics socket, if the listener is on.
pub fn bind(ctx: &ShardCtx) -> Result<Option<glommio::net::TcpListener>, String> {
    let Some(addr) = ctx
        .shared
        .config
        .metrics_address()
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    glommio::net::TcpListener::bind(addr)
        .map(Some)
        .map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))
}

/// Accepts and serves metrics connections until cancelled.
pub async fn accept_loop(ctx: Rc<ShardCtx>, listener: glommio::net::TcpListener) {
    let open = Rc::new(Cell::new(0usize));
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!(shard = ctx.id, "metrics accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if open.get() >= METRICS_CONNECTIONS_PER_SHARD_MAX {
            debug!(
                shard = ctx.id,
                "refusing a metrics connection: {METRICS_CONNECTIONS_PER_SHARD_MAX} open"
            );
            continue;
        }
        let _ = stream.set_nodelay(true);
        open.set(open.get() + 1);
        let (ctx, open) = (ctx.clone(), open.clone());
        glommio::spawn_local(async move {
            if let Err(e) = serve(&ctx, stream).await {
                debug!(shard = ctx.id, "metrics connection closed: {e}");
            }
            open.set(open.get().saturating_sub(1));
        })
        .detach();
    }
}

async fn serve(ctx: &Rc<ShardCtx>, mut stream: glommio::net::TcpStream) -> Result<(), String> {
    let config = &ctx.shared.config;
    let _ = stream.set_write_timeout(Some(Duration::from_millis(config.request_timeout_ms)));
    let mut buf = BytesMut::new();
    loop {
        let head = loop {
            match parse_request_head(&mut buf, METRICS_HEAD_BYTES_MAX) {
                Ok(Some(head)) => break head,
                Ok(None) => {
                    // Nothing of a request yet: the connection is idle; part of one: it has
                    // request_timeout_ms to complete.
                    let wait_ms = if buf.is_empty() {
                        config.connections_max_idle_ms
                    } else {
                        config.request_timeout_ms
                    };
                    if read_some(ctx, &mut stream, &mut buf, wait_ms).await? == 0 {
                        return Ok(());
                    }
                }
                Err(e) => {
                    let answer = response(e.status(), "text/plain", &format!("{e}\n"), true);
                    refuse(ctx, &mut stream, &answer).await;
                    return Err(e.to_string());
                }
            }
        };
        if head.content_length > 0 {
            let answer = response(413, "text/plain", "a metrics request has no body\n", true);
            refuse(ctx, &mut stream, &answer).await;
            return Err("request with a body".into());
        }
        let (status, content_type, body) = match metrics::route(&head.method, &head.path) {
            Route::Metrics => (200, metrics::CONTENT_TYPE, scrape(ctx).await),
            Route::Ready if ctx.shutting_down.get() => {
                (503, "text/plain", "shutting down\n".to_string())
            }
            Route::Ready => (200, "text/plain", "ready\n".to_string()),
            Route::NotFound => (404, "text/plain", "not found\n".to_string()),
            Route::MethodNotAllowed => (405, "text/plain", "only GET and HEAD\n".to_string()),
        };
        let mut answer = response(status, content_type, &body, head.close);
        if head.method == "HEAD" {
            answer = head_only(answer);
        }
        stream.write_all(&answer).await.map_err(|e| e.to_string())?;
        if head.close {
            let _ = stream.close().await;
            return Ok(());
        }
    }
}

/// Reads what the peer sent, waiting at most `wait_ms` (or until shutdown). `Ok(0)`: closed.
async fn read_some(
    ctx: &ShardCtx,
    stream: &mut glommio::net::TcpStream,
    buf: &mut BytesMut,
    wait_ms: u64,
) -> Result<usize, String> {
    let mut chunk = [0u8; 1024];
    let read = async { stream.read(&mut chunk).await.map_err(|e| e.to_string()) };
    let timeout = async {
        glommio::timer::sleep(Duration::from_millis(wait_ms)).await;
        Err(format!("no complete request within {wait_ms} ms"))
    };
    let shutdown = async {
        ctx.shutdown_notify.listen().await;
        Ok(0)
    };
    let n = futures_lite::future::or(read, futures_lite::future::or(timeout, shutdown)).await?;
    buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
    Ok(n)
}

/// Answers a request that will not be served, then closes gently: the write side first,
/// then what the peer still sends is read and dropped (at most `METRICS_DRAIN_BYTES_MAX`,
/// for at most `METRICS_DRAIN_MS` per read). Closing with unread bytes would make the kernel
/// reset the connection, and the peer could lose the answer that says why.
async fn refuse(ctx: &ShardCtx, stream: &mut glommio::net::TcpStream, answer: &[u8]) {
    if stream.write_all(answer).await.is_err() {
        return;
    }
    let _ = stream.shutdown(std::net::Shutdown::Write).await;
    let mut scratch = BytesMut::new();
    let mut drained = 0;
    while drained <= METRICS_DRAIN_BYTES_MAX {
        match read_some(ctx, stream, &mut scratch, METRICS_DRAIN_MS).await {
            Ok(n) if n > 0 => {
                drained += n;
                scratch.clear();
            }
            _ => break,
        }
    }
}

/// How long a refused connection's remaining input is drained before it is closed.
const METRICS_DRAIN_MS: u64 = 1_000;
/// The most of a refused connection's remaining input that is drained.
const METRICS_DRAIN_BYTES_MAX: usize = 64 * 1024;

/// The response to HEAD: the same head (Content-Length included), no body.
fn head_only(answer: Bytes) -> Bytes {
    match answer.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(end) => answer.slice(..end + 4),
        None => answer,
    }
}

/// Gathers every shard's snapshot (concurrently, over the mesh) and the high watermarks of
/// committed partitions held elsewhere (`lag_watermarks`), and renders them. A shard that
/// cannot answer (shutting down) is left out of this scrape.
async fn scrape(ctx: &Rc<ShardCtx>) -> String {
    let replies = futures::future::join_all(
        (0..ctx.shared.nr_shards).map(|shard| mesh::call(ctx, shard, ShardOp::Metrics)),
    )
    .await;
    let shards: Vec<_> = replies
        .into_iter()
        .filter_map(|r| match r {
            ShardReply::Metrics(s) => Some(*s),
            _ => None,
        })
        .collect();
    let elsewhere =
        metrics::partitions_without_replica(&shards, crate::limits::METRICS_GROUP_LAG_SERIES_MAX);
    let remote_high_watermarks = super::lag_watermarks::lookup(ctx, elsewhere).await;
    let snapshot = BrokerSnapshot {
        node_id: ctx.shared.config.node_id,
        remote_high_watermarks,
        shards,
        disk: crate::shard::metrics::disk(&ctx.shared.disk),
        process: process(),
        offline_partitions: crate::shard::metrics::offline_partitions(&ctx.shared.catalog.load()),
    };
    metrics::render::render(&snapshot)
}

/// Measures how long a task that becomes ready waits for this shard: a timer every
/// `METRICS_QUEUE_PROBE_INTERVAL_MS`, and how late it runs past its deadline goes into the
/// shard's task-queue histogram. A shard busy with long polls between yields (a big fetch
/// read, a compaction step) makes every ready task wait that long, and the probe with them.
pub async fn queue_probe() {
    let interval = Duration::from_millis(METRICS_QUEUE_PROBE_INTERVAL_MS);
    loop {
        let due = std::time::Instant::now() + interval;
        glommio::timer::sleep(interval).await;
        let late = std::time::Instant::now().saturating_duration_since(due);
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        crate::metrics::with(|m| m.task_queue_us(us));
    }
}

/// The process's CPU time and resident size. `/proc` files are generated by the kernel on
/// read, without disk I/O, so reading them on the shard does not block it measurably.
fn process() -> Option<metrics::process::ProcessSnapshot> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(metrics::process::ProcessSnapshot {
        cpu_seconds: metrics::process::cpu_seconds(&stat, u64::try_from(ticks).ok()?)?,
        resident_memory_bytes: metrics::process::resident_bytes(&statm, u64::try_from(page).ok()?)?,
    })
}
