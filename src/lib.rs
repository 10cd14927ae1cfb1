//! Strata: a Kafka-compatible streaming log broker, thread-per-core on io_uring.
//!
//! Module map (see `../shared/STYLE.md`):
//! - [`protocol`]: Kafka wire format — framing, record batches, error codes, API versions. Pure.
//! - [`storage`]: partition logs on disk — segments, indexes, recovery, retention, producer state.
//! - [`cluster`]: the catalog of topics and the placement of partitions on shards.
//! - [`shard`]: executors pinned to cores, the channel mesh between them, per-shard operations.
//! - [`server`]: listener, connections, request dispatch and one handler file per Kafka API.
//! - [`client`]: a small Kafka client used by the command line and `strata bench`.
//! - [`cli`]: the client-side subcommands (`topic`, `produce`, `consume`).
//! - [`bench`]: `strata bench produce|consume|e2e`, the load harness.
#![deny(clippy::unwrap_used)]

pub mod alloc;
pub mod bench;
pub mod broker;
pub mod cli;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod group;
pub mod limits;
pub mod protocol;
pub mod replication;
pub mod server;
pub mod shard;
pub mod storage;

#[global_allocator]
static GLOBAL: alloc::StrataAlloc = alloc::StrataAlloc;
