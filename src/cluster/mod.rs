//! Cluster metadata: the catalog of topics and where each partition lives (which shard of
//! this broker owns it). On a single node the catalog is the whole metadata image.
pub mod catalog;
pub mod machine;
pub mod placement;
pub mod raft;
