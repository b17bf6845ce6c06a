//! Redis Cluster resharding while locks are held and waited for: a waiter's
//! sharded subscription follows its lock's slot to the new owner, so a
//! release published there still wakes it (a slot moved by hand in slow
//! steps, with `ASK` and `TRYAGAIN` on the way, and by `redis-cli --cluster
//! reshard`).

use std::sync::Arc;
use std::time::Duration;

use distlock::LockClient;
use lock_test_support::RedisCluster;
use tokio::time::Instant;

fn redis_key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// How many sharded subscriptions `node` has to `channel`.
fn shard_subscribers(cluster: &RedisCluster, node: usize, channel: &str) -> i64 {
    let reply: Vec<redis::Value> = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query(&mut cluster.node(node).conn())
        .unwrap();
    match reply.get(1) {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("PUBSUB SHARDNUMSUB reply: {other:?}"),
    }
}

/// Another master than `than`.
fn other_master(cluster: &RedisCluster, than: usize) -> usize {
    cluster
        .masters()
        .into_iter()
        .find(|&m| m != than)
        .expect("another master")
}

/// A waiter whose subscription was made on the old owner of its lock's
/// slot is woken by a release published on the new owner: it gets the lock
/// within a hand-off of the release, not at the end of the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_a_release_after_its_locks_slot_moved() {
    let cluster = Arc::new(RedisCluster::start(3, 0));
    let name = "reshard:one";
    let key = redis_key(name);
    let channel = format!("{key}:released");
    let slot = cluster.slot_of(&key);
    let lease = Duration::from_secs(20);
    let holder = LockClient::builder()
        .lease(lease)
        .connect_cluster(cluster.urls())
        .await
        .unwrap();
    let waiter = LockClient::builder()
        .lease(lease)
        .connect_cluster(cluster.urls())
        .await
        .unwrap();
    let guard = holder.lock(name).acquire().await.unwrap();
    let token = guard.fencing_token();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .lock(name)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    let owner = cluster.master_of_slot(slot);
    let until = Instant::now() + Duration::from_secs(10);
    while shard_subscribers(&cluster, owner, &channel) < 1 {
        assert!(Instant::now() < until, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let to = other_master(&cluster, owner);
    let mover = cluster.clone();
    tokio::task::spawn_blocking(move || mover.move_slot(slot, to, 1, Duration::from_millis(100)))
        .await
        .unwrap();
    assert_eq!(cluster.master_of_slot(slot), to);
    // The subscription follows the slot (the server unsubscribes the old
    // owner's subscribers of a moved slot).
    let until = Instant::now() + Duration::from_secs(10);
    while shard_subscribers(&cluster, to, &channel) < 1 {
        assert!(
            Instant::now() < until,
            "the waiter's subscription did not follow the slot to its new owner"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The holder's lease still renews on the new owner, and its release
    // there wakes the waiter.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(guard.is_held());
    let released = Instant::now();
    guard.release().await.unwrap();
    let (acquired, taken) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter got the lock")
        .unwrap();
    let waited = acquired.saturating_duration_since(released);
    println!("waited {waited:?} after the release (lease {lease:?})");
    assert!(
        waited < Duration::from_secs(2),
        "the waiter slept {waited:?} after the release (its wake-up was lost with the slot move)"
    );
    assert!(taken.fencing_token() > token, "tokens keep rising across the move");
    taken.release().await.unwrap();
}
