//! The client's shared core: its id, settings and backend, the watchdog and
//! the janitor it owns, which locks its scopes hold, and whether it shuts
//! down. Every handle on a client (clones of
//! [`LockClient`](crate::LockClient), locks, guards) shares one core.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Backend, Unsupported};
use crate::held::HeldLock;
use crate::hot::{GiveUp, Keeper};
use crate::janitor::Janitor;
use crate::name::{self, KeyStr, Kind, Layout, LockKey};
use crate::scope::Scope;
use crate::shutdown_state::Closing;
use crate::sync::Mutex;
use crate::wakeups::Wakeups;
use crate::watchdog::Watchdog;
use crate::LockError;

/// A holder among a client's holders: the lock's id, and the owner for a
/// primitive many owners hold at once (reads, permits).
type HolderId = (KeyStr, Option<Arc<str>>);

fn holder_id(lock: &HeldLock) -> HolderId {
    let owner = lock.key.kind.is_shared().then(|| lock.owner.clone());
    (lock.key.id().clone(), owner)
}

pub(crate) struct ClientCore {
    pub(crate) id: Arc<str>,
    pub(crate) prefix: String,
    /// The lease of watchdog-mode locks.
    pub(crate) lease: Duration,
    /// How long one command may take (also: how long a waiter waits for its
    /// subscription to be confirmed).
    pub(crate) response_timeout: Duration,
    pub(crate) backend: Arc<dyn Backend>,
    /// This client's waiters and the subscriptions that wake them.
    pub(crate) wakeups: Wakeups,
    /// The identity of the store the locks live in (with the lock's Redis
    /// key, which includes the prefix, it says whether two clients' locks
    /// are the same lock).
    pub(crate) store: Arc<str>,
    pub(crate) watchdog: Watchdog,
    pub(crate) janitor: Janitor,
    next_scope: AtomicU64,
    /// The locks some scope of this client holds, by lock name: a waiter of
    /// this client knows such a lock is busy without asking the server, and
    /// the shutdown knows what to give back.
    holders: Mutex<HashMap<HolderId, Weak<HeldLock>>>,
    /// Releases sent and not answered yet (see [`Releasing`]): the shutdown
    /// waits for them.
    releasing: AtomicUsize,
    pub(crate) closing: Closing,
    /// The `name` label of the client's metrics.
    pub(crate) meter_names: crate::metric_points::Names,
    /// Native or Redisson's layout of the plain lock.
    pub(crate) layout: Layout,
    /// Hot locks (`LockClientBuilder::keep_hot`), when on.
    pub(crate) keeper: Option<Keeper>,
}

impl ClientCore {
    pub(crate) fn new(
        id: Arc<str>,
        prefix: String,
        lease: Duration,
        response_timeout: Duration,
        backend: Arc<dyn Backend>,
        wakeups: Wakeups,
    ) -> Self {
        let store = backend.store_id().into();
        ClientCore {
            id,
            store,
            wakeups,
            prefix,
            lease,
            response_timeout,
            watchdog: Watchdog::new(backend.clone(), lease),
            backend,
            janitor: Janitor::default(),
            next_scope: AtomicU64::new(1),
            holders: Mutex::default(),
            releasing: AtomicUsize::new(0),
            closing: Closing::default(),
            meter_names: crate::metric_points::Names::default(),
            layout: Layout::Native,
            keeper: None,
        }
    }

    /// Keeps hot locks for `linger` (see `hot/`), where the backend
    /// offers them.
    pub(crate) fn with_keeper(mut self, linger: Option<Duration>, give_up: GiveUp) -> Self {
        let timing = (self.lease, self.response_timeout);
        let backend = self.backend.clone();
        self.keeper = linger.and_then(|linger| {
            Some(Keeper::new(
                linger,
                timing,
                backend,
                self.wakeups.keeper()?,
                give_up,
            ))
        });
        self
    }

    /// The client lays out its plain locks as `layout` says.
    pub(crate) fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// The client's metrics carry lock names as `names` says.
    #[cfg(feature = "metrics")]
    pub(crate) fn with_meter_names(mut self, names: crate::metrics::NameLabel) -> Self {
        self.meter_names = names;
        self
    }

    /// The keys of lock `name`.
    pub(crate) fn key(&self, name: &str) -> Result<LockKey, LockError> {
        match self.layout {
            Layout::Native => LockKey::new(&self.prefix, name),
            Layout::Redisson => LockKey::redisson(&self.prefix, name),
        }
    }

    /// The keys of `kind` of the family named `name`.
    pub(crate) fn key_of(&self, name: &str, kind: Kind) -> Result<LockKey, LockError> {
        match (self.layout, kind) {
            (Layout::Redisson, Kind::Exclusive) => LockKey::redisson(&self.prefix, name),
            (Layout::Redisson, _) => {
                if let Some(Unsupported { backend, reason }) =
                    self.backend.capabilities().redisson_family
                {
                    return Err(LockError::Unsupported {
                        key: name::display_name(name),
                        primitive: kind.describe(),
                        backend,
                        reason,
                    });
                }
                LockKey::redisson_family(&self.prefix, name, kind)
            }
            (Layout::Native, _) => LockKey::of_kind(&self.prefix, name, kind),
        }
    }

    /// A new outermost scope, with a fresh owner id `<client-id>:<n>`.
    pub(crate) fn new_scope(&self) -> Arc<Scope> {
        let n = self.next_scope.fetch_add(1, Ordering::Relaxed);
        // Sized up front: this runs on every outermost acquisition.
        let mut owner = String::with_capacity(self.id.len() + 21);
        owner.push_str(&self.id);
        owner.push(':');
        let _ = write!(owner, "{n}");
        Scope::new(Arc::from(owner.as_str()))
    }

    /// Restarts background work whose runtime has gone (called on every
    /// acquisition and by `lost()`; cheap when all runs).
    pub(crate) fn ensure_background(&self) {
        self.watchdog.ensure_running();
        self.janitor.ensure_running();
        self.backend.ensure_running();
    }

    /// Records `lock` as held by a scope of this client; refuses it (false)
    /// once the client shuts down. Decided under the holders lock, where the
    /// shutdown begins: a lock is either recorded before it (and given back
    /// by it) or refused.
    pub(crate) fn holder_insert(&self, lock: &Arc<HeldLock>) -> bool {
        let mut holders = self.holders.lock();
        if self.closing.is_closing() {
            return false;
        }
        holders.insert(holder_id(lock), Arc::downgrade(lock));
        true
    }

    /// Forgets `lock` as a holder (before its release is sent, so a waiter
    /// woken by that release asks the server).
    pub(crate) fn holder_remove(&self, lock: &HeldLock) {
        let mut holders = self.holders.lock();
        // One lookup (this runs on every release).
        if let Entry::Occupied(entry) = holders.entry(holder_id(lock)) {
            if std::ptr::eq(entry.get().as_ptr(), lock) {
                entry.remove();
                if self.closing.is_closing() {
                    self.closing.holder_left();
                }
            }
        }
    }

    /// Whether the client shuts down (or has shut down): it takes no new locks.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.is_closing()
    }

    /// The error of an acquisition of lock `name` refused by the shutdown.
    pub(crate) fn shutting_down(&self, name: &str) -> LockError {
        LockError::ShuttingDown {
            key: name.to_owned(),
            client: self.id.to_string(),
        }
    }

    /// Begins the shutdown (or moves its deadline earlier, when it has
    /// begun): from now on no lock is recorded as held, and every waiting
    /// acquisition is woken to fail. Returns whether this call began it.
    pub(crate) fn begin_shutdown(&self, deadline: Option<Instant>) -> bool {
        let holders = self.holders.lock();
        let began = self.closing.begin(deadline, || {
            holders
                .values()
                .filter(|lock| lock.strong_count() > 0)
                .cloned()
                .collect()
        });
        drop(holders);
        if began {
            self.closing.wake_waiters();
        }
        began
    }

    /// How many locks scopes of this client still hold (or have not given
    /// back yet).
    pub(crate) fn holder_count(&self) -> usize {
        self.holders
            .lock()
            .values()
            .filter(|lock| lock.strong_count() > 0)
            .count()
    }

    /// Counts a release in flight until the returned value is dropped.
    pub(crate) fn releasing(&self) -> Releasing<'_> {
        self.releasing.fetch_add(1, Ordering::AcqRel);
        Releasing(self)
    }

    /// How many releases are in flight.
    pub(crate) fn releases_in_flight(&self) -> usize {
        self.releasing.load(Ordering::Acquire)
    }

    /// Takes every lock scopes of this client still hold off the holders
    /// list (the shutdown gives them back).
    pub(crate) fn take_holders(&self) -> Vec<Arc<HeldLock>> {
        self.holders
            .lock()
            .drain()
            .filter_map(|(_, lock)| lock.upgrade())
            .collect()
    }

    /// Stops the background work that must not outlive a shutdown for good:
    /// the watchdog (nothing is renewed any more), the wake-up subscribers
    /// and the backend's own background work. Background releases still run when queued.
    pub(crate) fn stop_background(&self) {
        if let Some(keeper) = &self.keeper {
            keeper.stop();
        }
        self.watchdog.stop();
        self.wakeups.stop();
        self.backend.shut_down();
    }

    /// The lock named `name` when a scope of this client holds it (lease
    /// still running on the local clock) under another owner than `owner`.
    pub(crate) fn held_elsewhere(&self, id: &KeyStr, owner: &str) -> Option<Arc<HeldLock>> {
        let holder = self.holders.lock().get(&(id.clone(), None))?.upgrade()?;
        (&*holder.owner != owner && holder.is_held()).then_some(holder)
    }
}

/// A release in flight (see [`ClientCore::releasing`]).
pub(crate) struct Releasing<'a>(&'a ClientCore);

/// A client dropped without a shutdown gives up the hot locks it kept idle
/// (in the background, on the runtime it is dropped on; without one they
/// expire with their lease, as they are no longer renewed).
impl Drop for ClientCore {
    fn drop(&mut self) {
        let Some(keeper) = &self.keeper else { return };
        let idle = keeper.drain_idle();
        if idle.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let backend = self.backend.clone();
        runtime.spawn(async move {
            for lock in idle {
                if let Err(err) = backend.release(&lock.key, &lock.owner).await {
                    tracing::debug!(key = %lock.key.name, error = %err, "could not give up a kept lock of a dropped client");
                }
            }
        });
    }
}

impl Drop for Releasing<'_> {
    fn drop(&mut self) {
        let before = self.0.releasing.fetch_sub(1, Ordering::AcqRel);
        if before == 1 && self.0.closing.is_closing() {
            self.0.closing.holder_left();
        }
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
