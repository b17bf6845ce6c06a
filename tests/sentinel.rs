//! A Sentinel-managed master with a replica and 3 sentinels: the behavioural
//! suite on a set shared by the suite's tests, and failover and
//! `sync_replicas` tests on sets of their own.

mod suite;

use std::sync::OnceLock;
use std::time::Duration;

use distlock::{BackendError, LockClient, LockClientBuilder, LockError};
use lock_test_support::{RedisSentinels, RedisServer};
use suite::{Fixture, Topology};
use tokio::time::Instant;

const MASTER: &str = "locks";

fn shared_set() -> &'static RedisSentinels {
    static SET: OnceLock<RedisSentinels> = OnceLock::new();
    SET.get_or_init(|| RedisSentinels::start(MASTER))
}

fn redis_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

struct Sentinel(&'static RedisSentinels);

impl Fixture for Sentinel {
    async fn client_with(&self, builder: LockClientBuilder) -> LockClient {
        builder
            .connect_sentinel(self.0.sentinel_urls(), MASTER)
            .await
            .unwrap()
    }

    async fn delete_lock(&self, name: &str) {
        let deleted: i64 = redis::cmd("DEL")
            .arg(redis_key(name))
            .query(&mut self.0.master().conn())
            .unwrap();
        assert_eq!(deleted, 1, "{name} was not held");
    }
}

behaviour_suite!(Sentinel(shared_set()));
family_suite!(Sentinel(shared_set()));
leader_suite!(Sentinel(shared_set()));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_resume_on_the_new_master_after_failover() {
    let mut set = RedisSentinels::start(MASTER);
    let client = LockClient::builder()
        .lease(Duration::from_secs(15))
        .response_timeout(Duration::from_millis(500))
        .connect_sentinel(set.sentinel_urls(), MASTER)
        .await
        .unwrap();
    assert!(client.server().contains(MASTER));
    let held = client.lock("sentinel:held").acquire().await.unwrap();
    let token = held.fencing_token();
    tokio::time::sleep(Duration::from_millis(300)).await; // replicated
    let old_port = set.master().port();
    let killed = Instant::now();
    set.kill_master_and_wait_for_failover(Duration::from_secs(60));
    assert_ne!(set.master().port(), old_port);
    // The first acquisitions after the failover find the new master.
    let guard = client
        .lock("sentinel:after")
        .wait(Duration::from_secs(30))
        .acquire()
        .await;
    let guard = match guard {
        Ok(guard) => guard,
        // One attempt may still go to the dead master; the next resolves.
        Err(err) if err.is_backend() => client
            .lock("sentinel:after")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap(),
        Err(err) => panic!("{err}"),
    };
    assert!(killed.elapsed() < Duration::from_secs(90));
    let exists: bool = redis::cmd("EXISTS")
        .arg(redis_key("sentinel:after"))
        .query(&mut set.master().conn())
        .unwrap();
    assert!(exists, "the lock is not on the new master");
    guard.release().await.unwrap();
    // The lock held across the failover was replicated: the watchdog goes
    // on renewing it on the new master, and its token stays below new ones.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        held.is_held(),
        "the replicated lock was lost after the failover"
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(redis_key("sentinel:held"))
        .query(&mut set.master().conn())
        .unwrap();
    assert!(ttl > 9_000, "not renewed on the new master: PTTL {ttl}");
    held.release().await.unwrap();
    let next = client.lock("sentinel:held").acquire().await.unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

/// A client (500 ms response timeout) that took and released lock `name`
/// once, and the token it got, after replication had time to copy it.
async fn client_with_a_replicated_token(set: &RedisSentinels, name: &str) -> (LockClient, u64) {
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(500))
        .connect_sentinel(set.sentinel_urls(), MASTER)
        .await
        .unwrap();
    let guard = client.lock(name).acquire().await.unwrap();
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // replicated
    (client, token)
}

/// Acquires `name` after a failover (an attempt or two may still meet the
/// old connection) and asserts that the lock is on the new master, not on the
/// old one, restarted empty.
async fn acquire_on_the_new_master(
    client: &LockClient,
    set: &RedisSentinels,
    name: &str,
) -> distlock::LockGuard {
    let mut guard = None;
    for _ in 0..3 {
        match client.lock(name).acquire().await {
            Ok(acquired) => {
                guard = Some(acquired);
                break;
            }
            Err(err) if err.is_backend() => tokio::time::sleep(Duration::from_millis(500)).await,
            Err(err) => panic!("{err}"),
        }
    }
    let guard = guard.expect("acquired after the failover");
    let exists = |server: &RedisServer| -> bool {
        redis::cmd("EXISTS")
            .arg(redis_key(name))
            .query(&mut server.conn())
            .unwrap()
    };
    assert!(
        !exists(set.replica()),
        "the lock was taken on the old master, restarted empty"
    );
    assert!(exists(set.master()), "the lock is not on the new master");
    guard
}

/// After a failover the client follows the sentinels' `+switch-master`
/// announcement, so when the old master comes back (restarted empty, still a
/// master until the sentinels demote it, which takes them seconds) the
/// client's commands do not go to it. This guards the behaviour; it passes
/// on the code before the `+switch-master` watcher too (a client idle
/// through the failover meets an error first and asks the sentinels then).
/// The race it protects against, workers sending commands through the
/// failover, is reproduced by the chaos run (RELIABILITY.md, finding 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_master_restarted_empty_after_failover_gets_no_locks() {
    let mut set = RedisSentinels::start(MASTER);
    let (client, token) = client_with_a_replicated_token(&set, "sentinel:restarted").await;
    // No command of the client runs while the master is down.
    set.kill_master_and_wait_for_failover(Duration::from_secs(60));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The old master, restarted empty before the sentinels demote it.
    set.replica_mut().restart();
    let guard = acquire_on_the_new_master(&client, &set, "sentinel:restarted").await;
    assert!(
        guard.fencing_token() > token,
        "the token went back: {} after {token}",
        guard.fencing_token()
    );
    guard.release().await.unwrap();
}

/// A sentinel that missed the failover (paused through it) still names the
/// old master for a while; the old master is back, restarted empty. The
/// client asks every sentinel and follows the highest configuration epoch,
/// and it heard the failover announced by the others, so its locks stay on
/// the new master. Like the test above, it passes on the earlier code too (the
/// paused sentinel catches up as soon as it runs again); the chaos run is the
/// reproduction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_that_missed_the_failover_does_not_send_the_client_back() {
    let mut set = RedisSentinels::start(MASTER);
    let (client, token) = client_with_a_replicated_token(&set, "sentinel:lagging").await;
    set.sentinel(0).pause();
    set.kill_master_and_wait_for_failover(Duration::from_secs(60));
    set.replica_mut().restart();
    set.sentinel(0).resume();
    let guard = acquire_on_the_new_master(&client, &set, "sentinel:lagging").await;
    assert!(guard.fencing_token() > token, "the token went back");
    guard.release().await.unwrap();
}

/// A client that missed a failover (connected on a runtime that was dropped
/// before it, so its `+switch-master` watcher was gone too) reads a lock
/// taken on the new master on its first `inspect`: the read meets the dead
/// connection, asks the sentinels and runs once more on the new master. The
/// old master is back at its old address, restarted empty, so a read resent
/// without following the sentinels would find no holder.
///
/// Old code: the first `inspect` failed with `LockError::Backend` ("broken
/// pipe"): admin reads were not resent, and never asked the sentinels.
#[test]
fn inspect_follows_the_new_master_on_its_first_try_after_a_missed_failover() {
    let mut set = RedisSentinels::start(MASTER);
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let runtime_a = runtime();
    let stale = runtime_a.block_on(async {
        let client = LockClient::builder()
            .response_timeout(Duration::from_millis(500))
            .connect_sentinel(set.sentinel_urls(), MASTER)
            .await
            .unwrap();
        client.admin().inspect("sentinel:admin").await.unwrap();
        client
    });
    drop(runtime_a);
    set.kill_master_and_wait_for_failover(Duration::from_secs(60));
    set.replica_mut().restart();
    runtime().block_on(async {
        let other = LockClient::builder()
            .connect_sentinel(set.sentinel_urls(), MASTER)
            .await
            .unwrap();
        let guard = acquire_on_the_new_master(&other, &set, "sentinel:admin").await;
        let info = stale.admin().inspect("sentinel:admin").await;
        let holder = match info {
            Ok(info) => info.holder,
            Err(err) => panic!("the first inspect after the failover failed: {err:?}"),
        };
        assert_eq!(
            holder.map(|h| h.fencing_token),
            Some(guard.fencing_token()),
            "the first inspect after the failover did not read the new master"
        );
        guard.release().await.unwrap();
    });
}

/// How many subscribed connections `sentinel` has.
fn subscribers(sentinel: &RedisServer) -> usize {
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut sentinel.conn())
        .unwrap();
    clients
        .lines()
        .filter(|line| line.contains(" sub=1 "))
        .count()
}

/// The client listens to every sentinel for `+switch-master` while it lives,
/// and stops at shutdown: no subscription of it is left on the sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinel_watcher_stops_at_shutdown() {
    let set = RedisSentinels::start(MASTER);
    let client = LockClient::builder()
        .connect_sentinel(set.sentinel_urls(), MASTER)
        .await
        .unwrap();
    client
        .lock("sentinel:watch")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let listening = Instant::now();
    while set.sentinels().iter().any(|s| subscribers(s) == 0) {
        assert!(
            listening.elapsed() < Duration::from_secs(5),
            "not listening to every sentinel"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.shutdown(Duration::ZERO).await.unwrap();
    let stopping = Instant::now();
    while set.sentinels().iter().any(|s| subscribers(s) > 0) {
        assert!(
            stopping.elapsed() < Duration::from_secs(5),
            "still listening after shutdown"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_replicas_rolls_back_an_acquisition_no_replica_acknowledged() {
    let set = RedisSentinels::start(MASTER);
    let client = LockClient::builder()
        .sentinel(set.sentinel_urls(), MASTER)
        .sync_replicas(1, Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    // With the replica up, WAIT is acknowledged.
    let guard = client.lock("sync:ok").acquire().await.unwrap();
    guard.release().await.unwrap();
    // With the replica paused, nothing acknowledges: the acquisition fails
    // and leaves no lock behind.
    set.replica().pause();
    let result = client.lock("sync:paused").acquire().await;
    set.replica().resume();
    match result {
        Err(LockError::Backend {
            key,
            source:
                BackendError::NotReplicated {
                    acknowledged: 0,
                    required: 1,
                },
            ..
        }) => assert_eq!(key, "sync:paused"),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let exists: bool = redis::cmd("EXISTS")
        .arg(redis_key("sync:paused"))
        .query(&mut set.master().conn())
        .unwrap();
    assert!(!exists, "the unreplicated acquisition was not rolled back");
}

#[test]
fn two_processes_exclude_each_other() {
    let set = shared_set();
    let counter = RedisServer::start();
    suite::processes_exclude_each_other(
        &Topology::Sentinel(set.sentinel_urls(), MASTER.to_owned()),
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

/// The first element of `server`'s `ROLE` reply: `master` or `slave`.
fn role(server: &RedisServer) -> String {
    let reply: Vec<redis::Value> = redis::cmd("ROLE").query(&mut server.conn()).unwrap();
    match reply.first() {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(redis::Value::SimpleString(role)) => role.clone(),
        other => panic!("unexpected ROLE reply {other:?}"),
    }
}

/// Waits until `client` hears every sentinel, then has sentinel 0 fail over to the replica
/// and pauses the promoted replica as soon as it is promoted (sentinels that would see it
/// down are told to wait a minute), and waits until the sentinels name it. Returns its port.
/// The old master stays a master, cut off from nothing: it takes whatever a client sends it.
async fn fail_over_to_a_paused_replica(set: &RedisSentinels) -> u16 {
    let listening = Instant::now();
    while set.sentinels().iter().any(|s| subscribers(s) == 0) {
        assert!(
            listening.elapsed() < Duration::from_secs(5),
            "not listening to every sentinel"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Sentinels that saw the paused new master down would fail over back
    // to the old one while the test runs.
    for sentinel in set.sentinels() {
        let _: () = redis::cmd("SENTINEL")
            .arg("SET")
            .arg(MASTER)
            .arg("down-after-milliseconds")
            .arg(60_000)
            .query(&mut sentinel.conn())
            .unwrap();
    }
    // Sentinel 0 runs the forced failover and announces the promotion
    // before it ends the failover and announces the new master.
    let mut events = set.sentinel(0).conn();
    let mut events = events.as_pubsub();
    events.subscribe("+promoted-slave").unwrap();
    events
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _: () = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(MASTER)
        .query(&mut set.sentinel(0).conn())
        .unwrap();
    events.get_message().expect("the replica was promoted");
    set.replica().pause();
    drop(events);
    let new_port = set.replica().port();
    let announcing = Instant::now();
    while set.current_master_port() != new_port {
        assert!(
            announcing.elapsed() < Duration::from_secs(10),
            "the sentinels do not name the promoted replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    new_port
}

/// While the client connects to the master the sentinels just named (here it hangs: the
/// promoted replica is paused), no command goes to the old master, which still takes locks:
/// before, commands sent during that first connection attempt (up to the connect timeout)
/// locked on the old master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_command_goes_to_the_old_master_while_the_client_connects_to_the_new_one() {
    let set = RedisSentinels::start(MASTER);
    let client = LockClient::builder()
        .lease(Duration::from_secs(2))
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(1500))
        .connect_sentinel(set.sentinel_urls(), MASTER)
        .await
        .unwrap();
    client
        .lock("warm")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    fail_over_to_a_paused_replica(&set).await;
    // The client hears the announcement within milliseconds (pub/sub on loopback) and
    // starts connecting to the paused new master: that attempt lasts the connect timeout.
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Lock attempts of names of their own, every 10 ms, from now until well past the
    // client's first connection attempt to the paused new master.
    let started = Instant::now();
    let mut i = 0u32;
    let mut taken = Vec::new();
    while started.elapsed() < Duration::from_secs(4) {
        // Kept: a dropped guard would release the lock it got.
        if let Ok(Some(guard)) = client.lock(format!("race:{i}")).try_acquire().await {
            taken.push(guard);
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        role(set.master()),
        "master",
        "the old master was demoted: the test proves nothing"
    );
    // Only the old master answered: every lock taken was taken there.
    let tokens: Vec<u64> = taken.iter().take(5).map(|g| g.fencing_token()).collect();
    assert!(
        taken.is_empty(),
        "{} of {i} attempts locked on the old master after the switch (first tokens {tokens:?})",
        taken.len()
    );
}

/// A forced failover (`SENTINEL FAILOVER`) whose promoted replica is paused
/// right after its promotion, before the sentinels announce it: the client
/// hears `+switch-master` but cannot connect to the new master, while the old
/// master is still a master (the sentinels demote it seconds later). The
/// client must not lock there (other clients lock on the new master): the
/// acquisition fails with `BackendError::MasterUnreachable`, leaves no key on
/// the old master, and a lock held from before loses its renewals and is lost
/// at its local deadline. Once the new master answers, the client moves there.
///
/// Old code: the acquisition succeeded on the old master, and the held lock
/// went on being renewed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cut_off_from_the_new_master_does_not_lock_on_the_old_one() {
    let mut set = RedisSentinels::start(MASTER);
    let lease = Duration::from_secs(2);
    let client = LockClient::builder()
        .lease(lease)
        .response_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .connect_sentinel(set.sentinel_urls(), MASTER)
        .await
        .unwrap();
    let held = client.lock("deposed:held").acquire().await.unwrap();
    let new_port = fail_over_to_a_paused_replica(&set).await;
    // Until the client has heard the announcement, an admin read still
    // succeeds (on the old code, always: this only bounds the wait).
    let hearing = Instant::now();
    while hearing.elapsed() < Duration::from_secs(3)
        && client.admin().inspect("deposed:probe").await.is_ok()
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(role(set.master()), "master", "the old master was demoted");
    let attempt = client.lock("deposed:x").try_acquire().await;
    let old_role = role(set.master());
    let on_old: bool = redis::cmd("EXISTS")
        .arg(redis_key("deposed:x"))
        .query(&mut set.master().conn())
        .unwrap();
    assert!(!on_old, "the client locked on the old master: {attempt:?}");
    assert_eq!(
        old_role, "master",
        "the old master was demoted during the attempt: the test proves nothing"
    );
    match attempt {
        Err(LockError::Backend {
            key,
            source: BackendError::MasterUnreachable { server, .. },
            ..
        }) => {
            assert_eq!(key, "deposed:x");
            assert!(server.ends_with(&format!(":{new_port}")), "{server}");
        }
        other => panic!("expected MasterUnreachable, got {other:?}"),
    }
    // The holder's renewals fail too: it loses the lock by its deadline.
    tokio::time::timeout(lease.saturating_add(Duration::from_secs(1)), held.lost())
        .await
        .expect("the lock held on the old master was not lost");
    assert!(!held.is_held());
    set.replica().resume();
    assert!(
        set.sync_roles(),
        "the sentinels no longer name the new master"
    );
    let guard = acquire_on_the_new_master(&client, &set, "deposed:x").await;
    guard.release().await.unwrap();
}

/// Issue 37: a failover that lost the fence counter's last writes. The
/// replica is made to miss them (its counter set back by hand, as if the
/// last acquisitions had not reached it before the master died), then the
/// master is killed and the replica promoted. Before the clock floor, the
/// next token was the stale counter plus one: a token that an earlier holder
/// already had. Now it is at least the new master's clock: above every
/// earlier token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_lost_the_counters_last_writes_issues_no_old_token() {
    let mut set = RedisSentinels::start(MASTER);
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(500))
        .connect_sentinel(set.sentinel_urls(), MASTER)
        .await
        .unwrap();
    let name = "sentinel:lost-incr";
    let mut tokens = Vec::new();
    for _ in 0..4 {
        let guard = client.lock(name).acquire().await.unwrap();
        tokens.push(guard.fencing_token());
        guard.release().await.unwrap();
    }
    let fence_key = client.admin().inspect(name).await.unwrap().fence_key;
    tokio::time::sleep(Duration::from_millis(300)).await; // replicated
                                                          // The replica missed the last three acquisitions.
    let mut replica = set.replica().conn();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg("no")
        .query(&mut replica)
        .unwrap();
    let () = redis::cmd("SET")
        .arg(&fence_key)
        .arg(tokens[0])
        .query(&mut replica)
        .unwrap();

    set.kill_master_and_wait_for_failover(Duration::from_secs(60));
    let mut guard = None;
    for _ in 0..5 {
        if let Ok(acquired) = client.lock(name).acquire().await {
            guard = Some(acquired);
            break;
        }
    }
    let guard = guard.expect("acquired on the new master");
    let last = *tokens.last().unwrap();
    assert!(
        guard.fencing_token() > last,
        "token {} after the failover, {last} before it ({tokens:?})",
        guard.fencing_token()
    );
    guard.release().await.unwrap();
}
