//! Strata: a Kafka-compatible streaming log broker, thread-per-core on io_uring.
//!
//! Module map (see `../shared/STYLE.md`):
//! - [`protocol`]: Kafka wire format — record batches, error codes, API version table. Pure.
//! - [`storage`]: partition logs on disk — segments, indexes, recovery, retention, producer state.
//! - [`shard`]: executors pinned to cores and the channel mesh between them.
//! - [`server`]: listener, connections, request dispatch and one handler file per Kafka API.
//! - [`client`]: a small Kafka client used by the command line and `strata bench`.
//! - [`cli`]: the client-side subcommands (`topic`, `produce`, `consume`).
#![deny(clippy::unwrap_used)]

pub mod cli;
pub mod client;
pub mod config;
pub mod limits;
pub mod protocol;
pub mod server;
pub mod shard;
pub mod storage;
