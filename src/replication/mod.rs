//! Replication logic: ISR, high watermark, log end offsets and leader epochs, as state
//! machines that take events and return commands; the shard carries out the I/O.
pub mod epoch_cache;
