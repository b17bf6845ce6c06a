//! The orchestrator: per backend, start the servers and the register store, spawn worker
//! processes (in network namespaces when the machine allows it, behind fault proxies
//! otherwise), run the schedule (fixed, or seeded and randomized with overlapping steps, each
//! state-triggered step waiting first for a long hold with a waiter), stop everything, check.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use distlock::{LockClient, MemoryStore};
use lock_test_support::ServerOptions;
use lock_test_support::{PostgresServer, RedisServer};
use rand::Rng as _;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::checker::{self, BackendReport};
use crate::clock::now_ns;
use crate::clockshim::ClockShim;
use crate::event::Event;
use crate::nemesis::{Fault, Schedule};
use crate::netns::{Direction, NetLab};
use crate::proxy::{FaultProxy, ProxyMode};
use crate::register::{FenceStore, Registers};
use crate::schedule::{FaultKind, NetFault, ScheduleConfig, Step};
use crate::settings::MIN_REPLICAS_MAX_LAG;
use crate::sink::{read_events, EventSink};
use crate::topology::{Backend, Servers, SENTINEL_MASTER};
use crate::trigger::{self, Target, TargetKind, TriggerConfig, Triggered};
use crate::worker::{self, WorkerSetup};
use std::collections::HashMap;

/// Latency added by the `latency` fault, per chunk and direction.
const ADDED_LATENCY: Duration = Duration::from_millis(150);

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Backends, one after another.
    pub backends: Vec<Backend>,
    /// The CI subset of faults.
    pub quick: bool,
    /// How many times each backend's fault list is repeated.
    pub rounds: usize,
    /// Worker processes per backend.
    pub workers: u32,
    /// Tasks per worker.
    pub tasks: u32,
    /// Lock names (contention: workers x tasks over this many).
    pub names: u32,
    /// Watchdog lease of the workers' clients.
    pub lease: Duration,
    /// Longest hold.
    pub hold_max_ms: u64,
    /// JSON lines output.
    pub out: Option<PathBuf>,
    /// Where to keep the raw histories (otherwise a temporary directory, removed).
    pub history: Option<PathBuf>,
    /// Workloads beside the plain lock (those the backend supports run).
    pub workloads: Vec<crate::workload::Workload>,
    /// The seed of the randomized schedule (and of the harness's choices within a step).
    pub seed: u64,
    /// The seeded, randomized, overlapping schedule (`false`: the fixed list, one fault at a
    /// time).
    pub random: bool,
    /// How many injections per fault kind the randomized schedule aims for.
    pub per_kind: usize,
    /// Only these fault kinds (`--faults`), in either schedule; `None`: every kind.
    pub faults: Option<Vec<FaultKind>>,
    /// Use network namespaces when the machine allows it (else the userspace proxy).
    pub netns: bool,
    /// Sentinel: `min-replicas-to-write` on the data servers (with a max lag of
    /// [`MIN_REPLICAS_MAX_LAG`]), `None`: not set (Redis's default).
    pub min_replicas: Option<u32>,
    /// Where the fenced register lives.
    pub fence_store: FenceStore,
    /// With `lock-redis`: the replicas the fence and the lock clients wait for.
    pub fence_replicas: u32,
    /// Postgres: the workers' clients on a deadpool of this many connections (0: their own).
    pub pg_pool: usize,
    /// Postgres: the server's `synchronous_commit` (`false`: `off`, a crash may lose the
    /// last commits).
    pub synchronous_commit: bool,
}

impl RunConfig {
    /// The workloads that run on `backend`.
    fn workloads_on(&self, backend: Backend) -> Vec<crate::workload::Workload> {
        self.workloads
            .iter()
            .copied()
            .filter(|w| w.unsupported(backend).is_none())
            .collect()
    }

    /// Prints each asked-for workload `backend` skips, with the reason.
    fn print_skipped(&self, backend: Backend) {
        for w in &self.workloads {
            if let Some(reason) = w.unsupported(backend) {
                println!(
                    "{}: workload {} skipped: {reason}",
                    backend.name(),
                    w.name()
                );
            }
        }
    }
}

/// Runs every backend of `config` and prints the tables; returns the reports.
pub async fn run(config: RunConfig) -> anyhow::Result<Vec<BackendReport>> {
    let mut reports = Vec::new();
    let temp;
    let root = match &config.history {
        Some(dir) => dir.clone(),
        None => {
            temp = TempDir::new()?;
            temp.0.clone()
        }
    };
    std::fs::create_dir_all(&root)?;
    // A run's files describe that run only: histories and reports of an
    // earlier run at the same paths would be checked (and counted) again.
    if let Some(out) = &config.out {
        std::fs::File::create(out)?;
    }
    for &backend in &config.backends {
        let dir = root.join(backend.name());
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        eprintln!("lock-chaos: {} ...", backend.name());
        let started = std::time::Instant::now();
        let report = run_backend(&config, backend, &dir).await?;
        eprintln!(
            "lock-chaos: {} done in {:.0} s",
            backend.name(),
            started.elapsed().as_secs_f64()
        );
        println!("{}", report.table());
        if let Some(out) = &config.out {
            report.append_json(out)?;
        }
        reports.push(report);
    }
    println!("{}", checker::summary(&reports));
    Ok(reports)
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        let dir = std::env::temp_dir().join(format!(
            "lock-chaos-{}-{}",
            std::process::id(),
            rand::rng().random::<u32>()
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs blocking harness work (which may panic) off the runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow!("the test harness failed: {e}"))?
}

/// Data servers and sentinels of `backend` (each gets a lab address of its own).
fn server_count(backend: Backend) -> usize {
    match backend {
        Backend::Memory => 0,
        Backend::Standalone | Backend::Postgres => 1,
        Backend::Sentinel => 5,
        Backend::Cluster => 6,
        Backend::Redlock => crate::topology::REDLOCK_MASTERS,
    }
}

/// The fault kinds of the randomized schedule of `backend`, for what this machine can do:
/// with the network lab, the proxy's own faults go (the lab's partitions replace them;
/// latency is added with `tc netem` in the worker's namespace instead, when the kernel has
/// it: `netem`); without it, the faults that need it go.
fn kinds_for(backend: Backend, lab: bool, netem: bool) -> Vec<FaultKind> {
    let mut config = ScheduleConfig::new(backend, 0, Duration::ZERO, Duration::from_secs(1));
    config.kinds.retain(|k| match k {
        FaultKind::Classic(Fault::ProxyReset | Fault::Partition) => !lab,
        FaultKind::Classic(Fault::Latency) => !lab || netem,
        FaultKind::Net(
            NetFault::PartitionBoth
            | NetFault::PartitionToServer
            | NetFault::PartitionFromServer
            | NetFault::PartitionOneMaster
            | NetFault::ReplicationLag
            | NetFault::SplitBrain,
        ) => lab,
        _ => true,
    });
    // A jump of one master's clock: on Redlock, a minority of the lock's masters.
    if backend == Backend::Redlock {
        config
            .kinds
            .push(FaultKind::Classic(Fault::ClockJumpForward));
        config.kinds.push(FaultKind::Classic(Fault::ClockJumpBack));
    }
    config.kinds
}

/// Whether `tc` can add `netem` delay in the lab's namespaces (the kernel module may be
/// missing).
fn netem_available(lab: &NetLab) -> bool {
    let added = lab
        .command_in(0, "tc")
        .args([
            "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", "0ms",
        ])
        .output()
        .is_ok_and(|out| out.status.success());
    if added {
        let _ = lab
            .command_in(0, "tc")
            .args(["qdisc", "del", "dev", "eth0", "root"])
            .output();
    }
    added
}

/// The fixed schedule as steps: the old list (`nemesis.rs`), plus with `quick` a few of the
/// new faults; pauses last a lease and a second, everything else 3 s.
fn fixed_steps(
    backend: Backend,
    quick: bool,
    rounds: usize,
    lease: Duration,
    lab: bool,
) -> (Schedule, Vec<Step>) {
    let schedule = Schedule::for_backend(backend, quick, rounds);
    let mut kinds: Vec<FaultKind> = schedule
        .faults
        .iter()
        .map(|&f| FaultKind::Classic(f))
        .collect();
    if quick {
        match backend {
            Backend::Standalone if lab => {
                kinds.insert(3, FaultKind::Net(NetFault::PartitionFromServer))
            }
            Backend::Sentinel => kinds.push(FaultKind::Net(NetFault::ManualFailover)),
            _ => {}
        }
    }
    let steps = kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| Step {
            at: Duration::ZERO,
            kind,
            duration: if kind == FaultKind::Classic(Fault::PauseHolder) {
                lease + Duration::from_secs(1)
            } else {
                schedule.active
            },
            target: kind.default_target(),
            pick: i as u64,
        })
        .collect();
    (schedule, steps)
}

async fn run_backend(
    config: &RunConfig,
    backend: Backend,
    dir: &Path,
) -> anyhow::Result<BackendReport> {
    let count = server_count(backend);
    // The network lab: a namespace per worker, an address per server and one for the
    // register store (never partitioned).
    config.print_skipped(backend);
    let lab = if backend == Backend::Memory {
        None
    } else if backend == Backend::Postgres {
        println!(
            "postgres: network: loopback, no namespaces (the server listens on 127.0.0.1; its \
             faults are server-side: pause, restarts, terminated backends)"
        );
        if !config.synchronous_commit {
            println!("postgres: synchronous_commit = off (a crash may lose the last commits)");
        }
        None
    } else if !config.netns {
        println!(
            "{}: network: userspace fault proxy (--no-netns)",
            backend.name()
        );
        None
    } else {
        match crate::netns::available()
            .map_err(anyhow::Error::msg)
            .and_then(|()| NetLab::create(config.workers as usize, count + 1))
        {
            Ok(lab) => {
                println!(
                    "{}: network: namespaces (real partitions, subnet {})",
                    backend.name(),
                    lab.subnet()
                );
                Some(Arc::new(lab))
            }
            Err(e) => {
                println!(
                    "{}: network: userspace fault proxy (network namespaces unavailable: {e:#})",
                    backend.name()
                );
                None
            }
        }
    };
    let shim = if matches!(backend, Backend::Memory | Backend::Postgres) {
        None
    } else {
        match blocking(ClockShim::build).await {
            Ok(shim) => {
                println!(
                    "{}: clock: real CLOCK_REALTIME jumps of one server (preloaded library)",
                    backend.name()
                );
                Some(shim)
            }
            Err(e) => {
                println!(
                    "{}: clock: emulated jumps (every TTL cut; the clock library could not be built: {e:#})",
                    backend.name()
                );
                None
            }
        }
    };
    let (fixed, mut steps) = fixed_steps(
        backend,
        config.quick,
        config.rounds,
        config.lease,
        lab.is_some(),
    );
    if let Some(only) = &config.faults {
        steps.retain(|s| only.contains(&s.kind));
    }
    let mut run_for = Duration::ZERO;
    if config.random && backend != Backend::Memory {
        let mut schedule_config =
            ScheduleConfig::new(backend, config.seed, Duration::ZERO, config.lease);
        let netem = match &lab {
            Some(lab) => {
                let lab = lab.clone();
                blocking(move || Ok(netem_available(&lab))).await?
            }
            None => false,
        };
        if lab.is_some() && !netem {
            println!(
                "{}: no latency fault: the kernel has no netem queueing discipline (tc)",
                backend.name()
            );
        }
        schedule_config.kinds = kinds_for(backend, lab.is_some(), netem);
        if let Some(only) = &config.faults {
            schedule_config.kinds.retain(|k| only.contains(k));
            println!(
                "{}: fault kinds restricted to: {}",
                backend.name(),
                schedule_config
                    .kinds
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        schedule_config.run = schedule_config.run_for(config.per_kind);
        run_for = schedule_config.run;
        steps = crate::schedule::generate(&schedule_config);
        print!(
            "{}: {}",
            backend.name(),
            crate::schedule::describe(&schedule_config, &steps)
        );
    } else if backend != Backend::Memory {
        println!(
            "{}: fixed schedule: {}",
            backend.name(),
            steps
                .iter()
                .map(|s| s.kind.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    let register_options = lab
        .as_ref()
        .map(|lab| ServerOptions::new().bind_addr(lab.server_addr(count)));
    let register = blocking(move || {
        Ok(match register_options {
            Some(options) => RedisServer::start_with(options),
            None => RedisServer::start(),
        })
    })
    .await?;
    let register_url = register.url();
    let worker_register_url = register.bind_url();
    // The fenced register's PostgreSQL, with `--fence-store postgres` (never faulted). It
    // listens on loopback only: workers in the lab reach it through a pass-through proxy on
    // the register store's lab address.
    let mut postgres = None;
    if config.fence_store == FenceStore::Postgres {
        let server = blocking(|| Ok(PostgresServer::start())).await?;
        let harness = server.connection_string();
        Registers::prepare_postgres(
            &harness,
            &crate::workload::register_names(&names_of(config), &config.workloads_on(backend)),
        )
        .await?;
        let door = match &lab {
            Some(lab) => Some(FaultProxy::start_on(lab.server_addr(count), server.port()).await?),
            None => None,
        };
        let worker = match (&door, &lab) {
            (Some(door), Some(lab)) => format!(
                "host={} port={} user=postgres dbname=postgres",
                lab.server_addr(count),
                door.port()
            ),
            _ => harness.clone(),
        };
        println!("{}: fenced register: PostgreSQL (PgFence)", backend.name());
        postgres = Some(PgStore {
            _server: server,
            _door: door,
            harness,
            worker,
        });
    }
    if config.fence_store == FenceStore::LockRedis {
        let waits = match backend {
            Backend::Standalone => "no replica, no WAIT".to_owned(),
            _ if config.fence_replicas == 0 => "no WAIT (--fence-replicas 0)".to_owned(),
            Backend::Sentinel => format!(
                "WAIT {} replica(s) after each fenced operation, lock clients with sync_replicas",
                config.fence_replicas
            ),
            _ => format!(
                "WAIT {} replica(s) after each fenced operation (no sync_replicas on Cluster)",
                config.fence_replicas
            ),
        };
        println!(
            "{}: fenced register: in the lock servers (RedisFence on the data connection; {waits})",
            backend.name()
        );
    }
    let mut options = lab
        .as_ref()
        .map(|lab| ServerOptions::new().bind_pool(lab.server_addrs()[..count].iter().copied()));
    if let Some(shim) = &shim {
        options = Some(shim.options(options.unwrap_or_default()));
    }
    let synchronous_commit = config.synchronous_commit;
    let servers = Arc::new(Mutex::new(
        blocking(move || {
            Ok(if backend == Backend::Postgres {
                Servers::start_postgres(synchronous_commit)
            } else {
                Servers::start_with(backend, options)
            })
        })
        .await?,
    ));
    if let (Some(n), Backend::Sentinel) = (config.min_replicas, backend) {
        let took = servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_min_replicas(n, MIN_REPLICAS_MAX_LAG);
        println!(
            "sentinel: min-replicas-to-write {n}, min-replicas-max-lag {} s ({took} of 2 data servers)",
            MIN_REPLICAS_MAX_LAG.as_secs()
        );
    }
    let pg_url = servers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .postgres()
        .map(|pg| pg.connection_string());
    if let Some(url) = pg_url {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        let driver = tokio::spawn(connection);
        let row = client
            .query_one(
                "SELECT current_setting('synchronous_commit'), current_setting('fsync'), \
                 current_setting('server_version')",
                &[],
            )
            .await?;
        println!(
            "postgres: PostgreSQL {}, synchronous_commit = {}, fsync = {} (the faults kill \
             processes, not the machine: written WAL survives in the page cache)",
            row.try_get::<_, String>(2)?,
            row.try_get::<_, String>(0)?,
            row.try_get::<_, String>(1)?
        );
        drop(client);
        let _ = driver.await;
    }
    let names = names_of(config);
    let nemesis = EventSink::open(&dir.join("nemesis.jsonl"))?;
    // Server-side truth: every removal of a key on every data server, as it happens.
    let watching = Arc::new(AtomicBool::new(true));
    let ports = servers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .data_ports();
    let watchers: Vec<_> = ports
        .into_iter()
        .map(|port| {
            let (sink, watching) = (nemesis.clone(), watching.clone());
            std::thread::spawn(move || watch_key_events(port, &sink, &watching))
        })
        .collect();
    // The harness's own scheduler lag (it runs the proxies and the nemesis).
    let probe_deadline = Arc::new(AtomicU64::new(u64::MAX));
    let probe = worker::spawn_stall_probe(nemesis.clone(), None, probe_deadline.clone());
    let run_start = now_ns();

    let lab_data: Vec<usize> = (0..count).collect();
    let mut world = World {
        backend,
        config: config.clone(),
        servers: servers.clone(),
        register_url: register_url.clone(),
        worker_register_url,
        fence_postgres: postgres.as_ref().map(|pg| pg.harness.clone()),
        worker_fence_postgres: postgres.as_ref().map(|pg| pg.worker.clone()),
        dir: dir.to_owned(),
        workers: Mutex::new(Vec::new()),
        next_id: AtomicU32::new(0),
        nemesis,
        inspector: None,
        admin: None,
        aims: Mutex::new(HashMap::new()),
        names: names.clone(),
        lab: lab.clone(),
        lab_data,
        shim,
        next_fault: AtomicU64::new(0),
        exclusive: tokio::sync::Mutex::new(()),
        last_healthy: AtomicU64::new(run_start),
        started: Mutex::new(std::collections::HashSet::new()),
    };

    if backend == Backend::Memory {
        let memory = world.start_memory_workers().await?;
        tokio::time::sleep(fixed.baseline).await;
        for (deadline, _) in &memory {
            deadline.store(0, Ordering::Relaxed);
        }
        for (_, handle) in memory {
            let _ = handle.await;
        }
    } else {
        world.inspector = Some(world.connect_direct().await?);
        // The operator's client: an admin tool takes no locks and records no layout.
        world.admin = Some(world.connect_direct().await?);
        world.record_shards().await;
        for slot in 0..config.workers as usize {
            world.spawn_worker(slot).await?;
        }
        let shared = Arc::new(world);
        if config.random {
            let t0 = tokio::time::Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for step in steps {
                let world = shared.clone();
                tasks.spawn(async move {
                    tokio::time::sleep_until(t0 + step.at).await;
                    if let Err(e) = world.run_step(&step).await {
                        eprintln!(
                            "lock-chaos: {}: {}: {e:#}",
                            world.backend.name(),
                            step.kind.name()
                        );
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
            tokio::time::sleep_until(t0 + run_for).await;
        } else {
            tokio::time::sleep(fixed.baseline).await;
            for step in &steps {
                if let Err(e) = shared.run_step(step).await {
                    eprintln!(
                        "lock-chaos: {}: {}: {e:#}",
                        backend.name(),
                        step.kind.name()
                    );
                }
                tokio::time::sleep(fixed.settle).await;
            }
        }
        shared.stop_workers().await;
        world =
            Arc::try_unwrap(shared).map_err(|_| anyhow!("a fault step outlived the schedule"))?;
    }
    let run_end = now_ns();
    // What a replay of the history (`check`) needs beside the events.
    let bounds = crate::replay::RunBounds {
        run_start,
        run_end,
        lease_ms: config.lease.as_millis() as u64,
    };
    if let Err(e) = crate::replay::save_bounds(dir, &bounds) {
        eprintln!(
            "lock-chaos: {}: cannot save the run's bounds: {e:#}",
            backend.name()
        );
    }
    probe_deadline.store(0, Ordering::Relaxed);
    let _ = blocking(move || {
        let _ = probe.join();
        Ok(())
    })
    .await;
    watching.store(false, Ordering::Relaxed);
    for watcher in watchers {
        let _ = blocking(move || {
            let _ = watcher.join();
            Ok(())
        })
        .await;
    }
    // Every write the register store applied, and the final values (no worker runs now).
    let harness_postgres = postgres.as_ref().map(|pg| pg.harness.as_str());
    let truth = read_truth(
        config,
        backend,
        &servers,
        &register_url,
        harness_postgres,
        &crate::workload::register_names(&names, &config.workloads_on(backend)),
    )
    .await;
    let truth = match truth {
        Ok(truth) => {
            // What a replay of the history (`check`) needs to check the store as the run did.
            if let Err(e) = crate::replay::save_registers(dir, &truth) {
                eprintln!(
                    "lock-chaos: {}: cannot save the register store's logs: {e:#}",
                    backend.name()
                );
            }
            Some(truth)
        }
        Err(e) => {
            eprintln!(
                "lock-chaos: {}: cannot read the register logs: {e:#}",
                backend.name()
            );
            None
        }
    };

    let mut events = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            events.extend(read_events(&path)?);
        }
    }
    drop(world);
    blocking(move || {
        drop(servers);
        drop(register);
        drop(postgres);
        // The servers listened on the lab's addresses: the lab goes after them.
        drop(lab);
        Ok(())
    })
    .await?;
    Ok(checker::analyze(
        backend.name(),
        &events,
        truth.as_deref(),
        config.lease,
        run_start,
        run_end,
    ))
}

/// The registers' end state. With `--fence-store lock-redis` the fenced registers are read
/// from the lock topology's current master(s), found without the library under test: the
/// master the sentinels agree on (and that says it is one), or the cluster's slot owners.
async fn read_truth(
    config: &RunConfig,
    backend: Backend,
    servers: &Mutex<Servers>,
    register_url: &str,
    postgres: Option<&str>,
    names: &[String],
) -> anyhow::Result<Vec<crate::register::RegisterTruth>> {
    let registers = Registers::connect(register_url, "reg:", postgres).await?;
    if config.fence_store != FenceStore::LockRedis {
        return registers
            .truth(names, None::<redis::aio::MultiplexedConnection>)
            .await;
    }
    let urls = servers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .direct_urls();
    match backend {
        Backend::Cluster => {
            let client = redis::cluster::ClusterClient::new(urls)?;
            let conn = client.get_async_connection().await?;
            registers.truth(names, Some(conn)).await
        }
        Backend::Sentinel => {
            let port = sentinel_master(&urls).await?;
            println!("sentinel: fenced registers read from the master on port {port}");
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
            let conn = client.get_multiplexed_async_connection().await?;
            registers.truth(names, Some(conn)).await
        }
        Backend::Standalone => {
            let client = redis::Client::open(urls[0].as_str())?;
            let conn = client.get_multiplexed_async_connection().await?;
            registers.truth(names, Some(conn)).await
        }
        Backend::Memory | Backend::Redlock | Backend::Postgres => {
            anyhow::bail!("{} has no fenced register in its servers", backend.name())
        }
    }
}

/// The port of the master a majority of the sentinels at `urls` name for the lock's master
/// and that answers `ROLE` with `master` (retried for up to 20 s: a failover may still be
/// settling when the run ends).
async fn sentinel_master(urls: &[String]) -> anyhow::Result<u16> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut votes: std::collections::HashMap<u16, usize> = std::collections::HashMap::new();
        for url in urls {
            let answer = async {
                let client = redis::Client::open(url.as_str())?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(SENTINEL_MASTER)
                    .query_async::<(String, u16)>(&mut conn)
                    .await
            };
            if let Ok(Ok((_, port))) = tokio::time::timeout(Duration::from_secs(1), answer).await {
                *votes.entry(port).or_default() += 1;
            }
        }
        let named = votes
            .iter()
            .find(|(_, &n)| n * 2 > urls.len())
            .map(|(&port, _)| port);
        if let Some(port) = named {
            let role = async {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("ROLE")
                    .query_async::<Vec<redis::Value>>(&mut conn)
                    .await
            };
            if let Ok(Ok(role)) = tokio::time::timeout(Duration::from_secs(1), role).await {
                if matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master") {
                    return Ok(port);
                }
            }
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the sentinels did not agree on a master that says it is one ({votes:?})"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The lock names of a run's plain tasks.
fn names_of(config: &RunConfig) -> Vec<String> {
    (0..config.names).map(|i| format!("chaos-{i}")).collect()
}

/// The fenced register's PostgreSQL and how each side reaches it.
struct PgStore {
    _server: PostgresServer,
    /// The lab's door to it (none without the lab).
    _door: Option<FaultProxy>,
    /// A libpq connection string for the harness.
    harness: String,
    /// A libpq connection string for the workers.
    worker: String,
}

/// One worker process.
struct WorkerProc {
    id: u32,
    pid: u32,
    client_id: String,
    child: tokio::process::Child,
    proxies: Vec<FaultProxy>,
    /// Its namespace in the network lab (a replacement takes the killed worker's).
    slot: usize,
}

/// What a step's trigger found, as recorded in its `start` event.
#[derive(Debug, Clone, Default)]
struct Aim {
    id: u64,
    effective: Option<bool>,
    target: Option<Target>,
}

/// Everything the nemesis acts on (shared by concurrent steps).
struct World {
    backend: Backend,
    config: RunConfig,
    servers: Arc<Mutex<Servers>>,
    /// The register store, as the harness reaches it.
    register_url: String,
    /// The register store, as workers reach it (its lab address, never partitioned).
    worker_register_url: String,
    /// The fenced register's PostgreSQL, as the harness reaches it (`--fence-store postgres`).
    fence_postgres: Option<String>,
    /// The fenced register's PostgreSQL, as workers reach it.
    worker_fence_postgres: Option<String>,
    dir: PathBuf,
    workers: Mutex<Vec<WorkerProc>>,
    next_id: AtomicU32,
    nemesis: EventSink,
    inspector: Option<LockClient>,
    /// The operator's client for `force_release` (built with `record_layout(false)`, as an
    /// admin tool's is: it takes no locks).
    admin: Option<LockClient>,
    /// How many steps of each fault kind were aimed so far (the rotation of
    /// [`World::aim_kind`]).
    aims: Mutex<HashMap<&'static str, u64>>,
    names: Vec<String>,
    lab: Option<Arc<NetLab>>,
    /// The lab indices of the data servers and sentinels (the register's is the next).
    lab_data: Vec<usize>,
    shim: Option<ClockShim>,
    next_fault: AtomicU64,
    /// Held by a step that changes the servers' topology ([`FaultKind::exclusive`]) for its
    /// whole run, and by the shard check and repair ([`World::ensure_masters`]).
    exclusive: tokio::sync::Mutex<()>,
    /// When a check last found every Cluster shard with a live master.
    last_healthy: AtomicU64,
    /// The injections whose `start` was recorded (a failed step without one was skipped).
    started: Mutex<std::collections::HashSet<u64>>,
}

impl World {
    /// Runs `f` on the servers off the runtime: kills, restarts and failovers block.
    async fn with_servers<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Servers) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let servers = self.servers.clone();
        blocking(move || f(&mut servers.lock().unwrap_or_else(|e| e.into_inner()))).await
    }

    fn servers(&self) -> std::sync::MutexGuard<'_, Servers> {
        self.servers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn workers(&self) -> std::sync::MutexGuard<'_, Vec<WorkerProc>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client that reaches the servers without proxies (to find holders; the operator's
    /// force releases).
    async fn connect_direct(&self) -> anyhow::Result<LockClient> {
        let urls = self.servers().direct_urls();
        // It only looks: it neither records a layout nor is refused for the run's mix.
        let builder = LockClient::builder()
            .lease(self.config.lease)
            .record_layout(false);
        Ok(match self.backend {
            Backend::Memory => anyhow::bail!("no servers"),
            Backend::Standalone => builder.connect(&urls[0]).await?,
            Backend::Sentinel => builder.connect_sentinel(urls, SENTINEL_MASTER).await?,
            Backend::Cluster => builder.connect_cluster(urls).await?,
            Backend::Redlock => builder.connect_redlock(urls).await?,
            Backend::Postgres => builder.postgres(&urls[0]).connect().await?,
        })
    }

    /// What a step of `kind` waits for and is aimed at: a plain lock (any of the run's
    /// names), or, for a force release and the clock jumps, in turn a plain lock and each
    /// of the lock family's primitives the run exercises (`fair-0` held with a waiter
    /// queued, `rw-0` held by a reader, `sem-0`'s permits held), so that the family's
    /// per-member expiries (server time inside a key) meet real clock jumps and operators'
    /// overrides too.
    fn aim_kind(&self, kind: FaultKind) -> (TargetKind, String) {
        let rotates = matches!(
            kind,
            FaultKind::Classic(
                Fault::ForceRelease | Fault::ClockJumpForward | Fault::ClockJumpBack
            )
        );
        if !rotates {
            return (TargetKind::Plain, String::new());
        }
        let workloads = self.config.workloads_on(self.backend);
        let mut choices = vec![(TargetKind::Plain, String::new())];
        for (workload, target) in [
            (crate::workload::Workload::Fair, TargetKind::Fair),
            (crate::workload::Workload::Rw, TargetKind::ReadWrite),
            (crate::workload::Workload::Sem, TargetKind::Semaphore),
        ] {
            if workloads.contains(&workload) {
                if let Some(name) = workload.names().into_iter().next() {
                    choices.push((target, name));
                }
            }
        }
        let turn = {
            let mut aims = self.aims.lock().unwrap_or_else(|e| e.into_inner());
            let n = aims.entry(kind.name()).or_insert(0);
            let turn = *n;
            *n += 1;
            turn
        };
        choices.swap_remove((turn % choices.len() as u64) as usize)
    }

    /// The plain locks a state-triggered step watches: the run's names and, with the leader
    /// workload, the role's lock (first when it is the only workload, so that a run of it
    /// aims its faults at the leader).
    fn trigger_names(&self) -> Vec<String> {
        let workloads = self.config.workloads_on(self.backend);
        let mut names = self.names.clone();
        if workloads.contains(&crate::workload::Workload::Leader) {
            let role = crate::leader::lock_name();
            if workloads.len() == 1 {
                names.insert(0, role);
            } else {
                names.push(role);
            }
        }
        names
    }

    /// The memory baseline: workers are clients of one store in this process.
    async fn start_memory_workers(
        &self,
    ) -> anyhow::Result<Vec<(Arc<AtomicU64>, tokio::task::JoinHandle<()>)>> {
        let store = MemoryStore::new();
        let lease = self.config.lease;
        let connect: crate::task::ClientFactory = {
            let store = store.clone();
            Arc::new(move |builder: distlock::LockClientBuilder| {
                let result = builder
                    .lease(lease)
                    .allow_mixed_layouts(true)
                    .memory(store.clone());
                Box::pin(async move { result })
            })
        };
        let mut memory = Vec::new();
        for id in 0..self.config.workers {
            let client = LockClient::builder()
                .lease(self.config.lease)
                .allow_mixed_layouts(true)
                .memory(store.clone())?;
            let sink = EventSink::open(&self.dir.join(format!("worker-{id}.jsonl")))?;
            sink.emit(&Event::Hello {
                t: now_ns(),
                worker: id,
                pid: std::process::id(),
                client_id: client.id().to_owned(),
            });
            let deadline = Arc::new(AtomicU64::new(u64::MAX));
            let setup = WorkerSetup {
                client,
                registers: Registers::connect(
                    &self.register_url,
                    "reg:",
                    self.fence_postgres.as_deref(),
                )
                .await?,
                sink,
                worker: id,
                tasks: self.config.tasks,
                names: self.names.clone(),
                hold_max_ms: self.config.hold_max_ms,
                lease: self.config.lease,
                deadline_ns: deadline.clone(),
                workloads: self.config.workloads_on(self.backend),
                connect: Some(connect.clone()),
                http_dir: Some(self.dir.clone()),
                http_host: std::net::Ipv4Addr::LOCALHOST.into(),
            };
            memory.push((deadline, tokio::spawn(worker::run(setup))));
        }
        Ok(memory)
    }

    /// Starts one worker process (in namespace `slot` of the lab, or with its own proxies)
    /// and waits until it is connected.
    async fn spawn_worker(&self, slot: usize) -> anyhow::Result<()> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut proxies = Vec::new();
        let pg_url = self
            .lock_servers()
            .await
            .postgres()
            .map(|pg| pg.worker_url(id));
        let urls = if let Some(url) = pg_url {
            vec![url]
        } else if self.lab.is_some() {
            self.lock_servers().await.lab_urls()
        } else if self.backend.proxied() {
            let ports = self.lock_servers().await.proxied_ports();
            let mut urls = Vec::new();
            for port in ports {
                let proxy = FaultProxy::start(port).await?;
                urls.push(format!("redis://127.0.0.1:{}/", proxy.port()));
                proxies.push(proxy);
            }
            urls
        } else {
            self.lock_servers().await.direct_urls()
        };
        let exe = std::env::current_exe()?;
        let mut command = match &self.lab {
            Some(lab) => tokio::process::Command::from(lab.command_in(slot, &exe)),
            None => tokio::process::Command::new(&exe),
        };
        command
            .arg("worker")
            .args(["--backend", self.backend.name()])
            .args(["--register-url", &self.worker_register_url])
            .args(["--worker", &id.to_string()])
            .args(["--tasks", &self.config.tasks.to_string()])
            .args(["--names", &self.config.names.to_string()])
            .args(["--lease-ms", &self.config.lease.as_millis().to_string()])
            .args(["--hold-max-ms", &self.config.hold_max_ms.to_string()])
            .arg("--events")
            .arg(self.dir.join(format!("worker-{id}.jsonl")))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        for url in &urls {
            command.args(["--url", url]);
        }
        if let Some(postgres) = &self.worker_fence_postgres {
            command
                .args(["--fence-store", FenceStore::Postgres.name()])
                .args(["--fence-postgres", postgres]);
        }
        if self.config.pg_pool > 0 {
            command.args(["--pg-pool", &self.config.pg_pool.to_string()]);
        }
        if self.config.fence_store == FenceStore::LockRedis {
            command
                .args(["--fence-store", FenceStore::LockRedis.name()])
                .args(["--fence-replicas", &self.config.fence_replicas.to_string()]);
        }
        let workloads = self.config.workloads_on(self.backend);
        if !workloads.is_empty() {
            let list: Vec<&str> = workloads.iter().map(|w| w.name()).collect();
            command.args(["--workloads", &list.join(",")]);
        }
        let mut child = command.spawn().context("spawning a worker")?;
        let stdout = child.stdout.take().context("worker stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .context("the worker did not connect within 60 s")??
            .context("the worker exited before connecting")?;
        let client_id = line
            .strip_prefix("ready ")
            .context("unexpected worker greeting")?
            .to_owned();
        let pid = child.id().context("worker pid")?;
        self.workers().push(WorkerProc {
            id,
            pid,
            client_id,
            child,
            proxies,
            slot,
        });
        Ok(())
    }

    /// Whether `client_id` is one of this run's workers.
    fn is_worker(&self, client_id: &str) -> bool {
        self.workers().iter().any(|w| w.client_id == client_id)
    }

    /// The worker a holder-targeted step hits: the trigger's holder, else one picked by
    /// the step's number. Returns (id, pid, slot).
    fn aimed_worker(&self, aim: &Aim, pick: u64) -> anyhow::Result<(u32, u32, usize)> {
        let workers = self.workers();
        anyhow::ensure!(!workers.is_empty(), "no worker runs");
        let by_target = aim
            .target
            .as_ref()
            .and_then(|t| workers.iter().find(|w| w.client_id == t.client_id));
        let w = by_target.unwrap_or(&workers[(pick % workers.len() as u64) as usize]);
        Ok((w.id, w.pid, w.slot))
    }

    /// The lock key a server-side step aims at: the trigger's lock, else the first name.
    fn aimed_key(&self, aim: &Aim) -> String {
        let name = aim
            .target
            .as_ref()
            .map_or_else(|| self.names[0].clone(), |t| t.name.clone());
        format!("lock:{{{name}}}")
    }

    /// `key` and the port of the master serving it now, for the `start` target of a step
    /// that fails it over: the checker ignores the old master's key events for a while
    /// after (its data is stale until it is demoted and resynced).
    async fn failover_target(&self, key: &str) -> String {
        let port = self
            .lock_servers()
            .await
            .lock_master(key, 0)
            .map(RedisServer::port);
        match port {
            Some(port) => format!("{key} old master port {port}"),
            None => key.to_owned(),
        }
    }

    /// The lab index of `server` (by its lab address).
    fn lab_index(&self, server: &RedisServer) -> Option<usize> {
        let lab = self.lab.as_ref()?;
        let addr = server.bind_addr()?;
        lab.server_addrs().iter().position(|a| *a == addr)
    }

    fn record(&self, fault: &str, phase: &str, target: &str, aim: &Aim) {
        let start = phase == "start";
        if start {
            self.started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(aim.id);
        }
        let t = aim.target.as_ref().filter(|_| start);
        self.nemesis.emit(&Event::Fault {
            t: now_ns(),
            backend: self.backend.name().to_owned(),
            fault: fault.to_owned(),
            phase: phase.to_owned(),
            target: target.to_owned(),
            id: Some(aim.id),
            effective: aim.effective.filter(|_| start),
            lock: t.map(|t| t.name.clone()),
            owner: t.map(|t| t.owner.clone()),
            token: t.map(|t| t.fencing_token),
        });
    }

    /// Runs one step: waits for its trigger (state-triggered kinds, up to the bound), then
    /// injects it and heals it after its duration.
    async fn run_step(&self, step: &Step) -> anyhow::Result<()> {
        let topology = step.kind.exclusive();
        let _one = if topology {
            Some(self.exclusive.lock().await)
        } else {
            None
        };
        let mut aim = Aim {
            id: self.next_fault.fetch_add(1, Ordering::Relaxed),
            ..Aim::default()
        };
        if step.kind.triggered() {
            if let Some(inspector) = &self.inspector {
                let mut trigger_config =
                    TriggerConfig::new(self.trigger_names(), self.config.lease);
                if self.config.quick {
                    trigger_config.bound = self.config.lease * 2;
                }
                trigger_config.waiters_unknown = self.backend == Backend::Postgres;
                let triggered = match self.aim_kind(step.kind) {
                    (TargetKind::Plain, _) => {
                        trigger::wait_for_target(inspector, &trigger_config, |id| {
                            self.is_worker(id)
                        })
                        .await
                    }
                    (kind, name) => {
                        trigger::wait_for_family_target(
                            inspector,
                            kind,
                            &name,
                            &trigger_config,
                            |id| self.is_worker(id),
                        )
                        .await
                    }
                };
                match triggered {
                    Triggered::Effective(target) => {
                        aim.effective = Some(true);
                        aim.target = Some(target);
                    }
                    Triggered::NotEffective { longest } => {
                        aim.effective = Some(false);
                        aim.target = longest;
                    }
                }
            }
        }
        // A restarted server is a new process, whose clock starts without the offset of
        // earlier jumps: for one that had been moved back, that is a forward jump.
        // A step aimed at a shard's master needs one: repaired first if the shard has none
        // (unless a topology step runs now: it checks when it is done).
        let name = step.kind.name();
        if self.backend == Backend::Cluster && needs_master(step) {
            if topology {
                self.ensure_masters(&format!("before {name}")).await;
            } else if let Ok(_check) = self.exclusive.try_lock() {
                self.ensure_masters(&format!("before {name}")).await;
            }
        }
        let clocks_before = self.clock_offsets().await;
        let master_before = if topology {
            self.master_clock(&aim, step.pick).await
        } else {
            None
        };
        let started = now_ns();
        let result = match step.kind {
            FaultKind::Classic(fault) => self.inject(fault, step, &aim).await,
            FaultKind::Net(fault) => self.inject_net(fault, step, &aim).await,
        };
        if let Err(e) = &result {
            // Recorded, not only printed: a step without a `start` was skipped (its target
            // could not be resolved); one with a `start` failed along the way.
            let skipped = !self
                .started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&aim.id);
            self.nemesis.emit(&Event::Harness {
                t_start: started,
                t: now_ns(),
                backend: self.backend.name().to_owned(),
                action: if skipped { "skip_step" } else { "step_failed" }.to_owned(),
                since: None,
                slots: Vec::new(),
                ports: Vec::new(),
                id: (!skipped).then_some(aim.id),
                detail: format!("{name} (injection {}): {e:#}", aim.id),
                ok: false,
            });
            if !skipped {
                // Close its window where it failed (what it did before may still count).
                self.record(name, "heal", &format!("step failed: {e:#}"), &aim);
            }
        }
        if self.backend == Backend::Cluster && topology {
            self.ensure_masters(&format!("after {name}")).await;
        }
        self.record_clock_resets(&clocks_before, started).await;
        if let Some(before) = master_before {
            self.record_promotion_skew(&aim, step.pick, before, started)
                .await;
        }
        // A restarted data server forgot the setting.
        if let (Some(n), Backend::Sentinel) = (self.config.min_replicas, self.backend) {
            self.lock_servers()
                .await
                .set_min_replicas(n, MIN_REPLICAS_MAX_LAG);
        }
        result
    }

    /// Cluster: records the layout of the shards (a `shard` harness event each), so that
    /// the checker touches only the locks of the shard a one-server fault hit. Nothing is
    /// recorded when no node answers (the checker then takes every fault to touch every
    /// lock).
    async fn record_shards(&self) {
        let shards = match self.with_servers(|servers| servers.shards()).await {
            Ok(shards) => shards,
            Err(e) => {
                eprintln!("lock-chaos: cluster: cannot read the shards' layout: {e:#}");
                return;
            }
        };
        for shard in shards {
            let t = now_ns();
            self.nemesis.emit(&Event::Harness {
                t_start: t,
                t,
                backend: self.backend.name().to_owned(),
                action: "shard".to_owned(),
                since: None,
                detail: format!("slots {:?}, ports {:?}", shard.slots, shard.ports),
                slots: shard.slots,
                ports: shard.ports,
                id: None,
                ok: true,
            });
        }
    }

    /// Cluster: checks that every shard has a live master and repairs each that has none
    /// ([`Servers::repair_masterless`]), recording each repair as a `repair_shard` harness
    /// event (the checker treats the shard's holds in the outage as failed over). Call it
    /// holding [`World::exclusive`].
    async fn ensure_masters(&self, why: &str) {
        let found = now_ns();
        let shards = self.with_servers(|servers| servers.masterless()).await;
        match shards {
            Ok(shards) if shards.is_empty() => {
                self.last_healthy.store(now_ns(), Ordering::Relaxed);
                return;
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("lock-chaos: cluster: cannot check the shards ({why}): {e:#}");
                return;
            }
        }
        let since = self.last_healthy.load(Ordering::Relaxed);
        let repairs = self
            .with_servers(|servers| Ok(servers.repair_masterless()))
            .await
            .unwrap_or_default();
        let all_ok = repairs.iter().all(|r| r.ok);
        for repair in repairs {
            let detail = format!("{why}: slots {:?}: {}", repair.slots, repair.action);
            eprintln!(
                "lock-chaos: cluster: shard without a master repaired ({}): {detail}",
                if repair.ok { "ok" } else { "FAILED" }
            );
            self.nemesis.emit(&Event::Harness {
                t_start: found,
                t: now_ns(),
                backend: self.backend.name().to_owned(),
                action: "repair_shard".to_owned(),
                since: Some(since),
                slots: repair.slots,
                ports: Vec::new(),
                id: None,
                detail,
                ok: repair.ok,
            });
        }
        if all_ok {
            self.last_healthy.store(now_ns(), Ordering::Relaxed);
        }
    }

    /// The wall-clock offset of every data server process moved by the clock library:
    /// (port, pid, offset ms); empty without the library.
    async fn clock_offsets(&self) -> Vec<(u16, u32, i64)> {
        let Some(shim) = &self.shim else {
            return Vec::new();
        };
        let pids = self.lock_servers().await.data_pids();
        pids.into_iter()
            .map(|(port, pid)| (port, pid, shim.offset_ms(pid)))
            .filter(|&(_, _, ms)| ms != 0)
            .collect()
    }

    /// The master serving the aimed lock's key (port, clock offset ms) when the clock
    /// library moves clocks and the backend has replicas (Sentinel, Cluster).
    async fn master_clock(&self, aim: &Aim, pick: u64) -> Option<(u16, i64)> {
        let shim = self.shim.as_ref()?;
        if !matches!(self.backend, Backend::Sentinel | Backend::Cluster) {
            return None;
        }
        let key = self.aimed_key(aim);
        let servers = self.lock_servers().await;
        let master = servers.lock_master(&key, pick)?;
        Some((master.port(), shim.offset_ms(master.pid())))
    }

    /// Records, as `clock_jump_forward_by_failover` from `started` to now, a step that
    /// moved the aimed lock's key to a master whose clock is ahead of the old master's (an
    /// offset left by an earlier clock jump of either server): the keys carry absolute
    /// expiry times, which the new master's clock reaches early, as after a forward jump.
    async fn record_promotion_skew(&self, aim: &Aim, pick: u64, before: (u16, i64), started: u64) {
        let Some((port, ms)) = self.master_clock(aim, pick).await else {
            return;
        };
        let (old_port, old_ms) = before;
        if port == old_port || ms <= old_ms {
            return;
        }
        let target = format!(
            "master moved from port {old_port} (clock {old_ms:+} ms) to port {port} (clock {ms:+} ms): keys expire {} ms early",
            ms.saturating_sub(old_ms)
        );
        self.record_derived("clock_jump_forward_by_failover", &target, started);
    }

    /// Records a fault that a step caused without being scheduled (a clock moved by a
    /// restart or a failover) as a window from `started` to now, with an id of its own.
    fn record_derived(&self, fault: &str, target: &str, started: u64) {
        let id = self.next_fault.fetch_add(1, Ordering::Relaxed);
        for (t, phase) in [(started, "start"), (now_ns(), "heal")] {
            self.nemesis.emit(&Event::Fault {
                t,
                backend: self.backend.name().to_owned(),
                fault: fault.to_owned(),
                phase: phase.to_owned(),
                target: target.to_owned(),
                id: Some(id),
                effective: None,
                lock: None,
                owner: None,
                token: None,
            });
        }
    }

    /// Records, as `clock_jump_forward_by_restart` from `started` to now, each server of
    /// `before` that was moved back and has been restarted since (a new process, offset 0).
    async fn record_clock_resets(&self, before: &[(u16, u32, i64)], started: u64) {
        if before.is_empty() {
            return;
        }
        let now: Vec<(u16, u32)> = self.lock_servers().await.data_pids();
        for &(port, pid, ms) in before {
            let restarted = now.iter().any(|&(p, new)| p == port && new != pid);
            if restarted && ms < 0 {
                let target =
                    format!("server port {port} restarted: its clock lost a {ms} ms offset");
                self.record_derived("clock_jump_forward_by_restart", &target, started);
            }
        }
    }

    /// The servers, waited for without blocking the runtime (a blocking step may hold
    /// them for seconds: a failover, a paused master).
    async fn lock_servers(&self) -> std::sync::MutexGuard<'_, Servers> {
        loop {
            let busy = match self.servers.try_lock() {
                Ok(guard) => return guard,
                Err(std::sync::TryLockError::Poisoned(e)) => return e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => true,
            };
            if busy {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// Injects one classic fault and heals it.
    async fn inject(&self, fault: Fault, step: &Step, aim: &Aim) -> anyhow::Result<()> {
        let active = step.duration;
        let name = fault.name();
        match fault {
            Fault::PauseHolder => {
                let (id, pid, _) = self.aimed_worker(aim, step.pick)?;
                let target = format!("worker {id} pid {pid}");
                self.record(name, "start", &target, aim);
                signal(pid, libc::SIGSTOP);
                tokio::time::sleep(active).await;
                signal(pid, libc::SIGCONT);
                self.record(name, "heal", &target, aim);
            }
            Fault::KillHolder => {
                let (id, _, _) = self.aimed_worker(aim, step.pick)?;
                let mut worker = {
                    let mut workers = self.workers();
                    let index = workers
                        .iter()
                        .position(|w| w.id == id)
                        .context("the worker is gone")?;
                    workers.remove(index)
                };
                let target = format!("worker {} pid {}", worker.id, worker.pid);
                self.record(name, "start", &target, aim);
                signal(worker.pid, libc::SIGKILL);
                let _ = worker.child.wait().await;
                if let Some(lab) = &self.lab {
                    // A partition of the killed worker must not carry over to its successor.
                    let _ = lab.heal(worker.slot);
                }
                self.spawn_worker(worker.slot).await?;
                self.record(name, "heal", &target, aim);
            }
            Fault::RestartPersistent | Fault::RestartEmpty => {
                let index = match self.backend {
                    Backend::Redlock => {
                        (step.pick % crate::topology::REDLOCK_MASTERS as u64) as usize
                    }
                    _ => 0,
                };
                self.record(name, "start", &format!("server {index}"), aim);
                let target = self
                    .with_servers(move |servers| {
                        if fault == Fault::RestartEmpty {
                            servers.restart_empty(index)
                        } else {
                            servers.restart_persistent(index)
                        }
                    })
                    .await?;
                self.record(name, "heal", &target, aim);
            }
            Fault::ClientKill | Fault::ScriptFlush => {
                self.record(name, "start", "every data server", aim);
                let target = self
                    .with_servers(move |servers| {
                        Ok(if fault == Fault::ClientKill {
                            servers.client_kill()
                        } else {
                            servers.script_flush()
                        })
                    })
                    .await?;
                self.record(name, "heal", &target, aim);
            }
            Fault::ClockJumpForward => self.clock_jump(step, aim, true).await?,
            Fault::ClockJumpBack => self.clock_jump(step, aim, false).await?,
            Fault::ForceRelease => self.force_release(aim).await?,
            Fault::Partition if self.lab.is_some() => {
                self.lab_partition(name, Direction::Both, None, step, aim)
                    .await?;
            }
            Fault::Latency if self.lab.is_some() => {
                let lab = self.lab.clone().context("no lab")?;
                let (id, pid, slot) = self.aimed_worker(aim, step.pick)?;
                let target = format!("worker {id} pid {pid}");
                let delay = format!("{}ms", ADDED_LATENCY.as_millis());
                let tc = |lab: Arc<NetLab>, args: Vec<String>| {
                    blocking(move || {
                        let out = lab.command_in(slot, "tc").args(&args).output()?;
                        anyhow::ensure!(
                            out.status.success(),
                            "tc: {}",
                            String::from_utf8_lossy(&out.stderr).trim()
                        );
                        Ok(())
                    })
                };
                let add = [
                    "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", &delay,
                ];
                // Recorded only once in place (a failed `tc` injected nothing).
                tc(lab.clone(), add.iter().map(|a| a.to_string()).collect()).await?;
                self.record(name, "start", &target, aim);
                tokio::time::sleep(active).await;
                let del = ["qdisc", "del", "dev", "eth0", "root"];
                let healed = tc(lab, del.iter().map(|a| a.to_string()).collect()).await;
                self.record(name, "heal", &target, aim);
                healed?;
            }
            Fault::Partition | Fault::Latency => {
                let (id, pid, _) = self.aimed_worker(aim, step.pick)?;
                let target = format!("worker {id} pid {pid}");
                let mode = if fault == Fault::Partition {
                    ProxyMode::Blackhole
                } else {
                    ProxyMode::Delay(ADDED_LATENCY)
                };
                self.record(name, "start", &target, aim);
                self.set_proxies(Some(id), mode);
                tokio::time::sleep(active).await;
                self.set_proxies(Some(id), ProxyMode::Pass);
                self.record(name, "heal", &target, aim);
            }
            Fault::ProxyReset => {
                self.record(name, "start", "every worker", aim);
                for proxy in self.workers().iter().flat_map(|w| &w.proxies) {
                    proxy.reset();
                }
                self.record(name, "heal", "every worker", aim);
            }
            Fault::Failover => {
                let key = self.aimed_key(aim);
                let start = self.failover_target(&key).await;
                self.record(name, "start", &start, aim);
                let target = self
                    .with_servers(move |servers| servers.failover(&key))
                    .await?;
                self.record(name, "heal", &target, aim);
            }
            Fault::SlotMigration => {
                let key = self.aimed_key(aim);
                let start = self.failover_target(&key).await;
                self.record(name, "start", &start, aim);
                let target = self
                    .with_servers(move |servers| servers.move_slot(&key))
                    .await?;
                self.record(name, "heal", &target, aim);
            }
            Fault::StopMinority => {
                self.record(name, "start", "masters 0, 1 (killed)", aim);
                let dirs = self
                    .with_servers(move |servers| Ok(vec![servers.stop(0)?, servers.stop(1)?]))
                    .await?;
                tokio::time::sleep(active).await;
                self.with_servers(move |servers| {
                    for (i, dir) in dirs.iter().enumerate() {
                        servers.start_empty(i, dir)?;
                    }
                    Ok(())
                })
                .await?;
                self.record(name, "heal", "masters 0, 1 (restarted empty)", aim);
            }
            Fault::StopMajority => {
                let target = self.lock_servers().await.pause_masters(3)?;
                self.record(name, "start", &target, aim);
                tokio::time::sleep(active).await;
                self.lock_servers().await.resume_masters(3);
                self.record(name, "heal", &target, aim);
            }
            Fault::PauseServer => {
                let target = {
                    let servers = self.lock_servers().await;
                    let pg = servers.postgres().context("needs the postgres backend")?;
                    let target = pg.pause();
                    self.record(name, "start", &target, aim);
                    target
                };
                tokio::time::sleep(active).await;
                if let Some(pg) = self.lock_servers().await.postgres() {
                    pg.resume();
                }
                self.record(name, "heal", &target, aim);
            }
            Fault::TerminateBackends => self.terminate_backends(step, aim).await?,
            Fault::RestartFast | Fault::RestartCrash => {
                let (start, url) = {
                    let servers = self.lock_servers().await;
                    let pg = servers.postgres().context("needs the postgres backend")?;
                    (pg.describe(), pg.connection_string())
                };
                // What the restart may lose: the fence counters and the WAL not yet
                // flushed just before it (a read, then the kill a few ms later: counters
                // only grow meanwhile, so one lower after the restart was lost).
                let before = pg_snapshot(&url).await.ok();
                let start = match &before {
                    Some(snap) => format!("{start}, {} WAL bytes unflushed", snap.unflushed),
                    None => start,
                };
                self.record(name, "start", &start, aim);
                let target = self
                    .with_servers(move |servers| {
                        let pg = servers.postgres_mut()?;
                        if fault == Fault::RestartFast {
                            pg.restart_fast()
                        } else {
                            pg.crash_restart()
                        }
                    })
                    .await?;
                let after = pg_snapshot(&url).await.ok();
                let target = match (&before, &after) {
                    (Some(before), Some(after)) => {
                        let lower = before
                            .fences
                            .iter()
                            .filter(|(key, token)| {
                                after.fences.get(*key).is_none_or(|now| now < *token)
                            })
                            .count();
                        format!(
                            "{target}, fence counters rolled back: {lower} of {}",
                            before.fences.len()
                        )
                    }
                    _ => target,
                };
                self.record(name, "heal", &target, aim);
            }
        }
        Ok(())
    }

    /// `pg_terminate_backend` of every session of the aimed worker (its `application_name`),
    /// through a connection of the harness's own. Recorded as effective only when the
    /// trigger found a long hold and at least one session was terminated.
    async fn terminate_backends(&self, step: &Step, aim: &Aim) -> anyhow::Result<()> {
        let name = Fault::TerminateBackends.name();
        let (id, pid, _) = self.aimed_worker(aim, step.pick)?;
        let url = self
            .lock_servers()
            .await
            .postgres()
            .context("needs the postgres backend")?
            .connection_string();
        let (client, connection) = tokio::time::timeout(
            Duration::from_secs(2),
            tokio_postgres::connect(&url, tokio_postgres::NoTls),
        )
        .await
        .context("connecting to postgres: timed out")??;
        let driver = tokio::spawn(connection);
        let application = crate::topology::pg_application_name(id);
        let terminated = tokio::time::timeout(
            Duration::from_secs(2),
            client.query_one(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) \
                 FROM pg_stat_activity WHERE application_name = $1",
                &[&application],
            ),
        )
        .await
        .context("pg_terminate_backend: timed out")??
        .try_get::<_, i64>(0)?;
        drop(client);
        let _ = driver.await;
        let hit = Aim {
            effective: aim.effective.map(|e| e && terminated > 0),
            ..aim.clone()
        };
        let target = format!("worker {id} pid {pid}: {terminated} sessions terminated");
        self.record(name, "start", &target, &hit);
        self.record(name, "heal", &target, &hit);
        Ok(())
    }

    /// Sets the proxies of worker `id` (every worker: `None`) to `mode`.
    fn set_proxies(&self, id: Option<u32>, mode: ProxyMode) {
        for worker in self
            .workers()
            .iter()
            .filter(|w| id.is_none_or(|id| w.id == id))
        {
            for proxy in &worker.proxies {
                proxy.set_mode(mode);
            }
        }
    }

    /// A real partition of the aimed worker in the lab: from every data server and sentinel
    /// (`servers: None`) or from those lab indices, in `direction`, for the step's duration.
    async fn lab_partition(
        &self,
        name: &str,
        direction: Direction,
        servers: Option<Vec<usize>>,
        step: &Step,
        aim: &Aim,
    ) -> anyhow::Result<()> {
        let lab = self.lab.clone().context("needs the network lab")?;
        let (id, pid, slot) = self.aimed_worker(aim, step.pick)?;
        let servers = servers.unwrap_or_else(|| self.lab_data.clone());
        let target = format!("worker {id} pid {pid} servers {servers:?} {direction:?}");
        self.record(name, "start", &target, aim);
        let cut = {
            let lab = lab.clone();
            blocking(move || lab.partition_servers(slot, &servers, direction)).await
        };
        tokio::time::sleep(step.duration).await;
        let healed = blocking(move || lab.heal(slot)).await;
        self.record(name, "heal", &target, aim);
        cut.and(healed)
    }

    /// A jump of one server's wall clock (the aimed lock's master), `forward` or back by
    /// the step's duration, with the clock library; without it, the emulation: every TTL of
    /// every data server cut (forward) or lengthened (back) by two leases.
    async fn clock_jump(&self, step: &Step, aim: &Aim, forward: bool) -> anyhow::Result<()> {
        let name = if forward {
            Fault::ClockJumpForward.name()
        } else {
            Fault::ClockJumpBack.name()
        };
        let Some(shim) = &self.shim else {
            self.record(name, "start", "every data server (emulated)", aim);
            let jump = self.config.lease.saturating_mul(2);
            let target = self
                .with_servers(move |servers| Ok(servers.clock_jump(jump, forward)))
                .await?;
            self.record(name, "heal", &target, aim);
            return Ok(());
        };
        let key = self.aimed_key(aim);
        let (pid, port) = {
            let servers = self.lock_servers().await;
            let server = servers
                .lock_master(&key, step.pick)
                .context("no master for the key")?;
            (server.pid(), server.port())
        };
        let ms = step.duration.as_millis() as i64;
        let delta = if forward { ms } else { -ms };
        let target = format!("server port {port} pid {pid} {delta:+} ms");
        self.record(name, "start", &target, aim);
        let jumped = shim.jump_ms(pid, delta);
        self.record(name, "heal", &target, aim);
        jumped
    }

    /// An operator's force release of the aimed lock (a plain lock, or the family's fair
    /// lock, read-write lock or semaphore), through the admin API of the harness's own
    /// client, as `lockctl` does. The fence counter of the name is read first and named in
    /// the `start` target (`lock:{name} <kind> counter <n>`): a hold granted before the
    /// deletion but recorded after the start has a token at or below it, so the checker can
    /// tell the force-released holders from their successors. The heal's target adds
    /// `deleted true` when a live hold was deleted.
    async fn force_release(&self, aim: &Aim) -> anyhow::Result<()> {
        let fault = Fault::ForceRelease.name();
        let admin = self.admin.as_ref().context("no admin client")?.admin();
        let (kind, name) = aim.target.as_ref().map_or_else(
            || (TargetKind::Plain, self.names[0].clone()),
            |t| (t.kind, t.name.clone()),
        );
        let bound = Duration::from_secs(2);
        let counter = tokio::time::timeout(bound, async {
            match kind {
                TargetKind::Plain => admin.inspect(&name).await.map(|i| i.last_fencing_token),
                TargetKind::Fair => admin
                    .inspect_fair(&name)
                    .await
                    .map(|i| i.last_fencing_token),
                TargetKind::ReadWrite => admin
                    .inspect_read_write(&name)
                    .await
                    .map(|i| i.last_fencing_token),
                TargetKind::Semaphore => admin
                    .inspect_semaphore(&name)
                    .await
                    .map(|i| i.last_fencing_token),
            }
        })
        .await
        .ok()
        .and_then(Result::ok)
        .flatten();
        let target = format!(
            "lock:{{{name}}} {} counter {}",
            kind.name(),
            counter.map_or_else(|| "?".to_owned(), |c| c.to_string())
        );
        self.record(fault, "start", &target, aim);
        let deleted = tokio::time::timeout(bound, async {
            match kind {
                TargetKind::Plain => admin.force_release(&name).await,
                TargetKind::Fair => admin.force_release_fair(&name).await,
                TargetKind::ReadWrite => admin.force_release_read_write(&name).await,
                TargetKind::Semaphore => admin.force_release_semaphore(&name).await,
            }
        })
        .await
        .map_err(|_| anyhow!("the force release of {name} did not answer within {bound:?}"))??;
        self.record(fault, "heal", &format!("{target} deleted {deleted}"), aim);
        Ok(())
    }

    /// Injects one fault of the randomized schedule's own list and heals it.
    async fn inject_net(&self, fault: NetFault, step: &Step, aim: &Aim) -> anyhow::Result<()> {
        let name = fault.name();
        match fault {
            NetFault::PartitionBoth => {
                self.lab_partition(name, Direction::Both, None, step, aim)
                    .await
            }
            NetFault::PartitionToServer => {
                self.lab_partition(name, Direction::ToHost, None, step, aim)
                    .await
            }
            NetFault::PartitionFromServer => {
                self.lab_partition(name, Direction::FromHost, None, step, aim)
                    .await
            }
            NetFault::PartitionOneMaster => {
                let key = self.aimed_key(aim);
                let index = {
                    let servers = self.lock_servers().await;
                    servers
                        .lock_master(&key, step.pick)
                        .and_then(|s| self.lab_index(s))
                        .context("the lock's master has no lab address")?
                };
                self.lab_partition(name, Direction::Both, Some(vec![index]), step, aim)
                    .await
            }
            NetFault::BareMajority => self.bare_majority(step, aim).await,
            NetFault::SplitBrain => self.split_brain(step, aim).await,
            NetFault::PauseMasterPastDownAfter => {
                let key = self.aimed_key(aim);
                let start = self.failover_target(&key).await;
                self.record(name, "start", &start, aim);
                let hold = step.duration;
                let target = self
                    .with_servers(move |servers| servers.pause_master_past_down_after(&key, hold))
                    .await;
                self.record(name, "heal", target.as_deref().unwrap_or("failed"), aim);
                target.map(drop)
            }
            NetFault::ManualFailover => {
                let key = self.aimed_key(aim);
                let start = self.failover_target(&key).await;
                self.record(name, "start", &start, aim);
                let target = self
                    .with_servers(move |servers| servers.manual_failover(&key, false))
                    .await;
                self.record(name, "heal", target.as_deref().unwrap_or("failed"), aim);
                target.map(drop)
            }
            NetFault::ReplicationLag => {
                // The master cut off from its replica (writes pile up unreplicated), then the
                // stale replica forced to take over.
                let lab = self.lab.clone().context("needs the network lab")?;
                let key = self.aimed_key(aim);
                let (master, replica) = {
                    let servers = self.lock_servers().await;
                    let master = servers.lock_master(&key, 0).and_then(|s| self.lab_index(s));
                    let replica = servers.lock_replica(&key).and_then(|s| self.lab_index(s));
                    (master.context("no master")?, replica.context("no replica")?)
                };
                let start = self.failover_target(&key).await;
                let target =
                    format!("{start}: lab servers {master} -/- {replica}, then forced failover");
                self.record(name, "start", &target, aim);
                let cut = lab.cut_servers(&[master], &[replica]);
                tokio::time::sleep(step.duration).await;
                let over = self
                    .with_servers(move |servers| servers.manual_failover(&key, true))
                    .await;
                let healed = lab.heal_servers();
                self.record(name, "heal", over.as_deref().unwrap_or("failed"), aim);
                cut.and(over.map(drop)).and(healed)
            }
        }
    }

    /// Redlock: two masters killed while locks are taken (those live on the other three),
    /// started again from their own persistence after the step's duration (they never saw
    /// those locks), then one of the three restarted empty: a lock taken meanwhile is left
    /// on two of five, and another client can take it at once (the README's Redlock column).
    async fn bare_majority(&self, step: &Step, aim: &Aim) -> anyhow::Result<()> {
        let name = NetFault::BareMajority.name();
        let n = crate::topology::REDLOCK_MASTERS as u64;
        let away = [(step.pick % n) as usize, ((step.pick + 1) % n) as usize];
        let empty = ((step.pick + 2) % n) as usize;
        let target = format!("masters {away:?} killed, then master {empty} restarted empty");
        self.record(name, "start", &target, aim);
        let killed = self
            .with_servers(move |servers| {
                for i in away {
                    servers.kill_server(i)?;
                }
                Ok(())
            })
            .await;
        tokio::time::sleep(step.duration).await;
        let back = self
            .with_servers(move |servers| {
                for i in away {
                    servers.restart_server(i)?;
                }
                servers.restart_empty(empty)
            })
            .await;
        self.record(name, "heal", &target, aim);
        killed.and(back.map(drop))
    }

    /// Sentinel: the master cut off from its replica and the sentinels (every worker still
    /// reaches it), kept cut until the sentinels promoted the replica (at most 20 s) and for
    /// the step's duration after, then healed (the sentinels demote the old master). Named
    /// `split_brain_min_replicas` when `min-replicas-to-write` is set.
    async fn split_brain(&self, step: &Step, aim: &Aim) -> anyhow::Result<()> {
        let name = if self.config.min_replicas.is_some() {
            "split_brain_min_replicas"
        } else {
            NetFault::SplitBrain.name()
        };
        let lab = self.lab.clone().context("needs the network lab")?;
        let (master, others, port) = {
            let servers = self.lock_servers().await;
            let Servers::Sentinel(set) = &*servers else {
                anyhow::bail!("split brain needs Sentinel");
            };
            let master = self.lab_index(set.master()).context("no lab address")?;
            let others: Vec<usize> = std::iter::once(set.replica())
                .chain(set.sentinels().iter())
                .filter_map(|s| self.lab_index(s))
                .collect();
            (master, others, set.master().port())
        };
        let target = format!("old master port {port} (lab {master}) cut from lab {others:?}");
        self.record(name, "start", &target, aim);
        let cut = lab.cut_servers(&[master], &others);
        // Locked at each look, not across the wait: the nemesis's other steps go on.
        let servers = self.servers.clone();
        let promoted = blocking(move || {
            let started = std::time::Instant::now();
            while started.elapsed() < Duration::from_secs(20) {
                let now = servers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .sentinel_master_port();
                if now.is_some_and(|p| p != port) {
                    return Ok(true);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(false)
        })
        .await
        .unwrap_or(false);
        tokio::time::sleep(step.duration).await;
        let healed = lab.heal_servers();
        // The sentinels demote the old master once they reach it again.
        tokio::time::sleep(Duration::from_secs(2)).await;
        self.lock_servers().await.sync_roles();
        self.record(
            name,
            "heal",
            &format!(
                "{target}; {}",
                if promoted {
                    "replica promoted"
                } else {
                    "no failover within 20 s"
                }
            ),
            aim,
        );
        cut.and(healed)
    }

    /// Asks every worker to finish its round and exit; kills those that do not in time.
    async fn stop_workers(&self) {
        let mut workers = std::mem::take(&mut *self.workers());
        for worker in &workers {
            signal(worker.pid, libc::SIGCONT);
            signal(worker.pid, libc::SIGTERM);
        }
        for worker in &mut workers {
            if tokio::time::timeout(Duration::from_secs(20), worker.child.wait())
                .await
                .is_err()
            {
                eprintln!("lock-chaos: worker {} did not stop; killing it", worker.id);
                let _ = worker.child.kill().await;
            }
        }
        if let Some(lab) = &self.lab {
            let _ = lab.heal_all();
        }
    }
}

/// Records every `expired` and `del` key event of the data server on `port` (as
/// [`Event::KeyGone`]) until `watching` turns false. A restarted server forgets the
/// `notify-keyspace-events` setting and drops the subscription: both are set up again,
/// retrying every 50 ms, once it has loaded its data. The loop also measures its own lateness (it wakes at least every
/// 10 ms) and records a harness stall when it woke late, since a late notification then
/// carries a late time.
fn watch_key_events(port: u16, sink: &EventSink, watching: &AtomicBool) {
    let server = format!("127.0.0.1:{port}");
    let threshold = worker::STALL_THRESHOLD.as_nanos() as u64;
    let Ok(client) = redis::Client::open(format!("redis://{server}/")) else {
        return;
    };
    while watching.load(Ordering::Relaxed) {
        let subscribed = (|| -> redis::RedisResult<redis::Connection> {
            let mut conn = client.get_connection_with_timeout(Duration::from_millis(500))?;
            conn.set_read_timeout(Some(Duration::from_millis(500)))?;
            // A server restarted from its append-only file replays it while loading, and
            // would report every `DEL` of the replay as a removal happening now: subscribe
            // only once it has loaded (the setting is off until then).
            let info: String = redis::cmd("INFO").arg("persistence").query(&mut conn)?;
            if !loaded(&info) {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "the server is loading its data",
                )));
            }
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("notify-keyspace-events")
                .arg("Exg")
                .query::<()>(&mut conn)?;
            Ok(conn)
        })();
        let Ok(mut conn) = subscribed else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let mut pubsub = conn.as_pubsub();
        if pubsub.psubscribe("__keyevent@*__:expired").is_err()
            || pubsub.psubscribe("__keyevent@*__:del").is_err()
            || pubsub
                .set_read_timeout(Some(Duration::from_millis(10)))
                .is_err()
        {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let mut last = now_ns();
        while watching.load(Ordering::Relaxed) {
            let message = pubsub.get_message();
            let t = now_ns();
            // A wait is at most the 10 ms read timeout; more means this thread did not run.
            if t.saturating_sub(last) > 10_000_000 + threshold {
                sink.emit(&Event::Stall {
                    t_start: last,
                    t,
                    worker: None,
                });
            }
            last = t;
            match message {
                Ok(msg) => {
                    let how = msg
                        .get_channel_name()
                        .rsplit(':')
                        .next()
                        .unwrap_or("")
                        .to_owned();
                    if let Ok(key) = msg.get_payload::<String>() {
                        sink.emit(&Event::KeyGone {
                            t,
                            server: server.clone(),
                            key,
                            how,
                        });
                    }
                }
                Err(e) if e.is_timeout() => {}
                Err(_) => break,
            }
        }
    }
}

/// Whether a server's `INFO persistence` says it has loaded its data: its `loading` field
/// is `0`. (Not a search for `loading:0`: Redis 7's `async_loading:0` contains it, and
/// matched while the server was still replaying its append-only file, whose every `DEL`
/// was then recorded as a removal happening after the restart.)
fn loaded(info: &str) -> bool {
    info.lines().any(|line| line.trim_end() == "loading:0")
}

/// Whether `step` acts on the master (or replica) of its lock's shard.
fn needs_master(step: &Step) -> bool {
    matches!(
        step.target,
        crate::schedule::TargetSelector::LockMaster | crate::schedule::TargetSelector::LockReplica
    ) || matches!(
        step.kind,
        FaultKind::Classic(Fault::ClockJumpForward | Fault::ClockJumpBack)
            | FaultKind::Net(NetFault::PartitionOneMaster)
    )
}

/// The PostgreSQL state a restart may lose: every fence counter, and how much WAL was
/// inserted but not yet flushed.
struct PgSnapshot {
    fences: HashMap<String, i64>,
    unflushed: i64,
}

/// Reads a [`PgSnapshot`] through a connection of the harness's own (2 s bounds).
async fn pg_snapshot(url: &str) -> anyhow::Result<PgSnapshot> {
    let (client, connection) = tokio::time::timeout(
        Duration::from_secs(2),
        tokio_postgres::connect(url, tokio_postgres::NoTls),
    )
    .await
    .context("connecting to postgres: timed out")??;
    let driver = tokio::spawn(connection);
    let read = async {
        let unflushed: i64 = client
            .query_one(
                "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), pg_current_wal_flush_lsn())::bigint",
                &[],
            )
            .await?
            .try_get(0)?;
        let rows = client
            .query("SELECT key, token FROM distlock_fences", &[])
            .await?;
        let mut fences = HashMap::new();
        for row in rows {
            fences.insert(row.try_get::<_, String>(0)?, row.try_get::<_, i64>(1)?);
        }
        anyhow::Ok(PgSnapshot { fences, unflushed })
    };
    let snapshot = tokio::time::timeout(Duration::from_secs(2), read)
        .await
        .context("reading the fence counters: timed out")?;
    drop(client);
    let _ = driver.await;
    snapshot
}

/// Sends `signal` to a worker process we started (and have not reaped).
fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: plain syscall on the pid of our own unreaped child.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis 7.0's `INFO persistence` while it replays its append-only file: `loading:1`
    /// and `async_loading:0`.
    #[test]
    fn loaded_reads_the_loading_field_not_async_loading() {
        let loading = "# Persistence\r\nloading:1\r\nasync_loading:0\r\ncurrent_cow_peak:0\r\n";
        assert!(!loaded(loading));
        let done = "# Persistence\r\nloading:0\r\nasync_loading:0\r\ncurrent_cow_peak:0\r\n";
        assert!(loaded(done));
    }

    /// A server restarted from an append-only file full of `DEL`s (as the lock scripts
    /// leave it) replays them; the key-event watcher must not record them as removals
    /// happening after the restart (it did, and the checker then took a live lock for gone
    /// and reported a late `lost()`), and must record the removals that follow.
    #[test]
    fn the_key_event_watcher_skips_an_append_only_replay() {
        let mut server = RedisServer::start_with(crate::topology::persistent());
        let mut conn = server.conn();
        for _ in 0..40 {
            let mut pipe = redis::pipe();
            for _ in 0..5_000 {
                pipe.cmd("SET").arg("replayed").arg("v").ignore();
                pipe.cmd("DEL").arg("replayed").ignore();
            }
            pipe.query::<()>(&mut conn).unwrap();
        }
        drop(conn);
        let dir = std::env::temp_dir().join(format!("lock-chaos-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.jsonl");
        let _ = std::fs::remove_file(&path);
        let sink = EventSink::open(&path).unwrap();
        let watching = Arc::new(AtomicBool::new(true));
        let port = server.port();
        server.kill();
        let watcher = std::thread::spawn({
            let (sink, watching) = (sink.clone(), watching.clone());
            move || watch_key_events(port, &sink, &watching)
        });
        server.restart(); // replays 200,000 DELs
        let mut conn = server.conn();
        // Once the watcher is subscribed (it set the key-event flags), a live removal.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let flags: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg("notify-keyspace-events")
                .query(&mut conn)
                .unwrap();
            if flags.get(1).is_some_and(|f| f.contains('E')) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the watcher never subscribed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(100));
        redis::cmd("SET")
            .arg("live")
            .arg("v")
            .query::<()>(&mut conn)
            .unwrap();
        redis::cmd("DEL")
            .arg("live")
            .query::<()>(&mut conn)
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        watching.store(false, Ordering::Relaxed);
        watcher.join().unwrap();
        let gone = |name: &str| {
            read_events(&path)
                .unwrap()
                .iter()
                .filter(|e| matches!(e, Event::KeyGone { key, .. } if key == name))
                .count()
        };
        assert_eq!(
            gone("replayed"),
            0,
            "removals replayed from the file were recorded"
        );
        assert_eq!(gone("live"), 1, "the live removal was not recorded");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_kinds_follow_what_the_machine_can_do() {
        let with = kinds_for(Backend::Standalone, true, true);
        let without = kinds_for(Backend::Standalone, false, false);
        assert!(with.contains(&FaultKind::Classic(Fault::Latency)));
        assert!(!kinds_for(Backend::Standalone, true, false)
            .contains(&FaultKind::Classic(Fault::Latency)));
        assert!(without.contains(&FaultKind::Classic(Fault::Latency)));
        assert!(with.contains(&FaultKind::Net(NetFault::PartitionFromServer)));
        assert!(!with.contains(&FaultKind::Classic(Fault::ProxyReset)));
        assert!(!without.contains(&FaultKind::Net(NetFault::PartitionBoth)));
        assert!(without.contains(&FaultKind::Classic(Fault::Partition)));
        let sentinel = kinds_for(Backend::Sentinel, true, true);
        for kind in [
            NetFault::SplitBrain,
            NetFault::ReplicationLag,
            NetFault::ManualFailover,
            NetFault::PauseMasterPastDownAfter,
        ] {
            assert!(sentinel.contains(&FaultKind::Net(kind)), "{kind:?}");
        }
        assert!(!kinds_for(Backend::Sentinel, false, false)
            .contains(&FaultKind::Net(NetFault::SplitBrain)));
        let redlock = kinds_for(Backend::Redlock, false, false);
        assert!(redlock.contains(&FaultKind::Net(NetFault::BareMajority)));
        assert!(redlock.contains(&FaultKind::Classic(Fault::ClockJumpForward)));
        assert!(redlock.contains(&FaultKind::Classic(Fault::ClockJumpBack)));
        assert!(kinds_for(Backend::Memory, true, true).is_empty());
        // An operator's force release on every backend with servers (the admin API has it).
        for backend in [
            Backend::Standalone,
            Backend::Sentinel,
            Backend::Cluster,
            Backend::Redlock,
        ] {
            assert!(
                kinds_for(backend, true, true).contains(&FaultKind::Classic(Fault::ForceRelease)),
                "{}",
                backend.name()
            );
        }
    }

    #[test]
    fn the_quick_schedule_is_fixed_and_short() {
        let lease = Duration::from_millis(1500);
        let (schedule, steps) = fixed_steps(Backend::Standalone, true, 1, lease, true);
        let again = fixed_steps(Backend::Standalone, true, 1, lease, true).1;
        assert_eq!(steps, again);
        assert!(steps.len() <= 8);
        assert!(steps
            .iter()
            .any(|s| s.kind == FaultKind::Net(NetFault::PartitionFromServer)));
        let pause = steps
            .iter()
            .find(|s| s.kind == FaultKind::Classic(Fault::PauseHolder))
            .unwrap();
        assert_eq!(pause.duration, lease + Duration::from_secs(1));
        assert_eq!(schedule.baseline, Duration::from_secs(6));
        // One force release in the quick standalone run (a few seconds more).
        let force = FaultKind::Classic(Fault::ForceRelease);
        assert_eq!(steps.iter().filter(|s| s.kind == force).count(), 1);
        let (_, sentinel) = fixed_steps(Backend::Sentinel, true, 1, lease, true);
        assert_eq!(
            sentinel.last().map(|s| s.kind),
            Some(FaultKind::Net(NetFault::ManualFailover))
        );
        // Without the lab, no step needs it.
        let (_, plain) = fixed_steps(Backend::Standalone, true, 1, lease, false);
        assert!(plain
            .iter()
            .all(|s| matches!(s.kind, FaultKind::Classic(_))));
    }

    /// The postgres backend: its five server-side and process faults in the randomized
    /// schedule (lab or not), four of them in the quick run, and only the plain-lock
    /// workloads, each skipped one with a reason.
    #[test]
    fn postgres_has_its_faults_and_the_plain_lock_and_leader_workloads() {
        use crate::workload::Workload;
        let expected: Vec<FaultKind> = [
            Fault::PauseServer,
            Fault::KillHolder,
            Fault::TerminateBackends,
            Fault::RestartFast,
            Fault::RestartCrash,
        ]
        .into_iter()
        .map(FaultKind::Classic)
        .collect();
        assert_eq!(kinds_for(Backend::Postgres, false, false), expected);
        assert_eq!(kinds_for(Backend::Postgres, true, true), expected);
        let lease = Duration::from_millis(1500);
        let (schedule, quick) = fixed_steps(Backend::Postgres, true, 1, lease, false);
        assert_eq!(
            quick.iter().map(|s| s.kind.name()).collect::<Vec<_>>(),
            [
                "pause_server",
                "kill_holder",
                "terminate_backends",
                "restart_crash"
            ]
        );
        // The quick segment's schedule: a baseline and four faults with their settle time,
        // well under a minute.
        let total = schedule.baseline
            + quick
                .iter()
                .map(|s| s.duration + schedule.settle)
                .sum::<Duration>();
        assert!(total <= Duration::from_secs(40), "{total:?}");
        for w in Workload::ALL {
            let runs = matches!(
                w,
                Workload::Multi
                    | Workload::AtLeast
                    | Workload::Layer
                    | Workload::Shutdown
                    | Workload::Siblings
                    | Workload::Leader
            );
            assert_eq!(
                w.unsupported(Backend::Postgres).is_none(),
                runs,
                "{}",
                w.name()
            );
            assert_eq!(w.unsupported(Backend::Standalone), None);
        }
        assert!(Workload::Hot
            .unsupported(Backend::Postgres)
            .is_some_and(|r| r.contains("keep_hot")));
        assert!(Workload::Fair.unsupported(Backend::Redlock).is_some());
    }

    /// The server faults on a real PostgreSQL: a paused server answers nothing until it is
    /// resumed; a fast and a crash restart come back on the same port with the data; and
    /// with `synchronous_commit = off` the crash's target says so (what the checker reads).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_server_faults_act_on_the_server() {
        let mut servers = blocking(|| Ok(Servers::start_postgres(false)))
            .await
            .unwrap();
        let url = servers.postgres().unwrap().connection_string();
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
            .batch_execute("CREATE TABLE kept (v int); INSERT INTO kept VALUES (1)")
            .await
            .unwrap();
        let paused = servers.postgres().unwrap().pause();
        assert!(paused.contains("processes stopped"), "{paused}");
        let answer = tokio::time::timeout(
            Duration::from_millis(300),
            client.query_one("SELECT 1", &[]),
        )
        .await;
        assert!(answer.is_err(), "a paused server answered");
        servers.postgres().unwrap().resume();
        let value: i32 = client
            .query_one("SELECT v FROM kept", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(value, 1);
        drop(client);
        let (servers, fast, crash) = blocking(move || {
            let fast = servers.postgres_mut()?.restart_fast()?;
            let crash = servers.postgres_mut()?.crash_restart()?;
            Ok((servers, fast, crash))
        })
        .await
        .unwrap();
        assert!(fast.contains("synchronous_commit=off"), "{fast}");
        assert!(crash.contains(" -> "), "{crash}");
        let snapshot = pg_snapshot(&url).await;
        // No lock table in this database: the snapshot fails, the server answers.
        assert!(snapshot.is_err());
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let value: i32 = client
            .query_one("SELECT v FROM kept", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            value, 1,
            "a committed row (checkpointed by the fast restart) is kept"
        );
        drop(servers);
    }
}
