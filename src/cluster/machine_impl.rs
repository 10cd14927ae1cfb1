//! `ControllerMachine`: the catalog and the controller behind the metadata log.
//!
//! Every node applies committed records to its own catalog and publishes the result to the
//! shards through the `CatalogStore` (without the catalog file: the log persists). On the
//! active controller the same catalog is the state requests are decided against, so a
//! decision always sees every record applied before it.
//!
//! Entries and requests are bytes from the log and the network: an undecodable one is
//! refused or skipped — the same way on every node — and never panics.
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cluster::catalog::{Catalog, CatalogStore};
use crate::cluster::controller::{Controller, ControllerRequest, ControllerResponse, Status};
use crate::cluster::machine::MetadataMachine;
use crate::cluster::records::MetadataRecord;
use crate::protocol::error::ErrorCode;

/// What a snapshot holds: the applied catalog and the log index it reflects. The
/// controller's own state (heartbeat clocks) is deliberately not in it: it is rebuilt by a
/// new active controller, which gives every broker a fresh session.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    applied_index: u64,
    catalog: Catalog,
}

pub struct ControllerMachine {
    catalog: Catalog,
    controller: Controller,
    store: Arc<CatalogStore>,
    applied_index: u64,
    /// The index a restored snapshot covers: entries up to it are in the catalog already.
    restored_index: u64,
}

impl ControllerMachine {
    /// Starts from an empty catalog: the log (or a snapshot) rebuilds it. Nothing is
    /// published until the first record or snapshot is applied.
    pub fn new(controller: Controller, store: Arc<CatalogStore>) -> Self {
        let mut catalog = Catalog::default();
        catalog.local_node = store.load().local_node;
        Self {
            catalog,
            controller,
            store,
            applied_index: 0,
            restored_index: 0,
        }
    }

    /// The catalog as of the last applied entry.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    pub fn controller(&self) -> &Controller {
        &self.controller
    }
}

impl MetadataMachine for ControllerMachine {
    fn apply(&mut self, index: u64, entry: &[u8]) {
        // An entry the restored snapshot covers, or older than one applied, is in the
        // catalog already; applying it again would repeat non-idempotent records such as
        // AddPartitions. Several records of one request share their raft entry's index, so
        // an index equal to the last applied one is the next record of the same entry.
        if index <= self.restored_index || index < self.applied_index {
            return;
        }
        self.applied_index = index;
        // An empty entry is the log's own (a new leader's no-op): nothing to apply.
        if entry.is_empty() {
            return;
        }
        match MetadataRecord::decode(entry) {
            Ok(rec) => self.catalog.apply(&rec),
            Err(e) => {
                // Every node skips the same bytes, so the catalogs stay equal; the entry
                // came from a controller of another version or a bug, not from a client.
                tracing::error!(index, error = %e, "skipping undecodable metadata record");
                return;
            }
        }
        // The catalog is small (topics are shared `Arc`s), so a clone per record is cheap.
        self.store.publish(self.catalog.clone());
    }

    fn snapshot(&self) -> Vec<u8> {
        let snapshot = Snapshot {
            applied_index: self.applied_index,
            catalog: self.catalog.clone(),
        };
        // Plain data with string map keys: serialising cannot fail.
        serde_json::to_vec(&snapshot).unwrap_or_default()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let Snapshot {
            applied_index,
            mut catalog,
        } = serde_json::from_slice(snapshot)
            .map_err(|e| format!("undecodable metadata snapshot: {e}"))?;
        // Neither is serialised: the id index is derived, the local node is this node's.
        catalog.reindex();
        catalog.local_node = self.catalog.local_node;
        self.catalog = catalog;
        self.applied_index = applied_index;
        self.restored_index = applied_index;
        self.store.publish(self.catalog.clone());
        Ok(())
    }

    fn handle_request(&mut self, request: &[u8], now_ms: u64) -> (Vec<Vec<u8>>, Vec<u8>) {
        let request = match ControllerRequest::decode(request) {
            Ok(r) => r,
            Err(e) => {
                let response = ControllerResponse::Error {
                    status: Status::error(
                        ErrorCode::InvalidRequest,
                        format!("undecodable controller request: {e}"),
                    ),
                };
                return (Vec::new(), response.encode());
            }
        };
        let (records, response) = self
            .controller
            .handle_request(&self.catalog, request, now_ms);
        (
            records.iter().map(MetadataRecord::encode).collect(),
            response.encode(),
        )
    }

    fn tick(&mut self, now_ms: u64) -> Vec<Vec<u8>> {
        self.controller
            .tick(&self.catalog, now_ms)
            .iter()
            .map(MetadataRecord::encode)
            .collect()
    }

    fn on_leadership(&mut self, active: bool, now_ms: u64) {
        self.controller.on_leadership(active, now_ms);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::controller::{ControllerConfig, CreatableTopic};

    fn machine(_dir: &std::path::Path) -> (ControllerMachine, Arc<CatalogStore>) {
        let store = Arc::new(CatalogStore::new(1, 1));
        let controller = Controller::with_seed(ControllerConfig::default(), 7);
        (ControllerMachine::new(controller, store.clone()), store)
    }

    /// Sends `req` through the byte interface, applies the entries it returns in order (as
    /// the log would once they commit) and decodes the response.
    fn round(
        m: &mut ControllerMachine,
        index: &mut u64,
        req: &ControllerRequest,
    ) -> ControllerResponse {
        let (entries, response) = m.handle_request(&req.encode(), 0);
        for e in entries {
            *index += 1;
            m.apply(*index, &e);
        }
        ControllerResponse::decode(&response).expect("response decodes")
    }

    /// Requests go in and records come out as bytes; applying them publishes the catalog to
    /// the store (with the store's local node), and a snapshot restored into a fresh machine
    /// gives an equal catalog, id index included.
    #[test]
    fn requests_records_publish_snapshot() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut m, store) = machine(dir.path());
        m.on_leadership(true, 0);
        let mut index = 0;
        for node_id in 1..=3 {
            round(
                &mut m,
                &mut index,
                &ControllerRequest::RegisterBroker {
                    node_id,
                    host: "localhost".into(),
                    port: 9090 + node_id,
                    listeners: Vec::new(),
                    rack: None,
                    shards: 2,
                },
            );
            round(
                &mut m,
                &mut index,
                &ControllerRequest::BrokerHeartbeat { node_id },
            );
        }
        let created = round(
            &mut m,
            &mut index,
            &ControllerRequest::CreateTopics {
                topics: vec![CreatableTopic {
                    name: "orders".into(),
                    num_partitions: 3,
                    replication_factor: 3,
                    assignments: None,
                    configs: BTreeMap::new(),
                }],
                validate_only: false,
            },
        );
        let ControllerResponse::CreateTopics { topics } = created else {
            panic!("unexpected response {created:?}");
        };
        assert!(topics[0].status.is_ok(), "{topics:?}");
        let published = store.load();
        assert_eq!(published.local_node, 1);
        let t = published.topic("orders").expect("published");
        assert_eq!(t.partitions.len(), 3);
        assert!(published.topic_by_id(topics[0].topic_id).is_some());
        assert!(published.brokers.values().all(|b| !b.fenced));

        let dir2 = tempfile::tempdir().expect("tempdir");
        let (mut fresh, store2) = machine(dir2.path());
        fresh.restore(&m.snapshot()).expect("restore");
        assert_eq!(fresh.catalog(), m.catalog());
        assert_eq!(fresh.applied_index(), index);
        assert!(store2.load().topic_by_id(topics[0].topic_id).is_some());
    }

    /// Garbage never panics: an undecodable request gets an INVALID_REQUEST response and no
    /// entries, an undecodable entry or snapshot changes nothing; a repeated index is skipped.
    #[test]
    fn garbage_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut m, _store) = machine(dir.path());
        let (entries, response) = m.handle_request(b"\xff\x00{", 0);
        assert!(entries.is_empty());
        let ControllerResponse::Error { status } =
            ControllerResponse::decode(&response).expect("decodes")
        else {
            panic!("expected an error response");
        };
        assert_eq!(status.error_code, ErrorCode::InvalidRequest.code());
        let before = m.catalog().clone();
        m.apply(1, b"{\"Bogus\":1}");
        m.apply(2, b"");
        assert_eq!(m.catalog(), &before);
        // An entry below the applied index is not applied twice (records of one raft
        // entry share its index, so an equal index is the next record of the same entry).
        let rec = MetadataRecord::ClusterId { id: "c".into() };
        m.apply(1, &rec.encode());
        assert_eq!(m.catalog(), &before);
        m.apply(3, &rec.encode());
        assert_eq!(m.catalog().cluster_id, "c");
        let before = m.catalog().clone();
        assert!(m.restore(b"nope").is_err());
        assert_eq!(m.catalog(), &before);
    }
}
