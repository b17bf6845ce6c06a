//! The leader workload: leader election of one role ([`LEADER_ROLE`]), its lock
//! `leader:lead-0`.
//!
//! Each worker runs two campaigners and an observer on its main client:
//! - a task in `Election::run`: each term's work (a read-modify-write of the role's
//!   registers, the fenced one with the term) is recorded as a hold of kind `leader`, mode
//!   `leader_run`, from the run loop's call of the work to its return, or to its drop (a
//!   drop guard records the drop: a loss, `lost` at the drop, or the end of the run);
//! - a task that campaigns (waiting at most 2 s) and resigns itself: its work raced against
//!   `Leadership::lost`, and every other round a careless leader that finishes its work
//!   after the loss (`guard_naive`: the fence must refuse its writes);
//! - an observer (`Election::observe`) recording each change it is given (`Observed`).
//!
//! The checker's rules for these holds are in `checker/leader.rs` and the shared hold rules.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use distlock::LockError;
use rand::Rng as _;

use crate::clock::now_ns;
use crate::event::{Event, LockKind, TaskMode};
use crate::task::{acquire_failed, read_modify_write, TaskCtx};
use crate::workload::LEADER_ROLE;

/// The run loop's pause between terms (`Election::backoff`).
pub const BACKOFF: Duration = Duration::from_millis(50);
/// How long a campaigning task waits for the role.
const CAMPAIGN_WAIT: Duration = Duration::from_secs(2);
/// How often a waiting task looks at the deadline.
const DEADLINE_POLL: Duration = Duration::from_millis(50);

/// The role's lock name.
pub fn lock_name() -> String {
    format!("{}{LEADER_ROLE}", distlock::ROLE_LOCK_PREFIX)
}

/// Resolves once `deadline` (a [`now_ns`] reading, moved to 0 to stop early) has passed.
async fn until(deadline: &AtomicU64) {
    while now_ns() < deadline.load(Ordering::Relaxed) {
        tokio::time::sleep(DEADLINE_POLL).await;
    }
}

/// A term's length: mostly short, one in four one to two leases (so that faults meet
/// leaders whose watchdog must renew).
fn term_length(hold_max_ms: u64, lease_ms: u64) -> Duration {
    let mut rng = rand::rng();
    Duration::from_millis(if rng.random_ratio(1, 4) {
        rng.random_range(lease_ms..=2 * lease_ms)
    } else {
        rng.random_range(10..=hold_max_ms.max(10))
    })
}

/// Records the end of a run-loop term when its work future is dropped before it finished:
/// a drop by the run loop (leadership lost: `Lost` at the drop) or by the harness at the
/// end of the run (a release).
struct DropRecord<'a> {
    ctx: &'a TaskCtx,
    hold: String,
    owner: String,
    token: u64,
    stopping: &'a AtomicBool,
    ended: &'a AtomicU64,
    finished: bool,
}

impl Drop for DropRecord<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let t = now_ns();
        self.ended.store(t, Ordering::Relaxed);
        let (ctx, name) = (self.ctx, lock_name());
        let stopped = self.stopping.load(Ordering::Relaxed);
        if !stopped {
            ctx.sink.emit(&Event::Lost {
                t,
                worker: ctx.worker,
                task: ctx.task,
                hold: self.hold.clone(),
                name: name.clone(),
                owner: self.owner.clone(),
                token: self.token,
            });
        } else {
            ctx.sink.emit(&Event::ReleaseStarted {
                t,
                worker: ctx.worker,
                task: ctx.task,
                hold: self.hold.clone(),
            });
        }
        ctx.sink.emit(&Event::Released {
            t_start: t,
            t,
            worker: ctx.worker,
            task: ctx.task,
            hold: self.hold.clone(),
            name,
            owner: self.owner.clone(),
            token: self.token,
            result: if stopped { "stopped" } else { "dropped" }.to_owned(),
        });
    }
}

/// The run-loop task: `Election::run` until the deadline.
pub(crate) async fn run_loop(ctx: &TaskCtx, deadline: &AtomicU64, hold_max_ms: u64, lease_ms: u64) {
    let election = ctx
        .client
        .election(LEADER_ROLE)
        .metadata(format!("w{}-t{}", ctx.worker, ctx.task))
        .backoff(BACKOFF);
    let stopping = AtomicBool::new(false);
    // When the last term ended (the next campaign starts a back-off later); 0: none yet.
    let ended = AtomicU64::new(0);
    let started = now_ns();
    let (stopping, ended) = (&stopping, &ended);
    let run = election.run(|term| {
        // The campaign that won began a back-off after the last term ended, at the
        // earliest (the run loop resigns or drops, then pauses).
        let asked = match ended.load(Ordering::Relaxed) {
            0 => started,
            t => t.saturating_add(BACKOFF.as_nanos() as u64),
        };
        run_term(
            ctx,
            term.token(),
            asked,
            term_length(hold_max_ms, lease_ms),
            stopping,
            ended,
        )
    });
    tokio::select! {
        result = run => {
            if let Err(e) = result {
                eprintln!("lock-chaos worker {}: Election::run: {e}", ctx.worker);
            }
        }
        () = until(deadline) => stopping.store(true, Ordering::Relaxed),
    }
}

/// One term of the run loop: recorded as a hold from the call of the work.
async fn run_term(
    ctx: &TaskCtx,
    token: u64,
    asked: u64,
    length: Duration,
    stopping: &AtomicBool,
    ended: &AtomicU64,
) {
    let t = now_ns();
    let hold = ctx.next_hold();
    // `run` hands the work its term, not the lock's owner id: each term is its own holder.
    let owner = format!("{}:run-{hold}", ctx.client.id());
    let name = lock_name();
    ctx.sink.emit(&Event::Acquired {
        t_start: asked.min(t),
        t,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold.clone(),
        mode: TaskMode::LeaderRun,
        name: name.clone(),
        owner: owner.clone(),
        token,
        kind: LockKind::Leader,
        permits: 0,
        total: 0,
        min_hold_ms: 0,
    });
    let mut record = DropRecord {
        ctx,
        hold: hold.clone(),
        owner: owner.clone(),
        token,
        stopping,
        ended,
        finished: false,
    };
    read_modify_write(ctx, &name, &hold, token, length).await;
    // The work returns: the run loop resigns the term.
    let t = now_ns();
    record.finished = true;
    ended.store(t, Ordering::Relaxed);
    ctx.sink.emit(&Event::ReleaseStarted {
        t,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold.clone(),
    });
    ctx.sink.emit(&Event::Released {
        t_start: t,
        t,
        worker: ctx.worker,
        task: ctx.task,
        hold,
        name,
        owner,
        token,
        result: "ok".to_owned(),
    });
}

/// One round of the campaigning task: campaign, the work raced against `lost()` (a careless
/// leader, every other round, finishes it anyway), resign.
pub(crate) async fn campaign_round(ctx: &TaskCtx, hold_len: Duration, careless: bool) {
    let name = lock_name();
    let election = ctx
        .client
        .election(LEADER_ROLE)
        .metadata(format!("w{}-t{}", ctx.worker, ctx.task));
    let t_start = now_ns();
    let leadership = match election.campaign(CAMPAIGN_WAIT).await {
        Ok(leadership) => leadership,
        Err(err) => return acquire_failed(ctx, &name, t_start, &err).await,
    };
    let hold = ctx.next_hold();
    let token = leadership.term();
    let owner = leadership
        .guard()
        .map_or_else(|| ctx.client.id().to_owned(), |g| g.owner().to_owned());
    let mode = if careless {
        TaskMode::GuardNaive
    } else {
        TaskMode::GuardAbort
    };
    ctx.sink.emit(&Event::Acquired {
        t_start,
        t: now_ns(),
        worker: ctx.worker,
        task: ctx.task,
        hold: hold.clone(),
        mode,
        name: name.clone(),
        owner: owner.clone(),
        token,
        kind: LockKind::Leader,
        permits: 0,
        total: 0,
        min_hold_ms: 0,
    });
    let lost_event = |t| Event::Lost {
        t,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold.clone(),
        name: name.clone(),
        owner: owner.clone(),
        token,
    };
    let mut end = None;
    {
        let work = read_modify_write(ctx, &name, &hold, token, hold_len);
        tokio::pin!(work);
        loop {
            tokio::select! {
                biased;
                () = leadership.lost(), if end.is_none() => {
                    let t = now_ns();
                    ctx.sink.emit(&lost_event(t));
                    end = Some(t);
                    if !careless {
                        break;
                    }
                }
                () = &mut work => break,
            }
        }
    }
    if end.is_none()
        && tokio::time::timeout(Duration::ZERO, leadership.lost())
            .await
            .is_ok()
    {
        let t = now_ns();
        ctx.sink.emit(&lost_event(t));
        end = Some(t);
    }
    let t_release = now_ns();
    ctx.sink.emit(&Event::ReleaseStarted {
        t: t_release,
        worker: ctx.worker,
        task: ctx.task,
        hold: hold.clone(),
    });
    let result = match leadership.resign().await {
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
        hold,
        name,
        owner,
        token,
        result: result.to_owned(),
    });
}

/// The observer: every change `Observer::changed` gives, until the deadline.
pub(crate) async fn observe(ctx: &TaskCtx, deadline: &AtomicU64) {
    let name = lock_name();
    let mut observer = ctx.client.election(LEADER_ROLE).observe();
    let watch = async {
        loop {
            match observer.changed().await {
                Ok(leader) => ctx.sink.emit(&Event::Observed {
                    t: now_ns(),
                    worker: ctx.worker,
                    name: name.clone(),
                    term: leader.as_ref().map(|l| l.term),
                    client_id: leader.map(|l| l.client_id),
                }),
                Err(e) => {
                    eprintln!("lock-chaos worker {}: observer: {e}", ctx.worker);
                    return;
                }
            }
        }
    };
    tokio::select! {
        () = watch => {}
        () = until(deadline) => {}
    }
}
