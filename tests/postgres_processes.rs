//! The PostgreSQL backend against real faults: a real server (of each
//! test's own), real OS processes (this test binary run again as
//! `pg_process`), and the faults a deployment meets.
//!
//! - exclusion across 3 processes: each loops acquire -> critical section ->
//!   release on one lock; inside, it creates a marker file exclusively
//!   (`O_EXCL`: it fails when another holder's marker is there) and appends
//!   its token to a log; the log has exactly every entry, and its tokens
//!   strictly increase in the order of entry;
//! - a `SIGKILL`ed holder: another client gets the lock only once the lease
//!   ran out (by the shared clock), not before, with a higher token;
//! - the server restarted (fast shutdown, started again on the same data
//!   directory) within a watchdog lease: tokens keep rising, and the held
//!   lock survives (its renewals connect again within the lease, as the
//!   design promises: transient errors are retried until the deadline);
//! - `pg_terminate_backend` of every session of a holder and of a waiter
//!   (command and `LISTEN` connections): the holder keeps its lock (a later
//!   renewal extends its row through a new connection), and the waiter is
//!   woken by the next release, not by the lease running out;
//! - the server paused (`SIGSTOP` of every server process) for four leases:
//!   the holder's `lost()` fires while the server is still paused (its local
//!   deadline), and the next holder enters only after the first left its
//!   protected section.
//!
//! The tests run one at a time (a mutex): each has a server of its own, and
//! their timings should not compete for the CPU with each other's.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use distlock::LockClient;
use lock_test_support::PostgresServer;

// The child's environment.
const MODE: &str = "PG_PROC_MODE";
const URL: &str = "PG_PROC_URL";
const DIR: &str = "PG_PROC_DIR";
const ROUNDS: &str = "PG_PROC_ROUNDS";
const LEASE_MS: &str = "PG_PROC_LEASE_MS";

/// The schema of every test's locks (each test has a server of its own).
const SCHEMA: &str = "processes";

/// Held by the test that runs (an async mutex: the async tests hold it
/// across their awaits, each on a runtime of its own).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Milliseconds of the system clock, which the server and every process
/// here share.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The server's URL with `name` as the application name of its sessions
/// (to find them in `pg_stat_activity`).
fn url_of(server: &PostgresServer, name: &str) -> String {
    format!("{}?application_name={name}", server.url())
}

async fn client(url: &str, lease: Duration) -> LockClient {
    LockClient::builder()
        .lease(lease)
        .postgres(url)
        .schema(SCHEMA)
        .connect()
        .await
        .unwrap()
}

/// A plain tokio-postgres client of `server`, for the tests' own statements.
async fn sql(server: &PostgresServer) -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(&server.connection_string(), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    client
}

/// A directory of its own for one test's files (removed unless it failed).
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "distlock-pg-processes-{}-{test}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A child process (this binary as `pg_process`), killed on drop.
struct Worker {
    child: Child,
    output: PathBuf,
}

impl Worker {
    fn spawn(mode: &str, env: &[(&str, String)], dir: &Path, n: usize) -> Self {
        let output = dir.join(format!("{mode}-{n}.log"));
        let file = std::fs::File::create(&output).unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "pg_process", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env(MODE, mode)
            .env(DIR, dir)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Worker { child, output }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// Waits (at most `timeout`) for the worker to exit, and asserts it
    /// exited successfully.
    fn wait_success(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "worker {} did not exit within {timeout:?}: {}",
                self.child.id(),
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            status.success(),
            "worker {} failed ({status}): {}",
            self.child.id(),
            self.output()
        );
    }

    /// The first line of its output that has `prefix`, from `prefix` on
    /// (waits at most `timeout` for it).
    fn line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            // The test harness's "test pg_process ... " may start the line.
            if let Some(line) = self
                .output()
                .lines()
                .find_map(|l| l.find(prefix).map(|at| l[at..].to_owned()))
            {
                return line;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "worker exited ({status}) before {prefix:?}: {}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {prefix:?} from the worker within {timeout:?}: {}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Field `n` (0-based, space separated) of `line`, parsed.
fn field<T: std::str::FromStr>(line: &str, n: usize) -> T
where
    T::Err: std::fmt::Debug,
{
    line.split(' ')
        .nth(n)
        .unwrap_or_else(|| panic!("no field {n} in {line:?}"))
        .parse()
        .unwrap_or_else(|err| panic!("field {n} of {line:?}: {err:?}"))
}

const EXCLUSION_ROUNDS: usize = 40;

/// Three processes take one lock in turn, 40 times each: no two are ever
/// inside at once, every entry is logged, tokens rise in the order of entry.
#[test]
fn three_processes_exclude_each_other_and_tokens_rise_in_order_of_entry() {
    let _one = ONE_AT_A_TIME.blocking_lock();
    let server = PostgresServer::start();
    let scratch = Scratch::new("exclusion");
    let env = [
        (URL, url_of(&server, "excl")),
        (ROUNDS, EXCLUSION_ROUNDS.to_string()),
    ];
    let started = Instant::now();
    let mut workers: Vec<Worker> = (0..3)
        .map(|n| Worker::spawn("loop", &env, &scratch.0, n))
        .collect();
    for worker in &mut workers {
        worker.wait_success(Duration::from_secs(120));
    }
    let log = std::fs::read_to_string(scratch.0.join("entries")).unwrap();
    let entries: Vec<(u32, u64)> = log
        .lines()
        .map(|line| (field(line, 0), field(line, 1)))
        .collect();
    assert_eq!(entries.len(), 3 * EXCLUSION_ROUNDS, "{log}");
    let pids: std::collections::BTreeSet<u32> = entries.iter().map(|(pid, _)| *pid).collect();
    assert_eq!(pids.len(), 3, "every process entered: {log}");
    for pair in entries.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "token {} entered after {}: {log}",
            pair[1].1,
            pair[0].1
        );
    }
    assert!(!scratch.0.join("inside").exists(), "a marker was left");
    eprintln!(
        "{} entries of 3 processes in {:?}",
        entries.len(),
        started.elapsed()
    );
}

/// A holder killed with `SIGKILL` (no release, no renewal): the lock is
/// free once its lease has run out, and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_lock_is_taken_after_its_lease_with_a_higher_token() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = PostgresServer::start();
    let scratch = Scratch::new("killed");
    let lease = Duration::from_secs(4);
    let env = [
        (URL, url_of(&server, "killed")),
        (LEASE_MS, lease.as_millis().to_string()),
    ];
    let mut holder = Worker::spawn("hold", &env, &scratch.0, 0);
    let held = holder.line("held ", Duration::from_secs(60));
    let (token, before_ms): (u64, u64) = (field(&held, 1), field(&held, 2));
    holder.child.kill().unwrap();
    holder.child.wait().unwrap();
    let killed_ms = now_ms();
    let other = client(&url_of(&server, "other"), Duration::from_secs(30)).await;
    // Not before the lease: the dead holder's row is still live.
    let early = other.lock("p:killed").try_acquire().await.unwrap();
    assert!(
        early.is_none() || now_ms() >= before_ms + lease.as_millis() as u64,
        "taken at once after the kill"
    );
    let guard = other
        .lock("p:killed")
        .wait(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let got_ms = now_ms();
    // The server gave the holder `lease` from a moment after `before_ms`.
    assert!(
        got_ms >= before_ms + lease.as_millis() as u64,
        "taken {} ms after the holder's acquire, its lease is {lease:?}",
        got_ms - before_ms
    );
    // And not much later: the waiter sleeps until the row's remaining lease.
    assert!(
        got_ms < killed_ms + lease.as_millis() as u64 + 10_000,
        "taken {} ms after the kill",
        got_ms - killed_ms
    );
    assert!(
        guard.fencing_token() > token,
        "{} after {token}",
        guard.fencing_token()
    );
    eprintln!(
        "taken {} ms after the killed holder's acquire (lease {lease:?})",
        got_ms - before_ms
    );
    guard.release().await.unwrap();
}

/// The expiry of lock `p:<name>`'s row, in microseconds of the server's
/// clock (`None`: no row).
async fn expires_us(sql: &tokio_postgres::Client, name: &str) -> Option<i64> {
    sql.query_opt(
        &format!(
            "SELECT (extract(epoch FROM expires_at) * 1000000)::bigint FROM {SCHEMA}.distlock_locks \
             WHERE key = $1"
        ),
        &[&format!("lock:{{{name}}}")],
    )
    .await
    .unwrap()
    .map(|row| row.get(0))
}

/// Waits (at most `timeout`) until `found` gives something.
async fn eventually<T>(timeout: Duration, mut found: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(found) = found().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The server is restarted (fast shutdown, the same data directory, the
/// same port) while a lock is held in watchdog mode: the holder's renewals
/// connect again within the lease and it keeps the lock (nobody else gets
/// it meanwhile), and tokens issued after the restart are above those
/// issued before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_and_a_watchdog_lock_survives_a_server_restart() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut server = PostgresServer::start();
    let lease = Duration::from_secs(15);
    let holder = client(&url_of(&server, "holder"), lease).await;
    let other = client(&url_of(&server, "other"), lease).await;
    let before = other.lock("p:tokens").acquire().await.unwrap();
    let token_before = before.fencing_token();
    before.release().await.unwrap();
    let guard = holder.lock("p:restart").acquire().await.unwrap();

    let restarted = Instant::now();
    server.restart_fast().unwrap();
    let took = restarted.elapsed();
    assert!(
        took < lease / 3,
        "the restart took {took:?}: too slow for this test's lease"
    );
    // A renewal after the restart extends the row: through a new
    // connection, the old one was closed by the shutdown.
    let sql = sql(&server).await;
    let at_restart = expires_us(&sql, "p:restart")
        .await
        .expect("the row survived");
    eventually(lease, async || {
        (expires_us(&sql, "p:restart").await? > at_restart).then_some(())
    })
    .await;
    assert!(guard.is_held(), "the holder lost its lock");
    assert!(
        other
            .lock("p:restart")
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "another client entered while the holder held the lock"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(1), guard.lost())
            .await
            .is_err(),
        "lost() fired"
    );
    let token_held = guard.fencing_token();
    guard.release().await.unwrap();

    let after = other.lock("p:restart").acquire().await.unwrap();
    assert!(after.fencing_token() > token_held);
    after.release().await.unwrap();
    let again = other.lock("p:tokens").acquire().await.unwrap();
    assert!(
        again.fencing_token() > token_before,
        "{} after {token_before}",
        again.fencing_token()
    );
    again.release().await.unwrap();
    eprintln!("restart took {took:?}");
}

/// The pids of the sessions named `name` (their application name) whose
/// last statement was a `LISTEN` (`listen`: true) or anything else.
async fn sessions(sql: &tokio_postgres::Client, name: &str, listen: bool) -> Vec<i32> {
    sql.query(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 \
         AND (query LIKE 'LISTEN %') = $2",
        &[&name, &listen],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect()
}

async fn terminate(sql: &tokio_postgres::Client, pid: i32) {
    let done: bool = sql
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap()
        .get(0);
    assert!(done, "session {pid} terminated");
}

/// Every session of a holder (its command connection) and of a waiter (its
/// command and `LISTEN` connections) is terminated: the holder keeps its
/// lock through a new connection, the waiter listens again and is woken by
/// the release (not by the holder's 15 s lease running out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_connections_are_made_again_keeping_the_lock_and_the_wake_up() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = PostgresServer::start();
    let sql = sql(&server).await;
    let lease = Duration::from_secs(15);
    let holder = client(&url_of(&server, "holder"), lease).await;
    let waiter = client(&url_of(&server, "waiter"), lease).await;
    let guard = holder.lock("p:term").acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock("p:term")
            .wait(Duration::from_secs(120))
            .acquire()
            .await
            .unwrap();
        (now_ms(), guard)
    });
    let old_listen = eventually(Duration::from_secs(10), async || {
        sessions(&sql, "waiter", true).await.first().copied()
    })
    .await;
    let mut old = vec![old_listen];
    old.extend(sessions(&sql, "holder", false).await);
    old.extend(sessions(&sql, "waiter", false).await);
    assert_eq!(
        old.len(),
        3,
        "holder's command, waiter's command and LISTEN"
    );
    let expires_before = expires_us(&sql, "p:term").await.unwrap();
    for pid in &old {
        terminate(&sql, *pid).await;
    }
    // The waiter listens again on a new connection...
    eventually(Duration::from_secs(10), async || {
        let now = sessions(&sql, "waiter", true).await;
        (!now.is_empty() && !now.iter().any(|pid| old.contains(pid))).then_some(())
    })
    .await;
    // ... and the holder renews through a new one (within a period, 5 s).
    eventually(lease, async || {
        (expires_us(&sql, "p:term").await? > expires_before).then_some(())
    })
    .await;
    let holder_now = sessions(&sql, "holder", false).await;
    assert!(
        !holder_now.is_empty() && !holder_now.iter().any(|pid| old.contains(pid)),
        "the holder's command connection: {holder_now:?} after {old:?}"
    );
    assert!(guard.is_held(), "the holder lost its lock");
    assert!(
        !waiting.is_finished(),
        "the waiter entered while it was held"
    );
    // Released just after a renewal: the row has some 15 s left, so only the
    // release's NOTIFY wakes the waiter within 5 s.
    let released = now_ms();
    guard.release().await.unwrap();
    let (got, next) = waiting.await.unwrap();
    let took = got.saturating_sub(released);
    assert!(took < 5_000, "the waiter took {took} ms after the release");
    next.release().await.unwrap();
    eprintln!("the waiter entered {took} ms after the release");
}

/// The server is paused (`SIGSTOP` of every server process) for four
/// leases: the holder's `lost()` fires while it is paused, at its local
/// deadline, and the next holder only enters once the first one has left
/// its protected section.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_makes_the_holder_lose_its_lock_before_anyone_else_enters() {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = PostgresServer::start();
    let lease = Duration::from_secs(2);
    let pause = lease * 4;
    let holder = client(&url_of(&server, "holder"), lease).await;
    let next = client(&url_of(&server, "next"), lease).await;
    let guard = holder.lock("p:paused").acquire().await.unwrap();
    let token = guard.fencing_token();
    // The protected section: `inside` while it runs, left at lost().
    let inside = Arc::new(AtomicBool::new(true));
    let section = {
        let inside = inside.clone();
        tokio::spawn(async move {
            guard.lost().await;
            inside.store(false, Ordering::SeqCst);
            Instant::now()
        })
    };
    // A renewal or two first.
    tokio::time::sleep(lease).await;
    assert!(!section.is_finished(), "lost before the pause");

    let paused = Instant::now();
    server.pause();
    let lost = tokio::time::timeout(pause, section).await;
    let waited = paused.elapsed();
    server.resume();
    let lost_at = lost
        .unwrap_or_else(|_| panic!("lost() did not fire within {pause:?} of the pause"))
        .unwrap();
    let lost_after = lost_at.duration_since(paused);

    // After the pause, the lock is free (by the server's clock, its row
    // expired): the next holder enters, and the first is out by then.
    let second = eventually(Duration::from_secs(30), async || {
        next.lock("p:paused").try_acquire().await.ok().flatten()
    })
    .await;
    assert!(
        !inside.load(Ordering::SeqCst),
        "the next holder entered while the first was inside"
    );
    assert!(second.fencing_token() > token);
    second.release().await.unwrap();
    eprintln!("lost {lost_after:?} after the pause (lease {lease:?}, waited {waited:?})");
}

/// A worker: runs only as a child of the tests above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in child processes by the tests of this file"]
async fn pg_process() {
    let Ok(mode) = std::env::var(MODE) else {
        eprintln!("this test only runs as a child of a test of this file");
        return;
    };
    // Dies with the test that started it, whatever happens there.
    // SAFETY: prctl(2) with an integer argument.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let url = std::env::var(URL).unwrap();
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let pid = std::process::id();
    match mode.as_str() {
        "loop" => {
            let rounds: usize = std::env::var(ROUNDS).unwrap().parse().unwrap();
            let client = client(&url, Duration::from_secs(30)).await;
            let marker = dir.join("inside");
            for round in 0..rounds {
                let guard = client
                    .lock("p:excl")
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                // Fails when another holder's marker is there.
                let mut file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&marker)
                    .unwrap_or_else(|e| {
                        let other = std::fs::read_to_string(&marker).unwrap_or_default();
                        panic!("round {round}: another holder is inside ({other}): {e}")
                    });
                writeln!(file, "{pid} {}", guard.fencing_token()).unwrap();
                let mut log = OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(dir.join("entries"))
                    .unwrap();
                writeln!(log, "{pid} {}", guard.fencing_token()).unwrap();
                tokio::time::sleep(Duration::from_millis(1 + (round % 4) as u64)).await;
                let mine = std::fs::read_to_string(&marker).unwrap();
                assert_eq!(
                    mine,
                    format!("{pid} {}\n", guard.fencing_token()),
                    "round {round}: the marker changed while inside"
                );
                std::fs::remove_file(&marker).unwrap();
                guard.release().await.unwrap();
            }
            client.shutdown(Duration::from_secs(5)).await.unwrap();
        }
        "hold" => {
            let lease = Duration::from_millis(std::env::var(LEASE_MS).unwrap().parse().unwrap());
            let client = client(&url, Duration::from_secs(30)).await;
            let before = now_ms();
            let guard = client
                .lock("p:killed")
                .lease(lease)
                .acquire()
                .await
                .unwrap();
            let mut out = std::io::stdout();
            writeln!(out, "held {} {before}", guard.fencing_token()).unwrap();
            out.flush().unwrap();
            // Killed by the test long before this ends.
            tokio::time::sleep(Duration::from_secs(120)).await;
            drop(guard);
        }
        other => panic!("unknown mode {other}"),
    }
}
