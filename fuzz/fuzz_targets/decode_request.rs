//! Feeds arbitrary bytes to the broker's request-decoding path as one frame (the bytes
//! after the size prefix). Linking `strata` brings in its global allocator, so absurd
//! array counts are lazy mappings here exactly as in the broker. libFuzzer's panic hook
//! aborts on any panic, including those `guarded` would catch: a decoder that needs the
//! guard is reported.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = strata::protocol::fuzz::decode_any(bytes::Bytes::copy_from_slice(data));
});
