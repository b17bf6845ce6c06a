//! The storage behind the locks, behind one crate-private trait: one Redis
//! master, standalone or found through Sentinel (`standalone/`), a Redis
//! Cluster (`cluster/`), Redlock over independent masters (`redlock/`), and
//! the in-memory store (`memory/`). The Redis backends share the wire
//! protocol in `redis/` (scripts, the one command path, reply parsing,
//! inspection).
//!
//! Every backend answers the same storage operations with the same
//! semantics, and says what it supports ([`Capabilities`]); everything
//! above them (reentrancy, the watchdog, waiting, hand-off) is shared and
//! knows no backend by name. This process's waiters are not the backends':
//! the client's core owns them (`wakeups.rs`); a backend only provides what
//! it takes to hear its releases (its `wakeups()`, called once when the
//! client is built). A backend with a data store also hands out the
//! connection for the user's data (`data.rs`), routed as its locks are.

pub(crate) mod cluster;
pub(crate) mod data;
pub(crate) mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod redis;
pub(crate) mod redlock;
pub(crate) mod standalone;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::info::{FamilyState, Found};
use crate::name::{self, Kind, LockKey};
use crate::{BackendError, LockError, LockInfo};

pub use data::DataConnection;
pub use memory::MemoryStore;

/// The answer to one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The lock is ours, with this fencing token.
    Acquired { token: u64 },
    /// Another owner holds it.
    Busy(Busy),
}

/// A busy answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy {
    /// The holder's remaining lease, when it has one.
    pub(crate) ttl: Option<Duration>,
    /// The fair lock: the fencing counter when the attempt was answered, so
    /// that a grant message with a token at or below it, made before this
    /// attempt and delivered after it, is known to be stale.
    pub(crate) fence: Option<u64>,
}

impl Attempt {
    /// Busy, with the holder's remaining lease when known.
    pub(crate) fn busy(ttl: Option<Duration>) -> Self {
        Attempt::Busy(Busy { ttl, fence: None })
    }
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

/// The answer to one release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Released {
    /// The release deleted the lock (its owner held it).
    pub(crate) deleted: bool,
    /// How many subscriptions its wake-up reached (`PUBLISH`'s reply), where
    /// the backend learns it.
    pub(crate) listeners: Option<u64>,
}

impl Released {
    /// A release that reports no listener count.
    pub(crate) fn deleted(deleted: bool) -> Self {
        Released {
            deleted,
            listeners: None,
        }
    }
}

/// Why a backend does not offer a feature: its name and the reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unsupported {
    pub(crate) backend: &'static str,
    pub(crate) reason: &'static str,
}

/// How a hold is confirmed inside a transaction of the lock's own SQL
/// database (`LockGuard::hold_in`): `sql` takes `$1` key, `$2` owner, `$3`
/// token, and answers one row while that owner holds the lock with that
/// token by the server's clock, locking the lock's row until the
/// transaction ends.
#[cfg(feature = "postgres")]
#[derive(Debug)]
pub(crate) struct SqlCheck {
    pub(crate) sql: String,
    /// The server, for errors.
    pub(crate) server: String,
}

/// The refusal of a backend that does not say why it has no leadership.
const NO_LEADERSHIP: Unsupported = Unsupported {
    backend: "this backend",
    reason: "it does not implement leader election",
};

/// The leader of a role as its store records it (leadership, `leader/`):
/// the holder of the role's lock, its fencing token (the term), and what
/// the leader proclaimed in that term, if the record matches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaderRecord {
    /// The term: the fencing token of the role's lock.
    pub(crate) term: u64,
    /// The owner that holds the role's lock.
    pub(crate) owner: String,
    /// What is left of the lock's lease, by the store's clock.
    pub(crate) lease_left: Duration,
    /// The store's clock when read, ms since the Unix epoch.
    pub(crate) now_ms: u64,
    /// When the term's leader first proclaimed, by the store's clock (ms
    /// since the Unix epoch); `None` before it proclaimed.
    pub(crate) since_ms: Option<u64>,
    /// The metadata of the term's last proclamation.
    pub(crate) metadata: Option<String>,
}

/// How long a role's record outlives its last proclamation (a record is one
/// small key per role; this bounds the ones of roles nobody uses any more).
/// The run loop proclaims again every lease; reads are read-only.
pub(crate) const LEADER_RECORD_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The refusal of leadership by a backend that cannot order it.
pub(crate) fn no_leadership<T: Send + 'static>(
    role: &LockKey,
    why: Unsupported,
) -> BoxFuture<'static, Result<T, LockError>> {
    let err = LockError::Unsupported {
        key: role.name.to_string(),
        primitive: "leader election",
        backend: why.backend,
        reason: why.reason,
    };
    Box::pin(async move { Err(err) })
}

/// What a backend supports beyond the plain lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Capabilities {
    /// The lock family (fair lock, read-write lock, semaphore), unless this
    /// says why not.
    pub(crate) family: Option<Unsupported>,
    /// Hot locks (`keep_hot`), unless this says why not.
    pub(crate) hot_locks: Option<Unsupported>,
    /// Redisson's lock family (its read-write lock and permit semaphore) in
    /// Redisson's layout,
    /// unless this says why not.
    pub(crate) redisson_family: Option<Unsupported>,
    /// Leader election (`leader/`), unless this says why not.
    pub(crate) leadership: Option<Unsupported>,
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

    /// Deletes the lock when `owner` holds it and wakes a waiter; says
    /// whether it deleted it.
    fn release<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Released, LockError>>;

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

    /// The early release of a lock held at least until `left` from now
    /// (`hold_at_least`): cuts `owner`'s lease of `key` to `left` (only
    /// while `owner` holds it) instead of deleting it, and wakes a waiter
    /// of the lock, as a release does. A waiter that last saw the longer
    /// lease would otherwise sleep until that lease's end, long after the
    /// lock expired; woken, it asks again and sleeps until the new end.
    /// Returns whether `owner` held it.
    fn cut<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        left: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>>;

    /// (Re)starts the backend's own background work that must run whether
    /// or not anyone waits (Sentinel: following the sentinels' announcements)
    /// on the runtime in use; called with the client's other background work
    /// on every acquisition. Cheap while it runs.
    fn ensure_running(&self) {}

    /// Stops the backend's own background work (the Sentinel watcher) for
    /// good: the client shut down.
    fn shut_down(&self) {}

    /// What the backend supports beyond the plain lock.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// A connection for the user's data, to the store the locks live in and
    /// routed as the backend routes its lock commands (see `data.rs`), or
    /// why the backend has no such store.
    fn data_connection(&self) -> Result<DataConnection, Unsupported>;

    /// The SQL statement that confirms a hold inside the caller's own
    /// transaction on the lock's database (see [`SqlCheck`]), for the
    /// backends whose locks live in an SQL database; `None` elsewhere.
    #[cfg(feature = "postgres")]
    fn hold_check(&self) -> Option<Arc<SqlCheck>> {
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

    /// How many subscriptions follow the wake-up channel of each of `keys`
    /// (the in-memory store: how many acquisitions wait), in their order.
    fn subscribers<'a>(&'a self, keys: &'a [LockKey])
        -> BoxFuture<'a, Result<Vec<u64>, LockError>>;

    /// The layouts of the clients that used this store lately (see
    /// `layouts.rs`), after recording `mine` (a client connecting) when
    /// given.
    fn layouts<'a>(
        &'a self,
        mine: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>>;

    /// Records `mine` (a client connecting) unless the store records another
    /// layout and `mixed` (a declared migration) is false, as one atomic step
    /// where the store allows it; returns the layouts recorded (`mine`
    /// among them when it was recorded). By default (a store whose registry
    /// is spread over independent nodes: Redlock) `mine` is recorded
    /// whatever the others, as [`layouts`](Self::layouts) does.
    fn record_layout<'a>(
        &'a self,
        mine: &'a str,
        mixed: bool,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        let _ = mixed;
        self.layouts(Some(mine))
    }

    /// Removes `layout` from the store's registry of layouts (an operator,
    /// once no client of it is left); whether it was recorded. By default
    /// refused ([`LockError::Unsupported`]).
    fn forget_layout<'a>(&'a self, layout: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        let _ = layout;
        Box::pin(async {
            Err(LockError::Unsupported {
                key: "*".into(),
                primitive: "layout registry",
                backend: "this backend",
                reason: "it keeps no registry of layouts that can be edited",
            })
        })
    }

    /// Records `metadata` as what the leader of `role` proclaims, only
    /// while `owner` holds `role`'s lock, in `record` (see
    /// [`LockKey::leader_record`]), keeping the term's first proclamation
    /// time, and tells the record's observers (a message on its channel).
    /// `None` when `owner` does not hold the lock. By default refused.
    fn leader_proclaim<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
        owner: &'a str,
        metadata: &'a str,
    ) -> BoxFuture<'a, Result<Option<LeaderRecord>, LockError>> {
        let _ = (record, owner, metadata);
        no_leadership(
            role,
            self.capabilities().leadership.unwrap_or(NO_LEADERSHIP),
        )
    }

    /// The leader of `role` (the holder of its lock, with the term's record
    /// when it has one), or `None` when nobody holds the lock. By default
    /// refused.
    fn leader_read<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
    ) -> BoxFuture<'a, Result<Option<LeaderRecord>, LockError>> {
        let _ = record;
        no_leadership(
            role,
            self.capabilities().leadership.unwrap_or(NO_LEADERSHIP),
        )
    }

    /// Term `term` of `role` ended (its leader resigned): deletes `record`
    /// if it is that term's, and tells the record's observers. By default
    /// refused.
    fn leader_vacate<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
        term: u64,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        let _ = (record, term);
        no_leadership(
            role,
            self.capabilities().leadership.unwrap_or(NO_LEADERSHIP),
        )
    }

    /// Every held lock of `prefix` whose name starts with `name_prefix`.
    fn list<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, LockError>>;

    /// Every plain lock held of `prefix` whose name starts with
    /// `name_prefix`, and every primitive of the lock family of those names
    /// the store has keys of (live entries only, possibly none), in no
    /// order. By default, for a backend without the family (Redlock), the
    /// plain locks of `list`.
    fn list_all<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Found>, LockError>> {
        Box::pin(async move {
            let locks = self.list(prefix, name_prefix).await?;
            Ok(locks.into_iter().map(Found::Plain).collect())
        })
    }
}

/// The name and kind of the lock whose key (any key of a primitive:
/// `<prefix>{name}`, `<prefix>{name}:fair:queue`, `<prefix>{name}:rw:read`,
/// ...) is `key`; `Exclusive` for a plain lock, `Write` for a read-write
/// lock, `Permits` for a semaphore; `None` for any other key.
pub(crate) fn listed_key(prefix: &str, key: &str) -> Option<(String, Kind)> {
    let rest = key.strip_prefix(prefix)?;
    // The escaped name holds no `}`: the first one closes the hash tag.
    let close = rest.find('}')?;
    let (tagged, tail) = rest.split_at(close + 1);
    let kind = match tail {
        "" => Kind::Exclusive,
        ":fair" | ":fair:queue" | ":fair:timeout" | ":fair:lease" => Kind::Fair,
        ":rw" | ":rw:read" | ":rw:write" | ":rw:wait" => Kind::Write,
        ":sem" | ":sem:permits" => Kind::Permits { take: 1, total: 1 },
        _ => return None,
    };
    let name = name::name_of(prefix, key.get(..prefix.len() + tagged.len())?)?;
    Some((name, kind))
}

/// The names of `keys`, for an error about all of them.
pub(crate) fn names(keys: &[LockKey]) -> String {
    keys.iter()
        .map(|key| &*key.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_keys_give_the_name_and_the_kind() {
        let of = |key| listed_key("lock:", key);
        assert_eq!(of("lock:{a:b}"), Some(("a:b".into(), Kind::Exclusive)));
        assert_eq!(of("lock:{a}:fair:queue"), Some(("a".into(), Kind::Fair)));
        assert_eq!(of("lock:{a}:rw:wait"), Some(("a".into(), Kind::Write)));
        let semaphore = Kind::Permits { take: 1, total: 1 };
        assert_eq!(of("lock:{a%7Db}:sem"), Some(("a}b".into(), semaphore)));
        for other in [
            "lock:fence:{a}",
            "lock:{a}:released",
            "lock:{}",
            "x:{a}",
            "lock:{a",
        ] {
            assert_eq!(of(other), None, "{other}");
        }
    }
}
