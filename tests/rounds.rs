//! Rounds from the wall clock (`distlock::rounds`) across real OS processes:
//! replicas of a scheduled job started at random offsets agree on the round,
//! so each round runs exactly once, where timers started at each process's
//! start (`tokio::time::interval`, the old recipe) run rounds twice or not
//! at all.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::rounds::{Round, Schedule};
use distlock::{distributed_lock, LockClient};
use lock_test_support::RedisServer;

const URL: &str = "ROUNDS_REPLICA_URL";
const MODE: &str = "ROUNDS_REPLICA_MODE";
const FIRST: &str = "ROUNDS_REPLICA_FIRST";
const REPLICAS: usize = 3;
const ROUNDS: u64 = 30;
const PERIOD: Duration = Duration::from_secs(1);

/// A child process, killed if the test fails before it exits.
struct Replica(Child);

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The job, keyed by its round: one lock per round, held at least 5 s after
/// it was taken (far more than the timer jitter of a loaded machine; rounds
/// do not share a lock, so this may exceed the period).
#[distributed_lock(key = "report:{round}", lease = "30s", at_least = "5s", on_busy = skip, client = client)]
async fn report(client: &LockClient, round: Round) -> Option<u64> {
    Some(round.id())
}

/// The old recipe: one key, held at least half the period ("longer than
/// any skew, shorter than the schedule"), fired by each process's timer.
#[distributed_lock(key = "report:interval", lease = "30s", at_least = "500ms", on_busy = skip, client = client)]
async fn report_on_interval(client: &LockClient) -> Option<()> {
    Some(())
}

fn window_of(time: SystemTime) -> u64 {
    let since = time.duration_since(UNIX_EPOCH).unwrap();
    (since.as_nanos() / PERIOD.as_nanos()) as u64
}

/// One replica (run as a child process by the test below): runs the job in
/// rounds `FIRST..FIRST + ROUNDS` and prints `ran <round>` for each run.
#[tokio::test]
#[ignore = "a child process of three_processes_at_random_offsets_run_each_round_once"]
async fn round_replica() {
    let Ok(url) = std::env::var(URL) else {
        return;
    };
    let first: u64 = std::env::var(FIRST).unwrap().parse().unwrap();
    let end = first + ROUNDS;
    let client = LockClient::connect(&url).await.unwrap();
    if std::env::var(MODE).as_deref() == Ok("interval") {
        // Timers from the process's start, as the shutdown guide's recipe had it.
        let mut every = tokio::time::interval(PERIOD);
        loop {
            every.tick().await;
            let window = window_of(SystemTime::now());
            if window >= end {
                break;
            }
            if window >= first && report_on_interval(&client).await.is_some() {
                println!("ran {window}");
            }
        }
        return;
    }
    let mut rounds = Schedule::every(PERIOD).unwrap().rounds();
    loop {
        let round = rounds.next().await.unwrap();
        if round.id() >= end {
            break;
        }
        if round.id() >= first {
            if let Some(id) = report(&client, round).await {
                println!("ran {id}");
            }
        }
    }
}

/// Runs three replicas started at random offsets within two periods and
/// counts the runs of each round.
fn runs_per_round(server: &RedisServer, mode: &str) -> BTreeMap<u64, usize> {
    // Far enough ahead that every replica has started, connected and is
    // waiting, on a busy machine too.
    let first = window_of(SystemTime::now()) + 8;
    let exe = std::env::current_exe().unwrap();
    let mut offsets: Vec<u64> = (0..REPLICAS).map(|_| rand::random_range(0..2000)).collect();
    offsets.sort_unstable();
    eprintln!("{mode}: replicas start at +{offsets:?} ms");
    let mut replicas = Vec::new();
    let mut waited = 0;
    for offset in offsets {
        std::thread::sleep(Duration::from_millis(offset - waited));
        waited = offset;
        let child = Command::new(&exe)
            .args(["--exact", "round_replica", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(URL, server.url())
            .env(MODE, mode)
            .env(FIRST, first.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        replicas.push(Replica(child));
    }
    let mut runs: BTreeMap<u64, usize> = (first..first + ROUNDS).map(|r| (r, 0)).collect();
    for mut replica in replicas {
        let stdout = BufReader::new(replica.0.stdout.take().unwrap());
        for line in stdout.lines() {
            // (The first may follow libtest's `test round_replica ... ` on its line.)
            if let Some((_, round)) = line.unwrap().rsplit_once("ran ") {
                *runs.entry(round.trim().parse().unwrap()).or_default() += 1;
            }
        }
        let status = replica.0.wait().unwrap();
        assert!(status.success(), "a replica failed: {status:?}");
    }
    runs
}

/// Three processes started at random offsets run a job every second for 30
/// rounds: with rounds from the wall clock each round runs exactly once.
/// (`ROUNDS_TEST_MODE=interval` runs the old recipe, timers from each
/// process's start, against the same assertion.)
#[test]
fn three_processes_at_random_offsets_run_each_round_once() {
    let server = RedisServer::start();
    let mode = std::env::var("ROUNDS_TEST_MODE").unwrap_or_else(|_| "rounds".into());
    let runs = runs_per_round(&server, &mode);
    let total: usize = runs.values().sum();
    let twice = runs.values().filter(|n| **n > 1).count();
    let never = runs.values().filter(|n| **n == 0).count();
    eprintln!(
        "{mode}: {total} runs in {ROUNDS} rounds; {twice} rounds ran more than once, {never} never"
    );
    let not_once: Vec<_> = runs.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        not_once.is_empty(),
        "{mode}: rounds not run exactly once (round, runs): {not_once:?}"
    );
}
