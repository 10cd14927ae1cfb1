//! The Kafka wire protocol: pure functions over bytes, no I/O and no executor types.
pub mod record_batch;
