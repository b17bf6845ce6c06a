//! Acquisition: one attempt, waiting for a busy lock (pub/sub wake-up,
//! in-client hand-off, a nap bounded by the holder's lease), re-entry in a
//! scope, and the rollback of a grant whose acquisition was abandoned.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{Attempt, Busy, Renewal, Unsupported};
use crate::client_core::ClientCore;
use crate::held::{HeldLock, Lease};
use crate::hot::{Keeper, Take};
use crate::lease;
use crate::metric_points::Labels;
use crate::name::{Kind, LockKey};
use crate::options::{LockOptions, Wait};
use crate::scope::{Attempting, Scope};
use crate::waiters::WaitSet;
use crate::LockError;

/// A lock just acquired (or re-entered) by `scope`.
pub(crate) struct Acquired {
    pub(crate) lock: Arc<HeldLock>,
    pub(crate) scope: Arc<Scope>,
}

/// Acquires `kind` of the primitive named `name` of `core` as `options`
/// say: waiting as long as their [`Wait`], with their fixed lease or (when
/// none) in watchdog mode, held at least their minimum hold.
///
/// A plain function around an `async move` block, not an `async fn`: an
/// `async fn` keeps its arguments twice in its future (as passed, and moved
/// into its body), which every waiter of the process carries.
#[allow(clippy::manual_async_fn)] // on purpose, see above
pub(crate) fn acquire<'a>(
    core: &'a Arc<ClientCore>,
    name: &'a str,
    kind: Kind,
    options: &'a LockOptions,
) -> impl Future<Output = Result<Acquired, LockError>> + Send + 'a {
    async move {
        let wait = options.wait_for().normalized();
        let (lease, at_least) = (options.fixed_lease(), options.min_hold());
        let mut key = core.key_of(name, kind)?;
        check_kind(core, &key)?;
        let at_least = lease::check_at_least(&key.name, at_least, lease)?;
        // A waiting fair or write acquisition keeps a place while it waits.
        // (Redisson's read-write lock records no intent: its writers wait unqueued.)
        key.queue = wait != Wait::Once
            && matches!(kind, Kind::Fair | Kind::Write)
            && key.layout == crate::name::Layout::Native;
        let lease = match lease {
            None => Lease::Watchdog(core.lease),
            Some(lease) => Lease::Fixed(lease::check_fixed(&key.name, lease)?),
        };
        core.ensure_background();
        // The locks whose scope the code being polled runs in: only these are
        // re-entered (a sibling branch of a `join!` is not inside another
        // branch's lock scope).
        let stack = crate::current::stack();
        if let Some(stack) = &stack {
            if let Some((lock, scope)) = crate::current::reenter(stack, &core.id, key.id()) {
                if !lock.is_held() {
                    scope.drop_hold(&lock); // not the last: the outer guard holds one
                    return Err(LockError::LeaseLost {
                        key: key.name.to_string(),
                        reason: "the lock re-entered was lost",
                    });
                }
                tracing::trace!(key = %key.name, holds = lock.holds.load(std::sync::atomic::Ordering::Acquire), "lock re-entered");
                return Ok(Acquired { lock, scope });
            }
            // (A writer that also reads re-entered its write hold above.)
            if kind == Kind::Write && crate::current::holds(stack, &core.id, &key.aux(":read")) {
                return Err(LockError::UpgradeRefused {
                    key: key.name.to_string(),
                });
            }
        }
        let outer = stack
            .as_deref()
            .and_then(|stack| crate::current::scope_for(stack, &core.id, key.stem()));
        // The claim is held until the acquisition ends: while it is under way
        // (and then while its lock is held), no other acquisition of the
        // primitive takes the same owner.
        let (scope, _claim) = match outer {
            Some(outer) => {
                let ours = |lock: &HeldLock| crate::current::on_stack(stack.as_deref(), lock);
                match outer.claim(&key, ours) {
                    Some(claim) => (outer, Some(claim)),
                    // Something else of the scope (a sibling branch, a task
                    // running a guard of the scope) holds or takes the
                    // primitive: this acquisition is another owner.
                    None => (core.new_scope(), None),
                }
            }
            None => {
                // Only a waiting acquisition would wait on itself; a single try
                // finds the lock busy, as it is. Any kind of the primitive counts
                // (its stem): a chain holding a read through one client and
                // asking for the write through another waits for itself, and so
                // does a read behind a writer waiting for the chain's read, or a
                // permit the chain's own permits keep from it.
                let held = match wait {
                    Wait::Once => None,
                    _ => crate::current::held_by_other_client(
                        stack.as_deref(),
                        &core.store,
                        key.stem(),
                        &core.id,
                    ),
                };
                if let Some(held) = held {
                    let holder = held.owner.to_string();
                    return Err(LockError::HeldByOtherClient {
                        key: key.name.to_string(),
                        holder_client: holder
                            .split_once(':')
                            .map_or(holder.as_str(), |(client, _)| client)
                            .to_owned(),
                        holder,
                        client: core.id.to_string(),
                    });
                }
                (core.new_scope(), None)
            }
        };
        // A shutting-down client takes no new locks (re-entering one its caller
        // holds, above, still works: a body finishing in the grace period may).
        if core.is_closing() {
            return Err(core.shutting_down(&key.name));
        }
        let labels = Labels::new(&core.meter_names, &key);
        let hot = match &core.keeper {
            Some(keeper)
                if kind == Kind::Exclusive
                    && lease.is_watchdog()
                    && at_least.is_none()
                    && !options.is_cold() =>
            {
                keeper.ensure_running();
                true
            }
            _ => false,
        };
        let request = Request {
            core,
            key: &key,
            scope: &scope,
            lease,
            at_least,
            labels: &labels,
            hot,
        };
        let span = tracing::debug_span!(
            "lock_acquire",
            key = %key.name,
            kind = kind.describe(),
            owner = %scope.owner,
            token = tracing::field::Empty,
        );
        let started = Instant::now();
        // The client's shutdown ends every wait at once (an attempt cut short
        // is taken back like any dropped one).
        // The span is moved into the future (not cloned): a waiter's future
        // carries one, and records the token through it at the end.
        let lock = {
            let mut acquiring = std::pin::pin!(async {
                tokio::select! {
                    biased;
                    () = core.closing.started() => Err(core.shutting_down(&key.name)),
                    lock = async {
                        if kind == Kind::Exclusive {
                            request.run(wait).await
                        } else {
                            // Boxed: the family's wait is the larger future, and
                    // unboxed it would size every plain waiter's too.
                    Box::pin(request.run_family(wait)).await
                        }
                    } => lock,
                }
            }
            .instrument(span));
            let lock = acquiring.as_mut().await;
            labels.acquisition(&lock, started.elapsed());
            let lock = lock?;
            acquiring.span().record("token", lock.token);
            lock
        };
        Ok(Acquired { lock, scope })
    }
}

/// Why a grant answered after its lease had run out on the local clock is
/// no lock (a try reports it as [`LockError::LeaseLost`]; a wait retries).
const ANSWERED_LATE: &str = "the grant was answered after its lease had run out";

/// An attempt's error after which a waiting acquisition tries again soon
/// (until its deadline) instead of failing: Redlock without a quorum, or a
/// grant answered too late. Neither leaves a release to wait for: the late
/// grant's rollback wakes the other waiters, and this one retries itself.
fn retried(err: &LockError) -> bool {
    match err {
        LockError::QuorumNotReached { .. } => true,
        LockError::LeaseLost { reason, .. } => *reason == ANSWERED_LATE,
        _ => false,
    }
}

/// Refuses what the backend or the request cannot do, naming the lock and
/// the value.
fn check_kind(core: &ClientCore, key: &LockKey) -> Result<(), LockError> {
    if key.kind == Kind::Exclusive {
        return Ok(());
    }
    if let Some(Unsupported { backend, reason }) = core.backend.capabilities().family {
        return Err(LockError::Unsupported {
            key: key.name.to_string(),
            primitive: key.kind.describe(),
            backend,
            reason,
        });
    }
    if let Kind::Permits { take, total } = key.kind {
        let reason = if total == 0 {
            Some(format!(
                "a semaphore needs at least one permit, got {total}"
            ))
        } else if take == 0 {
            Some("an acquisition must take at least one permit, got 0".to_owned())
        } else if take > total {
            Some(format!(
                "cannot take {take} permits of a semaphore of {total}: it would never be granted"
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(LockError::InvalidConfig {
                key: key.name.to_string(),
                reason,
            });
        }
    }
    Ok(())
}

/// One acquisition in progress.
struct Request<'a> {
    core: &'a Arc<ClientCore>,
    key: &'a LockKey,
    scope: &'a Arc<Scope>,
    lease: Lease,
    /// Held at least this long after the grant, even if released earlier.
    at_least: Option<Duration>,
    /// The labels of the lock's metrics.
    labels: &'a Labels,
    /// A hot lock (see `hot/`): taken from the client's kept locks when
    /// it has it, else from the store with a field of its own.
    hot: bool,
}

impl Request<'_> {
    /// Attempts, and waits between attempts while the lock is busy.
    /// (A function around an `async move` block, as [`acquire`]: its
    /// arguments are kept once in the future.)
    fn run(
        &self,
        wait: Wait,
    ) -> impl Future<Output = Result<Arc<HeldLock>, LockError>> + Send + '_ {
        async move {
            let core = self.core;
            let key = self.key;
            let started = Instant::now();
            let waits = wait != Wait::Once;
            // When other waiters of this client already follow the lock's
            // channel, registering is free: do it first, and the first attempt is
            // already covered by a wake-up.
            let waiter = if waits {
                core.wakeups.waiter_if_subscribed(key)
            } else {
                None
            };
            // A lock that another scope of this client holds is busy: a waiter
            // need not ask the server until that holder releases it (its release
            // wakes us) or its lease runs out on the local clock.
            let held_here = waits && core.held_elsewhere(key.id(), &self.scope.owner).is_some();
            let first = if waiter.is_none() && !held_here {
                match self.attempt().await {
                    Ok(Ok(lock)) => return Ok(lock),
                    Ok(Err(_)) => Ok(()),
                    Err(err) => Err(err),
                }
            } else {
                Ok(())
            };
            let deadline = wait.deadline(started);
            match (wait, first) {
                (_, Err(err)) if !retried(&err) => return Err(err),
                (Wait::Once, Err(err)) => return Err(err),
                (Wait::Once, Ok(())) => {
                    return Err(LockError::Busy {
                        key: key.name.to_string(),
                    })
                }
                _ => {}
            }
            tracing::debug!(key = %key.name, wait = ?wait, "waiting for lock");
            self.wait(waiter, started, deadline).await
        }
    }

    /// Waits for the lock (the first attempt failed) until `deadline`, with
    /// `waiter` when one was registered already.
    /// (A function around an `async move` block, as [`acquire`].)
    fn wait(
        &self,
        waiter: Option<WaitSet>,
        started: Instant,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Arc<HeldLock>, LockError>> + Send + '_ {
        async move {
            let core = self.core;
            let key = self.key;
            let _waiting = self.labels.waiting();
            // Register before the next attempt: a release between that attempt
            // and the wait below still wakes us.
            let mut waiter = match waiter {
                Some(waiter) => waiter,
                None => {
                    let mut waiter = core.wakeups.waiter(key);
                    if !waiter.ready(core.response_timeout).await {
                        tracing::debug!(key = %key.name, "wake-up subscription not confirmed; waiting on the lease");
                    }
                    waiter
                }
            };
            let mut woken = false;
            loop {
                // The attempt after registering is the one that counts: a release
                // before it is seen by it, a release after it wakes us. Without
                // asking the server, the lock is busy while another scope of this
                // client holds it (a holder is forgotten before its release is
                // sent, so its wake-up finds it gone) or while a waiter of this
                // client woken by its release is taking it.
                // A release message while another scope of this client seems to
                // hold the lock was not sent by that holder (it forgets itself
                // before its release goes out): the lock was deleted behind its
                // back (force-released, expired): ask the server once.
                let local = match core.held_elsewhere(key.id(), &self.scope.owner) {
                    Some(_) if std::mem::take(&mut woken) => None,
                    holder => holder,
                };
                // At the deadline the last look is this acquisition's own
                // attempt, not another waiter's hand-off: that waiter's attempt
                // may never be answered (a server that stopped answering), and
                // ending the wait on its word would report an outage as a busy
                // lock (`TimedOut` instead of `Backend`).
                let last_look = deadline.is_some_and(|deadline| Instant::now() >= deadline);
                let ttl = if let Some(holder) = local {
                    // A wake-up taken here found the lock held again: its
                    // holder's release will wake the next waiter.
                    waiter.attempted(true);
                    Some(
                        holder
                            .valid_until()
                            .saturating_duration_since(Instant::now()),
                    )
                } else if let Some(until) = waiter.hand_off_elsewhere().filter(|_| !last_look) {
                    Some(until.saturating_duration_since(Instant::now()))
                } else {
                    // The attempt's answer is not kept across the retry's
                    // sleep (a larger future for every waiter): only the pause.
                    let retry = {
                        let attempt = self.attempt().await;
                        waiter.attempted(matches!(attempt, Ok(Ok(_))));
                        match attempt {
                            Ok(Ok(lock)) => return Ok(lock),
                            Ok(Err(busy)) => Ok(busy.ttl),
                            // Redlock without a majority of masters answering, or a
                            // grant answered too late (taken back): retry after a
                            // random delay (so that competing clients do not collide
                            // again), until the deadline. No release is coming.
                            Err(err) if retried(&err) => {
                                let now = Instant::now();
                                let left = deadline
                                    .map_or(Duration::MAX, |d| d.saturating_duration_since(now));
                                if left.is_zero() {
                                    return Err(err);
                                }
                                tracing::debug!(key = %key.name, error = %err, "no lock from the attempt; retrying");
                                let jitter = Duration::from_millis(rand::random_range(20..200));
                                Err(jitter.min(left))
                            }
                            Err(err) => return Err(err),
                        }
                    };
                    match retry {
                        Ok(ttl) => ttl,
                        Err(pause) => {
                            tokio::time::sleep(pause).await;
                            continue;
                        }
                    }
                };
                let now = Instant::now();
                if deadline.is_some_and(|deadline| now >= deadline) {
                    return Err(LockError::TimedOut {
                        key: key.name.to_string(),
                        waited: now.saturating_duration_since(started),
                    });
                }
                // A lost wake-up costs latency, never liveness: sleep at most
                // until the holder's lease runs out (or our deadline, when one
                // last attempt is made).
                let nap = ttl
                    .unwrap_or(core.lease)
                    .saturating_add(Duration::from_millis(1));
                tokio::select! {
                    _ = waiter.notified() => woken = true,
                    _ = tokio::time::sleep_until(lease::nap_until(now, nap, deadline)) => {}
                }
            }
        }
    }

    /// Acquires a primitive of the lock family: attempts, and waits between
    /// attempts for a release (reads, permits, writes: every release wakes
    /// every local waiter, which asks again), or for the lock handed to it
    /// (fair: the release makes the head of the queue the holder and tells
    /// only it). A queued waiter refreshes its place every
    /// [`QUEUE_REFRESH`](lease::QUEUE_REFRESH); one that ends without the
    /// lock (timed out, cancelled, failed) leaves the queue in the background.
    ///
    /// (A function around an `async move` block, as [`acquire`].)
    fn run_family(
        &self,
        wait: Wait,
    ) -> impl Future<Output = Result<Arc<HeldLock>, LockError>> + Send + '_ {
        async move {
            let core = self.core;
            let key = self.key;
            let started = Instant::now();
            let deadline = wait.deadline(started);
            let mut queued = Queued {
                core,
                key,
                scope: self.scope,
                armed: false,
            };
            // When other waiters of this client already follow the channel,
            // registering is free and covers the first attempt: no second one.
            let mut waiter: Option<WaitSet> = if wait == Wait::Once {
                None
            } else {
                core.wakeups.waiter_if_subscribed(key)
            };
            let mut grant: Option<crate::waiters::GrantSlot> = match &waiter {
                Some(waiter) if key.kind == Kind::Fair => waiter.expect_grant(&self.scope.owner),
                _ => None,
            };
            let mut handed: Option<u64> = None;
            let mut _waiting = None;
            let mut last_sent = started;
            // The fencing counter when our last attempt was answered: a grant
            // with a token at or below it was made before that attempt (and
            // delivered after it, on the subscription connection): stale.
            let mut seen_fence: Option<u64> = None;
            // The lease a release hands the fair lock over with.
            let claim = self.lease.duration().min(lease::QUEUE_PRESENCE);
            loop {
                let attempt = match handed.take() {
                    // Handed to us after our last attempt was answered (its token
                    // is above the counter that attempt saw, so the grant came
                    // after `last_sent`): the lease is counted from then. Only
                    // while that is recent; else one attempt confirms it (and
                    // restarts the lease). A stale grant (made before that
                    // attempt) is only a wake-up: the attempt decides.
                    Some(token)
                        if Instant::now().saturating_duration_since(last_sent) <= claim / 2
                            && seen_fence.is_none_or(|seen| token > seen) =>
                    {
                        let pending = self.pending();
                        self.labels.hand_off();
                        self.hold(token, last_sent, pending).map(|lock| {
                            lock.cap_validity(lease::valid_until(last_sent, claim));
                            if claim < self.lease.duration() {
                                extend(core, lock.clone());
                            }
                            Ok(lock)
                        })
                    }
                    _ => {
                        if let Some(waiter) = waiter.as_mut() {
                            waiter.seen();
                        }
                        // A grant announced before this attempt is seen by it.
                        if let Some(grant) = &grant {
                            let _ = grant.take();
                        }
                        last_sent = Instant::now();
                        self.attempt().await
                    }
                };
                let ttl = match attempt {
                    Ok(Ok(lock)) => {
                        queued.armed = false;
                        return Ok(lock);
                    }
                    Ok(Err(busy)) => {
                        if busy.fence.is_some() {
                            seen_fence = busy.fence;
                        }
                        busy.ttl
                    }
                    Err(err) => return Err(err),
                };
                queued.armed = key.queue;
                let now = Instant::now();
                if wait == Wait::Once {
                    return Err(LockError::Busy {
                        key: key.name.to_string(),
                    });
                }
                if deadline.is_some_and(|deadline| now >= deadline) {
                    return Err(LockError::TimedOut {
                        key: key.name.to_string(),
                        waited: now.saturating_duration_since(started),
                    });
                }
                // Counted as waiting from the first failed attempt on (also when
                // it registered before it: its channel was already followed).
                if _waiting.is_none() {
                    _waiting = Some(self.labels.waiting());
                }
                let Some(waiting) = waiter.as_mut() else {
                    // Register, then attempt again: a release before that attempt
                    // is seen by it, one after it wakes us.
                    let mut registered = core.wakeups.waiter(key);
                    if !registered.ready(core.response_timeout).await {
                        tracing::debug!(key = %key.name, "wake-up subscription not confirmed; waiting on the lease");
                    }
                    if key.kind == Kind::Fair {
                        grant = registered.expect_grant(&self.scope.owner);
                    }
                    waiter = Some(registered);
                    continue;
                };
                let mut nap = ttl
                    .unwrap_or(core.lease)
                    .saturating_add(Duration::from_millis(1));
                if key.queue {
                    nap = nap.min(lease::QUEUE_REFRESH);
                }
                let until = lease::nap_until(now, nap, deadline);
                match &grant {
                    Some(grant) => tokio::select! {
                        () = grant.announced() => handed = grant.take(),
                        () = tokio::time::sleep_until(until) => {}
                    },
                    None => tokio::select! {
                        () = waiting.released() => {}
                        () = tokio::time::sleep_until(until) => {}
                    },
                }
            }
        }
    }

    /// A grant in progress to the scope's owner, taken back if it is not
    /// turned into a guard.
    fn pending(&self) -> PendingGrant<'_> {
        self.pending_for(self.scope.owner.clone())
    }

    /// A grant in progress to `owner` (the scope's, or a hot lock's field).
    fn pending_for(&self, owner: Arc<str>) -> PendingGrant<'_> {
        PendingGrant {
            core: self.core,
            key: self.key,
            scope: self.scope,
            owner,
            // Counted from before the request until the grant is in the
            // scope (or the attempt is over): a rollback of an abandoned
            // grant of this scope meanwhile would delete what this attempt
            // takes over.
            claim: Some(self.scope.attempting(self.key)),
            lease: self.lease.duration(),
            armed: true,
            uncertain: false,
        }
    }

    /// One attempt: `Ok(Ok(lock))` when acquired, `Ok(Err(busy))` when busy.
    async fn attempt(&self) -> Result<Result<Arc<HeldLock>, Busy>, LockError> {
        let owner = match self.core.keeper.as_ref().filter(|_| self.hot) {
            Some(keeper) => match keeper.take(&self.key.channel) {
                Take::Idle(idle) => return self.take_kept(keeper, idle).map(Ok),
                // Another scope of this client uses it: its release wakes us.
                Take::InUse(left) => {
                    return Ok(Err(Busy {
                        ttl: Some(left),
                        fence: None,
                    }))
                }
                Take::Absent => keeper.field(&self.core.id),
            },
            None => self.scope.owner.clone(),
        };
        let sent = Instant::now();
        let mut pending = self.pending_for(owner.clone());
        let reply = self
            .core
            .backend
            .acquire(self.key, &owner, self.lease.duration())
            .await;
        let token = match reply {
            Ok(Attempt::Acquired { token }) => token,
            Ok(Attempt::Busy(busy)) => {
                pending.armed = false;
                return Ok(Err(busy));
            }
            // The request may have been granted without us hearing of it:
            // `pending` takes it back on drop.
            Err(err) => {
                pending.uncertain = true;
                return Err(err);
            }
        };
        let lock = self.hold(token, sent, pending)?;
        if let Some(keeper) = self.core.keeper.as_ref().filter(|_| self.hot) {
            keeper.in_use(&lock, Some(self.core.wakeups.waiter(self.key)));
        }
        Ok(Ok(lock))
    }

    /// Takes the hot lock this client keeps idle as `idle`: a hold of the
    /// scope with its field, token and lease, renewed from now on instead
    /// of `idle`. No round trip.
    fn take_kept(&self, keeper: &Keeper, idle: Arc<HeldLock>) -> Result<Arc<HeldLock>, LockError> {
        let core = self.core;
        // The same hold in the store: one lease, renewed and lost as one.
        let lock = Arc::new(idle.next_use().metered(self.labels.clone()).spanned());
        let inserted = if core.is_closing() {
            None
        } else {
            self.scope.insert(lock, |lock| core.holder_insert(lock))
        };
        let Some((lock, first)) = inserted else {
            // Shutting down: the kept lock is given up, not handed out.
            keeper.forget(&idle);
            keeper.give_up(idle);
            return Err(core.shutting_down(&self.key.name));
        };
        // Renewed by the keeper, with the full lease while in use.
        keeper.in_use(&lock, None);
        if first {
            lock.meter.entered();
        }
        tracing::debug!(key = %self.key.name, token = lock.token, owner = %lock.owner, "kept lock taken");
        Ok(lock)
    }

    /// Turns a grant with `token`, whose request was sent at `sent`, into a
    /// hold of the scope; `pending` takes it back when it cannot be.
    fn hold(
        &self,
        token: u64,
        sent: Instant,
        mut pending: PendingGrant<'_>,
    ) -> Result<Arc<HeldLock>, LockError> {
        let lock = HeldLock::new(
            self.key.clone(),
            pending.owner.clone(),
            token,
            self.lease,
            sent,
        )
        .holding_at_least(self.at_least)
        .metered(self.labels.clone())
        .spanned();
        #[cfg(feature = "postgres")]
        let lock = lock.sql_checked(self.core.backend.hold_check());
        let lock = Arc::new(lock);
        if !lock.is_held() {
            // The answer came after the lease had run out on the local clock
            // (a server that hung): no lock to hand out. `pending` takes it back.
            return Err(LockError::LeaseLost {
                key: self.key.name.to_string(),
                reason: ANSWERED_LATE,
            });
        }
        // Granted after the client began to shut down: refused, and
        // `pending` takes the grant back (unless this scope holds the lock).
        let refused = || self.core.shutting_down(&self.key.name);
        if self.core.is_closing() {
            return Err(refused());
        }
        // A first hold is recorded as this client's under its holders lock,
        // where the shutdown begins: either the shutdown gives it back, or it
        // is refused here.
        let Some((lock, first)) = self
            .scope
            .insert(lock, |lock| self.core.holder_insert(lock))
        else {
            return Err(refused());
        };
        pending.armed = false;
        if first {
            lock.meter.entered();
            if lock.is_watchdog() {
                self.core.watchdog.track(&lock);
            }
        }
        tracing::debug!(key = %self.key.name, token = lock.token, owner = %lock.owner, "lock acquired");
        Ok(lock)
    }
}

/// Extends a fair lock handed over with its short claim lease to the
/// holder's lease, at once and in the background (the holder already runs:
/// the hand-over cost it no round trip).
fn extend(core: &Arc<ClientCore>, lock: Arc<HeldLock>) {
    let job_core = core.clone();
    core.janitor.spawn(Box::new(move || {
        let (core, lock) = (job_core.clone(), lock.clone());
        async move { extend_once(&core, &lock).await }.boxed()
    }));
}

async fn extend_once(core: &ClientCore, lock: &HeldLock) {
    let item = [(lock.key.clone(), lock.owner.clone())];
    let sent = Instant::now();
    match core.backend.renew(&item, lock.lease.duration()).await.pop() {
        Some(Renewal::Renewed) => lock.renewed(sent),
        Some(Renewal::Gone) => {
            lock.mark_lost("the lock handed over was deleted, expired or taken over")
        }
        // The watchdog retries (watchdog mode); a fixed lease keeps the
        // claim lease, and says so by its deadline.
        Some(Renewal::Failed(err)) => {
            tracing::debug!(key = %lock.key.name, error = %err, "could not extend a lock handed over yet")
        }
        None => {}
    }
}

/// A waiter's place in a fair lock's queue or a writer's intent: taken back
/// in the background when the acquisition ends without the lock (timed out,
/// failed, or its future dropped), so that it stops holding others back.
struct Queued<'a> {
    core: &'a Arc<ClientCore>,
    key: &'a LockKey,
    scope: &'a Arc<Scope>,
    armed: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let core = self.core.clone();
        let key = self.key.clone();
        let scope = self.scope.clone();
        let lease = core.lease;
        self.core.janitor.spawn(Box::new(move || {
            let owner = scope.owner.clone();
            rollback(
                core.clone(),
                key.clone(),
                scope.clone(),
                owner,
                lease,
                false,
            )
            .boxed()
        }));
    }
}

/// Takes back a grant whose answer was not turned into a guard (the acquire
/// future was dropped mid-request, or the answer timed out or came too late).
struct PendingGrant<'a> {
    core: &'a Arc<ClientCore>,
    key: &'a LockKey,
    scope: &'a Arc<Scope>,
    /// The field granted: the scope's owner, or a hot lock's own.
    owner: Arc<str>,
    claim: Option<Attempting<'a>>,
    lease: Duration,
    armed: bool,
    /// The request failed without an answer: it may still execute later.
    uncertain: bool,
}

impl Drop for PendingGrant<'_> {
    fn drop(&mut self) {
        // This attempt no longer claims the lock (before its rollback can
        // run, which would otherwise take the claim for a live acquisition).
        drop(self.claim.take());
        if !self.armed {
            return;
        }
        let core = self.core.clone();
        let key = self.key.clone();
        let scope = self.scope.clone();
        let owner = self.owner.clone();
        let (lease, uncertain) = (self.lease, self.uncertain);
        self.core.janitor.spawn(Box::new(move || {
            let (core, key, scope, owner) =
                (core.clone(), key.clone(), scope.clone(), owner.clone());
            rollback(core, key, scope, owner, lease, uncertain).boxed()
        }));
    }
}

/// The rollback of an abandoned grant to `owner` of `scope`: quiet (it wakes
/// waiters only when it freed the lock) and exact (never while the scope
/// holds or is acquiring the lock, so it cannot delete a hold the scope took
/// over; a hot lock's field is the abandoned attempt's own: always taken
/// back).
///
/// A cancelled request went out on the same connection before the rollback,
/// so one rollback suffices. A request that timed out may still sit
/// unexecuted in a stalled server's buffer, or in a connection that was
/// replaced: the rollback is repeated until such a grant would have expired.
async fn rollback(
    core: Arc<ClientCore>,
    key: LockKey,
    scope: Arc<Scope>,
    owner: Arc<str>,
    lease: Duration,
    uncertain: bool,
) {
    let own_field = owner != scope.owner;
    let give_up = Instant::now()
        .checked_add(lease.max(Duration::from_secs(1)))
        .unwrap_or_else(Instant::now);
    let mut delay = Duration::from_millis(100);
    loop {
        let mut sent = std::pin::pin!(core.backend.rollback(&key, &owner));
        // The claim check and the first poll (which queues the command on the
        // connection) happen under the scope's lock: an acquisition of the
        // scope that starts after the check is queued after the rollback.
        let first = std::future::poll_fn(|cx| {
            if own_field {
                return Poll::Ready(Some(sent.as_mut().poll(cx)));
            }
            Poll::Ready(scope.if_unclaimed(key.id(), || sent.as_mut().poll(cx)))
        })
        .await;
        let outcome = match first {
            None => return, // the scope holds (or is taking) the lock: it is not abandoned
            Some(Poll::Ready(outcome)) => outcome,
            Some(Poll::Pending) => sent.await,
        };
        match outcome {
            Ok(true) => {
                tracing::debug!(key = %key.name, "rolled back a grant whose acquisition was abandoned");
                return;
            }
            Ok(false) if !uncertain => return,
            Ok(false) => {}
            Err(err) => {
                tracing::debug!(key = %key.name, error = %err, "could not roll back an abandoned grant yet")
            }
        }
        if Instant::now()
            .checked_add(delay)
            .is_none_or(|next| next > give_up)
        {
            return;
        }
        tokio::time::sleep(delay).await;
        delay = delay.saturating_mul(2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures_util::future::BoxFuture;

    use super::*;
    use crate::backend::{Backend, MemoryStore, Released, RenewItem, Renewal};
    use crate::LockInfo;

    /// The in-memory store, but every acquisition is answered `delay` after
    /// the store granted it (a slow network on the way back); while `stalled`,
    /// acquisitions get no answer and fail after [`STALL`] (a paused server).
    #[derive(Debug)]
    struct SlowAnswers {
        store: MemoryStore,
        delay: Duration,
        stalled: Arc<AtomicBool>,
        /// Armed: the next fair-lock attempt that finds the lock busy is
        /// followed by a grant message for the attempting owner whose token
        /// is the counter that attempt saw: a grant made before the attempt
        /// and delivered after it (grants come on the subscription
        /// connection, attempts on the command connection).
        stale_grant: AtomicBool,
        /// Armed: the next acquisition is answered [`SLOW_ONCE`] late.
        slow_once: AtomicBool,
    }

    const SLOW_ONCE: Duration = Duration::from_millis(300);

    const STALL: Duration = Duration::from_millis(500);

    impl Backend for SlowAnswers {
        fn server(&self) -> &str {
            "slow"
        }
        fn data_connection(
            &self,
        ) -> Result<crate::backend::DataConnection, crate::backend::Unsupported> {
            self.store.data_connection()
        }
        fn acquire<'a>(
            &'a self,
            key: &'a LockKey,
            owner: &'a str,
            lease: Duration,
        ) -> BoxFuture<'a, Result<Attempt, LockError>> {
            async move {
                if self.stalled.load(Ordering::SeqCst) {
                    tokio::time::sleep(STALL).await;
                    return Err(LockError::Backend {
                        key: key.name.to_string(),
                        server: self.server().to_owned(),
                        source: crate::BackendError::Timeout(STALL),
                    });
                }
                let attempt = self.store.acquire(key, owner, lease).await;
                if let Ok(Attempt::Busy(Busy {
                    fence: Some(fence), ..
                })) = attempt
                {
                    if self.stale_grant.swap(false, Ordering::SeqCst) {
                        let grant = format!("g {owner} {fence}");
                        self.store.waiters().message(&key.channel, grant.as_bytes());
                    }
                }
                tokio::time::sleep(self.delay).await;
                if self.slow_once.swap(false, Ordering::SeqCst) {
                    tokio::time::sleep(SLOW_ONCE).await;
                }
                attempt
            }
            .boxed()
        }
        fn release<'a>(
            &'a self,
            key: &'a LockKey,
            owner: &'a str,
        ) -> BoxFuture<'a, Result<Released, LockError>> {
            self.store.release(key, owner)
        }
        fn rollback<'a>(
            &'a self,
            key: &'a LockKey,
            owner: &'a str,
        ) -> BoxFuture<'a, Result<bool, LockError>> {
            self.store.rollback(key, owner)
        }
        fn force_release<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<bool, LockError>> {
            self.store.force_release(key)
        }
        fn renew<'a>(
            &'a self,
            items: &'a [RenewItem],
            lease: Duration,
        ) -> BoxFuture<'a, Vec<Renewal>> {
            self.store.renew(items, lease)
        }
        fn cut<'a>(
            &'a self,
            key: &'a LockKey,
            owner: &'a str,
            left: Duration,
        ) -> BoxFuture<'a, Result<bool, LockError>> {
            self.store.cut(key, owner, left)
        }
        fn inspect<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<LockInfo, LockError>> {
            self.store.inspect(key)
        }
        fn subscribers<'a>(
            &'a self,
            keys: &'a [LockKey],
        ) -> BoxFuture<'a, Result<Vec<u64>, LockError>> {
            self.store.subscribers(keys)
        }
        fn layouts<'a>(
            &'a self,
            mine: Option<&'a str>,
        ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
            self.store.layouts(mine)
        }
        fn inspect_family<'a>(
            &'a self,
            key: &'a LockKey,
        ) -> BoxFuture<'a, Result<crate::info::FamilyState, LockError>> {
            self.store.inspect_family(key)
        }
        fn list<'a>(
            &'a self,
            prefix: &'a str,
            name_prefix: &'a str,
        ) -> BoxFuture<'a, Result<Vec<LockInfo>, LockError>> {
            self.store.list(prefix, name_prefix)
        }
    }

    fn core(store: &MemoryStore, delay: Duration) -> Arc<ClientCore> {
        stallable_core(store, delay, Arc::default())
    }

    fn stallable_core(
        store: &MemoryStore,
        delay: Duration,
        stalled: Arc<AtomicBool>,
    ) -> Arc<ClientCore> {
        let backend = Arc::new(SlowAnswers {
            store: store.clone(),
            delay,
            stalled,
            stale_grant: AtomicBool::new(false),
            slow_once: AtomicBool::new(false),
        });
        let lease = Duration::from_secs(30);
        Arc::new(ClientCore::new(
            "c".into(),
            "lock:".into(),
            lease,
            Duration::from_secs(2),
            backend,
            store.wakeups(),
        ))
    }

    // Paused time (here and below): the timeout or the look fires before
    // the 200 ms answer whatever the machine's load.
    #[tokio::test(start_paused = true)]
    async fn a_grant_whose_answer_was_abandoned_is_rolled_back() {
        let store = MemoryStore::new();
        let core = core(&store, Duration::from_millis(200));
        let cancelled = tokio::time::timeout(
            Duration::from_millis(50),
            acquire(&core, "x", Kind::Exclusive, &LockOptions::new()),
        )
        .await;
        assert!(cancelled.is_err(), "the answer is still on its way");
        assert_eq!(store.held(), 1, "the store granted it");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(store.held(), 0, "the janitor took it back");
    }

    /// Two waiters; the holder releases and the backend stops answering. The
    /// waiter woken by the release attempts and gets no answer; the other,
    /// held back by that hand-off until its deadline, must not report the
    /// lock busy (`TimedOut`) on the word of an attempt that never came
    /// back: its own last attempt finds the backend failing.
    #[tokio::test(start_paused = true)]
    async fn a_wait_ending_behind_an_unanswered_hand_off_reports_the_backend() {
        let store = MemoryStore::new();
        let stalled = Arc::new(AtomicBool::new(false));
        let core = stallable_core(&store, Duration::ZERO, stalled.clone());
        let held = acquire(&core, "x", Kind::Exclusive, &LockOptions::new())
            .await
            .unwrap();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let core = core.clone();
                tokio::spawn(async move {
                    acquire(
                        &core,
                        "x",
                        Kind::Exclusive,
                        &LockOptions::new().wait(Duration::from_millis(300)),
                    )
                    .await
                    .map(|_| ())
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        stalled.store(true, Ordering::SeqCst);
        crate::LockGuard::new(core.clone(), held.lock, held.scope)
            .release()
            .await
            .unwrap();
        for waiter in waiters {
            let error = waiter.await.unwrap().unwrap_err();
            assert!(error.is_backend(), "{error:?}");
        }
    }

    /// Issue 38: a waiter woken by a release whose grant is answered after
    /// its lease ran out (taken back) tries again at once, until its
    /// deadline: the lock is free, and no release will wake it.
    ///
    /// Old code: the wait ended with `LeaseLost`, 9.7 s before its deadline.
    #[tokio::test(start_paused = true)]
    async fn a_waiter_whose_grant_was_answered_too_late_tries_again() {
        let store = MemoryStore::new();
        let backend = Arc::new(SlowAnswers {
            store: store.clone(),
            delay: Duration::ZERO,
            stalled: Arc::default(),
            stale_grant: AtomicBool::new(false),
            slow_once: AtomicBool::new(false),
        });
        let core = Arc::new(ClientCore::new(
            "c".into(),
            "lock:".into(),
            Duration::from_secs(30),
            Duration::from_secs(2),
            backend.clone(),
            store.wakeups(),
        ));
        let key = core.key("x").unwrap();
        assert!(matches!(
            Backend::acquire(&store, &key, "h:1", Duration::from_secs(30)).await,
            Ok(Attempt::Acquired { .. })
        ));
        let waiter = tokio::spawn({
            let core = core.clone();
            async move {
                let options = LockOptions::new()
                    .lease(Duration::from_millis(100))
                    .wait(Duration::from_secs(10));
                let acquired = acquire(&core, "x", Kind::Exclusive, &options).await;
                (Instant::now(), acquired.map(|acquired| acquired.lock))
            }
        });
        // Paused time moves only when every task waits: the waiter is asleep.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(store.waiters().waiting(&key.channel), 1);
        backend.slow_once.store(true, Ordering::SeqCst);
        let freed = Instant::now();
        assert!(store.release(&key, "h:1").await.unwrap().deleted);
        let (acquired, lock) = waiter.await.unwrap();
        let lock = lock.expect("the waiter got the lock");
        assert!(lock.is_held());
        assert!(!backend.slow_once.load(Ordering::SeqCst), "one late answer");
        assert!(
            acquired.saturating_duration_since(freed) < Duration::from_secs(1),
            "{:?}",
            acquired.saturating_duration_since(freed)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_grant_answered_after_the_shutdown_began_is_refused_and_rolled_back() {
        let store = MemoryStore::new();
        let core = core(&store, Duration::from_millis(200));
        let acquiring = tokio::spawn({
            let core = core.clone();
            async move {
                acquire(&core, "x", Kind::Exclusive, &LockOptions::new())
                    .await
                    .map(|_| ())
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(store.held(), 1, "granted, the answer on its way");
        assert!(core.begin_shutdown(None));
        let refused = acquiring.await.unwrap();
        assert!(
            matches!(refused, Err(LockError::ShuttingDown { ref key, .. }) if key == "x"),
            "{refused:?}"
        );
        assert_eq!(core.holder_count(), 0);
        assert_eq!(core.watchdog.len(), 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(store.held(), 0, "the janitor took the grant back");
    }

    /// (Paused time: the 20 ms timeout fires before the 100 ms answer
    /// whatever the machine's load; on a wall clock, a starved runtime
    /// polled both at once and the answer won.)
    #[tokio::test(start_paused = true)]
    async fn the_rollback_spares_a_grant_that_the_scope_takes_over() {
        let store = MemoryStore::new();
        let core = core(&store, Duration::from_millis(100));
        let outer = acquire(&core, "outer", Kind::Exclusive, &LockOptions::new())
            .await
            .unwrap();
        let outer = crate::LockGuard::new(core.clone(), outer.lock, outer.scope);
        // Inside the outer lock's scope: one attempt on `x` is abandoned
        // (its answer is on its way), and at once the same owner asks again:
        // its request is in flight when the rollback of the first grant runs.
        let (abandoned, taken) = outer
            .scope(async {
                let abandoned = tokio::time::timeout(
                    Duration::from_millis(20),
                    acquire(&core, "x", Kind::Exclusive, &LockOptions::new()),
                )
                .await;
                let taken = acquire(&core, "x", Kind::Exclusive, &LockOptions::new()).await;
                (abandoned, taken)
            })
            .await;
        assert!(abandoned.is_err());
        let taken = taken.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(taken.lock.is_held());
        let outer_info = core
            .backend
            .inspect(&core.key("outer").unwrap())
            .await
            .unwrap();
        let x_info = core.backend.inspect(&core.key("x").unwrap()).await.unwrap();
        assert_eq!(
            store.held(),
            2,
            "the scope's `x` was not rolled back: {outer_info:?} {x_info:?}"
        );
        let info = core.backend.inspect(&core.key("x").unwrap()).await.unwrap();
        assert_eq!(
            info.holder.map(|h| h.owner),
            Some(taken.lock.owner.to_string())
        );
    }

    /// A fair-lock waiter never takes a grant older than its own last
    /// attempt: a grant message with a token at or below the counter that
    /// attempt saw (made before it, delivered after it) is a wake-up, not a
    /// hand-off. The waiter attempts again, finds the lock held, and times
    /// out; the holder keeps it.
    ///
    /// Old code: the waiter took the stale grant as handed to it and
    /// returned a guard with the old token while another owner held the
    /// lock: two holders.
    #[tokio::test]
    async fn a_fair_waiter_does_not_take_a_grant_older_than_its_attempt() {
        let store = MemoryStore::new();
        let backend = Arc::new(SlowAnswers {
            store: store.clone(),
            delay: Duration::ZERO,
            stalled: Arc::default(),
            stale_grant: AtomicBool::new(true),
            slow_once: AtomicBool::new(false),
        });
        let core = Arc::new(ClientCore::new(
            "c".into(),
            "lock:".into(),
            Duration::from_secs(30),
            Duration::from_secs(2),
            backend,
            store.wakeups(),
        ));
        let key = core.key_of("f", Kind::Fair).unwrap();
        assert!(matches!(
            Backend::acquire(&store, &key, "h:1", Duration::from_secs(30)).await,
            Ok(Attempt::Acquired { .. })
        ));
        let outcome = acquire(
            &core,
            "f",
            Kind::Fair,
            &LockOptions::new().wait(Duration::from_millis(300)),
        )
        .await;
        assert!(
            matches!(outcome, Err(LockError::TimedOut { .. })),
            "{:?}",
            outcome.map(|acquired| acquired.lock.token)
        );
        let info = store.inspect_family(&key).await.unwrap();
        assert_eq!(info.holder.map(|h| h.owner).as_deref(), Some("h:1"));
    }
}
