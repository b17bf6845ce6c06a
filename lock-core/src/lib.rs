//! The Redis lock behind `distlock`.
//!
//! A [`LockClient`] hands out [`Lock`]s; acquiring one gives a
//! [`LockGuard`]. What it does, in Redisson's terms:
//!
//! - **Atomic acquisition with a unique owner.** One Lua script checks,
//!   takes the lock (a hash: field = owner, value = fencing token), sets its
//!   lease and bumps the fencing counter in one step. Owners are
//!   `<random 128-bit client id>:<scope>`; release and renewal compare the
//!   owner atomically, so no client can release or extend another's lock.
//! - **Reentrancy per async call chain.** Inside [`LockGuard::scope`] the
//!   same lock is re-entered at no round-trip cost and must be released as
//!   many times; a spawned task is another owner.
//! - **Watchdog.** Without an explicit lease, the lease (default 30 s) is
//!   renewed every lease/3 by one driver per client that renews every held
//!   lock in one pipelined batch. A lock found gone, or not renewed before
//!   its lease ran out, is *lost*: [`LockGuard::lost`] resolves and
//!   [`LockGuard::release`] reports it.
//! - **Pub/sub wake-up.** A waiter sleeps until the holder's release message
//!   (or, if a message is lost, the holder's remaining lease), not a polling
//!   interval. One subscription connection per client.
//! - **Fencing tokens.** Every new holder gets a token from a counter that
//!   only grows; see "Guarantees" in the guide (`distlock::guide::guarantees`) for why the guarded resource
//!   should check it.
//! - **Cancel safety.** Dropping an acquire future never leaks the lock;
//!   dropping a guard releases it in the background.
//! - **The lock family.** [`LockClient::fair_lock`] (granted in arrival
//!   order, handed straight to the head of the queue),
//!   [`LockClient::read_write_lock`] (many readers or one writer, writers
//!   first, downgrade allowed, upgrade refused) and [`LockClient::semaphore`]
//!   (at most N permits in use, each holder's permits expiring on its own
//!   lease) hand out [`Lock`]s held like any other: watchdog, fencing token,
//!   reentrancy, cancel safety. Not on Redlock ([`LockError::Unsupported`]).
//!   [`LockAdmin::inspect_fair`], [`LockAdmin::inspect_read_write`] and
//!   [`LockAdmin::inspect_semaphore`] show their holders, queues and
//!   permits in use (live entries only, by the server's clock).
//! - **Graceful shutdown.** [`LockClient::shutdown`] refuses new locks, wakes
//!   the waiters, lets the holders finish within a grace period, then
//!   releases what they still hold and stops the background work, so a
//!   process that exits leaves no lock behind for the rest of its lease.
//!
//! Backends: one Redis node ([`LockClient::connect`]), a master found and
//! followed through Sentinel ([`LockClient::sentinel`]), Redis Cluster
//! ([`LockClient::cluster`]) and Redlock over independent masters
//! ([`LockClient::redlock`]). The in-memory backend ([`LockClient::memory`])
//! has the same semantics within one process.
//!
//! # Redis layout
//! Lock `order:42` with the default prefix uses `lock:{order:42}` (the
//! hash) and the channel `lock:{order:42}:released`; its fencing tokens come
//! from the counter of its cluster slot, `lock:fence:{<tag>}` (`<tag>` hashes
//! to the same slot), shared with the other locks of that slot, so Redis
//! holds at most 16,384 counters however many names are used. Every key
//! and the channel of a lock are in one cluster slot; `{`, `}` and `%` in a
//! name are stored percent-escaped so that the name is the whole hash tag.
//!
//! # Architecture
//! Dependencies run one way, from the public API down to the storage
//! (`tests/architecture.rs` at the workspace root keeps it so):
//!
//! ```text
//! client/ (handle, builder, per-topology connect, admin)  lock.rs  guard.rs
//! multi.rs  family.rs  global.rs  current.rs  options.rs (Wait, LockOptions)   public API
//!     |
//! shutdown.rs        acquire.rs        release.rs      the protocol: attempt, wait,
//!     |                  |     \          |            rollback; last release, hand-off
//!     |                  |    scope.rs     |            owners, reentrancy per call chain
//!     +------------> client_core.rs <------+            id, settings, holders, the backend,
//!                 /     |       |      \                the wake-ups, the watchdog
//!        watchdog.rs janitor.rs hot/  shutdown_state.rs renewal; background jobs; hot locks
//!                 \     |       |      /
//!              held.rs  wakeups.rs  supervised.rs       a held lock; this process's
//!                 |         |                           wake-ups; background tasks
//!                 |     waiters.rs                      waiters per channel, hand-off
//!                 |         |
//!              backend/  (storage only: memory/, standalone/, cluster/, redlock/;
//!                 |        redis/ = the shared wire protocol and scripts)
//!                 |
//!  name.rs slot.rs lease.rs wire.rs info.rs error.rs sync.rs metric_points.rs   leaves
//! ```
//!
//! One acquisition: [`Lock::acquire`] -> `acquire::acquire` (re-entry through
//! the [`scope`](LockGuard::scope)s on the call stack, else the innermost
//! scope's owner, or a fresh owner when a sibling branch has the lock; its
//! [`LockOptions`]) -> `Request::run` (an attempt; when busy, a waiter from
//! the core's `Wakeups`, then attempts on each wake-up or after the holder's
//! remaining lease) -> `Request::attempt` -> `Backend::acquire` (on Redis:
//! `redis::command::run`, one `EVALSHA` of the acquire script, reloaded on
//! `NOSCRIPT`) -> back in `attempt`: a `HeldLock`, recorded in the scope and,
//! in watchdog mode, tracked by the watchdog -> a [`LockGuard`]. Its
//! release: `release::release_last` -> `Backend::release` (`HDEL` +
//! `PUBLISH`) and a local hand-off to a waiter of this client through the
//! core's `Wakeups`; a dropped guard's release is a `janitor` job. A hot lock
//! (`hot/`) is consulted by the attempt and kept by the release; its keeper
//! task gives locks up through a callback the client's builder made. A
//! shutdown: [`LockClient::shutdown`] -> `shutdown::shutdown` (refuses new
//! locks and wakes the waiters through `shutdown_state.rs`) -> its driver
//! task: the grace period, then `release::give_back` of every lock still
//! held, the janitor drained, the watchdog and the subscribers stopped.
//!
//! The lock family takes the same path: a [`Lock`] of another
//! `name::Kind` (fair, read, write, permits) has its own keys, and the
//! backends pick the kind's script; `acquire::acquire` waits in
//! `Request::run_family` (every release wakes every local waiter of a shared
//! primitive; a fair waiter is told by a grant message that the release made
//! it the holder), and a waiter that gives up leaves its queue place through
//! the janitor.
#![deny(unsafe_code, unreachable_pub)]
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

mod acquire;
mod backend;
mod client;
mod client_core;
mod current;
mod error;
mod family;
mod global;
mod guard;
mod held;
mod hot;
mod info;
mod janitor;
mod layout;
mod leader;
mod lease;
mod lock;
mod metric_points;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod multi;
mod name;
mod options;
mod release;
pub mod rounds;
mod scope;
mod shutdown;
mod shutdown_state;
mod slot;
mod supervised;
mod sync;
mod waiters;
mod wakeups;
mod watchdog;
mod wire;

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use backend::postgres::{PoolError, PooledClient, PostgresPool};
pub use backend::{DataConnection, MemoryStore};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use client::PostgresConnect;
pub use client::{
    ClientStats, ClusterConnect, LockAdmin, LockClient, LockClientBuilder, RedisConnect,
    RedlockConnect, SentinelConnect, ShardedPubSub, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX,
    DEFAULT_RESPONSE_TIMEOUT,
};
pub use current::{current, current_all, CurrentLock};
pub use error::{BackendError, LockError, NodeAnswer};
pub use family::{ReadWriteLock, Semaphore};
pub use global::{global_client, set_global_client};
pub use guard::LockGuard;
pub use info::{
    FairLockInfo, ListedLock, LockHolder, LockInfo, PermitHolder, QueuedWaiter, ReadWriteLockInfo,
    Reader, SemaphoreInfo,
};
pub use layout::Layout;
pub use leader::{
    Election, Leader, Leadership, Observer, Term, DEFAULT_BACKOFF as DEFAULT_LEADER_BACKOFF,
    ROLE_LOCK_PREFIX,
};
pub use lease::{
    DEFAULT_LEASE, MAX_LEASE, MAX_TIMEOUT, MIN_LEASE, MIN_TIMEOUT, MIN_WATCHDOG_LEASE,
    QUEUE_PRESENCE,
};
pub use lock::Lock;
pub use multi::{MultiLock, MultiLockGuard};
pub use name::MAX_KEY_LEN;
pub use options::{LockOptions, Wait};
pub use shutdown_state::ShutdownReport;

/// The `redis` crate this one is built on, so users never fight version skew.
pub use redis;
