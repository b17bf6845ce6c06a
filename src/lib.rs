//! Declarative distributed locks for async Rust on Redis.
//!
//! This facade re-exports the lock itself (`distlock-core`), the
//! [`#[distributed_lock]`](macro@distributed_lock) attribute and, with the
//! `tower` feature (on by default), the tower `LockLayer` for axum, tonic and
//! plain tower services as [`distlock::tower`](crate::tower), and, with the
//! `fence` feature, the resource-side fences of `distlock-fence` as
//! `distlock::fence`. The [guide] has the rest, a page per topic: the
//! [attribute](guide::attribute), the [layer](guide::layer), [graceful
//! shutdown](guide::shutdown), what the locks [guarantee](guide::guarantees)
//! and how [fencing tokens](guide::fencing) close the gap a lease lock leaves.
//!
//! ```
//! use std::time::Duration;
//! use distlock::{LockClient, LockError};
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
// docs.rs labels feature-gated items with the feature they need.
#![cfg_attr(docsrs, feature(doc_cfg))]
// No panics in library code, on any input or runtime state (tests may).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::unchecked_time_subtraction,
        clippy::todo,
        clippy::unimplemented,
        clippy::unreachable
    )
)]

pub use distlock_core::*;

/// Runs an `async fn` under a distributed lock, Spring-style.
///
/// ```
/// use distlock::{distributed_lock, LockClient, LockError};
///
/// struct Orders {
///     locks: LockClient,
/// }
///
/// impl Orders {
///     // Key from the arguments; wait up to 10 s for a busy order; the
///     // lease is renewed by the watchdog while the body runs.
///     #[distributed_lock(key = "order:{id}", wait = "10s", client = self.locks)]
///     async fn pay(&self, id: u64) -> Result<u64, LockError> {
///         // The lock's fencing token, for the store the payment is written to.
///         let token = distlock::current().unwrap().fencing_token();
///         Ok(token)
///     }
/// }
///
/// // A job that runs on one replica at a time; the others skip it.
/// #[distributed_lock(key = "job:nightly-report", on_busy = skip)]
/// async fn nightly_report() {
///     // ...
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let client = LockClient::memory();
/// distlock::set_global_client(client.clone()); // used by `nightly_report`
/// let orders = Orders { locks: client };
/// // A token is at least the clock in microseconds, and rises with each holder.
/// let first = orders.pay(42).await?;
/// assert!(orders.pay(42).await? > first);
/// nightly_report().await;
/// # Ok(()) }
/// ```
///
/// | option | meaning |
/// |---|---|
/// | `key = "order:{id}"` | lock name template: `{arg}`, `{arg.field}`, `{self.field}`, `{arg.method()}`, `<arg>`; `{{`, `}}`, `<<` for literal `{`, `}`, `<` |
/// | `keys = ["a:{x}", "a:{y}"]` | several locks, all or nothing, acquired in sorted order (no deadlock with swapped arguments) |
/// | `wait = "10s"` | wait for a busy lock (humantime, checked at compile time); `"0s"`/absent tries once; `"forever"`; or a `Duration` expression |
/// | `lease = "30s"` | fixed lease, not renewed (ShedLock's `lockAtMostFor`); absent: watchdog renews every lease/3; or a `Duration` expression |
/// | `at_least = "5m"` | keep the lock at least this long after it was taken, even when the fn returns sooner (ShedLock's `lockAtLeastFor`, [`Lock::hold_at_least`]); at most a fixed `lease`; one `key`, not `keys`; or a `Duration` expression |
/// | `fair` | the [fair lock](LockClient::fair_lock) named by `key` |
/// | `read` / `write` | the read or write lock of the [read-write lock](LockClient::read_write_lock) named by `key` |
/// | `permits = 5`, `take = 2` | `take` (default 1) permits of the [semaphore](LockClient::semaphore) named by `key` with `permits` in all; `u32` literals or expressions |
/// | `leader = "scheduler"` | instead of `key`: runs the fn only on the role's leader. Each call campaigns for the role (template over the arguments, like `key`; `wait` as for a lock, default try once), runs the body with the term as `current()`'s fencing token, and resigns at its end; a follower's call is busy (`on_busy`); a call inside one that leads the role re-enters its term. Not with `lease`, `at_least` or another kind (see the [attribute guide](crate::guide::attribute#leader-only-functions)) |
/// | `on_busy = error` | default: the fn returns `Result<T, E>` with `E: From<LockError>`; lock errors are returned as `Err` |
/// | `on_busy = skip` | a busy lock (or a client that is shutting down) returns `Default::default()` (`()`, `None`, `Ok(Default::default())`) without running the body; other lock errors are `Err` for a `Result` (return `Result<Option<T>, E>` to tell busy from failed), and are logged at error level under the target `distlock` otherwise |
/// | `client = expr` | the `LockClient` to use (or a `&LockClient`, `&mut LockClient`, `Arc`, `Rc` or `Box` of one); default: [`set_global_client`]'s |
/// | `crate = "path"` | the path of this crate, when it is reached through another crate (`crate = "infra::distlock"`); a dependency renamed in `Cargo.toml` (`dl = { package = "distlock", .. }`) is found without it |
/// | `abort_on_lost` | cancel the body and return `LockError::LeaseLost` when the lease is lost mid-body |
///
/// At most one of `fair`, `read`, `write`, `permits`, each with one `key`.
/// Next to `#[tokio::main]` or `#[tokio::test]`, put `#[distributed_lock]`
/// first (above): attributes expand from the top, and those make the
/// function synchronous.
/// Option expressions (`wait = cfg.lock_wait`, `permits = self.limit`) are
/// evaluated at each call before the lock is taken, in the fn's scope, as
/// the key templates are; a value the lock refuses is its
/// [`LockError::InvalidConfig`] naming the key, handled as any lock error.
///
/// Inside the body, [`current`] gives the lock's key and fencing token;
/// calls of annotated functions on the same key in one call chain are
/// reentrant: a call nested in the body (awaited by it) re-enters the lock
/// at no cost. Concurrent calls are not: `join!(pay(1), pay(1))` (or
/// `select!`, `FuturesUnordered`, `tokio::spawn`) inside a locked body runs
/// the two bodies one after the other, each call taking the lock as its own
/// owner, while both still re-enter the locks of the bodies around them (see
/// [`LockGuard::scope`]). The body runs in its own future that owns the
/// arguments.
///
/// # Cancel safety
/// Dropping the function's future releases the lock (in the background):
/// during the wait nothing is held, during the body the guard is dropped,
/// during the release the release completes on its own task.
pub use distlock_macros::distributed_lock;

#[doc(hidden)]
pub mod __private;

pub mod guide;

/// Per-request locks for tower services (axum, tonic): the `distlock-tower`
/// crate, with [`LockLayer`](tower::LockLayer) and its key extractors. Needs
/// the `tower` feature (on by default).
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use distlock_tower as tower;

/// Fencing checked at the resource: the `distlock-fence` crate, with
/// claim-on-read fenced reads and writes for Redis (`RedisFence`) and, with
/// the `fence-postgres` feature, PostgreSQL (`PgFence`), and (with `tower`
/// too) the `FenceLayer` that refuses stale lock holders in front of a
/// service. Needs the `fence` feature.
#[cfg(feature = "fence")]
#[cfg_attr(docsrs, doc(cfg(feature = "fence")))]
pub use distlock_fence as fence;

/// The README's code blocks, compiled as doc tests so they keep matching the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
