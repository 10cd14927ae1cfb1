//! Typed errors of the client, and Kafka error code names.
//!
//! Every failure a user can hit from the command line has its own variant with a message that
//! says what to do next; broker-reported failures carry the Kafka error code and its Java name
//! (`UNKNOWN_TOPIC_OR_PARTITION`), so they match what Kafka's own tools print.

use std::io;

use kafka_protocol::error::ResponseError;

/// Everything that can go wrong talking to a broker.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid bootstrap address {addr:?}: expected HOST:PORT[,HOST:PORT...]")]
    InvalidBootstrap { addr: String },

    #[error("cannot connect to {addr}: {reason} — is `strata serve` running?")]
    Connect { addr: String, reason: String },

    #[error("TLS with {addr} failed: {reason}")]
    Tls { addr: String, reason: String },

    #[error("I/O error talking to {addr}: {source}")]
    Io {
        addr: String,
        #[source]
        source: io::Error,
    },

    #[error("timed out waiting for a response from {addr}")]
    Timeout { addr: String },

    #[error("{addr} closed the connection")]
    Disconnected { addr: String },

    #[error("response from {addr} is {len} bytes, more than the {max} byte bound")]
    ResponseTooLarge {
        addr: String,
        len: usize,
        max: usize,
    },

    #[error("response from {addr} has correlation id {got}, expected {expected}")]
    CorrelationMismatch {
        addr: String,
        expected: i32,
        got: i32,
    },

    #[error("cannot encode {api} v{version} request: {message}")]
    Encode {
        api: String,
        version: i16,
        message: String,
    },

    #[error("malformed {api} v{version} response from {addr}: {message}")]
    Decode {
        addr: String,
        api: String,
        version: i16,
        message: String,
    },

    #[error(
        "broker {addr} does not support {api} in a version this client speaks \
         (client {ours_min}..{ours_max}, broker {broker})"
    )]
    UnsupportedApi {
        addr: String,
        api: String,
        ours_min: i16,
        ours_max: i16,
        broker: String,
    },

    #[error("{context}: {}{}", error_code_label(*code), message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Broker {
        context: String,
        code: i16,
        message: Option<String>,
    },

    #[error("unknown topic {topic:?}")]
    UnknownTopic { topic: String },

    #[error("topic {topic:?} has no partition {partition} (it has {count})")]
    UnknownPartition {
        topic: String,
        partition: i32,
        count: usize,
    },

    #[error("partition {topic}-{partition} has no leader right now")]
    NoLeader { topic: String, partition: i32 },

    #[error("topic {topic} not served by its leaders after {waited_ms} ms: {last}")]
    NotLed {
        topic: String,
        waited_ms: u128,
        last: String,
    },

    #[error("broker {node_id} is not in the cluster metadata")]
    UnknownBroker { node_id: i32 },

    #[error("record batch error: {message}")]
    Records { message: String },
}

impl ClientError {
    /// The Kafka error code, when the broker reported one.
    pub fn kafka_code(&self) -> Option<i16> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            ClientError::UnknownTopic { .. } => Some(3),
            _ => None,
        }
    }

    /// Whether retrying after this error (with fresh metadata) may succeed: the connection
    /// failed, or the broker says so (a leader moving, a partition not yet led after a
    /// restart).
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Io { .. }
            | ClientError::Disconnected { .. }
            | ClientError::Timeout { .. }
            | ClientError::Connect { .. }
            | ClientError::NoLeader { .. }
            | ClientError::UnknownBroker { .. } => true,
            ClientError::Broker { code, .. } => error_code_is_retriable(*code),
            _ => false,
        }
    }
}

/// Result type of the client.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Kafka's name for an error code, as Java's `Errors` enum spells it:
/// `3` → `UNKNOWN_TOPIC_OR_PARTITION`, `0` → `NONE`, an unknown code → `UNKNOWN_ERROR_CODE_<n>`.
pub fn error_code_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".to_owned(),
        Some(ResponseError::Unknown(n)) => format!("UNKNOWN_ERROR_CODE_{n}"),
        // kafka-protocol names its variants in CamelCase after Java's constants, and only
        // exposes the name through Display; converting back gives Java's exact spelling.
        Some(known) => camel_to_screaming_snake(&known.to_string()),
    }
}

/// `NAME (code)` for messages.
pub fn error_code_label(code: i16) -> String {
    format!("{} ({code})", error_code_name(code))
}

/// Whether the broker says retrying the same request may succeed (leader moving, etc.).
pub fn error_code_is_retriable(code: i16) -> bool {
    ResponseError::try_from_code(code).is_some_and(|e| e.is_retriable())
}

fn camel_to_screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, ch) in camel.char_indices() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

/// Turns a broker's per-item error code into a `Result`.
pub(crate) fn check_code(
    code: i16,
    message: Option<String>,
    context: impl FnOnce() -> String,
) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(ClientError::Broker {
            context: context(),
            code,
            message,
        })
    }
}

/// Describes a connect failure the way a person would say it ("connection refused").
pub(crate) fn describe_connect_error(err: &io::Error) -> String {
    match err.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => "connection timed out".to_owned(),
        io::ErrorKind::AddrNotAvailable => "address not available".to_owned(),
        _ => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_have_java_names() {
        // Proves the CamelCase→SNAKE mapping reproduces Java's `Errors` names for common codes.
        let cases = [
            (0, "NONE"),
            (-1, "UNKNOWN_SERVER_ERROR"),
            (1, "OFFSET_OUT_OF_RANGE"),
            (3, "UNKNOWN_TOPIC_OR_PARTITION"),
            (6, "NOT_LEADER_OR_FOLLOWER"),
            (19, "NOT_ENOUGH_REPLICAS"),
            (35, "UNSUPPORTED_VERSION"),
            (36, "TOPIC_ALREADY_EXISTS"),
            (37, "INVALID_PARTITIONS"),
            (38, "INVALID_REPLICATION_FACTOR"),
            (40, "INVALID_CONFIG"),
            (56, "KAFKA_STORAGE_ERROR"),
            (100, "UNKNOWN_TOPIC_ID"),
            (9999, "UNKNOWN_ERROR_CODE_9999"),
        ];
        for (code, name) in cases {
            assert_eq!(error_code_name(code), name, "code {code}");
        }
    }

    #[test]
    fn broker_error_message_names_the_code() {
        // Proves a broker error prints context, name, code and the broker's message.
        let err = ClientError::Broker {
            context: "create topic \"t\"".into(),
            code: 36,
            message: Some("exists".into()),
        };
        assert_eq!(
            err.to_string(),
            "create topic \"t\": TOPIC_ALREADY_EXISTS (36): exists"
        );
    }

    #[test]
    fn connect_error_suggests_starting_the_broker() {
        // Proves the connect message reads as the brief asks.
        let io = io::Error::from(io::ErrorKind::ConnectionRefused);
        let err = ClientError::Connect {
            addr: "127.0.0.1:9092".into(),
            reason: describe_connect_error(&io),
        };
        assert_eq!(
            err.to_string(),
            "cannot connect to 127.0.0.1:9092: connection refused — is `strata serve` running?"
        );
    }
}
