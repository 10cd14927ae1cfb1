//! Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
//! IncrementalAlterConfigs. Each per-topic error code in a response becomes a typed error.

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    DescribeLogDirsRequest, IncrementalAlterConfigsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use std::time::{Duration, Instant};

use super::error::{check_code, ClientError, Result};
use super::{str_of, Client, OffsetSpec, TopicInfo};

/// Pause between readiness probes of a new topic.
const TOPIC_READY_POLL: Duration = Duration::from_millis(100);

/// Kafka's resource type for a topic in config APIs.
const RESOURCE_TYPE_TOPIC: i8 = 2;
/// IncrementalAlterConfigs operations.
const CONFIG_OP_SET: i8 = 0;
const CONFIG_OP_DELETE: i8 = 1;
/// How long the broker may take to finish an admin operation.
const ADMIN_TIMEOUT_MS: i32 = 30_000;

/// A compacted partition's cleaner state, as its leader reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanerInfo {
    pub partition: i32,
    /// cleanable bytes / (clean + cleanable bytes).
    pub dirty_ratio: f64,
    /// Where the cleaner's last pass ended; `None` before the first pass.
    pub checkpoint: Option<i64>,
}

/// Where a config value comes from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    Unknown,
    DynamicTopic,
    DynamicBroker,
    DynamicDefaultBroker,
    StaticBroker,
    Default,
    Other(i8),
}

impl ConfigSource {
    fn from_code(code: i8) -> Self {
        match code {
            0 => ConfigSource::Unknown,
            1 => ConfigSource::DynamicTopic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            n => ConfigSource::Other(n),
        }
    }
}

/// One config of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
    pub read_only: bool,
    pub sensitive: bool,
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

fn opt_string(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(str_of)
}

impl Client {
    /// Creates `name` with `partitions` partitions, `replication_factor` replicas each, and
    /// the given topic configs.
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(String, String)],
    ) -> Result<()> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<CreateTopicsRequest>(None)?;
        let topic = CreatableTopic::default()
            .with_name(topic_name(name))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.clone()))
                            .with_value(Some(StrBytes::from_string(v.clone())))
                    })
                    .collect(),
            );
        let request = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(ADMIN_TIMEOUT_MS);
        let response = conn.send(&request, version)?;
        for result in &response.topics {
            check_code(result.error_code, opt_string(&result.error_message), || {
                format!("create topic {name:?}")
            })?;
        }
        self.topics.remove(name);
        Ok(())
    }

    /// Waits until every partition of a just-created topic has a leader that answers for it
    /// (at most `timeout`). CreateTopics answers once the controller committed
    /// the topic; the brokers learn of it, and the leaders take over, a moment later (Kafka
    /// too: Produce gets NOT_LEADER_OR_FOLLOWER for a while), so metadata alone is not
    /// enough: a ListOffsets to each leader goes through the same leadership check as
    /// Produce. `strata topic create` and `strata bench` wait so that the next command
    /// finds the topic ready.
    pub fn wait_until_led(&mut self, name: &str, timeout: Duration) -> Result<TopicInfo> {
        let started = Instant::now();
        loop {
            let last = match self.refresh_topic(name) {
                Ok(topic) if topic.partitions.iter().all(|p| p.leader >= 0) => {
                    let specs: Vec<(i32, OffsetSpec)> = topic
                        .partitions
                        .iter()
                        .map(|p| (p.partition, OffsetSpec::Latest))
                        .collect();
                    match self.list_offsets(name, &specs) {
                        Ok(_) => return Ok(topic),
                        Err(e) => e.to_string(),
                    }
                }
                Ok(_) => "a partition has no leader".to_owned(),
                // The broker asked may not know the topic yet.
                Err(e @ ClientError::UnknownTopic { .. }) => e.to_string(),
                Err(e) => return Err(e),
            };
            if started.elapsed() >= timeout {
                return Err(ClientError::NotLed {
                    topic: name.to_owned(),
                    waited_ms: started.elapsed().as_millis(),
                    last,
                });
            }
            self.invalidate_metadata();
            std::thread::sleep(TOPIC_READY_POLL);
        }
    }

    /// Deletes topic `name`.
    pub fn delete_topic(&mut self, name: &str) -> Result<()> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<DeleteTopicsRequest>(None)?;
        // v6 names topics through `topics` (name or id); older versions through `topic_names`.
        let request = if version >= 6 {
            DeleteTopicsRequest::default().with_topics(vec![
                DeleteTopicState::default().with_name(Some(topic_name(name)))
            ])
        } else {
            DeleteTopicsRequest::default().with_topic_names(vec![topic_name(name)])
        }
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
        let response = conn.send(&request, version)?;
        for result in &response.responses {
            check_code(result.error_code, opt_string(&result.error_message), || {
                format!("delete topic {name:?}")
            })?;
        }
        self.topics.remove(name);
        Ok(())
    }

    /// Grows topic `name` to `count` partitions in total.
    pub fn create_partitions(&mut self, name: &str, count: i32) -> Result<()> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<CreatePartitionsRequest>(None)?;
        let request = CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(topic_name(name))
                .with_count(count)
                .with_assignments(None)])
            .with_timeout_ms(ADMIN_TIMEOUT_MS);
        let response = conn.send(&request, version)?;
        for result in &response.results {
            check_code(result.error_code, opt_string(&result.error_message), || {
                format!("create partitions of {name:?}")
            })?;
        }
        self.topics.remove(name);
        Ok(())
    }

    /// All configs of topic `name`, as the broker reports them.
    pub fn describe_topic_configs(&mut self, name: &str) -> Result<Vec<ConfigEntry>> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<DescribeConfigsRequest>(None)?;
        let request = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(RESOURCE_TYPE_TOPIC)
                .with_resource_name(StrBytes::from_string(name.to_owned()))
                .with_configuration_keys(None),
        ]);
        let response = conn.send(&request, version)?;
        let mut entries = Vec::new();
        for result in response.results {
            check_code(result.error_code, opt_string(&result.error_message), || {
                format!("describe configs of {name:?}")
            })?;
            for c in result.configs {
                entries.push(ConfigEntry {
                    name: str_of(&c.name),
                    value: opt_string(&c.value),
                    source: ConfigSource::from_code(c.config_source),
                    read_only: c.read_only,
                    sensitive: c.is_sensitive,
                });
            }
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// The cleaner state of each of `partitions` of topic `name` that is compacted, as its
    /// leader reports it (DescribeLogDirs with Strata's tagged fields; see
    /// `protocol::DIRTY_RATIO_TAG`). A broker that does not send them gives no entry.
    pub fn describe_cleaner(&mut self, name: &str, partitions: &[i32]) -> Result<Vec<CleanerInfo>> {
        let groups = self.group_by_leader(name, partitions.iter().copied())?;
        let mut out = Vec::new();
        for (leader, partitions) in groups {
            let conn = self.broker(leader)?;
            let version = conn.version_for::<DescribeLogDirsRequest>(None)?;
            // The tagged fields exist from v2.
            if version < 2 {
                continue;
            }
            let request = DescribeLogDirsRequest::default().with_topics(Some(vec![
                DescribableLogDirTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(name.to_owned())))
                    .with_partitions(partitions),
            ]));
            let response = conn.send(&request, version)?;
            for dir in response.results {
                for t in dir.topics.iter().filter(|t| t.name.0.as_str() == name) {
                    for p in &t.partitions {
                        let tag = |n| {
                            p.unknown_tagged_fields
                                .get(&n)
                                .and_then(|b| crate::protocol::decode_tag_8(b))
                        };
                        if let Some(ratio) = tag(crate::protocol::DIRTY_RATIO_TAG) {
                            out.push(CleanerInfo {
                                partition: p.partition_index,
                                dirty_ratio: f64::from_be_bytes(ratio),
                                checkpoint: tag(crate::protocol::CLEANER_CHECKPOINT_TAG)
                                    .map(i64::from_be_bytes),
                            });
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Sets `set` and removes `delete` from topic `name`'s configs, leaving the rest alone.
    pub fn alter_topic_configs(
        &mut self,
        name: &str,
        set: &[(String, String)],
        delete: &[String],
    ) -> Result<()> {
        let conn = self.admin_connection()?;
        let version = conn.version_for::<IncrementalAlterConfigsRequest>(None)?;
        let configs = set
            .iter()
            .map(|(k, v)| {
                AlterableConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_config_operation(CONFIG_OP_SET)
                    .with_value(Some(StrBytes::from_string(v.clone())))
            })
            .chain(delete.iter().map(|k| {
                AlterableConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_config_operation(CONFIG_OP_DELETE)
                    .with_value(None)
            }))
            .collect();
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(RESOURCE_TYPE_TOPIC)
                .with_resource_name(StrBytes::from_string(name.to_owned()))
                .with_configs(configs),
        ]);
        let response = conn.send(&request, version)?;
        for result in &response.responses {
            check_code(result.error_code, opt_string(&result.error_message), || {
                format!("alter configs of {name:?}")
            })?;
        }
        Ok(())
    }

    /// Every topic in the cluster (internal ones included), sorted by name.
    pub fn list_topics(&mut self) -> Result<Vec<super::TopicInfo>> {
        Ok(self.metadata(None)?.topics)
    }
}
