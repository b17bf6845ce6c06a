//! The orchestrator: per backend, start the servers and the register store, spawn worker
//! processes behind fault proxies, run the nemesis's schedule, stop everything, check.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use distlock::{LockClient, MemoryStore};
use lock_test_support::RedisServer;
use rand::seq::SliceRandom as _;
use rand::Rng as _;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::checker::{self, BackendReport};
use crate::clock::now_ns;
use crate::event::Event;
use crate::nemesis::{Fault, Schedule};
use crate::proxy::{FaultProxy, ProxyMode};
use crate::register::Registers;
use crate::sink::{read_events, EventSink};
use crate::topology::{Backend, Servers, SENTINEL_MASTER};
use crate::worker::{self, WorkerSetup};

/// Latency added by the `latency` fault, per chunk and direction.
const ADDED_LATENCY: Duration = Duration::from_millis(150);
/// Response timeout of the workers' lock clients.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

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

async fn run_backend(
    config: &RunConfig,
    backend: Backend,
    dir: &Path,
) -> anyhow::Result<BackendReport> {
    let schedule = Schedule::for_backend(backend, config.quick, config.rounds);
    let register = blocking(|| Ok(RedisServer::start())).await?;
    let register_url = register.url();
    let servers = Arc::new(Mutex::new(
        blocking(move || Ok(Servers::start(backend))).await?,
    ));
    let names: Vec<String> = (0..config.names).map(|i| format!("chaos-{i}")).collect();
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

    let mut world = World {
        backend,
        config: config.clone(),
        servers: servers.clone(),
        register_url,
        dir: dir.to_owned(),
        workers: Vec::new(),
        next_id: 0,
        nemesis,
        inspector: None,
        names: names.clone(),
        memory: Vec::new(),
    };

    if backend == Backend::Memory {
        world.start_memory_workers().await?;
        tokio::time::sleep(schedule.baseline).await;
        for (deadline, _) in &world.memory {
            deadline.store(0, Ordering::Relaxed);
        }
        for (_, handle) in world.memory.drain(..) {
            let _ = handle.await;
        }
    } else {
        world.inspector = Some(world.connect_direct().await?);
        for _ in 0..config.workers {
            world.spawn_worker().await?;
        }
        tokio::time::sleep(schedule.baseline).await;
        for &fault in &schedule.faults {
            if let Err(e) = world.inject(fault, &schedule).await {
                eprintln!("lock-chaos: {}: {}: {e:#}", backend.name(), fault.name());
            }
            tokio::time::sleep(schedule.settle).await;
        }
        world.stop_workers().await;
    }
    let run_end = now_ns();
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
    let truth = match Registers::connect(&world.register_url, "reg:").await {
        Ok(registers) => registers.truth(&names).await.map_err(anyhow::Error::from),
        Err(e) => Err(e),
    };
    let truth = match truth {
        Ok(truth) => Some(truth),
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

/// One worker process.
struct WorkerProc {
    id: u32,
    pid: u32,
    client_id: String,
    child: tokio::process::Child,
    proxies: Vec<FaultProxy>,
}

/// Everything the nemesis acts on.
struct World {
    backend: Backend,
    config: RunConfig,
    servers: Arc<Mutex<Servers>>,
    register_url: String,
    dir: PathBuf,
    workers: Vec<WorkerProc>,
    next_id: u32,
    nemesis: EventSink,
    inspector: Option<LockClient>,
    names: Vec<String>,
    memory: Vec<(Arc<AtomicU64>, tokio::task::JoinHandle<()>)>,
}

impl World {
    fn servers(&self) -> std::sync::MutexGuard<'_, Servers> {
        self.servers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client that reaches the servers without proxies (to find holders).
    async fn connect_direct(&self) -> anyhow::Result<LockClient> {
        let urls = self.servers().direct_urls();
        let builder = LockClient::builder().lease(self.config.lease);
        Ok(match self.backend {
            Backend::Memory => anyhow::bail!("no servers"),
            Backend::Standalone => builder.connect(&urls[0]).await?,
            Backend::Sentinel => builder.connect_sentinel(urls, SENTINEL_MASTER).await?,
            Backend::Cluster => builder.connect_cluster(urls).await?,
            Backend::Redlock => builder.connect_redlock(urls).await?,
        })
    }

    /// The memory baseline: workers are clients of one store in this process.
    async fn start_memory_workers(&mut self) -> anyhow::Result<()> {
        let store = MemoryStore::new();
        for id in 0..self.config.workers {
            let client = LockClient::builder()
                .lease(self.config.lease)
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
                registers: Registers::connect(&self.register_url, "reg:").await?,
                sink,
                worker: id,
                tasks: self.config.tasks,
                names: self.names.clone(),
                hold_max_ms: self.config.hold_max_ms,
                lease: self.config.lease,
                deadline_ns: deadline.clone(),
            };
            self.memory
                .push((deadline, tokio::spawn(worker::run(setup))));
        }
        Ok(())
    }

    /// Starts one worker process (with its own proxies) and waits until it is connected.
    async fn spawn_worker(&mut self) -> anyhow::Result<()> {
        let id = self.next_id;
        self.next_id += 1;
        let mut proxies = Vec::new();
        let urls = if self.backend.proxied() {
            let ports = self.servers().proxied_ports();
            let mut urls = Vec::new();
            for port in ports {
                let proxy = FaultProxy::start(port).await?;
                urls.push(format!("redis://127.0.0.1:{}/", proxy.port()));
                proxies.push(proxy);
            }
            urls
        } else {
            self.servers().direct_urls()
        };
        let mut command = tokio::process::Command::new(std::env::current_exe()?);
        command
            .arg("worker")
            .args(["--backend", self.backend.name()])
            .args(["--register-url", &self.register_url])
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
        self.workers.push(WorkerProc {
            id,
            pid,
            client_id,
            child,
            proxies,
        });
        Ok(())
    }

    /// The index of a worker that holds a lock now (or a random one after 2 s).
    async fn holder(&self) -> usize {
        if let Some(inspector) = &self.inspector {
            for _ in 0..40 {
                let mut names = self.names.clone();
                names.shuffle(&mut rand::rng());
                for name in &names {
                    let Ok(Ok(info)) = tokio::time::timeout(
                        Duration::from_millis(500),
                        inspector.admin().inspect(name),
                    )
                    .await
                    else {
                        continue;
                    };
                    if let Some(holder) = info.holder {
                        if let Some(i) = self
                            .workers
                            .iter()
                            .position(|w| w.client_id == holder.client_id())
                        {
                            return i;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        rand::rng().random_range(0..self.workers.len())
    }

    fn record(&self, fault: Fault, phase: &str, target: &str) {
        self.nemesis.emit(&Event::Fault {
            t: now_ns(),
            backend: self.backend.name().to_owned(),
            fault: fault.name().to_owned(),
            phase: phase.to_owned(),
            target: target.to_owned(),
            id: None,
            effective: None,
            lock: None,
            owner: None,
            token: None,
        });
    }

    /// Injects one fault and heals it.
    async fn inject(&mut self, fault: Fault, schedule: &Schedule) -> anyhow::Result<()> {
        let active = schedule.active;
        match fault {
            Fault::PauseHolder => {
                let worker = &self.workers[self.holder().await];
                let (pid, target) = (
                    worker.pid,
                    format!("worker {} pid {}", worker.id, worker.pid),
                );
                self.record(fault, "start", &target);
                signal(pid, libc::SIGSTOP);
                tokio::time::sleep(self.config.lease + Duration::from_secs(1)).await;
                signal(pid, libc::SIGCONT);
                self.record(fault, "heal", &target);
            }
            Fault::KillHolder => {
                let index = self.holder().await;
                let mut worker = self.workers.remove(index);
                let target = format!("worker {} pid {}", worker.id, worker.pid);
                self.record(fault, "start", &target);
                signal(worker.pid, libc::SIGKILL);
                let _ = worker.child.wait().await;
                self.spawn_worker().await?;
                self.record(fault, "heal", &target);
            }
            Fault::RestartPersistent | Fault::RestartEmpty => {
                self.record(fault, "start", "server 0");
                let servers = self.servers.clone();
                let target = blocking(move || {
                    let mut servers = servers.lock().unwrap_or_else(|e| e.into_inner());
                    if fault == Fault::RestartEmpty {
                        servers.restart_empty(0)
                    } else {
                        servers.restart_persistent(0)
                    }
                })
                .await?;
                self.record(fault, "heal", &target);
            }
            Fault::ClientKill | Fault::ScriptFlush => {
                self.record(fault, "start", "every data server");
                let servers = self.servers.clone();
                let target = blocking(move || {
                    let servers = servers.lock().unwrap_or_else(|e| e.into_inner());
                    Ok(if fault == Fault::ClientKill {
                        servers.client_kill()
                    } else {
                        servers.script_flush()
                    })
                })
                .await?;
                self.record(fault, "heal", &target);
            }
            Fault::ClockJump => {
                self.record(fault, "start", "every data server");
                let servers = self.servers.clone();
                let jump = self.config.lease.saturating_mul(2);
                let target = blocking(move || {
                    let servers = servers.lock().unwrap_or_else(|e| e.into_inner());
                    Ok(servers.clock_jump(jump))
                })
                .await?;
                self.record(fault, "heal", &target);
            }
            Fault::Partition | Fault::Latency => {
                let worker = &self.workers[self.holder().await];
                let target = format!("worker {} pid {}", worker.id, worker.pid);
                let mode = if fault == Fault::Partition {
                    ProxyMode::Blackhole
                } else {
                    ProxyMode::Delay(ADDED_LATENCY)
                };
                self.record(fault, "start", &target);
                for proxy in &worker.proxies {
                    proxy.set_mode(mode);
                }
                tokio::time::sleep(active).await;
                for proxy in &worker.proxies {
                    proxy.set_mode(ProxyMode::Pass);
                }
                self.record(fault, "heal", &target);
            }
            Fault::ProxyReset => {
                self.record(fault, "start", "every worker");
                for proxy in self.workers.iter().flat_map(|w| &w.proxies) {
                    proxy.reset();
                }
                self.record(fault, "heal", "every worker");
            }
            Fault::Failover => {
                let key = format!("lock:{{{}}}", self.names[0]);
                self.record(fault, "start", &key);
                let servers = self.servers.clone();
                let target = blocking(move || {
                    servers
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .failover(&key)
                })
                .await?;
                self.record(fault, "heal", &target);
            }
            Fault::StopMinority => {
                self.record(fault, "start", "masters 0, 1 (killed)");
                let servers = self.servers.clone();
                let dirs = blocking(move || {
                    let mut servers = servers.lock().unwrap_or_else(|e| e.into_inner());
                    Ok(vec![servers.stop(0)?, servers.stop(1)?])
                })
                .await?;
                tokio::time::sleep(active).await;
                let servers = self.servers.clone();
                blocking(move || {
                    let mut servers = servers.lock().unwrap_or_else(|e| e.into_inner());
                    for (i, dir) in dirs.iter().enumerate() {
                        servers.start_empty(i, dir)?;
                    }
                    Ok(())
                })
                .await?;
                self.record(fault, "heal", "masters 0, 1 (restarted empty)");
            }
            Fault::StopMajority => {
                let target = self.servers().pause_masters(3)?;
                self.record(fault, "start", &target);
                tokio::time::sleep(active).await;
                self.servers().resume_masters(3);
                self.record(fault, "heal", &target);
            }
        }
        Ok(())
    }

    /// Asks every worker to finish its round and exit; kills those that do not in time.
    async fn stop_workers(&mut self) {
        for worker in &self.workers {
            signal(worker.pid, libc::SIGCONT);
            signal(worker.pid, libc::SIGTERM);
        }
        for worker in &mut self.workers {
            if tokio::time::timeout(Duration::from_secs(20), worker.child.wait())
                .await
                .is_err()
            {
                eprintln!("lock-chaos: worker {} did not stop; killing it", worker.id);
                let _ = worker.child.kill().await;
            }
        }
    }
}

/// Records every `expired` and `del` key event of the data server on `port` (as
/// [`Event::KeyGone`]) until `watching` turns false. A restarted server forgets the
/// `notify-keyspace-events` setting and drops the subscription: both are set up again,
/// retrying every 50 ms. The loop also measures its own lateness (it wakes at least every
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

/// Sends `signal` to a worker process we started (and have not reaped).
fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: plain syscall on the pid of our own unreaped child.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}
