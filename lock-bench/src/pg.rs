//! `--postgres`: W1, W2 and W3h on a PostgreSQL this run starts, for
//! distlock's Postgres backend beside two lock crates of crates.io (with
//! the `pg-peers` feature: sqlx's `PgAdvisoryLock` and the
//! `distributed-lock` crate's PostgreSQL lock) and a floor of trivial
//! statements, in one run; then the WAL each contender writes per
//! acquisition (`WALp`), which is what a PostgreSQL operator asks first.
//!
//! The server is [`PostgresServer`]'s (`initdb` into a temporary directory,
//! a free loopback port, `fsync`, `synchronous_commit` and
//! `full_page_writes` off), pinned to the server CPU and this process to
//! the client CPU as the Redis runs pin theirs.

use std::future::Future;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use distlock_core::LockClient;
use lock_test_support::PostgresServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;
use tokio_postgres::{Client, NoTls, Statement};

use crate::contenders::LEASE;
use crate::fence::{parent_of, pin_postgres, postgres_binaries};
use crate::machine::{pin, process_cpu_time};
use crate::processes::{now_us, ChildReport};
use crate::report::{self, micros, percentile, Metric, NamedResult};

/// The contenders of the PostgreSQL workloads, in table order.
pub(crate) const NAMES: [&str; 4] = ["distlock", "sqlx", "distributed-lock", "floor"];
const OURS: usize = 0;
const FLOOR: usize = 3;

/// The first argument that starts this program as a W3hp child.
pub(crate) const CHILD_FLAG: &str = "--pg-w3h-child";

/// The key of W3hp, and its ticket sequence.
const W3H_KEY: &str = "bench:w3h";
const TICKETS: &str = "bench_w3h_tickets";

/// What the PostgreSQL run is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// W1, W2, W3H (upper case) of `--only`.
    pub(crate) only: Vec<String>,
    /// Indexes into [`NAMES`].
    pub(crate) contenders: Vec<usize>,
    pub(crate) cycles: usize,
    pub(crate) warmup: usize,
    pub(crate) rounds: usize,
    pub(crate) w2_tasks: usize,
    pub(crate) w2_duration: Duration,
    pub(crate) workers: usize,
    pub(crate) acquisitions: usize,
    pub(crate) hold: Duration,
    pub(crate) work: Duration,
    /// Acquire + release cycles of the WAL measurement (0: skipped).
    pub(crate) wal_cycles: usize,
    /// (server CPU, client CPU) to pin to, when pinning.
    pub(crate) cpus: Option<(usize, usize)>,
    pub(crate) json: bool,
}

impl Settings {
    fn wants(&self, id: &str) -> bool {
        self.only.iter().any(|w| w == id)
    }
}

/// Parses `--pg-contenders`: names of [`NAMES`] (`ours` for distlock),
/// the peers dropped with a message when this build has no `pg-peers`.
pub(crate) fn contenders(names: &[String]) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for name in names {
        let name = if name == "ours" { "distlock" } else { name };
        let Some(i) = NAMES.iter().position(|n| *n == name) else {
            bail!("unknown PostgreSQL contender {name:?}: expected ours, sqlx, distributed-lock or floor");
        };
        if (i == 1 || i == 2) && !cfg!(feature = "pg-peers") {
            eprintln!(
                "# {name}: skipped, this lock-bench was built without the `pg-peers` feature (cargo run --release -p lock-bench --features pg-peers -- --postgres)"
            );
            continue;
        }
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// One contender, connected.
#[derive(Clone)]
enum Pg {
    /// distlock's Postgres backend: one multiplexed command connection and
    /// one LISTEN connection.
    Ours(LockClient),
    /// Two `SELECT 1` round trips per cycle on one connection.
    Floor(Arc<FloorConn>),
    /// sqlx's `PgAdvisoryLock` on connections of a `PgPool`.
    #[cfg(feature = "pg-peers")]
    Sqlx(sqlx::PgPool),
    /// The `distributed-lock` crate's PostgreSQL lock, on the same pool.
    #[cfg(feature = "pg-peers")]
    Dl(
        Arc<distributed_lock_postgres::PostgresLockProvider>,
        sqlx::PgPool,
    ),
}

struct FloorConn {
    client: Client,
    select: Statement,
}

/// The pool of the peers: `connections` connections, all opened before
/// measuring, without the health check sqlx runs on every checkout by
/// default (`test_before_acquire`: one more round trip per cycle, a cost
/// of the pool, not of the lock).
#[cfg(feature = "pg-peers")]
async fn pool(url: &str, connections: u32) -> Result<sqlx::PgPool> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(connections.max(1))
        .test_before_acquire(false)
        .connect(url)
        .await
        .context("sqlx: connect")?;
    let mut held = Vec::new();
    for _ in 0..connections.max(1) {
        held.push(pool.acquire().await?);
    }
    drop(held);
    Ok(pool)
}

impl Pg {
    /// Connects contender `which` with room for `connections` locks held
    /// at once (the peers' pool size; distlock and the floor use one
    /// connection however many).
    async fn connect(which: usize, url: &str, connections: u32) -> Result<Pg> {
        let _ = connections;
        match which {
            OURS => Ok(Pg::Ours(
                LockClient::builder()
                    .lease(LEASE)
                    .postgres(url)
                    .connect()
                    .await?,
            )),
            #[cfg(feature = "pg-peers")]
            1 => Ok(Pg::Sqlx(pool(url, connections).await?)),
            #[cfg(feature = "pg-peers")]
            2 => {
                let pool = pool(url, connections).await?;
                let provider = distributed_lock_postgres::PostgresLockProvider::builder()
                    .pool(pool.clone())
                    .build()
                    .await
                    .map_err(|err| anyhow::anyhow!("distributed-lock: {err}"))?;
                Ok(Pg::Dl(Arc::new(provider), pool))
            }
            FLOOR => {
                let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
                tokio::spawn(connection);
                let select = client.prepare("SELECT 1").await?;
                Ok(Pg::Floor(Arc::new(FloorConn { client, select })))
            }
            _ => bail!("contender {which} is not in this build"),
        }
    }

    /// One acquisition of `key` (one try without `wait`: an error when
    /// busy), `held` run while it is held, then the release. Returns the
    /// fencing token (0 for the contenders without one).
    async fn cycle<F>(&self, key: &str, wait: Option<Duration>, held: F) -> Result<u64>
    where
        F: Future<Output = ()> + Send,
    {
        match self {
            Pg::Ours(client) => {
                let lock = client.lock(key);
                let guard = match wait {
                    Some(wait) => lock.wait(wait).acquire().await?,
                    None => lock.acquire().await?,
                };
                let token = guard.fencing_token();
                held.await;
                guard.release().await?;
                Ok(token)
            }
            Pg::Floor(floor) => {
                floor.client.query_one(&floor.select, &[]).await?;
                held.await;
                floor.client.query_one(&floor.select, &[]).await?;
                Ok(0)
            }
            #[cfg(feature = "pg-peers")]
            Pg::Sqlx(pool) => {
                let conn = pool.acquire().await?;
                let lock = sqlx::postgres::PgAdvisoryLock::new(key);
                let guard = if wait.is_some() {
                    lock.acquire(conn).await?
                } else {
                    match lock.try_acquire(conn).await? {
                        sqlx::Either::Left(guard) => guard,
                        sqlx::Either::Right(_) => bail!("sqlx: {key} is busy"),
                    }
                };
                held.await;
                drop(guard.release_now().await?);
                Ok(0)
            }
            #[cfg(feature = "pg-peers")]
            Pg::Dl(provider, _) => {
                use distributed_lock_core::traits::{DistributedLock, LockHandle, LockProvider};
                let dl = |err| anyhow::anyhow!("distributed-lock: {err}");
                let lock = provider.create_lock(key);
                let handle = match wait {
                    Some(wait) => lock.acquire(Some(wait)).await.map_err(dl)?,
                    None => match lock.try_acquire().await.map_err(dl)? {
                        Some(handle) => handle,
                        None => bail!("distributed-lock: {key} is busy"),
                    },
                };
                held.await;
                handle.release().await.map_err(dl)?;
                Ok(0)
            }
        }
    }

    /// Closes every connection (their backends exit, which flushes their
    /// statistics).
    async fn close(self) -> Result<()> {
        match self {
            Pg::Ours(client) => drop(client.close().await?),
            Pg::Floor(floor) => drop(floor),
            #[cfg(feature = "pg-peers")]
            Pg::Sqlx(pool) => pool.close().await,
            #[cfg(feature = "pg-peers")]
            Pg::Dl(provider, pool) => {
                drop(provider);
                pool.close().await;
            }
        }
        Ok(())
    }
}

/// CPU time of the server: the postmaster and every process it forked
/// (`/proc/<pid>/schedstat`); `None` when one could not be read.
fn server_cpu(postmaster: u32) -> Option<Duration> {
    let mut total = crate::fence::backend_cpu(postmaster)?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if parent_of(pid) == Some(postmaster) {
            total += crate::fence::backend_cpu(pid).unwrap_or_default();
        }
    }
    Some(total)
}

/// Cycles of one contender over rounds (W1p) or tasks (W2p).
#[derive(Debug, Default)]
struct Sample {
    times: Vec<Duration>,
    elapsed: Duration,
    client_cpu: Duration,
    server_cpu: Option<Duration>,
    cpu_unreadable: bool,
}

impl Sample {
    fn metrics(mut self) -> Vec<Metric> {
        self.times.sort();
        let n = self.times.len().max(1) as f64;
        let mut metrics = vec![
            Metric::higher("cycles/s", "1/s", n / self.elapsed.as_secs_f64()),
            Metric::lower("cycle p50", "us", micros(percentile(&self.times, 0.5))),
            Metric::lower("cycle p99", "us", micros(percentile(&self.times, 0.99))),
            Metric::lower("client CPU / cycle", "us", micros(self.client_cpu) / n),
        ];
        if let (Some(cpu), false) = (self.server_cpu, self.cpu_unreadable) {
            metrics.push(Metric::lower(
                "PostgreSQL CPU / cycle",
                "us",
                micros(cpu) / n,
            ));
        }
        metrics
    }
}

/// Meters client and server CPU over one measurement.
struct Meter {
    postmaster: u32,
    client: Duration,
    server: Option<Duration>,
    started: Instant,
}

impl Meter {
    fn start(postmaster: u32) -> Meter {
        Meter {
            postmaster,
            server: server_cpu(postmaster),
            client: process_cpu_time(),
            started: Instant::now(),
        }
    }

    fn stop(self, sample: &mut Sample) {
        sample.elapsed += self.started.elapsed();
        sample.client_cpu += process_cpu_time().saturating_sub(self.client);
        match (self.server, server_cpu(self.postmaster)) {
            (Some(before), Some(after)) => {
                *sample.server_cpu.get_or_insert_default() += after.saturating_sub(before);
            }
            _ => sample.cpu_unreadable = true,
        }
    }
}

/// The run's server and its admin connection.
struct Run {
    url: String,
    admin: Client,
    postmaster: u32,
    settings: Settings,
    rtt: Duration,
}

/// `--postgres`: starts the server (or says loudly why not and returns),
/// runs the workloads asked for and prints the table, the notes and the
/// JSON lines (only the JSON lines with `--json`).
pub(crate) async fn run(settings: Settings, workers: usize) -> Result<()> {
    if let Err(why) = postgres_binaries() {
        bail!("--postgres needs the PostgreSQL server binaries: {why}; install them (apt-get install -y postgresql) or point DISTLOCK_TEST_PG_BIN at their bin directory");
    }
    let server = match tokio::task::spawn_blocking(PostgresServer::start).await {
        Ok(server) => server,
        Err(err) => bail!("PostgreSQL did not start ({err}; its message is above)"),
    };
    let measured = measure(&server, settings, workers).await;
    tokio::task::spawn_blocking(move || drop(server)).await?;
    measured
}

async fn measure(server: &PostgresServer, settings: Settings, workers: usize) -> Result<()> {
    let url = server.url();
    let (admin, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(connection);
    let backend: i32 = admin
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .get(0);
    let backend = u32::try_from(backend)?;
    let postmaster = parent_of(backend).context("the postmaster of the admin backend")?;
    let mut header = Vec::new();
    match settings.cpus {
        Some((server_cpu, client_cpu)) => {
            match pin_postgres(backend, server_cpu) {
                Ok(n) => header.push(format!(
                    "PostgreSQL ({n} processes, and the backends forked later) pinned to cpu {server_cpu}"
                )),
                Err(why) => {
                    eprintln!("warning: PostgreSQL not pinned: {why}");
                    header.push("PostgreSQL not pinned".to_owned());
                }
            }
            match pin(std::process::id(), client_cpu) {
                Ok(()) => header.push(format!(
                    "client (and the W3hp child processes) pinned to cpu {client_cpu}"
                )),
                Err(why) => {
                    eprintln!("warning: client not pinned: {why}");
                    header.push("client not pinned".to_owned());
                }
            }
        }
        None => header.push("not pinned".to_owned()),
    }
    let version: String = admin.query_one("SHOW server_version", &[]).await?.get(0);
    let mut config = Vec::new();
    for name in [
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "wal_level",
        "max_connections",
    ] {
        let value: String = admin.query_one(&format!("SHOW {name}"), &[]).await?.get(0);
        config.push(format!("{name}={value}"));
    }
    header.push(format!("PostgreSQL {version}: {}", config.join(", ")));
    let select = admin.prepare("SELECT 1").await?;
    let mut times = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let sent = Instant::now();
        admin.query_one(&select, &[]).await?;
        times.push(sent.elapsed());
    }
    times.sort();
    let rtt = percentile(&times, 0.5);
    header.insert(
        0,
        format!(
            "SELECT 1 round trip p50: {:.1} us back to back",
            micros(rtt)
        ),
    );
    header.push(format!(
        "client runtime: {workers} worker thread(s); online CPUs: {}",
        crate::machine::online_cpus()
    ));
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        header.push(format!("load average at start: {}", load.trim()));
    }
    if !settings.json {
        for line in &header {
            eprintln!("# {line}");
        }
    }
    let run = Run {
        url,
        admin,
        postmaster,
        settings,
        rtt,
    };
    let names: Vec<&str> = NAMES.to_vec();
    let mut results = Vec::new();
    if run.settings.wants("W1") {
        results.push(w1(&run).await?);
    }
    if run.settings.wants("W2") {
        results.push(w2(&run).await?);
    }
    if run.settings.wants("W3H") {
        results.push(w3h(&run).await?);
    }
    if run.settings.wal_cycles > 0 {
        results.push(wal(&run).await?);
    }
    if run.settings.json {
        for line in report::named_json_lines(&results, &names) {
            println!("{line}");
        }
    } else {
        println!("{}", report::named_table(&results, &names));
        print!("{}", report::named_notes(&results));
        for line in &header {
            println!("- {line}");
        }
        println!();
        for line in report::named_json_lines(&results, &names) {
            println!("{line}");
        }
    }
    Ok(())
}

fn progress(run: &Run, id: &str, which: usize) {
    if !run.settings.json {
        eprintln!("# {id}: {} ...", NAMES[which]);
    }
}

/// W1p: one client, sequential acquire + release of one key, in rounds
/// interleaved between the contenders.
async fn w1(run: &Run) -> Result<NamedResult> {
    let s = &run.settings;
    let rounds = s.rounds.max(1);
    let per_round = s.cycles.div_ceil(rounds);
    let mut contenders = Vec::new();
    for &which in &s.contenders {
        contenders.push((which, Pg::connect(which, &run.url, 1).await?));
    }
    let mut samples: Vec<Sample> = NAMES.iter().map(|_| Sample::default()).collect();
    for round in 0..rounds {
        for (which, pg) in &contenders {
            if round == 0 {
                progress(run, "W1p", *which);
            }
            let warm = if round == 0 { s.warmup } else { s.warmup / 10 };
            for _ in 0..warm {
                pg.cycle("bench:w1", None, async {}).await?;
            }
            let sample = &mut samples[*which];
            let meter = Meter::start(run.postmaster);
            for _ in 0..per_round {
                let sent = Instant::now();
                pg.cycle("bench:w1", None, async {}).await?;
                sample.times.push(sent.elapsed());
            }
            meter.stop(sample);
        }
    }
    for (_, pg) in contenders {
        pg.close().await?;
    }
    let mut figures: Vec<Vec<Metric>> = NAMES.iter().map(|_| Vec::new()).collect();
    for (i, sample) in samples.into_iter().enumerate() {
        if s.contenders.contains(&i) {
            figures[i] = sample.metrics();
        }
    }
    Ok(NamedResult {
        id: "W1p",
        title: "uncontended latency, PostgreSQL".into(),
        figures,
        notes: vec![format!(
            "one client, sequential acquire + release of one key, {} cycles per contender after {} warm-up, in {rounds} interleaved rounds; one try per acquire (distlock `lock(key).acquire()`, sqlx `PgAdvisoryLock::try_acquire`, distributed-lock `try_acquire`); PostgreSQL CPU = the postmaster and all its processes (/proc/<pid>/schedstat)",
            per_round * rounds,
            s.warmup
        )],
    })
}

/// W2p: `tasks` tasks, each on its own key, acquire + release for a while.
async fn w2(run: &Run) -> Result<NamedResult> {
    let s = &run.settings;
    let tasks = s.w2_tasks;
    let mut figures: Vec<Vec<Metric>> = NAMES.iter().map(|_| Vec::new()).collect();
    for &which in &s.contenders {
        progress(run, "W2p", which);
        let pg = Pg::connect(which, &run.url, u32::try_from(tasks)?).await?;
        for i in 0..tasks {
            pg.cycle(&format!("bench:w2:{i}"), None, async {}).await?;
        }
        let mut sample = Sample::default();
        let meter = Meter::start(run.postmaster);
        let deadline = Instant::now() + s.w2_duration;
        let mut handles = Vec::with_capacity(tasks);
        for i in 0..tasks {
            let pg = pg.clone();
            handles.push(tokio::spawn(async move {
                let key = format!("bench:w2:{i}");
                let mut times = Vec::with_capacity(4096);
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    pg.cycle(&key, None, async {}).await?;
                    times.push(sent.elapsed());
                }
                anyhow::Ok(times)
            }));
        }
        for handle in handles {
            sample.times.extend(handle.await??);
        }
        meter.stop(&mut sample);
        figures[which] = sample.metrics();
        pg.close().await?;
    }
    Ok(NamedResult {
        id: "W2p",
        title: "uncontended throughput, PostgreSQL".into(),
        figures,
        notes: vec![format!(
            "{tasks} tasks on one client, each on its own key, acquire + release for {:?}; distlock: its one multiplexed command connection; sqlx and distributed-lock: a PgPool of {tasks} connections (a session advisory lock holds its connection), opened before measuring, `test_before_acquire(false)`; floor: two `SELECT 1` per cycle, pipelined on one connection",
            s.w2_duration
        )],
    })
}

/// W3hp: W3h's two processes of 8 workers each, on one key, for every
/// contender but the floor (it has no waiting). distlock's Postgres
/// backend refuses hot locks: its processes use the plain lock.
async fn w3h(run: &Run) -> Result<NamedResult> {
    let s = &run.settings;
    let exe = std::env::current_exe().context("the benchmark's own executable")?;
    let processes = 2;
    let per_process = s.workers.div_ceil(processes).max(1);
    let mut figures: Vec<Vec<Metric>> = NAMES.iter().map(|_| Vec::new()).collect();
    for &which in &s.contenders {
        if which == FLOOR {
            continue;
        }
        progress(run, "W3hp", which);
        run.admin
            .batch_execute(&format!(
                "DROP SEQUENCE IF EXISTS {TICKETS}; CREATE SEQUENCE {TICKETS}"
            ))
            .await?;
        let mut children = Vec::new();
        for process in 0..processes {
            let mut child = tokio::process::Command::new(&exe)
                .arg(CHILD_FLAG)
                .arg(NAMES[which])
                .arg(&run.url)
                .arg(process.to_string())
                .arg(per_process.to_string())
                .arg(s.acquisitions.to_string())
                .arg(s.hold.as_micros().to_string())
                .arg(s.work.as_micros().to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true)
                .spawn()
                .context("start a W3hp child")?;
            let stdin = child.stdin.take().context("child stdin")?;
            let stdout = child.stdout.take().context("child stdout")?;
            let mut lines = BufReader::new(stdout).lines();
            let ready = lines.next_line().await?;
            if ready.as_deref() != Some("ready") {
                bail!("W3hp child {process} did not start: {ready:?}");
            }
            children.push((child, stdin, lines));
        }
        let started = Instant::now();
        for (_, stdin, _) in &mut children {
            stdin.write_all(b"go\n").await?;
            stdin.flush().await?;
        }
        let mut reports = Vec::new();
        for (mut child, _, mut lines) in children {
            let line = lines.next_line().await?.context("a W3hp child's report")?;
            reports.push(serde_json::from_str::<ChildReport>(&line)?);
            let status = child.wait().await?;
            if !status.success() {
                bail!("a W3hp child failed: {status}");
            }
        }
        let elapsed = started.elapsed();
        figures[which] =
            crate::processes::figures(reports, processes, elapsed, run.rtt, "SELECT 1 RTTs");
    }
    Ok(NamedResult {
        id: "W3hp",
        title: "contended hand-off across 2 processes, PostgreSQL".into(),
        figures,
        notes: vec![
            format!(
                "W3h's shape: 2 processes (this program in child mode) of {per_process} workers each on one key; loop: take a ticket (nextval of a sequence, {} in all), acquire (wait up to 60 s), hold {:?}, release, {:?} of work; hand-off between processes = the holder's release sent -> the other process's acquire returned (system clock); in SELECT 1 RTTs = over the back-to-back `SELECT 1` round trip p50",
                s.acquisitions, s.hold, s.work
            ),
            "distlock: one LockClient per process, plain lock (its Postgres backend refuses `keep_hot`, so this is W10 with 2 processes, not hot locks), woken by LISTEN/NOTIFY, acquisitions ordered by fencing token; sqlx: `PgAdvisoryLock::acquire` (a blocking `pg_advisory_lock`: the server queues the waiters and wakes one at the unlock), a pool of one connection per worker; distributed-lock: `acquire(Some(60 s))` (BEGIN, SAVEPOINT, SET LOCAL lock_timeout, `pg_advisory_lock`, COMMIT), the same pool; the peers' acquisitions ordered by when they were taken (no token). Floor: none (nothing to wait on)".into(),
        ],
    })
}

/// Child mode: `--pg-w3h-child <contender> <url> <process> <workers> <acquisitions> <hold µs> <work µs>`.
pub(crate) fn child_main(args: &[String]) -> Result<()> {
    let [name, url, process, workers, total, hold, work] = args else {
        bail!("{CHILD_FLAG} takes: contender url process workers acquisitions hold_us work_us");
    };
    let which = NAMES
        .iter()
        .position(|n| n == name)
        .with_context(|| format!("unknown contender {name:?}"))?;
    let process: usize = process.parse()?;
    let workers: usize = workers.parse()?;
    let total: i64 = total.parse()?;
    let hold = Duration::from_micros(hold.parse()?);
    let work = Duration::from_micros(work.parse()?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let pg = Pg::connect(which, url, u32::try_from(workers)?).await?;
        let (tickets, connection) = tokio_postgres::connect(url, NoTls).await?;
        tokio::spawn(connection);
        let next = tickets
            .prepare(&format!("SELECT nextval('{TICKETS}')"))
            .await?;
        let tickets = Arc::new((tickets, next));
        println!("ready");
        let mut go = String::new();
        BufReader::new(tokio::io::stdin())
            .read_line(&mut go)
            .await?;
        let mut handles = Vec::new();
        for _ in 0..workers {
            let pg = pg.clone();
            let tickets = tickets.clone();
            handles.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let ticket: i64 = tickets.0.query_one(&tickets.1, &[]).await?.get(0);
                    if ticket > total {
                        break;
                    }
                    let asked = Instant::now();
                    let (waited, acquired, released) =
                        (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
                    let token = pg
                        .cycle(W3H_KEY, Some(Duration::from_secs(60)), async {
                            waited.store(asked.elapsed().as_micros() as u64, Ordering::Relaxed);
                            acquired.store(now_us(), Ordering::Relaxed);
                            tokio::time::sleep(hold).await;
                            released.store(now_us(), Ordering::Relaxed);
                        })
                        .await?;
                    mine.push((
                        token,
                        waited.into_inner(),
                        acquired.into_inner(),
                        released.into_inner(),
                    ));
                    tokio::time::sleep(work).await;
                }
                anyhow::Ok(mine)
            }));
        }
        let mut acquisitions = Vec::new();
        for handle in handles {
            acquisitions.extend(handle.await??);
        }
        pg.close().await?;
        let report = ChildReport {
            process,
            acquisitions,
        };
        println!("{}", serde_json::to_string(&report)?);
        anyhow::Ok(())
    })
}

/// What the server's statistics say, read at one instant.
#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    wal_records: i64,
    wal_fpi: i64,
    wal_bytes: f64,
    lsn: f64,
    commits: i64,
    /// Per distlock table (locks, fences): rows inserted, updated (of
    /// which HOT), deleted.
    tables: [[i64; 4]; 2],
}

const TABLES: [&str; 2] = ["distlock_locks", "distlock_fences"];

async fn stats(admin: &Client) -> Result<Stats> {
    let wal = admin
        .query_one(
            "SELECT wal_records, wal_fpi, wal_bytes::float8, \
             pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8 FROM pg_stat_wal",
            &[],
        )
        .await?;
    let commits: i64 = admin
        .query_one(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await?
        .get(0);
    let mut tables = [[0i64; 4]; 2];
    for (i, table) in TABLES.iter().enumerate() {
        if let Some(row) = admin
            .query_opt(
                "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables WHERE relname = $1",
                &[table],
            )
            .await?
        {
            tables[i] = [row.get(0), row.get(1), row.get(2), row.get(3)];
        }
    }
    Ok(Stats {
        wal_records: wal.get(0),
        wal_fpi: wal.get(1),
        wal_bytes: wal.get(2),
        lsn: wal.get(3),
        commits,
        tables,
    })
}

/// Waits until no backend but the admin's is connected to the database
/// (the closed contender's backends have exited and flushed their
/// statistics), up to 10 s.
async fn backends_gone(admin: &Client) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let others: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                &[],
            )
            .await?
            .get(0);
        if others == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("WALp: {others} backends still connected 10 s after the contender closed");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long a backend may keep its statistics before it flushes them
/// when idle (PostgreSQL's PGSTAT_IDLE_INTERVAL, 10 s), and a margin.
const STATS_IDLE_FLUSH: Duration = Duration::from_millis(11_000);

/// WALp: per contender, one client, `wal_cycles` sequential acquire +
/// release cycles of one key; WAL records, bytes and full-page images
/// (pg_stat_wal), WAL bytes by the insert position, commits, and the rows
/// written in distlock's tables, each per cycle.
async fn wal(run: &Run) -> Result<NamedResult> {
    let s = &run.settings;
    let cycles = s.wal_cycles;
    let mut figures: Vec<Vec<Metric>> = NAMES.iter().map(|_| Vec::new()).collect();
    // No autovacuum in the windows: it would vacuum distlock's tables (the
    // dead rows of W1p and W2p) inside another contender's window. Each
    // window starts on vacuumed tables, and distlock's vacuum is measured
    // on its own after its window.
    // (ALTER SYSTEM cannot run in a transaction: one statement a call.)
    run.admin
        .batch_execute("ALTER SYSTEM SET autovacuum = off")
        .await?;
    run.admin.batch_execute("SELECT pg_reload_conf()").await?;
    let measured = wal_windows(run, &mut figures).await;
    run.admin
        .batch_execute("ALTER SYSTEM RESET autovacuum")
        .await?;
    run.admin.batch_execute("SELECT pg_reload_conf()").await?;
    measured?;
    Ok(NamedResult {
        id: "WALp",
        title: "WAL per acquisition, PostgreSQL".into(),
        figures,
        notes: vec![format!(
            "per contender: one client, {cycles} sequential acquire + release cycles of one key after 100 warm-up, on freshly vacuumed tables, autovacuum off for the measurement, and an 11 s pause (an idle backend flushes its statistics within 10 s); pg_stat_wal read before and after the contender closed its connections (a backend flushes its statistics when it exits); insert LSN: pg_current_wal_insert_lsn() before and right after the cycles (both include the server's own background records in the window, a few per 15 s); commits: pg_stat_database.xact_commit (the measuring queries' own few commits included); rows: pg_stat_user_tables of distlock's tables; VACUUM: the WAL of `VACUUM` of distlock's two tables right after its window (the dead rows the cycles left), per cycle. Advisory locks and SELECT 1 write no WAL (no transaction id is assigned)"
        )],
    })
}

/// The windows of [`wal`], one per contender, into `figures`.
async fn wal_windows(run: &Run, figures: &mut [Vec<Metric>]) -> Result<()> {
    let s = &run.settings;
    let cycles = s.wal_cycles;
    let n = cycles as f64;
    for &which in &s.contenders {
        progress(run, "WALp", which);
        vacuum(&run.admin).await?;
        let pg = Pg::connect(which, &run.url, 1).await?;
        for _ in 0..100 {
            pg.cycle("bench:wal", None, async {}).await?;
        }
        // Let the backends flush what they did so far (their connect, the
        // warm-up): an idle backend flushes its statistics at most every
        // 10 s.
        tokio::time::sleep(STATS_IDLE_FLUSH).await;
        let before = stats(&run.admin).await?;
        for _ in 0..cycles {
            pg.cycle("bench:wal", None, async {}).await?;
        }
        let lsn_after = lsn(&run.admin).await?;
        // The backends flush the rest when they exit.
        pg.close().await?;
        backends_gone(&run.admin).await?;
        let after = stats(&run.admin).await?;
        let mut metrics = vec![
            Metric::lower(
                "WAL bytes / acquisition (pg_stat_wal)",
                "bytes",
                (after.wal_bytes - before.wal_bytes) / n,
            ),
            Metric::lower(
                "WAL bytes / acquisition (insert LSN)",
                "bytes",
                (lsn_after - before.lsn) / n,
            ),
            Metric::lower(
                "WAL records / acquisition",
                "count",
                (after.wal_records - before.wal_records) as f64 / n,
            ),
            Metric::info(
                "WAL full-page images / acquisition",
                "count",
                (after.wal_fpi - before.wal_fpi) as f64 / n,
            ),
            Metric::lower(
                "commits / acquisition",
                "count",
                (after.commits - before.commits) as f64 / n,
            ),
        ];
        if which == OURS {
            let unvacuumed = lsn(&run.admin).await?;
            vacuum(&run.admin).await?;
            metrics.push(Metric::lower(
                "VACUUM WAL bytes / acquisition (afterwards)",
                "bytes",
                (lsn(&run.admin).await? - unvacuumed) / n,
            ));
            for (t, table) in TABLES.iter().enumerate() {
                for (k, what) in ["inserted", "updated", "of which HOT", "deleted"]
                    .iter()
                    .enumerate()
                {
                    metrics.push(Metric::info(
                        format!("{table}: rows {what} / acquisition"),
                        "rows",
                        (after.tables[t][k] - before.tables[t][k]) as f64 / n,
                    ));
                }
            }
        }
        figures[which] = metrics;
    }
    Ok(())
}

/// The WAL insert position, in bytes.
async fn lsn(admin: &Client) -> Result<f64> {
    Ok(admin
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::float8",
            &[],
        )
        .await?
        .get(0))
}

/// `VACUUM` of distlock's tables, when they exist.
async fn vacuum(admin: &Client) -> Result<()> {
    for table in TABLES {
        let exists: bool = admin
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await?
            .get(0);
        if exists {
            admin.batch_execute(&format!("VACUUM {table}")).await?;
        }
    }
    Ok(())
}
