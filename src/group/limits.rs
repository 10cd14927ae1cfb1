//! Bounds of the group coordinator, with what each protects.

/// Members one group may hold (Kafka's group.max.size is unbounded by default; a bound keeps
/// one misbehaving client from growing a group, and every join response, without limit).
/// Past it a join gets GROUP_MAX_SIZE_REACHED.
pub const GROUP_MEMBERS_MAX: usize = 1000;

/// Groups one shard coordinates; bounds the coordinator's memory. Past it a new group's
/// join or commit gets COORDINATOR_NOT_AVAILABLE.
pub const SHARD_GROUPS_MAX: usize = 100_000;

/// Members waiting to rejoin after MEMBER_ID_REQUIRED, per group (KIP-394 bounds these so
/// that clients looping on empty member ids cannot grow the map).
pub const GROUP_PENDING_MEMBERS_MAX: usize = 1000;

/// Largest subscription or assignment blob accepted from a client or read back from the log.
pub const GROUP_METADATA_BYTES_MAX: usize = 1024 * 1024;

/// Kafka's offset.metadata.max.bytes: longer commit metadata gets OFFSET_METADATA_TOO_LARGE.
pub const OFFSET_METADATA_BYTES_MAX: usize = 4096;

/// Committed offsets one group may hold; past it a commit's new partitions are refused.
pub const GROUP_OFFSETS_MAX: usize = 100_000;

/// Offsets one group may hold pending in open transactions (TxnOffsetCommit), over every
/// producer; past it a transactional commit's new partitions are refused like a commit's
/// past `GROUP_OFFSETS_MAX`. A COMMIT marker may then bring the group's committed offsets
/// up to `GROUP_OFFSETS_MAX + GROUP_TXN_OFFSETS_MAX`.
pub const GROUP_TXN_OFFSETS_MAX: usize = 100_000;

/// Longest group id, member id or instance id accepted (Kafka strings are i16-length).
pub const GROUP_NAME_LEN_MAX: usize = 4096;

const _: () = assert!(GROUP_PENDING_MEMBERS_MAX <= GROUP_MEMBERS_MAX);
const _: () = assert!(GROUP_NAME_LEN_MAX < i16::MAX as usize);
