//! Cluster metadata: the catalog of topics and where each partition lives (which brokers
//! hold replicas, which shard on each). In a cluster the catalog is rebuilt from the metadata
//! log: the active controller (`controller`) turns requests into records (`records`), placing
//! partitions with `placement`; every node applies the records (`apply`) through the
//! `machine::MetadataMachine` seam (`machine_impl::ControllerMachine`), which publishes the
//! result to the shards (`catalog::CatalogStore::publish`).
pub mod apply;
pub mod catalog;
pub mod controller;
pub mod machine;
pub mod machine_impl;
pub mod placement;
pub mod quorum;
pub mod raft;
pub mod records;
