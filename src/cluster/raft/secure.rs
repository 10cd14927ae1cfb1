//! Security of the controller quorum's port (`controller_listen`), as Kafka secures its
//! `CONTROLLER` listener: `controller_listener_security_protocol` says PLAINTEXT (anyone is
//! served, as before), SSL, SASL_PLAINTEXT or SASL_SSL.
//!
//! A connection is secured before its first frame is read: TLS (rustls over the blocking
//! socket; the dialling node checks the controller's certificate against
//! `ssl_truststore_location` and its address, the controller asks for the dialler's and, on
//! SSL without SASL, requires it), then SASL with the inter-broker login (the same
//! `inter_broker_sasl_username`/`inter_broker_sasl_password` as `shard::peer`, mechanism
//! `sasl_mechanism_controller_protocol`, PLAIN only: SCRAM credentials live in the metadata
//! log this port carries). The SASL tokens travel in the transport's own frame layout, two
//! kinds that exist only before authentication: the reader refuses them afterwards, and
//! refuses every other kind before. The principal (the SASL user, or on SSL the certificate's
//! through `ssl_principal_mapping_rules`) must be `User:<inter_broker_sasl_username>` or a
//! super user: a client's credentials do not make it a broker. A refused connection is closed
//! before anything it sent reaches the raft driver, and logged (rate-limited) without the
//! secret.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::limits::PEER_SECURITY_WARN_INTERVAL_MS;
use crate::security::acl::Authorizer;
use crate::security::sasl::{nonce_from, ClientStep, Credentials, SaslClientExchange, SaslServer};
use crate::security::sasl::{plain_password_matches, FailureLog, PeerLogin};
use crate::security::sasl::{JwtError, ScramCredential, ScramMechanism, Step, ValidToken};
use crate::security::tls::{describe_tls_error, ClientAuth};
use crate::security::tls_reload::ReloadingTls;
use crate::security::{KafkaPrincipal, PrincipalMapper, SecurityProtocol};

/// How long the TLS handshake plus the SASL exchange may take, on either side.
pub const AUTH_TIMEOUT: Duration = Duration::from_millis(5000);
/// A SASL token on this port is at most this large (PLAIN's is a user and a password).
const AUTH_FRAME_BYTES_MAX: usize = 4096;
/// Dialler -> controller: one SASL token.
pub const KIND_SASL: u8 = 7;
/// Controller -> dialler: `[status][bytes]`, status 0 done, 1 continue, 2 refused (the bytes
/// are then the reason, without any secret).
pub const KIND_SASL_REPLY: u8 = 8;
const SASL_DONE: u8 = 0;
const SASL_CONTINUE: u8 = 1;
const SASL_REFUSED: u8 = 2;

/// A connection of the quorum's port: TCP, or TLS over it.
pub enum Stream {
    Plain(TcpStream),
    TlsClient(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
    TlsServer(Box<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>),
}

impl Stream {
    /// The socket under it (for its timeouts).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::TlsClient(s) => &s.sock,
            Stream::TlsServer(s) => &s.sock,
        }
    }

    /// Writes all of `bytes` and flushes them out of TLS's buffer.
    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.write_all(bytes)?;
        self.flush()
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::TlsClient(s) => s.read(buf),
            Stream::TlsServer(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::TlsClient(s) => s.write(buf),
            Stream::TlsServer(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::TlsClient(s) => s.flush(),
            Stream::TlsServer(s) => s.flush(),
        }
    }
}

/// Why a connection could not be secured.
#[derive(Debug, thiserror::Error)]
pub enum SecureError {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Certificates or credentials: the operator's to mend, said at warn.
    #[error("{0}")]
    Security(String),
}

/// The settings both sides of the port use; built at start, the TLS files reloaded when they
/// change (`ReloadingTls`).
pub struct ControllerSecurity {
    protocol: SecurityProtocol,
    /// Dialling: the controllers' certificates checked against the truststore.
    client_tls: Option<ReloadingTls<rustls::ClientConfig>>,
    /// Accepting: this node's certificate, the diallers' checked against the truststore.
    server_tls: Option<ReloadingTls<rustls::ServerConfig>>,
    /// Dialling: this node's login.
    login: Option<PeerLogin>,
    /// Accepting: the PLAIN users a login is checked against.
    plain_users: std::collections::BTreeMap<String, String>,
    /// Accepting: `User:<inter_broker_sasl_username>`, always a broker principal.
    broker_user: Option<KafkaPrincipal>,
    /// Accepting: `super_users` (no ACLs are consulted here).
    super_users: Authorizer,
    /// `ssl_principal_mapping_rules`; `None` maps a subject to itself (DEFAULT).
    mapper: Option<PrincipalMapper>,
    /// When a dialler last warned of a security failure (one line per interval per node).
    dial_warned: Mutex<Option<Instant>>,
    /// Refused connections, logged at most once a second.
    refused: Mutex<FailureLog>,
}

impl std::fmt::Debug for ControllerSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerSecurity")
            .field("protocol", &self.protocol)
            .field("login", &self.login)
            .finish_non_exhaustive()
    }
}

/// PLAIN users only (see the module's comment).
struct PlainUsers<'a>(&'a std::collections::BTreeMap<String, String>);

impl Credentials for PlainUsers<'_> {
    fn plain_matches(&self, user: &str, password: &[u8]) -> bool {
        plain_password_matches(self.0, user, password)
    }
    fn scram(&self, _: &str, _: ScramMechanism) -> Option<ScramCredential> {
        None
    }
    fn validate_bearer(&self, _: &str) -> Result<ValidToken, JwtError> {
        Err(JwtError::NotConfigured)
    }
}

impl ControllerSecurity {
    /// PLAINTEXT: nothing checked (a single node, the tests of the raft module).
    pub fn plaintext() -> Arc<ControllerSecurity> {
        Arc::new(ControllerSecurity {
            protocol: SecurityProtocol::Plaintext,
            client_tls: None,
            server_tls: None,
            login: None,
            plain_users: Default::default(),
            broker_user: None,
            super_users: Authorizer::default(),
            mapper: None,
            dial_warned: Mutex::new(None),
            refused: Mutex::new(FailureLog::default()),
        })
    }

    /// From the settings (validated by `Config::validate`); an error names what cannot be
    /// read or used.
    pub fn from_config(config: &Config) -> Result<Arc<ControllerSecurity>, String> {
        let protocol = config.controller_security_protocol()?;
        if protocol == SecurityProtocol::Plaintext {
            return Ok(Self::plaintext());
        }
        let (client_tls, server_tls) = if protocol.uses_tls() {
            // Without SASL the certificate is the only proof of who dials: required.
            let client_auth = if protocol.uses_sasl() {
                ClientAuth::Requested
            } else {
                ClientAuth::Required
            };
            let server = config.broker_tls_server(client_auth, "controller listener")?;
            let client = config.broker_tls_client("controller quorum")?;
            (client, Some(server))
        } else {
            (None, None)
        };
        let login = if protocol.uses_sasl() {
            config.inter_broker_login(crate::security::sasl::Mechanism::Plain)
        } else {
            None
        };
        let broker_user = (!config.inter_broker_sasl_username.is_empty())
            .then(|| KafkaPrincipal::user(config.inter_broker_sasl_username.clone()));
        Ok(Arc::new(ControllerSecurity {
            protocol,
            client_tls,
            server_tls,
            login,
            plain_users: config
                .plain_users()
                .map_err(|e| format!("sasl_plain_users: {e}"))?,
            broker_user,
            super_users: Authorizer::new(&config.super_users, false)
                .map_err(|e| format!("super_users: {e}"))?,
            mapper: Some(
                PrincipalMapper::parse(&config.ssl_principal_mapping_rules)
                    .map_err(|e| format!("ssl_principal_mapping_rules: {e}"))?,
            ),
            dial_warned: Mutex::new(None),
            refused: Mutex::new(FailureLog::default()),
        }))
    }

    /// May `principal` speak for a node of the cluster?
    fn is_broker(&self, principal: &KafkaPrincipal) -> bool {
        self.broker_user.as_ref() == Some(principal) || self.super_users.is_super_user(principal)
    }

    /// Secures a connection just dialled to `addr`: TLS, then SASL, within `AUTH_TIMEOUT`.
    pub fn secure_dialled(&self, tcp: TcpStream, addr: SocketAddr) -> Result<Stream, SecureError> {
        if self.protocol == SecurityProtocol::Plaintext {
            return Ok(Stream::Plain(tcp));
        }
        let result = self.secure_dialled_inner(tcp, addr);
        if let Err(SecureError::Security(why)) = &result {
            let mut warned = self.dial_warned.lock().unwrap_or_else(|p| p.into_inner());
            let due = warned.is_none_or(|at| {
                at.elapsed() >= Duration::from_millis(PEER_SECURITY_WARN_INTERVAL_MS)
            });
            if due {
                *warned = Some(Instant::now());
                tracing::warn!(%addr, "cannot connect to the controller quorum's port: {why}");
            }
        }
        result
    }

    fn secure_dialled_inner(
        &self,
        tcp: TcpStream,
        addr: SocketAddr,
    ) -> Result<Stream, SecureError> {
        tcp.set_read_timeout(Some(AUTH_TIMEOUT))?;
        let mut stream = if self.protocol.uses_tls() {
            let config = self
                .client_tls
                .as_ref()
                .map(ReloadingTls::current)
                .ok_or_else(|| {
                    SecureError::Security(
                        "no ssl_truststore_location to check the controller".into(),
                    )
                })?;
            let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
            let conn = rustls::ClientConnection::new(config, name)
                .map_err(|e| SecureError::Security(format!("TLS with {addr}: {e}")))?;
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            while tls.conn.is_handshaking() {
                tls.conn.complete_io(&mut tls.sock).map_err(|e| {
                    SecureError::Security(format!("TLS with {addr}: {}", describe_tls_error(&e)))
                })?;
            }
            Stream::TlsClient(Box::new(tls))
        } else {
            Stream::Plain(tcp)
        };
        if self.protocol.uses_sasl() {
            let login = self.login.as_ref().ok_or_else(|| {
                SecureError::Security("no inter_broker_sasl_username to log in with".into())
            })?;
            let nonce = nonce_from(&mut rand::thread_rng(), 24);
            let mut client =
                SaslClientExchange::new(login.mechanism, &login.username, &login.password, &nonce);
            let refused = |why: String| {
                SecureError::Security(format!(
                    "SASL authentication with {addr} as {} failed: {why}",
                    login.username
                ))
            };
            let mut token = client.first().map_err(|e| refused(e.to_string()))?;
            loop {
                write_frame(&mut stream, KIND_SASL, &token)?;
                let (kind, reply) = read_frame(&mut stream).map_err(|e| match e {
                    SecureError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                        refused("it closed the connection".into())
                    }
                    // A controller whose TLS refused our certificate says so here (TLS 1.3).
                    SecureError::Io(io) => refused(describe_tls_error(&io)),
                    other => other,
                })?;
                let (status, bytes) = match (kind, reply.split_first()) {
                    (KIND_SASL_REPLY, Some((status, bytes))) => (*status, bytes),
                    _ => return Err(refused("it answered out of turn".into())),
                };
                match status {
                    SASL_DONE | SASL_CONTINUE => {}
                    _ => return Err(refused(String::from_utf8_lossy(bytes).into_owned())),
                }
                match client.answer(bytes).map_err(|e| refused(e.to_string()))? {
                    ClientStep::Send(next) if status == SASL_CONTINUE => token = next,
                    ClientStep::Done if status == SASL_DONE => break,
                    _ => return Err(refused("the exchange went out of step".into())),
                }
            }
        }
        Ok(stream)
    }

    /// Secures a connection just accepted from `peer`; `None` (after logging why) when it
    /// must be closed unread.
    pub fn secure_accepted(&self, tcp: TcpStream, peer: &str) -> Option<Stream> {
        if self.protocol == SecurityProtocol::Plaintext {
            return Some(Stream::Plain(tcp));
        }
        match self.secure_accepted_inner(tcp) {
            Ok(stream) => Some(stream),
            Err(why) => {
                let mut log = self.refused.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(count) = log.note(Instant::now()) {
                    tracing::warn!(
                        %peer,
                        refused = count,
                        "controller listener ({}): connection refused: {why}",
                        self.protocol
                    );
                }
                None
            }
        }
    }

    fn secure_accepted_inner(&self, tcp: TcpStream) -> Result<Stream, String> {
        tcp.set_read_timeout(Some(AUTH_TIMEOUT))
            .and_then(|()| tcp.set_write_timeout(Some(AUTH_TIMEOUT)))
            .map_err(|e| e.to_string())?;
        let mut principal = None;
        let mut stream = if self.protocol.uses_tls() {
            let config = self
                .server_tls
                .as_ref()
                .map(ReloadingTls::current)
                .ok_or("no TLS configuration")?;
            let conn = rustls::ServerConnection::new(config).map_err(|e| e.to_string())?;
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            while tls.conn.is_handshaking() {
                tls.conn
                    .complete_io(&mut tls.sock)
                    .map_err(|e| format!("TLS handshake: {}", describe_tls_error(&e)))?;
            }
            if let Some(cert) = tls.conn.peer_certificates().and_then(|c| c.first()) {
                let dn = crate::security::principal::subject_dn(cert.as_ref())
                    .map_err(|e| e.to_string())?;
                let name = match &self.mapper {
                    Some(m) => m.map(&dn).map_err(|e| e.to_string())?,
                    None => dn,
                };
                principal = Some(KafkaPrincipal::user(name));
            }
            Stream::TlsServer(Box::new(tls))
        } else {
            Stream::Plain(tcp)
        };
        if self.protocol.uses_sasl() {
            principal = Some(self.sasl_accept(&mut stream)?);
        }
        match principal {
            Some(p) if self.is_broker(&p) => Ok(stream),
            Some(p) => Err(format!(
                "{p} is not a broker principal (inter_broker_sasl_username or super_users)"
            )),
            None => Err("no client certificate".into()),
        }
    }

    /// The server side of the SASL exchange; the authenticated principal, or why not (the
    /// dialler has then been told, without details that help guessing).
    fn sasl_accept(&self, stream: &mut Stream) -> Result<KafkaPrincipal, String> {
        let mechanism = crate::security::sasl::Mechanism::Plain;
        let mut server = SaslServer::new(mechanism, nonce_from(&mut rand::thread_rng(), 24));
        loop {
            let (kind, token) = read_frame(stream).map_err(|e| e.to_string())?;
            if kind != KIND_SASL {
                return Err(format!("frame kind {kind} before authenticating"));
            }
            let reply = |stream: &mut Stream, status: u8, bytes: &[u8]| {
                let mut payload = Vec::with_capacity(1 + bytes.len());
                payload.push(status);
                payload.extend_from_slice(bytes);
                write_frame(stream, KIND_SASL_REPLY, &payload).map_err(|e| e.to_string())
            };
            match server.handle_token(&token, &PlainUsers(&self.plain_users)) {
                Ok(Step::Continue(bytes)) => reply(stream, SASL_CONTINUE, &bytes)?,
                Ok(Step::Done { user, response, .. }) => {
                    let principal = KafkaPrincipal::user(user);
                    if !self.is_broker(&principal) {
                        let _ = reply(stream, SASL_REFUSED, b"not a broker principal");
                        return Err(format!(
                            "SASL authentication as {principal}, not a broker principal \
                             (inter_broker_sasl_username or super_users)"
                        ));
                    }
                    reply(stream, SASL_DONE, &response)?;
                    return Ok(principal);
                }
                Err(e) => {
                    let _ = reply(stream, SASL_REFUSED, b"authentication failed");
                    // SaslError never carries the password.
                    return Err(format!("SASL authentication failed: {e}"));
                }
            }
        }
    }
}

/// `[u32 len][u8 kind][payload]`, the transport's own layout.
fn write_frame(stream: &mut Stream, kind: u8, payload: &[u8]) -> Result<(), SecureError> {
    let len = u32::try_from(payload.len())
        .map_err(|_| SecureError::Security("SASL token too large".into()))?;
    let mut bytes = Vec::with_capacity(5 + payload.len());
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.push(kind);
    bytes.extend_from_slice(payload);
    Ok(stream.send(&bytes)?)
}

/// One frame of the authentication exchange, bounded by `AUTH_FRAME_BYTES_MAX`.
fn read_frame(stream: &mut Stream) -> Result<(u8, Vec<u8>), SecureError> {
    let mut header = [0u8; 5];
    stream.read_exact(&mut header)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if len > AUTH_FRAME_BYTES_MAX {
        return Err(SecureError::Security(format!(
            "an authentication frame of {len} bytes (kind {}): is the other side speaking this \
             protocol?",
            header[4]
        )));
    }
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload)?;
    Ok((header[4], payload))
}
