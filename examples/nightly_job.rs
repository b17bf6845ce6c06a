//! A scheduled job that runs on one replica per round (the ShedLock use
//! case): three replicas of a service fire the same schedule, but they
//! started at different times (0, 300 and 700 ms apart here) and the job
//! itself takes a millisecond.
//!
//! The old recipe, `tokio::time::interval` from each replica's start with
//! `#[distributed_lock(on_busy = skip, at_least = ..)]`, ticks at each start
//! time plus multiples of the period: the first replica runs the job and
//! its at-least hold ends before the last replica's timer fires, so a round
//! runs twice. The rounds of `distlock::rounds` come from the wall clock
//! instead: every replica ticks at the same instants (multiples of the
//! period since the Unix epoch, or a cron expression with
//! `Schedule::cron`), whatever its start time, and each tick is a `Round`
//! whose id names the round's lock (`key = "job:report:{round}"`). The
//! at-least hold then only covers the clock skew between hosts (and timer
//! jitter), not the start skew; the fixed `lease` plays `lockAtMostFor` (a
//! replica that dies mid-run holds the round for at most that long). The
//! example runs both and counts the runs.
//!
//! Uses Redis when `REDIS_URL` is set (then run it in several terminals at
//! once to see the replicas of different processes exclude each other),
//! otherwise the in-memory backend shared by the replicas of this process.
//!
//! Ctrl-C shuts the replicas down gracefully: no new round starts, a report
//! being built may finish within the grace period, and the job's lock is
//! released before the process exits (once its minimum hold is over).
//!
//! ```sh
//! cargo run --example nightly_job
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example nightly_job
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::rounds::{Round, Schedule};
use distlock::{distributed_lock, LockClient, LockError, MemoryStore};

const REPLICAS: usize = 3;
const ROUNDS: u64 = 4;
const PERIOD: Duration = Duration::from_millis(1000);
/// How long after the first replica each one starts.
const STARTS: [Duration; REPLICAS] = [
    Duration::ZERO,
    Duration::from_millis(300),
    Duration::from_millis(700),
];
/// How long a run in progress may take to finish after Ctrl-C.
const GRACE: Duration = Duration::from_secs(2);

/// The old recipe: one key, held at least half the period, fired by a timer
/// started with the replica. With replicas started 700 ms apart the hold
/// ends before the last one's timer fires: it runs the round again.
#[distributed_lock(
    key = "job:report-on-timers",
    lease = "10s",
    at_least = "500ms",
    on_busy = skip,
    client = client
)]
async fn report_on_timers(client: &LockClient, replica: usize) -> Option<u64> {
    build_report(replica).await
}

/// The job with rounds from the wall clock: one lock per round
/// (`job:report:29012345`), held at least 500 ms after it was taken (longer
/// than the clock skew between the hosts; as rounds do not share a lock, a
/// longer hold than the period is fine too), at most 10 s. When another
/// replica holds the round's lock this returns `None` at once.
#[distributed_lock(
    key = "job:report:{round}",
    lease = "10s",
    at_least = "500ms",
    on_busy = skip,
    client = client
)]
async fn nightly_report(client: &LockClient, round: Round, replica: usize) -> Option<u64> {
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

/// One replica: its own client (as a separate process would have), started
/// `STARTS[replica]` after the first, running rounds `first..first + ROUNDS`
/// of the schedule (on timers of its own when `on_timers`).
async fn replica(
    client: LockClient,
    replica: usize,
    on_timers: bool,
    first: u64,
    runs: Arc<AtomicUsize>,
) -> Result<(), distlock::rounds::ScheduleError> {
    tokio::time::sleep(STARTS[replica]).await;
    let schedule = Schedule::every(PERIOD)?;
    let mut rounds = schedule.rounds();
    let mut timer = tokio::time::interval(PERIOD);
    for _ in 0..ROUNDS * 3 {
        let ran = if on_timers {
            timer.tick().await;
            // Counted in the round of the wall clock it fired in.
            let now = schedule.round_after(std::time::SystemTime::now())?.id() - 1;
            if now < first {
                continue;
            }
            if now >= first + ROUNDS {
                break;
            }
            report_on_timers(&client, replica).await
        } else {
            let round = rounds.next().await?;
            if round.id() < first {
                continue;
            }
            if round.id() >= first + ROUNDS {
                break;
            }
            nightly_report(&client, round, replica).await
        };
        match ran {
            Some(_) => {
                runs.fetch_add(1, Ordering::SeqCst);
            }
            // After Ctrl-C the client refuses new locks: the round is skipped.
            None if client.is_shutting_down() => return Ok(()),
            None => println!("  replica {replica}: skipped, another replica runs this round"),
        }
    }
    Ok(())
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
        "{REPLICAS} replicas started {STARTS:?} after the first, {ROUNDS} rounds of {PERIOD:?} (Ctrl-C to stop)"
    );
    let mut interrupted = false;
    let mut counted = Vec::new();
    for on_timers in [true, false] {
        println!(
            "{}:",
            if on_timers {
                "timers from each replica's start, at_least = \"500ms\""
            } else {
                "rounds from the wall clock (distlock::rounds), at_least = \"500ms\""
            }
        );
        // Two periods ahead: every replica has started by then.
        let first = Schedule::every(PERIOD)
            .and_then(|s| s.round_after(std::time::SystemTime::now()))
            .map_or(0, |round| round.id() + 1);
        let runs = Arc::new(AtomicUsize::new(0));
        let mut replicas: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(n, client)| {
                tokio::spawn(replica(client.clone(), n, on_timers, first, runs.clone()))
            })
            .collect();
        let all_rounds = async {
            for handle in &mut replicas {
                if let Ok(Err(err)) = handle.await {
                    eprintln!("a replica stopped: {err}");
                }
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
    // With one process the start skew is all there is: the rounds run exactly
    // once each. (Replicas in other processes may take some of the rounds.)
    if url.is_none() && !interrupted {
        assert_eq!(counted.get(1), Some(&(ROUNDS as usize)), "runs per round");
        println!("rounds from the wall clock made it one run per round");
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
