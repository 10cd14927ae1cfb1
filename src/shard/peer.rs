//! A connection from one shard to another broker, used by the replica fetchers, the
//! transaction markers and the transaction verification: Kafka requests over a glommio TCP
//! stream, one in flight at a time (so a response's correlation id must be the one just
//! sent, or the stream is out of step and dropped).
//!
//! Peers are our own brokers, so versions are fixed (no ApiVersions round trip), but every
//! response is still bounded and decoded defensively: a peer can be old, broken or not ours.
//!
//! Security is the inter-broker listener's, as Kafka's brokers do it (`PeerSecurity`): TLS
//! (rustls through futures-rustls, the server checked against `ssl_truststore_location` and
//! its name, the broker's own certificate offered when the server asks for one), then SASL
//! with `sasl_mechanism_inter_broker_protocol` as `inter_broker_sasl_username`. The broker
//! is then that principal on the other side, which must grant it CLUSTER_ACTION
//! (`super_users`); without it a follower's Fetch is refused like anyone's. A session the
//! other side bounds (KIP-368, `connections_max_reauth_ms`) is re-authenticated on the same
//! connection before it ends.
//!
//! The TLS files (truststore, the broker's certificate and key) are reloaded without a
//! restart as the listeners reload theirs (`security::tls_reload::ReloadingTls`): a
//! connection about to be made looks at them at most once per `TLS_RELOAD_CHECK_INTERVAL_MS`
//! and uses the rotated ones; a change that does not load is logged and the previous files
//! kept.
//! Connections already made keep the session they have.
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::TcpStream;
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

use crate::config::Config;
use crate::limits::PEER_RESPONSE_BYTES_MAX;
use crate::security::sasl::{ClientStep, PeerLogin, SaslClientExchange};
use crate::security::tls::{describe_tls_error, host_of};
use crate::security::tls_reload::ReloadingTls;
use crate::security::{Listeners, SecurityProtocol};

/// SaslAuthenticate v1: the first with the session's lifetime (KIP-368).
const SASL_AUTHENTICATE_VERSION: i16 = 1;
/// SaslHandshake v1: the tokens travel in SaslAuthenticate requests.
const SASL_HANDSHAKE_VERSION: i16 = 1;
/// Part of a bounded session's lifetime after which it is re-authenticated (Kafka's
/// clients pick 85-95% at random; brokers' connections are few, one point is enough).
const REAUTH_AT_PERCENT: u32 = 85;

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
    /// The TLS handshake with the other broker failed (its certificate is not trusted or
    /// not for its address, or it refused ours).
    #[error("TLS with {addr} (inter-broker listener): {message}")]
    Tls { addr: String, message: String },
    /// The other broker refused this broker's SASL credentials, or cannot use them.
    #[error("SASL authentication with {addr} (inter-broker listener) failed: {message}")]
    Auth { addr: String, message: String },
}

impl PeerError {
    /// A failure of security settings (certificates, credentials), which retrying does not
    /// mend and an operator must hear about; the others are the network's.
    pub fn is_security(&self) -> bool {
        matches!(self, PeerError::Tls { .. } | PeerError::Auth { .. })
    }
}

/// How this broker's connections to the other brokers secure themselves: the protocol of
/// the inter-broker listener, with the TLS client configuration and the SASL login it needs.
/// Built at start; the TLS files are reloaded when they change (`ReloadingTls`).
#[derive(Debug)]
pub struct PeerSecurity {
    protocol: SecurityProtocol,
    /// `None` on a TLS listener only when no truststore is set (a single node, which has no
    /// peers; `Config::validate` refuses a cluster without one).
    tls: Option<ReloadingTls<rustls::ClientConfig>>,
    /// `None` on a SASL listener only without credentials (likewise a single node).
    sasl: Option<PeerLogin>,
}

impl PeerSecurity {
    pub fn plaintext() -> PeerSecurity {
        PeerSecurity {
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl: None,
        }
    }

    /// From the settings; an error names the setting (a file that cannot be read or used).
    pub fn from_config(config: &Config, listeners: &Listeners) -> Result<PeerSecurity, String> {
        let protocol = listeners
            .inter_broker_endpoint()
            .map_or(SecurityProtocol::Plaintext, |e| e.security_protocol);
        let tls = if protocol.uses_tls() {
            config.broker_tls_client("inter-broker")?
        } else {
            None
        };
        let sasl = if protocol.uses_sasl() {
            config.inter_broker_login(config.inter_broker_sasl_mechanism()?)
        } else {
            None
        };
        Ok(PeerSecurity {
            protocol,
            tls,
            sasl,
        })
    }
}

/// A connection's byte stream: TCP, or TLS over it.
trait PeerIo: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> PeerIo for T {}

pub struct PeerConnection {
    addr: String,
    stream: Box<dyn PeerIo>,
    correlation_id: i32,
    client_id: StrBytes,
    security: Arc<PeerSecurity>,
    /// When the SASL session must be renewed (the other side bounds it), if ever.
    reauth_at: Option<Instant>,
}

/// Runs `work`, or gives up after `timeout`.
async fn within<T>(
    addr: &str,
    timeout: Duration,
    work: impl std::future::Future<Output = Result<T, PeerError>>,
) -> Result<T, PeerError> {
    let timer = glommio::timer::sleep(timeout);
    futures_lite::future::or(async { Some(work.await) }, async {
        timer.await;
        None
    })
    .await
    .ok_or_else(|| PeerError::Timeout {
        addr: addr.to_string(),
        timeout,
    })?
}

impl PeerConnection {
    /// Connects to `addr` and secures the connection as `security` says (TLS handshake,
    /// SASL authentication), each step within `timeout`.
    pub async fn connect(
        security: &Arc<PeerSecurity>,
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
        let tcp = TcpStream::connect_timeout(sock, timeout)
            .await
            .map_err(|e| connect_err(std::io::Error::other(e.to_string())))?;
        let _ = tcp.set_nodelay(true);
        let tls_err = |message: String| PeerError::Tls {
            addr: addr.to_string(),
            message,
        };
        let stream: Box<dyn PeerIo> = if security.protocol.uses_tls() {
            let config = security
                .tls
                .as_ref()
                .map(ReloadingTls::current)
                .ok_or_else(|| {
                    tls_err(
                        "no ssl_truststore_location to check the other broker's certificate".into(),
                    )
                })?;
            let name = rustls::pki_types::ServerName::try_from(host_of(addr).to_string())
                .map_err(|e| tls_err(format!("{:?} is no server name: {e}", host_of(addr))))?;
            let connector = futures_rustls::TlsConnector::from(config);
            let tls = within(addr, timeout, async {
                connector
                    .connect(name, tcp)
                    .await
                    .map_err(|e| tls_err(describe_tls_error(&e)))
            })
            .await?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        let mut conn = PeerConnection {
            addr: addr.to_string(),
            stream,
            correlation_id: 0,
            client_id: StrBytes::from_string(client_id.to_string()),
            security: security.clone(),
            reauth_at: None,
        };
        if security.protocol.uses_sasl() {
            conn.authenticate(timeout).await?;
        }
        Ok(conn)
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// SaslHandshake then SaslAuthenticate until the exchange is done (KIP-152); again on
    /// the same connection to renew a bounded session (KIP-368).
    async fn authenticate(&mut self, timeout: Duration) -> Result<(), PeerError> {
        let auth_err = |addr: &str, message: String| PeerError::Auth {
            addr: addr.to_string(),
            message,
        };
        let security = self.security.clone();
        let Some(login) = security.sasl.as_ref() else {
            return Err(auth_err(
                &self.addr,
                "no inter_broker_sasl_username to log in with".into(),
            ));
        };
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(login.mechanism.name()));
        let response = self
            .exchange(&handshake, SASL_HANDSHAKE_VERSION, timeout)
            .await?;
        if response.error_code != 0 {
            let offered: Vec<String> = response.mechanisms.iter().map(|m| m.to_string()).collect();
            return Err(auth_err(
                &self.addr,
                format!(
                    "it does not enable {} (error {}); it offers {}",
                    login.mechanism,
                    response.error_code,
                    offered.join(",")
                ),
            ));
        }
        let nonce = crate::security::sasl::nonce_from(&mut rand::thread_rng(), 24);
        let mut client =
            SaslClientExchange::new(login.mechanism, &login.username, &login.password, &nonce);
        let sasl_err = |addr: &str, e: crate::security::sasl::SaslError| {
            auth_err(addr, format!("as {}: {e}", login.username))
        };
        let mut token = client.first().map_err(|e| sasl_err(&self.addr, e))?;
        loop {
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
            let response = self
                .exchange(&request, SASL_AUTHENTICATE_VERSION, timeout)
                .await?;
            if response.error_code != 0 {
                let message = response
                    .error_message
                    .map_or_else(|| "no message".to_string(), |m| m.to_string());
                return Err(auth_err(
                    &self.addr,
                    format!(
                        "as {} with {}: {message} (error {})",
                        login.username, login.mechanism, response.error_code
                    ),
                ));
            }
            match client
                .answer(&response.auth_bytes)
                .map_err(|e| sasl_err(&self.addr, e))?
            {
                ClientStep::Send(next) => token = next,
                ClientStep::Done => {
                    self.reauth_at = u32::try_from(response.session_lifetime_ms)
                        .ok()
                        .filter(|ms| *ms > 0)
                        .map(|ms| {
                            let ms = u64::from(ms) * u64::from(REAUTH_AT_PERCENT) / 100;
                            Instant::now() + Duration::from_millis(ms)
                        });
                    return Ok(());
                }
                // Not a mechanism brokers log in with (refused by `inter_broker_sasl_mechanism`).
                ClientStep::Refused { challenge, .. } => {
                    return Err(auth_err(&self.addr, challenge));
                }
            }
        }
    }

    /// Sends `request` at `version` and waits up to `timeout` for its response, first
    /// renewing the SASL session if it is about to end.
    pub async fn call<R: Request>(
        &mut self,
        request: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response, PeerError> {
        if self.reauth_at.is_some_and(|at| Instant::now() >= at) {
            self.authenticate(timeout).await?;
        }
        self.exchange(request, version, timeout).await
    }

    /// One request and its response.
    async fn exchange<R: Request>(
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
            // TLS holds written records until flushed.
            self.stream.flush().await.map_err(io)?;
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
        let addr = self.addr.clone();
        let body = within(&addr, timeout, exchange).await?;
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
