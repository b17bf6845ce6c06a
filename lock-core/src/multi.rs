//! [`MultiLock`]: several locks taken together, all or nothing, in an order
//! that cannot deadlock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client_core::ClientCore;
use crate::options::{LockOptions, Wait};
use crate::{Lock, LockError, LockGuard};

/// Several locks to acquire as one (Redisson's `MultiLock`), made by
/// [`LockClient::lock_all`](crate::LockClient::lock_all).
///
/// The names are sorted and deduplicated before acquisition, so two callers
/// asking for `["account:1", "account:2"]` and `["account:2", "account:1"]`
/// take them in the same order and cannot deadlock. All are held under one
/// owner; if one cannot be had within the wait, those already taken are
/// released and the error is returned.
///
/// ```no_run
/// # async fn demo(client: distlock_core::LockClient) -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// let guard = client
///     .lock_all(["account:7", "account:3"])
///     .wait(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// assert_eq!(guard.keys().collect::<Vec<_>>(), ["account:3", "account:7"]);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "a MultiLock does nothing until acquired"]
pub struct MultiLock {
    core: Arc<ClientCore>,
    names: Vec<String>,
    options: LockOptions,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names)
            .field("wait", &self.options.wait_for())
            .field("lease", &self.options.fixed_lease())
            .field("hold_at_least", &self.options.min_hold())
            .finish()
    }
}

impl MultiLock {
    pub(crate) fn new(core: Arc<ClientCore>, mut names: Vec<String>) -> Self {
        names.sort();
        names.dedup();
        MultiLock {
            core,
            names,
            options: LockOptions::new(),
        }
    }

    /// Waits up to `wait` in all (not per lock). `Duration::ZERO` tries each
    /// lock once, the default; a wait too long for the clock to represent
    /// waits as long as it takes.
    /// A [`Wait`] is taken as well.
    pub fn wait(mut self, wait: impl Into<Wait>) -> Self {
        self.options = self.options.wait(wait);
        self
    }

    /// Waits for as long as it takes.
    pub fn wait_forever(mut self) -> Self {
        self.options = self.options.wait_forever();
        self
    }

    /// A fixed lease for every lock (no watchdog); see [`Lock::lease`](crate::Lock::lease).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.options = self.options.lease(lease);
        self
    }

    /// Every lock held at least this long; see
    /// [`Lock::hold_at_least`](crate::Lock::hold_at_least).
    pub fn hold_at_least(mut self, at_least: Duration) -> Self {
        self.options = self.options.hold_at_least(at_least);
        self
    }

    /// Takes every option from `options` (the wait is for all the locks
    /// together), replacing what was set before.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// The lock names, in acquisition order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Acquires every lock, in sorted order, under one owner.
    ///
    /// Errors as [`Lock::acquire`](crate::Lock::acquire), for the first lock
    /// that could not be had; an empty list of names is
    /// [`LockError::InvalidKey`].
    ///
    /// A lock taken early whose lease is lost while a later one is awaited (a
    /// partition or a stall longer than the lease, or the lock deleted) is
    /// never handed out as held: every lock is given back and the whole set
    /// taken again while the wait lasts; after it,
    /// [`LockError::LeaseLost`] for that lock.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future releases the locks already taken (in
    /// the background) and leaves none held.
    pub async fn acquire(self) -> Result<MultiLockGuard, LockError> {
        if self.names.is_empty() {
            return Err(LockError::InvalidKey {
                key: String::new(),
                reason: "a multi-lock needs at least one lock name",
            });
        }
        if self.names.iter().any(String::is_empty) {
            return Err(LockError::InvalidKey {
                key: String::new(),
                reason: "a lock name must not be empty",
            });
        }
        let started = Instant::now();
        let wait = self.options.wait_for().normalized();
        let deadline = wait.deadline(started);
        loop {
            let guards = self.acquire_each(wait, deadline).await?;
            // A lock whose lease was lost while a later one was awaited: the
            // set is not held (another owner may have that lock now).
            let Some(lost) = guards.iter().find(|g| !g.is_held()) else {
                return Ok(MultiLockGuard { guards });
            };
            let error = lost.lost_reason();
            tracing::debug!(key = %lost.key(), "a lock of the multi-lock was lost while the others were taken; taking them again");
            for guard in guards.into_iter().rev() {
                let _ = guard.release().await;
            }
            let out_of_time = match (wait, deadline) {
                (Wait::Once, _) => true,
                (_, Some(deadline)) => Instant::now() >= deadline,
                (_, None) => false,
            };
            if out_of_time {
                return Err(error);
            }
        }
    }

    /// One pass: every lock in order, each with what is left of the wait;
    /// all or nothing.
    async fn acquire_each(
        &self,
        wait: Wait,
        deadline: Option<Instant>,
    ) -> Result<Vec<LockGuard>, LockError> {
        let mut guards: Vec<LockGuard> = Vec::with_capacity(self.names.len());
        for name in &self.names {
            let mut lock = Lock::new(self.core.clone(), name.clone()).options(self.options);
            lock = match (wait, deadline) {
                (Wait::Once, _) => lock.wait(Wait::Once),
                // Whatever is left of the budget (zero: one last try).
                (Wait::For(_), Some(deadline)) => {
                    lock.wait(deadline.saturating_duration_since(Instant::now()))
                }
                (Wait::For(_) | Wait::Forever, _) => lock.wait_forever(),
            };
            // Taken inside the first guard's scope, so every lock has one owner.
            let acquired = match guards.first() {
                Some(first) => first.scope(lock.acquire()).await,
                None => lock.acquire().await,
            };
            match acquired {
                Ok(guard) => guards.push(guard),
                Err(err) => {
                    // All or nothing: give back what was taken before failing.
                    for guard in guards.into_iter().rev() {
                        let _ = guard.release().await;
                    }
                    return Err(err);
                }
            }
        }
        Ok(guards)
    }
}

/// Proof that the current owner holds every lock of a [`MultiLock`].
///
/// Dropping it releases them all in the background, as [`LockGuard`] does.
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.guards).finish()
    }
}

impl MultiLockGuard {
    /// The guards, in acquisition (sorted name) order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The lock names, in acquisition order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(LockGuard::key)
    }

    /// The guard of the lock `name`.
    pub fn get(&self, name: &str) -> Option<&LockGuard> {
        self.guards.iter().find(|guard| guard.key() == name)
    }

    /// Whether every lock is still held.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Resolves when the lease of any of the locks is lost.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes the guards.
    pub async fn lost(&self) {
        if self.guards.is_empty() {
            return std::future::pending().await; // never: `acquire` refuses no names
        }
        let lost = self.guards.iter().map(|guard| Box::pin(guard.lost()));
        futures_util::future::select_all(lost).await;
    }

    /// Runs `fut` inside the locks' ownership scope: every lock is reentrant
    /// there, and [`current_all`](crate::current_all) lists them
    /// ([`current`](crate::current) gives the last in acquisition order).
    /// Re-entry follows [`LockGuard::scope`]'s rules: branches that `fut`
    /// polls concurrently re-enter these locks, not each other's.
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        // Never empty: `acquire` refuses an empty list.
        let store = self.guards.first().map(|guard| guard.store().clone());
        let locks: Vec<_> = self
            .guards
            .iter()
            .map(|g| (g.held().clone(), g.owner_scope().clone()))
            .collect();
        async move {
            let frame = store.and_then(|store| crate::current::enter(&store, locks));
            crate::current::run(frame, fut).await
        }
    }

    /// Runs `fut` in the locks' [`scope`](MultiLockGuard::scope) unless the
    /// lease of one of them is lost first: then `fut` is dropped (cancelled
    /// at its current `.await`) and [`LockError::LeaseLost`] returned for
    /// that lock.
    ///
    /// # Cancel safety
    /// Cancel safe as far as the locks go (the guard is untouched); `fut` is
    /// dropped with it.
    pub async fn scope_or_lost<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        tokio::select! {
            biased;
            output = self.scope(fut) => Ok(output),
            () = self.lost() => {
                let lost = self.guards.iter().find(|g| !g.is_held()).or(self.guards.first());
                Err(match lost {
                    Some(guard) => guard.lost_reason(),
                    None => LockError::LeaseLost { key: String::new(), reason: "no locks" },
                })
            }
        }
    }

    /// Releases every lock, in reverse acquisition order, and returns the
    /// first error (see [`LockGuard::release`]); the others are released
    /// regardless.
    ///
    /// # Cancel safety
    /// Cancel safe: locks not yet released when the future is dropped are
    /// released in the background.
    pub async fn release(self) -> Result<(), LockError> {
        let mut result = Ok(());
        for guard in self.guards.into_iter().rev() {
            let released = guard.release().await;
            if result.is_ok() {
                result = released;
            }
        }
        result
    }
}
