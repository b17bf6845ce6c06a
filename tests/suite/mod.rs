//! The behavioural suite: every semantic test of the lock, written once
//! against [`Fixture`] and run per backend by `behaviour_suite!` (see
//! `tests/memory.rs` and `tests/standalone.rs`).

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockClientBuilder, LockError, LockGuard};
use tokio::time::Instant;

mod edges;
#[allow(unused_imports)] // binaries that use only some of the suite (macro_redis.rs)
pub use edges::*;
mod shutdown;
#[allow(unused_imports)]
pub use shutdown::*;
mod family;
#[allow(unused_imports)]
pub use family::*;
mod hot;
#[allow(unused_imports)]
pub use hot::*;
mod siblings;
#[allow(unused_imports)]
pub use siblings::*;
mod leader;
#[allow(unused_imports)]
pub use leader::*;

/// A backend under test: hands out independent clients on one store.
pub trait Fixture: Send + Sync {
    /// Whether the store can count the clients waiting for a lock
    /// (`admin().waiters`). PostgreSQL cannot (a session sees only its own
    /// `LISTEN`s): it answers 0, as documented.
    const COUNTS_WAITERS: bool = true;

    /// A new client (its own id) on the shared store, with `builder`'s settings.
    fn client_with(
        &self,
        builder: LockClientBuilder,
    ) -> impl std::future::Future<Output = LockClient> + Send;

    /// Deletes lock `name` behind its holder's back (DEL in Redis).
    fn delete_lock(&self, name: &str) -> impl std::future::Future<Output = ()> + Send;

    /// A new client with the default settings.
    fn client(&self) -> impl std::future::Future<Output = LockClient> + Send {
        self.client_with(LockClient::builder())
    }
}

/// A client whose watchdog lease is `lease` (renewed every lease/3).
pub async fn client_with_lease<F: Fixture>(fixture: &F, lease: Duration) -> LockClient {
    fixture
        .client_with(LockClient::builder().lease(lease))
        .await
}

/// `N` new clients (each its own owner) on the fixture's store.
pub async fn clients<F: Fixture, const N: usize>(fixture: &F) -> [LockClient; N] {
    let mut clients = Vec::with_capacity(N);
    for _ in 0..N {
        clients.push(fixture.client().await);
    }
    clients.try_into().expect("N clients")
}

/// Spawns a waiter on `name` (wait 20 s) that reports when it got the lock.
pub fn spawn_waiter(
    client: LockClient,
    name: &str,
) -> tokio::task::JoinHandle<(Instant, LockGuard)> {
    let name = name.to_owned();
    tokio::spawn(async move {
        let guard = client
            .lock(name)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    })
}

/// Generates one `#[tokio::test]` per suite test, on the fixture `$make`.
#[macro_export]
macro_rules! behaviour_suite {
    ($make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let fixture = $make;
                suite::$name(&fixture).await;
            }
        )*
    };
    ($make:expr) => {
        behaviour_suite!($make;
            exclusion_holds_for_concurrent_tasks,
            busy_lock_is_busy_for_another_owner,
            release_after_expiry_does_not_delete_new_holder,
            another_owner_cannot_renew,
            reentrant_in_scope_needs_as_many_releases,
            spawned_task_is_another_owner,
            watchdog_keeps_lock_past_lease,
            renewals_are_batched_per_period,
            fixed_lease_is_not_renewed,
            deleted_lock_is_lost_within_a_period,
            waiter_is_woken_by_release,
            waiters_of_the_holders_client_are_woken_in_turn,
            crashed_holder_is_replaced_after_its_lease,
            waiter_times_out_at_its_wait,
            wait_forever_gets_the_lock,
            cancelled_acquire_never_leaves_lock_held,
            cancelled_waiter_leaves_no_trace,
            dropped_guard_is_released_in_background,
            panicking_holder_releases,
            fencing_tokens_increase_and_survive_expiry,
            bad_input_gets_typed_errors,
            force_release_wakes_a_waiter,
            admin_counts_the_clients_waiting_for_a_lock,
            multi_lock_is_sorted_and_all_or_nothing,
            multi_lock_in_swapped_order_does_not_deadlock,
            multi_lock_never_hands_out_a_lock_lost_while_awaiting_the_others,
            current_reports_the_locks_of_the_scope,
            scope_or_lost_cancels_work_when_the_lease_is_lost,
            reentry_through_another_client_fails_at_once,
            edges_fixed_lease_out_of_range_is_invalid_config,
            edges_multi_lock_lease_out_of_range_is_invalid_config,
            edges_wait_duration_max_waits_until_release,
            edges_odd_lock_names_work_end_to_end,
            edges_bad_names_get_typed_errors_everywhere,
            edges_siblings_racing_for_one_lock_in_one_scope_exclude_each_other,
            shutdown_releases_locks_for_other_clients,
            shutdown_wakes_waiters_at_once,
            shutdown_grace_lets_bodies_finish,
            shutdown_refuses_new_locks_and_stops_renewing,
        );
    };
}

fn assert_within(elapsed: Duration, max: Duration, what: &str) {
    assert!(
        elapsed <= max,
        "{what} took {elapsed:?}, expected at most {max:?}"
    );
}

/// Acquires `name` for `client`, waiting as long as 20 s, and asserts that
/// it came within `max` of `since` (a release, drop or panic).
async fn acquire_promptly(
    client: &LockClient,
    name: &str,
    since: Instant,
    max: Duration,
    what: &str,
) -> LockGuard {
    let guard = client
        .lock(name)
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    assert_within(since.elapsed(), max, what);
    guard
}

/// 8 tasks x 25 rounds of an unsafe read-modify-write under the lock, plus an
/// overlap detector: the counter equals the number of acquisitions.
pub async fn exclusion_holds_for_concurrent_tasks<F: Fixture>(fixture: &F) {
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = fixture.client().await;
        let (counter, inside) = (counter.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let guard = client
                    .lock("suite:counter")
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders overlap");
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_micros(200)).await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), 8 * 25);
}

pub async fn busy_lock_is_busy_for_another_owner<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let guard = a.lock("suite:busy").acquire().await.unwrap();
    match b.lock("suite:busy").acquire().await {
        Err(LockError::Busy { key }) => assert_eq!(key, "suite:busy"),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert!(b.lock("suite:busy").try_acquire().await.unwrap().is_none());
    // The same client outside the holder's scope is another owner too.
    assert!(a.lock("suite:busy").try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
    let again = b.lock("suite:busy").acquire().await.unwrap();
    again.release().await.unwrap();
}

pub async fn release_after_expiry_does_not_delete_new_holder<F: Fixture>(fixture: &F) {
    let [a, b, c] = clients(fixture).await;
    let old = a
        .lock("suite:expiry")
        .lease(Duration::from_millis(200))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let new = b
        .lock("suite:expiry")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let err = old.release().await.unwrap_err();
    assert!(
        matches!(err, LockError::LeaseLost { .. } | LockError::NotHeld { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("suite:expiry"), "{err}");
    assert!(new.is_held());
    assert!(
        c.lock("suite:expiry")
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "the stale release deleted the new holder's lock"
    );
    new.release().await.unwrap();
}

pub async fn another_owner_cannot_renew<F: Fixture>(fixture: &F) {
    let a = client_with_lease(fixture, Duration::from_millis(300)).await;
    let (b, c) = (fixture.client().await, fixture.client().await);
    let stale = a.lock("suite:renew").acquire().await.unwrap();
    fixture.delete_lock("suite:renew").await;
    let started = Instant::now();
    let fresh = b
        .lock("suite:renew")
        .lease(Duration::from_millis(1200))
        .acquire()
        .await
        .unwrap();
    // A's watchdog keeps trying (every 100 ms); none of it may extend B's lock.
    tokio::time::timeout(Duration::from_secs(5), stale.lost())
        .await
        .expect("the stale holder noticed the loss");
    assert!(!stale.is_held());
    std::mem::forget(fresh); // no release: the lease must run out on its own
    let next = c
        .lock("suite:renew")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1100),
        "the fresh lock ended after {elapsed:?}, before its 1.2 s lease"
    );
    assert_within(
        elapsed,
        Duration::from_secs(4),
        "the fresh lease running out",
    );
    next.release().await.unwrap();
    assert!(matches!(
        stale.release().await,
        Err(LockError::LeaseLost { .. })
    ));
}

pub async fn reentrant_in_scope_needs_as_many_releases<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let outer = a.lock("suite:reentrant").acquire().await.unwrap();
    let token = outer.fencing_token();
    outer
        .scope(async {
            let inner = a.lock("suite:reentrant").acquire().await.unwrap();
            assert_eq!(inner.hold_count(), 2);
            assert_eq!(
                inner.fencing_token(),
                token,
                "reentrant holds share a token"
            );
            let third = a.lock("suite:reentrant").acquire().await.unwrap();
            assert_eq!(third.hold_count(), 3);
            third.release().await.unwrap();
            inner.release().await.unwrap();
            // Still held by the outer guard.
            assert!(b
                .lock("suite:reentrant")
                .try_acquire()
                .await
                .unwrap()
                .is_none());
            // Another lock taken in the scope is owned by the same owner.
            let other = a.lock("suite:reentrant:other").acquire().await.unwrap();
            assert_eq!(other.owner(), outer.owner());
            other.release().await.unwrap();
        })
        .await;
    assert_eq!(outer.hold_count(), 1);
    assert!(b
        .lock("suite:reentrant")
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    outer.release().await.unwrap();
    let next = b.lock("suite:reentrant").acquire().await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

pub async fn spawned_task_is_another_owner<F: Fixture>(fixture: &F) {
    let a = fixture.client().await;
    let guard = a.lock("suite:spawn").acquire().await.unwrap();
    let result = guard
        .scope(async {
            let a2 = a.clone();
            let spawned = tokio::spawn(async move {
                a2.lock("suite:spawn")
                    .wait(Duration::from_millis(200))
                    .acquire()
                    .await
                    .map(|g| g.fencing_token())
            });
            spawned.await.unwrap()
        })
        .await;
    assert!(
        matches!(result, Err(LockError::TimedOut { .. })),
        "a spawned task must wait like any other owner: {result:?}"
    );
    // A sibling future outside the scope is another owner as well.
    let (in_scope, outside) = tokio::join!(
        guard.scope(a.lock("suite:spawn").try_acquire()),
        a.lock("suite:spawn").try_acquire()
    );
    assert!(in_scope.unwrap().is_some());
    assert!(outside.unwrap().is_none());
    guard.release().await.unwrap();
}

pub async fn watchdog_keeps_lock_past_lease<F: Fixture>(fixture: &F) {
    let lease = Duration::from_millis(400);
    let a = client_with_lease(fixture, lease).await;
    let b = fixture.client().await;
    let guard = a.lock("suite:watchdog").acquire().await.unwrap();
    for _ in 0..6 {
        tokio::time::sleep(lease / 2).await; // 3x the lease in all
        assert!(guard.is_held());
        assert!(b
            .lock("suite:watchdog")
            .try_acquire()
            .await
            .unwrap()
            .is_none());
    }
    assert!(a.stats().renewal_rounds >= 3, "{:?}", a.stats());
    guard.release().await.unwrap();
}

pub async fn renewals_are_batched_per_period<F: Fixture>(fixture: &F) {
    let lease = Duration::from_millis(600);
    let a = client_with_lease(fixture, lease).await;
    let mut guards = Vec::new();
    for i in 0..20 {
        guards.push(a.lock(format!("suite:batch:{i}")).acquire().await.unwrap());
    }
    assert_eq!(a.stats().watched_locks, 20);
    let before = a.stats().renewal_rounds;
    tokio::time::sleep(Duration::from_millis(1300)).await; // ~6 periods of 200 ms
    let rounds = a.stats().renewal_rounds - before;
    // One round per period for all 20 locks, not one per lock.
    assert!((3..=10).contains(&rounds), "{rounds} renewal rounds");
    assert!(guards.iter().all(|g| g.is_held()));
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert_eq!(a.stats().watched_locks, 0);
}

pub async fn fixed_lease_is_not_renewed<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let guard = a
        .lock("suite:fixed")
        .lease(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    assert_eq!(a.stats().watched_locks, 0);
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("a fixed lease runs out");
    assert!(!guard.is_held());
    let next = b
        .lock("suite:fixed")
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    assert!(matches!(
        guard.release().await,
        Err(LockError::LeaseLost { .. })
    ));
    assert!(
        next.is_held(),
        "the expired holder's release touched the next lock"
    );
    next.release().await.unwrap();
}

pub async fn deleted_lock_is_lost_within_a_period<F: Fixture>(fixture: &F) {
    let lease = Duration::from_millis(900); // renewal period 300 ms
    let a = client_with_lease(fixture, lease).await;
    let guard = a.lock("suite:deleted").acquire().await.unwrap();
    fixture.delete_lock("suite:deleted").await;
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost() resolves");
    assert_within(
        started.elapsed(),
        lease / 3 + Duration::from_millis(500),
        "loss detection",
    );
    assert!(!guard.is_held());
    match guard.release().await {
        Err(LockError::LeaseLost { key, .. }) => assert_eq!(key, "suite:deleted"),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
}

pub async fn waiter_is_woken_by_release<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let guard = a
        .lock("suite:wake")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let holder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = Instant::now();
        guard.release().await.unwrap();
        released
    });
    let waiter = b
        .lock("suite:wake")
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    let acquired = Instant::now();
    let released = holder.await.unwrap();
    // Woken by the release, not by the 30 s lease (or any polling interval).
    assert_within(acquired - released, Duration::from_secs(1), "hand-off");
    waiter.release().await.unwrap();
}

/// Waiters in other tasks of the holder's own client skip the server while
/// it holds the lock and wait for its release: each release must still wake
/// one of them within a round trip, not after the 30 s lease.
pub async fn waiters_of_the_holders_client_are_woken_in_turn<F: Fixture>(fixture: &F) {
    let client = fixture.client().await;
    let guard = client
        .lock("suite:local-wake")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..4 {
        let client = client.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let guard = client
                .lock("suite:local-wake")
                .lease(Duration::from_secs(30))
                .wait(Duration::from_secs(20))
                .acquire()
                .await
                .unwrap();
            let acquired = Instant::now();
            tokio::time::sleep(Duration::from_millis(20)).await;
            let released = Instant::now();
            let token = guard.fencing_token();
            guard.release().await.unwrap();
            tx.send((acquired, released, token)).unwrap();
        });
    }
    drop(tx);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut previous = (Instant::now(), guard.fencing_token());
    guard.release().await.unwrap();
    let mut holds = Vec::new();
    while let Some(hold) = rx.recv().await {
        holds.push(hold);
    }
    assert_eq!(holds.len(), 4, "every waiter got the lock");
    holds.sort_by_key(|&(acquired, _, _)| acquired);
    for (acquired, released, token) in holds {
        assert_within(
            acquired - previous.0,
            Duration::from_secs(1),
            "local hand-off",
        );
        assert!(token > previous.1, "fencing tokens grow");
        previous = (released, token);
    }
}

pub async fn crashed_holder_is_replaced_after_its_lease<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let lease = Duration::from_millis(600);
    let guard = a.lock("suite:crash").lease(lease).acquire().await.unwrap();
    let taken = Instant::now();
    std::mem::forget(guard); // the holder "crashes": no release ever comes
    let next = b
        .lock("suite:crash")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let after = taken.elapsed();
    assert!(after >= lease - Duration::from_millis(50), "{after:?}");
    assert_within(
        after,
        lease + Duration::from_millis(1500),
        "replacing a crashed holder",
    );
    next.release().await.unwrap();
}

pub async fn waiter_times_out_at_its_wait<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let guard = a.lock("suite:timeout").acquire().await.unwrap();
    let started = Instant::now();
    let wait = Duration::from_millis(400);
    match b.lock("suite:timeout").wait(wait).acquire().await {
        Err(LockError::TimedOut { key, waited }) => {
            assert_eq!(key, "suite:timeout");
            assert!(waited >= wait, "{waited:?}");
        }
        other => panic!("expected TimedOut, got {other:?}"),
    }
    let elapsed = started.elapsed();
    assert!(elapsed >= wait);
    assert_within(elapsed, wait + Duration::from_millis(800), "the wait");
    assert!(b
        .lock("suite:timeout")
        .wait(wait)
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    guard.release().await.unwrap();
}

pub async fn wait_forever_gets_the_lock<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let guard = a.lock("suite:forever").acquire().await.unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        guard.release().await.unwrap();
    });
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        b.lock("suite:forever").wait_forever().acquire(),
    )
    .await
    .expect("woken by the release")
    .unwrap();
    got.release().await.unwrap();
}

/// Drops acquire futures at many points in flight; none may leave the lock held.
pub async fn cancelled_acquire_never_leaves_lock_held<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    for step in 0..60u64 {
        let budget = Duration::from_micros(step * 25);
        let _ = tokio::time::timeout(budget, a.lock("suite:cancel").acquire()).await;
        // Whatever happened, the lock is free again promptly.
        let guard = b
            .lock("suite:cancel")
            .wait(Duration::from_secs(3))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("cancelled at {budget:?} left the lock held: {e}"));
        guard.release().await.unwrap();
    }
}

pub async fn cancelled_waiter_leaves_no_trace<F: Fixture>(fixture: &F) {
    let [a, b, c] = clients(fixture).await;
    let guard = a.lock("suite:cancel-wait").acquire().await.unwrap();
    let waiting = b
        .lock("suite:cancel-wait")
        .wait(Duration::from_secs(30))
        .acquire();
    assert!(tokio::time::timeout(Duration::from_millis(150), waiting)
        .await
        .is_err());
    let released = Instant::now();
    guard.release().await.unwrap();
    let next = acquire_promptly(
        &c,
        "suite:cancel-wait",
        released,
        Duration::from_secs(1),
        "the next acquisition",
    )
    .await;
    next.release().await.unwrap();
}

pub async fn dropped_guard_is_released_in_background<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let guard = a.lock("suite:drop").acquire().await.unwrap(); // 30 s watchdog lease
    let dropped = Instant::now();
    drop(guard);
    let next = acquire_promptly(
        &b,
        "suite:drop",
        dropped,
        Duration::from_secs(2),
        "background release",
    )
    .await;
    next.release().await.unwrap();
    assert_eq!(a.stats().watched_locks, 0);
}

pub async fn panicking_holder_releases<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let _guard = a.lock("suite:panic").acquire().await.unwrap();
        held_tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        panic!("the holder fails mid-work");
    });
    held_rx.await.unwrap();
    assert!(task.await.unwrap_err().is_panic());
    let panicked = Instant::now();
    let next = acquire_promptly(
        &b,
        "suite:panic",
        panicked,
        Duration::from_secs(2),
        "release after a panic",
    )
    .await;
    next.release().await.unwrap();
}

pub async fn fencing_tokens_increase_and_survive_expiry<F: Fixture>(fixture: &F) {
    let (a, b) = (fixture.client().await, fixture.client().await);
    let mut last = 0;
    for round in 0..6 {
        let client = if round % 2 == 0 { &a } else { &b };
        let guard = client.lock("suite:fence").acquire().await.unwrap();
        assert!(guard.fencing_token() > last, "token did not grow");
        last = guard.fencing_token();
        guard.release().await.unwrap();
    }
    // A lease that runs out (the lock key expires) does not reset the counter.
    let expiring = a
        .lock("suite:fence")
        .lease(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap();
    assert!(expiring.fencing_token() > last);
    last = expiring.fencing_token();
    std::mem::forget(expiring);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = b.lock("suite:fence").acquire().await.unwrap();
    assert!(after.fencing_token() > last);
    let reentered = after.scope(b.lock("suite:fence").acquire()).await.unwrap();
    assert_eq!(reentered.fencing_token(), after.fencing_token());
    reentered.release().await.unwrap();
    after.release().await.unwrap();
}

pub async fn bad_input_gets_typed_errors<F: Fixture>(fixture: &F) {
    let a = fixture.client().await;
    assert!(matches!(
        a.lock("").acquire().await,
        Err(LockError::InvalidKey { .. })
    ));
    let long = format!("order:{}", "9".repeat(1100));
    match a.lock(long).acquire().await {
        Err(err @ LockError::InvalidKey { .. }) => {
            assert!(err.to_string().contains("order:999"), "{err}")
        }
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    match a
        .lock("suite:zero-lease")
        .lease(Duration::ZERO)
        .acquire()
        .await
    {
        Err(LockError::InvalidConfig { key, .. }) => assert_eq!(key, "suite:zero-lease"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let zero_watchdog = LockClient::builder()
        .lease(Duration::ZERO)
        .memory(Default::default());
    assert!(matches!(
        zero_watchdog,
        Err(LockError::InvalidConfig { .. })
    ));
    // Nothing was left locked by the failures.
    let guard = a.lock("suite:zero-lease").acquire().await.unwrap();
    guard.release().await.unwrap();
}

pub async fn force_release_wakes_a_waiter<F: Fixture>(fixture: &F) {
    let [a, b, operator] = clients(fixture).await;
    let abandoned = a.lock("suite:force").acquire().await.unwrap();
    let waiter = spawn_waiter(b, "suite:force");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let forced = Instant::now();
    assert!(operator.admin().force_release("suite:force").await.unwrap());
    let (acquired, guard) = waiter.await.unwrap();
    assert_within(
        acquired - forced,
        Duration::from_secs(1),
        "wake-up after force release",
    );
    assert!(!operator
        .admin()
        .force_release("suite:nothing")
        .await
        .unwrap());
    guard.release().await.unwrap();
    drop(abandoned);
}

pub async fn multi_lock_is_sorted_and_all_or_nothing<F: Fixture>(fixture: &F) {
    let [a, b] = clients::<F, 2>(fixture).await;
    let guard = a
        .lock_all([
            "suite:multi:c",
            "suite:multi:a",
            "suite:multi:b",
            "suite:multi:a",
        ])
        .acquire()
        .await
        .unwrap();
    assert_eq!(
        guard.keys().collect::<Vec<_>>(),
        ["suite:multi:a", "suite:multi:b", "suite:multi:c"],
        "sorted, duplicates once"
    );
    let owners: Vec<_> = guard
        .guards()
        .iter()
        .map(|g| g.owner().to_owned())
        .collect();
    assert!(
        owners.iter().all(|o| *o == owners[0]),
        "one owner: {owners:?}"
    );
    assert!(guard.is_held());
    guard.release().await.unwrap();

    // b holds the middle one: a's multi-lock fails on it and keeps nothing.
    let held = b.lock("suite:multi:b").acquire().await.unwrap();
    match a
        .lock_all(["suite:multi:a", "suite:multi:b", "suite:multi:c"])
        .acquire()
        .await
    {
        Err(LockError::Busy { key }) => assert_eq!(key, "suite:multi:b"),
        other => panic!("expected Busy on suite:multi:b, got {other:?}"),
    }
    for name in ["suite:multi:a", "suite:multi:c"] {
        let free = b.lock(name).try_acquire().await.unwrap();
        assert!(
            free.is_some(),
            "{name} stayed locked after a failed multi-lock"
        );
        free.unwrap().release().await.unwrap();
    }
    held.release().await.unwrap();
    assert!(matches!(
        a.lock_all(Vec::<String>::new()).acquire().await,
        Err(LockError::InvalidKey { .. })
    ));
}

/// A multi-lock holds its first lock while it waits for the second; the first
/// is deleted behind its back meanwhile (as a partition or a stall past the
/// lease loses it). When the second comes free, the multi-lock must not hand
/// out the first as held: it takes the set again.
///
/// Old code: it returned `Ok` with the first lock already lost (`is_held()`
/// false, `lost()` resolved): the caller believed it held a lock another
/// owner could take.
pub async fn multi_lock_never_hands_out_a_lock_lost_while_awaiting_the_others<F: Fixture>(
    fixture: &F,
) {
    let a = client_with_lease(fixture, Duration::from_millis(600)).await;
    let b = fixture.client().await;
    let (first, second) = ("suite:multi-lost:a", "suite:multi-lost:b");
    let held = b.lock(second).acquire().await.unwrap();
    let taking = tokio::spawn({
        let a = a.clone();
        async move {
            a.lock_all([first, second])
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    let until = Instant::now() + Duration::from_secs(10);
    while b.admin().inspect(first).await.unwrap().holder.is_none() {
        assert!(Instant::now() < until, "the multi-lock never took {first}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fixture.delete_lock(first).await;
    // The watchdog (every 200 ms) finds the first lock gone.
    tokio::time::sleep(Duration::from_millis(700)).await;
    held.release().await.unwrap();
    let guard = taking.await.unwrap().unwrap();
    assert!(
        guard.is_held(),
        "the multi-lock handed out {first} although its lease was lost"
    );
    assert!(
        b.lock(first).try_acquire().await.unwrap().is_none(),
        "{first} is free in the store while the multi-lock says it holds it"
    );
    guard.release().await.unwrap();
}

pub async fn multi_lock_in_swapped_order_does_not_deadlock<F: Fixture>(fixture: &F) {
    let [a, b] = clients::<F, 2>(fixture).await;
    let inside = Arc::new(AtomicU64::new(0));
    let run = |client: LockClient, names: [&'static str; 2]| {
        let inside = inside.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                let guard = client
                    .lock_all(names)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        })
    };
    let one = run(a, ["suite:swap:1", "suite:swap:2"]);
    let two = run(b, ["suite:swap:2", "suite:swap:1"]);
    tokio::time::timeout(Duration::from_secs(30), async {
        one.await.unwrap();
        two.await.unwrap();
    })
    .await
    .expect("deadlock: multi-locks in swapped order stalled");
}

pub async fn current_reports_the_locks_of_the_scope<F: Fixture>(fixture: &F) {
    let a = fixture.client().await;
    assert!(distlock::current().is_none());
    let outer = a.lock("suite:current:outer").acquire().await.unwrap();
    let (token, keys) = outer
        .scope(async {
            let inner = a.lock("suite:current:inner").acquire().await.unwrap();
            let seen = inner
                .scope(async {
                    let keys: Vec<String> = distlock::current_all()
                        .iter()
                        .map(|l| l.key().to_owned())
                        .collect();
                    (distlock::current().unwrap().fencing_token(), keys)
                })
                .await;
            assert_eq!(seen.0, inner.fencing_token());
            inner.release().await.unwrap();
            seen
        })
        .await;
    assert!(token >= 1);
    assert_eq!(keys, ["suite:current:inner", "suite:current:outer"]);
    // A spawned task does not inherit the chain.
    let spawned = outer
        .scope(async { tokio::spawn(async { distlock::current().is_none() }).await })
        .await
        .unwrap();
    assert!(spawned, "a spawned task saw its parent's lock");
    outer.release().await.unwrap();
}

/// A call chain that holds a lock through one client and acquires it again
/// through another client on the same store (a layer and an attribute given
/// different clients) gets `HeldByOtherClient` at once, naming both clients,
/// instead of waiting on itself for its whole wait. Other locks, and the same
/// lock once released, are acquired as usual. Old code: `TimedOut` after 5 s.
pub async fn reentry_through_another_client_fails_at_once<F: Fixture>(fixture: &F) {
    let [a, b] = clients::<F, 2>(fixture).await;
    let guard = a.lock("suite:cross").acquire().await.unwrap();
    let started = Instant::now();
    let (same, other) = guard
        .scope(async {
            let same = b
                .lock("suite:cross")
                .wait(Duration::from_secs(5))
                .acquire()
                .await;
            let other = b.lock("suite:cross-other").acquire().await;
            (same, other)
        })
        .await;
    assert_within(started.elapsed(), Duration::from_secs(2), "the refusal");
    match same {
        Err(LockError::HeldByOtherClient {
            key,
            holder_client,
            holder,
            client,
        }) => {
            assert_eq!(key, "suite:cross");
            assert_eq!(holder_client, a.id());
            assert_eq!(holder, guard.owner());
            assert_eq!(client, b.id());
        }
        other => panic!("expected HeldByOtherClient, got {other:?}"),
    }
    other.unwrap().release().await.unwrap();
    // Nothing was taken or left behind by the refused attempt.
    assert_eq!(
        b.admin()
            .inspect("suite:cross")
            .await
            .unwrap()
            .holder
            .unwrap()
            .owner,
        guard.owner()
    );
    guard.release().await.unwrap();
    b.lock("suite:cross")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

pub async fn scope_or_lost_cancels_work_when_the_lease_is_lost<F: Fixture>(fixture: &F) {
    let a = client_with_lease(fixture, Duration::from_millis(900)).await;
    let guard = a.lock("suite:abort").acquire().await.unwrap();
    let finished = Arc::new(AtomicBool::new(false));
    let work = {
        let finished = finished.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            finished.store(true, Ordering::SeqCst);
        }
    };
    let deleter = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        fixture.delete_lock("suite:abort").await;
        std::future::pending::<()>().await
    };
    let result = tokio::select! {
        result = tokio::time::timeout(Duration::from_secs(5), guard.scope_or_lost(work)) => result,
        () = deleter => unreachable!(),
    };
    match result.expect("work not cancelled within 5 s of the loss") {
        Err(LockError::LeaseLost { key, .. }) => assert_eq!(key, "suite:abort"),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(!finished.load(Ordering::SeqCst));
    // Work that finishes first returns its output.
    let b = fixture.client().await;
    let guard = b.lock("suite:abort").acquire().await.unwrap();
    assert_eq!(guard.scope_or_lost(async { 7 }).await.unwrap(), 7);
    guard.release().await.unwrap();
}

/// How a worker process reaches the lock backend under test: set in its
/// environment by [`processes_exclude_each_other`], read by [`counter_worker`].
pub const WORKER_BACKEND: &str = "LOCK_WORKER_BACKEND";
const WORKER_URLS: &str = "LOCK_WORKER_URLS";
const WORKER_MASTER: &str = "LOCK_WORKER_MASTER";
const WORKER_COUNTER: &str = "LOCK_WORKER_COUNTER_URL";
const WORKER_TASKS: usize = 8;
const WORKER_ROUNDS: usize = 4;

/// A lock backend named in a worker's environment.
#[derive(Debug, Clone)]
pub enum Topology {
    Standalone(String),
    Cluster(Vec<String>),
    Sentinel(Vec<String>, String),
    Redlock(Vec<String>),
}

impl Topology {
    /// A client of this topology with `builder`'s settings.
    pub async fn connect(&self, builder: LockClientBuilder) -> LockClient {
        match self {
            Topology::Standalone(url) => builder.connect(url).await,
            Topology::Cluster(urls) => builder.connect_cluster(urls).await,
            Topology::Sentinel(urls, master) => builder.connect_sentinel(urls, master).await,
            Topology::Redlock(urls) => builder.connect_redlock(urls).await,
        }
        .unwrap_or_else(|err| panic!("connecting to {self:?}: {err}"))
    }

    /// The environment that names this topology to a worker process.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let standalone;
        let (kind, urls, master) = match self {
            Topology::Standalone(url) => {
                standalone = vec![url.clone()];
                ("standalone", &standalone, None)
            }
            Topology::Cluster(urls) => ("cluster", urls, None),
            Topology::Sentinel(urls, master) => ("sentinel", urls, Some(master.clone())),
            Topology::Redlock(urls) => ("redlock", urls, None),
        };
        let mut env = vec![
            (WORKER_BACKEND, kind.to_owned()),
            (WORKER_URLS, urls.join(" ")),
        ];
        env.extend(master.map(|m| (WORKER_MASTER, m)));
        env
    }

    /// The topology named in this (worker) process's environment.
    pub fn from_env() -> Option<Self> {
        let kind = std::env::var(WORKER_BACKEND).ok()?;
        let urls: Vec<String> = std::env::var(WORKER_URLS)
            .unwrap()
            .split(' ')
            .map(str::to_owned)
            .collect();
        Some(match kind.as_str() {
            "standalone" => Topology::Standalone(urls[0].clone()),
            "cluster" => Topology::Cluster(urls),
            "sentinel" => Topology::Sentinel(urls, std::env::var(WORKER_MASTER).unwrap()),
            "redlock" => Topology::Redlock(urls),
            other => panic!("unknown worker backend {other}"),
        })
    }
}

/// Runs `worker_test` (an `#[ignore]`d test of the current test binary) in
/// `processes` child processes with `env`, and asserts that each succeeded.
pub fn run_worker_processes(worker_test: &str, processes: usize, env: &[(&str, String)]) {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..processes)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", worker_test, "--ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "a worker process failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Runs `worker_test` (an `#[ignore]`d test of the current test binary that
/// calls [`counter_worker`]) in `processes` processes x 8 tasks x 4 rounds
/// of a read-modify-write of a counter on `counter_url` under one lock of
/// `topology`: the counter must equal the acquisitions.
pub fn processes_exclude_each_other(
    topology: &Topology,
    counter_url: &str,
    worker_test: &str,
    processes: usize,
) {
    let mut env = topology.env();
    env.push((WORKER_COUNTER, counter_url.to_owned()));
    run_worker_processes(worker_test, processes, &env);
    let mut conn = redis::Client::open(counter_url)
        .unwrap()
        .get_connection()
        .unwrap();
    let counter: usize = redis::cmd("GET").arg("counter").query(&mut conn).unwrap();
    let acquisitions: usize = redis::cmd("GET")
        .arg("acquisitions")
        .query(&mut conn)
        .unwrap();
    assert_eq!(acquisitions, processes * WORKER_TASKS * WORKER_ROUNDS);
    assert_eq!(
        counter, acquisitions,
        "lost updates: two holders overlapped"
    );
}

/// The body of one worker process of [`processes_exclude_each_other`].
pub async fn counter_worker() {
    let Some(topology) = Topology::from_env() else {
        eprintln!("this test only runs as a child of a processes_exclude_each_other test");
        return;
    };
    let client = topology.connect(LockClient::builder()).await;
    let counter = redis::Client::open(std::env::var(WORKER_COUNTER).unwrap()).unwrap();
    let mut handles = Vec::new();
    for _ in 0..WORKER_TASKS {
        let client = client.clone();
        let mut conn = counter.get_multiplexed_async_connection().await.unwrap();
        handles.push(tokio::spawn(async move {
            for _ in 0..WORKER_ROUNDS {
                let guard = client
                    .lock("processes:counter")
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                let seen: Option<usize> = redis::cmd("GET")
                    .arg("counter")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let () = redis::cmd("SET")
                    .arg("counter")
                    .arg(seen.unwrap_or(0) + 1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let _: i64 = redis::cmd("INCR")
                    .arg("acquisitions")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
}

/// `LockAdmin::waiters` counts the clients waiting for each lock (one
/// waiting task per client here, so that a Redis subscription and an
/// in-memory waiter count alike): 0 while nobody waits, 2 while two other
/// clients wait for the held lock (and 0 for a lock nobody waits for), and
/// 0 again once they got it and left.
pub async fn admin_counts_the_clients_waiting_for_a_lock<F: Fixture>(fixture: &F) {
    let [holder, a, b] = clients::<F, 3>(fixture).await;
    let admin = holder.admin();
    let guard = holder.lock("admin:waited").acquire().await.unwrap();
    if !F::COUNTS_WAITERS {
        // Documented: 0, not a count, and not an error.
        let waiting = spawn_waiter(a, "admin:waited");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            admin.waiters(["admin:waited", "admin:free"]).await.unwrap(),
            [0, 0]
        );
        guard.release().await.unwrap();
        let (_, got) = waiting.await.unwrap();
        got.release().await.unwrap();
        drop(b);
        return;
    }
    assert_eq!(
        admin.waiters(["admin:waited", "admin:free"]).await.unwrap(),
        [0, 0]
    );
    // Each waiter releases at once, so that the other gets its turn.
    let waiters = [a, b].map(|client| {
        tokio::spawn(async move {
            let guard = client
                .lock("admin:waited")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
                .unwrap();
            guard.release().await.unwrap();
        })
    });
    let counted = async {
        loop {
            let counts = admin.waiters(["admin:waited", "admin:free"]).await.unwrap();
            if counts == [2, 0] {
                return;
            }
            assert!(counts[0] <= 2 && counts[1] == 0, "{counts:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), counted)
        .await
        .expect("both waiting clients counted");
    guard.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let left = async {
        while admin.waiters(["admin:waited"]).await.unwrap() != [0] {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), left)
        .await
        .expect("no waiter counted once they left");
    assert!(matches!(
        admin.waiters([""]).await,
        Err(LockError::InvalidKey { .. })
    ));
    assert_eq!(
        admin.waiters(Vec::<String>::new()).await.unwrap(),
        Vec::<u64>::new()
    );
}
