//! Kafka error codes. The code table itself comes from the kafka-protocol crate
//! (`ResponseError`), so the numbers are never retyped here; this module maps Strata's
//! internal errors onto them in one place.
pub use kafka_protocol::error::ResponseError as ErrorCode;

use crate::storage::{AppendError, Error as StorageError};

/// The wire code of an optional error (0 = none).
pub fn code(e: Option<ErrorCode>) -> i16 {
    e.map(|e| e.code()).unwrap_or(0)
}

/// Maps a storage error to the Kafka error a client should see.
pub fn from_storage(e: &StorageError) -> ErrorCode {
    match e {
        StorageError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
        _ => ErrorCode::KafkaStorageError,
    }
}

/// Maps an append rejection to the Kafka error a producer should see.
pub fn from_append(e: &AppendError) -> ErrorCode {
    match e {
        AppendError::MessageTooLarge { .. } => ErrorCode::MessageTooLarge,
        AppendError::CorruptMessage(_) => ErrorCode::CorruptMessage,
        AppendError::UnknownProducerId { .. } => ErrorCode::UnknownProducerId,
        // The disk is behind: a retriable error makes the producer back off and resend.
        AppendError::Backpressure { .. } => ErrorCode::RequestTimedOut,
        AppendError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequenceNumber,
        AppendError::InvalidProducerEpoch { .. } => ErrorCode::InvalidProducerEpoch,
        AppendError::Storage(s) => from_storage(s),
    }
}

/// The error for a wire code carried inside Strata (controller answers); an unknown code
/// becomes UNKNOWN_SERVER_ERROR.
pub fn error_from_code(code: i16) -> ErrorCode {
    ErrorCode::try_from_code(code).unwrap_or(ErrorCode::UnknownServerError)
}
