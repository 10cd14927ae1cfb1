//! cli (under construction)
