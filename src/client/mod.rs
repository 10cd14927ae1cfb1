//! A small, synchronous Kafka client: the one the command line and `strata bench` use.
//!
//! It speaks only the Kafka wire protocol (through kafka-protocol's codecs), so it works against
//! any Kafka-compatible broker, not only Strata. Blocking `std::net::TcpStream`s with connect and
//! read timeouts; one connection per broker id, opened on first use; requests on a connection are
//! strictly sequential.
//!
//! Shape:
//! - [`Client::connect`] tries the bootstrap addresses in order and negotiates API versions.
//! - Metadata is fetched on demand and cached per topic; partition requests (Produce, Fetch,
//!   ListOffsets) are grouped by the partition leader and sent to that broker.
//! - Admin requests go to the controller when the metadata names one, else to the bootstrap
//!   broker (KRaft brokers forward them).
//!
//! Faults: every byte from the network is decoded with bounds checks (no `unwrap` on network
//! data); a response larger than [`RESPONSE_BYTES_MAX`] is refused before allocation; broker
//! error codes become [`ClientError::Broker`] with Kafka's error name.

mod acl;
mod admin;
mod cluster;
mod connection;
pub mod error;
mod fetch;
pub mod group;
pub mod partitioner;
mod produce;
mod quota;
pub mod records;
mod scram;
mod txn;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

pub use admin::{CleanerInfo, ConfigEntry, ConfigSource};
pub use cluster::{OngoingReassignment, PartitionOutcome, ReassignmentTarget};
pub use connection::{Connection, SaslLogin, Timeouts};
pub use error::{error_code_name, ClientError, Result};
pub use fetch::{FetchOptions, FetchedPartition, OffsetSpec};
pub use group::{CommittedOffset, GroupDescription, GroupListing, GroupMember};
pub use kafka_protocol::records::Compression;
pub use produce::{Acks, PartitionAck, ProduceOptions};
pub use quota::{QuotaEntityParts, QuotaEntry, QuotaMatch};
pub use records::{ConsumedRecord, ProduceRecord};
pub use scram::ScramUser;
pub use txn::{ProducerInfo, TxnInfo, TxnListing};

/// Largest response frame the client accepts. Fetch responses are the big ones; this leaves
/// room above [`FETCH_RESPONSE_BYTES_DEFAULT`] for framing and several partitions.
pub const RESPONSE_BYTES_MAX: usize = 128 * 1024 * 1024;
/// Largest request frame the client sends (Kafka's `socket.request.max.bytes` default).
pub const REQUEST_BYTES_MAX: usize = 100 * 1024 * 1024;
/// Default `max_bytes` of a Fetch (Kafka's `fetch.max.bytes` default).
pub const FETCH_RESPONSE_BYTES_DEFAULT: i32 = 50 * 1024 * 1024;
/// Default `partition_max_bytes` of a Fetch (Kafka's `max.partition.fetch.bytes` default).
pub const FETCH_PARTITION_BYTES_DEFAULT: i32 = 1024 * 1024;
/// How many times to re-read metadata while a new topic's leaders are being elected.
pub const METADATA_ATTEMPTS_MAX: u32 = 20;
/// Pause between those metadata reads.
pub const METADATA_RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// Default bootstrap address, as `--bootstrap` documents it.
pub const BOOTSTRAP_DEFAULT: &str = "127.0.0.1:9092";

const _: () = assert!(FETCH_RESPONSE_BYTES_DEFAULT as usize + 1024 * 1024 <= RESPONSE_BYTES_MAX);
const _: () = assert!(FETCH_PARTITION_BYTES_DEFAULT <= FETCH_RESPONSE_BYTES_DEFAULT);

/// Highest Metadata version used: v13 adds nothing we read.
const METADATA_VERSION_CAP: i16 = 12;

/// How to reach the cluster.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// HOST:PORT addresses, tried in order until one answers.
    pub bootstrap: Vec<String>,
    pub client_id: String,
    pub timeouts: Timeouts,
    /// TLS, for an SSL or SASL_SSL listener: every connection is wrapped in it.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// SASL credentials, for a SASL_PLAINTEXT or SASL_SSL listener: every connection
    /// authenticates first (inside TLS when there is TLS).
    pub sasl: Option<connection::SaslLogin>,
}

impl ClientConfig {
    /// Parses `HOST:PORT[,HOST:PORT...]`.
    pub fn from_bootstrap(list: &str) -> Result<ClientConfig> {
        let bootstrap: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let valid = |a: &String| {
            a.rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        };
        if bootstrap.is_empty() || !bootstrap.iter().all(valid) {
            return Err(ClientError::InvalidBootstrap {
                addr: list.to_owned(),
            });
        }
        Ok(ClientConfig {
            bootstrap,
            client_id: "strata-cli".to_owned(),
            timeouts: Timeouts::default(),
            tls: None,
            sasl: None,
        })
    }
}

/// A broker as the metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerInfo {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition in the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    /// -1 when there is no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline_replicas: Vec<i32>,
    /// Why replicas are offline, when a Strata broker says (node id -> reason).
    pub offline_reasons: BTreeMap<i32, String>,
    pub error_code: i16,
}

/// One topic in the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: uuid::Uuid,
    pub is_internal: bool,
    pub error_code: i16,
    /// Sorted by partition id.
    pub partitions: Vec<PartitionInfo>,
}

/// A snapshot of the cluster metadata.
#[derive(Debug, Clone, Default)]
pub struct ClusterMetadata {
    pub cluster_id: Option<String>,
    pub controller_id: i32,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: Vec<TopicInfo>,
}

/// The client. Not thread-safe by design (`&mut self` everywhere); make one per thread.
pub struct Client {
    config: ClientConfig,
    /// The connection to whichever bootstrap address answered; used for metadata and admin.
    bootstrap: Connection,
    brokers: BTreeMap<i32, BrokerInfo>,
    controller_id: i32,
    connections: HashMap<i32, Connection>,
    topics: HashMap<String, TopicInfo>,
    /// Whether metadata requests ask the broker to create missing topics (Kafka's producers
    /// do; admin and consumer commands must not create what they only look at).
    auto_create_topics: bool,
}

impl Client {
    /// Connects to the first bootstrap address that answers.
    pub fn connect(config: ClientConfig) -> Result<Client> {
        let mut last_err = None;
        for addr in &config.bootstrap {
            let connected = Connection::connect(
                addr,
                &config.client_id,
                config.timeouts,
                config.tls.as_ref(),
            )
            .and_then(|mut c| match &config.sasl {
                Some(login) => c.authenticate(login).map(|()| c),
                None => Ok(c),
            });
            match connected {
                Ok(bootstrap) => {
                    return Ok(Client {
                        config,
                        bootstrap,
                        brokers: BTreeMap::new(),
                        controller_id: -1,
                        connections: HashMap::new(),
                        topics: HashMap::new(),
                        auto_create_topics: false,
                    })
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or(ClientError::InvalidBootstrap {
            addr: String::new(),
        }))
    }

    /// Asks the broker to create missing topics on metadata lookups, as a Kafka producer does
    /// (the broker decides, by its `auto.create.topics.enable`).
    pub fn set_auto_create_topics(&mut self, on: bool) {
        self.auto_create_topics = on;
    }

    /// Shorthand: parse `HOST:PORT[,...]` and connect.
    pub fn connect_bootstrap(list: &str) -> Result<Client> {
        Client::connect(ClientConfig::from_bootstrap(list)?)
    }

    /// Reads metadata for `topics` (all topics when `None`) and refreshes the caches.
    pub fn metadata(&mut self, topics: Option<&[String]>) -> Result<ClusterMetadata> {
        let version = self
            .bootstrap
            .version_for::<MetadataRequest>(Some(METADATA_VERSION_CAP))?;
        let request = MetadataRequest::default()
            .with_topics(topics.map(|names| {
                names
                    .iter()
                    .map(|n| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(self.auto_create_topics);
        let response = self.bootstrap.send(&request, version)?;
        let metadata = convert_metadata(response);
        self.brokers = metadata.brokers.clone();
        self.controller_id = metadata.controller_id;
        for topic in &metadata.topics {
            if topic.error_code == 0 {
                self.topics.insert(topic.name.clone(), topic.clone());
            } else {
                self.topics.remove(&topic.name);
            }
        }
        Ok(metadata)
    }

    /// Metadata of one topic, from the cache or the broker; waits (bounded) while a fresh
    /// topic's partitions have no leader yet.
    pub fn topic(&mut self, name: &str) -> Result<TopicInfo> {
        if let Some(t) = self.topics.get(name) {
            return Ok(t.clone());
        }
        self.refresh_topic(name)
    }

    /// Like [`topic`](Self::topic) but always asks the broker.
    pub fn refresh_topic(&mut self, name: &str) -> Result<TopicInfo> {
        let names = [name.to_owned()];
        for attempt in 1..=METADATA_ATTEMPTS_MAX {
            let metadata = self.metadata(Some(&names))?;
            let topic = metadata
                .topics
                .into_iter()
                .find(|t| t.name == name)
                .ok_or_else(|| ClientError::UnknownTopic {
                    topic: name.to_owned(),
                })?;
            let settling = topic.error_code == 5 // LEADER_NOT_AVAILABLE
                || topic.partitions.is_empty()
                || topic.partitions.iter().any(|p| p.leader < 0);
            match topic.error_code {
                3 => {
                    return Err(ClientError::UnknownTopic {
                        topic: name.to_owned(),
                    })
                }
                0 | 5 if settling && attempt < METADATA_ATTEMPTS_MAX => {
                    std::thread::sleep(METADATA_RETRY_BACKOFF);
                }
                0 => return Ok(topic),
                code => {
                    return Err(ClientError::Broker {
                        context: format!("metadata of topic {name:?}"),
                        code,
                        message: None,
                    })
                }
            }
        }
        Err(ClientError::NoLeader {
            topic: name.to_owned(),
            partition: -1,
        })
    }

    /// Forgets cached metadata (after a NOT_LEADER error, a topic deletion, ...).
    pub fn invalidate_metadata(&mut self) {
        self.topics.clear();
    }

    /// Groups `partitions` of `topic` by their leader's node id.
    fn group_by_leader(
        &mut self,
        topic: &str,
        partitions: impl IntoIterator<Item = i32>,
    ) -> Result<BTreeMap<i32, Vec<i32>>> {
        let info = self.topic(topic)?;
        let mut groups: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for partition in partitions {
            let p = info
                .partitions
                .iter()
                .find(|p| p.partition == partition)
                .ok_or_else(|| ClientError::UnknownPartition {
                    topic: topic.to_owned(),
                    partition,
                    count: info.partitions.len(),
                })?;
            if p.leader < 0 {
                return Err(ClientError::NoLeader {
                    topic: topic.to_owned(),
                    partition,
                });
            }
            groups.entry(p.leader).or_default().push(partition);
        }
        Ok(groups)
    }

    /// The connection to broker `node_id`, opened on first use.
    pub fn broker(&mut self, node_id: i32) -> Result<&mut Connection> {
        if !self.connections.contains_key(&node_id) {
            let info = self
                .brokers
                .get(&node_id)
                .ok_or(ClientError::UnknownBroker { node_id })?;
            let mut conn = Connection::connect(
                &info.addr(),
                &self.config.client_id,
                self.config.timeouts,
                self.config.tls.as_ref(),
            )?;
            if let Some(login) = &self.config.sasl {
                conn.authenticate(login)?;
            }
            self.connections.insert(node_id, conn);
        }
        self.connections
            .get_mut(&node_id)
            .ok_or(ClientError::UnknownBroker { node_id })
    }

    /// Drops the connection to a broker after an I/O error, so the next call reconnects.
    fn drop_broker(&mut self, node_id: i32) {
        self.connections.remove(&node_id);
    }

    /// The connection admin requests go to: the controller if known and reachable, else the
    /// bootstrap broker.
    fn admin_connection(&mut self) -> Result<&mut Connection> {
        if self.brokers.is_empty() {
            self.metadata(Some(&[]))?;
        }
        let controller = self.controller_id;
        if controller >= 0
            && self.brokers.contains_key(&controller)
            && self.broker(controller).is_ok()
        {
            return self.broker(controller);
        }
        Ok(&mut self.bootstrap)
    }
}

fn str_of(s: &StrBytes) -> String {
    s.as_str().to_owned()
}

fn convert_metadata(response: MetadataResponse) -> ClusterMetadata {
    let brokers = response
        .brokers
        .iter()
        .map(|b| {
            (
                b.node_id.0,
                BrokerInfo {
                    node_id: b.node_id.0,
                    host: str_of(&b.host),
                    port: b.port,
                    rack: b.rack.as_ref().map(str_of),
                },
            )
        })
        .collect();
    let mut topics: Vec<TopicInfo> = response
        .topics
        .into_iter()
        .map(|t| {
            let mut partitions: Vec<PartitionInfo> = t
                .partitions
                .into_iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    offline_replicas: p.offline_replicas.iter().map(|b| b.0).collect(),
                    offline_reasons: p
                        .unknown_tagged_fields
                        .get(&crate::protocol::OFFLINE_REASONS_TAG)
                        .map(|b| crate::protocol::decode_offline_reasons(b))
                        .unwrap_or_default(),
                    error_code: p.error_code,
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            TopicInfo {
                name: t.name.as_ref().map(|n| str_of(&n.0)).unwrap_or_default(),
                topic_id: t.topic_id,
                is_internal: t.is_internal,
                error_code: t.error_code,
                partitions,
            }
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    ClusterMetadata {
        cluster_id: response.cluster_id.as_ref().map(str_of),
        controller_id: response.controller_id.0,
        brokers,
        topics,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_lists_parse_and_reject_garbage() {
        // Proves HOST:PORT lists parse (spaces, several hosts) and bad ones are refused.
        let cfg = ClientConfig::from_bootstrap("127.0.0.1:9092, localhost:19092").expect("ok");
        assert_eq!(cfg.bootstrap, vec!["127.0.0.1:9092", "localhost:19092"]);
        for bad in ["", "localhost", "host:notaport", ":9092", "h:70000"] {
            assert!(ClientConfig::from_bootstrap(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn unreachable_broker_error_says_what_to_do() {
        // Proves connecting to a closed port yields the friendly connection-refused message.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let err = Client::connect_bootstrap(&addr).err().expect("must fail");
        assert_eq!(
            err.to_string(),
            format!("cannot connect to {addr}: connection refused — is `strata serve` running?")
        );
    }
}
