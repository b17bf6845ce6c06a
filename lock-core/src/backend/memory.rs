//! The in-memory backend: the same lock semantics inside one process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::Attempt;
use crate::key::LockKey;
use crate::wake::{Waiters, WakeHandle};

/// Lock state kept in this process, for tests and single-process programs.
///
/// Clones share one store. Every [`LockClient`](crate::LockClient) built on
/// the same store (see [`LockClientBuilder::memory`](crate::LockClientBuilder::memory))
/// sees the same locks, exactly as clients of one Redis do: leases expire,
/// fencing counters only grow, releases wake waiters.
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
    fences: HashMap<Arc<str>, u64>,
}

#[derive(Debug)]
struct Entry {
    owner: Box<str>,
    token: u64,
    expires_at: Instant,
}

impl Entry {
    fn snapshot(&self, now: Instant) -> HolderSnapshot {
        HolderSnapshot {
            owner: self.owner.to_string(),
            token: self.token,
            ttl: self.expires_at - now,
        }
    }
}

/// A lock's holder as [`MemoryStore::inspect`] sees it.
#[derive(Debug)]
pub(crate) struct HolderSnapshot {
    pub(crate) owner: String,
    pub(crate) token: u64,
    pub(crate) ttl: Duration,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of locks currently held (unexpired).
    pub fn held(&self) -> usize {
        let now = Instant::now();
        let state = self.inner.state.lock().unwrap();
        state.locks.values().filter(|e| e.expires_at > now).count()
    }

    pub(crate) fn acquire(&self, key: &LockKey, owner: &str, lease: Duration) -> Attempt {
        let now = Instant::now();
        let mut state = self.inner.state.lock().unwrap();
        if let Some(entry) = state.locks.get_mut(&key.lock) {
            if entry.expires_at > now {
                if &*entry.owner == owner {
                    entry.expires_at = now + lease;
                    return Attempt::Acquired { token: entry.token };
                }
                return Attempt::Busy {
                    ttl: Some(entry.expires_at - now),
                };
            }
        }
        let fence = state.fences.entry(key.fence.clone()).or_insert(0);
        *fence += 1;
        let token = *fence;
        state.locks.insert(
            key.lock.clone(),
            Entry {
                owner: owner.into(),
                token,
                expires_at: now + lease,
            },
        );
        Attempt::Acquired { token }
    }

    /// Deletes the lock when `owner` holds it (or unconditionally when `owner`
    /// is `None`) and wakes a waiter. Returns whether a lock was deleted.
    pub(crate) fn release(&self, key: &LockKey, owner: Option<&str>) -> bool {
        let now = Instant::now();
        let mut state = self.inner.state.lock().unwrap();
        let ours = match state.locks.get(&key.lock) {
            Some(entry) => entry.expires_at > now && owner.is_none_or(|o| *entry.owner == *o),
            None => false,
        };
        if ours {
            state.locks.remove(&key.lock);
        }
        drop(state);
        if ours {
            self.inner.waiters.wake_one(&key.channel);
        }
        ours
    }

    pub(crate) fn renew(&self, key: &LockKey, owner: &str, lease: Duration) -> bool {
        let now = Instant::now();
        let mut state = self.inner.state.lock().unwrap();
        match state.locks.get_mut(&key.lock) {
            Some(entry) if entry.expires_at > now && *entry.owner == *owner => {
                entry.expires_at = now + lease;
                true
            }
            _ => false,
        }
    }

    /// The unexpired holder of `key` and its last fencing token.
    pub(crate) fn inspect(&self, key: &LockKey) -> (Option<HolderSnapshot>, Option<u64>) {
        let now = Instant::now();
        let state = self.inner.state.lock().unwrap();
        let holder = state.locks.get(&key.lock).filter(|e| e.expires_at > now);
        let holder = holder.map(|e| e.snapshot(now));
        (holder, state.fences.get(&key.fence).copied())
    }

    /// Every unexpired lock: its key, holder and last fencing token.
    pub(crate) fn held_locks(&self) -> Vec<(Arc<str>, HolderSnapshot, Option<u64>)> {
        let now = Instant::now();
        let state = self.inner.state.lock().unwrap();
        let fence = |lock: &str| state.fences.get(&*format!("{lock}:fence")).copied();
        state
            .locks
            .iter()
            .filter(|(_, e)| e.expires_at > now)
            .map(|(lock, e)| (lock.clone(), e.snapshot(now), fence(lock)))
            .collect()
    }

    pub(crate) fn waiter(&self, key: &LockKey) -> WakeHandle {
        self.inner.waiters.register(&key.channel)
    }
}
