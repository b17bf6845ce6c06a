//! The lock family's behavioural suite (fair lock, read-write lock,
//! semaphore), run per backend by `family_suite!`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{LockClient, LockError};
use tokio::time::Instant;

use super::Fixture;

const LONG: Duration = Duration::from_secs(20);

/// Four waiters from four clients queue one after another on a held fair
/// lock; they get it in that order, each with a higher token.
pub async fn family_fair_lock_grants_in_arrival_order<F: Fixture>(fixture: &F) {
    let holder = fixture.client().await;
    let guard = holder.fair_lock("fair:order").acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let client = fixture.client().await;
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client
                .fair_lock("fair:order")
                .wait(LONG)
                .acquire()
                .await
                .unwrap();
            order.lock().unwrap().push((i, guard.fencing_token()));
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.unwrap();
        }));
        // Let it make its first attempt (and queue) before the next comes.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    guard.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let arrival: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(arrival, [0, 1, 2, 3], "grants in arrival order");
    assert!(
        order.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens grow: {order:?}"
    );
}

/// While a waiter is queued, a single try by another client does not take
/// the lock as it is handed over.
pub async fn family_fair_single_try_does_not_jump_the_queue<F: Fixture>(fixture: &F) {
    let [holder, queued, jumper] = super::clients::<F, 3>(fixture).await;
    let guard = holder.fair_lock("fair:jump").acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        queued
            .fair_lock("fair:jump")
            .wait(LONG)
            .acquire()
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(matches!(
        jumper.fair_lock("fair:jump").acquire().await,
        Err(LockError::Busy { .. })
    ));
    guard.release().await.unwrap();
    // Right after the release: the queued waiter has it (handed over).
    let tried = jumper.fair_lock("fair:jump").acquire().await;
    assert!(
        matches!(tried, Err(LockError::Busy { .. })),
        "the single try took the lock from the queue: {tried:?}"
    );
    let got = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the queued waiter got the lock")
        .unwrap();
    assert!(got.is_held());
    got.release().await.unwrap();
    // With nobody queued, a single try takes it.
    jumper
        .fair_lock("fair:jump")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// A queued waiter that is cancelled, and one that times out, leave the
/// queue at once: the waiter behind them gets the lock right after the
/// release, not a queue place's lifetime later.
pub async fn family_fair_cancelled_and_timed_out_waiters_leave_the_queue<F: Fixture>(fixture: &F) {
    let [holder, cancelled, timing_out, last] = super::clients::<F, 4>(fixture).await;
    let guard = holder.fair_lock("fair:leave").acquire().await.unwrap();
    let dropped = tokio::spawn(async move {
        cancelled
            .fair_lock("fair:leave")
            .wait(LONG)
            .acquire()
            .await
            .map(|_| ())
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let timed = tokio::spawn(async move {
        timing_out
            .fair_lock("fair:leave")
            .wait(Duration::from_millis(400))
            .acquire()
            .await
            .map(|_| ())
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let waiting = tokio::spawn(async move {
        let guard = last
            .fair_lock("fair:leave")
            .wait(LONG)
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    dropped.abort();
    assert!(matches!(
        timed.await.unwrap(),
        Err(LockError::TimedOut { .. })
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (got, guard) = waiting.await.unwrap();
    let took = got.saturating_duration_since(released);
    assert!(
        took < Duration::from_secs(2),
        "the last waiter got the lock {took:?} after the release: gone waiters blocked it"
    );
    guard.release().await.unwrap();
}

/// Readers share the lock; a writer excludes readers and other writers.
pub async fn family_readers_share_and_a_writer_excludes<F: Fixture>(fixture: &F) {
    let [a, b, c] = super::clients::<F, 3>(fixture).await;
    let (ra, rb) = (a.read_write_lock("rw:share"), b.read_write_lock("rw:share"));
    let rc = c.read_write_lock("rw:share");
    let read_a = ra.read().acquire().await.unwrap();
    let read_b = rb.read().acquire().await.unwrap();
    assert!(matches!(
        rc.write().acquire().await,
        Err(LockError::Busy { .. })
    ));
    read_a.release().await.unwrap();
    assert!(matches!(
        rc.write().acquire().await,
        Err(LockError::Busy { .. })
    ));
    read_b.release().await.unwrap();
    let write = rc.write().acquire().await.unwrap();
    assert!(matches!(
        ra.read().acquire().await,
        Err(LockError::Busy { .. })
    ));
    assert!(matches!(
        rb.write().acquire().await,
        Err(LockError::Busy { .. })
    ));
    let woken = tokio::spawn(async move { ra.read().wait(LONG).acquire().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    write.release().await.unwrap();
    let read = woken.await.unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "the reader was woken by the writer's release"
    );
    read.release().await.unwrap();
}

/// Once a writer waits, new readers wait behind it (readers already
/// holding finish); when it is done they read.
pub async fn family_a_waiting_writer_is_not_starved_by_readers<F: Fixture>(fixture: &F) {
    use std::sync::atomic::AtomicBool;
    let [a, b, w] = super::clients::<F, 3>(fixture).await;
    let first = a
        .read_write_lock("rw:starve")
        .read()
        .acquire()
        .await
        .unwrap();
    // Set while the writer holds the lock, and once it got it.
    let writing = Arc::new(AtomicBool::new(false));
    let wrote = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn({
        let (writing, wrote) = (writing.clone(), wrote.clone());
        async move {
            let guard = w
                .read_write_lock("rw:starve")
                .write()
                .wait(LONG)
                .acquire()
                .await
                .unwrap();
            writing.store(true, Ordering::SeqCst);
            wrote.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            writing.store(false, Ordering::SeqCst);
            guard.release().await.unwrap();
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let late = b.read_write_lock("rw:starve");
    assert!(
        matches!(late.read().acquire().await, Err(LockError::Busy { .. })),
        "a new reader went ahead of the waiting writer"
    );
    let reader = tokio::spawn({
        let (writing, wrote) = (writing.clone(), wrote.clone());
        async move {
            let guard = late.read().wait(LONG).acquire().await.unwrap();
            assert!(
                !writing.load(Ordering::SeqCst),
                "the reader read while the writer wrote"
            );
            assert!(
                wrote.load(Ordering::SeqCst),
                "the reader went before the waiting writer"
            );
            guard
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.release().await.unwrap();
    writer.await.unwrap();
    let read = reader.await.unwrap();
    read.release().await.unwrap();
}

/// A writer may take the read lock (downgrade) and keep it after releasing
/// the write lock; a reader asking for the write lock is refused at once.
pub async fn family_downgrade_is_allowed_and_upgrade_refused<F: Fixture>(fixture: &F) {
    let [a, b] = super::clients::<F, 2>(fixture).await;
    let rw = a.read_write_lock("rw:grade");
    let other = b.read_write_lock("rw:grade");
    let write = rw.write().acquire().await.unwrap();
    let read = write.scope(rw.read().acquire()).await.unwrap();
    // The writer that also reads re-enters its write hold (no upgrade):
    // inside the write lock's scope (a re-entry needs the scope of the hold
    // it re-enters on the call stack).
    let again = write.scope(read.scope(rw.write().acquire())).await.unwrap();
    assert_eq!(again.fencing_token(), write.fencing_token());
    again.release().await.unwrap();
    write.release().await.unwrap();
    assert!(read.is_held());
    assert!(matches!(
        other.write().acquire().await,
        Err(LockError::Busy { .. })
    ));
    let shared = other.read().acquire().await.unwrap();
    shared.release().await.unwrap();
    let started = Instant::now();
    let upgrade = read.scope(rw.write().wait(LONG).acquire()).await;
    assert!(
        matches!(upgrade, Err(LockError::UpgradeRefused { ref key }) if key == "rw:grade"),
        "{upgrade:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once"
    );
    read.release().await.unwrap();
    other
        .write()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// 8 tasks of 4 clients share a semaphore of 3 permits: never more than 3
/// holders at once (counted outside the lock), every round done.
pub async fn family_semaphore_never_exceeds_its_permits<F: Fixture>(fixture: &F) {
    let clients = super::clients::<F, 4>(fixture).await;
    let in_use = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let semaphore = clients[i % 4].semaphore("sem:limit", 3);
        let (in_use, most, done) = (in_use.clone(), most.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let permit = semaphore.permit().wait(LONG).acquire().await.unwrap();
                let now = in_use.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                in_use.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 24);
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders of 3 permits at once");
    assert!(most >= 2, "the permits were shared ({most} at most)");
}

/// A holder that takes several permits counts for all of them; a waiter is
/// woken when they are given back.
pub async fn family_semaphore_counts_permits_and_wakes_waiters<F: Fixture>(fixture: &F) {
    let [a, b] = super::clients::<F, 2>(fixture).await;
    let big = a
        .semaphore("sem:wake", 3)
        .permits(2)
        .acquire()
        .await
        .unwrap();
    let one = b.semaphore("sem:wake", 3).permit().acquire().await.unwrap();
    assert!(matches!(
        b.semaphore("sem:wake", 3).permit().acquire().await,
        Err(LockError::Busy { .. })
    ));
    let waiting = tokio::spawn(async move {
        let guard = b
            .semaphore("sem:wake", 3)
            .permits(2)
            .wait(LONG)
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let released = Instant::now();
    big.release().await.unwrap();
    let (got, guard) = waiting.await.unwrap();
    assert!(
        got.saturating_duration_since(released) < Duration::from_secs(2),
        "woken by the release, not by a lease"
    );
    guard.release().await.unwrap();
    one.release().await.unwrap();
}

/// A holder that never gives its permits back (a crash) loses them after
/// its lease: another holder gets them then.
pub async fn family_crashed_permit_holder_leaks_nothing<F: Fixture>(fixture: &F) {
    let [a, b] = super::clients::<F, 2>(fixture).await;
    let lease = Duration::from_millis(400);
    let taken = Instant::now();
    let crashed = a
        .semaphore("sem:crash", 2)
        .permits(2)
        .lease(lease)
        .acquire()
        .await
        .unwrap();
    std::mem::forget(crashed);
    let got = b
        .semaphore("sem:crash", 2)
        .permits(2)
        .wait(LONG)
        .acquire()
        .await
        .unwrap();
    let after = taken.elapsed();
    assert!(after >= lease - Duration::from_millis(50), "{after:?}");
    assert!(after < Duration::from_secs(3), "{after:?}");
    got.release().await.unwrap();
}

/// The watchdog renews read holds, write holds, permits and fair locks
/// alike: past several leases they are still held and still exclude.
pub async fn family_watchdog_renews_every_primitive<F: Fixture>(fixture: &F) {
    let a = super::client_with_lease(fixture, Duration::from_millis(300)).await;
    let b = fixture.client().await;
    let read = a.read_write_lock("wd:rw").read().acquire().await.unwrap();
    let write = a.read_write_lock("wd:rw2").write().acquire().await.unwrap();
    let permit = a.semaphore("wd:sem", 1).permit().acquire().await.unwrap();
    let fair = a.fair_lock("wd:fair").acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for guard in [&read, &write, &permit, &fair] {
        assert!(guard.is_held(), "{} lost", guard.key());
    }
    assert!(matches!(
        b.read_write_lock("wd:rw").write().acquire().await,
        Err(LockError::Busy { .. })
    ));
    assert!(matches!(
        b.read_write_lock("wd:rw2").read().acquire().await,
        Err(LockError::Busy { .. })
    ));
    assert!(matches!(
        b.semaphore("wd:sem", 1).permit().acquire().await,
        Err(LockError::Busy { .. })
    ));
    assert!(matches!(
        b.fair_lock("wd:fair").acquire().await,
        Err(LockError::Busy { .. })
    ));
    for guard in [read, write, permit, fair] {
        guard.release().await.unwrap();
    }
}

/// Reentrancy per call chain works for every primitive, and a cancelled
/// acquisition leaves nothing held.
pub async fn family_reentry_and_cancellation<F: Fixture>(fixture: &F) {
    let [a, b] = super::clients::<F, 2>(fixture).await;
    let fair = a.fair_lock("re:fair").acquire().await.unwrap();
    let inner = fair.scope(a.fair_lock("re:fair").acquire()).await.unwrap();
    assert_eq!(inner.fencing_token(), fair.fencing_token());
    inner.release().await.unwrap();
    assert!(matches!(
        b.fair_lock("re:fair").acquire().await,
        Err(LockError::Busy { .. })
    ));
    fair.release().await.unwrap();
    let permit = a.semaphore("re:sem", 1).permit().acquire().await.unwrap();
    let again = permit
        .scope(a.semaphore("re:sem", 1).permit().acquire())
        .await
        .unwrap();
    again.release().await.unwrap();
    permit.release().await.unwrap();
    // Cancelled at every point of a wait: nothing stays held or queued.
    let held = b.fair_lock("re:cancel").acquire().await.unwrap();
    for ms in [0, 1, 5, 20, 80] {
        let attempt = a.fair_lock("re:cancel").wait(LONG).acquire();
        let _ = tokio::time::timeout(Duration::from_millis(ms), attempt).await;
    }
    held.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let retaken = b.fair_lock("re:cancel").acquire().await;
    assert!(
        retaken.is_ok(),
        "a cancelled waiter kept the lock: {retaken:?}"
    );
}

/// A renewal racing a release never brings the hold back: with a watchdog
/// renewing every 30 ms, 30 quick hold-release cycles of each primitive
/// leave nothing held for another client.
pub async fn family_renewals_do_not_outlive_release<F: Fixture>(fixture: &F) {
    let a = super::client_with_lease(fixture, Duration::from_millis(90)).await;
    let b = fixture.client().await;
    for i in 0..30u64 {
        let read = a.read_write_lock("ren:rw").read().acquire().await.unwrap();
        let permit = a.semaphore("ren:sem", 1).permit().acquire().await.unwrap();
        let fair = a.fair_lock("ren:fair").acquire().await.unwrap();
        tokio::time::sleep(Duration::from_millis(i % 4 * 12)).await;
        read.release().await.unwrap();
        permit.release().await.unwrap();
        fair.release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    b.read_write_lock("ren:rw")
        .write()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    b.semaphore("ren:sem", 1)
        .permit()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    b.fair_lock("ren:fair")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// ShedLock's `lockAtLeastFor`: a job lock released (or dropped) right
/// after it was taken stays held until its minimum hold ends, then another
/// replica gets it; a shutdown keeps it too; a minimum longer than a fixed
/// lease is refused.
pub async fn scheduled_hold_at_least_outlives_an_early_release<F: Fixture>(fixture: &F) {
    let [a, b] = super::clients::<F, 2>(fixture).await;
    let at_least = Duration::from_millis(700);

    for how in ["release", "drop", "shutdown"] {
        let name = format!("job:{how}");
        let holder = fixture.client().await;
        let taken = Instant::now();
        let guard = holder
            .lock(name.as_str())
            .hold_at_least(at_least)
            .acquire()
            .await
            .unwrap();
        match how {
            "release" => guard.release().await.unwrap(),
            "drop" => drop(guard),
            _ => {
                let report = holder.shutdown(Duration::ZERO).await.unwrap();
                assert_eq!(report.released_at_deadline, 1, "{report:?}");
                drop(guard);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            matches!(
                b.lock(name.as_str()).acquire().await,
                Err(LockError::Busy { .. })
            ),
            "{how}: the lock was deleted before its minimum hold"
        );
        let next = b.lock(name.as_str()).wait(LONG).acquire().await.unwrap();
        let after = taken.elapsed();
        assert!(
            after >= at_least - Duration::from_millis(20),
            "{how}: {after:?}"
        );
        assert!(after < Duration::from_secs(4), "{how}: {after:?}");
        next.release().await.unwrap();
    }
    let refused = a
        .lock("job:bad")
        .lease(Duration::from_millis(100))
        .hold_at_least(Duration::from_secs(1))
        .acquire()
        .await;
    assert!(
        matches!(refused, Err(LockError::InvalidConfig { ref key, .. }) if key == "job:bad"),
        "{refused:?}"
    );
}

/// A waiter that asked while a `hold_at_least` lock was held with a long
/// lease, and then slept on that lease, gets the lock when the minimum hold
/// ends after an early release, not when the old lease would have: the
/// release that cuts the lease wakes it (before, it slept out the old lease:
/// the lock sat free while wanted for up to a lease).
pub async fn scheduled_hold_at_least_release_wakes_the_waiters<F: Fixture>(fixture: &F) {
    let lease = Duration::from_secs(20);
    let holder = super::client_with_lease(fixture, lease).await;
    let waiter = super::client_with_lease(fixture, lease).await;
    let at_least = Duration::from_millis(800);
    let taken = Instant::now();
    let guard = holder
        .lock("job:cut")
        .hold_at_least(at_least)
        .acquire()
        .await
        .unwrap();
    let (asked_tx, asked_rx) = tokio::sync::oneshot::channel();
    let waiting = tokio::spawn(async move {
        let _ = asked_tx.send(());
        // Less than the old lease: a waiter that sleeps it out times out.
        waiter
            .lock("job:cut")
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .map(|guard| (Instant::now(), guard))
    });
    asked_rx.await.unwrap();
    // The waiter's first attempt finds the lock held for about `lease`.
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    let (got, next) = waiting
        .await
        .unwrap()
        .expect("the waiter got the lock once the minimum hold ended");
    let after = got.saturating_duration_since(taken);
    assert!(after >= at_least - Duration::from_millis(20), "{after:?}");
    // Woken by the cut: about the minimum hold, far from the 10 s the
    // waiter would sleep before its last look at its deadline.
    assert!(after < Duration::from_secs(5), "{after:?}");
    next.release().await.unwrap();
}

/// Bad permits are typed errors naming the semaphore.
pub async fn family_bad_permits_are_typed_errors<F: Fixture>(fixture: &F) {
    let client: LockClient = fixture.client().await;
    for lock in [
        client.semaphore("sem:bad", 0).permit(),
        client.semaphore("sem:bad", 3).permits(0),
        client.semaphore("sem:bad", 3).permits(4),
    ] {
        match lock.acquire().await {
            Err(LockError::InvalidConfig { key, reason }) => {
                assert_eq!(key, "sem:bad");
                assert!(reason.chars().any(|c| c.is_ascii_digit()), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}

/// `inspect_fair`, `inspect_read_write` and `inspect_semaphore` show the
/// holders (with their tokens and leases), the fair queue in its order, the
/// waiting writers and the permits in use, as another client sees them;
/// holds whose lease ran out are not shown, before anything purged them.
pub async fn family_inspection_shows_holders_waiters_and_permits<F: Fixture>(fixture: &F) {
    let [a, b, c, operator] = super::clients::<F, 4>(fixture).await;
    let prefix = a.key_prefix().to_owned();
    let short = Duration::from_millis(300);

    // Never used: nothing held, nothing queued.
    let fair = operator.admin().inspect_fair("inspect:fair").await.unwrap();
    assert_eq!(fair.name, "inspect:fair");
    assert_eq!(fair.key, format!("{prefix}{{inspect:fair}}:fair"));
    assert_eq!(
        fair.fence_key,
        operator
            .admin()
            .inspect("inspect:fair")
            .await
            .unwrap()
            .fence_key
    );
    assert!(fair.holder.is_none() && fair.queue.is_empty());
    let rw = operator
        .admin()
        .inspect_read_write("inspect:rw")
        .await
        .unwrap();
    assert_eq!(rw.key, format!("{prefix}{{inspect:rw}}:rw"));
    assert!(rw.readers.is_empty() && rw.writer.is_none() && rw.waiting_writers.is_empty());
    let sem = operator
        .admin()
        .inspect_semaphore("inspect:sem")
        .await
        .unwrap();
    assert_eq!(sem.key, format!("{prefix}{{inspect:sem}}:sem"));
    assert!(sem.holders.is_empty());
    assert_eq!(sem.in_use, 0);

    // The fair lock: its holder, then the waiters in arrival order.
    let held = a.fair_lock("inspect:fair").acquire().await.unwrap();
    let mut waiters = Vec::new();
    for client in [b.clone(), c.clone()] {
        waiters.push(tokio::spawn(async move {
            client
                .fair_lock("inspect:fair")
                .wait(LONG)
                .acquire()
                .await
                .unwrap()
        }));
        tokio::time::sleep(Duration::from_millis(200)).await; // it queues
    }
    let fair = operator.admin().inspect_fair("inspect:fair").await.unwrap();
    let holder = fair.holder.clone().expect("held");
    assert_eq!(holder.owner, held.owner());
    assert_eq!(holder.fencing_token, held.fencing_token());
    assert_eq!(holder.holds, 1);
    let ttl = holder.ttl.expect("a lease");
    assert!(ttl > Duration::ZERO && ttl <= a.lease(), "{ttl:?}");
    let queued: Vec<&str> = fair.queue.iter().map(|q| q.client_id()).collect();
    assert_eq!(queued, [b.id(), c.id()], "{fair:?}");
    for waiter in &fair.queue {
        assert!(
            waiter.place_ttl > Duration::ZERO && waiter.place_ttl <= distlock::QUEUE_PRESENCE,
            "{waiter:?}"
        );
    }
    assert!(fair.last_fencing_token >= Some(held.fencing_token()));
    // The plain lock of the name is another lock.
    assert!(operator
        .admin()
        .inspect("inspect:fair")
        .await
        .unwrap()
        .holder
        .is_none());
    held.release().await.unwrap();
    let first = waiters.remove(0).await.unwrap();
    let fair = operator.admin().inspect_fair("inspect:fair").await.unwrap();
    let holder = fair.holder.expect("handed to the head");
    assert_eq!(holder.owner, first.owner());
    assert_eq!(holder.fencing_token, first.fencing_token());
    let queued: Vec<&str> = fair.queue.iter().map(|q| q.client_id()).collect();
    assert_eq!(queued, [c.id()]);
    first.release().await.unwrap();
    waiters.remove(0).await.unwrap().release().await.unwrap();
    let fair = operator.admin().inspect_fair("inspect:fair").await.unwrap();
    assert!(fair.holder.is_none() && fair.queue.is_empty());

    // The read-write lock: readers (the soonest to expire first), then a
    // waiting writer, then the writer.
    let long_reader = a
        .read_write_lock("inspect:rw")
        .read()
        .acquire()
        .await
        .unwrap();
    let short_reader = b
        .read_write_lock("inspect:rw")
        .read()
        .lease(short)
        .acquire()
        .await
        .unwrap();
    let rw = operator
        .admin()
        .inspect_read_write("inspect:rw")
        .await
        .unwrap();
    let readers: Vec<&str> = rw.readers.iter().map(|r| r.owner.as_str()).collect();
    assert_eq!(readers, [short_reader.owner(), long_reader.owner()]);
    assert!(rw.readers[0].ttl <= short, "{:?}", rw.readers[0]);
    assert!(rw.readers[1].ttl > short && rw.readers[1].ttl <= a.lease());
    assert!(rw.writer.is_none() && rw.waiting_writers.is_empty());
    // The short read ran out: not shown, although nothing purged it yet.
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    let rw = operator
        .admin()
        .inspect_read_write("inspect:rw")
        .await
        .unwrap();
    let readers: Vec<&str> = rw.readers.iter().map(|r| r.owner.as_str()).collect();
    assert_eq!(readers, [long_reader.owner()]);
    let writer = tokio::spawn({
        let c = c.clone();
        async move {
            c.read_write_lock("inspect:rw")
                .write()
                .wait(LONG)
                .acquire()
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rw = operator
        .admin()
        .inspect_read_write("inspect:rw")
        .await
        .unwrap();
    let waiting: Vec<&str> = rw.waiting_writers.iter().map(|w| w.client_id()).collect();
    assert_eq!(waiting, [c.id()]);
    let place = rw.waiting_writers[0].place_ttl;
    assert!(place > Duration::ZERO && place <= distlock::QUEUE_PRESENCE);
    assert!(rw.writer.is_none());
    long_reader.release().await.unwrap();
    let _ = short_reader.release().await; // expired: not held any more
    let writing = writer.await.unwrap();
    let rw = operator
        .admin()
        .inspect_read_write("inspect:rw")
        .await
        .unwrap();
    let holder = rw.writer.expect("written");
    assert_eq!(holder.owner, writing.owner());
    assert_eq!(holder.fencing_token, writing.fencing_token());
    assert!(rw.readers.is_empty() && rw.waiting_writers.is_empty());
    assert!(rw.last_fencing_token >= Some(writing.fencing_token()));
    writing.release().await.unwrap();

    // The semaphore: each holder's permits and the sum.
    let two = a
        .semaphore("inspect:sem", 5)
        .permits(2)
        .acquire()
        .await
        .unwrap();
    let one = b
        .semaphore("inspect:sem", 5)
        .permit()
        .lease(short)
        .acquire()
        .await
        .unwrap();
    let sem = operator
        .admin()
        .inspect_semaphore("inspect:sem")
        .await
        .unwrap();
    let holders: Vec<(&str, u32)> = sem
        .holders
        .iter()
        .map(|h| (h.owner.as_str(), h.permits))
        .collect();
    assert_eq!(holders, [(one.owner(), 1), (two.owner(), 2)]);
    assert_eq!(sem.in_use, 3);
    assert!(sem.holders[1].ttl > short && sem.holders[1].ttl <= a.lease());
    assert!(sem.last_fencing_token >= Some(one.fencing_token()));
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    let sem = operator
        .admin()
        .inspect_semaphore("inspect:sem")
        .await
        .unwrap();
    assert_eq!(sem.in_use, 2, "{sem:?}");
    assert_eq!(sem.holders.len(), 1);
    two.release().await.unwrap();
    let _ = one.release().await;
    assert_eq!(
        operator
            .admin()
            .inspect_semaphore("inspect:sem")
            .await
            .unwrap()
            .in_use,
        0
    );

    // Names are checked as for locking.
    assert!(matches!(
        operator.admin().inspect_semaphore("").await,
        Err(LockError::InvalidKey { .. })
    ));
}

/// `force_release_fair` deletes the holder and hands the lock to the head
/// of the queue; `force_release_read_write` deletes every reader and the
/// writer; `force_release_semaphore` every holder's permits. The holders
/// find out at release; each reports whether anything was held.
pub async fn family_force_release_of_each_primitive<F: Fixture>(fixture: &F) {
    let [a, b, operator] = super::clients::<F, 3>(fixture).await;
    assert!(!operator
        .admin()
        .force_release_fair("force:fair")
        .await
        .unwrap());
    assert!(!operator
        .admin()
        .force_release_read_write("force:rw")
        .await
        .unwrap());
    assert!(!operator
        .admin()
        .force_release_semaphore("force:sem")
        .await
        .unwrap());

    let stuck = a.fair_lock("force:fair").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.fair_lock("force:fair")
                .wait(LONG)
                .acquire()
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    assert!(operator
        .admin()
        .force_release_fair("force:fair")
        .await
        .unwrap());
    let next = waiter.await.unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "handed over at once"
    );
    let holder = operator
        .admin()
        .inspect_fair("force:fair")
        .await
        .unwrap()
        .holder;
    assert_eq!(holder.map(|h| h.owner), Some(next.owner().to_owned()));
    assert!(stuck.release().await.is_err(), "the old holder lost it");
    next.release().await.unwrap();

    let rw = a.read_write_lock("force:rw");
    let (r1, r2) = (
        rw.read().acquire().await.unwrap(),
        b.read_write_lock("force:rw")
            .read()
            .acquire()
            .await
            .unwrap(),
    );
    assert!(operator
        .admin()
        .force_release_read_write("force:rw")
        .await
        .unwrap());
    let info = operator
        .admin()
        .inspect_read_write("force:rw")
        .await
        .unwrap();
    assert!(info.readers.is_empty() && info.writer.is_none());
    let writer = b
        .read_write_lock("force:rw")
        .write()
        .acquire()
        .await
        .unwrap();
    assert!(r1.release().await.is_err() && r2.release().await.is_err());
    assert!(operator
        .admin()
        .force_release_read_write("force:rw")
        .await
        .unwrap());
    assert!(writer.release().await.is_err());

    let permits = a
        .semaphore("force:sem", 2)
        .permits(2)
        .acquire()
        .await
        .unwrap();
    assert!(operator
        .admin()
        .force_release_semaphore("force:sem")
        .await
        .unwrap());
    assert_eq!(
        operator
            .admin()
            .inspect_semaphore("force:sem")
            .await
            .unwrap()
            .in_use,
        0
    );
    let again = b
        .semaphore("force:sem", 2)
        .permits(2)
        .acquire()
        .await
        .unwrap();
    assert!(permits.release().await.is_err());
    again.release().await.unwrap();
    assert!(!operator
        .admin()
        .force_release_semaphore("force:sem")
        .await
        .unwrap());
}

/// A call chain that holds any kind of a family primitive through one client
/// and asks for any kind of the same primitive through another, with a
/// wait, gets `HeldByOtherClient` at once (as the plain and fair locks do),
/// instead of waiting on itself: a read then the write, the write then a
/// read, permits then more permits (of a semaphore its own permits fill).
/// Other primitives are taken as usual, and a single try is `Busy`.
///
/// Old code: the write after a read, a read after the write and the
/// permits waited out their whole wait (`TimedOut` after 3 s).
pub async fn family_held_through_another_client_fails_at_once<F: Fixture>(fixture: &F) {
    let [a, b] = [fixture.client().await, fixture.client().await];
    let wait = Duration::from_secs(3);
    let expect_refused = |what: &str, outcome: Result<distlock::LockGuard, LockError>| match outcome
    {
        Err(LockError::HeldByOtherClient {
            holder_client,
            client,
            ..
        }) => {
            assert_eq!(holder_client, a.id(), "{what}");
            assert_eq!(client, b.id(), "{what}");
        }
        other => panic!("{what}: expected HeldByOtherClient, got {other:?}"),
    };
    let started = Instant::now();
    let read = a
        .read_write_lock("cross:rw")
        .read()
        .acquire()
        .await
        .unwrap();
    let (write, other) = read
        .scope(async {
            let write = b
                .read_write_lock("cross:rw")
                .write()
                .wait(wait)
                .acquire()
                .await;
            let other = b
                .read_write_lock("cross:other")
                .write()
                .wait(wait)
                .acquire()
                .await;
            (write, other)
        })
        .await;
    expect_refused("the write after a read", write);
    other.unwrap().release().await.unwrap();
    read.release().await.unwrap();
    let write = a
        .read_write_lock("cross:rw")
        .write()
        .acquire()
        .await
        .unwrap();
    let (read, once) = write
        .scope(async {
            let read = b
                .read_write_lock("cross:rw")
                .read()
                .wait(wait)
                .acquire()
                .await;
            let once = b.read_write_lock("cross:rw").read().acquire().await;
            (read, once)
        })
        .await;
    expect_refused("a read after the write", read);
    assert!(matches!(once, Err(LockError::Busy { .. })), "{once:?}");
    write.release().await.unwrap();
    let permits = a
        .semaphore("cross:sem", 2)
        .permits(2)
        .acquire()
        .await
        .unwrap();
    let more = permits
        .scope(b.semaphore("cross:sem", 2).permit().wait(wait).acquire())
        .await;
    expect_refused("a permit after the chain's permits", more);
    permits.release().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once, not after the waits: {:?}",
        started.elapsed()
    );
    // Nothing left behind: b takes each primitive now.
    b.read_write_lock("cross:rw")
        .write()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    b.semaphore("cross:sem", 2)
        .permits(2)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Generates one `#[tokio::test]` per family suite test, on the fixture `$make`.
#[macro_export]
macro_rules! family_suite {
    ($make:expr) => {
        behaviour_suite!($make;
            family_fair_lock_grants_in_arrival_order,
            family_fair_single_try_does_not_jump_the_queue,
            family_fair_cancelled_and_timed_out_waiters_leave_the_queue,
            family_readers_share_and_a_writer_excludes,
            family_a_waiting_writer_is_not_starved_by_readers,
            family_downgrade_is_allowed_and_upgrade_refused,
            family_semaphore_never_exceeds_its_permits,
            family_semaphore_counts_permits_and_wakes_waiters,
            family_crashed_permit_holder_leaks_nothing,
            family_watchdog_renews_every_primitive,
            family_reentry_and_cancellation,
            family_bad_permits_are_typed_errors,
            family_renewals_do_not_outlive_release,
            scheduled_hold_at_least_outlives_an_early_release,
            scheduled_hold_at_least_release_wakes_the_waiters,
            family_inspection_shows_holders_waiters_and_permits,
            family_force_release_of_each_primitive,
            family_held_through_another_client_fails_at_once,
        );
    };
}
