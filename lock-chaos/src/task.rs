//! One task's context, shared by the worker's rounds and the HTTP handler that runs a
//! hold on a task's behalf, and what every workload does under a lock: the
//! read-modify-write of a lock's registers, recorded event by event.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{LockClient, LockError};

use crate::clock::now_ns;
use crate::event::{Event, Register, TaskMode, WriteOutcome};
use crate::register::{Fenced, Registers};
use crate::sink::EventSink;
use crate::workload::Workload;

/// Pause after a backend error before the next attempt, so a down Redis is not spun on.
const ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Builds a client from a builder that has the workers' lease and timeouts set.
pub type ClientFactory = Arc<
    dyn Fn(
            distlock::LockClientBuilder,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<LockClient, LockError>> + Send>,
        > + Send
        + Sync,
>;

/// The state one task shares with its macro-annotated bodies.
pub(crate) struct TaskCtx {
    pub(crate) client: LockClient,
    pub(crate) registers: Registers,
    pub(crate) sink: EventSink,
    pub(crate) worker: u32,
    pub(crate) task: u32,
    pub(crate) mode: TaskMode,
    /// The workload, or `None` for a plain-lock task of `mode`.
    pub(crate) workload: Option<Workload>,
    /// Its client for the workload (hot, Redisson's layout), or `client`.
    pub(crate) other: LockClient,
    /// Builds fresh clients (shutdown workload).
    pub(crate) connect: Option<ClientFactory>,
    /// Where the HTTP servers' ports are.
    pub(crate) http_dir: Option<PathBuf>,
    /// Acquisitions so far (the last part of the hold ids).
    pub(crate) seq: AtomicU64,
    /// The token, owner and hold id of the current hold, once the body runs.
    pub(crate) held: Mutex<Option<(u64, String, String)>>,
    /// When the current body ended (the start of the macro's release).
    pub(crate) body_end: Mutex<u64>,
}

impl TaskCtx {
    /// The id of the next acquisition of this task.
    pub(crate) fn next_hold(&self) -> String {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        format!("w{}-t{}-{seq}", self.worker, self.task)
    }
}

/// Records a failed acquisition and backs off after a backend error.
pub(crate) async fn acquire_failed(ctx: &TaskCtx, name: &str, t_start: u64, err: &LockError) {
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
pub(crate) async fn read_modify_write(
    ctx: &TaskCtx,
    name: &str,
    hold_id: &str,
    token: u64,
    hold: Duration,
) {
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
    if let Ok(Fenced::Ok(read)) = fenced {
        ctx.sink.emit(&Event::Claim {
            t: now_ns(),
            worker: ctx.worker,
            task: ctx.task,
            hold: hold_id.to_owned(),
            name: name.to_owned(),
            token,
            read,
        });
    }
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
                // Unknown outcome: recorded as a write whose answer never came (the intent
                // is there; the store's log tells whether it survived).
                Ok(Fenced::NotReplicated) => write_event(
                    Register::Fenced,
                    WriteOutcome::NotReplicated,
                    Some(read),
                    None,
                    None,
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
        // The read (a claim) ran on the master unacknowledged: the holder does not write.
        Ok(Fenced::NotReplicated) => write_event(
            Register::Fenced,
            WriteOutcome::NotReplicated,
            None,
            None,
            None,
        ),
        Err(_) => write_event(Register::Fenced, WriteOutcome::Error, None, None, None),
    };
    ctx.sink.emit(&event);
}
