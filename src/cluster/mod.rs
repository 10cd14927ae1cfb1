//! Cluster metadata: the catalog of topics and where each partition lives (which brokers
//! hold replicas, which shard on each). In a cluster the catalog is rebuilt from the metadata
//! log: the controller (`controller`) turns requests into records (`records`), and every node
//! applies them (`apply`) through the `machine::MetadataMachine` seam.
pub mod apply;
pub mod catalog;
pub mod controller;
pub mod machine;
pub mod machine_impl;
pub mod placement;
pub mod records;
