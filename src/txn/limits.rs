//! Bounds of the transaction coordinator, with what each protects.

/// Longest transactional id (and topic name inside a stored transaction) accepted from a
/// client or read back from `__transaction_state`; Kafka strings are i16-length.
pub const TRANSACTIONAL_ID_LEN_MAX: usize = 4096;

/// Partitions one transaction may hold (Kafka has no bound; one keeps a runaway producer from
/// growing a transaction's record, and the markers it fans out, without limit). An
/// AddPartitionsToTxn that would pass it gets INVALID_REQUEST; a stored value holding more is
/// refused as corrupt.
pub const TXN_PARTITIONS_MAX: usize = 100_000;

/// Transactional ids one shard coordinates; bounds the coordinator's memory. Past it a new
/// id's InitProducerId gets COORDINATOR_NOT_AVAILABLE (the client retries; expiry frees ids).
pub const SHARD_TRANSACTIONAL_IDS_MAX: usize = 100_000;

const _: () = assert!(TRANSACTIONAL_ID_LEN_MAX < i16::MAX as usize);
