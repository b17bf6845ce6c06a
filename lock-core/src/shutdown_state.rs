//! A client's shutdown state: whether it refuses new locks, when its grace
//! period ends, which locks were held when it began, and its report once
//! done. The procedure that drives it is `shutdown.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;

use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::held::HeldLock;
use crate::supervised::Supervised;
use crate::sync::Mutex;

/// What [`LockClient::shutdown`](crate::LockClient::shutdown) did with the
/// locks the client held when it began.
///
/// Every lock held then is counted once: given back by its holder during
/// the grace period, or taken back by the shutdown at its end (released,
/// found no longer held, or failed). Failures are logged at warn level with
/// the lock name and the error (target `distlock_core::shutdown`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Locks whose holders released them (or dropped their guards, which
    /// releases in the background) during the grace period.
    pub released_by_holders: usize,
    /// Locks still held at the end of the grace period that the shutdown
    /// released: deleted in the backend under their holder's owner id.
    pub released_at_deadline: usize,
    /// Locks still held at the end of the grace period that the backend no
    /// longer had under this client's owner id (their lease had run out, or
    /// they were deleted or taken over): nothing was deleted.
    pub not_held: usize,
    /// Locks whose release at the end of the grace period failed (backend
    /// error, no answer in time): they stay in the backend until their lease
    /// runs out, at most one lease later, as nothing renews them any more.
    /// The release is retried in the background while the process runs.
    pub failed: usize,
}

/// The shutdown state of one client (see the module docs).
#[derive(Debug)]
pub(crate) struct Closing {
    /// Set once, when the shutdown begins (under the client's holders lock,
    /// so that a lock is either recorded as held before it or refused).
    closing: AtomicBool,
    /// Woken when the shutdown begins: waiters leave.
    started: Notify,
    /// Woken when a holder gives its lock back during the shutdown, or the
    /// deadline moves.
    changed: Notify,
    plan: Mutex<Plan>,
    report: watch::Sender<Option<ShutdownReport>>,
    /// The task that drives the shutdown.
    pub(crate) driver: Supervised,
}

#[derive(Debug, Default)]
struct Plan {
    /// The end of the grace period: the earliest any caller asked for.
    /// `None`: no limit (a grace too long for the clock).
    deadline: Option<Instant>,
    /// The locks held when the shutdown began.
    held_at_start: Vec<Weak<HeldLock>>,
}

impl Default for Closing {
    fn default() -> Self {
        Closing {
            closing: AtomicBool::new(false),
            started: Notify::new(),
            changed: Notify::new(),
            plan: Mutex::default(),
            report: watch::Sender::new(None),
            driver: Supervised::default(),
        }
    }
}

impl Closing {
    /// Whether the shutdown has begun.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Begins the shutdown with a grace period until `deadline` (`None`: no
    /// limit), recording the locks `held` now; or, when it has begun
    /// already, moves its deadline earlier if `deadline` is. Returns whether
    /// this call began it. The caller holds the client's holders lock and
    /// calls [`wake_waiters`](Closing::wake_waiters) after letting go of it.
    pub(crate) fn begin(
        &self,
        deadline: Option<Instant>,
        held: impl FnOnce() -> Vec<Weak<HeldLock>>,
    ) -> bool {
        let mut plan = self.plan.lock();
        if self.is_closing() {
            let earlier = match (plan.deadline, deadline) {
                (Some(current), Some(asked)) => asked < current,
                (None, Some(_)) => true,
                (_, None) => false,
            };
            if earlier {
                plan.deadline = deadline;
                drop(plan);
                self.changed.notify_waiters();
            }
            return false;
        }
        plan.deadline = deadline;
        plan.held_at_start = held();
        self.closing.store(true, Ordering::Release);
        true
    }

    /// Wakes every acquisition waiting on this client (they fail).
    pub(crate) fn wake_waiters(&self) {
        self.started.notify_waiters();
    }

    /// Resolves once the shutdown has begun.
    pub(crate) async fn started(&self) {
        // Created before the check: a `notify_waiters` after it still wakes us.
        let started = self.started.notified();
        if self.is_closing() {
            return;
        }
        started.await;
    }

    /// A holder gave its lock back during the shutdown.
    pub(crate) fn holder_left(&self) {
        self.changed.notify_waiters();
    }

    /// Completes at the next [`holder_left`](Closing::holder_left) or move of
    /// the deadline after this call (create it before checking).
    pub(crate) fn changed(&self) -> Notified<'_> {
        self.changed.notified()
    }

    /// The end of the grace period (`None`: no limit).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.plan.lock().deadline
    }

    /// The locks held when the shutdown began.
    pub(crate) fn held_at_start(&self) -> Vec<Weak<HeldLock>> {
        self.plan.lock().held_at_start.clone()
    }

    /// The report, once the shutdown has finished.
    pub(crate) fn report(&self) -> Option<ShutdownReport> {
        *self.report.borrow()
    }

    /// Told when the report is published.
    pub(crate) fn watch_report(&self) -> watch::Receiver<Option<ShutdownReport>> {
        self.report.subscribe()
    }

    /// Publishes the report: the shutdown has finished.
    pub(crate) fn finish(&self, report: ShutdownReport) {
        self.plan.lock().held_at_start.clear();
        self.report.send_replace(Some(report));
    }
}
