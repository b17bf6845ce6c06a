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
use crate::event::{Event, Register, TaskMode, WriteOutcome};
use crate::nemesis::Fault;
use crate::register::{LoggedWrite, RegisterTruth};

/// Added to the documented `lost()` bound for scheduling and recording (ms).
const LOST_ALLOWANCE: Duration = Duration::from_millis(100);
/// Key events received this soon after an acquisition may be the previous holder's key
/// going (the notification and the acquisition race to the harness), so they do not date
/// the new hold's loss.
const KEY_EVENT_GUARD: Duration = Duration::from_millis(50);
/// After a failover's heal, the old master may still answer commands already on their way
/// to it (the README's "about 100 ms"); holds that begin this soon after the heal are
/// touched too.
const FAILOVER_SLACK: Duration = Duration::from_secs(1);

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
        Fault::ALL.iter().copied().find(|f| f.name() == self.fault)
    }

    /// The worker a fault targeted (`worker N pid P`).
    fn worker(&self) -> Option<u32> {
        self.target
            .strip_prefix("worker ")
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
    }
}

/// One hold of a lock.
#[derive(Debug, Clone)]
struct Hold {
    id: String,
    worker: u32,
    mode: TaskMode,
    name: String,
    owner: String,
    token: u64,
    start: u64,
    end: u64,
    lost: Option<u64>,
    release: Option<String>,
    release_start: Option<u64>,
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
    /// Why it is excused (`pause`, `data_loss`, `stall`, `harness_stall`), or `None`: a
    /// violation.
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
            w.start + (crate::run::MIN_REPLICAS_MAX_LAG + FAILOVER_SLACK * 2).as_nanos() as u64,
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
        for v in self.violations.iter().filter(|v| v.counts()).take(20) {
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
    let bound = (lease / 3 + crate::run::RESPONSE_TIMEOUT + LOST_ALLOWANCE).as_nanos() as u64;
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
    let kills: Vec<(u64, u32)> = windows
        .iter()
        .filter(|w| w.kind() == Some(Fault::KillHolder))
        .filter_map(|w| Some((w.start, w.worker()?)))
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

    // Holds, stalls, key removals.
    let mut holds: Vec<Hold> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut stalls: Vec<(Option<u32>, u64, u64)> = Vec::new();
    let mut gone: HashMap<&str, Vec<(u64, &str)>> = HashMap::new();
    let mut key_events = 0;
    for event in events {
        match event {
            Event::Acquired {
                t,
                worker,
                hold,
                mode,
                name,
                owner,
                token,
                ..
            } => {
                index.insert(hold.clone(), holds.len());
                holds.push(Hold {
                    id: hold.clone(),
                    worker: *worker,
                    mode: *mode,
                    name: name.clone(),
                    owner: owner.clone(),
                    token: *token,
                    start: *t,
                    end: u64::MAX,
                    lost: None,
                    release: None,
                    release_start: None,
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
                }
                if result == "backend" {
                    rows[row_at(*t)].errors += 1;
                }
            }
            _ => {}
        }
    }
    for h in &mut holds {
        if h.end == u64::MAX {
            // Killed mid-hold, or still holding when the run stopped.
            h.end = kills
                .iter()
                .find(|(t, w)| *w == h.worker && *t >= h.start)
                .map_or(run_end, |(t, _)| *t);
        }
        rows[row_at(h.start)].holds += 1;
        // What a fault could have done to this hold.
        for w in &windows {
            match w.kind() {
                Some(Fault::PauseHolder)
                    if w.worker() == Some(h.worker)
                        && intersects(h.start, h.end, w.start, w.heal) =>
                {
                    h.touched.insert("pause");
                }
                _ => {
                    if let Some((from, to)) = loss_span(backend, w) {
                        if intersects(h.start, h.end, from, to) {
                            h.touched.insert("data_loss");
                        }
                    }
                }
            }
        }
        if redlock_empty_restart_of_a_reduced_lock(backend, h, &windows, lease) {
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
    let counter_lost_between = |from: u64, to: u64| {
        windows
            .iter()
            .any(|w| loses_counter(backend, w) && w.start >= from && w.start <= to)
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
                if a.owner != b.owner && a.end > b.start {
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
                    let excuse = counter_lost_between(a.start, b.start).then_some("data_loss");
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
        let key = lock_key(name);
        let key_gone = gone.get(key.as_str());
        for (j, h) in list.iter().enumerate() {
            let horizon = h.lost.or(h.release_start).unwrap_or(h.end);
            let successor = list[j + 1..]
                .iter()
                .filter(|b| b.owner != h.owner && b.start > h.start && b.start <= horizon)
                .map(|b| b.start)
                .min();
            let truth_until = successor.unwrap_or(horizon).min(horizon);
            // Redlock holds the lock while a majority of masters has the key: it is gone
            // when the key went on a majority (each master reports its own copy).
            let server = key_gone.and_then(|times| {
                let mut servers: BTreeSet<&str> = BTreeSet::new();
                times
                    .iter()
                    .filter(|(t, _)| *t >= h.start + guard && *t <= truth_until)
                    .find(|(_, server)| {
                        servers.insert(server);
                        servers.len() >= quorum
                    })
                    .map(|(t, _)| *t)
            });
            let destroyed = windows
                .iter()
                .filter(|w| {
                    loss_span(backend, w).is_some() && w.start >= h.start && w.start <= horizon
                })
                .map(|w| w.start)
                .min();
            let loss = [server, successor, destroyed].into_iter().flatten().min();
            let source = if loss.is_some() && loss == server {
                "the server reported the key gone"
            } else if loss.is_some() && loss == successor {
                "another owner acquired"
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
                    let row = row_at(t);
                    rows[row].release_first_losses += 1;
                    push_anomaly(&mut rows, &mut violations, row, &[h], None, Violation {
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
            h.lost.is_none() && matches!(h.release.as_deref(), Some("ok" | "macro"))
        }) && !overlapped.contains(hold)
    };
    let mut intents: HashMap<(&str, Register), u64> = HashMap::new();
    // What the worker saw of each accepted write: when, the value read, the value replaced.
    type Answer = (u64, Option<i64>, Option<i64>);
    let mut answered: HashMap<(&str, Register), Answer> = HashMap::new();
    let mut fenced_accepted_at: Vec<u64> = Vec::new();
    for event in events {
        match event {
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
            let mut consistent = true;
            for entry in &r.log {
                let Some(e) = entry else {
                    consistent = false;
                    continue;
                };
                register.applied += 1;
                logged.insert((e.hold.as_str(), r.register));
                if e.prev != expect || e.new != e.read + 1 {
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
                    Some((_, read, prev)) if read != Some(e.read) || prev != Some(e.prev) => {
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
                if e.read != e.prev {
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
                    push_anomaly(&mut rows, &mut violations, row, &involved, None, Violation {
                        kind: kind.into(),
                        backend: backend.into(),
                        fault: fault_at(t),
                        name: r.name.clone(),
                        at_ms: at_ms(t),
                        holds: Vec::new(),
                        excused: None,
                        detail: format!(
                            "{what}: hold {} (token {}) read {} but overwrote {} (written by {}){}",
                            e.hold,
                            e.token,
                            e.read,
                            e.prev,
                            previous.map_or("nobody", |p| p.hold.as_str()),
                            if reply.is_none() { "; its answer never reached the worker" } else { "" }
                        ),
                    });
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
    }

    #[test]
    fn log_entries_parse() {
        assert_eq!(
            LoggedWrite::parse("w1-t2-3|7|4|4|5"),
            Some(LoggedWrite {
                hold: "w1-t2-3".into(),
                token: 7,
                read: 4,
                prev: 4,
                new: 5
            })
        );
        assert_eq!(LoggedWrite::parse("w1|7|4|4"), None);
    }
}
