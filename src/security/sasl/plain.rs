//! PLAIN (RFC 4616): one message, `[authzid] NUL authcid NUL passwd`, UTF-8. As Kafka's
//! PlainSaslServer: the authorization id, when given, must equal the user; user and password
//! must not be empty.
use super::{Credentials, SaslError};

const MECHANISM: &str = "PLAIN";

/// The parts of a PLAIN message.
#[derive(Debug, PartialEq, Eq)]
pub struct PlainMessage<'a> {
    pub authzid: &'a str,
    pub user: &'a str,
    pub password: &'a [u8],
}

/// Splits a PLAIN message into its three fields.
pub fn parse(token: &[u8]) -> Result<PlainMessage<'_>, SaslError> {
    let mut parts = token.splitn(3, |b| *b == 0);
    let (Some(authzid), Some(user), Some(password)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(SaslError::malformed(
            MECHANISM,
            "expected authzid NUL user NUL password",
        ));
    };
    if password.contains(&0) {
        return Err(SaslError::malformed(MECHANISM, "more than three fields"));
    }
    let authzid = std::str::from_utf8(authzid)
        .map_err(|_| SaslError::malformed(MECHANISM, "authorization id is not UTF-8"))?;
    let user = std::str::from_utf8(user)
        .map_err(|_| SaslError::malformed(MECHANISM, "user name is not UTF-8"))?;
    if user.is_empty() {
        return Err(SaslError::malformed(MECHANISM, "empty user name"));
    }
    if password.is_empty() {
        return Err(SaslError::malformed(MECHANISM, "empty password"));
    }
    Ok(PlainMessage {
        authzid,
        user,
        password,
    })
}

/// Checks a PLAIN message against `credentials`; the authenticated user on success.
pub fn authenticate(token: &[u8], credentials: &dyn Credentials) -> Result<String, SaslError> {
    let msg = parse(token)?;
    if !msg.authzid.is_empty() && msg.authzid != msg.user {
        return Err(SaslError::AuthzIdMismatch {
            user: msg.user.to_string(),
            authzid: msg.authzid.to_string(),
        });
    }
    if !credentials.plain_matches(msg.user, msg.password) {
        return Err(SaslError::BadCredentials {
            user: msg.user.to_string(),
        });
    }
    Ok(msg.user.to_string())
}

/// The PLAIN message a client sends for `user` and `password` (no authorization id).
pub fn client_message(user: &str, password: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(user.len() + password.len() + 2);
    out.push(0);
    out.extend_from_slice(user.as_bytes());
    out.push(0);
    out.extend_from_slice(password.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::security::sasl::{ScramCredential, ScramMechanism};

    struct Users;
    impl Credentials for Users {
        fn plain_matches(&self, user: &str, password: &[u8]) -> bool {
            user == "admin" && password == b"secret"
        }
        fn scram(&self, _: &str, _: ScramMechanism) -> Option<ScramCredential> {
            None
        }
    }

    /// The right password authenticates, with or without an equal authzid; a wrong one, an
    /// unknown user, a different authzid and malformed messages are refused with typed errors.
    #[test]
    fn plain_exchange() {
        assert_eq!(
            authenticate(&client_message("admin", "secret"), &Users),
            Ok("admin".into())
        );
        assert_eq!(
            authenticate(b"admin\0admin\0secret", &Users),
            Ok("admin".into())
        );
        assert_eq!(
            authenticate(&client_message("admin", "wrong"), &Users),
            Err(SaslError::BadCredentials {
                user: "admin".into()
            })
        );
        assert!(matches!(
            authenticate(b"bob\0admin\0secret", &Users),
            Err(SaslError::AuthzIdMismatch { .. })
        ));
        for bad in [
            &b""[..],
            b"admin",
            b"\0admin",
            b"\0\0pw",
            b"\0admin\0",
            b"\0a\0b\0c",
        ] {
            assert!(
                matches!(authenticate(bad, &Users), Err(SaslError::Malformed { .. })),
                "{bad:?}"
            );
        }
        assert!(matches!(
            authenticate(b"\0\xff\0pw", &Users),
            Err(SaslError::Malformed { .. })
        ));
    }

    /// The error message a failed attempt logs never contains the password.
    #[test]
    fn errors_do_not_carry_the_password() {
        let e = authenticate(&client_message("admin", "hunter2"), &Users).unwrap_err();
        assert!(!e.to_string().contains("hunter2"));
    }
}
