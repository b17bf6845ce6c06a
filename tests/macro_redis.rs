//! `#[distributed_lock]` against a real `redis-server`: mutual exclusion
//! across tasks and processes, reentrancy, release on every exit path,
//! `on_busy = skip`, `abort_on_lost`, multi-key ordering and `current()`.

mod suite;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{current, current_all, distributed_lock, LockClient, LockError};
use lock_test_support::RedisServer;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

async fn redis_conn(server: &RedisServer) -> MultiplexedConnection {
    server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A read-modify-write of a Redis counter that loses updates unless calls
/// are mutually excluded.
async fn read_modify_write(conn: &mut MultiplexedConnection, name: &str) {
    let seen: Option<usize> = redis::cmd("GET").arg(name).query_async(conn).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    let () = redis::cmd("SET")
        .arg(name)
        .arg(seen.unwrap_or(0) + 1)
        .query_async(conn)
        .await
        .unwrap();
}

#[distributed_lock(key = "counter:{name}", wait = "60s", client = client)]
async fn bump(
    client: &LockClient,
    conn: &mut MultiplexedConnection,
    name: &str,
) -> Result<(), LockError> {
    read_modify_write(conn, name).await;
    Ok(())
}

async fn counter(conn: &mut MultiplexedConnection, name: &str) -> usize {
    let value: Option<usize> = redis::cmd("GET").arg(name).query_async(conn).await.unwrap();
    value.unwrap_or(0)
}

/// Asserts that another owner gets lock `name` within 5 s, far less than the
/// 30 s lease it would otherwise wait out.
async fn next_owner_gets_it_promptly(server: &RedisServer, name: &str) {
    let other = LockClient::connect(&server.url()).await.unwrap();
    let started = Instant::now();
    let guard = other
        .lock(name)
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{name} was freed only after {:?}: not released by the annotated fn",
        started.elapsed()
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_fn_excludes_concurrent_tasks() {
    let server = RedisServer::start();
    const TASKS: usize = 8;
    const ROUNDS: usize = 5;
    let mut handles = Vec::new();
    for _ in 0..TASKS {
        // One client per task: every task is its own owner, as separate
        // service instances would be.
        let client = LockClient::connect(&server.url()).await.unwrap();
        let mut conn = redis_conn(&server).await;
        handles.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                bump(&client, &mut conn, "tasks").await.unwrap();
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    assert_eq!(
        counter(&mut redis_conn(&server).await, "tasks").await,
        TASKS * ROUNDS,
        "lost updates: two calls ran at once"
    );
}

/// Uses the global client, as the worker processes install it.
#[distributed_lock(key = "counter:{name}", wait = "60s")]
async fn bump_with_global_client(
    conn: &mut MultiplexedConnection,
    name: &str,
) -> Result<(), LockError> {
    read_modify_write(conn, name).await;
    Ok(())
}

#[test]
fn two_processes_exclude_each_other() {
    let server = RedisServer::start();
    const PROCESSES: usize = 2;
    suite::run_worker_processes(
        "macro_process_worker",
        PROCESSES,
        &[
            ("LOCK_WORKER_URL", server.url()),
            ("LOCK_WORKER_TASKS", WORKER_TASKS.to_string()),
            ("LOCK_WORKER_ROUNDS", WORKER_ROUNDS.to_string()),
        ],
    );
    let value: usize = redis::cmd("GET")
        .arg("processes")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(
        value,
        PROCESSES * WORKER_TASKS * WORKER_ROUNDS,
        "lost updates: two processes ran the fn at once"
    );
}

const WORKER_TASKS: usize = 8;
const WORKER_ROUNDS: usize = 5;

/// One worker process of `two_processes_exclude_each_other`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in child processes by two_processes_exclude_each_other"]
async fn macro_process_worker() {
    let Ok(url) = std::env::var("LOCK_WORKER_URL") else {
        eprintln!("macro_process_worker only runs as a child of two_processes_exclude_each_other");
        return;
    };
    let tasks: usize = std::env::var("LOCK_WORKER_TASKS").unwrap().parse().unwrap();
    let rounds: usize = std::env::var("LOCK_WORKER_ROUNDS")
        .unwrap()
        .parse()
        .unwrap();
    distlock::set_global_client(LockClient::connect(&url).await.unwrap());
    let redis = redis::Client::open(url.as_str()).unwrap();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
        // Spawned tasks are separate owners even on one client.
        handles.push(tokio::spawn(async move {
            for _ in 0..rounds {
                bump_with_global_client(&mut conn, "processes")
                    .await
                    .unwrap();
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
}

#[distributed_lock(key = "order:{id}", client = client)]
async fn inner(client: &LockClient, id: u64) -> Result<(u64, usize), LockError> {
    let token = current().unwrap().fencing_token();
    Ok((token, current_all().len()))
}

#[distributed_lock(key = "order:{id}", client = client)]
async fn outer(client: &LockClient, id: u64) -> Result<(u64, u64, usize), LockError> {
    let token = current().unwrap().fencing_token();
    // Same key, same call chain, `wait` absent (try once): re-entered, not busy.
    let (inner_token, depth) = inner(client, id).await?;
    // A spawned task is another owner: busy for it.
    let other = tokio::spawn({
        let client = client.clone();
        async move { client.lock(format!("order:{id}")).try_acquire().await }
    });
    assert!(
        other.await.unwrap()?.is_none(),
        "a spawned task got the lock"
    );
    Ok((token, inner_token, depth))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_on_one_key_are_reentrant() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let (token, inner_token, depth) = outer(&client, 7).await.unwrap();
    assert_eq!(token, inner_token, "the nested call is the same hold");
    assert_eq!(depth, 2, "inner runs inside both entries");
    // The outermost return released it in Redis.
    let exists: bool = redis::cmd("EXISTS")
        .arg("lock:{order:7}")
        .query(&mut server.conn())
        .unwrap();
    assert!(!exists, "the lock outlived the outermost call");
}

#[derive(Debug)]
enum AppError {
    Lock(#[allow(dead_code)] LockError),
    Declined,
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

fn decline() -> Result<(), AppError> {
    Err(AppError::Declined)
}

#[distributed_lock(key = "order:{id}", client = client)]
async fn pay_declined(client: &LockClient, id: u64) -> Result<u64, AppError> {
    decline()?;
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_return_with_question_mark_releases() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    assert!(matches!(
        pay_declined(&client, 1).await,
        Err(AppError::Declined)
    ));
    // Released by the time the fn returned: another owner gets it at once.
    let other = LockClient::connect(&server.url()).await.unwrap();
    let guard = other.lock("order:1").try_acquire().await.unwrap();
    assert!(guard.is_some(), "the lock was still held after `?`");
    // And the same fn runs again right away (try once).
    drop(guard);
    next_owner_gets_it_promptly(&server, "order:1").await;
    assert!(matches!(
        pay_declined(&client, 1).await,
        Err(AppError::Declined)
    ));
}

#[distributed_lock(key = "order:{id}", client = client)]
async fn pay_panics(client: &LockClient, id: u64) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_millis(10)).await;
    panic!("payment provider exploded for {id}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panic_in_body_releases() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let task = tokio::spawn(async move { pay_panics(&client, 2).await });
    assert!(task.await.unwrap_err().is_panic());
    next_owner_gets_it_promptly(&server, "order:2").await;
}

#[distributed_lock(key = "order:{id}", client = client)]
async fn pay_forever(
    client: &LockClient,
    id: u64,
    entered: Arc<tokio::sync::Notify>,
) -> Result<(), LockError> {
    entered.notify_one();
    std::future::pending::<()>().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_future_releases() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let entered = Arc::new(tokio::sync::Notify::new());
    let call = pay_forever(&client, 3, entered.clone());
    tokio::select! {
        _ = call => unreachable!("pay_forever returned"),
        _ = entered.notified() => {}
    }
    // `call` was dropped by the select above with the body mid-await.
    next_owner_gets_it_promptly(&server, "order:3").await;
}

#[distributed_lock(key = "job:{name}", on_busy = skip, client = client)]
async fn job_option(client: &LockClient, name: &str, runs: &AtomicUsize) -> Option<usize> {
    Some(runs.fetch_add(1, Ordering::SeqCst) + 1)
}

#[distributed_lock(key = "job:{name}", on_busy = skip, client = client)]
async fn job_unit(client: &LockClient, name: &str, runs: &AtomicUsize) {
    runs.fetch_add(1, Ordering::SeqCst);
}

#[distributed_lock(key = "job:{name}", on_busy = skip, wait = "200ms", client = client)]
async fn job_result(
    client: &LockClient,
    name: &str,
    runs: &AtomicUsize,
) -> Result<Option<usize>, LockError> {
    Ok(Some(runs.fetch_add(1, Ordering::SeqCst) + 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_busy_skip_skips_the_body() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let runs = AtomicUsize::new(0);
    assert_eq!(job_option(&client, "report", &runs).await, Some(1));

    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = other.lock("job:report").acquire().await.unwrap();
    assert_eq!(job_option(&client, "report", &runs).await, None);
    job_unit(&client, "report", &runs).await;
    assert_eq!(job_result(&client, "report", &runs).await.unwrap(), None);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "a skipped body ran anyway");
    held.release().await.unwrap();

    job_unit(&client, "report", &runs).await;
    assert_eq!(job_result(&client, "report", &runs).await.unwrap(), Some(3));
}

#[distributed_lock(key = "job:{name}", on_busy = skip, client = client)]
async fn job_on_dead_server(client: &LockClient, name: &str) -> Result<Option<u8>, LockError> {
    Ok(Some(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_busy_skip_still_reports_backend_errors_in_a_result() {
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    server.kill();
    let err = job_on_dead_server(&client, "report").await.unwrap_err();
    assert!(err.is_backend(), "{err:?}");
    assert_eq!(err.key(), Some("job:report"));
}

#[distributed_lock(key = "job:{name}", on_busy = skip, client = client)]
async fn job_without_result(client: &LockClient, name: &str) -> Option<u8> {
    Some(1)
}

/// The events of the calling thread, as (level, target, fields).
#[derive(Clone, Default)]
struct Events(Arc<std::sync::Mutex<Vec<(tracing::Level, String, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let meta = event.metadata();
        self.0
            .lock()
            .unwrap()
            .push((*meta.level(), meta.target().to_owned(), fields.0));
    }
}

impl Events {
    fn find(&self, level: tracing::Level, target: &str, needles: &[&str]) -> bool {
        self.0.lock().unwrap().iter().any(|(l, t, fields)| {
            *l == level && t == target && needles.iter().all(|n| fields.contains(n))
        })
    }
}

/// `on_busy = skip` on a function that returns no `Result`: a busy lock and
/// a backend failure both skip the body, and the log tells them apart under
/// the documented target `distlock` (`RUST_LOG=distlock=..`):
/// debug "lock busy", error with the key, the error and `backend=true`.
/// (Before, both were under `distlock::__private`.)
#[tokio::test]
async fn on_busy_skip_logs_failures_under_the_facade_target() {
    use tracing_subscriber::layer::SubscriberExt;
    let events = Events::default();
    let _log =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));
    let mut server = RedisServer::start();
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = other.lock("job:busy").acquire().await.unwrap();
    assert_eq!(job_without_result(&client, "busy").await, None);
    held.release().await.unwrap();
    server.kill();
    assert_eq!(job_without_result(&client, "report").await, None);

    use tracing::Level;
    let all = format!("{:#?}", events.0.lock().unwrap());
    assert!(
        events.find(Level::DEBUG, "distlock", &["job:busy", "lock busy"]),
        "{all}"
    );
    assert!(
        events.find(
            Level::ERROR,
            "distlock",
            &["job:report", "job_without_result", "backend=true", "error="]
        ),
        "{all}"
    );
    assert!(
        !events.find(Level::DEBUG, "distlock", &["job:report"]),
        "a failure was logged as busy: {all}"
    );
}

#[distributed_lock(key = "order:{id}", abort_on_lost, client = client)]
async fn pay_slowly(
    client: &LockClient,
    id: u64,
    entered: Arc<tokio::sync::Notify>,
    finished: Arc<AtomicBool>,
) -> Result<(), LockError> {
    entered.notify_one();
    tokio::time::sleep(Duration::from_secs(60)).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_on_lost_cancels_the_body() {
    let server = RedisServer::start();
    // Renewed every 100 ms: the deletion is noticed within about a period.
    let client = LockClient::builder()
        .lease(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let entered = Arc::new(tokio::sync::Notify::new());
    let finished = Arc::new(AtomicBool::new(false));
    let call = tokio::spawn({
        let (client, entered, finished) = (client.clone(), entered.clone(), finished.clone());
        async move { pay_slowly(&client, 4, entered, finished).await }
    });
    entered.notified().await;
    let () = redis::cmd("DEL")
        .arg("lock:{order:4}")
        .query(&mut server.conn())
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the body was not cancelled when the lease was lost")
        .unwrap();
    match result {
        Err(LockError::LeaseLost { key, .. }) => assert_eq!(key, "order:4"),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(!finished.load(Ordering::SeqCst));
}

#[distributed_lock(keys = ["account:{from}", "account:{to}"], wait = "30s", client = client)]
async fn transfer(
    client: &LockClient,
    conn: &mut MultiplexedConnection,
    from: u32,
    to: u32,
) -> Result<Vec<String>, LockError> {
    // Both accounts' balances move under both locks.
    for account in [from, to] {
        let key = format!("balance:{account}");
        let seen: Option<i64> = redis::cmd("GET").arg(&key).query_async(conn).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let () = redis::cmd("SET")
            .arg(&key)
            .arg(seen.unwrap_or(0) + 1)
            .query_async(conn)
            .await
            .unwrap();
    }
    Ok(current_all().iter().map(|l| l.key().to_owned()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiple_keys_in_swapped_order_do_not_deadlock() {
    let server = RedisServer::start();
    const ROUNDS: usize = 20;
    let mut handles = Vec::new();
    for (from, to) in [(1, 2), (2, 1), (1, 2), (2, 1)] {
        let client = LockClient::connect(&server.url()).await.unwrap();
        let mut conn = redis_conn(&server).await;
        handles.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let held = transfer(&client, &mut conn, from, to).await.unwrap();
                // Innermost first: the last acquired (sorted) comes first.
                assert_eq!(held, ["account:2", "account:1"]);
            }
        }));
    }
    let all = async {
        for handle in handles {
            handle.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(25), all)
        .await
        .expect("deadlock: transfers with swapped arguments stalled");
    let mut conn = redis_conn(&server).await;
    assert_eq!(counter(&mut conn, "balance:1").await, 4 * ROUNDS);
    assert_eq!(counter(&mut conn, "balance:2").await, 4 * ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiple_keys_are_all_or_nothing() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = other.lock("account:9").acquire().await.unwrap();
    let mut conn = redis_conn(&server).await;
    let started = Instant::now();
    // wait = 30s in `transfer`: account:9 stays busy until released below.
    let release_later = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
    });
    let keys = transfer(&client, &mut conn, 9, 3).await.unwrap();
    assert_eq!(keys, ["account:9", "account:3"]);
    assert!(started.elapsed() >= Duration::from_millis(250));
    release_later.await.unwrap();

    // Busy with no wait: nothing stays held.
    let held = other.lock("account:9").acquire().await.unwrap();
    let err = try_transfer(&client, 3, 9).await.unwrap_err();
    assert!(
        matches!(&err, LockError::Busy { key } if key == "account:9"),
        "{err:?}"
    );
    let free = other.lock("account:3").try_acquire().await.unwrap();
    assert!(
        free.is_some(),
        "account:3 stayed locked after a failed multi-lock"
    );
    held.release().await.unwrap();
}

#[distributed_lock(keys = ["account:{from}", "account:{to}"], client = client)]
async fn try_transfer(client: &LockClient, from: u32, to: u32) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "order:{id}", client = client)]
async fn fenced(client: &LockClient, id: u64) -> Result<(String, u64, bool), LockError> {
    let lock = current().expect("inside the body");
    Ok((lock.key().to_owned(), lock.fencing_token(), lock.is_held()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_gives_the_key_and_fencing_token() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let (key, first, held) = fenced(&client, 5).await.unwrap();
    assert_eq!(key, "order:5");
    assert!(held);
    let (_, second, _) = fenced(&client, 5).await.unwrap();
    assert!(second > first, "tokens must grow: {first} then {second}");
    let fence_key = client.admin().inspect("order:5").await.unwrap().fence_key;
    let issued: u64 = redis::cmd("GET")
        .arg(fence_key)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(second, issued);
    assert!(current().is_none(), "current() outside any body");
}

#[distributed_lock(key = "order:{id}")]
async fn without_client(id: u64) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test]
async fn missing_global_client_is_a_clear_error() {
    // This test binary never installs a global client (only the worker
    // processes of two_processes_exclude_each_other do).
    let err = without_client(6).await.unwrap_err();
    assert_eq!(err.key(), Some("order:6"));
    let message = err.to_string();
    assert!(
        message.contains("set_global_client") && message.contains("client = "),
        "{message}"
    );
}

/// A service struct with the shapes users write: `&self`, `&mut self`,
/// `#[tracing::instrument]` on either side, a trait impl via `async_trait`.
struct Orders {
    locks: LockClient,
    tenant: String,
    paid: Vec<u64>,
}

impl Orders {
    #[tracing::instrument(skip(self))]
    #[distributed_lock(key = "{self.tenant}:order:{id}", client = self.locks)]
    async fn pay(&self, id: u64) -> Result<String, LockError> {
        Ok(current().unwrap().key().to_owned())
    }

    #[distributed_lock(key = "{self.tenant}:order:{id}", client = self.locks)]
    #[tracing::instrument(skip(self))]
    async fn record(&mut self, id: u64) -> Result<String, LockError> {
        self.paid.push(id);
        Ok(current().unwrap().key().to_owned())
    }
}

#[async_trait::async_trait]
trait Refunds {
    async fn refund(&self, id: u64) -> Result<String, LockError>;
}

#[async_trait::async_trait]
impl Refunds for Orders {
    #[distributed_lock(key = "{self.tenant}:order:{id}", client = &self.locks)]
    async fn refund(&self, id: u64) -> Result<String, LockError> {
        // Busy for another owner while the body runs.
        let other = tokio::spawn({
            let locks = self.locks.clone();
            let name = format!("{}:order:{id}", self.tenant);
            async move { locks.lock(name).try_acquire().await }
        });
        assert!(other.await.unwrap()?.is_none());
        Ok(current().unwrap().key().to_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_instrumented_fns_and_async_trait_take_the_lock() {
    let server = RedisServer::start();
    let mut orders = Orders {
        locks: LockClient::connect(&server.url()).await.unwrap(),
        tenant: "acme".to_owned(),
        paid: Vec::new(),
    };
    assert_eq!(orders.pay(8).await.unwrap(), "acme:order:8");
    assert_eq!(orders.record(8).await.unwrap(), "acme:order:8");
    assert_eq!(orders.paid, [8]);
    assert_eq!(orders.refund(8).await.unwrap(), "acme:order:8");
    // Busy while someone else holds it (try once).
    let other = LockClient::connect(&server.url()).await.unwrap();
    let held = other.lock("acme:order:8").acquire().await.unwrap();
    assert!(matches!(
        orders.refund(8).await,
        Err(LockError::Busy { .. })
    ));
    assert!(matches!(orders.pay(8).await, Err(LockError::Busy { .. })));
    held.release().await.unwrap();
}
