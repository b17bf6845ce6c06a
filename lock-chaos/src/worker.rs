//! A worker: one OS process (or, for the memory baseline, one client in the harness) whose
//! tasks loop over acquire, a read-modify-write of both registers, a random hold, release.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError};
use rand::Rng as _;

use crate::clock::now_ns;
use crate::event::{Event, Register, TaskMode, WriteOutcome};
use crate::register::{Fenced, Registers};
use crate::sink::EventSink;

/// How long a task waits for a busy lock (the attributes below say the same).
const WAIT: Duration = Duration::from_secs(2);
/// Pause after a backend error before the next attempt, so a down Redis is not spun on.
const ERROR_BACKOFF: Duration = Duration::from_millis(100);

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
}

/// The state one task shares with its macro-annotated bodies.
struct TaskCtx {
    client: LockClient,
    registers: Registers,
    sink: EventSink,
    worker: u32,
    task: u32,
    mode: TaskMode,
    /// Acquisitions so far (the last part of the hold ids).
    seq: AtomicU64,
    /// The token, owner and hold id of the current hold, once the body runs.
    held: Mutex<Option<(u64, String, String)>>,
    /// When the current body ended (the start of the macro's release).
    body_end: Mutex<u64>,
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
    // Stops by itself at the deadline (within one period).
    let _probe = spawn_stall_probe(
        setup.sink.clone(),
        Some(setup.worker),
        setup.deadline_ns.clone(),
    );
    let mut tasks = Vec::new();
    for task in 0..setup.tasks {
        let ctx = Arc::new(TaskCtx {
            client: setup.client.clone(),
            registers: setup.registers.clone(),
            sink: setup.sink.clone(),
            worker: setup.worker,
            task,
            mode: TaskMode::for_task(task),
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
                match ctx.mode {
                    TaskMode::GuardAbort | TaskMode::GuardNaive => {
                        guard_round(&ctx, &name, hold).await
                    }
                    TaskMode::MacroAbort | TaskMode::MacroPlain => {
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

impl TaskCtx {
    /// The id of the next acquisition of this task.
    fn next_hold(&self) -> String {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        format!("w{}-t{}-{seq}", self.worker, self.task)
    }
}

/// One round with `acquire()` and a guard.
async fn guard_round(ctx: &TaskCtx, name: &str, hold: Duration) {
    let t_start = now_ns();
    let guard = match ctx.client.lock(name).wait(WAIT).acquire().await {
        Ok(guard) => guard,
        Err(err) => return acquire_failed(ctx, name, t_start, &err).await,
    };
    let (token, owner) = (guard.fencing_token(), guard.owner().to_owned());
    let hold_id = ctx.next_hold();
    ctx.sink.emit(&Event::Acquired {
        t_start,
        t: now_ns(),
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id.clone(),
        mode: ctx.mode,
        name: name.to_owned(),
        owner: owner.clone(),
        token,
    });
    let lost_event = |t| Event::Lost {
        t,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id.clone(),
        name: name.to_owned(),
        owner: owner.clone(),
        token,
    };
    let work = read_modify_write(ctx, name, &hold_id, token, hold);
    tokio::pin!(work);
    let mut end = None;
    tokio::select! {
        biased;
        () = &mut work => {}
        () = guard.lost() => {
            let t = now_ns();
            ctx.sink.emit(&lost_event(t));
            end = Some(t);
            if ctx.mode == TaskMode::GuardNaive {
                // A careless holder finishes its work anyway: the fence must stop it.
                work.await;
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
        let t = now_ns();
        ctx.sink.emit(&lost_event(t));
        end = Some(t);
    }
    let t_release = now_ns();
    ctx.sink.emit(&release_started(ctx, &hold_id, t_release));
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
        hold: hold_id.clone(),
        name: name.to_owned(),
        owner,
        token,
        result: result.to_owned(),
    });
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

/// Records a failed acquisition and backs off after a backend error.
async fn acquire_failed(ctx: &TaskCtx, name: &str, t_start: u64, err: &LockError) {
    let kind = match err {
        LockError::TimedOut { .. } | LockError::Busy { .. } => "timed_out",
        LockError::QuorumNotReached { .. } => "quorum",
        e if e.is_backend() => "backend",
        _ => "other",
    };
    ctx.sink.emit(&Event::AcquireFailed {
        t_start,
        t: now_ns(),
        worker: ctx.worker,
        task: ctx.task,
        name: name.to_owned(),
        kind: kind.to_owned(),
        error: err.to_string(),
    });
    if kind != "timed_out" {
        tokio::time::sleep(ERROR_BACKOFF).await;
    }
}

/// Reads both registers, holds, then writes both (value + 1), recording an intent before
/// each write is sent and each outcome.
async fn read_modify_write(ctx: &TaskCtx, name: &str, hold_id: &str, token: u64, hold: Duration) {
    let regs = &ctx.registers;
    let write_event = |register, outcome, read, prev, seen| Event::Write {
        t: now_ns(),
        worker: ctx.worker,
        task: ctx.task,
        hold: hold_id.to_owned(),
        name: name.to_owned(),
        token,
        register,
        outcome,
        read,
        prev,
        seen,
    };
    let intent = |register, read| {
        ctx.sink.emit(&Event::WriteIntent {
            t: now_ns(),
            worker: ctx.worker,
            task: ctx.task,
            hold: hold_id.to_owned(),
            name: name.to_owned(),
            token,
            register,
            read,
        })
    };
    let fenced = regs.fenced_read(name, token).await;
    let unfenced = regs.unfenced_read(name).await;
    tokio::time::sleep(hold).await;

    match unfenced {
        Ok(read) => {
            intent(Register::Unfenced, read);
            let event = match regs.unfenced_write(name, hold_id, token, read).await {
                Ok(prev) => write_event(
                    Register::Unfenced,
                    WriteOutcome::Accepted,
                    Some(read),
                    Some(prev),
                    None,
                ),
                Err(_) => write_event(
                    Register::Unfenced,
                    WriteOutcome::Error,
                    Some(read),
                    None,
                    None,
                ),
            };
            ctx.sink.emit(&event);
        }
        Err(_) => ctx.sink.emit(&write_event(
            Register::Unfenced,
            WriteOutcome::Error,
            None,
            None,
            None,
        )),
    }

    let event = match fenced {
        Ok(Fenced::Ok(read)) => {
            intent(Register::Fenced, read);
            match regs.fenced_write(name, hold_id, token, read).await {
                Ok(Fenced::Ok(prev)) => write_event(
                    Register::Fenced,
                    WriteOutcome::Accepted,
                    Some(read),
                    Some(prev),
                    None,
                ),
                Ok(Fenced::Stale(seen)) => write_event(
                    Register::Fenced,
                    WriteOutcome::RejectedWrite,
                    Some(read),
                    None,
                    Some(seen),
                ),
                Err(_) => write_event(
                    Register::Fenced,
                    WriteOutcome::Error,
                    Some(read),
                    None,
                    None,
                ),
            }
        }
        Ok(Fenced::Stale(seen)) => write_event(
            Register::Fenced,
            WriteOutcome::RejectedRead,
            None,
            None,
            Some(seen),
        ),
        Err(_) => write_event(Register::Fenced, WriteOutcome::Error, None, None, None),
    };
    ctx.sink.emit(&event);
}
