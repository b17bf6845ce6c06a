//! The state of one held lock: its key, owner and token, how many guards
//! hold it, and until when its lease is known to run. Shared by the
//! reentrant guards on it, the scope that holds it and the watchdog that
//! renews it; it knows nothing of the client.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::lease;
use crate::metric_points::{HoldMeter, Labels};
use crate::name::LockKey;
use crate::sync::Mutex;
use crate::LockError;

/// Where a held lock stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldState {
    Held,
    Lost(&'static str),
    Released,
}

/// How the lease of a held lock is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Renewed by the client's watchdog, this long each time.
    Watchdog(Duration),
    /// Not renewed: the lock expires this long after acquisition.
    Fixed(Duration),
}

impl Lease {
    pub(crate) fn duration(self) -> Duration {
        match self {
            Lease::Watchdog(lease) | Lease::Fixed(lease) => lease,
        }
    }

    pub(crate) fn is_watchdog(self) -> bool {
        matches!(self, Lease::Watchdog(_))
    }
}

#[derive(Debug)]
struct Status {
    state: HoldState,
    /// Until when the lease is known to run, on the local clock: the moment
    /// the last successful acquire or renewal was *sent*, plus the lease,
    /// minus a drift allowance. Once passed, the lock is lost for good.
    valid_until: Instant,
    /// The client's shutdown took the lock from its holder and gives it back
    /// in the backend: the guard's own release has nothing left to send.
    surrendered: bool,
}

/// One lock held by one owner.
#[derive(Debug)]
pub(crate) struct HeldLock {
    /// Unique in the process (the watchdog's handle on it).
    pub(crate) id: u64,
    pub(crate) key: LockKey,
    pub(crate) owner: Arc<str>,
    pub(crate) token: u64,
    pub(crate) lease: Lease,
    /// Guards alive on this lock; changed only under the scope's mutex.
    pub(crate) holds: AtomicUsize,
    /// Held at least until then (ShedLock's `lockAtLeastFor`): a release
    /// before it shortens the lease to what is left instead of deleting.
    hold_until: Option<Instant>,
    status: Mutex<Status>,
    /// Woken when the state turns to `Lost`.
    lost: Notify,
    /// Its metrics (nothing without the `metrics` feature).
    pub(crate) meter: HoldMeter,
    /// The `lock_hold` tracing span: from the grant until the lock is
    /// dropped (released, or its last guard gone after a loss). Entered by
    /// the guard's `scope` and `in_scope`.
    span: tracing::Span,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl HeldLock {
    /// A lock granted with `token` for a request sent at `sent`.
    pub(crate) fn new(
        key: LockKey,
        owner: Arc<str>,
        token: u64,
        lease: Lease,
        sent: Instant,
    ) -> Self {
        HeldLock {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            key,
            owner,
            token,
            lease,
            holds: AtomicUsize::new(1),
            hold_until: None,
            status: Mutex::new(Status {
                state: HoldState::Held,
                valid_until: lease::valid_until(sent, lease.duration()),
                surrendered: false,
            }),
            lost: Notify::new(),
            meter: HoldMeter::none(),
            span: tracing::Span::none(),
        }
    }

    /// Opens the lock's `lock_hold` span (key, kind, owner, token), which
    /// follows from the current span (the acquisition's).
    pub(crate) fn spanned(mut self) -> Self {
        let span = tracing::debug_span!(
            parent: None,
            "lock_hold",
            key = %self.key.name,
            kind = self.key.kind.describe(),
            owner = %self.owner,
            token = self.token,
        );
        span.follows_from(tracing::Span::current());
        self.span = span;
        self
    }

    /// The lock's `lock_hold` span (disabled unless the lock was granted
    /// under a subscriber that records it).
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Reports the lock's metrics with `labels`.
    pub(crate) fn metered(mut self, labels: Labels) -> Self {
        self.meter = HoldMeter::new(labels);
        self
    }

    /// Keeps the lock held at least `at_least` from now (see `hold_until`).
    pub(crate) fn holding_at_least(mut self, at_least: Option<Duration>) -> Self {
        let now = Instant::now();
        self.hold_until = at_least.and_then(|d| now.checked_add(d));
        self
    }

    /// How long the lock must still be held before it may be deleted, when
    /// that is at least a millisecond (Redis counts in milliseconds).
    pub(crate) fn hold_left(&self) -> Option<Duration> {
        let left = self.hold_until?.saturating_duration_since(Instant::now());
        (left >= Duration::from_millis(1)).then_some(left)
    }

    /// Counts the lease as running out at `until` at the latest (a fair lock
    /// handed over with a short claim lease, until its holder extends it).
    pub(crate) fn cap_validity(&self, until: Instant) {
        let mut status = self.status.lock();
        status.valid_until = status.valid_until.min(until);
    }

    pub(crate) fn is_watchdog(&self) -> bool {
        matches!(self.lease, Lease::Watchdog(_))
    }

    pub(crate) fn state(&self) -> HoldState {
        self.status.lock().state
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.status.lock().valid_until
    }

    /// Records a successful renewal sent at `sent`. A lock whose lease had
    /// already run out on the local clock stays lost: its holder may have
    /// been told so.
    pub(crate) fn renewed(&self, sent: Instant) {
        let until = lease::valid_until(sent, self.lease.duration());
        let mut status = self.status.lock();
        if status.state == HoldState::Held
            && Instant::now() < status.valid_until
            && until > status.valid_until
        {
            status.valid_until = until;
        }
    }

    /// Held: no loss detected and the lease known to run on the local clock.
    pub(crate) fn is_held(&self) -> bool {
        let status = self.status.lock();
        status.state == HoldState::Held && Instant::now() < status.valid_until
    }

    /// Marks the lease lost (once) and tells every `lost()` waiter.
    pub(crate) fn mark_lost(&self, reason: &'static str) {
        {
            let mut status = self.status.lock();
            if status.state != HoldState::Held {
                return;
            }
            status.state = HoldState::Lost(reason);
        }
        self.meter.left(true);
        // Logged before `lost()` waiters are woken, so the event is in the
        // log by the time they react.
        tracing::warn!(key = %self.key.name, token = self.token, reason, "lock lease lost");
        self.lost.notify_waiters();
    }

    /// Takes the lock from its holder because the client shuts down: marks
    /// it lost (`reason`, unless it was lost already) and surrendered, so
    /// that its guard's release sends nothing (the shutdown gives it back).
    pub(crate) fn surrender(&self, reason: &'static str) {
        {
            let mut status = self.status.lock();
            status.surrendered = true;
            if status.state != HoldState::Held {
                return;
            }
            status.state = HoldState::Lost(reason);
        }
        self.meter.left(true);
        tracing::warn!(key = %self.key.name, token = self.token, reason, "lock lease lost");
        self.lost.notify_waiters();
    }

    /// Whether the client's shutdown took the lock (see [`surrender`](HeldLock::surrender)).
    pub(crate) fn is_surrendered(&self) -> bool {
        self.status.lock().surrendered
    }

    /// Marks a lock whose lease ran out on the local clock as lost; returns
    /// whether it is lost.
    pub(crate) fn check_deadline(&self) -> bool {
        let expired = {
            let status = self.status.lock();
            match status.state {
                HoldState::Lost(_) => return true,
                HoldState::Released => return false,
                HoldState::Held => Instant::now() >= status.valid_until,
            }
        };
        if expired {
            self.mark_lost(self.ran_out());
        }
        expired
    }

    fn ran_out(&self) -> &'static str {
        match self.lease {
            Lease::Watchdog(_) => "the lease could not be renewed before it ran out",
            Lease::Fixed(_) => "the lease ran out",
        }
    }

    /// Marks a held lock released. A lost lock stays lost: a `lost()` woken
    /// by its loss must still find it lost when it runs.
    pub(crate) fn mark_released(&self) {
        {
            let mut status = self.status.lock();
            if status.state != HoldState::Held {
                return;
            }
            status.state = HoldState::Released;
        }
        self.meter.left(false);
    }

    /// Resolves when the lease is lost: marked lost, or its local deadline
    /// passed (whatever a renewal in flight may still bring).
    pub(crate) async fn lost(&self) {
        loop {
            // Created before the check: a `notify_waiters` after it still
            // completes this future.
            let notified = self.lost.notified();
            if self.check_deadline() {
                return;
            }
            if self.state() == HoldState::Released {
                // Released before its lease was lost: it never will be.
                std::future::pending::<()>().await;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(self.valid_until()) => {}
            }
        }
    }

    /// The error for a lost lease, or `None` while it is held.
    pub(crate) fn lost_error(&self) -> Option<LockError> {
        let reason = match self.state() {
            HoldState::Lost(reason) => reason,
            _ if Instant::now() >= self.valid_until() => self.ran_out(),
            _ => return None,
        };
        Some(LockError::LeaseLost {
            key: self.key.name.to_string(),
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(lease: Lease) -> HeldLock {
        HeldLock::new(
            LockKey::new("lock:", "t").unwrap(),
            "c:1".into(),
            1,
            lease,
            Instant::now(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn lost_fires_at_the_local_deadline_without_any_renewal_answer() {
        let lock = held(Lease::Watchdog(Duration::from_secs(1)));
        let started = Instant::now();
        lock.lost().await;
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(980) && took <= Duration::from_secs(1),
            "{took:?}"
        );
        assert!(!lock.is_held());
        assert!(matches!(
            lock.lost_error(),
            Some(LockError::LeaseLost { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_renewal_does_not_revive_a_lost_lock() {
        let lock = held(Lease::Watchdog(Duration::from_secs(1)));
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(2)).await;
        lock.renewed(sent + Duration::from_millis(900));
        assert!(!lock.is_held());
    }

    #[tokio::test(start_paused = true)]
    async fn a_surrendered_lock_is_lost_and_tells_its_waiters() {
        let lock = Arc::new(held(Lease::Watchdog(Duration::from_secs(30))));
        let waiting = tokio::spawn({
            let lock = lock.clone();
            async move { lock.lost().await }
        });
        tokio::task::yield_now().await;
        lock.surrender("the client shut down");
        tokio::time::timeout(Duration::from_millis(10), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(!lock.is_held());
        assert!(lock.is_surrendered());
        assert!(matches!(
            lock.lost_error(),
            Some(LockError::LeaseLost {
                reason: "the client shut down",
                ..
            })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_move_the_deadline() {
        let lock = held(Lease::Watchdog(Duration::from_secs(1)));
        tokio::time::advance(Duration::from_millis(500)).await;
        lock.renewed(Instant::now());
        tokio::time::advance(Duration::from_millis(800)).await;
        assert!(lock.is_held());
    }
}
