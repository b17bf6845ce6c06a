//! `LockClient::inspect` and `LockClient::list` on the in-memory backend and
//! on a real `redis-server`: the same answers on both, plus the Redis-only
//! cases (SCAN batches, glob characters, wrong types, the ACL rule).

use std::time::Duration;

use distributed_lock::{LockClient, LockError, MemoryStore};
use lock_test_support::{RedisServer, ServerOptions};

/// Two clients on one store: `a` and `b`, plus `other` with another key prefix.
async fn check_inspect_and_list(a: LockClient, b: LockClient, other: LockClient) {
    // Never used: free, no token issued.
    let fresh = a.inspect("job:a").await.unwrap();
    assert_eq!(fresh.name, "job:a");
    assert_eq!(fresh.key, format!("{}{{job:a}}", a.key_prefix()));
    assert_eq!(fresh.holder, None);
    assert_eq!(fresh.last_fencing_token, None);

    let guard = a.lock("job:a").acquire().await.unwrap();
    let seen_by_b = b.inspect("job:a").await.unwrap();
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
            let holder = b.inspect("job:a").await.unwrap().holder.unwrap();
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

    let names = |locks: Vec<distributed_lock::LockInfo>| -> Vec<String> {
        locks.into_iter().map(|l| l.name).collect()
    };
    assert_eq!(
        names(a.list("").await.unwrap()),
        ["job:a", "job:b", "order:1"]
    );
    assert_eq!(names(b.list("job:").await.unwrap()), ["job:a", "job:b"]);
    assert_eq!(
        names(a.list("nothing").await.unwrap()),
        Vec::<String>::new()
    );
    assert_eq!(names(other.list("").await.unwrap()), ["job:c"]);
    let listed = a.list("job:b").await.unwrap();
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
    let after = b.inspect("job:a").await.unwrap();
    assert_eq!(after.holder, None);
    assert!(after.last_fencing_token >= Some(token));
    assert_eq!(names(a.list("job:").await.unwrap()), ["job:b"]);

    // Force-released: gone from the list too.
    assert!(a.force_release("job:b").await.unwrap());
    assert_eq!(names(a.list("").await.unwrap()), ["order:1"]);
    drop(second);

    // Names are checked as for locking.
    assert!(matches!(
        a.inspect("").await,
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
    assert_eq!(client.list("").await.unwrap().len(), 1);
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(client.list("").await.unwrap().is_empty());
    let info = client.inspect("short").await.unwrap();
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
    let counter = client.inspect("bulk:0000").await.unwrap().fence_key;
    let () = redis::cmd("SET")
        .arg(&counter)
        .arg(7)
        .query(&mut conn)
        .unwrap();
    let locks = client.list("").await.unwrap();
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
    assert_eq!(client.list("bulk:12").await.unwrap().len(), 100);
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
    let names = |locks: Vec<distributed_lock::LockInfo>| -> Vec<String> {
        locks.into_iter().map(|l| l.name).collect()
    };
    assert_eq!(names(client.list("a*").await.unwrap()), ["a*[b]?"]);
    assert_eq!(names(client.list("a").await.unwrap()), ["a*[b]?", "ab"]);
    assert_eq!(
        names(client.list("a?").await.unwrap()),
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
    let fence_key = client.inspect("fence").await.unwrap().fence_key;
    let () = redis::cmd("HSET")
        .arg(&fence_key)
        .arg("a")
        .arg("b")
        .query(&mut conn)
        .unwrap();
    match client.inspect("text").await {
        Err(LockError::WrongType { key, redis_key }) => {
            assert_eq!((key.as_str(), redis_key.as_str()), ("text", "lock:{text}"))
        }
        other => panic!("{other:?}"),
    }
    match client.inspect("fence").await {
        Err(LockError::WrongType { redis_key, .. }) => assert_eq!(redis_key, fence_key),
        other => panic!("{other:?}"),
    }
    assert!(client.list("").await.unwrap().is_empty());
}

/// The ACL rule the README gives for operators (the lock rule plus SCAN,
/// TYPE, HGETALL and GET) is enough for inspect, list and force_release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_operator_acl_rule_is_sufficient() {
    let rule = "on >pw ~lock:* &lock:* -@all +evalsha +script|load \
                +subscribe +unsubscribe +hget +pttl +incr +hset +pexpire +hexists +hdel +del +publish \
                +scan +type +hgetall +get";
    let mut options = ServerOptions::new().arg("--user").arg("operator");
    for part in rule.split_whitespace() {
        options = options.arg(part);
    }
    let server = RedisServer::start_with(options);
    let client = LockClient::connect(&server.url_with_auth("operator", "pw"))
        .await
        .unwrap();
    let guard = client.lock("acl:ops").acquire().await.unwrap();
    let info = client.inspect("acl:ops").await.unwrap();
    assert_eq!(info.holder.unwrap().owner, guard.owner());
    assert_eq!(client.list("acl:").await.unwrap().len(), 1);
    assert!(client.force_release("acl:ops").await.unwrap());
    assert!(client.list("").await.unwrap().is_empty());
    drop(guard);
}
