//! Graceful shutdown beyond the behavioural suite (`suite::shutdown_*`, run
//! on every backend): a holder in another OS process that exits on SIGINT,
//! the subscription connection on Redis, the attribute on a client that
//! shuts down, a dropped `shutdown` future, and concurrent calls.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError};
use lock_test_support::RedisServer;
use tokio::time::Instant;

/// The environment of a holder process: the Redis URL and whether it shuts
/// its client down on SIGINT (`shutdown`) or just returns (`exit`).
const HOLDER_URL: &str = "SHUTDOWN_HOLDER_URL";
const HOLDER_MODE: &str = "SHUTDOWN_HOLDER_MODE";
const JOB: &str = "job:nightly";

/// A child process, killed if the test fails before it exits.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs [`holder_process`] in a child process in `mode`, waits until it
/// holds the job's lock, checks the lock's lease in Redis, sends it SIGINT
/// and waits for it to exit. Returns when SIGINT was sent and what the child
/// printed.
fn run_holder(server: &RedisServer, mode: &str) -> (Instant, String) {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args(["--exact", "holder_process", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(HOLDER_URL, server.url())
        .env(HOLDER_MODE, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut holder = Holder(child);
    let mut stdout = BufReader::new(holder.0.stdout.take().unwrap());
    let mut printed = String::new();
    loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the holder exited before holding the lock:\n{printed}"
        );
        printed.push_str(&line);
        if line.contains("holding ") {
            break;
        }
    }
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("lock:{{{JOB}}}"))
        .query(&mut server.conn())
        .unwrap();
    assert!(
        ttl > 25_000,
        "the default 30 s watchdog lease: {ttl} ms left"
    );
    let pid = holder.0.id().to_string();
    let signalled = Instant::now();
    let status = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(status.success());
    stdout.read_to_string(&mut printed).unwrap();
    let status = holder.0.wait().unwrap();
    assert!(status.success(), "the holder failed:\n{printed}");
    (signalled, printed)
}

/// The user's problem, in two OS processes: a service holds `job:nightly`
/// (30 s watchdog lease) in a job that runs on, and gets SIGINT.
///
/// - Without a shutdown (`main` just returns) the lock stays in Redis for
///   the rest of its lease: another replica finds it busy.
/// - With `client.shutdown(grace)` on SIGINT, the lock is released at the
///   end of the grace period, before the process exits: another replica
///   takes it at once.
#[test]
fn a_process_that_shuts_down_on_sigint_frees_its_lock_at_once() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let other = runtime
        .block_on(LockClient::connect(&server.url()))
        .unwrap();
    let try_job = || runtime.block_on(other.lock(JOB).try_acquire()).unwrap();

    // Without the shutdown: busy for the rest of the lease.
    let (_, printed) = run_holder(&server, "exit");
    let guard = try_job();
    assert!(guard.is_none(), "held after the process exited:\n{printed}");
    assert!(runtime.block_on(other.admin().force_release(JOB)).unwrap());

    // With the shutdown: free as soon as the process is gone.
    let (signalled, printed) = run_holder(&server, "shutdown");
    let guard = try_job().unwrap_or_else(|| panic!("the lock outlived the process:\n{printed}"));
    let took = signalled.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "free {took:?} after SIGINT, well within the 30 s lease"
    );
    assert!(
        printed.contains("released_by_holders=0 released_at_deadline=1 not_held=0 failed=0"),
        "{printed}"
    );
    runtime.block_on(guard.release()).unwrap();
}

/// One holder process of [`a_process_that_shuts_down_on_sigint_frees_its_lock_at_once`]:
/// holds `job:nightly` in a job that runs until its lock is lost, and on
/// SIGINT shuts its client down (or, in `exit` mode, just returns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a child process by a_process_that_shuts_down_on_sigint_frees_its_lock_at_once"]
async fn holder_process() {
    let Ok(url) = std::env::var(HOLDER_URL) else {
        eprintln!("this test only runs as a child of a_process_that_shuts_down_on_sigint_frees_its_lock_at_once");
        return;
    };
    let shut_down = std::env::var(HOLDER_MODE).as_deref() == Ok("shutdown");
    // Installed before the parent can send the signal.
    let mut sigint =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).unwrap();
    let client = LockClient::connect(&url).await.unwrap();
    let guard = client.lock(JOB).acquire().await.unwrap();
    println!("holding {JOB} with token {}", guard.fencing_token());
    let job = tokio::spawn(async move {
        guard.lost().await; // the job runs until it is told to stop
        guard
    });
    sigint.recv().await;
    if shut_down {
        let report = client.shutdown(Duration::from_millis(300)).await.unwrap();
        println!(
            "released_by_holders={} released_at_deadline={} not_held={} failed={}",
            report.released_by_holders, report.released_at_deadline, report.not_held, report.failed
        );
        let guard = tokio::time::timeout(Duration::from_secs(5), job)
            .await
            .expect("the job was told its lock is gone")
            .unwrap();
        assert!(!guard.is_held());
    }
}

/// The subscription connection (opened for a waiter) is closed by the
/// shutdown, and the client opens no new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_the_subscription_connection() {
    let server = RedisServer::start();
    let (a, b) = (
        LockClient::connect(&server.url()).await.unwrap(),
        LockClient::connect(&server.url()).await.unwrap(),
    );
    let held = b.lock("shutdown:sub").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let a = a.clone();
        async move {
            a.lock("shutdown:sub")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    let pubsub_clients = || -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut server.conn())
            .unwrap();
        list.lines().count()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while pubsub_clients() == 0 {
        assert!(Instant::now() < deadline, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.close().await.unwrap();
    let result = waiter.await.unwrap();
    assert!(
        matches!(result, Err(LockError::ShuttingDown { .. })),
        "{result:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while pubsub_clients() > 0 {
        assert!(
            Instant::now() < deadline,
            "the subscription connection is still open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    held.release().await.unwrap();
}

#[distributed_lock(key = "shutdown:job", on_busy = skip, client = client)]
async fn scheduled_job(client: &LockClient) -> Option<u64> {
    Some(distlock::current().unwrap().fencing_token())
}

#[distributed_lock(key = "shutdown:pay", client = client)]
async fn pay(client: &LockClient) -> Result<(), LockError> {
    Ok(())
}

/// A scheduled job (`on_busy = skip`) skips its round quietly once its
/// client shuts down; an `on_busy = error` function gets `ShuttingDown`.
#[tokio::test]
async fn annotated_functions_do_not_run_on_a_client_that_shut_down() {
    let client = LockClient::memory();
    assert!(scheduled_job(&client).await.is_some());
    pay(&client).await.unwrap();
    client.close().await.unwrap();
    assert_eq!(scheduled_job(&client).await, None, "skipped");
    let paid = pay(&client).await;
    assert!(
        matches!(paid, Err(LockError::ShuttingDown { ref key, .. }) if key == "shutdown:pay"),
        "{paid:?}"
    );
}

/// Dropping the `shutdown` future does not stop the shutdown: the lock is
/// still released at the end of the grace period, and a later call returns
/// the same report.
#[tokio::test]
async fn a_dropped_shutdown_future_still_shuts_down() {
    let store = distlock::MemoryStore::new();
    let a = LockClient::builder().memory(store.clone()).unwrap();
    let b = LockClient::builder().memory(store).unwrap();
    let guard = a.lock("shutdown:dropped").acquire().await.unwrap();
    let cut = tokio::time::timeout(
        Duration::from_millis(20),
        a.shutdown(Duration::from_millis(200)),
    )
    .await;
    assert!(cut.is_err(), "dropped during the grace period");
    assert!(a.is_shutting_down());
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("taken at the deadline without anyone awaiting the shutdown");
    let report = a.close().await.unwrap();
    assert_eq!(report.released_at_deadline, 1, "{report:?}");
    assert!(b
        .lock("shutdown:dropped")
        .try_acquire()
        .await
        .unwrap()
        .is_some());
}

/// Concurrent calls share one shutdown; one with a shorter grace brings
/// the deadline forward for all of them.
#[tokio::test]
async fn a_shorter_grace_brings_the_deadline_forward() {
    let client = LockClient::memory();
    let _guard = client.lock("shutdown:long").acquire().await.unwrap();
    let started = Instant::now();
    let long = tokio::spawn(client.shutdown(Duration::from_secs(30)));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!long.is_finished());
    let short = client.shutdown(Duration::from_millis(100)).await.unwrap();
    let long = tokio::time::timeout(Duration::from_secs(2), long)
        .await
        .expect("the 30 s grace was cut to the shorter one")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(short, long);
    assert_eq!(short.released_at_deadline, 1, "{short:?}");
}
