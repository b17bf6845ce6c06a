//! [`MultiLock`]: several locks taken together, all or nothing, in an order
//! that cannot deadlock.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::{LockClient, LockError, LockGuard};

/// Several locks to acquire as one (Redisson's `MultiLock`), made by
/// [`LockClient::lock_all`].
///
/// The names are sorted and deduplicated before acquisition, so two callers
/// asking for `["account:1", "account:2"]` and `["account:2", "account:1"]`
/// take them in the same order and cannot deadlock. All are held under one
/// owner; if one cannot be had within the wait, those already taken are
/// released and the error is returned.
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
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
    client: LockClient,
    names: Vec<String>,
    wait: Option<Duration>,
    forever: bool,
    lease: Option<Duration>,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names)
            .field("wait", &self.wait)
            .field("forever", &self.forever)
            .field("lease", &self.lease)
            .finish()
    }
}

impl MultiLock {
    pub(crate) fn new(client: LockClient, mut names: Vec<String>) -> Self {
        names.sort();
        names.dedup();
        MultiLock {
            client,
            names,
            wait: None,
            forever: false,
            lease: None,
        }
    }

    /// Waits up to `wait` in all (not per lock). `Duration::ZERO` tries each
    /// lock once, the default.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self.forever = false;
        self
    }

    /// Waits for as long as it takes.
    pub fn wait_forever(mut self) -> Self {
        self.forever = true;
        self
    }

    /// A fixed lease for every lock (no watchdog); see [`Lock::lease`](crate::Lock::lease).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
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
        let started = Instant::now();
        let mut guards: Vec<LockGuard> = Vec::with_capacity(self.names.len());
        for name in self.names {
            let mut lock = self.client.lock(name);
            if self.forever {
                lock = lock.wait_forever();
            } else if let Some(wait) = self.wait {
                lock = lock.wait(wait.saturating_sub(started.elapsed()));
            }
            if let Some(lease) = self.lease {
                lock = lock.lease(lease);
            }
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
        Ok(MultiLockGuard { guards })
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
        let lost = self.guards.iter().map(|guard| Box::pin(guard.lost()));
        futures_util::future::select_all(lost).await;
    }

    /// Runs `fut` inside the locks' ownership scope: every lock is reentrant
    /// there, and [`current_all`](crate::current_all) lists them
    /// ([`current`](crate::current) gives the last in acquisition order).
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        let scope = self.guards[0].owner_scope().clone();
        let locks: Vec<_> = self.guards.iter().map(|g| g.held().clone()).collect();
        async move {
            let frame = crate::current::enter(locks);
            scope.run(crate::current::run(frame, fut)).await
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
                let lost = self.guards.iter().find(|g| !g.is_held()).unwrap_or(&self.guards[0]);
                Err(lost.lost_reason())
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
