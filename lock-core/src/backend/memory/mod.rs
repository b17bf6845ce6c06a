//! The in-memory backend: the same lock semantics inside one process.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use tokio::time::Instant;

use super::{Attempt, Backend, RenewItem, Renewal};
use crate::name::{self, LockKey};
use crate::sync::Mutex;
use crate::wake::{WaitSet, Waiters};
use crate::{LockError, LockHolder, LockInfo};

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
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            state: Mutex::default(),
            waiters: Waiters::local(),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<Arc<str>, Entry>,
    /// The last fencing token issued (one counter for the whole store: a
    /// lock's tokens strictly increase, with gaps).
    fence: u64,
    /// The number of entries after the last sweep of expired ones.
    swept: usize,
}

#[derive(Debug)]
struct Entry {
    owner: Box<str>,
    token: u64,
    expires_at: Instant,
}

impl State {
    /// The entry of `lock` when its lease still runs.
    fn live(&mut self, lock: &str, now: Instant) -> Option<&mut Entry> {
        self.locks.get_mut(lock).filter(|e| e.expires_at > now)
    }

    /// Drops expired entries once the map has doubled since the last sweep
    /// (amortised O(1) per acquisition; memory stays O(held locks)).
    fn sweep(&mut self, now: Instant) {
        if self.locks.len() > 2 * self.swept.max(32) {
            self.locks.retain(|_, e| e.expires_at > now);
            self.swept = self.locks.len();
        }
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of locks currently held (unexpired).
    pub fn held(&self) -> usize {
        let now = Instant::now();
        let state = self.inner.state.lock();
        state.locks.values().filter(|e| e.expires_at > now).count()
    }

    /// The number of lock entries the store keeps: the held locks plus
    /// expired ones not swept yet. It stays below about twice the most
    /// locks held at once (and at least 64), however many names were used.
    pub fn entries(&self) -> usize {
        self.inner.state.lock().locks.len()
    }

    fn acquire_now(&self, key: &LockKey, owner: &str, lease: Duration) -> Attempt {
        let now = Instant::now();
        // The lease was range-checked: this cannot overflow; if it could,
        // the entry would expire at once (the safe side).
        let expires_at = now.checked_add(lease).unwrap_or(now);
        let mut state = self.inner.state.lock();
        if let Some(entry) = state.live(&key.lock, now) {
            if &*entry.owner == owner {
                entry.expires_at = expires_at;
                return Attempt::Acquired { token: entry.token };
            }
            return Attempt::Busy {
                ttl: Some(entry.expires_at.saturating_duration_since(now)),
            };
        }
        state.sweep(now);
        state.fence = state.fence.saturating_add(1);
        let token = state.fence;
        state.locks.insert(
            key.lock.clone(),
            Entry {
                owner: owner.into(),
                token,
                expires_at,
            },
        );
        Attempt::Acquired { token }
    }

    /// Deletes the lock when `owner` holds it (or unconditionally when `owner`
    /// is `None`) and wakes a waiter. Returns whether a lock was deleted.
    fn delete(&self, key: &LockKey, owner: Option<&str>) -> bool {
        let now = Instant::now();
        let mut state = self.inner.state.lock();
        let ours = state
            .live(&key.lock, now)
            .is_some_and(|entry| owner.is_none_or(|o| *entry.owner == *o));
        if ours {
            state.locks.remove(&key.lock);
        }
        drop(state);
        if ours {
            self.inner.waiters.wake_one(&key.channel);
        }
        ours
    }

    fn renew_now(&self, key: &LockKey, owner: &str, lease: Duration) -> Renewal {
        let now = Instant::now();
        let mut state = self.inner.state.lock();
        match state.live(&key.lock, now) {
            Some(entry) if *entry.owner == *owner => {
                entry.expires_at = now.checked_add(lease).unwrap_or(now);
                Renewal::Renewed
            }
            _ => Renewal::Gone,
        }
    }
}

/// What the store knows of the lock `key` (`entry`, when held).
fn info(key: &LockKey, entry: Option<&Entry>, fence: u64, now: Instant) -> LockInfo {
    LockInfo {
        name: key.name.to_string(),
        key: key.lock.to_string(),
        fence_key: key.fence(),
        holder: entry.map(|e| LockHolder {
            owner: e.owner.to_string(),
            fencing_token: e.token,
            ttl: Some(e.expires_at.saturating_duration_since(now)),
            holds: 1,
        }),
        last_fencing_token: (fence > 0).then_some(fence),
    }
}

impl Backend for MemoryStore {
    fn server(&self) -> &str {
        "memory"
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
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        async move { Ok(self.delete(key, Some(owner))) }.boxed()
    }

    fn rollback<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        // Wakes only when it deleted something, as `delete` does.
        async move { Ok(self.delete(key, Some(owner))) }.boxed()
    }

    fn force_release<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<bool, LockError>> {
        async move { Ok(self.delete(key, None)) }.boxed()
    }

    fn renew<'a>(&'a self, items: &'a [RenewItem], lease: Duration) -> BoxFuture<'a, Vec<Renewal>> {
        async move {
            items
                .iter()
                .map(|(key, owner)| self.renew_now(key, owner, lease))
                .collect()
        }
        .boxed()
    }

    fn waiter(&self, key: &LockKey) -> WaitSet {
        WaitSet::new(vec![self.inner.waiters.register(&key.channel)])
    }

    fn waiter_if_subscribed(&self, key: &LockKey) -> Option<WaitSet> {
        // The store wakes waiters directly: registering is always free.
        Some(self.waiter(key))
    }

    fn inspect<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        async move {
            let now = Instant::now();
            let mut state = self.inner.state.lock();
            let fence = state.fence;
            let entry = state.live(&key.lock, now).map(|e| &*e);
            Ok(info(key, entry, fence, now))
        }
        .boxed()
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, LockError>> {
        async move {
            let now = Instant::now();
            let state = self.inner.state.lock();
            Ok(state
                .locks
                .iter()
                .filter(|(_, e)| e.expires_at > now)
                .filter_map(|(lock, e)| {
                    let name = name::name_of(prefix, lock)?;
                    let key = LockKey::new(prefix, &name).ok()?;
                    name.starts_with(name_prefix)
                        .then(|| info(&key, Some(e), state.fence, now))
                })
                .collect())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_swept_and_tokens_keep_growing() {
        let store = MemoryStore::new();
        let mut last = 0;
        for i in 0..10_000 {
            let key = LockKey::new("lock:", &format!("job:{i}")).unwrap();
            match store.acquire_now(&key, "a:1", Duration::from_millis(10)) {
                Attempt::Acquired { token } => {
                    assert!(token > last);
                    last = token;
                }
                other => panic!("{other:?}"),
            }
            tokio::time::advance(Duration::from_millis(20)).await; // expires unreleased
        }
        assert!(store.entries() <= 64, "{} entries kept", store.entries());
        let key = LockKey::new("lock:", "job:0").unwrap();
        assert!(matches!(
            store.acquire_now(&key, "b:1", Duration::from_millis(10)),
            Attempt::Acquired { token } if token > last
        ));
    }
}
