//! The recorded history: one JSON line per event, written by workers and the nemesis.

use serde::{Deserialize, Serialize};

/// How a worker task takes its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskMode {
    /// `acquire()`, the work raced against `lost()`: stops at the loss.
    GuardAbort,
    /// `#[distributed_lock(abort_on_lost)]`: the body is cancelled at the loss.
    MacroAbort,
    /// `acquire()`, records `lost()` but keeps working (a careless user): its writes after a
    /// loss are what the fenced register must reject.
    GuardNaive,
    /// `#[distributed_lock]` without `abort_on_lost`.
    MacroPlain,
    /// A leader's work run by `Election::run`: the run loop drops it when leadership is
    /// lost (its hold ends at the drop, recorded by the work's drop guard).
    LeaderRun,
}

impl TaskMode {
    /// The mode of task number `task` of a worker.
    pub fn for_task(task: u32) -> TaskMode {
        match task % 4 {
            0 => TaskMode::GuardAbort,
            1 => TaskMode::MacroAbort,
            2 => TaskMode::GuardNaive,
            _ => TaskMode::MacroPlain,
        }
    }
}

/// Which primitive (or way of using one) a hold came from: the checker's rule for it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum LockKind {
    /// A plain lock (`client.lock(name)`): one holder.
    #[default]
    Plain,
    /// A fair lock: one holder, granted in the order the waiters joined the queue.
    Fair,
    /// A read-write lock's read hold: shared with readers, exclusive of writers.
    Read,
    /// A read-write lock's write hold: exclusive of readers and writers.
    Write,
    /// Semaphore permits: at most `total` permits held at once.
    Permit,
    /// One name of a `lock_all` (MultiLock): a plain hold of that name.
    Multi,
    /// A plain lock with `hold_at_least`: not free before `min_hold_ms` after the grant.
    AtLeast,
    /// One use of a hot lock (a client built with `keep_hot`): each use is a hold.
    Hot,
    /// A request handled under the tower `LockLayer` over HTTP (recorded by the handler).
    Layer,
    /// A plain lock of a client that is shut down while it holds it.
    Shutdown,
    /// A plain lock of a client in Redisson's layout.
    Redisson,
    /// A plain lock taken by one of two branches polled together (`join!`) inside the
    /// scope of another lock: each branch is its own owner, so two holds with different
    /// ids exclude each other even if they report one owner.
    Sibling,
    /// A term of leader election (`client.election(role)`): the hold is the interval in
    /// which the term's work ran (from the campaign's return, or the run loop's call of the
    /// work, to its drop, its return or the loss `lost()` reported), its token the term.
    Leader,
}

impl LockKind {
    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            LockKind::Plain => "plain",
            LockKind::Fair => "fair",
            LockKind::Read => "read",
            LockKind::Write => "write",
            LockKind::Permit => "permit",
            LockKind::Multi => "multi",
            LockKind::AtLeast => "at_least",
            LockKind::Hot => "hot",
            LockKind::Layer => "layer",
            LockKind::Shutdown => "shutdown",
            LockKind::Redisson => "redisson",
            LockKind::Sibling => "sibling",
            LockKind::Leader => "leader",
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero32(n: &u32) -> bool {
    *n == 0
}

/// Which protected register a write went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Register {
    /// Plain GET / SET: no protection but the lock.
    Unfenced,
    /// Claim-on-read fenced register (see `register.rs`).
    Fenced,
}

/// What became of one read-modify-write on a register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteOutcome {
    /// The write was applied.
    Accepted,
    /// The fenced read refused the token (a higher one was seen before).
    RejectedRead,
    /// The fenced write refused the token (a higher one was seen since the read).
    RejectedWrite,
    /// The register did not answer.
    Error,
    /// The fenced read or write ran on the master but fewer replicas than asked acknowledged
    /// it in time (`FenceError::NotReplicated`, `--fence-store lock-redis`): an unknown
    /// outcome, as `Error` (never counted as accepted).
    NotReplicated,
}

/// One recorded event. Times are [`crate::clock::now_ns`] readings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// A worker process started and connected.
    Hello {
        /// When.
        t: u64,
        /// Worker number (unique in the run; a respawned worker gets a new one).
        worker: u32,
        /// Its process id.
        pid: u32,
        /// The lock client's id (prefix of its owner ids).
        client_id: String,
    },
    /// An acquisition returned a guard.
    Acquired {
        /// When the acquire call started.
        t_start: u64,
        /// When it returned.
        t: u64,
        /// Worker number.
        worker: u32,
        /// Task number within the worker.
        task: u32,
        /// The acquisition's unique id (`w{worker}-t{task}-{seq}`).
        hold: String,
        /// How the task locks.
        mode: TaskMode,
        /// Lock name.
        name: String,
        /// Owner id.
        owner: String,
        /// Fencing token.
        token: u64,
        /// Which primitive (absent in older histories: a plain lock).
        #[serde(default)]
        kind: LockKind,
        /// Semaphore: permits taken by this hold.
        #[serde(default, skip_serializing_if = "is_zero32")]
        permits: u32,
        /// Semaphore: its total.
        #[serde(default, skip_serializing_if = "is_zero32")]
        total: u32,
        /// `hold_at_least`, ms (0: none).
        #[serde(default, skip_serializing_if = "is_zero")]
        min_hold_ms: u64,
    },
    /// An acquisition failed (busy after the wait, backend error, ...).
    AcquireFailed {
        /// When the acquire call started.
        t_start: u64,
        /// When it returned.
        t: u64,
        /// Worker number.
        worker: u32,
        /// Task number.
        task: u32,
        /// Lock name.
        name: String,
        /// `timed_out`, `backend`, `quorum`, or `other`.
        kind: String,
        /// The error's message.
        error: String,
    },
    /// A read-modify-write on a register ended.
    Write {
        /// When the write (or the refused read) returned.
        t: u64,
        /// Worker number.
        worker: u32,
        /// Task number.
        task: u32,
        /// The acquisition's unique id (`w{worker}-t{task}-{seq}`).
        hold: String,
        /// Lock name (each lock protects its own registers).
        name: String,
        /// The holder's fencing token.
        token: u64,
        /// Which register.
        register: Register,
        /// What happened.
        outcome: WriteOutcome,
        /// The value read (absent when the read was refused or failed).
        read: Option<i64>,
        /// The value the register held when the write was applied (absent unless accepted).
        prev: Option<i64>,
        /// For a refused fenced operation: the highest token the register had seen.
        seen: Option<u64>,
    },
    /// `lost()` resolved (or `abort_on_lost` cancelled the body) for a held lock.
    Lost {
        /// When the loss was reported.
        t: u64,
        /// Worker number.
        worker: u32,
        /// Task number.
        task: u32,
        /// The acquisition's unique id (`w{worker}-t{task}-{seq}`).
        hold: String,
        /// Lock name.
        name: String,
        /// Owner id.
        owner: String,
        /// Fencing token.
        token: u64,
    },
    /// The holder let the lock go.
    Released {
        /// When the release started (the end of the holder's belief that it holds).
        t_start: u64,
        /// When it returned.
        t: u64,
        /// Worker number.
        worker: u32,
        /// Task number.
        task: u32,
        /// The acquisition's unique id (`w{worker}-t{task}-{seq}`).
        hold: String,
        /// Lock name.
        name: String,
        /// Owner id.
        owner: String,
        /// Fencing token.
        token: u64,
        /// `ok`, `lease_lost`, `not_held`, `backend`, `aborted` (abort_on_lost) or `macro`
        /// (released by the attribute's expansion; its outcome is only logged).
        result: String,
    },
    /// A fenced read was answered: the register store recorded the token as a claim (a
    /// write with a lower token sent after this must be refused).
    Claim {
        /// When the answer came.
        t: u64,
        /// Worker number.
        worker: u32,
        /// Task number.
        task: u32,
        /// The acquisition's unique id.
        hold: String,
        /// Lock name.
        name: String,
        /// The holder's fencing token.
        token: u64,
        /// The value read.
        read: i64,
    },
    /// A register write is about to be sent (recorded before sending, so a write whose
    /// answer never came, because the task was aborted, killed or timed out, is still known).
    WriteIntent {
        /// When.
        t: u64,
        /// Worker number.
        worker: u32,
        /// Task number.
        task: u32,
        /// The acquisition's unique id.
        hold: String,
        /// Lock name.
        name: String,
        /// The holder's fencing token.
        token: u64,
        /// Which register.
        register: Register,
        /// The value the holder read.
        read: i64,
    },
    /// One lock of a `lock_all` was granted at `t` (`LockGuard::acquired_at`): the
    /// multi-lock takes its names one by one, and its `Acquired` events record only when
    /// it had them all.
    Granted {
        /// When the lock was granted.
        t: u64,
        /// Worker number.
        worker: u32,
        /// The hold (`{hold}/{name}`).
        hold: String,
        /// Lock name.
        name: String,
    },
    /// A process woke up late from a short sleep: it (or its runtime) did not run from
    /// `t_start` to about `t`. Recorded only above a threshold.
    Stall {
        /// When the sleep began.
        t_start: u64,
        /// When the process woke.
        t: u64,
        /// The worker, or `None` for the harness (nemesis, proxies, key-event subscribers).
        worker: Option<u32>,
    },
    /// A worker's async runtime ran a 10 ms timer late (more than the stall threshold):
    /// its tasks did not run from `t_start` to about `t`, while its OS-thread probe (which
    /// records [`Event::Stall`]) may have run on. Only the liveness figure takes it into
    /// account (a waiter whose runtime did not run cannot take a free lock); the safety
    /// rules do not, so that a library that blocks the runtime is not excused by it.
    RuntimeStall {
        /// When the timer was set.
        t_start: u64,
        /// When it fired.
        t: u64,
        /// The worker.
        worker: u32,
    },
    /// A lock server reported that a key was removed (keyspace notification).
    KeyGone {
        /// When the harness received the notification.
        t: u64,
        /// Which server (`127.0.0.1:port`).
        server: String,
        /// The key.
        key: String,
        /// `expired` or `del`.
        how: String,
    },
    /// `LockClient::shutdown` of a client returned (the shutdown workload).
    ShutdownDone {
        /// When the call started.
        t_start: u64,
        /// When it returned.
        t: u64,
        /// Worker number.
        worker: u32,
        /// The hold the client had when the shutdown began, if any.
        hold: Option<String>,
        /// Its lock name.
        name: String,
        /// The report's counts: released by holders, at the deadline, not held, failed.
        released_by_holders: usize,
        /// See above.
        released_at_deadline: usize,
        /// See above.
        not_held: usize,
        /// See above.
        failed: usize,
        /// The error, when the call failed.
        error: Option<String>,
    },
    /// What `admin().layouts()` answered in a worker that runs clients of both layouts.
    Layouts {
        /// When.
        t: u64,
        /// Worker number.
        worker: u32,
        /// The layouts listed (`Native`, `Redisson`), or empty when the call failed.
        layouts: Vec<String>,
        /// The error, when the call failed.
        error: Option<String>,
    },
    /// A release is about to be sent: the holder stopped acting on the lock (recorded before
    /// the release, whose `Released` comes when it returns, or never if the worker dies).
    ReleaseStarted {
        /// When.
        t: u64,
        /// Worker number.
        worker: u32,
        /// Task number.
        task: u32,
        /// The acquisition's unique id.
        hold: String,
    },
    /// Something the harness did that is not a fault of the schedule: a repair of the
    /// servers (`repair_shard`: a Cluster shard left without a live master was given one),
    /// a step it skipped because its target could not be resolved (`skip_step`), or, at the
    /// start of a Cluster run, one shard of its layout (`shard`).
    Harness {
        /// When it began (a repair: when the check found the shard without a master).
        t_start: u64,
        /// When it ended.
        t: u64,
        /// Backend under test.
        backend: String,
        /// `repair_shard` or `skip_step`.
        action: String,
        /// A repair: the last check before it that found every shard with a master (the
        /// outage began after it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since: Option<u64>,
        /// A repair or a `shard`: the shard's inclusive slot ranges (empty: unknown, every
        /// lock).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        slots: Vec<(u16, u16)>,
        /// A `shard` (the cluster's layout, recorded once at the start of a run): the
        /// ports of the shard's nodes, by which the checker tells which locks a fault of one
        /// server could touch.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ports: Vec<u16>,
        /// A `step_failed`: the injection's number (its window is closed by a heal
        /// recorded at the failure, and it is not counted as an injection).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        /// What was done (the repair's steps, or the skipped step and why).
        detail: String,
        /// Whether it succeeded (a repair: the shard has a master and the cluster is ok).
        ok: bool,
    },
    /// An observer of a role (`Election::observe`) saw a change of who leads.
    Observed {
        /// When `changed()` returned it.
        t: u64,
        /// Worker number.
        worker: u32,
        /// The role's lock name (`leader:<role>`).
        name: String,
        /// The leader's term (`None`: nobody leads).
        term: Option<u64>,
        /// The leader's client id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_id: Option<String>,
    },
    /// A fault began or was healed.
    Fault {
        /// When.
        t: u64,
        /// Backend under test.
        backend: String,
        /// Fault name (see `nemesis.rs`).
        fault: String,
        /// `start` or `heal`.
        phase: String,
        /// What it hit (a process, a server, a worker).
        target: String,
        /// The injection's number in the run (pairs a `heal` with its `start` when faults
        /// overlap; absent in older histories: the heal then closes the latest start).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        /// `start` of a state-triggered fault: whether its trigger found a long hold with a
        /// waiter before the bound (`None`: not triggered, or an older history).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        effective: Option<bool>,
        /// The lock the trigger picked (or the best candidate it saw).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lock: Option<String>,
        /// That lock's holder (owner id) when it was picked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
        /// That holder's fencing token.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<u64>,
    },
}
