//! Feeds arbitrary bytes to the SASL servers (`strata::security::sasl::fuzz_all`): PLAIN,
//! SCRAM-SHA-256/512 client-first and client-final messages, OAUTHBEARER initial responses
//! (raw, and with the input as the bearer token), and the JWKS, JWS and JWT-claims parsers
//! behind OAUTHBEARER. None may panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strata::security::sasl::fuzz_all(data);
});
