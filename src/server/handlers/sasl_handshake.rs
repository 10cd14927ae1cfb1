//! SaslHandshake (v0-1): the client names its mechanism; the answer lists the enabled ones.
//! Any error is answered and then the connection is closed (Kafka's
//! SaslServerAuthenticator does the same). After v0 the client sends raw SASL tokens
//! without Kafka framing; after v1, SaslAuthenticate requests.
use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};

use super::str_bytes;
use crate::protocol::error::ErrorCode;
use crate::security::sasl::Mechanism;
use crate::server::sasl::{HandshakeError, SaslSession};

/// The response, and whether the connection closes once it is written.
pub fn handle(
    session: &mut SaslSession,
    enabled: &[Mechanism],
    version: i16,
    req: SaslHandshakeRequest,
) -> (SaslHandshakeResponse, bool) {
    let mechanisms = enabled.iter().map(|m| str_bytes(m.name())).collect();
    let result = session.handle_handshake(&req.mechanism, enabled, version);
    let error = match result {
        Ok(()) => None,
        Err(HandshakeError::IllegalState) => Some(ErrorCode::IllegalSaslState),
        Err(HandshakeError::Unsupported) | Err(HandshakeError::MechanismChange) => {
            Some(ErrorCode::UnsupportedSaslMechanism)
        }
    };
    let response = SaslHandshakeResponse::default()
        .with_error_code(crate::protocol::error::code(error))
        .with_mechanisms(mechanisms);
    (response, error.is_some())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An enabled mechanism is accepted with the enabled list; an unknown one gets
    /// UNSUPPORTED_SASL_MECHANISM and the close; both versions round-trip.
    #[test]
    fn handshake_answers() {
        let enabled = [Mechanism::Plain];
        let mut s = SaslSession::new(true);
        let req = SaslHandshakeRequest::default().with_mechanism(str_bytes("SCRAM-SHA-512"));
        let (resp, close) = handle(&mut s, &enabled, 1, req);
        assert_eq!(resp.error_code, ErrorCode::UnsupportedSaslMechanism.code());
        assert_eq!(resp.mechanisms, vec![str_bytes("PLAIN")]);
        assert!(close);
        let mut s = SaslSession::new(true);
        let req = SaslHandshakeRequest::default().with_mechanism(str_bytes("PLAIN"));
        let (resp, close) = handle(&mut s, &enabled, 1, req);
        assert_eq!(resp.error_code, 0);
        assert!(!close);
        for v in 0..=1 {
            crate::server::handlers::round_trip(&resp, v);
        }
    }
}
