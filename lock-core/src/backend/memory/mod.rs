//! The in-memory backend: the same lock semantics inside one process.
//!
//! Every primitive of the lock family behaves as its Lua scripts do on Redis
//! (`redis/scripts.rs`), with `tokio::time::Instant` as the clock instead of
//! the server's `TIME`, and has its state machine in a file of its own: the
//! plain lock (`plain.rs`), the fair lock with its queue and direct hand-off
//! (`fair.rs`), the write-preferring read-write lock (`read_write.rs`), and
//! the semaphore whose holders expire one by one (`semaphore.rs`). What the
//! store shows of them without changing them is `inspect.rs`. This file holds
//! the store and its state, the holder entry and deadlines the primitives
//! share, the sweep of expired entries, and the `Backend` operations, each
//! dispatched by the primitive's kind.

mod fair;
mod inspect;
mod leader;
mod plain;
mod read_write;
mod semaphore;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use tokio::time::Instant;

use self::fair::Fair;
use self::read_write::{rw_stem, ReadWrite};
use self::semaphore::Permits;
use super::DataConnection;
use super::{
    Attempt, Backend, Capabilities, LeaderRecord, Released, RenewItem, Renewal, Unsupported,
};
use crate::info::FamilyState;
use crate::name::{KeyStr, Kind, LockKey};
use crate::sync::Mutex;
use crate::waiters::Waiters;
use crate::wakeups::Wakeups;
use crate::{LockError, LockInfo};

/// Lock state kept in this process, for tests and single-process programs.
///
/// Clones share one store. Every [`LockClient`](crate::LockClient) built on
/// the same store (see [`LockClientBuilder::memory`](crate::LockClientBuilder::memory))
/// sees the same locks, exactly as clients of one Redis do: leases expire,
/// fencing tokens only grow, releases wake waiters. Memory grows with the
/// locks held, not with every name ever used: expired entries are dropped as
/// the store is used, and one counter issues every fencing token.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    waiters: Arc<Waiters>,
    /// Tests: how long a renewal round takes (as a round of many locks on
    /// a real server does).
    #[cfg(test)]
    renew_delay: Mutex<Duration>,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            state: Mutex::default(),
            waiters: Waiters::local(),
            #[cfg(test)]
            renew_delay: Mutex::default(),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// The plain locks, by their key.
    locks: HashMap<KeyStr, Entry>,
    /// The fair locks, by their key (`<prefix>{name}:fair`).
    fair: HashMap<KeyStr, Fair>,
    /// The read-write locks, by the stem of their keys (`<prefix>{name}:rw`):
    /// a read and a write hold of one name share one state.
    rw: HashMap<KeyStr, ReadWrite>,
    /// The semaphores, by their key (`<prefix>{name}:sem`).
    permits: HashMap<KeyStr, Permits>,
    /// The last fencing token issued (one counter for the whole store: a
    /// lock's tokens strictly increase, with gaps).
    fence: u64,
    /// The number of entries after the last sweep of expired ones.
    swept: usize,
    /// The layouts of the clients built on the store.
    layouts: std::collections::BTreeSet<String>,
    /// The records of leader election, by their key (`<prefix>{role}:leader`).
    leaders: HashMap<KeyStr, leader::Record>,
}

/// One holder: of a plain or fair lock, or the writer of a read-write lock.
#[derive(Debug)]
struct Entry {
    owner: Box<str>,
    token: u64,
    expires_at: Instant,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.expires_at > now
    }
}

/// `now + d`, or `now` when that overflows (an entry that expires at once:
/// the safe side; leases and presence are range-checked, so it cannot).
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or(now)
}

/// The wait until `at`, at least 1 ms (a waiter never spins on a zero TTL).
fn until(at: Instant, now: Instant) -> Duration {
    at.saturating_duration_since(now)
        .max(Duration::from_millis(1))
}

/// The next fencing token of the store's one counter: one more than the last,
/// and at least the system clock in microseconds since the Unix epoch, as the
/// Redis scripts issue them (`prelude/token.lua`). A store is new in every
/// process, so without the clock floor a restarted service would issue 1, 2,
/// 3 again to a resource that remembers the old process's tokens.
fn next_token(fence: &mut u64) -> u64 {
    *fence = fence.saturating_add(1).max(clock_micros());
    *fence
}

/// The system clock in microseconds since the Unix epoch (0 before it, and
/// `u64::MAX` beyond it: a clock set absurdly far forward saturates).
fn clock_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

impl State {
    /// Every entry kept, of every primitive.
    fn len(&self) -> usize {
        self.locks.len() + self.fair.len() + self.rw.len() + self.permits.len()
    }

    /// Drops expired entries once the store has doubled since the last sweep
    /// (amortised O(1) per acquisition; memory stays O(held locks)). Called
    /// before an acquisition adds an entry.
    fn sweep(&mut self, now: Instant) {
        if self.len() > 2 * self.swept.max(32) {
            self.locks.retain(|_, e| e.expires_at > now);
            self.fair.retain(|_, fair| {
                fair.purge(now);
                !fair.idle(now)
            });
            self.rw.retain(|_, rw| {
                rw.purge(now);
                !rw.idle()
            });
            self.permits.retain(|_, permits| {
                permits.purge(now);
                !permits.holders.is_empty()
            });
            self.swept = self.len();
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How a client of this store hears its releases: the store wakes the
    /// waiters of all its clients directly.
    pub(crate) fn wakeups(&self) -> Wakeups {
        Wakeups::direct(self.inner.waiters.clone())
    }

    /// Records `mine` (when given) as the layout of a client of the store,
    /// and returns the layouts recorded.
    pub(crate) fn layouts_now(&self, mine: Option<&str>) -> Vec<String> {
        let mut state = self.inner.state.lock();
        if let Some(mine) = mine {
            state.layouts.insert(mine.to_owned());
        }
        state.layouts.iter().cloned().collect()
    }

    /// Records `mine` unless another layout is recorded and `mixed` is
    /// false, and returns the layouts recorded.
    pub(crate) fn record_layout_now(&self, mine: &str, mixed: bool) -> Vec<String> {
        let mut state = self.inner.state.lock();
        if mixed || state.layouts.iter().all(|layout| layout == mine) {
            state.layouts.insert(mine.to_owned());
        }
        state.layouts.iter().cloned().collect()
    }

    /// Tests: the waiters the store wakes (to deliver a message by hand).
    #[cfg(test)]
    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        &self.inner.waiters
    }

    /// Tests: every renewal round takes `delay`.
    #[cfg(test)]
    pub(crate) fn set_renew_delay(&self, delay: Duration) {
        *self.inner.renew_delay.lock() = delay;
    }

    /// The number of entries the store keeps (a lock, or the state of a fair
    /// lock, read-write lock or semaphore): the held ones plus expired ones
    /// not swept yet. It stays below about twice the most held at once (and
    /// at least 64), however many names were used.
    pub fn entries(&self) -> usize {
        self.inner.state.lock().len()
    }

    /// One acquisition attempt of `key`, whatever its kind.
    fn acquire_now(&self, key: &LockKey, owner: &str, lease: Duration) -> Attempt {
        match key.kind {
            Kind::Exclusive => self.exclusive_acquire(key, owner, lease),
            Kind::Fair => self.fair_acquire(key, owner, lease),
            Kind::Read | Kind::Write => self.rw_acquire(key, owner, lease),
            Kind::Permits { take, total } => self.permits_acquire(key, owner, lease, take, total),
        }
    }

    /// Gives `owner`'s hold of `key` back (`rollback`: its grant, and its
    /// place in a fair lock's queue or its writer's intent), waking waiters
    /// as the scripts do. Returns whether a hold was deleted.
    fn release_now(&self, key: &LockKey, owner: &str, rollback: bool) -> bool {
        match key.kind {
            Kind::Exclusive => self.delete(key, Some(owner)),
            Kind::Fair => self.fair_release(key, Some(owner), rollback),
            Kind::Read => self.read_release(key, owner),
            Kind::Write => self.write_release(key, owner, rollback),
            Kind::Permits { .. } => self.permits_release(key, Some(owner)),
        }
    }

    /// Deletes `key` whoever holds it (a fair lock: hands it to the head of
    /// its queue; a read-write lock: every reader, the writer and the
    /// waiting writers' intents; a semaphore: every holder).
    fn force_now(&self, key: &LockKey) -> bool {
        match key.kind {
            Kind::Exclusive => self.delete(key, None),
            Kind::Fair => self.fair_release(key, None, false),
            Kind::Read | Kind::Write => self.rw_force(key),
            Kind::Permits { .. } => self.permits_release(key, None),
        }
    }

    /// Extends `owner`'s hold of `key` by `lease` from now when it is still
    /// live (`RENEW`, or `RENEW_MEMBER` for a read hold or permits).
    fn renew_now(&self, key: &LockKey, owner: &str, lease: Duration) -> Renewal {
        let now = Instant::now();
        let expires_at = now.checked_add(lease).unwrap_or(now);
        let mut state = self.inner.state.lock();
        let hold = match key.kind {
            Kind::Exclusive => state
                .locks
                .get_mut(&*key.lock)
                .filter(|e| e.live(now) && *e.owner == *owner)
                .map(|e| &mut e.expires_at),
            Kind::Fair => state
                .fair
                .get_mut(&*key.lock)
                .and_then(|f| f.holder.as_mut())
                .filter(|h| h.live(now) && *h.owner == *owner)
                .map(|h| &mut h.expires_at),
            Kind::Write => state
                .rw
                .get_mut(&**rw_stem(key))
                .and_then(|rw| rw.writer.as_mut())
                .filter(|w| w.live(now) && *w.owner == *owner)
                .map(|w| &mut w.expires_at),
            Kind::Read => state
                .rw
                .get_mut(&**rw_stem(key))
                .and_then(|rw| rw.readers.get_mut(owner))
                .filter(|e| **e > now),
            Kind::Permits { .. } => state
                .permits
                .get_mut(&*key.lock)
                .and_then(|p| p.holders.get_mut(owner))
                .map(|p| &mut p.expires_at)
                .filter(|e| **e > now),
        };
        match hold {
            Some(expires) => {
                *expires = expires_at;
                Renewal::Renewed
            }
            None => Renewal::Gone,
        }
    }
}

impl Backend for MemoryStore {
    fn server(&self) -> &str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            redisson_family: Some(Unsupported {
                backend: "the in-memory store",
                reason: "the in-memory store lays out only the plain lock as Redisson does; \
                         Redisson's read-write lock and semaphore need Redis",
            }),
            ..Capabilities::default()
        }
    }

    fn data_connection(&self) -> Result<DataConnection, Unsupported> {
        Err(Unsupported {
            backend: "the in-memory store",
            reason: "the in-memory store has no server to keep data in",
        })
    }

    fn store_id(&self) -> String {
        // Every store is its own: clients share locks only through one store.
        format!("memory@{:p}", Arc::as_ptr(&self.inner))
    }

    fn acquire<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Attempt, LockError>> {
        async move { Ok(self.acquire_now(key, owner, lease)) }.boxed()
    }

    fn release<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Released, LockError>> {
        async move { Ok(Released::deleted(self.release_now(key, owner, false))) }.boxed()
    }

    fn rollback<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        // A plain lock wakes only when it deleted something, as `delete`
        // does; the family as its scripts do.
        async move { Ok(self.release_now(key, owner, true)) }.boxed()
    }

    fn force_release<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<bool, LockError>> {
        async move { Ok(self.force_now(key)) }.boxed()
    }

    fn renew<'a>(&'a self, items: &'a [RenewItem], lease: Duration) -> BoxFuture<'a, Vec<Renewal>> {
        async move {
            #[cfg(test)]
            {
                let delay = *self.inner.renew_delay.lock();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
            }
            items
                .iter()
                .map(|(key, owner)| self.renew_now(key, owner, lease))
                .collect()
        }
        .boxed()
    }

    fn cut<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        left: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        async move {
            let held = matches!(self.renew_now(key, owner, left), Renewal::Renewed);
            if held {
                self.inner.waiters.wake_one(&key.channel);
            }
            Ok(held)
        }
        .boxed()
    }

    fn inspect<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        async move { Ok(self.inspect_now(key)) }.boxed()
    }

    fn leader_proclaim<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
        owner: &'a str,
        metadata: &'a str,
    ) -> BoxFuture<'a, Result<Option<LeaderRecord>, LockError>> {
        async move {
            let proclaimed =
                leader::proclaim(&mut self.inner.state.lock(), role, record, owner, metadata);
            if proclaimed.is_some() {
                self.inner.waiters.wake_one(&record.channel);
            }
            Ok(proclaimed)
        }
        .boxed()
    }

    fn leader_read<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
    ) -> BoxFuture<'a, Result<Option<LeaderRecord>, LockError>> {
        async move { Ok(leader::read(&self.inner.state.lock(), role, record)) }.boxed()
    }

    fn leader_vacate<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
        term: u64,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        let _ = role;
        async move {
            leader::vacate(&mut self.inner.state.lock(), record, term);
            self.inner.waiters.wake_one(&record.channel);
            Ok(())
        }
        .boxed()
    }

    fn inspect_family<'a>(
        &'a self,
        key: &'a LockKey,
    ) -> BoxFuture<'a, Result<FamilyState, LockError>> {
        async move { Ok(self.inner.state.lock().family(key, Instant::now())) }.boxed()
    }

    fn layouts<'a>(
        &'a self,
        mine: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        let layouts = self.layouts_now(mine);
        async move { Ok(layouts) }.boxed()
    }

    fn record_layout<'a>(
        &'a self,
        mine: &'a str,
        mixed: bool,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        let layouts = self.record_layout_now(mine, mixed);
        async move { Ok(layouts) }.boxed()
    }

    fn forget_layout<'a>(&'a self, layout: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        let forgotten = self.inner.state.lock().layouts.remove(layout);
        async move { Ok(forgotten) }.boxed()
    }

    /// The acquisitions waiting on each lock's channel (the store wakes
    /// waiters directly: there are no subscriptions to count).
    fn subscribers<'a>(
        &'a self,
        keys: &'a [LockKey],
    ) -> BoxFuture<'a, Result<Vec<u64>, LockError>> {
        let counts = keys
            .iter()
            .map(|key| self.inner.waiters.waiting(&key.channel))
            .collect();
        async move { Ok(counts) }.boxed()
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, LockError>> {
        async move { Ok(self.list_now(prefix, name_prefix)) }.boxed()
    }

    fn list_all<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<crate::info::Found>, LockError>> {
        async move { Ok(self.list_all_now(prefix, name_prefix)) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::QUEUE_PRESENCE;

    // Shared with the primitives' tests, in their files.
    pub(super) const LEASE: Duration = Duration::from_secs(10);
    pub(super) const MS: Duration = Duration::from_millis(1);

    /// The keys of `kind` of the family `x`, for an attempt that does not wait.
    pub(super) fn try_key(kind: Kind) -> LockKey {
        LockKey::of_kind("lock:", "x", kind).unwrap()
    }

    /// The keys of `kind` of the family `x`, for an attempt that waits.
    pub(super) fn wait_key(kind: Kind) -> LockKey {
        let mut key = try_key(kind);
        key.queue = true;
        key
    }

    #[track_caller]
    pub(super) fn granted(attempt: Attempt) -> u64 {
        match attempt {
            Attempt::Acquired { token } => token,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[track_caller]
    pub(super) fn busy(attempt: Attempt) -> Option<Duration> {
        match attempt {
            Attempt::Busy(busy) => busy.ttl,
            other => panic!("expected busy, got {other:?}"),
        }
    }

    /// Whether a wake-up is pending for `handle` (taking it).
    pub(super) async fn woken(handle: &mut crate::waiters::WakeHandle) -> bool {
        let woken = tokio::time::timeout(MS, handle.notified()).await.is_ok();
        if woken {
            handle.attempted(false);
        }
        woken
    }

    #[tokio::test(start_paused = true)]
    async fn every_kind_renews_while_held_and_is_gone_after() {
        let kinds = [
            Kind::Exclusive,
            Kind::Fair,
            Kind::Read,
            Kind::Write,
            Kind::Permits { take: 1, total: 2 },
        ];
        for kind in kinds {
            let store = MemoryStore::new();
            let key = try_key(kind);
            let items: Vec<RenewItem> =
                vec![(key.clone(), "a:1".into()), (key.clone(), "b:1".into())];
            granted(store.acquire_now(&key, "a:1", Duration::from_secs(1)));
            let renewed = store.renew(&items, LEASE).await;
            assert!(
                matches!(renewed[..], [Renewal::Renewed, Renewal::Gone]),
                "{kind:?}: {renewed:?}"
            );
            tokio::time::advance(LEASE - MS).await;
            assert_eq!(store.held(), 1, "{kind:?}: the renewal kept it");
            assert!(matches!(
                store.renew_now(&key, "a:1", LEASE),
                Renewal::Renewed
            ));
            tokio::time::advance(LEASE).await;
            assert!(
                matches!(store.renew_now(&key, "a:1", LEASE), Renewal::Gone),
                "{kind:?}: expired"
            );
            granted(store.acquire_now(&key, "a:1", LEASE));
            assert!(store.release_now(&key, "a:1", false));
            assert!(
                matches!(store.renew_now(&key, "a:1", LEASE), Renewal::Gone),
                "{kind:?}: released"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn crashed_family_holders_and_waiters_are_swept() {
        let store = MemoryStore::new();
        let lease = Duration::from_millis(10);
        for i in 0..10_000 {
            let kind = match i % 5 {
                0 => Kind::Fair,
                1 => Kind::Read,
                2 => Kind::Write,
                3 => Kind::Permits { take: 1, total: 1 },
                _ => Kind::Exclusive,
            };
            let mut key = LockKey::of_kind("lock:", &format!("job:{i}"), kind).unwrap();
            key.queue = true;
            granted(store.acquire_now(&key, "a:1", lease));
            // A waiter that goes away too (a place or an intent).
            if kind == Kind::Read {
                key = LockKey::of_kind("lock:", &format!("job:{i}"), Kind::Write).unwrap();
                key.queue = true;
            }
            busy(store.acquire_now(&key, "b:1", lease));
            tokio::time::advance(QUEUE_PRESENCE).await;
        }
        assert!(store.entries() <= 64, "{} entries kept", store.entries());
        assert_eq!(store.held(), 0);
    }
}
