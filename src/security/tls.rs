//! TLS settings turned into a rustls server configuration, from PEM bytes: the certificate
//! then its chain, the private key (PKCS#8; PKCS#1 and SEC1 are taken too), and for client
//! authentication a CA bundle. Sans-IO: the caller reads the files (and watches them for
//! changes); this only parses and builds, so a bad file is an error the caller can log
//! while it keeps the configuration it had. `ReloadCheck` decides when the files are looked
//! at again and whether they changed, from times it is given.
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme,
};
use thiserror::Error;

use crate::limits::TLS_RELOAD_CHECK_INTERVAL_MS;

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("ssl_certificate_location: {0}")]
    Certificate(String),
    #[error("ssl_key_location: {0}")]
    Key(String),
    #[error("ssl_truststore_location: {0}")]
    Truststore(String),
    #[error("ssl_client_auth: {0:?} is not none, requested or required")]
    ClientAuth(String),
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Kafka's `ssl.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// Asked for; a client without one is served as `User:ANONYMOUS`.
    Requested,
    /// A client without a certificate the trust store vouches for is refused.
    Required,
}

impl ClientAuth {
    pub fn parse(text: &str) -> Result<ClientAuth, TlsError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            _ => Err(TlsError::ClientAuth(text.to_string())),
        }
    }
}

/// The PEM contents a server configuration is built from.
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    pub certificate_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    /// CA bundle for client certificates; needed when client auth is on.
    pub truststore_pem: Option<Vec<u8>>,
}

/// The crypto provider: ring (aws-lc-rs would need cmake to build).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM bundle, in order.
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err("no certificate in the file".into());
    }
    Ok(certs)
}

/// The CA certificates of a PEM bundle as a root store.
pub fn root_store(pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(pem)? {
        roots
            .add(cert)
            .map_err(|e| format!("not a usable CA certificate: {e}"))?;
    }
    Ok(roots)
}

/// Builds the server configuration: TLS 1.2 and 1.3, the certificate chain with its key
/// (checked to match), and the client verifier `client_auth` asks for.
pub fn server_config(
    material: &TlsMaterial,
    client_auth: ClientAuth,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certificates(&material.certificate_pem).map_err(TlsError::Certificate)?;
    let key = PrivateKeyDer::from_pem_slice(&material.key_pem)
        .map_err(|e| TlsError::Key(format!("no PEM private key: {e}")))?;
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            let pem = material.truststore_pem.as_deref().ok_or_else(|| {
                TlsError::Truststore("needed when ssl_client_auth is requested or required".into())
            })?;
            let roots = root_store(pem).map_err(TlsError::Truststore)?;
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let verifier = match client_auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| TlsError::Truststore(e.to_string()))?,
            )
        }
    };
    // Fails when the key is not the certificate's.
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Key(format!("does not fit the certificate: {e}")))?;
    Ok(Arc::new(config))
}

/// When TLS files are reloaded without a restart, for the listeners' server configuration
/// and the inter-broker client's alike: their modification times are looked at, at most once
/// per `TLS_RELOAD_CHECK_INTERVAL_MS`, and compared with those last seen. The caller reads
/// the times (`stamps`, None for a file it cannot read) and, on a change, the files.
#[derive(Debug)]
pub struct ReloadCheck {
    /// Each file's modification time when last looked at.
    stamps: Vec<Option<SystemTime>>,
    checked: Instant,
}

impl ReloadCheck {
    /// The files as they were at `now`: take their times before reading them, so that a
    /// change made while they are read is seen by the next check.
    pub fn new(stamps: Vec<Option<SystemTime>>, now: Instant) -> ReloadCheck {
        ReloadCheck {
            stamps,
            checked: now,
        }
    }

    /// Whether the files changed since they were last looked at: `stamps` is called (the
    /// files looked at) only once the interval has passed since the last look. The new times
    /// are kept whatever the caller makes of them: a file that does not load is reported
    /// once, and tried again when it changes again.
    pub fn changed(
        &mut self,
        now: Instant,
        stamps: impl FnOnce() -> Vec<Option<SystemTime>>,
    ) -> bool {
        let interval = Duration::from_millis(TLS_RELOAD_CHECK_INTERVAL_MS);
        if now.saturating_duration_since(self.checked) < interval {
            return false;
        }
        self.checked = now;
        let stamps = stamps();
        if stamps == self.stamps {
            return false;
        }
        self.stamps = stamps;
        true
    }
}

/// Builds the configuration of a TLS client (a broker reaching another on a TLS
/// inter-broker listener, or the `strata` CLI): TLS 1.2 and 1.3, the server checked against
/// `truststore_pem` and, when `check_name` (Kafka's default
/// `ssl.endpoint.identification.algorithm=https`), its name; `identity` (certificate chain
/// PEM, key PEM) is offered when the server asks for a client certificate, as Kafka's clients
/// offer their keystore.
pub fn client_config(
    truststore_pem: &[u8],
    identity: Option<(&[u8], &[u8])>,
    check_name: bool,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let roots = root_store(truststore_pem).map_err(TlsError::Truststore)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = if check_name {
        builder.with_root_certificates(roots)
    } else {
        let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| TlsError::Truststore(e.to_string()))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerName(chain)))
    };
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((certificate_pem, key_pem)) => {
            let chain = certificates(certificate_pem).map_err(TlsError::Certificate)?;
            let key = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| TlsError::Key(format!("no PEM private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsError::Key(format!("does not fit the certificate: {e}")))?
        }
    };
    Ok(Arc::new(config))
}

/// The server check of `ssl.endpoint.identification.algorithm=` (empty): the chain must
/// still lead to a trusted CA, only the name in the certificate is not compared with the
/// host. webpki checks the chain before the name, so a name error means the chain passed.
#[derive(Debug)]
struct AnyServerName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyServerName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The host of `addr` (`host:port` or `[v6]:port`), for TLS's server name.
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// A broker's own TLS handshake failure (to another broker or a controller) in words: its
/// CAs come from `ssl_truststore_location`, it offers its own certificate.
pub fn describe_tls_error(e: &std::io::Error) -> String {
    describe_client_error(e, "ssl_truststore_location", "this broker's certificate")
}

/// Why a TLS client's handshake (or the first read after it, where TLS 1.3 reports a refused
/// client certificate) failed, in words that point at the setting to look at:
/// `truststore_setting` holds the CAs, `our_certificate` names what we offered.
pub fn describe_client_error(
    e: &std::io::Error,
    truststore_setting: &str,
    our_certificate: &str,
) -> String {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(
            why @ (CertificateError::NotValidForName
            | CertificateError::NotValidForNameContext { .. }),
        )) => format!("its certificate is not for the host it is reached at ({why:?})"),
        Some(rustls::Error::InvalidCertificate(why)) => format!(
            "its certificate is not accepted ({why:?}): is it signed by a CA of \
             {truststore_setting}, for the address it is reached at?"
        ),
        Some(rustls::Error::AlertReceived(alert)) => {
            format!("it refused the handshake ({alert:?}): does it trust {our_certificate}?")
        }
        Some(other) => other.to_string(),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "it closed the connection during the handshake (is the listener TLS?)".into()
        }
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_of_the_address() {
        assert_eq!(host_of("broker1.example:9093"), "broker1.example");
        assert_eq!(host_of("10.0.0.1:9093"), "10.0.0.1");
        assert_eq!(host_of("[::1]:9093"), "::1");
    }

    #[test]
    fn reload_check_looks_once_per_interval_and_reports_each_change_once() {
        // Proves the reload decision with time and file times as arguments: the files are
        // not looked at within the interval of the last look, a change is reported once (a
        // file that does not load is not retried until it changes again), a file that went
        // unreadable counts as a change, and an unchanged look is no change.
        let t0 = Instant::now();
        let interval = Duration::from_millis(TLS_RELOAD_CHECK_INTERVAL_MS);
        let at = |s: u64| Some(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        let mut check = ReloadCheck::new(vec![at(1), at(2)], t0);
        let looked = std::cell::Cell::new(0);
        let mut look = |stamps: Vec<Option<SystemTime>>, now: Instant| {
            check.changed(now, || {
                looked.set(looked.get() + 1);
                stamps
            })
        };
        assert!(!look(vec![at(1), at(3)], t0 + interval / 2));
        assert_eq!(looked.get(), 0, "looked within the interval");
        assert!(look(vec![at(1), at(3)], t0 + interval));
        assert!(!look(vec![at(1), at(3)], t0 + interval * 3));
        assert!(look(vec![None, at(3)], t0 + interval * 4));
        assert!(!look(vec![None, at(3)], t0 + interval * 5));
        assert!(look(vec![at(4), at(3)], t0 + interval * 6));
        assert_eq!(looked.get(), 5);
    }
}
