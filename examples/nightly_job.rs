//! A scheduled job that runs on one replica per round (the ShedLock use
//! case): three replicas of a service fire the same schedule, but their
//! timers are a little apart (clock skew, start-up jitter: 0, 60 and 150 ms
//! here) and the job itself takes a millisecond.
//! `#[distributed_lock(on_busy = skip)]` alone is not enough then: the first
//! replica runs the job and releases the lock long before the second one's
//! timer fires, so every replica runs every round. `at_least = "500ms"`
//! (ShedLock's `lockAtLeastFor`) keeps the lock held until 500 ms after it
//! was taken, however soon the job returns: the late replicas find it busy
//! and skip. The example runs both versions and counts the runs; the fixed
//! `lease` plays `lockAtMostFor` (a replica that dies mid-run holds the job
//! for at most that long).
//!
//! Uses Redis when `REDIS_URL` is set (then run it in several terminals at
//! once to see the replicas of different processes exclude each other),
//! otherwise the in-memory backend shared by the replicas of this process.
//!
//! Ctrl-C shuts the replicas down gracefully: no new round starts, a report
//! being built may finish within the grace period, and the job's lock is
//! released before the process exits, so the replicas of other processes
//! take the next round at once instead of after the lock's 30 s lease.
//!
//! ```sh
//! cargo run --example nightly_job
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example nightly_job
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError, MemoryStore};

const REPLICAS: usize = 3;
const ROUNDS: usize = 4;
const PERIOD: Duration = Duration::from_millis(1000);
/// How far each replica's timer is behind the first one's.
const SKEW: [Duration; REPLICAS] = [
    Duration::ZERO,
    Duration::from_millis(60),
    Duration::from_millis(150),
];
/// How long a run in progress may take to finish after Ctrl-C.
const GRACE: Duration = Duration::from_secs(2);

/// The job as many first write it: `on_busy = skip` only. With skewed
/// timers every replica runs it (the lock is free again by the time the
/// next timer fires).
#[distributed_lock(key = "job:report-naive", lease = "10s", on_busy = skip, client = client)]
async fn naive_report(client: &LockClient, replica: usize) -> Option<u64> {
    build_report(replica).await
}

/// The job with ShedLock's pair: held at least 500 ms after it started
/// (half the period: longer than any skew, shorter than the schedule), at
/// most 10 s. When another replica holds the lock this returns `None` at
/// once and the body does not run.
#[distributed_lock(
    key = "job:nightly-report",
    lease = "10s",
    at_least = "500ms",
    on_busy = skip,
    client = client
)]
async fn nightly_report(client: &LockClient, replica: usize) -> Option<u64> {
    build_report(replica).await
}

/// Stands in for the real work: quick. A store that records the highest
/// fencing token it has seen can refuse a stale run's writes.
async fn build_report(replica: usize) -> Option<u64> {
    let token = distlock::current().expect("inside the job").fencing_token();
    tokio::time::sleep(Duration::from_millis(1)).await;
    println!("  replica {replica}: built the report (fencing token {token})");
    Some(token)
}

/// One replica: its own client (as a separate process would have), firing
/// the schedule every period, `skew` after the first replica.
async fn replica(client: LockClient, replica: usize, naive: bool, runs: Arc<AtomicUsize>) {
    tokio::time::sleep(SKEW[replica]).await;
    let mut schedule = tokio::time::interval(PERIOD);
    for _ in 0..ROUNDS {
        schedule.tick().await;
        let ran = if naive {
            naive_report(&client, replica).await
        } else {
            nightly_report(&client, replica).await
        };
        match ran {
            Some(_) => {
                runs.fetch_add(1, Ordering::SeqCst);
            }
            // After Ctrl-C the client refuses new locks: the round is skipped.
            None if client.is_shutting_down() => return,
            None => println!("  replica {replica}: skipped, another replica runs this round"),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let url = std::env::var("REDIS_URL").ok();
    let store = MemoryStore::new();
    match &url {
        Some(_) => println!("backend: Redis"),
        None => println!("backend: in-memory (set REDIS_URL=redis://host:port/ to use Redis)"),
    }
    let mut clients = Vec::new();
    for _ in 0..REPLICAS {
        clients.push(match &url {
            Some(url) => LockClient::connect(url).await?,
            None => LockClient::builder().memory(store.clone())?,
        });
    }
    if let Some(client) = clients.first() {
        println!("server: {}", client.server());
    }

    println!(
        "{REPLICAS} replicas, timers {SKEW:?} apart, {ROUNDS} rounds of the schedule (Ctrl-C to stop)"
    );
    let mut interrupted = false;
    let mut counted = Vec::new();
    for naive in [true, false] {
        println!(
            "{}:",
            if naive {
                "on_busy = skip alone"
            } else {
                "with at_least = \"500ms\""
            }
        );
        let runs = Arc::new(AtomicUsize::new(0));
        let mut replicas: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(n, client)| tokio::spawn(replica(client.clone(), n, naive, runs.clone())))
            .collect();
        let all_rounds = async {
            for handle in &mut replicas {
                handle.await.expect("replica task");
            }
        };
        interrupted = tokio::select! {
            () = all_rounds => false,
            () = sigint_or_sigterm() => true,
        };
        let runs = runs.load(Ordering::SeqCst);
        println!("  the job ran {runs} times in {ROUNDS} rounds");
        counted.push(runs);
        if interrupted {
            break;
        }
        // Let the last round's minimum hold end before the next version.
        tokio::time::sleep(PERIOD).await;
    }
    if interrupted {
        println!("Ctrl-C or SIGTERM: shutting down (a run in progress has {GRACE:?} to finish)");
    }
    // Each replica's client: no new round starts, a run in progress may
    // finish within the grace period, and the job's lock is released before
    // the process exits (all the replicas' shutdowns run at once); a lock
    // still inside its minimum hold keeps it.
    let reports =
        futures::future::join_all(clients.iter().map(|client| client.shutdown(GRACE))).await;
    for (n, report) in reports.into_iter().enumerate() {
        let report = report?;
        if report.released_by_holders + report.released_at_deadline > 0 {
            println!("  replica {n}: {report:?}");
        }
    }
    // With one process the skew is all there is: the naive version runs on
    // every replica, the fixed one exactly once per round. (Replicas in
    // other processes may take some of the rounds.)
    if url.is_none() && !interrupted {
        assert_eq!(counted, [REPLICAS * ROUNDS, ROUNDS], "runs per version");
        println!("at_least made it one run per round");
    }
    Ok(())
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM, the signal Kubernetes, systemd and
/// docker send before they kill a process.
async fn sigint_or_sigterm() {
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            // No SIGTERM handler (should not happen): wait for Ctrl-C alone.
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
