//! Declarative distributed locks for async Rust on Redis.
//!
//! This facade re-exports the lock itself (`lock-core`) and, with the
//! `tower` feature (on by default), the tower `LockLayer` for axum, tonic and
//! plain tower services as [`distributed_lock::tower`](crate::tower).
//! See the README for what the locks guarantee and how fencing tokens close
//! the gap a lease lock leaves.
//!
//! ```
//! use std::time::Duration;
//! use distributed_lock::{LockClient, LockError};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), LockError> {
//! // `LockClient::connect("redis://127.0.0.1:6379/")` for Redis; the
//! // in-memory backend has the same semantics within one process.
//! let client = LockClient::memory();
//!
//! let guard = client
//!     .lock("order:42")
//!     .wait(Duration::from_secs(10))
//!     .acquire()
//!     .await?;
//! let token = guard.fencing_token(); // pass it to the store you write to
//!
//! // Another owner (here: another task) does not get it meanwhile.
//! let other = tokio::spawn({
//!     let client = client.clone();
//!     async move { client.lock("order:42").try_acquire().await }
//! });
//! assert!(other.await.unwrap()?.is_none());
//!
//! // Inside the guard's scope the lock is reentrant.
//! guard
//!     .scope(async {
//!         let nested = client.lock("order:42").acquire().await?;
//!         assert_eq!(nested.fencing_token(), token);
//!         nested.release().await
//!     })
//!     .await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub use lock_core::*;

/// Per-request locks for tower services (axum, tonic): the `lock-tower`
/// crate, with [`LockLayer`](tower::LockLayer) and its key extractors. Needs
/// the `tower` feature (on by default).
#[cfg(feature = "tower")]
pub use lock_tower as tower;

/// The README's code blocks, compiled as doc tests so they keep matching the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
