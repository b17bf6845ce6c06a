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
//! failover, a clock jump), or its worker's scheduler-lag probe recorded a stall during the hold (`stall`; for a
//! late `lost()`, a stall of the harness between the loss and `lost()` too:
//! `harness_stall`). Anything else is a violation, whatever fault window it falls in.
//!
//! The fencing checks are the exception: a token granted to two holders of one lock
//! (`duplicate_token`), two holders' fenced writes under one token (`equal_token_writes`)
//! and an acknowledged fenced write that a later holder's read or the register's final
//! state does not see (`lost_write`) are not excused by what touched their holds, data loss
//! included: tokens must stay unique across the store forgetting its counter. Only a
//! duplicate whose counter was lost while a lock server's clock stepped back
//! (`server_clock_back`) is excused. A token regression (a later holder's token at or below
//! an earlier one's) is excused by a pause or a stall of one of the two holders, which can
//! delay the record of a grant past a later one, and otherwise only as a duplicate is.
//!
//! A fault's window runs from its start to the next fault's start (or the end of the run);
//! the rows attribute events to windows, events before the first fault to `none`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::clock::ms_between;
use crate::event::{Event, LockKind, Register, WriteOutcome};
use crate::nemesis::Fault;
use crate::register::{LoggedWrite, RegisterTruth};
use crate::workload::SHUTDOWN_GRACE;

mod effects;
mod holds;
mod leader;
mod liveness;
mod report;
mod windows;

use effects::decide_effects;
use holds::*;
pub use report::*;
use windows::*;

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

/// A `Fault` event: time, fault, phase, target, (id, trigger outcome, lock).
type FaultRecord<'a> = (
    u64,
    &'a str,
    &'a str,
    &'a str,
    (Option<u64>, Option<bool>, Option<String>),
);

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
    // The local deadline's bound: a lease after the loss at the latest.
    let lease_bound = (lease + LOST_ALLOWANCE).as_nanos() as u64;
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
                heal_target: String::new(),
                end: run_end,
                id: *id,
                triggered: *triggered,
                lock: lock.clone(),
                slots: None,
                failed: false,
            });
        } else if let Some(w) = heal_target(&mut windows, *id) {
            w.heal = *t;
            w.heal_target = (*target).to_owned();
        }
    }
    for i in 1..windows.len() {
        windows[i - 1].end = windows[i].start;
    }
    let mut repairs: Vec<Repair> = Vec::new();
    let mut harness: Vec<HarnessNote> = Vec::new();
    let mut shards: Vec<Shard> = Vec::new();
    for event in events {
        let Event::Harness {
            t_start,
            t,
            action,
            since,
            slots,
            ports,
            detail,
            ok,
            id,
            ..
        } = event
        else {
            continue;
        };
        if action == "step_failed" {
            if let Some(w) = windows.iter_mut().find(|w| w.id.is_some() && w.id == *id) {
                w.failed = true;
            }
        }
        if action == "shard" {
            shards.push(Shard {
                slots: slots.clone(),
                ports: ports.clone(),
            });
            continue;
        }
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
    // Slots a `slot_migration` moved (`slot S: master P -> Q`) and when the move began: a
    // later fault of Q's shard reaches them too (the layout at the start does not know).
    let moved: Vec<(u16, u16, u64)> = windows
        .iter()
        .filter(|w| w.kind() == Some(Fault::SlotMigration))
        .filter_map(|w| {
            let rest = w.heal_target.strip_prefix("slot ")?;
            let (slot, ports) = rest.split_once(": master ")?;
            let (_, to) = ports.split_once(" -> ")?;
            Some((slot.parse().ok()?, to.trim().parse().ok()?, w.start))
        })
        .collect();
    for w in &mut windows {
        w.confine(&shards, &moved);
    }
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
    for w in windows.iter().filter(|w| !w.failed) {
        rows[row_of_fault[&w.fault]].injections += 1;
    }
    let row_at =
        |t: u64| -> usize { window_of(&windows, t).map_or(0, |i| row_of_fault[&windows[i].fault]) };
    let fault_at = |t: u64| -> String {
        window_of(&windows, t).map_or_else(|| "none".to_owned(), |i| windows[i].fault.clone())
    };
    let at_ms = |t: u64| ms_between(run_start, t);

    // A failed-over master's removals from the failover's start until it has resynced
    // as a replica ([`STALE_MASTER_GRACE`] after the heal) are of a stale copy (its
    // restart, before it resyncs, expires keys the new master still has): the heal names
    // it (`master OLD -> NEW`). After that it is a replica, or a master again after a later
    // failover, and its removals are the lock's truth again (a node demoted for the rest
    // of the run hid every removal it reported after a later promotion).
    let stale_for = STALE_MASTER_GRACE.as_nanos() as u64;
    let mut demoted: Vec<(String, u64, u64)> = Vec::new();
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
            demoted.push((
                format!("127.0.0.1:{old}"),
                failover_start.unwrap_or(*t),
                t + stale_for,
            ));
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
    // A slot migration (`slot S: master P -> Q`) `MIGRATE`s the slot's keys: the old owner
    // (and its replica) report a `del` of each key that moved, which is no removal of the
    // lock (it lives on at the new owner, with its TTL). Removals of that slot's keys from
    // the start until a replica's repeat after the heal are not counted.
    let repeat = REPLICA_REPEAT.as_nanos() as u64;
    let mut migrations: Vec<(u16, u64, u64)> = Vec::new();
    let mut migration_start = None;
    for (t, fault, phase, target, _) in &faults {
        if *fault != Fault::SlotMigration.name() {
            continue;
        }
        if *phase == "start" {
            migration_start = Some(*t);
        } else if let Some(slot) = target
            .strip_prefix("slot ")
            .and_then(|r| r.split(':').next())
            .and_then(|n| n.parse::<u16>().ok())
        {
            migrations.push((slot, migration_start.take().unwrap_or(*t), t + repeat));
        }
    }
    let migrated = |key: &str, how: &str, t: u64| {
        how == "del"
            && !migrations.is_empty()
            && migrations.iter().any(|(slot, from, until)| {
                *from <= t && t <= *until && lock_test_support::key_slot(key.as_bytes()) == *slot
            })
    };
    // Holds, stalls, key removals.
    let mut holds: Vec<Hold> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut stalls: Vec<(Option<u32>, u64, u64)> = Vec::new();
    // A worker's async runtime that ran a timer late (liveness only; see `RuntimeStall`).
    let mut runtime_stalls: Vec<(Option<u32>, u64, u64)> = Vec::new();
    let mut gone: HashMap<&str, Vec<(u64, &str)>> = HashMap::new();
    // The same removals with how the key went (`expired`, `del`), for the leader rules.
    let mut removals: HashMap<&str, Vec<(u64, &str)>> = HashMap::new();
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
                    forced: None,
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
            Event::RuntimeStall { t_start, t, worker } => {
                runtime_stalls.push((Some(*worker), *t_start, *t));
            }
            Event::KeyGone { t, server, .. }
                if demoted
                    .iter()
                    .any(|(s, from, until)| s == server && t >= from && t <= until)
                    || replayed(server, *t) => {}
            Event::KeyGone { t, key, how, .. } if migrated(key, how, *t) => {
                key_events += 1;
            }
            Event::KeyGone {
                t,
                key,
                server,
                how,
                ..
            } => {
                key_events += 1;
                if stale_master(&windows, server, *t) {
                    continue;
                }
                removals
                    .entry(key.as_str())
                    .or_default()
                    .push((*t, how.as_str()));
                gone.entry(key.as_str())
                    .or_default()
                    .push((*t, server.as_str()));
            }
            _ => {}
        }
    }
    for times in gone.values_mut() {
        times.sort_unstable();
        if matches!(backend, "sentinel" | "cluster") {
            *times = without_replicated_repeats(times);
        }
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
            not_held,
            failed,
            ..
        } = event
        else {
            continue;
        };
        let deadline = t_start + grace;
        // Every lock still held at the deadline is surrendered before its give-back, which
        // the report then counts as released, not held, or failed (a worker cut off).
        let taken = released_at_deadline + not_held + failed;
        if let Some(h) = index.get(hold).map(|&i| &mut holds[i]) {
            if taken > 0 && h.lost.is_none() && h.end > deadline {
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
                    if let Some((from, to)) =
                        loss_span(backend, w).filter(|_| w.reaches(h.kind, &h.name))
                    {
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
        // Deleted by an operator's force release while held.
        h.forced = windows
            .iter()
            .filter(|w| force_released(w, h))
            .map(|w| w.start)
            .min();
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
    // Whether a grant of a hold of `name` made in `from..to` may have been destroyed by a
    // fault (its data lost: an empty restart, a failover, a repair); the first grant of a
    // hot lock's uses is its keeper's, at the keeper's first use.
    let lost_grant_between = |kind: LockKind, name: &str, from: u64, to: u64| {
        windows.iter().any(|w| {
            w.reaches(kind, name)
                && loss_span(backend, w).is_some_and(|(s, e)| intersects(from, to, s, e))
        }) || repairs.iter().any(|r| {
            let (s, e) = r.loss_span();
            r.covers(kind, name) && intersects(from, to, s, e)
        })
    };
    let grant_from = |h: &Hold| {
        let from = granted_from(h);
        if h.kind == LockKind::Hot {
            keep_start.get(&h.owner).copied().unwrap_or(from).min(from)
        } else {
            from
        }
    };
    let counter_lost_between = |kind: LockKind, name: &str, from: u64, to: u64| {
        windows.iter().any(|w| {
            loses_counter(backend, w) && w.reaches(kind, name) && w.start >= from && w.start <= to
        }) || repairs
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
    // The leader workload: when each hold sent fenced writes that were not refused (see
    // `two_leaders` below).
    let unrefused = leader::unrefused_fenced_writes(events);
    for (name, list) in &mut by_name {
        list.sort_by_key(|h| h.start);
        // Overlaps: a hold that began while another owner's was still believed.
        for (j, b) in list.iter().enumerate() {
            for a in &list[..j] {
                if excludes(a, b) && a.end > b.start {
                    let leaders = a.kind == LockKind::Leader && b.kind == LockKind::Leader;
                    let row = row_at(b.start);
                    rows[row].overlaps += 1;
                    let ms = ms_between(b.start, a.end.min(b.end));
                    rows[row].overlap_max_ms = rows[row].overlap_max_ms.max(ms);
                    overlapped.insert(a.id.as_str());
                    overlapped.insert(b.id.as_str());
                    // An operator deleted `a`'s hold before `b` acquired (and `b` was not
                    // deleted with it: then both held at once before the deletion).
                    let excuse = a
                        .forced
                        .filter(|&f| f <= b.start && b.forced != Some(f))
                        .map(|_| "force_release");
                    let mut detail = String::new();
                    // Two leaders at once (`a` the earlier term): excused by what touched the
                    // terms (a data loss, a stall, a force release), but by a pause only of
                    // the earlier leader, and only if the fence refused every fenced write it
                    // sent after the later term began.
                    // (A paused process is also a stalled one: its stall probe stops with
                    // it, so the pause decides.)
                    let excuse = if leaders && a.touched.contains("pause") {
                        let paused_wrote = unrefused
                            .get(a.id.as_str())
                            .is_some_and(|ts| ts.iter().any(|&t| t > b.start));
                        if paused_wrote {
                            detail.push_str(&format!(
                                "; {} was paused and a fenced write it sent after the later term began was not refused",
                                a.id
                            ));
                            None
                        } else {
                            Some("pause")
                        }
                    } else if leaders {
                        let by_touch = |h: &Hold| {
                            ["data_loss", "stall"]
                                .into_iter()
                                .find(|r| h.touched.contains(r))
                        };
                        by_touch(a).or(by_touch(b)).or(excuse)
                    } else {
                        excuse
                    };
                    let push = if leaders {
                        push_fencing_anomaly
                    } else {
                        push_anomaly
                    };
                    push(&mut rows, &mut violations, row, &[a, b], excuse, Violation {
                        kind: if leaders { "two_leaders" } else { "overlap" }.into(),
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
                        ) + &detail,
                    });
                }
            }
        }
        // Token order: above every conflicting hold of another owner that had ended
        // before (readers, and permits, are granted side by side: a reader whose
        // acquisition was on its way while another came and went may return the lower
        // token, which fences nothing).
        // A leader's term is above every term granted before its campaign's grant could
        // have been made (grant order: the earlier grant's return came before the earliest
        // moment of the later one), whether or not the earlier leader had ended.
        for b in list.iter() {
            let prior = list
                .iter()
                .filter(|a| {
                    displaces(a, b)
                        && if a.kind == LockKind::Leader && b.kind == LockKind::Leader {
                            a.start < granted_from(b)
                        } else {
                            a.end <= b.start
                        }
                })
                .max_by_key(|a| a.token);
            if let Some(a) = prior {
                if b.token <= a.token {
                    let row = row_at(b.start);
                    rows[row].token_regressions += 1;
                    // A pause or a stall of a holder can delay its record of a grant past a
                    // later one. A grant of B made before a data loss that took it (a
                    // `lock_all` that had B's name before an empty restart and returned after
                    // A's hold; a hot lock kept since before a failover, used after A's hold)
                    // is older than A's: its lower token is the right order, and the lost
                    // grant is the overlap rule's. A lost counter cannot lower a
                    // token any more (the clock floor), unless the server's clock stepped
                    // back while it was lost.
                    let (from, to) = (granted_from(a), b.start);
                    let excuse = [a, b]
                        .iter()
                        .find_map(|h| {
                            ["pause", "stall"]
                                .into_iter()
                                .find(|r| h.touched.contains(r))
                        })
                        .or(lost_grant_between(b.kind, name, grant_from(b), a.start)
                            .then_some("data_loss"))
                        .or((counter_lost_between(b.kind, name, from, to)
                            && server_clock_back(&windows, b.kind, name, from, to))
                        .then_some("server_clock_back"));
                    push_fencing_anomaly(&mut rows, &mut violations, row, &[a, b], excuse, Violation {
                        kind: if b.kind == LockKind::Leader { "term_order" } else { "token_regression" }.into(),
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
        // Unique tokens: a token granted to two holders of the lock (from one counter) lets
        // both through the fence's `<=` rule. Each holder after the first one of a token is
        // one duplicate. Readers and permits get a token each, so they count too; holds of
        // one holder (a re-entry, a hot lock keeper's uses) share theirs. No data loss
        // excuses it (a counter that can forget needs a floor that cannot); only a step back
        // of the server's clock while the counter was lost (the floor's assumption) does.
        let mut by_token: BTreeMap<(&str, u64), Vec<&Hold>> = BTreeMap::new();
        for h in list.iter().filter(|h| h.token != 0) {
            by_token
                .entry((token_counter(h), h.token))
                .or_default()
                .push(h);
        }
        for ((_, token), sharing) in &by_token {
            let Some(a) = sharing.first() else { continue };
            let mut holders: Vec<&str> = vec![holder(a)];
            for b in &sharing[1..] {
                if holders.contains(&holder(b)) {
                    continue;
                }
                holders.push(holder(b));
                let row = row_at(b.start);
                rows[row].duplicate_tokens += 1;
                let (from, to) = (granted_from(a), b.start);
                let excuse = (counter_lost_between(b.kind, name, from, to)
                    && server_clock_back(&windows, b.kind, name, from, to))
                .then_some("server_clock_back");
                push_fencing_anomaly(&mut rows, &mut violations, row, &[a, b], excuse, Violation {
                    kind: if a.kind == LockKind::Leader && b.kind == LockKind::Leader {
                        "term_granted_twice"
                    } else {
                        "duplicate_token"
                    }
                    .into(),
                    backend: backend.into(),
                    fault: fault_at(b.start),
                    name: (*name).into(),
                    at_ms: at_ms(b.start),
                    holds: Vec::new(),
                    excused: None,
                    detail: format!(
                        "{} (hold {}, {}, worker {}) got token {token}, which {} (hold {}, {}, worker {}) had got at {:.0} ms",
                        b.owner,
                        b.id,
                        b.kind.name(),
                        b.worker,
                        a.owner,
                        a.id,
                        a.kind.name(),
                        a.worker,
                        at_ms(a.start)
                    ),
                });
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
                // Only a successor no fault touched proves it: a paused or stalled
                // acquirer's grant may have run out before its call returned, and one made
                // during a data loss (a split brain's old master) says nothing of the lock
                // this hold has (their overlap is excused on their side).
                let successor = list[j + 1..]
                    .iter()
                    .filter(|b| reason(b).is_none())
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
                        loss_span(backend, w).is_some()
                            && w.reaches(h.kind, name)
                            && w.start >= from
                            && w.start <= until
                    })
                    .filter(|w| !partial_clock_jump(w, lease))
                    .map(|w| w.start)
                    .min();
                // An operator's force release of this hold: deleted by its heal at the
                // latest (the server's `del` event dates it better when it was seen).
                let forced = windows
                    .iter()
                    .filter(|w| force_released(w, h) && w.heal >= from && w.heal <= until)
                    .map(|w| w.heal)
                    .min();
                let destroyed = [destroyed, forced].into_iter().flatten().min();
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
            if let Some(f) = h.forced {
                let row = &mut rows[row_at(f)];
                row.force_released += 1;
                if let (Some(lost), Some(x)) = (h.lost, loss) {
                    row.force_released_lost += 1;
                    row.force_released_lost_ms.push(ms_between(x, lost));
                }
            }
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
                    // with the last holder), and PostgreSQL reports no removal at all (a row
                    // expires by a comparison with the server's clock, no event; the history
                    // has no server-side truth): a release delayed by a fault of its
                    // worker's commands (a paused server, a restart, its sessions
                    // terminated) may have arrived after the lease ran out, which it then
                    // rightly answers `not_held`. Excused as `net_fault`, not hidden.
                    let silent = matches!(h.kind, LockKind::Read | LockKind::Permit)
                        || backend == crate::topology::Backend::Postgres.name();
                    let excuse = if silent {
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
            // The watchdog finds a loss at its next renewal, within `bound`, when that
            // renewal is answered. A fault of this worker's own commands (a partition,
            // latency, its sessions terminated) between the loss and that renewal leaves
            // it to the local deadline, at most a lease after the last answered renewal
            // (also when it healed just before the loss: until the worker's first answer):
            // the guarantees guide's "cannot be reached" case, still bounded. (Not a
            // server's fault: a restart that destroyed the lock answers again.)
            let cut_off = windows.iter().any(|w| {
                w.worker() == Some(h.worker)
                    && w.delays_commands_of(h.worker)
                    && intersects(x, x + bound, w.start, effect_end(w, h.worker))
            });
            let deadline = x + if cut_off {
                lease_bound.max(bound)
            } else {
                bound
            };
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
    let touched_during = |h: &Hold, from: u64, to: u64| -> Option<&'static str> {
        let worker = h.worker;
        for w in &windows {
            if w.kind() == Some(Fault::PauseHolder)
                && w.worker() == Some(worker)
                && intersects(from, to, w.start, w.heal)
            {
                return Some("pause");
            }
            // The same data-loss spans as for holds, whichever schedule named the fault.
            if let Some((lost_from, lost_to)) = loss_span(backend, w) {
                if w.reaches(h.kind, &h.name) && intersects(from, to, lost_from, lost_to) {
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
                // Without the permits an operator had deleted before this grant (by a force
                // release that did not delete this one: then they were held together before
                // it), the total holds: excused as `force_release`.
                let starting = permits[i].forced;
                let kept: u32 = active
                    .iter()
                    .map(|&k| permits[k])
                    .filter(|h| !h.forced.is_some_and(|f| f <= t && starting != Some(f)))
                    .map(|h| h.permits.max(1))
                    .sum();
                let excuse = (kept <= total).then_some("force_release");
                push_anomaly(&mut rows, &mut violations, row, &involved, excuse, Violation {
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
                let excuse = touched_during(a, a.asked, a.start)
                    .or_else(|| touched_during(b, b.asked, b.start))
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
                w.reaches(h.kind, &h.name)
                    && loss_span(backend, w).is_some_and(|(from, to)| {
                        intersects(h.start, h.asked + h.min_hold, from, to)
                    })
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
            let excuse = touched_during(next, next.asked, next.start)
                .or_else(|| touched_during(h, h.start, *sd_end));
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

    // Leader election: the rules of its own (the shared ones ran above).
    let mut leader_figures = leader::check(
        &leader::Inputs {
            backend,
            events,
            holds: &holds,
            windows: &windows,
            removals: &removals,
            runtime_stalls: &runtime_stalls,
            run_start,
            lease,
        },
        &mut rows,
        &mut violations,
        &row_at,
        &fault_at,
    );

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
    // The fenced register's reads, per name: (when the answer came, hold, value read).
    let mut fenced_reads: HashMap<&str, Vec<(u64, &str, i64)>> = HashMap::new();
    // The fenced writes the workers saw accepted: (when, hold, name, token, value written).
    let mut acked: Vec<(u64, &str, &str, u64, i64)> = Vec::new();
    for event in events {
        match event {
            Event::Claim {
                t,
                hold,
                name,
                token,
                read,
                ..
            } => {
                claims
                    .entry(name.as_str())
                    .or_default()
                    .push((*t, *token, hold.as_str()));
                fenced_reads
                    .entry(name.as_str())
                    .or_default()
                    .push((*t, hold.as_str(), *read));
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
                    // Unknown outcome, as an error: never acknowledged, so never lost.
                    (_, WriteOutcome::NotReplicated) => {
                        rows[row].errors += 1;
                        rows[row].not_replicated += 1;
                    }
                    (_, WriteOutcome::Accepted) => {
                        answered.insert((hold.as_str(), *register), (*t, *read, *prev));
                        if let (Register::Fenced, Some(read)) = (register, read) {
                            acked.push((*t, hold.as_str(), name.as_str(), *token, read + 1));
                        }
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

    // Registers: the store's log, the whole truth of what it applied (in the lock's
    // servers, `--fence-store lock-redis`: of what survived; see `RegisterTruth`).
    let mut register = RegisterCheck::default();
    // Fenced registers whose log lives with them in the lock's servers: a write missing
    // from it was lost with it, a `lost_write` below, not a logging fault.
    let lossy_logs: BTreeSet<&str> = truth
        .into_iter()
        .flatten()
        .filter(|r| r.register == Register::Fenced && r.in_lock_servers)
        .map(|r| r.name.as_str())
        .collect();
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
            let in_lock_servers = *reg == Register::Fenced
                && index
                    .get(*hold)
                    .is_some_and(|&i| lossy_logs.contains(holds[i].name.as_str()));
            if !in_lock_servers && !logged.contains(&(*hold, *reg)) {
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

    // Fencing at the register: two holders' writes under one token, and lost writes.
    let writer_of = |hold: &str| -> String {
        index
            .get(hold)
            .map_or_else(|| hold.to_owned(), |&i| holder(&holds[i]).to_owned())
    };
    let hold_ref = |hold: &str| index.get(hold).map(|&i| &holds[i]);
    // The fenced writes the store applied, per name, in its order: from its log when it was
    // read (every applied write, answered or not), else the workers' accepted writes.
    // (when, hold, token).
    let mut applied: BTreeMap<&str, Vec<(u64, &str, u64)>> = BTreeMap::new();
    // Per name, from the log: the final value, the holds whose writes the final state
    // descends from (`None`: a log entry did not parse), the holds logged, and whether the
    // log lives in the lock's servers (it then lists exactly the writes that survived).
    type Final<'a> = (i64, Option<BTreeSet<&'a str>>, BTreeSet<&'a str>, bool);
    let mut finals: HashMap<&str, Final<'_>> = HashMap::new();
    match truth {
        Some(truth) => {
            for r in truth.iter().filter(|r| r.register == Register::Fenced) {
                let list = applied.entry(r.name.as_str()).or_default();
                for e in r.log.iter().flatten() {
                    let key = (e.hold.as_str(), Register::Fenced);
                    let t = answered
                        .get(&key)
                        .map(|a| a.0)
                        .or_else(|| intents.get(&key).copied())
                        .unwrap_or(run_end);
                    list.push((t, e.hold.as_str(), e.token));
                }
                let logged: BTreeSet<&str> =
                    r.log.iter().flatten().map(|e| e.hold.as_str()).collect();
                finals.insert(
                    r.name.as_str(),
                    (r.value, lineage(&r.log), logged, r.in_lock_servers),
                );
            }
        }
        None => {
            for &(t, hold, name, token, _) in &acked {
                applied.entry(name).or_default().push((t, hold, token));
            }
            for list in applied.values_mut() {
                list.sort_by_key(|w| w.0);
            }
        }
    }
    for (name, writes) in &applied {
        let mut by_token: BTreeMap<u64, Vec<(u64, &str, String)>> = BTreeMap::new();
        for &(t, hold, token) in writes {
            let holders = by_token.entry(token).or_default();
            let who = writer_of(hold);
            if holders.iter().any(|(_, _, w)| *w == who) {
                continue;
            }
            if let Some((t0, first, _)) = holders.first() {
                let row = row_at(t);
                rows[row].equal_token_writes += 1;
                let involved: Vec<&Hold> =
                    [*first, hold].into_iter().filter_map(hold_ref).collect();
                push_fencing_anomaly(&mut rows, &mut violations, row, &involved, None, Violation {
                    kind: "equal_token_writes".into(),
                    backend: backend.into(),
                    fault: fault_at(t),
                    name: (*name).into(),
                    at_ms: at_ms(t),
                    holds: Vec::new(),
                    excused: None,
                    detail: format!(
                        "fenced: hold {hold} ({who}) wrote under token {token}, as hold {first} had at {:.0} ms: the fence let both holders through",
                        at_ms(*t0)
                    ),
                });
            }
            holders.push((t, hold, who));
        }
    }
    // An acknowledged fenced write must be seen by every fenced read of a hold that began
    // after the acknowledgement (its read was sent later): the register's value only grows,
    // one per applied write, so a lower value misses it. And by the register's final state:
    // a final value not below it, and, with the store's log, a chain of writes (each the
    // latest earlier write of the value it read) from the last write back through it; with
    // the log in the lock's servers (written in the write's script, lost with it), the log
    // itself: an acknowledged write missing from it did not survive.
    //
    // With the register in the lock's servers, a restart without persistence
    // (`restart_empty`) between the acknowledgement and the read that missed it (or the
    // end) empties the register with the lock: the documented loss of a node without
    // persistence, excused as `register_emptied`. A failover is no excuse.
    let emptied: Vec<u64> = windows
        .iter()
        .filter(|w| w.kind() == Some(Fault::RestartEmpty))
        .map(|w| w.start)
        .collect();
    for &(t_ack, hold, name, token, new) in &acked {
        let missed = fenced_reads
            .get(name)
            .into_iter()
            .flatten()
            .find(|(_, reader, read)| {
                *read < new && hold_ref(reader).is_some_and(|r| r.start > t_ack)
            });
        let (why, reader, seen_at) = match (missed, finals.get(name)) {
            (Some((t, reader, read)), _) => (
                format!("hold {reader}, acquired after it, read {read} at {:.0} ms", at_ms(*t)),
                hold_ref(reader),
                *t,
            ),
            (None, Some((value, _, _, _))) if *value < new => {
                (format!("the register's final value is {value}"), None, run_end)
            }
            (None, Some((_, _, logged, true))) if !logged.contains(hold) => (
                "the register's log on the lock servers' current master does not have it (the write did not survive)".to_owned(),
                None,
                run_end,
            ),
            (None, Some((_, Some(chain), logged, _)))
                if logged.contains(hold) && !chain.contains(hold) =>
            {
                (
                    "the register's final state does not descend from it (a later write overwrote it without having read it)".to_owned(),
                    None,
                    run_end,
                )
            }
            _ => continue,
        };
        let excuse = (lossy_logs.contains(name)
            && emptied.iter().any(|&at| at >= t_ack && at <= seen_at))
        .then_some("register_emptied");
        let row = row_at(t_ack);
        rows[row].lost_writes += 1;
        let involved: Vec<&Hold> = hold_ref(hold).into_iter().chain(reader).collect();
        push_fencing_anomaly(
            &mut rows,
            &mut violations,
            row,
            &involved,
            excuse,
            Violation {
                kind: "lost_write".into(),
                backend: backend.into(),
                fault: fault_at(t_ack),
                name: name.into(),
                at_ms: at_ms(t_ack),
                holds: Vec::new(),
                excused: None,
                detail: format!(
                "fenced: hold {hold} (token {token}) wrote {new}, acknowledged at {:.0} ms; {why}",
                at_ms(t_ack)
            ),
            },
        );
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
    // Liveness: locks free while wanted; a gap above its kind's bound is a violation.
    let waiter_stalls: Vec<(Option<u32>, u64, u64)> =
        stalls.iter().chain(&runtime_stalls).copied().collect();
    let (liveness, liveness_by_kind, gaps_over) = liveness::free_while_wanted(
        events,
        &holds,
        &windows,
        &repairs,
        &waiter_stalls,
        run_start,
        run_end,
        lease,
    );
    for over in gaps_over {
        let row = row_at(over.from);
        let g = &over.gap;
        push_fencing_anomaly(
            &mut rows,
            &mut violations,
            row,
            &[],
            None,
            Violation {
                kind: "liveness_gap".into(),
                backend: backend.into(),
                fault: fault_at(over.from),
                name: g.name.clone(),
                at_ms: g.from_ms,
                holds: Vec::new(),
                excused: None,
                detail: format!(
                "{} lock free for {:.0} ms (from {:.0} to {:.0} ms) while w{}-t{} waited for it \
                 (bound {:.0} ms, outside fault windows and the waiter's stalls)",
                g.kind, over.ms, g.from_ms, g.to_ms, g.worker, g.task, over.bound_ms
            ),
            },
        );
    }
    for (kind, figures) in liveness_by_kind {
        kinds.entry(kind.name().to_owned()).or_default().liveness = figures;
    }
    if let Some(figures) = &mut leader_figures {
        let of_leaders = |v: &&Violation| {
            v.kind != "lost_update"
                && (v.kind.starts_with("observer_")
                    || v.holds
                        .first()
                        .and_then(|id| index.get(id))
                        .is_some_and(|&i| holds[i].kind == LockKind::Leader))
        };
        for v in violations.iter().filter(of_leaders) {
            if v.excused.is_some() {
                figures.excused += 1;
            } else {
                figures.violations += 1;
            }
        }
        figures.no_leader_max_ms = kinds
            .get(LockKind::Leader.name())
            .and_then(|k| k.liveness.free_while_wanted_max_ms);
    }
    decide_effects(&mut rows, &row_of_fault, &windows, &holds, events, lease);
    for row in &mut rows {
        row.finish();
        row.fill_bounds();
    }
    let mut stall_figures = Stalls::default();
    for &(_, s0, s1) in &runtime_stalls {
        stall_figures.runtimes += 1;
        stall_figures.runtimes_max_ms = stall_figures.runtimes_max_ms.max(ms_between(s0, s1));
    }
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
        liveness,
        key_events,
        all_latencies,
        kinds,
        layouts,
        harness,
        leader: leader_figures,
    }
}

/// The holds whose writes a register's final state descends from: from the last logged
/// write back, each write's parent is the latest earlier one that wrote the value it read.
/// `None` when an entry of the log did not parse.
fn lineage(log: &[Option<LoggedWrite>]) -> Option<BTreeSet<&str>> {
    let entries: Vec<&LoggedWrite> = log.iter().map(Option::as_ref).collect::<Option<_>>()?;
    let mut chain = BTreeSet::new();
    let mut at = entries.len().checked_sub(1);
    while let Some(k) = at {
        chain.insert(entries[k].hold.as_str());
        at = entries[..k].iter().rposition(|p| p.new == entries[k].read);
    }
    Some(chain)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod leader_tests;
