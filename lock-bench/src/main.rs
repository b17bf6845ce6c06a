//! `lock-bench`: distlock side by side with `rslock` and the raw
//! Redis floor (`SET NX PX` + a compare-and-delete `EVALSHA`), in one run,
//! against one Redis.
//!
//! ```text
//! cargo run --release -p lock-bench -- [--url redis://host:port/] [--only W1,W3] [--json]
//! ```
//!
//! Without `--url` it starts its own `redis-server` (no persistence) on a free
//! loopback port. On a machine with two or more CPUs it pins that server to
//! CPU 0 and itself (every thread) to CPU 1 with `taskset -a -c -p`, so that
//! single-client latencies are stable; without `taskset` it warns and runs
//! unpinned. The client runtime then has one worker thread per CPU it may run
//! on (one, when pinned).
//!
//! The workloads (see BENCHMARKS.md for what each measures):
//! W1 uncontended latency, W2 uncontended throughput, W3 contended hand-off,
//! W4 safety (W3 with a read-modify-write counter), W5 many held locks,
//! W6 many waiters. Each figure is printed with its ratio to the floor and to
//! rslock measured in the same run, as a table and as JSON lines.
//!
//! With `--contenders ours,rslock,floor,redisson,redisson-fast`, Redisson
//! (Java, the driver in `lock-bench/redisson`, built once with Maven) runs
//! W1, W2, W3, W3h and W7 in the same run, at its defaults and with its
//! documented speed settings; without Java or Maven those two contenders are
//! skipped with a message (see `redisson.rs`).
//!
//! W7-W9 measure the lock family, which rslock and the floor do not have, so
//! they run for distlock (and W7 for Redisson) only: W7 fair lock (W3's loop, against the
//! plain lock), W8 read-write lock (read throughput against the plain lock;
//! writer wait under read load), W9 semaphore (W3's loop on 4 permits,
//! against its ceiling). Their references are measured in the same run and
//! printed as figures of their own, with the ratios as further figures.
//!
//! W12 (fenced writes, distlock only, opt-in with `--only W12`) measures
//! what `distlock-fence` costs: fenced writes and read-modify-writes
//! against the unfenced commands on the same Redis, and against plain
//! statements on a PostgreSQL this run starts (skipped with a message when
//! the PostgreSQL binaries are missing), with ratios fenced / unfenced.
//!
//! `--postgres` runs W1, W2 and W3h (those of `--only`) on a PostgreSQL this
//! run starts instead (no Redis), for distlock's Postgres backend, a floor
//! of `SELECT 1` statements and, built with the `pg-peers` feature, sqlx's
//! `PgAdvisoryLock` and the `distributed-lock` crate's PostgreSQL lock; then
//! the WAL each writes per acquisition (see `pg.rs`):
//!
//! ```text
//! cargo run --release -p lock-bench --features pg-peers -- --postgres
//! ```
//!
//! W13 (leader election, distlock only, opt-in with `--only W13`) measures
//! the fail-over when the leader's process is killed, the hand-over when it
//! shuts down (and resigns), each against the lease, and how fast 100
//! followers on clients of their own see a change of leader (see
//! `leader.rs`).
#![deny(unreachable_pub)]

mod contenders;
mod family;
mod fence;
mod leader;
mod machine;
mod pg;
mod processes;
mod redisson;
mod report;
mod scale;
mod workloads;

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Parser;

use contenders::{Contender, Floor, Ours, Rslock, LEASE};
use distlock_core::LockClient;
use redisson::Settings;
use report::{ours_only, Figures, Metric, WorkloadResult, CONTENDERS, REDISSON, REDISSON_FAST};
use workloads::{Admin, Contention};

#[global_allocator]
static ALLOC: machine::CountingAlloc = machine::CountingAlloc;

/// Benchmark distlock against rslock and the raw Redis floor.
#[derive(Debug, Parser)]
#[command(name = "lock-bench", version)]
struct Args {
    /// Redis to use; default: start a redis-server on a free loopback port.
    #[arg(long)]
    url: Option<String>,
    /// Workloads to run, comma separated (W1..W13, W1h, W3h).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "W1,W1h,W2,W3,W3h,W4,W5,W6,W7,W8,W9,W10,W11"
    )]
    only: Vec<String>,
    /// Contenders to run, comma separated (ours, rslock, floor, redisson,
    /// redisson-fast; the last two need Java 17+ and Maven).
    #[arg(long, value_delimiter = ',', default_value = "ours,rslock,floor")]
    contenders: Vec<String>,
    /// Redisson version the redisson contenders are built with.
    #[arg(long, default_value = "4.7.0")]
    redisson_version: String,
    /// Netty version of the epoll transport (redisson-fast); default: the
    /// one in lock-bench/redisson/pom.xml, which matches Redisson 4.7.0.
    #[arg(long)]
    redisson_netty: Option<String>,
    /// Sequential acquire + release cycles of the JIT warm-up each Redisson
    /// driver process runs before anything is measured (the same number
    /// again over 64 threads, and 200 contended acquisitions per lock kind).
    #[arg(long, default_value_t = 10_000)]
    redisson_warmup: usize,
    /// W2 for Redisson with one thread per task and the sync API, instead
    /// of one chain of async calls per task.
    #[arg(long)]
    redisson_w2_threads: bool,
    /// W1: measured cycles.
    #[arg(long, default_value_t = 3000)]
    cycles: usize,
    /// W1: warm-up cycles.
    #[arg(long, default_value_t = 300)]
    warmup: usize,
    /// W1: interleaved rounds the cycles are split into.
    #[arg(long, default_value_t = 6)]
    w1_rounds: usize,
    /// W2: tasks, each on its own key.
    #[arg(long, default_value_t = 64)]
    w2_tasks: usize,
    /// W2: seconds per contender.
    #[arg(long, default_value_t = 5.0)]
    w2_secs: f64,
    /// W3/W4/W7/W9: workers on the one key.
    #[arg(long, default_value_t = 16)]
    w3_workers: usize,
    /// W3/W4/W7: acquisitions in all (W9: twice as many).
    #[arg(long, default_value_t = 400)]
    w3_acquisitions: usize,
    /// W3/W4/W7/W9 (and W8's read and write holds): milliseconds the lock is held.
    #[arg(long, default_value_t = 1.0)]
    w3_hold_ms: f64,
    /// W3/W4/W7/W9: milliseconds of work outside the lock.
    #[arg(long, default_value_t = 1.0)]
    w3_work_ms: f64,
    /// W11: locks held at once on the 3-master cluster.
    #[arg(long, default_value_t = 100_000)]
    w11_locks: usize,
    /// W10: processes the W3 workers are spread over.
    #[arg(long, default_value_t = 4)]
    w10_processes: usize,
    /// W1h and W3h: the hot-lock linger, in milliseconds.
    #[arg(long, default_value_t = 100)]
    hot_linger_ms: u64,
    /// W5: locks held at once.
    #[arg(long, default_value_t = 10_000)]
    w5_locks: usize,
    /// W5: renewal period in milliseconds (the lease is three periods).
    #[arg(long, default_value_t = 1000)]
    w5_period_ms: u64,
    /// W6: keys.
    #[arg(long, default_value_t = 1000)]
    w6_keys: usize,
    /// W6: waiters per key.
    #[arg(long, default_value_t = 10)]
    w6_per_key: usize,
    /// W6: microseconds between the holder's releases of successive keys.
    #[arg(long, default_value_t = 1000)]
    w6_pace_us: u64,
    /// W8: tasks of the read throughput part.
    #[arg(long, default_value_t = 16)]
    w8_tasks: usize,
    /// W8: seconds per configuration of the read throughput part, and of
    /// the writer-wait part.
    #[arg(long, default_value_t = 3.0)]
    w8_secs: f64,
    /// W8: reader tasks of the writer-wait part.
    #[arg(long, default_value_t = 8)]
    w8_readers: usize,
    /// W8: milliseconds between the writer's requests.
    #[arg(long, default_value_t = 50)]
    w8_writer_every_ms: u64,
    /// W9: the semaphore's permits.
    #[arg(long, default_value_t = 4)]
    w9_permits: u32,
    /// W12: measured operations per kind (Redis and PostgreSQL).
    #[arg(long, default_value_t = 3000)]
    w12_ops: usize,
    /// W12: warm-up operations per kind.
    #[arg(long, default_value_t = 300)]
    w12_warmup: usize,
    /// W12: interleaved rounds the operations are split into.
    #[arg(long, default_value_t = 6)]
    w12_rounds: usize,
    /// W13: kills of the leader's process, and as many terminations.
    #[arg(long, default_value_t = 30)]
    w13_runs: usize,
    /// W13: the lease of every client, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    w13_lease_ms: u64,
    /// W13: followers of the observe part, each on a client of its own.
    #[arg(long, default_value_t = 100)]
    w13_followers: usize,
    /// W13: elections (and as many resignations) the followers observe.
    #[arg(long, default_value_t = 50)]
    w13_changes: usize,
    /// Run W1, W2 and W3h (those of --only) on a PostgreSQL this run starts,
    /// then measure the WAL written per acquisition, instead of the Redis
    /// workloads (no Redis is started).
    #[arg(long)]
    postgres: bool,
    /// With --postgres: contenders, comma separated (ours, sqlx,
    /// distributed-lock, floor; sqlx and distributed-lock need the `pg-peers`
    /// feature).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ours,sqlx,distributed-lock,floor"
    )]
    pg_contenders: Vec<String>,
    /// With --postgres: acquire + release cycles of the WAL measurement per
    /// contender (0: skip it).
    #[arg(long, default_value_t = 2000)]
    pg_wal_cycles: usize,
    /// Print only the JSON lines.
    #[arg(long)]
    json: bool,
    /// Print INFO commandstats and the SLOWLOG after each workload (to stderr).
    #[arg(long)]
    server_stats: bool,
    /// Do not pin Redis and the client to CPUs.
    #[arg(long)]
    no_pin: bool,
    /// CPU for the redis-server this run starts.
    #[arg(long, default_value_t = 0)]
    redis_cpu: usize,
    /// CPU for this process.
    #[arg(long, default_value_t = 1)]
    client_cpu: usize,
}

fn main() -> Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(processes::CHILD_FLAG) {
        return processes::child_main(argv.get(2..).unwrap_or_default());
    }
    if argv.get(1).map(String::as_str) == Some(leader::CHILD_FLAG) {
        return leader::child_main(argv.get(2..).unwrap_or_default());
    }
    if argv.get(1).map(String::as_str) == Some(pg::CHILD_FLAG) {
        return pg::child_main(argv.get(2..).unwrap_or_default());
    }
    let mut args = Args::parse();
    for workload in &args.only {
        if ![
            "W1", "W1H", "W2", "W3", "W3H", "W4", "W5", "W6", "W7", "W8", "W9", "W10", "W11",
            "W12", "W13",
        ]
        .contains(&workload.to_uppercase().as_str())
        {
            bail!("unknown workload {workload:?}: expected W1..W13, W1h or W3h");
        }
    }
    for contender in &args.contenders {
        if !["ours", "rslock", "floor", "redisson", "redisson-fast"].contains(&contender.as_str()) {
            bail!("unknown contender {contender:?}: expected ours, rslock, floor, redisson or redisson-fast");
        }
    }
    if args.postgres {
        return postgres(&args);
    }
    // Built before anything starts (Maven must not compete with a measurement).
    let redisson_build = if runs(&args, "redisson") || runs(&args, "redisson-fast") {
        let build = redisson::build(&args.redisson_version, args.redisson_netty.as_deref())?;
        if build.is_none() {
            args.contenders
                .retain(|c| c != "redisson" && c != "redisson-fast");
        }
        build
    } else {
        None
    };
    let target = machine::Target::start(
        args.url.clone(),
        !args.no_pin,
        args.redis_cpu,
        args.client_cpu,
    );
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    runtime.block_on(run(args, target, workers, redisson_build))
}

/// `--postgres`: the PostgreSQL workloads alone (see `pg.rs`).
fn postgres(args: &Args) -> Result<()> {
    let only: Vec<String> = args
        .only
        .iter()
        .map(|w| w.to_uppercase())
        .filter(|w| {
            let known = ["W1", "W2", "W3H"].contains(&w.as_str());
            if !known {
                eprintln!("# {w}: not a PostgreSQL workload (W1, W2, W3h), skipped");
            }
            known
        })
        .collect();
    let can_pin = !args.no_pin && machine::online_cpus() >= 2;
    if !args.no_pin && !can_pin {
        eprintln!("warning: fewer than 2 CPUs online; not pinning");
    }
    let settings = pg::Settings {
        only,
        contenders: pg::contenders(&args.pg_contenders)?,
        cycles: args.cycles,
        warmup: args.warmup,
        rounds: args.w1_rounds,
        w2_tasks: args.w2_tasks,
        w2_duration: Duration::from_secs_f64(args.w2_secs),
        workers: args.w3_workers,
        acquisitions: args.w3_acquisitions,
        hold: Duration::from_secs_f64(args.w3_hold_ms / 1e3),
        work: Duration::from_secs_f64(args.w3_work_ms / 1e3),
        wal_cycles: args.pg_wal_cycles,
        cpus: can_pin.then_some((args.redis_cpu, args.client_cpu)),
        json: args.json,
    };
    // Pinned before the runtime's threads exist, as the Redis runs are.
    let workers = match settings.cpus {
        Some((_, client_cpu)) => match machine::pin(std::process::id(), client_cpu) {
            Ok(()) => 1,
            Err(why) => {
                eprintln!("warning: client not pinned: {why}");
                std::thread::available_parallelism().map_or(1, |n| n.get())
            }
        },
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    runtime.block_on(pg::run(settings, workers))
}

fn wants(args: &Args, workload: &str) -> bool {
    args.only.iter().any(|w| w.eq_ignore_ascii_case(workload))
}

fn runs(args: &Args, contender: &str) -> bool {
    args.contenders.iter().any(|c| c == contender)
}

async fn run(
    args: Args,
    target: machine::Target,
    workers: usize,
    redisson_build: Option<redisson::Build>,
) -> Result<()> {
    let url = target.url.clone();
    let admin = Admin::connect(&url).await?;
    admin.flush().await?;
    let rtt = admin.ping_rtt(2000).await?;
    let idle_rtt = admin.idle_ping_rtt(300, Duration::from_millis(1)).await?;
    let ours = Ours::connect(&url, LEASE).await?;
    let rslock = Rslock::connect(&url, LEASE).await?;
    let floor = Floor::connect(&url, LEASE).await?;
    let drivers = match redisson_build {
        Some(build) => {
            let which: Vec<Settings> = [
                ("redisson", Settings::Default),
                ("redisson-fast", Settings::Fast),
            ]
            .into_iter()
            .filter(|(name, _)| runs(&args, name))
            .map(|(_, settings)| settings)
            .collect();
            Some(redisson::Drivers::start(build, &url, args.redisson_warmup, &which).await?)
        }
        None => None,
    };
    let mut results = Vec::new();
    let mut header = vec![
        format!(
            "PING round trip p50: {:.1} us back to back, {:.1} us after 1 ms idle",
            rtt.as_secs_f64() * 1e6,
            idle_rtt.as_secs_f64() * 1e6
        ),
        format!(
            "{}; client runtime: {workers} worker thread(s)",
            target.pinning
        ),
        format!("online CPUs: {}", machine::online_cpus()),
    ];
    if let Some(drivers) = &drivers {
        header.push(format!(
            "{}; JIT warm-up per driver process: {} sequential cycles, {} over 64 threads, 200 contended acquisitions on a plain and on a fair lock",
            drivers.pinning().await,
            args.redisson_warmup,
            args.redisson_warmup / 64 * 64
        ));
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        header.push(format!("load average at start: {}", load.trim()));
    }
    if !args.json {
        for line in &header {
            eprintln!("# {line}");
        }
    }

    if wants(&args, "W1") {
        let (cycles, warmup, rounds) = (args.cycles, args.warmup, args.w1_rounds.max(1));
        let per_round = cycles.div_ceil(rounds);
        let mut samples: [workloads::W1Sample; 5] = Default::default();
        admin.flush().await?;
        for round in 0..rounds {
            // Interleaved: every contender runs once per round.
            for (i, name) in ["ours", "rslock", "floor", "redisson", "redisson-fast"]
                .into_iter()
                .enumerate()
            {
                if !runs(&args, name) {
                    continue;
                }
                if !args.json && round == 0 {
                    eprintln!("# W1: {} ...", CONTENDERS[i]);
                }
                let warm = if round == 0 { warmup } else { warmup / 10 };
                let sample = &mut samples[i];
                match i {
                    0 => workloads::w1(&ours, &admin, per_round, warm, sample).await?,
                    1 => workloads::w1(&rslock, &admin, per_round, warm, sample).await?,
                    2 => workloads::w1(&floor, &admin, per_round, warm, sample).await?,
                    _ => {
                        let settings = redisson_settings(i);
                        let drivers = drivers.as_ref().context("redisson drivers")?;
                        let mut driver = drivers.get(settings).await?;
                        redisson::w1(&mut driver, &admin, per_round, warm, sample).await?
                    }
                }
            }
        }
        let names = ["ours", "rslock", "floor", "redisson", "redisson-fast"];
        let mut figures: Figures = Default::default();
        for (i, sample) in samples.into_iter().enumerate() {
            if runs(&args, names[i]) {
                figures[i] = sample.metrics();
            }
        }
        results.push(WorkloadResult {
            id: "W1",
            title: "uncontended latency".into(),
            figures,
            notes: vec![format!(
                "one client, sequential acquire + release of one key, {} cycles per contender after {warmup} warm-up, in {rounds} interleaved rounds (ours, rslock, floor, [redisson, redisson-fast,] ours, ...); Redisson: one thread, tryLock() (fast: tryLock(0, 30 s)) + unlock()",
                per_round * rounds
            )],
        });
    }

    if wants(&args, "W1h") && runs(&args, "ours") {
        let linger = Duration::from_millis(args.hot_linger_ms.max(1));
        let hot = Ours {
            client: LockClient::builder()
                .lease(LEASE)
                .keep_hot(linger)
                .connect(&url)
                .await?,
        };
        let (cycles, warmup, rounds) = (args.cycles, args.warmup, args.w1_rounds.max(1));
        let per_round = cycles.div_ceil(rounds);
        let mut samples: [workloads::W1Sample; 2] = Default::default();
        admin.flush().await?;
        if !args.json {
            eprintln!("# W1h: {} with keep_hot, and the floor ...", CONTENDERS[0]);
        }
        for round in 0..rounds {
            let warm = if round == 0 { warmup } else { warmup / 10 };
            workloads::w1(&hot, &admin, per_round, warm, &mut samples[0]).await?;
            if runs(&args, "floor") {
                workloads::w1(&floor, &admin, per_round, warm, &mut samples[1]).await?;
            }
        }
        let [a, c] = samples;
        let floor_figures = if runs(&args, "floor") {
            c.metrics()
        } else {
            Vec::new()
        };
        results.push(WorkloadResult {
            id: "W1h",
            title: "uncontended latency, hot lock".into(),
            figures: [
                a.metrics(),
                Vec::new(),
                floor_figures,
                Vec::new(),
                Vec::new(),
            ],
            notes: vec![format!(
                "W1 (one client, sequential acquire + release of one key, {} cycles after {warmup} warm-up, {rounds} rounds interleaved with the floor) with `keep_hot({linger:?})`: the lock stays taken between cycles, so a cycle asks the server nothing; x floor = against the two-round-trip floor (SET NX PX, then the compare-and-delete script) of the same run",
                per_round * rounds
            )],
        });
    }

    if wants(&args, "W2") {
        let tasks = args.w2_tasks;
        let duration = Duration::from_secs_f64(args.w2_secs);
        let redisson_api = if args.redisson_w2_threads {
            format!("{tasks} threads on one client, each looping tryLock() + unlock() (sync API)")
        } else {
            format!("{tasks} chains of async calls on one client, each with its own owner id and key, tryLockAsync(id) + unlockAsync(id), the next cycle started when the last completed (no thread per task)")
        };
        let figures = each(&args, &admin, "W2", true, async |c| match c {
            Which::Ours => workloads::w2(&ours, &admin, tasks, duration).await,
            Which::Rslock => workloads::w2(&rslock, &admin, tasks, duration).await,
            Which::Floor => workloads::w2(&floor, &admin, tasks, duration).await,
            Which::Redisson(settings) => {
                let drivers = drivers.as_ref().context("redisson drivers")?;
                let mut driver = drivers.get(settings).await?;
                redisson::w2(
                    &mut driver,
                    &admin,
                    tasks,
                    duration,
                    args.redisson_w2_threads,
                )
                .await
            }
        })
        .await?;
        results.push(WorkloadResult {
            id: "W2",
            title: "uncontended throughput".into(),
            figures,
            notes: vec![format!(
                "{tasks} tasks on one client, each on its own key, acquire + release for {duration:?}; Redisson: {redisson_api}; fast: with a 30 s lease"
            )],
        });
    }

    let contention = Contention {
        workers: args.w3_workers,
        acquisitions: args.w3_acquisitions,
        hold: Duration::from_secs_f64(args.w3_hold_ms / 1e3),
        work: Duration::from_secs_f64(args.w3_work_ms / 1e3),
        wait: Duration::from_secs(30),
    };
    for (id, counter) in [("W3", false), ("W4", true)] {
        if !wants(&args, id) {
            continue;
        }
        let figures = each(&args, &admin, id, !counter, async |c| match c {
            Which::Ours => workloads::w3(&ours, &admin, contention, rtt, idle_rtt, counter).await,
            Which::Rslock => {
                workloads::w3(&rslock, &admin, contention, rtt, idle_rtt, counter).await
            }
            Which::Floor => workloads::w3(&floor, &admin, contention, rtt, idle_rtt, counter).await,
            Which::Redisson(settings) => {
                let drivers = drivers.as_ref().context("redisson drivers")?;
                let mut driver = drivers.get(settings).await?;
                redisson::w3(&mut driver, &admin, contention, (rtt, idle_rtt)).await
            }
        })
        .await?;
        let mut notes = vec![format!(
            "{} workers on one key, one shared client per contender; loop: acquire (wait up to 30 s), hold {:?}, release, {:?} of work; {} acquisitions",
            contention.workers, contention.hold, contention.work, contention.acquisitions
        )];
        if counter {
            notes.push(
                "the hold is GET counter, sleep, SET counter+1 on a separate connection".into(),
            );
        } else {
            notes.push("hand-off: previous holder's release sent -> next holder's acquire returned, counted when the owner changes; ceiling = 1 / (measured hold + PING RTT); idle-PING RTT = a PING sent after 1 ms without traffic, the round trip a request pays here when both cores have gone idle".into());
        }
        notes.push("rslock at its defaults: retry count 3, retry delay random 0-200 ms, `acquire` loops on `lock`; floor: SET NX PX retried as soon as the busy answer is back".into());
        if drivers.is_some() && !counter {
            notes.push("Redisson: the same loop on one RLock of one client, one thread per worker, tryLock(30 s) (fast: tryLock(30 s, lease 30 s)), hold and work with Thread.sleep (about 1.1 ms for 1 ms, tokio's sleep about 2.1 ms: compare the measured hold and x ceiling, not acquisitions/s alone)".into());
        }
        results.push(WorkloadResult {
            id,
            title: if counter {
                "safety (read-modify-write counter under the lock)".into()
            } else {
                "contended hand-off".into()
            },
            figures,
            notes,
        });
    }

    if wants(&args, "W10") && runs(&args, "ours") {
        admin.flush().await?;
        if !args.json {
            eprintln!("# W10: {} ...", CONTENDERS[0]);
        }
        let figures = ours_only(
            processes::w10(&url, &admin, contention, args.w10_processes, None, rtt).await?,
        );
        results.push(WorkloadResult {
            id: "W10",
            title: "contended hand-off across processes".into(),
            figures,
            notes: vec![
                format!(
                    "W3's loop with its {} workers spread over {} processes (one LockClient each, all on the client CPU): acquire (wait up to 60 s), hold {:?}, release, {:?} of work; {} acquisitions in all, drawn as tickets from one Redis counter",
                    contention.workers, args.w10_processes, contention.hold, contention.work, contention.acquisitions
                ),
                "fair share = acquisitions / processes; least share = the process with the fewest acquisitions, over the fair share (target >= 0.5); longest wait / mean wait = the longest single wait of any process over the mean wait of all acquisitions (target <= 10); process changes = consecutive acquisitions (in fencing-token order) by different processes. distlock only: rslock and the floor have no in-client hand-off to weigh".into(),
            ],
        });
    }

    if wants(&args, "W3h") && (runs(&args, "ours") || drivers.is_some()) {
        let linger = Duration::from_millis(args.hot_linger_ms.max(1));
        let mut figures: Figures = Default::default();
        if runs(&args, "ours") {
            admin.flush().await?;
            if !args.json {
                eprintln!("# W3h: {} with keep_hot ...", CONTENDERS[0]);
            }
            figures[0] = processes::w10(&url, &admin, contention, 2, Some(linger), rtt).await?;
        }
        if let Some(drivers) = &drivers {
            for (i, settings) in [
                (REDISSON, Settings::Default),
                (REDISSON_FAST, Settings::Fast),
            ] {
                if !runs(&args, CONTENDERS[i]) {
                    continue;
                }
                admin.flush().await?;
                if !args.json {
                    eprintln!(
                        "# W3h: {} (2 JVM processes, each warmed up first) ...",
                        CONTENDERS[i]
                    );
                }
                figures[i] = processes::across(&admin, contention, 2, rtt, |process, workers| {
                    drivers.w3h_child(settings, process, workers, contention)
                })
                .await?;
            }
        }
        let mut notes = vec![format!(
            "W10 with 2 processes ({} workers each) whose clients keep hot locks (`keep_hot({linger:?})`): a release in the holding process keeps the lock for its own waiters until the other process asks for it; hand-off between processes = the holder's release sent -> the other process's acquire returned (system clock, shared by the processes), target p50 <= 3 PING RTTs",
            contention.workers.div_ceil(2)
        )];
        if drivers.is_some() {
            notes.push(format!(
                "Redisson: the same 2 processes x {} threads, tickets from the same Redis counter, on its plain RLock (it has no hot locks): tryLock(60 s) (fast: with a 30 s lease), hold and work with Thread.sleep; its acquisitions are ordered by the time they were taken (it has no fencing token)",
                contention.workers.div_ceil(2)
            ));
        }
        results.push(WorkloadResult {
            id: "W3h",
            title: "contended hand-off across 2 processes, hot locks".into(),
            figures,
            notes,
        });
    }

    if wants(&args, "W11") && runs(&args, "ours") {
        if !args.json {
            eprintln!("# W11: {} ...", CONTENDERS[0]);
        }
        let period = Duration::from_millis(args.w5_period_ms);
        let figures = ours_only(scale::w11(args.w11_locks, period, 6).await?);
        results.push(WorkloadResult {
            id: "W11",
            title: "many held locks on a cluster".into(),
            figures,
            notes: vec![format!(
                "one client holds {} locks (names bench:w11:N, spread over the slots) on a 3-master cluster this run starts (not pinned), for 6 renewal periods of {period:?} (lease {:?}); renewals = EVALSHA calls on all masters; Redis CPU = used_cpu_user + used_cpu_sys of all masters over the hold. distlock only (rslock has no cluster support)",
                args.w11_locks,
                period * 3
            )],
        });
    }

    if wants(&args, "W5") {
        let (locks, period) = (args.w5_locks, Duration::from_millis(args.w5_period_ms));
        let figures = each(&args, &admin, "W5", false, async |c| match c {
            Which::Ours => workloads::w5::<Ours>(&url, &admin, locks, period, 3).await,
            Which::Rslock => workloads::w5::<Rslock>(&url, &admin, locks, period, 3).await,
            Which::Floor => workloads::w5::<Floor>(&url, &admin, locks, period, 3).await,
            Which::Redisson(_) => Ok(Vec::new()),
        })
        .await?;
        results.push(WorkloadResult {
            id: "W5",
            title: "many held locks".into(),
            figures,
            notes: vec![format!(
                "one client holds {locks} locks for 3 renewal periods of {period:?} (lease {:?}); ours: watchdog (one pipelined batch per period); rslock: `extend` per lock per period (it has no watchdog); floor: one pipeline of compare-and-pexpire per period",
                period * 3
            )],
        });
    }

    if wants(&args, "W6") {
        let (keys, per_key) = (args.w6_keys, args.w6_per_key);
        let pace = Duration::from_micros(args.w6_pace_us);
        let settle = Duration::from_secs(2);
        let figures = each(&args, &admin, "W6", false, async |c| match c {
            Which::Ours => workloads::w6::<Ours>(&url, &admin, keys, per_key, settle, pace).await,
            Which::Rslock => {
                workloads::w6::<Rslock>(&url, &admin, keys, per_key, settle, pace).await
            }
            Which::Floor => workloads::w6_floor(&url, keys, per_key, pace).await,
            Which::Redisson(_) => Ok(Vec::new()),
        })
        .await?;
        results.push(WorkloadResult {
            id: "W6",
            title: "many waiters".into(),
            figures,
            notes: vec![format!(
                "{} waiters ({per_key} per key) on {keys} keys in one process (one client), the keys held by another client, which releases one key every {pace:?}; each waiter acquires, then releases at once (a chain of {per_key} hand-offs per key); wake-up = previous holder's release sent -> this waiter's acquire returned. Floor: PUBLISH sent -> message received on one subscription connection, the same chains at the same pace",
                keys * per_key
            )],
        });
    }

    let family = ["W7", "W8", "W9"];
    if family.iter().any(|id| wants(&args, id)) && !runs(&args, "ours") {
        eprintln!("# W7-W9 measure distlock only: skipped without the `ours` contender");
    } else {
        let bench = family::Bench {
            client: &ours.client,
            admin: &admin,
            rtt,
            server_stats: args.server_stats,
        };
        if wants(&args, "W7") {
            let mut figures =
                alone(&args, "W7", async || family::w7(&bench, contention).await).await?;
            if let Some(drivers) = &drivers {
                for (i, settings) in [
                    (REDISSON, Settings::Default),
                    (REDISSON_FAST, Settings::Fast),
                ] {
                    if !runs(&args, CONTENDERS[i]) {
                        continue;
                    }
                    if !args.json {
                        eprintln!("# W7: {} ...", CONTENDERS[i]);
                    }
                    let mut driver = drivers.get(settings).await?;
                    figures[i] = redisson::w7(&mut driver, &admin, contention, rtt).await?;
                }
            }
            results.push(WorkloadResult {
                id: "W7",
                title: "fair lock (distlock and Redisson; reference: the plain lock, same run)".into(),
                figures,
                notes: vec![
                    format!(
                        "W3's loop on `fair_lock(key)`, then on `lock(key)` (another key, flushed Redis in between): {} workers, one shared client; loop: acquire (wait up to 30 s), hold {:?}, release, {:?} of work; {} acquisitions each",
                        contention.workers, contention.hold, contention.work, contention.acquisitions
                    ),
                    "hand-off as in W3 (release sent -> next holder's acquire returned, when the owner changes); owner changes / (acquisitions - 1) = 1 when every acquisition after the first changed owner; wait = acquire called -> returned; FIFO bound = workers x (measured hold + hand-off p50), the most a waiter queued behind every other worker should wait; PING RTT = back-to-back PING p50".into(),
                    "Redisson: the same loop on getFairLock(key) (RedissonFairLock), then getLock(key), one thread per worker, tryLock(30 s) (fast: with a 30 s lease); its EVALSHA count includes EVAL".into(),
                ],
            });
        }
        if wants(&args, "W8") {
            let settings = family::ReadWrite {
                tasks: args.w8_tasks,
                duration: Duration::from_secs_f64(args.w8_secs),
                readers: args.w8_readers,
                writer_every: Duration::from_millis(args.w8_writer_every_ms),
                hold: contention.hold,
            };
            let figures = alone(&args, "W8a", async || {
                family::w8_reads(&bench, settings).await
            })
            .await?;
            results.push(WorkloadResult {
                id: "W8a",
                title: "read-write lock, read throughput (ours only; references: the plain lock, same run)".into(),
                figures,
                notes: vec![format!(
                    "{} tasks on one shared client, each loop acquire (wait up to 30 s) + release at once, {:?} per configuration: `read_write_lock(key).read()` on one key; `lock(key)` on {} distinct keys (the uncontended ceiling); `lock(key)` on one key (exclusive)",
                    settings.tasks, settings.duration, settings.tasks
                )],
            });
            let figures = alone(&args, "W8b", async || {
                family::w8_writer(&bench, settings).await
            })
            .await?;
            results.push(WorkloadResult {
                id: "W8b",
                title: "read-write lock, writer wait under read load (ours only)".into(),
                figures,
                notes: vec![format!(
                    "{} reader tasks loop read acquire / hold {:?} / release without pause; one writer asks `write().wait(30 s)` every {:?} and holds {:?}; {:?} in all; writer wait = acquire called -> returned; overlaps = a reader inside its hold saw the writer inside its hold or the other way round (must be 0)",
                    settings.readers, settings.hold, settings.writer_every, settings.hold, settings.duration
                )],
            });
        }
        if wants(&args, "W9") {
            let (acquisitions, permits) = (contention.acquisitions * 2, args.w9_permits);
            let figures = alone(&args, "W9", async || {
                family::w9(&bench, contention, acquisitions, permits).await
            })
            .await?;
            results.push(WorkloadResult {
                id: "W9",
                title: "semaphore (ours only; reference: its ceiling)".into(),
                figures,
                notes: vec![format!(
                    "{} workers on `semaphore(key, {permits}).permit()`, one shared client; loop: acquire (wait up to 30 s), hold {:?}, release, {:?} of work; {acquisitions} acquisitions; permits in use counted by the workers (in after acquire returned, out before release sent); ceiling = {permits} / (measured hold + PING RTT p50)",
                    contention.workers, contention.hold, contention.work
                )],
            });
        }
    }

    if wants(&args, "W12") && !runs(&args, "ours") {
        eprintln!("# W12 measures distlock only: skipped without the `ours` contender");
    } else if wants(&args, "W12") {
        let settings = fence::Settings {
            ops: args.w12_ops,
            warmup: args.w12_warmup,
            rounds: args.w12_rounds.max(1),
        };
        let ops = settings.ops.div_ceil(settings.rounds) * settings.rounds;
        let rounds = settings.rounds;
        let warmup = settings.warmup;
        if !args.json {
            eprintln!("# W12r: {} (fenced writes, Redis) ...", CONTENDERS[0]);
        }
        let figures = ours_only(fence::redis(&url, &admin, settings).await?);
        results.push(WorkloadResult {
            id: "W12r",
            title: "fenced writes, Redis (ours only; references: the unfenced commands, same run)".into(),
            figures,
            notes: vec![
                format!(
                    "one client, one task, one multiplexed connection, sequential; {ops} operations per kind after {warmup} warm-up, in {rounds} interleaved rounds (SET, fenced write, fenced write with a new token, GET + SET, fenced update, INCRBY, fenced incr_by, SET, ...); each kind on a key of its own"
                ),
                "SET k v (64 bytes) against RedisFence::write (one EVALSHA: HGET of the fence, SET); new token: each write with a token one higher (one write per lock hold: HGET, HSET of the fence, SET); GET + SET v+1 (two round trips) against RedisFence::update (two EVALSHAs, fenced read then fenced write); INCRBY against RedisFence::incr_by (one EVALSHA). Redis commands / op: INFO commandstats, script-internal calls included; Redis CPU: used_cpu_user + used_cpu_sys over each round. After the run: every counter holds its number of operations, and a write with a lower token is refused".into(),
            ],
        });
        if !args.json {
            eprintln!("# W12p: {} (fenced writes, PostgreSQL) ...", CONTENDERS[0]);
        }
        let cpu = (!args.no_pin && machine::online_cpus() >= 2).then_some(args.redis_cpu);
        if let Some((metrics, pinning)) = fence::postgres(settings, fence::PgRun { cpu }).await? {
            results.push(WorkloadResult {
                id: "W12p",
                title: "fenced writes, PostgreSQL (ours only; references: the plain statements, same run)".into(),
                figures: ours_only(metrics),
                notes: vec![
                    format!(
                        "a PostgreSQL this run starts (fsync and synchronous_commit off; {pinning}); one tokio-postgres client, sequential; {ops} operations per kind after {warmup} warm-up, in {rounds} interleaved rounds; each kind on a row of its own in one table (k text primary key, v bigint, and the fence column)"
                    ),
                    "UPDATE: `UPDATE w12 SET v = $2 WHERE k = $1` prepared once; PgFence::write: prepares its statement on every call (two round trips); fenced UPDATE: PgFence::write_sql prepared once; tx plain RMW: BEGIN, `SELECT v ... FOR UPDATE`, UPDATE v+1, COMMIT (prepared once); tx PgFence RMW: BEGIN, PgFence::read, PgFence::write of v+1, COMMIT; tx fenced RMW: the same with read_sql and write_sql prepared once. backend CPU: the connection's backend process, from /proc/<pid>/schedstat".into(),
                ],
            });
        }
    }

    if wants(&args, "W13") && !runs(&args, "ours") {
        eprintln!("# W13 measures distlock only: skipped without the `ours` contender");
    } else if wants(&args, "W13") {
        let settings = leader::Settings {
            runs: args.w13_runs.max(1),
            lease: Duration::from_millis(args.w13_lease_ms),
            followers: args.w13_followers.max(1),
            changes: args.w13_changes.max(1),
        };
        if !args.json {
            eprintln!("# W13: {} (leader election) ...", CONTENDERS[0]);
        }
        let figures = ours_only(leader::w13(&url, &admin, settings, rtt).await?);
        results.push(WorkloadResult {
            id: "W13",
            title: "leader election (ours only; references: the lease and the PING RTT)".into(),
            figures,
            notes: vec![
                format!(
                    "fail-over: two processes (this program in child mode, each one LockClient with a {:?} lease, on the client CPU) run `election(role).run(work)`; after a random 200-{} ms, the leader's process gets SIGKILL; measured: SIGKILL sent -> the standby's work future running (its first statement reads the system clock); a new standby process is started after each of {} runs",
                    settings.lease,
                    200 + settings.lease.as_millis() / 2,
                    settings.runs
                ),
                format!(
                    "hand-over: the same with SIGTERM, on which the child calls `client.shutdown(5 s)`: the run loop drops the work and resigns, and the standby is woken by the release; {} runs",
                    settings.runs
                ),
                format!(
                    "observe: {} followers in this process, each on a LockClient of its own, loop `observer.changed()`; two other clients take the role in turn with `campaign(Wait::Once)` and `resign()` it, {} times each; measured: campaign (or resign) called -> that view reported by every follower (all {}: the slowest follower per change; each follower: every follower's delay, over all elections)",
                    settings.followers, settings.changes, settings.followers
                ),
            ],
        });
    }

    if args.json {
        for line in report::json_lines(&results) {
            println!("{line}");
        }
    } else {
        println!("{}", report::table(&results));
        print!("{}", report::notes(&results));
        for line in &header {
            println!("- {line}");
        }
        println!();
        for line in report::json_lines(&results) {
            println!("{line}");
        }
    }
    if let Some(drivers) = drivers {
        drivers.quit().await?;
    }
    Ok(())
}

/// Runs `workload` once, for distlock only (each of its parts flushes
/// Redis and prints its own server statistics); the figures go in its
/// column, rslock's and the floor's stay empty.
async fn alone<F>(args: &Args, id: &str, workload: F) -> Result<Figures>
where
    F: AsyncFn() -> Result<Vec<Metric>>,
{
    if !args.json {
        eprintln!("# {id}: {} ...", CONTENDERS[0]);
    }
    Ok(ours_only(workload().await?))
}

#[derive(Debug, Clone, Copy)]
enum Which {
    Ours,
    Rslock,
    Floor,
    Redisson(Settings),
}

/// The Redisson settings of contender column `i` (3 or 4).
fn redisson_settings(i: usize) -> Settings {
    if i == REDISSON_FAST {
        Settings::Fast
    } else {
        Settings::Default
    }
}

/// Runs `workload` for every contender asked for (the Redisson ones when
/// `redisson`), on a flushed Redis each.
async fn each<F>(
    args: &Args,
    admin: &Admin,
    id: &str,
    redisson: bool,
    workload: F,
) -> Result<Figures>
where
    F: AsyncFn(Which) -> Result<Vec<Metric>>,
{
    let mut figures: Figures = Default::default();
    for (i, (which, name)) in [
        (Which::Ours, "ours"),
        (Which::Rslock, "rslock"),
        (Which::Floor, "floor"),
        (Which::Redisson(Settings::Default), "redisson"),
        (Which::Redisson(Settings::Fast), "redisson-fast"),
    ]
    .into_iter()
    .enumerate()
    {
        if !runs(args, name) || (matches!(which, Which::Redisson(_)) && !redisson) {
            continue;
        }
        admin.flush().await?;
        admin.reset_stats().await?;
        if !args.json {
            eprintln!("# {id}: {} ...", CONTENDERS[i]);
        }
        figures[i] = workload(which).await?;
        if args.server_stats {
            server_stats(admin, id, CONTENDERS[i]).await?;
        }
    }
    Ok(figures)
}

/// Prints `INFO commandstats` and the SLOWLOG since the last reset.
async fn server_stats(admin: &Admin, id: &str, contender: &str) -> Result<()> {
    let mut calls: Vec<_> = admin.command_calls().await?.into_iter().collect();
    calls.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    let calls: Vec<String> = calls
        .iter()
        .map(|(name, n)| format!("{name}={n}"))
        .collect();
    eprintln!("#   commandstats {id} {contender}: {}", calls.join(" "));
    for entry in admin.slowlog(5).await? {
        eprintln!("#   slowlog {id} {contender}: {entry}");
    }
    Ok(())
}
