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
use crate::wake::WaitSet;
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
