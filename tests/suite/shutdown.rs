//! `LockClient::shutdown` on every backend: the locks of a client that shuts
//! down are free for other clients at once (not after their lease), its
//! waiters fail at once, its holders get the grace period, and it takes and
//! renews nothing afterwards.
//!
//! Each of these fails on code without the shutdown: there the lock stays
//! held for its 30 s lease, waiters wait out their `wait`, and the client
//! keeps taking and renewing locks.

use std::time::Duration;

use distlock::{LockClient, LockError};
use tokio::time::Instant;

use super::{assert_within, client_with_lease, Fixture};

fn is_shutting_down(result: &Result<impl std::fmt::Debug, LockError>, client: &LockClient) -> bool {
    matches!(result, Err(LockError::ShuttingDown { client: id, .. }) if id == client.id())
}

/// A holds a lock (30 s watchdog lease) in a body that does not finish; A
/// shuts down with a short grace: at its end the lock is released, the
/// body's guard is told (lost), and B gets the lock right after `shutdown`
/// returns, well before the lease would have run out.
pub async fn shutdown_releases_locks_for_other_clients<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let name = "shutdown:nightly";
    let guard = a.lock(name).acquire().await.unwrap();
    assert!(b.lock(name).try_acquire().await.unwrap().is_none());
    let body = tokio::spawn(async move {
        guard.lost().await; // the job notices and stops
        guard
    });
    let started = Instant::now();
    let report = a.shutdown(Duration::from_millis(200)).await.unwrap();
    assert_within(started.elapsed(), Duration::from_secs(2), "shutdown");
    assert!(
        started.elapsed() >= Duration::from_millis(190),
        "the grace period was cut short: {:?}",
        started.elapsed()
    );
    assert_eq!(report.released_at_deadline, 1, "{report:?}");
    assert_eq!(report.released_by_holders, 0, "{report:?}");
    assert_eq!((report.not_held, report.failed), (0, 0), "{report:?}");
    // B, like another replica, gets the lock at once.
    let next = b
        .lock(name)
        .try_acquire()
        .await
        .unwrap()
        .expect("free right after the shutdown");
    let guard = tokio::time::timeout(Duration::from_secs(1), body)
        .await
        .expect("lost() fired")
        .unwrap();
    assert!(!guard.is_held());
    let released = guard.release().await;
    assert!(
        matches!(released, Err(LockError::LeaseLost { .. })),
        "{released:?}"
    );
    // The shut-down client's late release deleted nothing of B's.
    assert!(next.is_held());
    assert_eq!(
        b.admin()
            .inspect(name)
            .await
            .unwrap()
            .holder
            .map(|h| h.owner),
        Some(next.owner().to_owned())
    );
    next.release().await.unwrap();
}

/// Waiters of a client that begins to shut down fail at once with
/// `ShuttingDown` (one waits for another client's lock, one for a lock of
/// its own client), not at the end of their 20 s wait; a holder that
/// releases during the grace period releases normally, and the shutdown
/// ends as soon as nothing is held.
pub async fn shutdown_wakes_waiters_at_once<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let theirs = b.lock("shutdown:theirs").acquire().await.unwrap();
    let ours = a.lock("shutdown:ours").acquire().await.unwrap();
    let waiters: Vec<_> = ["shutdown:theirs", "shutdown:ours"]
        .into_iter()
        .map(|name| {
            let a = a.clone();
            tokio::spawn(async move {
                let result = a.lock(name).wait(Duration::from_secs(20)).acquire().await;
                (Instant::now(), result)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await; // both wait
    let began = Instant::now();
    let shutdown = tokio::spawn(a.shutdown(Duration::from_secs(20)));
    for waiter in waiters {
        let (woken, result) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter was woken")
            .unwrap();
        assert!(is_shutting_down(&result, &a), "{result:?}");
        assert_within(
            woken.saturating_duration_since(began),
            Duration::from_secs(1),
            "a waiter's wake-up",
        );
    }
    // The holder finishes within the grace period and releases as usual.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !shutdown.is_finished(),
        "the grace period waits for the holder"
    );
    ours.release().await.unwrap();
    let released = Instant::now();
    let report = tokio::time::timeout(Duration::from_secs(5), shutdown)
        .await
        .expect("the shutdown ends once nothing is held")
        .unwrap()
        .unwrap();
    assert_within(
        released.elapsed(),
        Duration::from_secs(2),
        "the end of the grace period",
    );
    assert_eq!(report.released_by_holders, 1, "{report:?}");
    assert_eq!(report.released_at_deadline, 0, "{report:?}");
    // Another client's lock was never touched.
    assert!(theirs.is_held());
    theirs.release().await.unwrap();
    let ours = b.lock("shutdown:ours").try_acquire().await.unwrap();
    ours.expect("released by its holder")
        .release()
        .await
        .unwrap();
}

/// Of two bodies, the one that finishes within the grace period releases
/// its lock normally (counted as released by its holder) and the one that
/// does not has its lock taken and released at the deadline, its guard
/// told by `lost()`.
pub async fn shutdown_grace_lets_bodies_finish<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let quick = a.lock("shutdown:quick").acquire().await.unwrap();
    let slow = std::sync::Arc::new(a.lock("shutdown:slow").acquire().await.unwrap());
    let quick_body = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        quick.release().await
    });
    let slow_body = tokio::spawn({
        let slow = slow.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(20), slow.lost())
                .await
                .is_ok()
        }
    });
    let started = Instant::now();
    let report = a.shutdown(Duration::from_millis(600)).await.unwrap();
    let ended = Instant::now();
    assert!(
        ended.saturating_duration_since(started) >= Duration::from_millis(590),
        "the slow body got the whole grace period: {:?}",
        ended.saturating_duration_since(started)
    );
    quick_body.await.unwrap().unwrap();
    assert_eq!(report.released_by_holders, 1, "{report:?}");
    assert_eq!(report.released_at_deadline, 1, "{report:?}");
    assert_eq!((report.not_held, report.failed), (0, 0), "{report:?}");
    // Checked on the guard itself, not by when the body's task got to run
    // (which is up to the scheduler under load).
    assert!(
        futures::FutureExt::now_or_never(slow.lost()).is_some(),
        "lost() has fired when the shutdown returns (before others may take the lock)"
    );
    assert!(
        slow_body.await.unwrap(),
        "lost() woke the body that overran"
    );
    assert!(!slow.is_held());
    for name in ["shutdown:quick", "shutdown:slow"] {
        let guard = b.lock(name).try_acquire().await.unwrap();
        guard
            .unwrap_or_else(|| panic!("{name} is free"))
            .release()
            .await
            .unwrap();
    }
    drop(slow); // its late release sends nothing
}

/// After a shutdown, every acquisition on the client and its clones fails
/// at once with `ShuttingDown` (also with a wait), a second shutdown
/// returns the first's report, and the watchdog renews nothing.
pub async fn shutdown_refuses_new_locks_and_stops_renewing<F: Fixture>(fixture: &F) {
    let a = client_with_lease(fixture, Duration::from_millis(300)).await;
    let clone = a.clone();
    let guard = a.lock("shutdown:renewed").acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(a.stats().renewal_rounds > 0, "renewed every 100 ms");
    assert!(!clone.is_shutting_down());
    let report = clone.close().await.unwrap();
    assert!(a.is_shutting_down());
    assert_eq!(report.released_at_deadline, 1, "{report:?}");
    assert!(!guard.is_held());
    let rounds = a.stats().renewal_rounds;
    assert_eq!(a.stats().watched_locks, 0);

    let started = Instant::now();
    let acquired = a.lock("shutdown:after").acquire().await;
    assert!(is_shutting_down(&acquired, &a), "{acquired:?}");
    let message = acquired.unwrap_err().to_string();
    assert!(
        message.contains("shutdown:after") && message.contains("shutting down"),
        "{message}"
    );
    let tried = clone.lock("shutdown:after").try_acquire().await;
    assert!(is_shutting_down(&tried, &a), "{tried:?}");
    let waited = a
        .lock("shutdown:after")
        .wait(Duration::from_secs(20))
        .acquire()
        .await;
    assert!(is_shutting_down(&waited, &a), "{waited:?}");
    let all = clone
        .lock_all(["shutdown:after", "shutdown:after2"])
        .wait(Duration::from_secs(20))
        .acquire()
        .await;
    assert!(is_shutting_down(&all, &a), "{all:?}");
    assert_within(started.elapsed(), Duration::from_secs(1), "refusals");
    assert!(a
        .admin()
        .inspect("shutdown:after")
        .await
        .unwrap()
        .holder
        .is_none());

    let again = a.shutdown(Duration::from_secs(20)).await.unwrap();
    assert_eq!(
        again, report,
        "a second shutdown returns the first's report"
    );
    assert_within(
        started.elapsed(),
        Duration::from_secs(1),
        "a second shutdown",
    );

    tokio::time::sleep(Duration::from_millis(400)).await; // 4 renewal periods
    assert_eq!(
        a.stats().renewal_rounds,
        rounds,
        "no renewal after shutdown"
    );
    assert!(matches!(
        guard.release().await,
        Err(LockError::LeaseLost { .. })
    ));
    assert_eq!(a.stats().renewal_rounds, rounds);
}
