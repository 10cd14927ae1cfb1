//! Builds a segment from the input (keyed batches, tombstones, keyless records, every
//! codec, several producers), cleans it twice with the cleaner's pure parts, reads the
//! result back as recovery and consumers do, and flips a byte of it
//! (`strata::storage::cleaner::fuzz::clean_and_read`): offsets strictly increasing and
//! unchanged, the last record per key kept, CRCs valid, a corrupted byte caught, no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strata::storage::cleaner::fuzz::clean_and_read(data);
});
