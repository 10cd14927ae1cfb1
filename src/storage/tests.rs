//! Storage integration tests (filled below).
