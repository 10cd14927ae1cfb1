//! One client connection: read size-prefixed frames, dispatch each request, write the
//! responses in request order.
//!
//! Requests are *started* strictly in the order they arrive (so a producer's pipelined
//! batches to one partition are appended in order), while their completions — durability
//! waits, long polls — overlap. A bounded queue between the reader and the writer caps the
//! requests in flight per connection; when it is full the reader stops reading, which pushes
//! back on the client through TCP.
//!
//! Memory and time are bounded per request, as Kafka bounds them:
//! - A frame's buffer grows as its bytes arrive (never to the size the header claims), and
//!   those bytes are charged to the shard's memory budget (class `Requests`, capped by
//!   `queued_max_request_bytes`) before they are read. When the budget is spent the reader
//!   waits — its socket is not read — until responses are written and their requests' bytes
//!   given back, or caches evicted.
//! - A response, once built, is charged to the same budget (class `Responses`) until it is
//!   written: fetch data waiting for a slow reader counts, and slows the reading of new
//!   requests shard-wide when the budget is spent.
//! - A request whose first byte came `request_timeout_ms` ago and that is still incomplete
//!   (a slowloris sender, or one stuck waiting for budget) closes the connection, freeing its
//!   bytes. A connection with nothing read and nothing in flight for
//!   `connections_max_idle_ms` is closed too.
//! - A response the client does not read for `request_timeout_ms` (no progress writing)
//!   closes the connection, so a client cannot pin its responses' memory by not reading.
use std::cell::Cell;
use std::pin::pin;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use futures::future::{select, Either};
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use kafka_protocol::messages::ApiKey;
use thiserror::Error;
use tracing::{debug, warn};

use super::dispatch::{self, PendingResponse};
use crate::limits::{
    CONNECTION_READ_CHUNK_MAX, CONNECTION_READ_CHUNK_MIN, CONNECTION_READ_HEADER_BYTES,
};
use crate::protocol::frame::{check_size, FrameError};
use crate::security::Session;
use crate::shard::ShardCtx;
use crate::storage::{Charge, MemoryClass};

#[derive(Debug, Error)]
pub enum ConnectionError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Frame(#[from] FrameError),
    #[error("peer closed the connection")]
    Closed,
    #[error("broker shutting down")]
    ShuttingDown,
    #[error("request incomplete after request_timeout_ms ({timeout_ms} ms): {read} of {size} bytes read")]
    RequestTimeout {
        timeout_ms: u64,
        read: usize,
        size: usize,
    },
    #[error("idle for connections_max_idle_ms ({idle_ms} ms)")]
    Idle { idle_ms: u64 },
    #[error("a TLS client on a plaintext listener (its first bytes are a TLS handshake, not a Kafka request)")]
    TlsOnPlaintext,
    #[error("{0}")]
    Sasl(#[from] super::sasl::SaslRefusal),
}

/// A request handed to the writer: its response, the request bytes it holds in the shard's
/// budget until that response is written, and its API key and arrival (for the metrics).
type Queued = (PendingResponse, Charge, i16, Instant);

/// What the reader and the writer of one connection share: requests queued but not yet
/// answered, and when the connection last did anything (for the idle timeout).
struct Activity {
    in_flight: Cell<usize>,
    last: Cell<Instant>,
}

impl Activity {
    fn touch(&self) {
        self.last.set(Instant::now());
    }
}

/// Serves a plaintext connection: responses go to the socket with `sendmsg`, straight from
/// their buffers (`vectored`).
pub async fn serve(
    ctx: &Rc<ShardCtx>,
    stream: glommio::net::TcpStream,
    session: Session,
) -> Result<(), ConnectionError> {
    // No progress writing a response for this long fails the write (glommio's write
    // timeout is re-armed whenever the socket accepts bytes).
    set_write_timeout(ctx, &stream);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    serve_stream(ctx, stream, Some(fd), session).await
}

/// Serves a connection whose TLS handshake is done: responses are encrypted by rustls, so
/// they go through the stream's own (vectored) writes, flushed once per response.
pub async fn serve_tls(
    ctx: &Rc<ShardCtx>,
    stream: futures_rustls::server::TlsStream<glommio::net::TcpStream>,
    session: Session,
) -> Result<(), ConnectionError> {
    serve_stream(ctx, stream, None, session).await
}

/// Arms the socket's write timeout: no progress writing for `request_timeout_ms` fails the
/// write.
pub fn set_write_timeout(ctx: &ShardCtx, stream: &glommio::net::TcpStream) {
    let timeout = Duration::from_millis(ctx.shared.config.request_timeout_ms);
    let _ = stream.set_write_timeout(Some(timeout));
}

/// `raw_fd` is the socket to write responses to directly (plaintext), `None` to write them
/// through `stream` (TLS).
async fn serve_stream<S>(
    ctx: &Rc<ShardCtx>,
    stream: S,
    raw_fd: Option<std::os::fd::RawFd>,
    session: Session,
) -> Result<(), ConnectionError>
where
    S: futures::AsyncRead + futures::AsyncWrite + Unpin,
{
    let peer = session.peer.clone();
    let config = &ctx.shared.config;
    let (mut reader, mut writer) = stream.split();
    let (tx, rx) = local_channel::new_bounded::<Queued>(config.connection_requests_in_flight_max);
    let activity = Activity {
        in_flight: Cell::new(0),
        last: Cell::new(Instant::now()),
    };
    // Client quotas: the reader resolves and records; the writer starts a throttled
    // response's mute once it is written (KIP-219), and the reader waits it out.
    let mut quota = super::quota::ConnectionQuota::default();
    let throttle = quota.throttle.clone();

    let writing = pin!(async {
        while let Some((pending, request_bytes, api_key, arrived)) = rx.recv().await {
            let answered = pending.await;
            let latency_us = u64::try_from(arrived.elapsed().as_micros()).unwrap_or(u64::MAX);
            crate::metrics::with(|m| m.request(api_key, latency_us, answered.is_err()));
            match answered {
                Ok(Some(chunks)) => {
                    // Already held: counted (not waited for) until written.
                    let len = chunks.iter().map(|c| c.len()).sum();
                    let _response = ctx.budget.charge_forced(MemoryClass::Responses, len);
                    match raw_fd {
                        Some(fd) => {
                            super::vectored::write_all_vectored(&mut writer, fd, &chunks).await?
                        }
                        None => {
                            super::vectored::write_all_through(&mut writer, &chunks).await?;
                            writer.flush().await?;
                        }
                    }
                }
                Ok(None) => {}
                // The client waits for this correlation id: closing the connection tells it
                // to give up on it (and retry) instead of waiting forever.
                Err(e) => {
                    warn!(%peer, "closing connection: cannot encode a response: {e}");
                    break;
                }
            }
            throttle.on_written();
            // The response is out: the request's bytes go back to the shard.
            drop(request_bytes);
            activity
                .in_flight
                .set(activity.in_flight.get().saturating_sub(1));
            activity.touch();
        }
        writer.flush().await?;
        let _ = writer.close().await;
        Ok::<(), std::io::Error>(())
    });

    let reading = pin!(async {
        let tx = tx;
        // Only the reader dispatches, one request at a time: it owns the session.
        let mut session = session;
        let mut buf = BytesMut::new();
        // SASL state, on a SASL_PLAINTEXT or SASL_SSL listener: only the reader touches it,
        // one request at a time, in arrival order.
        let mut sasl = super::sasl::SaslSession::new(session.security_protocol.uses_sasl());
        loop {
            // A throttled client: nothing more is read from it until its mute ends.
            if quota.throttle.is_muted() {
                let shutdown = ctx.shutdown_notify.listen();
                futures_lite::future::or(quota.throttle.wait(), shutdown).await;
            }
            let (frame, request_bytes) = match read_frame(ctx, &mut reader, &mut buf, &activity)
                .await
            {
                Ok(f) => f,
                Err(ConnectionError::Closed) | Err(ConnectionError::ShuttingDown) => return Ok(()),
                Err(e @ ConnectionError::TlsOnPlaintext) => {
                    warn!(%peer, listener = %session.listener, "closing connection: {e}");
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            // A throttle decided while this request was on its way (the request-time quota
            // is decided by the writer, as the previous response is finished) holds it until
            // the mute ends: a client that waits for each answer before sending the next
            // would otherwise always find the reader past the check above.
            if quota.throttle.is_muted() {
                let shutdown = ctx.shutdown_notify.listen();
                futures_lite::future::or(quota.throttle.wait(), shutdown).await;
            }
            activity.touch();
            let arrived = Instant::now();
            // The request header's first field; a frame too short for it is refused below.
            let api_key = frame
                .get(..2)
                .and_then(|b| <[u8; 2]>::try_from(b).ok())
                .map_or(-1, i16::from_be_bytes);
            // The exchange's mechanism before this frame moves it, for the metrics.
            let mechanism = sasl.mechanism().or(sasl.pending_mechanism());
            let (pending, next) = if sasl.expects_raw_token() {
                // After a v0 SaslHandshake the frame is a bare SASL token, not a request.
                dispatch::sasl_raw_token(ctx, &mut sasl, &frame, &peer)
            } else {
                let api = ApiKey::try_from(api_key).ok();
                let sasl_api = matches!(
                    api,
                    Some(ApiKey::SaslHandshake) | Some(ApiKey::SaslAuthenticate)
                );
                if let Some(api) = api {
                    // Unauthenticated (or expired) on a SASL listener: closed unserved,
                    // as Kafka does.
                    if let Err(refusal) = sasl.admit(api, arrived) {
                        crate::metrics::with(|m| {
                            m.request_refused(api_key);
                            m.authentication_failed(&session.listener, mechanism_label(mechanism));
                        });
                        debug!(%peer, "closing connection: {refusal}");
                        return Err(refusal.into());
                    }
                }
                let result = if sasl.required() && sasl_api {
                    let answered = dispatch::sasl_request(ctx, &mut sasl, frame, &peer);
                    // The connection now acts as the authenticated user.
                    if let (Some(user), Some(mechanism)) = (sasl.user(), sasl.mechanism()) {
                        session.principal = crate::security::KafkaPrincipal::user(user);
                        session.authentication = crate::security::Authentication::Authenticated {
                            mechanism: mechanism.name().to_string(),
                        };
                    }
                    answered
                } else {
                    dispatch::dispatch(ctx, frame, &mut session, &mut quota)
                        .await
                        .map(|p| (p, dispatch::SaslNext::Serve))
                };
                match result {
                    Ok(p) => p,
                    Err(e) => {
                        crate::metrics::with(|m| m.request_refused(api_key));
                        warn!(%peer, "closing connection: {e}");
                        return Err(e.into());
                    }
                }
            };
            activity.in_flight.set(activity.in_flight.get() + 1);
            if tx
                .send((pending, request_bytes, api_key, arrived))
                .await
                .is_err()
            {
                // The writer failed (peer gone); stop reading.
                return Ok(());
            }
            if next == dispatch::SaslNext::Close {
                // Authentication failed: the writer sends the answer, then closes.
                let label = mechanism_label(mechanism);
                crate::metrics::with(|m| m.authentication_failed(&session.listener, label));
                return Ok(());
            }
        }
    });

    match select(reading, writing).await {
        // Reading ended (the peer closed, shutdown, or an error): the queue is closed, so the
        // writer finishes the responses already started, then closes.
        Either::Left((read, writing)) => {
            let written = writing.await;
            read?;
            written?;
        }
        // Writing failed (peer gone, or not reading its responses): stop reading too.
        Either::Right((written, _reading)) => written?,
    }
    Ok(())
}

/// A SASL mechanism as the failed-authentication metric labels it (`none`: no mechanism
/// was chosen yet).
fn mechanism_label(m: Option<crate::security::sasl::Mechanism>) -> &'static str {
    m.map_or("none", |m| m.name())
}

/// Reads one whole frame (without its size prefix), with the budget bytes it holds.
async fn read_frame<R: futures::AsyncRead + Unpin>(
    ctx: &Rc<ShardCtx>,
    reader: &mut R,
    buf: &mut BytesMut,
    activity: &Activity,
) -> Result<(Bytes, Charge), ConnectionError> {
    if buf.is_empty() {
        wait_for_request(ctx, reader, buf, activity).await?;
    }
    // The request's first byte is here: from now on it has request_timeout_ms to complete.
    let timeout_ms = ctx.shared.config.request_timeout_ms;
    let progress = Cell::new((0usize, 0usize));
    let read = read_rest_of_frame(ctx, reader, buf, &progress);
    let timeout = async {
        glommio::timer::sleep(Duration::from_millis(timeout_ms)).await;
        let (read, size) = progress.get();
        Err(ConnectionError::RequestTimeout {
            timeout_ms,
            read,
            size,
        })
    };
    futures_lite::future::or(read, timeout).await
}

/// Waits for the first bytes of the next request, watching for shutdown and for the idle
/// timeout meanwhile. The read is small (`CONNECTION_READ_HEADER_BYTES`) and not counted in
/// the budget: an idle connection costs little, and connections are bounded in number.
async fn wait_for_request<R: futures::AsyncRead + Unpin>(
    ctx: &Rc<ShardCtx>,
    reader: &mut R,
    buf: &mut BytesMut,
    activity: &Activity,
) -> Result<(), ConnectionError> {
    let idle_ms = ctx.shared.config.connections_max_idle_ms;
    let idle = Duration::from_millis(idle_ms);
    let mut read = pin!(read_some(reader, buf, CONNECTION_READ_HEADER_BYTES));
    loop {
        if ctx.shutting_down.get() {
            return Err(ConnectionError::ShuttingDown);
        }
        let idle_for = activity.last.get().elapsed();
        // Responses still in flight (a long poll, a rebalance) keep the connection busy.
        if idle_for >= idle && activity.in_flight.get() == 0 {
            return Err(ConnectionError::Idle { idle_ms });
        }
        let wake = idle.saturating_sub(idle_for).max(Duration::from_millis(1));
        let shutdown = async {
            ctx.shutdown_notify.listen().await;
            Ok(false)
        };
        let timer = async {
            glommio::timer::sleep(wake).await;
            Ok(false)
        };
        let got = futures_lite::future::or(
            async { read.as_mut().await.map(|_| true) },
            futures_lite::future::or(shutdown, timer),
        )
        .await?;
        if got {
            return Ok(());
        }
    }
}

/// Reads the rest of a frame whose first bytes are in `buf`. `progress` is kept at (bytes
/// of the body read, size) for the timeout's message.
async fn read_rest_of_frame<R: futures::AsyncRead + Unpin>(
    ctx: &Rc<ShardCtx>,
    reader: &mut R,
    buf: &mut BytesMut,
    progress: &Cell<(usize, usize)>,
) -> Result<(Bytes, Charge), ConnectionError> {
    while buf.len() < 4 {
        read_some(reader, buf, CONNECTION_READ_HEADER_BYTES - buf.len()).await?;
    }
    let max = ctx.shared.config.socket_request_max_bytes;
    let prefix: [u8; 4] = buf
        .get(..4)
        .and_then(|p| p.try_into().ok())
        .ok_or(ConnectionError::Closed)?;
    let size = match check_size(i32::from_be_bytes(prefix), max) {
        Ok(size) => size,
        // A TLS record header (handshake 0x16, version 0x03 0x0N) read as a size is ~370 MB:
        // say what it is rather than "too large".
        Err(_) if prefix[0] == 0x16 && prefix[1] == 0x03 => {
            return Err(ConnectionError::TlsOnPlaintext)
        }
        Err(e) => return Err(e.into()),
    };
    // The bytes of this frame already read came with the size prefix; count them first.
    let mut held = ctx
        .budget
        .acquire(MemoryClass::Requests, (buf.len() - 4).min(size))
        .await;
    while buf.len() < 4 + size {
        let received = buf.len() - 4;
        progress.set((received, size));
        let missing = size - received;
        // Grow with what has arrived: a sender that claims much and sends little is given
        // little buffer. Never read past the frame, so `buf` holds no uncounted bytes.
        let want =
            missing.min(received.clamp(CONNECTION_READ_CHUNK_MIN, CONNECTION_READ_CHUNK_MAX));
        held.grow(want).await;
        let got = read_some(reader, buf, want).await?;
        held.shrink(want - got);
    }
    buf.advance(4);
    let frame = buf.split_to(size).freeze();
    // `buf` may still share the frame's (possibly large) allocation; keep only the few
    // bytes read ahead, in a buffer of their own, so the allocation goes with the frame.
    if buf.capacity() > CONNECTION_READ_HEADER_BYTES {
        *buf = BytesMut::from(&buf[..]);
    }
    Ok((frame, held))
}

/// Appends up to `want` bytes from the socket to `buf`; returns how many came.
async fn read_some<R: futures::AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    want: usize,
) -> Result<usize, ConnectionError> {
    let start = buf.len();
    buf.resize(start + want, 0);
    let n = match reader.read(&mut buf[start..]).await {
        Ok(n) => n,
        Err(e) => {
            buf.truncate(start);
            return Err(e.into());
        }
    };
    buf.truncate(start + n);
    if n == 0 {
        return Err(ConnectionError::Closed);
    }
    Ok(n)
}
