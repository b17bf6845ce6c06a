//! [`LockGuard`]: proof of holding a lock, and the shared state of a held lock.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::client::ClientInner;
use crate::key::LockKey;
use crate::scope::Scope;
use crate::LockError;

/// Where a held lock stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldState {
    Held,
    Lost(&'static str),
    Released,
}

/// One lock held by one owner, shared by the reentrant guards on it, the
/// scope that holds it and the watchdog that renews it.
#[derive(Debug)]
pub(crate) struct HeldLock {
    pub(crate) id: u64,
    pub(crate) key: LockKey,
    pub(crate) owner: Arc<str>,
    pub(crate) token: u64,
    /// Renewed by the watchdog (else a fixed lease).
    pub(crate) watchdog: bool,
    pub(crate) client: Arc<ClientInner>,
    /// Guards alive on this lock; changed only under the scope's mutex.
    pub(crate) holds: AtomicUsize,
    state: Mutex<HoldState>,
    /// Woken when the state turns to `Lost` (a `watch` channel costs an
    /// allocation of eight `Notify`s per lock, and a release only needs
    /// the state to change, not to wake anyone).
    lost: Notify,
    /// Until when the lease is known to run, on the local clock: the moment
    /// the last successful acquire or renewal was *sent*, plus the lease,
    /// minus a drift allowance.
    valid_until: Mutex<Instant>,
}

/// The clock drift allowed for on a lease (1% + 2 ms, as Redlock does).
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

impl HeldLock {
    pub(crate) fn new(
        client: Arc<ClientInner>,
        key: LockKey,
        owner: Arc<str>,
        token: u64,
        watchdog: bool,
        valid_until: Instant,
    ) -> Self {
        HeldLock {
            id: client.next_lock_id(),
            key,
            owner,
            token,
            watchdog,
            client,
            holds: AtomicUsize::new(1),
            state: Mutex::new(HoldState::Held),
            lost: Notify::new(),
            valid_until: Mutex::new(valid_until),
        }
    }

    pub(crate) fn state(&self) -> HoldState {
        *self.state.lock().unwrap()
    }

    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock().unwrap()
    }

    /// Records a successful renewal sent at `sent`.
    pub(crate) fn renewed(&self, sent: Instant, lease: Duration) {
        let until = sent + lease - drift(lease);
        let mut valid_until = self.valid_until.lock().unwrap();
        if until > *valid_until {
            *valid_until = until;
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.state() == HoldState::Held && Instant::now() < self.valid_until()
    }

    /// Marks the lease lost (once) and tells every `lost()` waiter.
    pub(crate) fn mark_lost(&self, reason: &'static str) {
        {
            let mut state = self.state.lock().unwrap();
            if *state != HoldState::Held {
                return;
            }
            *state = HoldState::Lost(reason);
        }
        // Logged before `lost()` waiters are woken, so the event is in the
        // log by the time they react.
        tracing::warn!(key = %self.key.name, token = self.token, reason, "lock lease lost");
        self.lost.notify_waiters();
    }

    pub(crate) fn lost_error(&self) -> Option<LockError> {
        let reason = match self.state() {
            HoldState::Lost(reason) => reason,
            _ if Instant::now() >= self.valid_until() => "the lease ran out before release",
            _ => return None,
        };
        Some(LockError::LeaseLost {
            key: self.key.name.to_string(),
            reason,
        })
    }

    /// Releases the lock in the backend after its last hold was dropped.
    /// `resent`: an earlier release of it may have gone through already, so
    /// finding it gone is expected, not worth a warning.
    pub(crate) async fn release_last(&self, resent: bool) -> Result<(), LockError> {
        self.client.watchdog_forget(self);
        // Waiters of this client wait for this release's wake-up instead of
        // racing to the server when the holder is forgotten.
        self.client.backend.expect_wake(&self.key, true);
        self.client.holder_remove(self);
        let lost = self.lost_error();
        let mut release = std::pin::pin!(self.client.backend.release(&self.key, &self.owner));
        let mut first_poll = true;
        let result = std::future::poll_fn(|cx| {
            let poll = release.as_mut().poll(cx);
            if std::mem::take(&mut first_poll) && poll.is_pending() {
                // The release is queued on the multiplexed connection: a
                // waiter of this client woken now queues its attempt behind
                // it, so the lock changes hands in one round trip instead of
                // release, message, attempt. (Should the attempt overtake the
                // release after all, it is only a failed attempt.)
                self.client.backend.wake_local(&self.key);
            }
            poll
        })
        .await;
        if !matches!(result, Ok(true)) {
            self.client.backend.expect_wake(&self.key, false);
        }
        *self.state.lock().unwrap() = HoldState::Released;
        match result {
            Ok(true) => {
                tracing::debug!(key = %self.key.name, token = self.token, "lock released");
                lost.map_or(Ok(()), Err)
            }
            Ok(false) if resent => {
                tracing::debug!(key = %self.key.name, token = self.token, "lock already released");
                lost.map_or(Ok(()), Err)
            }
            Ok(false) => {
                tracing::warn!(key = %self.key.name, token = self.token, "lock was not held at release");
                Err(lost.unwrap_or_else(|| LockError::NotHeld {
                    key: self.key.name.to_string(),
                }))
            }
            Err(err) => Err(err),
        }
    }

    /// Releases in the background, retrying transient errors until the lease
    /// would have run out anyway.
    pub(crate) async fn release_in_background(self: Arc<Self>, resent: bool) {
        let mut delay = Duration::from_millis(50);
        loop {
            match self.release_last(resent).await {
                Err(err @ LockError::Backend { .. }) => {
                    if Instant::now() + delay >= self.valid_until() {
                        tracing::warn!(key = %self.key.name, error = %err, "giving up releasing lock; its lease will expire");
                        return;
                    }
                    tracing::debug!(key = %self.key.name, error = %err, "release failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                _ => return,
            }
        }
    }
}

/// Proof that the current owner holds a lock.
///
/// While the guard lives the lock is held, and in watchdog mode (the
/// default) its lease is renewed every lease/3 by the client's watchdog.
/// [`release`](LockGuard::release) gives it back and says whether mutual
/// exclusion held to the end; dropping the guard releases it in the
/// background (also when the holder panics), so the next waiter gets the
/// lock within a round trip, not after the lease.
///
/// Reentrant holds (the same lock acquired again inside
/// [`scope`](LockGuard::scope)) share one lock in Redis: it is released when
/// the last of their guards is.
pub struct LockGuard {
    lock: Arc<HeldLock>,
    scope: Arc<Scope>,
    done: bool,
}

impl LockGuard {
    pub(crate) fn new(lock: Arc<HeldLock>, scope: Arc<Scope>) -> Self {
        LockGuard {
            lock,
            scope,
            done: false,
        }
    }

    /// The lock name.
    pub fn key(&self) -> &str {
        &self.lock.key.name
    }

    /// The fencing token of this hold: it strictly increases from one holder
    /// of the lock to the next (and is the same for reentrant holds of one
    /// owner). Pass it to the guarded resource, which rejects any token lower
    /// than the highest it has seen, so a holder whose lease ran out while it
    /// was paused cannot overwrite its successor's work.
    pub fn fencing_token(&self) -> u64 {
        self.lock.token
    }

    /// The owner id this lock is held under (`<client-id>:<scope>`).
    pub fn owner(&self) -> &str {
        &self.lock.owner
    }

    /// Whether the lock is still held: no loss detected and the lease known to
    /// run on the local clock.
    pub fn is_held(&self) -> bool {
        self.lock.is_held()
    }

    /// How many guards hold this lock in its owner's scope (1 unless reentered).
    pub fn hold_count(&self) -> usize {
        self.lock.holds.load(Ordering::Acquire)
    }

    /// Resolves when the lease is lost: the watchdog found the lock deleted or
    /// taken over, could not renew it before the lease ran out, or (fixed
    /// lease) the lease ran out. Use it to stop work that must not outlive the
    /// lock, e.g. in a `tokio::select!` next to the work.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes the guard.
    pub async fn lost(&self) {
        let lost = async {
            loop {
                // Created before the check: a `notify_waiters` after it
                // still completes this future.
                let notified = self.lock.lost.notified();
                if matches!(self.lock.state(), HoldState::Lost(_)) {
                    return;
                }
                notified.await;
            }
        };
        if self.lock.watchdog {
            lost.await;
        } else {
            tokio::select! {
                _ = lost => {}
                _ = tokio::time::sleep_until(self.lock.valid_until()) => {}
            }
        }
    }

    /// Runs `fut` inside this guard's ownership scope: acquisitions of this
    /// lock inside it are reentrant (counted in the client), and other locks
    /// taken inside it belong to the same owner. The `#[distributed_lock]`
    /// attribute wraps the function body in this.
    ///
    /// Inside, [`current`](crate::current) returns this lock.
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        let scope = self.scope.clone();
        let lock = self.lock.clone();
        async move {
            let frame = crate::current::enter([lock]);
            scope.run(crate::current::run(frame, fut)).await
        }
    }

    /// Runs `fut` in this guard's [`scope`](LockGuard::scope) unless the
    /// lease is lost first: then `fut` is dropped (cancelled at its current
    /// `.await`) and [`LockError::LeaseLost`] returned.
    ///
    /// # Cancel safety
    /// Cancel safe as far as the lock goes (the guard is untouched); `fut`
    /// is dropped with it.
    pub async fn scope_or_lost<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        tokio::select! {
            biased;
            output = self.scope(fut) => Ok(output),
            () = self.lost() => Err(self.lost_reason()),
        }
    }

    /// The error for a lost lease (also when called a little early).
    pub(crate) fn lost_reason(&self) -> LockError {
        self.lock
            .lost_error()
            .unwrap_or_else(|| LockError::LeaseLost {
                key: self.key().to_owned(),
                reason: "the lease ran out",
            })
    }

    pub(crate) fn held(&self) -> &Arc<HeldLock> {
        &self.lock
    }

    pub(crate) fn owner_scope(&self) -> &Arc<Scope> {
        &self.scope
    }

    /// Runs the closure `f` inside this guard's ownership scope, as
    /// [`scope`](LockGuard::scope) does for a future (so
    /// [`current`](crate::current) returns this lock in it). For
    /// hand-written futures that poll an inner future and cannot wrap it:
    /// call this around each poll.
    pub fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        let frame = crate::current::enter([self.lock.clone()]);
        self.scope
            .clone()
            .run_sync(|| crate::current::run_sync(frame, f))
    }

    /// Releases the lock (for a reentrant hold: drops one hold; the lock is
    /// released with the last).
    ///
    /// Returns [`LockError::LeaseLost`] when the lease was lost while the
    /// guard lived and [`LockError::NotHeld`] when the server no longer had
    /// the lock under this owner; in both cases mutual exclusion may have been
    /// broken and nothing of another owner was deleted. On a backend error the
    /// release is retried in the background until the lease would expire.
    ///
    /// # Cancel safety
    /// Cancel safe: once called, the release completes in the background when
    /// the future is dropped.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        let lock = self.lock.clone();
        if !self.scope.drop_hold(&lock) {
            return lock.lost_error().map_or(Ok(()), Err);
        }
        // Dropping this future half way finishes the release in the
        // background (no task per release on the normal path).
        let mut unfinished = UnfinishedRelease(Some(lock.clone()));
        let result = lock.release_last(false).await;
        unfinished.0 = None;
        if matches!(result, Err(LockError::Backend { .. })) {
            // The request may have been executed without an answer.
            lock.client.spawn(lock.clone().release_in_background(true));
        }
        result
    }
}

/// A release whose future was dropped before its answer: sent again in the
/// background (harmless when the first one went through).
struct UnfinishedRelease(Option<Arc<HeldLock>>);

impl Drop for UnfinishedRelease {
    fn drop(&mut self) {
        if let Some(lock) = self.0.take() {
            let client = lock.client.clone();
            client.spawn(lock.release_in_background(true));
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done || !self.scope.drop_hold(&self.lock) {
            return;
        }
        // `release_last` stops the renewals first.
        let lock = self.lock.clone();
        let client = lock.client.clone();
        client.spawn(lock.release_in_background(false));
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key())
            .field("owner", &self.owner())
            .field("fencing_token", &self.fencing_token())
            .field("held", &self.is_held())
            .finish()
    }
}
