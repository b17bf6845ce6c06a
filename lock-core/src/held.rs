//! The state of one held lock: its key, owner and token, how many guards
//! hold it, and until when its lease is known to run. Shared by the
//! reentrant guards on it, the scope that holds it and the watchdog that
//! renews it; it knows nothing of the client.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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

/// The lease of a hold in the store, as this client knows it: shared by
/// every [`HeldLock`] that stands for that one hold. A plain hold has one;
/// the uses of a kept (hot) lock, one after another, share it, so that a
/// renewal or a loss found through any of them is the lock's
/// (one identity per kept lock).
#[derive(Debug)]
struct LeaseCell {
    status: Mutex<Status>,
    /// Woken when the lease is lost.
    lost: Notify,
}

#[derive(Debug)]
struct Status {
    /// Lost, and why.
    lost: Option<&'static str>,
    /// Until when the lease is known to run, on the local clock: the moment
    /// the last successful acquire or renewal was *sent*, plus the lease,
    /// minus a drift allowance. Once passed, the lock is lost for good.
    valid_until: Instant,
    /// The client's shutdown took the lock from its holder and gives it back
    /// in the backend: the guard's own release has nothing left to send.
    surrendered: bool,
    /// Uses of the hold not released yet: a loss found once all are
    /// released (a late renewal answer) concerns nobody.
    live: usize,
    /// The last short lease sent for the hold (a kept hot lock idle, see
    /// `hot/`), which bounds what the answers of longer renewals prove.
    /// (Boxed: every other lock carries only the pointer.)
    short: Option<Box<ShortLease>>,
}

/// A short lease sent for a hold whose other renewals send a longer one.
#[derive(Debug)]
struct ShortLease {
    lease: Duration,
    /// When the last one was sent.
    sent: Instant,
    /// One of them failed without an answer: it may still reach the store
    /// after any later renewal (a command left on a connection that was
    /// replaced), so no answer proves more than the short lease any more.
    unsure: bool,
}

/// One lock held by one owner.
#[derive(Debug)]
pub(crate) struct HeldLock {
    /// Unique per hold in the store, in the process (the watchdog's handle
    /// on it): the uses of a kept lock share it.
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
    /// When the grant's answer came (a kept lock's use: when the use began).
    pub(crate) granted: Instant,
    /// The lease of the hold in the store (shared by the uses of a kept lock).
    cell: Arc<LeaseCell>,
    /// This use was released before its lease was lost.
    released: AtomicBool,
    /// Its metrics were told that it is no longer held.
    left: AtomicBool,
    /// Its metrics (nothing without the `metrics` feature).
    pub(crate) meter: HoldMeter,
    /// The `lock_hold` tracing span: from the grant until the lock is
    /// dropped (released, or its last guard gone after a loss). Entered by
    /// the guard's `scope` and `in_scope`. Kept only when a subscriber
    /// records it: a disabled span would cost every held lock 40 bytes.
    span: Option<Box<tracing::Span>>,
    /// How to confirm the hold in a transaction of the lock's SQL database.
    #[cfg(feature = "postgres")]
    sql_check: Option<Arc<crate::backend::SqlCheck>>,
}

/// The span of a lock whose `lock_hold` span no subscriber records.
static NO_SPAN: tracing::Span = tracing::Span::none();

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
            granted: Instant::now(),
            cell: Arc::new(LeaseCell {
                status: Mutex::new(Status {
                    lost: None,
                    valid_until: lease::valid_until(sent, lease.duration()),
                    surrendered: false,
                    live: 1,
                    short: None,
                }),
                lost: Notify::new(),
            }),
            released: AtomicBool::new(false),
            left: AtomicBool::new(false),
            meter: HoldMeter::none(),
            span: None,
            #[cfg(feature = "postgres")]
            sql_check: None,
        }
    }

    /// The next use of the same hold in the store (a kept lock taken again,
    /// or kept idle between uses): another `HeldLock` (its own guards,
    /// metrics and span) with the same key, owner, token and lease, whose
    /// lease is this one's: renewing or losing either is both.
    pub(crate) fn next_use(&self) -> Self {
        {
            let mut status = self.cell.status.lock();
            status.live = status.live.saturating_add(1);
        }
        HeldLock {
            id: self.id,
            key: self.key.clone(),
            owner: self.owner.clone(),
            token: self.token,
            lease: self.lease,
            holds: AtomicUsize::new(1),
            hold_until: None,
            granted: Instant::now(),
            cell: self.cell.clone(),
            released: AtomicBool::new(false),
            left: AtomicBool::new(false),
            meter: HoldMeter::none(),
            span: None,
            #[cfg(feature = "postgres")]
            sql_check: self.sql_check.clone(),
        }
    }

    /// Tells the metrics once that this use is no longer held.
    fn leave(&self, lost: bool) {
        if !self.left.swap(true, Ordering::AcqRel) {
            self.meter.left(lost);
        }
    }

    /// The hold, confirmable in a transaction of the lock's SQL database
    /// with `check` (the backend's `hold_check`; `None`: not an SQL
    /// backend), for `LockGuard::hold_in`.
    #[cfg(feature = "postgres")]
    pub(crate) fn sql_checked(mut self, check: Option<Arc<crate::backend::SqlCheck>>) -> Self {
        self.sql_check = check;
        self
    }

    /// See `LockGuard::hold_in`.
    #[cfg(feature = "postgres")]
    pub(crate) async fn hold_in<C>(&self, tx: &C) -> Result<(), LockError>
    where
        C: tokio_postgres::GenericClient + Sync,
    {
        let key = &self.key;
        let Some(check) = &self.sql_check else {
            return Err(LockError::Unsupported {
                key: key.name.to_string(),
                primitive: "hold_in",
                backend: "this backend",
                reason: "only a lock in a PostgreSQL database can be confirmed in a transaction \
                         of that database",
            });
        };
        let token = i64::try_from(self.token).unwrap_or(i64::MAX);
        let owner: &str = &self.owner;
        let lock: &str = &key.lock;
        let rows = tx
            .query(&check.sql, &[&lock, &owner, &token])
            .await
            .map_err(|err| LockError::Backend {
                key: key.name.to_string(),
                server: check.server.clone(),
                source: crate::backend::postgres::backend_error(&err),
            })?;
        if rows.is_empty() {
            return Err(LockError::LeaseLost {
                key: key.name.to_string(),
                reason: "the lock's row is no longer this owner's with this token by the \
                         server's clock",
            });
        }
        Ok(())
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
        if !span.is_disabled() {
            span.follows_from(tracing::Span::current());
            self.span = Some(Box::new(span));
        }
        self
    }

    /// The lock's `lock_hold` span (disabled unless the lock was granted
    /// under a subscriber that records it).
    pub(crate) fn span(&self) -> &tracing::Span {
        self.span.as_deref().unwrap_or(&NO_SPAN)
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
        let mut status = self.cell.status.lock();
        status.valid_until = status.valid_until.min(until);
    }

    pub(crate) fn is_watchdog(&self) -> bool {
        matches!(self.lease, Lease::Watchdog(_))
    }

    /// Released (before a loss), else lost, else held.
    pub(crate) fn state(&self) -> HoldState {
        let status = self.cell.status.lock();
        if self.released.load(Ordering::Acquire) {
            HoldState::Released
        } else if let Some(reason) = status.lost {
            HoldState::Lost(reason)
        } else {
            HoldState::Held
        }
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.cell.status.lock().valid_until
    }

    /// Records a successful renewal sent at `sent`. A lock whose lease had
    /// already run out on the local clock stays lost: its holder may have
    /// been told so.
    /// The renewal extends the hold in the store, whichever use of it the
    /// renewal was sent for (a kept lock handed from use to use meanwhile).
    pub(crate) fn renewed(&self, sent: Instant) {
        self.renewed_for(sent, self.lease.duration());
    }

    /// Records a successful renewal for `lease`, sent at `sent`.
    ///
    /// A kept hot lock gets short leases while idle and the full one in
    /// use: the key's expiry is set by whichever renewal the store runs
    /// last. Commands on one connection run in the order they were sent, so
    /// an answer to a renewal sent before the last short one (a watchdog
    /// round in flight when the lock went idle) proves only the short
    /// lease, counted from its send; and once a short one failed without an
    /// answer, none proves more than the short lease from its own send.
    pub(crate) fn renewed_for(&self, sent: Instant, lease: Duration) {
        let mut until = lease::valid_until(sent, lease);
        let mut status = self.cell.status.lock();
        if let Some(short) = status.short.as_deref() {
            if short.unsure || short.sent >= sent {
                until = until.min(lease::valid_until(sent.max(short.sent), short.lease));
            }
        }
        if status.lost.is_none()
            && Instant::now() < status.valid_until
            && until > status.valid_until
        {
            status.valid_until = until;
        }
    }

    /// A renewal with the short `lease` is about to be sent (now, `sent`):
    /// from the moment the store runs it, the key expires `lease` after, so
    /// the lease is counted as running out then at the latest, for every
    /// use of the hold, before the command can reach the store.
    pub(crate) fn shorten(&self, lease: Duration, sent: Instant) {
        let mut status = self.cell.status.lock();
        status.valid_until = status.valid_until.min(lease::valid_until(sent, lease));
        match status.short.as_deref_mut() {
            Some(short) => {
                short.lease = lease;
                short.sent = short.sent.max(sent);
            }
            None => {
                status.short = Some(Box::new(ShortLease {
                    lease,
                    sent,
                    unsure: false,
                }));
            }
        }
    }

    /// A renewal with a short lease failed without an answer: it may still
    /// reach the store after later ones (see [`renewed_for`](HeldLock::renewed_for)).
    pub(crate) fn short_unsure(&self) {
        if let Some(short) = self.cell.status.lock().short.as_mut() {
            short.unsure = true;
        }
    }

    /// Held: not released, no loss detected and the lease known to run on
    /// the local clock.
    pub(crate) fn is_held(&self) -> bool {
        let status = self.cell.status.lock();
        !self.released.load(Ordering::Acquire)
            && status.lost.is_none()
            && Instant::now() < status.valid_until
    }

    /// Marks the lease lost (once, for every use of the hold, also when found
    /// through a use released since: a renewal answered after a kept lock
    /// passed to its next use) and tells every `lost()` waiter. A use
    /// released before stays released; once every use is released, a loss
    /// concerns nobody and is not recorded.
    pub(crate) fn mark_lost(&self, reason: &'static str) {
        {
            let mut status = self.cell.status.lock();
            if status.lost.is_some() || status.live == 0 {
                return;
            }
            status.lost = Some(reason);
        }
        if !self.released.load(Ordering::Acquire) {
            self.leave(true);
        }
        // Logged before `lost()` waiters are woken, so the event is in the
        // log by the time they react.
        tracing::warn!(key = %self.key.name, token = self.token, reason, "lock lease lost");
        self.cell.lost.notify_waiters();
    }

    /// Takes the lock from its holder because the client shuts down: marks
    /// it lost (`reason`, unless it was lost already) and surrendered, so
    /// that its guard's release sends nothing (the shutdown gives it back).
    pub(crate) fn surrender(&self, reason: &'static str) {
        {
            let mut status = self.cell.status.lock();
            status.surrendered = true;
            if status.lost.is_some() || self.released.load(Ordering::Acquire) {
                return;
            }
            status.lost = Some(reason);
        }
        self.leave(true);
        tracing::warn!(key = %self.key.name, token = self.token, reason, "lock lease lost");
        self.cell.lost.notify_waiters();
    }

    /// Whether the client's shutdown took the lock (see [`surrender`](HeldLock::surrender)).
    pub(crate) fn is_surrendered(&self) -> bool {
        self.cell.status.lock().surrendered
    }

    /// Marks a lock whose lease ran out on the local clock as lost; returns
    /// whether it is lost.
    pub(crate) fn check_deadline(&self) -> bool {
        let expired = match self.state() {
            HoldState::Lost(_) => return true,
            HoldState::Released => return false,
            HoldState::Held => Instant::now() >= self.valid_until(),
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
        let lost = {
            let mut status = self.cell.status.lock();
            if status.lost.is_none() && !self.released.swap(true, Ordering::AcqRel) {
                status.live = status.live.saturating_sub(1);
            }
            status.lost.is_some()
        };
        // A use of a kept lock lost through another use is told here.
        self.leave(lost);
    }

    /// Resolves when the lease is lost: marked lost, or its local deadline
    /// passed (whatever a renewal in flight may still bring).
    pub(crate) async fn lost(&self) {
        loop {
            // Created before the check: a `notify_waiters` after it still
            // completes this future.
            let notified = self.cell.lost.notified();
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

    /// The uses of a kept lock are one hold: a renewal answered for the use
    /// that just ended extends the next one, and a loss found through any
    /// of them (also one released since) is the hold's; a use released
    /// before stays released. Once every use is released, a late loss
    /// concerns nobody.
    #[tokio::test(start_paused = true)]
    async fn the_uses_of_one_hold_share_its_lease() {
        let first = held(Lease::Watchdog(Duration::from_secs(1)));
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(600)).await;
        let second = first.next_use();
        first.mark_released();
        // The renewal sent for the first use, answered after the hand-over.
        first.renewed(sent + Duration::from_millis(500));
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(second.is_held(), "the renewal reached the use in progress");
        // A `gone` answered for the first use reaches the second.
        first.mark_lost("the lock was deleted, expired or taken over");
        assert!(matches!(first.state(), HoldState::Released));
        assert!(!second.is_held());
        assert!(matches!(
            second.lost_error(),
            Some(LockError::LeaseLost { .. })
        ));
        tokio::time::timeout(Duration::from_millis(1), second.lost())
            .await
            .expect("lost() of the use in progress resolves");
        // A plain lock released, then found gone by a late renewal: no loss.
        let plain = held(Lease::Watchdog(Duration::from_secs(1)));
        plain.mark_released();
        plain.mark_lost("the lock was deleted, expired or taken over");
        assert!(matches!(plain.state(), HoldState::Released));
        assert!(plain.lost_error().is_none());
    }

    /// A kept lock's renewals mix the short lease (idle) and the full one
    /// (in use); the store keeps the expiry of the one it ran last. A cut
    /// counts at once; the answer to a full renewal sent before the last
    /// cut (a watchdog round in flight when the lock went idle) proves only
    /// the short lease; one sent after it proves the full lease, unless a
    /// cut failed without an answer (it may still run after it).
    #[tokio::test(start_paused = true)]
    async fn a_short_lease_bounds_what_earlier_renewals_prove() {
        let full = Duration::from_secs(30);
        let short = Duration::from_secs(1);
        let lock = held(Lease::Watchdog(full));
        let in_flight = Instant::now();
        tokio::time::advance(Duration::from_millis(100)).await;
        let cut = Instant::now();
        lock.shorten(short, cut);
        assert!(
            lock.valid_until() <= cut + short,
            "counted from the cut's send"
        );
        lock.renewed_for(in_flight, full);
        assert!(lock.valid_until() <= cut + short, "sent before the cut");
        lock.renewed_for(cut, short);
        tokio::time::advance(Duration::from_millis(300)).await;
        let extended = Instant::now();
        lock.renewed_for(extended, full);
        assert!(lock.valid_until() > extended + Duration::from_secs(20));
        // A cut that failed without an answer: nothing proves more than
        // the short lease from then on.
        let lock = held(Lease::Watchdog(full));
        lock.shorten(short, Instant::now());
        lock.short_unsure();
        tokio::time::advance(Duration::from_millis(300)).await;
        let after = Instant::now();
        lock.renewed_for(after, full);
        assert!(lock.valid_until() <= after + short);
        assert!(
            lock.valid_until() > after,
            "still extended by the short lease"
        );
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
