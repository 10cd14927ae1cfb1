//! Strata: a Kafka-compatible streaming log broker, thread-per-core on io_uring.
//!
//! Module map, lowest layer first (see `../shared/DESIGN.md`, `../shared/STYLE.md`). Imports
//! point down this list; `tests/layers.rs` holds the exact table of allowed arrows and fails
//! on an upward one or a cycle.
//! - [`limits`], [`clock`], [`alloc`]: every named bound; time passed in (monotonic for
//!   timeouts, wall for dates); the global allocator.
//! - [`metrics`]: Prometheus metrics, sans-IO: the per-shard registry (plain cells), the
//!   snapshots a scrape gathers, the text exposition format.
//! - [`protocol`]: Kafka wire format — framing, record batches, error codes, API versions. Pure.
//! - [`replication`]: ISR, high watermark and leader epochs as sans-IO state machines.
//! - [`group`]: the consumer-group coordinator as a sans-IO state machine, and its records.
//! - [`txn`]: the transaction coordinator as a sans-IO state machine, and the records of
//!   `__transaction_state`.
//! - [`security`]: SASL mechanisms (PLAIN, SCRAM-SHA-256/512) as sans-IO state machines.
//! - [`ingest`]: syslog (RFC 5424/3164, RFC 6587 framing, RELP) and HTTP produce parsers and
//!   the record mapping, sans-IO.
//! - [`storage`]: partition logs on disk — segments, indexes, recovery, retention, producer
//!   state, the per-shard memory budget. File I/O through glommio.
//! - [`security`]: listeners and security protocols, the per-connection `Session` and
//!   principal, sans-IO.
//! - [`config`]: typed configuration, defaults, validation.
//! - [`cluster`]: cluster metadata — the catalog, placement, the controller (sans-IO) and the
//!   Raft metadata log (`cluster::raft`) with its quorum client (`cluster::quorum`).
//! - [`shard`]: executors' per-shard state, the channel mesh, partition operations, replica
//!   roles and fetchers, the group coordinator's I/O.
//! - [`server`]: listener, connections, request dispatch and one handler file per Kafka API.
//! - [`broker`]: starts and stops a broker: quorum, shards, listeners.
//! - [`client`]: a small Kafka client used by the command line and `strata bench`.
//! - [`cli`]: the client-side subcommands (`topic`, `produce`, `consume`, `group`, ...).
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
pub mod ingest;
pub mod limits;
pub mod metrics;
pub mod protocol;
pub mod replication;
pub mod security;
pub mod server;
pub mod shard;
pub mod storage;
pub mod txn;

#[global_allocator]
static GLOBAL: alloc::StrataAlloc = alloc::StrataAlloc;
