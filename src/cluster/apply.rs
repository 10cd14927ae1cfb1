//! Replaying metadata records onto the catalog.
//!
//! `Catalog::apply` runs on every node for every committed record, in log order, so it is a
//! pure function of (catalog, record): no clock, no randomness, no I/O. It never panics on
//! a record that does not fit the catalog (a partition index out of range, a topic that is
//! gone): such a record changes nothing, the same way on every node, so replicas stay equal.
use std::sync::Arc;

use crate::cluster::catalog::{BrokerMeta, Catalog, TopicMeta};
use crate::cluster::records::MetadataRecord;
use crate::security::acl::Acls;
use crate::security::quota::ClientQuotas;

impl Catalog {
    /// Applies one committed record. Keeps the derived topic-id index current.
    pub fn apply(&mut self, rec: &MetadataRecord) {
        match rec {
            MetadataRecord::RegisterBroker {
                node_id,
                host,
                port,
                listeners,
                rack,
                shards,
            } => {
                // Kafka registers a broker fenced; its first heartbeat unfences it.
                self.brokers.insert(
                    *node_id,
                    BrokerMeta {
                        node_id: *node_id,
                        host: host.clone(),
                        port: *port,
                        listeners: listeners.clone(),
                        rack: rack.clone(),
                        shards: *shards,
                        fenced: true,
                    },
                );
            }
            MetadataRecord::FenceBroker { node_id } => {
                if let Some(b) = self.brokers.get_mut(node_id) {
                    b.fenced = true;
                }
            }
            MetadataRecord::UnfenceBroker { node_id } => {
                if let Some(b) = self.brokers.get_mut(node_id) {
                    b.fenced = false;
                }
            }
            MetadataRecord::UnregisterBroker { node_id } => {
                self.brokers.remove(node_id);
            }
            MetadataRecord::Topic {
                name,
                id,
                partitions,
                configs,
            } => {
                let topic = Arc::new(TopicMeta {
                    name: name.clone(),
                    id: *id,
                    partitions: partitions.clone(),
                    configs: configs.clone(),
                });
                if let Some(old) = self.topics.insert(name.clone(), topic) {
                    self.unindex_topic(old.id);
                }
                self.index_topic(*id, name);
            }
            MetadataRecord::RemoveTopic { name } => {
                if let Some(old) = self.topics.remove(name) {
                    self.unindex_topic(old.id);
                }
            }
            MetadataRecord::AddPartitions { name, partitions } => {
                if let Some(t) = self.topics.get_mut(name) {
                    Arc::make_mut(t)
                        .partitions
                        .extend(partitions.iter().cloned());
                }
            }
            MetadataRecord::PartitionChange {
                topic,
                partition,
                state,
            } => {
                let Ok(index) = usize::try_from(*partition) else {
                    return;
                };
                if let Some(t) = self.topics.get_mut(topic) {
                    if index < t.partitions.len() {
                        if let Some(p) = Arc::make_mut(t).partitions.get_mut(index) {
                            *p = state.clone();
                        }
                    }
                }
            }
            MetadataRecord::TopicConfig { name, configs } => {
                if let Some(t) = self.topics.get_mut(name) {
                    Arc::make_mut(t).configs = configs.clone();
                }
            }
            MetadataRecord::BrokerConfigs { configs } => {
                self.broker_configs = configs.clone();
            }
            MetadataRecord::ProducerIds { block_end } => {
                // Never moves back: ids below the old end may already be in use.
                self.producer_id_block_end = self.producer_id_block_end.max(*block_end);
            }
            MetadataRecord::ClusterId { id } => {
                self.cluster_id = id.clone();
            }
            MetadataRecord::UserScramCredential {
                name,
                mechanism,
                credential,
            } => {
                self.scram_credentials
                    .entry(name.clone())
                    .or_default()
                    .insert(*mechanism, credential.clone());
            }
            MetadataRecord::ClientQuota { entity, key, value } => {
                // A new Arc: connections holding the old one see the change by pointer.
                let mut quotas = ClientQuotas::clone(&self.client_quotas);
                quotas.apply(entity, key, *value);
                self.client_quotas = Arc::new(quotas);
            }
            MetadataRecord::AccessControlEntry { binding } => {
                if !self.acls.contains(binding) {
                    // A new Arc, as for quotas: requests holding the old image keep it whole.
                    let mut acls = Acls::clone(&self.acls);
                    acls.insert(binding.clone());
                    self.acls = Arc::new(acls);
                }
            }
            MetadataRecord::RemoveAccessControlEntry { binding } => {
                if self.acls.contains(binding) {
                    let mut acls = Acls::clone(&self.acls);
                    acls.remove(binding);
                    self.acls = Arc::new(acls);
                }
            }
            MetadataRecord::RemoveUserScramCredential { name, mechanism } => {
                if let Some(user) = self.scram_credentials.get_mut(name) {
                    user.remove(mechanism);
                    if user.is_empty() {
                        self.scram_credentials.remove(name);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::security::sasl::{ScramCredential, ScramMechanism};

    /// SCRAM credential records set and remove one mechanism of a user at a time; a user
    /// with none left disappears; removing what is not there changes nothing; and the
    /// catalog keeps them through its JSON form (snapshots), mechanism keys included.
    #[test]
    fn scram_credentials_apply_and_survive_serialisation() {
        let cred = |i| ScramCredential {
            salt: vec![i],
            stored_key: vec![i, 1],
            server_key: vec![i, 2],
            iterations: 4096,
        };
        let mut c = Catalog::default();
        for (m, i) in [(ScramMechanism::Sha256, 1), (ScramMechanism::Sha512, 2)] {
            c.apply(&MetadataRecord::UserScramCredential {
                name: "alice".into(),
                mechanism: m,
                credential: cred(i),
            });
        }
        assert_eq!(
            c.scram_credential("alice", ScramMechanism::Sha512),
            Some(&cred(2))
        );
        let json = serde_json::to_vec(&c).unwrap();
        let back: Catalog = serde_json::from_slice(&json).unwrap();
        assert_eq!(back.scram_credentials, c.scram_credentials);
        c.apply(&MetadataRecord::RemoveUserScramCredential {
            name: "alice".into(),
            mechanism: ScramMechanism::Sha256,
        });
        assert_eq!(c.scram_credential("alice", ScramMechanism::Sha256), None);
        assert!(c
            .scram_credential("alice", ScramMechanism::Sha512)
            .is_some());
        c.apply(&MetadataRecord::RemoveUserScramCredential {
            name: "bob".into(),
            mechanism: ScramMechanism::Sha256,
        });
        c.apply(&MetadataRecord::RemoveUserScramCredential {
            name: "alice".into(),
            mechanism: ScramMechanism::Sha512,
        });
        assert!(c.scram_credentials.is_empty());
    }

    /// ACL records add and remove bindings (a repeat changes nothing, and leaves the same
    /// `Arc`, so holders of the image can tell by pointer), and the catalog keeps them
    /// through its JSON form with a working index.
    #[test]
    fn acl_records_apply_and_survive_serialisation() {
        use crate::security::acl::{AclBinding, AclOperation, Authorizer, ResourceType};
        use crate::security::KafkaPrincipal;
        let b = AclBinding::from_wire(2, "pay-", 4, "User:alice", "*", 3, 3).unwrap();
        let mut c = Catalog::default();
        c.apply(&MetadataRecord::AccessControlEntry { binding: b.clone() });
        let first = c.acls.clone();
        c.apply(&MetadataRecord::AccessControlEntry { binding: b.clone() });
        assert!(Arc::ptr_eq(&first, &c.acls));
        let back: Catalog = serde_json::from_slice(&serde_json::to_vec(&c).unwrap()).unwrap();
        let a = Authorizer::new("", false).unwrap();
        let alice = KafkaPrincipal::user("alice");
        assert!(a.authorize(
            &back.acls,
            &alice,
            "h",
            AclOperation::Read,
            ResourceType::Topic,
            "pay-1"
        ));
        c.apply(&MetadataRecord::RemoveAccessControlEntry { binding: b });
        assert!(c.acls.is_empty());
        assert!(!a.authorize(
            &c.acls,
            &alice,
            "h",
            AclOperation::Read,
            ResourceType::Topic,
            "pay-1"
        ));
    }
}
