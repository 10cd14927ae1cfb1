//! What the broker knows about one client connection: the listener it came in on (and so its
//! security protocol), who it is (Kafka's `KafkaPrincipal`), and where it stands with
//! authentication. The connection's reader owns it and lends it to dispatch for each
//! request, so handlers and the gates in dispatch (SASL, ACLs) read and change it without
//! sharing or locking: requests of one connection are dispatched one at a time.
use std::fmt;

use super::listener::SecurityProtocol;

/// Kafka's `KafkaPrincipal`: a type (`User` for every principal Kafka's built-in
/// authenticators produce) and a name. Written `User:alice`, as in ACLs and `super_users`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KafkaPrincipal {
    pub principal_type: String,
    pub name: String,
}

impl KafkaPrincipal {
    /// Kafka's `KafkaPrincipal.USER_TYPE`.
    pub const USER_TYPE: &'static str = "User";
    /// Kafka's name for a connection nobody authenticated (PLAINTEXT, or SSL without a
    /// client certificate).
    pub const ANONYMOUS_NAME: &'static str = "ANONYMOUS";

    pub fn user(name: impl Into<String>) -> KafkaPrincipal {
        KafkaPrincipal {
            principal_type: Self::USER_TYPE.to_string(),
            name: name.into(),
        }
    }

    /// `User:ANONYMOUS`.
    pub fn anonymous() -> KafkaPrincipal {
        Self::user(Self::ANONYMOUS_NAME)
    }

    /// Parses `Type:name` (the name may itself contain `:`), as Kafka's
    /// `SecurityUtils.parseKafkaPrincipal`.
    pub fn parse(text: &str) -> Option<KafkaPrincipal> {
        let (principal_type, name) = text.split_once(':')?;
        if principal_type.is_empty() || name.is_empty() {
            return None;
        }
        Some(KafkaPrincipal {
            principal_type: principal_type.to_string(),
            name: name.to_string(),
        })
    }
}

impl fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// Where a connection stands with authentication.
///
/// The SASL layer drives `Pending` to `Authenticated` (and sets the session's principal);
/// dispatch serves a `Pending` connection ApiVersions and the SASL requests only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authentication {
    /// The listener authenticates no one by SASL (PLAINTEXT, SSL): the principal set when
    /// the connection was accepted (ANONYMOUS, or the client certificate's) is final.
    NotRequired,
    /// A SASL listener (SASL_PLAINTEXT, SASL_SSL) whose client has not authenticated yet.
    Pending,
    /// Authenticated by SASL with this mechanism (`PLAIN`, `SCRAM-SHA-512`, ...).
    Authenticated { mechanism: String },
}

/// One connection's security context.
#[derive(Debug, Clone)]
pub struct Session {
    /// The listener's name (`PLAINTEXT`, `CLIENT`, ...), as in `listeners`.
    pub listener: String,
    pub security_protocol: SecurityProtocol,
    /// Who the connection acts as; `User:ANONYMOUS` until something authenticates it.
    pub principal: KafkaPrincipal,
    /// The client's address, `ip:port` (reported as a group member's host, and logged).
    pub peer: String,
    pub authentication: Authentication,
}

impl Session {
    /// The session of a connection just accepted on `listener`: anonymous, and waiting for
    /// SASL when the listener's protocol needs it.
    pub fn new(listener: &str, security_protocol: SecurityProtocol, peer: String) -> Session {
        let authentication = if security_protocol.uses_sasl() {
            Authentication::Pending
        } else {
            Authentication::NotRequired
        };
        Session {
            listener: listener.to_string(),
            security_protocol,
            principal: KafkaPrincipal::anonymous(),
            peer,
            authentication,
        }
    }

    /// The client's IP address as ACLs name hosts (`peer` without its port or IPv6
    /// brackets).
    pub fn host(&self) -> &str {
        let ip = self
            .peer
            .rsplit_once(':')
            .map_or(self.peer.as_str(), |(ip, _)| ip);
        ip.strip_prefix('[')
            .and_then(|ip| ip.strip_suffix(']'))
            .unwrap_or(ip)
    }

    /// May this connection be served requests other than ApiVersions and SASL?
    pub fn is_authenticated(&self) -> bool {
        !matches!(self.authentication, Authentication::Pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Principals print and parse as Kafka writes them; a fresh session is anonymous, and
    /// only a SASL listener's session waits for authentication.
    #[test]
    fn principals_and_new_sessions() {
        assert_eq!(KafkaPrincipal::anonymous().to_string(), "User:ANONYMOUS");
        assert_eq!(
            KafkaPrincipal::parse("User:CN=a:b,O=x"),
            Some(KafkaPrincipal::user("CN=a:b,O=x"))
        );
        assert_eq!(KafkaPrincipal::parse("User:"), None);
        assert_eq!(KafkaPrincipal::parse("alice"), None);
        let plain = Session::new("PLAINTEXT", SecurityProtocol::Plaintext, "1.2.3.4:5".into());
        assert!(plain.is_authenticated());
        assert_eq!(plain.host(), "1.2.3.4");
        let v6 = Session::new("PLAINTEXT", SecurityProtocol::Plaintext, "[::1]:9".into());
        assert_eq!(v6.host(), "::1");
        assert_eq!(plain.principal, KafkaPrincipal::anonymous());
        let sasl = Session::new("CLIENT", SecurityProtocol::SaslSsl, "1.2.3.4:5".into());
        assert!(!sasl.is_authenticated());
        assert_eq!(sasl.authentication, Authentication::Pending);
    }
}
