//! `LockAdmin::list_all`: every lock of every kind under a prefix, with its
//! holders, queue, readers and permits, on the in-memory store, one Redis
//! server and a Redis Cluster (every master); Redlock lists its plain locks
//! only. Also `LockHolder::kept` for a hot lock's keeper and
//! `LockAdmin::waiters_of`.

use std::future::Future;
use std::time::{Duration, Instant};

use distlock::{ListedLock, LockClient, LockError, LockGuard, MemoryStore};
use lock_test_support::{RedisCluster, RedisMasters, RedisServer};

const WAIT: Duration = Duration::from_secs(30);

/// Polls `check` until it holds, for 10 s.
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn find<'a>(listed: &'a [ListedLock], name: &str) -> &'a ListedLock {
    listed
        .iter()
        .find(|lock| lock.name() == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {listed:#?}"))
}

/// `a` and `b`, two clients of one store, and `hot`, a client that keeps
/// its plain locks: each kind held under `fam:`, listed with its figures.
async fn check_every_kind_is_listed(a: LockClient, b: LockClient, hot: LockClient) {
    let admin = a.admin();
    // A plain lock, with a client waiting for it.
    let plain = a.lock("fam:plain").acquire().await.unwrap();
    let plain_waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock("fam:plain").wait(WAIT).acquire().await }
    });
    // A hot lock, kept idle by `hot` after one use.
    let used = hot.lock("fam:hot").acquire().await.unwrap();
    let hot_token = used.fencing_token();
    used.release().await.unwrap();
    // A fair lock held by `a`, `b` queued.
    let turn = a.fair_lock("fam:fair").acquire().await.unwrap();
    let fair_waiter = tokio::spawn({
        let b = b.clone();
        async move { b.fair_lock("fam:fair").wait(WAIT).acquire().await }
    });
    // A read-write lock read by `a` and `b`, a writer of `hot` waiting.
    let read_a = a.read_write_lock("fam:rw").read().acquire().await.unwrap();
    let read_b = b.read_write_lock("fam:rw").read().acquire().await.unwrap();
    let writer = tokio::spawn({
        let hot = hot.clone();
        async move {
            hot.read_write_lock("fam:rw")
                .write()
                .wait(WAIT)
                .acquire()
                .await
        }
    });
    // A semaphore of 5: 2 permits to `a`, 1 to `b`.
    let two = a
        .semaphore("fam:sem", 5)
        .permits(2)
        .acquire()
        .await
        .unwrap();
    let one = b.semaphore("fam:sem", 5).permit().acquire().await.unwrap();
    // Not under the prefix.
    let other = a.lock("other:x").acquire().await.unwrap();

    eventually("the queue, the waiting writer and the waiter", || async {
        let listed = admin.list_all("fam:").await.unwrap();
        let queued = matches!(find(&listed, "fam:fair"), ListedLock::Fair(f) if f.queue.len() == 1);
        let writing =
            matches!(find(&listed, "fam:rw"), ListedLock::ReadWrite(rw) if rw.waiting_writers.len() == 1);
        let waiting = admin.waiters(["fam:plain"]).await.unwrap() == [1];
        queued && writing && waiting
    })
    .await;

    let listed = admin.list_all("fam:").await.unwrap();
    let names: Vec<&str> = listed.iter().map(ListedLock::name).collect();
    assert_eq!(
        names,
        ["fam:fair", "fam:hot", "fam:plain", "fam:rw", "fam:sem"]
    );

    let ListedLock::Plain(info) = find(&listed, "fam:plain") else {
        panic!("fam:plain is not a plain lock: {listed:#?}");
    };
    let holder = info.holder.as_ref().expect("held");
    assert_eq!(holder.owner, plain.owner());
    assert_eq!(holder.fencing_token, plain.fencing_token());
    assert!(!holder.kept());

    let ListedLock::Plain(info) = find(&listed, "fam:hot") else {
        panic!("fam:hot is not a plain lock: {listed:#?}");
    };
    let keeper = info.holder.as_ref().expect("kept");
    assert!(keeper.kept(), "{keeper:?}");
    assert_eq!(keeper.client_id(), hot.id());
    assert_eq!(keeper.fencing_token, hot_token);
    // Another use: the same field and token in the store.
    hot.lock("fam:hot")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let again = admin.inspect("fam:hot").await.unwrap().holder.unwrap();
    assert_eq!(
        (&again.owner, again.fencing_token),
        (&keeper.owner, hot_token)
    );

    let ListedLock::Fair(fair) = find(&listed, "fam:fair") else {
        panic!("fam:fair is not a fair lock: {listed:#?}");
    };
    assert_eq!(fair.holder.as_ref().unwrap().owner, turn.owner());
    assert_eq!(fair.queue.len(), 1);
    assert_eq!(fair.queue[0].client_id(), b.id());
    assert!(fair.queue[0].place_ttl > Duration::ZERO);

    let ListedLock::ReadWrite(rw) = find(&listed, "fam:rw") else {
        panic!("fam:rw is not a read-write lock: {listed:#?}");
    };
    let mut readers: Vec<&str> = rw.readers.iter().map(|r| r.owner.as_str()).collect();
    readers.sort_unstable();
    let mut expected = [read_a.owner(), read_b.owner()];
    expected.sort_unstable();
    assert_eq!(readers, expected);
    assert!(rw.writer.is_none());
    assert_eq!(rw.waiting_writers[0].client_id(), hot.id());

    let ListedLock::Semaphore(semaphore) = find(&listed, "fam:sem") else {
        panic!("fam:sem is not a semaphore: {listed:#?}");
    };
    assert_eq!(semaphore.in_use, 3);
    let mut holders: Vec<(&str, u32)> = semaphore
        .holders
        .iter()
        .map(|h| (h.owner.as_str(), h.permits))
        .collect();
    holders.sort_unstable();
    let mut expected = [(two.owner(), 2), (one.owner(), 1)];
    expected.sort_unstable();
    assert_eq!(holders, expected);

    // Each lock's own channel: the plain lock's waiter, no one else's
    // (the keeper follows its hot lock's channel).
    let counts = admin.waiters_of(&listed).await.unwrap();
    let count = |name: &str| counts[listed.iter().position(|l| l.name() == name).unwrap()];
    assert_eq!(count("fam:plain"), 1);
    assert_eq!(count("fam:sem"), 0);
    // A waiting writer, a queued waiter: their clients follow the channel.
    assert_eq!(count("fam:rw"), 1);
    assert_eq!(count("fam:fair"), 1);

    // Everything, `list` unchanged (plain locks only).
    let all = admin.list_all("").await.unwrap();
    assert!(all.iter().any(|l| l.name() == "other:x"));
    let plain_names: Vec<String> = admin
        .list("fam:")
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(plain_names, ["fam:hot", "fam:plain"]);

    // Released: gone from the list, as are the waiters once served.
    let release = |guard: LockGuard| async move { guard.release().await.unwrap() };
    release(plain).await;
    release(plain_waiter.await.unwrap().unwrap()).await;
    release(turn).await;
    release(fair_waiter.await.unwrap().unwrap()).await;
    release(read_a).await;
    release(read_b).await;
    release(writer.await.unwrap().unwrap()).await;
    release(two).await;
    release(one).await;
    release(other).await;
    hot.shutdown(Duration::from_secs(5)).await.unwrap();
    eventually("an empty list", || async {
        admin.list_all("fam:").await.unwrap().is_empty()
    })
    .await;
}

fn hot_builder() -> distlock::LockClientBuilder {
    LockClient::builder().keep_hot(Duration::from_secs(60))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_lists_every_kind() {
    let store = MemoryStore::new();
    let client = || LockClient::builder().memory(store.clone()).unwrap();
    let hot = hot_builder().memory(store.clone()).unwrap();
    check_every_kind_is_listed(client(), client(), hot).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lists_every_kind() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let b = LockClient::connect(&server.url()).await.unwrap();
    let hot = hot_builder().connect(&server.url()).await.unwrap();
    server.reset_command_stats();
    check_every_kind_is_listed(a, b, hot).await;
    assert_eq!(server.command_calls("keys"), 0, "SCAN, never KEYS");
    assert!(server.command_calls("scan") > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_lists_every_kind_on_every_master() {
    let cluster = RedisCluster::start(3, 0);
    let a = LockClient::cluster(cluster.urls()).await.unwrap();
    let b = LockClient::cluster(cluster.urls()).await.unwrap();
    let hot = hot_builder().connect_cluster(cluster.urls()).await.unwrap();
    check_every_kind_is_listed(a, b, hot).await;
}

/// Redlock has no lock family: `list_all` lists what `list` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_lists_its_plain_locks() {
    let masters = RedisMasters::start(3);
    let client = LockClient::redlock(masters.urls()).await.unwrap();
    let guard = client.lock("fam:plain").acquire().await.unwrap();
    let listed = client.admin().list_all("fam:").await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    let ListedLock::Plain(info) = &listed[0] else {
        panic!("{listed:#?}");
    };
    assert_eq!(info.holder.as_ref().unwrap().owner, guard.owner());
    assert!(matches!(
        client.fair_lock("fam:fair").acquire().await,
        Err(LockError::Unsupported { .. })
    ));
    guard.release().await.unwrap();
}
