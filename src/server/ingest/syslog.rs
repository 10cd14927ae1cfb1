//! Syslog listeners of one shard: TCP (RFC 6587), UDP (RFC 5426: one datagram, one message)
//! and RELP.
//!
//! Back-pressure: the bytes read from a TCP or RELP connection are charged to the shard's
//! request budget (`queued_max_request_bytes`) as they arrive and stay charged until the
//! records made of them are durable. At the budget, the connection waits before its next
//! read: its socket is not read, TCP's window closes, and the sender slows down. UDP has no
//! way to slow a sender: a datagram that arrives while the budget is spent is dropped,
//! counted (`udp_dropped`, in `GET /stats`) and logged (at most every
//! `INGEST_DROP_LOG_INTERVAL_MS`), never silently.
//!
//! A connection idle (nothing to read) holds a small read buffer and no budget, so
//! thousands of quiet senders cost little; connections count against `max_connections`
//! and `max_connections_per_ip` like Kafka clients, and against their listener's
//! `syslog_connections_max`. One silent for `connections_max_idle_ms` (RELP: with no answer
//! owed), or with a partial frame pending `request_timeout_ms` after its first byte, is
//! closed (`crate::ingest::idle`).
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use tracing::{info, warn};

use super::batcher::{AckSink, Batcher};
use crate::config::{IngestSettings, SyslogTransport};
use crate::ingest::framing::{Deframer, Frame};
use crate::ingest::idle::ReadWatch;
use crate::ingest::record::map_syslog;
use crate::ingest::relp::{self, Action, RelpSession};
use crate::ingest::stats::ShardCounters;
use crate::limits::{
    INGEST_DROP_LOG_INTERVAL_MS, INGEST_READ_CHUNK_BYTES, RELP_WINDOW_MAX,
    SYSLOG_DATAGRAM_BYTES_MAX,
};
use crate::shard::ShardCtx;
use crate::shard::TopicPartition;
use crate::storage::{Charge, MemoryClass};

/// First read of a connection with nothing buffered: small, so an idle sender holds little.
const IDLE_READ_BYTES: usize = 2048;

/// A TCP or RELP syslog listener of this shard.
pub struct Listener {
    pub socket: glommio::net::TcpListener,
    pub transport: SyslogTransport,
    /// Its place in `syslog_listeners` (its connection count is shared by the shards).
    pub index: usize,
}

/// Accepts TCP or RELP connections.
pub async fn accept_loop(
    ctx: Rc<ShardCtx>,
    batcher: Rc<Batcher>,
    settings: Rc<IngestSettings>,
    listener: Listener,
    admission: std::sync::Arc<crate::server::admission::Admission>,
) {
    let Listener {
        socket,
        transport,
        index,
    } = listener;
    let serving = ctx.clone();
    super::accept_admitted(
        ctx,
        "syslog",
        socket,
        Some(index),
        admission,
        move |stream, peer| {
            let (ctx, batcher, settings) = (serving.clone(), batcher.clone(), settings.clone());
            async move {
                match transport {
                    SyslogTransport::Relp => {
                        serve_relp(&ctx, &batcher, &settings, stream, peer).await
                    }
                    _ => serve_tcp(&ctx, &batcher, &settings, stream, peer).await,
                }
            }
        },
    )
    .await
}

/// Reads into `buf` (a small read when it is empty) within the connection's deadlines,
/// then charges what came to `held`, waiting there while the shard's budget is spent (that
/// wait is the broker's, not the sender's: no deadline runs). `Ok(0)`: the peer closed.
async fn read_charged<R: futures::AsyncRead + Unpin>(
    ctx: &ShardCtx,
    reader: &mut R,
    buf: &mut BytesMut,
    held: &mut Charge,
    watch: &RefCell<ReadWatch>,
    answers_owed: &dyn Fn() -> bool,
) -> Result<usize, String> {
    if buf.is_empty() && buf.capacity() > INGEST_READ_CHUNK_BYTES {
        // The last frames took the big buffer with them; an idle connection keeps a small one.
        *buf = BytesMut::new();
    }
    let want = if buf.is_empty() {
        IDLE_READ_BYTES
    } else {
        INGEST_READ_CHUNK_BYTES
    };
    let n = super::read_watched(ctx, reader, buf, want, watch, answers_owed).await?;
    held.grow(n).await;
    Ok(n)
}

/// After a read's whole frames were decoded: tells the idle watch what the read brought and
/// splits off the charge of the bytes those frames took, which goes with their records; what
/// stays in the buffer (`left`, a partial frame) stays charged to the connection.
fn settle_read(
    ctx: &ShardCtx,
    watch: &RefCell<ReadWatch>,
    held: &mut Charge,
    left: usize,
    got_frames: bool,
) -> Rc<Charge> {
    watch
        .borrow_mut()
        .handle_read(ctx.shared.clock.monotonic_ms(), got_frames, left);
    let consumed = held.bytes().saturating_sub(left);
    Rc::new(held.split(consumed))
}

/// One syslog message: mapped, routed, added to its partition's batch.
async fn submit_message(
    ctx: &ShardCtx,
    batcher: &Rc<Batcher>,
    settings: &IngestSettings,
    frame: Frame,
    peer: SocketAddr,
    charge: Option<&Rc<Charge>>,
    ack: Option<(Rc<AckSink>, usize)>,
) {
    let Frame { message, truncated } = frame;
    let counters = ctx.shared.ingest_stats.shard(ctx.id);
    ShardCounters::add(&counters.syslog_messages, 1);
    if truncated {
        ShardCounters::add(&counters.syslog_truncated, 1);
    }
    let mapped = map_syslog(
        message,
        truncated,
        peer,
        ctx.shared.clock.wall_ms(),
        &settings.routes,
    );
    if !mapped.parsed {
        ShardCounters::add(&counters.syslog_malformed, 1);
    }
    let Some(partitions) = batcher.partitions(mapped.topic) else {
        ShardCounters::add(&counters.append_failed, 1);
        if let Some((sink, _)) = ack {
            sink.fail_rest(&format!("topic {} does not exist", mapped.topic));
        }
        return;
    };
    let partition = batcher.partition_for(mapped.topic, partitions, mapped.record.key.as_deref());
    let tp = TopicPartition {
        topic: mapped.topic.to_string(),
        partition,
    };
    let ack = ack.map(|(sink, i)| sink.ack(i));
    batcher.submit(tp, mapped.record, ack, charge).await;
}

/// A TCP connection: RFC 6587 frames in, records out; nothing is written back.
async fn serve_tcp(
    ctx: &Rc<ShardCtx>,
    batcher: &Rc<Batcher>,
    settings: &IngestSettings,
    mut stream: glommio::net::TcpStream,
    peer: SocketAddr,
) -> Result<(), String> {
    let mut deframer = Deframer::new(ctx.shared.config.syslog_message_max_bytes);
    let mut buf = BytesMut::new();
    let mut held = ctx.budget.empty(MemoryClass::Requests);
    let mut frames = Vec::new();
    let watch = super::read_watch(ctx);
    loop {
        let n = read_charged(ctx, &mut stream, &mut buf, &mut held, &watch, &|| false).await?;
        if n == 0 || ctx.shutting_down.get() {
            return Ok(());
        }
        loop {
            match deframer.decode(&mut buf) {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => return Err(e.to_string()),
            }
        }
        let charge = settle_read(ctx, &watch, &mut held, buf.len(), !frames.is_empty());
        for f in frames.drain(..) {
            submit_message(ctx, batcher, settings, f, peer, Some(&charge), None).await;
        }
    }
}

/// What the RELP writer sends, in order.
enum Outgoing {
    /// Bytes to send now (the answer to `open`).
    Now(Bytes),
    /// The answer to message `txnr`, once its record is durable.
    Answer { txnr: u32, sink: Rc<AckSink> },
    /// The answer to `close`, then the end of the connection.
    Close(Bytes),
}

/// A RELP connection: the reader decodes frames and submits messages; the writer answers
/// each message, in transaction order, once its record is durable (200) or failed (500).
async fn serve_relp(
    ctx: &Rc<ShardCtx>,
    batcher: &Rc<Batcher>,
    settings: &IngestSettings,
    stream: glommio::net::TcpStream,
    peer: SocketAddr,
) -> Result<(), String> {
    let max = ctx.shared.config.syslog_message_max_bytes;
    // The channel is the window: when it is full the reader stops reading. The session's
    // own bound sits just above, so only a client ignoring its window trips it.
    let session = RefCell::new(RelpSession::new(max, RELP_WINDOW_MAX + 2));
    let (tx, rx) = local_channel::new_bounded::<Outgoing>(RELP_WINDOW_MAX);
    let (mut reader, mut writer) = stream.split();
    let closing = Cell::new(false);
    let watch = super::read_watch(ctx);

    let writing = async {
        while let Some(out) = rx.recv().await {
            match out {
                Outgoing::Now(bytes) => writer.write_all(&bytes).await?,
                Outgoing::Answer { txnr, sink } => {
                    let results = sink.wait().await;
                    let answer = match results.into_iter().next() {
                        Some(Ok(_)) => relp::encode_rsp(txnr, 200, "OK"),
                        Some(Err(why)) => relp::encode_rsp(txnr, 500, &why),
                        None => relp::encode_rsp(txnr, 500, "no result"),
                    };
                    session.borrow_mut().handle_answered();
                    // An answer is activity: the sender's silence before it was waiting.
                    watch
                        .borrow_mut()
                        .handle_answered(ctx.shared.clock.monotonic_ms());
                    writer.write_all(&answer).await?;
                }
                Outgoing::Close(bytes) => {
                    writer.write_all(&bytes).await?;
                    break;
                }
            }
        }
        writer.flush().await?;
        let _ = writer.close().await;
        Ok::<(), std::io::Error>(())
    };

    let reading = async {
        let tx = tx;
        let mut buf = BytesMut::new();
        let mut held = ctx.budget.empty(MemoryClass::Requests);
        let mut frames = Vec::new();
        let answers_owed = || session.borrow().unanswered() > 0;
        loop {
            let n = match read_charged(ctx, &mut reader, &mut buf, &mut held, &watch, &answers_owed)
                .await
            {
                Ok(n) => n,
                Err(e) => {
                    let _ = tx.send(Outgoing::Close(relp::server_close())).await;
                    return Err(e);
                }
            };
            if n == 0 {
                return Ok(());
            }
            loop {
                match relp::decode_frame(&mut buf, max) {
                    Ok(Some(f)) => frames.push(f),
                    Ok(None) => break,
                    Err(e) => {
                        let _ = tx.send(Outgoing::Close(relp::server_close())).await;
                        return Err(e.to_string());
                    }
                }
            }
            let charge = settle_read(ctx, &watch, &mut held, buf.len(), !frames.is_empty());
            for frame in frames.drain(..) {
                let action = session.borrow_mut().handle(frame);
                let out = match action {
                    Ok(Action::Reply(bytes)) => Outgoing::Now(bytes),
                    Ok(Action::Deliver { txnr, message }) => {
                        let sink = AckSink::new(1);
                        submit_message(
                            ctx,
                            batcher,
                            settings,
                            Frame {
                                message,
                                truncated: false,
                            },
                            peer,
                            Some(&charge),
                            Some((sink.clone(), 0)),
                        )
                        .await;
                        Outgoing::Answer { txnr, sink }
                    }
                    Ok(Action::Close(bytes)) => {
                        closing.set(true);
                        Outgoing::Close(bytes)
                    }
                    Err(e) => {
                        let _ = tx.send(Outgoing::Close(relp::server_close())).await;
                        return Err(e.to_string());
                    }
                };
                if tx.send(out).await.is_err() {
                    return Ok(());
                }
                if closing.get() {
                    return Ok(());
                }
            }
        }
    };
    let (read, written) = futures::join!(reading, writing);
    written.map_err(|e| e.to_string())?;
    read
}

/// Receives datagrams, one message each, until the task is cancelled.
pub async fn udp_loop(
    ctx: Rc<ShardCtx>,
    batcher: Rc<Batcher>,
    settings: Rc<IngestSettings>,
    socket: glommio::net::UdpSocket,
) {
    let max = ctx.shared.config.syslog_message_max_bytes;
    let mut buf = vec![0u8; SYSLOG_DATAGRAM_BYTES_MAX];
    let mut drops = DropLog::default();
    loop {
        let (n, peer) = match socket.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                warn!(shard = ctx.id, "syslog UDP receive failed: {e}");
                glommio::timer::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let mut charge = ctx.budget.empty(MemoryClass::Requests);
        if !charge.try_grow(n) {
            let counters = ctx.shared.ingest_stats.shard(ctx.id);
            ShardCounters::add(&counters.udp_dropped, 1);
            drops.note(ctx.id, ctx.shared.clock.monotonic_ms());
            continue;
        };
        let datagram = buf.get(..n).unwrap_or_default();
        // A trailing LF (or NUL, as some senders add) is framing, not message.
        let datagram = datagram
            .strip_suffix(b"\n")
            .or_else(|| datagram.strip_suffix(b"\0"))
            .unwrap_or(datagram);
        let datagram = datagram.strip_suffix(b"\r").unwrap_or(datagram);
        if datagram.is_empty() {
            continue;
        }
        let truncated = datagram.len() > max;
        let message = Bytes::copy_from_slice(datagram.get(..max).unwrap_or(datagram));
        let charge = Rc::new(charge);
        submit_message(
            &ctx,
            &batcher,
            &settings,
            Frame { message, truncated },
            peer,
            Some(&charge),
            None,
        )
        .await;
    }
}

/// Logs UDP drops at most once per interval, with the count since the last line.
#[derive(Default)]
struct DropLog {
    last_ms: Option<u64>,
    unlogged: u64,
}

impl DropLog {
    fn note(&mut self, shard: usize, now_ms: u64) {
        self.unlogged += 1;
        let due = self
            .last_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= INGEST_DROP_LOG_INTERVAL_MS);
        if due {
            info!(
                shard,
                dropped = self.unlogged,
                "syslog UDP datagrams dropped: the shard's memory budget is spent"
            );
            self.last_ms = Some(now_ms);
            self.unlogged = 0;
        }
    }
}
