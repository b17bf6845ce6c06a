//! The plain tower flavour on the in-memory backend: `LockError` as the
//! service error, waiting, pass-through, and cancel safety.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{LockClient, LockError, LockOptions};
use distlock_tower::LockLayer;
use tokio::sync::Notify;
use tokio::time::{timeout, Instant};
use tower::{service_fn, BoxError, Layer, Service, ServiceExt};

#[derive(Clone, Debug)]
struct Job {
    account: Option<u32>,
}

fn by_account(job: &Job) -> Option<String> {
    job.account.map(|account| format!("account:{account}"))
}

/// Counts the calls inside the service at once and remembers the most.
#[derive(Default)]
struct Overlap {
    inside: AtomicUsize,
    max: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_jobs_run_one_at_a_time() {
    let client = LockClient::memory();
    let overlap = Arc::new(Overlap::default());
    let service = LockLayer::new(client, by_account)
        .plain()
        .wait(Duration::from_secs(10))
        .layer(service_fn({
            let overlap = overlap.clone();
            move |_: Job| {
                let overlap = overlap.clone();
                async move {
                    let now = overlap.inside.fetch_add(1, Ordering::SeqCst) + 1;
                    overlap.max.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    overlap.inside.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, LockError>(())
                }
            }
        }));
    let jobs: Vec<_> = (0..16)
        .map(|_| {
            let service = service.clone();
            tokio::spawn(service.oneshot(Job { account: Some(1) }))
        })
        .collect();
    for job in jobs {
        job.await.unwrap().unwrap();
    }
    assert_eq!(overlap.max.load(Ordering::SeqCst), 1);
}

/// The lock error reaches a `BoxError` service as itself, downcastable.
#[tokio::test]
async fn busy_is_the_service_error() {
    let client = LockClient::memory();
    let held = client.lock("account:3").acquire().await.unwrap();
    let service = LockLayer::new(client.clone(), by_account)
        .plain()
        .layer(service_fn(|_: Job| async { Ok::<_, BoxError>("ran") }));
    let error = service
        .clone()
        .oneshot(Job { account: Some(3) })
        .await
        .unwrap_err();
    let error = error.downcast::<LockError>().unwrap();
    assert!(matches!(*error, LockError::Busy { ref key } if key == "account:3"));

    // With a wait that runs out: TimedOut.
    let waiting = LockLayer::new(client.clone(), by_account)
        .plain()
        .wait(Duration::from_millis(50))
        .layer(service_fn(|_: Job| async { Ok::<_, LockError>("ran") }));
    let error = waiting.oneshot(Job { account: Some(3) }).await.unwrap_err();
    assert!(matches!(error, LockError::TimedOut { .. }), "{error:?}");

    // A job with no key runs while the lock is held.
    let unlocked = service.oneshot(Job { account: None }).await.unwrap();
    assert_eq!(unlocked, "ran");
    held.release().await.unwrap();
}

/// The lock is released before the result is handed on: back-to-back jobs
/// that may not wait never find the previous one's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_is_free_when_the_result_arrives() {
    let client = LockClient::memory();
    let mut service = LockLayer::new(client.clone(), by_account)
        .plain()
        .layer(service_fn(|job: Job| async move {
            if job.account == Some(99) {
                return Err(LockError::InvalidConfig {
                    key: "account:99".into(),
                    reason: "the job failed".into(),
                });
            }
            Ok(())
        }));
    for _ in 0..50 {
        service
            .ready()
            .await
            .unwrap()
            .call(Job { account: Some(5) })
            .await
            .unwrap();
    }
    // A failing job releases before its error is handed on, too.
    for _ in 0..5 {
        let error = service
            .ready()
            .await
            .unwrap()
            .call(Job { account: Some(99) })
            .await
            .unwrap_err();
        assert!(matches!(error, LockError::InvalidConfig { .. }));
    }
    assert!(client
        .lock("account:99")
        .try_acquire()
        .await
        .unwrap()
        .is_some());
}

/// The layer's `LockOptions` reach each lock whole: a minimum hold keeps a
/// quick job's lock taken after its result, until the hold is over, and the
/// wait in the same value lets the next job wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_reach_the_lock() {
    let client = LockClient::memory();
    let hold = Duration::from_millis(300);
    let options = LockOptions::new().hold_at_least(hold);
    let quick = LockLayer::new(client.clone(), by_account)
        .plain()
        .options(options)
        .layer(service_fn(|_: Job| async { Ok::<_, LockError>(()) }));
    let started = Instant::now();
    quick
        .clone()
        .oneshot(Job { account: Some(8) })
        .await
        .unwrap();
    let busy = client.lock("account:8").acquire().await;
    assert!(matches!(busy, Err(LockError::Busy { .. })), "{busy:?}");

    // The same options with a wait: the next job waits out the hold.
    let waiting = LockLayer::new(client.clone(), by_account)
        .plain()
        .options(options.wait(Duration::from_secs(5)))
        .layer(service_fn(|_: Job| async { Ok::<_, LockError>(()) }));
    waiting.oneshot(Job { account: Some(8) }).await.unwrap();
    assert!(started.elapsed() >= hold, "{:?}", started.elapsed());

    // `options` replaces what was set before it: no wait left, so busy.
    let replaced = LockLayer::new(client.clone(), by_account)
        .plain()
        .wait(Duration::from_secs(5))
        .options(LockOptions::new())
        .layer(service_fn(|_: Job| async { Ok::<_, LockError>(()) }));
    let held = client.lock("account:9").acquire().await.unwrap();
    let error = replaced
        .oneshot(Job { account: Some(9) })
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::Busy { .. }), "{error:?}");
    held.release().await.unwrap();
}

/// Dropping the response future mid-job (a timeout above, a cancelled
/// caller) frees the lock at once, not after the 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_job_releases_its_lock() {
    let client = LockClient::memory();
    let entered = Arc::new(Notify::new());
    let service = LockLayer::new(client.clone(), by_account)
        .plain()
        .layer(service_fn({
            let entered = entered.clone();
            move |_: Job| {
                let entered = entered.clone();
                async move {
                    entered.notify_one();
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok::<_, LockError>(())
                }
            }
        }));
    let job = tokio::spawn(service.oneshot(Job { account: Some(8) }));
    timeout(Duration::from_secs(5), entered.notified())
        .await
        .unwrap();
    assert!(client
        .lock("account:8")
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    job.abort();
    let aborted = Instant::now();
    let guard = client
        .lock("account:8")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert!(
        aborted.elapsed() < Duration::from_secs(2),
        "released after {:?}",
        aborted.elapsed()
    );
    guard.release().await.unwrap();
}

/// A waiting request whose future is dropped leaves no trace: the lock is
/// not taken for it once the holder lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_waiting_job_never_takes_the_lock() {
    let client = LockClient::memory();
    let held = client.lock("account:4").acquire().await.unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let service = LockLayer::new(client.clone(), by_account)
        .plain()
        .wait(Duration::from_secs(30))
        .layer(service_fn({
            let ran = ran.clone();
            move |_: Job| {
                ran.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, LockError>(()) }
            }
        }));
    let waiting = service.oneshot(Job { account: Some(4) });
    assert!(timeout(Duration::from_millis(100), waiting).await.is_err());
    held.release().await.unwrap();
    let again = client.lock("account:4").acquire().await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the dropped job never ran");
    again.release().await.unwrap();
}

/// A name refused by `validate_key` fails with `InvalidKey` before anything
/// else: the inner service is not called and the store never sees the lock.
/// Accepted names are locked as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_key_takes_no_lock() {
    let store = distlock_core::MemoryStore::new();
    let client = LockClient::builder().memory(store.clone()).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let held_inside = Arc::new(AtomicUsize::new(0));
    let service = LockLayer::new(client, by_account)
        .plain()
        .validate_key(|key: &str| key != "account:666")
        .layer(service_fn({
            let (calls, held_inside, store) = (calls.clone(), held_inside.clone(), store.clone());
            move |_: Job| {
                calls.fetch_add(1, Ordering::SeqCst);
                held_inside.store(store.held(), Ordering::SeqCst);
                async { Ok::<_, LockError>(()) }
            }
        }));

    let refused = service.clone().oneshot(Job { account: Some(666) }).await;
    match refused {
        Err(LockError::InvalidKey { key, .. }) => assert_eq!(key, "account:666"),
        other => panic!("expected InvalidKey, got {other:?}"),
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the service ran");
    assert_eq!(store.entries(), 0, "the store saw the refused lock");

    service.oneshot(Job { account: Some(1) }).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        held_inside.load(Ordering::SeqCst),
        1,
        "an accepted name is locked"
    );
}

/// A job that holds on until `release` has a permit for it, and counts the
/// jobs inside at once.
fn held_job(
    overlap: Arc<Overlap>,
    release: Arc<tokio::sync::Semaphore>,
) -> impl Service<Job, Response = (), Error = LockError, Future = impl Send> + Clone {
    service_fn(move |_: Job| {
        let (overlap, release) = (overlap.clone(), release.clone());
        async move {
            let now = overlap.inside.fetch_add(1, Ordering::SeqCst) + 1;
            overlap.max.fetch_max(now, Ordering::SeqCst);
            release.acquire().await.unwrap().forget();
            overlap.inside.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, LockError>(())
        }
    })
}

async fn until_inside(overlap: &Overlap, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while overlap.inside.load(Ordering::SeqCst) != n {
        assert!(Instant::now() < deadline, "{n} jobs never ran at once");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The modes in the plain flavour: under `concurrency_limit(2)` two jobs of
/// one account run at once and a third fails with `Busy` (the plain flavour
/// hands the lock error on as it is), while another account is not held
/// back; the semaphore is the account's own (`semaphore("account:1", 2)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_in_the_plain_flavour() {
    let client = LockClient::memory();
    let overlap = Arc::new(Overlap::default());
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let service = LockLayer::new(client.clone(), by_account)
        .plain()
        .concurrency_limit(2)
        .layer(held_job(overlap.clone(), release.clone()));
    let running: Vec<_> = (0..2)
        .map(|_| tokio::spawn(service.clone().oneshot(Job { account: Some(1) })))
        .collect();
    until_inside(&overlap, 2).await;
    let third = service.clone().oneshot(Job { account: Some(1) }).await;
    assert!(
        matches!(third, Err(LockError::Busy { ref key }) if key == "account:1"),
        "{third:?}"
    );
    // Two permits held by others: a third taker of the same semaphore is refused too.
    let direct = client
        .semaphore("account:1", 2)
        .permit()
        .try_acquire()
        .await;
    assert!(matches!(direct, Ok(None)), "{direct:?}");
    let other = tokio::spawn(service.clone().oneshot(Job { account: Some(2) }));
    until_inside(&overlap, 3).await;
    release.add_permits(3);
    for job in running {
        job.await.unwrap().unwrap();
    }
    other.await.unwrap().unwrap();
    assert_eq!(overlap.max.load(Ordering::SeqCst), 3);
}

/// Read-write mode chosen per job by a closure: readers share the lock, a
/// writer that may not wait is refused while they hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_in_the_plain_flavour() {
    let client = LockClient::memory();
    let overlap = Arc::new(Overlap::default());
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    // Jobs without an account write, the others read: all lock `ledger`.
    let layer = LockLayer::new(client, |_: &Job| Some("ledger".to_owned()))
        .plain()
        .read_write(|job: &Job| {
            if job.account.is_some() {
                distlock_tower::Access::Read
            } else {
                distlock_tower::Access::Write
            }
        });
    let service = layer.layer(held_job(overlap.clone(), release.clone()));
    let readers: Vec<_> = (0..3)
        .map(|_| tokio::spawn(service.clone().oneshot(Job { account: Some(1) })))
        .collect();
    until_inside(&overlap, 3).await;
    let writer = service.clone().oneshot(Job { account: None }).await;
    assert!(matches!(writer, Err(LockError::Busy { .. })), "{writer:?}");
    release.add_permits(3);
    for reader in readers {
        reader.await.unwrap().unwrap();
    }
    release.add_permits(1);
    service.oneshot(Job { account: None }).await.unwrap();
}

/// Sets its flag when dropped: tells whether a job's future was dropped.
struct DropFlag(Arc<AtomicUsize>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// `abort_on_lost(true)`: a job that outlives its fixed lease is dropped when
/// the lease runs out and fails with `LeaseLost`; without it the job runs to
/// its end and its own result comes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_aborts_the_job_only_when_asked() {
    let client = LockClient::memory();
    let dropped = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let job = |runs_for: Duration| {
        let (dropped, finished) = (dropped.clone(), finished.clone());
        service_fn(move |_: Job| {
            let (dropped, finished) = (dropped.clone(), finished.clone());
            async move {
                let _flag = DropFlag(dropped);
                tokio::time::sleep(runs_for).await;
                finished.fetch_add(1, Ordering::SeqCst);
                Ok::<_, LockError>("settled")
            }
        })
    };
    let layer = LockLayer::new(client.clone(), by_account)
        .plain()
        .lease(Duration::from_millis(200));

    let started = Instant::now();
    let aborted = layer
        .clone()
        .abort_on_lost(true)
        .layer(job(Duration::from_secs(10)))
        .oneshot(Job { account: Some(1) })
        .await;
    match aborted {
        Err(LockError::LeaseLost { key, reason }) => {
            assert_eq!(key, "account:1");
            assert!(reason.contains("cancelled"), "{reason}");
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_secs(2),
        "aborted after {took:?}, not when the 200 ms lease ran out"
    );
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the job's future was dropped"
    );
    assert_eq!(finished.load(Ordering::SeqCst), 0, "the job did not finish");
    // Its lock is not left behind: free by the end of its lease at the latest
    // (the local deadline fires a little before the store's expiry).
    let free = client
        .lock("account:1")
        .options(LockOptions::new().wait(Duration::from_secs(1)))
        .acquire()
        .await
        .expect("the lock is free after the abort");
    free.release().await.unwrap();

    // The default: the job outlives its lease, runs to its end, and its result comes through.
    let passed = layer
        .layer(job(Duration::from_millis(500)))
        .oneshot(Job { account: Some(1) })
        .await;
    assert_eq!(passed.unwrap(), "settled");
    assert_eq!(finished.load(Ordering::SeqCst), 1);
    assert_eq!(dropped.load(Ordering::SeqCst), 2);
}
