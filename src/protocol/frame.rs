//! Request and response framing: a 4-byte big-endian size, then a header, then the body.
//! Pure functions over `Bytes`; the connection does the socket I/O.
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use thiserror::Error;

/// Why a request could not be framed or its header read.
#[derive(Debug, Error)]
pub enum FrameError {
    #[error("frame size {size} is outside 1..={max}")]
    BadSize { size: i64, max: usize },
    #[error("frame too short for a request header ({0} bytes)")]
    Truncated(usize),
    #[error("unknown api key {api_key} (correlation id {correlation_id})")]
    UnknownApi { api_key: i16, correlation_id: i32 },
    #[error("malformed request header: {0}")]
    BadHeader(String),
    #[error("malformed {api:?} v{version} request body: {message}")]
    BadBody {
        api: ApiKey,
        version: i16,
        message: String,
    },
    #[error("cannot encode {api:?} v{version} response: {message}")]
    Encode {
        api: ApiKey,
        version: i16,
        message: String,
    },
}

/// Checks a frame's size prefix against the configured maximum.
pub fn check_size(size: i32, max: usize) -> Result<usize, FrameError> {
    if size <= 0 || size as usize > max {
        return Err(FrameError::BadSize {
            size: size as i64,
            max,
        });
    }
    Ok(size as usize)
}

/// A request whose header has been read; the body is still raw.
#[derive(Debug)]
pub struct RawRequest {
    pub api: ApiKey,
    pub header: RequestHeader,
    pub body: Bytes,
}

/// Reads the request header from a frame (without its size prefix).
pub fn parse_request(mut frame: Bytes) -> Result<RawRequest, FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::Truncated(frame.len()));
    }
    let mut peek = &frame[..8];
    let api_key = peek.get_i16();
    let api_version = peek.get_i16();
    let correlation_id = peek.get_i32();
    let api = ApiKey::try_from(api_key).map_err(|_| FrameError::UnknownApi {
        api_key,
        correlation_id,
    })?;
    let header_version = api.request_header_version(api_version);
    let header = match crate::alloc::guarded(|| RequestHeader::decode(&mut frame, header_version)) {
        Ok(h) => h,
        // A client probing with an ApiVersions version newer than ours may use a header
        // layout we cannot know; it still deserves the UNSUPPORTED_VERSION answer that
        // lets it downgrade, and that answer needs only the fields peeked above.
        Err(_) if api == ApiKey::ApiVersions => {
            return Ok(RawRequest {
                api,
                header: RequestHeader::default()
                    .with_request_api_key(api_key)
                    .with_request_api_version(api_version)
                    .with_correlation_id(correlation_id),
                body: Bytes::new(),
            })
        }
        Err(e) => return Err(FrameError::BadHeader(e.to_string())),
    };
    Ok(RawRequest {
        api,
        header,
        body: frame,
    })
}

/// Decodes a request body, turning decoder errors and panics into `FrameError`.
pub fn decode_body<T: Decodable>(raw: &RawRequest) -> Result<T, FrameError> {
    let mut body = raw.body.clone();
    let version = raw.header.request_api_version;
    crate::alloc::guarded(|| T::decode(&mut body, version)).map_err(|e| FrameError::BadBody {
        api: raw.api,
        version,
        message: e.to_string(),
    })
}

/// Encodes a whole response frame: size prefix, response header, body.
pub fn encode_response<T: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<BytesMut, FrameError> {
    let encode_err = |e: anyhow::Error| FrameError::Encode {
        api,
        version,
        message: e.to_string(),
    };
    let header_version = api.response_header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let size = header.compute_size(header_version).map_err(encode_err)?
        + body.compute_size(version).map_err(encode_err)?;
    let mut out = BytesMut::with_capacity(4 + size);
    out.put_i32(size as i32);
    header
        .encode(&mut out, header_version)
        .map_err(encode_err)?;
    body.encode(&mut out, version).map_err(encode_err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Size prefixes outside 1..=max are refused before anything is allocated.
    #[test]
    fn size_bounds() {
        assert!(check_size(0, 100).is_err());
        assert!(check_size(-5, 100).is_err());
        assert!(check_size(101, 100).is_err());
        assert_eq!(check_size(100, 100).ok(), Some(100));
    }

    /// Garbage after a valid-looking header never panics; unknown keys are reported as such.
    #[test]
    fn garbage_headers() {
        assert!(matches!(
            parse_request(Bytes::from_static(&[0x7f, 0x7f, 0, 0, 0, 0, 0, 1])),
            Err(FrameError::UnknownApi {
                api_key: 0x7f7f,
                correlation_id: 1
            })
        ));
        assert!(parse_request(Bytes::from_static(&[0, 3, 0, 9, 0, 0, 0, 1, 0xff])).is_err());
        assert!(parse_request(Bytes::from_static(&[0, 3])).is_err());
    }
}
