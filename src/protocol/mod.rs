//! The Kafka wire protocol: pure functions over bytes, no I/O and no executor types.
//! Message codecs come from the kafka-protocol crate; what is Strata's own lives here: the
//! record batch format, the table of versions we implement, framing and error mapping.
pub mod api_versions;
pub mod error;
pub mod frame;
pub mod fuzz;
pub mod record_batch;
