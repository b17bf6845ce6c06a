use super::*;
use crate::event::TaskMode;

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
fn a_step_that_failed_after_its_start_is_not_an_injection() {
    let step_failed = |id: u64| Event::Harness {
        t_start: 500 * MS,
        t: 510 * MS,
        backend: "cluster".into(),
        action: "step_failed".into(),
        since: None,
        slots: Vec::new(),
        ports: Vec::new(),
        id: Some(id),
        detail: "failover (injection 7): master 0 has no replica to fail over to".into(),
        ok: false,
    };
    let events = [
        acq(100, 0, "w0-t0-0", 1),
        fault_id(
            400,
            "failover",
            "start",
            "lock:{chaos-0} old master port 1",
            7,
            Some(true),
        ),
        step_failed(7),
        fault_id(510, "failover", "heal", "step failed: no replica", 7, None),
        fault_id(
            600,
            "failover",
            "start",
            "lock:{chaos-0} old master port 1",
            8,
            Some(true),
        ),
        fault_id(700, "failover", "heal", "master 1 -> 2", 8, None),
        rel(1000, 0, "w0-t0-0", 1, "ok"),
    ];
    let report = check(&events, None);
    let row = report.rows.iter().find(|r| r.fault == "failover").unwrap();
    assert_eq!(row.injections, 1);
    assert_eq!(
        report
            .harness
            .iter()
            .filter(|h| h.action == "step_failed")
            .count(),
        1
    );
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
            // A token of its own: a repeated token is a violation whatever the fault
            // (`duplicate_token`), and this test is about the overlap.
            acq(2100, 2, "w2-t0-0", 2),
            rel(2200, 2, "w2-t0-0", 2, "ok"),
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
        ports: Vec::new(),
        id: None,
        detail: "CLUSTER FAILOVER TAKEOVER on node 3".into(),
        ok: true,
    }
}

fn shard(slots: Vec<(u16, u16)>, ports: Vec<u16>) -> Event {
    Event::Harness {
        t_start: 0,
        t: 0,
        backend: "cluster".into(),
        action: "shard".into(),
        since: None,
        slots,
        ports,
        id: None,
        detail: String::new(),
        ok: true,
    }
}

#[test]
fn a_fault_of_one_cluster_shard_touches_only_the_locks_of_that_shard() {
    let slot = lock_test_support::key_slot(lock_key(NAME).as_bytes());
    // NAME's shard has nodes 1 and 11; the other shard every other slot, nodes 2 and 12.
    let mut layout = vec![shard(vec![(slot, slot)], vec![1, 11])];
    let mut rest = Vec::new();
    if slot > 0 {
        rest.push((0, slot - 1));
    }
    if slot < 16383 {
        rest.push((slot + 1, 16383));
    }
    layout.push(shard(rest, vec![2, 12]));
    let run = |target: &str, with_layout: bool| {
        let mut events = vec![
            acq(100, 0, "w0-t0-0", 5),
            fault(500, "failover", "start", target),
            fault(600, "failover", "heal", "node 3"),
            acq(1000, 1, "w1-t0-0", 6),
            rel(3000, 0, "w0-t0-0", 5, "ok"),
            rel(3100, 1, "w1-t0-0", 6, "ok"),
        ];
        if with_layout {
            events.extend(layout.clone());
        }
        let report = analyze("cluster", &events, None, LEASE, 0, 100_000 * MS);
        counted(&report)
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // The failed-over master served NAME: the overlap is excused (data loss).
    assert!(run("lock:{x} old master port 11", true).is_empty());
    assert!(run("server port 1 pid 9 +2000 ms", true).is_empty());
    // Another shard's master: nothing excuses the overlap.
    assert!(run("lock:{x} old master port 2", true).contains(&"overlap".to_owned()));
    assert!(run(
        "master moved from port 2 (clock +0 ms) to port 12 (clock +900 ms)",
        true
    )
    .contains(&"overlap".to_owned()));
    // Without the layout (an older history), every lock is taken as touched.
    assert!(run("lock:{x} old master port 2", false).is_empty());
}

/// A slot that a `slot_migration` moved to another shard is reached by that shard's later
/// faults: the layout recorded at the start no longer places it (seen: a forward clock jump
/// of the receiving master expired a moved lock early, and the overlap was counted).
#[test]
fn a_migrated_slot_is_reached_by_its_new_shards_faults() {
    let slot = lock_test_support::key_slot(lock_key(NAME).as_bytes());
    let mut rest = Vec::new();
    if slot > 0 {
        rest.push((0, slot - 1));
    }
    if slot < 16383 {
        rest.push((slot + 1, 16383));
    }
    let run = |migrated: bool| {
        let mut events = vec![
            shard(vec![(slot, slot)], vec![1, 11]),
            shard(rest.clone(), vec![2, 12]),
        ];
        if migrated {
            events.push(fault(
                200,
                "slot_migration",
                "start",
                "lock:{x} old master port 1",
            ));
            events.push(fault(
                300,
                "slot_migration",
                "heal",
                &format!("slot {slot}: master 1 -> 2"),
            ));
        }
        events.extend([
            acq(400, 0, "w0-t0-0", 5),
            // The receiving master's clock jumps forward: the moved lock expires early.
            fault(
                500,
                "clock_jump_forward",
                "start",
                "server port 2 pid 9 +2000 ms",
            ),
            fault(
                510,
                "clock_jump_forward",
                "heal",
                "server port 2 pid 9 +2000 ms",
            ),
            acq(1000, 1, "w1-t0-0", 6),
            rel(3000, 0, "w0-t0-0", 5, "ok"),
            rel(3100, 1, "w1-t0-0", 6, "ok"),
        ]);
        let report = analyze("cluster", &events, None, LEASE, 0, 100_000 * MS);
        counted(&report)
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert!(run(true).is_empty(), "{:?}", run(true));
    // Without the move, the jump of the other shard's master excuses nothing.
    assert!(run(false).contains(&"overlap".to_owned()));
}

/// The cluster client holds every request while it recovers from one shard's hung master:
/// a liveness gap on another shard's lock during that shard's fault is not counted (an
/// overlap there still is, as above).
#[test]
fn a_fault_of_one_cluster_shard_reaches_every_shards_liveness() {
    let slot = lock_test_support::key_slot(lock_key(NAME).as_bytes());
    let other = if slot == 0 {
        vec![(1, 16383)]
    } else {
        vec![(0, slot - 1)]
    };
    let events = |with_fault: bool| {
        let mut events = vec![
            shard(vec![(slot, slot)], vec![1, 11]),
            shard(other.clone(), vec![2, 12]),
            acq(1_000, 1, "w1-t0-0", 1),
            rel(2_000, 1, "w1-t0-0", 1, "ok"),
            acq_asked(1_500, 4_000, 2, "w2-t0-0", 2),
            rel(5_000, 2, "w2-t0-0", 2, "ok"),
        ];
        if with_fault {
            events.push(fault(
                2_500,
                "failover",
                "start",
                "lock:{x} old master port 2",
            ));
            events.push(fault(3_000, "failover", "heal", "node 12"));
        }
        analyze("cluster", &events, None, LEASE, 0, 100_000 * MS)
    };
    assert_eq!(counted(&events(false)), ["liveness_gap"]);
    assert!(counted(&events(true)).is_empty());
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
        in_lock_servers: false,
    }]
}

/// As [`logged`], read from the lock's servers (`--fence-store lock-redis`): the log lists
/// the writes that survived.
fn in_lock_servers(entries: &[&str], value: i64) -> Vec<RegisterTruth> {
    let mut truth = logged(entries, value);
    truth[0].in_lock_servers = true;
    truth
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
    // The stale write overwrote A's acknowledged one: A's write is lost too.
    assert_eq!(
        counted(&report),
        ["stale_write_accepted", "lost_write"],
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
    // A write the worker saw accepted must be in the log (and the final value, 0, does
    // not have it: lost).
    let report = check(&events, Some(&logged(&[], 0)));
    assert_eq!(counted(&report), ["write_not_logged", "lost_write"]);
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

/// PostgreSQL reports no removal: a plain holder's release held up in a paused server past
/// the lease's end answers `not_held`, and is excused (`net_fault`) only when a fault
/// delayed that worker's commands during the release; elsewhere it stays a violation.
#[test]
fn a_postgres_release_held_up_by_a_paused_server_is_excused() {
    let (acquired, released) = (
        acq(100, 1, "w1-t0-0", 5),
        rel_until(1000, 1400, 1, "w1-t0-0", 5, "not_held"),
    );
    let run = |backend: &str, fault: Option<(&str, &str)>| {
        let mut events = vec![acquired.clone(), released.clone()];
        if let Some((fault, target)) = fault {
            events.push(fault_id(800, fault, "start", target, 1, None));
            events.push(fault_id(1380, fault, "heal", target, 1, None));
        }
        analyze(backend, &events, None, LEASE, 0, 100_000 * MS)
    };
    let paused = Some(("pause_server", "server port 5 pid 7: 9 processes stopped"));
    let report = run("postgres", paused);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(report.excused_by().get("net_fault"), Some(&1));
    // Without the fault, or on a backend whose server reports removals: a violation.
    assert_eq!(
        counted(&run("postgres", None)),
        ["loss_first_seen_at_release"]
    );
    assert_eq!(
        counted(&run("test", paused)),
        ["loss_first_seen_at_release"]
    );
    // Another worker's sessions terminated: not this release's delay.
    let other = Some((
        "terminate_backends",
        "worker 2 pid 9: 4 sessions terminated",
    ));
    assert_eq!(
        counted(&run("postgres", other)),
        ["loss_first_seen_at_release"]
    );
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
fn a_loss_followed_by_a_partition_of_the_holder_is_bounded_by_the_lease() {
    // The key was deleted at 2000 ms; the holder's worker was partitioned from the
    // servers from 2040 ms (or already from 1900 ms), so the renewal that would have found the deletion got no
    // answer and lost() waited for the local deadline (a lease after the last answered
    // renewal): 1500 ms + 100 ms after the loss at most, not 1100 ms.
    let events = |lost_at: u64, partitioned: bool| {
        let mut events = vec![acq(100, 0, "w0-t0-0", 5), gone(2000)];
        if partitioned {
            events.push(fault_id(
                if lost_at.is_multiple_of(2) {
                    2040
                } else {
                    1900
                },
                "partition_to_server",
                "start",
                "worker 0 pid 9 servers [0] Both",
                1,
                None,
            ));
            events.push(fault_id(
                4500,
                "partition_to_server",
                "heal",
                "worker 0 pid 9 servers [0] Both",
                1,
                None,
            ));
        }
        events.push(lost(lost_at, 0, "w0-t0-0", 5));
        events.push(rel(lost_at, 0, "w0-t0-0", 5, "lease_lost"));
        events
    };
    for lost_at in [3480, 3481] {
        let report = check(&events(lost_at, true), None);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    }
    // Another worker's partition does not lengthen it.
    let mut other = events(3480, false);
    let target = "worker 3 pid 9 servers [0] Both";
    other.push(fault_id(
        2040,
        "partition_to_server",
        "start",
        target,
        1,
        None,
    ));
    other.push(fault_id(
        4500,
        "partition_to_server",
        "heal",
        target,
        1,
        None,
    ));
    assert_eq!(counted(&check(&other, None)), ["late_lost"]);
    // Past the local deadline's bound even so: late.
    let report = check(&events(3700, true), None);
    assert_eq!(counted(&report), ["late_lost"], "{:#?}", report.violations);
    // Without the partition the usual bound holds.
    let report = check(&events(3200, false), None);
    assert_eq!(counted(&report), ["late_lost"], "{:#?}", report.violations);
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
fn a_successor_whose_grant_a_pause_may_have_undone_proves_no_loss() {
    // Worker 1's acquire call ran 1000..3100 ms and was paused 1200..3000 ms: its grant
    // may have expired before the call returned (seen on `lock_all`, which takes its
    // names one after another). Worker 0 took the lock at 2800 ms and held it, released
    // `ok`, until 5500 ms. Worker 1's hold overlapping it is excused (paused), and it is
    // no sign that worker 0's lock was gone: no late lost().
    let mut events = vec![
        acq(1000, 1, "w1-t0-0", 1),
        fault(1200, "pause_holder", "start", "worker 1 pid 9"),
        acq(2800, 0, "w0-t0-0", 2),
        fault(3000, "pause_holder", "heal", "worker 1 pid 9"),
        lost(3200, 1, "w1-t0-0", 1),
        rel(3300, 1, "w1-t0-0", 1, "lease_lost"),
        rel(5500, 0, "w0-t0-0", 2, "ok"),
    ];
    if let Event::Acquired { t, t_start, .. } = &mut events[0] {
        *t_start = 1000 * MS;
        *t = 3100 * MS;
    }
    let report = check(&events, None);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    // The same successor without the pause dates the loss.
    events.remove(1);
    events.remove(2);
    let report = check(&events, None);
    let kinds = counted(&report);
    assert!(kinds.contains(&"late_lost"), "{:#?}", report.violations);
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
fn sibling_holds_of_one_owner_exclude_each_other() {
    use LockKind::{Plain, Sibling};
    // Two branches of one scope got `sib-0` at once under one owner and one token: the
    // client let the second re-enter the first's lock.
    let run = |kind: LockKind| {
        let [a_acq, a_rel] = hold_of(kind, "sib-0", "w1-t9-0", "c:7", 1, 4, (100, 100, 300));
        let [b_acq, b_rel] = hold_of(kind, "sib-0", "w1-t9-1", "c:7", 1, 4, (100, 110, 290));
        check(&[a_acq, b_acq, b_rel, a_rel], None)
    };
    // Two holders (each branch is its own) with one token: a duplicate too.
    assert_eq!(counted(&run(Sibling)), ["overlap", "duplicate_token"]);
    // Plain holds of one owner are one owner's re-entry, not an overlap, and share its
    // token.
    assert!(counted(&run(Plain)).is_empty());
}

#[test]
fn token_order_is_checked_between_conflicting_holds_only() {
    use LockKind::{Permit, Read, Write};
    // A reader's acquisition was on its way (token 5) while another reader came and
    // went with token 7: readers share the lock, so this is no regression.
    let events = |first: LockKind, second: LockKind| {
        let [a_acq, a_rel] = hold_of(first, "rw-0", "w1-t7-0", "a", 1, 7, (100, 110, 300));
        let [b_acq, b_rel] = hold_of(second, "rw-0", "w2-t7-0", "b", 2, 5, (90, 400, 500));
        check(&[a_acq, a_rel, b_acq, b_rel], None)
    };
    assert!(counted(&events(Read, Read)).is_empty());
    assert!(counted(&events(Permit, Permit)).is_empty());
    // A writer (or a reader after a writer) must see a higher token.
    assert_eq!(counted(&events(Read, Write)), ["token_regression"]);
    assert_eq!(counted(&events(Write, Read)), ["token_regression"]);
}

#[test]
fn a_token_regression_counts_even_when_the_counter_was_lost() {
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
    // The clock floor keeps tokens rising across a lost counter: no excuse.
    let report = check(&events, None);
    assert_eq!(counted(&report), ["token_regression"]);
    assert_eq!(report.excused_by().get("data_loss"), None);

    // A holder paused between its grant and its record of it: its record may come after
    // a later grant's hold (excused).
    let events = [
        acq(100, 0, "w0-t0-0", 10),
        rel(200, 0, "w0-t0-0", 10, "ok"),
        acq(300, 1, "w1-t0-0", 9),
        fault(320, "pause_holder", "start", "worker 1 pid 9"),
        fault(350, "pause_holder", "heal", "worker 1 pid 9"),
        rel(400, 1, "w1-t0-0", 9, "ok"),
    ];
    let report = check(&events, None);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
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
    // restart, went with the data (and the fence counter); the next token is still higher
    // (the clock floor), and a lower one is a violation.
    let spanning = |later: u64| {
        let mut events = history(&[
            hold_of(Multi, "multi-1", "m/multi-1", "a", 0, 46, (100, 300, 400)),
            hold_of(
                Multi,
                "multi-1",
                "n/multi-1",
                "b",
                1,
                later,
                (500, 500, 600),
            ),
        ]);
        events.push(fault(200, "restart_empty", "start", "server 0"));
        events.push(fault(250, "restart_empty", "heal", "port 1"));
        check(&events, None)
    };
    let report = spanning(47);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(counted(&spanning(2)), ["token_regression"]);
}

#[test]
fn a_multilock_grant_older_than_a_data_loss_is_no_token_regression() {
    use LockKind::{Multi, Plain};
    // B's lock_all asked at 100 ms and had multi-1 before the empty restart at 200 ms (token
    // 40); A took multi-1 from the empty server (token 50) and let it go; B's lock_all
    // returned at 500 ms with its older grant. Its lower token is the order the grants were
    // made in, not a regression.
    let run = |asked: u64| {
        let mut events = history(&[
            hold_of(Plain, "multi-1", "a/multi-1", "a", 0, 50, (250, 250, 400)),
            hold_of(Multi, "multi-1", "b/multi-1", "b", 1, 40, (asked, 500, 600)),
        ]);
        events.push(fault(200, "restart_empty", "start", "server 0"));
        events.push(fault(210, "restart_empty", "heal", "port 1"));
        check(&events, None)
    };
    let report = run(100);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(
        report
            .rows
            .iter()
            .map(|r| r.token_regressions)
            .sum::<usize>(),
        1
    );
    // Asked after the restart: its grant came after the loss, and after A's; a lower
    // token is a regression.
    assert_eq!(counted(&run(450)), ["token_regression"]);
}

#[test]
fn a_hot_use_of_a_grant_kept_since_before_a_failover_is_no_token_regression() {
    use LockKind::{Hot, Plain};
    // Worker 0's client kept hot-0 from its first use at 100 ms (token 40); a failover at
    // 300 ms lost it; worker 1 took hot-0 (token 50) and let it go; worker 0's next use at
    // 1,200 ms (before its watchdog had to notice) still carries the kept grant's token:
    // older than worker 1's, not a regression. Without the failover, it is one.
    let run = |failover: bool| {
        let mut events = history(&[
            hold_of(Hot, "hot-0", "u1", "c:h1~k", 0, 40, (100, 100, 150)),
            hold_of(Plain, "hot-0", "w1-t0-0", "b", 1, 50, (1000, 1000, 1100)),
            hold_of(Hot, "hot-0", "u2", "c:h1~k", 0, 40, (1200, 1200, 1300)),
        ]);
        if failover {
            events.push(fault(300, "failover", "start", "server 0"));
            events.push(fault(310, "failover", "heal", "port 1"));
        }
        check(&events, None)
    };
    let report = run(true);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(
        report
            .rows
            .iter()
            .map(|r| r.token_regressions)
            .sum::<usize>(),
        1
    );
    assert_eq!(counted(&run(false)), ["token_regression"]);
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
                9,
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
    assert_eq!(
        counted(&check(&slow, None)),
        ["shutdown_release_slow", "liveness_gap"]
    );
}

#[test]
fn a_shutdown_ends_its_hold_at_the_deadline() {
    use LockKind::{Plain, Shutdown};
    // The shutdown starts at 200 ms with a 50 ms grace: the lock is taken at 250 ms.
    // The holder's work ended at 249 ms (its zero-wait lost() check saw nothing), its
    // release started at 252 ms and returned LeaseLost; a waiter got the lock at 251 ms.
    let run = |(at_deadline, not_held, failed): (usize, usize, usize), waiter: bool| {
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
            not_held,
            failed,
            error: None,
        });
        if waiter {
            events.extend(hold_of(Plain, "shut-0", "n", "b", 1, 2, (150, 251, 400)));
        }
        check(&events, None)
    };
    // Taken at the deadline: whether its give-back was answered `ok`, `not_held`, or
    // failed (the worker cut off from the servers), the shutdown surrendered the hold.
    for taken in [(1, 0, 0), (0, 1, 0), (0, 0, 1)] {
        for waiter in [false, true] {
            let report = run(taken, waiter);
            assert!(
                report.violations.is_empty(),
                "{taken:?}: {:#?}",
                report.violations
            );
        }
    }
    // A shutdown that took nothing at its deadline does not end the hold there.
    assert_eq!(
        counted(&run((0, 0, 0), false)),
        ["loss_first_seen_at_release"]
    );
    assert_eq!(counted(&run((0, 0, 0), true)), ["overlap"]);
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

#[test]
fn a_failover_to_a_master_whose_clock_is_ahead_is_a_forward_clock_jump() {
    // A coordinated failover (Cluster's `manual_failover`) loses nothing, so an overlap in
    // it counts; unless the harness saw the key move to a master whose clock is ahead of
    // the old one's (offsets of earlier clock jumps): its keys then expire early.
    let overlap = vec![
        acq(100, 0, "w0-t0-0", 5),
        fault(
            200,
            "manual_failover",
            "start",
            "lock:{chaos-0} old master port 1",
        ),
        fault(300, "manual_failover", "heal", "port 2"),
        acq(400, 1, "w1-t0-0", 6),
        rel(500, 1, "w1-t0-0", 6, "ok"),
        lost(900, 0, "w0-t0-0", 5),
        rel(900, 0, "w0-t0-0", 5, "lease_lost"),
    ];
    let cluster = |events: &[Event]| analyze("cluster", events, None, LEASE, 0, 100_000 * MS);
    assert!(counted(&cluster(&overlap)).contains(&"overlap"));
    let mut skewed = overlap.clone();
    let target = "master moved from port 1 (clock +0 ms) to port 2 (clock +3000 ms): keys expire 3000 ms early";
    skewed.insert(
        2,
        fault_id(
            200,
            "clock_jump_forward_by_failover",
            "start",
            target,
            7,
            None,
        ),
    );
    skewed.insert(
        4,
        fault_id(
            300,
            "clock_jump_forward_by_failover",
            "heal",
            target,
            7,
            None,
        ),
    );
    let report = cluster(&skewed);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert!(report.excused_by().contains_key("data_loss"));
}

#[test]
fn a_forward_clock_jump_shorter_than_the_lease_destroys_only_what_the_server_says() {
    use LockKind::Hot;
    // The kept lock hot-0 is used before and long after a +700 ms jump of its server's
    // clock (lease 1500 ms): keys with more than 700 ms left survived it. Without a sign
    // from the server the later use is fine; with the key reported gone, it is a use
    // after a loss. A jump of two leases destroys every key: the later use is one too.
    let jump = |ms: i64, gone: bool| {
        let target = format!("server port 1 pid 9 {ms:+} ms");
        let mut events = history(&[
            hold_of(Hot, "hot-0", "u1", "c:h1~k", 0, 5, (100, 100, 200)),
            hold_of(Hot, "hot-0", "u2", "c:h1~k", 0, 5, (3000, 3000, 3100)),
        ]);
        events.push(fault_id(
            1000,
            "clock_jump_forward",
            "start",
            &target,
            1,
            None,
        ));
        events.push(fault_id(
            1000,
            "clock_jump_forward",
            "heal",
            &target,
            1,
            None,
        ));
        if gone {
            events.push(Event::KeyGone {
                t: 1000 * MS,
                server: "127.0.0.1:1".into(),
                key: lock_key("hot-0"),
                how: "expired".into(),
            });
        }
        counted(&check(&events, None))
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    assert!(jump(700, false).is_empty());
    assert_eq!(jump(700, true), ["hot_use_after_loss"]);
    assert_eq!(jump(3000, false), ["hot_use_after_loss"]);
}

#[test]
fn a_replicas_late_repeat_of_a_removal_is_not_a_second_removal() {
    const M: u64 = 1_000_000;
    let times = [
        (100 * M, "master"),
        (100 * M + 1, "replica"),
        // The master's removal at 200 ms, repeated by the lagging replica at 271 ms.
        (200 * M, "master"),
        (271 * M, "replica"),
        // A new removal, reported by both.
        (2_000 * M, "replica"),
        (2_000 * M + 5, "master"),
    ];
    let kept = without_replicated_repeats(&times);
    assert_eq!(
        kept,
        [
            (100 * M, "master"),
            (200 * M, "master"),
            (2_000 * M, "replica")
        ]
    );
    // Two removals by one server are two.
    let own = [(100 * M, "master"), (150 * M, "master")];
    assert_eq!(without_replicated_repeats(&own), own);
}

/// A hold `id` of `NAME` asked for at `asked` ms and acquired at `t` ms.
fn acq_asked(asked: u64, t: u64, worker: u32, id: &str, token: u64) -> Event {
    let mut event = acq(t, worker, id, token);
    if let Event::Acquired { t_start, .. } = &mut event {
        *t_start = asked * MS;
    }
    event
}

/// Worker 1 holds `NAME` from 1 s and releases it at 2 s (returning at 2.001 s); worker 2
/// asks at 1.5 s and gets it only at 32.001 s: a 30 s gap with a waiter.
fn thirty_second_gap() -> Vec<Event> {
    vec![
        acq(1_000, 1, "w1-t0-0", 1),
        rel(2_000, 1, "w1-t0-0", 1, "ok"),
        acq_asked(1_500, 32_001, 2, "w2-t0-0", 2),
        rel(33_000, 2, "w2-t0-0", 2, "ok"),
    ]
}

fn gap_ms(report: &BackendReport) -> Option<f64> {
    report.liveness.free_while_wanted_max_ms
}

#[test]
fn a_lock_free_for_30_s_while_wanted_is_a_liveness_violation() {
    let report = check(&thirty_second_gap(), None);
    let ms = gap_ms(&report).unwrap_or(0.0);
    assert!((ms - 30_000.0).abs() < 1.0, "{ms}");
    let worst = report.liveness.free_while_wanted_worst.as_ref();
    assert_eq!(worst.map(|w| (w.name.as_str(), w.worker)), Some((NAME, 2)));
    let plain = &report.kinds["plain"].liveness;
    assert!(plain
        .free_while_wanted_max_ms
        .is_some_and(|m| (m - 30_000.0).abs() < 1.0));
    assert_eq!(counted(&report), ["liveness_gap"]);
    assert_eq!(report.unexcused(), 1);
    assert!(report.table().contains("free while wanted: max 30000 ms"));
}

/// Worker 1 holds `NAME` from 1 s to 2 s; worker 2 asks at 1.5 s and gets it `gap` ms
/// after the release returned.
fn gap_of(gap: u64) -> Vec<Event> {
    vec![
        acq(1_000, 1, "w1-t0-0", 1),
        rel(2_000, 1, "w1-t0-0", 1, "ok"),
        acq_asked(1_500, 2_001 + gap, 2, "w2-t0-0", 2),
        rel(5_000, 2, "w2-t0-0", 2, "ok"),
    ]
}

#[test]
fn a_gap_within_its_kinds_bound_is_no_violation() {
    let bound = liveness::GAP_BOUND.as_millis() as u64;
    assert!(counted(&check(&gap_of(bound - 50), None)).is_empty());
    assert_eq!(counted(&check(&gap_of(bound + 50), None)), ["liveness_gap"]);
}

/// A `lock_all` of `m-a` and `m-b` by worker 1 takes `m-a` first (sorted order) and waits
/// for `m-b`; it is recorded as held only once it has both. Worker 0's `lock_all` of
/// `m-a` and `m-c`, asked meanwhile, waits for `m-a` until worker 1 releases it.
#[test]
fn a_lock_all_holds_its_first_names_from_its_call() {
    use LockKind::Multi;
    let events = history(&[
        hold_of(Multi, "m-a", "w0-t0-0/m-a", "a", 0, 1, (0, 0, 150)),
        hold_of(Multi, "m-b", "w2-t0-0/m-b", "c", 2, 2, (0, 0, 990)),
        hold_of(Multi, "m-a", "w1-t0-0/m-a", "b", 1, 3, (160, 1_000, 1_100)),
        hold_of(Multi, "m-b", "w1-t0-0/m-b", "b", 1, 4, (160, 1_000, 1_100)),
        hold_of(Multi, "m-a", "w0-t0-1/m-a", "a", 0, 5, (200, 1_102, 1_200)),
        hold_of(Multi, "m-c", "w0-t0-1/m-c", "a", 0, 6, (200, 1_102, 1_200)),
    ]);
    let report = check(&events, None);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    // Only `m-b`'s 9 ms between worker 2's release and worker 1's grant.
    let gap = report.kinds["multi"].liveness.free_while_wanted_max_ms;
    assert!(gap.is_some_and(|ms| ms < 20.0), "{gap:?}");
    // A failed one holds the names before the one it gave up on until it returns.
    let mut failed_first = history(&[
        hold_of(Multi, "m-a", "w0-t0-0/m-a", "a", 0, 1, (0, 0, 150)),
        hold_of(Multi, "m-a", "w0-t0-1/m-a", "a", 0, 5, (200, 2_202, 2_300)),
        hold_of(Multi, "m-c", "w0-t0-1/m-c", "a", 0, 6, (200, 2_202, 2_300)),
    ]);
    failed_first.push(Event::AcquireFailed {
        t_start: 160 * MS,
        t: 2_200 * MS,
        worker: 1,
        task: 0,
        name: "m-b+m-a".into(),
        kind: "timed_out".into(),
        error: "timed out after 2.04s waiting for lock `m-b`".into(),
    });
    let report = check(&failed_first, None);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
}

/// With the grant times the worker records, a `lock_all` asks for a later name only from
/// the grant of the name before it: `m-b`, free from 50 ms, is no gap while worker 1
/// waited for `m-a` (held by worker 0 until 1 s); once it had `m-a` (at 1.001 s), a late
/// grant of `m-b` is one.
#[test]
fn a_lock_all_asks_for_a_later_name_from_the_grant_of_the_one_before() {
    use LockKind::Multi;
    let granted = |t: u64, hold: &str, name: &str| Event::Granted {
        t: t * MS,
        worker: 1,
        hold: hold.into(),
        name: name.into(),
    };
    let history_of = |b_granted: u64| {
        let mut events = history(&[
            hold_of(Multi, "m-a", "w0-t0-0/m-a", "a", 0, 1, (0, 0, 1_000)),
            hold_of(Multi, "m-b", "w2-t0-0/m-b", "c", 2, 1, (0, 0, 50)),
            hold_of(
                Multi,
                "m-a",
                "w1-t0-0/m-a",
                "b",
                1,
                2,
                (100, b_granted, 3_000),
            ),
            hold_of(
                Multi,
                "m-b",
                "w1-t0-0/m-b",
                "b",
                1,
                3,
                (100, b_granted, 3_000),
            ),
        ]);
        events.push(granted(1_002, "w1-t0-0/m-a", "m-a"));
        events.push(granted(b_granted, "w1-t0-0/m-b", "m-b"));
        events
    };
    let report = check(&history_of(1_004), None);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    let report = check(&history_of(2_000), None);
    assert_eq!(
        counted(&report),
        ["liveness_gap"],
        "{:#?}",
        report.violations
    );
    assert_eq!(report.violations[0].name, "m-b");
}

/// A `hold_at_least` lock released early is taken until its minimum hold, counted from
/// the grant (as the library counts it), not from the call.
#[test]
fn an_at_least_lock_is_taken_until_its_minimum_hold_from_the_grant() {
    use LockKind::AtLeast;
    let events = history(&[
        hold_of(AtLeast, "al-0", "a", "a", 0, 1, (100, 1_000, 1_050)),
        hold_of(AtLeast, "al-0", "b", "b", 1, 2, (1_020, 1_401, 1_500)),
    ]);
    let report = check(&events, None);
    let gap = report.kinds["at_least"].liveness.free_while_wanted_max_ms;
    assert!(gap.is_some_and(|ms| ms < 5.0), "{gap:?}");
}

/// A killed worker's fair waiter keeps its place in the queue for `QUEUE_PRESENCE`, and a
/// release hands the lock to it when it is at the head: a fair lock's fault windows reach
/// that much further past their heal than a plain lock's.
#[test]
fn a_fair_lock_gap_after_a_kill_is_excused_for_a_queue_place() {
    let history_of = |kind: LockKind| {
        let mut events = history(&[
            hold_of(kind, "k-0", "a", "a", 0, 1, (0, 0, 5_000)),
            hold_of(kind, "k-0", "b", "b", 1, 2, (4_500, 6_000, 6_100)),
        ]);
        events.push(fault(2_000, "kill_holder", "start", "worker 3 pid 1"));
        events.push(fault(2_010, "kill_holder", "heal", "worker 3 pid 1"));
        events
    };
    assert_eq!(
        counted(&check(&history_of(LockKind::Plain), None)),
        ["liveness_gap"]
    );
    assert!(counted(&check(&history_of(LockKind::Fair), None)).is_empty());
    // A read-write lock's waiting writer keeps its place as long (a quick run's 1.2-1.9 s
    // gaps of `rw-0` after a kill).
    assert!(counted(&check(&history_of(LockKind::Write), None)).is_empty());
}

#[test]
fn a_gap_that_meets_a_fault_window_is_not_counted() {
    let mut events = thirty_second_gap();
    events.push(fault(10_000, "client_kill", "start", "every client"));
    events.push(fault(11_000, "client_kill", "heal", "every client"));
    assert_eq!(gap_ms(&check(&events, None)), None);
}

#[test]
fn a_gap_without_a_waiter_is_not_counted() {
    let events = vec![
        acq(1_000, 1, "w1-t0-0", 1),
        rel(2_000, 1, "w1-t0-0", 1, "ok"),
        acq_asked(32_000, 32_001, 2, "w2-t0-0", 2),
        rel(33_000, 2, "w2-t0-0", 2, "ok"),
    ];
    let report = check(&events, None);
    // Only the 1 ms of worker 2's own acquisition.
    assert!(
        gap_ms(&report).is_some_and(|ms| ms < 2.0),
        "{:?}",
        gap_ms(&report)
    );
}

#[test]
fn a_gap_while_the_waiting_worker_stalled_is_not_counted() {
    let mut events = thirty_second_gap();
    events.push(Event::Stall {
        t_start: 5_000 * MS,
        t: 6_000 * MS,
        worker: Some(2),
    });
    assert_eq!(gap_ms(&check(&events, None)), None);
    // A stall of another worker does not excuse it.
    let mut events = thirty_second_gap();
    events.push(Event::Stall {
        t_start: 5_000 * MS,
        t: 6_000 * MS,
        worker: Some(3),
    });
    assert!(gap_ms(&check(&events, None)).is_some_and(|ms| ms > 29_000.0));
}

/// A late timer of the waiting worker's async runtime excuses a liveness gap (the waiter
/// could not run), but not a safety anomaly.
#[test]
fn a_runtime_stall_of_the_waiter_excuses_only_its_liveness_gap() {
    let mut events = thirty_second_gap();
    events.push(Event::RuntimeStall {
        t_start: 5_000 * MS,
        t: 6_000 * MS,
        worker: 2,
    });
    assert_eq!(gap_ms(&check(&events, None)), None);
    let mut overlap = vec![
        acq(1_000, 1, "w1-t0-0", 1),
        acq(1_500, 2, "w2-t0-0", 2),
        rel(2_000, 1, "w1-t0-0", 1, "ok"),
        rel(2_500, 2, "w2-t0-0", 2, "ok"),
    ];
    overlap.push(Event::RuntimeStall {
        t_start: 1_000 * MS,
        t: 3_000 * MS,
        worker: 1,
    });
    assert_eq!(counted(&check(&overlap, None)), ["overlap"]);
}

#[test]
fn a_timeout_while_the_lock_was_free_is_counted() {
    // Worker 1 holds from 1 s to `released`; worker 2 waits from 1.5 s and times out at 12 s.
    let history = |released: u64| {
        vec![
            acq(1_000, 1, "w1-t0-0", 1),
            rel(released, 1, "w1-t0-0", 1, "ok"),
            failed(1_500, 12_000, 2, 0),
            acq(50_000, 3, "w3-t0-0", 2),
            rel(51_000, 3, "w3-t0-0", 2, "ok"),
        ]
    };
    let report = check(&history(2_000), None);
    assert_eq!(report.liveness.timeouts_while_free, 1);
    assert_eq!(report.kinds["plain"].liveness.timeouts_while_free, 1);
    assert_eq!(counted(&report), ["liveness_gap"]);
    // Held for most of the wait: not counted.
    assert_eq!(
        check(&history(10_000), None).liveness.timeouts_while_free,
        0
    );
}

/// The counted anomalies of `kind`.
fn counted_of<'a>(report: &'a BackendReport, kind: &str) -> Vec<&'a Violation> {
    report
        .violations
        .iter()
        .filter(|v| v.kind == kind && v.counts())
        .collect()
}

/// Two holds of `NAME` by two owners, one after the other (the first from 100 to 300 ms,
/// across an empty restart at 250 ms, the second from 400 to 500 ms), with tokens `first`
/// and `second`.
fn across_an_empty_restart(first: u64, second: u64) -> Vec<Event> {
    vec![
        acq(100, 0, "w0-t0-0", first),
        fault_id(250, "restart_empty", "start", "server 0", 1, None),
        fault_id(260, "restart_empty", "heal", "port 1", 1, None),
        rel(300, 0, "w0-t0-0", first, "ok"),
        acq(400, 1, "w1-t0-0", second),
        rel(500, 1, "w1-t0-0", second, "ok"),
    ]
}

#[test]
fn a_token_granted_to_two_holders_is_a_violation_even_after_a_data_loss() {
    // The counter was lost (an empty restart) and the next holder got the same token: a
    // duplicate, and a regression; neither is excused by the data loss.
    let report = check(&across_an_empty_restart(7, 7), None);
    let dups = counted_of(&report, "duplicate_token");
    assert_eq!(dups.len(), 1, "{:#?}", report.violations);
    assert_eq!(dups[0].holds, ["w0-t0-0", "w1-t0-0"]);
    assert_eq!(dups[0].fault, "restart_empty");
    let row = report
        .rows
        .iter()
        .find(|r| r.fault == "restart_empty")
        .unwrap();
    assert_eq!(row.duplicate_tokens, 1);
    assert_eq!(row.violations, 2);
    assert_eq!(report.excused_by().get("data_loss"), None);
    assert_eq!(counted(&report), ["token_regression", "duplicate_token"]);
    assert_eq!(report.fencing().duplicate_tokens, 1);
    assert!(report
        .table()
        .contains("Fencing: 1 tokens granted to two holders"));

    // A new token after the same restart (lower: a regression): no duplicate.
    let report = check(&across_an_empty_restart(7, 3), None);
    assert_eq!(counted(&report), ["token_regression"]);
    assert_eq!(report.fencing().duplicate_tokens, 0);
    let report = check(&across_an_empty_restart(7, 8), None);
    assert!(report.violations.is_empty(), "{:#?}", report.violations);
}

#[test]
fn only_holds_of_two_holders_of_one_lock_and_counter_share_no_token() {
    use LockKind::{Hot, Permit, Plain, Read, Redisson, Write};
    let dups = |holds: &[[Event; 2]]| check(&history(holds), None).fencing().duplicate_tokens;
    // A hot lock keeper's uses share its token (one owner field).
    assert_eq!(
        dups(&[
            hold_of(Hot, "hot-0", "u1", "c:h1~k", 0, 5, (100, 100, 200)),
            hold_of(Hot, "hot-0", "u2", "c:h1~k", 0, 5, (210, 210, 300)),
        ]),
        0
    );
    // Two keepers with one token: two holders.
    assert_eq!(
        dups(&[
            hold_of(Hot, "hot-0", "u1", "c:h1~k", 0, 5, (100, 100, 200)),
            hold_of(Hot, "hot-0", "u2", "d:h1~k", 1, 5, (210, 210, 300)),
        ]),
        1
    );
    // Readers and permits get a token each: two readers (or permit holders) with one
    // token are two holders; a reader and a writer of one name share the slot's counter.
    for (first, second) in [(Read, Read), (Permit, Permit), (Read, Write)] {
        let name = if first == Permit { "sem-0" } else { "rw-0" };
        let same = [
            hold_of(first, name, "h1", "a", 0, 9, (100, 100, 500)),
            hold_of(second, name, "h2", "b", 1, 9, (600, 600, 700)),
        ];
        assert_eq!(dups(&same), 1, "{first:?} {second:?}");
        let apart = [
            hold_of(first, name, "h1", "a", 0, 9, (100, 100, 500)),
            hold_of(second, name, "h2", "b", 1, 10, (600, 600, 700)),
        ];
        assert_eq!(dups(&apart), 0, "{first:?} {second:?}");
    }
    // Two names (counters are per slot: two names may be on two counters), and a name in
    // both layouts (Redisson's has a counter per name): the same value is no duplicate.
    assert_eq!(
        dups(&[
            hold_of(Plain, "chaos-0", "h1", "a", 0, 4, (100, 100, 200)),
            hold_of(Plain, "chaos-1", "h2", "b", 1, 4, (300, 300, 400)),
            hold_of(Redisson, "chaos-0", "h3", "c", 2, 4, (500, 500, 600)),
        ]),
        0
    );
    // Three holders of one token: two duplicates; the first holder's second hold
    // (a re-entry) adds none.
    assert_eq!(
        dups(&[
            hold_of(Plain, "chaos-0", "h1", "a", 0, 4, (100, 100, 200)),
            hold_of(Plain, "chaos-0", "h2", "b", 1, 4, (300, 300, 400)),
            hold_of(Plain, "chaos-0", "h3", "a", 0, 4, (500, 500, 600)),
            hold_of(Plain, "chaos-0", "h4", "c", 2, 4, (700, 700, 800)),
        ]),
        2
    );
}

#[test]
fn a_duplicate_token_is_excused_only_by_a_server_clock_step_back_with_the_counter_lost() {
    let clock = |name: &str, t: u64, target: &str| {
        [
            fault_id(t, name, "start", target, 2, None),
            fault_id(t + 1, name, "heal", target, 2, None),
        ]
    };
    let run = |jump: &[Event; 2], restart: bool| {
        let mut events = vec![acq(100, 0, "w0-t0-0", 7), rel(200, 0, "w0-t0-0", 7, "ok")];
        events.extend(jump.iter().cloned());
        if restart {
            events.extend([
                fault_id(600, "restart_empty", "start", "server 0", 1, None),
                fault_id(610, "restart_empty", "heal", "port 1", 1, None),
            ]);
        }
        events.extend([acq(700, 1, "w1-t0-0", 7), rel(800, 1, "w1-t0-0", 7, "ok")]);
        check(&events, None)
    };
    let back = clock("clock_jump_back", 300, "server port 1 pid 42 -3000 ms");
    // The server's clock went back, and the counter was lost: the floor's assumption
    // failed.
    let report = run(&back, true);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    // The duplicate and the regression.
    assert_eq!(report.excused_by().get("server_clock_back"), Some(&2));
    // The counter survived: a duplicate (and a regression) whatever the clock did.
    assert_eq!(
        counted(&run(&back, false)),
        ["token_regression", "duplicate_token"]
    );
    // The emulation moves TTLs, not clocks.
    let emulated = clock("clock_jump_back", 300, "every data server (emulated)");
    assert_eq!(
        counted(&run(&emulated, true)),
        ["token_regression", "duplicate_token"]
    );
    // A forward jump that the restart undid (the server's clock steps back at the restart).
    let forward = clock("clock_jump_forward", 50, "server port 1 pid 42 +3000 ms");
    let report = run(&forward, true);
    assert_eq!(report.excused_by().get("server_clock_back"), Some(&2));
    assert!(counted_of(&report, "duplicate_token").is_empty());
    // Jumps that cancel out before the first grant left no step back.
    let mut events = vec![];
    events.extend(clock(
        "clock_jump_forward",
        20,
        "server port 1 pid 42 +3000 ms",
    ));
    events.extend([
        fault_id(
            40,
            "clock_jump_back",
            "start",
            "server port 1 pid 42 -3000 ms",
            3,
            None,
        ),
        fault_id(
            41,
            "clock_jump_back",
            "heal",
            "server port 1 pid 42 -3000 ms",
            3,
            None,
        ),
    ]);
    events.extend(across_an_empty_restart(7, 7));
    assert_eq!(
        counted(&check(&events, None)),
        ["token_regression", "duplicate_token"]
    );
}

/// Two holders' fenced read-modify-writes of `NAME` (A from 100 to 300 ms across an empty
/// restart at 250 ms, B from 400 to 500 ms) with tokens `a` and `b`: A reads 0 and writes
/// 1; B reads `b_read` and writes `b_read + 1`.
fn two_writers(a: u64, b: u64, b_read: i64) -> Vec<Event> {
    vec![
        acq(100, 0, "w0-t0-0", a),
        claim(110, 0, "w0-t0-0", a, 0),
        intent(150, 0, "w0-t0-0", a, Register::Fenced, 0),
        written(160, 0, "w0-t0-0", a, 0, 0),
        fault_id(250, "restart_empty", "start", "server 0", 1, None),
        fault_id(260, "restart_empty", "heal", "port 1", 1, None),
        rel(300, 0, "w0-t0-0", a, "ok"),
        acq(400, 1, "w1-t0-0", b),
        claim(410, 1, "w1-t0-0", b, b_read),
        intent(440, 1, "w1-t0-0", b, Register::Fenced, b_read),
        written(450, 1, "w1-t0-0", b, b_read, b_read),
        rel(500, 1, "w1-t0-0", b, "ok"),
    ]
}

fn restart_row(report: &BackendReport) -> &Row {
    report
        .rows
        .iter()
        .find(|r| r.fault == "restart_empty")
        .unwrap()
}

#[test]
fn two_holders_writes_under_one_token_are_a_violation_even_after_a_data_loss() {
    let log = |a: u64, b: u64| {
        both_formats(&[("w0-t0-0", a, 0, 0, 1), ("w1-t0-0", b, 1, 1, 2)])
            .into_iter()
            .map(Some)
            .chain([None])
    };
    // From the store's log in both formats, and from the workers' events alone.
    for truth in log(7, 7) {
        let report = check(&two_writers(7, 7, 1), truth.as_deref());
        let found = counted_of(&report, "equal_token_writes");
        assert_eq!(found.len(), 1, "{truth:?}: {:#?}", report.violations);
        assert_eq!(found[0].holds, ["w0-t0-0", "w1-t0-0"]);
        assert_eq!(found[0].fault, "restart_empty");
        assert_eq!(restart_row(&report).equal_token_writes, 1);
        assert_eq!(report.fencing().equal_token_writes, 1);
    }
    // Distinct tokens: none.
    for truth in log(7, 8) {
        let report = check(&two_writers(7, 8, 1), truth.as_deref());
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert_eq!(report.fencing().equal_token_writes, 0);
    }
    // One holder's writes under its one token (a hot lock keeper's two uses): none.
    let mut one_holder = two_writers(7, 7, 1);
    for event in &mut one_holder {
        if let Event::Acquired { owner, kind, .. } = event {
            *owner = "c:h1~k".into();
            *kind = LockKind::Hot;
        }
    }
    for truth in log(7, 7) {
        let report = check(&one_holder, truth.as_deref());
        assert_eq!(
            report.fencing().equal_token_writes,
            0,
            "{:#?}",
            report.violations
        );
        assert!(counted_of(&report, "equal_token_writes").is_empty());
    }
}

#[test]
fn an_acknowledged_fenced_write_a_later_holders_read_misses_is_lost() {
    // A wrote 1 (acknowledged at 160 ms, across an empty restart of the lock server);
    // B, acquired at 400 ms, read 0: the register store lost A's write.
    let report = check(&two_writers(7, 8, 0), None);
    let lost = counted_of(&report, "lost_write");
    assert_eq!(lost.len(), 1, "{:#?}", report.violations);
    assert_eq!(lost[0].holds, ["w0-t0-0", "w1-t0-0"]);
    assert!(lost[0].detail.contains("read 0"), "{}", lost[0].detail);
    // A's hold was touched by the data loss; the lost write is not excused by it.
    assert_eq!(report.rows[0].lost_writes, 1);
    assert_eq!(report.fencing().lost_writes, 1);
    // B read 1: seen.
    let report = check(&two_writers(7, 8, 1), None);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(report.fencing().lost_writes, 0);
    // A read whose hold began before the acknowledgement may precede the write: B's hold
    // from 150 ms, its read of 0 is no loss (the overlap is another matter).
    let mut early = two_writers(7, 8, 0);
    if let Event::Acquired { t, t_start, .. } = &mut early[7] {
        (*t_start, *t) = (150 * MS, 150 * MS);
    }
    let report = check(&early, None);
    assert_eq!(report.fencing().lost_writes, 0, "{:#?}", report.violations);
}

#[test]
fn an_acknowledged_fenced_write_the_final_state_does_not_see_is_lost() {
    // Both holders read 0 (B before A's write) under one token and wrote 1: the store
    // applied both, the final state descends from B's write only, and A's acknowledged
    // write is lost although the final value is 1.
    let events = {
        // B acquired at 115 ms and read at 120 ms, before A's write.
        let mut ordered = two_writers(7, 7, 0);
        ordered.remove(8);
        ordered.remove(7);
        ordered.insert(1, acq(115, 1, "w1-t0-0", 7));
        ordered.insert(3, claim(120, 1, "w1-t0-0", 7, 0));
        ordered
    };
    for truth in both_formats(&[("w0-t0-0", 7, 0, 0, 1), ("w1-t0-0", 7, 0, 1, 1)]) {
        let report = check(&events, Some(&truth));
        let lost = counted_of(&report, "lost_write");
        assert_eq!(lost.len(), 1, "{truth:?}: {:#?}", report.violations);
        assert_eq!(lost[0].holds, ["w0-t0-0"]);
        assert!(
            lost[0].detail.contains("does not descend"),
            "{}",
            lost[0].detail
        );
        assert_eq!(report.fencing().lost_writes, 1);
    }
    // A final value below the writes' (1 and 2): both lost (the log's chain is broken,
    // and B's write is not in it, which other checks report).
    let report = check(&two_writers(7, 8, 1), Some(&logged(&["w0-t0-0|7|0|1"], 0)));
    assert_eq!(
        counted_of(&report, "lost_write").len(),
        2,
        "{:#?}",
        report.violations
    );
    assert!(counted_of(&report, "lost_write")
        .iter()
        .all(|v| v.detail.contains("final value is 0")));
    // B read A's 1 and wrote 2: the final state descends from both.
    for truth in both_formats(&[("w0-t0-0", 7, 0, 0, 1), ("w1-t0-0", 8, 1, 1, 2)]) {
        let report = check(&two_writers(7, 8, 1), Some(&truth));
        assert!(
            counted(&report).is_empty(),
            "{truth:?}: {:#?}",
            report.violations
        );
        assert_eq!(report.fencing().lost_writes, 0);
    }
}

/// [`two_writers`] with B reading 0 after A's acknowledged write of 1, across `fault`
/// instead of an empty restart.
fn lost_across(fault: &str) -> Vec<Event> {
    let mut events = two_writers(7, 8, 0);
    for event in &mut events {
        if let Event::Fault { fault: name, .. } = event {
            *name = fault.into();
        }
    }
    events
}

#[test]
fn with_the_register_in_the_lock_servers_an_acknowledged_write_a_failover_lost_is_counted() {
    // A wrote 1 (acknowledged at 160 ms); a failover at 250 ms lost it with its log entry;
    // B read 0 and wrote 1. The log on the current master has B's write only.
    let truth = in_lock_servers(&["w1-t0-0|8|0|1"], 1);
    let report = check(&lost_across("failover"), Some(&truth));
    let lost = counted_of(&report, "lost_write");
    assert_eq!(lost.len(), 1, "{:#?}", report.violations);
    assert_eq!(lost[0].holds, ["w0-t0-0", "w1-t0-0"]);
    assert_eq!(report.fencing().lost_writes, 1);
    // Missing from a log that lives with the data is the loss itself, not a logging fault.
    assert!(
        counted_of(&report, "write_not_logged").is_empty(),
        "{:#?}",
        report.violations
    );
    assert!(
        counted(&report).iter().all(|k| *k == "lost_write"),
        "{:#?}",
        report.violations
    );
    // The same store as a register store of its own (never faulted): a write the worker saw
    // accepted and its log does not have is a logging fault too.
    let report = check(
        &lost_across("failover"),
        Some(&logged(&["w1-t0-0|8|0|1"], 1)),
    );
    assert_eq!(counted_of(&report, "write_not_logged").len(), 1);
    assert_eq!(counted_of(&report, "lost_write").len(), 1);
}

#[test]
fn with_the_register_in_the_lock_servers_a_write_missing_from_the_log_is_lost() {
    // B read 0 at 120 ms, before A's write (so its read proves nothing), and wrote 1; A's
    // acknowledged 1 is not in the log the current master has: lost, although the final
    // value is 1 and the log's chain is whole.
    let mut events = two_writers(7, 8, 0);
    events.remove(8);
    events.remove(7);
    events.insert(1, acq(115, 1, "w1-t0-0", 8));
    events.insert(3, claim(120, 1, "w1-t0-0", 8, 0));
    for e in &mut events {
        if let Event::Fault { fault, .. } = e {
            *fault = "failover".into();
        }
    }
    let report = check(&events, Some(&in_lock_servers(&["w1-t0-0|8|0|1"], 1)));
    let lost = counted_of(&report, "lost_write");
    assert_eq!(lost.len(), 1, "{:#?}", report.violations);
    assert_eq!(lost[0].holds, ["w0-t0-0"]);
    assert!(
        lost[0].detail.contains("did not survive"),
        "{}",
        lost[0].detail
    );
    // Both in the log: nothing lost.
    let report = check(
        &events,
        Some(&in_lock_servers(&["w0-t0-0|7|0|1", "w1-t0-0|8|1|2"], 2)),
    );
    assert_eq!(report.fencing().lost_writes, 0, "{:#?}", report.violations);
}

#[test]
fn a_not_replicated_fenced_write_that_a_failover_lost_is_not_a_lost_write() {
    // A's write ran on the master but no replica acknowledged it: `NotReplicated`, an
    // unknown outcome. The failover lost it; B read 0. Nothing acknowledged was lost.
    let mut events = lost_across("failover");
    if let Event::Write { outcome, prev, .. } = &mut events[3] {
        (*outcome, *prev) = (WriteOutcome::NotReplicated, None);
    }
    let truth = in_lock_servers(&["w1-t0-0|8|0|1"], 1);
    for truth in [Some(&truth[..]), None] {
        let report = check(&events, truth);
        assert_eq!(report.fencing().lost_writes, 0, "{:#?}", report.violations);
        assert!(counted(&report).is_empty(), "{:#?}", report.violations);
        assert_eq!(report.fencing().not_replicated, 1);
        let row = report.rows.iter().find(|r| r.fault == "none").unwrap();
        assert_eq!((row.not_replicated, row.errors), (1, 1));
    }
    // It survived: in the log, applied but never answered; the register goes on from it.
    let report = check(
        &two_writers(7, 8, 1)
            .into_iter()
            .map(|mut e| {
                if let Event::Write {
                    hold,
                    outcome,
                    prev,
                    ..
                } = &mut e
                {
                    if hold == "w0-t0-0" {
                        (*outcome, *prev) = (WriteOutcome::NotReplicated, None);
                    }
                }
                e
            })
            .collect::<Vec<_>>(),
        Some(&in_lock_servers(&["w0-t0-0|7|0|1", "w1-t0-0|8|1|2"], 2)),
    );
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(report.register.applied_unrecorded, 1);
}

#[test]
fn an_empty_restart_of_the_lock_server_holding_the_register_excuses_its_lost_writes() {
    // The register in the lock's only node, restarted without persistence: the documented
    // loss of one node; excused as `register_emptied`, still counted in the row.
    let truth = in_lock_servers(&["w1-t0-0|8|0|1"], 1);
    let report = check(&lost_across("restart_empty"), Some(&truth));
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(report.fencing().lost_writes, 1);
    let lost: Vec<_> = report
        .violations
        .iter()
        .filter(|v| v.kind == "lost_write")
        .collect();
    assert_eq!(lost[0].excused.as_deref(), Some("register_emptied"));
    // In a register store of its own (never faulted), the restart of a lock server is no
    // excuse; nor is a failover (above).
    let report = check(
        &lost_across("restart_empty"),
        Some(&logged(&["w1-t0-0|8|0|1"], 1)),
    );
    assert_eq!(counted_of(&report, "lost_write").len(), 1);
}

/// An operator's force release of `lock:{name}` as the nemesis records it: the fence counter
/// read before the start, and whether a live hold was deleted.
fn force_release(
    at: u64,
    name: &str,
    kind: &str,
    counter: u64,
    deleted: bool,
    id: u64,
) -> [Event; 2] {
    let target = format!("lock:{{{name}}} {kind} counter {counter}");
    [
        fault_id(at, "force_release", "start", &target, id, Some(true)),
        fault_id(
            at + 1,
            "force_release",
            "heal",
            &format!("{target} deleted {deleted}"),
            id,
            Some(true),
        ),
    ]
}

#[test]
fn a_force_release_excuses_the_deleted_holders_overlap_only() {
    // a holds from 100 ms (token 1); the operator deletes it at 500 ms; b takes the lock at
    // 520 ms (token 2); a learns of it at 900 ms (within 1500/3 + 500 + 100 ms of the del).
    let run = |a_start: u64, a_token: u64, deleted: bool, extra: &[Event]| {
        let mut events = vec![acq(a_start, 1, "w1-t0-0", a_token)];
        events.extend(force_release(500, NAME, "plain", 1, deleted, 1));
        events.extend([
            gone(500),
            acq(520, 2, "w2-t0-0", 2),
            lost(900, 1, "w1-t0-0", a_token),
            rel(900, 1, "w1-t0-0", a_token, "lease_lost"),
            rel(1200, 2, "w2-t0-0", 2, "ok"),
        ]);
        events.extend(extra.iter().cloned());
        check(&events, None)
    };
    let report = run(100, 1, true, &[]);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(report.excused_by().get("force_release"), Some(&1));
    let row = report
        .rows
        .iter()
        .find(|r| r.fault == "force_release")
        .unwrap();
    assert_eq!((row.force_released, row.force_released_lost), (1, 1));
    assert_eq!(row.force_released_lost_p50_ms, Some(400.0));
    // A grant recorded after the start with a token at or below the counter read before it
    // was held at the deletion too; one above it was granted after: not deleted.
    assert!(counted(&run(502, 1, true, &[])).is_empty());
    assert_eq!(counted(&run(502, 3, true, &[])), ["overlap"]);
    // Nothing deleted (the lock had gone already): no excuse.
    assert_eq!(counted(&run(100, 1, false, &[])), ["overlap"]);
    // Another holder overlapping the successor is not excused: it was not deleted.
    let c = [acq(600, 3, "w3-t0-0", 3), rel(700, 3, "w3-t0-0", 3, "ok")];
    let report = run(100, 1, true, &c);
    assert_eq!(counted(&report), ["overlap"], "{:#?}", report.violations);
    assert!(report
        .violations
        .iter()
        .any(|v| v.kind == "overlap" && v.holds == ["w2-t0-0", "w3-t0-0"] && v.excused.is_none()));
    // Two holders before the deletion overlapped before it: not excused.
    let early = [acq(300, 3, "w3-t0-0", 1), rel(450, 3, "w3-t0-0", 1, "ok")];
    let report = run(100, 1, true, &early);
    assert!(report
        .violations
        .iter()
        .any(|v| v.holds == ["w1-t0-0", "w3-t0-0"] && v.kind == "overlap" && v.excused.is_none()));
}

#[test]
fn a_force_released_holders_late_lost_and_fencing_stay_violations() {
    // lost() 1500 ms after the deletion: past the bound, whatever deleted the lock.
    let mut events = vec![acq(100, 1, "w1-t0-0", 1)];
    events.extend(force_release(500, NAME, "plain", 1, true, 1));
    events.extend([
        gone(500),
        acq(520, 2, "w2-t0-0", 2),
        rel(1200, 2, "w2-t0-0", 2, "ok"),
        lost(2000, 1, "w1-t0-0", 1),
        rel(2000, 1, "w1-t0-0", 1, "lease_lost"),
    ]);
    let report = check(&events, None);
    assert_eq!(counted(&report), ["late_lost"], "{:#?}", report.violations);
    assert_eq!(report.excused_by().get("force_release"), Some(&1));
    // The successor got the deleted holder's token: a duplicate, not excused.
    let mut events = vec![acq(100, 1, "w1-t0-0", 1)];
    events.extend(force_release(500, NAME, "plain", 1, true, 1));
    events.extend([
        gone(500),
        acq(520, 2, "w2-t0-0", 1),
        lost(900, 1, "w1-t0-0", 1),
        rel(900, 1, "w1-t0-0", 1, "lease_lost"),
        rel(1200, 2, "w2-t0-0", 1, "ok"),
    ]);
    let report = check(&events, None);
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.kind == "duplicate_token" && v.excused.is_none()),
        "{:#?}",
        report.violations
    );
}

#[test]
fn a_force_released_semaphore_excuses_only_the_deleted_permits() {
    use LockKind::Permit;
    // Two permits: p1 and p2 hold them; the operator deletes both at 500 ms; p3 and p4 take
    // them again at once.
    let mut events = history(&[
        hold_of(Permit, "sem-0", "p1", "a", 0, 1, (100, 100, 800)),
        hold_of(Permit, "sem-0", "p2", "b", 1, 2, (150, 150, 800)),
        hold_of(Permit, "sem-0", "p3", "c", 2, 3, (510, 520, 900)),
        hold_of(Permit, "sem-0", "p4", "d", 3, 4, (510, 530, 900)),
    ]);
    events.extend(force_release(500, "sem-0", "semaphore", 2, true, 1));
    let report = check(&events, None);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(report.excused_by().get("force_release"), Some(&2));
    // A fifth holder is one too many beside p3 and p4: a violation.
    events.extend(hold_of(Permit, "sem-0", "p5", "e", 4, 5, (510, 540, 900)));
    assert_eq!(counted(&check(&events, None)), ["permits_exceeded"]);
    // A force release of another primitive of the name deletes no permit.
    let mut other = history(&[
        hold_of(Permit, "sem-0", "p1", "a", 0, 1, (100, 100, 800)),
        hold_of(Permit, "sem-0", "p2", "b", 1, 2, (150, 150, 800)),
        hold_of(Permit, "sem-0", "p3", "c", 2, 3, (510, 520, 900)),
    ]);
    other.extend(force_release(500, "sem-0", "read_write", 2, true, 1));
    assert_eq!(counted(&check(&other, None)), ["permits_exceeded"]);
}

#[test]
fn a_force_released_reader_is_excused_beside_the_next_writer() {
    use LockKind::{Read, Write};
    let mut events = history(&[
        hold_of(Read, "rw-0", "r1", "a", 0, 1, (100, 100, 800)),
        hold_of(Write, "rw-0", "w1", "b", 1, 2, (200, 520, 900)),
    ]);
    events.extend(force_release(500, "rw-0", "read_write", 1, true, 1));
    let report = check(&events, None);
    assert!(counted(&report).is_empty(), "{:#?}", report.violations);
    assert_eq!(report.excused_by().get("force_release"), Some(&1));
}

#[test]
fn a_forward_clock_jump_excuses_the_familys_holds_as_a_plain_locks_a_backward_one_does_not() {
    use LockKind::{Fair, Permit, Read, Write};
    // The lock family's holders expire one by one inside a key, by the server's clock: a
    // forward jump of it ends them early as it ends a plain lock's TTL.
    for (fault, ms, excused) in [
        ("clock_jump_forward", 1500, true),
        ("clock_jump_back", -1500, false),
    ] {
        let target = format!("server port 1 pid 2 {ms:+} ms");
        let jump = [
            fault_id(300, fault, "start", &target, 1, None),
            fault_id(301, fault, "heal", &target, 1, None),
        ];
        // Both permits held at the jump; a third holder gets one at 400 ms.
        let mut sem = history(&[
            hold_of(Permit, "sem-0", "p1", "a", 0, 1, (100, 100, 800)),
            hold_of(Permit, "sem-0", "p2", "b", 1, 2, (150, 150, 800)),
            hold_of(Permit, "sem-0", "p3", "c", 2, 3, (350, 400, 900)),
        ]);
        // A reader at the jump; a writer at 400 ms.
        let mut rw = history(&[
            hold_of(Read, "rw-0", "r1", "a", 0, 1, (100, 100, 800)),
            hold_of(Write, "rw-0", "w1", "b", 1, 2, (200, 400, 900)),
        ]);
        // A fair waiter that asked at 100 ms is served after one that asked at 250 ms (its
        // place ran out early: its waiting spans the jump).
        let mut fair = history(&[
            hold_of(Fair, "fair-0", "h", "h", 0, 1, (0, 0, 390)),
            hold_of(Fair, "fair-0", "b", "b", 2, 2, (250, 400, 800)),
            hold_of(Fair, "fair-0", "a", "a", 1, 3, (100, 900, 1000)),
        ]);
        for (events, kind) in [
            (&mut sem, "permits_exceeded"),
            (&mut rw, "overlap"),
            (&mut fair, "fifo_inversion"),
        ] {
            events.extend(jump.iter().cloned());
            let report = check(events, None);
            if excused {
                assert!(
                    counted(&report).is_empty(),
                    "{fault} {kind}: {:#?}",
                    report.violations
                );
                assert!(
                    report
                        .violations
                        .iter()
                        .any(|v| v.kind == kind && v.excused.as_deref() == Some("data_loss")),
                    "{fault} {kind}: {:#?}",
                    report.violations
                );
            } else {
                assert_eq!(counted(&report), [kind], "{fault}");
            }
        }
    }
}

#[test]
fn a_migrated_slots_del_on_the_old_owner_is_not_the_locks_removal() {
    let slot = lock_test_support::key_slot(lock_key(NAME).as_bytes());
    let migrate_del = |t: u64| Event::KeyGone {
        t: t * MS,
        server: "127.0.0.1:1".into(),
        key: lock_key(NAME),
        how: "del".into(),
    };
    let events = |target: &str| {
        vec![
            acq(100, 0, "w0-t0-0", 5),
            fault(
                500,
                "slot_migration",
                "start",
                "lock:{chaos-0} master port 1",
            ),
            // MIGRATE moved the held key to the new owner: the old owner reports a `del`.
            migrate_del(700),
            fault(900, "slot_migration", "heal", target),
            rel(5000, 0, "w0-t0-0", 5, "ok"),
        ]
    };
    let moved = check(&events(&format!("slot {slot}: master 1 -> 2")), None);
    assert_eq!(moved.unexcused(), 0, "{:#?}", moved.violations);
    // A migration of another slot excuses nothing: the `del` is the lock's removal.
    let other = check(
        &events(&format!("slot {}: master 1 -> 2", (slot + 1) % 16384)),
        None,
    );
    assert_eq!(counted(&other), ["late_lost"], "{:#?}", other.violations);
}
