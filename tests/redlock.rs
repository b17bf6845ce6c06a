//! Redlock over independent masters: the behavioural suite on 3 masters,
//! and quorum, fault and fencing tests on 5.

mod suite;

use std::time::Duration;

use distlock::{LockClient, LockClientBuilder, LockError};
use lock_test_support::RedisServer;
use suite::{Fixture, Topology};
use tokio::time::Instant;

/// Clients on N masters of this test's own.
struct Redlock {
    servers: Vec<RedisServer>,
}

impl Redlock {
    fn new(n: usize) -> Self {
        Redlock {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
        }
    }

    fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// Which masters hold lock `name`.
    fn holders(&self, name: &str) -> usize {
        self.servers
            .iter()
            .filter(|s| s.is_running_quick())
            .filter(|s| {
                redis::cmd("EXISTS")
                    .arg(format!("lock:{{{name}}}"))
                    .query::<bool>(&mut s.conn())
                    .unwrap()
            })
            .count()
    }
}

trait Quick {
    fn is_running_quick(&self) -> bool;
}

impl Quick for RedisServer {
    fn is_running_quick(&self) -> bool {
        let client = redis::Client::open(self.url()).unwrap();
        client
            .get_connection_with_timeout(Duration::from_millis(300))
            .is_ok()
    }
}

impl Fixture for Redlock {
    async fn client_with(&self, builder: LockClientBuilder) -> LockClient {
        builder.connect_redlock(self.urls()).await.unwrap()
    }

    async fn delete_lock(&self, name: &str) {
        let mut deleted = 0;
        for server in &self.servers {
            let n: i64 = redis::cmd("DEL")
                .arg(format!("lock:{{{name}}}"))
                .query(&mut server.conn())
                .unwrap();
            deleted += n;
        }
        assert!(
            deleted as usize > self.servers.len() / 2,
            "{name} was not held"
        );
    }
}

behaviour_suite!(Redlock::new(3));

/// The fair lock, the read-write lock and the semaphore are refused on
/// Redlock with a typed error naming the lock, the primitive and why;
/// nothing is written to any master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_family_is_refused_on_redlock() {
    let fixture = Redlock::new(3);
    let client = fixture.client().await;
    let rw = client.read_write_lock("family");
    for (lock, primitive) in [
        (client.fair_lock("family"), "fair lock"),
        (rw.read(), "read lock"),
        (rw.write(), "write lock"),
        (client.semaphore("family", 2).permit(), "semaphore"),
    ] {
        match lock.wait(Duration::from_secs(5)).acquire().await {
            Err(LockError::Unsupported {
                key,
                primitive: got,
                backend,
                reason,
            }) => {
                assert_eq!(key, "family");
                assert_eq!(got, primitive);
                assert_eq!(backend, "Redlock");
                assert!(reason.contains("Sentinel"), "{reason}");
            }
            other => panic!("{primitive}: {other:?}"),
        }
    }
    // So are their inspection and force-release.
    let refused = |result: Result<(), LockError>, primitive: &str| match result {
        Err(LockError::Unsupported {
            key,
            primitive: got,
            backend,
            ..
        }) => {
            assert_eq!(
                (key.as_str(), got, backend),
                ("family", primitive, "Redlock")
            );
        }
        other => panic!("{primitive}: {other:?}"),
    };
    refused(
        client.admin().inspect_fair("family").await.map(drop),
        "fair lock",
    );
    refused(
        client.admin().inspect_read_write("family").await.map(drop),
        "read-write lock",
    );
    refused(
        client.admin().inspect_semaphore("family").await.map(drop),
        "semaphore",
    );
    refused(
        client.admin().force_release_fair("family").await.map(drop),
        "fair lock",
    );
    refused(
        client
            .admin()
            .force_release_read_write("family")
            .await
            .map(drop),
        "read-write lock",
    );
    refused(
        client
            .admin()
            .force_release_semaphore("family")
            .await
            .map(drop),
        "semaphore",
    );
    for server in &fixture.servers {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut server.conn())
            .unwrap();
        // (The registry of layouts every client writes when it connects.)
        keys.retain(|key| key != "distlock:layouts");
        assert!(keys.is_empty(), "{keys:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_masters_down_of_five_still_acquire_renew_and_release() {
    let mut fixture = Redlock::new(5);
    let client = LockClient::builder()
        .lease(Duration::from_millis(600))
        .connect_redlock(fixture.urls())
        .await
        .unwrap();
    let rival = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    fixture.servers[0].kill();
    fixture.servers[3].kill();
    let guard = client.lock("rl:two-down").acquire().await.unwrap();
    assert_eq!(fixture.holders("rl:two-down"), 3);
    // Held past several leases: renewals reach the majority.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        guard.is_held(),
        "renewal on 3 of 5 masters must keep the lock"
    );
    assert!(
        rival
            .lock("rl:two-down")
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "a rival got the lock held on the surviving majority"
    );
    guard.release().await.unwrap();
    assert_eq!(fixture.holders("rl:two-down"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_masters_down_of_five_is_quorum_not_reached_within_wait() {
    let mut fixture = Redlock::new(5);
    let client = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    for i in [0, 2, 4] {
        fixture.servers[i].kill();
    }
    let started = Instant::now();
    let err = client
        .lock("rl:three-down")
        .wait(Duration::from_millis(800))
        .acquire()
        .await
        .unwrap_err();
    let waited = started.elapsed();
    match &err {
        LockError::QuorumNotReached {
            key,
            granted,
            needed,
            answers,
        } => {
            assert_eq!(key, "rl:three-down");
            assert_eq!((*granted, *needed), (2, 3));
            assert_eq!(answers.len(), 5);
            let failed = answers
                .iter()
                .filter(|a| a.answer.starts_with("error"))
                .count();
            assert_eq!(failed, 3, "{answers:?}");
        }
        other => panic!("expected QuorumNotReached, got {other:?}"),
    }
    assert!(err.is_backend());
    assert!(
        waited >= Duration::from_millis(700),
        "gave up after {waited:?}, before the wait"
    );
    assert!(waited < Duration::from_secs(10), "took {waited:?}");
    // The two grants of each failed attempt were given back.
    assert_eq!(fixture.holders("rl:three-down"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_master_costs_at_most_the_node_timeout() {
    let fixture = Redlock::new(5);
    let client = LockClient::builder()
        .response_timeout(Duration::from_secs(20))
        .redlock(fixture.urls())
        .node_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    fixture.servers[1].pause();
    let mut slowest = Duration::ZERO;
    for i in 0..5 {
        let started = Instant::now();
        let guard = client
            .lock(format!("rl:paused:{i}"))
            .acquire()
            .await
            .unwrap();
        slowest = slowest.max(started.elapsed());
        guard.release().await.unwrap();
    }
    fixture.servers[1].resume();
    // Bounded by the 200 ms node timeout (plus a generous margin), not by
    // the 20 s response timeout the paused master would otherwise cost.
    assert!(
        slowest < Duration::from_secs(3),
        "an acquisition took {slowest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_empty_master_does_not_let_a_second_holder_in() {
    let mut fixture = Redlock::new(5);
    let a = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    let b = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    let guard = a.lock("rl:restart").acquire().await.unwrap();
    fixture.servers[0].restart(); // persistence is off: it comes back empty
    fixture.servers[1].restart();
    assert_eq!(fixture.holders("rl:restart"), 3);
    assert!(
        b.lock("rl:restart").try_acquire().await.unwrap().is_none(),
        "two holders: the restarted masters granted a second owner"
    );
    // B's grants on the empty masters were given back.
    assert_eq!(fixture.holders("rl:restart"), 3);
    assert!(guard.is_held());
    guard.release().await.unwrap();
    let next = b.lock("rl:restart").try_acquire().await.unwrap();
    assert!(next.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_across_holders_when_masters_disagree() {
    let mut fixture = Redlock::new(5);
    let a = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    // Master 0's counter is far ahead of the others'.
    let fence_key = a.admin().inspect("rl:fence").await.unwrap().fence_key;
    let () = redis::cmd("SET")
        .arg(fence_key)
        .arg(1000)
        .query(&mut fixture.servers[0].conn())
        .unwrap();
    let first = a.lock("rl:fence").acquire().await.unwrap();
    let t1 = first.fencing_token();
    assert!(t1 > 1000, "the token is the highest of the quorum's: {t1}");
    first.release().await.unwrap();
    // Without master 0, a later holder must still get a higher token: the
    // floor was written to a majority of the counters.
    fixture.servers[0].kill();
    let second = a.lock("rl:fence").acquire().await.unwrap();
    assert!(
        second.fencing_token() > t1,
        "{} after {t1}",
        second.fencing_token()
    );
    second.release().await.unwrap();
}

#[test]
fn two_processes_exclude_each_other() {
    let fixture = Redlock::new(3);
    let counter = RedisServer::start();
    suite::processes_exclude_each_other(
        &Topology::Redlock(fixture.urls()),
        &counter.url(),
        "process_worker",
        2,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in child processes by two_processes_exclude_each_other"]
async fn process_worker() {
    suite::counter_worker().await;
}

/// A Redlock client with the defaults.
trait ConnectForTest {
    async fn connect_redlock_for_test(urls: &[String]) -> LockClient;
}

impl ConnectForTest for LockClient {
    async fn connect_redlock_for_test(urls: &[String]) -> LockClient {
        LockClient::redlock(urls).await.unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_list_report_the_majority_holder() {
    let mut fixture = Redlock::new(3);
    let client = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    // The master about to die issues the highest token of the quorum (the
    // one the holder is given): the survivors must report that token, not
    // their own lower ones.
    let fence_key = client.admin().inspect("rl:listed").await.unwrap().fence_key;
    let () = redis::cmd("SET")
        .arg(&fence_key)
        .arg(8_000_000_000_000_000_u64)
        .query(&mut fixture.servers[0].conn())
        .unwrap();
    let guard = client.lock("rl:listed").acquire().await.unwrap();
    assert!(guard.fencing_token() > 8_000_000_000_000_000);
    fixture.servers[0].kill(); // a minority down: still answered
    let info = client.admin().inspect("rl:listed").await.unwrap();
    let holder = info.holder.expect("held on a majority");
    assert_eq!(holder.owner, guard.owner());
    assert_eq!(holder.fencing_token, guard.fencing_token());
    assert_eq!(info.last_fencing_token, Some(guard.fencing_token()));
    let listed = client.admin().list("rl:").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "rl:listed");
    // Held on one master only (not a majority): not held.
    let () = redis::cmd("DEL")
        .arg("lock:{rl:listed}")
        .query(&mut fixture.servers[1].conn())
        .unwrap();
    assert!(client
        .admin()
        .inspect("rl:listed")
        .await
        .unwrap()
        .holder
        .is_none());
    assert!(client.admin().list("rl:").await.unwrap().is_empty());
}

/// Sum of `calls` of `INFO commandstats` for `commands` on `server`.
fn command_calls(server: &RedisServer, commands: &[&str]) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            commands.contains(&name).then_some(())?;
            rest.strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Waiters of a lock held on a bare majority take grants on the other
/// masters and give them back; giving them back must not wake the other
/// waiters, or they wake each other in a loop of failing attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolled_back_grants_do_not_wake_waiters_into_a_storm() {
    let fixture = Redlock::new(5);
    let holder = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    let guard = holder.lock("rl:storm").acquire().await.unwrap();
    // Held on masters 0-2 only: a waiter is granted masters 3 and 4.
    for i in [3, 4] {
        let _: i64 = redis::cmd("DEL")
            .arg("lock:{rl:storm}")
            .query(&mut fixture.servers[i].conn())
            .unwrap();
    }
    let before = command_calls(&fixture.servers[3], &["evalsha", "hdel"]);
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let client = LockClient::connect_redlock_for_test(&fixture.urls()).await;
        waiters.push(tokio::spawn(async move {
            client
                .lock("rl:storm")
                .wait(Duration::from_millis(1500))
                .acquire()
                .await
        }));
    }
    for waiter in waiters {
        assert!(matches!(
            waiter.await.unwrap(),
            Err(LockError::TimedOut { .. })
        ));
    }
    let calls = command_calls(&fixture.servers[3], &["evalsha", "hdel"]) - before;
    // A few attempts per waiter (first, after subscribing, at the deadline),
    // each an acquire and a rollback: not hundreds.
    assert!(
        calls < 60,
        "{calls} acquire/rollback calls on one master in 1.5 s"
    );
    assert!(guard.is_held());
    guard.release().await.unwrap();
}

/// Waiters woken by the same release can split the masters between them,
/// none with a majority: each gives its grants back without waking anyone
/// (see `rolled_back_grants_do_not_wake_waiters_into_a_storm`), and then the
/// lock is free with no release to come. A waiter that lost such a vote
/// must try again soon, not sleep out the lease the others' grants showed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_split_the_vote_try_again_soon() {
    let fixture = Redlock::new(3);
    // Two other contenders' grants, one master each (master 2 is free).
    let mut others = Vec::new();
    for i in [0, 1] {
        let other = LockClient::connect(&fixture.servers[i].url())
            .await
            .unwrap();
        let grant = other
            .lock("rl:split")
            .lease(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        others.push((other, grant));
    }
    let client = fixture.client().await;
    let waiter = tokio::spawn(async move {
        let guard = client
            .lock("rl:split")
            .wait(Duration::from_secs(10))
            .acquire()
            .await;
        (Instant::now(), guard)
    });
    // The waiter was granted master 2 only, gave it back and waits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished());
    assert_eq!(fixture.holders("rl:split"), 2);
    // The other contenders give theirs back as quietly (a rollback deletes
    // its grant and publishes nothing).
    for i in [0, 1] {
        let deleted: i64 = redis::cmd("DEL")
            .arg("lock:{rl:split}")
            .query(&mut fixture.servers[i].conn())
            .unwrap();
        assert_eq!(deleted, 1);
    }
    let freed = Instant::now();
    let (acquired, guard) = waiter.await.unwrap();
    let guard = guard.expect("the waiter got the lock");
    // A retry after a short random delay, not the 30 s lease (here cut to
    // the 10 s wait).
    let after = acquired - freed;
    assert!(
        after < Duration::from_secs(1),
        "acquired {after:?} after the split"
    );
    guard.release().await.unwrap();
    for (_, grant) in others {
        // Gone behind their backs: their release finds nothing to delete.
        let _ = grant.release().await;
    }
}

/// Issue 37: a master of a bare majority rejoins empty. With master 2 down,
/// A holds the lock on masters 0 and 1 (a bare majority, the floor written
/// to both); master 1 restarts empty and master 2 comes back empty. B then
/// wins masters 1 and 2 while A still believes it holds the lock (the two
/// holders the deployments guide states). Before the clock floor, B's token
/// came from two counters that started over (1), below A's: a fenced
/// resource kept trusting A. Now each master's token is at least its clock,
/// so B's is above A's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_of_a_bare_majority_that_rejoins_empty_issues_a_higher_token() {
    let mut fixture = Redlock::new(3);
    let a = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    let b = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    fixture.servers[2].kill();
    for _ in 0..3 {
        let guard = a.lock("rl:bare").acquire().await.unwrap();
        guard.release().await.unwrap();
    }
    let held = a.lock("rl:bare").acquire().await.unwrap();
    let t1 = held.fencing_token();
    assert_eq!(fixture.holders("rl:bare"), 2);

    fixture.servers[1].restart();
    fixture.servers[2].restart();
    let second = b
        .lock("rl:bare")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert!(held.is_held(), "A has not renewed since: it still holds");
    assert!(
        second.fencing_token() > t1,
        "B's token {} is not above A's {t1}",
        second.fencing_token()
    );
    second.release().await.unwrap();
    drop(held);
}

/// Subscriptions to lock `name`'s wake-up channel on `server`.
fn subscribers(server: &RedisServer, name: &str) -> u64 {
    let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(format!("lock:{{{name}}}:released"))
        .query(&mut server.conn())
        .unwrap();
    counts.first().map_or(0, |(_, n)| *n)
}

/// Until a waiter of lock `name` waits: subscribed on every master, and
/// its attempt after subscribing answered (the second acquire script that
/// master 0 ran since it had run `attempts`).
async fn waiting(fixture: &Redlock, name: &str, attempts: u64) {
    let started = Instant::now();
    while fixture.servers.iter().any(|s| subscribers(s, name) == 0)
        || command_calls(&fixture.servers[0], &["evalsha"]) < attempts + 2
    {
        assert!(started.elapsed() < Duration::from_secs(30), "not waiting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // (Its busy answers from masters 1 and 2 are on their way.)
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// A client whose votes are won too late while a master is paused: each
/// master may take 1 s to answer, and its locks' lease (500 ms) is shorter.
async fn late_voter(fixture: &Redlock) -> LockClient {
    LockClient::builder()
        .redlock(fixture.urls())
        .node_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap()
}

/// Issue 38: a vote won too late (a majority granted, but the paused
/// master's node timeout ate the lease) gives the lock back, and no release
/// message comes for it. The waiter that won it must try again soon, not
/// sleep until its wait's deadline.
///
/// Masters 0 and 1 answer at once, master 2 is paused: the waiter's vote
/// waits 1 s (its node timeout) for master 2, longer than its 500 ms lease.
/// Once it gave those grants back, master 2 is resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_vote_was_won_too_late_tries_again_soon() {
    let name = "rl:late";
    let fixture = Redlock::new(3);
    let holder = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    let held = holder.lock(name).acquire().await.unwrap();
    let client = late_voter(&fixture).await;
    let attempts = command_calls(&fixture.servers[0], &["evalsha"]);
    let waiter = tokio::spawn(async move {
        let guard = client
            .lock(name)
            .lease(Duration::from_millis(500))
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (Instant::now(), guard)
    });
    waiting(&fixture, name, attempts).await;
    let hdels = command_calls(&fixture.servers[0], &["hdel"]);
    // The holder's release reaches masters 0 and 1 while master 2 is
    // paused (it already lost the lock there), and wakes the waiter once
    // (a release message wakes one waiter of a client per master: with as
    // many waiters as masters, each is woken once).
    let () = redis::cmd("DEL")
        .arg(format!("lock:{{{name}}}"))
        .query(&mut fixture.servers[2].conn())
        .unwrap();
    let paused = fixture.servers[2].paused();
    for server in &fixture.servers[..2] {
        let () = redis::cmd("DEL")
            .arg(format!("lock:{{{name}}}"))
            .query(&mut server.conn())
            .unwrap();
    }
    let _: u64 = redis::cmd("PUBLISH")
        .arg(format!("lock:{{{name}}}:released"))
        .arg("0")
        .query(&mut fixture.servers[0].conn())
        .unwrap();
    let freed = Instant::now();
    // The waiter wins masters 0 and 1, 1 s too late, and gives them back
    // (an `HDEL`, quiet or not; the grants have expired by then).
    while command_calls(&fixture.servers[0], &["hdel"]) == hdels {
        assert!(freed.elapsed() < Duration::from_secs(10), "not given back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    paused.resume();
    let (acquired, guard) = waiter.await.unwrap();
    let after = acquired - freed;
    assert!(guard.is_ok(), "{guard:?}");
    // About two node timeouts (the late vote, its give-back) and a short
    // random delay; not the 20 s wait.
    assert!(
        after < Duration::from_secs(8),
        "acquired {after:?} after the release"
    );
    eprintln!("acquired {after:?} after the release");
    drop(held);
}

/// Issue 38: an acquisition that wins a vote too late gives the lock back
/// as a release does: the other waiters are woken, not left asleep until
/// their deadline (nobody else will release it).
///
/// The holder's lock is deleted without a release message (it expired);
/// master 2 is paused. A try of a client with a 1 s node timeout and a
/// 500 ms lease wins masters 0 and 1 too late and gives them back; a waiter
/// of another client (node timeout 300 ms, lease 30 s) must be woken by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_won_too_late_wakes_the_other_waiters() {
    let name = "rl:late-wake";
    let fixture = Redlock::new(3);
    let holder = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    let held = holder.lock(name).acquire().await.unwrap();
    let other = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    let attempts = command_calls(&fixture.servers[0], &["evalsha"]);
    let waiter = tokio::spawn(async move {
        let guard = other
            .lock(name)
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (Instant::now(), guard.map(|guard| guard.fencing_token()))
    });
    waiting(&fixture, name, attempts).await;
    // The holder's lock expires: deleted, and no message.
    for server in &fixture.servers {
        let () = redis::cmd("DEL")
            .arg(format!("lock:{{{name}}}"))
            .query(&mut server.conn())
            .unwrap();
    }
    let late = late_voter(&fixture).await;
    let paused = fixture.servers[2].paused();
    let freed = Instant::now();
    let tried = late
        .lock(name)
        .lease(Duration::from_millis(500))
        .try_acquire()
        .await
        .unwrap();
    assert!(tried.is_none(), "a vote won after its lease ran out");
    paused.resume();
    let (acquired, token) = waiter.await.unwrap();
    let after = acquired - freed;
    assert!(token.is_ok(), "{token:?}");
    assert!(
        after < Duration::from_secs(8),
        "the waiter acquired {after:?} after the lock was free"
    );
    eprintln!("the waiter acquired {after:?} after the lock was free");
    drop(held);
}

/// Issue 38: the rollback of an abandoned acquisition that a majority had
/// granted (its future dropped while the vote waited for a paused master)
/// gives back a lock: the other waiters are woken, as by its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollback_of_an_abandoned_majority_wakes_the_other_waiters() {
    let name = "rl:abandoned";
    let fixture = Redlock::new(3);
    let holder = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    let held = holder.lock(name).acquire().await.unwrap();
    let other = LockClient::connect_redlock_for_test(&fixture.urls()).await;
    let attempts = command_calls(&fixture.servers[0], &["evalsha"]);
    let waiter = tokio::spawn(async move {
        let guard = other
            .lock(name)
            .wait(Duration::from_secs(20))
            .acquire()
            .await;
        (Instant::now(), guard.map(|guard| guard.fencing_token()))
    });
    waiting(&fixture, name, attempts).await;
    // The holder's lock expires: deleted, and no message.
    for server in &fixture.servers {
        let () = redis::cmd("DEL")
            .arg(format!("lock:{{{name}}}"))
            .query(&mut server.conn())
            .unwrap();
    }
    let late = late_voter(&fixture).await;
    let _paused = fixture.servers[2].paused();
    let freed = Instant::now();
    // Granted by masters 0 and 1 (30 s lease), dropped while it waits for
    // master 2.
    let abandoned =
        tokio::time::timeout(Duration::from_millis(300), late.lock(name).try_acquire()).await;
    assert!(abandoned.is_err(), "{abandoned:?}");
    let (acquired, token) = waiter.await.unwrap();
    let after = acquired - freed;
    assert!(token.is_ok(), "{token:?}");
    assert!(
        after < Duration::from_secs(8),
        "the waiter acquired {after:?} after the lock was free"
    );
    eprintln!("the waiter acquired {after:?} after the lock was free");
    drop(held);
}

/// Leader election is refused on Redlock with a typed error naming the
/// role's lock and why (a term must come from one store), by every entry
/// point: campaign, read, observe and the run loop; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_is_refused_on_redlock() {
    let fixture = Redlock::new(3);
    let client = fixture.client().await;
    let election = client.election("scheduler");
    let check = |result: Result<(), LockError>, entry: &str| match result {
        Err(LockError::Unsupported {
            key,
            primitive,
            backend,
            reason,
        }) => {
            assert_eq!(key, "leader:scheduler", "{entry}");
            assert_eq!(primitive, "leader election", "{entry}");
            assert_eq!(backend, "Redlock", "{entry}");
            assert!(reason.contains("Sentinel"), "{entry}: {reason}");
        }
        other => panic!("{entry}: {other:?}"),
    };
    check(
        election.campaign(Duration::from_secs(1)).await.map(|_| ()),
        "campaign",
    );
    check(election.leader().await.map(|_| ()), "leader");
    check(election.observe().changed().await.map(|_| ()), "observe");
    check(election.run(|_| std::future::pending::<()>()).await, "run");
    for server in &fixture.servers {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut server.conn())
            .unwrap();
        assert!(
            keys.iter().all(|key| !key.contains("scheduler")),
            "nothing written: {keys:?}"
        );
    }
}
