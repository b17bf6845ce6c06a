//! A worker: one OS process (or, for the memory baseline, one client in the harness) whose
//! tasks loop over acquire, a read-modify-write of both registers, a random hold, release.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError};
use rand::seq::SliceRandom as _;
use rand::Rng as _;

use crate::clock::now_ns;
use crate::event::{Event, LockKind, TaskMode};
use crate::register::Registers;
use crate::sink::EventSink;
use crate::task::{acquire_failed, read_modify_write, ClientFactory, TaskCtx};
use crate::workload::{Workload, HOT_LINGER, MIN_HOLD, SEM_TOTAL, SHUTDOWN_GRACE};

/// How long a task waits for a busy lock (the attributes below say the same).
const WAIT: Duration = Duration::from_secs(2);

/// What a worker needs to run its tasks.
pub struct WorkerSetup {
    /// The lock client.
    pub client: LockClient,
    /// The register store.
    pub registers: Registers,
    /// Where events go.
    pub sink: EventSink,
    /// Worker number.
    pub worker: u32,
    /// Tasks to run.
    pub tasks: u32,
    /// Lock names to pick from.
    pub names: Vec<String>,
    /// Longest ordinary hold, in ms (holds are uniform in 10..=hold_max_ms, and one in four
    /// lasts one to two leases, so that faults catch holders whose watchdog must renew).
    pub hold_max_ms: u64,
    /// The client's lease.
    pub lease: Duration,
    /// When to stop (a [`now_ns`] reading); moved to now to stop early.
    pub deadline_ns: Arc<AtomicU64>,
    /// The workloads to run beside the plain-lock tasks (one or two tasks each).
    pub workloads: Vec<Workload>,
    /// Builds a client of the backend with the workers' settings and changes of its own
    /// (the hot, Redisson-layout and shutdown workloads' clients).
    pub connect: Option<ClientFactory>,
    /// Where the workers' HTTP servers publish their addresses (`http-{worker}.port`).
    pub http_dir: Option<PathBuf>,
    /// The address other workers reach this one's HTTP server at (its own address in its
    /// network namespace; loopback without one).
    pub http_host: std::net::IpAddr,
}

/// Why a macro-locked round ended without finishing.
#[derive(Debug)]
enum RoundError {
    Lock(LockError),
    NoCurrentLock,
}

impl From<LockError> for RoundError {
    fn from(err: LockError) -> Self {
        RoundError::Lock(err)
    }
}

/// Runs every task of the worker until the deadline.
pub async fn run(setup: WorkerSetup) {
    let names = Arc::new(setup.names);
    // The probes run until every task has ended, not until the deadline: a task's last
    // round (a wait of up to 2 s) goes on past it, and its waits are judged too.
    let probes_until = Arc::new(AtomicU64::new(u64::MAX));
    let _probe = spawn_stall_probe(setup.sink.clone(), Some(setup.worker), probes_until.clone());
    spawn_runtime_probe(setup.sink.clone(), setup.worker, probes_until.clone());
    let mut jobs: Vec<(TaskMode, Option<Workload>)> = (0..setup.tasks)
        .map(|task| (TaskMode::for_task(task), None))
        .collect();
    for &w in &setup.workloads {
        for i in 0..w.tasks() {
            // The leader workload's first task runs `Election::run`, its second campaigns.
            let mode = if w == Workload::Leader && i == 0 {
                TaskMode::LeaderRun
            } else {
                TaskMode::GuardAbort
            };
            jobs.push((mode, Some(w)));
        }
    }
    // The workloads' own clients: hot, and Redisson's layout beside the native one.
    let mut hot = None;
    let mut redisson = None;
    if let Some(connect) = &setup.connect {
        if setup.workloads.contains(&Workload::Hot) {
            match connect(LockClient::builder().keep_hot(HOT_LINGER)).await {
                Ok(client) => hot = Some(client),
                Err(e) => eprintln!("lock-chaos worker {}: hot client: {e}", setup.worker),
            }
        }
        if setup.workloads.contains(&Workload::Redisson) {
            match connect(LockClient::builder().layout(distlock::Layout::Redisson)).await {
                Ok(client) => {
                    // Both layouts use this store now: the registry must list both.
                    let (layouts, error) = match setup.client.admin().layouts().await {
                        Ok(list) => (list.iter().map(|l| format!("{l:?}")).collect(), None),
                        Err(e) => (Vec::new(), Some(e.to_string())),
                    };
                    setup.sink.emit(&Event::Layouts {
                        t: now_ns(),
                        worker: setup.worker,
                        layouts,
                        error,
                    });
                    redisson = Some(client);
                }
                Err(e) => eprintln!("lock-chaos worker {}: Redisson client: {e}", setup.worker),
            }
        }
    }
    let mut server = None;
    if let (true, Some(dir)) = (
        setup.workloads.contains(&Workload::Layer),
        setup.http_dir.clone(),
    ) {
        let ctx = Arc::new(TaskCtx {
            client: setup.client.clone(),
            registers: setup.registers.clone(),
            sink: setup.sink.clone(),
            worker: setup.worker,
            task: HTTP_TASK,
            mode: TaskMode::GuardAbort,
            workload: Some(Workload::Layer),
            other: setup.client.clone(),
            connect: None,
            http_dir: None,
            seq: AtomicU64::new(0),
            held: Mutex::new(None),
            body_end: Mutex::new(0),
        });
        match crate::http::start(ctx, &dir, setup.http_host, setup.hold_max_ms.max(10)).await {
            Ok(handle) => server = Some(handle),
            Err(e) => eprintln!("lock-chaos worker {}: HTTP server: {e:#}", setup.worker),
        }
    }
    let mut tasks = Vec::new();
    if setup.workloads.contains(&Workload::Leader) {
        let ctx = TaskCtx {
            client: setup.client.clone(),
            registers: setup.registers.clone(),
            sink: setup.sink.clone(),
            worker: setup.worker,
            task: OBSERVER_TASK,
            mode: TaskMode::GuardAbort,
            workload: Some(Workload::Leader),
            other: setup.client.clone(),
            connect: None,
            http_dir: None,
            seq: AtomicU64::new(0),
            held: Mutex::new(None),
            body_end: Mutex::new(0),
        };
        let deadline = setup.deadline_ns.clone();
        tasks.push(tokio::spawn(async move {
            crate::leader::observe(&ctx, &deadline).await;
        }));
    }
    for (task, (mode, workload)) in (0u32..).zip(jobs) {
        let other = match workload {
            Some(Workload::Hot) => hot.clone(),
            Some(Workload::Redisson) => redisson.clone(),
            _ => Some(setup.client.clone()),
        };
        let Some(other) = other else { continue };
        let ctx = Arc::new(TaskCtx {
            client: setup.client.clone(),
            registers: setup.registers.clone(),
            sink: setup.sink.clone(),
            worker: setup.worker,
            task,
            mode,
            workload,
            other,
            connect: setup.connect.clone(),
            http_dir: setup.http_dir.clone(),
            seq: AtomicU64::new(0),
            held: Mutex::new(None),
            body_end: Mutex::new(0),
        });
        let names = names.clone();
        let (hold_max, deadline) = (setup.hold_max_ms.max(10), setup.deadline_ns.clone());
        let lease_ms = u64::try_from(setup.lease.as_millis())
            .unwrap_or(u64::MAX / 4)
            .max(1);
        tasks.push(tokio::spawn(async move {
            if ctx.mode == TaskMode::LeaderRun {
                crate::leader::run_loop(&ctx, &deadline, hold_max, lease_ms).await;
                return;
            }
            while now_ns() < deadline.load(Ordering::Relaxed) {
                let (name, hold, gap) = {
                    let mut rng = rand::rng();
                    (
                        names[rng.random_range(0..names.len())].clone(),
                        Duration::from_millis(if rng.random_ratio(1, 4) {
                            rng.random_range(lease_ms..=2 * lease_ms)
                        } else {
                            rng.random_range(10..=hold_max)
                        }),
                        Duration::from_millis(rng.random_range(0..20)),
                    )
                };
                match (ctx.workload, ctx.mode) {
                    (Some(w), _) => workload_round(&ctx, w, hold).await,
                    (None, TaskMode::GuardAbort | TaskMode::GuardNaive | TaskMode::LeaderRun) => {
                        guard_round(&ctx, &name, hold).await
                    }
                    (None, TaskMode::MacroAbort | TaskMode::MacroPlain) => {
                        macro_round(&ctx, &name, hold).await
                    }
                }
                tokio::time::sleep(gap).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    probes_until.store(0, Ordering::Relaxed);
    if let Some(server) = server {
        server.abort();
    }
}

/// The task number of the HTTP handler's holds.
const HTTP_TASK: u32 = 1000;
/// The task number of the leader workload's observer.
const OBSERVER_TASK: u32 = 1001;

/// One round of a workload.
async fn workload_round(ctx: &TaskCtx, workload: Workload, hold: Duration) {
    let names = workload.names();
    let name = names[rand::rng().random_range(0..names.len())].clone();
    match workload {
        Workload::Fair => {
            let lock = ctx.client.fair_lock(&name);
            lock_round(ctx, lock, Spec::new(LockKind::Fair), &name, hold).await;
        }
        Workload::Rw => {
            let rw = ctx.client.read_write_lock(&name);
            if rand::rng().random_ratio(1, 3) {
                lock_round(ctx, rw.write(), Spec::new(LockKind::Write), &name, hold).await;
            } else {
                lock_round(ctx, rw.read(), Spec::new(LockKind::Read), &name, hold).await;
            }
        }
        Workload::Sem => {
            let lock = ctx.client.semaphore(&name, SEM_TOTAL).permit();
            let spec = Spec {
                permits: 1,
                total: SEM_TOTAL,
                ..Spec::new(LockKind::Permit)
            };
            lock_round(ctx, lock, spec, &name, hold).await;
        }
        Workload::AtLeast => {
            let lock = ctx.client.lock(&name).hold_at_least(MIN_HOLD);
            let spec = Spec {
                min_hold_ms: MIN_HOLD.as_millis() as u64,
                ..Spec::new(LockKind::AtLeast)
            };
            lock_round(ctx, lock, spec, &name, hold).await;
        }
        Workload::Hot => {
            let lock = ctx.other.lock(&name);
            lock_round(ctx, lock, Spec::new(LockKind::Hot), &name, hold).await;
        }
        Workload::Redisson => {
            let lock = ctx.other.lock(&name);
            lock_round(ctx, lock, Spec::new(LockKind::Redisson), &name, hold).await;
        }
        Workload::Multi => multi_round(ctx, names, hold).await,
        Workload::Siblings => siblings_round(ctx, &name, hold).await,
        Workload::Layer => crate::http::request(ctx, &name).await,
        Workload::Shutdown => shutdown_round(ctx, &name, hold).await,
        Workload::Leader => {
            let careless = rand::rng().random_ratio(1, 2);
            crate::leader::campaign_round(ctx, hold, careless).await;
        }
    }
}

/// One `lock_all` of two of `names`: a hold per name (id `{hold}/{name}`), a
/// read-modify-write of each name's registers, raced against `lost()`.
async fn multi_round(ctx: &TaskCtx, mut names: Vec<String>, hold: Duration) {
    names.shuffle(&mut rand::rng());
    names.truncate(2);
    names.sort();
    let t_start = now_ns();
    let guard = match ctx
        .client
        .lock_all(names.clone())
        .wait(WAIT)
        .acquire()
        .await
    {
        Ok(guard) => guard,
        Err(err) => return acquire_failed(ctx, &names.join("+"), t_start, &err).await,
    };
    let base = ctx.next_hold();
    let t = now_ns();
    let mut parts = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let Some(g) = guard.get(name).or_else(|| guard.guards().get(i)) else {
            continue;
        };
        let part = (
            name.clone(),
            format!("{base}/{name}"),
            g.fencing_token(),
            g.owner().to_owned(),
        );
        ctx.sink.emit(&Event::Granted {
            t: {
                let held_for = g.acquired_at().elapsed().as_nanos() as u64;
                now_ns().saturating_sub(held_for)
            },
            worker: ctx.worker,
            hold: part.1.clone(),
            name: part.0.clone(),
        });
        ctx.sink.emit(&Event::Acquired {
            t_start,
            t,
            worker: ctx.worker,
            task: ctx.task,
            hold: part.1.clone(),
            mode: ctx.mode,
            name: part.0.clone(),
            owner: part.3.clone(),
            token: part.2,
            kind: LockKind::Multi,
            permits: 0,
            total: 0,
            min_hold_ms: 0,
        });
        parts.push(part);
    }
    let work = async {
        for (name, id, token, _) in &parts {
            read_modify_write(ctx, name, id, *token, hold / 2).await;
        }
    };
    let mut end = None;
    tokio::select! {
        biased;
        () = work => {}
        () = guard.lost() => end = Some(now_ns()),
    }
    if end.is_none()
        && tokio::time::timeout(Duration::ZERO, guard.lost())
            .await
            .is_ok()
    {
        end = Some(now_ns());
    }
    if let Some(t) = end {
        for (name, id, token, owner) in &parts {
            if guard.get(name).is_some_and(|g| g.is_held()) {
                continue;
            }
            ctx.sink.emit(&Event::Lost {
                t,
                worker: ctx.worker,
                task: ctx.task,
                hold: id.clone(),
                name: name.clone(),
                owner: owner.clone(),
                token: *token,
            });
        }
    }
    // The release answers for every name at once: a lost lease or a lock not held is
    // that of the names no longer held just before it, not of the others.
    let held: Vec<bool> = parts
        .iter()
        .map(|(name, ..)| guard.get(name).is_some_and(|g| g.is_held()))
        .collect();
    let t_release = now_ns();
    let result = match guard.release().await {
        Ok(()) => "ok",
        Err(LockError::LeaseLost { .. }) => "lease_lost",
        Err(LockError::NotHeld { .. }) => "not_held",
        Err(_) => "backend",
    };
    let t = now_ns();
    for ((name, id, token, owner), held) in parts.into_iter().zip(held) {
        let result = if held && matches!(result, "lease_lost" | "not_held") {
            "ok"
        } else {
            result
        };
        ctx.sink.emit(&Event::Released {
            t_start: end.map_or(t_release, |e| e.min(t_release)),
            t,
            worker: ctx.worker,
            task: ctx.task,
            hold: id,
            name,
            owner,
            token,
            result: result.to_owned(),
        });
    }
}

/// A fresh client takes `name`, and while its hold's work runs the client is shut down
/// (after a random delay, with [`SHUTDOWN_GRACE`]): the shutdown takes the lock from the
/// holder (`lost()`) and releases it.
async fn shutdown_round(ctx: &TaskCtx, name: &str, hold: Duration) {
    let Some(connect) = &ctx.connect else { return };
    let t_start = now_ns();
    let client = match connect(LockClient::builder()).await {
        Ok(client) => client,
        Err(err) => return acquire_failed(ctx, name, t_start, &err).await,
    };
    let t_start = now_ns();
    let guard = match client.lock(name).wait(WAIT).acquire().await {
        Ok(guard) => guard,
        Err(err) => {
            let _ = client.close().await;
            return acquire_failed(ctx, name, t_start, &err).await;
        }
    };
    let hold_id = ctx.next_hold();
    let delay = Duration::from_millis(rand::rng().random_range(10..=200));
    let (sink, worker, id, lock_name) = (
        ctx.sink.clone(),
        ctx.worker,
        hold_id.clone(),
        name.to_owned(),
    );
    let taken_at = Arc::new(AtomicU64::new(0));
    let deadline = taken_at.clone();
    let shutdown = Box::pin(async move {
        tokio::time::sleep(delay).await;
        let t_start = now_ns();
        deadline.store(
            t_start + SHUTDOWN_GRACE.as_nanos() as u64,
            Ordering::Relaxed,
        );
        let result = client.shutdown(SHUTDOWN_GRACE).await;
        let t = now_ns();
        let (report, error) = match result {
            Ok(r) => (r, None),
            Err(e) => (distlock::ShutdownReport::default(), Some(e.to_string())),
        };
        sink.emit(&Event::ShutdownDone {
            t_start,
            t,
            worker,
            hold: Some(id),
            name: lock_name,
            released_by_holders: report.released_by_holders,
            released_at_deadline: report.released_at_deadline,
            not_held: report.not_held,
            failed: report.failed,
            error,
        });
    });
    held_round(
        ctx,
        guard,
        Spec::new(LockKind::Shutdown),
        name,
        &hold_id,
        t_start,
        hold,
        Some((shutdown, taken_at)),
    )
    .await;
}

/// How often the scheduler-lag probe wakes.
const PROBE_PERIOD: Duration = Duration::from_millis(10);
/// A wake-up later than this is recorded as a stall.
pub const STALL_THRESHOLD: Duration = Duration::from_millis(50);

/// Starts a thread that sleeps [`PROBE_PERIOD`] in a loop until the deadline and records
/// an [`Event::Stall`] whenever it woke more than [`STALL_THRESHOLD`] late: the process was
/// not scheduled (or was stopped) in between, so what it was doing then is late for a
/// reason outside the lock. It is an OS thread, not a task: a lock library that blocked the
/// async runtime would not show up as a stall (and so would not be excused as one).
pub fn spawn_stall_probe(
    sink: EventSink,
    worker: Option<u32>,
    deadline: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let threshold = STALL_THRESHOLD.as_nanos() as u64;
        let period = PROBE_PERIOD.as_nanos() as u64;
        while now_ns() < deadline.load(Ordering::Relaxed) {
            let t_start = now_ns();
            std::thread::sleep(PROBE_PERIOD);
            let t = now_ns();
            if t.saturating_sub(t_start) > period + threshold {
                sink.emit(&Event::Stall { t_start, t, worker });
            }
        }
    })
}

/// Probes the worker's async runtime: a task in a 10 ms timer loop that records a
/// [`Event::RuntimeStall`] when its timer fires more than [`STALL_THRESHOLD`] late (the
/// runtime's threads did not run its tasks meanwhile: blocked, or descheduled). Stops at
/// the deadline.
fn spawn_runtime_probe(sink: EventSink, worker: u32, deadline: Arc<AtomicU64>) {
    tokio::spawn(async move {
        let threshold = STALL_THRESHOLD.as_nanos() as u64;
        let period = PROBE_PERIOD.as_nanos() as u64;
        while now_ns() < deadline.load(Ordering::Relaxed) {
            let t_start = now_ns();
            tokio::time::sleep(PROBE_PERIOD).await;
            let t = now_ns();
            if t.saturating_sub(t_start) > period + threshold {
                sink.emit(&Event::RuntimeStall { t_start, t, worker });
            }
        }
    });
}

/// One round with `acquire()` and a guard.
async fn guard_round(ctx: &TaskCtx, name: &str, hold: Duration) {
    let lock = ctx.client.lock(name);
    lock_round(ctx, lock, Spec::new(LockKind::Plain), name, hold).await;
}

/// What a guard round records about its lock, and whether it writes the registers.
#[derive(Debug, Clone, Copy)]
struct Spec {
    kind: LockKind,
    permits: u32,
    total: u32,
    min_hold_ms: u64,
    /// Read-modify-write both registers (exclusive holds), or only hold (shared ones).
    writes: bool,
}

impl Spec {
    fn new(kind: LockKind) -> Spec {
        Spec {
            kind,
            permits: 0,
            total: 0,
            min_hold_ms: 0,
            writes: !matches!(kind, LockKind::Read | LockKind::Permit),
        }
    }
}

/// One round with `acquire()` of `lock` and a guard: the work raced against `lost()`
/// (a careless `GuardNaive` task finishes it anyway), then the release.
async fn lock_round(ctx: &TaskCtx, lock: distlock::Lock, spec: Spec, name: &str, hold: Duration) {
    let t_start = now_ns();
    let guard = match lock.wait(WAIT).acquire().await {
        Ok(guard) => guard,
        Err(err) => return acquire_failed(ctx, name, t_start, &err).await,
    };
    let hold_id = ctx.next_hold();
    held_round(ctx, guard, spec, name, &hold_id, t_start, hold, None).await;
}

/// The siblings workload: inside the scope of a lock of this worker's own
/// (`sib-scope-<worker>`, not recorded: nobody else takes it), two branches polled together
/// each take `name` as a guard round of their own. Each branch is its own owner (re-entry
/// follows the call stack, not the enclosing scope), so they exclude each other as two
/// workers do; a client that let the second re-enter the first's lock would show as an
/// overlap of two holds (the checker tells sibling holds apart by their ids).
async fn siblings_round(ctx: &TaskCtx, name: &str, hold: Duration) {
    let scope_name = format!("sib-scope-{}", ctx.worker);
    let t_start = now_ns();
    let outer = match ctx.client.lock(&scope_name).wait(WAIT).acquire().await {
        Ok(guard) => guard,
        Err(err) => return acquire_failed(ctx, &scope_name, t_start, &err).await,
    };
    let branch = || {
        lock_round(
            ctx,
            ctx.client.lock(name),
            Spec::new(LockKind::Sibling),
            name,
            hold,
        )
    };
    outer
        .scope(async { tokio::join!(branch(), branch()) })
        .await;
    let _ = outer.release().await;
}

/// The shutdown workload's shutdown, run beside a hold's work.
type ShutdownFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>>;

/// The part of a guard round after the acquisition. With `shutdown`, that future runs
/// beside the work (it shuts the client down while the lock is held).
#[allow(clippy::too_many_arguments)]
async fn held_round(
    ctx: &TaskCtx,
    guard: distlock::LockGuard,
    spec: Spec,
    name: &str,
    hold_id: &str,
    t_start: u64,
    hold: Duration,
    shutdown: Option<(ShutdownFuture<'_>, Arc<AtomicU64>)>,
) {
    // The shutdown workload: when the client's shutdown takes the lock at the end of its
    // grace period (a time the holder knows), the hold ends there, not when this task
    // gets to run after `lost()` resolved (the release may have reached a waiter first).
    let (shutdown, taken_at) = match shutdown {
        Some((f, t)) => (Some(f), Some(t)),
        None => (None, None),
    };
    let loss_time = || {
        let now = now_ns();
        match taken_at.as_ref().map(|t| t.load(Ordering::Relaxed)) {
            Some(t) if t != 0 && t <= now => t,
            _ => now,
        }
    };
    let (token, owner) = (guard.fencing_token(), guard.owner().to_owned());
    ctx.sink.emit(&Event::Acquired {
        t_start,
        t: now_ns(),
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id.to_owned(),
        mode: ctx.mode,
        name: name.to_owned(),
        owner: owner.clone(),
        token,
        kind: spec.kind,
        permits: spec.permits,
        total: spec.total,
        min_hold_ms: spec.min_hold_ms,
    });
    let lost_event = |t| Event::Lost {
        t,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id.to_owned(),
        name: name.to_owned(),
        owner: owner.clone(),
        token,
    };
    let work = async {
        if spec.writes {
            read_modify_write(ctx, name, hold_id, token, hold).await;
        } else {
            // A shared hold reads the unfenced register only (a reader does not write).
            let _ = ctx.registers.unfenced_read(name).await;
            tokio::time::sleep(hold).await;
        }
    };
    tokio::pin!(work);
    let shutdown = async {
        if let Some(shutdown) = shutdown {
            shutdown.await;
        }
    };
    tokio::pin!(shutdown);
    let mut end = None;
    let mut work_done = false;
    let mut shutdown_done = false;
    while !work_done {
        tokio::select! {
            biased;
            () = &mut work => work_done = true,
            () = &mut shutdown, if !shutdown_done => shutdown_done = true,
            () = guard.lost(), if end.is_none() => {
                let t = loss_time();
                ctx.sink.emit(&lost_event(t));
                end = Some(t);
                if ctx.mode != TaskMode::GuardNaive {
                    break;
                }
                // A careless holder finishes its work anyway: the fence must stop it.
            }
        }
    }
    if end.is_none()
        && tokio::time::timeout(Duration::ZERO, guard.lost())
            .await
            .is_ok()
    {
        // The work finished as `lost()` resolved (the select prefers the work): the loss
        // was known before the release, so record it now.
        let t = loss_time();
        ctx.sink.emit(&lost_event(t));
        end = Some(t);
    }
    let t_release = now_ns();
    ctx.sink.emit(&release_started(ctx, hold_id, t_release));
    let result = match guard.release().await {
        Ok(()) => "ok",
        Err(LockError::LeaseLost { .. }) => "lease_lost",
        Err(LockError::NotHeld { .. }) => "not_held",
        Err(_) => "backend",
    };
    ctx.sink.emit(&Event::Released {
        t_start: end.map_or(t_release, |t| t.min(t_release)),
        t: now_ns(),
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id.to_owned(),
        name: name.to_owned(),
        owner,
        token,
        result: result.to_owned(),
    });
    if !shutdown_done {
        shutdown.await;
    }
}

#[distributed_lock(key = "{name}", wait = "2s", abort_on_lost, client = &ctx.client)]
async fn locked_abort(
    ctx: &TaskCtx,
    name: &str,
    t_start: u64,
    hold: Duration,
) -> Result<(), RoundError> {
    locked_body(ctx, name, t_start, hold).await
}

#[distributed_lock(key = "{name}", wait = "2s", client = &ctx.client)]
async fn locked_plain(
    ctx: &TaskCtx,
    name: &str,
    t_start: u64,
    hold: Duration,
) -> Result<(), RoundError> {
    locked_body(ctx, name, t_start, hold).await
}

/// The body of both annotated functions.
async fn locked_body(
    ctx: &TaskCtx,
    name: &str,
    t_start: u64,
    hold: Duration,
) -> Result<(), RoundError> {
    let lock = distlock::current().ok_or(RoundError::NoCurrentLock)?;
    let (token, owner) = (lock.fencing_token(), lock.owner().to_owned());
    let hold_id = ctx.next_hold();
    *ctx.held.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((token, owner.clone(), hold_id.clone()));
    ctx.sink.emit(&Event::Acquired {
        t_start,
        t: now_ns(),
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id.clone(),
        mode: ctx.mode,
        name: name.to_owned(),
        owner,
        token,
        kind: LockKind::Plain,
        permits: 0,
        total: 0,
        min_hold_ms: 0,
    });
    let work = read_modify_write(ctx, name, &hold_id, token, hold);
    if ctx.mode == TaskMode::MacroPlain {
        // The plain attribute does not watch the lease, so its body may outlive it (a
        // partition, a pause): record when the lock stops counting itself held (its local
        // lease deadline, or a detected loss), as the careless guard records `lost()`. The
        // hold ends there; the body goes on and the fenced register must stop it.
        let watch = async {
            while lock.is_held() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            ctx.sink.emit(&Event::Lost {
                t: now_ns(),
                worker: ctx.worker,
                task: ctx.task,
                hold: hold_id.clone(),
                name: name.to_owned(),
                owner: lock.owner().to_owned(),
                token,
            });
            std::future::pending::<()>().await
        };
        tokio::select! {
            () = work => {}
            () = watch => {}
        }
    } else {
        work.await;
    }
    let body_end = now_ns();
    *ctx.body_end.lock().unwrap_or_else(|e| e.into_inner()) = body_end;
    ctx.sink.emit(&release_started(ctx, &hold_id, body_end));
    Ok(())
}

/// The start of a release, recorded before it is sent (a worker killed while its release
/// hangs still ended its hold there).
fn release_started(ctx: &TaskCtx, hold: &str, t: u64) -> Event {
    Event::ReleaseStarted {
        t,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold.to_owned(),
    }
}

/// One round through an annotated function.
async fn macro_round(ctx: &TaskCtx, name: &str, hold: Duration) {
    *ctx.held.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let t_start = now_ns();
    let result = match ctx.mode {
        TaskMode::MacroAbort => locked_abort(ctx, name, t_start, hold).await,
        _ => locked_plain(ctx, name, t_start, hold).await,
    };
    let t = now_ns();
    let held = ctx.held.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some((token, owner, hold_id)) = held else {
        if let Err(RoundError::Lock(err)) = &result {
            acquire_failed(ctx, name, t_start, err).await;
        }
        return;
    };
    let (t_release, outcome) = match result {
        Ok(()) => (
            *ctx.body_end.lock().unwrap_or_else(|e| e.into_inner()),
            "macro",
        ),
        Err(RoundError::Lock(LockError::LeaseLost { .. })) => {
            ctx.sink.emit(&Event::Lost {
                t,
                worker: ctx.worker,
                task: ctx.task,
                hold: hold_id.clone(),
                name: name.to_owned(),
                owner: owner.clone(),
                token,
            });
            (t, "aborted")
        }
        Err(_) => (t, "backend"),
    };
    ctx.sink.emit(&Event::Released {
        t_start: t_release,
        t,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id,
        name: name.to_owned(),
        owner,
        token,
        result: outcome.to_owned(),
    });
}
