//! The storage behind the locks: one Redis master (standalone or through
//! Sentinel), a Redis Cluster, Redlock over independent masters, or the
//! in-memory store.
//!
//! All answer the same operations (acquire, release, renew a batch) with the
//! same semantics; everything above them (reentrancy, the watchdog, waiting)
//! is shared.

pub(crate) mod cluster;
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod redlock;
pub(crate) mod sentinel;

use std::sync::Arc;
use std::time::Duration;

use crate::key::LockKey;
use crate::wake::{WaitSet, Waiters};
use crate::{BackendError, LockError};

pub use memory::MemoryStore;

/// The answer to one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The lock is ours, with this fencing token.
    Acquired { token: u64 },
    /// Another owner holds it; `ttl` is its remaining lease when it has one.
    Busy { ttl: Option<Duration> },
}

/// The answer to renewing one lock.
#[derive(Debug)]
pub(crate) enum Renewal {
    /// The lease was extended.
    Renewed,
    /// The lock is no longer ours (deleted, expired, taken, overwritten).
    Gone,
    /// The renewal failed; retry until the lease deadline.
    Failed(BackendError),
}

/// A lock to renew: its key and owner.
pub(crate) type RenewItem = (LockKey, Arc<str>);

#[derive(Debug)]
pub(crate) enum Backend {
    Redis(Box<redis::RedisBackend>),
    Cluster(Box<cluster::ClusterBackend>),
    Redlock(Box<redlock::RedlockBackend>),
    Memory(MemoryStore),
}

impl Backend {
    pub(crate) async fn acquire(
        &self,
        key: &LockKey,
        owner: &str,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        match self {
            Backend::Redis(redis) => redis.acquire(key, owner, lease).await,
            Backend::Cluster(cluster) => cluster.acquire(key, owner, lease).await,
            Backend::Redlock(redlock) => redlock.acquire(key, owner, lease).await,
            Backend::Memory(store) => Ok(store.acquire(key, owner, lease)),
        }
    }

    pub(crate) async fn release(&self, key: &LockKey, owner: &str) -> Result<bool, LockError> {
        match self {
            Backend::Redis(redis) => redis.release(key, owner).await,
            Backend::Cluster(cluster) => cluster.release(key, owner).await,
            Backend::Redlock(redlock) => redlock.release(key, owner).await,
            Backend::Memory(store) => Ok(store.release(key, Some(owner))),
        }
    }

    pub(crate) async fn force_release(&self, key: &LockKey) -> Result<bool, LockError> {
        match self {
            Backend::Redis(redis) => redis.force_release(key).await,
            Backend::Cluster(cluster) => cluster.force_release(key).await,
            Backend::Redlock(redlock) => redlock.force_release(key).await,
            Backend::Memory(store) => Ok(store.release(key, None)),
        }
    }

    /// Renews every item; one round trip per node.
    pub(crate) async fn renew(&self, items: &[RenewItem], lease: Duration) -> Vec<Renewal> {
        match self {
            Backend::Redis(redis) => redis.renew(items, lease).await,
            Backend::Cluster(cluster) => cluster.renew(items, lease).await,
            Backend::Redlock(redlock) => redlock.renew(items, lease).await,
            Backend::Memory(store) => items
                .iter()
                .map(|(key, owner)| match store.renew(key, owner, lease) {
                    true => Renewal::Renewed,
                    false => Renewal::Gone,
                })
                .collect(),
        }
    }

    /// Registers a waiter for the release of `key`.
    pub(crate) fn waiter(&self, key: &LockKey) -> WaitSet {
        WaitSet::new(match self {
            Backend::Redis(redis) => vec![redis.waiter(key)],
            Backend::Cluster(cluster) => vec![cluster.waiter(key)],
            Backend::Redlock(redlock) => redlock.waiters(key),
            Backend::Memory(store) => vec![store.waiter(key)],
        })
    }

    /// Registers a waiter for the release of `key` when that costs nothing:
    /// other waiters of this client already follow its channel.
    pub(crate) fn waiter_if_subscribed(&self, key: &LockKey) -> Option<WaitSet> {
        let handle = match self {
            Backend::Redis(redis) => redis.waiters().register_if_ready(&key.channel),
            Backend::Cluster(cluster) => cluster.waiters().register_if_ready(&key.channel),
            // One confirmed subscription of N does not cover the first
            // attempt: Redlock registers the usual way.
            Backend::Redlock(_) => None,
            Backend::Memory(store) => Some(store.waiter(key)),
        };
        handle.map(|handle| WaitSet::new(vec![handle]))
    }

    /// The local waiter registries this backend wakes from.
    fn local_waiters(&self) -> Vec<&Arc<Waiters>> {
        match self {
            Backend::Redis(redis) => vec![redis.waiters()],
            Backend::Cluster(cluster) => vec![cluster.waiters()],
            // Redlock waiters follow N channels and simply attempt when any
            // wakes them; the store's release wakes a waiter synchronously.
            Backend::Redlock(_) | Backend::Memory(_) => Vec::new(),
        }
    }

    /// Tells this client's waiters of `key` that a release of theirs is on
    /// its way (`true`) or deleted nothing after all (`false`).
    pub(crate) fn expect_wake(&self, key: &LockKey, expected: bool) {
        for waiters in self.local_waiters() {
            waiters.expect_wake(&key.channel, expected);
        }
    }

    /// This client's release of `key` is queued on the connection: wakes one
    /// of this client's waiters now, so its attempt follows the release.
    pub(crate) fn wake_local(&self, key: &LockKey) {
        match self {
            Backend::Redis(redis) => redis.waiters().wake_local(&key.channel),
            Backend::Cluster(cluster) => cluster.waiters().wake_local(&key.channel),
            // A Redlock release goes to N connections: no single queue to
            // follow it on. The release messages wake the waiters.
            Backend::Redlock(_) | Backend::Memory(_) => {}
        }
    }

    /// The server, for messages: `host:port`, or `memory`.
    pub(crate) fn server(&self) -> &str {
        match self {
            Backend::Redis(redis) => redis.server(),
            Backend::Cluster(cluster) => cluster.server(),
            Backend::Redlock(redlock) => redlock.server(),
            Backend::Memory(_) => "memory",
        }
    }
}
