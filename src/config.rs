//! Typed broker configuration: built-in defaults < `config/strata.toml`-style file <
//! `STRATA_*` environment variables < command-line flags.
//!
//! Every setting is documented, with its default, in `config/strata.toml`. Keys are flat and
//! snake_case; topic-level defaults use Kafka's broker names with `.` replaced by `_`
//! (`log_segment_bytes` is Kafka's `log.segment.bytes`). Environment variables are the key in
//! upper case with a `STRATA_` prefix (`STRATA_LOG_RETENTION_MS=60000`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::security::tls_reload::{Look, ReloadingTls};
use crate::security::{ListenerSettings, Listeners};
use crate::storage::{CleanupPolicy, CompressionType, FlushPolicy, LogConfig, TimestampType};

pub mod cpu_list;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("environment variable {name}={value} is not valid: {message}")]
    Env {
        name: String,
        value: String,
        message: String,
    },
    #[error("invalid setting {key}: {message}")]
    Invalid { key: String, message: String },
}

/// The broker's settings. Field names are the keys of the config file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address every shard listens on (SO_REUSEPORT), one PLAINTEXT listener; unused when
    /// `listeners` is set.
    pub listen: String,
    /// Address given to clients in Metadata; empty means the listen address. Only with
    /// `listen`: `listeners` has `advertised_listeners`.
    pub advertised_listener: String,
    /// Kafka's listeners: `NAME://HOST:PORT,...`, NAME a security protocol or a name in
    /// `listener_security_protocol_map`. Replaces `listen` when set.
    pub listeners: String,
    /// Kafka's advertised.listeners; empty means `listeners`.
    pub advertised_listeners: String,
    /// Kafka's listener.security.protocol.map: `NAME:PROTOCOL,...`; a listener named after a
    /// protocol needs no entry.
    pub listener_security_protocol_map: String,
    /// Kafka's inter.broker.listener.name: the listener brokers reach each other on; empty
    /// means PLAINTEXT if there is one, else the first listener.
    pub inter_broker_listener_name: String,
    /// Kafka's ssl.keystore.location, as PEM: the server certificate then its chain. Needed
    /// by SSL and SASL_SSL listeners; re-read when it changes.
    pub ssl_certificate_location: String,
    /// The server certificate's private key, PEM (PKCS#8).
    pub ssl_key_location: String,
    /// Kafka's ssl.client.auth: none, requested or required.
    pub ssl_client_auth: String,
    /// Kafka's ssl.truststore.location, as PEM: the CAs client certificates are checked
    /// against (needed when ssl_client_auth is requested or required).
    pub ssl_truststore_location: String,
    /// Kafka's ssl.principal.mapping.rules: `DEFAULT` (the certificate's subject, e.g.
    /// `CN=client,O=test`) and `RULE:pattern/replacement/[LU]`, the first that applies wins.
    pub ssl_principal_mapping_rules: String,
    /// Where partitions and metadata live.
    pub data_dir: PathBuf,
    /// Number of shards (one executor each); 0 means one per CPU of `cpuset` (by default the
    /// CPUs the process may run on), capped by the cgroup CPU quota. At most `SHARDS_MAX`.
    pub shards: usize,
    /// The CPUs the shards run on, as a Linux CPU list (`0-3,6`, as `taskset -c` and
    /// Redpanda's `--cpuset` write it); empty means every CPU of the process's affinity mask
    /// (`taskset`, a container's cpuset). Every CPU named must be in that mask: a shard pinned
    /// outside it would not run where the operator confined the process.
    pub cpuset: String,
    /// Pin each shard to one CPU of `cpuset`, round-robin (shard i on its i-th CPU), the
    /// thread-per-core default: a shard keeps its core's caches and never migrates. `false`
    /// leaves the shards to the kernel's scheduler, within `cpuset` if set: for several
    /// brokers sharing a host, or a VM with noisy neighbours, where a pinned shard waits for
    /// its one core while another sits idle. Redpanda calls its switch `overprovisioned`, but
    /// that one also turns off busy polling; Strata's executors never busy-poll, so pinning is
    /// all this switches, and the name says so.
    pub pin_shards: bool,
    /// This broker's node id.
    pub node_id: i32,
    /// Cluster id reported in Metadata and DescribeCluster; generated and persisted if empty.
    pub cluster_id: String,
    /// Kafka's auto.create.topics.enable.
    pub auto_create_topics_enable: bool,
    /// Kafka's num.partitions: partitions of an auto-created topic.
    pub num_partitions: i32,
    /// Kafka's default.replication.factor: replicas of a topic created with -1.
    pub default_replication_factor: i16,
    /// Largest request frame accepted (Kafka's socket.request.max.bytes).
    pub socket_request_max_bytes: usize,
    /// Requests in flight per connection before the broker stops reading from it.
    pub connection_requests_in_flight_max: usize,
    /// Kafka's queued.max.request.bytes, per shard: bytes of requests being read or waiting
    /// for their response to be written, a class of the shard's memory budget capped by this
    /// (and by half the budget). A connection that would go past it is not read until bytes
    /// are freed. At least `socket_request_max_bytes`.
    pub queued_max_request_bytes: usize,
    /// Kafka's connections.max.idle.ms: a connection with no request in progress and nothing
    /// in flight for this long is closed.
    pub connections_max_idle_ms: u64,
    /// Kafka's request.timeout.ms, as the broker applies it to reading: a request whose first
    /// byte arrived this long ago and that is still incomplete closes its connection.
    pub request_timeout_ms: u64,
    /// Kafka's max.connections: client connections the broker serves at once; more are
    /// accepted and closed at once.
    pub max_connections: usize,
    /// Kafka's max.connections.per.ip: the same, per client address.
    pub max_connections_per_ip: usize,
    /// Kafka's sasl.enabled.mechanisms: what SaslHandshake offers on a SASL listener, from
    /// PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, comma-separated.
    pub sasl_enabled_mechanisms: String,
    /// Static PLAIN users, `user:password,...` (Kafka's `user_<name>="<password>"` in the
    /// PlainLoginModule's JAAS section): how the first admin gets in.
    pub sasl_plain_users: String,
    /// Kafka's sasl.mechanism.inter.broker.protocol: the mechanism this broker logs in with
    /// on another broker's inter-broker listener when that listener is SASL_PLAINTEXT or
    /// SASL_SSL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (it must be in
    /// `sasl_enabled_mechanisms`).
    pub sasl_mechanism_inter_broker_protocol: String,
    /// The user this broker logs in as on the inter-broker listener (Kafka puts it in that
    /// listener's JAAS `username`). Put `User:<it>` in `super_users`: replica fetches and
    /// transaction markers need CLUSTER_ACTION. Needed in a cluster whose inter-broker
    /// listener uses SASL.
    pub inter_broker_sasl_username: String,
    /// Its password (a PLAIN user in `sasl_plain_users`, or a SCRAM credential). Never
    /// logged.
    pub inter_broker_sasl_password: String,
    /// Kafka's connection.failed.authentication.delay.ms: a failed authentication is
    /// answered this late, then the connection closed, to slow password guessing.
    pub connection_failed_authentication_delay_ms: u64,
    /// Kafka's authorizer.class.name: empty = no authorization (every request is served, as
    /// before ACLs existed; the ACL APIs answer SECURITY_DISABLED), `acl` = Kafka's ACL
    /// authorizer over the bindings in the metadata log.
    pub authorizer: String,
    /// Kafka's super.users: principals allowed everything, separated by `;`
    /// (`User:admin;User:broker`).
    pub super_users: String,
    /// Kafka's allow.everyone.if.no.acl.found: a resource no ACL names is open to everyone.
    pub allow_everyone_if_no_acl_found: bool,
    /// Kafka's connections.max.reauth.ms (KIP-368): an authenticated session lasts this
    /// long; the client must re-authenticate on the same connection before it ends, or the
    /// connection is closed at its next request. 0 = sessions never expire.
    pub connections_max_reauth_ms: i64,
    /// Kafka's sasl.oauthbearer.jwks.endpoint.url: the JWKS (RFC 7517) whose keys sign the
    /// OAUTHBEARER tokens, as a `file:` URL (`file:///etc/strata/jwks.json`); re-read when it
    /// changes. Needed when OAUTHBEARER is in `sasl_enabled_mechanisms`.
    pub sasl_oauthbearer_jwks_endpoint_url: String,
    /// Kafka's sasl.oauthbearer.expected.issuer: when set, a token's `iss` must equal it.
    pub sasl_oauthbearer_expected_issuer: String,
    /// Kafka's sasl.oauthbearer.expected.audience, comma-separated: when set, a token's `aud`
    /// must hold one of them; when empty, a token with an `aud` is refused (as Kafka).
    pub sasl_oauthbearer_expected_audience: String,
    /// Kafka's sasl.oauthbearer.sub.claim.name: the claim naming the principal.
    pub sasl_oauthbearer_sub_claim_name: String,
    /// Kafka's sasl.oauthbearer.scope.claim.name: the claim holding the token's scopes.
    pub sasl_oauthbearer_scope_claim_name: String,
    /// Kafka's sasl.oauthbearer.clock.skew.seconds: leeway for `exp` and `nbf`.
    pub sasl_oauthbearer_clock_skew_seconds: i64,
    /// Kafka's quota.window.num: the samples a client quota's rate is measured over.
    pub quota_window_num: usize,
    /// Kafka's quota.window.size.seconds: the length of each of those samples.
    pub quota_window_size_seconds: u64,
    /// Kafka's fetch.max.bytes: the most a Fetch response carries, and the most read for one
    /// partition, whatever the request asks (at least one batch is always returned, KIP-74).
    pub fetch_max_bytes: usize,
    /// Kafka's log.segment.bytes.
    pub log_segment_bytes: u64,
    /// Kafka's log.roll.ms.
    pub log_roll_ms: i64,
    /// Kafka's log.retention.ms (-1: forever).
    pub log_retention_ms: i64,
    /// Kafka's log.retention.bytes (-1: unbounded).
    pub log_retention_bytes: i64,
    /// How often retention runs.
    pub log_retention_check_interval_ms: u64,
    /// Kafka's log.index.interval.bytes.
    pub log_index_interval_bytes: u32,
    /// Kafka's log.index.size.max.bytes.
    pub log_index_size_max_bytes: u32,
    /// Kafka's message.max.bytes (a batch's largest size).
    pub message_max_bytes: u32,
    /// Kafka's log.message.timestamp.type: CreateTime or LogAppendTime.
    pub log_message_timestamp_type: String,
    /// Durability before acks=all is answered: "sync" (group-committed fdatasync),
    /// "interval" (every `log_flush_interval_ms`), or "none".
    pub log_flush_policy: String,
    /// Period of the "interval" flush policy.
    pub log_flush_interval_ms: u64,
    /// Extent pre-allocated for each new segment.
    pub log_preallocate_bytes: u64,
    /// Recent batches each partition keeps in memory for fetches at the tail.
    pub log_tail_cache_bytes: usize,
    /// Memory the broker may hold for data (tail caches, staged batches, follower fetch
    /// data, requests being read or queued), split evenly over the shards.
    pub memory_limit_bytes: usize,
    /// Seastar's (and Redpanda's) blocked-reactor-notify-ms: a shard task that runs this long
    /// past its time slice without yielding is logged with its stack. 0 = off (the check
    /// arms a timer every time a task queue runs).
    pub reactor_stall_threshold_ms: u64,
    /// Free space kept on the data directory's filesystem: below it client produce is
    /// refused (KAFKA_STORAGE_ERROR) while metadata, deletions and retention keep working.
    /// At most a tenth of the filesystem is kept (small disks).
    pub storage_min_free_bytes: u64,
    /// Kafka's offsets.topic.num.partitions: partitions of `__consumer_offsets`, created at
    /// start if missing. Changing it later moves groups to other partitions (as in Kafka).
    pub offsets_topic_num_partitions: i32,
    /// Kafka's group.initial.rebalance.delay.ms: how long the first rebalance of an empty
    /// group waits for more members.
    pub group_initial_rebalance_delay_ms: i64,
    /// Kafka's group.min.session.timeout.ms.
    pub group_min_session_timeout_ms: i32,
    /// Kafka's group.max.session.timeout.ms.
    pub group_max_session_timeout_ms: i32,
    /// Kafka's offsets.retention.minutes: committed offsets of a group that has been empty
    /// this long are deleted.
    pub offsets_retention_minutes: i64,
    /// Kafka's offsets.retention.check.interval.ms.
    pub offsets_retention_check_interval_ms: i64,
    /// Kafka's transaction.state.log.num.partitions: partitions of `__transaction_state`,
    /// created on the first FindCoordinator for a transactional id.
    pub transaction_state_log_num_partitions: i32,
    /// Kafka's transaction.state.log.replication.factor (fewer if fewer brokers are live).
    pub transaction_state_log_replication_factor: i16,
    /// Kafka's transaction.state.log.min.isr (capped by the topic's replicas).
    pub transaction_state_log_min_isr: i32,
    /// Kafka's transaction.state.log.segment.bytes.
    pub transaction_state_log_segment_bytes: u64,
    /// Kafka's transaction.max.timeout.ms: a producer asking for a longer
    /// transaction.timeout.ms gets INVALID_TRANSACTION_TIMEOUT.
    pub transaction_max_timeout_ms: i32,
    /// Kafka's transactional.id.expiration.ms: an id idle this long is forgotten.
    pub transactional_id_expiration_ms: i64,
    /// Kafka's transaction.partition.verification.enable (KIP-890): before a transactional
    /// batch opens its producer's transaction on a partition, the leader asks the transaction
    /// coordinator whether the partition is in the transaction, and refuses it if not.
    pub transaction_partition_verification_enable: bool,
    /// Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms: how often the
    /// coordinator looks for transactions past their timeout (and aborts them).
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: i64,
    /// Kafka's transaction.remove.expired.transaction.cleanup.interval.ms: how often the
    /// coordinator removes transactional ids idle past transactional.id.expiration.ms.
    pub transaction_remove_expired_transaction_cleanup_interval_ms: i64,
    /// Kafka's process.roles: "broker,controller" (both, the default), "broker" or
    /// "controller" (a dedicated controller serves no Kafka clients).
    pub process_roles: String,
    /// Address the controller quorum listens on (Raft and broker-to-controller requests);
    /// empty on a single node, which needs no quorum network.
    pub controller_listen: String,
    /// Kafka's controller.quorum.voters: `ID@HOST:PORT,...`; empty means this node alone.
    pub controller_voters: String,
    /// The security protocol of the controller quorum's port (`controller_listen`), Kafka's
    /// `listener.security.protocol.map` entry for the listener of `controller.listener.names`:
    /// PLAINTEXT (no check of who connects), SSL (both sides show a certificate from
    /// `ssl_truststore_location`), SASL_PLAINTEXT or SASL_SSL (the connecting node logs in as
    /// `inter_broker_sasl_username`). Every node of a cluster must use the same.
    pub controller_listener_security_protocol: String,
    /// Kafka's sasl.mechanism.controller.protocol: the mechanism nodes log in with on the
    /// controller quorum's port. PLAIN only: SCRAM credentials live in the metadata log that
    /// this port carries.
    pub sasl_mechanism_controller_protocol: String,
    /// Kafka's broker.rack: replicas of a partition are spread across racks when set.
    pub rack: String,
    /// Kafka's min.insync.replicas: the ISR size an acks=all produce needs.
    pub min_insync_replicas: i32,
    /// Kafka's unclean.leader.election.enable: may a replica outside the ISR lead (and lose
    /// acknowledged records)?
    pub unclean_leader_election_enable: bool,
    /// Kafka's replica.lag.time.max.ms: a follower not caught up for this long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    /// Client bytes an acks=0/1 produce may leave above a partition's high watermark (not
    /// yet fsynced on every in-sync follower) before its answer waits, at most until the
    /// followers are within the bound, leave the ISR, or `replica_lag_time_max_ms` passes
    /// (`replication::produce_lag`). 0 turns it off. Not Kafka's; Redpanda holds acks=1
    /// writes in its Raft replicate path the same way.
    pub replica_produce_lag_max_bytes: u64,
    /// Kafka's replica.fetch.wait.max.ms: how long a follower's Fetch waits for new data.
    pub replica_fetch_wait_max_ms: i32,
    /// Kafka's replica.fetch.max.bytes: bytes per partition in a follower's Fetch.
    pub replica_fetch_max_bytes: i32,
    /// Kafka's replica.fetch.response.max.bytes: bytes per follower Fetch response.
    pub replica_fetch_response_max_bytes: i32,
    /// Kafka's broker.session.timeout.ms: a broker silent this long is fenced and loses
    /// its leaderships.
    pub broker_session_timeout_ms: u64,
    /// Kafka's auto.leader.rebalance.enable: the controller moves leadership back to each
    /// partition's preferred replica (the first assigned) when it is in sync again.
    pub auto_leader_rebalance_enable: bool,
    /// Kafka's leader.imbalance.check.interval.seconds.
    pub leader_imbalance_check_interval_seconds: u64,
    /// Kafka's leader.imbalance.per.broker.percentage: a broker is rebalanced when more than
    /// this share of the partitions it prefers are led by others.
    pub leader_imbalance_per_broker_percentage: u32,
    /// Kafka's broker.heartbeat.interval.ms.
    pub broker_heartbeat_interval_ms: u64,

    /// Syslog listeners, each `tcp://HOST:PORT` (RFC 6587, octet counting or newline),
    /// `udp://HOST:PORT` (one datagram, one message) or `relp://HOST:PORT`; empty = off.
    pub syslog_listeners: Vec<String>,
    /// Topic of syslog messages no route matches.
    pub syslog_topic: String,
    /// Topic of lines that do not parse as syslog; empty = `syslog_topic` (with a
    /// `parse-error` header either way).
    pub syslog_malformed_topic: String,
    /// Routing rules `facility=NAME:TOPIC`, `app=NAME:TOPIC`, `host=NAME[*]:TOPIC`; the first
    /// that matches a message wins.
    pub syslog_routes: Vec<String>,
    /// Longest syslog message kept; the rest of a longer one is dropped and the record says
    /// `truncated`.
    pub syslog_message_max_bytes: usize,
    /// Connections one syslog listener (TCP or RELP) holds at once, all shards together;
    /// more are accepted and closed at once (and counted, `connections_refused`). Silent
    /// ones are closed after `connections_max_idle_ms`, a partial frame after
    /// `request_timeout_ms`.
    pub syslog_connections_max: usize,
    /// HTTP produce listener (`POST /topics/{topic}`), `HOST:PORT`; empty = off.
    pub http_listen: String,
    /// Prometheus metrics listener (`GET /metrics`, text format 0.0.4, and
    /// `GET /v1/status/ready`), `HOST:PORT`; empty = off.
    pub metrics_listen: String,
    /// How long a record received by syslog or HTTP waits for more to fill its partition's
    /// batch before the batch is appended.
    pub ingest_linger_ms: u64,
    /// Kafka's log.cleaner.enable: run a log cleaner on every shard for compacted topics.
    pub log_cleaner_enable: bool,
    /// Kafka's log.cleaner.dedupe.buffer.size: memory for the cleaners' key -> offset maps,
    /// for the whole broker, split evenly over the shards. A log with more distinct keys in
    /// its dirty section than a shard's map holds is cleaned in several passes.
    pub log_cleaner_dedupe_buffer_size: u64,
    /// Kafka's log.cleaner.io.max.bytes.per.second: bytes a shard's cleaner reads plus
    /// writes per second, at most; 0 is unlimited (Kafka's default, Double.MaxValue).
    pub log_cleaner_io_max_bytes_per_second: u64,
    /// Kafka's log.cleaner.backoff.ms: how long a cleaner sleeps when no log needs cleaning.
    pub log_cleaner_backoff_ms: u64,
    /// Kafka's log.cleaner.min.cleanable.ratio (topic: min.cleanable.dirty.ratio).
    pub log_cleaner_min_cleanable_ratio: f64,
    /// Kafka's log.cleaner.delete.retention.ms (topic: delete.retention.ms).
    pub log_cleaner_delete_retention_ms: i64,
    /// Kafka's log.cleaner.min.compaction.lag.ms (topic: min.compaction.lag.ms).
    pub log_cleaner_min_compaction_lag_ms: i64,
    /// Kafka's log.cleaner.max.compaction.lag.ms (topic: max.compaction.lag.ms).
    pub log_cleaner_max_compaction_lag_ms: i64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9092".into(),
            advertised_listener: String::new(),
            listeners: String::new(),
            advertised_listeners: String::new(),
            listener_security_protocol_map: String::new(),
            inter_broker_listener_name: String::new(),
            ssl_certificate_location: String::new(),
            ssl_key_location: String::new(),
            ssl_client_auth: "none".into(),
            ssl_truststore_location: String::new(),
            ssl_principal_mapping_rules: "DEFAULT".into(),
            data_dir: PathBuf::from("./data"),
            shards: 0,
            cpuset: String::new(),
            pin_shards: true,
            node_id: 0,
            cluster_id: String::new(),
            auto_create_topics_enable: true,
            num_partitions: 1,
            default_replication_factor: 1,
            socket_request_max_bytes: 104_857_600,
            connection_requests_in_flight_max: 64,
            queued_max_request_bytes: 128 * 1024 * 1024,
            connections_max_idle_ms: 600_000,
            request_timeout_ms: 30_000,
            max_connections: 50_000,
            max_connections_per_ip: 10_000,
            sasl_enabled_mechanisms: "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".into(),
            sasl_plain_users: String::new(),
            sasl_mechanism_inter_broker_protocol: "PLAIN".into(),
            inter_broker_sasl_username: String::new(),
            inter_broker_sasl_password: String::new(),
            authorizer: String::new(),
            super_users: String::new(),
            allow_everyone_if_no_acl_found: false,
            connection_failed_authentication_delay_ms: 100,
            connections_max_reauth_ms: 0,
            sasl_oauthbearer_jwks_endpoint_url: String::new(),
            sasl_oauthbearer_expected_issuer: String::new(),
            sasl_oauthbearer_expected_audience: String::new(),
            sasl_oauthbearer_sub_claim_name: "sub".into(),
            sasl_oauthbearer_scope_claim_name: "scope".into(),
            sasl_oauthbearer_clock_skew_seconds: 30,
            quota_window_num: 11,
            quota_window_size_seconds: 1,
            fetch_max_bytes: 57_671_680,
            log_segment_bytes: 1_073_741_824,
            log_roll_ms: 604_800_000,
            log_retention_ms: 604_800_000,
            log_retention_bytes: -1,
            log_retention_check_interval_ms: 300_000,
            log_index_interval_bytes: 4096,
            log_index_size_max_bytes: 10_485_760,
            message_max_bytes: 1_048_588,
            log_message_timestamp_type: "CreateTime".into(),
            log_flush_policy: "sync".into(),
            log_flush_interval_ms: 1000,
            log_preallocate_bytes: 64 * 1024 * 1024,
            log_tail_cache_bytes: 32 * 1024 * 1024,
            memory_limit_bytes: 512 * 1024 * 1024,
            reactor_stall_threshold_ms: 0,
            storage_min_free_bytes: 1024 * 1024 * 1024,
            offsets_topic_num_partitions: 50,
            group_initial_rebalance_delay_ms: 3000,
            group_min_session_timeout_ms: 6000,
            group_max_session_timeout_ms: 1_800_000,
            offsets_retention_minutes: 10080,
            offsets_retention_check_interval_ms: 600_000,
            transaction_state_log_num_partitions: 50,
            transaction_state_log_replication_factor: 3,
            transaction_state_log_min_isr: 2,
            transaction_state_log_segment_bytes: 1024 * 1024,
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            transaction_partition_verification_enable: true,
            transaction_abort_timed_out_transaction_cleanup_interval_ms: 10_000,
            transaction_remove_expired_transaction_cleanup_interval_ms: 3_600_000,
            process_roles: "broker,controller".into(),
            controller_listen: String::new(),
            controller_voters: String::new(),
            controller_listener_security_protocol: "PLAINTEXT".into(),
            sasl_mechanism_controller_protocol: "PLAIN".into(),
            rack: String::new(),
            min_insync_replicas: 1,
            unclean_leader_election_enable: false,
            replica_lag_time_max_ms: 30_000,
            replica_produce_lag_max_bytes: crate::limits::REPLICA_PRODUCE_LAG_MAX_BYTES_DEFAULT,
            replica_fetch_wait_max_ms: 500,
            replica_fetch_max_bytes: 1_048_576,
            replica_fetch_response_max_bytes: 10_485_760,
            broker_session_timeout_ms: 9_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_seconds: 300,
            leader_imbalance_per_broker_percentage: 10,
            broker_heartbeat_interval_ms: 2_000,
            syslog_listeners: Vec::new(),
            syslog_topic: "syslog".into(),
            syslog_malformed_topic: String::new(),
            syslog_routes: Vec::new(),
            syslog_message_max_bytes: 65_536,
            syslog_connections_max: 20_000,
            http_listen: String::new(),
            metrics_listen: String::new(),
            ingest_linger_ms: 5,
            log_cleaner_enable: true,
            log_cleaner_dedupe_buffer_size: 128 * 1024 * 1024,
            log_cleaner_io_max_bytes_per_second: 0,
            log_cleaner_backoff_ms: 15_000,
            log_cleaner_min_cleanable_ratio: 0.5,
            log_cleaner_delete_retention_ms: 86_400_000,
            log_cleaner_min_compaction_lag_ms: 0,
            log_cleaner_max_compaction_lag_ms: i64::MAX,
        }
    }
}

/// How a syslog listener receives messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyslogTransport {
    Tcp,
    Udp,
    Relp,
}

/// The ingestion settings, parsed.
#[derive(Debug, Clone)]
pub struct IngestSettings {
    pub syslog_listeners: Vec<(SyslogTransport, SocketAddr)>,
    pub http_listen: Option<SocketAddr>,
    pub routes: crate::ingest::record::Routes,
}

/// Kafka's process.roles, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    pub broker: bool,
    pub controller: bool,
}

/// Values given on the command line; `None` means "not given".
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub advertised_listener: Option<String>,
    pub listeners: Option<String>,
    pub advertised_listeners: Option<String>,
    pub listener_security_protocol_map: Option<String>,
    pub inter_broker_listener_name: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub shards: Option<usize>,
    pub cpuset: Option<String>,
    pub pin_shards: Option<bool>,
    pub node_id: Option<i32>,
    pub process_roles: Option<String>,
    pub controller_listen: Option<String>,
    pub controller_voters: Option<String>,
    pub rack: Option<String>,
    pub metrics_listen: Option<String>,
}

impl Config {
    /// Builds the effective configuration in precedence order.
    pub fn load(
        file: Option<&Path>,
        env: impl Iterator<Item = (String, String)>,
        flags: &Overrides,
    ) -> Result<Config, ConfigError> {
        let mut table =
            toml::Table::try_from(Config::default()).map_err(|e| ConfigError::Invalid {
                key: "<defaults>".into(),
                message: e.to_string(),
            })?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            let from_file: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ConfigError::Parse {
                        path: path.to_path_buf(),
                        message: e.to_string(),
                    })?;
            for (key, value) in from_file {
                if !table.contains_key(&key) {
                    return Err(ConfigError::Parse {
                        path: path.to_path_buf(),
                        message: format!("unknown setting `{key}`"),
                    });
                }
                table.insert(key, value);
            }
        }
        for name in apply_env(&mut table, env)? {
            // The config file refuses an unknown key; a variable may belong to another
            // program, so it is not refused, but a misspelt setting must not pass unnoticed.
            tracing::warn!(
                variable = %name,
                "unknown STRATA_* environment variable ignored: not a setting (see \
                 config/strata.toml) nor one the strata tools use"
            );
        }
        let mut config: Config =
            table
                .try_into()
                .map_err(|e: toml::de::Error| ConfigError::Invalid {
                    key: "<config>".into(),
                    message: e.to_string(),
                })?;
        if let Some(v) = &flags.listen {
            config.listen = v.clone();
        }
        if let Some(v) = &flags.advertised_listener {
            config.advertised_listener = v.clone();
        }
        if let Some(v) = &flags.data_dir {
            config.data_dir = v.clone();
        }
        if let Some(v) = flags.shards {
            config.shards = v;
        }
        if let Some(v) = flags.pin_shards {
            config.pin_shards = v;
        }
        if let Some(v) = flags.node_id {
            config.node_id = v;
        }
        for (slot, flag) in [
            (&mut config.listeners, &flags.listeners),
            (
                &mut config.advertised_listeners,
                &flags.advertised_listeners,
            ),
            (
                &mut config.listener_security_protocol_map,
                &flags.listener_security_protocol_map,
            ),
            (
                &mut config.inter_broker_listener_name,
                &flags.inter_broker_listener_name,
            ),
            (&mut config.process_roles, &flags.process_roles),
            (&mut config.controller_listen, &flags.controller_listen),
            (&mut config.controller_voters, &flags.controller_voters),
            (&mut config.rack, &flags.rack),
            (&mut config.cpuset, &flags.cpuset),
            (&mut config.metrics_listen, &flags.metrics_listen),
        ] {
            if let Some(v) = flag {
                *slot = v.clone();
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// The CPUs `cpuset` names, sorted; `None` when it is empty (every CPU of the process's
    /// affinity mask).
    pub fn cpuset_cpus(&self) -> Result<Option<Vec<usize>>, ConfigError> {
        if self.cpuset.trim().is_empty() {
            return Ok(None);
        }
        cpu_list::parse(&self.cpuset)
            .map(Some)
            .map_err(|e| ConfigError::Invalid {
                key: "cpuset".into(),
                message: format!("{:?}: {e}", self.cpuset),
            })
    }

    /// The group coordinator's settings.
    pub fn group_config(&self) -> crate::group::GroupConfig {
        crate::group::GroupConfig {
            initial_rebalance_delay_ms: self.group_initial_rebalance_delay_ms,
            session_timeout_ms_min: self.group_min_session_timeout_ms,
            session_timeout_ms_max: self.group_max_session_timeout_ms,
            offsets_retention_ms: self.offsets_retention_minutes.saturating_mul(60_000),
            offsets_retention_check_interval_ms: self.offsets_retention_check_interval_ms,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: key.into(),
            message,
        };
        if !(1..=crate::limits::TOPIC_PARTITIONS_MAX).contains(&self.offsets_topic_num_partitions) {
            return Err(invalid(
                "offsets_topic_num_partitions",
                format!(
                    "must be between 1 and {}",
                    crate::limits::TOPIC_PARTITIONS_MAX
                ),
            ));
        }
        if !(1..=crate::limits::TOPIC_PARTITIONS_MAX)
            .contains(&self.transaction_state_log_num_partitions)
        {
            return Err(invalid(
                "transaction_state_log_num_partitions",
                format!(
                    "must be between 1 and {}",
                    crate::limits::TOPIC_PARTITIONS_MAX
                ),
            ));
        }
        if self.transaction_state_log_replication_factor < 1
            || self.transaction_state_log_min_isr < 1
            || self.transaction_state_log_segment_bytes < 1024
        {
            return Err(invalid(
                "transaction_state_log_replication_factor",
                "the replication factor and min.isr must be >= 1 and segment bytes >= 1024".into(),
            ));
        }
        if self.transaction_max_timeout_ms < 1
            || self.transactional_id_expiration_ms < 1
            || self.transaction_abort_timed_out_transaction_cleanup_interval_ms < 1
            || self.transaction_remove_expired_transaction_cleanup_interval_ms < 1
        {
            return Err(invalid(
                "transaction_max_timeout_ms",
                "transaction timeouts and intervals must be >= 1".into(),
            ));
        }
        if self.group_min_session_timeout_ms < 0
            || self.group_min_session_timeout_ms > self.group_max_session_timeout_ms
        {
            return Err(invalid(
                "group_min_session_timeout_ms",
                "must be >= 0 and <= group_max_session_timeout_ms".into(),
            ));
        }
        if self.group_initial_rebalance_delay_ms < 0 || self.offsets_retention_minutes < 1 {
            return Err(invalid(
                "group_initial_rebalance_delay_ms",
                "delays must be >= 0 and offsets_retention_minutes >= 1".into(),
            ));
        }
        if self.listeners.trim().is_empty() {
            self.listen
                .parse::<SocketAddr>()
                .map_err(|e| invalid("listen", format!("{:?}: {e}", self.listen)))?;
            if !self.advertised_listener.is_empty() {
                parse_host_port(&self.advertised_listener)
                    .ok_or_else(|| invalid("advertised_listener", "expected HOST:PORT".into()))?;
            }
        }
        let listeners = self.listeners()?;
        for l in &listeners.bound {
            let resolves = std::net::ToSocketAddrs::to_socket_addrs(&l.bind_address())
                .map(|mut a| a.next().is_some())
                .unwrap_or(false);
            if !resolves {
                return Err(invalid(
                    "listeners",
                    format!("{l}: {} is not an address to bind", l.bind_address()),
                ));
            }
        }
        if self.num_partitions < 1 {
            return Err(invalid("num_partitions", "must be at least 1".into()));
        }
        // The list's form here; whether its CPUs are ones the process may use is known only
        // on the machine that starts the broker (`shard::cpus::plan`).
        self.cpuset_cpus()?;
        if self.socket_request_max_bytes < 1024 {
            return Err(invalid(
                "socket_request_max_bytes",
                "must be at least 1024".into(),
            ));
        }
        if self.shards > crate::limits::SHARDS_MAX {
            return Err(invalid(
                "shards",
                format!(
                    "must be at most {} (0: one per CPU)",
                    crate::limits::SHARDS_MAX
                ),
            ));
        }
        if self.memory_limit_bytes < MEMORY_LIMIT_BYTES_MIN {
            return Err(invalid(
                "memory_limit_bytes",
                format!("must be at least {MEMORY_LIMIT_BYTES_MIN}"),
            ));
        }
        if self.connection_requests_in_flight_max == 0 {
            return Err(invalid(
                "connection_requests_in_flight_max",
                "must be at least 1".into(),
            ));
        }
        if self.queued_max_request_bytes < self.socket_request_max_bytes {
            return Err(invalid(
                "queued_max_request_bytes",
                format!(
                    "must be at least socket_request_max_bytes ({}), or the largest valid \
                     request could never be read",
                    self.socket_request_max_bytes
                ),
            ));
        }
        if self.connections_max_idle_ms == 0 || self.request_timeout_ms == 0 {
            return Err(invalid(
                "connections_max_idle_ms",
                "connections_max_idle_ms and request_timeout_ms must be positive".into(),
            ));
        }
        if self.max_connections == 0 || self.max_connections_per_ip == 0 {
            return Err(invalid(
                "max_connections",
                "max_connections and max_connections_per_ip must be at least 1".into(),
            ));
        }
        self.sasl_mechanisms()
            .map_err(|m| invalid("sasl_enabled_mechanisms", m))?;
        self.plain_users()
            .map_err(|m| invalid("sasl_plain_users", m))?;
        self.acl_authorizer()?;
        self.oauthbearer_settings()
            .map_err(|(key, m)| invalid(key, m))?;
        if self.connections_max_reauth_ms < 0 {
            return Err(invalid(
                "connections_max_reauth_ms",
                "must be 0 (off) or positive".into(),
            ));
        }
        if !(2..=crate::limits::QUOTA_WINDOW_NUM_MAX).contains(&self.quota_window_num) {
            return Err(invalid(
                "quota_window_num",
                format!("must be within 2..={}", crate::limits::QUOTA_WINDOW_NUM_MAX),
            ));
        }
        if !(1..=3600).contains(&self.quota_window_size_seconds) {
            return Err(invalid(
                "quota_window_size_seconds",
                "must be within 1..=3600".into(),
            ));
        }
        if self.fetch_max_bytes < 1024 {
            return Err(invalid("fetch_max_bytes", "must be at least 1024".into()));
        }
        self.topic_defaults().map_err(|(k, m)| invalid(&k, m))?;
        if self.node_id < 0 {
            return Err(invalid("node_id", "must be >= 0".into()));
        }
        let roles = self.roles().map_err(|m| invalid("process_roles", m))?;
        let voters = self.voters().map_err(|m| invalid("controller_voters", m))?;
        if !self.controller_listen.is_empty() {
            self.controller_listen
                .parse::<SocketAddr>()
                .map_err(|e| invalid("controller_listen", format!("{e}")))?;
        }
        let is_voter = voters.is_empty() || voters.iter().any(|(id, _)| *id == self.node_id);
        if roles.controller && !is_voter {
            return Err(invalid(
                "controller_voters",
                format!(
                    "node {} has the controller role but is not a voter",
                    self.node_id
                ),
            ));
        }
        if voters.len() > 1 && roles.controller && self.controller_listen.is_empty() {
            return Err(invalid(
                "controller_listen",
                "a voter of a multi-node quorum needs an address".into(),
            ));
        }
        if !roles.controller && voters.is_empty() {
            return Err(invalid(
                "controller_voters",
                "a broker-only node must be told where the controllers are".into(),
            ));
        }
        if listeners
            .bound
            .iter()
            .any(|l| l.security_protocol.uses_tls())
        {
            for (key, value) in [
                ("ssl_certificate_location", &self.ssl_certificate_location),
                ("ssl_key_location", &self.ssl_key_location),
            ] {
                if value.is_empty() {
                    return Err(invalid(key, "needed by the TLS listeners".into()));
                }
            }
        }
        let client_auth = crate::security::tls::ClientAuth::parse(&self.ssl_client_auth)
            .map_err(|e| invalid("ssl_client_auth", e.to_string()))?;
        if client_auth != crate::security::tls::ClientAuth::None
            && self.ssl_truststore_location.is_empty()
        {
            return Err(invalid(
                "ssl_truststore_location",
                "needed to check client certificates (ssl_client_auth)".into(),
            ));
        }
        crate::security::PrincipalMapper::parse(&self.ssl_principal_mapping_rules)
            .map_err(|e| invalid("ssl_principal_mapping_rules", e.to_string()))?;
        // Brokers reach each other on the inter-broker listener as Kafka's do (`shard::peer`):
        // refuse what cannot work there. A single node has no peers, whatever its listeners.
        let has_peers = voters.len() > 1 || !roles.controller;
        let inter_broker = listeners
            .inter_broker_endpoint()
            .map(|l| l.security_protocol)
            .unwrap_or(crate::security::SecurityProtocol::Plaintext);
        let mechanism = self
            .inter_broker_sasl_mechanism()
            .map_err(|m| invalid("sasl_mechanism_inter_broker_protocol", m))?;
        if has_peers && inter_broker.uses_sasl() {
            if let Some(key) = self.missing_inter_broker_login() {
                return Err(invalid(
                    key,
                    format!(
                        "needed: the inter-broker listener {} is {inter_broker}, and \
                         brokers log in on it",
                        listeners.inter_broker
                    ),
                ));
            }
            if !self
                .sasl_mechanisms()
                .unwrap_or_default()
                .contains(&mechanism)
            {
                return Err(invalid(
                    "sasl_mechanism_inter_broker_protocol",
                    format!("{mechanism} is not in sasl_enabled_mechanisms"),
                ));
            }
        }
        if has_peers && inter_broker.uses_tls() && self.ssl_truststore_location.is_empty() {
            return Err(invalid(
                "ssl_truststore_location",
                format!(
                    "needed: the inter-broker listener {} is {inter_broker}, and brokers \
                     check each other's certificates against it",
                    listeners.inter_broker
                ),
            ));
        }
        self.validate_controller_security(&voters, roles.controller)?;
        if self.min_insync_replicas < 1 {
            return Err(invalid("min_insync_replicas", "must be at least 1".into()));
        }
        if self.replica_lag_time_max_ms == 0 || self.broker_session_timeout_ms == 0 {
            return Err(invalid(
                "replica_lag_time_max_ms",
                "timeouts must be positive".into(),
            ));
        }
        self.ingest_settings()?;
        self.metrics_address()?;
        Ok(())
    }

    /// The first of the broker's own login settings left empty, if any: brokers log in to
    /// each other, and nodes to the controllers, with `inter_broker_sasl_username` and its
    /// password.
    fn missing_inter_broker_login(&self) -> Option<&'static str> {
        [
            (
                "inter_broker_sasl_username",
                &self.inter_broker_sasl_username,
            ),
            (
                "inter_broker_sasl_password",
                &self.inter_broker_sasl_password,
            ),
        ]
        .into_iter()
        .find(|(_, value)| value.is_empty())
        .map(|(key, _)| key)
    }

    /// The broker's own login on the other brokers' SASL listeners and on the controllers'
    /// port: `inter_broker_sasl_username` with its password and `mechanism`; `None` without
    /// a username (a single node, which has no peers).
    pub fn inter_broker_login(
        &self,
        mechanism: crate::security::sasl::Mechanism,
    ) -> Option<crate::security::sasl::PeerLogin> {
        (!self.inter_broker_sasl_username.is_empty()).then(|| crate::security::sasl::PeerLogin {
            mechanism,
            username: self.inter_broker_sasl_username.clone(),
            password: self.inter_broker_sasl_password.clone(),
        })
    }

    /// The broker's own TLS client to the rest of the cluster (the other brokers' TLS
    /// inter-broker listener, the controller quorum's port), reloaded when its files change:
    /// the others' certificates checked against `ssl_truststore_location` (and their name),
    /// its own certificate offered when asked. `None` without a truststore (a single node;
    /// `validate` refuses a cluster without one). The files are read now; `what` names it in
    /// errors and logs.
    pub fn broker_tls_client(
        &self,
        what: &'static str,
    ) -> Result<Option<ReloadingTls<rustls::ClientConfig>>, String> {
        if self.ssl_truststore_location.is_empty() {
            return Ok(None);
        }
        let truststore = PathBuf::from(&self.ssl_truststore_location);
        let identity = (!self.ssl_certificate_location.is_empty()).then(|| {
            (
                PathBuf::from(&self.ssl_certificate_location),
                PathBuf::from(&self.ssl_key_location),
            )
        });
        let paths: Vec<PathBuf> = std::iter::once(truststore.clone())
            .chain(identity.iter().flat_map(|(c, k)| [c.clone(), k.clone()]))
            .collect();
        let build = move || {
            let truststore = read_setting_file("ssl_truststore_location", &truststore)?;
            let identity = match &identity {
                None => None,
                Some((c, k)) => Some((
                    read_setting_file("ssl_certificate_location", c)?,
                    read_setting_file("ssl_key_location", k)?,
                )),
            };
            let identity = identity.as_ref().map(|(c, k)| (&c[..], &k[..]));
            crate::security::tls::client_config(&truststore, identity, true)
                .map_err(|e| format!("{what} TLS client: {e}"))
        };
        ReloadingTls::new(what, file_stamps(paths), Box::new(build)).map(Some)
    }

    /// A TLS server side of the broker's own (the controller quorum's port), reloaded when its
    /// files change: `ssl_certificate_location` and `ssl_key_location`, the connecting side's
    /// certificate checked against `ssl_truststore_location` as `client_auth` says.
    pub fn broker_tls_server(
        &self,
        client_auth: crate::security::tls::ClientAuth,
        what: &'static str,
    ) -> Result<ReloadingTls<rustls::ServerConfig>, String> {
        let certificate = PathBuf::from(&self.ssl_certificate_location);
        let key = PathBuf::from(&self.ssl_key_location);
        let truststore = PathBuf::from(&self.ssl_truststore_location);
        let paths = vec![certificate.clone(), key.clone(), truststore.clone()];
        let build = move || {
            let material = crate::security::tls::TlsMaterial {
                certificate_pem: read_setting_file("ssl_certificate_location", &certificate)?,
                key_pem: read_setting_file("ssl_key_location", &key)?,
                truststore_pem: Some(read_setting_file("ssl_truststore_location", &truststore)?),
            };
            crate::security::tls::server_config(&material, client_auth)
                .map_err(|e| format!("{what} TLS: {e}"))
        };
        ReloadingTls::new(what, file_stamps(paths), Box::new(build))
    }

    /// `controller_listener_security_protocol`, parsed.
    pub fn controller_security_protocol(
        &self,
    ) -> Result<crate::security::SecurityProtocol, String> {
        let text = &self.controller_listener_security_protocol;
        crate::security::SecurityProtocol::parse(text)
            .ok_or_else(|| format!("{text:?}: expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"))
    }

    /// Refuses a controller quorum port that cannot be secured as its protocol says: TLS
    /// without a certificate, key or truststore, SASL without the credentials this node logs
    /// in with or with a mechanism other than PLAIN.
    fn validate_controller_security(
        &self,
        voters: &[(i32, SocketAddr)],
        is_controller: bool,
    ) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: key.into(),
            message,
        };
        let protocol = self
            .controller_security_protocol()
            .map_err(|m| invalid("controller_listener_security_protocol", m))?;
        let mechanism = self.sasl_mechanism_controller_protocol.trim();
        if mechanism != "PLAIN" {
            return Err(invalid(
                "sasl_mechanism_controller_protocol",
                format!(
                    "{mechanism:?}: only PLAIN (a user of sasl_plain_users) is supported on the \
                     controller quorum's port, as SCRAM credentials live in the metadata log it \
                     carries"
                ),
            ));
        }
        // A single node has no quorum network to secure.
        let networked = voters.len() > 1 || !is_controller;
        if !networked {
            return Ok(());
        }
        let why = |what: &str| {
            format!("needed: controller_listener_security_protocol is {protocol}, and {what}")
        };
        if protocol.uses_tls() {
            for (key, value) in [
                ("ssl_certificate_location", &self.ssl_certificate_location),
                ("ssl_key_location", &self.ssl_key_location),
                ("ssl_truststore_location", &self.ssl_truststore_location),
            ] {
                if value.is_empty() {
                    return Err(invalid(
                        key,
                        why("the nodes show each other certificates from the truststore"),
                    ));
                }
            }
        }
        if protocol.uses_sasl() {
            if let Some(key) = self.missing_inter_broker_login() {
                return Err(invalid(
                    key,
                    why("nodes log in on the controllers' port with it"),
                ));
            }
            if is_controller && self.plain_users().unwrap_or_default().is_empty() {
                return Err(invalid(
                    "sasl_plain_users",
                    why("a controller checks the nodes' PLAIN logins against it"),
                ));
            }
        }
        Ok(())
    }

    /// `sasl_mechanism_inter_broker_protocol`, parsed: a mechanism a broker has a password
    /// for (not OAUTHBEARER, whose tokens Strata's brokers do not fetch).
    pub fn inter_broker_sasl_mechanism(&self) -> Result<crate::security::sasl::Mechanism, String> {
        use crate::security::sasl::Mechanism;
        let name = self.sasl_mechanism_inter_broker_protocol.trim();
        match Mechanism::from_name(name) {
            Some(Mechanism::OAuthBearer) => Err(
                "OAUTHBEARER is not supported between brokers: use PLAIN, SCRAM-SHA-256 or \
                 SCRAM-SHA-512"
                    .into(),
            ),
            Some(m) => Ok(m),
            None => Err(format!(
                "unknown SASL mechanism `{name}` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
            )),
        }
    }

    /// `sasl_enabled_mechanisms`, parsed, in the order given (SaslHandshake lists them so).
    pub fn sasl_mechanisms(&self) -> Result<Vec<crate::security::sasl::Mechanism>, String> {
        let mut out = Vec::new();
        for name in self.sasl_enabled_mechanisms.split(',').map(str::trim) {
            if name.is_empty() {
                continue;
            }
            let m = crate::security::sasl::Mechanism::from_name(name).ok_or_else(|| {
                format!(
                    "unknown SASL mechanism `{name}` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, \
                     OAUTHBEARER)"
                )
            })?;
            if !out.contains(&m) {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// The JWKS file and the token checks for OAUTHBEARER, when it is enabled (`None`
    /// otherwise: the settings are then ignored). Errors name the setting at fault.
    pub fn oauthbearer_settings(
        &self,
    ) -> Result<
        Option<(PathBuf, crate::security::sasl::jwt::ValidatorSettings)>,
        (&'static str, String),
    > {
        let enabled = self
            .sasl_mechanisms()
            .map_err(|m| ("sasl_enabled_mechanisms", m))?
            .contains(&crate::security::sasl::Mechanism::OAuthBearer);
        if !enabled {
            return Ok(None);
        }
        let key = "sasl_oauthbearer_jwks_endpoint_url";
        let url = self.sasl_oauthbearer_jwks_endpoint_url.trim();
        if url.is_empty() {
            return Err((
                key,
                "OAUTHBEARER is enabled: set the JWKS file's `file:` URL".into(),
            ));
        }
        // `file:///abs/path` (and Java's `file:/abs/path`). Strata fetches nothing over
        // HTTP: an identity provider's JWKS is saved to a file, which is re-read on change.
        let path = url
            .strip_prefix("file://")
            .or_else(|| url.strip_prefix("file:"))
            .filter(|p| p.starts_with('/'))
            .ok_or_else(|| {
                (
                    key,
                    format!("{url:?}: only absolute file: URLs are supported"),
                )
            })?;
        if self.sasl_oauthbearer_clock_skew_seconds < 0 {
            return Err(("sasl_oauthbearer_clock_skew_seconds", "must be >= 0".into()));
        }
        let name = |key: &'static str, v: &str| {
            let v = v.trim();
            if v.is_empty() {
                Err((key, "must not be empty".to_string()))
            } else {
                Ok(v.to_string())
            }
        };
        let issuer = self.sasl_oauthbearer_expected_issuer.trim();
        Ok(Some((
            PathBuf::from(path),
            crate::security::sasl::jwt::ValidatorSettings {
                expected_issuer: (!issuer.is_empty()).then(|| issuer.to_string()),
                expected_audience: self
                    .sasl_oauthbearer_expected_audience
                    .split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(str::to_string)
                    .collect(),
                sub_claim_name: name(
                    "sasl_oauthbearer_sub_claim_name",
                    &self.sasl_oauthbearer_sub_claim_name,
                )?,
                scope_claim_name: name(
                    "sasl_oauthbearer_scope_claim_name",
                    &self.sasl_oauthbearer_scope_claim_name,
                )?,
                clock_skew_s: self.sasl_oauthbearer_clock_skew_seconds,
            },
        )))
    }

    /// `sasl_plain_users`, parsed: user -> password. A password may contain ':' (the first
    /// one separates), not ','.
    pub fn plain_users(&self) -> Result<BTreeMap<String, String>, String> {
        let mut out = BTreeMap::new();
        for entry in self.sasl_plain_users.split(',').map(str::trim) {
            if entry.is_empty() {
                continue;
            }
            let (user, password) = entry
                .split_once(':')
                .filter(|(u, p)| !u.is_empty() && !p.is_empty())
                // The entry is not echoed back: it holds a password.
                .ok_or_else(|| "entries are `user:password` with neither empty".to_string())?;
            out.insert(user.to_string(), password.to_string());
        }
        Ok(out)
    }

    /// The authorizer `authorizer`, `super_users` and `allow_everyone_if_no_acl_found`
    /// describe; `None` when authorization is off.
    pub fn acl_authorizer(&self) -> Result<Option<crate::security::acl::Authorizer>, ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: key.into(),
            message,
        };
        match self.authorizer.trim() {
            "" => Ok(None),
            "acl" => crate::security::acl::Authorizer::new(
                &self.super_users,
                self.allow_everyone_if_no_acl_found,
            )
            .map(Some)
            .map_err(|e| invalid("super_users", e.to_string())),
            other => Err(invalid(
                "authorizer",
                format!("{other:?}: expected \"\" (no authorization) or \"acl\""),
            )),
        }
    }

    /// The metrics listener's address, if it is on.
    pub fn metrics_address(&self) -> Result<Option<SocketAddr>, ConfigError> {
        if self.metrics_listen.is_empty() {
            return Ok(None);
        }
        self.metrics_listen
            .parse::<SocketAddr>()
            .map(Some)
            .map_err(|e| ConfigError::Invalid {
                key: "metrics_listen".into(),
                message: format!("{:?}: {e}", self.metrics_listen),
            })
    }

    /// The syslog listeners, the routing table and the HTTP address, validated.
    pub fn ingest_settings(&self) -> Result<IngestSettings, ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            key: key.into(),
            message,
        };
        let mut syslog_listeners = Vec::with_capacity(self.syslog_listeners.len());
        for spec in &self.syslog_listeners {
            let (scheme, addr) = spec.split_once("://").ok_or_else(|| {
                invalid(
                    "syslog_listeners",
                    format!("{spec:?}: expected tcp://, udp:// or relp://HOST:PORT"),
                )
            })?;
            let kind = match scheme {
                "tcp" => SyslogTransport::Tcp,
                "udp" => SyslogTransport::Udp,
                "relp" => SyslogTransport::Relp,
                _ => {
                    return Err(invalid(
                        "syslog_listeners",
                        format!("{spec:?}: unknown transport {scheme:?} (tcp, udp or relp)"),
                    ))
                }
            };
            let addr = addr
                .parse::<SocketAddr>()
                .map_err(|e| invalid("syslog_listeners", format!("{spec:?}: {e}")))?;
            syslog_listeners.push((kind, addr));
        }
        let http_listen = if self.http_listen.is_empty() {
            None
        } else {
            Some(
                self.http_listen
                    .parse::<SocketAddr>()
                    .map_err(|e| invalid("http_listen", format!("{:?}: {e}", self.http_listen)))?,
            )
        };
        let routes = crate::ingest::record::Routes::new(
            &self.syslog_topic,
            &self.syslog_malformed_topic,
            &self.syslog_routes,
        )
        .map_err(|e| invalid("syslog_routes", e.to_string()))?;
        if !(256..=crate::limits::INGEST_MESSAGE_BYTES_MAX).contains(&self.syslog_message_max_bytes)
        {
            return Err(invalid(
                "syslog_message_max_bytes",
                format!(
                    "must be from 256 to {}",
                    crate::limits::INGEST_MESSAGE_BYTES_MAX
                ),
            ));
        }
        if self.syslog_connections_max == 0 {
            return Err(invalid(
                "syslog_connections_max",
                "must be at least 1".into(),
            ));
        }
        if self.ingest_linger_ms > crate::limits::INGEST_LINGER_MS_MAX {
            return Err(invalid(
                "ingest_linger_ms",
                format!("must be at most {}", crate::limits::INGEST_LINGER_MS_MAX),
            ));
        }
        Ok(IngestSettings {
            syslog_listeners,
            http_listen,
            routes,
        })
    }

    /// The roles of this node (Kafka's process.roles).
    pub fn roles(&self) -> Result<Roles, String> {
        let mut roles = Roles {
            broker: false,
            controller: false,
        };
        for role in self.process_roles.split(',').map(str::trim) {
            match role {
                "broker" => roles.broker = true,
                "controller" => roles.controller = true,
                other => return Err(format!("unknown role {other:?}")),
            }
        }
        if !roles.broker && !roles.controller {
            return Err("needs broker, controller or both".into());
        }
        Ok(roles)
    }

    /// The controller quorum's voters, as (node id, address).
    pub fn voters(&self) -> Result<Vec<(i32, SocketAddr)>, String> {
        let mut out = Vec::new();
        for part in self.controller_voters.split(',').map(str::trim) {
            if part.is_empty() {
                continue;
            }
            let (id, addr) = part
                .split_once('@')
                .ok_or_else(|| format!("{part:?}: expected ID@HOST:PORT"))?;
            let id: i32 = id
                .parse()
                .map_err(|_| format!("{part:?}: node id is not a number"))?;
            let addr = std::net::ToSocketAddrs::to_socket_addrs(addr)
                .map_err(|e| format!("{part:?}: {e}"))?
                .next()
                .ok_or_else(|| format!("{part:?}: address does not resolve"))?;
            if out.iter().any(|(other, _)| *other == id) {
                return Err(format!("node {id} is listed twice"));
            }
            out.push((id, addr));
        }
        Ok(out)
    }

    /// The listeners (`listeners`, `advertised_listeners`, the protocol map and the
    /// inter-broker listener, or the single PLAINTEXT `listen`), resolved and checked.
    pub fn listeners(&self) -> Result<Listeners, ConfigError> {
        Listeners::resolve(ListenerSettings {
            listeners: &self.listeners,
            advertised_listeners: &self.advertised_listeners,
            listener_security_protocol_map: &self.listener_security_protocol_map,
            inter_broker_listener_name: &self.inter_broker_listener_name,
            listen: &self.listen,
            advertised_listener: &self.advertised_listener,
        })
        .map_err(|e| ConfigError::Invalid {
            key: "listeners".into(),
            message: e.to_string(),
        })
    }

    /// The min.insync.replicas of a topic with these overrides.
    pub fn min_insync_replicas_of(&self, topic_configs: &BTreeMap<String, String>) -> usize {
        topic_configs
            .get("min.insync.replicas")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(self.min_insync_replicas.max(1) as usize)
    }

    /// Broker-wide defaults for topic configs, in Kafka's topic-level names.
    pub fn topic_defaults_map(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("segment.bytes".into(), self.log_segment_bytes.to_string());
        m.insert("segment.ms".into(), self.log_roll_ms.to_string());
        m.insert("retention.ms".into(), self.log_retention_ms.to_string());
        m.insert(
            "retention.bytes".into(),
            self.log_retention_bytes.to_string(),
        );
        m.insert(
            "index.interval.bytes".into(),
            self.log_index_interval_bytes.to_string(),
        );
        m.insert(
            "segment.index.bytes".into(),
            self.log_index_size_max_bytes.to_string(),
        );
        m.insert(
            "max.message.bytes".into(),
            self.message_max_bytes.to_string(),
        );
        m.insert(
            "message.timestamp.type".into(),
            self.log_message_timestamp_type.clone(),
        );
        m.insert("flush.policy".into(), self.log_flush_policy.clone());
        m.insert("flush.ms".into(), self.log_flush_interval_ms.to_string());
        m.insert("cleanup.policy".into(), "delete".into());
        m.insert(
            "min.insync.replicas".into(),
            self.min_insync_replicas.to_string(),
        );
        m.insert(
            "unclean.leader.election.enable".into(),
            self.unclean_leader_election_enable.to_string(),
        );
        m.insert("compression.type".into(), "producer".into());
        m.insert(
            "min.cleanable.dirty.ratio".into(),
            self.log_cleaner_min_cleanable_ratio.to_string(),
        );
        m.insert(
            "delete.retention.ms".into(),
            self.log_cleaner_delete_retention_ms.to_string(),
        );
        m.insert(
            "min.compaction.lag.ms".into(),
            self.log_cleaner_min_compaction_lag_ms.to_string(),
        );
        m.insert(
            "max.compaction.lag.ms".into(),
            self.log_cleaner_max_compaction_lag_ms.to_string(),
        );
        m
    }

    /// Topic config defaults as a typed `LogConfig`.
    pub fn topic_defaults(&self) -> Result<LogConfig, (String, String)> {
        log_config_from(&self.topic_defaults_map(), self)
    }
}

/// Topic-level config keys Strata understands (DescribeConfigs lists them; AlterConfigs
/// accepts only these).
pub const TOPIC_CONFIG_KEYS: &[&str] = &[
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "flush.ms",
    "flush.policy",
    "index.interval.bytes",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.ms",
    "unclean.leader.election.enable",
];

/// Builds a `LogConfig` from Kafka-named topic settings. Missing keys take the broker's
/// defaults. Errors name the offending key.
#[allow(clippy::field_reassign_with_default)] // each field is parsed and checked in turn
pub fn log_config_from(
    settings: &BTreeMap<String, String>,
    broker: &Config,
) -> Result<LogConfig, (String, String)> {
    fn num<T: std::str::FromStr>(
        settings: &BTreeMap<String, String>,
        key: &str,
        default: T,
    ) -> Result<T, (String, String)> {
        match settings.get(key) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<T>()
                .map_err(|_| (key.to_string(), format!("`{v}` is not a valid number"))),
        }
    }
    let mut c = LogConfig::default();
    c.segment_bytes = num(settings, "segment.bytes", broker.log_segment_bytes)?;
    if c.segment_bytes < 14 {
        return Err(("segment.bytes".into(), "must be at least 14".into()));
    }
    c.segment_ms = num(settings, "segment.ms", broker.log_roll_ms)?;
    if c.segment_ms < 1 {
        return Err(("segment.ms".into(), "must be at least 1".into()));
    }
    c.retention_ms = num(settings, "retention.ms", broker.log_retention_ms)?;
    c.retention_bytes = num(settings, "retention.bytes", broker.log_retention_bytes)?;
    c.index_interval_bytes = num(
        settings,
        "index.interval.bytes",
        broker.log_index_interval_bytes,
    )?;
    c.segment_index_bytes = num(
        settings,
        "segment.index.bytes",
        broker.log_index_size_max_bytes,
    )?;
    if c.segment_index_bytes < 8 {
        return Err(("segment.index.bytes".into(), "must be at least 8".into()));
    }
    c.max_message_bytes = num(settings, "max.message.bytes", broker.message_max_bytes)?;
    c.message_timestamp_type = match settings
        .get("message.timestamp.type")
        .map(String::as_str)
        .unwrap_or(broker.log_message_timestamp_type.as_str())
    {
        "CreateTime" => TimestampType::CreateTime,
        "LogAppendTime" => TimestampType::LogAppendTime,
        other => {
            return Err((
                "message.timestamp.type".into(),
                format!("`{other}` is not CreateTime or LogAppendTime"),
            ))
        }
    };
    let interval: u64 = num(settings, "flush.ms", broker.log_flush_interval_ms)?;
    c.flush_policy = match settings
        .get("flush.policy")
        .map(String::as_str)
        .unwrap_or(broker.log_flush_policy.as_str())
    {
        "sync" => FlushPolicy::Sync,
        "interval" => FlushPolicy::IntervalMs(interval.max(1)),
        "none" => FlushPolicy::Never,
        other => {
            return Err((
                "flush.policy".into(),
                format!("`{other}` is not sync, interval or none"),
            ))
        }
    };
    if let Some(policy) = settings.get("cleanup.policy") {
        c.cleanup_policy = CleanupPolicy::parse(policy).ok_or_else(|| {
            (
                "cleanup.policy".into(),
                format!("`{policy}` is not delete, compact, compact,delete or empty"),
            )
        })?;
    }
    c.min_cleanable_dirty_ratio = num(
        settings,
        "min.cleanable.dirty.ratio",
        broker.log_cleaner_min_cleanable_ratio,
    )?;
    if !(0.0..=1.0).contains(&c.min_cleanable_dirty_ratio) {
        return Err((
            "min.cleanable.dirty.ratio".into(),
            "must be between 0 and 1".into(),
        ));
    }
    c.delete_retention_ms = num(
        settings,
        "delete.retention.ms",
        broker.log_cleaner_delete_retention_ms,
    )?;
    c.min_compaction_lag_ms = num(
        settings,
        "min.compaction.lag.ms",
        broker.log_cleaner_min_compaction_lag_ms,
    )?;
    c.max_compaction_lag_ms = num(
        settings,
        "max.compaction.lag.ms",
        broker.log_cleaner_max_compaction_lag_ms,
    )?;
    for (key, value) in [
        ("delete.retention.ms", c.delete_retention_ms),
        ("min.compaction.lag.ms", c.min_compaction_lag_ms),
    ] {
        if value < 0 {
            return Err((key.into(), "must be at least 0".into()));
        }
    }
    if c.max_compaction_lag_ms < 1 {
        return Err(("max.compaction.lag.ms".into(), "must be at least 1".into()));
    }
    if let Some(ct) = settings.get("compression.type") {
        c.compression = CompressionType::parse(ct).ok_or_else(|| {
            (
                "compression.type".into(),
                format!("`{ct}` is not a known codec"),
            )
        })?;
    }
    let min_isr: i32 = num(settings, "min.insync.replicas", broker.min_insync_replicas)?;
    if min_isr < 1 {
        return Err(("min.insync.replicas".into(), "must be at least 1".into()));
    }
    let _: bool = num(
        settings,
        "unclean.leader.election.enable",
        broker.unclean_leader_election_enable,
    )?;
    c.preallocate_bytes = broker.log_preallocate_bytes.min(c.segment_bytes);
    c.tail_cache_bytes = broker.log_tail_cache_bytes;
    Ok(c)
}

/// A file a setting names, read; an error names the setting and the file.
fn read_setting_file(setting: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{setting}: {}: {e}", path.display()))
}

/// How a `ReloadingTls` looks at `paths`: each file's modification time (None: unreadable).
fn file_stamps(paths: Vec<PathBuf>) -> Look {
    Box::new(move || {
        paths
            .iter()
            .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
            .collect()
    })
}

/// Parses "host:port" (host may be a name or an IPv4/IPv6 literal in brackets).
pub fn parse_host_port(text: &str) -> Option<(String, i32)> {
    let (host, port) = text.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return None;
    }
    Some((host.to_string(), port as i32))
}

/// `STRATA_*` variables that are not broker settings: the command line's own (`STRATA_CONFIG`,
/// `STRATA_LOG`, `STRATA_BOOTSTRAP`) and those of the test, simulation and fuzz tooling, which
/// a developer's shell exports while starting brokers. They are skipped without a warning.
const NOT_SETTINGS: &[&str] = &[
    "STRATA_BOOTSTRAP",
    "STRATA_CONFIG",
    "STRATA_LOG",
    "STRATA_BIN",
    "STRATA_SKIP_NETNS",
    "STRATA_NETNS_FIREWALL",
    "STRATA_CLUSTER_REPLICA_READ",
];
/// Families of tooling variables (`STRATA_TEST_BROKER`, `STRATA_SIM_SEED`, `STRATA_FUZZ_SEEDS`).
const NOT_SETTING_PREFIXES: &[&str] = &["STRATA_TEST_", "STRATA_SIM_", "STRATA_FUZZ_"];

fn is_tooling_variable(name: &str) -> bool {
    NOT_SETTINGS.contains(&name) || NOT_SETTING_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Applies every `STRATA_<SETTING>` variable of `env` to `table`; returns the names of the
/// `STRATA_*` variables that are neither a setting nor a known tooling variable.
fn apply_env(
    table: &mut toml::Table,
    env: impl Iterator<Item = (String, String)>,
) -> Result<Vec<String>, ConfigError> {
    let mut unknown = Vec::new();
    for (name, raw) in env {
        let Some(key) = name.strip_prefix("STRATA_") else {
            continue;
        };
        let key = key.to_ascii_lowercase();
        let Some(current) = table.get(&key) else {
            if !is_tooling_variable(&name) {
                unknown.push(name);
            }
            continue;
        };
        let value = parse_like(current, &raw).map_err(|message| ConfigError::Env {
            name: name.clone(),
            value: raw.clone(),
            message,
        })?;
        table.insert(key, value);
    }
    unknown.sort();
    Ok(unknown)
}

/// Parses an environment string into the same TOML type as the current value.
fn parse_like(current: &toml::Value, raw: &str) -> Result<toml::Value, String> {
    Ok(match current {
        toml::Value::Integer(_) => toml::Value::Integer(
            raw.trim()
                .parse()
                .map_err(|_| "expected an integer".to_string())?,
        ),
        toml::Value::Float(_) => toml::Value::Float(
            raw.trim()
                .parse()
                .map_err(|_| "expected a number".to_string())?,
        ),
        toml::Value::Boolean(_) => toml::Value::Boolean(
            raw.trim()
                .parse()
                .map_err(|_| "expected true or false".to_string())?,
        ),
        // A list: comma-separated (`STRATA_SYSLOG_LISTENERS=tcp://a:1,udp://a:2`).
        toml::Value::Array(_) => toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_string()))
                .collect(),
        ),
        _ => toml::Value::String(raw.to_string()),
    })
}

/// Broker-level settings that are defaults for topic-level ones, as (broker name, topic
/// name) in Kafka's naming. These may be changed at runtime with IncrementalAlterConfigs on
/// the broker resource.
pub const BROKER_TOPIC_DEFAULTS: &[(&str, &str)] = &[
    ("compression.type", "compression.type"),
    ("log.cleaner.delete.retention.ms", "delete.retention.ms"),
    ("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms"),
    (
        "log.cleaner.min.cleanable.ratio",
        "min.cleanable.dirty.ratio",
    ),
    ("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
    ("log.cleanup.policy", "cleanup.policy"),
    ("log.flush.interval.ms", "flush.ms"),
    ("log.flush.policy", "flush.policy"),
    ("log.index.interval.bytes", "index.interval.bytes"),
    ("log.index.size.max.bytes", "segment.index.bytes"),
    ("log.message.timestamp.type", "message.timestamp.type"),
    ("log.retention.bytes", "retention.bytes"),
    ("log.retention.ms", "retention.ms"),
    ("log.roll.ms", "segment.ms"),
    ("log.segment.bytes", "segment.bytes"),
    ("message.max.bytes", "max.message.bytes"),
    ("min.insync.replicas", "min.insync.replicas"),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
    ),
];

/// The topic-level name of a dynamic broker default.
pub fn broker_key_to_topic_key(broker_key: &str) -> Option<&'static str> {
    BROKER_TOPIC_DEFAULTS
        .iter()
        .find(|(b, _)| *b == broker_key)
        .map(|(_, t)| *t)
}

/// Smallest `memory_limit_bytes`: below this a shard could not hold even a few batches of
/// the largest size (`message_max_bytes`) while others are being written.
pub const MEMORY_LIMIT_BYTES_MIN: usize = 16 * 1024 * 1024;

impl Config {
    /// The memory budget of one shard: `memory_limit_bytes` split evenly.
    pub fn shard_memory_limit_bytes(&self, nr_shards: usize) -> usize {
        self.memory_limit_bytes / nr_shards.max(1)
    }

    /// Read-only broker settings shown by DescribeConfigs, in Kafka's names.
    pub fn static_broker_settings(&self) -> Vec<(&'static str, String)> {
        // Validated at load: a config that got here resolves.
        let listeners = self.listeners().ok();
        let text = |f: fn(&Listeners) -> String| listeners.as_ref().map(f).unwrap_or_default();
        vec![
            ("advertised.listeners", text(Listeners::advertised_text)),
            (
                "inter.broker.listener.name",
                listeners
                    .as_ref()
                    .map(|l| l.inter_broker.clone())
                    .unwrap_or_default(),
            ),
            (
                "listener.security.protocol.map",
                text(Listeners::protocol_map_text),
            ),
            (
                "auto.create.topics.enable",
                self.auto_create_topics_enable.to_string(),
            ),
            ("broker.id", self.node_id.to_string()),
            (
                "default.replication.factor",
                self.default_replication_factor.to_string(),
            ),
            ("listeners", text(Listeners::bound_text)),
            ("log.dirs", self.data_dir.display().to_string()),
            ("num.partitions", self.num_partitions.to_string()),
            (
                "offsets.topic.num.partitions",
                self.offsets_topic_num_partitions.to_string(),
            ),
            (
                "group.initial.rebalance.delay.ms",
                self.group_initial_rebalance_delay_ms.to_string(),
            ),
            (
                "group.min.session.timeout.ms",
                self.group_min_session_timeout_ms.to_string(),
            ),
            (
                "group.max.session.timeout.ms",
                self.group_max_session_timeout_ms.to_string(),
            ),
            (
                "offsets.retention.minutes",
                self.offsets_retention_minutes.to_string(),
            ),
            (
                "transaction.state.log.num.partitions",
                self.transaction_state_log_num_partitions.to_string(),
            ),
            (
                "transaction.state.log.replication.factor",
                self.transaction_state_log_replication_factor.to_string(),
            ),
            (
                "transaction.state.log.min.isr",
                self.transaction_state_log_min_isr.to_string(),
            ),
            (
                "transaction.state.log.segment.bytes",
                self.transaction_state_log_segment_bytes.to_string(),
            ),
            (
                "transaction.max.timeout.ms",
                self.transaction_max_timeout_ms.to_string(),
            ),
            (
                "transactional.id.expiration.ms",
                self.transactional_id_expiration_ms.to_string(),
            ),
            (
                "transaction.partition.verification.enable",
                self.transaction_partition_verification_enable.to_string(),
            ),
            (
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                self.transaction_abort_timed_out_transaction_cleanup_interval_ms
                    .to_string(),
            ),
            (
                "transaction.remove.expired.transaction.cleanup.interval.ms",
                self.transaction_remove_expired_transaction_cleanup_interval_ms
                    .to_string(),
            ),
            (
                "socket.request.max.bytes",
                self.socket_request_max_bytes.to_string(),
            ),
            (
                "queued.max.request.bytes",
                self.queued_max_request_bytes.to_string(),
            ),
            (
                "connections.max.idle.ms",
                self.connections_max_idle_ms.to_string(),
            ),
            ("request.timeout.ms", self.request_timeout_ms.to_string()),
            ("max.connections", self.max_connections.to_string()),
            (
                "max.connections.per.ip",
                self.max_connections_per_ip.to_string(),
            ),
            ("fetch.max.bytes", self.fetch_max_bytes.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Precedence is default < file < env < flag, checked on one key at each level.
    #[test]
    fn precedence() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        std::fs::write(
            &path,
            "num_partitions = 3\nlog_retention_ms = 5\nlisten = \"127.0.0.1:1\"\n",
        )
        .expect("write");
        let env = vec![
            ("STRATA_LOG_RETENTION_MS".to_string(), "7".to_string()),
            ("STRATA_LISTEN".to_string(), "127.0.0.1:2".to_string()),
            ("STRATA_BOOTSTRAP".to_string(), "ignored".to_string()),
        ];
        let flags = Overrides {
            listen: Some("127.0.0.1:3".into()),
            ..Default::default()
        };
        let c = Config::load(Some(&path), env.into_iter(), &flags).expect("load");
        assert_eq!(c.num_partitions, 3);
        assert_eq!(c.log_retention_ms, 7);
        assert_eq!(c.listen, "127.0.0.1:3");
        assert_eq!(c.log_segment_bytes, Config::default().log_segment_bytes);
    }

    /// A `STRATA_*` variable that is no setting is reported (a misspelt setting changes
    /// nothing otherwise), except the variables the strata tools themselves use.
    #[test]
    fn unknown_environment_variables_are_reported() {
        let mut table = toml::Table::try_from(Config::default()).expect("defaults");
        let env = [
            ("STRATA_LOG_RETENTON_MS", "1"),
            ("STRATA_NUM_PARTITIONS", "4"),
            ("STRATA_BOOTSTRAP", "127.0.0.1:9092"),
            ("STRATA_BIN", "/x/strata"),
            ("STRATA_LOG", "debug"),
            ("STRATA_CONFIG", "s.toml"),
            ("STRATA_TEST_BROKER", "strata"),
            ("STRATA_SIM_SEED", "7"),
            ("STRATAX", "not ours"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let unknown = apply_env(&mut table, env.into_iter()).expect("apply");
        assert_eq!(unknown, vec!["STRATA_LOG_RETENTON_MS".to_string()]);
        assert_eq!(table.get("num_partitions"), Some(&toml::Value::Integer(4)));
    }

    /// Unknown keys in the file and malformed values are rejected with the key named.
    #[test]
    fn rejects_bad_input() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "no_such_key = 1\n").expect("write");
        let err = Config::load(Some(&path), std::iter::empty(), &Overrides::default());
        assert!(matches!(err, Err(ConfigError::Parse { .. })));
        let env = vec![("STRATA_NUM_PARTITIONS".to_string(), "x".to_string())];
        let err = Config::load(None, env.into_iter(), &Overrides::default());
        assert!(matches!(err, Err(ConfigError::Env { .. })));
    }

    /// `cpuset` and `pin_shards` come from `STRATA_*` and flags like the others; a malformed
    /// CPU list is refused at load with the setting named (whether its CPUs are usable is
    /// checked at start, `shard::cpus`).
    #[test]
    fn cpuset_and_pin_shards_settings() {
        let c = Config::load(None, std::iter::empty(), &Overrides::default()).expect("load");
        assert_eq!((c.cpuset_cpus().expect("cpus"), c.pin_shards), (None, true));
        let env = [("STRATA_CPUSET", "0-2,6"), ("STRATA_PIN_SHARDS", "false")]
            .map(|(k, v)| (k.to_string(), v.to_string()));
        let c = Config::load(None, env.into_iter(), &Overrides::default()).expect("load");
        assert_eq!(c.cpuset_cpus().expect("cpus"), Some(vec![0, 1, 2, 6]));
        assert!(!c.pin_shards);
        let flags = Overrides {
            cpuset: Some("3".into()),
            pin_shards: Some(false),
            ..Default::default()
        };
        let env = [("STRATA_CPUSET", "0-2")].map(|(k, v)| (k.to_string(), v.to_string()));
        let c = Config::load(None, env.into_iter(), &flags).expect("load");
        assert_eq!(c.cpuset_cpus().expect("cpus"), Some(vec![3]));
        assert!(!c.pin_shards);
        for bad in ["0-", "2-1", "x", "1,,2", "4096"] {
            let env = [("STRATA_CPUSET", bad)].map(|(k, v)| (k.to_string(), v.to_string()));
            match Config::load(None, env.into_iter(), &Overrides::default()) {
                Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, "cpuset", "{bad}"),
                other => panic!("{bad:?}: expected the cpuset refused, got {other:?}"),
            }
        }
        // `shards` is bounded (`SHARDS_MAX`); 0 (one per CPU) and the bound itself load.
        for (shards, ok) in [(0, true), (crate::limits::SHARDS_MAX, true)]
            .into_iter()
            .chain([(crate::limits::SHARDS_MAX + 1, false), (100_000, false)])
        {
            let flags = Overrides {
                shards: Some(shards),
                ..Default::default()
            };
            match Config::load(None, std::iter::empty(), &flags) {
                Ok(c) => assert!(ok && c.shards == shards, "{shards} loaded"),
                Err(ConfigError::Invalid { key, .. }) => {
                    assert!(!ok && key == "shards", "{shards}: {key}")
                }
                Err(other) => panic!("{shards}: {other:?}"),
            }
        }
    }

    /// Kafka's listener settings come from the file, `STRATA_*` and flags like the others;
    /// without them the broker keeps its single PLAINTEXT listener on `listen`; a bad
    /// listener list is refused at load with the setting named.
    #[test]
    fn listeners_settings() {
        use crate::security::SecurityProtocol;
        let c = Config::load(None, std::iter::empty(), &Overrides::default()).expect("load");
        let l = c.listeners().expect("listeners");
        assert_eq!(l.bound_text(), "PLAINTEXT://127.0.0.1:9092");
        assert_eq!(l.advertised_text(), "PLAINTEXT://127.0.0.1:9092");

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        std::fs::write(
            &path,
            "listeners = \"CLIENT://127.0.0.1:19093,PLAINTEXT://127.0.0.1:19092\"\n\
             listener_security_protocol_map = \"CLIENT:SASL_PLAINTEXT\"\n",
        )
        .expect("write");
        let env = vec![(
            "STRATA_ADVERTISED_LISTENERS".to_string(),
            "CLIENT://public.example:443,PLAINTEXT://127.0.0.1:19092".to_string(),
        )];
        let flags = Overrides {
            inter_broker_listener_name: Some("client".into()),
            ..Default::default()
        };
        let c = Config::load(Some(&path), env.into_iter(), &flags).expect("load");
        let l = c.listeners().expect("listeners");
        assert_eq!(l.bound.len(), 2);
        // (SASL_PLAINTEXT rather than SSL: an SSL listener also needs certificate files.)
        assert_eq!(
            l.bound[0].security_protocol,
            SecurityProtocol::SaslPlaintext
        );
        assert_eq!(l.bound[1].security_protocol, SecurityProtocol::Plaintext);
        assert_eq!(l.advertised[0].host, "public.example");
        assert_eq!(l.inter_broker, "CLIENT");
        let shown: BTreeMap<_, _> = c.static_broker_settings().into_iter().collect();
        assert_eq!(
            shown["listeners"],
            "CLIENT://127.0.0.1:19093,PLAINTEXT://127.0.0.1:19092"
        );
        assert_eq!(
            shown["listener.security.protocol.map"],
            "CLIENT:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT"
        );

        let env = vec![(
            "STRATA_LISTENERS".to_string(),
            "CLIENT://127.0.0.1:1".to_string(),
        )];
        let err = Config::load(None, env.into_iter(), &Overrides::default());
        assert!(
            matches!(&err, Err(ConfigError::Invalid { key, .. }) if key == "listeners"),
            "{err:?}"
        );
    }

    /// `authorizer` is off by default and `acl` turns it on with `super_users` (Kafka's `;`
    /// list) from the environment; a misspelt authorizer or a principal without a type is
    /// refused at load.
    #[test]
    fn authorizer_settings() {
        let c = Config::load(None, std::iter::empty(), &Overrides::default()).expect("load");
        assert!(c.acl_authorizer().expect("valid").is_none());
        let env = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
                .into_iter()
        };
        let c = Config::load(
            None,
            env(&[
                ("STRATA_AUTHORIZER", "acl"),
                ("STRATA_SUPER_USERS", "User:admin;User:bob"),
                ("STRATA_ALLOW_EVERYONE_IF_NO_ACL_FOUND", "true"),
            ]),
            &Overrides::default(),
        )
        .expect("load");
        let a = c.acl_authorizer().expect("valid").expect("on");
        assert!(a.is_super_user(&crate::security::KafkaPrincipal::user("bob")));
        assert!(a.allow_everyone_if_no_acl_found);
        for bad in [
            vec![("STRATA_AUTHORIZER", "kafka.security.Foo")],
            vec![
                ("STRATA_AUTHORIZER", "acl"),
                ("STRATA_SUPER_USERS", "admin"),
            ],
        ] {
            let err = Config::load(None, env(&bad), &Overrides::default());
            assert!(
                matches!(err, Err(ConfigError::Invalid { .. })),
                "{bad:?}: {err:?}"
            );
        }
    }

    /// A cluster whose inter-broker listener uses SASL needs the broker's credentials and
    /// a mechanism it can log in with; TLS needs a truststore. A single node needs neither.
    #[test]
    fn inter_broker_security_settings() {
        let load = |vars: &[(&str, &str)]| {
            let mut env = vec![
                ("STRATA_NODE_ID", "1"),
                ("STRATA_LISTENERS", "SASL_PLAINTEXT://127.0.0.1:19092"),
                ("STRATA_CONTROLLER_LISTEN", "127.0.0.1:19093"),
                (
                    "STRATA_CONTROLLER_VOTERS",
                    "1@127.0.0.1:19093,2@127.0.0.1:19094,3@127.0.0.1:19095",
                ),
            ];
            env.extend_from_slice(vars);
            let env = env.into_iter().map(|(k, v)| (k.to_string(), v.to_string()));
            Config::load(None, env, &Overrides::default())
        };
        let refused = |vars: &[(&str, &str)], setting: &str| {
            let err = load(vars);
            assert!(
                matches!(&err, Err(ConfigError::Invalid { key, .. }) if key == setting),
                "{vars:?}: {err:?}"
            );
        };
        refused(&[], "inter_broker_sasl_username");
        refused(
            &[("STRATA_INTER_BROKER_SASL_USERNAME", "broker")],
            "inter_broker_sasl_password",
        );
        let creds = [
            ("STRATA_INTER_BROKER_SASL_USERNAME", "broker"),
            ("STRATA_INTER_BROKER_SASL_PASSWORD", "s3cret"),
        ];
        let c = load(&creds).expect("SASL_PLAINTEXT between brokers with credentials");
        assert_eq!(
            c.inter_broker_sasl_mechanism(),
            Ok(crate::security::sasl::Mechanism::Plain)
        );
        let with = |extra: (&'static str, &'static str)| {
            let mut v = creds.to_vec();
            v.push(extra);
            v
        };
        let scram = with((
            "STRATA_SASL_MECHANISM_INTER_BROKER_PROTOCOL",
            "SCRAM-SHA-512",
        ));
        load(&scram).expect("SCRAM-SHA-512");
        refused(
            &with(("STRATA_SASL_MECHANISM_INTER_BROKER_PROTOCOL", "OAUTHBEARER")),
            "sasl_mechanism_inter_broker_protocol",
        );
        let mut not_enabled = scram.clone();
        not_enabled.push(("STRATA_SASL_ENABLED_MECHANISMS", "PLAIN"));
        refused(&not_enabled, "sasl_mechanism_inter_broker_protocol");
        // TLS between brokers: the other brokers' certificates need a truststore.
        let mut tls = creds.to_vec();
        tls.extend([
            ("STRATA_LISTENERS", "SASL_SSL://127.0.0.1:19092"),
            ("STRATA_SSL_CERTIFICATE_LOCATION", "/x/broker.pem"),
            ("STRATA_SSL_KEY_LOCATION", "/x/broker.key"),
        ]);
        refused(&tls, "ssl_truststore_location");
        tls.push(("STRATA_SSL_TRUSTSTORE_LOCATION", "/x/ca.pem"));
        load(&tls).expect("SASL_SSL between brokers");
        // The controller quorum's port: PLAINTEXT by default; secured, it needs what its
        // protocol needs, and PLAIN as the mechanism.
        let mut ctl = tls.clone();
        ctl.push(("STRATA_CONTROLLER_LISTENER_SECURITY_PROTOCOL", "SASL_SSL"));
        refused(&ctl, "sasl_plain_users");
        ctl.push(("STRATA_SASL_PLAIN_USERS", "broker:s3cret"));
        let c = load(&ctl).expect("SASL_SSL controller listener");
        assert_eq!(
            c.controller_security_protocol(),
            Ok(crate::security::SecurityProtocol::SaslSsl)
        );
        let mut scram = ctl.clone();
        scram.push(("STRATA_SASL_MECHANISM_CONTROLLER_PROTOCOL", "SCRAM-SHA-256"));
        refused(&scram, "sasl_mechanism_controller_protocol");
        let mut bad = creds.to_vec();
        bad.push(("STRATA_CONTROLLER_LISTENER_SECURITY_PROTOCOL", "TLS"));
        refused(&bad, "controller_listener_security_protocol");
        let mut ssl = creds.to_vec();
        ssl.push(("STRATA_CONTROLLER_LISTENER_SECURITY_PROTOCOL", "SSL"));
        refused(&ssl, "ssl_certificate_location");
        // A single node has no peers: no credentials needed.
        let env = [("STRATA_LISTENERS", "SASL_PLAINTEXT://127.0.0.1:19092")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()));
        Config::load(None, env, &Overrides::default()).expect("single node");
    }

    /// The documented config file parses and matches the built-in defaults.
    #[test]
    fn documented_file_matches_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/strata.toml");
        let c = Config::load(Some(&path), std::iter::empty(), &Overrides::default()).expect("load");
        let d = Config::default();
        assert_eq!(toml::to_string(&c).ok(), toml::to_string(&d).ok());
    }
}
