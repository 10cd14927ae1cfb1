//! A connection from one shard to another broker, used by the replica fetchers: Kafka
//! requests over a glommio TCP stream, one in flight at a time (so a response's correlation
//! id must be the one just sent, or the stream is out of step and dropped).
//!
//! Peers are our own brokers, so versions are fixed (no ApiVersions round trip), but every
//! response is still bounded and decoded defensively: a peer can be old, broken or not ours.
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

use crate::limits::PEER_RESPONSE_BYTES_MAX;

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("I/O with {addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr} took longer than {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
    #[error("encoding a request: {0}")]
    Encode(String),
    #[error("{addr} sent a bad response: {message}")]
    BadResponse { addr: String, message: String },
}

pub struct PeerConnection {
    addr: String,
    stream: TcpStream,
    correlation_id: i32,
    client_id: StrBytes,
}

impl PeerConnection {
    pub async fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
    ) -> Result<PeerConnection, PeerError> {
        let connect_err = |source| PeerError::Connect {
            addr: addr.to_string(),
            source,
        };
        let sock = std::net::ToSocketAddrs::to_socket_addrs(addr)
            .map_err(connect_err)?
            .next()
            .ok_or_else(|| {
                connect_err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "address does not resolve",
                ))
            })?;
        let stream = TcpStream::connect_timeout(sock, timeout)
            .await
            .map_err(|e| connect_err(std::io::Error::other(e.to_string())))?;
        let _ = stream.set_nodelay(true);
        Ok(PeerConnection {
            addr: addr.to_string(),
            stream,
            correlation_id: 0,
            client_id: StrBytes::from_string(client_id.to_string()),
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `request` at `version` and waits up to `timeout` for its response.
    pub async fn call<R: Request>(
        &mut self,
        request: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response, PeerError> {
        let key = ApiKey::try_from(R::KEY)
            .map_err(|()| PeerError::Encode(format!("unknown API key {}", R::KEY)))?;
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut frame = BytesMut::with_capacity(256);
        frame.extend_from_slice(&[0; 4]);
        header
            .encode(&mut frame, key.request_header_version(version))
            .map_err(|e| PeerError::Encode(e.to_string()))?;
        request
            .encode(&mut frame, version)
            .map_err(|e| PeerError::Encode(e.to_string()))?;
        let len = i32::try_from(frame.len() - 4)
            .map_err(|_| PeerError::Encode("request too large".into()))?;
        frame[..4].copy_from_slice(&len.to_be_bytes());
        let io = |source| PeerError::Io {
            addr: self.addr.clone(),
            source,
        };
        let exchange = async {
            self.stream.write_all(&frame).await.map_err(io)?;
            let mut size = [0u8; 4];
            self.stream.read_exact(&mut size).await.map_err(io)?;
            let size = i32::from_be_bytes(size);
            let size = usize::try_from(size)
                .ok()
                .filter(|s| (4..=PEER_RESPONSE_BYTES_MAX).contains(s))
                .ok_or_else(|| PeerError::BadResponse {
                    addr: self.addr.clone(),
                    message: format!("response size {size}"),
                })?;
            let mut body = vec![0u8; size];
            self.stream.read_exact(&mut body).await.map_err(io)?;
            Ok::<_, PeerError>(Bytes::from(body))
        };
        let timer = glommio::timer::sleep(timeout);
        let body = futures_lite::future::or(async { Some(exchange.await) }, async {
            timer.await;
            None
        })
        .await
        .ok_or_else(|| PeerError::Timeout {
            addr: self.addr.clone(),
            timeout,
        })??;
        let bad = |message: String| PeerError::BadResponse {
            addr: self.addr.clone(),
            message,
        };
        let mut body = body;
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
            .map_err(|e| bad(format!("header: {e}")))?;
        if header.correlation_id != self.correlation_id {
            return Err(bad(format!(
                "correlation id {} where {} was expected",
                header.correlation_id, self.correlation_id
            )));
        }
        crate::alloc::guarded(|| R::Response::decode(&mut body, version))
            .map_err(|e| bad(format!("decode: {e}")))
    }
}
