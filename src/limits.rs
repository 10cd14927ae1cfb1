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

/// Deleted logs' directories waiting for the removal thread (`partition_dir::remove_later`).
/// A path each; past the bound a directory is left for the next start to remove (it is
/// already renamed `-delete`, so nothing serves it), instead of the queue growing with a
/// deletion of many thousands of partitions.
pub const LOG_REMOVALS_QUEUED_MAX: usize = 65_536;

/// Longest topic name Kafka accepts (249 characters, so that `<topic>-<partition>` fits a
/// file name).
pub const TOPIC_NAME_LEN_MAX: usize = 249;

/// Partitions one topic may have; bounds the per-topic vectors and the placement loop.
pub const TOPIC_PARTITIONS_MAX: i32 = 100_000;

/// Partitions one DescribeTopicPartitions answer may list (Kafka's
/// `max.request.partition.size.limit` default); a client asking for more gets a cursor to
/// the next page. Bounds the response a single request can make the broker build.
pub const DESCRIBE_TOPIC_PARTITIONS_LIMIT_MAX: i32 = 2000;

/// Longest long poll a Fetch may ask for; a larger max.wait.ms is clamped.
pub const FETCH_WAIT_MS_MAX: i32 = 30_000;

/// Longest a Produce with acks=all waits for durability before answering REQUEST_TIMED_OUT.
pub const PRODUCE_TIMEOUT_MS_MAX: i32 = 300_000;

/// Produce appends that may wait in one partition's line behind an append that waits for
/// staging room (`shard::partition_service::append_order`). Past it an append is refused
/// with the retriable REQUEST_TIMED_OUT instead of queueing without limit; each waiter holds
/// its request's bytes, already charged to the shard's memory budget.
pub const PRODUCE_APPENDS_WAITING_MAX: usize = 1024;

/// Largest allocation the request decoder may make in one piece before it is served from
/// lazily-committed address space (see `alloc`): an array count read off the wire must not
/// be able to abort the process by asking for terabytes.
pub const DECODE_ALLOCATION_LAZY_MIN: usize = 256 * 1024 * 1024;

/// Graceful shutdown waits this long for in-flight requests before closing anyway.
pub const SHUTDOWN_DRAIN_MS_MAX: u64 = 10_000;

/// Past its own drain deadline, how much longer a shard waits for the other shards to drain
/// (it serves their mesh ops meanwhile), and how often it looks.
pub const SHUTDOWN_PEERS_WAIT_MS: u64 = 1_000;
pub const SHUTDOWN_PEERS_POLL_MS: u64 = 10;

/// Logs a shard closes at once during shutdown (each flushes, fsyncs and writes its state
/// files): enough to overlap their I/O, bounded so thousands of partitions do not all queue
/// their writes at the same moment.
pub const SHUTDOWN_CLOSES_IN_FLIGHT_MAX: usize = 64;

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

/// How often, at most, a shard looks at its TLS files' modification times (on an accept) to
/// reload changed certificates.
pub const TLS_RELOAD_CHECK_INTERVAL_MS: u64 = 1_000;

/// A TLS handshake not done in this long closes the connection: a client that connects and
/// sends nothing (or a cleartext client waiting for the server to speak) holds no socket for
/// longer.
pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// A failed SASL authentication is logged at most this often per shard (the rest are counted
/// in the next line), so password guessing cannot flood the log.
pub const SASL_FAILURE_LOG_INTERVAL_MS: u64 = 1_000;

/// The largest SASL token the server parses. A PLAIN or SCRAM message is a few hundred bytes;
/// this bounds what an unauthenticated client can make the broker parse.
pub const SASL_TOKEN_BYTES_MAX: usize = 64 * 1024;

/// The largest JWKS file read for OAUTHBEARER, and the most keys kept from it. Real sets hold
/// a handful of keys (a few KiB); the bounds keep a wrong path (a log file, say) from being
/// read whole into every shard.
pub const OAUTHBEARER_JWKS_BYTES_MAX: u64 = 1024 * 1024;
pub const OAUTHBEARER_JWKS_KEYS_MAX: usize = 256;

/// How often, at most, a shard looks at the JWKS file's modification time (on an OAUTHBEARER
/// authentication) to reload rotated keys.
pub const OAUTHBEARER_JWKS_RELOAD_CHECK_INTERVAL_MS: u64 = 1_000;
/// Quota sensors (one shared rate per quota and client, `security::quota::RateRegistry`)
/// kept before idle ones are pruned: a rate no connection holds and with no live sample
/// measures the same as a new one, so pruning forgets nothing; live ones are bounded by the
/// connections (three quota keys each).
pub const QUOTA_SENSORS_PRUNE_AT: usize = 4_096;

/// Kafka's `quota.window.num` bounds: the samples a quota rate keeps.
pub const QUOTA_WINDOW_NUM_MAX: usize = 1_000;

const _: () = assert!(CONNECTION_READ_HEADER_BYTES >= 4);
const _: () = assert!(CONNECTION_READ_CHUNK_MIN <= CONNECTION_READ_CHUNK_MAX);
const _: () = assert!(MESH_CHANNEL_CAPACITY >= 16);
const _: () = assert!(MESH_CLIENT_OPS_IN_FLIGHT_MAX >= 64 && MESH_REPLICA_OPS_IN_FLIGHT_MAX >= 16);

/// Largest response a replica fetcher accepts from another broker; a follower's Fetch asks
/// for at most `replica_fetch_response_max_bytes`, so this only guards against a broken peer.
pub const PEER_RESPONSE_BYTES_MAX: usize = 128 * 1024 * 1024;

/// How often freed heap memory is handed back to the kernel (`alloc::release_free_memory`)
/// when looking at the heap is cheap; see `alloc::next_look_in`.
pub const MEMORY_TRIM_INTERVAL_MS: u64 = 250;
/// The trimmer sleeps at least this many times as long as its last look took, so looking
/// costs at most 1/this of a core (`alloc::next_look_in`).
pub const MEMORY_TRIM_LOOK_COST_RATIO: u32 = 100;

/// Memory an open partition keeps whatever its traffic, charged to its shard's memory
/// budget (`MemoryClass::Partitions`) so the budget holds with any partition count. Measured
/// with heaptrack over 5,000 written partitions (perf/rss_partitions.sh): ~7.5 KiB of
/// structures (the segment map's node 3.2 KiB, the flusher task 1.6 KiB, replica state,
/// indexes, tail-cache and staging queues, paths) plus the partial last block kept between
/// writes (< 4 KiB).
pub const PARTITION_RESIDENT_BYTES: usize = 12 * 1024;

/// How often each shard looks for a new metadata image to apply (leaders, followers, ISR).
pub const METADATA_POLL_MS: u64 = 50;

/// How often each shard's leaders check follower lag (ISR shrink) and their own log end.
pub const REPLICA_TICK_MS: u64 = 250;

/// Default of `replica_produce_lag_max_bytes`: client bytes an acks=0/1 produce may leave
/// above a partition's high watermark (not yet fsynced on every in-sync follower) before its
/// answer waits for the followers. Large enough that followers which keep up never hit it:
/// a pipelined follower's durable end trails by about a Fetch in flight and one being
/// fsynced, each at most `replica_fetch_max_bytes` (1 MiB) per partition, so 8 MiB is a few
/// times that. Small enough that what a leader failure can lose of acknowledged acks=1
/// writes, and the backlog the followers still have to copy when the load stops, stays a
/// fraction of a second of a partition's write rate instead of growing with the run.
pub const REPLICA_PRODUCE_LAG_MAX_BYTES_DEFAULT: u64 = 8 * 1024 * 1024;

/// Marks (log end, client bytes) one led partition keeps to count the bytes above its high
/// watermark (`replication::produce_lag`): the bound on that bookkeeping's memory (16 bytes
/// a mark). With a mark every `2 * replica_produce_lag_max_bytes / 64` bytes, the count is
/// exact to 1/32 of the bound.
pub const PRODUCE_LAG_MARKS_MAX: usize = 64;

/// Connect and request timeout of a replica fetcher's connection, beyond the Fetch wait.
pub const PEER_REQUEST_TIMEOUT_MS: u64 = 5_000;

/// Pause before a replica fetcher retries after an error (connection refused, timeout).
pub const FETCHER_BACKOFF_MS: u64 = 200;

/// A replica fetcher whose connection fails for its security settings (a certificate not
/// trusted, credentials refused) retries every `FETCHER_BACKOFF_MS` but says so at warn at
/// most this often, so the log shows the cause without a line every retry.
pub const PEER_SECURITY_WARN_INTERVAL_MS: u64 = 10_000;

/// Longest syslog message or HTTP line `syslog_message_max_bytes` may allow: a record must
/// fit a batch under the default `message.max.bytes` with room for its headers.
pub const INGEST_MESSAGE_BYTES_MAX: usize = 512 * 1024;

/// Longest `ingest_linger_ms`: a record waits at most this for its batch to fill.
pub const INGEST_LINGER_MS_MAX: u64 = 10_000;

/// Bytes of records (estimated) in one ingestion batch before it is appended without
/// waiting for the linger. Under the default `message.max.bytes` (1 MiB) with room for the
/// batch framing, so a full batch is never refused as too large.
pub const INGEST_BATCH_BYTES_MAX: usize = 768 * 1024;
const _: () = assert!(INGEST_MESSAGE_BYTES_MAX < INGEST_BATCH_BYTES_MAX);

/// Records in one ingestion batch (bounds the batch's record vector and the encode loop).
pub const INGEST_BATCH_RECORDS_MAX: usize = 20_000;

/// Batches one shard's ingestion may have appended and not yet durable (across all its
/// partitions). Past it, new batches wait, and so do the connections that fill them: the
/// senders are slowed instead of the broker queueing appends without limit.
pub const INGEST_BATCHES_IN_FLIGHT_MAX: usize = 256;

/// Full batches waiting to be appended on one shard (the queue between the connections
/// that fill batches and the task that appends them). A connection that fills one more
/// waits.
pub const INGEST_READY_BATCHES_MAX: usize = 64;

/// RELP messages one connection may have unanswered (librelp's window is 128 by default).
/// Past it the connection is not read: the sender waits for answers.
pub const RELP_WINDOW_MAX: usize = 1024;

/// Longest HTTP request head (request line and headers).
pub const HTTP_HEAD_BYTES_MAX: usize = 16 * 1024;

/// Records in one HTTP produce request.
pub const HTTP_RECORDS_PER_REQUEST_MAX: usize = 100_000;

/// Bytes read from a syslog/RELP/HTTP socket at a time (taken from the shard's memory
/// budget before the read).
pub const INGEST_READ_CHUNK_BYTES: usize = 64 * 1024;

/// Largest UDP datagram read (the largest a UDP/IPv4 payload can be).
pub const SYSLOG_DATAGRAM_BYTES_MAX: usize = 65_507;

/// How often dropped UDP datagrams and unparsed lines are logged, at most.
pub const INGEST_DROP_LOG_INTERVAL_MS: u64 = 10_000;

/// Attempts to append an ingestion batch whose append failed with a retriable error (not
/// leader yet, timed out, partition still opening) before its records are reported failed.
pub const INGEST_APPEND_ATTEMPTS_MAX: u32 = 5;

/// How long opening a partition waits for another shard to let go of the same directory:
/// a topic deleted and created again under the same name may be placed on another shard
/// than its old replica, whose log must be deleted before the new one is created there.
/// Deleting a log takes milliseconds; past this the open fails (and the replica goes
/// offline, logged) rather than waiting forever.
pub const PARTITION_DIR_RELEASE_WAIT_MS: u64 = 30_000;

/// Kafka API keys the request counters and latency histograms have a slot for (Kafka's
/// keys are below 100). A request with a larger key is counted in no slot: it is refused
/// anyway, and the arrays stay fixed-size so recording is a plain index, never a map.
pub const METRICS_API_KEYS_MAX: usize = 128;

/// Kafka listeners the metrics keep per-listener counts for (connections, failed
/// authentications). A config names a handful; a listener past this is counted only in the
/// broker-wide totals.
pub const METRICS_LISTENERS_MAX: usize = 16;

/// Consumer-group lag series (`group`, `topic`, `partition`) one scrape renders. Lag is
/// computed at scrape time from every committed offset this broker coordinates; past this
/// many the rest are left out of that scrape (and counted in
/// `strata_consumergroup_lag_series_omitted`), so a broker coordinating many groups over
/// many partitions cannot make a scrape unbounded.
pub const METRICS_GROUP_LAG_SERIES_MAX: usize = 10_000;

/// How long a scrape waits, in all, for the partition leaders' high watermarks (one
/// ListOffsets per leader broker, for consumer-group lag of partitions with no replica here)
/// before it renders with the answers it has: connecting, TLS, SASL and the call of every
/// leader fit in it, so a broker down or hung cannot stall the scrape past Prometheus'
/// timeout (10 s by default).
pub const METRICS_REMOTE_HW_TIMEOUT_MS: u64 = 1_000;

/// Leader brokers one scrape asks for high watermarks at once; the others wait their turn
/// (within the same `METRICS_REMOTE_HW_TIMEOUT_MS`), so a large cluster costs a scrape a
/// bounded number of sockets and handshakes at a time.
pub const METRICS_REMOTE_HW_LEADERS_IN_FLIGHT_MAX: usize = 8;

/// How long the leaders' high watermarks one scrape asked for are reused by the next
/// scrapes on the same shard: scrapes in quick succession (several Prometheus servers, a
/// person with curl) cost the other brokers one round of ListOffsets, not one each.
pub const METRICS_REMOTE_HW_CACHE_MS: u64 = 5_000;
const _: () = assert!(METRICS_REMOTE_HW_LEADERS_IN_FLIGHT_MAX >= 1);

/// How often each shard's task-queue probe wakes (`strata_shard_task_queue_seconds`): a
/// timer every this many ms, whose lateness is how long a ready task waited for the shard.
pub const METRICS_QUEUE_PROBE_INTERVAL_MS: u64 = 100;

/// Connections one shard's metrics listener serves at once; more are accepted and closed.
/// Scrapers hold one or two; the bound keeps a misbehaving client from pinning sockets.
pub const METRICS_CONNECTIONS_PER_SHARD_MAX: usize = 16;

/// Longest metrics request head (a scrape is one short GET); longer is answered 431.
pub const METRICS_HEAD_BYTES_MAX: usize = 8 * 1024;

/// Transaction verifications (KIP-890) pending on one partition, one per producer
/// (`storage::txn_verification`). Past it a transactional produce that needs verifying is
/// refused with the retriable NOT_ENOUGH_REPLICAS, after entries older than
/// `TXN_VERIFICATION_AGE_MS_MAX` are dropped.
pub const TXN_VERIFICATIONS_MAX: usize = 4096;

/// Age past which a partition's pending verification may be dropped to make room: far longer
/// than a verification takes (`TXN_VERIFY_REQUEST_TIMEOUT_MS`). Dropping one only refuses
/// the append that carried it.
pub const TXN_VERIFICATION_AGE_MS_MAX: i64 = 60_000;

/// Produce parts one shard may have waiting for the transaction coordinator's verification
/// (queued or in flight, all coordinators). Past it a part is refused at once with the
/// retriable NOT_ENOUGH_REPLICAS; each waiter holds its request's records.
pub const TXN_VERIFY_WAITERS_MAX: usize = 10_000;

/// How long one verification request (AddPartitionsToTxn verify-only, to the coordinator's
/// broker) may take, connecting included; past it its waiters hear NETWORK_EXCEPTION
/// (NOT_ENOUGH_REPLICAS to the producer, which retries). Kafka uses request.timeout.ms.
pub const TXN_VERIFY_REQUEST_TIMEOUT_MS: u64 = 10_000;

/// ACL bindings the cluster stores. Every broker holds all of them in memory (and in every
/// metadata snapshot); past it CreateAcls is refused (POLICY_VIOLATION) rather than letting
/// one client grow every broker's image without bound. Kafka has no such limit; real
/// deployments hold thousands.
pub const ACL_BINDINGS_MAX: usize = 100_000;

// ---- the log cleaner yields the disk to the foreground (`shard::cleaner`) ----

/// Longest the cleaner holds back one segment read while the shard's flushers have a write
/// or fdatasync in flight. A read issued beside a produce's fsync competes with it on the
/// disk; waiting for the fsync (0.3-2 ms on the disks measured) costs the cleaner little,
/// and the bound keeps it reading at least one 256 KiB chunk per millisecond-and-a-read
/// under a produce load that always has an fsync in flight.
pub const CLEANER_READ_FOREGROUND_WAIT_US: u64 = 1_000;

/// How often a cleaner held back by foreground I/O looks again.
pub const CLEANER_FOREGROUND_POLL_US: u64 = 200;

/// Bytes of a replaced segment's file the cleaner frees at a time (it shrinks the unlinked
/// file with ftruncate before closing it). Why: closing a pass's replaced segments at once
/// freed 1.6 GB in one go, which ext4 mounted with `discard` trims in its next journal
/// commit; every produce fdatasync waited ~0.2-0.3 s behind that trim (perf/RESULTS.md, log
/// cleaner). 4 MiB is about half a millisecond of trim on the disk measured (~9 GB/s).
pub const CLEANER_RELEASE_STEP_BYTES: u64 = 4 << 20;

/// At most one release step per this interval: 400 MB/s of freed space at most, so a
/// 1.6 GB pass frees its old segments in about 4 s, each trim a small share of the commits.
pub const CLEANER_RELEASE_STEP_INTERVAL_MS: u64 = 10;

/// Longest a release step waits for the shard's foreground writes and fsyncs to drain
/// before it goes anyway, so space is freed under any load: ~70 MB/s at least. Kafka itself
/// frees a replaced segment only `file.delete.delay.ms` (60 s) after the swap.
pub const CLEANER_RELEASE_FOREGROUND_WAIT_MS: u64 = 50;

/// How often the releaser looks again at a replaced segment file that a reader (or the
/// pass itself) still holds: it is shrunk only once the cleaner holds the last handle.
pub const CLEANER_RELEASE_HELD_RECHECK_MS: u64 = 10;

// ---- where the shards run (`shard::cpus`, the `cpuset` setting) ----

/// Largest CPU number a `cpuset` may name, and the last CPU the process's affinity mask is
/// read up to: glibc's `cpu_set_t` (what `sched_getaffinity` fills and glommio pins with)
/// holds CPUs 0-1023. Also bounds the CPU-list parser, so a range like `0-4000000000` is
/// refused instead of becoming a four-billion-entry list.
pub const CPU_NUMBER_MAX: usize = 1023;

/// Most shards one broker runs (`shards`): as many as the CPUs a shard can be pinned to
/// (`CPU_NUMBER_MAX` + 1). Each shard is a thread with its own io_uring rings and share of
/// the memory budget, and the mesh holds a channel for every pair of shards, so a mistyped
/// `--shards 100000` is refused with the setting named instead of failing at start with
/// whatever resource runs out first.
pub const SHARDS_MAX: usize = CPU_NUMBER_MAX + 1;
