//! Fault windows and what they excuse: when an injection of the nemesis may have destroyed
//! a lock's data or lost its fence counter, which workers' commands it could delay, and the
//! harness's repairs of Cluster shards left without a master.

use std::time::Duration;

use super::holds::{hold_key, Hold};
use super::FAILOVER_SLACK;
use crate::event::LockKind;
use crate::nemesis::Fault;
use crate::trigger::TargetKind;

/// One fault injection as the nemesis recorded it.
#[derive(Debug, Clone)]
pub(super) struct Window {
    pub(super) fault: String,
    pub(super) target: String,
    pub(super) start: u64,
    pub(super) heal: u64,
    /// The target its heal recorded (a force release's says whether it deleted a hold).
    pub(super) heal_target: String,
    pub(super) end: u64,
    /// The injection's number (pairs its heal), if recorded.
    pub(super) id: Option<u64>,
    /// What the trigger said at the start (`None`: not triggered).
    pub(super) triggered: Option<bool>,
    /// The lock the trigger aimed at, if any.
    pub(super) lock: Option<String>,
    /// Cluster: the slot ranges of the one shard the fault hit (`None`: every lock, as on
    /// other backends, for a fault of every server, or a history without the layout).
    pub(super) slots: Option<Vec<(u16, u16)>>,
    /// The step failed after its start (a `step_failed` harness event): its window stays
    /// (what it did before the failure may have touched holds), but it is not counted as
    /// an injection.
    pub(super) failed: bool,
}

impl Window {
    pub(super) fn kind(&self) -> Option<Fault> {
        Fault::from_name(&self.fault)
    }

    /// Whether the fault could delay or drop `worker`'s commands to the lock servers while
    /// it was active, by what it does, whichever schedule named it: a cut or slowed network
    /// of that worker (every partition, latency), or a server-side fault every client sees
    /// (connections killed or reset, scripts flushed, a server restarted, stopped, paused
    /// or failed over). Not a pause or kill of a worker process (those are `pause`, or end
    /// the holds), nor a clock jump (it moves TTLs, not commands: a forward one is
    /// `data_loss`).
    pub(super) fn delays_commands_of(&self, worker: u32) -> bool {
        match self.fault.as_str() {
            "partition"
            | "partition_both"
            | "partition_to_server"
            | "partition_from_server"
            | "partition_one_master"
            | "latency"
            | "terminate_backends" => self.worker() == Some(worker),
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
            | "split_brain_min_replicas"
            | "pause_server"
            | "restart_fast"
            | "restart_crash" => true,
            _ => false,
        }
    }

    /// A PostgreSQL crash (`restart_crash`) of a server running with
    /// `synchronous_commit=off` (its target says so): the last commits before the kill may
    /// be lost, lock rows and fence counters with them. With `on` a crash loses nothing
    /// acknowledged, and a fast restart never does.
    pub(super) fn async_commit_crash(&self) -> bool {
        self.kind() == Some(Fault::RestartCrash) && self.target.contains("synchronous_commit=off")
    }

    /// Whether the fault could reach the lock `name` held as `kind`: on a Cluster, only the
    /// locks whose slot is on the shard it hit.
    pub(super) fn reaches(&self, kind: LockKind, name: &str) -> bool {
        self.slots
            .as_ref()
            .is_none_or(|slots| in_slots(slots, kind, name))
    }

    /// Confines the fault to the shard it hit, when the target names one of its servers
    /// (`old master port N`, `server port N`, a master moved `to port N`) or only a lock key
    /// (`lock:{name} ...`). Faults of workers or of every server stay unconfined.
    ///
    /// `moved` lists the slots a slot migration moved, with the port they moved to and when
    /// the move began: a fault of a shard that received a slot before the fault ended
    /// reaches that slot's locks too (its old shard's faults still do as well: the side of
    /// more excuses, since a move's exact end on every node is not recorded).
    pub(super) fn confine(&mut self, shards: &[Shard], moved: &[(u16, u16, u64)]) {
        if shards.is_empty() || self.worker().is_some() {
            return;
        }
        let port = ["old master port ", " to port ", "server port "]
            .iter()
            .find_map(|marker| {
                let rest = self.target.split(marker).nth(1)?;
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse::<u16>()
                    .ok()
            });
        let shard = match port {
            Some(port) => shards.iter().find(|s| s.ports.contains(&port)),
            None => self
                .target
                .strip_prefix("lock:{")
                .and_then(|rest| rest.split('}').next())
                .and_then(|name| {
                    shards
                        .iter()
                        .find(|s| in_slots(&s.slots, LockKind::Plain, name))
                }),
        };
        self.slots = shard.map(|s| {
            let mut slots = s.slots.clone();
            slots.extend(
                moved
                    .iter()
                    .filter(|(_, to, began)| s.ports.contains(to) && *began <= self.end)
                    .map(|&(slot, _, _)| (slot, slot)),
            );
            slots
        });
    }

    /// The worker a fault targeted (`worker N pid P`).
    pub(super) fn worker(&self) -> Option<u32> {
        self.target
            .strip_prefix("worker ")
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
    }
}

/// Whether the key of lock `name` held as `kind` hashes into `slots`.
fn in_slots(slots: &[(u16, u16)], kind: LockKind, name: &str) -> bool {
    let slot = lock_test_support::key_slot(hold_key(kind, name).as_bytes());
    slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
}

/// One shard of a Cluster run's layout (a `shard` harness event): its slots and the ports of
/// its nodes. Failovers move the master among these nodes, never the slots.
#[derive(Debug, Clone)]
pub(super) struct Shard {
    pub(super) slots: Vec<(u16, u16)>,
    pub(super) ports: Vec<u16>,
}

/// A Cluster shard the harness found without a live master and repaired (a `repair_shard`
/// harness event): not a fault of the schedule (no row, no window), but the holds of its
/// locks during the outage are touched as by a failover: the takeover promotes a replica
/// that may lack the last writes (`data_loss`, the fence counter too), and commands to the
/// shard went unanswered (`net_fault`).
#[derive(Debug, Clone)]
pub(super) struct Repair {
    /// The last check that found the shard with a master: the outage began after it.
    pub(super) since: u64,
    /// When the repair began.
    pub(super) start: u64,
    /// When it was done.
    pub(super) end: u64,
    /// The shard's slot ranges (empty: unknown, every lock).
    pub(super) slots: Vec<(u16, u16)>,
}

impl Repair {
    /// Whether the lock `name` held as `kind` lives on the shard.
    pub(super) fn covers(&self, kind: LockKind, name: &str) -> bool {
        self.slots.is_empty() || in_slots(&self.slots, kind, name)
    }

    /// The span in which the shard's data may have been lost (as a failover's: until
    /// [`FAILOVER_SLACK`] after it was done).
    pub(super) fn loss_span(&self) -> (u64, u64) {
        (self.since, self.end + FAILOVER_SLACK.as_nanos() as u64)
    }
}
/// The window a `heal` closes: the one started with the same id, or (older histories, no
/// id) the latest one.
pub(super) fn heal_target(windows: &mut [Window], id: Option<u64>) -> Option<&mut Window> {
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
/// heal), a forward jump of a server's clock (its TTLs: the README's "clocks" row), a
/// Redlock master restarted empty under a lock held on a bare majority (the README's
/// Redlock column: two holders possible), and a PostgreSQL crash of a server with
/// `synchronous_commit=off` (`restart_crash`: the last commits, lock rows included). Not
/// excused: partitions of workers (their leases
/// run out and `lost()` says so), a backward clock jump (it only lengthens TTLs), a
/// coordinated `CLUSTER FAILOVER` (the replica catches up before it takes over).
pub(super) fn loss_span(backend: &str, w: &Window) -> Option<(u64, u64)> {
    let slack = FAILOVER_SLACK.as_nanos() as u64;
    if w.async_commit_crash() {
        return Some((w.start, w.heal));
    }
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
        "bare_majority"
        | "clock_jump_forward"
        | "clock_jump_forward_by_restart"
        | "clock_jump_forward_by_failover" => Some((w.start, w.heal)),
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

/// Whether `w` is a forward clock jump (of one server, by a restart or through a failover)
/// shorter than the lease: it expired only the keys whose time left was shorter than the
/// jump, so it does not prove that a given lock was destroyed (the server's own key events
/// say which were). Its holds are still excused as touched by it. The jump's size is the
/// last `<n> ms` of its target; a jump of unknown size (the emulation cuts every TTL by two
/// leases) destroys.
pub(super) fn partial_clock_jump(w: &Window, lease: Duration) -> bool {
    if !matches!(
        w.fault.as_str(),
        "clock_jump_forward" | "clock_jump_forward_by_restart" | "clock_jump_forward_by_failover"
    ) {
        return false;
    }
    let Some(at) = w.target.rfind(" ms") else {
        return false;
    };
    let digits: String = w.target[..at]
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits
        .parse::<u64>()
        .is_ok_and(|ms| u128::from(ms) < lease.as_millis())
}

/// Redlock: whether masters restarted empty during hold `h` (`stop_minority`,
/// `restart_empty`) while the lock may have lived on fewer than all masters, because a fault
/// kept a master from the lock's acquisition or renewals in the lease before the hold or
/// during it (a partition, latency, paused or killed masters, a restart, a forward clock
/// jump). The README's Redlock column: a master that comes back empty within a lease can
/// admit a second holder of a lock held on a bare majority. Alone, two of five restarting
/// empty leave a lock taken on all five on a majority: not excused then.
pub(super) fn redlock_empty_restart_of_a_reduced_lock(
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
                            | "clock_jump_forward_by_failover"
                    )
                    && intersects(h.start.saturating_sub(lease), empty.heal, w.start, w.heal)
            })
        })
}

/// How long after a failover's heal the old master's key events are ignored: it may run on
/// with its stale data (expiring keys the new master has renewed) until the sentinels or the
/// cluster demote it and it resyncs.
pub(super) const STALE_MASTER_GRACE: Duration = Duration::from_secs(5);

/// Whether a key event of `server` at `t` comes from an old master a failover-type fault
/// left behind (`old master port N` in its target), within the fault and
/// [`STALE_MASTER_GRACE`] after its heal: not the lock's truth then.
pub(super) fn stale_master(windows: &[Window], server: &str, t: u64) -> bool {
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
pub(super) fn loses_counter(backend: &str, w: &Window) -> bool {
    if w.async_commit_crash() {
        return true;
    }
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

/// A real jump of one lock server's wall clock by the clock library (`clock_jump_forward`
/// or `clock_jump_back` with the target `server port P pid N <+/-ms> ms`): (port, pid,
/// signed ms). `None` for the emulation (it moves TTLs, not clocks) and every other fault.
pub(super) fn server_clock_jump(w: &Window) -> Option<(u16, u32, i64)> {
    if !matches!(
        w.fault.as_str(),
        "clock_jump_forward" | "clock_jump_back" | "clock_jump_backward"
    ) {
        return None;
    }
    let mut words = w.target.strip_prefix("server port ")?.split_whitespace();
    let port = words.next()?.parse().ok()?;
    let pid = match (words.next()?, words.next()?) {
        ("pid", pid) => pid.parse().ok()?,
        _ => return None,
    };
    let ms = words.next()?.parse().ok()?;
    (words.next()? == "ms").then_some((port, pid, ms))
}

/// Whether the wall clock the server reads for a lock `name` held as `kind` may have stepped
/// back between two grants (`from`, `to`), by what the harness did to the servers' clocks:
/// a real backward jump of a server that reaches the lock in between, or a real jump before
/// `to` that left some server's clock off by a net offset (a restart drops the offset and a
/// failover changes the clock the lock is read by: a server ahead steps back at its
/// restart, a master behind steps back when it is promoted). With the fence counter lost in
/// between, a token floor taken from the server's clock may then repeat a token (the
/// README's assumption: server clocks do not step back). A jump of the clients' clocks, or
/// the emulation (every TTL cut or lengthened, no clock moved), is no such step.
pub(super) fn server_clock_back(
    windows: &[Window],
    kind: LockKind,
    name: &str,
    from: u64,
    to: u64,
) -> bool {
    let mut net: std::collections::BTreeMap<(u16, u32), i64> = Default::default();
    for w in windows
        .iter()
        .filter(|w| w.start <= to && w.reaches(kind, name))
    {
        let Some((port, pid, ms)) = server_clock_jump(w) else {
            continue;
        };
        if ms < 0 && w.start >= from {
            return true;
        }
        *net.entry((port, pid)).or_default() += ms;
    }
    net.values().any(|&ms| ms != 0)
}

/// An operator's force release as the nemesis recorded it: the start's target
/// `lock:{name} <kind> counter <n|?>` (the fence counter read just before the start) and the
/// heal's, which ends `deleted true` when a live hold was deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ForceRelease {
    pub(super) name: String,
    pub(super) kind: TargetKind,
    pub(super) counter: Option<u64>,
    pub(super) deleted: bool,
}

/// The force release `w` records, if it is one.
pub(super) fn force_release_of(w: &Window) -> Option<ForceRelease> {
    if w.kind() != Some(Fault::ForceRelease) {
        return None;
    }
    let rest = w.target.strip_prefix("lock:{")?;
    let (name, rest) = rest.split_once('}')?;
    let mut words = rest.split_whitespace();
    let kind = TargetKind::from_name(words.next()?)?;
    let counter = match (words.next(), words.next()) {
        (Some("counter"), Some(n)) => n.parse().ok(),
        _ => None,
    };
    Some(ForceRelease {
        name: name.to_owned(),
        kind,
        counter,
        deleted: w.heal_target.ends_with(" deleted true"),
    })
}

/// Whether hold `h` was deleted by the force release `w` while it was held: `w` deleted a
/// live hold of `h`'s name and primitive, `h` was still believed at `w`'s start, and it had
/// been granted before the deletion: it began before `w`'s start, or its token is at or
/// below the fence counter read just before (a grant recorded late). A hold granted between
/// that read and the deletion and recorded after the start is not counted (its overlaps stay
/// violations, to be read); the successors (granted after the deletion) never are.
pub(super) fn force_released(w: &Window, h: &Hold) -> bool {
    let Some(f) = force_release_of(w) else {
        return false;
    };
    let primitive = match f.kind {
        TargetKind::Plain => hold_key(h.kind, &h.name) == super::holds::lock_key(&h.name),
        TargetKind::Fair => h.kind == LockKind::Fair,
        TargetKind::ReadWrite => matches!(h.kind, LockKind::Read | LockKind::Write),
        TargetKind::Semaphore => h.kind == LockKind::Permit,
    };
    f.deleted
        && primitive
        && h.name == f.name
        && h.end > w.start
        && (h.start < w.start || f.counter.is_some_and(|c| h.token <= c))
}

/// Which window a time falls in (`None`: before the first fault).
pub(super) fn window_of(windows: &[Window], t: u64) -> Option<usize> {
    windows.iter().rposition(|w| w.start <= t && t < w.end)
}

/// Whether `[a0, a1]` and `[b0, b1]` intersect.
pub(super) fn intersects(a0: u64, a1: u64, b0: u64, b1: u64) -> bool {
    a0 <= b1 && b0 <= a1
}

/// How late a replica may report the removal its master reported first (replication lag
/// without a fault; under `replication_lag` and failovers the holds are excused anyway).
pub(super) const REPLICA_REPEAT: Duration = Duration::from_secs(1);

/// One key's removals, in time order, without the replicas' repeats (Sentinel, Cluster):
/// every node reports a removal its master replicated, and a replica that lags reports it
/// after the next holder took the key (seen: 71 ms after the master's, 55 ms after the next
/// acquisition), which would date a loss of that holder. A removal counts as a repeat when
/// another server reported one within [`REPLICA_REPEAT`] before it that this server has
/// not already repeated.
pub(super) fn without_replicated_repeats<'a>(times: &[(u64, &'a str)]) -> Vec<(u64, &'a str)> {
    let window = REPLICA_REPEAT.as_nanos() as u64;
    // Originals: (time, server, servers that repeated it).
    let mut originals: Vec<(u64, &str, Vec<&str>)> = Vec::new();
    for &(t, server) in times {
        // Sorted by time: only the originals within the window before `t` can match.
        let repeat = originals
            .iter_mut()
            .rev()
            .take_while(|(at, _, _)| t.saturating_sub(*at) <= window)
            .find(|(_, by, repeated)| *by != server && !repeated.contains(&server));
        match repeat {
            Some((_, _, repeated)) => repeated.push(server),
            None => originals.push((t, server, Vec::new())),
        }
    }
    originals.into_iter().map(|(t, s, _)| (t, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(fault: &str, target: &str) -> Window {
        Window {
            fault: fault.to_owned(),
            target: target.to_owned(),
            start: 10,
            heal: 20,
            heal_target: String::new(),
            end: 30,
            id: Some(0),
            triggered: Some(true),
            lock: None,
            slots: None,
            failed: false,
        }
    }

    /// A PostgreSQL crash loses data and fence counters only with `synchronous_commit=off`;
    /// a fast restart, a paused server and terminated sessions lose nothing; all of them
    /// delay commands (terminated sessions: of the worker aimed at only).
    #[test]
    fn a_postgres_crash_loses_data_only_with_asynchronous_commits() {
        let off = window(
            "restart_crash",
            "server port 5 pid 7, synchronous_commit=off, 100 WAL bytes unflushed",
        );
        let on = window(
            "restart_crash",
            "server port 5 pid 7, synchronous_commit=on",
        );
        let fast = window(
            "restart_fast",
            "server port 5 pid 7, synchronous_commit=off",
        );
        assert_eq!(loss_span("postgres", &off), Some((10, 20)));
        assert!(loses_counter("postgres", &off));
        for w in [&on, &fast] {
            assert_eq!(loss_span("postgres", w), None, "{}", w.target);
            assert!(!loses_counter("postgres", w), "{}", w.target);
        }
        let pause = window("pause_server", "server port 5 pid 7: 9 processes stopped");
        assert_eq!(loss_span("postgres", &pause), None);
        for w in [&off, &on, &fast, &pause] {
            assert!(w.delays_commands_of(3), "{}", w.fault);
        }
        let terminated = window(
            "terminate_backends",
            "worker 2 pid 99: 4 sessions terminated",
        );
        assert!(terminated.delays_commands_of(2));
        assert!(!terminated.delays_commands_of(3));
        assert_eq!(loss_span("postgres", &terminated), None);
    }
}
