//! Ingestion front doors, sans-IO: the protocols log senders already speak, turned into
//! records. Nothing here touches a socket, an executor or a clock; the listeners in
//! `server::ingest` feed bytes and the receive time in and carry the records out.
//!
//! - [`syslog`]: RFC 5424 and RFC 3164 (BSD) messages: PRI, timestamp, hostname, app-name,
//!   procid, msgid. A line that does not parse is still a record (see [`record`]).
//! - [`framing`]: RFC 6587 framing of syslog over a stream: octet counting or newline,
//!   decided per frame by its first byte, as rsyslog does.
//! - [`relp`]: RELP, rsyslog's reliable protocol: frames, the open/syslog/close session and
//!   its responses. The listener answers a message only once it is durable.
//! - [`record`]: one message -> one record (key = hostname, value = the line as received,
//!   headers), and the routing of messages to topics by facility, app-name or host.
//! - [`http`]: the produce subset of the Kafka REST / Redpanda HTTP Proxy API:
//!   `POST /topics/{topic}` with lines or JSON records, answered with partitions and offsets.
//! - [`idle`]: when a connection is idle (`connections_max_idle_ms`) or its partial frame
//!   too old (`request_timeout_ms`), from the reads and the time the listener reports.
//!
//! Every input size is bounded by the caller's limits (line length, request size); every
//! parser returns a typed error instead of panicking on any byte sequence (fuzzed in
//! `fuzz/fuzz_targets/ingest_parsers.rs`).
pub mod framing;
pub mod http;
pub mod idle;
pub mod record;
pub mod relp;
pub mod stats;
pub mod syslog;

/// Runs every parser of this module over `data` (the fuzz target and a unit test use it):
/// nothing may panic, whatever the bytes.
pub fn fuzz_all(data: &[u8]) {
    let _ = syslog::parse(data, 1_700_000_000_000);
    let mut buf = bytes::BytesMut::from(data);
    let mut deframer = framing::Deframer::new(1024);
    while let Ok(Some(_)) = deframer.decode(&mut buf) {}
    let mut buf = bytes::BytesMut::from(data);
    let mut session = relp::RelpSession::new(1024, 16);
    while let Ok(Some(frame)) = relp::decode_frame(&mut buf, 1024) {
        if session.handle(frame).is_err() {
            break;
        }
    }
    let mut buf = bytes::BytesMut::from(data);
    let _ = http::parse_request_head(&mut buf, 4096);
    let _ = http::decode_body(
        &bytes::Bytes::copy_from_slice(data),
        "application/vnd.kafka.binary.v2+json",
        16,
    );
    let _ = http::decode_body(&bytes::Bytes::copy_from_slice(data), "text/plain", 16);
    let _ = http::decode_body(&bytes::Bytes::copy_from_slice(data), "application/json", 16);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_parser_survives_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            // Proves the fuzz target's body (every parser of the module) never panics.
            super::fuzz_all(&data);
        }
    }
}
