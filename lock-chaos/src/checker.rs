//! The checker: reads a recorded history and the register store's end state, and counts,
//! per fault window, what went wrong.
//!
//! Holds are keyed by their acquisition's unique id. A hold is the interval in which a
//! worker believed it held a lock: from `acquire` returning to the first of `lost()`
//! firing, the start of the release, or the worker's death.
//!
//! Every anomaly is tied to the holds involved in it. It is *excused* (with its reason)
//! only when one of those holds was touched by something the README does not promise to
//! survive: its worker was paused (`SIGSTOP`) during the hold (`pause`), the hold was
//! active while a fault destroyed the lock's data (`data_loss`: an empty restart, a
//! failover, a clock jump; for token order also a lost fence counter between two holds),
//! or its worker's scheduler-lag probe recorded a stall during the hold (`stall`; for a
//! late `lost()`, a stall of the harness between the loss and `lost()` too:
//! `harness_stall`). Anything else is a violation, whatever fault window it falls in.
//!
//! A fault's window runs from its start to the next fault's start (or the end of the run);
//! the rows attribute events to windows, events before the first fault to `none`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::clock::ms_between;
use crate::event::{Event, LockKind, Register, TaskMode, WriteOutcome};
use crate::nemesis::Fault;
use crate::register::{LoggedWrite, RegisterTruth};
use crate::workload::SHUTDOWN_GRACE;

/// Added to the documented `lost()` bound for scheduling and recording (ms).
const LOST_ALLOWANCE: Duration = Duration::from_millis(100);
/// Key events received this soon after an acquisition may be the previous holder's key
/// going (the notification and the acquisition race to the harness), so they do not date
/// the new hold's loss.
const KEY_EVENT_GUARD: Duration = Duration::from_millis(50);
/// A fair waiter is taken to have joined the queue before another only when its acquire
/// call started this much earlier, and an inversion counts only when the later one was
/// granted this much earlier (clock reading and queueing jitter).
const FIFO_MARGIN: Duration = Duration::from_millis(50);
/// How much earlier than its minimum hold a `hold_at_least` lock may be seen free (the
/// server's expiry resolution and recording).
const MIN_HOLD_ALLOWANCE: Duration = Duration::from_millis(25);
/// From a shutdown's return to the acquisition by a waiter that was asking then, outside
/// fault windows (the release wakes the waiters by pub/sub).
const SHUTDOWN_RECOVERY_BOUND: Duration = Duration::from_secs(1);
/// After a failover's heal, the old master may still answer commands already on their way
/// to it (the README's "about 100 ms"); holds that begin this soon after the heal are
/// touched too.
const FAILOVER_SLACK: Duration = Duration::from_secs(1);

/// A fault that delayed a worker's commands may leave its connection stuck past the heal
/// (TCP's retransmission backoff after a blackhole, a dead socket after a server restart):
/// its effect lasts until the worker's first answer from the lock servers, at most this long.
const STUCK_AFTER_HEAL: Duration = Duration::from_secs(2);

/// How many violations the table lists (the JSON lines output has all of them).
const LISTED_VIOLATIONS: usize = 20;

/// One fault injection as the nemesis recorded it.
#[derive(Debug, Clone)]
struct Window {
    fault: String,
    target: String,
    start: u64,
    heal: u64,
    end: u64,
    /// The injection's number (pairs its heal), if recorded.
    id: Option<u64>,
    /// What the trigger said at the start (`None`: not triggered).
    triggered: Option<bool>,
    /// The lock the trigger aimed at, if any.
    lock: Option<String>,
}

impl Window {
    fn kind(&self) -> Option<Fault> {
        Fault::from_name(&self.fault)
    }

    /// Whether the fault could delay or drop `worker`'s commands to the lock servers while
    /// it was active, by what it does, whichever schedule named it: a cut or slowed network
    /// of that worker (every partition, latency), or a server-side fault every client sees
    /// (connections killed or reset, scripts flushed, a server restarted, stopped, paused
    /// or failed over). Not a pause or kill of a worker process (those are `pause`, or end
    /// the holds), nor a clock jump (it moves TTLs, not commands: a forward one is
    /// `data_loss`).
    fn delays_commands_of(&self, worker: u32) -> bool {
        match self.fault.as_str() {
            "partition"
            | "partition_both"
            | "partition_to_server"
            | "partition_from_server"
            | "partition_one_master"
            | "latency" => self.worker() == Some(worker),
            "client_kill"
            | "script_flush"
            | "proxy_reset"
            | "restart_persistent"
            | "restart_empty"
            | "failover"
            | "stop_minority"
            | "stop_majority"
            | "bare_majority"
            | "pause_master_past_down_after"
            | "manual_failover"
            | "replication_lag"
            | "split_brain"
            | "split_brain_min_replicas" => true,
            _ => false,
        }
    }

    /// The worker a fault targeted (`worker N pid P`).
    fn worker(&self) -> Option<u32> {
        self.target
            .strip_prefix("worker ")
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
    }
}

/// A Cluster shard the harness found without a live master and repaired (a `repair_shard`
/// harness event): not a fault of the schedule (no row, no window), but the holds of its
/// locks during the outage are touched as by a failover: the takeover promotes a replica
/// that may lack the last writes (`data_loss`, the fence counter too), and commands to the
/// shard went unanswered (`net_fault`).
#[derive(Debug, Clone)]
struct Repair {
    /// The last check that found the shard with a master: the outage began after it.
    since: u64,
    /// When the repair began.
    start: u64,
    /// When it was done.
    end: u64,
    /// The shard's slot ranges (empty: unknown, every lock).
    slots: Vec<(u16, u16)>,
}

impl Repair {
    /// Whether the lock `name` held as `kind` lives on the shard.
    fn covers(&self, kind: LockKind, name: &str) -> bool {
        if self.slots.is_empty() {
            return true;
        }
        let slot = lock_test_support::key_slot(hold_key(kind, name).as_bytes());
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }

    /// The span in which the shard's data may have been lost (as a failover's: until
    /// [`FAILOVER_SLACK`] after it was done).
    fn loss_span(&self) -> (u64, u64) {
        (self.since, self.end + FAILOVER_SLACK.as_nanos() as u64)
    }
}

/// What the harness recorded beside the faults (repairs, skipped or failed steps).
#[derive(Debug, Clone, Serialize)]
pub struct HarnessNote {
    /// `repair_shard`, `skip_step` or `step_failed`.
    pub action: String,
    /// Milliseconds since the start of the run.
    pub at_ms: f64,
    /// How long it took, ms.
    pub took_ms: f64,
    /// Whether it succeeded.
    pub ok: bool,
    /// What was done.
    pub detail: String,
}

/// One hold of a lock.
#[derive(Debug, Clone)]
struct Hold {
    id: String,
    worker: u32,
    mode: TaskMode,
    kind: LockKind,
    /// When the acquire call started.
    asked: u64,
    permits: u32,
    total: u32,
    min_hold: u64,
    name: String,
    owner: String,
    token: u64,
    start: u64,
    end: u64,
    lost: Option<u64>,
    release: Option<String>,
    release_start: Option<u64>,
    /// When the release answered (a loss before then and after its start happened while
    /// the release was on its way).
    release_end: Option<u64>,
    /// The deadline at which a client's shutdown took the lock from this hold.
    surrendered: Option<u64>,
    /// Why a fault could have touched it (empty: nothing did).
    touched: BTreeSet<&'static str>,
}

/// One anomaly, written to the JSON lines output.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// `overlap`, `stale_write_accepted`, `token_regression`, `loss_first_seen_at_release`,
    /// `late_lost`, `lost_update` (unfenced: never a violation), or a register-store check
    /// (`register_final`, `register_chain`, `write_without_intent`, `write_not_logged`,
    /// `register_log`).
    pub kind: String,
    /// Backend.
    pub backend: String,
    /// The window's fault.
    pub fault: String,
    /// Lock name.
    pub name: String,
    /// Milliseconds since the start of the run.
    pub at_ms: f64,
    /// The holds involved.
    pub holds: Vec<String>,
    /// Why it is excused (`pause`, `data_loss`, `stall`, `harness_stall`; for a FIFO
    /// inversion, or a reader's or permits' release that found them gone, also
    /// `net_fault`), or `None`: a violation.
    pub excused: Option<String>,
    /// What exactly (owners, tokens, values).
    pub detail: String,
}

impl Violation {
    /// Whether this counts against the README's claims (unexcused, and not an unfenced
    /// lost update, which nothing promises to prevent).
    pub fn counts(&self) -> bool {
        self.excused.is_none() && self.kind != "lost_update"
    }
}

/// The figures of one backend x fault.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// Backend.
    pub backend: String,
    /// Fault (`none` outside fault windows).
    pub fault: String,
    /// Injections of the fault.
    pub injections: usize,
    /// Holds that began in the window.
    pub holds: usize,
    /// Anomalies in the window that no fault excuses.
    pub violations: usize,
    /// Anomalies in the window excused because a fault touched a hold involved.
    pub excused: usize,
    /// The excused ones by reason.
    pub excused_by: BTreeMap<String, usize>,
    /// Pairs of overlapping holds of one lock by two owners (excused or not).
    pub overlaps: usize,
    /// Longest overlap, ms.
    pub overlap_max_ms: f64,
    /// Unfenced writes applied (from the register's log when it was read).
    pub unfenced_writes: usize,
    /// Unfenced writes that overwrote a write they had not read (lost updates).
    pub unfenced_lost_updates: usize,
    /// Fenced writes applied (from the register's log when it was read).
    pub fenced_accepted: usize,
    /// Fenced reads or writes refused as stale.
    pub fenced_rejected: usize,
    /// Of those, refusals of a holder that never lost its lock (tokens that went back).
    pub valid_holder_rejected: usize,
    /// Fenced writes applied although they overwrote a write they had not read.
    pub stale_writes_accepted: usize,
    /// Holds whose token was not above that of a hold of the lock by another owner that
    /// had ended before.
    pub token_regressions: usize,
    /// Holds whose release found the lock gone with no `lost()` before it (later than the
    /// documented bound after the loss, or with no known loss).
    pub release_first_losses: usize,
    /// Holds whose `lost()` came (or that went on believing) later than the documented
    /// bound after the lock disappeared.
    pub late_lost: usize,
    /// `lost()` firings.
    pub lost_fired: usize,
    /// Loss-to-`lost()` latencies, ms.
    #[serde(skip)]
    pub loss_latency_ms: Vec<f64>,
    /// Median loss-to-`lost()` latency, ms.
    pub loss_latency_p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub loss_latency_p99_ms: Option<f64>,
    /// Firings without an observable loss (declared before Redis could expire the key).
    pub lost_without_observed_loss: usize,
    /// `kill_holder`: from the kill to the next acquisition of each lock the killed
    /// worker held, by another worker: the longest, ms.
    pub kill_recovery_max_ms: Option<f64>,
    /// Other faults: from the heal to the first fenced write accepted after it (any
    /// lock): the longest, ms.
    pub heal_to_write_max_ms: Option<f64>,
    /// Instants at which more semaphore permits were held than the total.
    pub permits_exceeded: usize,
    /// Fair-lock grants out of the waiters' order.
    pub fifo_inversions: usize,
    /// `hold_at_least` locks acquired by another owner before the minimum hold.
    pub freed_early: usize,
    /// Shutdown workload: from the shutdown's return to the next acquisition by a waiter
    /// that was asking then: the longest, ms.
    pub shutdown_recovery_max_ms: Option<f64>,
    /// Acquisitions that timed out.
    pub acquire_timeouts: usize,
    /// Operations that failed with an error (acquire, release, register).
    pub errors: usize,
    /// Injections whose trigger found a long hold with a waiter before its bound (the
    /// nemesis's word, recorded at the start).
    pub triggered: usize,
    /// Injections that hit a lock somebody wanted, decided from the history
    /// ([`crate::trigger::effect`]: a hold of the target lock in progress for at least a
    /// third of the lease at the fault's start, and another task's acquisition in flight).
    pub effective: usize,
    /// One-sided 95% upper confidence bounds (Clopper-Pearson) of each anomaly's rate per
    /// effective injection, by anomaly (`violations`, `overlaps`, `stale_writes_accepted`,
    /// `token_regressions`, `late_lost`, `release_first_losses`); empty without effective
    /// injections.
    pub upper95: BTreeMap<String, f64>,
}

impl Row {
    /// Fills [`Row::upper95`] from the counts and [`Row::effective`].
    fn fill_bounds(&mut self) {
        self.upper95.clear();
        if self.effective == 0 {
            return;
        }
        for (name, k) in [
            ("violations", self.violations),
            ("overlaps", self.overlaps),
            ("stale_writes_accepted", self.stale_writes_accepted),
            ("token_regressions", self.token_regressions),
            ("late_lost", self.late_lost),
            ("release_first_losses", self.release_first_losses),
        ] {
            if let Some(p) = upper_bound_95(k, self.effective) {
                self.upper95.insert(name.to_owned(), p);
            }
        }
    }
}

/// The one-sided 95% Clopper-Pearson upper bound of a rate seen `k` times in `n` trials:
/// the `p` at which `k` or fewer successes have probability 0.05 (for `k = 0`,
/// `1 - 0.05^(1/n)`, about `3/n`). `None` without trials; `1` when `k >= n`.
pub fn upper_bound_95(k: usize, n: usize) -> Option<f64> {
    if n == 0 {
        return None;
    }
    if k >= n {
        return Some(1.0);
    }
    if k == 0 {
        return Some(1.0 - 0.05f64.powf(1.0 / n as f64));
    }
    // P(X <= k; n, p) falls as p grows: bisect for 0.05.
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if binomial_cdf(k, n, mid) > 0.05 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(hi)
}

/// `P(X <= k)` for `X ~ Binomial(n, p)`, summed in logarithms.
fn binomial_cdf(k: usize, n: usize, p: f64) -> f64 {
    if p <= 0.0 {
        return 1.0;
    }
    if p >= 1.0 {
        return if k >= n { 1.0 } else { 0.0 };
    }
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    let mut ln_choose = 0.0f64;
    let mut sum = 0.0f64;
    for i in 0..=k.min(n) {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        sum += (ln_choose + i as f64 * lp + (n - i) as f64 * lq).exp();
    }
    sum.min(1.0)
}

/// A `Fault` event: time, fault, phase, target, (id, trigger outcome, lock).
type FaultRecord<'a> = (
    u64,
    &'a str,
    &'a str,
    &'a str,
    (Option<u64>, Option<bool>, Option<String>),
);

/// The window a `heal` closes: the one started with the same id, or (older histories, no
/// id) the latest one.
fn heal_target(windows: &mut [Window], id: Option<u64>) -> Option<&mut Window> {
    match id {
        Some(id) => windows.iter_mut().rev().find(|w| w.id == Some(id)),
        None => windows.last_mut(),
    }
}

/// When a fault may have destroyed a lock's data (holds active then are excused as
/// `data_loss`), by what the README does not promise to survive: an empty restart, a
/// failover (any that promotes a replica which may lack the last writes: a crash, a master
/// paused past the failure detector, Sentinel's forced `SENTINEL FAILOVER`, a replica cut off
/// then promoted; until the old master answers no more, about [`FAILOVER_SLACK`] after the
/// heal), a forward jump of a server's clock (its TTLs: the README's "clocks" row), and a
/// Redlock master restarted empty under a lock held on a bare majority (the README's
/// Redlock column: two holders possible). Not excused: partitions of workers (their leases
/// run out and `lost()` says so), a backward clock jump (it only lengthens TTLs), a
/// coordinated `CLUSTER FAILOVER` (the replica catches up before it takes over).
fn loss_span(backend: &str, w: &Window) -> Option<(u64, u64)> {
    let slack = FAILOVER_SLACK.as_nanos() as u64;
    if let Some(f) = w.kind() {
        return f.destroys_lock().then(|| {
            (
                w.start,
                w.heal + if f == Fault::Failover { slack } else { 0 },
            )
        });
    }
    match w.fault.as_str() {
        "pause_master_past_down_after" | "replication_lag" | "split_brain" => {
            Some((w.start, w.heal + slack))
        }
        "manual_failover" if backend == "sentinel" => Some((w.start, w.heal + slack)),
        "bare_majority" | "clock_jump_forward" | "clock_jump_forward_by_restart" => {
            Some((w.start, w.heal))
        }
        // With `min-replicas-to-write`, the README's remedy, the old master refuses writes
        // once its replica's acknowledgements are older than the max lag: only what it took
        // before that (never replicated) may be lost; later holds there are not excused.
        "split_brain_min_replicas" => Some((
            w.start,
            w.start
                + (crate::settings::MIN_REPLICAS_MAX_LAG + FAILOVER_SLACK * 2).as_nanos() as u64,
        )),
        _ => None,
    }
}

/// Redlock: whether masters restarted empty during hold `h` (`stop_minority`,
/// `restart_empty`) while the lock may have lived on fewer than all masters, because a fault
/// kept a master from the lock's acquisition or renewals in the lease before the hold or
/// during it (a partition, latency, paused or killed masters, a restart, a forward clock
/// jump). The README's Redlock column: a master that comes back empty within a lease can
/// admit a second holder of a lock held on a bare majority. Alone, two of five restarting
/// empty leave a lock taken on all five on a majority: not excused then.
fn redlock_empty_restart_of_a_reduced_lock(
    backend: &str,
    h: &Hold,
    windows: &[Window],
    lease: Duration,
) -> bool {
    if backend != crate::topology::Backend::Redlock.name() {
        return false;
    }
    let lease = lease.as_nanos() as u64;
    windows
        .iter()
        .filter(|w| matches!(w.fault.as_str(), "stop_minority" | "restart_empty"))
        .filter(|w| intersects(h.start, h.end, w.start, w.heal))
        .any(|empty| {
            windows.iter().any(|w| {
                !std::ptr::eq(w, empty)
                    && matches!(
                        w.fault.as_str(),
                        "partition"
                            | "partition_both"
                            | "partition_to_server"
                            | "partition_from_server"
                            | "partition_one_master"
                            | "latency"
                            | "stop_majority"
                            | "stop_minority"
                            | "bare_majority"
                            | "restart_persistent"
                            | "restart_empty"
                            | "clock_jump"
                            | "clock_jump_forward"
                            | "clock_jump_forward_by_restart"
                    )
                    && intersects(h.start.saturating_sub(lease), empty.heal, w.start, w.heal)
            })
        })
}

/// How long after a failover's heal the old master's key events are ignored: it may run on
/// with its stale data (expiring keys the new master has renewed) until the sentinels or the
/// cluster demote it and it resyncs.
const STALE_MASTER_GRACE: Duration = Duration::from_secs(5);

/// Whether a key event of `server` at `t` comes from an old master a failover-type fault
/// left behind (`old master port N` in its target), within the fault and
/// [`STALE_MASTER_GRACE`] after its heal: not the lock's truth then.
fn stale_master(windows: &[Window], server: &str, t: u64) -> bool {
    let grace = STALE_MASTER_GRACE.as_nanos() as u64;
    windows.iter().any(|w| {
        let port = w
            .target
            .split("old master port ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next());
        port.is_some_and(|port| {
            server.rsplit(':').next() == Some(port) && t >= w.start && t <= w.heal + grace
        })
    })
}

/// Whether a fault can lose a lock's fence counter (tokens may then repeat or go back).
fn loses_counter(backend: &str, w: &Window) -> bool {
    if let Some(f) = w.kind() {
        return f.loses_counter();
    }
    match w.fault.as_str() {
        "pause_master_past_down_after"
        | "replication_lag"
        | "split_brain"
        | "split_brain_min_replicas"
        | "bare_majority" => true,
        "manual_failover" => backend == "sentinel",
        _ => false,
    }
}

/// The task number in a hold id `w{worker}-t{task}-{seq}`.
fn task_of_hold(hold: &str) -> u32 {
    hold.split('-')
        .nth(1)
        .and_then(|t| t.strip_prefix('t'))
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

/// Counts, per row, the injections the trigger called effective and those the history
/// shows effective ([`crate::trigger::effect`] on the target lock, or on any lock when the
/// injection named none; aimed at a worker, the hold must be that worker's).
fn decide_effects(
    rows: &mut [Row],
    row_of_fault: &HashMap<String, usize>,
    windows: &[Window],
    holds: &[Hold],
    events: &[Event],
    lease: Duration,
) {
    use crate::trigger::{effect, Interval};
    let min_hold = (lease / 3).as_nanos() as u64;
    let mut held: BTreeMap<&str, Vec<Interval>> = BTreeMap::new();
    for h in holds {
        held.entry(h.name.as_str()).or_default().push(Interval {
            who: (h.worker, task_of_hold(&h.id)),
            start: h.start,
            end: Some(h.end),
        });
    }
    let mut attempts: BTreeMap<&str, Vec<Interval>> = BTreeMap::new();
    for event in events {
        let (t_start, t, worker, task, name) = match event {
            Event::Acquired {
                t_start,
                t,
                worker,
                task,
                name,
                ..
            }
            | Event::AcquireFailed {
                t_start,
                t,
                worker,
                task,
                name,
                ..
            } => (*t_start, *t, *worker, *task, name.as_str()),
            _ => continue,
        };
        attempts.entry(name).or_default().push(Interval {
            who: (worker, task),
            start: t_start,
            end: Some(t),
        });
    }
    for w in windows {
        let row = &mut rows[row_of_fault[&w.fault]];
        if w.triggered == Some(true) {
            row.triggered += 1;
        }
        let names: Vec<&str> = match &w.lock {
            Some(lock) => vec![lock.as_str()],
            None => held.keys().copied().collect(),
        };
        // Just before the start: a killed holder's hold ends at the kill itself.
        let at = w.start.saturating_sub(1);
        let hit = names.iter().any(|name| {
            effect(
                at,
                min_hold,
                w.worker(),
                held.get(name).map_or(&[][..], Vec::as_slice),
                attempts.get(name).map_or(&[][..], Vec::as_slice),
            )
            .is_effective()
        });
        if hit {
            row.effective += 1;
        }
    }
}

impl Row {
    fn finish(&mut self) {
        self.loss_latency_ms
            .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        self.loss_latency_p50_ms = percentile(&self.loss_latency_ms, 0.50);
        self.loss_latency_p99_ms = percentile(&self.loss_latency_ms, 0.99);
    }
}

/// The nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// What the register store's logs and final values showed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RegisterCheck {
    /// Whether the logs were read at all.
    pub read: bool,
    /// Writes the store applied (both registers).
    pub applied: usize,
    /// Of those, writes no `Write` event recorded as accepted (the worker was aborted,
    /// killed, or timed out): indeterminate operations the log resolved.
    pub applied_unrecorded: usize,
    /// Logged writes without an intent (a harness bug).
    pub without_intent: usize,
    /// Registers whose final value or log chain did not match (a harness bug or a lost
    /// write in the register store).
    pub inconsistent: usize,
    /// Registers checked.
    pub registers: usize,
}

/// Holds and anomalies of one kind of lock.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KindFigures {
    /// Holds of this kind.
    pub holds: usize,
    /// Anomalies (first hold of this kind) that count.
    pub violations: usize,
    /// Anomalies excused.
    pub excused: usize,
}

/// What `admin().layouts()` answered in workers with clients of both layouts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LayoutCheck {
    /// Checks made.
    pub checks: usize,
    /// Of those, listing both layouts.
    pub both: usize,
    /// Of those, failed calls (not counted either way).
    pub failed: usize,
}

/// The scheduler-lag probes' findings.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stalls {
    /// Stalls of worker processes.
    pub workers: usize,
    /// Longest worker stall, ms.
    pub workers_max_ms: f64,
    /// Stalls of the harness (nemesis, proxies, key-event subscribers).
    pub harness: usize,
    /// Longest harness stall, ms.
    pub harness_max_ms: f64,
}

/// The figures of one backend.
#[derive(Debug, Clone, Serialize)]
pub struct BackendReport {
    /// Backend.
    pub backend: String,
    /// Run length, s.
    pub duration_s: f64,
    /// The workers' lease, ms.
    pub lease_ms: f64,
    /// One row per fault (and `none`).
    pub rows: Vec<Row>,
    /// Every anomaly found (excused or not).
    pub violations: Vec<Violation>,
    /// The register store's end-of-run check.
    pub register: RegisterCheck,
    /// Scheduler lag.
    pub stalls: Stalls,
    /// Key removals the lock servers reported.
    pub key_events: usize,
    /// Every loss latency, ms (for the overall percentiles).
    #[serde(skip)]
    pub all_latencies: Vec<f64>,
    /// Holds and anomalies per kind of lock.
    pub kinds: BTreeMap<String, KindFigures>,
    /// The two-layout check.
    pub layouts: LayoutCheck,
    /// What the harness recorded beside the faults (shard repairs, skipped steps).
    pub harness: Vec<HarnessNote>,
}

impl BackendReport {
    /// Injected faults.
    pub fn faults(&self) -> usize {
        self.rows.iter().map(|r| r.injections).sum()
    }

    /// Holds checked.
    pub fn holds(&self) -> usize {
        self.rows.iter().map(|r| r.holds).sum()
    }

    /// Anomalies no fault excuses (what `--strict` fails on).
    pub fn unexcused(&self) -> usize {
        self.violations.iter().filter(|v| v.counts()).count()
    }

    /// Excused anomalies by reason.
    pub fn excused_by(&self) -> BTreeMap<String, usize> {
        let mut by = BTreeMap::new();
        for v in self.violations.iter().filter(|v| v.kind != "lost_update") {
            if let Some(reason) = &v.excused {
                *by.entry(reason.clone()).or_insert(0) += 1;
            }
        }
        by
    }

    /// The table, as Markdown.
    pub fn table(&self) -> String {
        let mut out = format!(
            "\n### {} ({:.0} s, {} faults, {} holds checked, lease {:.0} ms)\n\n",
            self.backend,
            self.duration_s,
            self.faults(),
            self.holds(),
            self.lease_ms,
        );
        out.push_str(
            "| fault | n | holds | violations | excused (by reason) | overlaps | stale accepted | \
             token regr. | loss first at release | late lost() | unfenced lost upd. | \
             fenced ok / rejected | valid rejected | lost() | loss->lost p50 / p99 ms | \
             no observed loss | kill->next acquire max ms | heal->fenced write max ms | \
             timeouts | errors | effective (trigger / history) | 95% upper bound per effective \
             injection: violations / overlaps / stale / regr. / late lost() |\n",
        );
        out.push_str(
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            let violations = if r.violations > 0 {
                format!("**{}** !", r.violations)
            } else {
                "0".to_owned()
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} / {} | {} |\n",
                r.fault,
                r.injections,
                r.holds,
                violations,
                fmt_reasons(r.excused, &r.excused_by),
                r.overlaps,
                r.stale_writes_accepted,
                r.token_regressions,
                r.release_first_losses,
                r.late_lost,
                r.unfenced_lost_updates,
                r.unfenced_writes,
                r.fenced_accepted,
                r.fenced_rejected,
                r.valid_holder_rejected,
                r.lost_fired,
                fmt_ms(r.loss_latency_p50_ms),
                fmt_ms(r.loss_latency_p99_ms),
                r.lost_without_observed_loss,
                fmt_ms(r.kill_recovery_max_ms),
                fmt_ms(r.heal_to_write_max_ms),
                r.acquire_timeouts,
                r.errors,
                r.triggered,
                r.effective,
                fmt_bounds(&r.upper95),
            ));
        }
        let reg = &self.register;
        if reg.read {
            out.push_str(&format!(
                "\nRegister store: {} writes applied, {} of them applied but never answered to \
                 the worker (resolved by the log), {} without an intent; {} of {} registers \
                 inconsistent (final value or log chain).\n",
                reg.applied,
                reg.applied_unrecorded,
                reg.without_intent,
                reg.inconsistent,
                reg.registers
            ));
        } else {
            out.push_str("\nRegister store: logs not read (no end-of-run check).\n");
        }
        let s = &self.stalls;
        out.push_str(&format!(
            "Stalls (woke > {} ms late): workers {} (max {:.0} ms), harness {} (max {:.0} ms). \
             Key removals reported by the servers: {}.\n",
            crate::worker::STALL_THRESHOLD.as_millis(),
            s.workers,
            s.workers_max_ms,
            s.harness,
            s.harness_max_ms,
            self.key_events
        ));
        if self.kinds.keys().any(|k| k != "plain") {
            let kinds: Vec<String> = self
                .kinds
                .iter()
                .map(|(k, f)| {
                    format!(
                        "{k} {} ({} violations, {} excused)",
                        f.holds, f.violations, f.excused
                    )
                })
                .collect();
            out.push_str(&format!("Holds by kind: {}.\n", kinds.join(", ")));
            out.push_str(
                "\n| fault | fifo inversions | permits exceeded | freed before min hold | shutdown->waiter max ms |\n|---|---|---|---|---|\n",
            );
            for r in &self.rows {
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {} |\n",
                    r.fault,
                    r.fifo_inversions,
                    r.permits_exceeded,
                    r.freed_early,
                    fmt_ms(r.shutdown_recovery_max_ms)
                ));
            }
        }
        if self.layouts.checks > 0 {
            out.push_str(&format!(
                "Layout registry (native + Redisson clients in one worker): {} checks, {} listed both, {} failed calls.\n",
                self.layouts.checks, self.layouts.both, self.layouts.failed
            ));
        }
        if !self.harness.is_empty() {
            let count = |action: &str| self.harness.iter().filter(|n| n.action == action).count();
            out.push_str(&format!(
                "Harness (not faults): {} shard repairs ({} failed), {} steps skipped (target not \
                 found), {} steps failed.\n",
                count("repair_shard"),
                self.harness
                    .iter()
                    .filter(|n| n.action == "repair_shard" && !n.ok)
                    .count(),
                count("skip_step"),
                count("step_failed"),
            ));
            for n in self.harness.iter().take(LISTED_VIOLATIONS) {
                out.push_str(&format!(
                    "- harness {} at {:.0} ms ({:.0} ms, {}): {}\n",
                    n.action,
                    n.at_ms,
                    n.took_ms,
                    if n.ok { "ok" } else { "not ok" },
                    n.detail
                ));
            }
        }
        for v in self
            .violations
            .iter()
            .filter(|v| v.counts())
            .take(LISTED_VIOLATIONS)
        {
            out.push_str(&format!(
                "- violation {} ({}, {}, at {:.0} ms, holds {}): {}\n",
                v.kind,
                v.fault,
                v.name,
                v.at_ms,
                v.holds.join(", "),
                v.detail
            ));
        }
        let unlisted = self.unexcused().saturating_sub(LISTED_VIOLATIONS);
        if unlisted > 0 {
            out.push_str(&format!(
                "- ... and {unlisted} more (every one is in the JSON lines output)\n"
            ));
        }
        out
    }

    /// Appends the rows and violations as JSON lines to `path`.
    pub fn append_json(&self, path: &Path) -> anyhow::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        for row in &self.rows {
            let mut value = serde_json::to_value(row)?;
            value["record"] = "row".into();
            writeln!(file, "{value}")?;
        }
        let mut value = serde_json::json!({
            "record": "backend",
            "backend": self.backend,
            "unexcused": self.unexcused(),
            "excused_by": self.excused_by(),
            "register": self.register,
            "stalls": self.stalls,
            "key_events": self.key_events,
            "kinds": self.kinds,
            "layouts": self.layouts,
            "harness": self.harness,
        });
        value["duration_s"] = self.duration_s.into();
        writeln!(file, "{value}")?;
        for violation in &self.violations {
            let mut value = serde_json::to_value(violation)?;
            value["record"] = "violation".into();
            writeln!(file, "{value}")?;
        }
        Ok(())
    }
}

/// The table's bounds cell: `-` without effective injections.
fn fmt_bounds(upper: &BTreeMap<String, f64>) -> String {
    if upper.is_empty() {
        return "-".to_owned();
    }
    [
        "violations",
        "overlaps",
        "stale_writes_accepted",
        "token_regressions",
        "late_lost",
    ]
    .iter()
    .map(|k| upper.get(*k).map_or("-".to_owned(), |p| format!("{p:.3}")))
    .collect::<Vec<_>>()
    .join(" / ")
}

fn fmt_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.0}"))
}

fn fmt_reasons(total: usize, by: &BTreeMap<String, usize>) -> String {
    if total == 0 {
        return "0".to_owned();
    }
    let reasons: Vec<String> = by.iter().map(|(r, n)| format!("{r} {n}")).collect();
    format!("{total} ({})", reasons.join(", "))
}

/// The closing summary over all backends.
pub fn summary(reports: &[BackendReport]) -> String {
    let mut out = String::from(
        "\n### Summary\n\n| backend | faults injected | holds checked | violations | excused (by reason) | \
         overlaps | stale accepted | token regr. | loss first at release | late lost() | \
         unfenced lost updates | indeterminate writes resolved | register check | stalls workers / harness (max ms) | \
         loss->lost p50 / p99 ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for report in reports {
        let mut latencies = report.all_latencies.clone();
        latencies.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let sum = |f: &dyn Fn(&Row) -> usize| report.rows.iter().map(f).sum::<usize>();
        let by = report.excused_by();
        let reg = &report.register;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} ({:.0} / {:.0}) | {} / {} |\n",
            report.backend,
            report.faults(),
            report.holds(),
            report.unexcused(),
            fmt_reasons(by.values().sum(), &by),
            sum(&|r| r.overlaps),
            sum(&|r| r.stale_writes_accepted),
            sum(&|r| r.token_regressions),
            sum(&|r| r.release_first_losses),
            sum(&|r| r.late_lost),
            sum(&|r| r.unfenced_lost_updates),
            reg.applied_unrecorded,
            if !reg.read {
                "not read".to_owned()
            } else if reg.inconsistent + reg.without_intent == 0 {
                format!("ok ({} writes)", reg.applied)
            } else {
                format!("{} bad", reg.inconsistent + reg.without_intent)
            },
            report.stalls.workers,
            report.stalls.harness,
            report.stalls.workers_max_ms,
            report.stalls.harness_max_ms,
            fmt_ms(percentile(&latencies, 0.5)),
            fmt_ms(percentile(&latencies, 0.99)),
        ));
    }
    out
}

/// Which window a time falls in (`None`: before the first fault).
fn window_of(windows: &[Window], t: u64) -> Option<usize> {
    windows.iter().rposition(|w| w.start <= t && t < w.end)
}

/// Whether `[a0, a1]` and `[b0, b1]` intersect.
fn intersects(a0: u64, a1: u64, b0: u64, b1: u64) -> bool {
    a0 <= b1 && b0 <= a1
}

/// The lock key of name `name` (the library's default `lock:{name}`).
fn lock_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// The key whose removal ends a hold of `kind` on `name` (for readers and permits: the
/// set of every holder, gone when the last one went).
fn hold_key(kind: LockKind, name: &str) -> String {
    match kind {
        LockKind::Fair => format!("lock:{{{name}}}:fair"),
        LockKind::Read => format!("lock:{{{name}}}:rw:read"),
        LockKind::Write => format!("lock:{{{name}}}:rw:write"),
        LockKind::Permit => format!("lock:{{{name}}}:sem"),
        // Redisson's layout: the name itself, no prefix.
        LockKind::Redisson => name.to_owned(),
        _ => lock_key(name),
    }
}

/// The earliest moment the hold's lock may have been granted: `lock_all` takes its names
/// one after another during the call, so a name of it may be held from the call's start;
/// other holds from when the attempt that succeeded was sent: at most two response
/// timeouts before the acquisition's return (one send and the resend after a dropped
/// connection; Redlock asks its masters at once), and never before the call. The lock is
/// written on the servers then, so a data loss, or a pause of the acquiring process, between
/// that write and the return can undo it or outlast it before the holder knows it holds.
fn granted_from(h: &Hold) -> u64 {
    if h.kind == LockKind::Multi {
        h.asked.min(h.start)
    } else {
        let attempt = 2 * crate::settings::RESPONSE_TIMEOUT.as_nanos() as u64;
        h.start.saturating_sub(attempt).max(h.asked).min(h.start)
    }
}

/// Whether two holds of one name must not overlap: holds of distinct owners, except two
/// readers, and semaphore permits (counted apart); uses of a hot lock are distinct holds
/// even under the one owner field the client keeps the lock with.
fn excludes(a: &Hold, b: &Hold) -> bool {
    if a.kind == LockKind::Permit || b.kind == LockKind::Permit {
        return false;
    }
    if a.kind == LockKind::Read && b.kind == LockKind::Read {
        return false;
    }
    if a.kind == LockKind::Hot || b.kind == LockKind::Hot {
        return a.id != b.id;
    }
    a.owner != b.owner
}

/// Whether `b` acquiring proves that `a`'s hold was gone (it could not have been granted
/// beside it): another owner's conflicting hold.
fn displaces(a: &Hold, b: &Hold) -> bool {
    a.owner != b.owner
        && a.kind != LockKind::Permit
        && b.kind != LockKind::Permit
        && !(a.kind == LockKind::Read && b.kind == LockKind::Read)
}

/// The first reason a hold was touched, in order of directness.
fn reason(h: &Hold) -> Option<&'static str> {
    ["pause", "data_loss", "stall"]
        .into_iter()
        .find(|r| h.touched.contains(r))
}

/// Records one anomaly: a violation unless `excuse` (or a touched hold involved) says why
/// a fault may have caused it.
fn push_anomaly(
    rows: &mut [Row],
    out: &mut Vec<Violation>,
    row: usize,
    involved: &[&Hold],
    excuse: Option<&'static str>,
    mut v: Violation,
) {
    let excused = involved.iter().find_map(|h| reason(h)).or(excuse);
    v.holds = involved.iter().map(|h| h.id.clone()).collect();
    v.excused = excused.map(str::to_owned);
    if v.kind != "lost_update" {
        let row = &mut rows[row];
        match excused {
            Some(r) => {
                row.excused += 1;
                *row.excused_by.entry(r.to_owned()).or_insert(0) += 1;
            }
            None => row.violations += 1,
        }
    }
    out.push(v);
}

/// Checks one backend's history, and the register store's end state when it was read.
pub fn analyze(
    backend: &str,
    events: &[Event],
    truth: Option<&[RegisterTruth]>,
    lease: Duration,
    run_start: u64,
    run_end: u64,
) -> BackendReport {
    let bound = (lease / 3 + crate::settings::RESPONSE_TIMEOUT + LOST_ALLOWANCE).as_nanos() as u64;
    let bound_ms = bound as f64 / 1e6;
    let guard = KEY_EVENT_GUARD.as_nanos() as u64;
    let quorum = if backend == crate::topology::Backend::Redlock.name() {
        crate::topology::REDLOCK_MASTERS / 2 + 1
    } else {
        1
    };

    // Fault windows, in time order.
    let mut windows: Vec<Window> = Vec::new();
    let mut faults: Vec<FaultRecord<'_>> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fault {
                t,
                fault,
                phase,
                target,
                id,
                effective,
                lock,
                ..
            } => Some((
                *t,
                fault.as_str(),
                phase.as_str(),
                target.as_str(),
                (*id, *effective, lock.clone()),
            )),
            _ => None,
        })
        .collect();
    faults.sort_by_key(|f| f.0);
    for (t, fault, phase, target, (id, triggered, lock)) in &faults {
        if *phase == "start" {
            windows.push(Window {
                fault: (*fault).to_owned(),
                target: (*target).to_owned(),
                start: *t,
                heal: *t,
                end: run_end,
                id: *id,
                triggered: *triggered,
                lock: lock.clone(),
            });
        } else if let Some(w) = heal_target(&mut windows, *id) {
            w.heal = *t;
        }
    }
    for i in 1..windows.len() {
        windows[i - 1].end = windows[i].start;
    }
    let mut repairs: Vec<Repair> = Vec::new();
    let mut harness: Vec<HarnessNote> = Vec::new();
    for event in events {
        let Event::Harness {
            t_start,
            t,
            action,
            since,
            slots,
            detail,
            ok,
            ..
        } = event
        else {
            continue;
        };
        harness.push(HarnessNote {
            action: action.clone(),
            at_ms: ms_between(run_start, *t_start),
            took_ms: ms_between(*t_start, *t),
            ok: *ok,
            detail: detail.clone(),
        });
        if action == "repair_shard" {
            repairs.push(Repair {
                since: since.unwrap_or(*t_start).min(*t_start),
                start: *t_start,
                end: *t,
                slots: slots.clone(),
            });
        }
    }
    harness.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
    // (start, heal, worker): the nemesis records the start before it sends `SIGKILL` and
    // the heal after it reaped the process.
    let kills: Vec<(u64, u64, u32)> = windows
        .iter()
        .filter(|w| w.kind() == Some(Fault::KillHolder))
        .filter_map(|w| Some((w.start, w.heal, w.worker()?)))
        .collect();

    // Rows: `none`, then one per fault kind in order of first injection.
    let mut rows: Vec<Row> = Vec::new();
    let mut row_of_fault: HashMap<String, usize> = HashMap::new();
    for name in std::iter::once("none").chain(windows.iter().map(|w| w.fault.as_str())) {
        if !row_of_fault.contains_key(name) {
            row_of_fault.insert(name.to_owned(), rows.len());
            rows.push(Row {
                backend: backend.to_owned(),
                fault: name.to_owned(),
                ..Row::default()
            });
        }
    }
    for w in &windows {
        rows[row_of_fault[&w.fault]].injections += 1;
    }
    let row_at =
        |t: u64| -> usize { window_of(&windows, t).map_or(0, |i| row_of_fault[&windows[i].fault]) };
    let fault_at = |t: u64| -> String {
        window_of(&windows, t).map_or_else(|| "none".to_owned(), |i| windows[i].fault.clone())
    };
    let at_ms = |t: u64| ms_between(run_start, t);

    // A failed-over master's removals from the failover's start on are of a stale copy
    // (its restart, before it resyncs as a replica, expires keys the new master still
    // has) or repeat the new master's: the heal names it (`master OLD -> NEW`).
    let mut demoted: Vec<(String, u64)> = Vec::new();
    let mut failover_start = None;
    for (t, fault, phase, target, _) in &faults {
        if *fault != Fault::Failover.name() {
            continue;
        }
        if *phase == "start" {
            failover_start = Some(*t);
        } else if let Some(old) = target
            .strip_prefix("master ")
            .and_then(|r| r.split(' ').next())
        {
            demoted.push((format!("127.0.0.1:{old}"), failover_start.unwrap_or(*t)));
        }
    }
    // A server restarted from its append-only file replays it: the replay's removals
    // (of locks long released) reach the subscriber while the server loads, before the
    // nemesis records the heal (`port P`). They are not removals of the live locks.
    let mut restarting: Vec<(Option<String>, u64, u64)> = Vec::new();
    let mut restart_start = None;
    for (t, fault, phase, target, _) in &faults {
        if *fault != Fault::RestartPersistent.name() && *fault != Fault::RestartEmpty.name() {
            continue;
        }
        if *phase == "start" {
            restart_start = Some(*t);
        } else if let Some(start) = restart_start.take() {
            let server = target
                .strip_prefix("port ")
                .map(|p| format!("127.0.0.1:{p}"));
            restarting.push((server, start, *t));
        }
    }
    let replayed = |server: &str, t: u64| {
        restarting.iter().any(|(s, start, heal)| {
            s.as_deref().is_none_or(|s| s == server) && *start <= t && t <= *heal
        })
    };
    // Holds, stalls, key removals.
    let mut holds: Vec<Hold> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut stalls: Vec<(Option<u32>, u64, u64)> = Vec::new();
    let mut gone: HashMap<&str, Vec<(u64, &str)>> = HashMap::new();
    let mut key_events = 0;
    for event in events {
        match event {
            Event::Acquired {
                t_start,
                t,
                worker,
                hold,
                mode,
                name,
                owner,
                token,
                kind,
                permits,
                total,
                min_hold_ms,
                ..
            } => {
                index.insert(hold.clone(), holds.len());
                holds.push(Hold {
                    id: hold.clone(),
                    worker: *worker,
                    mode: *mode,
                    kind: *kind,
                    asked: *t_start,
                    permits: *permits,
                    total: *total,
                    min_hold: min_hold_ms * 1_000_000,
                    name: name.clone(),
                    owner: owner.clone(),
                    token: *token,
                    start: *t,
                    end: u64::MAX,
                    lost: None,
                    release: None,
                    release_start: None,
                    release_end: None,
                    surrendered: None,
                    touched: BTreeSet::new(),
                });
            }
            Event::AcquireFailed { t, kind, .. } => {
                let row = &mut rows[row_at(*t)];
                if kind == "timed_out" {
                    row.acquire_timeouts += 1;
                } else {
                    row.errors += 1;
                }
            }
            Event::Stall { t_start, t, worker } => stalls.push((*worker, *t_start, *t)),
            Event::KeyGone { t, server, .. }
                if demoted.iter().any(|(s, from)| s == server && t >= from)
                    || replayed(server, *t) => {}
            Event::KeyGone { t, key, server, .. } => {
                key_events += 1;
                if stale_master(&windows, server, *t) {
                    continue;
                }
                gone.entry(key.as_str())
                    .or_default()
                    .push((*t, server.as_str()));
            }
            _ => {}
        }
    }
    for times in gone.values_mut() {
        times.sort_unstable();
    }
    for event in events {
        if let Event::ReleaseStarted { t, hold, .. } = event {
            // The holder stopped there, even if its release never returned.
            if let Some(h) = index.get(hold).map(|&i| &mut holds[i]) {
                h.end = h.end.min(*t);
            }
        }
        match event {
            Event::Lost { t, hold, .. } => {
                if let Some(h) = index.get(hold).map(|&i| &mut holds[i]) {
                    h.lost = Some(h.lost.map_or(*t, |l| l.min(*t)));
                    h.end = h.end.min(*t);
                }
            }
            Event::Released {
                t_start,
                t,
                hold,
                result,
                ..
            } => {
                if let Some(h) = index.get(hold).map(|&i| &mut holds[i]) {
                    h.end = h.end.min(*t_start);
                    h.release = Some(result.clone());
                    h.release_start = Some(*t_start);
                    h.release_end = Some(*t);
                }
                if result == "backend" {
                    rows[row_at(*t)].errors += 1;
                }
            }
            _ => {}
        }
    }
    // The shutdown workload: a lock the client's shutdown took at its deadline (its start
    // plus the grace period, when the README says the lock is taken) ends there, and that
    // is its loss, even when the holder's zero-wait `lost()` check ran just before the
    // surrender and its release then returned `LeaseLost`.
    let grace = SHUTDOWN_GRACE.as_nanos() as u64;
    for event in events {
        let Event::ShutdownDone {
            t_start,
            hold: Some(hold),
            released_at_deadline,
            ..
        } = event
        else {
            continue;
        };
        let deadline = t_start + grace;
        if let Some(h) = index.get(hold).map(|&i| &mut holds[i]) {
            if *released_at_deadline > 0 && h.lost.is_none() && h.end > deadline {
                h.end = deadline;
                h.surrendered = Some(deadline);
            }
        }
    }
    // When each kept hot lock was taken from the store: the first use under its owner
    // field (the client's keeper field).
    let mut keep_start: HashMap<String, u64> = HashMap::new();
    for h in holds.iter().filter(|h| h.kind == LockKind::Hot) {
        let t = keep_start.entry(h.owner.clone()).or_insert(h.start);
        *t = (*t).min(h.start);
    }
    for h in &mut holds {
        if h.end == u64::MAX {
            // Killed mid-hold, or still holding when the run stopped.
            // A hold recorded between the kill's start and the signal's arrival ends with
            // its start.
            h.end = kills
                .iter()
                .find(|(_, heal, w)| *w == h.worker && *heal >= h.start)
                .map_or(run_end, |(t, _, _)| (*t).max(h.start));
        }
        rows[row_at(h.start)].holds += 1;
        // What a fault could have done to this hold.
        for w in &windows {
            match w.kind() {
                Some(Fault::PauseHolder)
                    if w.worker() == Some(h.worker)
                        && intersects(granted_from(h), h.end, w.start, w.heal) =>
                {
                    h.touched.insert("pause");
                }
                _ => {
                    if let Some((from, to)) = loss_span(backend, w) {
                        // A use of a kept lock uses what the client took from the store at
                        // its first use: data lost since then is lost under this use too,
                        // when the use began before the watchdog had to notice (the README:
                        // within a renewal period; the same bound as for lost()). A use
                        // that began later is the client's fault (`hot_use_after_loss`).
                        let kept_through = h.kind == LockKind::Hot
                            && h.start <= to + bound
                            && keep_start
                                .get(&h.owner)
                                .is_some_and(|&kept| intersects(kept, h.end, from, to));
                        if intersects(granted_from(h), h.end, from, to) || kept_through {
                            h.touched.insert("data_loss");
                        }
                    }
                }
            }
        }
        if redlock_empty_restart_of_a_reduced_lock(backend, h, &windows, lease) {
            h.touched.insert("data_loss");
        }
        if repairs.iter().any(|r| {
            let (from, to) = r.loss_span();
            r.covers(h.kind, &h.name) && intersects(granted_from(h), h.end, from, to)
        }) {
            h.touched.insert("data_loss");
        }
        if stalls
            .iter()
            .any(|&(w, s0, s1)| w == Some(h.worker) && intersects(h.start, h.end, s0, s1))
        {
            h.touched.insert("stall");
        }
    }
    let harness_stalled = |from: u64, to: u64| {
        stalls
            .iter()
            .any(|&(w, s0, s1)| w.is_none() && intersects(from, to, s0, s1))
    };
    let counter_lost_between = |kind: LockKind, name: &str, from: u64, to: u64| {
        windows
            .iter()
            .any(|w| loses_counter(backend, w) && w.start >= from && w.start <= to)
            || repairs
                .iter()
                .any(|r| r.covers(kind, name) && intersects(from, to, r.start, r.end))
    };

    // Each worker's answers from the lock servers on its main client (the hot, Redisson
    // and shutdown workloads have clients of their own, whose answers say nothing of it):
    // an acquisition, a release answered `ok` or `not_held`, a wait that timed out.
    let main_client = |kind: LockKind| {
        !matches!(
            kind,
            LockKind::Hot | LockKind::Redisson | LockKind::Shutdown
        )
    };
    let kind_of_name: HashMap<&str, LockKind> =
        holds.iter().map(|h| (h.name.as_str(), h.kind)).collect();
    let mut answers: HashMap<u32, Vec<u64>> = HashMap::new();
    for event in events {
        let answer = match event {
            Event::Acquired {
                t, worker, kind, ..
            } if main_client(*kind) => Some((*worker, *t)),
            Event::Released {
                t,
                worker,
                hold,
                result,
                ..
            } if matches!(result.as_str(), "ok" | "not_held")
                && index.get(hold).is_some_and(|&i| main_client(holds[i].kind)) =>
            {
                Some((*worker, *t))
            }
            Event::AcquireFailed {
                t,
                worker,
                name,
                kind,
                ..
            } if kind == "timed_out"
                && kind_of_name
                    .get(name.as_str())
                    .is_none_or(|k| main_client(*k)) =>
            {
                Some((*worker, *t))
            }
            _ => None,
        };
        if let Some((worker, t)) = answer {
            answers.entry(worker).or_default().push(t);
        }
    }
    for times in answers.values_mut() {
        times.sort_unstable();
    }
    // Until when a fault that delayed `worker`'s commands kept doing so: its first answer
    // at or after the heal, at most [`STUCK_AFTER_HEAL`] later.
    let stuck = STUCK_AFTER_HEAL.as_nanos() as u64;
    let effect_end = |w: &Window, worker: u32| -> u64 {
        let cap = w.heal + stuck;
        answers
            .get(&worker)
            .and_then(|times| {
                let i = times.partition_point(|&t| t < w.heal);
                times.get(i).copied()
            })
            .map_or(cap, |t| t.min(cap))
    };
    // Whether a fault could have delayed or dropped a worker's commands between two times
    // (its connections blackholed or slowed, connections reset or killed, scripts
    // flushed, a server restarted, failed over or stopped), until its connection answered
    // again: a fair waiter's start then no longer dates its place in the queue, and a
    // release's answer may come after the lease ran out.
    let net_faulted = |h: &Hold, from: u64, to: u64| -> Option<&'static str> {
        let worker = h.worker;
        let repaired = repairs
            .iter()
            .any(|r| r.covers(h.kind, &h.name) && intersects(from, to, r.since, r.end + stuck));
        (repaired
            || windows.iter().any(|w| {
                w.delays_commands_of(worker) && intersects(from, to, w.start, effect_end(w, worker))
            }))
        .then_some("net_fault")
    };

    let mut violations = Vec::new();
    let mut all_latencies = Vec::new();
    let mut by_name: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for h in &holds {
        by_name.entry(h.name.as_str()).or_default().push(h);
    }
    let mut overlapped: BTreeSet<&str> = BTreeSet::new();
    for (name, list) in &mut by_name {
        list.sort_by_key(|h| h.start);
        // Overlaps: a hold that began while another owner's was still believed.
        for (j, b) in list.iter().enumerate() {
            for a in &list[..j] {
                if excludes(a, b) && a.end > b.start {
                    let row = row_at(b.start);
                    rows[row].overlaps += 1;
                    let ms = ms_between(b.start, a.end.min(b.end));
                    rows[row].overlap_max_ms = rows[row].overlap_max_ms.max(ms);
                    overlapped.insert(a.id.as_str());
                    overlapped.insert(b.id.as_str());
                    push_anomaly(&mut rows, &mut violations, row, &[a, b], None, Violation {
                        kind: "overlap".into(),
                        backend: backend.into(),
                        fault: fault_at(b.start),
                        name: (*name).into(),
                        at_ms: at_ms(b.start),
                        holds: Vec::new(),
                        excused: None,
                        detail: format!(
                            "{} (hold {}, token {}, worker {}) still held for {ms:.0} ms when {} (hold {}, token {}, worker {}) acquired; first lost() {}",
                            a.owner,
                            a.id,
                            a.token,
                            a.worker,
                            b.owner,
                            b.id,
                            b.token,
                            b.worker,
                            a.lost.map_or("never".to_owned(), |l| format!("{:.0} ms after", ms_between(b.start, l)))
                        ),
                    });
                }
            }
        }
        // Token order: above every hold of another owner that had ended before.
        for b in list.iter() {
            let prior = list
                .iter()
                .filter(|a| a.owner != b.owner && a.end <= b.start)
                .max_by_key(|a| a.token);
            if let Some(a) = prior {
                if b.token <= a.token {
                    let row = row_at(b.start);
                    rows[row].token_regressions += 1;
                    let excuse = counter_lost_between(b.kind, name, granted_from(a), b.start)
                        .then_some("data_loss");
                    push_anomaly(&mut rows, &mut violations, row, &[a, b], excuse, Violation {
                        kind: "token_regression".into(),
                        backend: backend.into(),
                        fault: fault_at(b.start),
                        name: (*name).into(),
                        at_ms: at_ms(b.start),
                        holds: Vec::new(),
                        excused: None,
                        detail: format!(
                            "{} (hold {}) got token {} after {} (hold {}) had held it with token {}",
                            b.owner, b.id, b.token, a.owner, a.id, a.token
                        ),
                    });
                }
            }
        }
        // When the lock disappeared under each hold, and whether lost() said so in time.
        for (j, h) in list.iter().enumerate() {
            let key = hold_key(h.kind, name);
            let key_gone = gone.get(key.as_str());
            // A use of a hot lock holds what the client took from the store at its first
            // use under this owner field: a loss since then is this use's loss too.
            let from = if h.kind == LockKind::Hot {
                keep_start.get(&h.owner).copied().unwrap_or(h.start)
            } else {
                h.start
            };
            let horizon = h.lost.or(h.release_start).unwrap_or(h.end);
            // The first sign, up to `until`, that the lock was gone: (the server's report,
            // another owner's acquisition, a fault that destroyed the data).
            let signs = |until: u64| {
                let successor = list[j + 1..]
                    .iter()
                    .filter(|b| displaces(h, b) && b.start > h.start && b.start <= until)
                    .map(|b| b.start)
                    .min();
                let truth_until = successor.unwrap_or(until).min(until);
                // Redlock holds the lock while a majority of masters has the key: it is
                // gone when the key went on a majority (each master reports its own copy).
                let server = key_gone.and_then(|times| {
                    let mut servers: BTreeSet<&str> = BTreeSet::new();
                    times
                        .iter()
                        .filter(|(t, _)| *t >= from + guard && *t <= truth_until)
                        .find(|(_, server)| {
                            servers.insert(server);
                            servers.len() >= quorum
                        })
                        .map(|(t, _)| *t)
                });
                let destroyed = windows
                    .iter()
                    .filter(|w| {
                        loss_span(backend, w).is_some() && w.start >= from && w.start <= until
                    })
                    .map(|w| w.start)
                    .min();
                (server, successor, destroyed)
            };
            // Permits: another holder's grant that the total leaves no room for beside this
            // hold's permits proves them gone.
            let overflow = |until: u64| {
                if h.kind != LockKind::Permit {
                    return None;
                }
                let others_at = |t: u64| -> u32 {
                    list.iter()
                        .filter(|c| c.kind == LockKind::Permit && c.id != h.id)
                        .filter(|c| c.start <= t && c.end > t)
                        .map(|c| c.permits.max(1))
                        .sum()
                };
                list.iter()
                    .filter(|b| b.kind == LockKind::Permit && b.id != h.id)
                    .filter(|b| b.start > h.start && b.start <= until)
                    .filter(|b| others_at(b.start) + h.permits.max(1) > b.total.max(1))
                    .map(|b| b.start)
                    .min()
            };
            let (server, successor, destroyed) = signs(horizon);
            let loss = [server, successor, destroyed, h.surrendered]
                .into_iter()
                .flatten()
                .min();
            let source = if loss.is_some() && loss == server {
                "the server reported the key gone"
            } else if loss.is_some() && loss == successor {
                "another owner acquired"
            } else if loss.is_some() && loss == h.surrendered {
                "the shutdown took the lock at its deadline"
            } else {
                "a fault destroyed the lock's data"
            };
            if let Some(lost) = h.lost {
                rows[row_at(lost)].lost_fired += 1;
                match loss {
                    Some(x) => {
                        let ms = ms_between(x, lost);
                        rows[row_at(lost)].loss_latency_ms.push(ms);
                        all_latencies.push(ms);
                    }
                    None => rows[row_at(lost)].lost_without_observed_loss += 1,
                }
            }
            let Some(x) = loss else {
                if h.lost.is_none()
                    && matches!(h.release.as_deref(), Some("lease_lost" | "not_held"))
                {
                    let t = h.release_start.unwrap_or(h.end);
                    // Gone while the release was on its way (after it started, before it
                    // answered: a partition or a stuck connection held it past the lease's
                    // end): not a loss the release saw first.
                    if let Some(answered) = h.release_end {
                        let (server, successor, destroyed) = signs(answered);
                        if [server, successor, destroyed, overflow(answered)]
                            .iter()
                            .any(Option::is_some)
                        {
                            continue;
                        }
                    }
                    // Readers and permits leave no sign of their own going (the key goes
                    // with the last holder): a release delayed by a fault of its worker may
                    // have arrived after the lease ran out.
                    let excuse = if matches!(h.kind, LockKind::Read | LockKind::Permit) {
                        net_faulted(h, t, h.release_end.unwrap_or(t))
                    } else {
                        None
                    };
                    let row = row_at(t);
                    rows[row].release_first_losses += 1;
                    push_anomaly(&mut rows, &mut violations, row, &[h], excuse, Violation {
                        kind: "loss_first_seen_at_release".into(),
                        backend: backend.into(),
                        fault: fault_at(t),
                        name: (*name).into(),
                        at_ms: at_ms(t),
                        holds: Vec::new(),
                        excused: None,
                        detail: format!(
                            "{} (hold {}, token {}, {:?}) released with {} and no lost() before, no loss observed",
                            h.owner, h.id, h.token, h.mode, h.release.as_deref().unwrap_or("?")
                        ),
                    });
                }
                continue;
            };
            let deadline = x + bound;
            let (kind, t) = match h.lost {
                Some(lost) if lost > deadline => ("late_lost", lost),
                Some(_) => continue,
                None if matches!(h.release.as_deref(), Some("lease_lost" | "not_held")) => {
                    let t = h.release_start.unwrap_or(h.end);
                    if t <= deadline {
                        continue;
                    }
                    ("loss_first_seen_at_release", t)
                }
                None if h.end > deadline => ("late_lost", h.end),
                None => continue,
            };
            // A use of a kept lock that began after the watchdog should have found the
            // loss: the client used a lock it had lost.
            let kind = if h.kind == LockKind::Hot && h.start > deadline {
                "hot_use_after_loss"
            } else {
                kind
            };
            let row = row_at(t);
            if kind == "late_lost" {
                rows[row].late_lost += 1;
            } else {
                rows[row].release_first_losses += 1;
            }
            let excuse = harness_stalled(x, t).then_some("harness_stall");
            push_anomaly(&mut rows, &mut violations, row, &[h], excuse, Violation {
                kind: kind.into(),
                backend: backend.into(),
                fault: fault_at(t),
                name: (*name).into(),
                at_ms: at_ms(t),
                holds: Vec::new(),
                excused: None,
                detail: format!(
                    "{} (hold {}, token {}, {:?}): {source} at {:.0} ms; {} {:.0} ms later (bound {bound_ms:.0} ms){}",
                    h.owner,
                    h.id,
                    h.token,
                    h.mode,
                    at_ms(x),
                    match (h.lost, h.release.as_deref()) {
                        (Some(_), _) => "lost() fired".to_owned(),
                        (None, Some(r)) => format!("the hold went on until its release ({r})"),
                        (None, None) => "the hold went on until the worker's end".to_owned(),
                    },
                    ms_between(x, t),
                    if kind == "loss_first_seen_at_release" { ", no lost() before the release" } else { "" },
                ),
            });
        }
    }

    // What a fault did to a worker between two times (for rules about the time before a
    // hold: a fair waiter's wait, a waiter after a shutdown).
    let touched_during = |worker: u32, from: u64, to: u64| -> Option<&'static str> {
        for w in &windows {
            if w.kind() == Some(Fault::PauseHolder)
                && w.worker() == Some(worker)
                && intersects(from, to, w.start, w.heal)
            {
                return Some("pause");
            }
            // The same data-loss spans as for holds, whichever schedule named the fault.
            if let Some((lost_from, lost_to)) = loss_span(backend, w) {
                if intersects(from, to, lost_from, lost_to) {
                    return Some("data_loss");
                }
            }
        }
        stalls
            .iter()
            .any(|&(w, s0, s1)| w == Some(worker) && intersects(from, to, s0, s1))
            .then_some("stall")
    };
    let margin = FIFO_MARGIN.as_nanos() as u64;
    for (name, list) in &by_name {
        // Semaphore: at no instant more permits held than the total (a sweep over the
        // holds' starts and ends; an end at the same instant as a start goes first).
        let permits: Vec<&Hold> = list
            .iter()
            .copied()
            .filter(|h| h.kind == LockKind::Permit)
            .collect();
        let mut points: Vec<(u64, bool, usize)> = Vec::new();
        for (i, h) in permits.iter().enumerate() {
            points.push((h.start, true, i));
            points.push((h.end, false, i));
        }
        points.sort_by_key(|&(t, is_start, _)| (t, is_start));
        let mut active: BTreeSet<usize> = BTreeSet::new();
        for (t, is_start, i) in points {
            if !is_start {
                active.remove(&i);
                continue;
            }
            active.insert(i);
            let held: u32 = active.iter().map(|&k| permits[k].permits.max(1)).sum();
            let total = permits[i].total.max(1);
            if held > total {
                let involved: Vec<&Hold> = active.iter().map(|&k| permits[k]).collect();
                let row = row_at(t);
                rows[row].permits_exceeded += 1;
                push_anomaly(&mut rows, &mut violations, row, &involved, None, Violation {
                    kind: "permits_exceeded".into(),
                    backend: backend.into(),
                    fault: fault_at(t),
                    name: (*name).into(),
                    at_ms: at_ms(t),
                    holds: Vec::new(),
                    excused: None,
                    detail: format!(
                        "{held} permits held at once (total {total}) when {} (hold {}, token {}) acquired; holders: {}",
                        permits[i].owner,
                        permits[i].id,
                        permits[i].token,
                        involved.iter().map(|h| format!("{} token {}", h.id, h.token)).collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }

        // Fair lock: among waiters, the grant order is the order they asked in. `a`
        // asked more than FIFO_MARGIN before `b`, yet `b`'s acquisition returned more
        // than FIFO_MARGIN before `a`'s: `b` was granted first although both waited
        // (`a` was still waiting when `b` asked, since `b` asked before it was granted).
        // Only acquisitions that got the lock count: a waiter that gave up left the queue.
        let fair: Vec<&Hold> = list
            .iter()
            .copied()
            .filter(|h| h.kind == LockKind::Fair)
            .collect();
        for a in &fair {
            for b in &fair {
                if a.owner == b.owner || a.asked + margin >= b.asked || b.start + margin >= a.start
                {
                    continue;
                }
                let t = b.start;
                let row = row_at(t);
                rows[row].fifo_inversions += 1;
                let excuse = touched_during(a.worker, a.asked, a.start)
                    .or_else(|| touched_during(b.worker, b.asked, b.start))
                    .or_else(|| net_faulted(a, a.asked, a.start));
                push_anomaly(&mut rows, &mut violations, row, &[a, b], excuse, Violation {
                    kind: "fifo_inversion".into(),
                    backend: backend.into(),
                    fault: fault_at(t),
                    name: (*name).into(),
                    at_ms: at_ms(t),
                    holds: Vec::new(),
                    excused: None,
                    detail: format!(
                        "{} (hold {}) asked at {:.0} ms and got it at {:.0} ms; {} (hold {}) asked {:.0} ms later and got it {:.0} ms earlier",
                        a.owner,
                        a.id,
                        at_ms(a.asked),
                        at_ms(a.start),
                        b.owner,
                        b.id,
                        ms_between(a.asked, b.asked),
                        ms_between(b.start, a.start)
                    ),
                });
            }
        }

        // hold_at_least: the lock is not free before its minimum hold from the grant (at
        // the earliest, the start of the acquire call), unless the holder lost it. The
        // next acquisition by another owner after the release shows when it was free.
        let allowance = MIN_HOLD_ALLOWANCE.as_nanos() as u64;
        for h in list.iter().filter(|h| h.kind == LockKind::AtLeast) {
            if h.lost.is_some() || h.release.as_deref() != Some("ok") {
                continue;
            }
            let Some(next) = list
                .iter()
                .filter(|b| b.owner != h.owner && b.start >= h.end)
                .min_by_key(|b| b.start)
            else {
                continue;
            };
            if next.start + allowance >= h.asked + h.min_hold {
                continue;
            }
            let t = next.start;
            let row = row_at(t);
            rows[row].freed_early += 1;
            // After the release the lock stays in the store until the minimum hold ends:
            // data lost in that tail (an empty restart, a forward clock jump) frees it.
            let tail_lost = windows.iter().any(|w| {
                loss_span(backend, w)
                    .is_some_and(|(from, to)| intersects(h.start, h.asked + h.min_hold, from, to))
            });
            let excuse = tail_lost.then_some("data_loss");
            push_anomaly(&mut rows, &mut violations, row, &[h, next], excuse, Violation {
                kind: "freed_before_min_hold".into(),
                backend: backend.into(),
                fault: fault_at(t),
                name: (*name).into(),
                at_ms: at_ms(t),
                holds: Vec::new(),
                excused: None,
                detail: format!(
                    "{} (hold {}, token {}) asked at {:.0} ms with a minimum hold of {:.0} ms and released; {} (hold {}) acquired {:.0} ms after the ask",
                    h.owner,
                    h.id,
                    h.token,
                    at_ms(h.asked),
                    h.min_hold as f64 / 1e6,
                    next.owner,
                    next.id,
                    ms_between(h.asked, next.start)
                ),
            });
        }
    }

    // Shutdown: the locks a shut-down client held are released, so a waiter gets them.
    let shutdown_bound = SHUTDOWN_RECOVERY_BOUND.as_nanos() as u64;
    for event in events {
        let Event::ShutdownDone {
            t_start: sd_start,
            t: sd_end,
            hold: Some(hold),
            released_at_deadline,
            failed,
            ..
        } = event
        else {
            continue;
        };
        let Some(h) = index.get(hold).map(|&i| &holds[i]) else {
            continue;
        };
        if *released_at_deadline == 0 || *failed > 0 {
            continue;
        }
        let Some(next) = holds
            .iter()
            .filter(|b| b.name == h.name && b.owner != h.owner && b.start > h.start)
            .min_by_key(|b| b.start)
        else {
            continue;
        };
        // Only a waiter that was asking when the shutdown returned measures the release.
        if next.asked > *sd_end {
            continue;
        }
        let ms = ms_between(*sd_end, next.start).max(0.0);
        let row = row_at(*sd_start);
        rows[row].shutdown_recovery_max_ms = Some(
            rows[row]
                .shutdown_recovery_max_ms
                .map_or(ms, |m: f64| m.max(ms)),
        );
        let faulted = windows
            .iter()
            .any(|w| intersects(*sd_start, next.start, w.start, w.heal));
        if next.start > sd_end + shutdown_bound && !faulted {
            let excuse = touched_during(next.worker, next.asked, next.start)
                .or_else(|| touched_during(h.worker, h.start, *sd_end));
            push_anomaly(&mut rows, &mut violations, row, &[h, next], excuse, Violation {
                kind: "shutdown_release_slow".into(),
                backend: backend.into(),
                fault: fault_at(*sd_start),
                name: h.name.clone(),
                at_ms: at_ms(*sd_end),
                holds: Vec::new(),
                excused: None,
                detail: format!(
                    "the shutdown of {}'s client took its lock at the deadline and returned; {} (hold {}), waiting since {:.0} ms before, got it {ms:.0} ms later (bound {:.0} ms)",
                    h.id,
                    next.id,
                    next.owner,
                    ms_between(next.asked, *sd_end),
                    shutdown_bound as f64 / 1e6
                ),
            });
        }
    }

    // Both layouts in one store: the registry lists both.
    let mut layouts = LayoutCheck::default();
    for event in events {
        if let Event::Layouts {
            t,
            worker,
            layouts: listed,
            error,
        } = event
        {
            layouts.checks += 1;
            if error.is_some() {
                layouts.failed += 1;
                continue;
            }
            let both = ["Native", "Redisson"]
                .iter()
                .all(|l| listed.iter().any(|x| x == l));
            if both {
                layouts.both += 1;
            } else {
                let row = row_at(*t);
                push_anomaly(&mut rows, &mut violations, row, &[], None, Violation {
                    kind: "layouts_missing".into(),
                    backend: backend.into(),
                    fault: fault_at(*t),
                    name: "*".into(),
                    at_ms: at_ms(*t),
                    holds: Vec::new(),
                    excused: None,
                    detail: format!(
                        "worker {worker} runs a native and a Redisson-layout client; admin().layouts() listed {listed:?}"
                    ),
                });
            }
        }
    }

    // Holds and anomalies per kind.
    let mut kinds: BTreeMap<String, KindFigures> = BTreeMap::new();
    for h in &holds {
        kinds.entry(h.kind.name().to_owned()).or_default().holds += 1;
    }
    for v in violations.iter().filter(|v| v.kind != "lost_update") {
        let Some(h) = v.holds.first().and_then(|id| index.get(id)) else {
            continue;
        };
        let k = kinds.entry(holds[*h].kind.name().to_owned()).or_default();
        if v.excused.is_some() {
            k.excused += 1;
        } else {
            k.violations += 1;
        }
    }

    // Recovery after a holder's kill: to the next acquisition of each lock it held.
    for w in windows
        .iter()
        .filter(|w| w.kind() == Some(Fault::KillHolder))
    {
        let Some(killed) = w.worker() else { continue };
        for h in holds
            .iter()
            .filter(|h| h.worker == killed && h.start <= w.start && h.end >= w.start)
        {
            let next = holds
                .iter()
                .filter(|b| b.name == h.name && b.worker != killed && b.start > w.start)
                .map(|b| b.start)
                .min();
            if let Some(next) = next {
                let row = &mut rows[row_of_fault[&w.fault]];
                let ms = ms_between(w.start, next);
                row.kill_recovery_max_ms =
                    Some(row.kill_recovery_max_ms.map_or(ms, |m: f64| m.max(ms)));
            }
        }
    }

    // Registers: the workers' view.
    let clean = |hold: &str| {
        index.get(hold).is_some_and(|&i| {
            let h = &holds[i];
            h.lost.is_none() && matches!(h.release.as_deref(), Some("ok" | "macro" | "layer"))
        }) && !overlapped.contains(hold)
    };
    let mut intents: HashMap<(&str, Register), u64> = HashMap::new();
    // What the worker saw of each accepted write: when, the value read, the value replaced.
    type Answer = (u64, Option<i64>, Option<i64>);
    let mut answered: HashMap<(&str, Register), Answer> = HashMap::new();
    let mut fenced_accepted_at: Vec<u64> = Vec::new();
    // The fenced register's claims, per name: (when the read's answer came, token, hold).
    let mut claims: HashMap<&str, Vec<(u64, u64, &str)>> = HashMap::new();
    for event in events {
        match event {
            Event::Claim {
                t,
                hold,
                name,
                token,
                ..
            } => {
                claims
                    .entry(name.as_str())
                    .or_default()
                    .push((*t, *token, hold.as_str()));
            }
            Event::WriteIntent {
                t, hold, register, ..
            } => {
                intents.insert((hold.as_str(), *register), *t);
            }
            Event::Write {
                t,
                worker,
                hold,
                name,
                token,
                register,
                outcome,
                read,
                prev,
                ..
            } => {
                let row = row_at(*t);
                match (register, outcome) {
                    (_, WriteOutcome::Error) => rows[row].errors += 1,
                    (_, WriteOutcome::Accepted) => {
                        answered.insert((hold.as_str(), *register), (*t, *read, *prev));
                        if truth.is_some() {
                            continue;
                        }
                        // Without the store's logs: count what the workers saw.
                        let writer: Vec<&Hold> =
                            index.get(hold).map(|&i| &holds[i]).into_iter().collect();
                        if *register == Register::Unfenced {
                            rows[row].unfenced_writes += 1;
                        } else {
                            rows[row].fenced_accepted += 1;
                            fenced_accepted_at.push(*t);
                        }
                        if read != prev {
                            let (kind, what) = if *register == Register::Unfenced {
                                rows[row].unfenced_lost_updates += 1;
                                ("lost_update", "unfenced")
                            } else {
                                rows[row].stale_writes_accepted += 1;
                                ("stale_write_accepted", "fenced")
                            };
                            push_anomaly(&mut rows, &mut violations, row, &writer, None, Violation {
                                kind: kind.into(),
                                backend: backend.into(),
                                fault: fault_at(*t),
                                name: name.clone(),
                                at_ms: at_ms(*t),
                                holds: Vec::new(),
                                excused: None,
                                detail: format!(
                                    "{what}: worker {worker} (hold {hold}, token {token}) read {read:?} but overwrote {prev:?}"
                                ),
                            });
                        }
                    }
                    (Register::Fenced, _) => {
                        rows[row].fenced_rejected += 1;
                        if clean(hold) {
                            rows[row].valid_holder_rejected += 1;
                        }
                    }
                    (Register::Unfenced, _) => {}
                }
            }
            _ => {}
        }
    }

    // Registers: the store's log, the whole truth of what it applied.
    let mut register = RegisterCheck::default();
    if let Some(truth) = truth {
        register.read = true;
        let mut logged: BTreeSet<(&str, Register)> = BTreeSet::new();
        for r in truth {
            register.registers += 1;
            let what = match r.register {
                Register::Unfenced => "unfenced",
                Register::Fenced => "fenced",
            };
            let mut expect = 0i64;
            let mut previous: Option<&LoggedWrite> = None;
            // The logged write with the highest token so far.
            let mut highest: Option<&LoggedWrite> = None;
            let mut consistent = true;
            for entry in &r.log {
                let Some(e) = entry else {
                    consistent = false;
                    continue;
                };
                register.applied += 1;
                logged.insert((e.hold.as_str(), r.register));
                // A log without `prev` (the fenced register in Redis) logs each write in the
                // same atomic step as the write: the previous entry's value is what it replaced.
                let logged_prev = e.prev.unwrap_or(expect);
                if logged_prev != expect || e.new != e.read + 1 {
                    consistent = false;
                }
                expect = e.new;
                let key = (e.hold.as_str(), r.register);
                let intent = intents.get(&key).copied();
                let reply = answered.get(&key).copied();
                let t = reply.map(|r| r.0).or(intent).unwrap_or(run_end);
                let row = row_at(t);
                let writer: Vec<&Hold> =
                    index.get(&e.hold).map(|&i| &holds[i]).into_iter().collect();
                if intent.is_none() {
                    register.without_intent += 1;
                    push_anomaly(
                        &mut rows,
                        &mut violations,
                        row,
                        &[],
                        None,
                        Violation {
                            kind: "write_without_intent".into(),
                            backend: backend.into(),
                            fault: fault_at(t),
                            name: r.name.clone(),
                            at_ms: at_ms(t),
                            holds: Vec::new(),
                            excused: None,
                            detail: format!(
                                "{what}: the store applied {e:?}, which no worker meant to send"
                            ),
                        },
                    );
                }
                match reply {
                    None if intent.is_some() => register.applied_unrecorded += 1,
                    Some((_, read, prev)) if read != Some(e.read) || prev != Some(logged_prev) => {
                        push_anomaly(&mut rows, &mut violations, row, &[], None, Violation {
                            kind: "write_not_logged".into(),
                            backend: backend.into(),
                            fault: fault_at(t),
                            name: r.name.clone(),
                            at_ms: at_ms(t),
                            holds: Vec::new(),
                            excused: None,
                            detail: format!("{what}: the worker saw read {read:?} prev {prev:?}, the log has {e:?}"),
                        });
                    }
                    _ => {}
                }
                match r.register {
                    Register::Unfenced => rows[row].unfenced_writes += 1,
                    Register::Fenced => {
                        rows[row].fenced_accepted += 1;
                        fenced_accepted_at.push(t);
                    }
                }
                // A stale write accepted: one that overwrote a value other than the one its
                // holder read (a lost update), and, on the fenced register, one whose token is
                // lower than a token that had written (in the store's order) or read (the
                // read's answer came before this write was sent) the register before it.
                let overwrote = (e.read != logged_prev).then(|| {
                    format!(
                        "read {} but overwrote {logged_prev} (written by {})",
                        e.read,
                        previous.map_or("nobody", |p| p.hold.as_str())
                    )
                });
                let after_higher_write = highest.filter(|h| h.token > e.token).map(|h| {
                    format!(
                        "was applied after hold {} (token {}) had written the register",
                        h.hold, h.token
                    )
                });
                let after_higher_read = intent.and_then(|sent| {
                    claims
                        .get(r.name.as_str())
                        .into_iter()
                        .flatten()
                        .find(|(read_at, token, _)| *token > e.token && *read_at < sent)
                        .map(|(_, token, hold)| {
                            format!(
                                "was sent after hold {hold} (token {token}) had read the register"
                            )
                        })
                });
                let stale = match r.register {
                    Register::Unfenced => overwrote,
                    Register::Fenced => overwrote.or(after_higher_write).or(after_higher_read),
                };
                if let Some(why) = stale {
                    let kind = match r.register {
                        Register::Unfenced => {
                            rows[row].unfenced_lost_updates += 1;
                            "lost_update"
                        }
                        Register::Fenced => {
                            rows[row].stale_writes_accepted += 1;
                            "stale_write_accepted"
                        }
                    };
                    let mut involved = writer.clone();
                    if let Some(p) = previous.and_then(|p| index.get(&p.hold)) {
                        involved.push(&holds[*p]);
                    }
                    push_anomaly(
                        &mut rows,
                        &mut violations,
                        row,
                        &involved,
                        None,
                        Violation {
                            kind: kind.into(),
                            backend: backend.into(),
                            fault: fault_at(t),
                            name: r.name.clone(),
                            at_ms: at_ms(t),
                            holds: Vec::new(),
                            excused: None,
                            detail: format!(
                                "{what}: hold {} (token {}) {why}{}",
                                e.hold,
                                e.token,
                                if reply.is_none() {
                                    "; its answer never reached the worker"
                                } else {
                                    ""
                                }
                            ),
                        },
                    );
                }
                if highest.is_none_or(|h| e.token > h.token) {
                    highest = Some(e);
                }
                previous = Some(e);
            }
            if r.value != expect {
                consistent = false;
            }
            if !consistent {
                register.inconsistent += 1;
                push_anomaly(&mut rows, &mut violations, 0, &[], None, Violation {
                    kind: "register_final".into(),
                    backend: backend.into(),
                    fault: "none".into(),
                    name: r.name.clone(),
                    at_ms: at_ms(run_end),
                    holds: Vec::new(),
                    excused: None,
                    detail: format!(
                        "{what}: final value {} but the log ({} entries) ends at {expect}, or its chain is broken or unreadable",
                        r.value,
                        r.log.len()
                    ),
                });
            }
        }
        for ((hold, reg), (t, _, _)) in &answered {
            if !logged.contains(&(*hold, *reg)) {
                let row = row_at(*t);
                push_anomaly(
                    &mut rows,
                    &mut violations,
                    row,
                    &[],
                    None,
                    Violation {
                        kind: "write_not_logged".into(),
                        backend: backend.into(),
                        fault: fault_at(*t),
                        name: index
                            .get(*hold)
                            .map_or_else(String::new, |&i| holds[i].name.clone()),
                        at_ms: at_ms(*t),
                        holds: vec![(*hold).to_owned()],
                        excused: None,
                        detail: format!(
                            "{reg:?}: a write the worker saw accepted is not in the store's log"
                        ),
                    },
                );
            }
        }
    }

    // Other faults: from the heal to the first fenced write accepted after it.
    fenced_accepted_at.sort_unstable();
    for w in windows
        .iter()
        .filter(|w| w.kind() != Some(Fault::KillHolder))
    {
        if let Some(&t) = fenced_accepted_at.iter().find(|&&t| t >= w.heal) {
            let row = &mut rows[row_of_fault[&w.fault]];
            let ms = ms_between(w.heal, t).max(0.0);
            row.heal_to_write_max_ms =
                Some(row.heal_to_write_max_ms.map_or(ms, |m: f64| m.max(ms)));
        }
    }
    decide_effects(&mut rows, &row_of_fault, &windows, &holds, events, lease);
    for row in &mut rows {
        row.finish();
        row.fill_bounds();
    }
    let mut stall_figures = Stalls::default();
    for &(w, s0, s1) in &stalls {
        let ms = ms_between(s0, s1);
        if w.is_some() {
            stall_figures.workers += 1;
            stall_figures.workers_max_ms = stall_figures.workers_max_ms.max(ms);
        } else {
            stall_figures.harness += 1;
            stall_figures.harness_max_ms = stall_figures.harness_max_ms.max(ms);
        }
    }
    BackendReport {
        backend: backend.to_owned(),
        duration_s: ms_between(run_start, run_end) / 1000.0,
        lease_ms: lease.as_secs_f64() * 1000.0,
        rows,
        violations,
        register,
        stalls: stall_figures,
        key_events,
        all_latencies,
        kinds,
        layouts,
        harness,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const LEASE: Duration = Duration::from_millis(1500);
    const NAME: &str = "chaos-0";

    fn task_of(hold: &str) -> u32 {
        hold.split('-')
            .nth(1)
            .and_then(|t| t[1..].parse().ok())
            .unwrap_or(0)
    }

    /// A hold `id` (`w{worker}-t{task}-{seq}`) of `NAME` acquired at `t` ms.
    fn acq(t: u64, worker: u32, id: &str, token: u64) -> Event {
        Event::Acquired {
            t_start: t * MS,
            t: t * MS,
            worker,
            task: task_of(id),
            hold: id.into(),
            mode: TaskMode::GuardAbort,
            name: NAME.into(),
            owner: format!("owner-{worker}-{}", task_of(id)),
            token,
            kind: LockKind::Plain,
            permits: 0,
            total: 0,
            min_hold_ms: 0,
        }
    }

    fn rel(t: u64, worker: u32, id: &str, token: u64, result: &str) -> Event {
        Event::Released {
            t_start: t * MS,
            t: t * MS + MS,
            worker,
            task: task_of(id),
            hold: id.into(),
            name: NAME.into(),
            owner: format!("owner-{worker}-{}", task_of(id)),
            token,
            result: result.into(),
        }
    }

    fn lost(t: u64, worker: u32, id: &str, token: u64) -> Event {
        Event::Lost {
            t: t * MS,
            worker,
            task: task_of(id),
            hold: id.into(),
            name: NAME.into(),
            owner: format!("owner-{worker}-{}", task_of(id)),
            token,
        }
    }

    fn fault(t: u64, fault: &str, phase: &str, target: &str) -> Event {
        Event::Fault {
            t: t * MS,
            backend: "test".into(),
            fault: fault.into(),
            phase: phase.into(),
            target: target.into(),
            id: None,
            effective: None,
            lock: None,
            owner: None,
            token: None,
        }
    }

    /// A fault event with an id and a trigger outcome.
    fn fault_id(
        t: u64,
        name: &str,
        phase: &str,
        target: &str,
        id: u64,
        effective: Option<bool>,
    ) -> Event {
        Event::Fault {
            t: t * MS,
            backend: "test".into(),
            fault: name.into(),
            phase: phase.into(),
            target: target.into(),
            id: Some(id),
            effective,
            lock: effective.map(|_| NAME.to_owned()),
            owner: None,
            token: None,
        }
    }

    fn failed(t_start: u64, t: u64, worker: u32, task: u32) -> Event {
        Event::AcquireFailed {
            t_start: t_start * MS,
            t: t * MS,
            worker,
            task,
            name: NAME.into(),
            kind: "timed_out".into(),
            error: "busy".into(),
        }
    }

    #[test]
    fn upper_bounds_are_clopper_pearson_one_sided_95() {
        assert_eq!(upper_bound_95(0, 0), None);
        assert_eq!(upper_bound_95(3, 3), Some(1.0));
        // k = 0: 1 - 0.05^(1/n), about 3/n ("rule of three").
        let p = upper_bound_95(0, 50).unwrap();
        assert!((p - (1.0 - 0.05f64.powf(1.0 / 50.0))).abs() < 1e-12);
        assert!((p - 3.0 / 50.0).abs() < 0.003, "{p}");
        // Known values: 1 in 10 -> 0.3942; 5 in 100 -> 0.1023.
        assert!((upper_bound_95(1, 10).unwrap() - 0.3942).abs() < 5e-4);
        assert!((upper_bound_95(5, 100).unwrap() - 0.1023).abs() < 5e-4);
        // At the bound, k or fewer has probability 0.05.
        let p = upper_bound_95(7, 40).unwrap();
        assert!((binomial_cdf(7, 40, p) - 0.05).abs() < 1e-9);
        // More anomalies, higher bound; more trials, lower bound.
        assert!(upper_bound_95(2, 50).unwrap() > upper_bound_95(1, 50).unwrap());
        assert!(upper_bound_95(1, 100).unwrap() < upper_bound_95(1, 50).unwrap());
    }

    #[test]
    fn effective_injections_are_decided_from_the_history_and_bounded() {
        // Lease 1500 ms: a hold counts after 500 ms.
        let events = [
            // 1: worker 1 holds since 1000, worker 2 waits 1200..1900: a pause of worker 1 at
            // 1600 is effective (and the trigger said so).
            acq(1000, 1, "w1-t0-0", 1),
            failed(1200, 1900, 2, 0),
            fault_id(
                1600,
                "pause_holder",
                "start",
                "worker 1 pid 5",
                1,
                Some(true),
            ),
            fault_id(1700, "pause_holder", "heal", "worker 1 pid 5", 1, None),
            rel(2000, 1, "w1-t0-0", 1, "ok"),
            // 2: worker 1 holds since 3000 but nobody waits: not effective.
            acq(3000, 1, "w1-t0-1", 2),
            fault_id(
                3800,
                "pause_holder",
                "start",
                "worker 1 pid 5",
                2,
                Some(false),
            ),
            fault_id(3900, "pause_holder", "heal", "worker 1 pid 5", 2, None),
            rel(4000, 1, "w1-t0-1", 2, "ok"),
            // 3: held long with a waiter, but by worker 0, not the targeted worker 1.
            acq(5000, 0, "w0-t1-0", 3),
            failed(5100, 6500, 2, 1),
            fault_id(
                5800,
                "pause_holder",
                "start",
                "worker 1 pid 5",
                3,
                Some(false),
            ),
            fault_id(5900, "pause_holder", "heal", "worker 1 pid 5", 3, None),
            rel(6000, 0, "w0-t1-0", 3, "ok"),
            // 4: a server-wide fault (no target worker) on a long hold with a waiter, and
            // overlapping another fault: the heals pair by id, not by order.
            acq(7000, 0, "w0-t1-1", 4),
            failed(7100, 8500, 2, 2),
            fault_id(7600, "client_kill", "start", "every data server", 4, None),
            fault_id(7650, "script_flush", "start", "every data server", 5, None),
            fault_id(7700, "client_kill", "heal", "every data server", 4, None),
            fault_id(7900, "script_flush", "heal", "every data server", 5, None),
            rel(8000, 0, "w0-t1-1", 4, "ok"),
        ];
        let report = check(&events, None);
        let row = |name: &str| report.rows.iter().find(|r| r.fault == name).unwrap();
        let pause = row("pause_holder");
        assert_eq!(pause.injections, 3);
        assert_eq!(pause.triggered, 1);
        assert_eq!(pause.effective, 1);
        let p = pause.upper95["violations"];
        assert!((p - 0.95).abs() < 1e-9, "one effective, none bad: {p}");
        assert_eq!(row("client_kill").effective, 1);
        assert_eq!(row("script_flush").effective, 1);
        assert_eq!(row("script_flush").triggered, 0);
        assert!(row("none").upper95.is_empty());
        assert_eq!(report.unexcused(), 0, "{:#?}", report.violations);
    }

    #[test]
    fn on_redlock_an_empty_restart_is_excused_only_for_a_lock_that_missed_a_master() {
        let run = |with_partition: bool| {
            let mut events = vec![acq(1000, 1, "w1-t0-0", 1)];
            if with_partition {
                events.push(fault_id(
                    900,
                    "partition_one_master",
                    "start",
                    "worker 1 pid 5 servers [3] Both",
                    9,
                    None,
                ));
                events.push(fault_id(
                    2500,
                    "partition_one_master",
                    "heal",
                    "worker 1 pid 5 servers [3] Both",
                    9,
                    None,
                ));
            }
            events.extend([
                fault_id(
                    1500,
                    "stop_minority",
                    "start",
                    "masters 0, 1 (killed)",
                    1,
                    None,
                ),
                fault_id(
                    2000,
                    "stop_minority",
                    "heal",
                    "masters 0, 1 (restarted empty)",
                    1,
                    None,
                ),
                acq(2100, 2, "w2-t0-0", 1),
                rel(2200, 2, "w2-t0-0", 1, "ok"),
                lost(2300, 1, "w1-t0-0", 1),
            ]);
            analyze("redlock", &events, None, LEASE, 0, 100_000 * MS)
        };
        let alone = run(false);
        assert!(
            counted(&alone).contains(&"overlap"),
            "{:#?}",
            alone.violations
        );
        let reduced = run(true);
        assert_eq!(reduced.unexcused(), 0, "{:#?}", reduced.violations);
        assert!(reduced.excused_by().contains_key("data_loss"));
    }

    #[test]
    fn an_old_masters_key_events_after_a_failover_are_not_the_locks_truth() {
        let events = |target: &str| {
            vec![
                fault_id(500, "manual_failover", "start", target, 1, None),
                fault_id(900, "manual_failover", "heal", "master 1 -> 2", 1, None),
                acq(3000, 1, "w1-t0-0", 1),
                // The old master (port 1 in `gone`) expires its stale copy.
                gone(3400),
                rel(5000, 1, "w1-t0-0", 1, "ok"),
            ]
        };
        let stale = check(&events("lock:{chaos-0} old master port 1"), None);
        assert_eq!(stale.unexcused(), 0, "{:#?}", stale.violations);
        // Another server's report (or one without the old master named) still counts.
        let real = check(&events("lock:{chaos-0} old master port 2"), None);
        assert_eq!(counted(&real), ["late_lost"], "{:#?}", real.violations);
    }

    #[test]
    fn a_hold_ends_where_its_release_started_even_if_the_release_never_returned() {
        let started = Event::ReleaseStarted {
            t: 1300 * MS,
            worker: 1,
            task: 0,
            hold: "w1-t0-0".into(),
        };
        let events = [
            acq(1000, 1, "w1-t0-0", 1),
            started,
            // The release hangs (a partition); the worker is killed later.
            fault(4000, "kill_holder", "start", "worker 1 pid 5"),
            fault(4001, "kill_holder", "heal", "worker 1 pid 5"),
            acq(2600, 2, "w2-t0-0", 2),
            rel(2800, 2, "w2-t0-0", 2, "ok"),
        ];
        let report = check(&events, None);
        assert_eq!(report.unexcused(), 0, "{:#?}", report.violations);
        assert_eq!(report.rows.iter().map(|r| r.overlaps).sum::<usize>(), 0);
    }

    #[test]
    fn a_forward_clock_jump_excuses_its_holds_a_backward_one_does_not() {
        for (name, excused) in [
            ("clock_jump_forward", true),
            ("clock_jump_back", false),
            // The names of older histories: the one emulated (forward) kind, and the
            // clock library's backward jump.
            ("clock_jump", true),
            ("clock_jump_backward", false),
            ("partition_both", false),
            ("bare_majority", true),
        ] {
            let events = [
                acq(1000, 1, "w1-t0-0", 1),
                fault_id(1200, name, "start", "server 0", 1, None),
                fault_id(1210, name, "heal", "server 0", 1, None),
                acq(1300, 2, "w2-t0-0", 2),
                rel(1500, 2, "w2-t0-0", 2, "ok"),
                rel(1600, 1, "w1-t0-0", 1, "ok"),
            ];
            let report = check(&events, None);
            if excused {
                assert_eq!(report.unexcused(), 0, "{name}: {:#?}", report.violations);
                assert_eq!(report.excused_by().get("data_loss"), Some(&1), "{name}");
            } else {
                assert_eq!(counted(&report), ["overlap"], "{name}");
            }
        }
    }

    fn repair(since: u64, t_start: u64, t: u64, slots: Vec<(u16, u16)>) -> Event {
        Event::Harness {
            t_start: t_start * MS,
            t: t * MS,
            backend: "cluster".into(),
            action: "repair_shard".into(),
            since: Some(since * MS),
            slots,
            detail: "CLUSTER FAILOVER TAKEOVER on node 3".into(),
            ok: true,
        }
    }

    #[test]
    fn a_shard_repair_touches_the_holds_of_its_slots_as_a_failover_does() {
        let slot = lock_test_support::key_slot(lock_key(NAME).as_bytes());
        let other = (slot + 100) % 16384;
        for (slots, excused) in [
            (vec![(slot, slot)], true),
            (vec![(0, 16383)], true),
            (Vec::new(), true),
            (vec![(other, other)], false),
        ] {
            // A hold granted during the outage (the shard had no master from after 900 on)
            // and another owner's hold after the takeover promoted a replica without it.
            let events = [
                acq(1000, 1, "w1-t0-0", 1),
                repair(900, 1200, 1300, slots.clone()),
                acq(1400, 2, "w2-t0-0", 2),
                rel(1500, 2, "w2-t0-0", 2, "ok"),
                rel(1600, 1, "w1-t0-0", 1, "ok"),
            ];
            let report = check(&events, None);
            if excused {
                assert_eq!(report.unexcused(), 0, "{slots:?}: {:#?}", report.violations);
                assert_eq!(report.excused_by().get("data_loss"), Some(&1), "{slots:?}");
            } else {
                assert_eq!(counted(&report), ["overlap"], "{slots:?}");
            }
            // A harness event, not a fault: no row, no injection; listed in the table.
            assert_eq!(report.faults(), 0);
            assert_eq!(report.rows.len(), 1);
            assert_eq!(report.harness.len(), 1);
            assert!(report.table().contains("1 shard repairs (0 failed)"));
        }
    }

    fn intent(t: u64, worker: u32, id: &str, token: u64, register: Register, read: i64) -> Event {
        Event::WriteIntent {
            t: t * MS,
            worker,
            task: task_of(id),
            hold: id.into(),
            name: NAME.into(),
            token,
            register,
            read,
        }
    }

    fn written(t: u64, worker: u32, id: &str, token: u64, read: i64, prev: i64) -> Event {
        Event::Write {
            t: t * MS,
            worker,
            task: task_of(id),
            hold: id.into(),
            name: NAME.into(),
            token,
            register: Register::Fenced,
            outcome: WriteOutcome::Accepted,
            read: Some(read),
            prev: Some(prev),
            seen: None,
        }
    }

    fn claim(t: u64, worker: u32, id: &str, token: u64, read: i64) -> Event {
        Event::Claim {
            t: t * MS,
            worker,
            task: task_of(id),
            hold: id.into(),
            name: NAME.into(),
            token,
            read,
        }
    }

    fn gone(t: u64) -> Event {
        Event::KeyGone {
            t: t * MS,
            server: "127.0.0.1:1".into(),
            key: lock_key(NAME),
            how: "expired".into(),
        }
    }

    fn logged(entries: &[&str], value: i64) -> Vec<RegisterTruth> {
        vec![RegisterTruth {
            name: NAME.into(),
            register: Register::Fenced,
            value,
            log: entries.iter().map(|e| LoggedWrite::parse(e)).collect(),
        }]
    }

    fn check(events: &[Event], truth: Option<&[RegisterTruth]>) -> BackendReport {
        analyze("test", events, truth, LEASE, 0, 100_000 * MS)
    }

    /// The unexcused anomalies, by kind.
    fn counted(report: &BackendReport) -> Vec<&str> {
        report
            .violations
            .iter()
            .filter(|v| v.counts())
            .map(|v| v.kind.as_str())
            .collect()
    }

    #[test]
    fn holds_with_the_same_worker_task_and_token_are_all_checked() {
        // One token issued twice to the same task: both holds overlap another owner.
        let events = [
            acq(100, 0, "w0-t0-0", 5),
            acq(200, 1, "w1-t0-0", 4),
            rel(250, 1, "w1-t0-0", 4, "ok"),
            rel(300, 0, "w0-t0-0", 5, "ok"),
            acq(1000, 0, "w0-t0-1", 5),
            acq(1100, 1, "w1-t0-1", 6),
            rel(1150, 1, "w1-t0-1", 6, "ok"),
            rel(1200, 0, "w0-t0-1", 5, "ok"),
        ];
        let report = check(&events, None);
        let overlaps: Vec<&Violation> = report
            .violations
            .iter()
            .filter(|v| v.kind == "overlap")
            .collect();
        assert_eq!(overlaps.len(), 2, "{:#?}", report.violations);
        assert!(overlaps[0].holds.contains(&"w0-t0-0".to_owned()));
        assert!(overlaps[1].holds.contains(&"w0-t0-1".to_owned()));
        assert_eq!(report.unexcused(), 2);
    }

    #[test]
    fn a_pause_or_data_loss_while_the_succeeding_attempt_was_on_its_way_touches_the_hold() {
        // Worker 2's acquire call ran 1000..1700 ms; it was paused 1200..1650 ms, after its
        // attempt was sent, and worker 0 took the lock meanwhile. Worker 3's call ran
        // 3000..3300 ms across an empty restart healed at 3250 ms. Worker 4's call began
        // 5000 ms, and its pause (5100..5300 ms) ended more than two response timeouts
        // before its acquisition returned at 6500 ms: not excused.
        let mut events = vec![
            acq(1000, 2, "w2-t0-0", 1),
            fault(1200, "pause_holder", "start", "worker 2 pid 9"),
            acq(1300, 0, "w0-t0-0", 2),
            fault(1650, "pause_holder", "heal", "worker 2 pid 9"),
            rel(1750, 2, "w2-t0-0", 1, "ok"),
            rel(1800, 0, "w0-t0-0", 2, "ok"),
            acq(3000, 3, "w3-t0-0", 3),
            fault(3200, "restart_empty", "start", "lock master"),
            fault(3250, "restart_empty", "heal", "lock master"),
            acq(3350, 1, "w1-t0-0", 1),
            rel(3400, 3, "w3-t0-0", 3, "not_held"),
            rel(3500, 1, "w1-t0-0", 1, "ok"),
            acq(5000, 4, "w4-t0-0", 5),
            fault(5100, "pause_holder", "start", "worker 4 pid 9"),
            fault(5300, "pause_holder", "heal", "worker 4 pid 9"),
            acq(6400, 0, "w0-t0-1", 6),
            rel(6700, 4, "w4-t0-0", 5, "ok"),
            rel(6800, 0, "w0-t0-1", 6, "ok"),
        ];
        // The calls started before they returned.
        for (event, asked) in [(0, 1000), (6, 3000), (12, 5000)] {
            if let Event::Acquired { t, t_start, .. } = &mut events[event] {
                *t_start = asked * MS;
                *t = match asked {
                    1000 => 1700 * MS,
                    3000 => 3300 * MS,
                    _ => 6500 * MS,
                };
            }
        }
        let report = check(&events, None);
        let overlaps: Vec<&Violation> = report
            .violations
            .iter()
            .filter(|v| v.kind == "overlap")
            .collect();
        assert_eq!(overlaps.len(), 3, "{:#?}", report.violations);
        let counted: Vec<&Violation> = overlaps.iter().copied().filter(|v| v.counts()).collect();
        assert_eq!(counted.len(), 1, "{:#?}", report.violations);
        assert!(counted[0].holds.contains(&"w4-t0-0".to_owned()));
    }

    #[test]
    fn a_pause_excuses_only_the_paused_workers_holds() {
        let events = [
            fault(1000, "pause_holder", "start", "worker 2 pid 9"),
            acq(900, 2, "w2-t0-0", 1),
            acq(1100, 0, "w0-t0-0", 2),
            // Untouched: worker 0 and worker 1 overlap inside the pause window.
            acq(1500, 1, "w1-t0-0", 3),
            rel(1700, 1, "w1-t0-0", 3, "ok"),
            rel(2000, 0, "w0-t0-0", 2, "ok"),
            fault(3500, "pause_holder", "heal", "worker 2 pid 9"),
            lost(3600, 2, "w2-t0-0", 1),
            rel(3600, 2, "w2-t0-0", 1, "lease_lost"),
        ];
        let report = check(&events, None);
        assert_eq!(counted(&report), ["overlap"], "{:#?}", report.violations);
        let violation = report.violations.iter().find(|v| v.counts()).unwrap();
        assert_eq!(violation.holds, ["w0-t0-0", "w1-t0-0"]);
        // The paused holder overlapped both, and its lost() came late: excused by the pause.
        assert_eq!(report.excused_by().get("pause"), Some(&3));
        assert_eq!(report.rows[1].fault, "pause_holder");
        assert_eq!(report.rows[1].violations, 1);
    }

    #[test]
    fn a_logged_stale_write_with_no_write_event_is_found() {
        let events = [
            acq(100, 0, "w0-t0-0", 5),
            intent(150, 0, "w0-t0-0", 5, Register::Fenced, 0),
            written(160, 0, "w0-t0-0", 5, 0, 0),
            rel(170, 0, "w0-t0-0", 5, "ok"),
            acq(200, 1, "w1-t0-0", 6),
            // Sent, then the worker was killed before the answer: no Write event.
            intent(250, 1, "w1-t0-0", 6, Register::Fenced, 0),
            rel(260, 1, "w1-t0-0", 6, "ok"),
        ];
        let truth = logged(&["w0-t0-0|5|0|0|1", "w1-t0-0|6|0|1|1"], 1);
        let report = check(&events, Some(&truth));
        assert_eq!(
            counted(&report),
            ["stale_write_accepted"],
            "{:#?}",
            report.violations
        );
        assert_eq!(report.register.applied, 2);
        assert_eq!(report.register.applied_unrecorded, 1);
        assert_eq!(report.register.inconsistent, 0);
        assert_eq!(report.rows[0].stale_writes_accepted, 1);
    }

    /// The fenced register's log in both stores' formats: Redis's (`hold|token|read|new`,
    /// `prev` implied by the order) and PostgreSQL's (rows with `prev`).
    fn both_formats(entries: &[(&str, u64, i64, i64, i64)]) -> [Vec<RegisterTruth>; 2] {
        let value = entries.last().map_or(0, |e| e.4);
        let redis: Vec<String> = entries
            .iter()
            .map(|(hold, token, read, _, new)| format!("{hold}|{token}|{read}|{new}"))
            .collect();
        let postgres: Vec<String> = entries
            .iter()
            .map(|(hold, token, read, prev, new)| format!("{hold}|{token}|{read}|{prev}|{new}"))
            .collect();
        fn refs(v: &[String]) -> Vec<&str> {
            v.iter().map(String::as_str).collect()
        }
        [
            logged(&refs(&redis), value),
            logged(&refs(&postgres), value),
        ]
    }

    /// The unexcused anomalies the register check found (the holds of these histories
    /// overlap, which other checks report).
    fn register_kinds(report: &BackendReport) -> Vec<&str> {
        counted(report)
            .into_iter()
            .filter(|kind| kind.contains("write") || kind.starts_with("register"))
            .collect()
    }

    #[test]
    fn a_stale_write_after_a_higher_read_is_found_though_nothing_was_overwritten() {
        // A (token 5) reads 0; B (token 6) reads 0 and dies before writing; A, stale, writes
        // 1 and the store accepts it. The write overwrote the value A read, so only B's
        // claim shows that it had to be refused.
        let events = [
            acq(100, 0, "w0-t0-0", 5),
            claim(110, 0, "w0-t0-0", 5, 0),
            acq(200, 1, "w1-t0-0", 6),
            claim(210, 1, "w1-t0-0", 6, 0),
            intent(250, 0, "w0-t0-0", 5, Register::Fenced, 0),
            written(260, 0, "w0-t0-0", 5, 0, 0),
            rel(270, 0, "w0-t0-0", 5, "ok"),
        ];
        for truth in both_formats(&[("w0-t0-0", 5, 0, 0, 1)]) {
            let report = check(&events, Some(&truth));
            assert_eq!(
                register_kinds(&report),
                ["stale_write_accepted"],
                "{:#?}",
                report.violations
            );
            assert_eq!(report.rows[0].stale_writes_accepted, 1);
            assert!(report
                .violations
                .iter()
                .any(|v| v.detail.contains("w1-t0-0 (token 6) had read")));
            // Had B read after A's write was sent, nothing was stale.
            let mut later = events.to_vec();
            later[3] = claim(255, 1, "w1-t0-0", 6, 0);
            let report = check(&later, Some(&truth));
            assert!(
                register_kinds(&report).is_empty(),
                "{:#?}",
                report.violations
            );
            assert_eq!(report.rows[0].stale_writes_accepted, 0);
        }
    }

    #[test]
    fn a_stale_write_is_found_in_both_log_formats() {
        // A lost update: B (token 6) overwrote A's write although it read before it.
        let events = [
            acq(100, 0, "w0-t0-0", 5),
            intent(150, 0, "w0-t0-0", 5, Register::Fenced, 0),
            acq(200, 1, "w1-t0-0", 6),
            intent(250, 1, "w1-t0-0", 6, Register::Fenced, 0),
        ];
        for truth in both_formats(&[("w0-t0-0", 5, 0, 0, 1), ("w1-t0-0", 6, 0, 1, 1)]) {
            let report = check(&events, Some(&truth));
            assert_eq!(
                register_kinds(&report),
                ["stale_write_accepted"],
                "{truth:?}"
            );
            assert_eq!(report.register.inconsistent, 0);
        }
        // A write applied after a higher token's, with no claim recorded: the store's order
        // alone shows it.
        for truth in both_formats(&[("w1-t0-0", 6, 0, 0, 1), ("w0-t0-0", 5, 1, 1, 2)]) {
            let report = check(&events, Some(&truth));
            assert_eq!(
                register_kinds(&report),
                ["stale_write_accepted"],
                "{truth:?}"
            );
            assert!(report
                .violations
                .iter()
                .any(|v| v.detail.contains("token 6) had written")));
        }
        // In order, with nothing stale: no violation in either format.
        for truth in both_formats(&[("w0-t0-0", 5, 0, 0, 1), ("w1-t0-0", 6, 1, 1, 2)]) {
            let report = check(&events, Some(&truth));
            assert!(
                register_kinds(&report).is_empty(),
                "{:#?}",
                report.violations
            );
            assert_eq!(report.register.applied, 2);
        }
    }

    #[test]
    fn the_register_log_must_match_the_final_value_and_every_intent() {
        let events = [
            acq(100, 0, "w0-t0-0", 5),
            intent(150, 0, "w0-t0-0", 5, Register::Fenced, 0),
            written(160, 0, "w0-t0-0", 5, 0, 0),
            rel(170, 0, "w0-t0-0", 5, "ok"),
        ];
        // A final value the log does not explain, and a write nobody meant to send.
        let truth = logged(&["w0-t0-0|5|0|0|1", "w9-t0-0|7|1|1|2"], 3);
        let report = check(&events, Some(&truth));
        let mut kinds = counted(&report);
        kinds.sort_unstable();
        assert_eq!(kinds, ["register_final", "write_without_intent"]);
        // A write the worker saw accepted must be in the log.
        let report = check(&events, Some(&logged(&[], 0)));
        assert_eq!(counted(&report), ["write_not_logged"]);
    }

    #[test]
    fn the_table_says_how_many_violations_it_does_not_list() {
        let mut events = Vec::new();
        for i in 0..(LISTED_VIOLATIONS as u64 + 2) {
            let id = format!("w0-t0-{i}");
            events.push(acq(1000 * i, 0, &id, i));
            events.push(rel(1000 * i + 100, 0, &id, i, "lease_lost"));
        }
        let report = check(&events, None);
        assert_eq!(report.unexcused(), LISTED_VIOLATIONS + 2);
        let table = report.table();
        assert_eq!(
            table.matches("- violation ").count(),
            LISTED_VIOLATIONS,
            "{table}"
        );
        assert!(table.contains("- ... and 2 more"), "{table}");
    }

    /// A release of `id` started at `t_start` ms that answered `result` at `t` ms.
    fn rel_until(t_start: u64, t: u64, worker: u32, id: &str, token: u64, result: &str) -> Event {
        match rel(t_start, worker, id, token, result) {
            Event::Released {
                worker,
                task,
                hold,
                name,
                owner,
                token,
                result,
                ..
            } => Event::Released {
                t_start: t_start * MS,
                t: t * MS,
                worker,
                task,
                hold,
                name,
                owner,
                token,
                result,
            },
            other => other,
        }
    }

    #[test]
    fn a_loss_while_the_release_was_on_its_way_is_not_seen_first_at_release() {
        // The release starts at 1000 ms while the lease is valid; a partition holds it
        // until 1700 ms; the key expired at 1600 ms and worker 2 took the lock at 1650 ms.
        let base = [
            acq(100, 1, "w1-t0-0", 5),
            rel_until(1000, 1700, 1, "w1-t0-0", 5, "not_held"),
        ];
        let mut taken = base.to_vec();
        taken.push(acq(1650, 2, "w2-t0-0", 6));
        taken.push(rel(1800, 2, "w2-t0-0", 6, "ok"));
        let report = check(&taken, None);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert!(report.violations.is_empty());
        let mut expired = base.to_vec();
        expired.push(gone(1600));
        assert!(check(&expired, None).violations.is_empty());
        // No sign of a loss before the release answered: still a violation.
        assert_eq!(counted(&check(&base, None)), ["loss_first_seen_at_release"]);
        // Gone before the release started, past the bound, no lost() before: a violation,
        // however long the release then took.
        let mut before = vec![
            acq(100, 1, "w1-t0-0", 5),
            gone(300),
            rel_until(2000, 2700, 1, "w1-t0-0", 5, "not_held"),
        ];
        assert_eq!(
            counted(&check(&before, None)),
            ["loss_first_seen_at_release"]
        );
        before.push(acq(2600, 2, "w2-t0-0", 6));
        assert_eq!(
            counted(&check(&before, None)),
            ["loss_first_seen_at_release"]
        );
    }

    #[test]
    fn a_readers_release_delayed_by_its_workers_partition_is_excused() {
        use LockKind::Read;
        let [acquired, _] = hold_of(Read, "rw-0", "w1-t7-0", "a", 1, 1, (100, 100, 1000));
        let reader = |partition: Option<&str>| {
            let mut events = vec![acquired.clone()];
            let released = Event::Released {
                t_start: 1000 * MS,
                t: 1400 * MS,
                worker: 1,
                task: 0,
                hold: "w1-t7-0".into(),
                name: "rw-0".into(),
                owner: "a".into(),
                token: 1,
                result: "not_held".into(),
            };
            events.push(released);
            if let Some(target) = partition {
                events.push(fault_id(800, "partition_both", "start", target, 1, None));
                events.push(fault_id(1100, "partition_both", "heal", target, 1, None));
            }
            check(&events, None)
        };
        let report = reader(Some("worker 1 pid 9 servers [0] Both"));
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert_eq!(report.excused_by().get("net_fault"), Some(&1));
        assert_eq!(
            report
                .rows
                .iter()
                .map(|r| r.release_first_losses)
                .sum::<usize>(),
            1
        );
        // Another worker's partition, or none: a violation.
        let report = reader(Some("worker 2 pid 9 servers [0] Both"));
        assert_eq!(counted(&report), ["loss_first_seen_at_release"]);
        assert_eq!(counted(&reader(None)), ["loss_first_seen_at_release"]);
    }

    #[test]
    fn a_permit_taken_while_the_release_was_on_its_way_shows_the_loss() {
        use LockKind::Permit;
        // Two permits in all: p1 holds one, ours the other; its release (1000 to 1500 ms)
        // answers not_held, and p3 got a permit at 1200 ms while p1 still held its own.
        let mut events = history(&[
            hold_of(Permit, "sem-0", "p1", "a", 0, 1, (100, 100, 2000)),
            hold_of(Permit, "sem-0", "p3", "c", 2, 3, (1100, 1200, 1300)),
        ]);
        let [ours, _] = hold_of(Permit, "sem-0", "p2", "b", 1, 2, (150, 150, 1000));
        events.push(ours);
        events.push(Event::Released {
            t_start: 1000 * MS,
            t: 1500 * MS,
            worker: 1,
            task: 0,
            hold: "p2".into(),
            name: "sem-0".into(),
            owner: "b".into(),
            token: 2,
            result: "not_held".into(),
        });
        let report = check(&events, None);
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        // Without p1 there was room for p3 beside ours: no proof, a violation.
        events.drain(..2);
        assert_eq!(
            counted(&check(&events, None)),
            ["loss_first_seen_at_release"]
        );
    }

    #[test]
    fn a_loss_first_seen_at_release_is_a_violation() {
        let events = [
            acq(100, 0, "w0-t0-0", 5),
            rel(400, 0, "w0-t0-0", 5, "lease_lost"),
        ];
        let report = check(&events, None);
        assert_eq!(counted(&report), ["loss_first_seen_at_release"]);
        assert_eq!(report.rows[0].release_first_losses, 1);

        // Within the documented bound after the key went, the release may be first.
        let events = [
            acq(100, 0, "w0-t0-0", 5),
            gone(300),
            rel(400, 0, "w0-t0-0", 5, "lease_lost"),
        ];
        assert!(counted(&check(&events, None)).is_empty());
    }

    #[test]
    fn a_late_lost_is_a_violation_unless_the_worker_stalled() {
        // The key expired at 2000 ms; lost() at 4000 ms is past 1500/3 + 500 + 100 ms.
        let mut events = vec![
            acq(100, 0, "w0-t0-0", 5),
            gone(2000),
            lost(4000, 0, "w0-t0-0", 5),
            rel(4000, 0, "w0-t0-0", 5, "lease_lost"),
        ];
        let report = check(&events, None);
        assert_eq!(counted(&report), ["late_lost"], "{:#?}", report.violations);
        assert_eq!(report.rows[0].late_lost, 1);

        // In time: no violation.
        let in_time = [
            acq(100, 0, "w0-t0-0", 5),
            gone(2000),
            lost(2900, 0, "w0-t0-0", 5),
            rel(2900, 0, "w0-t0-0", 5, "lease_lost"),
        ];
        assert!(counted(&check(&in_time, None)).is_empty());

        // The worker's probe saw it stalled during the hold: excused.
        events.push(Event::Stall {
            t_start: 2500 * MS,
            t: 3500 * MS,
            worker: Some(0),
        });
        let report = check(&events, None);
        assert!(counted(&report).is_empty());
        assert_eq!(report.excused_by().get("stall"), Some(&1));
        assert_eq!(report.stalls.workers, 1);

        // A successor's acquisition dates the loss when the server said nothing.
        let events = [
            acq(100, 0, "w0-t0-0", 5),
            acq(2000, 1, "w1-t0-0", 6),
            rel(2100, 1, "w1-t0-0", 6, "ok"),
            lost(4000, 0, "w0-t0-0", 5),
            rel(4000, 0, "w0-t0-0", 5, "lease_lost"),
        ];
        let report = check(&events, None);
        let mut kinds = counted(&report);
        kinds.sort_unstable();
        assert_eq!(kinds, ["late_lost", "overlap"]);
    }

    #[test]
    fn on_redlock_a_lock_is_gone_when_a_majority_of_masters_lost_it() {
        let on = |t: u64, port: u16| Event::KeyGone {
            t: t * MS,
            server: format!("127.0.0.1:{port}"),
            key: lock_key(NAME),
            how: "expired".into(),
        };
        let mut events = vec![
            acq(100, 0, "w0-t0-0", 5),
            on(1000, 1),
            on(1100, 2),
            lost(2500, 0, "w0-t0-0", 5),
            rel(2500, 0, "w0-t0-0", 5, "lease_lost"),
        ];
        let redlock = |events: &[Event]| analyze("redlock", events, None, LEASE, 0, 100_000 * MS);
        // Two of five masters lost their copy: the lock was still held.
        assert!(counted(&redlock(&events)).is_empty());
        // A third at 1200 ms: lost() at 2500 ms is late.
        events.push(on(1200, 3));
        assert_eq!(counted(&redlock(&events)), ["late_lost"]);
        // On a single server the first removal is the loss.
        assert_eq!(counted(&check(&events, None)), ["late_lost"]);
    }

    #[test]
    fn a_token_regression_counts_unless_the_counter_was_lost() {
        let events = [
            acq(100, 0, "w0-t0-0", 10),
            rel(200, 0, "w0-t0-0", 10, "ok"),
            acq(300, 1, "w1-t0-0", 9),
            rel(400, 1, "w1-t0-0", 9, "ok"),
        ];
        let report = check(&events, None);
        assert_eq!(counted(&report), ["token_regression"]);
        assert_eq!(report.rows[0].token_regressions, 1);

        let events = [
            acq(100, 0, "w0-t0-0", 10),
            rel(200, 0, "w0-t0-0", 10, "ok"),
            fault(250, "restart_empty", "start", "server 0"),
            fault(260, "restart_empty", "heal", "port 1"),
            acq(300, 1, "w1-t0-0", 1),
            rel(400, 1, "w1-t0-0", 1, "ok"),
        ];
        let report = check(&events, None);
        assert!(counted(&report).is_empty());
        assert_eq!(report.excused_by().get("data_loss"), Some(&1));
    }

    #[test]
    fn recovery_after_a_kill_runs_to_the_next_acquisition_of_the_lock() {
        let events = [
            acq(100, 0, "w0-t0-0", 1),
            fault(500, "kill_holder", "start", "worker 0 pid 9"),
            fault(600, "kill_holder", "heal", "worker 0 pid 9"),
            acq(1600, 1, "w1-t0-0", 2),
            rel(1700, 1, "w1-t0-0", 2, "ok"),
        ];
        let report = check(&events, None);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert_eq!(report.rows[1].kill_recovery_max_ms, Some(1100.0));

        // Acquired just after the kill was recorded, before the signal landed: the hold
        // ends there, it does not last to the end of the run.
        let events = [
            fault(500, "kill_holder", "start", "worker 0 pid 9"),
            acq(501, 0, "w0-t0-0", 1),
            fault(600, "kill_holder", "heal", "worker 0 pid 9"),
            acq(2100, 1, "w1-t0-0", 2),
            rel(2200, 1, "w1-t0-0", 2, "ok"),
        ];
        let report = check(&events, None);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    }

    /// A hold of `kind` on `name`: asked at `asked` ms, acquired at `t` ms, released at
    /// `end` ms (result `ok`), by `owner`.
    #[allow(clippy::too_many_arguments)]
    fn hold_of(
        kind: LockKind,
        name: &str,
        id: &str,
        owner: &str,
        worker: u32,
        token: u64,
        (asked, t, end): (u64, u64, u64),
    ) -> [Event; 2] {
        [
            Event::Acquired {
                t_start: asked * MS,
                t: t * MS,
                worker,
                task: 0,
                hold: id.into(),
                mode: TaskMode::GuardAbort,
                name: name.into(),
                owner: owner.into(),
                token,
                kind,
                permits: u32::from(kind == LockKind::Permit),
                total: if kind == LockKind::Permit { 2 } else { 0 },
                min_hold_ms: if kind == LockKind::AtLeast { 400 } else { 0 },
            },
            Event::Released {
                t_start: end * MS,
                t: end * MS + MS,
                worker,
                task: 0,
                hold: id.into(),
                name: name.into(),
                owner: owner.into(),
                token,
                result: "ok".into(),
            },
        ]
    }

    fn history(holds: &[[Event; 2]]) -> Vec<Event> {
        holds.iter().flat_map(|h| h.iter().cloned()).collect()
    }

    #[test]
    fn a_writer_excludes_readers_and_writers_but_readers_share() {
        use LockKind::{Read, Write};
        let readers = history(&[
            hold_of(Read, "rw-0", "r1", "a", 0, 1, (100, 100, 500)),
            hold_of(Read, "rw-0", "r2", "b", 1, 2, (200, 200, 600)),
        ]);
        assert!(counted(&check(&readers, None)).is_empty());
        let writer_over_reader = history(&[
            hold_of(Read, "rw-0", "r1", "a", 0, 1, (100, 100, 500)),
            hold_of(Write, "rw-0", "w1", "b", 1, 2, (200, 200, 600)),
        ]);
        assert_eq!(counted(&check(&writer_over_reader, None)), ["overlap"]);
        let reader_over_writer = history(&[
            hold_of(Write, "rw-0", "w1", "a", 0, 1, (100, 100, 500)),
            hold_of(Read, "rw-0", "r1", "b", 1, 2, (200, 200, 600)),
        ]);
        assert_eq!(counted(&check(&reader_over_writer, None)), ["overlap"]);
        // A reader acquiring does not end another reader's hold (no loss from it).
        let report = check(&readers, None);
        assert_eq!(report.rows[0].late_lost, 0);
    }

    #[test]
    fn a_semaphore_holds_at_most_its_total() {
        use LockKind::Permit;
        let two = history(&[
            hold_of(Permit, "sem-0", "p1", "a", 0, 1, (100, 100, 500)),
            hold_of(Permit, "sem-0", "p2", "b", 1, 2, (200, 200, 600)),
            // Starts when p1 ends: still two.
            hold_of(Permit, "sem-0", "p3", "c", 2, 3, (500, 500, 700)),
        ]);
        assert!(counted(&check(&two, None)).is_empty());
        let three = history(&[
            hold_of(Permit, "sem-0", "p1", "a", 0, 1, (100, 100, 500)),
            hold_of(Permit, "sem-0", "p2", "b", 1, 2, (200, 200, 600)),
            hold_of(Permit, "sem-0", "p3", "c", 2, 3, (300, 300, 700)),
        ]);
        let report = check(&three, None);
        assert_eq!(counted(&report), ["permits_exceeded"]);
        assert_eq!(report.violations[0].holds, ["p1", "p2", "p3"]);
        // Permits never count as plain overlaps.
        assert_eq!(report.rows[0].overlaps, 0);
    }

    #[test]
    fn a_fair_lock_grants_waiters_in_the_order_they_asked() {
        use LockKind::Fair;
        let holder = hold_of(Fair, "fair-0", "h", "h", 0, 1, (0, 0, 1000));
        // a asked at 100 ms, b at 300 ms: a first, then b.
        let in_order = history(&[
            holder.clone(),
            hold_of(Fair, "fair-0", "a", "a", 1, 2, (100, 1000, 1200)),
            hold_of(Fair, "fair-0", "b", "b", 2, 3, (300, 1200, 1400)),
        ]);
        assert!(counted(&check(&in_order, None)).is_empty());
        let inverted = history(&[
            holder.clone(),
            hold_of(Fair, "fair-0", "b", "b", 2, 2, (300, 1000, 1200)),
            hold_of(Fair, "fair-0", "a", "a", 1, 3, (100, 1200, 1400)),
        ]);
        let report = check(&inverted, None);
        assert_eq!(counted(&report), ["fifo_inversion"]);
        assert_eq!(report.rows[0].fifo_inversions, 1);
        // Asked within the margin of each other: the order is not known.
        let close = history(&[
            holder.clone(),
            hold_of(Fair, "fair-0", "b", "b", 2, 2, (130, 1000, 1200)),
            hold_of(Fair, "fair-0", "a", "a", 1, 3, (100, 1200, 1400)),
        ]);
        assert!(counted(&check(&close, None)).is_empty());
        // The earlier waiter's worker was cut off while it waited: its start does not date
        // its place in the queue.
        let mut cut_off = inverted.clone();
        cut_off.push(fault(50, "partition", "start", "worker 1 pid 9"));
        cut_off.push(fault(900, "partition", "heal", "worker 1 pid 9"));
        let report = check(&cut_off, None);
        assert!(counted(&report).is_empty());
        assert_eq!(report.excused_by().get("net_fault"), Some(&1));
        // Another worker's partition does not excuse it.
        let mut elsewhere = inverted.clone();
        elsewhere.push(fault(50, "partition", "start", "worker 2 pid 9"));
        elsewhere.push(fault(900, "partition", "heal", "worker 2 pid 9"));
        assert_eq!(counted(&check(&elsewhere, None)), ["fifo_inversion"]);
        // The earlier waiter's worker stalled while it waited: excused.
        let mut stalled = inverted.clone();
        stalled.push(Event::Stall {
            t_start: 500 * MS,
            t: 700 * MS,
            worker: Some(1),
        });
        let report = check(&stalled, None);
        assert!(counted(&report).is_empty());
        assert_eq!(report.excused_by().get("stall"), Some(&1));
    }

    #[test]
    fn the_random_schedules_faults_excuse_a_fifo_inversion_by_what_they_do() {
        use LockKind::Fair;
        let inverted = history(&[
            hold_of(Fair, "fair-0", "h", "h", 0, 1, (0, 0, 1000)),
            hold_of(Fair, "fair-0", "b", "b", 2, 2, (300, 1000, 1200)),
            hold_of(Fair, "fair-0", "a", "a", 1, 3, (100, 1200, 1400)),
        ]);
        let with = |name: &str, target: &str| {
            let mut events = inverted.clone();
            events.push(fault_id(50, name, "start", target, 1, None));
            events.push(fault_id(150, name, "heal", target, 1, None));
            check(&events, None)
        };
        // The earlier waiter asked inside its own worker's partition (the lab's names).
        for name in [
            "partition_both",
            "partition_to_server",
            "partition_from_server",
        ] {
            let report = with(name, "worker 1 pid 9 servers [0] Both");
            assert!(
                counted(&report).is_empty(),
                "{name}: {:#?}",
                report.violations
            );
            assert_eq!(report.excused_by().get("net_fault"), Some(&1), "{name}");
            // Another worker's partition does not excuse it.
            let report = with(name, "worker 2 pid 9 servers [0] Both");
            assert_eq!(counted(&report), ["fifo_inversion"], "{name}");
        }
        // A forward jump of the server's clock while it waited may have expired its place
        // in the queue: data loss; a backward one only lengthens TTLs.
        let report = with("clock_jump_forward", "server port 1 pid 2 +2000 ms");
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert_eq!(report.excused_by().get("data_loss"), Some(&1));
        let report = with("clock_jump_backward", "server port 1 pid 2 -2000 ms");
        assert_eq!(counted(&report), ["fifo_inversion"]);
    }

    #[test]
    fn a_fault_delays_a_worker_until_its_first_answer_after_the_heal() {
        use LockKind::Fair;
        // Worker 1's partition heals at 150 ms; it asks at 300 ms, but its connection is
        // stuck until its first answer from the server (an acquisition at 600 ms).
        let inverted = |answer_at: Option<u64>, heal: u64| {
            let mut events = history(&[
                hold_of(Fair, "fair-0", "h", "h", 0, 1, (0, 0, 1000)),
                hold_of(Fair, "fair-0", "b", "b", 2, 2, (500, 1000, 1200)),
                hold_of(Fair, "fair-0", "a", "a", 1, 3, (300, 1200, 1400)),
            ]);
            let target = "worker 1 pid 9 servers [0] Both";
            events.push(fault_id(50, "partition_both", "start", target, 1, None));
            events.push(fault_id(heal, "partition_both", "heal", target, 1, None));
            if let Some(t) = answer_at {
                events.extend(hold_of(
                    LockKind::Plain,
                    "chaos-0",
                    "w1-t0-0",
                    "p",
                    1,
                    9,
                    (t - 100, t, t + 10),
                ));
            }
            check(&events, None)
        };
        let report = inverted(Some(600), 150);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert_eq!(report.excused_by().get("net_fault"), Some(&1));
        // It answered before it asked: the fault no longer delayed it.
        assert_eq!(counted(&inverted(Some(250), 150)), ["fifo_inversion"]);
        // An answer of another client of the worker (hot, Redisson, shutdown) does not count.
        let mut events = history(&[
            hold_of(Fair, "fair-0", "h", "h", 0, 1, (0, 0, 1000)),
            hold_of(Fair, "fair-0", "b", "b", 2, 2, (500, 1000, 1200)),
            hold_of(Fair, "fair-0", "a", "a", 1, 3, (300, 1200, 1400)),
            hold_of(
                LockKind::Hot,
                "hot-0",
                "w1-t12-0",
                "k",
                1,
                9,
                (240, 250, 260),
            ),
        ]);
        let target = "worker 1 pid 9 servers [0] Both";
        events.push(fault_id(50, "partition_both", "start", target, 1, None));
        events.push(fault_id(150, "partition_both", "heal", target, 1, None));
        assert!(counted(&check(&events, None)).is_empty());
        // With no answer at all, at most 2 s after the heal.
        assert!(counted(&inverted(None, 150)).is_empty());
        let report = {
            let mut events = history(&[
                hold_of(Fair, "fair-0", "h", "h", 0, 1, (0, 0, 3000)),
                hold_of(Fair, "fair-0", "b", "b", 2, 2, (2500, 3000, 3200)),
                hold_of(Fair, "fair-0", "a", "a", 1, 3, (2300, 3200, 3400)),
            ]);
            let target = "worker 1 pid 9 servers [0] Both";
            events.push(fault_id(50, "partition_both", "start", target, 1, None));
            events.push(fault_id(150, "partition_both", "heal", target, 1, None));
            check(&events, None)
        };
        assert_eq!(counted(&report), ["fifo_inversion"]);
    }

    #[test]
    fn each_name_of_a_multilock_is_checked_as_a_plain_hold() {
        use LockKind::{Multi, Plain};
        let fine = history(&[
            hold_of(Multi, "multi-0", "m/multi-0", "a", 0, 1, (100, 100, 500)),
            hold_of(Multi, "multi-1", "m/multi-1", "a", 0, 2, (100, 100, 500)),
            hold_of(Multi, "multi-1", "n/multi-1", "b", 1, 3, (500, 500, 700)),
        ]);
        assert!(counted(&check(&fine, None)).is_empty());
        let overlapping = history(&[
            hold_of(Multi, "multi-1", "m/multi-1", "a", 0, 2, (100, 100, 500)),
            hold_of(Plain, "multi-1", "x", "b", 1, 3, (300, 300, 700)),
        ]);
        assert_eq!(counted(&check(&overlapping, None)), ["overlap"]);
        // A lock_all whose call spanned an empty restart: its first name, granted before the
        // restart, went with the data (and the fence counter), so later tokens go back.
        let mut spanning = history(&[
            hold_of(Multi, "multi-1", "m/multi-1", "a", 0, 46, (100, 300, 400)),
            hold_of(Multi, "multi-1", "n/multi-1", "b", 1, 2, (500, 500, 600)),
        ]);
        spanning.push(fault(200, "restart_empty", "start", "server 0"));
        spanning.push(fault(250, "restart_empty", "heal", "port 1"));
        let report = check(&spanning, None);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert_eq!(report.excused_by().get("data_loss"), Some(&1));
    }

    #[test]
    fn a_hold_at_least_lock_is_not_free_before_its_minimum() {
        use LockKind::{AtLeast, Plain};
        // Asked at 100 ms with 400 ms minimum: free from 500 ms.
        let early = history(&[
            hold_of(AtLeast, "atleast-0", "h", "a", 0, 1, (100, 110, 200)),
            hold_of(AtLeast, "atleast-0", "n", "b", 1, 2, (150, 300, 350)),
        ]);
        let report = check(&early, None);
        assert_eq!(counted(&report), ["freed_before_min_hold"]);
        assert_eq!(report.rows[0].freed_early, 1);
        let on_time = history(&[
            hold_of(AtLeast, "atleast-0", "h", "a", 0, 1, (100, 110, 200)),
            hold_of(Plain, "atleast-0", "n", "b", 1, 2, (150, 490, 550)),
        ]);
        assert!(counted(&check(&on_time, None)).is_empty());
        // Data lost in the lock's tail after the release (here a restart that undid a
        // backward clock jump) frees it early: excused; a loss after the minimum hold is not.
        let with_jump = |at: u64| {
            let mut events = early.clone();
            let target = "server port 1 restarted: its clock lost a -1400 ms offset";
            events.push(fault_id(
                at,
                "clock_jump_forward_by_restart",
                "start",
                target,
                1,
                None,
            ));
            events.push(fault_id(
                at + 30,
                "clock_jump_forward_by_restart",
                "heal",
                target,
                1,
                None,
            ));
            check(&events, None)
        };
        let report = with_jump(240);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert_eq!(report.excused_by().get("data_loss"), Some(&1));
        assert_eq!(counted(&with_jump(600)), ["freed_before_min_hold"]);
        // A holder that lost its lock promises nothing.
        let mut lost_it = early.clone();
        lost_it.insert(1, lost(190, 0, "h", 1));
        let report = check(&lost_it, None);
        assert_eq!(report.rows[0].freed_early, 0);
    }

    #[test]
    fn every_use_of_a_hot_lock_is_a_hold() {
        use LockKind::Hot;
        // Two uses of one kept lock (one owner field, one token), one after the other.
        let serial = history(&[
            hold_of(Hot, "hot-0", "u1", "c:h1~k", 0, 5, (100, 100, 200)),
            hold_of(Hot, "hot-0", "u2", "c:h1~k", 0, 5, (210, 210, 300)),
        ]);
        assert!(counted(&check(&serial, None)).is_empty());
        // Two uses at once under the same owner field: an overlap.
        let at_once = history(&[
            hold_of(Hot, "hot-0", "u1", "c:h1~k", 0, 5, (100, 100, 300)),
            hold_of(Hot, "hot-0", "u2", "c:h1~k", 0, 5, (200, 200, 400)),
        ]);
        assert_eq!(counted(&check(&at_once, None)), ["overlap"]);
        // The kept lock's key expired at 1000 ms; a use from 3000 ms is past the bound.
        let key_gone = Event::KeyGone {
            t: 1000 * MS,
            server: "127.0.0.1:1".into(),
            key: lock_key("hot-0"),
            how: "expired".into(),
        };
        let mut after_loss = history(&[
            hold_of(Hot, "hot-0", "u1", "c:h1~k", 0, 5, (100, 100, 200)),
            hold_of(Hot, "hot-0", "u2", "c:h1~k", 0, 5, (3000, 3000, 3100)),
        ]);
        after_loss.push(key_gone.clone());
        assert_eq!(counted(&check(&after_loss, None)), ["hot_use_after_loss"]);
        // A use that began right after the loss, and whose lost() came in time, is fine.
        let mut in_time = history(&[
            hold_of(Hot, "hot-0", "u1", "c:h1~k", 0, 5, (100, 100, 200)),
            hold_of(Hot, "hot-0", "u2", "c:h1~k", 0, 5, (1100, 1100, 1500)),
        ]);
        in_time.push(key_gone);
        in_time.insert(2, lost(1400, 0, "u2", 5));
        assert!(counted(&check(&in_time, None)).is_empty());
    }

    #[test]
    fn a_hot_use_begun_before_the_watchdog_could_see_a_data_loss_is_excused() {
        use LockKind::{Hot, Plain};
        // Worker 0 keeps hot-0 from its first use at 100 ms; the server restarts empty at
        // 1000-1040 ms; worker 1 takes the lock from the empty server at 1050 ms.
        let run = |use_at: u64| {
            let mut events = history(&[
                hold_of(Hot, "hot-0", "u1", "c:h1~k", 0, 5, (100, 100, 200)),
                hold_of(
                    Hot,
                    "hot-0",
                    "u2",
                    "c:h1~k",
                    0,
                    5,
                    (use_at, use_at, use_at + 400),
                ),
                hold_of(
                    Plain,
                    "hot-0",
                    "w1-t0-0",
                    "b",
                    1,
                    1,
                    (1050, 1050, use_at + 300),
                ),
            ]);
            events.push(fault(1000, "restart_empty", "start", "server 0"));
            events.push(fault(1040, "restart_empty", "heal", "port 1"));
            check(&events, None)
        };
        // The use began 160 ms after the heal, within lease/3 + 500 ms + 100 ms: the
        // watchdog had not had to notice yet.
        let report = run(1200);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert!(report.excused_by().contains_key("data_loss"));
        // Begun 1.4 s after the heal, past that bound: the client used a lock it had lost.
        let report = run(2440);
        let mut kinds = counted(&report);
        kinds.sort_unstable();
        assert_eq!(
            kinds,
            ["hot_use_after_loss", "overlap"],
            "{:#?}",
            report.violations
        );
    }

    #[test]
    fn layer_holds_are_checked_as_plain_ones() {
        use LockKind::Layer;
        let overlapping = history(&[
            hold_of(Layer, "layer-0", "w0-t1000-0", "a", 0, 1, (100, 100, 300)),
            hold_of(Layer, "layer-0", "w1-t1000-0", "b", 1, 2, (200, 200, 400)),
        ]);
        assert_eq!(counted(&check(&overlapping, None)), ["overlap"]);
    }

    #[test]
    fn a_shutdown_releases_its_locks_for_the_waiters() {
        use LockKind::Shutdown;
        let done = |t: u64| Event::ShutdownDone {
            t_start: (t - 60) * MS,
            t: t * MS,
            worker: 0,
            hold: Some("s".into()),
            name: "shut-0".into(),
            released_by_holders: 0,
            released_at_deadline: 1,
            not_held: 0,
            failed: 0,
            error: None,
        };
        let mut prompt = history(&[
            hold_of(Shutdown, "shut-0", "s", "a", 0, 1, (100, 100, 250)),
            hold_of(Shutdown, "shut-0", "n", "b", 1, 2, (150, 260, 400)),
        ]);
        prompt.push(done(255));
        let report = check(&prompt, None);
        assert!(counted(&report).is_empty());
        assert_eq!(report.rows[0].shutdown_recovery_max_ms, Some(5.0));
        let mut slow = history(&[
            hold_of(Shutdown, "shut-0", "s", "a", 0, 1, (100, 100, 250)),
            hold_of(Shutdown, "shut-0", "n", "b", 1, 2, (150, 1800, 1900)),
        ]);
        slow.push(done(255));
        assert_eq!(counted(&check(&slow, None)), ["shutdown_release_slow"]);
    }

    #[test]
    fn a_shutdown_ends_its_hold_at_the_deadline() {
        use LockKind::{Plain, Shutdown};
        // The shutdown starts at 200 ms with a 50 ms grace: the lock is taken at 250 ms.
        // The holder's work ended at 249 ms (its zero-wait lost() check saw nothing), its
        // release started at 252 ms and returned LeaseLost; a waiter got the lock at 251 ms.
        let run = |at_deadline: usize, waiter: bool| {
            let [acquired, _] = hold_of(Shutdown, "shut-0", "s", "a", 0, 1, (100, 100, 252));
            let mut events = vec![acquired];
            events.push(Event::Released {
                t_start: 252 * MS,
                t: 253 * MS,
                worker: 0,
                task: 0,
                hold: "s".into(),
                name: "shut-0".into(),
                owner: "a".into(),
                token: 1,
                result: "lease_lost".into(),
            });
            events.push(Event::ShutdownDone {
                t_start: 200 * MS,
                t: 254 * MS,
                worker: 0,
                hold: Some("s".into()),
                name: "shut-0".into(),
                released_by_holders: 0,
                released_at_deadline: at_deadline,
                not_held: 0,
                failed: 0,
                error: None,
            });
            if waiter {
                events.extend(hold_of(Plain, "shut-0", "n", "b", 1, 2, (150, 251, 400)));
            }
            check(&events, None)
        };
        for waiter in [false, true] {
            let report = run(1, waiter);
            assert!(report.violations.is_empty(), "{:#?}", report.violations);
        }
        // A shutdown that took nothing at its deadline does not end the hold there.
        assert_eq!(counted(&run(0, false)), ["loss_first_seen_at_release"]);
        assert_eq!(counted(&run(0, true)), ["overlap"]);
    }

    #[test]
    fn both_layouts_must_be_listed() {
        let layouts = |listed: &[&str]| Event::Layouts {
            t: 10 * MS,
            worker: 0,
            layouts: listed.iter().map(|s| (*s).to_owned()).collect(),
            error: None,
        };
        let report = check(&[layouts(&["Native", "Redisson"])], None);
        assert!(counted(&report).is_empty());
        assert_eq!(report.layouts.both, 1);
        let report = check(&[layouts(&["Native"])], None);
        assert_eq!(counted(&report), ["layouts_missing"]);
    }

    #[test]
    fn redisson_holds_are_ended_by_their_own_key() {
        assert_eq!(hold_key(LockKind::Redisson, "rdsn-0"), "rdsn-0");
        assert_eq!(hold_key(LockKind::Write, "rw-0"), "lock:{rw-0}:rw:write");
        assert_eq!(hold_key(LockKind::Hot, "hot-0"), "lock:{hot-0}");
    }

    #[test]
    fn removals_replayed_by_a_restart_are_not_losses() {
        let events = [
            acq(100, 0, "w0-t0-0", 5),
            fault(1000, "restart_persistent", "start", "server 0"),
            gone(1100),
            fault(1150, "restart_persistent", "heal", "port 1"),
            rel(3000, 0, "w0-t0-0", 5, "ok"),
        ];
        let report = check(&events, None);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert_eq!(report.key_events, 0);
        // After the heal a removal counts again.
        let events = [
            acq(100, 0, "w0-t0-0", 5),
            fault(1000, "restart_persistent", "start", "server 0"),
            fault(1150, "restart_persistent", "heal", "port 1"),
            gone(1200),
            rel(3000, 0, "w0-t0-0", 5, "ok"),
        ];
        assert_eq!(counted(&check(&events, None)), ["late_lost"]);
    }

    #[test]
    fn a_failed_over_masters_removals_are_not_losses() {
        let on = |t: u64, port: u16| Event::KeyGone {
            t: t * MS,
            server: format!("127.0.0.1:{port}"),
            key: lock_key(NAME),
            how: "expired".into(),
        };
        // A hold that begins after the failover and its slack; the old master (port 1),
        // restarted with a stale copy, expires the key while the new one (2) keeps it.
        let events = [
            fault(100, "failover", "start", "lock:{chaos-0}"),
            fault(500, "failover", "heal", "master 1 -> 2"),
            acq(2000, 0, "w0-t0-0", 5),
            on(2600, 1),
            rel(4000, 0, "w0-t0-0", 5, "ok"),
        ];
        let report = check(&events, None);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert_eq!(report.key_events, 0);
        // The same removal on the new master is the lock's loss.
        let events = [
            fault(100, "failover", "start", "lock:{chaos-0}"),
            fault(500, "failover", "heal", "master 1 -> 2"),
            acq(2000, 0, "w0-t0-0", 5),
            on(2600, 2),
            rel(4000, 0, "w0-t0-0", 5, "ok"),
        ];
        assert_eq!(counted(&check(&events, None)), ["late_lost"]);
    }

    #[test]
    fn log_entries_parse() {
        assert_eq!(
            LoggedWrite::parse("w1-t2-3|7|4|4|5"),
            Some(LoggedWrite {
                hold: "w1-t2-3".into(),
                token: 7,
                read: 4,
                prev: Some(4),
                new: 5
            })
        );
        // The fenced register's log in Redis has no `prev`.
        assert_eq!(
            LoggedWrite::parse("w1|7|4|5"),
            Some(LoggedWrite {
                hold: "w1".into(),
                token: 7,
                read: 4,
                prev: None,
                new: 5
            })
        );
        assert_eq!(LoggedWrite::parse("w1|7|4"), None);
        assert_eq!(LoggedWrite::parse("w1|7|4|4|5|6"), None);
        assert_eq!(LoggedWrite::parse("w1|7|x|5"), None);
    }
}
