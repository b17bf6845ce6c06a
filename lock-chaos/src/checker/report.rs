//! The figures of a run: rows per fault, violations, the register store's and the
//! scheduler's findings, the Markdown tables and JSON lines.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use serde::Serialize;

use super::holds::{reason, Hold};
use super::LISTED_VIOLATIONS;

/// The leader workload's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LeaderFigures {
    /// Terms granted and recorded (every campaign that won).
    pub terms: usize,
    /// Of those, run by `Election::run`.
    pub run_terms: usize,
    /// Of the run loop's terms, those whose work it dropped at a loss.
    pub dropped_at_loss: usize,
    /// Terms the store dated the end of: the role's key expired on the server (during the
    /// term, or within a lease after its work ended and before another term began, without
    /// a deletion first), or an untouched successor began during the term.
    pub judged: usize,
    /// Of those, terms whose work was dropped at a loss (or saw `lost()`).
    pub judged_lost: usize,
    /// The latest end of such a lost term's work relative to that expiry, ms (negative:
    /// before it, as the local deadline comes first), over the terms no fault touched.
    pub end_after_expiry_max_ms: Option<f64>,
    /// Fault injections whose window met a term they could reach.
    pub faults_hit: usize,
    /// Observers (workers) and the changes they were given.
    pub observers: usize,
    /// See above.
    pub observed_changes: usize,
    /// From a term's grant (as its worker recorded it) to an observer's view of it, ms:
    /// median and maximum over (term, observer) pairs where the observer saw the term.
    pub observe_latency_p50_ms: Option<f64>,
    /// See above.
    pub observe_latency_max_ms: Option<f64>,
    /// (term, observer) pairs the observer never saw (coalesced: a later change came first).
    pub observe_skipped: usize,
    /// The longest time the role had a campaigner and no leader, outside faults and the
    /// campaigner's stalls, ms (the liveness figure of kind `leader`).
    pub no_leader_max_ms: Option<f64>,
    /// Anomalies of leader terms (their first hold a term) and observers that count, and
    /// excused ones.
    pub violations: usize,
    /// See above.
    pub excused: usize,
    /// How long after the role's expiry a term's work may still run (the checker's
    /// allowance), ms.
    pub drop_allowance_ms: u128,
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

/// One anomaly, written to the JSON lines output.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// `overlap`, `stale_write_accepted`, `token_regression`, `duplicate_token`,
    /// `equal_token_writes`, `lost_write`, `loss_first_seen_at_release`, `late_lost`,
    /// `liveness_gap` (a lock free while wanted for longer than its kind's bound),
    /// `lost_update` (unfenced: never a violation), or a register-store check
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
    /// `net_fault`; for a duplicate token only `server_clock_back`), or `None`: a violation.
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
    /// Tokens granted to two holders of one lock (counted once per extra holder): never
    /// excused by a data loss, only by a step back of the server's clock.
    pub duplicate_tokens: usize,
    /// Fenced writes applied under a token another holder had written the same register
    /// with (the fence's `<=` rule lets both through).
    pub equal_token_writes: usize,
    /// Acknowledged fenced writes that a later holder's fenced read, or the register's
    /// final state, does not see.
    pub lost_writes: usize,
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
    /// `force_release`: holds an operator's force release deleted while they were held
    /// (counted in the force release's row).
    pub force_released: usize,
    /// Of those, the ones whose `lost()` fired.
    pub force_released_lost: usize,
    /// Their latencies from the deletion (the server's `del` event, or the first other
    /// sign of the loss) to `lost()`, ms.
    #[serde(skip)]
    pub force_released_lost_ms: Vec<f64>,
    /// Median of those, ms.
    pub force_released_lost_p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub force_released_lost_p99_ms: Option<f64>,
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
    /// Of those, fenced reads and writes answered `NotReplicated` (`--fence-store
    /// lock-redis`: ran on the master, too few replicas acknowledged; an unknown outcome).
    pub not_replicated: usize,
    /// Injections whose trigger found a long hold with a waiter before its bound (the
    /// nemesis's word, recorded at the start).
    pub triggered: usize,
    /// Injections that hit a lock somebody wanted, decided from the history
    /// ([`crate::trigger::effect`]: a hold of the target lock in progress for at least a
    /// third of the lease at the fault's start, and another task's acquisition in flight).
    pub effective: usize,
    /// One-sided 95% upper confidence bounds (Clopper-Pearson) of each anomaly's rate per
    /// effective injection, by anomaly (`violations`, `overlaps`, `stale_writes_accepted`,
    /// `token_regressions`, `duplicate_tokens`, `equal_token_writes`, `lost_writes`,
    /// `late_lost`, `release_first_losses`); empty without effective injections.
    pub upper95: BTreeMap<String, f64>,
}

impl Row {
    /// Fills [`Row::upper95`] from the counts and [`Row::effective`].
    pub(super) fn fill_bounds(&mut self) {
        self.upper95.clear();
        if self.effective == 0 {
            return;
        }
        for (name, k) in [
            ("violations", self.violations),
            ("overlaps", self.overlaps),
            ("stale_writes_accepted", self.stale_writes_accepted),
            ("token_regressions", self.token_regressions),
            ("duplicate_tokens", self.duplicate_tokens),
            ("equal_token_writes", self.equal_token_writes),
            ("lost_writes", self.lost_writes),
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
pub(super) fn binomial_cdf(k: usize, n: usize, p: f64) -> f64 {
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

impl Row {
    pub(super) fn finish(&mut self) {
        self.loss_latency_ms
            .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        self.loss_latency_p50_ms = percentile(&self.loss_latency_ms, 0.50);
        self.loss_latency_p99_ms = percentile(&self.loss_latency_ms, 0.99);
        self.force_released_lost_ms
            .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        self.force_released_lost_p50_ms = percentile(&self.force_released_lost_ms, 0.50);
        self.force_released_lost_p99_ms = percentile(&self.force_released_lost_ms, 0.99);
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
    /// How long a lock of this kind sat free while wanted (see [`Liveness`]).
    #[serde(flatten)]
    pub liveness: Liveness,
}

/// Liveness figures: how long a lock sat free while another task was asking for it, outside fault windows that
/// could reach it and stalls of the waiting worker (a swallowed wake-up, a waiter sleeping
/// until the lease ran out). Each gap above its kind's bound is also a `liveness_gap`
/// violation.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Liveness {
    /// The longest such gap, ms (`None`: no gap with a waiter).
    pub free_while_wanted_max_ms: Option<f64>,
    /// Where and when that gap was.
    pub free_while_wanted_worst: Option<WorstGap>,
    /// Acquisitions that timed out although their lock was free for more than half of
    /// their wait, outside fault windows and stalls of their worker.
    pub timeouts_while_free: usize,
}

/// The longest "free while wanted" gap: which lock, when, and who was waiting.
#[derive(Debug, Clone, Serialize)]
pub struct WorstGap {
    /// The waiting acquisition's kind of lock.
    pub kind: String,
    /// Lock name.
    pub name: String,
    /// Start of the gap, ms since the run's start.
    pub from_ms: f64,
    /// End of the gap, ms since the run's start.
    pub to_ms: f64,
    /// The waiting worker.
    pub worker: u32,
    /// The waiting task.
    pub task: u32,
}

impl Liveness {
    /// The figures in one line of text.
    pub fn text(&self) -> String {
        let gap = match (
            &self.free_while_wanted_max_ms,
            &self.free_while_wanted_worst,
        ) {
            (Some(ms), Some(w)) => format!(
                "max {ms:.0} ms ({} {} from {:.0} to {:.0} ms, waiter w{}-t{})",
                w.kind, w.name, w.from_ms, w.to_ms, w.worker, w.task
            ),
            _ => "none".to_owned(),
        };
        format!(
            "free while wanted: {gap}; timeouts while free: {}",
            self.timeouts_while_free
        )
    }
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
    /// Late timers of workers' async runtimes (liveness only).
    pub runtimes: usize,
    /// Longest of those, ms.
    pub runtimes_max_ms: f64,
}

/// Errors, with the `NotReplicated` answers among them when there were any.
fn fmt_errors(errors: usize, not_replicated: usize) -> String {
    if not_replicated > 0 {
        format!("{errors} ({not_replicated})")
    } else {
        errors.to_string()
    }
}

/// The fencing checks' counts of a backend (excused or not; see [`Row`]).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Fencing {
    /// Tokens granted to two holders of one lock.
    pub duplicate_tokens: usize,
    /// Fenced writes applied under a token another holder had written the same register with.
    pub equal_token_writes: usize,
    /// Acknowledged fenced writes not seen later.
    pub lost_writes: usize,
    /// Fenced reads and writes answered `NotReplicated` (unknown outcomes, not acknowledged).
    pub not_replicated: usize,
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
    /// Locks free while wanted, over every kind.
    pub liveness: Liveness,
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
    /// The leader workload's figures (`None`: it did not run).
    pub leader: Option<LeaderFigures>,
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

    /// The fencing checks' counts over every row.
    pub fn fencing(&self) -> Fencing {
        let sum = |f: &dyn Fn(&Row) -> usize| self.rows.iter().map(f).sum::<usize>();
        Fencing {
            duplicate_tokens: sum(&|r| r.duplicate_tokens),
            equal_token_writes: sum(&|r| r.equal_token_writes),
            lost_writes: sum(&|r| r.lost_writes),
            not_replicated: sum(&|r| r.not_replicated),
        }
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
             token regr. | dup. tokens | equal-token writes | lost writes | loss first at release | late lost() | unfenced lost upd. | \
             fenced ok / rejected | valid rejected | lost() | loss->lost p50 / p99 ms | \
             no observed loss | kill->next acquire max ms | heal->fenced write max ms | \
             timeouts | errors (not replicated) | effective (trigger / history) | 95% upper bound per effective \
             injection: violations / overlaps / stale / regr. / late lost() |\n",
        );
        out.push_str(
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            let violations = if r.violations > 0 {
                format!("**{}** !", r.violations)
            } else {
                "0".to_owned()
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} | {} | {} / {} | {} | {} | {} | {} | {} | {} / {} | {} |\n",
                r.fault,
                r.injections,
                r.holds,
                violations,
                fmt_reasons(r.excused, &r.excused_by),
                r.overlaps,
                r.stale_writes_accepted,
                r.token_regressions,
                r.duplicate_tokens,
                r.equal_token_writes,
                r.lost_writes,
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
                fmt_errors(r.errors, r.not_replicated),
                r.triggered,
                r.effective,
                fmt_bounds(&r.upper95),
            ));
        }
        for r in self.rows.iter().filter(|r| r.force_released > 0) {
            out.push_str(&format!(
                "\nForce release: {} holds deleted by an operator while held; {} saw lost(), \
                 {} / {} ms (p50 / p99) after the deletion (bound as for any loss).\n",
                r.force_released,
                r.force_released_lost,
                fmt_ms(r.force_released_lost_p50_ms),
                fmt_ms(r.force_released_lost_p99_ms),
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
        let f = self.fencing();
        out.push_str(&format!(
            "Fencing: {} tokens granted to two holders, {} fenced writes applied under a token \
             another holder had written with, {} acknowledged fenced writes lost (not seen by a \
             later holder's read or the register's final state); {} fenced operations answered \
             NotReplicated (unknown outcome, not acknowledged).\n",
            f.duplicate_tokens, f.equal_token_writes, f.lost_writes, f.not_replicated
        ));
        let s = &self.stalls;
        out.push_str(&format!(
            "Stalls (woke > {} ms late): workers {} (max {:.0} ms), harness {} (max {:.0} ms); \
             workers' async runtimes {} (max {:.0} ms, liveness only). \
             Key removals reported by the servers: {}.\n",
            crate::worker::STALL_THRESHOLD.as_millis(),
            s.workers,
            s.workers_max_ms,
            s.harness,
            s.harness_max_ms,
            s.runtimes,
            s.runtimes_max_ms,
            self.key_events
        ));
        out.push_str(&format!(
            "Liveness (outside faults and stalls; a gap above its kind's bound is a `liveness_gap` violation): {}.\n",
            self.liveness.text()
        ));
        let by_kind: Vec<String> = self
            .kinds
            .iter()
            .filter(|(_, f)| {
                f.liveness.free_while_wanted_max_ms.is_some() || f.liveness.timeouts_while_free > 0
            })
            .map(|(k, f)| format!("{k}: {}", f.liveness.text()))
            .collect();
        if by_kind.len() > 1 {
            out.push_str(&format!("Liveness by kind: {}.\n", by_kind.join("; ")));
        }
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
        if let Some(l) = &self.leader {
            out.push_str(&format!(
                "Leader election: {} terms ({} by the run loop, {} of them dropped at a loss), {} faults met a term; {} terms ended by the store (expiry or successor), {} of them lost: work dropped at most {} ms after the expiry (untouched terms; allowance {} ms); no leader while a campaigner waited: max {} ms; {} observers, {} changes, grant->view p50 / max {} / {} ms, {} skipped (coalesced); {} violations, {} excused.\n",
                l.terms,
                l.run_terms,
                l.dropped_at_loss,
                l.faults_hit,
                l.judged,
                l.judged_lost,
                fmt_ms(l.end_after_expiry_max_ms),
                l.drop_allowance_ms,
                fmt_ms(l.no_leader_max_ms),
                l.observers,
                l.observed_changes,
                fmt_ms(l.observe_latency_p50_ms),
                fmt_ms(l.observe_latency_max_ms),
                l.observe_skipped,
                l.violations,
                l.excused,
            ));
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
            "fencing": self.fencing(),
            "register": self.register,
            "stalls": self.stalls,
            "liveness": self.liveness,
            "key_events": self.key_events,
            "kinds": self.kinds,
            "layouts": self.layouts,
            "harness": self.harness,
            "leader": self.leader,
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
pub(super) fn fmt_bounds(upper: &BTreeMap<String, f64>) -> String {
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

pub(super) fn fmt_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.0}"))
}

pub(super) fn fmt_reasons(total: usize, by: &BTreeMap<String, usize>) -> String {
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
         overlaps | stale accepted | token regr. | dup. tokens | equal-token writes | lost writes | \
         loss first at release | late lost() | \
         unfenced lost updates | indeterminate writes resolved | register check | stalls workers / harness (max ms) | \
         loss->lost p50 / p99 ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for report in reports {
        let mut latencies = report.all_latencies.clone();
        latencies.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let sum = |f: &dyn Fn(&Row) -> usize| report.rows.iter().map(f).sum::<usize>();
        let by = report.excused_by();
        let reg = &report.register;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} ({:.0} / {:.0}) | {} / {} |\n",
            report.backend,
            report.faults(),
            report.holds(),
            report.unexcused(),
            fmt_reasons(by.values().sum(), &by),
            sum(&|r| r.overlaps),
            sum(&|r| r.stale_writes_accepted),
            sum(&|r| r.token_regressions),
            sum(&|r| r.duplicate_tokens),
            sum(&|r| r.equal_token_writes),
            sum(&|r| r.lost_writes),
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

/// Records one anomaly: a violation unless `excuse` (or a touched hold involved) says why
/// a fault may have caused it.
pub(super) fn push_anomaly(
    rows: &mut [Row],
    out: &mut Vec<Violation>,
    row: usize,
    involved: &[&Hold],
    excuse: Option<&'static str>,
    v: Violation,
) {
    let excused = involved.iter().find_map(|h| reason(h)).or(excuse);
    record(rows, out, row, involved, excused, v);
}

/// Records one anomaly of fencing itself (a token granted to two holders, two holders'
/// writes under one token, a lost fenced write): a violation unless `excuse` says why. What
/// touched the holds involved (their worker paused or stalled, the lock's data lost under
/// them) does not excuse it: the README promises unique tokens, and acknowledged fenced
/// writes, across those faults.
pub(super) fn push_fencing_anomaly(
    rows: &mut [Row],
    out: &mut Vec<Violation>,
    row: usize,
    involved: &[&Hold],
    excuse: Option<&'static str>,
    v: Violation,
) {
    record(rows, out, row, involved, excuse, v);
}

fn record(
    rows: &mut [Row],
    out: &mut Vec<Violation>,
    row: usize,
    involved: &[&Hold],
    excused: Option<&'static str>,
    mut v: Violation,
) {
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
