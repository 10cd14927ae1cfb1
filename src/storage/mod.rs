//! storage (under construction)
