//! [`Lock`]: one lock's settings, and acquisition (waiting, reentrancy,
//! cancel safety).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Attempt;
use crate::client::ClientInner;
use crate::guard::{drift, HeldLock};
use crate::key::LockKey;
use crate::scope::Scope;
use crate::{LockClient, LockError, LockGuard};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Try once.
    No,
    For(Duration),
    Forever,
}

/// A lock to acquire: its name, how long to wait and which lease to use.
///
/// Made by [`LockClient::lock`]. By default it tries once (no waiting) and
/// runs in watchdog mode (the client's lease, renewed while the guard lives).
///
/// ```no_run
/// # async fn demo(client: lock_core::LockClient) -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// let guard = client
///     .lock("account:7")
///     .wait(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "a Lock does nothing until acquired"]
pub struct Lock {
    client: LockClient,
    name: String,
    wait: Wait,
    lease: Option<Duration>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(client: LockClient, name: String) -> Self {
        Lock {
            client,
            name,
            wait: Wait::No,
            lease: None,
        }
    }

    /// Waits up to `wait` for a busy lock (woken by the holder's release, not
    /// by polling). `Duration::ZERO` tries once, the default.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = if wait.is_zero() {
            Wait::No
        } else {
            Wait::For(wait)
        };
        self
    }

    /// Waits for as long as it takes.
    pub fn wait_forever(mut self) -> Self {
        self.wait = Wait::Forever;
        self
    }

    /// A fixed lease: the lock expires `lease` after acquisition and is not
    /// renewed. Without it the lock is in watchdog mode.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Acquires the lock, waiting as configured.
    ///
    /// Errors: [`LockError::Busy`] when it is held and no wait was asked for,
    /// [`LockError::TimedOut`] after the wait, [`LockError::InvalidKey`] /
    /// [`LockError::InvalidConfig`] for a bad name or lease,
    /// [`LockError::WrongType`] when its Redis key holds something else, and
    /// [`LockError::Backend`] when Redis fails or does not answer in time.
    ///
    /// Inside the [`scope`](LockGuard::scope) of a guard of this client, the
    /// lock is acquired as that guard's owner: a lock already held there is
    /// re-entered at no cost.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future at any point leaves the lock not held
    /// by this caller. A grant that the server made for a request whose
    /// answer was never read is released in the background.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        let inner = self.client.inner.clone();
        let key = LockKey::new(&inner.prefix, &self.name)?;
        let (lease, watchdog) = match self.lease {
            None => (inner.lease, true),
            Some(lease) if lease < Duration::from_millis(1) => {
                return Err(LockError::InvalidConfig {
                    key: key.name.to_string(),
                    reason: format!("a lease must be at least 1 ms, got {lease:?}"),
                })
            }
            Some(lease) => (lease, false),
        };
        let scope = match Scope::current(&inner) {
            Some(scope) => {
                if let Some(lock) = scope.reenter(&key.name) {
                    let guard = LockGuard::new(lock, scope);
                    if !guard.is_held() {
                        return Err(LockError::LeaseLost {
                            key: key.name.to_string(),
                            reason: "the lock re-entered was lost",
                        });
                    }
                    tracing::trace!(key = %key.name, holds = guard.hold_count(), "lock re-entered");
                    return Ok(guard);
                }
                scope
            }
            None => Scope::new(&inner),
        };
        let request = Request {
            inner: &inner,
            key: &key,
            scope: &scope,
            lease,
            watchdog,
        };

        let started = Instant::now();
        let waits = self.wait != Wait::No;
        // When other waiters of this client already follow the lock's
        // channel, registering is free: do it first, and the first attempt is
        // already covered by a wake-up.
        let waiter = if waits {
            inner.backend.waiter_if_subscribed(&key)
        } else {
            None
        };
        // A lock that another scope of this client holds is busy: a waiter
        // need not ask the server until that holder releases it (its release
        // wakes us) or its lease runs out on the local clock.
        let held_here = waits && inner.held_elsewhere(&key.name, &scope.owner).is_some();
        let first = if waiter.is_none() && !held_here {
            match request.attempt().await {
                Ok(Ok(guard)) => return Ok(guard),
                Ok(Err(_)) => Ok(()),
                Err(err) => Err(err),
            }
        } else {
            Ok(())
        };
        let deadline = match (self.wait, first) {
            (_, Err(err)) if !matches!(err, LockError::QuorumNotReached { .. }) => return Err(err),
            (Wait::No, Err(err)) => return Err(err),
            (Wait::No, Ok(_)) => {
                return Err(LockError::Busy {
                    key: key.name.to_string(),
                })
            }
            (Wait::For(wait), _) => Some(started + wait),
            (Wait::Forever, _) => None,
        };
        tracing::debug!(key = %key.name, wait = ?self.wait, "waiting for lock");
        // Register before the next attempt: a release between that attempt
        // and the wait below still wakes us.
        let mut waiter = match waiter {
            Some(waiter) => waiter,
            None => {
                let mut waiter = inner.backend.waiter(&key);
                if !waiter.ready(inner.response_timeout).await {
                    tracing::debug!(key = %key.name, "wake-up subscription not confirmed; waiting on the lease");
                }
                waiter
            }
        };
        loop {
            // The attempt after registering is the one that counts: a release
            // before it is seen by it, a release after it wakes us. Without
            // asking the server, the lock is busy while another scope of this
            // client holds it (a holder is forgotten before its release is
            // sent, so its wake-up finds it gone) or while a waiter of this
            // client woken by its release is taking it.
            let ttl = if let Some(holder) = inner.held_elsewhere(&key.name, &scope.owner) {
                // A wake-up taken here found the lock held again: its
                // holder's release will wake the next waiter.
                waiter.attempted(true);
                Some(
                    holder
                        .valid_until()
                        .saturating_duration_since(Instant::now()),
                )
            } else if let Some(until) = waiter.hand_off_elsewhere() {
                Some(until.saturating_duration_since(Instant::now()))
            } else {
                let attempt = request.attempt().await;
                waiter.attempted(matches!(attempt, Ok(Ok(_))));
                match attempt {
                    Ok(Ok(guard)) => return Ok(guard),
                    Ok(Err(ttl)) => ttl,
                    // Redlock without a majority of masters answering: retry
                    // after a random delay (so that competing clients do not
                    // collide again), until the deadline.
                    Err(err @ LockError::QuorumNotReached { .. }) => {
                        let now = Instant::now();
                        let left = deadline.map_or(Duration::MAX, |deadline| deadline - now);
                        if left.is_zero() {
                            return Err(err);
                        }
                        tracing::debug!(key = %key.name, error = %err, "no quorum; retrying");
                        let jitter = Duration::from_millis(rand::random_range(20..200));
                        tokio::time::sleep(jitter.min(left)).await;
                        continue;
                    }
                    Err(err) => return Err(err),
                }
            };
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return Err(LockError::TimedOut {
                    key: key.name.to_string(),
                    waited: now - started,
                });
            }
            // A lost wake-up costs latency, never liveness: sleep at most
            // until the holder's lease runs out (or our deadline, when one
            // last attempt is made).
            let mut nap = ttl.unwrap_or(inner.lease) + Duration::from_millis(1);
            if let Some(deadline) = deadline {
                nap = nap.min(deadline - now);
            }
            tokio::select! {
                _ = waiter.notified() => {}
                _ = tokio::time::sleep(nap) => {}
            }
        }
    }

    /// Like [`acquire`](Lock::acquire), but a lock that stays busy for the
    /// whole wait is `Ok(None)` instead of an error.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Lock::acquire).
    pub async fn try_acquire(self) -> Result<Option<LockGuard>, LockError> {
        match self.acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Busy { .. } | LockError::TimedOut { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// One acquisition in progress.
struct Request<'a> {
    inner: &'a Arc<ClientInner>,
    key: &'a LockKey,
    scope: &'a Arc<Scope>,
    lease: Duration,
    watchdog: bool,
}

impl Request<'_> {
    /// One attempt: `Ok(Ok(guard))` when acquired, `Ok(Err(ttl))` when busy.
    async fn attempt(&self) -> Result<Result<LockGuard, Option<Duration>>, LockError> {
        let sent = Instant::now();
        let mut pending = PendingGrant {
            inner: self.inner,
            key: self.key,
            scope: self.scope,
            armed: true,
            uncertain: false,
        };
        let reply = self
            .inner
            .backend
            .acquire(self.key, &self.scope.owner, self.lease)
            .await;
        let token = match reply {
            Ok(Attempt::Acquired { token }) => token,
            Ok(Attempt::Busy { ttl }) => {
                pending.armed = false;
                return Ok(Err(ttl));
            }
            // The request may have been granted without us hearing of it:
            // `pending` releases it on drop.
            Err(err) => {
                pending.uncertain = true;
                return Err(err);
            }
        };
        pending.armed = false;
        let lock = Arc::new(HeldLock::new(
            self.inner.clone(),
            self.key.clone(),
            self.scope.owner.clone(),
            token,
            self.watchdog,
            sent + self.lease - drift(self.lease).min(self.lease),
        ));
        let held = self.scope.insert(lock.clone());
        if Arc::ptr_eq(&held, &lock) {
            self.inner.holder_insert(&lock);
        }
        let lock = held;
        if self.watchdog && lock.holds.load(std::sync::atomic::Ordering::Acquire) == 1 {
            self.inner.watchdog_track(&lock);
        }
        tracing::debug!(key = %self.key.name, token = lock.token, owner = %lock.owner, "lock acquired");
        Ok(Ok(LockGuard::new(lock, self.scope.clone())))
    }
}

/// Releases a grant whose answer was not turned into a guard (the acquire
/// future was dropped mid-request, or the answer timed out).
struct PendingGrant<'a> {
    inner: &'a Arc<ClientInner>,
    key: &'a LockKey,
    scope: &'a Arc<Scope>,
    armed: bool,
    /// The request failed without an answer: it may still execute later.
    uncertain: bool,
}

impl Drop for PendingGrant<'_> {
    fn drop(&mut self) {
        if !self.armed || self.scope.holds(&self.key.name) {
            return;
        }
        let inner = self.inner.clone();
        let key = self.key.clone();
        let scope = self.scope.clone();
        let uncertain = self.uncertain;
        self.inner.spawn(async move {
            // A cancelled future's request went out on the same connection,
            // so one release after it suffices. A request that timed out may
            // still sit unexecuted in a stalled server's buffer, or in a
            // connection that was replaced: keep releasing (as the owner,
            // harmless when it holds nothing) until that grant would have
            // expired anyway.
            let give_up = Instant::now() + if uncertain { inner.lease } else { Duration::ZERO };
            let mut delay = Duration::from_millis(100);
            loop {
                if scope.holds(&key.name) {
                    return;
                }
                match inner.backend.release(&key, &scope.owner).await {
                    Ok(true) => {
                        tracing::debug!(key = %key.name, "released a grant whose acquire was cancelled");
                        return;
                    }
                    Ok(false) => {}
                    Err(err) => tracing::debug!(key = %key.name, error = %err, "could not release a cancelled grant yet"),
                }
                if Instant::now() + delay > give_up {
                    return;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        });
    }
}
