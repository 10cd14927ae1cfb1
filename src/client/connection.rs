//! One blocking TCP connection to one broker, in TLS when the listener is SSL or SASL_SSL:
//! framing, headers, correlation ids and API version negotiation.
//!
//! Invariants: requests on a connection are strictly sequential (send one, read its response),
//! so the correlation id of every response must equal the one just sent — a mismatch means the
//! stream is out of step and the connection is unusable. Response sizes are bounded by
//! [`RESPONSE_BYTES_MAX`] before any allocation, so a hostile or broken peer cannot make the
//! client allocate gigabytes.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message, Request, StrBytes};

use super::error::{describe_connect_error, ClientError, Result};
use super::{REQUEST_BYTES_MAX, RESPONSE_BYTES_MAX};

/// Kafka's error code for an API version the broker does not speak.
const UNSUPPORTED_VERSION: i16 = 35;

/// Timeouts of one connection.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    /// How long to wait for a response beyond any wait the request itself asks the broker for
    /// (a Fetch's `max_wait_ms`).
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(30),
        }
    }
}

/// The byte stream under the Kafka framing: the socket, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A connection with its negotiated API versions.
pub struct Connection {
    addr: String,
    stream: Stream,
    correlation_id: i32,
    client_id: StrBytes,
    timeouts: Timeouts,
    /// Broker's supported (min, max) per API key, from ApiVersions.
    broker_versions: HashMap<i16, (i16, i16)>,
}

/// A readable name of an API key for messages (`Produce`, `Fetch`, ...).
pub(crate) fn api_name(key: i16) -> String {
    match ApiKey::try_from(key) {
        Ok(k) => format!("{k:?}"),
        Err(()) => format!("api#{key}"),
    }
}

/// SASL credentials for a connection.
#[derive(Debug, Clone)]
pub struct SaslLogin {
    pub mechanism: crate::security::sasl::Mechanism,
    pub username: String,
    pub password: String,
}

impl Connection {
    /// Connects to `addr` (HOST:PORT), completes the TLS handshake when `tls` is given (the
    /// broker's certificate checked as the configuration says, for the host of `addr`), and
    /// negotiates API versions.
    pub fn connect(
        addr: &str,
        client_id: &str,
        timeouts: Timeouts,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> Result<Connection> {
        let connect_err = |reason: String| ClientError::Connect {
            addr: addr.to_owned(),
            reason,
        };
        let resolved: Vec<_> = addr
            .to_socket_addrs()
            .map_err(|e| connect_err(format!("cannot resolve: {e}")))?
            .collect();
        let mut last_err = None;
        let mut stream = None;
        for sock in resolved {
            match TcpStream::connect_timeout(&sock, timeouts.connect) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        let stream = match (stream, last_err) {
            (Some(s), _) => s,
            (None, Some(e)) => return Err(connect_err(describe_connect_error(&e))),
            (None, None) => return Err(connect_err("no address found".to_owned())),
        };
        let io_err = |source| ClientError::Io {
            addr: addr.to_owned(),
            source,
        };
        stream.set_nodelay(true).map_err(io_err)?;
        stream
            .set_write_timeout(Some(timeouts.request))
            .map_err(io_err)?;
        let stream = match tls {
            None => Stream::Plain(stream),
            Some(config) => Stream::Tls(Box::new(handshake(addr, stream, config, timeouts)?)),
        };
        let mut conn = Connection {
            addr: addr.to_owned(),
            stream,
            correlation_id: 0,
            client_id: StrBytes::from_string(client_id.to_owned()),
            timeouts,
            broker_versions: HashMap::new(),
        };
        conn.negotiate_api_versions()?;
        Ok(conn)
    }

    /// Authenticates with SASL (SaslHandshake v1, then SaslAuthenticate), as a client must
    /// on a SASL_PLAINTEXT listener before anything else. SCRAM checks the server's signature.
    pub fn authenticate(&mut self, login: &SaslLogin) -> Result<()> {
        use crate::security::sasl::{nonce_from, ClientStep, SaslClientExchange};
        let addr = self.addr.clone();
        let broker_err = |context: &str, code: i16, message: Option<String>| ClientError::Broker {
            context: format!("{context} with {addr}"),
            code,
            message,
        };
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_string(login.mechanism.name().to_owned()));
        let version = self.version_for::<SaslHandshakeRequest>(None)?.max(1);
        let response = self.send(&handshake, version)?;
        if response.error_code != 0 {
            return Err(broker_err("SASL handshake", response.error_code, None));
        }
        let version = self.version_for::<SaslAuthenticateRequest>(None)?;
        let exchange = |conn: &mut Connection, token: Vec<u8>| -> Result<Bytes> {
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
            let response = conn.send(&request, version)?;
            if response.error_code != 0 {
                return Err(ClientError::Broker {
                    context: format!("SASL authentication with {}", conn.addr),
                    code: response.error_code,
                    message: response.error_message.map(|m| m.to_string()),
                });
            }
            Ok(response.auth_bytes)
        };
        let nonce = nonce_from(&mut rand::thread_rng(), 24);
        let mut client =
            SaslClientExchange::new(login.mechanism, &login.username, &login.password, &nonce);
        let sasl_err = |e: crate::security::sasl::SaslError| {
            broker_err("SASL authentication", -1, Some(e.to_string()))
        };
        let mut token = client.first().map_err(sasl_err)?;
        loop {
            let answer = exchange(self, token)?;
            match client.answer(&answer).map_err(sasl_err)? {
                ClientStep::Send(next) => token = next,
                ClientStep::Done => break,
                // The acknowledgement brings the broker's failure (an error above).
                ClientStep::Refused { ack, challenge } => {
                    exchange(self, ack)?;
                    return Err(broker_err("SASL authentication", -1, Some(challenge)));
                }
            }
        }
        Ok(())
    }

    /// The address this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Asks the broker which API versions it speaks. Starts with our newest ApiVersions
    /// version; a broker that does not know it answers UNSUPPORTED_VERSION in the v0 format
    /// (KIP-511), and we retry at v0, which every broker understands.
    fn negotiate_api_versions(&mut self) -> Result<()> {
        let ours = ApiVersionsRequest::VERSIONS.max;
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("strata"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let body = self.round_trip(ApiKey::ApiVersions as i16, ours, &request, Duration::ZERO)?;
        let mut peek = body.clone();
        let error_code = if peek.remaining() >= 2 {
            peek.get_i16()
        } else {
            -1
        };
        let response = if error_code == UNSUPPORTED_VERSION {
            let v0 = ApiVersionsRequest::default();
            let body = self.round_trip(ApiKey::ApiVersions as i16, 0, &v0, Duration::ZERO)?;
            self.decode::<ApiVersionsResponse>(ApiKey::ApiVersions as i16, 0, body)?
        } else {
            self.decode::<ApiVersionsResponse>(ApiKey::ApiVersions as i16, ours, body)?
        };
        if response.error_code != 0 {
            return Err(ClientError::Broker {
                context: format!("ApiVersions from {}", self.addr),
                code: response.error_code,
                message: None,
            });
        }
        self.broker_versions = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(())
    }

    /// The version to use for `R`: the highest both sides speak, at most `cap`.
    ///
    /// `cap` exists because some newer versions change semantics we do not implement (Produce
    /// and Fetch v13 address topics by id only).
    pub fn version_for<R: Request>(&self, cap: Option<i16>) -> Result<i16> {
        let ours_min = R::VERSIONS.min;
        let ours_max = cap.map_or(R::VERSIONS.max, |c| c.min(R::VERSIONS.max));
        let unsupported = |broker: String| ClientError::UnsupportedApi {
            addr: self.addr.clone(),
            api: api_name(R::KEY),
            ours_min,
            ours_max,
            broker,
        };
        let Some(&(broker_min, broker_max)) = self.broker_versions.get(&R::KEY) else {
            return Err(unsupported("none".to_owned()));
        };
        let version = ours_max.min(broker_max);
        if version < ours_min.max(broker_min) {
            return Err(unsupported(format!("{broker_min}..{broker_max}")));
        }
        Ok(version)
    }

    /// Sends `request` at `version` and returns the decoded response.
    pub fn send<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response> {
        self.send_waiting(request, version, Duration::ZERO)
    }

    /// Like [`send`](Self::send), for requests that ask the broker to hold the response up to
    /// `broker_wait` (Fetch's `max_wait_ms`): the read timeout grows by that much.
    pub fn send_waiting<R: Request>(
        &mut self,
        request: &R,
        version: i16,
        broker_wait: Duration,
    ) -> Result<R::Response> {
        let body = self.round_trip(R::KEY, version, request, broker_wait)?;
        self.decode::<R::Response>(R::KEY, version, body)
    }

    /// Sends a request the broker will not answer (Produce with acks=0).
    pub fn send_no_response<R: Request>(&mut self, request: &R, version: i16) -> Result<()> {
        self.write_request(R::KEY, version, request).map(|_| ())
    }

    fn decode<T: Decodable>(&self, api_key: i16, version: i16, mut body: Bytes) -> Result<T> {
        T::decode(&mut body, version).map_err(|e| ClientError::Decode {
            addr: self.addr.clone(),
            api: api_name(api_key),
            version,
            message: e.to_string(),
        })
    }

    fn write_request<E: Encodable>(&mut self, api_key: i16, version: i16, body: &E) -> Result<i32> {
        let key = ApiKey::try_from(api_key).map_err(|()| ClientError::Encode {
            api: api_name(api_key),
            version,
            message: "unknown API key".to_owned(),
        })?;
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(api_key)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let encode_err = |e: anyhow::Error| ClientError::Encode {
            api: api_name(api_key),
            version,
            message: e.to_string(),
        };
        let mut frame = BytesMut::with_capacity(256);
        frame.extend_from_slice(&[0; 4]);
        header
            .encode(&mut frame, key.request_header_version(version))
            .map_err(encode_err)?;
        body.encode(&mut frame, version).map_err(encode_err)?;
        let len = frame.len() - 4;
        if len > REQUEST_BYTES_MAX {
            return Err(ClientError::Encode {
                api: api_name(api_key),
                version,
                message: format!("request is {len} bytes, more than {REQUEST_BYTES_MAX}"),
            });
        }
        // The bound above keeps `len` well inside i32.
        frame[..4].copy_from_slice(&(len as i32).to_be_bytes());
        // Flushing pushes out what TLS still holds of the frame.
        self.stream
            .write_all(&frame)
            .and_then(|()| self.stream.flush())
            .map_err(|e| self.io_error(e))?;
        Ok(self.correlation_id)
    }

    /// Writes one request and reads its response; returns the response body (header removed).
    fn round_trip<E: Encodable>(
        &mut self,
        api_key: i16,
        version: i16,
        body: &E,
        broker_wait: Duration,
    ) -> Result<Bytes> {
        let correlation_id = self.write_request(api_key, version, body)?;
        self.stream
            .tcp()
            .set_read_timeout(Some(self.timeouts.request + broker_wait))
            .map_err(|e| self.io_error(e))?;
        let mut size = [0u8; 4];
        self.read_exact(&mut size)?;
        let len = i32::from_be_bytes(size);
        let len = usize::try_from(len).map_err(|_| ClientError::Decode {
            addr: self.addr.clone(),
            api: api_name(api_key),
            version,
            message: format!("negative frame size {len}"),
        })?;
        if len > RESPONSE_BYTES_MAX {
            return Err(ClientError::ResponseTooLarge {
                addr: self.addr.clone(),
                len,
                max: RESPONSE_BYTES_MAX,
            });
        }
        let mut frame = vec![0u8; len];
        self.read_exact(&mut frame)?;
        let mut frame = Bytes::from(frame);
        let header_version = ApiKey::try_from(api_key)
            .map(|k| k.response_header_version(version))
            .unwrap_or(0);
        // Decoding advances `frame` past the header, whose length varies (flexible headers
        // carry tagged fields), leaving exactly the body.
        let header = ResponseHeader::decode(&mut frame, header_version).map_err(|e| {
            ClientError::Decode {
                addr: self.addr.clone(),
                api: api_name(api_key),
                version,
                message: format!("response header: {e}"),
            }
        })?;
        if header.correlation_id != correlation_id {
            return Err(ClientError::CorrelationMismatch {
                addr: self.addr.clone(),
                expected: correlation_id,
                got: header.correlation_id,
            });
        }
        Ok(frame)
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        match self.stream.read_exact(buf) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(ClientError::Disconnected {
                addr: self.addr.clone(),
            }),
            Err(e) => Err(self.io_error(e)),
        }
    }

    fn io_error(&self, source: io::Error) -> ClientError {
        // A broker that refuses our client certificate says so after a TLS 1.3 handshake has
        // completed on our side: the alert comes with the first read.
        if is_tls_error(&source) {
            return tls_error(&self.addr, &source);
        }
        match source.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout {
                addr: self.addr.clone(),
            },
            _ => ClientError::Io {
                addr: self.addr.clone(),
                source,
            },
        }
    }
}

/// Runs the TLS handshake on a fresh socket (within the connect timeout), so a refused
/// certificate is reported as such rather than as a failed first request.
fn handshake(
    addr: &str,
    mut tcp: TcpStream,
    config: &Arc<rustls::ClientConfig>,
    timeouts: Timeouts,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let host = crate::security::tls::host_of(addr);
    let name =
        rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| ClientError::Tls {
            addr: addr.to_owned(),
            reason: format!("{host:?} is no TLS server name: {e}"),
        })?;
    let mut tls =
        rustls::ClientConnection::new(config.clone(), name).map_err(|e| ClientError::Tls {
            addr: addr.to_owned(),
            reason: e.to_string(),
        })?;
    tcp.set_read_timeout(Some(timeouts.connect))
        .map_err(|source| ClientError::Io {
            addr: addr.to_owned(),
            source,
        })?;
    while tls.is_handshaking() {
        match tls.complete_io(&mut tcp) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ClientError::Tls {
                    addr: addr.to_owned(),
                    reason: "no TLS handshake answer in time (is the listener TLS?)".to_owned(),
                })
            }
            Err(e) => return Err(tls_error(addr, &e)),
        }
    }
    Ok(rustls::StreamOwned::new(tls, tcp))
}

fn is_tls_error(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<rustls::Error>())
}

/// A TLS failure in words that name the `--command-config` setting to look at.
fn tls_error(addr: &str, e: &io::Error) -> ClientError {
    ClientError::Tls {
        addr: addr.to_owned(),
        reason: crate::security::tls::describe_client_error(
            e,
            "ssl.truststore.location",
            "the client certificate (ssl.keystore.location or ssl.certificate.location)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::MetadataRequest;
    use kafka_protocol::protocol::decode_request_header_from_buffer;
    use std::net::TcpListener;
    use std::thread;

    type Reply = Box<dyn FnOnce(&RequestHeader) -> Vec<u8> + Send>;

    /// A one-connection fake broker: for each request in turn, reads it and writes the bytes
    /// the next script step returns.
    fn fake_broker(script: Vec<Reply>) -> (String, thread::JoinHandle<Vec<RequestHeader>>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let handle = thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut seen = Vec::new();
            for step in script {
                let mut size = [0u8; 4];
                if stream.read_exact(&mut size).is_err() {
                    break;
                }
                let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
                stream.read_exact(&mut body).expect("body");
                let mut body = Bytes::from(body);
                let header = decode_request_header_from_buffer(&mut body).expect("header");
                let reply = step(&header);
                stream.write_all(&reply).expect("reply");
                seen.push(header);
            }
            seen
        });
        (addr, handle)
    }

    fn frame(correlation_id: i32, body: impl Encodable, version: i16) -> Vec<u8> {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&correlation_id.to_be_bytes()); // response header v0
        body.encode(&mut buf, version).expect("encode");
        let mut out = (buf.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&buf);
        out
    }

    fn versions(keys: &[(ApiKey, i16, i16)], error_code: i16) -> ApiVersionsResponse {
        ApiVersionsResponse::default()
            .with_error_code(error_code)
            .with_api_keys(
                keys.iter()
                    .map(|&(k, min, max)| {
                        ApiVersion::default()
                            .with_api_key(k as i16)
                            .with_min_version(min)
                            .with_max_version(max)
                    })
                    .collect(),
            )
    }

    #[test]
    fn falls_back_to_api_versions_v0_and_negotiates_min_of_maxima() {
        // Proves: an UNSUPPORTED_VERSION answer (v0 body) makes the client retry ApiVersions at
        // v0, correlation ids advance, and the chosen version is min(our max, broker max).
        let keys = [(ApiKey::ApiVersions, 0, 2), (ApiKey::Metadata, 1, 9)];
        let script: Vec<Reply> = vec![
            Box::new(move |h| frame(h.correlation_id, versions(&keys, UNSUPPORTED_VERSION), 0)),
            Box::new(move |h| {
                assert_eq!(h.request_api_version, 0);
                frame(h.correlation_id, versions(&keys, 0), 0)
            }),
        ];
        let (addr, broker) = fake_broker(script);
        let conn = Connection::connect(&addr, "test", Timeouts::default(), None).expect("connect");
        assert_eq!(conn.version_for::<MetadataRequest>(Some(12)).expect("v"), 9);
        assert_eq!(conn.version_for::<MetadataRequest>(Some(4)).expect("v"), 4);
        assert!(matches!(
            conn.version_for::<kafka_protocol::messages::ProduceRequest>(None),
            Err(ClientError::UnsupportedApi { .. })
        ));
        let seen = broker.join().expect("broker");
        assert_eq!(seen.len(), 2);
        assert_eq!(
            seen[0].request_api_version,
            ApiVersionsRequest::VERSIONS.max
        );
        assert!(seen[1].correlation_id > seen[0].correlation_id);
    }

    #[test]
    fn oversized_and_mismatched_responses_are_errors() {
        // Proves the response size bound is checked before allocating, and a response carrying
        // another request's correlation id is refused.
        let keys = [(ApiKey::ApiVersions, 0, 4), (ApiKey::Metadata, 0, 12)];
        let script: Vec<Reply> = vec![
            Box::new(move |h| frame(h.correlation_id, versions(&keys, 0), h.request_api_version)),
            Box::new(|_| ((RESPONSE_BYTES_MAX + 1) as i32).to_be_bytes().to_vec()),
        ];
        let (addr, broker) = fake_broker(script);
        let mut conn =
            Connection::connect(&addr, "test", Timeouts::default(), None).expect("connect");
        let err = conn
            .send(&MetadataRequest::default(), 4)
            .expect_err("too large");
        assert!(matches!(err, ClientError::ResponseTooLarge { .. }), "{err}");
        broker.join().expect("broker");

        let script: Vec<Reply> = vec![
            Box::new(move |h| frame(h.correlation_id, versions(&keys, 0), h.request_api_version)),
            Box::new(move |h| frame(h.correlation_id + 7, versions(&keys, 0), 0)),
        ];
        let (addr, broker) = fake_broker(script);
        let mut conn =
            Connection::connect(&addr, "test", Timeouts::default(), None).expect("connect");
        let err = conn
            .send(&ApiVersionsRequest::default(), 0)
            .expect_err("mismatch");
        assert!(
            matches!(err, ClientError::CorrelationMismatch { .. }),
            "{err}"
        );
        broker.join().expect("broker");
    }
}
