//! The leader workload's own rules and figures (see `leader.rs` for what the workers do).
//!
//! A leader's term is a hold of kind `leader` of the role's lock (`leader:<role>`): from the
//! campaign's return (or the run loop's call of the work) to the work's drop, its return, or
//! the `lost()` a careless leader saw. The shared hold rules judge them with a leader's
//! names: two terms of different owners overlapping on the harness's clock are
//! `two_leaders` (excused by a data loss, a stall of either worker or a force release, but
//! when the earlier leader's worker was paused, only if the fence refused every fenced
//! write it sent after the later term began; a pause of the later one excuses nothing: it
//! only delays its record of the grant), a term granted to two
//! owners is `term_granted_twice`, a term at or below one granted before its campaign could
//! have won is `term_order`; the fencing, `lost()`, liveness (`liveness_gap`, a role with a
//! campaigner and no leader) and register rules are those of every lock. This module adds:
//!
//! - `leader_overrun`: a term's work still running more than [`DROP_ALLOWANCE`] after the
//!   role's lock expired on the server (the first `expired` event of its key during the
//!   term, no sooner than a lease after the term's earliest grant: an earlier one is the
//!   previous key's, recorded late; or an untouched successor's grant), when the key was
//!   not deleted first. The run
//!   loop polls `lost()` first (`biased`), and `lost()` is a timer at the lease's local
//!   deadline (the last renewal's send + lease - drift), which is never after the server's
//!   expiry (Redis starts the TTL when the renewal arrives): so the work is dropped by the
//!   local deadline + one poll, before the expiry. [`DROP_ALLOWANCE`] covers that poll (a
//!   timer tick and a runtime thread's wake-up) and the recording, on a loaded machine.
//!   Excused when the worker was paused (`pause`), its process stalled during the term
//!   (`stall`), its async runtime ran a timer late from [`STALL_LOOKBACK`] before the expiry
//!   to the drop (`runtime_stall`: the loop could not poll), or the lock's data was lost
//!   under the term (`data_loss`: an early expiry, not a deadline). Terms whose key was
//!   deleted (a force release, a flush) are left to the `late_lost` rule: their loss is
//!   found by a renewal, not a deadline.
//! - `observer_regression`: an observer given a term lower than one it had been given, or
//!   a term again after it had been given its end (another term or no leader).
//! - `observer_wrong_leader`: an observer told that term T is led by a client other than
//!   the worker whose campaign (or run loop) was granted T.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::clock::ms_between;
use crate::event::{Event, LockKind, Register, TaskMode, WriteOutcome};

use super::holds::{granted_from, reason, Hold};
use super::report::{
    percentile, push_anomaly, push_fencing_anomaly, LeaderFigures, Row, Violation,
};
use super::windows::{intersects, Window};

/// How long after the role's lock expired on the server a term's work may still run: the
/// run loop's one poll after the local deadline (which comes before the expiry) and the
/// recording, with the worker's stall probe's threshold (a longer delay of the runtime is
/// recorded, and excused, as a `RuntimeStall`).
pub(super) const DROP_ALLOWANCE: Duration = Duration::from_millis(100);
/// How long before the expiry a runtime stall may begin and still excuse a late drop (the
/// local deadline is before the expiry by the drift allowance and a one-way trip, and the
/// server reports an expiry up to an active-expiry cycle late).
pub(super) const STALL_LOOKBACK: Duration = Duration::from_millis(200);

/// For each hold, the times (its `WriteIntent`) of the fenced writes it sent that the fence
/// did not refuse: accepted, or whose outcome is unknown (an error, no answer).
pub(super) fn unrefused_fenced_writes(events: &[Event]) -> HashMap<&str, Vec<u64>> {
    let mut refused: BTreeSet<&str> = BTreeSet::new();
    for event in events {
        if let Event::Write {
            hold,
            register: Register::Fenced,
            outcome: WriteOutcome::RejectedWrite | WriteOutcome::RejectedRead,
            ..
        } = event
        {
            refused.insert(hold.as_str());
        }
    }
    let mut out: HashMap<&str, Vec<u64>> = HashMap::new();
    for event in events {
        if let Event::WriteIntent {
            t,
            hold,
            register: Register::Fenced,
            ..
        } = event
        {
            if !refused.contains(hold.as_str()) {
                out.entry(hold.as_str()).or_default().push(*t);
            }
        }
    }
    out
}

/// One change an observer was given: when, the term (`None`: no leader), its client id.
type View<'a> = (u64, Option<u64>, Option<&'a str>);

/// What the leader checks need from the rest of the checker.
pub(super) struct Inputs<'a> {
    pub(super) backend: &'a str,
    pub(super) events: &'a [Event],
    pub(super) holds: &'a [Hold],
    pub(super) windows: &'a [Window],
    /// Key removals the servers reported, per key: (when, `expired` or `del`), filtered as
    /// the shared rules filter them (stale masters, replays).
    pub(super) removals: &'a HashMap<&'a str, Vec<(u64, &'a str)>>,
    /// Runtime stalls: (worker, from, to).
    pub(super) runtime_stalls: &'a [(Option<u32>, u64, u64)],
    pub(super) run_start: u64,
    /// The workers' lease.
    pub(super) lease: Duration,
}

/// Runs the leader rules; returns the figures (`None` without leader terms).
pub(super) fn check(
    input: &Inputs<'_>,
    rows: &mut [Row],
    violations: &mut Vec<Violation>,
    row_at: &dyn Fn(u64) -> usize,
    fault_at: &dyn Fn(u64) -> String,
) -> Option<LeaderFigures> {
    let terms: Vec<&Hold> = input
        .holds
        .iter()
        .filter(|h| h.kind == LockKind::Leader)
        .collect();
    let observed: Vec<&Event> = input
        .events
        .iter()
        .filter(|e| matches!(e, Event::Observed { .. }))
        .collect();
    if terms.is_empty() && observed.is_empty() {
        return None;
    }
    let at_ms = |t: u64| ms_between(input.run_start, t);
    let mut figures = LeaderFigures {
        terms: terms.len(),
        run_terms: terms
            .iter()
            .filter(|h| h.mode == TaskMode::LeaderRun)
            .count(),
        dropped_at_loss: terms
            .iter()
            .filter(|h| h.mode == TaskMode::LeaderRun && h.release.as_deref() == Some("dropped"))
            .count(),
        drop_allowance_ms: DROP_ALLOWANCE.as_millis(),
        ..LeaderFigures::default()
    };
    let guard = super::KEY_EVENT_GUARD.as_nanos() as u64;
    let allowance = DROP_ALLOWANCE.as_nanos() as u64;
    let lookback = STALL_LOOKBACK.as_nanos() as u64;
    let lease = input.lease.as_nanos() as u64;
    // The library's drift allowance on a lease (1 % + 2 ms).
    let drift = lease / 100 + 2_000_000;
    for h in &terms {
        if h.touched.contains("data_loss") || h.forced.is_some() {
            continue;
        }
        let key = super::holds::lock_key(&h.name);
        let removals = input
            .removals
            .get(key.as_str())
            .map_or(&[][..], Vec::as_slice);
        // The key is this term's until another owner's term began (or a lease after the
        // work ended: a dropped term's key expires on the server after the drop).
        let next = terms
            .iter()
            .filter(|b| b.owner != h.owner && b.start > h.start)
            .map(|b| b.start)
            .min();
        let horizon = next.unwrap_or(u64::MAX).min(h.end.saturating_add(lease));
        // The term's key was written with a lease's TTL at its grant (renewals only extend
        // it): an expiry reported sooner is the previous key's, recorded late.
        let earliest_expiry = granted_from(h).saturating_add(lease).saturating_sub(drift);
        let first = |how: &str, from: u64| {
            removals
                .iter()
                .filter(|(t, w)| *w == how && *t > from && *t <= horizon)
                .map(|(t, _)| *t)
                .min()
        };
        let expired = first("expired", earliest_expiry.max(h.start + guard));
        let deleted = first("del", h.start + guard);
        let successor = terms
            .iter()
            .filter(|b| b.owner != h.owner && b.start > h.start && b.start < h.end)
            .filter(|b| !b.touched.contains("data_loss") && b.forced.is_none())
            .map(|b| b.start)
            .min();
        let x = [expired, successor].into_iter().flatten().min();
        let Some(x) = x.filter(|&x| deleted.is_none_or(|d| d > x)) else {
            continue;
        };
        figures.judged += 1;
        let ms = ms_between(x, h.end);
        if h.lost.is_some() {
            figures.judged_lost += 1;
        }
        if reason(h).is_none() && h.lost.is_some() {
            figures.end_after_expiry_max_ms = Some(
                figures
                    .end_after_expiry_max_ms
                    .map_or(ms, |m: f64| m.max(ms)),
            );
        }
        if h.end <= x + allowance {
            continue;
        }
        let runtime_stalled = input.runtime_stalls.iter().any(|&(w, s0, s1)| {
            w == Some(h.worker) && intersects(x.saturating_sub(lookback), h.end, s0, s1)
        });
        let row = row_at(h.end);
        push_anomaly(
            rows,
            violations,
            row,
            &[h],
            runtime_stalled.then_some("runtime_stall"),
            Violation {
                kind: "leader_overrun".into(),
                backend: input.backend.into(),
                fault: fault_at(h.end),
                name: h.name.clone(),
                at_ms: at_ms(h.end),
                holds: Vec::new(),
                excused: None,
                detail: format!(
                    "{} (hold {}, term {}, {:?}, worker {}): {} at {:.0} ms; its work ran on until {:.0} ms ({ms:.0} ms later, allowance {:.0} ms, end: {})",
                    h.owner,
                    h.id,
                    h.token,
                    h.mode,
                    h.worker,
                    if Some(x) == expired {
                        "the server expired the role's key"
                    } else {
                        "another owner was granted the role"
                    },
                    at_ms(x),
                    at_ms(h.end),
                    DROP_ALLOWANCE.as_secs_f64() * 1000.0,
                    match (h.lost, h.release.as_deref()) {
                        (Some(_), Some(r)) => format!("lost, {r}"),
                        (Some(_), None) => "lost".to_owned(),
                        (None, Some(r)) => r.to_owned(),
                        (None, None) => "the worker's end".to_owned(),
                    }
                ),
            },
        );
    }

    // Faults that met a term they could reach.
    for w in input.windows.iter().filter(|w| !w.failed) {
        let hit = terms.iter().any(|h| {
            intersects(h.start, h.end, w.start, w.heal.max(w.start))
                && match w.worker() {
                    Some(worker) => worker == h.worker,
                    None => w.reaches(h.kind, &h.name),
                }
        });
        if hit {
            figures.faults_hit += 1;
        }
    }

    // Observers.
    let client_of: HashMap<u32, &str> = input
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Hello {
                worker, client_id, ..
            } => Some((*worker, client_id.as_str())),
            _ => None,
        })
        .collect();
    // term -> (worker, grant)
    let mut granted: HashMap<u64, Vec<&Hold>> = HashMap::new();
    for h in &terms {
        granted.entry(h.token).or_default().push(h);
    }
    let mut by_observer: BTreeMap<u32, Vec<View<'_>>> = BTreeMap::new();
    for e in &observed {
        if let Event::Observed {
            t,
            worker,
            term,
            client_id,
            ..
        } = e
        {
            by_observer
                .entry(*worker)
                .or_default()
                .push((*t, *term, client_id.as_deref()));
        }
    }
    figures.observers = by_observer.len();
    let mut latencies: Vec<f64> = Vec::new();
    for (observer, views) in &mut by_observer {
        views.sort_by_key(|v| v.0);
        figures.observed_changes += views.len();
        let mut highest: Option<u64> = None;
        let mut ended: BTreeSet<u64> = BTreeSet::new();
        let mut previous: Option<u64> = None;
        for &(t, term, client) in views.iter() {
            if let Some(p) = previous.filter(|&p| Some(p) != term) {
                ended.insert(p);
            }
            previous = term;
            let Some(term) = term else { continue };
            let row = row_at(t);
            if highest.is_some_and(|hi| term < hi) || ended.contains(&term) {
                push_fencing_anomaly(
                    rows,
                    violations,
                    row,
                    &[],
                    None,
                    Violation {
                        kind: "observer_regression".into(),
                        backend: input.backend.into(),
                        fault: fault_at(t),
                        name: crate::leader::lock_name(),
                        at_ms: at_ms(t),
                        holds: Vec::new(),
                        excused: None,
                        detail: format!(
                            "worker {observer}'s observer was given term {term} after {}",
                            if ended.contains(&term) {
                                format!("the end of term {term}")
                            } else {
                                format!("term {}", highest.unwrap_or_default())
                            }
                        ),
                    },
                );
            }
            highest = Some(highest.map_or(term, |hi| hi.max(term)));
            let holders = granted.get(&term).map_or(&[][..], Vec::as_slice);
            let wrong = client.and_then(|client| {
                holders
                    .iter()
                    .find(|h| client_of.get(&h.worker).is_some_and(|c| *c != client))
                    .map(|h| (client, h))
            });
            if let Some((client, h)) = wrong {
                push_fencing_anomaly(
                    rows,
                    violations,
                    row,
                    &[h],
                    None,
                    Violation {
                        kind: "observer_wrong_leader".into(),
                        backend: input.backend.into(),
                        fault: fault_at(t),
                        name: h.name.clone(),
                        at_ms: at_ms(t),
                        holds: Vec::new(),
                        excused: None,
                        detail: format!(
                            "worker {observer}'s observer was told term {term} is led by client {client}; it was granted to worker {} (client {}, hold {})",
                            h.worker,
                            client_of.get(&h.worker).copied().unwrap_or("?"),
                            h.id
                        ),
                    },
                );
            }
        }
        // How soon it saw each term granted while it watched.
        let Some(&(watching_since, _, _)) = views.first() else {
            continue;
        };
        let watching_until = views.last().map_or(0, |v| v.0);
        for h in terms
            .iter()
            .filter(|h| h.start > watching_since && h.start < watching_until)
        {
            match views.iter().find(|v| v.1 == Some(h.token)) {
                Some(&(t, _, _)) => latencies.push(ms_between(h.start, t).max(0.0)),
                None => figures.observe_skipped += 1,
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    figures.observe_latency_p50_ms = percentile(&latencies, 0.5);
    figures.observe_latency_max_ms = latencies.last().copied();
    Some(figures)
}
