//! Graceful shutdown of a client: refuse new locks and wake the waiters, let
//! the holders finish within a grace period, give back what they still hold,
//! let background releases finish, and stop the background work.
//!
//! The procedure runs in a supervised task of its own (the driver, see
//! `supervised.rs`), not in the caller's future: dropping a `shutdown` future does
//! not stop it, and every caller waits for the same driver and gets its
//! report. Its state lives in the client's core (`shutdown_state.rs`), so a driver
//! started again (after its runtime was dropped) goes on from there.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::client_core::ClientCore;
use crate::held::HeldLock;
use crate::release;
use crate::shutdown_state::ShutdownReport;
use crate::LockError;

/// Why a lock taken by the shutdown is lost (see `LockError::LeaseLost`).
const SURRENDERED: &str = "the client shut down before the lock was released";

/// How often a caller checks that the driver still runs (its runtime may
/// have gone) while waiting for the report.
const RECHECK: Duration = Duration::from_millis(250);

/// Shuts `core` down with `grace` for the holders (see
/// `LockClient::shutdown`), or waits for the shutdown under way.
pub(crate) async fn shutdown(
    core: Arc<ClientCore>,
    grace: Duration,
) -> Result<ShutdownReport, LockError> {
    if Handle::try_current().is_err() {
        return Err(LockError::InvalidConfig {
            key: "*".into(),
            reason: "LockClient::shutdown must be awaited on a tokio runtime".into(),
        });
    }
    // A grace too long for the clock has no deadline.
    let deadline = Instant::now().checked_add(grace);
    if core.begin_shutdown(deadline) {
        tracing::info!(client = %core.id, held = core.holder_count(), ?grace, "lock client shutting down");
    }
    let mut report = core.closing.watch_report();
    loop {
        if let Some(report) = *report.borrow_and_update() {
            return Ok(report);
        }
        let driven = core.clone();
        core.closing.driver.ensure(move || drive(driven));
        tokio::select! {
            Ok(()) = report.changed() => {}
            () = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// The driver: the grace period, then the locks still held, the background
/// releases and the background tasks; publishes the report.
async fn drive(core: Arc<ClientCore>) {
    if core.closing.report().is_some() {
        return;
    }
    // Hot locks kept idle go at once (the ones in use, at their release).
    if let Some(keeper) = &core.keeper {
        let idle = keeper.drain_idle();
        join_all(idle.iter().map(|lock| release::give_back(&core, lock))).await;
    }
    grace_period(&core).await;
    let held_at_start = core.closing.held_at_start();
    let remaining = core.take_holders();
    let mut report = ShutdownReport {
        released_by_holders: held_at_start
            .iter()
            .filter(|held| {
                let taken = held.upgrade().is_some_and(|lock| lock.is_surrendered());
                !taken
                    && !remaining
                        .iter()
                        .any(|lock| std::ptr::eq(held.as_ptr(), Arc::as_ptr(lock)))
            })
            .count(),
        ..ShutdownReport::default()
    };
    // Tell each holder before its lock can go to someone else.
    for lock in &remaining {
        lock.surrender(SURRENDERED);
    }
    let releases = join_all(remaining.iter().map(|lock| release::give_back(&core, lock)));
    // Releases the holders sent (late in the grace period), background
    // releases and rollbacks.
    let background = tokio::time::timeout(core.response_timeout, async {
        tokio::join!(core.janitor.idle(), releases_answered(&core));
    });
    let (outcomes, drained) = tokio::join!(releases, background);
    for (lock, outcome) in remaining.iter().zip(outcomes) {
        count(&core, &mut report, lock, outcome);
    }
    if drained.is_err() {
        tracing::warn!(client = %core.id, timeout = ?core.response_timeout, "background lock releases still running at shutdown");
    }
    core.stop_background();
    tracing::info!(
        client = %core.id,
        released_by_holders = report.released_by_holders,
        released_at_deadline = report.released_at_deadline,
        not_held = report.not_held,
        failed = report.failed,
        "lock client shut down"
    );
    core.closing.finish(report);
}

/// Waits until no scope of the client holds a lock and their releases
/// have been answered, or the deadline.
async fn grace_period(core: &ClientCore) {
    loop {
        // Created before the checks: a change after them still wakes us.
        let changed = core.closing.changed();
        if core.holder_count() == 0 && core.releases_in_flight() == 0 {
            return;
        }
        match core.closing.deadline() {
            Some(deadline) if Instant::now() >= deadline => return,
            Some(deadline) => tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(deadline) => {}
            },
            None => changed.await,
        }
    }
}

/// Resolves when no release is in flight (the shutdown's own included).
async fn releases_answered(core: &ClientCore) {
    loop {
        let changed = core.closing.changed();
        if core.releases_in_flight() == 0 {
            return;
        }
        changed.await;
    }
}

/// Counts the release of `lock` at the deadline; a failed one is retried in
/// the background until its lease would have run out anyway.
fn count(
    core: &Arc<ClientCore>,
    report: &mut ShutdownReport,
    lock: &Arc<HeldLock>,
    outcome: Result<bool, LockError>,
) {
    match outcome {
        Ok(true) => {
            tracing::debug!(key = %lock.key.name, token = lock.token, "lock released at shutdown");
            report.released_at_deadline = report.released_at_deadline.saturating_add(1);
        }
        Ok(false) => {
            tracing::debug!(key = %lock.key.name, token = lock.token, "lock no longer held at shutdown");
            report.not_held = report.not_held.saturating_add(1);
        }
        Err(err) => {
            tracing::warn!(key = %lock.key.name, token = lock.token, error = %err, "could not release lock at shutdown; retrying until its lease ends");
            report.failed = report.failed.saturating_add(1);
            release::retry_in_background(core, lock.clone(), true);
        }
    }
}
