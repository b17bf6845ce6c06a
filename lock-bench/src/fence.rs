//! W12: what a fenced write costs against an unfenced one, on Redis
//! (`RedisFence`) and on PostgreSQL (`PgFence`). distlock only: each
//! fenced operation and its unfenced reference run in the same run, one
//! client, one task, sequentially, in interleaved rounds after a warm-up;
//! every operation's figures are reported under its own name, and the
//! ratios fenced / unfenced as further figures.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use distlock_fence::{FenceError, PgFence, RedisFence};
use lock_test_support::PostgresServer;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;
use tokio_postgres::{Client, NoTls, Statement};

use crate::machine::{pin, process_cpu_time};
use crate::report::{micros, percentile, Metric};
use crate::workloads::Admin;

/// The token of the holder in the same-token operations: one holder doing
/// many operations, so every operation after the first finds its own
/// token in the fence.
const TOKEN: u64 = 1000;

/// The value of the plain writes (`SET`, fenced write): 64 bytes.
const VALUE: &[u8; 64] = b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// How many operations, how many warm-up operations, in how many rounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Measured operations per kind, split over the rounds.
    pub(crate) ops: usize,
    /// Warm-up operations per kind before the first round (a tenth before
    /// each later round).
    pub(crate) warmup: usize,
    /// Interleaved rounds: every kind runs once per round.
    pub(crate) rounds: usize,
}

impl Settings {
    fn per_round(&self) -> usize {
        self.ops.div_ceil(self.rounds.max(1))
    }

    fn warm(&self, round: usize) -> usize {
        if round == 0 {
            self.warmup
        } else {
            self.warmup / 10
        }
    }
}

/// What one kind of operation measured, over all its rounds.
#[derive(Debug, Default)]
struct Sample {
    times: Vec<Duration>,
    elapsed: Duration,
    client_cpu: Duration,
    /// Redis CPU, or the PostgreSQL backend's; `None` when it could not be read.
    server_cpu: Option<Duration>,
    /// Redis commands (`INFO commandstats`, script-internal calls included).
    commands: u64,
    /// Of which `EVALSHA`.
    scripts: u64,
}

impl Sample {
    fn ops(&self) -> f64 {
        self.times.len().max(1) as f64
    }

    fn rate(&self) -> f64 {
        self.times.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn p50(&self) -> Duration {
        percentile(&self.times, 0.5)
    }

    fn p99(&self) -> Duration {
        percentile(&self.times, 0.99)
    }

    fn server_cpu_per_op(&self) -> Option<f64> {
        self.server_cpu.map(|cpu| micros(cpu) / self.ops())
    }

    /// The figures of one kind, named `<name>: ...`; `server` names the
    /// server whose CPU is measured, `redis` adds the command counts.
    fn metrics(&self, name: &str, server: &str, redis: bool) -> Vec<Metric> {
        let mut metrics = vec![
            Metric::higher(format!("{name}: ops/s"), "1/s", self.rate()),
            Metric::lower(format!("{name}: p50"), "us", micros(self.p50())),
            Metric::lower(format!("{name}: p99"), "us", micros(self.p99())),
            Metric::lower(
                format!("{name}: client CPU / op"),
                "us",
                micros(self.client_cpu) / self.ops(),
            ),
        ];
        if let Some(cpu) = self.server_cpu_per_op() {
            metrics.push(Metric::lower(
                format!("{name}: {server} CPU / op"),
                "us",
                cpu,
            ));
        }
        if redis {
            metrics.push(Metric::lower(
                format!("{name}: Redis commands / op"),
                "cmds",
                self.commands as f64 / self.ops(),
            ));
            metrics.push(Metric::lower(
                format!("{name}: of which EVALSHA / op"),
                "cmds",
                self.scripts as f64 / self.ops(),
            ));
        }
        metrics
    }
}

/// The ratios of `fenced` to `plain`: p50 and server CPU per op (fenced /
/// plain, lower better) and ops/s (fenced / plain, higher better). The
/// p99s are figures of their own; their ratio is too noisy on a shared
/// machine to say more.
fn ratios(fenced: (&str, &Sample), plain: (&str, &Sample), server: &str) -> Vec<Metric> {
    let ((f, fenced), (p, plain)) = (fenced, plain);
    let mut metrics = vec![
        Metric::lower(
            format!("{f} / {p}: p50"),
            "ratio",
            fenced.p50().as_secs_f64() / plain.p50().as_secs_f64(),
        ),
        Metric::higher(
            format!("{f} / {p}: ops/s"),
            "ratio",
            fenced.rate() / plain.rate(),
        ),
    ];
    if let (Some(a), Some(b)) = (fenced.server_cpu_per_op(), plain.server_cpu_per_op()) {
        metrics.push(Metric::lower(
            format!("{f} / {p}: {server} CPU / op"),
            "ratio",
            a / b,
        ));
    }
    metrics
}

/// The Redis side's kinds of operation, in the order they run in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RedisOp {
    /// `SET k v`.
    Set,
    /// `RedisFence::write(k, TOKEN, v)`.
    FencedWrite,
    /// `RedisFence::write` with a new, higher token each time (one write
    /// per lock hold): the fence is updated on every write.
    FencedWriteNewToken,
    /// `GET k`, then `SET k v+1`: the unfenced read-modify-write.
    GetSet,
    /// `RedisFence::update(k, TOKEN, +1)`: fenced read, then fenced write.
    FencedUpdate,
    /// `INCRBY k 1`.
    IncrBy,
    /// `RedisFence::incr_by(k, TOKEN, 1)`.
    FencedIncrBy,
}

impl RedisOp {
    /// Every kind, in declaration order (so `op as usize` indexes them).
    const ALL: [RedisOp; 7] = [
        RedisOp::Set,
        RedisOp::FencedWrite,
        RedisOp::FencedWriteNewToken,
        RedisOp::GetSet,
        RedisOp::FencedUpdate,
        RedisOp::IncrBy,
        RedisOp::FencedIncrBy,
    ];

    fn name(self) -> &'static str {
        match self {
            RedisOp::Set => "SET",
            RedisOp::FencedWrite => "fenced write",
            RedisOp::FencedWriteNewToken => "fenced write, new token",
            RedisOp::GetSet => "GET + SET",
            RedisOp::FencedUpdate => "fenced update",
            RedisOp::IncrBy => "INCRBY",
            RedisOp::FencedIncrBy => "fenced incr_by",
        }
    }

    /// Each kind has a key of its own, so the fences do not meet.
    fn key(self) -> &'static str {
        match self {
            RedisOp::Set => "bench:w12:set",
            RedisOp::FencedWrite => "bench:w12:fenced-write",
            RedisOp::FencedWriteNewToken => "bench:w12:fenced-write-new",
            RedisOp::GetSet => "bench:w12:get-set",
            RedisOp::FencedUpdate => "bench:w12:fenced-update",
            RedisOp::IncrBy => "bench:w12:incrby",
            RedisOp::FencedIncrBy => "bench:w12:fenced-incrby",
        }
    }

    /// Whether the operation adds one to a counter (checked at the end).
    fn counts(self) -> bool {
        matches!(
            self,
            RedisOp::GetSet | RedisOp::FencedUpdate | RedisOp::IncrBy | RedisOp::FencedIncrBy
        )
    }
}

/// The connection and the fence the Redis side runs on: the same
/// multiplexed connection for the fenced and the unfenced operations.
struct RedisSide {
    conn: MultiplexedConnection,
    fence: RedisFence<MultiplexedConnection>,
    /// The token of the next [`RedisOp::FencedWriteNewToken`].
    next_token: u64,
}

impl RedisSide {
    async fn once(&mut self, op: RedisOp) -> Result<()> {
        let key = op.key();
        match op {
            RedisOp::Set => {
                let () = redis::cmd("SET")
                    .arg(key)
                    .arg(VALUE)
                    .query_async(&mut self.conn)
                    .await?;
            }
            RedisOp::FencedWrite => self.fence.write(key, TOKEN, VALUE).await?,
            RedisOp::FencedWriteNewToken => {
                self.next_token += 1;
                self.fence.write(key, self.next_token, VALUE).await?;
            }
            RedisOp::GetSet => {
                let value: Option<i64> = redis::cmd("GET")
                    .arg(key)
                    .query_async(&mut self.conn)
                    .await?;
                let () = redis::cmd("SET")
                    .arg(key)
                    .arg(value.unwrap_or(0) + 1)
                    .query_async(&mut self.conn)
                    .await?;
            }
            RedisOp::FencedUpdate => {
                self.fence
                    .update(key, TOKEN, |value: Option<i64>| value.unwrap_or(0) + 1)
                    .await?;
            }
            RedisOp::IncrBy => {
                let _: i64 = redis::cmd("INCRBY")
                    .arg(key)
                    .arg(1)
                    .query_async(&mut self.conn)
                    .await?;
            }
            RedisOp::FencedIncrBy => {
                self.fence.incr_by(key, TOKEN, 1).await?;
            }
        }
        Ok(())
    }
}

/// W12, Redis: the kinds of [`RedisOp`] on one connection to the
/// benchmark's Redis, interleaved round by round; then checks that every
/// counter holds the number of its operations and that the fence refuses a
/// token below the one that wrote.
pub(crate) async fn redis(url: &str, admin: &Admin, settings: Settings) -> Result<Vec<Metric>> {
    let conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
        .context("connect to Redis")?;
    let mut side = RedisSide {
        fence: RedisFence::new(conn.clone()),
        conn,
        next_token: TOKEN,
    };
    admin.flush().await?;
    let mut samples: [Sample; RedisOp::ALL.len()] = Default::default();
    let mut done = [0u64; RedisOp::ALL.len()];
    for round in 0..settings.rounds.max(1) {
        for (i, op) in RedisOp::ALL.into_iter().enumerate() {
            for _ in 0..settings.warm(round) {
                side.once(op).await?;
                done[i] += 1;
            }
            admin.reset_stats().await?;
            let server = admin.server_cpu().await?;
            let client = process_cpu_time();
            let started = Instant::now();
            let sample = &mut samples[i];
            for _ in 0..settings.per_round() {
                let sent = Instant::now();
                side.once(op).await?;
                sample.times.push(sent.elapsed());
            }
            sample.elapsed += started.elapsed();
            sample.client_cpu += process_cpu_time().saturating_sub(client);
            let server = admin.server_cpu().await?.saturating_sub(server);
            *sample.server_cpu.get_or_insert_default() += server;
            let calls = admin.command_calls().await?;
            sample.commands += calls.values().sum::<u64>();
            sample.scripts += calls.get("evalsha").copied().unwrap_or(0);
            done[i] += settings.per_round() as u64;
        }
    }
    // What was measured did what it says: the counters are exact, and the
    // fence is on (a lower token is refused).
    let mut conn = admin.conn();
    for (op, expected) in RedisOp::ALL.into_iter().zip(done) {
        if op.counts() {
            let value: i64 = redis::cmd("GET")
                .arg(op.key())
                .query_async(&mut conn)
                .await?;
            if u64::try_from(value).ok() != Some(expected) {
                bail!("W12: {} left {value}, not {expected}", op.key());
            }
        }
    }
    match side
        .fence
        .write(RedisOp::FencedWrite.key(), TOKEN - 1, VALUE)
        .await
    {
        Err(FenceError::Stale { .. }) => {}
        other => bail!("W12: a stale token's write was not refused: {other:?}"),
    }

    for sample in &mut samples {
        sample.times.sort();
    }
    let sample = |op: RedisOp| (op.name(), &samples[op as usize]);
    let mut metrics = Vec::new();
    for op in RedisOp::ALL {
        metrics.extend(samples[op as usize].metrics(op.name(), "Redis", true));
    }
    for (fenced, plain) in [
        (RedisOp::FencedWrite, RedisOp::Set),
        (RedisOp::FencedWriteNewToken, RedisOp::Set),
        (RedisOp::FencedUpdate, RedisOp::GetSet),
        (RedisOp::FencedIncrBy, RedisOp::IncrBy),
        (RedisOp::FencedIncrBy, RedisOp::GetSet),
    ] {
        metrics.extend(ratios(sample(fenced), sample(plain), "Redis"));
    }
    Ok(metrics)
}

/// The PostgreSQL side's kinds of operation, in the order they run in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PgOp {
    /// `UPDATE t SET v = $2 WHERE k = $1`, prepared once.
    Update,
    /// `PgFence::write`, which prepares its statement per call.
    FencedWrite,
    /// `PgFence::write_sql`, prepared once.
    FencedWritePrepared,
    /// In a transaction: `SELECT v ... FOR UPDATE`, then `UPDATE ... v+1`,
    /// both prepared once.
    Rmw,
    /// In a transaction: `PgFence::read`, then `PgFence::write` of v+1.
    FencedRmw,
    /// In a transaction: `read_sql` and `write_sql`, prepared once.
    FencedRmwPrepared,
}

impl PgOp {
    /// Every kind, in declaration order (so `op as usize` indexes them).
    const ALL: [PgOp; 6] = [
        PgOp::Update,
        PgOp::FencedWrite,
        PgOp::FencedWritePrepared,
        PgOp::Rmw,
        PgOp::FencedRmw,
        PgOp::FencedRmwPrepared,
    ];

    fn name(self) -> &'static str {
        match self {
            PgOp::Update => "UPDATE",
            PgOp::FencedWrite => "PgFence::write",
            PgOp::FencedWritePrepared => "fenced UPDATE",
            PgOp::Rmw => "tx plain RMW",
            PgOp::FencedRmw => "tx PgFence RMW",
            PgOp::FencedRmwPrepared => "tx fenced RMW",
        }
    }

    /// Each kind has a row of its own.
    fn key(self) -> &'static str {
        match self {
            PgOp::Update => "update",
            PgOp::FencedWrite => "fenced-write",
            PgOp::FencedWritePrepared => "fenced-write-prepared",
            PgOp::Rmw => "rmw",
            PgOp::FencedRmw => "fenced-rmw",
            PgOp::FencedRmwPrepared => "fenced-rmw-prepared",
        }
    }

    fn counts(self) -> bool {
        matches!(self, PgOp::Rmw | PgOp::FencedRmw | PgOp::FencedRmwPrepared)
    }
}

/// The table of the PostgreSQL side: a key, a value, and the fence column
/// `PgFence::migration` adds.
const TABLE: &str = "CREATE TABLE w12 (k text PRIMARY KEY, v bigint NOT NULL)";

/// The statements prepared once.
struct Prepared {
    update: Statement,
    select_for_update: Statement,
    fenced_write: Statement,
    fenced_read: Statement,
}

struct PgSide {
    client: Client,
    fence: PgFence,
    prepared: Prepared,
    /// The value the next plain write writes.
    next: i64,
}

impl PgSide {
    async fn connect(server: &PostgresServer) -> Result<Self> {
        let (client, connection) = tokio_postgres::connect(&server.connection_string(), NoTls)
            .await
            .context("connect to PostgreSQL")?;
        tokio::spawn(connection);
        client.batch_execute(TABLE).await?;
        let fence = PgFence::new("w12", "k", "fence")?;
        client.batch_execute(&fence.migration()).await?;
        for op in PgOp::ALL {
            client
                .execute(
                    "INSERT INTO w12 (k, v) VALUES ($1, 0)",
                    &[&op.key().to_owned()],
                )
                .await?;
        }
        let prepared = Prepared {
            update: client.prepare("UPDATE w12 SET v = $2 WHERE k = $1").await?,
            select_for_update: client
                .prepare("SELECT v FROM w12 WHERE k = $1 FOR UPDATE")
                .await?,
            fenced_write: client.prepare(&fence.write_sql(&["v"])?).await?,
            fenced_read: client.prepare(&fence.read_sql(&["v"])?).await?,
        };
        Ok(PgSide {
            client,
            fence,
            prepared,
            next: 0,
        })
    }

    async fn once(&mut self, op: PgOp) -> Result<()> {
        let key = op.key().to_owned();
        let token = i64::try_from(TOKEN)?;
        self.next += 1;
        let value = self.next;
        let p = &self.prepared;
        match op {
            PgOp::Update => {
                one_row(self.client.execute(&p.update, &[&key, &value]).await?)?;
            }
            PgOp::FencedWrite => {
                self.fence
                    .write(&self.client, &key, TOKEN, &[("v", &value)])
                    .await?;
            }
            PgOp::FencedWritePrepared => {
                let updated = self
                    .client
                    .execute(&p.fenced_write, &[&token, &key, &value])
                    .await?;
                one_row(updated)?;
            }
            PgOp::Rmw => {
                let tx = self.client.transaction().await?;
                let v: i64 = tx.query_one(&p.select_for_update, &[&key]).await?.get(0);
                one_row(tx.execute(&p.update, &[&key, &(v + 1)]).await?)?;
                tx.commit().await?;
            }
            PgOp::FencedRmw => {
                let tx = self.client.transaction().await?;
                let v: i64 = self.fence.read(&tx, &key, TOKEN, &["v"]).await?.get(0);
                self.fence
                    .write(&tx, &key, TOKEN, &[("v", &(v + 1))])
                    .await?;
                tx.commit().await?;
            }
            PgOp::FencedRmwPrepared => {
                let tx = self.client.transaction().await?;
                let row = tx.query_opt(&p.fenced_read, &[&token, &key]).await?;
                let v: i64 = row.context("W12: the fenced read was refused")?.get(0);
                let updated = tx
                    .execute(&p.fenced_write, &[&token, &key, &(v + 1)])
                    .await?;
                one_row(updated)?;
                tx.commit().await?;
            }
        }
        Ok(())
    }
}

fn one_row(updated: u64) -> Result<()> {
    if updated != 1 {
        bail!("W12: {updated} rows updated, not 1");
    }
    Ok(())
}

/// What the PostgreSQL side needs of the run.
pub(crate) struct PgRun {
    /// Pin the server's processes to this CPU (when the run pins).
    pub(crate) cpu: Option<usize>,
}

/// W12, PostgreSQL: starts a server (when the binaries are found; else
/// `Ok(None)` after a loud message), runs the kinds of [`PgOp`] on one
/// connection, interleaved round by round, checks the counters, and stops
/// the server. Returns the figures and what was pinned.
pub(crate) async fn postgres(
    settings: Settings,
    run: PgRun,
) -> Result<Option<(Vec<Metric>, String)>> {
    if let Err(why) = postgres_binaries() {
        skipped(&why);
        return Ok(None);
    }
    let server = match tokio::task::spawn_blocking(PostgresServer::start).await {
        Ok(server) => server,
        Err(err) => {
            skipped(&format!(
                "PostgreSQL did not start ({err}; its message is above)"
            ));
            return Ok(None);
        }
    };
    let measured = measure_postgres(&server, settings, run).await;
    // Stopping waits for the server's exit (blocking).
    tokio::task::spawn_blocking(move || drop(server)).await?;
    measured.map(Some)
}

async fn measure_postgres(
    server: &PostgresServer,
    settings: Settings,
    run: PgRun,
) -> Result<(Vec<Metric>, String)> {
    let mut side = PgSide::connect(server).await?;
    let backend: i32 = side
        .client
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .get(0);
    let backend = u32::try_from(backend)?;
    let pinning = match run.cpu {
        Some(cpu) => match pin_postgres(backend, cpu) {
            Ok(n) => format!("PostgreSQL ({n} processes) pinned to cpu {cpu}"),
            Err(why) => {
                eprintln!("warning: PostgreSQL not pinned: {why}");
                "PostgreSQL not pinned".to_owned()
            }
        },
        None => "PostgreSQL not pinned".to_owned(),
    };
    let mut samples: [Sample; PgOp::ALL.len()] = Default::default();
    let mut done = [0i64; PgOp::ALL.len()];
    // The backend's CPU is left out if it could not be read every time.
    let mut cpu_unreadable = false;
    for round in 0..settings.rounds.max(1) {
        for (i, op) in PgOp::ALL.into_iter().enumerate() {
            for _ in 0..settings.warm(round) {
                side.once(op).await?;
                done[i] += 1;
            }
            let server = backend_cpu(backend);
            let client = process_cpu_time();
            let started = Instant::now();
            let sample = &mut samples[i];
            for _ in 0..settings.per_round() {
                let sent = Instant::now();
                side.once(op).await?;
                sample.times.push(sent.elapsed());
            }
            sample.elapsed += started.elapsed();
            sample.client_cpu += process_cpu_time().saturating_sub(client);
            match (server, backend_cpu(backend)) {
                (Some(before), Some(after)) => {
                    *sample.server_cpu.get_or_insert_default() += after.saturating_sub(before);
                }
                _ => cpu_unreadable = true,
            }
            done[i] += i64::try_from(settings.per_round())?;
        }
    }
    for (op, expected) in PgOp::ALL.into_iter().zip(done) {
        if op.counts() {
            let v: i64 = side
                .client
                .query_one("SELECT v FROM w12 WHERE k = $1", &[&op.key().to_owned()])
                .await?
                .get(0);
            if v != expected {
                bail!("W12: row {} holds {v}, not {expected}", op.key());
            }
        }
    }
    match side
        .fence
        .write(
            &side.client,
            &PgOp::FencedWrite.key().to_owned(),
            TOKEN - 1,
            &[("v", &0i64)],
        )
        .await
    {
        Err(FenceError::Stale { .. }) => {}
        other => bail!("W12: a stale token's write was not refused: {other:?}"),
    }

    for sample in &mut samples {
        sample.times.sort();
        if cpu_unreadable {
            sample.server_cpu = None;
        }
    }
    let sample = |op: PgOp| (op.name(), &samples[op as usize]);
    let mut metrics = Vec::new();
    for op in PgOp::ALL {
        metrics.extend(samples[op as usize].metrics(op.name(), "backend", false));
    }
    for (fenced, plain) in [
        (PgOp::FencedWrite, PgOp::Update),
        (PgOp::FencedWritePrepared, PgOp::Update),
        (PgOp::FencedWrite, PgOp::FencedWritePrepared),
        (PgOp::FencedRmw, PgOp::Rmw),
        (PgOp::FencedRmwPrepared, PgOp::Rmw),
    ] {
        metrics.extend(ratios(sample(fenced), sample(plain), "backend"));
    }
    Ok((metrics, pinning))
}

/// Whether the PostgreSQL server binaries can be found where
/// `PostgresServer::start` looks (`DISTLOCK_TEST_PG_BIN`,
/// `/usr/lib/postgresql/<version>/bin`, `initdb` on `PATH`), without
/// panicking as it does when they cannot.
pub(crate) fn postgres_binaries() -> Result<(), String> {
    if let Some(dir) = std::env::var_os("DISTLOCK_TEST_PG_BIN") {
        return if Path::new(&dir).join("initdb").is_file() {
            Ok(())
        } else {
            Err(format!(
                "no initdb in DISTLOCK_TEST_PG_BIN ({})",
                dir.to_string_lossy()
            ))
        };
    }
    let packaged = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .any(|version| version.path().join("bin").join("initdb").is_file());
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("initdb").is_file()));
    if packaged || on_path {
        Ok(())
    } else {
        Err("PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/initdb, no initdb on PATH, DISTLOCK_TEST_PG_BIN unset)".to_owned())
    }
}

fn skipped(why: &str) {
    eprintln!("########################################################################");
    eprintln!("# SKIPPED: W12's PostgreSQL part: {why}");
    eprintln!(
        "# Install PostgreSQL (`apt-get install -y postgresql`) or point DISTLOCK_TEST_PG_BIN"
    );
    eprintln!("# at its bin directory; the run goes on without it.");
    eprintln!("########################################################################");
}

/// CPU time the process `pid` has run (`/proc/<pid>/schedstat`, in
/// nanoseconds), or `None` when it cannot be read.
pub(crate) fn backend_cpu(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let nanos = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// The parent process id of `pid`, from `/proc/<pid>/stat`.
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: the fields after
    // it are state, then the parent's id.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Pins the server that runs `backend` to `cpu`: the postmaster (so the
/// backends it forks later are pinned too) and every process it has
/// forked so far (background workers, and `backend`). Returns how many
/// processes were pinned.
pub(crate) fn pin_postgres(backend: u32, cpu: usize) -> Result<usize, String> {
    let postmaster =
        parent_of(backend).ok_or_else(|| format!("no parent found for backend {backend}"))?;
    let mut pids = vec![postmaster];
    let proc = std::fs::read_dir(Path::new("/proc")).map_err(|err| format!("/proc: {err}"))?;
    for entry in proc.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if parent_of(pid) == Some(postmaster) {
            pids.push(pid);
        }
    }
    for &pid in &pids {
        pin(pid, cpu)?;
    }
    Ok(pids.len())
}
