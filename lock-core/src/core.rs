//! The client's shared core: its id, settings and backend, the watchdog and
//! the janitor it owns, and which locks its scopes hold. Every handle on a
//! client (clones of [`LockClient`](crate::LockClient), locks, guards) shares
//! one core.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::backend::Backend;
use crate::held::HeldLock;
use crate::janitor::Janitor;
use crate::name::LockKey;
use crate::scope::Scope;
use crate::sync::Mutex;
use crate::watchdog::Watchdog;
use crate::LockError;

pub(crate) struct ClientCore {
    pub(crate) id: Arc<str>,
    pub(crate) prefix: String,
    /// The lease of watchdog-mode locks.
    pub(crate) lease: Duration,
    /// How long one command may take (also: how long a waiter waits for its
    /// subscription to be confirmed).
    pub(crate) response_timeout: Duration,
    pub(crate) backend: Arc<dyn Backend>,
    /// The identity of the store the locks live in (with the lock's Redis
    /// key, which includes the prefix, it says whether two clients' locks
    /// are the same lock).
    pub(crate) store: Arc<str>,
    pub(crate) watchdog: Watchdog,
    pub(crate) janitor: Janitor,
    next_scope: AtomicU64,
    /// The locks some scope of this client holds, by lock name: a waiter of
    /// this client knows such a lock is busy without asking the server.
    holders: Mutex<HashMap<Arc<str>, Weak<HeldLock>>>,
}

impl ClientCore {
    pub(crate) fn new(
        id: Arc<str>,
        prefix: String,
        lease: Duration,
        response_timeout: Duration,
        backend: Arc<dyn Backend>,
    ) -> Self {
        let store = backend.store_id().into();
        ClientCore {
            id,
            store,
            prefix,
            lease,
            response_timeout,
            watchdog: Watchdog::new(backend.clone(), lease),
            backend,
            janitor: Janitor::default(),
            next_scope: AtomicU64::new(1),
            holders: Mutex::default(),
        }
    }

    /// The keys of lock `name`.
    pub(crate) fn key(&self, name: &str) -> Result<LockKey, LockError> {
        LockKey::new(&self.prefix, name)
    }

    /// A new outermost scope, with a fresh owner id `<client-id>:<n>`.
    pub(crate) fn new_scope(&self) -> Arc<Scope> {
        let n = self.next_scope.fetch_add(1, Ordering::Relaxed);
        // Sized up front: this runs on every outermost acquisition.
        let mut owner = String::with_capacity(self.id.len() + 21);
        owner.push_str(&self.id);
        owner.push(':');
        let _ = write!(owner, "{n}");
        Scope::new(self.id.clone(), Arc::from(owner.as_str()))
    }

    /// Restarts background work whose runtime has gone (called on every
    /// acquisition and by `lost()`; cheap when all runs).
    pub(crate) fn ensure_background(&self) {
        self.watchdog.ensure_running();
        self.janitor.ensure_running();
    }

    /// Records `lock` as held by a scope of this client.
    pub(crate) fn holder_insert(&self, lock: &Arc<HeldLock>) {
        self.holders
            .lock()
            .insert(lock.key.name.clone(), Arc::downgrade(lock));
    }

    /// Forgets `lock` as a holder (before its release is sent, so a waiter
    /// woken by that release asks the server).
    pub(crate) fn holder_remove(&self, lock: &HeldLock) {
        let mut holders = self.holders.lock();
        // One lookup (this runs on every release).
        if let Entry::Occupied(entry) = holders.entry(lock.key.name.clone()) {
            if std::ptr::eq(entry.get().as_ptr(), lock) {
                entry.remove();
            }
        }
    }

    /// The lock named `name` when a scope of this client holds it (lease
    /// still running on the local clock) under another owner than `owner`.
    pub(crate) fn held_elsewhere(&self, name: &str, owner: &str) -> Option<Arc<HeldLock>> {
        let holder = self.holders.lock().get(name)?.upgrade()?;
        (&*holder.owner != owner && holder.is_held()).then_some(holder)
    }
}

impl fmt::Debug for ClientCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.id)
            .field("server", &self.backend.server())
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .finish()
    }
}
