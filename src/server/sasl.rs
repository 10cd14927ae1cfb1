//! SASL on a connection: what a client may send before and after authenticating, and the
//! state SaslHandshake and SaslAuthenticate move through (Kafka's SaslServerAuthenticator).
//!
//! On a SASL listener a connection starts unauthenticated: only ApiVersions, SaslHandshake
//! and SaslAuthenticate are served; anything else closes it, as Kafka does. A successful
//! exchange makes the connection's principal `User:<name>`. With
//! `connections_max_reauth_ms` (KIP-368) the session ends that long after authenticating: the
//! client re-authenticates on the same connection (same mechanism, same user) before then,
//! or its next request after the end closes the connection.
//!
//! The state is plain data driven by the connection's reader (one request at a time, in
//! order), with the time passed in: no executor, no socket.
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;

use crate::cluster::catalog::Catalog;
use crate::security::sasl::{
    Credentials, JwtError, JwtValidator, Mechanism, SaslServer, ScramCredential, ScramMechanism,
    Step, ValidToken,
};

/// Where a connection is in authenticating.
#[derive(Debug)]
enum AuthState {
    /// Nothing yet (or the session ended and no re-authentication began).
    Start,
    /// SaslHandshake chose `mechanism`; SaslAuthenticate (or, after a v0 handshake, a raw
    /// token) comes next.
    Handshaken { mechanism: Mechanism, raw: bool },
    /// Tokens are being exchanged.
    Exchanging {
        server: SaslServer,
        raw: bool,
        mechanism: Mechanism,
    },
    /// Authenticated; requests are served.
    Authenticated,
}

/// Why a request closes the connection instead of being served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslRefusal {
    #[error("{api:?} before SASL authentication")]
    NotAuthenticated { api: ApiKey },
    #[error("{api:?} after the SASL session of `{user}` expired (connections_max_reauth_ms)")]
    SessionExpired { api: ApiKey, user: String },
}

/// The SASL side of one connection.
#[derive(Debug)]
pub struct SaslSession {
    /// Whether the listener demands SASL (SASL_PLAINTEXT, SASL_SSL).
    required: bool,
    state: AuthState,
    /// The authenticated user and mechanism; kept through a re-authentication, which must
    /// give the same user and mechanism.
    user: Option<String>,
    mechanism: Option<Mechanism>,
    /// When the authenticated session ends (KIP-368); `None` = never.
    session_end: Option<Instant>,
}

impl SaslSession {
    pub fn new(required: bool) -> Self {
        Self {
            required,
            state: AuthState::Start,
            user: None,
            mechanism: None,
            session_end: None,
        }
    }

    pub fn required(&self) -> bool {
        self.required
    }

    /// The principal requests on this connection run as: `User:<name>` once authenticated,
    /// `User:ANONYMOUS` otherwise (Kafka's names).
    pub fn principal(&self) -> String {
        match &self.user {
            Some(u) => format!("User:{u}"),
            None => "User:ANONYMOUS".to_string(),
        }
    }

    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The mechanism the connection authenticated with.
    pub fn mechanism(&self) -> Option<Mechanism> {
        self.mechanism
    }

    /// The mechanism of the exchange under way (handshaken or exchanging), if any.
    pub fn pending_mechanism(&self) -> Option<Mechanism> {
        match &self.state {
            AuthState::Handshaken { mechanism, .. } | AuthState::Exchanging { mechanism, .. } => {
                Some(*mechanism)
            }
            _ => None,
        }
    }

    /// Whether the next frame is a raw SASL token (after a v0 SaslHandshake), not a request.
    pub fn expects_raw_token(&self) -> bool {
        matches!(
            self.state,
            AuthState::Handshaken { raw: true, .. } | AuthState::Exchanging { raw: true, .. }
        )
    }

    /// Whether a request for `api` may be served now. The SASL APIs and ApiVersions always
    /// may (their handlers check the state); others need an authenticated, unexpired session
    /// on a SASL listener.
    pub fn admit(&self, api: ApiKey, now: Instant) -> Result<(), SaslRefusal> {
        if !self.required
            || matches!(
                api,
                ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
            )
        {
            return Ok(());
        }
        if !matches!(self.state, AuthState::Authenticated) {
            return Err(SaslRefusal::NotAuthenticated { api });
        }
        if self.session_end.is_some_and(|end| now >= end) {
            return Err(SaslRefusal::SessionExpired {
                api,
                user: self.user.clone().unwrap_or_default(),
            });
        }
        Ok(())
    }

    /// SaslHandshake: chooses `mechanism_name` if enabled. Allowed at the start and, for a
    /// re-authentication (KIP-368), once authenticated with the same mechanism.
    pub fn handle_handshake(
        &mut self,
        mechanism_name: &str,
        enabled: &[Mechanism],
        version: i16,
    ) -> Result<(), HandshakeError> {
        if !self.required {
            return Err(HandshakeError::IllegalState);
        }
        match self.state {
            AuthState::Start | AuthState::Authenticated => {}
            _ => return Err(HandshakeError::IllegalState),
        }
        let mechanism = Mechanism::from_name(mechanism_name)
            .filter(|m| enabled.contains(m))
            .ok_or(HandshakeError::Unsupported)?;
        if self.mechanism.is_some_and(|m| m != mechanism) {
            return Err(HandshakeError::MechanismChange);
        }
        self.state = AuthState::Handshaken {
            mechanism,
            raw: version == 0,
        };
        Ok(())
    }

    /// One client token (SaslAuthenticate's `auth_bytes`, or a raw token after a v0
    /// handshake). `server_nonce` is used only when a SCRAM exchange starts. After `Failed`
    /// the connection is to be closed.
    pub fn handle_token(
        &mut self,
        token: &[u8],
        credentials: &dyn Credentials,
        server_nonce: String,
        reauth_ms: u64,
        now: Instant,
    ) -> TokenOutcome {
        let state = std::mem::replace(&mut self.state, AuthState::Start);
        let (mut server, raw, mechanism) = match state {
            AuthState::Handshaken { mechanism, raw } => {
                (SaslServer::new(mechanism, server_nonce), raw, mechanism)
            }
            AuthState::Exchanging {
                server,
                raw,
                mechanism,
            } => (server, raw, mechanism),
            other => {
                self.state = other;
                return TokenOutcome::IllegalState;
            }
        };
        match server.handle_token(token, credentials) {
            Ok(Step::Continue(bytes)) => {
                self.state = AuthState::Exchanging {
                    server,
                    raw,
                    mechanism,
                };
                TokenOutcome::Continue(bytes)
            }
            Ok(Step::Done {
                user,
                response,
                credential_lifetime_ms,
            }) => {
                if self.user.as_ref().is_some_and(|previous| *previous != user) {
                    // KIP-368: a re-authentication may not change who the connection is.
                    return TokenOutcome::Failed {
                        user: Some(user),
                        why: "re-authentication as a different user".into(),
                        mechanism,
                        client_message: None,
                    };
                }
                let lifetime_ms = session_lifetime_ms(credential_lifetime_ms, reauth_ms);
                self.state = AuthState::Authenticated;
                self.user = Some(user.clone());
                self.mechanism = Some(mechanism);
                self.session_end = lifetime_ms.map(|ms| now + Duration::from_millis(ms));
                TokenOutcome::Authenticated {
                    user,
                    response,
                    session_lifetime_ms: lifetime_ms
                        .map_or(0, |ms| i64::try_from(ms).unwrap_or(i64::MAX)),
                }
            }
            Err(e) => TokenOutcome::Failed {
                user: e.user().map(str::to_string),
                why: e.to_string(),
                mechanism,
                client_message: e.client_message(),
            },
        }
    }
}

/// How long a session lasts, as Kafka's SaslServerAuthenticator computes it (KIP-368): the
/// shorter of the credential's remaining lifetime (an OAUTHBEARER token's `exp`) and
/// `connections_max_reauth_ms` (0 = no limit); `None` = the session never ends. A token
/// already past `exp` (accepted within the clock skew) gets 1 ms, not Kafka's 0, which the
/// client would read as "no limit".
fn session_lifetime_ms(credential_lifetime_ms: Option<i64>, reauth_ms: u64) -> Option<u64> {
    let credential = credential_lifetime_ms.map(|ms| u64::try_from(ms).unwrap_or(0).max(1));
    let reauth = (reauth_ms > 0).then_some(reauth_ms);
    match (credential, reauth) {
        (Some(c), Some(r)) => Some(c.min(r)),
        (c, r) => c.or(r),
    }
}

/// Why SaslHandshake was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeError {
    /// Not a SASL listener, or a handshake in the middle of an exchange: ILLEGAL_SASL_STATE.
    IllegalState,
    /// The mechanism is unknown or not enabled: UNSUPPORTED_SASL_MECHANISM.
    Unsupported,
    /// A re-authentication with another mechanism than the first (KIP-368 forbids it).
    MechanismChange,
}

/// What one token did.
#[derive(Debug, PartialEq, Eq)]
pub enum TokenOutcome {
    /// Send these bytes; the exchange goes on.
    Continue(Vec<u8>),
    /// Authenticated as `user`; send `response`.
    Authenticated {
        user: String,
        response: Vec<u8>,
        session_lifetime_ms: i64,
    },
    /// Refused: answer SASL_AUTHENTICATION_FAILED (after the failed-authentication delay)
    /// and close. `why` never holds a secret; `user` is the name the client claimed.
    Failed {
        user: Option<String>,
        why: String,
        mechanism: Mechanism,
        /// The mechanism's own message for the client (OAUTHBEARER's), else `None` for the
        /// generic one.
        client_message: Option<String>,
    },
    /// No handshake came first (or the exchange is over): ILLEGAL_SASL_STATE, then close.
    IllegalState,
}

pub use crate::security::sasl::{plain_password_matches, FailureLog};

/// The credentials a broker checks: static PLAIN users from the config, SCRAM credentials
/// from the metadata image, OAUTHBEARER tokens against the JWKS (`None`: not configured) at
/// `now_ms` (wall-clock milliseconds since the epoch, what `exp` is compared with).
pub struct BrokerCredentials<'a> {
    pub plain_users: &'a std::collections::BTreeMap<String, String>,
    pub catalog: &'a Catalog,
    pub oauth: Option<&'a JwtValidator>,
    pub now_ms: i64,
}

impl Credentials for BrokerCredentials<'_> {
    fn plain_matches(&self, user: &str, password: &[u8]) -> bool {
        plain_password_matches(self.plain_users, user, password)
    }

    fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self.catalog.scram_credential(user, mechanism).cloned()
    }

    fn validate_bearer(&self, token: &str) -> Result<ValidToken, JwtError> {
        self.oauth
            .ok_or(JwtError::NotConfigured)?
            .validate(token, self.now_ms)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::security::sasl::plain;
    use std::collections::BTreeMap;

    fn users() -> BTreeMap<String, String> {
        [("admin".to_string(), "secret".to_string())].into()
    }

    /// Before authentication only ApiVersions and the SASL APIs pass; a PLAIN exchange
    /// authenticates; a PLAINTEXT listener's session admits everything and refuses the SASL
    /// handshake.
    #[test]
    fn gate_before_and_after_authentication() {
        let now = Instant::now();
        let catalog = Catalog::default();
        let plain_users = users();
        let creds = BrokerCredentials {
            plain_users: &plain_users,
            catalog: &catalog,
            oauth: None,
            now_ms: 0,
        };
        let mut s = SaslSession::new(true);
        assert!(s.admit(ApiKey::ApiVersions, now).is_ok());
        assert!(s.admit(ApiKey::SaslHandshake, now).is_ok());
        assert_eq!(
            s.admit(ApiKey::Metadata, now),
            Err(SaslRefusal::NotAuthenticated {
                api: ApiKey::Metadata
            })
        );
        assert_eq!(
            s.handle_token(b"x", &creds, "n".into(), 0, now),
            TokenOutcome::IllegalState
        );
        assert_eq!(
            s.handle_handshake("GSSAPI", &Mechanism::ALL, 1),
            Err(HandshakeError::Unsupported)
        );
        s.handle_handshake("PLAIN", &Mechanism::ALL, 1).unwrap();
        assert!(!s.expects_raw_token());
        assert!(s.admit(ApiKey::Produce, now).is_err());
        let out = s.handle_token(
            &plain::client_message("admin", "secret"),
            &creds,
            "n".into(),
            0,
            now,
        );
        assert!(
            matches!(out, TokenOutcome::Authenticated { ref user, session_lifetime_ms: 0, .. } if user == "admin")
        );
        assert!(s.admit(ApiKey::Produce, now).is_ok());
        assert_eq!(s.principal(), "User:admin");

        let mut open = SaslSession::new(false);
        assert!(open.admit(ApiKey::Produce, now).is_ok());
        assert_eq!(open.principal(), "User:ANONYMOUS");
        assert_eq!(
            open.handle_handshake("PLAIN", &Mechanism::ALL, 1),
            Err(HandshakeError::IllegalState)
        );
    }

    /// KIP-368: the session ends after connections_max_reauth_ms; a re-authentication with
    /// the same mechanism and user renews it, another user or mechanism is refused, and a
    /// wrong password fails without authenticating.
    #[test]
    fn session_expiry_and_reauthentication() {
        let t0 = Instant::now();
        let catalog = Catalog::default();
        let mut plain_users = users();
        plain_users.insert("bob".into(), "pw".into());
        let creds = BrokerCredentials {
            plain_users: &plain_users,
            catalog: &catalog,
            oauth: None,
            now_ms: 0,
        };
        let mut s = SaslSession::new(true);
        s.handle_handshake("PLAIN", &[Mechanism::Plain], 1).unwrap();
        let out = s.handle_token(
            &plain::client_message("admin", "secret"),
            &creds,
            String::new(),
            1000,
            t0,
        );
        assert!(matches!(
            out,
            TokenOutcome::Authenticated {
                session_lifetime_ms: 1000,
                ..
            }
        ));
        assert!(s
            .admit(ApiKey::Fetch, t0 + Duration::from_millis(999))
            .is_ok());
        let late = t0 + Duration::from_millis(1000);
        assert!(matches!(
            s.admit(ApiKey::Fetch, late),
            Err(SaslRefusal::SessionExpired { .. })
        ));
        // Re-authenticate at `late`: served again until late + 1000.
        s.handle_handshake("PLAIN", &[Mechanism::Plain], 1).unwrap();
        let out = s.handle_token(
            &plain::client_message("admin", "secret"),
            &creds,
            String::new(),
            1000,
            late,
        );
        assert!(matches!(out, TokenOutcome::Authenticated { .. }));
        assert!(s
            .admit(ApiKey::Fetch, late + Duration::from_millis(500))
            .is_ok());
        // Another mechanism or another user may not take the connection over.
        assert_eq!(
            s.handle_handshake("SCRAM-SHA-256", &Mechanism::ALL, 1),
            Err(HandshakeError::MechanismChange)
        );
        s.handle_handshake("PLAIN", &[Mechanism::Plain], 1).unwrap();
        let out = s.handle_token(
            &plain::client_message("bob", "pw"),
            &creds,
            String::new(),
            1000,
            late,
        );
        assert!(matches!(out, TokenOutcome::Failed { .. }));

        let mut s = SaslSession::new(true);
        s.handle_handshake("PLAIN", &[Mechanism::Plain], 0).unwrap();
        assert!(s.expects_raw_token());
        let out = s.handle_token(
            &plain::client_message("admin", "nope"),
            &creds,
            String::new(),
            0,
            t0,
        );
        let TokenOutcome::Failed { user, why, .. } = out else {
            panic!("{out:?}")
        };
        assert_eq!(user.as_deref(), Some("admin"));
        assert!(!why.contains("nope"));
        assert!(s.admit(ApiKey::Metadata, t0).is_err());
    }
}
