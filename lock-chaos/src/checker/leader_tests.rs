//! The leader workload's rules, on hand-written histories.

use super::*;
use crate::event::TaskMode;

const MS: u64 = 1_000_000;
const LEASE: Duration = Duration::from_millis(1500);
const ROLE_LOCK: &str = "leader:lead-0";

fn check(events: &[Event]) -> BackendReport {
    analyze("test", events, None, LEASE, 0, 100_000 * MS)
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

fn hello(worker: u32) -> Event {
    Event::Hello {
        t: 0,
        worker,
        pid: worker + 100,
        client_id: format!("client-{worker}"),
    }
}

/// A term `id` (`w{worker}-t{task}-{seq}`) of the run loop granted at `t` ms (asked at
/// `asked` ms).
fn term(asked: u64, t: u64, worker: u32, id: &str, token: u64, mode: TaskMode) -> Event {
    Event::Acquired {
        t_start: asked * MS,
        t: t * MS,
        worker,
        task: 0,
        hold: id.into(),
        mode,
        name: ROLE_LOCK.into(),
        owner: format!("client-{worker}:{id}"),
        token,
        kind: LockKind::Leader,
        permits: 0,
        total: 0,
        min_hold_ms: 0,
    }
}

/// The run loop dropped the term's work at `t` ms (its drop guard's record).
fn dropped(t: u64, worker: u32, id: &str, token: u64) -> [Event; 2] {
    [
        Event::Lost {
            t: t * MS,
            worker,
            task: 0,
            hold: id.into(),
            name: ROLE_LOCK.into(),
            owner: format!("client-{worker}:{id}"),
            token,
        },
        Event::Released {
            t_start: t * MS,
            t: t * MS,
            worker,
            task: 0,
            hold: id.into(),
            name: ROLE_LOCK.into(),
            owner: format!("client-{worker}:{id}"),
            token,
            result: "dropped".into(),
        },
    ]
}

/// The term's work returned at `t` ms (the run loop resigns).
fn returned(t: u64, worker: u32, id: &str, token: u64) -> Event {
    Event::Released {
        t_start: t * MS,
        t: t * MS,
        worker,
        task: 0,
        hold: id.into(),
        name: ROLE_LOCK.into(),
        owner: format!("client-{worker}:{id}"),
        token,
        result: "ok".into(),
    }
}

fn expired(t: u64) -> Event {
    Event::KeyGone {
        t: t * MS,
        server: "127.0.0.1:1".into(),
        key: holds::lock_key(ROLE_LOCK),
        how: "expired".into(),
    }
}

fn observed(t: u64, worker: u32, term: Option<(u64, u32)>) -> Event {
    Event::Observed {
        t: t * MS,
        worker,
        name: ROLE_LOCK.into(),
        term: term.map(|(t, _)| t),
        client_id: term.map(|(_, w)| format!("client-{w}")),
    }
}

fn fenced_intent(t: u64, worker: u32, id: &str, token: u64) -> Event {
    Event::WriteIntent {
        t: t * MS,
        worker,
        task: 0,
        hold: id.into(),
        name: ROLE_LOCK.into(),
        token,
        register: Register::Fenced,
        read: 0,
    }
}

fn fenced_write(t: u64, worker: u32, id: &str, token: u64, outcome: WriteOutcome) -> Event {
    Event::Write {
        t: t * MS,
        worker,
        task: 0,
        hold: id.into(),
        name: ROLE_LOCK.into(),
        token,
        register: Register::Fenced,
        outcome,
        read: Some(0),
        prev: (outcome == WriteOutcome::Accepted).then_some(0),
        seen: None,
    }
}

fn pause(start: u64, heal: u64, worker: u32) -> [Event; 2] {
    let target = format!("worker {worker} pid {}", worker + 100);
    [
        Event::Fault {
            t: start * MS,
            backend: "test".into(),
            fault: "pause_holder".into(),
            phase: "start".into(),
            target: target.clone(),
            id: Some(0),
            effective: None,
            lock: None,
            owner: None,
            token: None,
        },
        Event::Fault {
            t: heal * MS,
            backend: "test".into(),
            fault: "pause_holder".into(),
            phase: "heal".into(),
            target,
            id: Some(0),
            effective: None,
            lock: None,
            owner: None,
            token: None,
        },
    ]
}

#[test]
fn a_term_dropped_by_its_local_deadline_is_fine_and_one_running_past_the_expiry_is_an_overrun() {
    // Worker 0's term lost its renewals; the server expired the key at 3,000 ms.
    for (drop_at, overrun) in [(2_990, false), (3_050, false), (3_400, true)] {
        let mut events = vec![
            hello(0),
            hello(1),
            term(0, 100, 0, "w0-t0-0", 7, TaskMode::LeaderRun),
        ];
        events.push(expired(3_000));
        events.extend(dropped(drop_at, 0, "w0-t0-0", 7));
        events.push(term(3_100, 3_100, 1, "w1-t0-0", 8, TaskMode::LeaderRun));
        events.push(returned(3_300, 1, "w1-t0-0", 8));
        let report = check(&events);
        let l = report.leader.as_ref().expect("leader figures");
        assert_eq!(
            (l.terms, l.run_terms, l.dropped_at_loss, l.judged),
            (2, 2, 1, 1)
        );
        let after = l.end_after_expiry_max_ms.expect("judged");
        assert!((after - (drop_at as f64 - 3_000.0)).abs() < 1e-6, "{after}");
        if overrun {
            assert_eq!(
                counted(&report),
                ["two_leaders", "leader_overrun"],
                "{:#?}",
                report.violations
            );
            assert_eq!(l.violations, 2);
        } else {
            assert_eq!(
                counted(&report),
                Vec::<&str>::new(),
                "{:#?}",
                report.violations
            );
        }
    }
}

#[test]
fn an_overrun_is_excused_by_a_stall_of_the_leaders_runtime_around_its_deadline() {
    let mut events = vec![hello(0), term(0, 100, 0, "w0-t0-0", 7, TaskMode::LeaderRun)];
    events.push(expired(3_000));
    events.push(Event::RuntimeStall {
        t_start: 2_950 * MS,
        t: 3_350 * MS,
        worker: 0,
    });
    events.extend(dropped(3_360, 0, "w0-t0-0", 7));
    let report = check(&events);
    assert_eq!(counted(&report), Vec::<&str>::new());
    assert_eq!(report.excused_by().get("runtime_stall"), Some(&1));
    // A stall long before the expiry does not excuse it.
    let mut events = vec![hello(0), term(0, 100, 0, "w0-t0-0", 7, TaskMode::LeaderRun)];
    events.push(expired(3_000));
    events.push(Event::RuntimeStall {
        t_start: 1_000 * MS,
        t: 1_400 * MS,
        worker: 0,
    });
    events.extend(dropped(3_360, 0, "w0-t0-0", 7));
    assert_eq!(counted(&check(&events)), ["leader_overrun"]);
}

#[test]
fn a_paused_leader_overlapping_the_next_is_excused_only_if_its_later_writes_were_refused() {
    // Worker 0 leads from 100 ms, paused 500..4,000 ms; worker 1 leads from 3,100 ms;
    // worker 0 resumes and its work sends a fenced write at 4,010 ms before it is dropped.
    for (outcome, excused) in [
        (WriteOutcome::RejectedWrite, true),
        (WriteOutcome::Accepted, false),
    ] {
        let mut events = vec![
            hello(0),
            hello(1),
            term(0, 100, 0, "w0-t0-0", 7, TaskMode::GuardNaive),
        ];
        events.extend(pause(500, 4_000, 0));
        // Its stall probe stops with it: the pause, not the stall, decides.
        events.push(Event::Stall {
            t_start: 500 * MS,
            t: 4_000 * MS,
            worker: Some(0),
        });
        events.push(term(3_000, 3_100, 1, "w1-t0-0", 8, TaskMode::LeaderRun));
        events.push(fenced_intent(4_010, 0, "w0-t0-0", 7));
        events.push(fenced_write(4_012, 0, "w0-t0-0", 7, outcome));
        events.extend(dropped(4_020, 0, "w0-t0-0", 7));
        events.push(returned(4_500, 1, "w1-t0-0", 8));
        let report = check(&events);
        let two: Vec<&Violation> = report
            .violations
            .iter()
            .filter(|v| v.kind == "two_leaders")
            .collect();
        assert_eq!(two.len(), 1, "{:#?}", report.violations);
        if excused {
            assert_eq!(two[0].excused.as_deref(), Some("pause"));
        } else {
            assert_eq!(two[0].excused, None, "{:#?}", two[0]);
            assert!(two[0].detail.contains("was paused"), "{}", two[0].detail);
        }
    }
}

#[test]
fn a_term_below_one_granted_before_its_campaign_is_out_of_order_even_while_both_run() {
    // Worker 1's term 5 was granted (asked at 1,000) after worker 0's term 7 had been
    // granted at 100: out of order. It also overlaps: two leaders.
    let mut events = vec![
        hello(0),
        hello(1),
        term(0, 100, 0, "w0-t0-0", 7, TaskMode::LeaderRun),
    ];
    events.push(term(1_000, 1_010, 1, "w1-t0-0", 5, TaskMode::LeaderRun));
    events.push(returned(1_100, 1, "w1-t0-0", 5));
    events.push(returned(1_200, 0, "w0-t0-0", 7));
    let report = check(&events);
    let kinds = counted(&report);
    assert!(kinds.contains(&"term_order"), "{kinds:?}");
    assert!(kinds.contains(&"two_leaders"), "{kinds:?}");
    // The same term granted to two owners.
    let mut events = vec![
        hello(0),
        hello(1),
        term(0, 100, 0, "w0-t0-0", 7, TaskMode::LeaderRun),
    ];
    events.push(returned(200, 0, "w0-t0-0", 7));
    events.push(term(300, 310, 1, "w1-t0-0", 7, TaskMode::LeaderRun));
    events.push(returned(400, 1, "w1-t0-0", 7));
    let kinds = counted(&check(&events)).join(",");
    assert!(kinds.contains("term_granted_twice"), "{kinds}");
}

#[test]
fn an_observer_never_goes_back_to_an_older_or_ended_term_nor_names_another_leader() {
    let base = || {
        vec![
            hello(0),
            hello(1),
            hello(2),
            term(0, 100, 0, "w0-t0-0", 7, TaskMode::LeaderRun),
            returned(200, 0, "w0-t0-0", 7),
            term(200, 210, 1, "w1-t0-0", 9, TaskMode::LeaderRun),
            returned(400, 1, "w1-t0-0", 9),
        ]
    };
    // In order, with a repeat of the same term (a proclamation) and no leader between.
    let mut events = base();
    events.extend([
        observed(50, 2, None),
        observed(101, 2, Some((7, 0))),
        observed(102, 2, Some((7, 0))),
        observed(205, 2, None),
        observed(211, 2, Some((9, 1))),
        observed(401, 2, None),
    ]);
    let report = check(&events);
    assert_eq!(
        counted(&report),
        Vec::<&str>::new(),
        "{:#?}",
        report.violations
    );
    let l = report.leader.as_ref().unwrap();
    assert_eq!(
        (l.observers, l.observed_changes, l.observe_skipped),
        (1, 6, 0)
    );
    // An older term after a newer one; an ended term again; a term named with another
    // client than the one granted it.
    for views in [
        [
            observed(211, 2, Some((9, 1))),
            observed(212, 2, Some((7, 0))),
        ],
        [observed(101, 2, Some((7, 0))), observed(150, 2, None)],
        [
            observed(101, 2, Some((7, 1))),
            observed(150, 2, Some((9, 1))),
        ],
    ] {
        let mut events = base();
        let ended_again = matches!(views[1], Event::Observed { term: None, .. });
        events.extend(views);
        if ended_again {
            events.push(observed(160, 2, Some((7, 0))));
        }
        let report = check(&events);
        let kinds = counted(&report);
        assert_eq!(kinds.len(), 1, "{kinds:?}");
        assert!(kinds[0].starts_with("observer_"), "{kinds:?}");
    }
}

#[test]
fn an_expiry_reported_within_a_lease_of_a_grant_is_the_previous_keys() {
    // Worker 0's term began at 1,000 ms; the harness recorded an expiry at 1,080 ms (the
    // killed previous holder's key, its notification late): not this term's loss.
    let mut events = vec![
        hello(0),
        term(1_000, 1_000, 0, "w0-t0-0", 7, TaskMode::LeaderRun),
    ];
    events.push(expired(1_080));
    events.push(returned(1_300, 0, "w0-t0-0", 7));
    let report = check(&events);
    assert_eq!(
        counted(&report),
        Vec::<&str>::new(),
        "{:#?}",
        report.violations
    );
    assert_eq!(report.leader.as_ref().unwrap().judged, 0);
}
