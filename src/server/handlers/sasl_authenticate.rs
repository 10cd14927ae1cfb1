//! SaslAuthenticate (v0-2): one SASL token each way. v1+ answers `session_lifetime_ms`
//! (KIP-368: `connections_max_reauth_ms`, 0 = no limit). A failure is answered
//! SASL_AUTHENTICATION_FAILED with Kafka's message, after
//! `connection_failed_authentication_delay_ms`, and the connection is then closed; the
//! connection logs it (user and peer, never the secret).
use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse};

use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::security::sasl::{Credentials, Mechanism};
use crate::server::sasl::{SaslSession, TokenOutcome};

/// What the connection does after answering.
#[derive(Debug, PartialEq, Eq)]
pub enum After {
    /// Keep serving (the exchange goes on, or it succeeded).
    Continue,
    /// Authenticated as this user (for the log).
    Authenticated(String),
    /// Failed: delay the answer, close after it; `user` and `why` are for the log.
    Failed { user: Option<String>, why: String },
    /// No handshake came first: answer at once, then close.
    IllegalState,
}

/// Kafka's client-facing message for a failed exchange: it says the credentials were wrong,
/// never which part (user or password) or why in more detail.
pub fn failure_message(mechanism: Mechanism) -> String {
    match mechanism {
        Mechanism::Plain => "Authentication failed: Invalid username or password".to_string(),
        // Kafka's message for a SaslException from any mechanism but PLAIN (SCRAM's wrong
        // proof, OAUTHBEARER's malformed message).
        Mechanism::Scram(_) | Mechanism::OAuthBearer => format!(
            "Authentication failed during authentication due to invalid credentials with SASL \
             mechanism {mechanism}"
        ),
    }
}

/// Answers one token: the response and what to do next.
pub fn handle(
    session: &mut SaslSession,
    credentials: &dyn Credentials,
    server_nonce: String,
    reauth_ms: u64,
    now: std::time::Instant,
    req: SaslAuthenticateRequest,
) -> (SaslAuthenticateResponse, After) {
    let outcome = session.handle_token(&req.auth_bytes, credentials, server_nonce, reauth_ms, now);
    let response = SaslAuthenticateResponse::default();
    match outcome {
        TokenOutcome::Continue(bytes) => (
            response.with_auth_bytes(Bytes::from(bytes)),
            After::Continue,
        ),
        TokenOutcome::Authenticated {
            user,
            response: bytes,
            session_lifetime_ms,
        } => (
            response
                .with_auth_bytes(Bytes::from(bytes))
                .with_session_lifetime_ms(session_lifetime_ms),
            After::Authenticated(user),
        ),
        TokenOutcome::Failed {
            user,
            why,
            mechanism,
            client_message,
        } => (
            response
                .with_error_code(ErrorCode::SaslAuthenticationFailed.code())
                .with_error_message(Some(str_bytes(
                    &client_message.unwrap_or_else(|| failure_message(mechanism)),
                ))),
            After::Failed { user, why },
        ),
        TokenOutcome::IllegalState => (
            response
                .with_error_code(ErrorCode::IllegalSaslState.code())
                .with_error_message(Some(str_bytes(
                    "Unexpected SaslAuthenticate request: no SaslHandshake before it",
                ))),
            After::IllegalState,
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::cluster::catalog::Catalog;
    use crate::security::sasl::plain;
    use crate::server::sasl::BrokerCredentials;
    use std::collections::BTreeMap;
    use std::time::Instant;

    /// Right password: no error, the session lifetime in v1+; wrong password:
    /// SASL_AUTHENTICATION_FAILED with Kafka's message and no secret; without a handshake:
    /// ILLEGAL_SASL_STATE. Every version round-trips.
    #[test]
    fn authenticate_answers() {
        let users: BTreeMap<String, String> = [("u".to_string(), "p".to_string())].into();
        let catalog = Catalog::default();
        let creds = BrokerCredentials {
            plain_users: &users,
            catalog: &catalog,
            oauth: None,
            now_ms: 0,
        };
        let now = Instant::now();
        let req = |pw: &str| {
            SaslAuthenticateRequest::default()
                .with_auth_bytes(Bytes::from(plain::client_message("u", pw)))
        };
        let mut s = SaslSession::new(true);
        let (resp, after) = handle(&mut s, &creds, String::new(), 0, now, req("p"));
        assert_eq!(resp.error_code, ErrorCode::IllegalSaslState.code());
        assert_eq!(after, After::IllegalState);

        s.handle_handshake("PLAIN", &[Mechanism::Plain], 1).unwrap();
        let (resp, after) = handle(&mut s, &creds, String::new(), 60_000, now, req("p"));
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.session_lifetime_ms, 60_000);
        assert_eq!(after, After::Authenticated("u".into()));
        for v in 0..=2 {
            crate::server::handlers::round_trip(&resp, v);
        }

        let mut s = SaslSession::new(true);
        s.handle_handshake("PLAIN", &[Mechanism::Plain], 1).unwrap();
        let (resp, after) = handle(&mut s, &creds, String::new(), 0, now, req("wrong"));
        assert_eq!(resp.error_code, ErrorCode::SaslAuthenticationFailed.code());
        let msg = resp.error_message.unwrap().to_string();
        assert_eq!(msg, "Authentication failed: Invalid username or password");
        assert!(matches!(after, After::Failed { user: Some(ref u), .. } if u == "u"));
    }
}
