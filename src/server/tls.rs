//! TLS on a shard's listeners: the acceptor (rustls through futures-rustls over glommio's
//! TcpStream), the certificates reloaded without a restart, and the principal a client
//! certificate maps to.
//!
//! Reload: on an accept, at most once per `TLS_RELOAD_CHECK_INTERVAL_MS`, the files'
//! modification times are compared with those of the configuration in use; when one
//! changed, the files are read and a new configuration built. A file that does not make a
//! valid configuration (half written, a key that is not the certificate's) is logged and
//! the old configuration kept; the next change is tried again. Each shard reloads on its
//! own: a shard that accepts nothing keeps the old certificate until it does, which serves
//! no one differently. The reads are small blocking reads on the shard's thread, once per
//! change.
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls::ServerConfig;
use tracing::{debug, error, info, warn};

use super::connection::{self, ConnectionError};
use crate::config::Config;
use crate::limits::TLS_HANDSHAKE_TIMEOUT_MS;
use crate::security::tls::{self, ClientAuth, ReloadCheck, TlsMaterial};
use crate::security::{KafkaPrincipal, PrincipalError, PrincipalMapper, SecurityProtocol, Session};
use crate::shard::ShardCtx;

/// The files a TLS configuration comes from, in a fixed order: certificate, key, truststore.
#[derive(Debug, Clone)]
struct Files {
    certificate: PathBuf,
    key: PathBuf,
    truststore: Option<PathBuf>,
}

impl Files {
    fn of(config: &Config) -> Files {
        let path = |p: &str| (!p.is_empty()).then(|| PathBuf::from(p));
        Files {
            certificate: PathBuf::from(&config.ssl_certificate_location),
            key: PathBuf::from(&config.ssl_key_location),
            truststore: path(&config.ssl_truststore_location),
        }
    }

    fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.certificate, &self.key]
            .into_iter()
            .chain(self.truststore.as_ref())
    }

    /// Each file's modification time (None: unreadable).
    fn stamps(&self) -> Vec<Option<SystemTime>> {
        self.paths()
            .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
            .collect()
    }

    fn read(&self) -> Result<TlsMaterial, String> {
        let read = |p: &PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        Ok(TlsMaterial {
            certificate_pem: read(&self.certificate)?,
            key_pem: read(&self.key)?,
            truststore_pem: self.truststore.as_ref().map(read).transpose()?,
        })
    }
}

/// Reads the files and builds the server configuration (at start, and on each reload).
fn build(files: &Files, client_auth: ClientAuth) -> Result<Arc<ServerConfig>, String> {
    let material = files.read()?;
    tls::server_config(&material, client_auth).map_err(|e| e.to_string())
}

/// Checks the TLS settings by building them once, so `strata serve` fails at start on a
/// missing or bad file instead of on the first TLS connection.
pub fn check(config: &Config) -> Result<(), String> {
    if !needs_tls(config) {
        return Ok(());
    }
    let client_auth = ClientAuth::parse(&config.ssl_client_auth).map_err(|e| e.to_string())?;
    build(&Files::of(config), client_auth).map(|_| ())
}

fn needs_tls(config: &Config) -> bool {
    config
        .listeners()
        .map(|l| l.bound.iter().any(|e| e.security_protocol.uses_tls()))
        .unwrap_or(false)
}

/// One shard's TLS state, shared by its TLS listeners.
pub struct TlsContext {
    files: Files,
    client_auth: ClientAuth,
    mapper: PrincipalMapper,
    current: RefCell<Arc<ServerConfig>>,
    check: RefCell<ReloadCheck>,
}

impl TlsContext {
    /// `None` when no listener uses TLS.
    pub fn new(config: &Config) -> Result<Option<TlsContext>, String> {
        if !needs_tls(config) {
            return Ok(None);
        }
        let files = Files::of(config);
        let client_auth = ClientAuth::parse(&config.ssl_client_auth).map_err(|e| e.to_string())?;
        let mapper = PrincipalMapper::parse(&config.ssl_principal_mapping_rules)
            .map_err(|e| e.to_string())?;
        let check = ReloadCheck::new(files.stamps(), Instant::now());
        let current = build(&files, client_auth)?;
        Ok(Some(TlsContext {
            files,
            client_auth,
            mapper,
            current: RefCell::new(current),
            check: RefCell::new(check),
        }))
    }

    /// The acceptor for a connection just accepted: the current configuration, reloaded
    /// first if a file changed.
    pub fn acceptor(&self, shard: usize) -> futures_rustls::TlsAcceptor {
        self.maybe_reload(shard);
        futures_rustls::TlsAcceptor::from(self.current.borrow().clone())
    }

    fn maybe_reload(&self, shard: usize) {
        let changed = self
            .check
            .borrow_mut()
            .changed(Instant::now(), || self.files.stamps());
        if !changed {
            return;
        }
        match build(&self.files, self.client_auth) {
            Ok(config) => {
                *self.current.borrow_mut() = config;
                info!(
                    shard,
                    certificate = %self.files.certificate.display(),
                    "TLS certificates reloaded"
                );
            }
            Err(e) => error!(
                shard,
                "TLS certificates changed but cannot be loaded; keeping the previous ones: {e}"
            ),
        }
    }

    /// The principal of a TLS client: its certificate's subject through
    /// `ssl_principal_mapping_rules`, or `User:ANONYMOUS` without a certificate.
    pub fn principal(
        &self,
        connection: &rustls::ServerConnection,
    ) -> Result<KafkaPrincipal, PrincipalError> {
        let Some(cert) = connection.peer_certificates().and_then(|c| c.first()) else {
            return Ok(KafkaPrincipal::anonymous());
        };
        let dn = crate::security::principal::subject_dn(cert.as_ref())?;
        Ok(KafkaPrincipal::user(self.mapper.map(&dn)?))
    }
}

/// Does the TLS handshake of a connection just accepted on a TLS listener, sets the
/// session's principal from the client certificate (SSL listeners; SASL_SSL ones take it
/// from SASL), then serves it. A failed handshake closes the connection with one log line
/// saying why (a cleartext client is told apart), and nothing is served.
pub async fn serve(
    ctx: &Rc<ShardCtx>,
    tls: &TlsContext,
    acceptor: futures_rustls::TlsAcceptor,
    stream: glommio::net::TcpStream,
    mut session: Session,
) -> Result<(), ConnectionError> {
    connection::set_write_timeout(ctx, &stream);
    let timeout = Duration::from_millis(TLS_HANDSHAKE_TIMEOUT_MS);
    let handshake = async { Some(acceptor.accept(stream).await) };
    let timer = async {
        glommio::timer::sleep(timeout).await;
        None
    };
    let stream = match futures_lite::future::or(handshake, timer).await {
        Some(Ok(stream)) => stream,
        Some(Err(e)) => {
            warn!(
                peer = %session.peer,
                listener = %session.listener,
                "closing connection: {}",
                describe_handshake_error(&e)
            );
            tls_failed(&session);
            return Ok(());
        }
        None => {
            tls_failed(&session);
            warn!(
                peer = %session.peer,
                listener = %session.listener,
                "closing connection: TLS handshake failed: not done after {timeout:?}"
            );
            return Ok(());
        }
    };
    if session.security_protocol == SecurityProtocol::Ssl {
        match tls.principal(stream.get_ref().1) {
            Ok(principal) => {
                debug!(peer = %session.peer, %principal, "TLS client authenticated");
                session.principal = principal;
            }
            Err(e) => {
                warn!(peer = %session.peer, listener = %session.listener, "closing connection: {e}");
                tls_failed(&session);
                return Ok(());
            }
        }
    }
    connection::serve_tls(ctx, stream, session).await
}

/// Counts a failed TLS handshake or an unusable client certificate as a failed
/// authentication of the listener (Kafka counts SSL handshake failures in its
/// failed-authentication metric), under the mechanism label `SSL`.
fn tls_failed(session: &Session) {
    crate::metrics::with(|m| m.authentication_failed(&session.listener, "SSL"));
}

/// A handshake failure in words: a client that sent no TLS at all is most likely a Kafka
/// client configured for PLAINTEXT.
fn describe_handshake_error(e: &std::io::Error) -> String {
    let rustls_error = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(rustls::Error::InvalidMessage(m)) => format!(
            "not TLS ({m:?}): a cleartext client on a TLS listener? Its client needs \
             security.protocol=SSL"
        ),
        Some(other) => format!("TLS handshake failed: {other}"),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "TLS handshake failed: the client closed the connection (does it trust this \
             broker's certificate?)"
                .into()
        }
        None => format!("TLS handshake failed: {e}"),
    }
}
