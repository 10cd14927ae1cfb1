//! Kafka error codes. The code table itself comes from the kafka-protocol crate
//! (`ResponseError`), so the numbers are never retyped here. Each layer above maps its own
//! errors onto them next to their definition (`storage::Error::error_code`,
//! `storage::AppendError::error_code`): the codecs know no files.
pub use kafka_protocol::error::ResponseError as ErrorCode;

/// The wire code of an optional error (0 = none).
pub fn code(e: Option<ErrorCode>) -> i16 {
    e.map(|e| e.code()).unwrap_or(0)
}

/// The error for a wire code carried inside Strata (controller answers); an unknown code
/// becomes UNKNOWN_SERVER_ERROR.
pub fn error_from_code(code: i16) -> ErrorCode {
    ErrorCode::try_from_code(code).unwrap_or(ErrorCode::UnknownServerError)
}
