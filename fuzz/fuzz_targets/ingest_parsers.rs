//! Feeds arbitrary bytes to every ingestion parser (`strata::ingest::fuzz_all`): syslog
//! RFC 5424/3164, RFC 6587 framing, RELP frames and session, HTTP request heads and bodies.
//! None may panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strata::ingest::fuzz_all(data);
});
