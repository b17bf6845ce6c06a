//! Liveness: how long a lock sat free while another task was asking for it, outside
//! faults and stalls of the waiter (its process, or its async runtime: `RuntimeStall`). A gap above its kind's bound ([`bound`]) is a
//! violation (`liveness_gap`).

use std::collections::BTreeMap;
use std::time::Duration;

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
/// surrender, the run's end); a `hold_at_least` lock stays until its minimum hold is over,
/// counted as the library counts it: from the grant (the acquire call's return; the
/// minimum-hold rule counts from the call's start, the earliest it could be). A hold
/// whose process died holding it (no loss, release or surrender) occupies its lock for a
/// lease more: a crashed holder's lock is free after at most one lease, which the waiters
/// sit out (a lease of 8 s outlasts the fault window's 2 s past the kill).
fn freed_at(h: &Hold, lease: u64) -> u64 {
    let died = h.lost.is_none() && h.surrendered.is_none() && h.release_start.is_none();
    let end = if h.lost.is_some() || h.surrendered.is_some() {
        h.end
    } else if died {
        h.end.saturating_add(lease)
    } else {
        h.release_end.map_or(h.end, |r| r.max(h.end))
    };
    end.max(h.start.saturating_add(h.min_hold))
}

/// The longest a lock of `kind` may sit free while another task wants it, outside fault
/// windows and stalls of the waiter: a hand-off (a release's wake-up and the woken
/// waiter's attempt, a fair lock's grant and its confirmation) takes a round trip or
/// two; this leaves room for a loaded machine's scheduling and nothing for a missed
/// wake-up (a waiter that sleeps out a lease or a queue place). `None`: not judged
/// (kept hot locks: the client keeps them between uses).
pub(super) fn bound(kind: LockKind) -> Option<Duration> {
    match kind {
        LockKind::Hot => None,
        _ => Some(GAP_BOUND),
    }
}

/// See [`bound`].
pub(super) const GAP_BOUND: Duration = Duration::from_millis(500);

/// A gap longer than its kind's [`bound`].
pub(super) struct GapOver {
    pub(super) gap: WorstGap,
    pub(super) from: u64,
    pub(super) ms: f64,
    pub(super) bound_ms: f64,
}

/// One stretch in which a lock was taken: from, to, and by which task.
struct Taken {
    from: u64,
    to: u64,
    task: (u32, u32),
}

/// The lock name a failed `lock_all` was waiting for when it gave up, from its error
/// (`... waiting for lock `NAME``).
fn waited_for(error: &str) -> Option<&str> {
    let rest = error.rsplit_once("waiting for lock `")?.1;
    rest.split_once('`').map(|(name, _)| name)
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
///
/// A `lock_all` takes its names one by one in sorted order and is recorded as held only
/// once it has them all: the worker records when each name was granted
/// (`LockGuard::acquired_at`), and each name is taken from its grant and asked for from
/// the call (the first name) or from the grant of the name before it. A failed
/// `lock_all` returns no grants: the names before the one it gave up on are counted as
/// taken from its call until it returned, and its ask of that name only when it is the
/// first (it asked for a later one only once it had those before), which hides a gap of
/// those names while that call waited for them (the plain kind's bound covers the same
/// wait). Histories without grant times count a successful `lock_all`'s names before its
/// last as a failed one's. A fair lock's fault windows reach on past their heal by a waiter's
/// place in the queue and a hand-over lease (`QUEUE_PRESENCE` + the smaller of the lease
/// and `QUEUE_PRESENCE`): a waiter killed, paused or cut off keeps its place that long,
/// and a release or a leaving waiter hands the lock to it when it is at the head. A
/// read-write lock's reach by `QUEUE_PRESENCE`: a waiting writer killed, paused or cut off
/// keeps its place as long, and readers and writers wait behind it (writers first).
///
/// Also returns the gaps longer than their kind's [`bound`].
#[allow(clippy::too_many_arguments)]
pub(super) fn free_while_wanted(
    events: &[Event],
    holds: &[Hold],
    windows: &[Window],
    repairs: &[Repair],
    stalls: &[(Option<u32>, u64, u64)],
    run_start: u64,
    run_end: u64,
    lease: Duration,
) -> (Liveness, BTreeMap<LockKind, Liveness>, Vec<GapOver>) {
    let slack = STUCK_AFTER_HEAL.as_nanos() as u64;
    let presence = distlock::QUEUE_PRESENCE;
    let fair_slack = slack
        .saturating_add(presence.as_nanos() as u64)
        .saturating_add(lease.min(presence).as_nanos() as u64);
    // A read-write lock's waiting writer keeps its place as long (readers wait behind it).
    let rw_slack = slack.saturating_add(presence.as_nanos() as u64);
    let lease_ns = lease.as_nanos() as u64;
    // The kinds each name was held as (a failed acquisition does not record its kind).
    let mut kinds_of: BTreeMap<&str, LockKind> = BTreeMap::new();
    // When each lock of a `lock_all` was granted (runs before these were recorded have none).
    let granted: BTreeMap<&str, u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Granted { t, hold, .. } => Some((hold.as_str(), *t)),
            _ => None,
        })
        .collect();
    // A `lock_all`'s holds, per set, in the order it took them (sorted by name).
    let mut sets: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for h in holds.iter().filter(|h| h.kind == LockKind::Multi) {
        if let Some((set, _)) = h.id.rsplit_once('/') {
            sets.entry(set).or_default().push(h);
        }
    }
    for set in sets.values_mut() {
        set.sort_by(|a, b| a.name.cmp(&b.name));
    }
    // Each lock's ask: from the call (a `lock_all`'s later names: from the grant of the
    // name before) to the grant.
    let granted_of = |h: &Hold| granted.get(h.id.as_str()).copied();
    let mut asks: Vec<Ask> = Vec::new();
    for h in holds {
        kinds_of.entry(h.name.as_str()).or_insert(h.kind);
        let (mut invoked, mut returned) = (h.asked, h.start);
        if let Some(set) = h.id.rsplit_once('/').and_then(|(set, _)| sets.get(set)) {
            if let Some(at) = granted_of(h) {
                returned = at;
                let before = set.iter().take_while(|o| o.name != h.name).last();
                if let Some(before) = before {
                    invoked = granted_of(before).unwrap_or(h.start);
                }
            }
        }
        asks.push(Ask {
            worker: h.worker,
            task: task_of_hold(&h.id),
            kind: h.kind,
            name: h.name.clone(),
            invoked,
            returned,
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
            error,
        } = event
        {
            if name.contains('+') {
                // A failed `lock_all`: the name it gave up on is its ask, when it is the
                // first (it asked for a later one only once it had those before).
                let first = name.split('+').min();
                if let Some(last) = waited_for(error).filter(|w| Some(*w) == first) {
                    if let Some(&lock) = kinds_of.get(last) {
                        asks.push(Ask {
                            worker: *worker,
                            task: *task,
                            kind: lock,
                            name: last.to_owned(),
                            invoked: *t_start,
                            returned: *t,
                            timed_out: kind == "timed_out",
                        });
                    }
                }
                continue;
            }
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
    // When each lock was taken.
    let mut by_lock: BTreeMap<(LockKind, String), Vec<Taken>> = BTreeMap::new();
    for h in holds.iter().filter(|h| h.kind != LockKind::Hot) {
        by_lock
            .entry((lock_class(h.kind), h.name.clone()))
            .or_default()
            .push(Taken {
                from: granted_of(h).unwrap_or(h.start),
                to: freed_at(h, lease_ns),
                task: (h.worker, task_of_hold(&h.id)),
            });
    }
    // A `lock_all` without its grant times: its names before its last, from its call
    // (see above).
    for set in sets.values() {
        if set.iter().any(|h| granted_of(h).is_some()) {
            continue;
        }
        for h in set.iter().take(set.len().saturating_sub(1)) {
            by_lock
                .entry((LockKind::Multi, h.name.clone()))
                .or_default()
                .push(Taken {
                    from: h.asked,
                    to: h.start,
                    task: (h.worker, task_of_hold(&h.id)),
                });
        }
    }
    for event in events {
        if let Event::AcquireFailed {
            t_start,
            t,
            worker,
            task,
            name,
            error,
            ..
        } = event
        {
            let Some(last) = name.contains('+').then(|| waited_for(error)).flatten() else {
                continue;
            };
            let mut names: Vec<&str> = name.split('+').collect();
            names.sort_unstable();
            for taken in names.iter().take_while(|n| **n != last) {
                by_lock
                    .entry((LockKind::Multi, (*taken).to_owned()))
                    .or_default()
                    .push(Taken {
                        from: *t_start,
                        to: *t,
                        task: (*worker, *task),
                    });
            }
        }
    }
    // Free intervals per lock.
    let mut free: BTreeMap<(LockKind, String), Vec<Free>> = BTreeMap::new();
    for (key, list) in &mut by_lock {
        list.sort_by_key(|taken| taken.from);
        let mut busy: Option<(u64, (u32, u32))> = None;
        let intervals = free.entry(key.clone()).or_default();
        for taken in list.iter() {
            if let Some((until, after)) = busy {
                if taken.from > until {
                    intervals.push(Free {
                        from: until,
                        to: taken.from,
                        after,
                    });
                }
            }
            let end = taken.to;
            busy = match busy {
                Some((until, after)) if until >= end => Some((until, after)),
                _ => Some((end, taken.task)),
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
    // Every fault window reaches every lock here, a Cluster shard's too: the cluster
    // client holds every request while it recovers from a master that stopped answering
    // (redis-rs 1.8's async cluster connection), so a hung or failed-over master delays the
    // waiters of every shard (round 4's Cluster runs: renewals of locks on healthy shards
    // timed out together while one master was paused). Safety keeps the shard's reach.
    let excused = |kind: LockKind, worker: u32, from: u64, to: u64| {
        let reach = match kind {
            LockKind::Fair => fair_slack,
            LockKind::Read | LockKind::Write => rw_slack,
            _ => slack,
        };
        windows
            .iter()
            .any(|w| intersects(from, to, w.start, w.heal.saturating_add(reach)))
            || repairs
                .iter()
                .any(|r| intersects(from, to, r.since, r.end.saturating_add(slack)))
            || stalls
                .iter()
                .any(|&(w, s0, s1)| w == Some(worker) && intersects(from, to, s0, s1))
    };
    let mut total = Liveness::default();
    let mut per_kind: BTreeMap<LockKind, Liveness> = BTreeMap::new();
    let mut over: Vec<GapOver> = Vec::new();
    for ask in asks.iter().filter(|a| a.kind != LockKind::Hot) {
        let Some(intervals) = free.get(&(lock_class(ask.kind), ask.name.clone())) else {
            continue;
        };
        let mut free_ns = 0;
        for f in intervals {
            let from = f.from.max(ask.invoked);
            let to = f.to.min(ask.returned);
            if to <= from || excused(ask.kind, ask.worker, from, to) {
                continue;
            }
            free_ns += to - from;
            if f.after == (ask.worker, ask.task) {
                continue;
            }
            let ms = ms_between(from, to);
            let gap = WorstGap {
                kind: ask.kind.name().to_owned(),
                name: ask.name.clone(),
                from_ms: ms_between(run_start, from),
                to_ms: ms_between(run_start, to),
                worker: ask.worker,
                task: ask.task,
            };
            if let Some(bound) = bound(ask.kind).filter(|b| to - from > b.as_nanos() as u64) {
                over.push(GapOver {
                    gap: gap.clone(),
                    from,
                    ms,
                    bound_ms: bound.as_secs_f64() * 1000.0,
                });
            }
            for figures in [&mut total, per_kind.entry(ask.kind).or_default()] {
                if figures.free_while_wanted_max_ms.is_none_or(|m| ms > m) {
                    figures.free_while_wanted_max_ms = Some(ms);
                    figures.free_while_wanted_worst = Some(gap.clone());
                }
            }
        }
        let wait = ask.returned.saturating_sub(ask.invoked);
        if ask.timed_out
            && 2 * free_ns > wait
            && !excused(ask.kind, ask.worker, ask.invoked, ask.returned)
        {
            total.timeouts_while_free += 1;
            per_kind.entry(ask.kind).or_default().timeouts_while_free += 1;
        }
    }
    (total, per_kind, over)
}
