//! `--command-config FILE`: a Kafka client properties file, as kafka-acls.sh's and
//! kafka-topics.sh's, read into how the CLI's client connects (TLS, SASL or both).
//!
//! Parsing is sans-IO ([`parse`] takes the text); [`tls_config`] reads the PEM files it names.
//! A value the client cannot honour is an error naming the key, never silently ignored: a
//! security setting that is dropped would connect differently from what the file asks.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};

use crate::security::sasl::Mechanism;
use crate::security::tls::TlsError;

/// Kafka's `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl Protocol {
    pub(super) fn uses_tls(self) -> bool {
        matches!(self, Protocol::Ssl | Protocol::SaslSsl)
    }

    pub(super) fn uses_sasl(self) -> bool {
        matches!(self, Protocol::SaslPlaintext | Protocol::SaslSsl)
    }
}

/// What a `--command-config` file says about reaching the brokers.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct CommandConfig {
    /// `security.protocol`, when the file sets it.
    pub(super) protocol: Option<Protocol>,
    pub(super) mechanism: Option<Mechanism>,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    /// PEM CA bundle: `ssl.truststore.location` or librdkafka's `ssl.ca.location`.
    pub(super) truststore: Option<PathBuf>,
    /// PEM file holding the client's private key and certificate chain (Kafka's PEM keystore).
    pub(super) keystore: Option<PathBuf>,
    /// librdkafka's split form of the same: `ssl.certificate.location`, `ssl.key.location`.
    pub(super) certificate: Option<PathBuf>,
    pub(super) key: Option<PathBuf>,
    /// `ssl.endpoint.identification.algorithm` is empty: the broker's certificate need not
    /// name the host it is reached at.
    pub(super) skip_name_check: bool,
}

/// Keys that are accepted and have nothing to do: PEM stores carry no store password, and
/// rustls picks TLS 1.2 or 1.3 by itself.
const IGNORED_KEYS: [&str; 4] = [
    "ssl.truststore.password",
    "ssl.keystore.password",
    "ssl.protocol",
    "ssl.enabled.protocols",
];

/// Reads Kafka's client properties (`key=value` or `key: value` lines, `#`/`!` comments).
/// Keys outside `security.protocol`, `ssl.*` and `sasl.*` (`client.id`, timeouts) are
/// ignored, as the CLI has its own flags for them; an `ssl.*` or `sasl.*` key the client does
/// not implement is an error.
pub(super) fn parse(text: &str) -> anyhow::Result<CommandConfig> {
    let mut out = CommandConfig::default();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some((key, value)) = line.split_once(['=', ':']) else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let path = || Some(PathBuf::from(value)).filter(|_| !value.is_empty());
        match key {
            "security.protocol" => {
                out.protocol = Some(match value.to_ascii_uppercase().as_str() {
                    "PLAINTEXT" => Protocol::Plaintext,
                    "SSL" => Protocol::Ssl,
                    "SASL_PLAINTEXT" => Protocol::SaslPlaintext,
                    "SASL_SSL" => Protocol::SaslSsl,
                    _ => bail!(
                        "security.protocol={value}: expected PLAINTEXT, SSL, SASL_PLAINTEXT \
                         or SASL_SSL"
                    ),
                })
            }
            "sasl.mechanism" => {
                out.mechanism = match Mechanism::from_name(value) {
                    Some(m @ (Mechanism::Plain | Mechanism::Scram(_))) => Some(m),
                    _ => bail!(
                        "sasl.mechanism={value}: strata's client speaks PLAIN, SCRAM-SHA-256 \
                         and SCRAM-SHA-512"
                    ),
                }
            }
            "sasl.jaas.config" => {
                let module = value.split_whitespace().next().unwrap_or_default();
                if !module.ends_with(".PlainLoginModule") && !module.ends_with(".ScramLoginModule")
                {
                    bail!(
                        "sasl.jaas.config: login module {module:?} is not supported \
                         (PlainLoginModule or ScramLoginModule)"
                    );
                }
                out.username =
                    Some(jaas_option(value, "username").ok_or_else(|| {
                        anyhow!("sasl.jaas.config: no username=\"...\" in {module}")
                    })?);
                out.password =
                    Some(jaas_option(value, "password").ok_or_else(|| {
                        anyhow!("sasl.jaas.config: no password=\"...\" in {module}")
                    })?);
            }
            "ssl.truststore.location" | "ssl.ca.location" => out.truststore = path(),
            "ssl.keystore.location" => out.keystore = path(),
            "ssl.certificate.location" => out.certificate = path(),
            "ssl.key.location" => out.key = path(),
            "ssl.truststore.type" | "ssl.keystore.type" if !value.eq_ignore_ascii_case("PEM") => {
                bail!(
                    "{key}={value}: strata's client reads PEM files only (convert with \
                     `keytool -exportcert -rfc` or `openssl pkcs12 -nodes`)"
                )
            }
            "ssl.truststore.type" | "ssl.keystore.type" => {}
            "ssl.key.password" if !value.is_empty() => bail!(
                "ssl.key.password: encrypted private keys are not supported; use an \
                 unencrypted PEM key"
            ),
            "ssl.key.password" => {}
            "ssl.endpoint.identification.algorithm" => {
                out.skip_name_check = match value.to_ascii_lowercase().as_str() {
                    "" => true,
                    "https" => false,
                    _ => bail!(
                        "ssl.endpoint.identification.algorithm={value}: expected https or \
                         nothing (no host name check)"
                    ),
                }
            }
            _ if IGNORED_KEYS.contains(&key) => {}
            _ if key.starts_with("ssl.") || key.starts_with("sasl.") => {
                bail!("{key}: not supported by strata's client")
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `name="value"` from a JAAS line (`... required username="admin" password="secret";`).
fn jaas_option(jaas: &str, name: &str) -> Option<String> {
    let start = jaas.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = jaas.get(start..)?;
    rest.find('"').map(|end| rest[..end].to_string())
}

impl CommandConfig {
    /// The TLS client configuration for an SSL or SASL_SSL listener: reads the truststore
    /// and the client certificate the file names. Errors name the key and the file.
    pub(super) fn tls_config(&self) -> anyhow::Result<Arc<rustls::ClientConfig>> {
        let read = |key: &str, path: &PathBuf| {
            std::fs::read(path).with_context(|| format!("{key} {}", path.display()))
        };
        let truststore_path = self.truststore.as_ref().ok_or_else(|| {
            anyhow!(
                "security.protocol SSL and SASL_SSL need ssl.truststore.location (PEM) or \
                 ssl.ca.location: strata's client has no built-in CA list"
            )
        })?;
        // Where the client's certificate and key come from, with the keys that name them.
        let identity = match (&self.keystore, &self.certificate, &self.key) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => bail!(
                "ssl.keystore.location and ssl.certificate.location/ssl.key.location both \
                 name a client certificate: keep one"
            ),
            (Some(keystore), None, None) => Some((
                ("ssl.keystore.location", keystore),
                ("ssl.keystore.location", keystore),
            )),
            (None, Some(cert), Some(key)) => Some((
                ("ssl.certificate.location", cert),
                ("ssl.key.location", key),
            )),
            (None, Some(_), None) => bail!("ssl.certificate.location needs ssl.key.location"),
            (None, None, Some(_)) => bail!("ssl.key.location needs ssl.certificate.location"),
            (None, None, None) => None,
        };
        let truststore = read("ssl.truststore.location", truststore_path)?;
        let identity_pem = match identity {
            Some(((cert_key, cert), (key_key, key))) => {
                Some((read(cert_key, cert)?, read(key_key, key)?))
            }
            None => None,
        };
        let pems = identity_pem.as_ref().map(|(c, k)| (&c[..], &k[..]));
        crate::security::tls::client_config(&truststore, pems, !self.skip_name_check).map_err(|e| {
            let (cert_key, key_key) = identity.map_or(
                ("ssl.certificate.location", "ssl.key.location"),
                |((c, _), (k, _))| (c, k),
            );
            match e {
                TlsError::Truststore(m) => {
                    anyhow!("ssl.truststore.location {}: {m}", truststore_path.display())
                }
                TlsError::Certificate(m) => anyhow!("{cert_key}: {m}"),
                TlsError::Key(m) => anyhow!("{key_key}: {m}"),
                other => anyhow!("TLS: {other}"),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Kafka's client properties give the protocol, the mechanism and the JAAS username and
    /// password, and the PEM locations under both Kafka's and librdkafka's names.
    #[test]
    fn reads_kafka_client_properties() {
        let text = "# admin\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n\
            sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
            username=\"admin\" password=\"s=cr:et\";\nssl.truststore.type=PEM\n\
            ssl.truststore.location=/ca.pem\nssl.endpoint.identification.algorithm=\n\
            client.id=tool\nssl.truststore.password=x\n";
        let c = parse(text).unwrap();
        assert_eq!(c.protocol, Some(Protocol::SaslSsl));
        assert_eq!(c.mechanism, Mechanism::from_name("SCRAM-SHA-512"));
        assert_eq!(c.username.as_deref(), Some("admin"));
        assert_eq!(c.password.as_deref(), Some("s=cr:et"));
        assert_eq!(c.truststore, Some(PathBuf::from("/ca.pem")));
        assert!(c.skip_name_check);
        let c = parse(
            "security.protocol=ssl\nssl.ca.location=/ca\nssl.certificate.location=/c\n\
             ssl.key.location=/k\nssl.endpoint.identification.algorithm=https\n",
        )
        .unwrap();
        assert_eq!(c.protocol, Some(Protocol::Ssl));
        assert_eq!(c.truststore, Some(PathBuf::from("/ca")));
        assert_eq!(
            (c.certificate, c.key),
            (Some(PathBuf::from("/c")), Some(PathBuf::from("/k")))
        );
        assert!(!c.skip_name_check);
        assert_eq!(parse("").unwrap(), CommandConfig::default());
    }

    /// A value the client cannot honour is an error that names its key.
    #[test]
    fn unsupported_values_name_their_key() {
        for (text, key) in [
            ("security.protocol=SASL_SSLX", "security.protocol"),
            ("sasl.mechanism=GSSAPI", "sasl.mechanism"),
            ("sasl.mechanism=OAUTHBEARER", "sasl.mechanism"),
            ("ssl.truststore.type=JKS", "ssl.truststore.type"),
            ("ssl.keystore.type=PKCS12", "ssl.keystore.type"),
            ("ssl.key.password=secret", "ssl.key.password"),
            ("ssl.endpoint.identification.algorithm=ldap", "ssl.endpoint"),
            (
                "sasl.kerberos.service.name=kafka",
                "sasl.kerberos.service.name",
            ),
            (
                "sasl.jaas.config=x.OAuthBearerLoginModule required;",
                "sasl.jaas.config",
            ),
            (
                "sasl.jaas.config=x.PlainLoginModule required username=\"a\";",
                "sasl.jaas.config",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    /// TLS without a truststore, half a client identity, and a missing file are errors
    /// naming the setting, before anything connects.
    #[test]
    fn tls_settings_are_checked_before_connecting() {
        let config = |text: &str| parse(text).unwrap().tls_config().unwrap_err().to_string();
        assert!(config("security.protocol=SSL").contains("ssl.truststore.location"));
        assert!(config("ssl.ca.location=/nonexistent/ca.pem")
            .contains("ssl.truststore.location /nonexistent/ca.pem"));
        assert!(config("ssl.ca.location=/ca\nssl.key.location=/k")
            .contains("ssl.key.location needs ssl.certificate.location"));
        let dir = std::env::temp_dir().join(format!("strata-cc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not pem").unwrap();
        let err = config(&format!("ssl.truststore.location={}", junk.display()));
        assert!(err.contains("ssl.truststore.location"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
