//! OAUTHBEARER (RFC 7628, KIP-255), as Kafka's `OAuthBearerSaslServer` runs it.
//!
//! The client sends one message: a GS2 header, then `auth=Bearer <token>` and optional
//! extensions, each ended by 0x01 (`n,,\x01auth=Bearer eyJ...\x01\x01`). The token is
//! validated (`jwt`); the principal is its subject and the session may last no longer than
//! the token (KIP-368). An invalid token is not refused at once: as RFC 7628 section 3.2.2
//! and Kafka, the server answers the error as a JSON challenge
//! (`{"status":"invalid_token"}`), the client acknowledges it with a single 0x01, and only
//! then does the exchange fail, with that JSON as the failure's message.
//!
//! Extensions are parsed and checked for form (Kafka's `[A-Za-z]+` keys and printable
//! values); none is acted on, as Kafka's default validator leaves them unvalidated.
use super::jwt::{JwtError, ValidToken};
use super::{Credentials, SaslError, Step};

const MECHANISM: &str = "OAUTHBEARER";
/// RFC 7628's key/value separator (kvsep).
const SEPARATOR: u8 = 0x01;
/// What Kafka's validator answers for any token it refuses (`OAuthBearerValidatorCallback`'s
/// error status), as Kafka formats it.
pub const INVALID_TOKEN_JSON: &str = r#"{"status":"invalid_token"}"#;

/// The parts of a client's initial response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst<'a> {
    /// The GS2 authorization id, escaped as sent (`=2C`, `=3D`), or empty.
    pub authzid: &'a str,
    /// The bearer token.
    pub token: &'a str,
    /// Extensions other than `auth`, in order (a repeated key keeps its last value).
    pub extensions: Vec<(&'a str, &'a str)>,
}

/// Kafka's SASLNAME: `([\x01-\x7F] except '=' ',' | =2C | =3D)+`.
fn is_saslname(s: &str) -> bool {
    if s.is_empty() {
        return false;
    }
    let b = s.as_bytes();
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'=' => {
                if !matches!(b.get(i + 1..i + 3), Some(b"2C" | b"3D")) {
                    return false;
                }
                i += 3;
            }
            b',' | 0 | 0x80..=0xFF => return false,
            _ => i += 1,
        }
    }
    true
}

fn is_key(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphabetic())
}

fn is_value(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| (0x21..=0x7E).contains(&c) || matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
}

/// Parses `auth`'s value: `<scheme> +<token>`, the scheme `Bearer` in any case.
fn parse_auth(auth: &str) -> Result<&str, SaslError> {
    let malformed = |why| SaslError::malformed(MECHANISM, why);
    let (scheme, rest) = auth
        .split_once(' ')
        .ok_or_else(|| malformed("invalid 'auth' format"))?;
    let token = rest.trim_start_matches(' ');
    let scheme_ok = !scheme.is_empty()
        && scheme
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_');
    let token_ok = !token.is_empty()
        && token
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !scheme_ok || !token_ok {
        return Err(malformed("invalid 'auth' format"));
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(malformed("invalid scheme (not Bearer)"));
    }
    Ok(token)
}

/// Parses the client's initial response as Kafka's `OAuthBearerClientInitialResponse`.
pub fn parse_client_first(message: &[u8]) -> Result<ClientFirst<'_>, SaslError> {
    let malformed = |why| SaslError::malformed(MECHANISM, why);
    let text = std::str::from_utf8(message).map_err(|_| malformed("message is not UTF-8"))?;
    let rest = text
        .strip_prefix("n,")
        .ok_or_else(|| malformed("GS2 header must start `n,` (no channel binding)"))?;
    let (authzid, rest) = match rest.strip_prefix("a=") {
        Some(a) => {
            let (name, rest) = a
                .split_once(',')
                .ok_or_else(|| malformed("unterminated authorization id"))?;
            if !is_saslname(name) {
                return Err(malformed("invalid authorization id"));
            }
            (name, rest)
        }
        None => (
            "",
            rest.strip_prefix(',')
                .ok_or_else(|| malformed("malformed GS2 header"))?,
        ),
    };
    let sep = char::from(SEPARATOR);
    let mut pairs = rest
        .strip_prefix(sep)
        .and_then(|r| r.strip_suffix(sep))
        .ok_or_else(|| malformed("key/value pairs must be framed by 0x01"))?;
    let mut auth = None;
    let mut extensions: Vec<(&str, &str)> = Vec::new();
    while !pairs.is_empty() {
        let (pair, next) = pairs
            .split_once(sep)
            .ok_or_else(|| malformed("key/value pair not ended by 0x01"))?;
        pairs = next;
        let (key, value) = pair
            .split_once('=')
            .filter(|(k, v)| is_key(k) && is_value(v))
            .ok_or_else(|| malformed("invalid key/value pair"))?;
        if key == "auth" {
            auth = Some(value);
        } else if let Some(slot) = extensions.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
        } else {
            extensions.push((key, value));
        }
    }
    let auth = auth.ok_or_else(|| malformed("'auth' not specified"))?;
    Ok(ClientFirst {
        authzid,
        token: parse_auth(auth)?,
        extensions,
    })
}

/// The initial response a client sends for `token` (no authorization id, no extensions).
pub fn client_first(token: &str) -> Vec<u8> {
    format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes()
}

/// The server side of one OAUTHBEARER exchange.
#[derive(Debug)]
pub struct OAuthBearerServer {
    state: State,
}

#[derive(Debug)]
enum State {
    Initial,
    /// The token was refused and the error challenge sent; `why` is the reason, for the log.
    ErrorSent {
        why: String,
    },
}

impl Default for OAuthBearerServer {
    fn default() -> Self {
        Self::new()
    }
}

impl OAuthBearerServer {
    pub fn new() -> Self {
        Self {
            state: State::Initial,
        }
    }

    pub fn handle_token(
        &mut self,
        token: &[u8],
        credentials: &dyn Credentials,
    ) -> Result<Step, SaslError> {
        if let State::ErrorSent { why } = &self.state {
            // Kafka takes anything but the 0x01 acknowledgement as a new initial response,
            // a fresh try on the same exchange; here the exchange fails either way, so every
            // refused token costs the client the failed-authentication delay and a new
            // connection, as a wrong password does.
            return Err(SaslError::InvalidToken { why: why.clone() });
        }
        let first = parse_client_first(token)?;
        let valid: ValidToken = match credentials.validate_bearer(first.token) {
            Ok(v) => v,
            Err(e @ JwtError::NotConfigured) => {
                return Err(SaslError::InvalidToken { why: e.to_string() })
            }
            Err(e) => {
                self.state = State::ErrorSent { why: e.to_string() };
                return Ok(Step::Continue(INVALID_TOKEN_JSON.as_bytes().to_vec()));
            }
        };
        if !first.authzid.is_empty() && first.authzid != valid.principal {
            return Err(SaslError::TokenAuthzId {
                user: valid.principal,
                authzid: first.authzid.to_string(),
            });
        }
        Ok(Step::Done {
            user: valid.principal,
            response: Vec::new(),
            credential_lifetime_ms: Some(valid.lifetime_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::jwt::tests::{claims, Signer, NOW_MS};
    use super::super::jwt::{JwtValidator, ValidatorSettings};
    use super::super::{ScramCredential, ScramMechanism};
    use super::*;

    struct Bearer(JwtValidator);
    impl Credentials for Bearer {
        fn plain_matches(&self, _: &str, _: &[u8]) -> bool {
            false
        }
        fn scram(&self, _: &str, _: ScramMechanism) -> Option<ScramCredential> {
            None
        }
        fn validate_bearer(&self, token: &str) -> Result<ValidToken, JwtError> {
            self.0.validate(token, NOW_MS)
        }
    }

    /// Kafka's initial-response grammar: the GS2 header with or without an authzid,
    /// extensions kept, `auth` required with the Bearer scheme in any case; anything else
    /// is malformed.
    #[test]
    fn client_first_grammar() {
        let m = parse_client_first(b"n,,\x01auth=Bearer abc.def-_.ghi\x01\x01").unwrap();
        assert_eq!((m.authzid, m.token), ("", "abc.def-_.ghi"));
        let m = parse_client_first(
            b"n,a=alice=2Cx,\x01traceId=t 1\x01auth=bearer  tok\x01traceId=t2\x01\x01",
        )
        .unwrap();
        assert_eq!((m.authzid, m.token), ("alice=2Cx", "tok"));
        assert_eq!(m.extensions, vec![("traceId", "t2")]);
        assert_eq!(client_first("a.b.c"), b"n,,\x01auth=Bearer a.b.c\x01\x01");
        for bad in [
            &b""[..],
            b"n,,",
            b"y,,\x01auth=Bearer t\x01\x01",
            b"p=x,,\x01auth=Bearer t\x01\x01",
            b"n,a=,\x01auth=Bearer t\x01\x01",
            b"n,a=x=41,\x01auth=Bearer t\x01\x01",
            b"n,,\x01\x01",
            b"n,,\x01auth=Bearer t\x01",
            b"n,,\x01auth=Basic dXNlcg\x01\x01",
            b"n,,\x01auth=Bearer\x01\x01",
            b"n,,\x01auth=Bearer t!\x01\x01",
            b"n,,\x01auth=Bearer t\x01k1=v\x01\x01",
            b"n,,\x01auth=Bearer t\x01k=\x01\x01",
            b"n,,\x01auth=Bearer t\x01\x01\x01",
            b"n,,\x01\xff=Bearer t\x01\x01",
        ] {
            assert!(
                matches!(parse_client_first(bad), Err(SaslError::Malformed { .. })),
                "{bad:?}"
            );
        }
    }

    /// A valid token authenticates as its subject with its remaining lifetime; an invalid
    /// one gets Kafka's `{"status":"invalid_token"}` challenge, then fails on the client's
    /// 0x01 (or on anything else); an authzid other than the subject fails at once.
    #[test]
    fn exchange() {
        let signer = Signer::new();
        let creds = Bearer(JwtValidator::new(
            signer.jwks(),
            ValidatorSettings::default(),
        ));
        let mut c = claims("alice");
        c.as_object_mut().unwrap().remove("iss");
        let token = signer.sign("RS256", Some("rsa"), &c);
        let mut s = OAuthBearerServer::new();
        assert_eq!(
            s.handle_token(&client_first(&token), &creds),
            Ok(Step::Done {
                user: "alice".into(),
                response: Vec::new(),
                credential_lifetime_ms: Some(3_600_000),
            })
        );

        c["exp"] = (NOW_MS / 1000 - 60).into();
        let expired = signer.sign("RS256", Some("rsa"), &c);
        for ack in [&b"\x01"[..], b"n,,\x01auth=Bearer x\x01\x01"] {
            let mut s = OAuthBearerServer::new();
            assert_eq!(
                s.handle_token(&client_first(&expired), &creds),
                Ok(Step::Continue(INVALID_TOKEN_JSON.as_bytes().to_vec()))
            );
            let err = s.handle_token(ack, &creds).unwrap_err();
            assert!(
                matches!(&err, SaslError::InvalidToken { why } if why.contains("expired")),
                "{err}"
            );
            assert_eq!(err.client_message().as_deref(), Some(INVALID_TOKEN_JSON));
            assert!(!err.to_string().contains(&expired));
        }

        let mut s = OAuthBearerServer::new();
        let msg = format!("n,a=bob,\x01auth=Bearer {token}\x01\x01");
        let err = s.handle_token(msg.as_bytes(), &creds).unwrap_err();
        assert_eq!(
            err.client_message().as_deref(),
            Some(
                "Authentication failed: Client requested an authorization id (bob) that is \
                 different from the token's principal name (alice)"
            )
        );
    }
}
