//! The HTTP produce listener of one shard (`http_listen`): HTTP/1.1 with keep-alive, one
//! request at a time per connection, answered once its records are durable. The request
//! and body formats are in `crate::ingest::http`.
//!
//! Bounds: a head of at most `HTTP_HEAD_BYTES_MAX`, a body of at most
//! `socket_request_max_bytes` (charged to the shard's request budget before it is read, so
//! a shard at its budget stops reading bodies), at most `HTTP_RECORDS_PER_REQUEST_MAX`
//! records; a request (head and body) not complete within `request_timeout_ms` of its first
//! byte closes the connection, as does `connections_max_idle_ms` without a request
//! (`crate::ingest::idle`); waiting for budget or for durability is not counted.
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::AsyncWriteExt;
use tracing::debug;

use super::batcher::{AckSink, Batcher};
use crate::ingest::http::{self as proto, HttpError, Route};
use crate::ingest::idle::ReadWatch;
use crate::ingest::record::IngestRecord;
use crate::ingest::stats::ShardCounters;
use crate::limits::{HTTP_HEAD_BYTES_MAX, HTTP_RECORDS_PER_REQUEST_MAX, INGEST_READ_CHUNK_BYTES};
use crate::shard::ShardCtx;
use crate::shard::TopicPartition;
use crate::storage::MemoryClass;

const JSON: &str = "application/vnd.kafka.v2+json";

pub async fn accept_loop(
    ctx: Rc<ShardCtx>,
    batcher: Rc<Batcher>,
    listener: glommio::net::TcpListener,
    admission: std::sync::Arc<crate::server::admission::Admission>,
) {
    let serving = ctx.clone();
    super::accept_admitted(
        ctx,
        "HTTP",
        listener,
        None,
        admission,
        move |stream, peer| {
            let (ctx, batcher) = (serving.clone(), batcher.clone());
            async move { serve(&ctx, &batcher, stream, peer).await }
        },
    )
    .await
}

async fn serve(
    ctx: &Rc<ShardCtx>,
    batcher: &Rc<Batcher>,
    mut stream: glommio::net::TcpStream,
    peer: SocketAddr,
) -> Result<(), String> {
    let config = &ctx.shared.config;
    let _ = stream.set_write_timeout(Some(Duration::from_millis(config.request_timeout_ms)));
    let mut buf = BytesMut::new();
    let watch = super::read_watch(ctx);
    // Bytes of the request being read (head and body): while any, the request has
    // request_timeout_ms from its first byte; with none, the connection is idle.
    let mut request_bytes = 0usize;
    loop {
        let head = loop {
            match proto::parse_request_head(&mut buf, HTTP_HEAD_BYTES_MAX) {
                Ok(Some(h)) => break h,
                Ok(None) => {
                    let n = read_request(
                        ctx,
                        &mut stream,
                        &mut buf,
                        HTTP_HEAD_BYTES_MAX,
                        &watch,
                        &mut request_bytes,
                    )
                    .await?;
                    if n == 0 {
                        return Ok(());
                    }
                }
                Err(e) => {
                    let body = proto::error_body(u32::from(e.status()) * 100, &e.to_string());
                    let _ = stream
                        .write_all(&proto::response(e.status(), JSON, &body, true))
                        .await;
                    return Err(e.to_string());
                }
            }
        };
        let max = config.socket_request_max_bytes;
        if head.content_length > max {
            let e = HttpError::BodyTooLarge {
                len: head.content_length,
                max,
            };
            let body = proto::error_body(41300, &e.to_string());
            let _ = stream
                .write_all(&proto::response(413, JSON, &body, true))
                .await;
            return Err(e.to_string());
        }
        // The body's bytes are charged before they are read: at the budget, wait.
        let held = ctx
            .budget
            .acquire(MemoryClass::Requests, head.content_length)
            .await;
        while buf.len() < head.content_length {
            let want = (head.content_length - buf.len()).min(INGEST_READ_CHUNK_BYTES);
            let n =
                read_request(ctx, &mut stream, &mut buf, want, &watch, &mut request_bytes).await?;
            if n == 0 {
                return Ok(());
            }
        }
        let body = buf.split_to(head.content_length).freeze();
        let (status, answer) = match proto::route(&head) {
            Route::Produce { topic } => {
                produce(ctx, batcher, &topic, &head.content_type, body, held).await
            }
            Route::Stats => (
                200,
                serde_json::to_string(&ctx.shared.ingest_stats.totals()).unwrap_or_default(),
            ),
            Route::NotFound => (404, proto::error_body(40400, "not found")),
            Route::MethodNotAllowed => (
                405,
                proto::error_body(40500, "only POST /topics/{topic} produces"),
            ),
        };
        stream
            .write_all(&proto::response(status, JSON, &answer, head.close))
            .await
            .map_err(|e| e.to_string())?;
        if head.close {
            let _ = stream.close().await;
            return Ok(());
        }
        // Answered: the idle clock starts now; bytes of a next request already read
        // (pipelined) start its own clock.
        request_bytes = buf.len();
        watch
            .borrow_mut()
            .handle_read(ctx.shared.clock.monotonic_ms(), true, request_bytes);
        debug!(%peer, status, "HTTP request answered");
    }
}

/// Reads more of a request within the connection's deadlines and tells them how much of it
/// is in (`request_bytes`).
async fn read_request(
    ctx: &ShardCtx,
    stream: &mut glommio::net::TcpStream,
    buf: &mut BytesMut,
    want: usize,
    watch: &RefCell<ReadWatch>,
    request_bytes: &mut usize,
) -> Result<usize, String> {
    let n = super::read_watched(ctx, stream, buf, want, watch, &|| false).await?;
    *request_bytes += n;
    watch
        .borrow_mut()
        .handle_read(ctx.shared.clock.monotonic_ms(), false, *request_bytes);
    Ok(n)
}

/// Produces the records of one request; returns the status and the body to answer.
async fn produce(
    ctx: &Rc<ShardCtx>,
    batcher: &Rc<Batcher>,
    topic: &str,
    content_type: &str,
    body: Bytes,
    held: crate::storage::Charge,
) -> (u16, String) {
    let records = match proto::decode_body(&body, content_type, HTTP_RECORDS_PER_REQUEST_MAX) {
        Ok(r) => r,
        Err(e) => {
            return (
                e.status(),
                proto::error_body(u32::from(e.status()) * 100, &e.to_string()),
            )
        }
    };
    let partitions = match batcher.partitions(topic) {
        Some(n) => n,
        None => match create_topic(ctx, topic).await {
            Ok(n) => n,
            Err((status, body)) => return (status, body),
        },
    };
    let counters = ctx.shared.ingest_stats.shard(ctx.id);
    ShardCounters::add(&counters.http_records, records.len() as u64);
    let sink = AckSink::new(records.len());
    let charge = Rc::new(held);
    let now = ctx.shared.clock.wall_ms();
    // Keyless records of one request share a partition, so they stay in order.
    let keyless_partition = batcher.partition_for(topic, partitions, None);
    for (i, r) in records.into_iter().enumerate() {
        let partition = match r.partition {
            Some(p) if p < partitions => p,
            Some(p) => {
                sink.fail_one(i, &format!("partition {p} does not exist"));
                continue;
            }
            None => match &r.key {
                Some(k) => batcher.partition_for(topic, partitions, Some(k)),
                None => keyless_partition,
            },
        };
        let record = IngestRecord {
            key: r.key,
            value: r.value,
            timestamp_ms: now,
            headers: r.headers,
        };
        let tp = TopicPartition {
            topic: topic.to_string(),
            partition,
        };
        batcher
            .submit(tp, record, Some(sink.ack(i)), Some(&charge))
            .await;
    }
    let results = sink.wait().await;
    let failed = results.iter().any(|r| r.is_err());
    (
        if failed { 500 } else { 200 },
        proto::offsets_body(&results),
    )
}

/// Creates a topic a request names, when the broker creates topics on first use.
async fn create_topic(ctx: &Rc<ShardCtx>, topic: &str) -> Result<i32, (u16, String)> {
    if !ctx.shared.config.auto_create_topics_enable {
        return Err((404, proto::error_body(40401, "topic not found")));
    }
    match crate::server::admin::create_topic(ctx, topic, -1, -1, Default::default(), false).await {
        Ok(made) => Ok(made.num_partitions.max(1)),
        Err(e) if e.code == crate::protocol::error::ErrorCode::TopicAlreadyExists => {
            let catalog = ctx.shared.catalog.load();
            catalog
                .topic(topic)
                .and_then(|m| i32::try_from(m.partitions.len()).ok())
                .ok_or((503, proto::error_body(50300, "topic being created")))
        }
        Err(e) => Err((
            if e.code == crate::protocol::error::ErrorCode::InvalidTopicException {
                400
            } else {
                503
            },
            proto::error_body(40000, &e.message),
        )),
    }
}
