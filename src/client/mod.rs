//! client (under construction)
