//! shard (under construction)
