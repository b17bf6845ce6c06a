//! Declarative distributed locks for async Rust on Redis.
//!
//! This facade re-exports the lock itself ([`lock_core`]); the
//! `#[distributed_lock]` attribute and the tower layer join it as they land.
//! See the README for a quickstart and for what the locks guarantee.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub use lock_core::*;
