//! Every bound in the broker, with what it protects. Settings that an operator may change
//! live in `config`; these are the fixed ones.

/// Messages buffered per direction between two shards. Back-pressure: a shard that cannot
/// keep up stalls its peers' senders instead of growing a queue without limit.
pub const MESH_CHANNEL_CAPACITY: usize = 1024;

/// Client-driven ops (produce, consumer fetch and long poll, offsets, groups) one shard may
/// have in flight on one other shard. Each in-flight op is a task on the target and an entry
/// in the sender's pending-reply map; past the bound the sender waits (and so the connection
/// that asked), instead of the target spawning tasks without limit. Sized well above what
/// busy connections pipeline, because long polls and rebalances legitimately sit in flight.
pub const MESH_CLIENT_OPS_IN_FLIGHT_MAX: usize = 4096;

/// Replication ops (a follower's Fetch and its long poll) one shard may have in flight on
/// one other shard. A class of its own so that a follower's fetch — which advances the high
/// watermark that acks=all produces wait for — never waits behind those produces.
pub const MESH_REPLICA_OPS_IN_FLIGHT_MAX: usize = 1024;

/// Longest topic name Kafka accepts (249 characters, so that `<topic>-<partition>` fits a
/// file name).
pub const TOPIC_NAME_LEN_MAX: usize = 249;

/// Partitions one topic may have; bounds the per-topic vectors and the placement loop.
pub const TOPIC_PARTITIONS_MAX: i32 = 100_000;

/// Longest long poll a Fetch may ask for; a larger max.wait.ms is clamped.
pub const FETCH_WAIT_MS_MAX: i32 = 30_000;

/// Longest a Produce with acks=all waits for durability before answering REQUEST_TIMED_OUT.
pub const PRODUCE_TIMEOUT_MS_MAX: i32 = 300_000;

/// Largest allocation the request decoder may make in one piece before it is served from
/// lazily-committed address space (see `alloc`): an array count read off the wire must not
/// be able to abort the process by asking for terabytes.
pub const DECODE_ALLOCATION_LAZY_MIN: usize = 256 * 1024 * 1024;

/// Graceful shutdown waits this long for in-flight requests before closing anyway.
pub const SHUTDOWN_DRAIN_MS_MAX: u64 = 10_000;

/// Producer ids handed out per persisted block; a crash skips at most this many ids.
pub const PRODUCER_ID_BLOCK: i64 = 1000;

/// Bytes the records of one batch may inflate to when the broker must read inside it (a
/// ListOffsets timestamp lookup, recompression for a topic's `compression.type`). Checked
/// once the codec has produced its output: it bounds what is kept and worked on, and refuses
/// a batch past it (Kafka's max.message.bytes bounds the compressed size only).
pub const RECORDS_DECOMPRESSED_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Bytes a connection asks of its socket while waiting for the next request's size prefix.
/// Not counted in the shard's request budget: it is a fixed cost per connection, bounded by
/// `max_connections`, and small so that thousands of idle connections stay cheap.
pub const CONNECTION_READ_HEADER_BYTES: usize = 4 * 1024;

/// Smallest and largest read into a request body. A body read asks for what the request
/// still misses, but at most what has already arrived (at least the minimum): the buffer
/// grows as bytes arrive, so a request that claims 100 MiB and sends little holds little.
pub const CONNECTION_READ_CHUNK_MIN: usize = 16 * 1024;
pub const CONNECTION_READ_CHUNK_MAX: usize = 8 * 1024 * 1024;

/// A refused connection is logged at most this often per shard (the rest are counted in the
/// next line), so a flood of connections cannot flood the log.
pub const CONNECTION_REFUSED_LOG_INTERVAL_MS: u64 = 1_000;

const _: () = assert!(CONNECTION_READ_HEADER_BYTES >= 4);
const _: () = assert!(CONNECTION_READ_CHUNK_MIN <= CONNECTION_READ_CHUNK_MAX);
const _: () = assert!(MESH_CHANNEL_CAPACITY >= 16);
const _: () = assert!(MESH_CLIENT_OPS_IN_FLIGHT_MAX >= 64 && MESH_REPLICA_OPS_IN_FLIGHT_MAX >= 16);

/// Largest response a replica fetcher accepts from another broker; a follower's Fetch asks
/// for at most `replica_fetch_response_max_bytes`, so this only guards against a broken peer.
pub const PEER_RESPONSE_BYTES_MAX: usize = 128 * 1024 * 1024;

/// How often freed heap memory is handed back to the kernel (`alloc::release_free_memory`).
pub const MEMORY_TRIM_INTERVAL_MS: u64 = 250;

/// How often each shard looks for a new metadata image to apply (leaders, followers, ISR).
pub const METADATA_POLL_MS: u64 = 50;

/// How often each shard's leaders check follower lag (ISR shrink) and their own log end.
pub const REPLICA_TICK_MS: u64 = 250;

/// Connect and request timeout of a replica fetcher's connection, beyond the Fetch wait.
pub const PEER_REQUEST_TIMEOUT_MS: u64 = 5_000;

/// Pause before a replica fetcher retries after an error (connection refused, timeout).
pub const FETCHER_BACKOFF_MS: u64 = 200;
