//! Kafka's listeners: `listeners`, `advertised_listeners`, `listener_security_protocol_map`
//! and `inter_broker_listener_name`, parsed and checked together.
//!
//! A listener is `NAME://HOST:PORT`. NAME is a security protocol (PLAINTEXT, SSL,
//! SASL_PLAINTEXT, SASL_SSL) or a name the protocol map gives one (`CLIENT:SASL_SSL`). Names
//! are compared upper-cased, as Kafka's `ListenerName.normalised`. Without `listeners` the
//! broker has one PLAINTEXT listener on `listen` (advertised as `advertised_listener`), which
//! is how Strata was configured before it had listeners.
use std::fmt;

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ListenerError {
    #[error("{key}: {entry:?} is not NAME://HOST:PORT")]
    Syntax { key: &'static str, entry: String },
    #[error("{key}: listener {name} has no security protocol (it is none of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, and listener_security_protocol_map does not name it)")]
    UnknownProtocol { key: &'static str, name: String },
    #[error("listener_security_protocol_map: {entry:?} is not NAME:PROTOCOL with a protocol of PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")]
    BadMapEntry { entry: String },
    #[error("{key}: listener {name} is listed twice")]
    Duplicate { key: &'static str, name: String },
    #[error("listeners: port {port} is used by two listeners")]
    DuplicatePort { port: u16 },
    #[error(
        "{key}: listener {name} has port 0; every shard binds the same port, so it must be given"
    )]
    PortZero { key: &'static str, name: String },
    #[error("advertised_listeners: {name} is not one of the listeners")]
    NotAListener { name: String },
    #[error("advertised_listeners: {name} would advertise {host:?}, which clients cannot connect to; set advertised_listeners")]
    Unroutable { name: String, host: String },
    #[error("inter_broker_listener_name: {name} is not one of the listeners")]
    UnknownInterBroker { name: String },
    #[error("advertised_listener is for `listen`; with `listeners` set, use advertised_listeners")]
    LegacyAdvertised,
    #[error("listeners: none given")]
    Empty,
}

/// Kafka's `SecurityProtocol`, with its wire ids (RegisterBrokerRecord's endpoints carry them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Kafka's id: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL.
    pub fn id(self) -> i16 {
        match self {
            SecurityProtocol::Plaintext => 0,
            SecurityProtocol::Ssl => 1,
            SecurityProtocol::SaslPlaintext => 2,
            SecurityProtocol::SaslSsl => 3,
        }
    }

    pub fn from_id(id: i16) -> Option<SecurityProtocol> {
        Self::ALL.into_iter().find(|p| p.id() == id)
    }

    /// Case-insensitive, as Kafka's `SecurityProtocol.forName`.
    pub fn parse(text: &str) -> Option<SecurityProtocol> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(text.trim()))
    }

    /// Is the connection wrapped in TLS?
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Must the client authenticate by SASL before it is served?
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One listener, bound (`listeners`) or advertised (`advertised_listeners`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Upper-cased listener name.
    pub name: String,
    pub security_protocol: SecurityProtocol,
    /// Host as written, without IPv6 brackets; empty means every interface.
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// The address to bind: an empty host is every interface, an IPv6 literal is bracketed.
    pub fn bind_address(&self) -> String {
        match self.host.as_str() {
            "" => format!("0.0.0.0:{}", self.port),
            h if h.contains(':') => format!("[{h}]:{}", self.port),
            h => format!("{h}:{}", self.port),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.name, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.name, self.host, self.port)
        }
    }
}

/// The listener settings as written in the config.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListenerSettings<'a> {
    pub listeners: &'a str,
    pub advertised_listeners: &'a str,
    pub listener_security_protocol_map: &'a str,
    pub inter_broker_listener_name: &'a str,
    /// `listen` and `advertised_listener`: the single PLAINTEXT listener used when
    /// `listeners` is empty.
    pub listen: &'a str,
    pub advertised_listener: &'a str,
}

/// The broker's listeners, resolved and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listeners {
    /// What every shard binds, in the order given.
    pub bound: Vec<Endpoint>,
    /// What the broker registers and Metadata answers, each named like a bound listener.
    pub advertised: Vec<Endpoint>,
    /// The listener other brokers use to reach this one (replication, transaction markers).
    pub inter_broker: String,
}

impl Listeners {
    pub fn resolve(s: ListenerSettings<'_>) -> Result<Listeners, ListenerError> {
        let map = parse_protocol_map(s.listener_security_protocol_map)?;
        let bound = if s.listeners.trim().is_empty() {
            vec![parse_one(
                "listen",
                &format!("PLAINTEXT://{}", s.listen),
                &map,
            )?]
        } else {
            if !s.advertised_listener.is_empty() {
                return Err(ListenerError::LegacyAdvertised);
            }
            parse_list("listeners", s.listeners, &map)?
        };
        if bound.is_empty() {
            return Err(ListenerError::Empty);
        }
        for (i, l) in bound.iter().enumerate() {
            if l.port == 0 {
                return Err(ListenerError::PortZero {
                    key: "listeners",
                    name: l.name.clone(),
                });
            }
            if bound[..i].iter().any(|o| o.port == l.port) {
                return Err(ListenerError::DuplicatePort { port: l.port });
            }
        }
        let advertised = if !s.advertised_listeners.trim().is_empty() {
            parse_list("advertised_listeners", s.advertised_listeners, &map)?
        } else if s.listeners.trim().is_empty() {
            // Before listeners: `advertised_listener` (or `listen` itself), taken as given.
            let text = if s.advertised_listener.is_empty() {
                s.listen
            } else {
                s.advertised_listener
            };
            vec![parse_one(
                "advertised_listener",
                &format!("PLAINTEXT://{text}"),
                &map,
            )?]
        } else {
            let copied = bound.clone();
            for l in &copied {
                if l.host.is_empty() || l.host == "0.0.0.0" || l.host == "::" {
                    return Err(ListenerError::Unroutable {
                        name: l.name.clone(),
                        host: l.host.clone(),
                    });
                }
            }
            copied
        };
        for a in &advertised {
            if a.port == 0 {
                return Err(ListenerError::PortZero {
                    key: "advertised_listeners",
                    name: a.name.clone(),
                });
            }
            if !bound.iter().any(|l| l.name == a.name) {
                return Err(ListenerError::NotAListener {
                    name: a.name.clone(),
                });
            }
        }
        let inter_broker = if s.inter_broker_listener_name.trim().is_empty() {
            // Kafka's default is security.inter.broker.protocol=PLAINTEXT, i.e. the PLAINTEXT
            // listener; a broker without one uses its first.
            advertised
                .iter()
                .find(|l| l.name == "PLAINTEXT")
                .or_else(|| advertised.first())
                .map(|l| l.name.clone())
                .ok_or(ListenerError::Empty)?
        } else {
            let name = s.inter_broker_listener_name.trim().to_ascii_uppercase();
            if !advertised.iter().any(|l| l.name == name) {
                return Err(ListenerError::UnknownInterBroker { name });
            }
            name
        };
        Ok(Listeners {
            bound,
            advertised,
            inter_broker,
        })
    }

    /// The advertised endpoint of the inter-broker listener.
    pub fn inter_broker_endpoint(&self) -> Option<&Endpoint> {
        self.advertised.iter().find(|l| l.name == self.inter_broker)
    }

    /// The bound listener named `name`.
    pub fn bound(&self, name: &str) -> Option<&Endpoint> {
        self.bound.iter().find(|l| l.name == name)
    }

    /// `listeners` as Kafka shows it (DescribeConfigs).
    pub fn bound_text(&self) -> String {
        join(&self.bound)
    }

    /// `advertised.listeners` as Kafka shows it.
    pub fn advertised_text(&self) -> String {
        join(&self.advertised)
    }

    /// `listener.security.protocol.map` as Kafka shows it: every listener's name and protocol.
    pub fn protocol_map_text(&self) -> String {
        self.bound
            .iter()
            .map(|l| format!("{}:{}", l.name, l.security_protocol))
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn join(endpoints: &[Endpoint]) -> String {
    endpoints
        .iter()
        .map(Endpoint::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_protocol_map(text: &str) -> Result<Vec<(String, SecurityProtocol)>, ListenerError> {
    let mut out: Vec<(String, SecurityProtocol)> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || ListenerError::BadMapEntry {
            entry: entry.to_string(),
        };
        let (name, protocol) = entry.split_once(':').ok_or_else(bad)?;
        let name = name.trim().to_ascii_uppercase();
        let protocol = SecurityProtocol::parse(protocol).ok_or_else(bad)?;
        if name.is_empty() {
            return Err(bad());
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(ListenerError::Duplicate {
                key: "listener_security_protocol_map",
                name,
            });
        }
        out.push((name, protocol));
    }
    Ok(out)
}

fn parse_list(
    key: &'static str,
    text: &str,
    map: &[(String, SecurityProtocol)],
) -> Result<Vec<Endpoint>, ListenerError> {
    let mut out: Vec<Endpoint> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let endpoint = parse_one(key, entry, map)?;
        if out.iter().any(|o| o.name == endpoint.name) {
            return Err(ListenerError::Duplicate {
                key,
                name: endpoint.name,
            });
        }
        out.push(endpoint);
    }
    Ok(out)
}

/// Parses `NAME://HOST:PORT` (HOST may be empty, a name, an IPv4 or a bracketed IPv6).
fn parse_one(
    key: &'static str,
    entry: &str,
    map: &[(String, SecurityProtocol)],
) -> Result<Endpoint, ListenerError> {
    let syntax = || ListenerError::Syntax {
        key,
        entry: entry.to_string(),
    };
    let (name, address) = entry.trim().split_once("://").ok_or_else(syntax)?;
    let name = name.trim().to_ascii_uppercase();
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Err(syntax());
    }
    let (host, port) = address.rsplit_once(':').ok_or_else(syntax)?;
    let port: u16 = port.parse().map_err(|_| syntax())?;
    let host = match host.strip_prefix('[') {
        Some(inner) => inner.strip_suffix(']').ok_or_else(syntax)?,
        None => host,
    };
    let security_protocol = map
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
        .or_else(|| SecurityProtocol::parse(&name))
        .ok_or_else(|| ListenerError::UnknownProtocol {
            key,
            name: name.clone(),
        })?;
    Ok(Endpoint {
        name,
        security_protocol,
        host: host.to_string(),
        port,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings(listeners: &str, advertised: &str) -> ListenerSettings<'static> {
        let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
        ListenerSettings {
            listeners: leak(listeners),
            advertised_listeners: leak(advertised),
            listen: "127.0.0.1:9092",
            ..Default::default()
        }
    }

    fn ep(name: &str, p: SecurityProtocol, host: &str, port: u16) -> Endpoint {
        Endpoint {
            name: name.into(),
            security_protocol: p,
            host: host.into(),
            port,
        }
    }

    /// Without `listeners` the broker has exactly today's single PLAINTEXT listener on
    /// `listen`, advertised as `advertised_listener` or `listen`.
    #[test]
    fn defaults_are_one_plaintext_listener_on_listen() {
        let l = Listeners::resolve(settings("", "")).unwrap();
        let plain = ep("PLAINTEXT", SecurityProtocol::Plaintext, "127.0.0.1", 9092);
        assert_eq!(l.bound, vec![plain.clone()]);
        assert_eq!(l.advertised, vec![plain]);
        assert_eq!(l.inter_broker, "PLAINTEXT");
        let l = Listeners::resolve(ListenerSettings {
            listen: "0.0.0.0:9000",
            advertised_listener: "broker.example:19000",
            ..Default::default()
        })
        .unwrap();
        assert_eq!(l.bound[0].bind_address(), "0.0.0.0:9000");
        assert_eq!(
            l.advertised,
            vec![ep(
                "PLAINTEXT",
                SecurityProtocol::Plaintext,
                "broker.example",
                19000
            )]
        );
    }

    /// Named listeners map to protocols; advertised defaults to listeners; inter-broker
    /// defaults to PLAINTEXT when there is one, else the first listener; names are
    /// compared upper-cased.
    #[test]
    fn named_listeners_and_their_defaults() {
        let mut s = settings(
            "client://127.0.0.1:9093, REPLICATION://[::1]:9094,PLAINTEXT://:9095",
            "CLIENT://kafka.example:443,REPLICATION://[::1]:9094,PLAINTEXT://h:9095",
        );
        s.listener_security_protocol_map = "CLIENT:SASL_SSL,REPLICATION:plaintext";
        let l = Listeners::resolve(s).unwrap();
        assert_eq!(
            l.bound,
            vec![
                ep("CLIENT", SecurityProtocol::SaslSsl, "127.0.0.1", 9093),
                ep("REPLICATION", SecurityProtocol::Plaintext, "::1", 9094),
                ep("PLAINTEXT", SecurityProtocol::Plaintext, "", 9095),
            ]
        );
        assert_eq!(l.bound[1].bind_address(), "[::1]:9094");
        assert_eq!(l.bound[2].bind_address(), "0.0.0.0:9095");
        assert_eq!(l.advertised[0].host, "kafka.example");
        assert_eq!(l.inter_broker, "PLAINTEXT");
        assert_eq!(
            l.advertised_text(),
            "CLIENT://kafka.example:443,REPLICATION://[::1]:9094,PLAINTEXT://h:9095"
        );
        s.inter_broker_listener_name = "replication";
        let l = Listeners::resolve(s).unwrap();
        assert_eq!(l.inter_broker, "REPLICATION");
        assert_eq!(l.inter_broker_endpoint().unwrap().port, 9094);

        let l =
            Listeners::resolve(settings("SSL://127.0.0.1:1,SASL_SSL://127.0.0.1:2", "")).unwrap();
        assert_eq!(l.inter_broker, "SSL");
        assert_eq!(l.advertised, l.bound);
        assert_eq!(l.protocol_map_text(), "SSL:SSL,SASL_SSL:SASL_SSL");
    }

    /// Every inconsistency is refused with the setting named.
    #[test]
    fn refuses_bad_listeners() {
        use ListenerError as E;
        let bad = |l: &str, a: &str| Listeners::resolve(settings(l, a)).unwrap_err();
        assert!(matches!(bad("PLAINTEXT:/h:1", ""), E::Syntax { .. }));
        assert!(matches!(bad("PLAINTEXT://h", ""), E::Syntax { .. }));
        assert!(matches!(bad("PLAINTEXT://h:99999", ""), E::Syntax { .. }));
        assert!(matches!(bad("CLIENT://h:1", ""), E::UnknownProtocol { .. }));
        assert!(matches!(
            bad("SSL://h:1,SSL://h:2", ""),
            E::Duplicate { .. }
        ));
        assert!(matches!(
            bad("SSL://h:1,PLAINTEXT://h:1", ""),
            E::DuplicatePort { port: 1 }
        ));
        assert!(matches!(bad("SSL://h:0", ""), E::PortZero { .. }));
        assert!(matches!(
            bad("SSL://h:1", "PLAINTEXT://h:1"),
            E::NotAListener { .. }
        ));
        assert!(matches!(bad("SSL://0.0.0.0:1", ""), E::Unroutable { .. }));
        assert!(matches!(bad(" , ", ""), E::Empty));
        let mut s = settings("SSL://h:1", "");
        s.inter_broker_listener_name = "PLAINTEXT";
        assert!(matches!(
            Listeners::resolve(s).unwrap_err(),
            E::UnknownInterBroker { .. }
        ));
        let mut s = settings("SSL://h:1", "");
        s.advertised_listener = "h:1";
        assert_eq!(Listeners::resolve(s).unwrap_err(), E::LegacyAdvertised);
        let mut s = settings("SSL://h:1", "");
        s.listener_security_protocol_map = "X:TLS";
        assert!(matches!(
            Listeners::resolve(s).unwrap_err(),
            E::BadMapEntry { .. }
        ));
    }
}
