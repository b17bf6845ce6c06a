//! `LockClient::inspect` and `LockClient::list` on the in-memory backend and
//! on a real `redis-server`: the same answers on both, plus the Redis-only
//! cases (SCAN batches, glob characters, wrong types, the ACL rule).

use std::time::Duration;

use distlock::{LockClient, LockError, MemoryStore};
use lock_test_support::{RedisServer, ServerOptions};

/// Two clients on one store: `a` and `b`, plus `other` with another key prefix.
async fn check_inspect_and_list(a: LockClient, b: LockClient, other: LockClient) {
    // Never used: free, no token issued.
    let fresh = a.admin().inspect("job:a").await.unwrap();
    assert_eq!(fresh.name, "job:a");
    assert_eq!(fresh.key, format!("{}{{job:a}}", a.key_prefix()));
    assert_eq!(fresh.holder, None);
    assert_eq!(fresh.last_fencing_token, None);

    let guard = a.lock("job:a").acquire().await.unwrap();
    let seen_by_b = b.admin().inspect("job:a").await.unwrap();
    let holder = seen_by_b.holder.clone().expect("job:a is held");
    assert_eq!(holder.owner, guard.owner());
    assert_eq!(holder.client_id(), a.id());
    assert_eq!(holder.fencing_token, guard.fencing_token());
    assert_eq!(holder.holds, 1);
    let ttl = holder.ttl.expect("a lease");
    assert!(ttl > Duration::ZERO && ttl <= a.lease(), "{ttl:?}");
    assert_eq!(seen_by_b.last_fencing_token, Some(guard.fencing_token()));

    // Nested holds are counted in the holder's process, not in the backend.
    guard
        .scope(async {
            let nested = a.lock("job:a").acquire().await.unwrap();
            assert_eq!(nested.hold_count(), 2);
            let holder = b.admin().inspect("job:a").await.unwrap().holder.unwrap();
            assert_eq!(holder.holds, 1);
            nested.release().await.unwrap();
        })
        .await;

    let second = b
        .lock("job:b")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let third = b.lock("order:1").acquire().await.unwrap();
    let elsewhere = other.lock("job:c").acquire().await.unwrap();

    let names = |locks: Vec<distlock::LockInfo>| -> Vec<String> {
        locks.into_iter().map(|l| l.name).collect()
    };
    assert_eq!(
        names(a.admin().list("").await.unwrap()),
        ["job:a", "job:b", "order:1"]
    );
    assert_eq!(
        names(b.admin().list("job:").await.unwrap()),
        ["job:a", "job:b"]
    );
    assert_eq!(
        names(a.admin().list("nothing").await.unwrap()),
        Vec::<String>::new()
    );
    assert_eq!(names(other.admin().list("").await.unwrap()), ["job:c"]);
    let listed = a.admin().list("job:b").await.unwrap();
    assert_eq!(listed.len(), 1);
    let holder = listed[0].holder.as_ref().unwrap();
    assert_eq!(holder.owner, second.owner());
    assert_eq!(holder.fencing_token, second.fencing_token());
    assert!(holder.ttl.unwrap() <= Duration::from_secs(60));
    // The counter is shared by the locks of a slot (one for the whole
    // in-memory store): at least this lock's token.
    assert!(listed[0].last_fencing_token >= Some(second.fencing_token()));

    // Released: free, and the last token stays.
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let after = b.admin().inspect("job:a").await.unwrap();
    assert_eq!(after.holder, None);
    assert!(after.last_fencing_token >= Some(token));
    assert_eq!(names(a.admin().list("job:").await.unwrap()), ["job:b"]);

    // Force-released: gone from the list too.
    assert!(a.admin().force_release("job:b").await.unwrap());
    assert_eq!(names(a.admin().list("").await.unwrap()), ["order:1"]);
    drop(second);

    // Names are checked as for locking.
    assert!(matches!(
        a.admin().inspect("").await,
        Err(LockError::InvalidKey { .. })
    ));
    third.release().await.unwrap();
    elsewhere.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_inspect_and_list() {
    let store = MemoryStore::new();
    let client = || LockClient::builder().memory(store.clone()).unwrap();
    let other = LockClient::builder()
        .key_prefix("other:")
        .memory(store.clone())
        .unwrap();
    check_inspect_and_list(client(), client(), other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_inspect_and_list() {
    let server = RedisServer::start();
    let a = LockClient::connect(&server.url()).await.unwrap();
    let b = LockClient::connect(&server.url()).await.unwrap();
    let other = LockClient::builder()
        .key_prefix("other:")
        .connect(&server.url())
        .await
        .unwrap();
    check_inspect_and_list(a, b, other).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_expired_locks_are_not_listed() {
    let client = LockClient::memory();
    let guard = client
        .lock("short")
        .lease(Duration::from_millis(50))
        .acquire()
        .await
        .unwrap();
    assert_eq!(client.admin().list("").await.unwrap().len(), 1);
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(client.admin().list("").await.unwrap().is_empty());
    let info = client.admin().inspect("short").await.unwrap();
    assert_eq!(info.holder, None);
    assert_eq!(info.last_fencing_token, Some(guard.fencing_token()));
}

/// More locks than one SCAN step returns: every one is listed once, and
/// fence counters, other prefixes and keys of other types are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_list_walks_the_whole_keyspace_with_scan() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    const LOCKS: usize = 1_300;
    let mut pipe = redis::pipe();
    for i in 0..LOCKS {
        let key = format!("lock:{{bulk:{i:04}}}");
        pipe.cmd("HSET")
            .arg(&key)
            .arg(format!("client{i}:1"))
            .arg(i + 1)
            .ignore();
        pipe.cmd("PEXPIRE").arg(&key).arg(60_000).ignore();
        pipe.cmd("SET")
            .arg(format!("{key}:fence"))
            .arg(i + 1)
            .ignore();
    }
    pipe.cmd("SET").arg("lock:{string}").arg("x").ignore();
    pipe.cmd("HSET")
        .arg("jobs:{elsewhere}")
        .arg("o:1")
        .arg(1)
        .ignore();
    pipe.cmd("SET").arg("unrelated").arg("x").ignore();
    let () = pipe.query(&mut conn).unwrap();

    let client = LockClient::connect(&server.url()).await.unwrap();
    // The fencing counter of bulk:0000's slot.
    let counter = client.admin().inspect("bulk:0000").await.unwrap().fence_key;
    let () = redis::cmd("SET")
        .arg(&counter)
        .arg(7)
        .query(&mut conn)
        .unwrap();
    let locks = client.admin().list("").await.unwrap();
    assert_eq!(locks.len(), LOCKS);
    for (i, lock) in locks.iter().enumerate() {
        assert_eq!(lock.name, format!("bulk:{i:04}"));
        let holder = lock.holder.as_ref().unwrap();
        assert_eq!(holder.owner, format!("client{i}:1"));
        assert_eq!(holder.client_id(), format!("client{i}"));
        assert_eq!(holder.fencing_token, i as u64 + 1);
        // Only one counter was set: locks of other slots have none.
        let expected = (lock.fence_key == counter).then_some(7);
        assert_eq!(lock.last_fencing_token, expected, "{}", lock.name);
    }
    assert_eq!(client.admin().list("bulk:12").await.unwrap().len(), 100);
    // KEYS was never sent.
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut conn)
        .unwrap();
    assert!(!stats.contains("cmdstat_keys:"), "{stats}");
    assert!(stats.contains("cmdstat_scan:"), "{stats}");
}

/// Glob characters in a name filter match themselves only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_list_prefix_is_not_a_glob() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let star = client.lock("a*[b]?").acquire().await.unwrap();
    let plain = client.lock("ab").acquire().await.unwrap();
    let names = |locks: Vec<distlock::LockInfo>| -> Vec<String> {
        locks.into_iter().map(|l| l.name).collect()
    };
    assert_eq!(names(client.admin().list("a*").await.unwrap()), ["a*[b]?"]);
    assert_eq!(
        names(client.admin().list("a").await.unwrap()),
        ["a*[b]?", "ab"]
    );
    assert_eq!(
        names(client.admin().list("a?").await.unwrap()),
        Vec::<String>::new()
    );
    star.release().await.unwrap();
    plain.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_inspect_reports_keys_of_another_type() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let () = redis::cmd("SET")
        .arg("lock:{text}")
        .arg("x")
        .query(&mut conn)
        .unwrap();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let fence_key = client.admin().inspect("fence").await.unwrap().fence_key;
    let () = redis::cmd("HSET")
        .arg(&fence_key)
        .arg("a")
        .arg("b")
        .query(&mut conn)
        .unwrap();
    match client.admin().inspect("text").await {
        Err(LockError::WrongType { key, redis_key }) => {
            assert_eq!((key.as_str(), redis_key.as_str()), ("text", "lock:{text}"))
        }
        other => panic!("{other:?}"),
    }
    match client.admin().inspect("fence").await {
        Err(LockError::WrongType { redis_key, .. }) => assert_eq!(redis_key, fence_key),
        other => panic!("{other:?}"),
    }
    assert!(client.admin().list("").await.unwrap().is_empty());
}

/// The ACL rule the README gives for operators (the lock rule plus SCAN,
/// TYPE, HGETALL and GET) is enough for inspect, list and force_release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_operator_acl_rule_is_sufficient() {
    let rule = "on >pw ~lock:* &lock:* -@all +evalsha +script|load \
                +subscribe +unsubscribe +hget +hkeys +pttl +incr +get +set +time +hset +pexpire +hexists +hdel +del +publish \
                +scan +type +hgetall";
    let mut options = ServerOptions::new().arg("--user").arg("operator");
    for part in rule.split_whitespace() {
        options = options.arg(part);
    }
    let server = RedisServer::start_with(options);
    let client = LockClient::connect(&server.url_with_auth("operator", "pw"))
        .await
        .unwrap();
    let guard = client.lock("acl:ops").acquire().await.unwrap();
    let info = client.admin().inspect("acl:ops").await.unwrap();
    assert_eq!(info.holder.unwrap().owner, guard.owner());
    assert_eq!(client.admin().list("acl:").await.unwrap().len(), 1);
    assert!(client.admin().force_release("acl:ops").await.unwrap());
    assert!(client.admin().list("").await.unwrap().is_empty());
    drop(guard);
}

/// The server's clock in milliseconds (`TIME`).
fn server_ms(conn: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn).unwrap();
    secs * 1000 + micros / 1000
}

/// Family entries written by hand around the server's clock: those whose
/// deadline passed (by the server's `TIME`, not the client's clock) are not
/// shown, though still stored; the fair queue keeps its arrival order
/// whatever the places' deadlines; members without a permit count hold none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_family_inspection_hides_what_expired_by_the_servers_clock() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let now = server_ms(&mut conn);
    let mut pipe = redis::pipe();
    // Fair: holder h, queue first < dead < last by arrival.
    pipe.cmd("HSET")
        .arg("lock:{raw}:fair")
        .arg("h:1")
        .arg(5)
        .ignore();
    pipe.cmd("PEXPIRE")
        .arg("lock:{raw}:fair")
        .arg(60_000)
        .ignore();
    pipe.cmd("ZADD")
        .arg("lock:{raw}:fair:queue")
        .arg(&[(1, "first:1"), (2, "dead:1"), (3, "last:1")])
        .ignore();
    pipe.cmd("ZADD")
        .arg("lock:{raw}:fair:timeout")
        .arg(&[
            (now + 5_000, "first:1"),
            (now - 5, "dead:1"),
            (now + 3_000, "last:1"),
        ])
        .ignore();
    // Read-write: a live and an expired reader, a writer, a live and an
    // expired waiting writer.
    pipe.cmd("ZADD")
        .arg("lock:{raw}:rw:read")
        .arg(&[(now + 60_000, "live:1"), (now - 1_000, "gone:1")])
        .ignore();
    pipe.cmd("HSET")
        .arg("lock:{raw}:rw:write")
        .arg("w:1")
        .arg(7)
        .ignore();
    pipe.cmd("ZADD")
        .arg("lock:{raw}:rw:wait")
        .arg(&[(now + 4_000, "waiting:1"), (now - 10, "left:1")])
        .ignore();
    // Semaphore: a (2 permits), b expired (3), c (1), d without a count.
    pipe.cmd("ZADD")
        .arg("lock:{raw}:sem")
        .arg(&[
            (now + 60_000, "a:1"),
            (now - 1, "b:1"),
            (now + 30_000, "c:1"),
            (now + 50_000, "d:1"),
        ])
        .ignore();
    pipe.cmd("HSET")
        .arg("lock:{raw}:sem:permits")
        .arg(&[("a:1", 2), ("b:1", 3), ("c:1", 1)])
        .ignore();
    let () = pipe.query(&mut conn).unwrap();

    let client = LockClient::connect(&server.url()).await.unwrap();
    let fence_key = client.admin().inspect("raw").await.unwrap().fence_key;
    let () = redis::cmd("SET")
        .arg(&fence_key)
        .arg(41)
        .query(&mut conn)
        .unwrap();

    let fair = client.admin().inspect_fair("raw").await.unwrap();
    let holder = fair.holder.expect("held");
    assert_eq!((holder.owner.as_str(), holder.fencing_token), ("h:1", 5));
    assert!(holder.ttl.unwrap() <= Duration::from_secs(60));
    let queue: Vec<&str> = fair.queue.iter().map(|q| q.owner.as_str()).collect();
    assert_eq!(queue, ["first:1", "last:1"]);
    assert!(fair.queue[0].place_ttl <= Duration::from_secs(5));
    assert!(fair.queue[0].place_ttl > Duration::from_secs(3));
    assert_eq!(fair.last_fencing_token, Some(41));

    let rw = client.admin().inspect_read_write("raw").await.unwrap();
    let readers: Vec<&str> = rw.readers.iter().map(|r| r.owner.as_str()).collect();
    assert_eq!(readers, ["live:1"]);
    let writer = rw.writer.expect("written");
    assert_eq!((writer.owner.as_str(), writer.fencing_token), ("w:1", 7));
    assert_eq!(writer.ttl, None, "written by hand without a TTL");
    let waiting: Vec<&str> = rw
        .waiting_writers
        .iter()
        .map(|w| w.owner.as_str())
        .collect();
    assert_eq!(waiting, ["waiting:1"]);

    let sem = client.admin().inspect_semaphore("raw").await.unwrap();
    let holders: Vec<(&str, u32)> = sem
        .holders
        .iter()
        .map(|h| (h.owner.as_str(), h.permits))
        .collect();
    assert_eq!(holders, [("c:1", 1), ("a:1", 2)]);
    assert_eq!(sem.in_use, 3);
    assert_eq!(sem.last_fencing_token, Some(41));

    // Inspection wrote nothing: the expired entries are still there.
    let stored: i64 = redis::cmd("ZCARD")
        .arg("lock:{raw}:sem")
        .query(&mut conn)
        .unwrap();
    assert_eq!(stored, 4);
    let stored: i64 = redis::cmd("ZCARD")
        .arg("lock:{raw}:fair:queue")
        .query(&mut conn)
        .unwrap();
    assert_eq!(stored, 3);
}

/// A key of a family primitive holding another type is `WrongType` naming
/// it (as is a fencing counter that is not a number), for each primitive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_family_inspection_reports_keys_of_another_type() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    for key in [
        "lock:{a}:fair:queue",
        "lock:{b}:rw:write",
        "lock:{c}:sem:permits",
    ] {
        let () = redis::cmd("SET")
            .arg(key)
            .arg("x")
            .query(&mut conn)
            .unwrap();
    }
    let client = LockClient::connect(&server.url()).await.unwrap();
    let wrong = |result: Result<(), LockError>| match result {
        Err(LockError::WrongType { key, redis_key }) => (key, redis_key),
        other => panic!("{other:?}"),
    };
    let (key, redis_key) = wrong(client.admin().inspect_fair("a").await.map(drop));
    assert_eq!(
        (key.as_str(), redis_key.as_str()),
        ("a", "lock:{a}:fair:queue")
    );
    let (_, redis_key) = wrong(client.admin().inspect_read_write("b").await.map(drop));
    assert_eq!(redis_key, "lock:{b}:rw:write");
    let (_, redis_key) = wrong(client.admin().inspect_semaphore("c").await.map(drop));
    assert_eq!(redis_key, "lock:{c}:sem:permits");

    let fence_key = client.admin().inspect("d").await.unwrap().fence_key;
    let () = redis::cmd("SET")
        .arg(&fence_key)
        .arg("not a number")
        .query(&mut conn)
        .unwrap();
    let (_, redis_key) = wrong(client.admin().inspect_semaphore("d").await.map(drop));
    assert_eq!(redis_key, fence_key);
}

/// The family's ACL rule of the README (the lock rule plus the commands the
/// family's scripts call) is enough to take, inspect and force-release
/// every primitive of the family.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_family_acl_rule_is_sufficient() {
    let rule = "on >pw ~lock:* &lock:* -@all +evalsha +script|load \
                +subscribe +unsubscribe +hget +hkeys +pttl +incr +get +set +time +hset +pexpire +hexists +hdel +del +publish \
                +exists +zadd +zrange +zrangebyscore +zrem +zremrangebyscore +zscore +zcard \
                +hvals +pexpireat +type +hgetall";
    let mut options = ServerOptions::new().arg("--user").arg("family");
    for part in rule.split_whitespace() {
        options = options.arg(part);
    }
    let server = RedisServer::start_with(options);
    let url = server.url_with_auth("family", "pw");
    let client = LockClient::connect(&url).await.unwrap();
    let other = LockClient::connect(&url).await.unwrap();

    let fair = client.fair_lock("acl:fair").acquire().await.unwrap();
    let queued = tokio::spawn({
        let other = other.clone();
        async move {
            other
                .fair_lock("acl:fair")
                .wait(Duration::from_secs(20))
                .acquire()
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        client
            .admin()
            .inspect_fair("acl:fair")
            .await
            .unwrap()
            .queue
            .len(),
        1
    );
    fair.release().await.unwrap();
    let handed = queued.await.unwrap();
    assert!(client.admin().force_release_fair("acl:fair").await.unwrap());
    assert!(handed.release().await.is_err());

    let rw = client.read_write_lock("acl:rw");
    let read = rw.read().acquire().await.unwrap();
    assert_eq!(
        client
            .admin()
            .inspect_read_write("acl:rw")
            .await
            .unwrap()
            .readers
            .len(),
        1
    );
    read.release().await.unwrap();
    let write = rw.write().acquire().await.unwrap();
    assert!(client
        .admin()
        .inspect_read_write("acl:rw")
        .await
        .unwrap()
        .writer
        .is_some());
    assert!(client
        .admin()
        .force_release_read_write("acl:rw")
        .await
        .unwrap());
    assert!(write.release().await.is_err());

    let permits = client
        .semaphore("acl:sem", 3)
        .permits(2)
        .acquire()
        .await
        .unwrap();
    assert_eq!(
        client
            .admin()
            .inspect_semaphore("acl:sem")
            .await
            .unwrap()
            .in_use,
        2
    );
    permits.release().await.unwrap();
    let permits = client
        .semaphore("acl:sem", 3)
        .permit()
        .acquire()
        .await
        .unwrap();
    assert!(client
        .admin()
        .force_release_semaphore("acl:sem")
        .await
        .unwrap());
    assert!(permits.release().await.is_err());
}
