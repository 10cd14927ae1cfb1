//! One syslog message -> one record, and which topic it goes to.
//!
//! The record (issue 16's mapping, what a consumer can rely on):
//! - key: the message's hostname, so one host's lines land in one partition, in order. A
//!   message without one (or that did not parse) is keyed by the sender's IP address.
//! - value: the message exactly as received, without the transport's framing (no octet
//!   count, no trailing LF or CRLF); structured data and the message text stay in it.
//! - timestamp: the message's own when it has one, else the receive time.
//! - headers, each present only when the message has the field:
//!   `facility` and `severity` as their standard names (`local0`, `info`: names rather than
//!   numbers, so a consumer needs no table; [`super::syslog::FACILITY_NAMES`]),
//!   `app-name`, `procid`, `msgid`, and always `sender` (the peer's `ip:port`).
//! - a message that did not parse keeps the line and the `sender` header and gets
//!   `parse-error` (the reason); a message cut at the line-length bound gets
//!   `truncated: true`.
//!
//! Header values borrow the line (`Bytes::slice_ref`): mapping copies no message bytes.
use std::net::SocketAddr;

use bytes::Bytes;
use kafka_protocol::records::Compression;
use thiserror::Error;

use super::syslog::{self, facility_from_name, facility_name, severity_name, Message};

/// A record ready for a partition's batch: what a producer would send.
pub use crate::protocol::produce_batch::ProduceRecord as IngestRecord;

/// Encodes `records` as one v2 record batch in `compression`, as a producer would send it.
pub fn encode_batch(records: Vec<IngestRecord>, compression: Compression) -> Result<Bytes, String> {
    crate::protocol::produce_batch::encode_batch(records, compression).map_err(|e| e.to_string())
}

/// A syslog message mapped to its topic and record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped<'r> {
    pub topic: &'r str,
    pub record: IngestRecord,
    /// False when the line did not parse (it is kept all the same).
    pub parsed: bool,
}

/// Maps one message (framing removed) received from `sender` at `receive_ms`.
pub fn map_syslog<'r>(
    line: Bytes,
    truncated: bool,
    sender: SocketAddr,
    receive_ms: i64,
    routes: &'r Routes,
) -> Mapped<'r> {
    let sender_text = Bytes::from(sender.to_string());
    let sender_ip = || Some(Bytes::from(sender.ip().to_string()));
    match syslog::parse(&line, receive_ms) {
        Ok(m) => {
            let field = |f: Option<&[u8]>| f.map(|f| line.slice_ref(f));
            let mut headers = Vec::with_capacity(7);
            headers.push((
                "facility".to_string(),
                Some(Bytes::from_static(facility_name(m.facility).as_bytes())),
            ));
            headers.push((
                "severity".to_string(),
                Some(Bytes::from_static(severity_name(m.severity).as_bytes())),
            ));
            for (name, value) in [
                ("app-name", m.app_name),
                ("procid", m.procid),
                ("msgid", m.msgid),
            ] {
                if let Some(v) = field(value) {
                    headers.push((name.to_string(), Some(v)));
                }
            }
            headers.push(("sender".to_string(), Some(sender_text)));
            if truncated {
                headers.push(("truncated".to_string(), Some(Bytes::from_static(b"true"))));
            }
            let topic = routes.topic_for(&m);
            Mapped {
                topic,
                record: IngestRecord {
                    key: field(m.hostname).or_else(sender_ip),
                    timestamp_ms: m.timestamp_ms.unwrap_or(receive_ms),
                    value: Some(line),
                    headers,
                },
                parsed: true,
            }
        }
        Err(e) => {
            let mut headers = vec![
                ("sender".to_string(), Some(sender_text)),
                ("parse-error".to_string(), Some(Bytes::from(e.to_string()))),
            ];
            if truncated {
                headers.push(("truncated".to_string(), Some(Bytes::from_static(b"true"))));
            }
            Mapped {
                topic: routes.malformed_topic(),
                record: IngestRecord {
                    key: sender_ip(),
                    value: Some(line),
                    timestamp_ms: receive_ms,
                    headers,
                },
                parsed: false,
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RouteError {
    #[error("route {0:?} is not FIELD=VALUE:TOPIC with FIELD one of facility, app, host")]
    Syntax(String),
    #[error("route {0:?} names an unknown facility")]
    Facility(String),
    #[error("{0:?} is not a topic name (1 to 249 of ASCII letters, digits, '.', '_', '-')")]
    TopicName(String),
}

/// Kafka's topic name rule.
fn valid_topic_name(name: &str) -> bool {
    (1..=crate::limits::TOPIC_NAME_LEN_MAX).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// What a route matches.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Matcher {
    Facility(u8),
    /// App-name, exactly.
    App(String),
    /// Hostname, exactly, or by prefix when the pattern ends in `*`.
    Host(String),
}

/// The routing table: the first rule that matches a parsed message names its topic; no
/// match, the default topic; a line that did not parse goes to the malformed topic (the
/// default topic unless a dead-letter topic is set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    rules: Vec<(Matcher, String)>,
    default_topic: String,
    malformed_topic: String,
}

impl Routes {
    /// `rules` in the config's syntax: `facility=local0:topic`, `app=nginx:topic`,
    /// `host=web-*:topic`.
    pub fn new(
        default_topic: &str,
        malformed_topic: &str,
        rules: &[String],
    ) -> Result<Self, RouteError> {
        let mut parsed = Vec::with_capacity(rules.len());
        for rule in rules {
            let syntax = || RouteError::Syntax(rule.clone());
            let (matcher, topic) = rule.rsplit_once(':').ok_or_else(syntax)?;
            let (field, value) = matcher.split_once('=').ok_or_else(syntax)?;
            if topic.is_empty() || value.is_empty() {
                return Err(syntax());
            }
            let matcher = match field.trim() {
                "facility" => Matcher::Facility(
                    facility_from_name(value.trim())
                        .ok_or_else(|| RouteError::Facility(rule.clone()))?,
                ),
                "app" => Matcher::App(value.trim().to_string()),
                "host" => Matcher::Host(value.trim().to_string()),
                _ => return Err(syntax()),
            };
            parsed.push((matcher, topic.trim().to_string()));
        }
        let routes = Self {
            rules: parsed,
            default_topic: default_topic.to_string(),
            malformed_topic: if malformed_topic.is_empty() {
                default_topic.to_string()
            } else {
                malformed_topic.to_string()
            },
        };
        if let Some(bad) = routes.topics().into_iter().find(|t| !valid_topic_name(t)) {
            return Err(RouteError::TopicName(bad.to_string()));
        }
        Ok(routes)
    }

    /// Every topic a message may be routed to (to create them up front).
    pub fn topics(&self) -> Vec<&str> {
        let mut out: Vec<&str> = std::iter::once(self.default_topic.as_str())
            .chain(std::iter::once(self.malformed_topic.as_str()))
            .chain(self.rules.iter().map(|(_, t)| t.as_str()))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    pub fn malformed_topic(&self) -> &str {
        &self.malformed_topic
    }

    pub fn topic_for(&self, m: &Message<'_>) -> &str {
        for (matcher, topic) in &self.rules {
            let hit = match matcher {
                Matcher::Facility(f) => m.facility == *f,
                Matcher::App(app) => m.app_name == Some(app.as_bytes()),
                Matcher::Host(pattern) => {
                    m.hostname.is_some_and(|h| match pattern.strip_suffix('*') {
                        Some(prefix) => h.starts_with(prefix.as_bytes()),
                        None => h == pattern.as_bytes(),
                    })
                }
            };
            if hit {
                return topic;
            }
        }
        &self.default_topic
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn sender() -> SocketAddr {
        "192.0.2.7:40000".parse().unwrap()
    }

    fn header<'a>(r: &'a IngestRecord, name: &str) -> Option<&'a [u8]> {
        r.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }

    #[test]
    fn a_parsed_line_becomes_the_documented_record() {
        // Proves key, value (unchanged), timestamp and every header of the mapping.
        let routes = Routes::new("syslog", "", &[]).unwrap();
        let line = Bytes::from_static(
            b"<134>1 2026-11-30T21:00:00.5Z web01 nginx 77 ACCESS [a b=\"c\"] GET /",
        );
        let m = map_syslog(line.clone(), false, sender(), 5, &routes);
        assert!(m.parsed);
        assert_eq!(m.topic, "syslog");
        assert_eq!(m.record.key.as_deref(), Some(&b"web01"[..]));
        assert_eq!(m.record.value.as_ref(), Some(&line));
        assert_eq!(m.record.timestamp_ms, 1_796_072_400_500);
        assert_eq!(header(&m.record, "facility"), Some(&b"local0"[..]));
        assert_eq!(header(&m.record, "severity"), Some(&b"info"[..]));
        assert_eq!(header(&m.record, "app-name"), Some(&b"nginx"[..]));
        assert_eq!(header(&m.record, "procid"), Some(&b"77"[..]));
        assert_eq!(header(&m.record, "msgid"), Some(&b"ACCESS"[..]));
        assert_eq!(header(&m.record, "sender"), Some(&b"192.0.2.7:40000"[..]));
        assert_eq!(header(&m.record, "parse-error"), None);
    }

    #[test]
    fn a_malformed_line_is_kept_with_its_reason() {
        // Proves an unparsable line keeps its bytes, is keyed by the sender's IP, stamped
        // with the receive time, marked, and goes to the dead-letter topic when one is set.
        let routes = Routes::new("syslog", "syslog-bad", &[]).unwrap();
        let m = map_syslog(Bytes::from_static(b"garbage"), true, sender(), 42, &routes);
        assert!(!m.parsed);
        assert_eq!(m.topic, "syslog-bad");
        assert_eq!(m.record.key.as_deref(), Some(&b"192.0.2.7"[..]));
        assert_eq!(m.record.value.as_deref(), Some(&b"garbage"[..]));
        assert_eq!(m.record.timestamp_ms, 42);
        assert_eq!(
            header(&m.record, "parse-error"),
            Some(&b"no <PRI> at the start"[..])
        );
        assert_eq!(header(&m.record, "truncated"), Some(&b"true"[..]));
    }

    #[test]
    fn routes_match_in_order() {
        // Proves facility, app and host (exact and prefix) rules, first match wins, and
        // the default otherwise; bad rules are refused.
        let rules = [
            "facility=auth:security".to_string(),
            "app=nginx:web".to_string(),
            "host=db-*:databases".to_string(),
            "host=exact:one".to_string(),
        ];
        let routes = Routes::new("syslog", "", &rules).unwrap();
        let topic = |line: &'static [u8]| {
            map_syslog(Bytes::from_static(line), false, sender(), 0, &routes).topic
        };
        assert_eq!(topic(b"<34>1 - db-1 nginx - - -"), "security");
        assert_eq!(topic(b"<14>1 - db-1 nginx - - -"), "web");
        assert_eq!(topic(b"<14>1 - db-1 postgres - - -"), "databases");
        assert_eq!(topic(b"<14>1 - exact x - - -"), "one");
        assert_eq!(topic(b"<14>1 - exactly x - - -"), "syslog");
        assert_eq!(
            routes.topics(),
            vec!["databases", "one", "security", "syslog", "web"]
        );
        assert!(Routes::new("s", "", &["facility=nope:t".into()]).is_err());
        assert!(Routes::new("s", "", &["color=red:t".into()]).is_err());
        assert!(Routes::new("s", "", &["app=x".into()]).is_err());
        assert!(Routes::new("s", "", &["app=x:bad topic".into()]).is_err());
        assert!(Routes::new("", "", &[]).is_err());
    }
}
