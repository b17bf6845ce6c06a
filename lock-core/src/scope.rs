//! Ownership scopes: reentrancy per async call chain.
//!
//! The outermost acquisition opens a [`Scope`] with a fresh owner id
//! (`<client-id>:<n>`). Code running inside it (see
//! [`LockGuard::scope`](crate::LockGuard::scope)) acquires as that same owner:
//! a lock the scope already holds is re-entered by counting in the client
//! (no round trip), another lock is taken in Redis under the scope's owner.
//! Anything outside the scope (a spawned task, a sibling future) is another
//! owner and waits like everyone else.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use crate::client::ClientInner;
use crate::guard::HeldLock;

tokio::task_local! {
    static SCOPE: Arc<Scope>;
}

#[derive(Debug)]
pub(crate) struct Scope {
    /// The id of the client whose locks this scope holds.
    client_id: Arc<str>,
    pub(crate) owner: Arc<str>,
    /// The locks held in this scope, by lock name.
    held: Mutex<HashMap<Arc<str>, Weak<HeldLock>>>,
}

impl Scope {
    pub(crate) fn new(client: &ClientInner) -> Arc<Self> {
        let n = client.next_scope.fetch_add(1, Ordering::Relaxed);
        // Sized up front: this runs on every outermost acquisition.
        let mut owner = String::with_capacity(client.id.len() + 21);
        owner.push_str(&client.id);
        owner.push(':');
        let _ = write!(owner, "{n}");
        Arc::new(Scope {
            client_id: client.id.clone(),
            owner: Arc::from(owner.as_str()),
            held: Mutex::default(),
        })
    }

    /// The scope the current task runs in, when it belongs to `client`.
    pub(crate) fn current(client: &ClientInner) -> Option<Arc<Self>> {
        SCOPE
            .try_with(|scope| scope.clone())
            .ok()
            .filter(|scope| scope.client_id == client.id)
    }

    /// Runs `fut` inside this scope.
    pub(crate) async fn run<F: std::future::Future>(self: Arc<Self>, fut: F) -> F::Output {
        SCOPE.scope(self, fut).await
    }

    /// Runs `f` inside this scope.
    pub(crate) fn run_sync<T>(self: Arc<Self>, f: impl FnOnce() -> T) -> T {
        SCOPE.sync_scope(self, f)
    }

    /// Adds a hold to the lock named `name` when this scope holds it.
    pub(crate) fn reenter(&self, name: &str) -> Option<Arc<HeldLock>> {
        let held = self.held.lock().unwrap();
        let lock = held.get(name)?.upgrade()?;
        if lock.holds.load(Ordering::Acquire) == 0 {
            return None;
        }
        lock.holds.fetch_add(1, Ordering::AcqRel);
        Some(lock)
    }

    /// Records a lock just acquired under this scope's owner. When a sibling
    /// future of the scope recorded the same lock meanwhile, that one gets a
    /// hold more and is returned instead.
    pub(crate) fn insert(&self, lock: Arc<HeldLock>) -> Arc<HeldLock> {
        let mut held = self.held.lock().unwrap();
        if let Some(existing) = held.get(&lock.key.name).and_then(Weak::upgrade) {
            if existing.holds.load(Ordering::Acquire) > 0 {
                existing.holds.fetch_add(1, Ordering::AcqRel);
                return existing;
            }
        }
        held.insert(lock.key.name.clone(), Arc::downgrade(&lock));
        lock
    }

    /// Whether this scope holds the lock named `name`.
    pub(crate) fn holds(&self, name: &str) -> bool {
        let held = self.held.lock().unwrap();
        held.get(name)
            .and_then(Weak::upgrade)
            .is_some_and(|lock| lock.holds.load(Ordering::Acquire) > 0)
    }

    /// Drops one hold of `lock`; returns true when it was the last one (the
    /// lock then leaves the scope and must be released in the backend).
    pub(crate) fn drop_hold(&self, lock: &HeldLock) -> bool {
        let mut held = self.held.lock().unwrap();
        let before = lock.holds.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0);
        if before == 1 {
            if let Entry::Occupied(entry) = held.entry(lock.key.name.clone()) {
                if std::ptr::eq(entry.get().as_ptr(), lock) {
                    entry.remove();
                }
            }
            true
        } else {
            false
        }
    }
}
