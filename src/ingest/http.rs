//! HTTP produce, sans-IO: the subset of the Kafka REST Proxy (v2) / Redpanda HTTP Proxy
//! produce API that log agents' HTTP outputs (Fluent Bit `http`, Vector `http`) can target.
//!
//! `POST /topics/{topic}` with a body in one of these forms, chosen by Content-Type:
//! - `application/vnd.kafka.binary.v2+json`: `{"records":[{"key":B64,"value":B64,
//!   "partition":N}]}`, key and value base64 (Kafka REST's binary format);
//! - `application/vnd.kafka.json.v2+json`: the same with any JSON as key and value, stored
//!   as its JSON text (Kafka REST's json format);
//! - `application/json`: `{"records":[...]}` as above, where a JSON string is stored as its
//!   text (no quotes) and `headers` may be an object of strings; or a JSON array (what
//!   Fluent Bit's `format json` sends) whose every element becomes one record holding the
//!   element's JSON text;
//! - anything else (`text/plain`, `application/x-ndjson`, ...): one record per non-empty line,
//!   the line as its value (without the LF or CRLF).
//!
//! The answer, once every record is durable: `200` with Kafka REST's
//! `{"offsets":[{"partition":P,"offset":O,"error_code":null,"error":null}],...}`, one entry
//! per record in order. Any record that failed makes it a `500` (the agent retries the
//! request; records that were stored are then stored twice: at-least-once, as with any
//! producer retry).
//!
//! Bounds: the request head is at most `head_bytes_max`, the body at most the configured
//! request size (Content-Length is required: chunked bodies get `411`), records per request
//! at most `records_max`.
use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

use base64::Engine as _;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HttpError {
    #[error("request head larger than {max} bytes")]
    HeadTooLarge { max: usize },
    #[error("malformed request head")]
    BadHead,
    #[error("request body of {len} bytes is over the {max}-byte bound")]
    BodyTooLarge { len: usize, max: usize },
    #[error("a body needs a Content-Length (chunked transfer encoding is not accepted)")]
    LengthRequired,
    #[error("body is not valid JSON records: {0}")]
    BadJson(String),
    #[error("more than {max} records in one request")]
    TooManyRecords { max: usize },
}

impl HttpError {
    /// The HTTP status that answers the error.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::HeadTooLarge { .. } => 431,
            HttpError::BadHead | HttpError::BadJson(_) => 400,
            HttpError::BodyTooLarge { .. } | HttpError::TooManyRecords { .. } => 413,
            HttpError::LengthRequired => 411,
        }
    }
}

/// The parts of a request head that matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    pub path: String,
    pub content_type: String,
    pub content_length: usize,
    /// The client asked to close after this request (or spoke HTTP/1.0 without keep-alive).
    pub close: bool,
}

/// Takes a request head (through the blank line) off `buf`; `Ok(None)` when incomplete.
pub fn parse_request_head(
    buf: &mut BytesMut,
    head_bytes_max: usize,
) -> Result<Option<RequestHead>, HttpError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > head_bytes_max {
            return Err(HttpError::HeadTooLarge {
                max: head_bytes_max,
            });
        }
        return Ok(None);
    };
    if end > head_bytes_max {
        return Err(HttpError::HeadTooLarge {
            max: head_bytes_max,
        });
    }
    let head = buf.split_to(end + 4);
    let text =
        std::str::from_utf8(head.get(..end).unwrap_or_default()).map_err(|_| HttpError::BadHead)?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().ok_or(HttpError::BadHead)?;
    let mut parts = request_line.split(' ');
    let method = parts.next().ok_or(HttpError::BadHead)?;
    let target = parts.next().ok_or(HttpError::BadHead)?;
    let version = parts.next().ok_or(HttpError::BadHead)?;
    if parts.next().is_some() || method.is_empty() || !version.starts_with("HTTP/1.") {
        return Err(HttpError::BadHead);
    }
    let mut head = RequestHead {
        method: method.to_string(),
        path: target.split('?').next().unwrap_or_default().to_string(),
        content_type: String::new(),
        content_length: 0,
        close: version == "HTTP/1.0",
    };
    for line in lines {
        let (name, value) = line.split_once(':').ok_or(HttpError::BadHead)?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            head.content_length = value.parse().map_err(|_| HttpError::BadHead)?;
        } else if name.eq_ignore_ascii_case("content-type") {
            head.content_type = value.to_ascii_lowercase();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError::LengthRequired);
        } else if name.eq_ignore_ascii_case("connection") {
            head.close = value.eq_ignore_ascii_case("close")
                || (head.close && !value.eq_ignore_ascii_case("keep-alive"));
        }
    }
    Ok(Some(head))
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Produce {
        topic: String,
    },
    /// `GET /stats`: the ingestion counters.
    Stats,
    NotFound,
    MethodNotAllowed,
}

pub fn route(head: &RequestHead) -> Route {
    let segments: Vec<&str> = head.path.trim_matches('/').split('/').collect();
    match (head.method.as_str(), segments.as_slice()) {
        ("POST", ["topics", topic]) if !topic.is_empty() => Route::Produce {
            topic: percent_decode(topic),
        },
        (_, ["topics", _]) => Route::MethodNotAllowed,
        ("GET", ["stats"]) => Route::Stats,
        _ => Route::NotFound,
    }
}

/// `%XX` escapes in a path segment (topic names are plain, but clients escape '.' at times).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One record of a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HttpRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// The partition the client chose, if any.
    pub partition: Option<i32>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum JsonFlavour {
    /// Kafka REST binary: base64 strings.
    Binary,
    /// Kafka REST json: any JSON, stored as JSON text.
    KafkaJson,
    /// Plain JSON: strings stored as their text.
    Plain,
}

/// Decodes a body by its Content-Type (see the module docs).
pub fn decode_body(
    body: &Bytes,
    content_type: &str,
    records_max: usize,
) -> Result<Vec<HttpRecord>, HttpError> {
    let flavour = if content_type.contains("vnd.kafka.binary") {
        JsonFlavour::Binary
    } else if content_type.contains("vnd.kafka.json") {
        JsonFlavour::KafkaJson
    } else if content_type.starts_with("application/json") {
        JsonFlavour::Plain
    } else {
        return lines(body, records_max);
    };
    let json: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| HttpError::BadJson(e.to_string()))?;
    let records = match (&json, flavour) {
        (serde_json::Value::Object(o), _) => o
            .get("records")
            .and_then(|r| r.as_array())
            .ok_or_else(|| HttpError::BadJson("expected a \"records\" array".into()))?,
        (serde_json::Value::Array(events), JsonFlavour::Plain) => {
            if events.len() > records_max {
                return Err(HttpError::TooManyRecords { max: records_max });
            }
            return Ok(events
                .iter()
                .map(|e| HttpRecord {
                    value: Some(Bytes::from(e.to_string())),
                    ..HttpRecord::default()
                })
                .collect());
        }
        _ => return Err(HttpError::BadJson("expected an object".into())),
    };
    if records.len() > records_max {
        return Err(HttpError::TooManyRecords { max: records_max });
    }
    records.iter().map(|r| record(r, flavour)).collect()
}

fn record(r: &serde_json::Value, flavour: JsonFlavour) -> Result<HttpRecord, HttpError> {
    let o = r
        .as_object()
        .ok_or_else(|| HttpError::BadJson("a record is not an object".into()))?;
    let partition = match o.get("partition") {
        None | Some(serde_json::Value::Null) => None,
        Some(p) => Some(
            p.as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .filter(|p| *p >= 0)
                .ok_or_else(|| HttpError::BadJson("partition is not a partition number".into()))?,
        ),
    };
    let mut headers = Vec::new();
    match o.get("headers") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Object(h)) => {
            for (name, v) in h {
                headers.push((name.clone(), field(Some(v), flavour)?));
            }
        }
        // Kafka REST v3's form: [{"name": N, "value": V}].
        Some(serde_json::Value::Array(h)) => {
            for entry in h {
                let name = entry
                    .get("name")
                    .or_else(|| entry.get("key"))
                    .and_then(|n| n.as_str())
                    .ok_or_else(|| HttpError::BadJson("a header has no name".into()))?;
                headers.push((name.to_string(), field(entry.get("value"), flavour)?));
            }
        }
        Some(_) => return Err(HttpError::BadJson("headers is not an object".into())),
    }
    Ok(HttpRecord {
        key: field(o.get("key"), flavour)?,
        value: field(o.get("value"), flavour)?,
        headers,
        partition,
    })
}

fn field(v: Option<&serde_json::Value>, flavour: JsonFlavour) -> Result<Option<Bytes>, HttpError> {
    Ok(match (v, flavour) {
        (None, _) | (Some(serde_json::Value::Null), _) => None,
        (Some(serde_json::Value::String(s)), JsonFlavour::Binary) => Some(Bytes::from(
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| HttpError::BadJson(format!("base64: {e}")))?,
        )),
        (Some(_), JsonFlavour::Binary) => {
            return Err(HttpError::BadJson(
                "binary key and value must be base64 strings".into(),
            ))
        }
        (Some(serde_json::Value::String(s)), JsonFlavour::Plain) => {
            Some(Bytes::from(s.clone().into_bytes()))
        }
        (Some(v), _) => Some(Bytes::from(v.to_string())),
    })
}

fn lines(body: &Bytes, records_max: usize) -> Result<Vec<HttpRecord>, HttpError> {
    let mut out = Vec::new();
    let mut rest = body.clone();
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n');
        let mut line = match end {
            Some(at) => {
                let line = rest.split_to(at);
                rest.advance(1);
                line
            }
            None => std::mem::take(&mut rest),
        };
        if line.last() == Some(&b'\r') {
            line.truncate(line.len() - 1);
        }
        if line.is_empty() {
            continue;
        }
        if out.len() == records_max {
            return Err(HttpError::TooManyRecords { max: records_max });
        }
        out.push(HttpRecord {
            value: Some(line),
            ..HttpRecord::default()
        });
    }
    Ok(out)
}

/// The outcome of one record.
pub type RecordResult = Result<(i32, i64), String>;

/// Kafka REST's produce answer for `results` (one per record, in order).
pub fn offsets_body(results: &[RecordResult]) -> String {
    let offsets: Vec<serde_json::Value> = results
        .iter()
        .map(|r| match r {
            Ok((partition, offset)) => serde_json::json!({
                "partition": partition, "offset": offset, "error_code": null, "error": null,
            }),
            // 50003 is Kafka REST's "produce failed, retriable".
            Err(e) => serde_json::json!({
                "partition": null, "offset": null, "error_code": 50003, "error": e,
            }),
        })
        .collect();
    serde_json::json!({"offsets": offsets, "key_schema_id": null, "value_schema_id": null})
        .to_string()
}

/// Kafka REST's error body.
pub fn error_body(error_code: u32, message: &str) -> String {
    serde_json::json!({"error_code": error_code, "message": message}).to_string()
}

/// A complete HTTP/1.1 response.
pub fn response(status: u16, content_type: &str, body: &str, close: bool) -> Bytes {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    };
    let connection = if close { "close" } else { "keep-alive" };
    Bytes::from(format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n{body}",
        body.len()
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use proptest::prelude::*;

    fn head(s: &str) -> Result<Option<RequestHead>, HttpError> {
        parse_request_head(&mut BytesMut::from(s.as_bytes()), 1024)
    }

    #[test]
    fn request_heads_parse() {
        // Proves the fields read from a head, keep-alive rules, and refusals.
        let h = head("POST /topics/logs?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: Application/JSON\r\ncontent-length: 12\r\n\r\nbody")
            .unwrap()
            .unwrap();
        assert_eq!(h.path, "/topics/logs");
        assert_eq!(h.content_type, "application/json");
        assert_eq!(h.content_length, 12);
        assert!(!h.close);
        assert_eq!(
            route(&h),
            Route::Produce {
                topic: "logs".into()
            }
        );
        let h = head("GET /stats HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(h.close);
        assert_eq!(route(&h), Route::Stats);
        assert_eq!(head("POST /topics/x HTTP/1.1\r\n"), Ok(None));
        assert_eq!(
            head("POST /topics/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(HttpError::LengthRequired)
        );
        assert_eq!(head("garbage\r\n\r\n"), Err(HttpError::BadHead));
        assert_eq!(
            parse_request_head(&mut BytesMut::from(&[b'a'; 2000][..]), 1024),
            Err(HttpError::HeadTooLarge { max: 1024 })
        );
        let h = head("GET /topics/x HTTP/1.1\r\n\r\n").unwrap().unwrap();
        assert_eq!(route(&h), Route::MethodNotAllowed);
    }

    #[test]
    fn bodies_decode_by_content_type() {
        // Proves each documented body form gives the records it says.
        let b = |s: &str| Bytes::from(s.to_string());
        let r = decode_body(&b("a\r\n\nb\nc"), "text/plain", 10).unwrap();
        let values: Vec<_> = r.iter().map(|r| r.value.clone().unwrap()).collect();
        assert_eq!(values, vec![b("a"), b("b"), b("c")]);

        let r = decode_body(
            &b(r#"{"records":[{"key":"aGk=","value":"dGhlcmU=","partition":2}]}"#),
            "application/vnd.kafka.binary.v2+json",
            10,
        )
        .unwrap();
        assert_eq!(r[0].key, Some(b("hi")));
        assert_eq!(r[0].value, Some(b("there")));
        assert_eq!(r[0].partition, Some(2));

        let r = decode_body(
            &b(r#"{"records":[{"value":{"a":1}},{"value":"s"}]}"#),
            "application/vnd.kafka.json.v2+json",
            10,
        )
        .unwrap();
        assert_eq!(r[0].value, Some(b(r#"{"a":1}"#)));
        assert_eq!(r[1].value, Some(b(r#""s""#)));

        let r = decode_body(
            &b(r#"{"records":[{"key":"k","value":"v","headers":{"h":"x"}}]}"#),
            "application/json",
            10,
        )
        .unwrap();
        assert_eq!(r[0].key, Some(b("k")));
        assert_eq!(r[0].value, Some(b("v")));
        assert_eq!(r[0].headers, vec![("h".to_string(), Some(b("x")))]);

        let r = decode_body(&b(r#"[{"log":"x"},{"log":"y"}]"#), "application/json", 10).unwrap();
        assert_eq!(r[1].value, Some(b(r#"{"log":"y"}"#)));

        assert!(matches!(
            decode_body(&b("{"), "application/json", 10),
            Err(HttpError::BadJson(_))
        ));
        assert_eq!(
            decode_body(&b("a\nb\nc"), "text/plain", 2),
            Err(HttpError::TooManyRecords { max: 2 })
        );
    }

    #[test]
    fn answers_follow_kafka_rest() {
        // Proves the offsets body carries one entry per record with Kafka REST's fields.
        let body = offsets_body(&[Ok((1, 7)), Err("timed out".into())]);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["offsets"][0]["partition"], 1);
        assert_eq!(v["offsets"][0]["offset"], 7);
        assert_eq!(v["offsets"][1]["error_code"], 50003);
        let r = response(200, "application/json", "{}", false);
        assert!(r.starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(r.ends_with(b"Content-Length: 2\r\nConnection: keep-alive\r\n\r\n{}"));
    }

    proptest! {
        #[test]
        fn never_panics(input in proptest::collection::vec(any::<u8>(), 0..400)) {
            // Proves any bytes as a head or a body give a result or a typed error.
            let _ = parse_request_head(&mut BytesMut::from(&input[..]), 128);
            let body = Bytes::from(input);
            for ct in ["text/plain", "application/json", "application/vnd.kafka.binary.v2+json"] {
                let _ = decode_body(&body, ct, 8);
            }
        }
    }
}
