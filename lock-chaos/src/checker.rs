//! The checker: reads a recorded history and counts, per fault window, what went wrong.
//!
//! A fault's window runs from its start to the next fault's start (or the end of the run),
//! so it covers the fault, its healing and the settling after it; events before the first
//! fault fall in the `none` window. The holds of a lock are the intervals in which a worker
//! believed it held it: from the moment `acquire` returned to the first of `lost()` firing,
//! the start of the release, or the worker's death.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::clock::ms_between;
use crate::event::{Event, Register, WriteOutcome};
use crate::nemesis::Fault;

/// One fault injection as the nemesis recorded it.
#[derive(Debug, Clone)]
struct Window {
    fault: String,
    start: u64,
    heal: u64,
    end: u64,
}

/// One hold of a lock.
#[derive(Debug, Clone)]
struct Hold {
    worker: u32,
    task: u32,
    name: String,
    owner: String,
    token: u64,
    start: u64,
    end: u64,
    lost: Option<u64>,
    release: Option<String>,
}

/// One anomaly, written to the JSON lines output.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    /// `overlap`, `stale_write_accepted`, `token_regression`, `lost_update` (unfenced).
    pub kind: String,
    /// Backend.
    pub backend: String,
    /// The window's fault.
    pub fault: String,
    /// Lock name.
    pub name: String,
    /// Milliseconds since the start of the run.
    pub at_ms: f64,
    /// What exactly (owners, tokens, values).
    pub detail: String,
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
    /// Whether the README promises mutual exclusion under this fault.
    pub exclusion_claimed: bool,
    /// Whether the README promises the fenced resource rejects every stale write.
    pub fencing_claimed: bool,
    /// Holds that began in the window.
    pub holds: usize,
    /// Pairs of overlapping holds of one lock by two owners.
    pub overlaps: usize,
    /// Longest overlap, ms.
    pub overlap_max_ms: f64,
    /// Unfenced writes applied.
    pub unfenced_writes: usize,
    /// Unfenced writes that overwrote a write they had not read (lost updates).
    pub unfenced_lost_updates: usize,
    /// Fenced writes applied.
    pub fenced_accepted: usize,
    /// Fenced reads or writes refused as stale.
    pub fenced_rejected: usize,
    /// Of those, refusals of a holder that never lost its lock (tokens that went back).
    pub valid_holder_rejected: usize,
    /// Fenced writes applied although they overwrote a write they had not read.
    pub stale_writes_accepted: usize,
    /// Holds whose token was not above that of a hold of the lock that had ended before.
    pub token_regressions: usize,
    /// `lost()` firings.
    pub lost_fired: usize,
    /// Firings with an observable loss time (a successor acquired, or the data was
    /// destroyed), and their latency.
    #[serde(skip)]
    pub loss_latency_ms: Vec<f64>,
    /// Median loss-to-`lost()` latency, ms.
    pub loss_latency_p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub loss_latency_p99_ms: Option<f64>,
    /// Firings without an observable loss (declared before Redis could expire the key).
    pub lost_without_observed_loss: usize,
    /// From each heal to the first fenced write accepted after it: the longest, ms.
    pub recovery_max_ms: Option<f64>,
    /// Acquisitions that timed out.
    pub acquire_timeouts: usize,
    /// Operations that failed with an error (acquire, release, register).
    pub errors: usize,
}

impl Row {
    fn finish(&mut self) {
        self.loss_latency_ms
            .sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        self.loss_latency_p50_ms = percentile(&self.loss_latency_ms, 0.50);
        self.loss_latency_p99_ms = percentile(&self.loss_latency_ms, 0.99);
    }

    /// Violations of a README claim in this row.
    pub fn claim_violations(&self) -> usize {
        let exclusion = if self.exclusion_claimed {
            self.overlaps
        } else {
            0
        };
        let fencing = if self.fencing_claimed {
            self.stale_writes_accepted
        } else {
            0
        };
        exclusion + fencing
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

/// The figures of one backend.
#[derive(Debug, Clone, Serialize)]
pub struct BackendReport {
    /// Backend.
    pub backend: String,
    /// Run length, s.
    pub duration_s: f64,
    /// One row per fault (and `none`).
    pub rows: Vec<Row>,
    /// Every anomaly found.
    pub violations: Vec<Violation>,
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

    /// The table, as Markdown.
    pub fn table(&self) -> String {
        let mut out = format!(
            "\n### {} ({:.0} s, {} faults, {} holds checked)\n\n",
            self.backend,
            self.duration_s,
            self.faults(),
            self.holds()
        );
        out.push_str(
            "| fault | n | holds | overlaps | unfenced lost upd. | fenced ok / rejected | \
             valid rejected | stale accepted | token regr. | lost() | loss->lost p50 / p99 ms | \
             no observed loss | recovery max ms | timeouts | errors |\n",
        );
        out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for r in &self.rows {
            let mark = |count: usize, claimed: bool| {
                if count > 0 && claimed {
                    format!("**{count}** !")
                } else {
                    count.to_string()
                }
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} / {} | {} / {} | {} | {} | {} | {} | {} / {} | {} | {} | {} | {} |\n",
                r.fault,
                r.injections,
                r.holds,
                mark(r.overlaps, r.exclusion_claimed),
                r.unfenced_lost_updates,
                r.unfenced_writes,
                r.fenced_accepted,
                r.fenced_rejected,
                r.valid_holder_rejected,
                mark(r.stale_writes_accepted, r.fencing_claimed),
                r.token_regressions,
                r.lost_fired,
                fmt_ms(r.loss_latency_p50_ms),
                fmt_ms(r.loss_latency_p99_ms),
                r.lost_without_observed_loss,
                fmt_ms(r.recovery_max_ms),
                r.acquire_timeouts,
                r.errors,
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
        for violation in &self.violations {
            let mut value = serde_json::to_value(violation)?;
            value["record"] = "violation".into();
            writeln!(file, "{value}")?;
        }
        Ok(())
    }
}

fn fmt_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.0}"))
}

/// The closing summary over all backends.
pub fn summary(reports: &[BackendReport]) -> String {
    let mut out = String::from("\n### Summary\n\n| backend | faults injected | holds checked | overlaps (claimed safe) | stale accepted (claimed safe) | unfenced lost updates | loss->lost p50 / p99 ms |\n|---|---|---|---|---|---|---|\n");
    for report in reports {
        let mut latencies = report.all_latencies.clone();
        latencies.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let sum = |f: &dyn Fn(&Row) -> usize| report.rows.iter().map(f).sum::<usize>();
        out.push_str(&format!(
            "| {} | {} | {} | {} ({}) | {} ({}) | {} | {} / {} |\n",
            report.backend,
            report.faults(),
            report.holds(),
            sum(&|r| r.overlaps),
            sum(&|r| if r.exclusion_claimed { r.overlaps } else { 0 }),
            sum(&|r| r.stale_writes_accepted),
            sum(&|r| if r.fencing_claimed {
                r.stale_writes_accepted
            } else {
                0
            }),
            sum(&|r| r.unfenced_lost_updates),
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

/// Checks one backend's history.
pub fn analyze(
    backend: &str,
    events: &[Event],
    lease: Duration,
    run_start: u64,
    run_end: u64,
) -> BackendReport {
    // Fault windows, in time order.
    let mut windows: Vec<Window> = Vec::new();
    let mut faults: Vec<(u64, &str, &str, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fault {
                t,
                fault,
                phase,
                target,
                ..
            } => Some((*t, fault.as_str(), phase.as_str(), target.as_str())),
            _ => None,
        })
        .collect();
    faults.sort_by_key(|f| f.0);
    let mut kills: Vec<(u64, u32)> = Vec::new();
    for (t, fault, phase, target) in &faults {
        if *phase == "start" {
            windows.push(Window {
                fault: (*fault).to_owned(),
                start: *t,
                heal: *t,
                end: run_end,
            });
            if *fault == "kill_holder" {
                if let Some(worker) = target
                    .strip_prefix("worker ")
                    .and_then(|s| s.split(' ').next())
                    .and_then(|s| s.parse().ok())
                {
                    kills.push((*t, worker));
                }
            }
        } else if let Some(w) = windows.last_mut() {
            w.heal = *t;
        }
    }
    for i in 1..windows.len() {
        windows[i - 1].end = windows[i].start;
    }

    // Rows: `none`, then one per fault kind in order of first injection.
    let mut rows: Vec<Row> = Vec::new();
    let mut row_of_fault: HashMap<String, usize> = HashMap::new();
    let claims = |name: &str| -> (bool, bool) {
        let fault = Fault::ALL.iter().find(|f| f.name() == name);
        fault.map_or((true, true), |f| {
            (f.exclusion_claimed(), f.fencing_claimed())
        })
    };
    for name in std::iter::once("none").chain(windows.iter().map(|w| w.fault.as_str())) {
        if !row_of_fault.contains_key(name) {
            let (exclusion_claimed, fencing_claimed) = claims(name);
            row_of_fault.insert(name.to_owned(), rows.len());
            rows.push(Row {
                backend: backend.to_owned(),
                fault: name.to_owned(),
                exclusion_claimed,
                fencing_claimed,
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

    // Holds.
    type HoldKey = (u32, u32, String, u64);
    let mut holds: BTreeMap<HoldKey, Hold> = BTreeMap::new();
    for event in events {
        match event {
            Event::Acquired {
                t,
                worker,
                task,
                name,
                owner,
                token,
                ..
            } => {
                holds.insert(
                    (*worker, *task, name.clone(), *token),
                    Hold {
                        worker: *worker,
                        task: *task,
                        name: name.clone(),
                        owner: owner.clone(),
                        token: *token,
                        start: *t,
                        end: u64::MAX,
                        lost: None,
                        release: None,
                    },
                );
            }
            Event::AcquireFailed { t, kind, .. } => {
                let row = &mut rows[row_at(*t)];
                if kind == "timed_out" {
                    row.acquire_timeouts += 1;
                } else {
                    row.errors += 1;
                }
            }
            _ => {}
        }
    }
    for event in events {
        match event {
            Event::Lost {
                t,
                worker,
                task,
                name,
                token,
                ..
            } => {
                if let Some(h) = holds.get_mut(&(*worker, *task, name.clone(), *token)) {
                    h.lost = Some(h.lost.map_or(*t, |l| l.min(*t)));
                    h.end = h.end.min(*t);
                }
            }
            Event::Released {
                t_start,
                t,
                worker,
                task,
                name,
                token,
                result,
                ..
            } => {
                if let Some(h) = holds.get_mut(&(*worker, *task, name.clone(), *token)) {
                    h.end = h.end.min(*t_start);
                    h.release = Some(result.clone());
                }
                if result == "backend" {
                    rows[row_at(*t)].errors += 1;
                }
            }
            _ => {}
        }
    }
    let mut holds: Vec<Hold> = holds.into_values().collect();
    for h in &mut holds {
        if h.end == u64::MAX {
            // Killed mid-hold, or still holding when the run stopped.
            h.end = kills
                .iter()
                .find(|(t, w)| *w == h.worker && *t >= h.start)
                .map_or(run_end, |(t, _)| *t);
        }
        rows[row_at(h.start)].holds += 1;
    }

    let mut violations = Vec::new();
    let mut all_latencies = Vec::new();
    let mut by_name: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for h in &holds {
        by_name.entry(h.name.as_str()).or_default().push(h);
    }
    let mut overlapped: std::collections::HashSet<(u32, u32, u64)> = Default::default();
    for (name, list) in &mut by_name {
        list.sort_by_key(|h| h.start);
        // Overlaps: a hold that began while another owner's was still believed.
        for (j, b) in list.iter().enumerate() {
            for a in &list[..j] {
                if a.owner != b.owner && a.end > b.start {
                    let row = &mut rows[row_at(b.start)];
                    row.overlaps += 1;
                    let ms = ms_between(b.start, a.end.min(b.end));
                    row.overlap_max_ms = row.overlap_max_ms.max(ms);
                    overlapped.insert((a.worker, a.task, a.token));
                    overlapped.insert((b.worker, b.task, b.token));
                    violations.push(Violation {
                        kind: "overlap".into(),
                        backend: backend.into(),
                        fault: fault_at(b.start),
                        name: (*name).into(),
                        at_ms: at_ms(b.start),
                        detail: format!(
                            "{} (token {}, worker {}) still held for {ms:.0} ms when {} (token {}, worker {}) acquired; first lost() {}",
                            a.owner,
                            a.token,
                            a.worker,
                            b.owner,
                            b.token,
                            b.worker,
                            a.lost.map_or("never".to_owned(), |l| format!("{:.0} ms after", ms_between(b.start, l)))
                        ),
                    });
                }
            }
        }
        // Token order: above every hold of another owner that had ended before.
        let mut ended: Vec<&Hold> = list.clone();
        ended.sort_by_key(|h| h.end);
        let (mut next, mut max_ended): (usize, Option<&Hold>) = (0, None);
        for b in list.iter() {
            while next < ended.len() && ended[next].end <= b.start {
                if max_ended.is_none_or(|m| ended[next].token > m.token) {
                    max_ended = Some(ended[next]);
                }
                next += 1;
            }
            if let Some(a) = max_ended {
                if a.owner != b.owner && b.token <= a.token {
                    rows[row_at(b.start)].token_regressions += 1;
                    violations.push(Violation {
                        kind: "token_regression".into(),
                        backend: backend.into(),
                        fault: fault_at(b.start),
                        name: (*name).into(),
                        at_ms: at_ms(b.start),
                        detail: format!(
                            "{} got token {} after {} had held it with token {}",
                            b.owner, b.token, a.owner, a.token
                        ),
                    });
                }
            }
        }
        // Loss-to-lost() latency.
        for (j, a) in list.iter().enumerate() {
            let Some(lost) = a.lost else { continue };
            rows[row_at(lost)].lost_fired += 1;
            let successor = list[j + 1..]
                .iter()
                .filter(|b| b.owner != a.owner && b.start <= lost)
                .map(|b| b.start)
                .min();
            let destroyed = windows
                .iter()
                .filter(|w| {
                    Fault::ALL
                        .iter()
                        .any(|f| f.name() == w.fault && f.destroys_lock())
                        && w.start >= a.start
                        && w.start <= lost
                })
                .map(|w| w.start)
                .min();
            match successor.into_iter().chain(destroyed).min() {
                Some(loss) => {
                    let ms = ms_between(loss, lost);
                    rows[row_at(lost)].loss_latency_ms.push(ms);
                    all_latencies.push(ms);
                }
                None => rows[row_at(lost)].lost_without_observed_loss += 1,
            }
        }
    }

    // Registers.
    let clean = |worker: u32, task: u32, name: &str, token: u64| {
        holds.iter().any(|h| {
            h.worker == worker
                && h.task == task
                && h.name == name
                && h.token == token
                && h.lost.is_none()
                && matches!(h.release.as_deref(), Some("ok" | "macro"))
        }) && !overlapped.contains(&(worker, task, token))
    };
    let mut first_write_after: Vec<Option<u64>> = vec![None; windows.len()];
    for event in events {
        let Event::Write {
            t,
            worker,
            task,
            name,
            token,
            register,
            outcome,
            read,
            prev,
            seen,
        } = event
        else {
            continue;
        };
        let row = &mut rows[row_at(*t)];
        match (register, outcome) {
            (_, WriteOutcome::Error) => row.errors += 1,
            (Register::Unfenced, WriteOutcome::Accepted) => {
                row.unfenced_writes += 1;
                if read != prev {
                    row.unfenced_lost_updates += 1;
                    violations.push(Violation {
                        kind: "lost_update".into(),
                        backend: backend.into(),
                        fault: fault_at(*t),
                        name: name.clone(),
                        at_ms: at_ms(*t),
                        detail: format!(
                            "unfenced: worker {worker} (token {token}) read {read:?} but overwrote {prev:?}"
                        ),
                    });
                }
            }
            (Register::Fenced, WriteOutcome::Accepted) => {
                row.fenced_accepted += 1;
                if read != prev {
                    row.stale_writes_accepted += 1;
                    violations.push(Violation {
                        kind: "stale_write_accepted".into(),
                        backend: backend.into(),
                        fault: fault_at(*t),
                        name: name.clone(),
                        at_ms: at_ms(*t),
                        detail: format!(
                            "fenced: worker {worker} (token {token}) read {read:?} but overwrote {prev:?}"
                        ),
                    });
                }
                for (i, w) in windows.iter().enumerate() {
                    if *t >= w.heal {
                        first_write_after[i] = Some(first_write_after[i].map_or(*t, |f| f.min(*t)));
                    }
                }
            }
            (Register::Fenced, _) => {
                row.fenced_rejected += 1;
                if clean(*worker, *task, name, *token) {
                    row.valid_holder_rejected += 1;
                    let _ = seen;
                }
            }
            (Register::Unfenced, _) => {}
        }
    }
    for (i, w) in windows.iter().enumerate() {
        if let Some(t) = first_write_after[i] {
            let row = &mut rows[row_of_fault[&w.fault]];
            let ms = ms_between(w.heal, t).max(0.0);
            row.recovery_max_ms = Some(row.recovery_max_ms.map_or(ms, |m: f64| m.max(ms)));
        }
    }
    for row in &mut rows {
        row.finish();
    }
    let _ = lease;
    BackendReport {
        backend: backend.to_owned(),
        duration_s: ms_between(run_start, run_end) / 1000.0,
        rows,
        violations,
        all_latencies,
    }
}
