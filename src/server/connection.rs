//! One client connection: read size-prefixed frames, dispatch each request, write the
//! responses in request order.
//!
//! Requests are *started* strictly in the order they arrive (so a producer's pipelined
//! batches to one partition are appended in order), while their completions — durability
//! waits, long polls — overlap. A bounded queue between the reader and the writer caps the
//! requests in flight per connection; when it is full the reader stops reading, which pushes
//! back on the client through TCP.
use std::rc::Rc;

use bytes::{Buf, Bytes, BytesMut};
use futures::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use thiserror::Error;
use tracing::warn;

use super::dispatch::{self, PendingResponse};
use crate::protocol::frame::{check_size, FrameError};
use crate::shard::ShardCtx;

/// Bytes asked of the socket per read when the frame length is not known yet.
const READ_CHUNK_BYTES: usize = 64 * 1024;

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
}

pub async fn serve(
    ctx: &Rc<ShardCtx>,
    stream: glommio::net::TcpStream,
) -> Result<(), ConnectionError> {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let (mut reader, mut writer) = stream.split();
    let (tx, rx) = local_channel::new_bounded::<PendingResponse>(
        ctx.shared.config.connection_requests_in_flight_max,
    );

    let writer_task = glommio::spawn_local(async move {
        while let Some(pending) = rx.recv().await {
            let Some(chunks) = pending.await else {
                continue;
            };
            super::vectored::write_all_vectored(&mut writer, fd, &chunks).await?;
        }
        writer.flush().await?;
        let _ = writer.close().await;
        Ok::<(), std::io::Error>(())
    });

    let max = ctx.shared.config.socket_request_max_bytes;
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let result: Result<(), ConnectionError> = async {
        loop {
            let frame = match read_frame(ctx, &mut reader, &mut buf, max).await {
                Ok(f) => f,
                Err(ConnectionError::Closed) | Err(ConnectionError::ShuttingDown) => return Ok(()),
                Err(e) => return Err(e),
            };
            let pending = match dispatch::dispatch(ctx, frame, &peer).await {
                Ok(p) => p,
                Err(e) => {
                    warn!(%peer, "closing connection: {e}");
                    return Err(e.into());
                }
            };
            if tx.send(pending).await.is_err() {
                // The writer failed (peer gone); stop reading.
                return Ok(());
            }
        }
    }
    .await;
    // Let the writer finish the responses already started, then close.
    drop(tx);
    let written = writer_task.await;
    result?;
    written?;
    Ok(())
}

/// Reads one whole frame (without its size prefix). Between requests it also watches for
/// shutdown, so an idle connection closes promptly.
async fn read_frame<R: futures::AsyncRead + Unpin>(
    ctx: &Rc<ShardCtx>,
    reader: &mut R,
    buf: &mut BytesMut,
    max: usize,
) -> Result<Bytes, ConnectionError> {
    while buf.len() < 4 {
        if buf.is_empty() && ctx.shutting_down.get() {
            return Err(ConnectionError::ShuttingDown);
        }
        let idle = buf.is_empty();
        let read = read_some(reader, buf, READ_CHUNK_BYTES);
        if idle {
            let shutdown = async {
                ctx.shutdown_notify.notified().await;
                Err(ConnectionError::ShuttingDown)
            };
            futures_lite::future::or(read, shutdown).await?;
        } else {
            read.await?;
        }
    }
    let size = check_size(i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]), max)?;
    while buf.len() < 4 + size {
        let missing = 4 + size - buf.len();
        read_some(
            reader,
            buf,
            missing
                .max(READ_CHUNK_BYTES)
                .min(missing + READ_CHUNK_BYTES),
        )
        .await?;
    }
    buf.advance(4);
    Ok(buf.split_to(size).freeze())
}

/// Appends up to `want` bytes from the socket to `buf`.
async fn read_some<R: futures::AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    want: usize,
) -> Result<(), ConnectionError> {
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
    Ok(())
}
