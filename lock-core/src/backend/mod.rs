//! The storage behind the locks, behind one crate-private trait: one Redis
//! master, standalone or found through Sentinel (`standalone/`), a Redis
//! Cluster (`cluster/`), Redlock over independent masters (`redlock/`), and
//! the in-memory store (`memory/`). The Redis backends share the wire
//! protocol in `redis/` (scripts, the one command path, reply parsing,
//! inspection).
//!
//! Every backend answers the same operations with the same semantics;
//! everything above them (reentrancy, the watchdog, waiting, hand-off) is
//! shared and knows no backend by name.

pub(crate) mod cluster;
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod redlock;
pub(crate) mod standalone;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::info::FamilyState;
use crate::name::LockKey;
use crate::wake::WaitSet;
use crate::{BackendError, LockError, LockInfo};

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

/// What every backend does. Leases passed in are in range (checked by
/// `lease.rs` at the API's edge). The futures are lazy: nothing is done or
/// sent before their first poll (the rollback of an abandoned grant checks
/// its scope and polls its command once under the scope's lock).
pub(crate) trait Backend: Send + Sync + fmt::Debug + 'static {
    /// What the backend talks to, for messages: `host:port`, `memory`, ...
    fn server(&self) -> &str;

    /// Identifies the store the locks live in: two clients whose backends
    /// give the same id (and use the same key prefix) share their locks.
    fn store_id(&self) -> String {
        self.server().to_owned()
    }

    /// One acquisition attempt for `owner`: takes the lock when it is free
    /// (new fencing token) or already `owner`'s (same token), else `Busy`.
    fn acquire<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Attempt, LockError>>;

    /// Deletes the lock when `owner` holds it and wakes a waiter; returns
    /// whether it deleted it.
    fn release<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>>;

    /// Takes back a grant to `owner` that was never turned into a guard:
    /// deletes `owner`'s entry, and wakes a waiter only when that freed the
    /// lock. Returns whether it deleted anything.
    fn rollback<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>>;

    /// Deletes the lock whoever holds it and wakes a waiter.
    fn force_release<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<bool, LockError>>;

    /// Extends the lease of every item still held by its owner; one round
    /// trip per node. One outcome per item, in order.
    fn renew<'a>(&'a self, items: &'a [RenewItem], lease: Duration) -> BoxFuture<'a, Vec<Renewal>>;

    /// Registers a waiter for the release of `key` (starting or restarting
    /// the backend's wake-up subscriber on the current runtime as needed).
    fn waiter(&self, key: &LockKey) -> WaitSet;

    /// Registers a waiter for the release of `key` only when that costs
    /// nothing and covers the caller's next attempt: other waiters of this
    /// client already follow its channel and the subscription is confirmed.
    fn waiter_if_subscribed(&self, key: &LockKey) -> Option<WaitSet>;

    /// This client's release of `key` is on its way (`true`) or deleted
    /// nothing after all (`false`): see `wake.rs`.
    fn expect_wake(&self, _key: &LockKey, _expected: bool) {}

    /// This client's release of `key` is queued on the command connection:
    /// wake one of this client's waiters now, so its attempt follows it.
    fn wake_local(&self, _key: &LockKey) {}

    /// This client's release of its hot lock `key` is queued because another
    /// client asked for it: this client's waiters let the asker go first.
    fn yield_local(&self, _key: &LockKey) {}

    /// This client kept its hot lock `key` at a release (see `keep.rs`):
    /// wake one of this client's waiters, which takes it without a round trip.
    fn wake_kept(&self, _key: &LockKey) {}

    /// The requests other clients make for this client's hot locks, from the
    /// locks' channels; `None` where hot locks are not offered (Redlock).
    fn keeper(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<crate::wake::Ask>> {
        None
    }

    /// (Re)starts the backend's own background work that must run whether
    /// or not anyone waits (Sentinel: following the sentinels' announcements)
    /// on the runtime in use; called with the client's other background work
    /// on every acquisition. Cheap while it runs.
    fn ensure_running(&self) {}

    /// Stops the backend's background work (wake-up subscribers, the
    /// Sentinel watcher) for good: the client shut down and has no waiters
    /// any more.
    fn shut_down(&self) {}

    /// Why the lock family (fair lock, read-write lock, semaphore) is not
    /// available here, if it is not: the backend's name and the reason.
    fn family_unsupported(&self) -> Option<(&'static str, &'static str)> {
        None
    }

    /// What the backend knows about `key`.
    fn inspect<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<LockInfo, LockError>>;

    /// What the backend records of the primitive of `key`, live entries only
    /// by the store's clock, read at one instant: a fair lock's holder and
    /// queue (a plain lock: its holder), a read-write lock's writer, readers
    /// and waiting writers (for `Read` and `Write` alike), a semaphore's
    /// holders (whatever `take` and `total`). Read-only.
    fn inspect_family<'a>(
        &'a self,
        key: &'a LockKey,
    ) -> BoxFuture<'a, Result<FamilyState, LockError>>;

    /// Every held lock of `prefix` whose name starts with `name_prefix`.
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, LockError>>;
}
