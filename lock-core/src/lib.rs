//! The Redis lock behind `distributed-lock`.
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
//!   only grows; see "Guarantees" in the README for why the guarded resource
//!   should check it.
//! - **Cancel safety.** Dropping an acquire future never leaks the lock;
//!   dropping a guard releases it in the background.
//!
//! Backends: one Redis node ([`LockClient::connect`]), a master found and
//! followed through Sentinel ([`LockClient::sentinel`]), Redis Cluster
//! ([`LockClient::cluster`]) and Redlock over independent masters
//! ([`LockClient::redlock`]). The in-memory backend ([`LockClient::memory`])
//! has the same semantics within one process.
//!
//! # Redis layout
//! Lock `order:42` with the default prefix uses `lock:{order:42}` (the
//! hash), `lock:{order:42}:fence` (the fencing counter, kept when the lock
//! expires) and the channel `lock:{order:42}:released`. The hash tag keeps
//! them in one cluster slot.
#![deny(unsafe_code, unreachable_pub)]
#![warn(missing_docs)]

mod backend;
mod client;
mod current;
mod error;
mod global;
mod guard;
mod inspect;
mod key;
mod lock;
mod multi;
mod scope;
mod wake;
mod watchdog;

pub use backend::MemoryStore;
pub use client::{
    ClientStats, LockClient, LockClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEASE,
    DEFAULT_PREFIX, DEFAULT_RESPONSE_TIMEOUT, MIN_WATCHDOG_LEASE,
};
pub use current::{current, current_all, CurrentLock};
pub use error::{BackendError, LockError, NodeAnswer};
pub use global::{global_client, set_global_client};
pub use guard::LockGuard;
pub use inspect::{LockHolder, LockInfo};
pub use key::MAX_KEY_LEN;
pub use lock::Lock;
pub use multi::{MultiLock, MultiLockGuard};

/// The `redis` crate this one is built on, so users never fight version skew.
pub use redis;
