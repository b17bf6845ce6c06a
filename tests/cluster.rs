//! Redis Cluster (3 masters + 1 replica each): the behavioural suite on a
//! cluster shared by the suite's tests, and slot, sharded pub/sub and
//! failover tests on clusters of their own.

mod suite;

use std::sync::OnceLock;
use std::time::Duration;

use distlock::{LockClient, LockClientBuilder};
use lock_test_support::{RedisCluster, RedisServer};
use suite::{Fixture, Topology};
use tokio::time::Instant;

/// One cluster for all suite tests of this binary (they use distinct lock
/// names); fault tests start their own.
fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(3, 1))
}

fn redis_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// A connection to the master that serves lock `name`.
fn master_conn(cluster: &RedisCluster, name: &str) -> redis::Connection {
    let master = cluster.master_of_slot(cluster.slot_of(&redis_key(name)));
    cluster.node(master).conn()
}

struct Cluster(&'static RedisCluster);

impl Fixture for Cluster {
    async fn client_with(&self, builder: LockClientBuilder) -> LockClient {
        builder.connect_cluster(self.0.urls()).await.unwrap()
    }

    async fn delete_lock(&self, name: &str) {
        let deleted: i64 = redis::cmd("DEL")
            .arg(redis_key(name))
            .query(&mut master_conn(self.0, name))
            .unwrap();
        assert_eq!(deleted, 1, "{name} was not held");
    }
}

behaviour_suite!(Cluster(shared_cluster()));
family_suite!(Cluster(shared_cluster()));
hot_suite!(Cluster(shared_cluster()));
leader_suite!(Cluster(shared_cluster()));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_spread_over_every_master_and_share_one_slot_each() {
    let cluster = shared_cluster();
    let client = LockClient::cluster(cluster.urls()).await.unwrap();
    let mut guards = Vec::new();
    for i in 0..30 {
        guards.push(client.lock(format!("spread:{i}")).acquire().await.unwrap());
    }
    let mut per_master = std::collections::BTreeMap::new();
    for i in 0..30 {
        let name = format!("spread:{i}");
        let key = redis_key(&name);
        // The lock, its fencing counter and its channel hash to one slot.
        let slot = cluster.slot_of(&key);
        let fence_key = client.admin().inspect(&name).await.unwrap().fence_key;
        assert_eq!(cluster.slot_of(&fence_key), slot);
        assert_eq!(cluster.slot_of(&format!("{key}:released")), slot);
        let master = cluster.master_of_slot(slot);
        let exists: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query(&mut cluster.node(master).conn())
            .unwrap();
        assert!(exists, "{key} is not on the master of its slot");
        *per_master.entry(master).or_insert(0) += 1;
    }
    assert_eq!(per_master.len(), 3, "locks on {per_master:?}");
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_use_sharded_pub_sub_on_the_lock_shard() {
    let cluster = shared_cluster();
    let (a, b) = (
        LockClient::cluster(cluster.urls()).await.unwrap(),
        LockClient::cluster(cluster.urls()).await.unwrap(),
    );
    let name = "sharded:wake";
    let guard = a.lock(name).acquire().await.unwrap();
    let waiter = tokio::spawn(async move {
        let guard = b
            .lock(name)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    // The waiter's subscription is a sharded one, on the lock's master.
    let channel = format!("{}:released", redis_key(name));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(&channel)
            .query(&mut master_conn(cluster, name))
            .unwrap();
        if subscribers == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "no SSUBSCRIBE on {channel}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released = Instant::now();
    guard.release().await.unwrap();
    let (got, next) = waiter.await.unwrap();
    // Woken by the release (the holder's lease was 30 s).
    assert!(
        got - released < Duration::from_secs(5),
        "woken after {:?}",
        got - released
    );
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_failover_keeps_locks_consistent_and_new_acquisitions_succeed() {
    let mut cluster = RedisCluster::start(3, 1);
    let client = LockClient::builder()
        .lease(Duration::from_secs(10))
        .connect_cluster(cluster.urls())
        .await
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..12 {
        guards.push(
            client
                .lock(format!("failover:{i}"))
                .acquire()
                .await
                .unwrap(),
        );
    }
    // Let the replicas catch up, then kill the master of the first lock.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let victim = cluster.master_of_slot(cluster.slot_of(&redis_key("failover:0")));
    let promoted = cluster.kill_master_and_wait_for_failover(victim, Duration::from_secs(30));
    // One lock of the promoted master vanishes: its guard must notice.
    let on_promoted: Vec<usize> = (0..12)
        .filter(|i| {
            let key = redis_key(&format!("failover:{i}"));
            cluster.master_of_slot(cluster.slot_of(&key)) == promoted
        })
        .collect();
    assert!(!on_promoted.is_empty());
    let vanished = on_promoted[0];
    let _: i64 = redis::cmd("DEL")
        .arg(redis_key(&format!("failover:{vanished}")))
        .query(&mut cluster.node(promoted).conn())
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), guards[vanished].lost())
        .await
        .expect("the guard of a vanished lock reports lost()");
    // New acquisitions succeed, on every master including the promoted one.
    let started = Instant::now();
    for i in 0..12 {
        let guard = client
            .lock(format!("after-failover:{i}"))
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        guard.release().await.unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    // No guard claims a lock its master does not have.
    tokio::time::sleep(Duration::from_secs(4)).await; // past a renewal period
    for (i, guard) in guards.iter().enumerate() {
        let key = redis_key(&format!("failover:{i}"));
        let master = cluster.master_of_slot(cluster.slot_of(&key));
        let exists: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query(&mut cluster.node(master).conn())
            .unwrap();
        assert!(
            !guard.is_held() || exists,
            "{key}: the guard says held but its master has no lock"
        );
    }
    assert!(!guards[vanished].is_held());
}

#[test]
fn two_processes_exclude_each_other() {
    let cluster = shared_cluster();
    let counter = RedisServer::start();
    suite::processes_exclude_each_other(
        &Topology::Cluster(cluster.urls()),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_list_see_locks_on_every_master() {
    let cluster = shared_cluster();
    let client = LockClient::cluster(cluster.urls()).await.unwrap();
    let mut guards = Vec::new();
    for i in 0..12 {
        guards.push(client.lock(format!("listed:{i}")).acquire().await.unwrap());
    }
    let listed = client.admin().list("listed:").await.unwrap();
    let names: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
    let mut expected: Vec<String> = (0..12).map(|i| format!("listed:{i}")).collect();
    expected.sort();
    assert_eq!(names, expected);
    let info = client.admin().inspect("listed:3").await.unwrap();
    let holder = info.holder.expect("held");
    assert_eq!(holder.owner, guards[3].owner());
    assert_eq!(holder.fencing_token, guards[3].fencing_token());
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert!(client.admin().list("listed:").await.unwrap().is_empty());
}

/// The family's inspection goes to the master of each name's slot: names on
/// every master show their own holders, and their force-release empties them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn family_inspection_reads_each_name_on_its_master() {
    let cluster = shared_cluster();
    let client = LockClient::cluster(cluster.urls()).await.unwrap();
    let operator = LockClient::cluster(cluster.urls()).await.unwrap();
    let names: Vec<String> = (0..9).map(|i| format!("family-inspect:{i}")).collect();
    let masters: std::collections::BTreeSet<_> = names
        .iter()
        .map(|name| cluster.master_of_slot(cluster.slot_of(&redis_key(name))))
        .collect();
    assert!(
        masters.len() > 1,
        "the names should spread over the masters"
    );
    let mut guards = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let take = u32::try_from(i % 3).unwrap() + 1;
        guards.push((
            client.fair_lock(name.clone()).acquire().await.unwrap(),
            client
                .read_write_lock(name.clone())
                .read()
                .acquire()
                .await
                .unwrap(),
            client
                .semaphore(name.clone(), 3)
                .permits(take)
                .acquire()
                .await
                .unwrap(),
            take,
        ));
    }
    for (name, (fair, read, permits, take)) in names.iter().zip(&guards) {
        let info = operator.admin().inspect_fair(name).await.unwrap();
        assert_eq!(info.holder.map(|h| h.owner).as_deref(), Some(fair.owner()));
        let info = operator.admin().inspect_read_write(name).await.unwrap();
        let readers: Vec<&str> = info.readers.iter().map(|r| r.owner.as_str()).collect();
        assert_eq!(readers, [read.owner()]);
        let info = operator.admin().inspect_semaphore(name).await.unwrap();
        assert_eq!(info.in_use, *take);
        assert_eq!(info.holders[0].owner, permits.owner());
    }
    for name in &names {
        assert!(operator.admin().force_release_fair(name).await.unwrap());
        assert!(operator
            .admin()
            .force_release_read_write(name)
            .await
            .unwrap());
        assert!(operator
            .admin()
            .force_release_semaphore(name)
            .await
            .unwrap());
        assert!(operator
            .admin()
            .inspect_fair(name)
            .await
            .unwrap()
            .holder
            .is_none());
        assert!(operator
            .admin()
            .inspect_read_write(name)
            .await
            .unwrap()
            .readers
            .is_empty());
        assert_eq!(
            operator
                .admin()
                .inspect_semaphore(name)
                .await
                .unwrap()
                .in_use,
            0
        );
    }
    for (fair, read, permits, _) in guards {
        assert!(fair.release().await.is_err());
        assert!(read.release().await.is_err());
        assert!(permits.release().await.is_err());
    }
}

#[distlock::distributed_lock(keys = ["account:{from}", "account:{to}"], wait = "20s", client = client)]
async fn transfer(
    client: &LockClient,
    from: u32,
    to: u32,
) -> Result<Vec<u64>, distlock::LockError> {
    tokio::time::sleep(Duration::from_millis(1)).await;
    Ok(distlock::current_all()
        .iter()
        .map(|lock| lock.fencing_token())
        .collect())
}

/// The attribute (two keys on different masters, swapped between callers)
/// runs unchanged on a cluster: no deadlock, and every call holds both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_with_keys_on_two_masters_works_on_the_cluster() {
    let cluster = shared_cluster();
    // Two accounts whose locks live on different masters.
    let (a, b) = (0..100)
        .flat_map(|a| (0..100).map(move |b| (a, b)))
        .find(|(a, b)| {
            let master = |n: u32| {
                cluster.master_of_slot(cluster.slot_of(&redis_key(&format!("account:{n}"))))
            };
            a != b && master(*a) != master(*b)
        })
        .unwrap();
    let mut tasks = Vec::new();
    for (from, to) in [(a, b), (b, a), (a, b), (b, a)] {
        let client = LockClient::cluster(cluster.urls()).await.unwrap();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let tokens = transfer(&client, from, to).await.unwrap();
                assert_eq!(tokens.len(), 2);
            }
        }));
    }
    tokio::time::timeout(Duration::from_secs(60), async {
        for task in tasks {
            task.await.unwrap();
        }
    })
    .await
    .expect("transfers in swapped order stalled");
}

/// A name starting with `}` (its raw key `lock:{}..}` would have an empty
/// hash tag, putting its keys in different slots) is stored escaped
/// (`lock:{%7D..}`) on the master of that key's slot, acquires, and its
/// waiter, subscribed (`SSUBSCRIBE`) to `lock:{%7D..}:released` on that
/// master, is woken by the release within 5 s although the holder's lease is
/// 30 s. `inspect` reports the
/// original name.
///
/// Old code: the acquisition fails with CROSSSLOT (the lock hash and the
/// fence counter hash to different slots).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_names_starting_with_a_closing_brace_work_on_the_cluster() {
    let cluster = shared_cluster();
    let (a, b) = (
        LockClient::cluster(cluster.urls()).await.unwrap(),
        LockClient::cluster(cluster.urls()).await.unwrap(),
    );
    // Distinct from the suite's odd names: this cluster is shared.
    for (name, escaped) in [("}edges:cluster", "%7Dedges:cluster"), ("}}", "%7D%7D")] {
        let guard = a
            .lock(name)
            .lease(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap_or_else(|err| panic!("acquiring {name:?}: {err:?}"));
        let key = redis_key(escaped);
        let master = cluster.master_of_slot(cluster.slot_of(&key));
        let exists: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query(&mut cluster.node(master).conn())
            .unwrap();
        assert!(
            exists,
            "{name:?} is not stored as {key} on its slot's master"
        );
        assert_eq!(b.admin().inspect(name).await.unwrap().name, name);
        let waiter = tokio::spawn({
            let b = b.clone();
            async move {
                let guard = b
                    .lock(name)
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .unwrap_or_else(|err| panic!("waiting for {name:?}: {err:?}"));
                (Instant::now(), guard)
            }
        });
        // The waiter follows the lock's channel with SSUBSCRIBE on that master.
        let channel = format!("{key}:released");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(&channel)
                .query(&mut cluster.node(master).conn())
                .unwrap();
            if subscribers == 1 {
                break;
            }
            assert!(Instant::now() < deadline, "no SSUBSCRIBE on {channel}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let released = Instant::now();
        guard.release().await.unwrap();
        let (acquired, next) = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap_or_else(|_| panic!("the waiter of {name:?} was not woken within 10 s"))
            .unwrap();
        assert!(
            acquired - released < Duration::from_secs(5),
            "the waiter of {name:?} was woken {:?} after the release (lease 30 s)",
            acquired - released
        );
        next.release().await.unwrap();
    }
}

/// A cluster client built and used on one runtime keeps working on the next
/// (see `suite::client_keeps_working_on_a_second_runtime`): its lock is
/// renewed there (the Redis `PTTL` on the lock's master stays above zero),
/// its waiter is woken by a release, and a dropped guard is released in the
/// background.
///
/// Old code: the first acquisition on the second runtime fails with "broken
/// pipe" (the cluster connection's driver died with the first runtime and
/// is never made again).
#[test]
fn edges_cluster_client_keeps_working_on_a_second_runtime() {
    let cluster = shared_cluster();
    suite::client_keeps_working_on_a_second_runtime(
        |builder| async move { builder.connect_cluster(cluster.urls()).await.unwrap() },
        |name| {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(redis_key(name))
                .query(&mut master_conn(cluster, name))
                .unwrap();
            Some(pttl)
        },
    );
}

/// Issue 37: a shard failover that lost the fence counter's last writes.
/// The replica of the lock's shard is paused (`CLIENT PAUSE ALL` stops it
/// applying its master's stream), three more tokens are issued on the
/// master, and the master is killed: the promoted replica never saw them.
/// Before the clock floor, the next token was the stale counter plus one,
/// one that an earlier holder already had; now it is at least the new
/// master's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_failover_that_lost_the_counters_last_writes_issues_no_old_token() {
    let mut cluster = RedisCluster::start(3, 1);
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(500))
        .connect_cluster(cluster.urls())
        .await
        .unwrap();
    let name = "cluster:lost-incr";
    let token = |guard: &distlock::LockGuard| guard.fencing_token();
    let first = client.lock(name).acquire().await.unwrap();
    let replicated = token(&first);
    first.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // replicated
    let fence_key = client.admin().inspect(name).await.unwrap().fence_key;

    let victim = cluster.master_of_slot(cluster.slot_of(&redis_key(name)));
    let replica = cluster.replicas_of(victim)[0];
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3000)
        .arg("ALL")
        .query(&mut cluster.node(replica).conn())
        .unwrap();
    let mut last = replicated;
    for _ in 0..3 {
        let guard = client.lock(name).acquire().await.unwrap();
        last = token(&guard);
        guard.release().await.unwrap();
    }
    let promoted = cluster.kill_master_and_wait_for_failover(victim, Duration::from_secs(30));
    // The scenario holds: the new master's counter missed the last tokens.
    let counter: u64 = redis::cmd("GET")
        .arg(&fence_key)
        .query(&mut cluster.node(promoted).conn())
        .unwrap();
    assert!(
        counter < last,
        "the promoted replica has the counter at {counter}: it did not miss {last}"
    );

    let mut guard = None;
    for _ in 0..10 {
        match client
            .lock(name)
            .wait(Duration::from_secs(5))
            .acquire()
            .await
        {
            Ok(acquired) => {
                guard = Some(acquired);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let guard = guard.expect("acquired on the promoted replica");
    assert!(
        token(&guard) > last,
        "token {} after the failover, {last} before it",
        token(&guard)
    );
    guard.release().await.unwrap();
}

/// On a cluster (a cluster of its own: the registry is one key for the
/// whole cluster), a client of another layout than the registry records is
/// refused with `LayoutConflict` naming both, and connects when the mix is
/// declared.
/// Old code: it connected with a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_another_layout_is_refused_unless_the_mix_is_declared() {
    use distlock::{Layout, LockError};
    let cluster = RedisCluster::start(3, 0);
    let native = LockClient::builder()
        .connect_cluster(cluster.master_urls())
        .await
        .unwrap();
    let refused = LockClient::builder()
        .layout(Layout::Redisson)
        .connect_cluster(cluster.master_urls())
        .await;
    assert!(
        matches!(&refused, Err(LockError::LayoutConflict { layout: Layout::Redisson, others, .. }) if others == &["native"]),
        "{:?}",
        refused.map(|_| ())
    );
    assert_eq!(native.admin().layouts().await.unwrap(), [Layout::Native]);
    LockClient::builder()
        .layout(Layout::Redisson)
        .allow_mixed_layouts(true)
        .connect_cluster(cluster.master_urls())
        .await
        .unwrap();
    assert_eq!(
        native.admin().layouts().await.unwrap(),
        [Layout::Native, Layout::Redisson]
    );
}
