//! Leader election (`LockClient::election`), run per backend by
//! `leader_suite!`: one leader at a time with rising terms, the hand-over
//! at a resignation and at a shutdown, observers that see every change in
//! order, the run loop's loss and re-election, and a hot client's role lock
//! that is never kept.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Leader, LockClient, LockError, Wait};
use tokio::time::Instant;

use super::{assert_within, Fixture};

const LONG: Duration = Duration::from_secs(20);

/// Three clients campaign for one role in turn, many times: never two
/// leaders at once (an inside-marker set by each leader for its term), and
/// every term higher than every term before it.
pub async fn leader_one_at_a_time_with_rising_terms<F: Fixture>(fixture: &F) {
    let inside = Arc::new(AtomicBool::new(false));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let client = fixture.client().await;
        let (inside, terms) = (inside.clone(), terms.clone());
        tasks.push(tokio::spawn(async move {
            let election = client.election("suite:turns").metadata(format!("node-{i}"));
            for _ in 0..8 {
                let leadership = election.campaign(LONG).await.unwrap();
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "two leaders at once (term {})",
                    leadership.term()
                );
                terms.lock().unwrap().push(leadership.term());
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.store(false, Ordering::SeqCst);
                leadership.resign().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let terms = terms.lock().unwrap().clone();
    assert_eq!(terms.len(), 24);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms must strictly increase in election order: {terms:?}"
    );
}

/// A resignation hands the role to a waiting campaign at once (not after
/// a lease): the follower leads within a fraction of the 20 s lease.
pub async fn leader_resignation_hands_over_at_once<F: Fixture>(fixture: &F) {
    let lease = Duration::from_secs(20);
    let a = super::client_with_lease(fixture, lease).await;
    let b = super::client_with_lease(fixture, lease).await;
    let first = a
        .election("suite:resign")
        .campaign(Wait::Once)
        .await
        .unwrap();
    let follower = tokio::spawn(async move {
        let leadership = b.election("suite:resign").campaign(LONG).await.unwrap();
        (Instant::now(), leadership)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resigned = Instant::now();
    let first_term = first.term();
    first.resign().await.unwrap();
    let (elected, second) = follower.await.unwrap();
    assert_within(
        elected.saturating_duration_since(resigned),
        Duration::from_secs(3),
        "the hand-over after a resignation",
    );
    assert!(second.term() > first_term);
    second.resign().await.unwrap();
}

/// A single try while another client leads is `Busy`; the leader's client
/// can read who leads, and so can any other.
pub async fn leader_is_read_by_any_client<F: Fixture>(fixture: &F) {
    let [a, b] = super::clients::<F, 2>(fixture).await;
    let leading = a
        .election("suite:read")
        .metadata("http://10.0.0.1:8080")
        .campaign(Wait::Once)
        .await
        .unwrap();
    assert!(matches!(
        b.election("suite:read").campaign(Wait::Once).await,
        Err(LockError::Busy { .. })
    ));
    let seen = b.election("suite:read").leader().await.unwrap().unwrap();
    assert_eq!(seen.term, leading.term());
    assert_eq!(seen.client_id, a.id());
    assert_eq!(seen.metadata.as_deref(), Some("http://10.0.0.1:8080"));
    assert!(seen.since.is_some());
    assert!(seen.lease_left > Duration::ZERO);
    // The role's lock is a lock like any other, under its documented name.
    let info = b.admin().inspect("leader:suite:read").await.unwrap();
    assert_eq!(info.holder.map(|h| h.fencing_token), Some(leading.term()));
    leading.resign().await.unwrap();
    assert_eq!(b.election("suite:read").leader().await.unwrap(), None);
}

/// An observer (on a client that never campaigns) sees each change in
/// order: the first leader with its metadata, a new proclamation, the
/// resignation, the next leader with a higher term.
pub async fn leader_observer_sees_every_change_in_order<F: Fixture>(fixture: &F) {
    let [a, b, watcher] = super::clients::<F, 3>(fixture).await;
    let mut observer = watcher.election("suite:observe").observe();
    assert_eq!(
        tokio::time::timeout(LONG, observer.changed())
            .await
            .unwrap()
            .unwrap(),
        None,
        "nobody leads at first"
    );
    let first = a
        .election("suite:observe")
        .metadata("a:1")
        .campaign(Wait::Once)
        .await
        .unwrap();
    let seen = next(&mut observer).await;
    let seen = skip_unproclaimed(&mut observer, seen).await;
    assert_eq!(seen.as_ref().map(|l| l.term), Some(first.term()));
    assert_eq!(seen.and_then(|l| l.metadata).as_deref(), Some("a:1"));
    first.proclaim("a:2").await.unwrap();
    let seen = next(&mut observer).await.unwrap();
    assert_eq!(
        (seen.term, seen.metadata.as_deref()),
        (first.term(), Some("a:2"))
    );
    let first_term = first.term();
    first.resign().await.unwrap();
    assert_eq!(next(&mut observer).await, None, "the resignation");
    let second = b
        .election("suite:observe")
        .metadata("b:1")
        .campaign(Wait::Once)
        .await
        .unwrap();
    let seen = next(&mut observer).await;
    let seen = skip_unproclaimed(&mut observer, seen).await.unwrap();
    assert!(seen.term > first_term);
    assert_eq!(seen.term, second.term());
    assert_eq!(seen.metadata.as_deref(), Some("b:1"));
    second.resign().await.unwrap();
}

/// The observer's next change, within 20 s.
async fn next(observer: &mut distlock::Observer) -> Option<Leader> {
    tokio::time::timeout(LONG, observer.changed())
        .await
        .expect("a change")
        .unwrap()
}

/// A view read in the moment between winning and proclaiming has no
/// metadata yet; the proclamation follows.
async fn skip_unproclaimed(
    observer: &mut distlock::Observer,
    seen: Option<Leader>,
) -> Option<Leader> {
    match seen {
        Some(leader) if leader.metadata.is_none() => tokio::time::timeout(LONG, observer.changed())
            .await
            .expect("the proclamation")
            .unwrap(),
        other => other,
    }
}

/// Many observers on many clients, many terms: no observer ever sees a
/// term lower than one it saw, nor a term again after seeing it end.
pub async fn leader_observers_never_see_an_older_term<F: Fixture>(fixture: &F) {
    let mut watchers = Vec::new();
    let done = Arc::new(AtomicBool::new(false));
    for _ in 0..4 {
        let client = fixture.client().await;
        let done = done.clone();
        watchers.push(tokio::spawn(async move {
            let mut observer = client.election("suite:order").observe();
            let (mut highest, mut ended, mut views) = (0u64, false, 0usize);
            while !done.load(Ordering::SeqCst) {
                let Ok(view) =
                    tokio::time::timeout(Duration::from_millis(200), observer.changed()).await
                else {
                    continue;
                };
                views += 1;
                match view.unwrap() {
                    Some(leader) => {
                        assert!(leader.term >= highest, "{} after {highest}", leader.term);
                        assert!(
                            !(leader.term == highest && ended),
                            "term {highest} seen again after it ended"
                        );
                        ended = leader.term == highest && ended;
                        highest = leader.term;
                    }
                    None => ended = true,
                }
            }
            views
        }));
    }
    let [a, b] = super::clients::<F, 2>(fixture).await;
    for round in 0..10 {
        let client = if round % 2 == 0 { &a } else { &b };
        let leadership = client.election("suite:order").campaign(LONG).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        leadership.resign().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    done.store(true, Ordering::SeqCst);
    for watcher in watchers {
        let views = watcher.await.unwrap();
        assert!(views >= 2, "an observer saw only {views} views");
    }
}

/// The run loop: its future runs while leading, is dropped when leadership
/// is lost (the role's lock deleted behind its back), and runs again in a
/// new, higher term after the loop campaigns again.
pub async fn leader_run_loop_drops_work_on_loss_and_campaigns_again<F: Fixture>(fixture: &F) {
    let client = super::client_with_lease(fixture, Duration::from_millis(900)).await;
    let terms = Arc::new(Mutex::new(Vec::new()));
    let running = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let election = client
        .election("suite:run")
        .backoff(Duration::from_millis(50));
    let runner = {
        let (terms, running, dropped) = (terms.clone(), running.clone(), dropped.clone());
        let election = election.clone();
        tokio::spawn(async move {
            election
                .run(move |term| {
                    let (terms, running, dropped) =
                        (terms.clone(), running.clone(), dropped.clone());
                    async move {
                        terms.lock().unwrap().push(term.token());
                        running.fetch_add(1, Ordering::SeqCst);
                        let _on_drop = OnDrop(dropped);
                        std::future::pending::<()>().await;
                    }
                })
                .await
        })
    };
    wait_until(|| running.load(Ordering::SeqCst) == 1).await;
    fixture.delete_lock("leader:suite:run").await;
    // Lost within a renewal period (300 ms), dropped, elected again.
    wait_until(|| dropped.load(Ordering::SeqCst) == 1).await;
    wait_until(|| running.load(Ordering::SeqCst) == 2).await;
    let terms = terms.lock().unwrap().clone();
    assert!(terms[1] > terms[0], "a new term: {terms:?}");
    client.shutdown(Duration::from_secs(5)).await.unwrap();
    runner.await.unwrap().unwrap();
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        2,
        "the shutdown dropped the work"
    );
}

/// At the client's shutdown the run loop drops its work and resigns first:
/// a follower on another client leads within a fraction of the 20 s lease.
pub async fn leader_shutdown_hands_over_at_once<F: Fixture>(fixture: &F) {
    let lease = Duration::from_secs(20);
    let a = super::client_with_lease(fixture, lease).await;
    let b = super::client_with_lease(fixture, lease).await;
    let started = Arc::new(AtomicUsize::new(0));
    let runner = {
        let started = started.clone();
        let election = a.election("suite:shutdown");
        tokio::spawn(async move {
            election
                .run(move |_term| {
                    started.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<()>()
                })
                .await
        })
    };
    wait_until(|| started.load(Ordering::SeqCst) == 1).await;
    let follower = tokio::spawn(async move {
        let leadership = b.election("suite:shutdown").campaign(LONG).await.unwrap();
        (Instant::now(), leadership)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let shutdown = Instant::now();
    a.shutdown(Duration::from_secs(30)).await.unwrap();
    runner.await.unwrap().unwrap();
    let (elected, leadership) = follower.await.unwrap();
    assert_within(
        elected.saturating_duration_since(shutdown),
        Duration::from_secs(3),
        "the hand-over at a shutdown",
    );
    leadership.resign().await.unwrap();
}

/// A client that keeps locks hot never keeps a role's lock: a resignation
/// still hands it over at once, with a new term.
pub async fn leader_role_lock_is_never_kept_hot<F: Fixture>(fixture: &F) {
    let hot = fixture
        .client_with(LockClient::builder().keep_hot(Duration::from_secs(60)))
        .await;
    let other = fixture.client().await;
    let leading = hot
        .election("suite:hot")
        .campaign(Wait::Once)
        .await
        .unwrap();
    let term = leading.term();
    leading.resign().await.unwrap();
    let next = other
        .election("suite:hot")
        .campaign(Wait::Once)
        .await
        .expect("the role's lock was given back, not kept");
    assert!(next.term() > term);
    next.resign().await.unwrap();
}

/// A second campaign from a call chain that already leads would re-enter
/// the same term: it is refused, naming the role's lock.
pub async fn leader_second_campaign_in_one_chain_is_refused<F: Fixture>(fixture: &F) {
    let client = fixture.client().await;
    let election = client.election("suite:twice");
    let leading = election.campaign(Wait::Once).await.unwrap();
    let again = leading
        .guard()
        .unwrap()
        .scope(election.campaign(Wait::Once))
        .await;
    match again {
        Err(LockError::InvalidConfig { key, .. }) => assert_eq!(key, "leader:suite:twice"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    leading.resign().await.unwrap();
}

/// Dropping a `Leadership` resigns in the background: another client
/// leads soon after, not after the lease.
pub async fn leader_dropped_leadership_resigns<F: Fixture>(fixture: &F) {
    let lease = Duration::from_secs(20);
    let a = super::client_with_lease(fixture, lease).await;
    let b = super::client_with_lease(fixture, lease).await;
    let leading = a.election("suite:drop").campaign(Wait::Once).await.unwrap();
    let dropped = Instant::now();
    drop(leading);
    let next = b.election("suite:drop").campaign(LONG).await.unwrap();
    assert_within(
        dropped.elapsed(),
        Duration::from_secs(3),
        "the hand-over after a drop",
    );
    next.resign().await.unwrap();
    // The observers' view: nobody, once resigned.
    assert_eq!(b.election("suite:drop").leader().await.unwrap(), None);
}

struct OnDrop(Arc<AtomicUsize>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `done` every 10 ms for up to 20 s.
async fn wait_until(done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < LONG, "condition not met within {LONG:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Generates the leader election tests on the fixture `$make`.
#[macro_export]
macro_rules! leader_suite {
    ($make:expr) => {
        behaviour_suite!($make;
            leader_one_at_a_time_with_rising_terms,
            leader_resignation_hands_over_at_once,
            leader_is_read_by_any_client,
            leader_observer_sees_every_change_in_order,
            leader_observers_never_see_an_older_term,
            leader_run_loop_drops_work_on_loss_and_campaigns_again,
            leader_shutdown_hands_over_at_once,
            leader_role_lock_is_never_kept_hot,
            leader_second_campaign_in_one_chain_is_refused,
            leader_dropped_leadership_resigns,
        );
    };
}
