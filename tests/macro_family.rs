//! `#[distributed_lock]` with the lock family, a minimum hold and option
//! values from runtime configuration, on the in-memory backend and on a real
//! `redis-server`: fair fns run in arrival order, `read` fns share and never
//! overlap a `write` fn, `permits = 2` never runs more than two bodies,
//! `at_least` keeps a job's lock after it returns, a runtime `wait` is
//! honoured, and a runtime value out of range is the lock's own
//! `InvalidConfig` naming the key.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError, MemoryStore};
use lock_test_support::RedisServer;
use tokio::sync::{Barrier, Notify};
use tokio::time::Instant;

/// Where the clients of one test keep their locks.
enum Backend {
    Memory(MemoryStore),
    Redis(Box<RedisServer>),
}

impl Backend {
    /// A new client (its own id, as another replica would have) on the
    /// test's store.
    async fn client(&self) -> LockClient {
        match self {
            Backend::Memory(store) => LockClient::builder().memory(store.clone()).unwrap(),
            Backend::Redis(server) => LockClient::connect(&server.url()).await.unwrap(),
        }
    }
}

/// One `#[tokio::test]` per backend for each scenario `name(&Backend)`.
macro_rules! on_memory_and_redis {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$name(&Backend::Memory(MemoryStore::new())).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redis() {
                    super::$name(&Backend::Redis(Box::new(RedisServer::start()))).await;
                }
            }
        )*
    };
}

on_memory_and_redis!(
    fair_fns_run_in_arrival_order,
    read_fns_share_and_never_overlap_a_write_fn,
    permits_fn_never_runs_more_bodies_than_permits,
    at_least_keeps_a_job_lock_after_an_early_return,
    runtime_wait_is_honoured,
    runtime_values_out_of_range_are_invalid_config,
    nested_family_fns_downgrade_but_never_upgrade,
);

/// Records its turn; the first caller holds the lock until `gate` opens.
#[distributed_lock(key = "payout:{batch}", fair, wait = "20s", client = client)]
async fn payout(
    client: &LockClient,
    batch: u32,
    me: usize,
    order: Arc<Mutex<Vec<usize>>>,
    gate: Option<Arc<Notify>>,
) -> Result<(), LockError> {
    order.lock().unwrap().push(me);
    if let Some(gate) = gate {
        gate.notified().await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}

/// Call 0 holds the fair lock; calls 1 to 5, each from its own task and
/// client (as replicas would), arrive 150 ms apart (so each has queued
/// before the next comes); they run in that order once call 0 returns.
async fn fair_fns_run_in_arrival_order(backend: &Backend) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let gate = Arc::new(Notify::new());
    let mut calls = Vec::new();
    for me in 0..6 {
        let (client, order) = (backend.client().await, order.clone());
        let gate = (me == 0).then(|| gate.clone());
        calls.push(tokio::spawn(async move {
            payout(&client, 1, me, order, gate).await
        }));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(*order.lock().unwrap(), [0], "only the holder ran so far");
    // The attribute took the fair lock, not the plain lock of the name.
    let probe = backend.client().await;
    let fair = probe.fair_lock("payout:1").try_acquire().await.unwrap();
    assert!(fair.is_none(), "the fair lock was free");
    let plain = probe.lock("payout:1").try_acquire().await.unwrap();
    plain
        .expect("the plain lock is another lock")
        .release()
        .await
        .unwrap();
    gate.notify_one();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
}

/// What the bodies of `read_prices` and `write_prices` see.
#[derive(Default)]
struct Prices {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
    /// A reader with a writer in, or a writer with anyone else in.
    overlaps: AtomicUsize,
}

#[distributed_lock(key = "prices:{market}", read, wait = "30s", client = client)]
async fn read_prices(
    client: &LockClient,
    market: &str,
    prices: &Prices,
    together: Option<&Barrier>,
) -> Result<(), LockError> {
    let readers = prices.readers.fetch_add(1, Ordering::SeqCst) + 1;
    prices.most_readers.fetch_max(readers, Ordering::SeqCst);
    if prices.writers.load(Ordering::SeqCst) > 0 {
        prices.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    if let Some(together) = together {
        // Every reader is inside at once, or this never returns.
        together.wait().await;
    }
    tokio::time::sleep(Duration::from_millis(15)).await;
    if prices.writers.load(Ordering::SeqCst) > 0 {
        prices.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    prices.readers.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "prices:{market}", write, wait = "30s", client = client)]
async fn write_prices(client: &LockClient, market: &str, prices: &Prices) -> Result<(), LockError> {
    let writers = prices.writers.fetch_add(1, Ordering::SeqCst) + 1;
    if writers > 1 || prices.readers.load(Ordering::SeqCst) > 0 {
        prices.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    tokio::time::sleep(Duration::from_millis(15)).await;
    if prices.readers.load(Ordering::SeqCst) > 0 {
        prices.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    prices.writers.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

/// Four `read` calls are inside together (they meet at a barrier); then
/// readers and writers from 8 tasks, 4 rounds each: no reader ever sees a
/// writer inside and no writer sees anyone else.
async fn read_fns_share_and_never_overlap_a_write_fn(backend: &Backend) {
    let client = backend.client().await;
    let prices = Arc::new(Prices::default());
    let together = Arc::new(Barrier::new(4));
    let mut calls = Vec::new();
    for _ in 0..4 {
        let (client, prices, together) = (client.clone(), prices.clone(), together.clone());
        calls.push(tokio::spawn(async move {
            read_prices(&client, "eu", &prices, Some(&together)).await
        }));
    }
    for call in calls {
        tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .expect("the readers did not share the lock")
            .unwrap()
            .unwrap();
    }
    assert_eq!(prices.most_readers.load(Ordering::SeqCst), 4);

    let mut calls = Vec::new();
    for task in 0..8 {
        // Every task its own client: readers and writers of several replicas.
        let client = backend.client().await;
        let prices = prices.clone();
        calls.push(tokio::spawn(async move {
            for round in 0..4 {
                if (task + round) % 4 == 0 {
                    write_prices(&client, "eu", &prices).await.unwrap();
                } else {
                    read_prices(&client, "eu", &prices, None).await.unwrap();
                }
            }
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    assert_eq!(prices.overlaps.load(Ordering::SeqCst), 0);
}

/// What the bodies of the `export` fns see.
#[derive(Default)]
struct Exports {
    running: AtomicUsize,
    most: AtomicUsize,
    done: AtomicUsize,
}

impl Exports {
    async fn run(&self) {
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(running, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(60)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
    }
}

#[distributed_lock(key = "exports:{tenant}", permits = 2, wait = "30s", client = client)]
async fn export(client: &LockClient, tenant: u32, exports: &Exports) -> Result<(), LockError> {
    exports.run().await;
    Ok(())
}

/// The same semaphore, its total from the caller.
#[distributed_lock(key = "exports:{tenant}", permits = limit, take = 1, wait = "30s", client = client)]
async fn export_limited(
    client: &LockClient,
    tenant: u32,
    limit: u32,
    exports: &Exports,
) -> Result<(), LockError> {
    exports.run().await;
    Ok(())
}

/// Six concurrent calls (three with a literal total, three with a runtime
/// one, all on one semaphore of 2): never more than two bodies at once,
/// and two did run together.
async fn permits_fn_never_runs_more_bodies_than_permits(backend: &Backend) {
    let exports = Arc::new(Exports::default());
    let mut calls = Vec::new();
    for call in 0..6 {
        let client = backend.client().await;
        let exports = exports.clone();
        calls.push(tokio::spawn(async move {
            if call % 2 == 0 {
                export(&client, 7, &exports).await
            } else {
                export_limited(&client, 7, 2, &exports).await
            }
        }));
    }
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(exports.done.load(Ordering::SeqCst), 6);
    assert_eq!(exports.most.load(Ordering::SeqCst), 2);
}

/// A scheduled job that returns at once, long before its minimum hold.
#[distributed_lock(key = "job:{name}", at_least = "700ms", on_busy = skip, client = client)]
async fn cleanup(client: &LockClient, name: &str, runs: &AtomicUsize) -> Option<usize> {
    Some(runs.fetch_add(1, Ordering::SeqCst) + 1)
}

/// The same job with its minimum hold from configuration.
#[distributed_lock(key = "job:{name}", at_least = min_hold, on_busy = skip, client = client)]
async fn cleanup_configured(
    client: &LockClient,
    name: &str,
    min_hold: Duration,
    runs: &AtomicUsize,
) -> Option<usize> {
    Some(runs.fetch_add(1, Ordering::SeqCst) + 1)
}

/// ShedLock's lockAtLeastFor: a job that returned at once keeps its lock
/// for the minimum hold, so another replica whose timer fires a little
/// later skips the round; after the minimum it runs.
async fn at_least_keeps_a_job_lock_after_an_early_return(backend: &Backend) {
    let at_least = Duration::from_millis(700);
    let (a, b) = (backend.client().await, backend.client().await);
    for configured in [false, true] {
        let name = if configured { "configured" } else { "literal" };
        let runs = AtomicUsize::new(0);
        let call = |client: LockClient| {
            let runs = &runs;
            async move {
                if configured {
                    cleanup_configured(&client, name, at_least, runs).await
                } else {
                    cleanup(&client, name, runs).await
                }
            }
        };
        let started = Instant::now();
        assert_eq!(
            call(a.clone()).await,
            Some(1),
            "{name}: the first replica runs"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(
            call(b.clone()).await,
            None,
            "{name}: skipped within the minimum"
        );
        assert!(started.elapsed() < at_least, "{name}: too slow to tell");
        tokio::time::sleep_until(started + at_least + Duration::from_millis(200)).await;
        assert_eq!(
            call(b.clone()).await,
            Some(2),
            "{name}: runs after the minimum"
        );
    }
}

struct LockConfig {
    wait: Duration,
}

#[distributed_lock(key = "order:{id}", wait = cfg.wait, client = client)]
async fn pay(client: &LockClient, cfg: &LockConfig, id: u64) -> Result<Instant, LockError> {
    Ok(Instant::now())
}

/// A service whose wait comes from its configuration.
struct Orders {
    locks: LockClient,
    wait: Duration,
}

impl Orders {
    #[distributed_lock(key = "order:{id}", wait = self.wait, client = self.locks)]
    async fn refund(&self, id: u64) -> Result<Instant, LockError> {
        Ok(Instant::now())
    }
}

/// Another replica holds the order for 600 ms: a 100 ms runtime wait times
/// out after about 100 ms, a 10 s one gets the lock at the release.
async fn runtime_wait_is_honoured(backend: &Backend) {
    let client = backend.client().await;
    let other = backend.client().await;
    for method in [false, true] {
        let held = other.lock("order:1").acquire().await.unwrap();
        let taken = Instant::now();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            held.release().await.unwrap();
            Instant::now()
        });
        let call = |wait: Duration| {
            let client = client.clone();
            async move {
                if method {
                    let orders = Orders {
                        locks: client,
                        wait,
                    };
                    orders.refund(1).await
                } else {
                    pay(&client, &LockConfig { wait }, 1).await
                }
            }
        };
        let short = call(Duration::from_millis(100)).await;
        let waited = taken.elapsed();
        assert!(
            matches!(short, Err(LockError::TimedOut { ref key, .. }) if key == "order:1"),
            "method {method}: {short:?}"
        );
        assert!(
            waited >= Duration::from_millis(90) && waited < Duration::from_millis(500),
            "method {method}: a 100ms wait took {waited:?}"
        );
        let got = call(Duration::from_secs(10)).await.unwrap();
        let released = release.await.unwrap();
        assert!(
            got >= taken + Duration::from_millis(550) && got < released + Duration::from_secs(2),
            "method {method}: got the lock {:?} after it was taken, released after {:?}",
            got - taken,
            released - taken
        );
    }
}

#[distributed_lock(key = "report:{day}", lease = Duration::from_millis(lease_ms), client = client)]
async fn report(client: &LockClient, day: u32, lease_ms: u64) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(
    key = "report:{day}",
    lease = lease,
    at_least = at_least,
    on_busy = skip,
    client = client
)]
async fn scheduled_report(
    client: &LockClient,
    day: u32,
    lease: Duration,
    at_least: Duration,
) -> Result<Option<u32>, LockError> {
    Ok(Some(day))
}

#[distributed_lock(key = "exports:{tenant}", permits = total, take = take, client = client)]
async fn export_some(
    client: &LockClient,
    tenant: u32,
    total: u32,
    take: u32,
) -> Result<(), LockError> {
    Ok(())
}

/// Values the lock refuses come back as its `InvalidConfig` naming the key,
/// through the function's error path (with `on_busy = skip` too: they are
/// failures, not a busy lock); the body does not run.
async fn runtime_values_out_of_range_are_invalid_config(backend: &Backend) {
    let client = backend.client().await;
    let invalid = |result: Result<(), LockError>, key: &str, what: &str| match result {
        Err(LockError::InvalidConfig { key: k, reason }) => {
            assert_eq!(k, key, "{what}: {reason}");
        }
        other => panic!("{what}: expected InvalidConfig, got {other:?}"),
    };
    invalid(report(&client, 7, 1).await, "report:7", "a 1 ms lease");
    invalid(
        report(&client, 7, u64::MAX).await,
        "report:7",
        "a lease of u64::MAX ms",
    );
    report(&client, 7, 5_000).await.unwrap();

    let refused =
        scheduled_report(&client, 8, Duration::from_secs(1), Duration::from_secs(5)).await;
    invalid(
        refused.map(drop),
        "report:8",
        "at_least longer than the lease",
    );
    let skipped = scheduled_report(&client, 8, Duration::ZERO, Duration::ZERO).await;
    invalid(
        skipped.map(drop),
        "report:8",
        "a zero lease with on_busy = skip",
    );
    assert_eq!(
        scheduled_report(&client, 8, Duration::from_secs(5), Duration::ZERO)
            .await
            .unwrap(),
        Some(8)
    );

    invalid(
        export_some(&client, 3, 0, 1).await,
        "exports:3",
        "permits = 0",
    );
    invalid(export_some(&client, 3, 2, 0).await, "exports:3", "take = 0");
    invalid(
        export_some(&client, 3, 2, 3).await,
        "exports:3",
        "take > permits",
    );
    export_some(&client, 3, 2, 2).await.unwrap();
}

#[distributed_lock(key = "catalog:{id}", read, client = client)]
async fn read_catalog(client: &LockClient, id: u32) -> Result<u64, LockError> {
    Ok(distlock::current().unwrap().fencing_token())
}

#[distributed_lock(key = "catalog:{id}", write, client = client)]
async fn write_catalog(client: &LockClient, id: u32) -> Result<u64, LockError> {
    // Downgrade: the writer's call chain may read (re-entered, no wait).
    read_catalog(client, id).await
}

#[distributed_lock(key = "catalog:{id}", read, client = client)]
async fn read_then_write_catalog(client: &LockClient, id: u32) -> Result<u64, LockError> {
    // Upgrade: refused at once rather than waiting on itself.
    write_catalog(client, id).await
}

/// Annotated fns calling each other on one key: a `write` fn may call a
/// `read` fn (downgrade); a `read` fn calling a `write` fn gets
/// `UpgradeRefused` at once (no wait), and nothing stays held after either.
async fn nested_family_fns_downgrade_but_never_upgrade(backend: &Backend) {
    let client = backend.client().await;
    write_catalog(&client, 1).await.unwrap();
    let started = Instant::now();
    let refused = read_then_write_catalog(&client, 1).await;
    assert!(
        matches!(refused, Err(LockError::UpgradeRefused { ref key }) if key == "catalog:1"),
        "{refused:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let other = backend.client().await;
    let write = other
        .read_write_lock("catalog:1")
        .write()
        .try_acquire()
        .await;
    write
        .unwrap()
        .expect("the catalog stayed locked")
        .release()
        .await
        .unwrap();
}
