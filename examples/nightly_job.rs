//! A scheduled job that runs on one replica at a time (the ShedLock use
//! case): three replicas of a service fire the same schedule at the same
//! moment; `#[distributed_lock(on_busy = skip)]` lets one of them run the
//! job and the others skip that round without waiting.
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

use distributed_lock::{distributed_lock, LockClient, LockError, MemoryStore};

const REPLICAS: usize = 3;
const ROUNDS: usize = 4;
const PERIOD: Duration = Duration::from_millis(1000);
/// How long a run in progress may take to finish after Ctrl-C.
const GRACE: Duration = Duration::from_secs(2);

/// The job. `on_busy = skip`: when another replica holds the lock this
/// returns `None` at once and the body does not run. The watchdog renews the
/// lease for as long as the report takes.
#[distributed_lock(key = "job:nightly-report", on_busy = skip, client = client)]
async fn nightly_report(client: &LockClient, replica: usize) -> Option<u64> {
    let token = distributed_lock::current()
        .expect("inside the job")
        .fencing_token();
    // Stands in for the real work; a store that records the highest
    // fencing token it has seen can refuse a stale run's writes.
    tokio::time::sleep(PERIOD / 3).await;
    println!("  replica {replica}: built the report (fencing token {token})");
    Some(token)
}

/// One replica: its own client (as a separate process would have), firing
/// the schedule every period.
async fn replica(client: LockClient, replica: usize, runs: Arc<AtomicUsize>) {
    let mut schedule = tokio::time::interval(PERIOD);
    for _ in 0..ROUNDS {
        schedule.tick().await;
        match nightly_report(&client, replica).await {
            Some(_) => {
                runs.fetch_add(1, Ordering::SeqCst);
            }
            // After Ctrl-C the client refuses new locks: the round is skipped.
            None if client.is_shutting_down() => return,
            None => println!("  replica {replica}: skipped, another replica runs it"),
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

    println!("{REPLICAS} replicas, {ROUNDS} rounds of the schedule (Ctrl-C to stop):");
    let runs = Arc::new(AtomicUsize::new(0));
    let mut replicas: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(n, client)| tokio::spawn(replica(client.clone(), n, runs.clone())))
        .collect();
    let all_rounds = async {
        for handle in &mut replicas {
            handle.await.expect("replica task");
        }
    };
    let interrupted = tokio::select! {
        () = all_rounds => false,
        _ = tokio::signal::ctrl_c() => true,
    };
    if interrupted {
        println!("Ctrl-C: shutting down (a run in progress has {GRACE:?} to finish)");
    }
    // Each replica's client: no new round starts, a run in progress may
    // finish within the grace period, and the job's lock is released before
    // the process exits (all the replicas' shutdowns run at once).
    let reports =
        futures::future::join_all(clients.iter().map(|client| client.shutdown(GRACE))).await;
    for (n, report) in reports.into_iter().enumerate() {
        let report = report?;
        if report.released_by_holders + report.released_at_deadline > 0 {
            println!("  replica {n}: {report:?}");
        }
    }
    for handle in replicas.into_iter().filter(|h| !h.is_finished()) {
        // Each replica stops at its next tick, as its client refuses the
        // round; a run that overran the grace period has lost its lock.
        let _ = tokio::time::timeout(PERIOD, handle).await;
    }
    let runs = runs.load(Ordering::SeqCst);
    println!("the job ran {runs} times across {REPLICAS} replicas");
    // With one process the rounds are aligned, so each round runs exactly
    // once; replicas in other processes may take some of the rounds.
    if url.is_none() && !interrupted {
        assert_eq!(runs, ROUNDS, "one run per round");
    }
    Ok(())
}
