//! SASL server side (RFC 4422) for Kafka's SaslAuthenticate: PLAIN (RFC 4616),
//! SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) and OAUTHBEARER (RFC 7628, KIP-255,
//! with JWTs validated as KIP-768's broker validator does), as Kafka's broker runs them.
//!
//! `SaslServer` is one authentication exchange: it is fed the client's tokens in order and
//! answers each with the bytes to send back, until it reports the authenticated user or an
//! error. Every parse of client bytes returns a typed `SaslError`; nothing here panics on
//! what a client sends (proved by the property test in `scram.rs`). Secrets never appear in
//! an error's message, so errors can be logged as they are.
pub mod client;
pub mod jwt;
pub mod oauthbearer;
pub mod plain;
pub mod scram;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use client::{ClientStep, PeerLogin, SaslClientExchange};
pub use jwt::{JwtError, JwtValidator, ValidToken};
pub use scram::{ScramClient, ScramCredential, ScramMechanism};

pub use crate::limits::SASL_TOKEN_BYTES_MAX;

/// A SASL mechanism the broker can offer (Kafka's names, `sasl_enabled_mechanisms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Mechanism {
    Plain,
    Scram(ScramMechanism),
    OAuthBearer,
}

impl Mechanism {
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Plain,
        Mechanism::Scram(ScramMechanism::Sha256),
        Mechanism::Scram(ScramMechanism::Sha512),
        Mechanism::OAuthBearer,
    ];

    /// The IANA name clients send in SaslHandshake.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// The mechanism named `name` (case-sensitive, as Kafka compares them).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an exchange failed. `user` is the name the client claimed, for the log; no variant
/// carries a password, a proof or a key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SaslError {
    #[error("SASL token of {len} bytes is larger than {max}")]
    TooLarge { len: usize, max: usize },
    #[error("malformed {mechanism} message: {why}")]
    Malformed {
        mechanism: &'static str,
        why: &'static str,
    },
    #[error("invalid credentials for user `{user}`")]
    BadCredentials { user: String },
    #[error("unknown user `{user}`")]
    UnknownUser { user: String },
    #[error("authorization id `{authzid}` differs from user `{user}`")]
    AuthzIdMismatch { user: String, authzid: String },
    #[error("channel binding is not supported")]
    ChannelBinding,
    #[error("SCRAM extensions are not supported")]
    Extensions,
    #[error("nonce in the final message is not the one the server sent")]
    NonceMismatch,
    #[error("token received after the exchange ended")]
    Finished,
    /// OAUTHBEARER: the token was refused (`why`: which check failed; never the token).
    #[error("invalid OAUTHBEARER token: {why}")]
    InvalidToken { why: String },
    /// OAUTHBEARER: the GS2 authorization id is not the token's principal.
    #[error("authorization id `{authzid}` differs from the token's principal `{user}`")]
    TokenAuthzId { user: String, authzid: String },
}

impl SaslError {
    /// The user the client claimed, when the error names one (for the log).
    pub fn user(&self) -> Option<&str> {
        match self {
            SaslError::BadCredentials { user }
            | SaslError::UnknownUser { user }
            | SaslError::AuthzIdMismatch { user, .. }
            | SaslError::TokenAuthzId { user, .. } => Some(user),
            _ => None,
        }
    }

    /// The message Kafka sends the client for this failure when it is the mechanism's own
    /// (OAUTHBEARER's); `None` for the mechanism's generic "invalid credentials" message.
    pub fn client_message(&self) -> Option<String> {
        match self {
            SaslError::InvalidToken { .. } => Some(oauthbearer::INVALID_TOKEN_JSON.to_string()),
            SaslError::TokenAuthzId { user, authzid } => Some(format!(
                "Authentication failed: Client requested an authorization id ({authzid}) that is \
                 different from the token's principal name ({user})"
            )),
            _ => None,
        }
    }

    fn malformed(mechanism: &'static str, why: &'static str) -> Self {
        Self::Malformed { mechanism, why }
    }
}

/// Where the server finds credentials: static PLAIN users from the config, SCRAM credentials
/// from the metadata log.
pub trait Credentials {
    /// Whether `password` is `user`'s PLAIN password (compared in constant time).
    fn plain_matches(&self, user: &str, password: &[u8]) -> bool;
    /// `user`'s SCRAM credential for `mechanism`.
    fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
    /// Validates an OAUTHBEARER token now (the implementer holds the JWKS, the settings and
    /// the clock). Without OAUTHBEARER configured, every token is refused.
    fn validate_bearer(&self, _token: &str) -> Result<ValidToken, JwtError> {
        Err(JwtError::NotConfigured)
    }
}

/// What a token produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes and wait for the client's next token.
    Continue(Vec<u8>),
    /// Authenticated as `user`; send `response` (may be empty) and the exchange is over.
    /// `credential_lifetime_ms`: how long the credential stays good (an OAUTHBEARER token's
    /// time to `exp`), which bounds the session (KIP-368); `None` for passwords.
    Done {
        user: String,
        response: Vec<u8>,
        credential_lifetime_ms: Option<i64>,
    },
}

/// One server-side authentication exchange.
#[derive(Debug)]
pub struct SaslServer {
    state: State,
}

#[derive(Debug)]
enum State {
    Plain,
    // Boxed: the SCRAM state is a few hundred bytes, PLAIN's none.
    Scram(Box<scram::ScramServer>),
    OAuthBearer(oauthbearer::OAuthBearerServer),
    Finished,
}

impl SaslServer {
    /// A new exchange for `mechanism`. `server_nonce` is the server's random part of the SCRAM
    /// nonce (printable, no comma); PLAIN ignores it.
    pub fn new(mechanism: Mechanism, server_nonce: String) -> Self {
        let state = match mechanism {
            Mechanism::Plain => State::Plain,
            Mechanism::Scram(m) => State::Scram(Box::new(scram::ScramServer::new(m, server_nonce))),
            Mechanism::OAuthBearer => State::OAuthBearer(oauthbearer::OAuthBearerServer::new()),
        };
        Self { state }
    }

    /// Feeds the client's next token. After `Done` or an error the exchange is over: any
    /// further token is `Finished`.
    pub fn handle_token(
        &mut self,
        token: &[u8],
        credentials: &dyn Credentials,
    ) -> Result<Step, SaslError> {
        if token.len() > SASL_TOKEN_BYTES_MAX {
            self.state = State::Finished;
            return Err(SaslError::TooLarge {
                len: token.len(),
                max: SASL_TOKEN_BYTES_MAX,
            });
        }
        let state = std::mem::replace(&mut self.state, State::Finished);
        match state {
            State::Finished => Err(SaslError::Finished),
            State::Plain => {
                let user = plain::authenticate(token, credentials)?;
                Ok(Step::Done {
                    user,
                    response: Vec::new(),
                    credential_lifetime_ms: None,
                })
            }
            State::Scram(mut server) => {
                let step = server.handle_token(token, credentials)?;
                if matches!(step, Step::Continue(_)) {
                    self.state = State::Scram(server);
                }
                Ok(step)
            }
            State::OAuthBearer(mut server) => {
                let step = server.handle_token(token, credentials)?;
                if matches!(step, Step::Continue(_)) {
                    self.state = State::OAuthBearer(server);
                }
                Ok(step)
            }
        }
    }
}

/// Rate-limits the log of failed authentications: `note` says when a line is due and how
/// many failures it reports.
#[derive(Debug, Default)]
pub struct FailureLog {
    last: Option<std::time::Instant>,
    unlogged: u64,
}

impl FailureLog {
    /// Counts one failure at `now`; `Some(n)` when a line is due, reporting `n` failures.
    pub fn note(&mut self, now: std::time::Instant) -> Option<u64> {
        self.unlogged += 1;
        let interval =
            std::time::Duration::from_millis(crate::limits::SASL_FAILURE_LOG_INTERVAL_MS);
        if self.last.is_some_and(|t| now.duration_since(t) < interval) {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

/// Is `password` the one `sasl_plain_users` gives `user`? Compared in constant time.
pub fn plain_password_matches(
    plain_users: &std::collections::BTreeMap<String, String>,
    user: &str,
    password: &[u8],
) -> bool {
    match plain_users.get(user) {
        Some(expected) => bool::from(subtle::ConstantTimeEq::ct_eq(expected.as_bytes(), password)),
        None => false,
    }
}

/// A printable random nonce of `len` characters from `rng` (RFC 5802: printable ASCII
/// without ','). Drawn by the caller's RNG so the state machines stay deterministic.
pub fn nonce_from(rng: &mut impl rand::Rng, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..len)
        .map(|_| {
            let i = rng.gen_range(0..ALPHABET.len());
            ALPHABET.get(i).copied().map_or('A', char::from)
        })
        .collect()
}

/// A fixed user for `fuzz_all`: "user", password "pencil", for every mechanism; bearer
/// tokens are checked against `jwt::fuzz_validator`.
struct FuzzCredentials(ScramCredential);

impl Credentials for FuzzCredentials {
    fn plain_matches(&self, user: &str, password: &[u8]) -> bool {
        user == "user" && password == b"pencil"
    }
    fn scram(&self, user: &str, _: ScramMechanism) -> Option<ScramCredential> {
        (user == "user").then(|| self.0.clone())
    }
    fn validate_bearer(&self, token: &str) -> Result<ValidToken, JwtError> {
        jwt::fuzz_validator().validate(token, jwt::FUZZ_NOW_MS)
    }
}

/// Runs `data` through every mechanism's server as a sequence of client tokens (split at
/// 0xFF bytes, at most three), after a valid SCRAM client-first too, so the final-message
/// parser is reached; as a bearer token inside a well-formed OAUTHBEARER message, so the JWT
/// parser is reached; and through the JWKS and JWT-claims parsers (`jwt::fuzz`). The
/// cargo-fuzz target `sasl_parsers` and the property tests call it: no input may panic.
pub fn fuzz_all(data: &[u8]) {
    static CREDENTIAL: std::sync::OnceLock<ScramCredential> = std::sync::OnceLock::new();
    let credential = CREDENTIAL.get_or_init(|| {
        ScramCredential::from_password(ScramMechanism::Sha256, "pencil", b"salt".to_vec(), 4096)
    });
    let store = FuzzCredentials(credential.clone());
    let tokens: Vec<&[u8]> = data.split(|b| *b == 0xFF).take(3).collect();
    for mechanism in Mechanism::ALL {
        for prefix in [None, Some(&b"n,,n=user,r=abc"[..])] {
            let mut server = SaslServer::new(mechanism, "server-nonce".into());
            if let Some(first) = prefix {
                let _ = server.handle_token(first, &store);
            }
            for token in &tokens {
                let _ = server.handle_token(token, &store);
            }
        }
    }
    let mut bearer = b"n,,\x01auth=Bearer ".to_vec();
    bearer.extend_from_slice(data);
    bearer.extend_from_slice(b"\x01\x01");
    let mut server = SaslServer::new(Mechanism::OAuthBearer, String::new());
    let _ = server.handle_token(&bearer, &store);
    let _ = server.handle_token(b"\x01", &store);
    jwt::fuzz(data);
}
