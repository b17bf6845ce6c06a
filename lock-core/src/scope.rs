//! Ownership scopes: reentrancy per async call chain.
//!
//! The outermost acquisition opens a [`Scope`] with a fresh owner id
//! (`<client-id>:<n>`). Code running inside it (see
//! [`LockGuard::scope`](crate::LockGuard::scope)) acquires as that same owner:
//! a lock the scope already holds is re-entered by counting in the client
//! (no round trip), another lock is taken in Redis under the scope's owner.
//! Anything outside the scope (a spawned task, a sibling future) is another
//! owner and waits like everyone else.
//!
//! A scope also counts its acquisitions in flight per lock, so that the
//! rollback of an abandoned grant never deletes a grant that a sibling
//! acquisition of the same scope is taking over.

use std::collections::hash_map;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crate::held::HeldLock;
use crate::sync::Mutex;

tokio::task_local! {
    static SCOPE: Arc<Scope>;
}

#[derive(Debug)]
pub(crate) struct Scope {
    /// The id of the client whose locks this scope holds.
    client_id: Arc<str>,
    pub(crate) owner: Arc<str>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The locks this scope holds or is acquiring, by lock name (one map, so
    /// a scope costs one small allocation).
    locks: HashMap<Arc<str>, Entry>,
}

#[derive(Debug, Default)]
struct Entry {
    held: Weak<HeldLock>,
    /// Acquisitions in flight.
    attempts: usize,
}

impl State {
    fn claims(&self, name: &str) -> bool {
        self.live(name).is_some() || self.locks.get(name).is_some_and(|e| e.attempts > 0)
    }

    fn live(&self, name: &str) -> Option<Arc<HeldLock>> {
        let lock = self.locks.get(name)?.held.upgrade()?;
        (lock.holds.load(Ordering::Acquire) > 0).then_some(lock)
    }

    /// Forgets `name`'s entry once nothing holds or acquires it.
    fn tidy(&mut self, name: &Arc<str>) {
        if let hash_map::Entry::Occupied(entry) = self.locks.entry(name.clone()) {
            let idle = entry.get().attempts == 0 && entry.get().held.strong_count() == 0;
            if idle {
                entry.remove();
            }
        }
    }
}

impl Scope {
    /// A scope of client `client_id` with owner id `owner`.
    pub(crate) fn new(client_id: Arc<str>, owner: Arc<str>) -> Arc<Self> {
        Arc::new(Scope {
            client_id,
            owner,
            state: Mutex::default(),
        })
    }

    /// The scope the current task runs in, when it belongs to client `client_id`.
    pub(crate) fn current(client_id: &str) -> Option<Arc<Self>> {
        SCOPE
            .try_with(|scope| scope.clone())
            .ok()
            .filter(|scope| &*scope.client_id == client_id)
    }

    /// Runs `fut` inside this scope.
    pub(crate) async fn run<F: Future>(self: Arc<Self>, fut: F) -> F::Output {
        SCOPE.scope(self, fut).await
    }

    /// Runs `f` inside this scope.
    pub(crate) fn run_sync<T>(self: Arc<Self>, f: impl FnOnce() -> T) -> T {
        SCOPE.sync_scope(self, f)
    }

    /// Adds a hold to the lock named `name` when this scope holds it.
    /// Whether this scope holds the lock known as `id`.
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.state.lock().live(id).is_some()
    }

    pub(crate) fn reenter(&self, name: &str) -> Option<Arc<HeldLock>> {
        let state = self.state.lock();
        let lock = state.live(name)?;
        lock.holds.fetch_add(1, Ordering::AcqRel);
        Some(lock)
    }

    /// Counts an acquisition of `name` in flight until the returned value
    /// is dropped.
    pub(crate) fn attempting<'a>(&'a self, name: &Arc<str>) -> Attempting<'a> {
        let mut state = self.state.lock();
        state.locks.entry(name.clone()).or_default().attempts += 1;
        Attempting {
            scope: self,
            name: name.clone(),
        }
    }

    /// Records a lock just acquired under this scope's owner. Returns the
    /// lock the scope now holds and whether this was its first hold (decided
    /// under the scope's lock, so exactly one of two sibling acquisitions of
    /// the same lock is first; the other gets a hold on the first's lock).
    /// A first hold is recorded only when `admit` (called under the scope's
    /// lock) accepts it; otherwise nothing is, and the result is `None`.
    pub(crate) fn insert(
        &self,
        lock: Arc<HeldLock>,
        admit: impl FnOnce(&Arc<HeldLock>) -> bool,
    ) -> Option<(Arc<HeldLock>, bool)> {
        let mut state = self.state.lock();
        if let Some(existing) = state.live(&lock.key.id) {
            existing.holds.fetch_add(1, Ordering::AcqRel);
            return Some((existing, false));
        }
        if !admit(&lock) {
            return None;
        }
        state.locks.entry(lock.key.id.clone()).or_default().held = Arc::downgrade(&lock);
        Some((lock, true))
    }

    /// Whether this scope holds `name` or is acquiring it: a grant to this
    /// scope's owner found in the backend may then be (or become) that
    /// hold, and must not be rolled back.
    #[cfg(test)]
    pub(crate) fn claims(&self, name: &str) -> bool {
        self.state.lock().claims(name)
    }

    /// Runs `f` under the scope's lock unless [`claims`](Scope::claims) is
    /// true (then `None`): nothing of the scope starts acquiring `name`
    /// while `f` runs.
    pub(crate) fn if_unclaimed<T>(&self, name: &str, f: impl FnOnce() -> T) -> Option<T> {
        let state = self.state.lock();
        if state.claims(name) {
            return None;
        }
        let out = f();
        drop(state);
        Some(out)
    }

    /// Drops one hold of `lock`; returns true when it was the last one (the
    /// lock then leaves the scope and must be released in the backend).
    pub(crate) fn drop_hold(&self, lock: &HeldLock) -> bool {
        let mut state = self.state.lock();
        let before = lock
            .holds
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .unwrap_or(0);
        if before != 1 {
            return false;
        }
        if let Some(entry) = state.locks.get_mut(&lock.key.id) {
            if std::ptr::eq(entry.held.as_ptr(), lock) {
                entry.held = Weak::new();
            }
        }
        state.tidy(&lock.key.id);
        true
    }
}

/// An acquisition in flight (see [`Scope::attempting`]).
pub(crate) struct Attempting<'a> {
    scope: &'a Scope,
    name: Arc<str>,
}

impl Drop for Attempting<'_> {
    fn drop(&mut self) {
        let mut state = self.scope.state.lock();
        if let Some(entry) = state.locks.get_mut(&self.name) {
            entry.attempts = entry.attempts.saturating_sub(1);
        }
        state.tidy(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::held::Lease;
    use crate::name::LockKey;

    fn lock(name: &str) -> Arc<HeldLock> {
        let key = LockKey::new("lock:", name).unwrap();
        let lease = Lease::Watchdog(std::time::Duration::from_secs(1));
        Arc::new(HeldLock::new(key, "c:1".into(), 1, lease, Instant::now()))
    }

    #[tokio::test]
    async fn of_two_sibling_grants_of_one_lock_exactly_one_is_first() {
        let scope = Scope::new("c".into(), "c:1".into());
        let (a, first_a) = scope.insert(lock("x"), |_| true).unwrap();
        let (b, first_b) = scope.insert(lock("x"), |_| true).unwrap();
        assert!(first_a && !first_b);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.holds.load(Ordering::Acquire), 2);
        assert!(!scope.drop_hold(&a));
        assert!(scope.drop_hold(&a));
        assert!(!scope.claims("x"));
    }

    #[tokio::test]
    async fn a_refused_first_hold_is_not_recorded() {
        let scope = Scope::new("c".into(), "c:1".into());
        assert!(scope.insert(lock("x"), |_| false).is_none());
        assert!(!scope.claims("x"));
        assert!(scope.reenter("x").is_none());
    }

    #[tokio::test]
    async fn an_acquisition_in_flight_claims_its_lock() {
        let scope = Scope::new("c".into(), "c:1".into());
        let name: Arc<str> = "x".into();
        let attempt = scope.attempting(&name);
        assert!(scope.claims("x"));
        drop(attempt);
        assert!(!scope.claims("x"));
    }
}
