//! Typed configuration.
