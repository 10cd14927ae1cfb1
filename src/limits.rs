//! Named bounds.
