//! Liveness (report-only): how long a lock sat free while another task was asking for it,
//! outside faults and stalls of the waiter. Never a violation.

use std::collections::BTreeMap;

use crate::clock::ms_between;
use crate::event::{Event, LockKind};

use super::holds::{task_of_hold, Hold};
use super::windows::{intersects, Repair, Window};
use super::{Liveness, WorstGap, STUCK_AFTER_HEAL};

/// The lock a kind's holds occupy: a read-write lock's readers and writers share one.
fn lock_class(kind: LockKind) -> LockKind {
    match kind {
        LockKind::Write => LockKind::Read,
        k => k,
    }
}

/// When a hold stopped occupying its lock: its release's return, or its loss (or kill,
/// surrender, the run's end); a `hold_at_least` lock stays until its minimum hold is over.
fn freed_at(h: &Hold) -> u64 {
    let end = if h.lost.is_some() || h.surrendered.is_some() {
        h.end
    } else {
        h.release_end.map_or(h.end, |r| r.max(h.end))
    };
    end.max(h.asked.saturating_add(h.min_hold))
}

/// One acquisition call: who asked, for what, from when to when, and whether it timed out.
struct Ask {
    worker: u32,
    task: u32,
    kind: LockKind,
    name: String,
    invoked: u64,
    returned: u64,
    timed_out: bool,
}

/// A free interval of one lock: from when the last hold ended (and whose task that was) to
/// the next hold's start (or the run's end).
struct Free {
    from: u64,
    to: u64,
    after: (u32, u32),
}

/// The longest "free while wanted" gap and the timeouts while free, per kind of lock (the
/// kind of the waiting acquisition) and over all kinds. A gap of lock (kind, name) is a
/// stretch in which no hold of it was in progress while an acquisition of it by a task
/// other than the last holder's was pending, counted from the later of the lock's release
/// and the acquisition's call to the earlier of the next hold's start and the
/// acquisition's return. A gap is ignored when it meets a fault window that could reach
/// the lock (from its start to its heal plus [`STUCK_AFTER_HEAL`]), a shard repair of the
/// lock's shard, or a stall of the waiting worker. A timeout counts when the lock was free
/// for more than half of the wait, under the same exclusions. Kept hot locks are left out:
/// the client keeps them between uses, so a gap between two uses is not a free lock.
pub(super) fn free_while_wanted(
    events: &[Event],
    holds: &[Hold],
    windows: &[Window],
    repairs: &[Repair],
    stalls: &[(Option<u32>, u64, u64)],
    run_start: u64,
    run_end: u64,
) -> (Liveness, BTreeMap<LockKind, Liveness>) {
    let slack = STUCK_AFTER_HEAL.as_nanos() as u64;
    // The kinds each name was held as (a failed acquisition does not record its kind).
    let mut kinds_of: BTreeMap<&str, LockKind> = BTreeMap::new();
    let mut asks: Vec<Ask> = Vec::new();
    for h in holds {
        kinds_of.entry(h.name.as_str()).or_insert(h.kind);
        asks.push(Ask {
            worker: h.worker,
            task: task_of_hold(&h.id),
            kind: h.kind,
            name: h.name.clone(),
            invoked: h.asked,
            returned: h.start,
            timed_out: false,
        });
    }
    for event in events {
        if let Event::AcquireFailed {
            t_start,
            t,
            worker,
            task,
            name,
            kind,
            ..
        } = event
        {
            let Some(&lock) = kinds_of.get(name.as_str()) else {
                continue;
            };
            asks.push(Ask {
                worker: *worker,
                task: *task,
                kind: lock,
                name: name.clone(),
                invoked: *t_start,
                returned: *t,
                timed_out: kind == "timed_out",
            });
        }
    }
    // Free intervals per lock.
    let mut by_lock: BTreeMap<(LockKind, &str), Vec<&Hold>> = BTreeMap::new();
    for h in holds.iter().filter(|h| h.kind != LockKind::Hot) {
        by_lock
            .entry((lock_class(h.kind), h.name.as_str()))
            .or_default()
            .push(h);
    }
    let mut free: BTreeMap<(LockKind, &str), Vec<Free>> = BTreeMap::new();
    for (key, list) in &mut by_lock {
        list.sort_by_key(|h| h.start);
        let mut busy: Option<(u64, (u32, u32))> = None;
        let intervals = free.entry(*key).or_default();
        for h in list.iter() {
            let task = (h.worker, task_of_hold(&h.id));
            if let Some((until, after)) = busy {
                if h.start > until {
                    intervals.push(Free {
                        from: until,
                        to: h.start,
                        after,
                    });
                }
            }
            let end = freed_at(h);
            busy = match busy {
                Some((until, after)) if until >= end => Some((until, after)),
                _ => Some((end, task)),
            };
        }
        if let Some((until, after)) = busy.filter(|(until, _)| *until < run_end) {
            intervals.push(Free {
                from: until,
                to: run_end,
                after,
            });
        }
    }
    // Whether `[from, to]` of a wait on lock (kind, name) by `worker` is excused.
    let excused = |kind: LockKind, name: &str, worker: u32, from: u64, to: u64| {
        windows.iter().any(|w| {
            w.reaches(kind, name) && intersects(from, to, w.start, w.heal.saturating_add(slack))
        }) || repairs.iter().any(|r| {
            r.covers(kind, name) && intersects(from, to, r.since, r.end.saturating_add(slack))
        }) || stalls
            .iter()
            .any(|&(w, s0, s1)| w == Some(worker) && intersects(from, to, s0, s1))
    };
    let mut total = Liveness::default();
    let mut per_kind: BTreeMap<LockKind, Liveness> = BTreeMap::new();
    for ask in asks.iter().filter(|a| a.kind != LockKind::Hot) {
        let Some(intervals) = free.get(&(lock_class(ask.kind), ask.name.as_str())) else {
            continue;
        };
        let mut free_ns = 0;
        for f in intervals {
            let from = f.from.max(ask.invoked);
            let to = f.to.min(ask.returned);
            if to <= from || excused(ask.kind, &ask.name, ask.worker, from, to) {
                continue;
            }
            free_ns += to - from;
            if f.after == (ask.worker, ask.task) {
                continue;
            }
            let ms = ms_between(from, to);
            for figures in [&mut total, per_kind.entry(ask.kind).or_default()] {
                if figures.free_while_wanted_max_ms.is_none_or(|m| ms > m) {
                    figures.free_while_wanted_max_ms = Some(ms);
                    figures.free_while_wanted_worst = Some(WorstGap {
                        kind: ask.kind.name().to_owned(),
                        name: ask.name.clone(),
                        from_ms: ms_between(run_start, from),
                        to_ms: ms_between(run_start, to),
                        worker: ask.worker,
                        task: ask.task,
                    });
                }
            }
        }
        let wait = ask.returned.saturating_sub(ask.invoked);
        if ask.timed_out
            && 2 * free_ns > wait
            && !excused(ask.kind, &ask.name, ask.worker, ask.invoked, ask.returned)
        {
            total.timeouts_while_free += 1;
            per_kind.entry(ask.kind).or_default().timeouts_while_free += 1;
        }
    }
    (total, per_kind)
}
