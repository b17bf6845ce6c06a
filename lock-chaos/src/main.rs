//! `lock-chaos`: a fault-injection harness for distlock.
//!
//! For one backend at a time it starts the Redis servers (or the PostgreSQL server) with the
//! test harness, spawns worker processes (this binary, `lock-chaos worker ...`) whose tasks
//! contend for a few locks and do read-modify-writes on an unfenced and a fenced register, injects faults on
//! a schedule (the nemesis: fixed, or seeded and randomized with state-triggered steps), and
//! checks the recorded history. It prints a table per backend x fault (with the effective
//! injections and 95% upper bounds of the anomaly rates), writes JSON lines with `--out`, and
//! stops by itself. Servers listen on loopback and, when network namespaces are available,
//! on addresses of a private lab bridge whose workers run in namespaces of their own. See
//! RELIABILITY.md for the figures and how to reproduce them.

mod bare_majority;
mod checker;
mod clock;
mod clockshim;
mod event;
mod http;
mod leader;
mod nemesis;
mod netns;
mod proxy;
mod register;
mod replay;
mod run;
mod schedule;
mod settings;
mod sink;
mod task;
mod topology;
mod trigger;
mod worker;
mod workload;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use distlock::LockClient;

use crate::clock::now_ns;
use crate::event::Event;
use crate::topology::{Backend, SENTINEL_MASTER};

/// Fault-injection harness with a history checker.
#[derive(Debug, Parser)]
#[command(name = "lock-chaos")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the workers, the nemesis and the checker on each backend; print the tables.
    Run(RunArgs),
    /// Check a saved history again (`run --history DIR`): the same checker, tables and
    /// violations, without servers.
    Check(CheckArgs),
    /// One worker process (started by `run`).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Backends to run, in order (repeat the flag). Default: all, or with --quick
    /// standalone, sentinel and postgres. `postgres` starts one PostgreSQL server (its
    /// binaries as the test support finds them) and runs the plain-lock and leader
    /// workloads only.
    #[arg(long = "backend", value_enum)]
    backends: Vec<Backend>,
    /// The CI subset: a fixed, short, deterministic list of faults one at a time, a shorter
    /// baseline, every workload (about 3 minutes for standalone and Sentinel, and about
    /// 35 s for postgres).
    #[arg(long)]
    quick: bool,
    /// Seed of the randomized schedule (default: a fresh one, printed first; pass it again
    /// to replay the same schedule).
    #[arg(long)]
    seed: Option<u64>,
    /// `random`: seeded, randomized, overlapping steps, each state-triggered one waiting for
    /// a long hold with a waiter (default without --quick); `fixed`: the fixed list, one
    /// fault at a time (default with --quick).
    #[arg(long, value_enum)]
    schedule: Option<ScheduleKind>,
    /// How many injections per fault kind the randomized schedule aims for (sets the run's
    /// length per backend).
    #[arg(long, default_value_t = 3)]
    per_kind: usize,
    /// Restrict the schedule (randomized or fixed) to these fault kinds, comma-separated,
    /// named as in the tables (e.g. `clock_jump_forward,clock_jump_back`); kinds a backend
    /// does not have are left out for it. Default: every kind of the backend.
    #[arg(long)]
    faults: Option<String>,
    /// Do not use network namespaces (workers reach the servers through the userspace
    /// fault proxy, as on machines without root or iproute2).
    #[arg(long)]
    no_netns: bool,
    /// Sentinel: set `min-replicas-to-write` to this on the data servers (max lag 2 s), for
    /// the split-brain configuration the README recommends; unset by default.
    #[arg(long)]
    min_replicas_to_write: Option<u32>,
    /// How many times each backend's fault list is repeated.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Worker processes per backend.
    #[arg(long, default_value_t = 3)]
    workers: u32,
    /// Tasks per worker (task i uses mode i mod 4: guard+lost() abort, attribute with
    /// abort_on_lost, guard that ignores lost(), plain attribute).
    #[arg(long, default_value_t = 4)]
    tasks: u32,
    /// Lock names the tasks contend for.
    #[arg(long, default_value_t = 3)]
    names: u32,
    /// Watchdog lease of the workers' clients, ms.
    #[arg(long, default_value_t = 1500)]
    lease_ms: u64,
    /// Longest hold, ms (holds are uniform from 10 ms).
    #[arg(long, default_value_t = 300)]
    hold_max_ms: u64,
    /// Workloads beside the plain lock (comma-separated; each runs on names of its own:
    /// fair, rw, sem, multi, at-least, hot, layer, shutdown, redisson, siblings, leader). Default: all, or
    /// with --quick the CI subset. `--plain-only` runs none.
    #[arg(long, value_enum, value_delimiter = ',')]
    workloads: Option<Vec<workload::Workload>>,
    /// Run only the plain-lock tasks.
    #[arg(long, conflicts_with = "workloads")]
    plain_only: bool,
    /// Append the rows and violations as JSON lines to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Keep the raw histories (JSON lines per worker and the nemesis's) in this directory.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Where the fenced register lives: `redis` (lock-fence's `RedisFence`, in the register
    /// store's redis-server), `postgres` (lock-fence's `PgFence`, in a PostgreSQL the run
    /// starts), or `lock-redis` (`RedisFence` on the lock client's `data_connection()`, in
    /// the lock servers themselves, through every fault: the guide's setting for data kept
    /// where the locks live). With `lock-redis`, on Sentinel the fence waits for
    /// `--fence-replicas` replicas (`RedisFence::replicas`, 200 ms) and the lock clients use
    /// `sync_replicas` likewise; on Cluster the fence waits (its lock clients have no
    /// `sync_replicas`); standalone has no replica, so neither waits. The end-of-run check
    /// reads the registers from the current master(s), found by asking the sentinels or the
    /// cluster. Refused for Redlock and memory (no data connection there).
    #[arg(long, value_enum, default_value_t = register::FenceStore::Redis)]
    fence_store: register::FenceStore,
    /// With `--fence-store lock-redis` on Sentinel and Cluster: how many replicas the fence
    /// (and, on Sentinel, the lock clients' `sync_replicas`) waits for; 0 waits for none (the
    /// setting the guide warns against, to show what the check then finds).
    #[arg(long, default_value_t = 1)]
    fence_replicas: u32,
    /// Postgres: the workers' clients run their statements on a deadpool of this many
    /// connections each (`LockClientBuilder::postgres_pool`); 0, the default: a connection
    /// of their own.
    #[arg(long, default_value_t = 0)]
    pg_pool: usize,
    /// Exit with status 1 on any violation: an anomaly (overlap, stale write accepted, token
    /// regression, loss first seen at release, late `lost()`) involving no hold a fault
    /// touched, or a failed register-store check.
    #[arg(long)]
    strict: bool,
    /// Postgres: the server's `synchronous_commit`. `on` (default): every acknowledged
    /// commit survives a crash, so exclusion and token order must hold through
    /// `restart_crash`. `off`: a crash may lose the last commits (lock rows and fence
    /// counters); holds a crash touched are then excused as `data_loss`, tokens must still
    /// rise (the clock floor).
    #[arg(long, value_enum, default_value_t = Switch::On)]
    synchronous_commit: Switch,
}

/// A server setting's `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Switch {
    /// `on`.
    On,
    /// `off`.
    Off,
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// The history: a directory `run --history` wrote (one subdirectory per backend), or one
    /// backend's subdirectory.
    #[arg(long)]
    history: PathBuf,
    /// Check only this backend's history (required when the directory's name is not a
    /// backend's).
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// The workers' lease, ms (default: the one the run recorded, else 1500).
    #[arg(long)]
    lease_ms: Option<u64>,
    /// Write the rows and violations as JSON lines to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Exit with status 1 on any violation.
    #[arg(long)]
    strict: bool,
}

/// Which schedule `run` follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ScheduleKind {
    /// The fixed list, one fault at a time.
    Fixed,
    /// Seeded, randomized, overlapping.
    Random,
}

#[derive(Debug, clap::Args)]
struct WorkerArgs {
    #[arg(long, value_enum)]
    backend: Backend,
    /// Server, seed, sentinel or master URLs (repeat).
    #[arg(long = "url")]
    urls: Vec<String>,
    #[arg(long)]
    register_url: String,
    /// Where the fenced register lives.
    #[arg(long, value_enum, default_value_t = register::FenceStore::Redis)]
    fence_store: register::FenceStore,
    /// The PostgreSQL of the fenced register (a libpq connection string), with
    /// `--fence-store postgres`.
    #[arg(long, required_if_eq("fence_store", "postgres"))]
    fence_postgres: Option<String>,
    /// Replicas the fence and the lock clients wait for, with `--fence-store lock-redis`.
    #[arg(long, default_value_t = 1)]
    fence_replicas: u32,
    /// Postgres: a deadpool of this many connections per client (0: a connection of its own).
    #[arg(long, default_value_t = 0)]
    pg_pool: usize,
    #[arg(long)]
    worker: u32,
    #[arg(long)]
    tasks: u32,
    #[arg(long)]
    names: u32,
    #[arg(long)]
    lease_ms: u64,
    #[arg(long)]
    hold_max_ms: u64,
    /// Stop after this long even if never told to (ms).
    #[arg(long, default_value_t = 900_000)]
    max_duration_ms: u64,
    #[arg(long)]
    events: PathBuf,
    /// Workloads beside the plain lock.
    #[arg(long, value_enum, value_delimiter = ',')]
    workloads: Vec<workload::Workload>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match cli.command {
        Command::Run(args) => runtime.block_on(run_command(args)),
        Command::Check(args) => check_command(args),
        Command::Worker(args) => runtime.block_on(worker_command(args)),
    }
}

async fn run_command(args: RunArgs) -> anyhow::Result<()> {
    let backends = if !args.backends.is_empty() {
        args.backends
    } else if args.quick {
        vec![Backend::Standalone, Backend::Sentinel, Backend::Postgres]
    } else {
        vec![
            Backend::Memory,
            Backend::Standalone,
            Backend::Sentinel,
            Backend::Cluster,
            Backend::Redlock,
            Backend::Postgres,
        ]
    };
    if args.fence_store == register::FenceStore::LockRedis {
        if let Some(b) = backends
            .iter()
            .find(|b| matches!(b, Backend::Memory | Backend::Redlock | Backend::Postgres))
        {
            anyhow::bail!(
                "--fence-store lock-redis keeps the fenced register in the lock's servers through \
                 the lock client's data connection, which the {} backend does not have \
                 (LockError::Unsupported); choose the backends with --backend (standalone, \
                 sentinel, cluster)",
                b.name()
            );
        }
    }
    let faults = match &args.faults {
        Some(list) => Some(schedule::FaultKind::parse_list(list).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let seed = args.seed.unwrap_or_else(schedule::fresh_seed);
    let random = args
        .schedule
        .map_or(!args.quick, |s| s == ScheduleKind::Random);
    println!(
        "seed {seed} (schedule {}{})",
        if random { "random" } else { "fixed" },
        if random {
            format!(", {} per kind", args.per_kind)
        } else {
            String::new()
        }
    );
    let config = run::RunConfig {
        backends,
        quick: args.quick,
        rounds: args.rounds,
        workers: args.workers.max(1),
        tasks: args.tasks.max(1),
        names: args.names.max(1),
        lease: Duration::from_millis(args.lease_ms),
        hold_max_ms: args.hold_max_ms,
        out: args.out,
        history: args.history,
        workloads: match (args.plain_only, args.workloads) {
            (true, _) => Vec::new(),
            (false, Some(list)) => list,
            (false, None) if args.quick => workload::Workload::QUICK.to_vec(),
            (false, None) => workload::Workload::ALL.to_vec(),
        },
        seed,
        random,
        per_kind: args.per_kind.max(1),
        faults,
        netns: !args.no_netns,
        min_replicas: args.min_replicas_to_write,
        fence_store: args.fence_store,
        fence_replicas: args.fence_replicas,
        pg_pool: args.pg_pool,
        synchronous_commit: args.synchronous_commit == Switch::On,
    };
    let reports = run::run(config).await?;
    verdict(&reports, args.strict);
    Ok(())
}

/// Prints the count of violations; with `strict`, exits 1 on any.
fn verdict(reports: &[checker::BackendReport], strict: bool) {
    let violations: usize = reports.iter().map(checker::BackendReport::unexcused).sum();
    if violations > 0 {
        println!(
            "{violations} violation(s): anomalies involving no hold a fault touched (or a \
             register-store check that failed)"
        );
        if strict {
            std::process::exit(1);
        }
    } else {
        println!("no violation: every anomaly involved a hold a fault touched");
    }
}

fn check_command(args: CheckArgs) -> anyhow::Result<()> {
    if let Some(out) = &args.out {
        std::fs::File::create(out)?;
    }
    let lease = args.lease_ms.map(Duration::from_millis);
    let mut reports = Vec::new();
    for (backend, dir) in replay::backend_dirs(&args.history, args.backend)? {
        let report = replay::check_dir(backend, &dir, lease)?;
        println!("{}", report.table());
        if let Some(out) = &args.out {
            report.append_json(out)?;
        }
        reports.push(report);
    }
    println!("{}", checker::summary(&reports));
    verdict(&reports, args.strict);
    Ok(())
}

async fn worker_command(args: WorkerArgs) -> anyhow::Result<()> {
    log_to(&args.events.with_extension("log"))?;
    let lease = Duration::from_millis(args.lease_ms);
    // The Redisson workload puts both layouts in one store on purpose (on names of its
    // own): every client of the run declares the mix.
    let builder = LockClient::builder()
        .lease(lease)
        .response_timeout(settings::RESPONSE_TIMEOUT)
        .connect_timeout(Duration::from_secs(2))
        .allow_mixed_layouts(true);
    let started = now_ns();
    if args.backend == Backend::Memory {
        anyhow::bail!("the memory backend runs inside the harness");
    }
    // With the fenced register in the lock's servers, the locks are replicated as the data
    // is (the guide's setting), where the backend's builder offers it: Sentinel. Cluster's
    // has no `sync_replicas`; standalone has no replica.
    let sync = (args.fence_store == register::FenceStore::LockRedis
        && args.backend == Backend::Sentinel
        && args.fence_replicas > 0)
        .then_some((args.fence_replicas, settings::REPLICA_WAIT));
    // The workloads' other clients: the same settings and servers, and changes of their own.
    let connect: task::ClientFactory = {
        let (backend, urls, pg_pool) = (args.backend, args.urls.clone(), args.pg_pool);
        Arc::new(move |builder: distlock::LockClientBuilder| {
            let urls = urls.clone();
            let builder = builder
                .lease(lease)
                .response_timeout(settings::RESPONSE_TIMEOUT)
                .connect_timeout(Duration::from_secs(2))
                .allow_mixed_layouts(true);
            Box::pin(async move { connect_backend(backend, builder, urls, sync, pg_pool).await })
        })
    };
    let client = loop {
        let attempt = connect_backend(
            args.backend,
            builder.clone(),
            args.urls.clone(),
            sync,
            args.pg_pool,
        )
        .await;
        match attempt {
            Ok(client) => break client,
            Err(e) if now_ns() - started < 30_000_000_000 => {
                eprintln!(
                    "lock-chaos worker {}: connecting: {e}; retrying",
                    args.worker
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e).context("connecting the lock client"),
        }
    };
    let postgres = match args.fence_store {
        register::FenceStore::Redis | register::FenceStore::LockRedis => None,
        register::FenceStore::Postgres => args.fence_postgres.as_deref(),
    };
    let mut registers = register::Registers::connect(&args.register_url, "reg:", postgres).await?;
    if args.fence_store == register::FenceStore::LockRedis {
        registers =
            registers.with_lock_fence(lock_fence(&client, args.backend, args.fence_replicas)?);
    }
    let sink = sink::EventSink::open(&args.events)?;
    sink.emit(&Event::Hello {
        t: now_ns(),
        worker: args.worker,
        pid: std::process::id(),
        client_id: client.id().to_owned(),
    });
    println!("ready {}", client.id());

    let deadline = Arc::new(AtomicU64::new(
        now_ns().saturating_add(args.max_duration_ms.saturating_mul(1_000_000)),
    ));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::spawn({
        let deadline = deadline.clone();
        async move {
            term.recv().await;
            deadline.store(0, Ordering::Relaxed);
        }
    });
    worker::run(worker::WorkerSetup {
        client,
        registers,
        sink,
        worker: args.worker,
        tasks: args.tasks,
        names: (0..args.names).map(|i| format!("chaos-{i}")).collect(),
        hold_max_ms: args.hold_max_ms,
        lease,
        deadline_ns: deadline,
        workloads: args.workloads,
        connect: Some(connect),
        http_dir: args.events.parent().map(std::path::Path::to_path_buf),
        http_host: http::own_address(&args.urls),
    })
    .await;
    Ok(())
}

/// The fenced register's fence in the lock's servers (`--fence-store lock-redis`): on the
/// lock client's data connection, waiting for `replicas` replicas on Sentinel and Cluster.
/// Standalone has no replica (every `WAIT` would answer 0, every operation
/// `NotReplicated`), so its fence does not wait. Redlock and memory have no data connection.
fn lock_fence(
    client: &LockClient,
    backend: Backend,
    replicas: u32,
) -> anyhow::Result<distlock::fence::RedisFence<distlock::DataConnection>> {
    let data = client.data_connection().with_context(|| {
        format!(
            "--fence-store lock-redis needs the lock client's data connection, which {} does not have",
            backend.name()
        )
    })?;
    let fence = distlock::fence::RedisFence::new(data);
    Ok(match backend {
        Backend::Sentinel | Backend::Cluster if replicas > 0 => {
            fence.replicas(replicas, settings::REPLICA_WAIT)?
        }
        _ => fence,
    })
}

/// Connects a client of `backend` at `urls`, with `sync_replicas` when given (Sentinel),
/// on a deadpool of `pg_pool` connections when not 0 (Postgres).
async fn connect_backend(
    backend: Backend,
    builder: distlock::LockClientBuilder,
    urls: Vec<String>,
    sync: Option<(u32, Duration)>,
    pg_pool: usize,
) -> Result<LockClient, distlock::LockError> {
    match backend {
        Backend::Memory => unreachable!("the memory backend runs inside the harness"),
        Backend::Standalone => builder.connect(&urls[0]).await,
        Backend::Sentinel => match sync {
            Some((n, timeout)) => {
                builder
                    .sentinel(urls, SENTINEL_MASTER)
                    .sync_replicas(n, timeout)
                    .connect()
                    .await
            }
            None => builder.connect_sentinel(urls, SENTINEL_MASTER).await,
        },
        Backend::Cluster => builder.connect_cluster(urls).await,
        Backend::Redlock => builder.connect_redlock(urls).await,
        Backend::Postgres if pg_pool > 0 => {
            let config = tokio_postgres::Config::from_str(&urls[0]).map_err(|e| {
                distlock::LockError::InvalidConfig {
                    key: "*".into(),
                    reason: format!("postgres URL: {e}"),
                }
            })?;
            let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
            let pool = deadpool_postgres::Pool::builder(manager)
                .max_size(pg_pool)
                .build()
                .map_err(|e| distlock::LockError::InvalidConfig {
                    key: "*".into(),
                    reason: format!("the pool: {e}"),
                })?;
            builder.postgres_pool(pool, &urls[0]).connect().await
        }
        Backend::Postgres => builder.postgres(&urls[0]).connect().await,
    }
}

/// Writes the library's warnings and its backends' debug messages (retries, master moves,
/// reconnections) to `path`, each stamped with the monotonic clock of the events, so that a
/// history's anomaly can be read beside what the client did.
fn log_to(path: &std::path::Path) -> anyhow::Result<()> {
    struct Monotonic;
    impl tracing_subscriber::fmt::time::FormatTime for Monotonic {
        fn format_time(
            &self,
            w: &mut tracing_subscriber::fmt::format::Writer<'_>,
        ) -> std::fmt::Result {
            write!(w, "{}", now_ns())
        }
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    tracing_subscriber::fmt()
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .with_timer(Monotonic)
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "warn,distlock_core::backend=debug",
        ))
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the log: {e}"))
}
