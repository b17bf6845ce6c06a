//! Redisson's read-write lock in [`Layout::Redisson`], against one
//! redis-server, without a Java peer (tests/redisson_java.rs runs real
//! Redisson): the keys and fields Redisson reads, the messages its waiters
//! listen for, the read holds' renewal, and the refused primitives.

use std::time::Duration;

use distlock::{Layout, LockClient, LockError};
use futures::StreamExt;
use lock_test_support::RedisServer;
use redis::AsyncCommands;

async fn client(url: &str, lease: Duration) -> LockClient {
    LockClient::builder()
        .layout(Layout::Redisson)
        .lease(lease)
        .connect(url)
        .await
        .unwrap()
}

async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A read hold is Redisson's: hash `mode = read`, field `<owner> = 1`, the
/// timeout key `{name}:<owner>:rwlock_timeout:1`; a write hold is field
/// `<owner>:write` with `mode = write`; the last release deletes the hash.
#[tokio::test]
async fn holds_are_laid_out_as_redisson_lays_them_out() {
    let server = RedisServer::start();
    let url = server.url();
    let client = client(&url, Duration::from_secs(30)).await;
    let mut conn = conn(&url).await;
    let rw = client.read_write_lock("rw:layout");

    let read = rw.read().acquire().await.unwrap();
    let owner = read.owner().to_owned();
    let mode: String = conn.hget("rw:layout", "mode").await.unwrap();
    assert_eq!(mode, "read");
    let holds: u64 = conn.hget("rw:layout", &owner).await.unwrap();
    assert_eq!(holds, 1);
    let timeout = format!("{{rw:layout}}:{owner}:rwlock_timeout:1");
    let ttl: i64 = conn.pttl(&timeout).await.unwrap();
    assert!(ttl > 29_000 && ttl <= 30_000, "{timeout}: {ttl}");
    read.release().await.unwrap();
    assert!(!conn.exists::<_, bool>("rw:layout").await.unwrap());
    assert!(!conn.exists::<_, bool>(&timeout).await.unwrap());

    let write = rw.write().acquire().await.unwrap();
    let owner = write.owner().to_owned();
    let fields: std::collections::HashMap<String, String> =
        conn.hgetall("rw:layout").await.unwrap();
    assert_eq!(fields.get("mode").map(String::as_str), Some("write"));
    assert_eq!(
        fields.get(&format!("{owner}:write")).map(String::as_str),
        Some("1")
    );
    assert_eq!(fields.len(), 2, "{fields:?}");
    // A writer may read too (Redisson's downgrade), in its own call chain.
    let read = write
        .scope(async { rw.read().acquire().await })
        .await
        .unwrap();
    let holds: u64 = conn.hget("rw:layout", &owner).await.unwrap();
    assert_eq!(holds, 1);
    write.release().await.unwrap();
    let mode: String = conn.hget("rw:layout", "mode").await.unwrap();
    assert_eq!(mode, "read", "the writer's read hold remains");
    read.release().await.unwrap();
    assert!(!conn.exists::<_, bool>("rw:layout").await.unwrap());

    // A name with a hash tag: no braces added (Redisson's suffixName).
    let read = client
        .read_write_lock("{t}:rw")
        .read()
        .acquire()
        .await
        .unwrap();
    let timeout = format!("{{t}}:rw:{}:rwlock_timeout:1", read.owner());
    assert!(conn.exists::<_, bool>(&timeout).await.unwrap(), "{timeout}");
    read.release().await.unwrap();
}

/// Readers of two clients share; a writer waits for both and is woken by
/// the last reader's message; the messages are Redisson's (`0` when the
/// last reader leaves, `1` when the writer does).
#[tokio::test]
async fn readers_share_writers_exclude_and_the_messages_are_redissons() {
    let server = RedisServer::start();
    let url = server.url();
    let a = client(&url, Duration::from_secs(30)).await;
    let b = client(&url, Duration::from_secs(30)).await;
    let mut pubsub = redis::Client::open(url.as_str())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub
        .subscribe("redisson_rwlock:{rw:share}")
        .await
        .unwrap();
    let mut messages = pubsub.into_on_message();

    let ra = a
        .read_write_lock("rw:share")
        .read()
        .acquire()
        .await
        .unwrap();
    let rb = b
        .read_write_lock("rw:share")
        .read()
        .acquire()
        .await
        .unwrap();
    assert!(a
        .read_write_lock("rw:share")
        .write()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    let writer = tokio::spawn({
        let b = b.clone();
        async move {
            let guard = b
                .read_write_lock("rw:share")
                .write()
                .wait(Duration::from_secs(20))
                .acquire()
                .await?;
            Ok::<_, LockError>((tokio::time::Instant::now(), guard))
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished());
    ra.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!writer.is_finished(), "one reader still holds");
    rb.release().await.unwrap();
    let released = tokio::time::Instant::now();
    let (acquired, guard) = writer.await.unwrap().unwrap();
    // Woken by the message, not by the 30 s lease.
    assert!(acquired - released < Duration::from_secs(2));
    let message = tokio::time::timeout(Duration::from_secs(5), messages.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "0");
    assert!(a
        .read_write_lock("rw:share")
        .read()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    guard.release().await.unwrap();
    let message = tokio::time::timeout(Duration::from_secs(5), messages.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "1");
}

/// The watchdog renews a read hold's timeout key and the hash, as
/// Redisson's does; a force-release is a loss for the holder.
#[tokio::test]
async fn read_holds_are_renewed_and_force_released() {
    let server = RedisServer::start();
    let url = server.url();
    let client = client(&url, Duration::from_secs(1)).await;
    let mut conn = conn(&url).await;
    let read = client
        .read_write_lock("rw:renew")
        .read()
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let timeout = format!("{{rw:renew}}:{}:rwlock_timeout:1", read.owner());
    assert!(conn.exists::<_, bool>(&timeout).await.unwrap());
    assert!(conn.exists::<_, bool>("rw:renew").await.unwrap());
    assert!(client
        .admin()
        .force_release_read_write("rw:renew")
        .await
        .unwrap());
    tokio::time::timeout(Duration::from_secs(3), read.lost())
        .await
        .expect("lost() after the force-release");
    assert!(matches!(
        read.release().await,
        Err(LockError::LeaseLost { .. })
    ));
}

/// A name used as Redisson's plain lock is not a read-write lock and the
/// other way round; the fair lock and the semaphore are refused in this
/// layout, and the read-write lock on the in-memory store.
#[tokio::test]
async fn other_types_and_primitives_are_refused() {
    let server = RedisServer::start();
    let url = server.url();
    let client = client(&url, Duration::from_secs(30)).await;
    let plain = client.lock("rw:plain").acquire().await.unwrap();
    let refused = client
        .read_write_lock("rw:plain")
        .read()
        .try_acquire()
        .await;
    assert!(
        matches!(refused, Err(LockError::WrongType { ref redis_key, .. }) if redis_key == "rw:plain"),
        "{refused:?}"
    );
    let refused = client
        .read_write_lock("rw:plain")
        .write()
        .try_acquire()
        .await;
    assert!(
        matches!(refused, Err(LockError::WrongType { .. })),
        "{refused:?}"
    );
    plain.release().await.unwrap();

    let read = client
        .read_write_lock("rw:taken")
        .read()
        .acquire()
        .await
        .unwrap();
    let refused = client.lock("rw:taken").try_acquire().await;
    assert!(
        matches!(refused, Err(LockError::WrongType { .. })),
        "{refused:?}"
    );
    read.release().await.unwrap();

    let fair = client.fair_lock("rw:fair").try_acquire().await;
    assert!(
        matches!(fair, Err(LockError::Unsupported { reason, .. }) if reason.contains("threadWaitTime")),
        "{fair:?}"
    );

    let memory = LockClient::builder()
        .layout(Layout::Redisson)
        .memory(distlock::MemoryStore::new())
        .unwrap();
    let refused = memory.read_write_lock("rw:m").read().try_acquire().await;
    assert!(
        matches!(refused, Err(LockError::Unsupported { .. })),
        "{refused:?}"
    );
    let refused = memory.semaphore("sem:m", 2).permit().try_acquire().await;
    assert!(
        matches!(refused, Err(LockError::Unsupported { .. })),
        "{refused:?}"
    );
}

/// The semaphore is Redisson's `RPermitExpirableSemaphore`: the count of
/// available permits under the name (set to the total by the first
/// acquisition, as `trySetPermits`), one 16-byte permit id per permit in
/// `{name}:timeout` with its deadline, the count published on
/// `redisson_sc:{name}` at every release; renewed deadlines; a dead
/// holder's permits come back when their deadline passes.
#[tokio::test]
async fn semaphore_is_redissons_permit_expirable_semaphore() {
    let server = RedisServer::start();
    let url = server.url();
    let a = client(&url, Duration::from_secs(1)).await;
    let b = client(&url, Duration::from_secs(30)).await;
    let mut conn = conn(&url).await;
    let mut pubsub = redis::Client::open(url.as_str())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe("redisson_sc:{sem:a}").await.unwrap();
    let mut messages = pubsub.into_on_message();

    let two = a.semaphore("sem:a", 3).permits(2).acquire().await.unwrap();
    // trySetPermits's message, then the count.
    let message = tokio::time::timeout(Duration::from_secs(5), messages.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "3");
    let available: u32 = conn.get("sem:a").await.unwrap();
    assert_eq!(available, 1);
    let ids: Vec<(Vec<u8>, u64)> = conn
        .zrange_withscores("{sem:a}:timeout", 0, -1)
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    assert!(ids.iter().all(|(id, _)| id.len() == 16));
    let (secs, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let deadline = ids[0].1;
    assert!(
        deadline > secs * 1000 && deadline <= secs * 1000 + 2000,
        "{deadline}"
    );
    // Renewed by the watchdog past the 1 s lease.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let ids: Vec<(Vec<u8>, u64)> = conn
        .zrange_withscores("{sem:a}:timeout", 0, -1)
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    assert!(ids[0].1 > deadline, "renewed");

    let one = b.semaphore("sem:a", 3).permit().acquire().await.unwrap();
    assert!(b
        .semaphore("sem:a", 3)
        .permit()
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.semaphore("sem:a", 3)
                .permits(2)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    let released = tokio::time::Instant::now();
    two.release().await.unwrap();
    let message = tokio::time::timeout(Duration::from_secs(5), messages.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "2");
    let got = waiter.await.unwrap().unwrap();
    assert!(released.elapsed() < Duration::from_secs(2));
    assert_eq!(conn.get::<_, u32>("sem:a").await.unwrap(), 0);
    got.release().await.unwrap();
    one.release().await.unwrap();
    assert_eq!(conn.get::<_, u32>("sem:a").await.unwrap(), 3);

    // A holder that died: its permit's deadline passes and the next
    // acquisition gives it back to the count, as Redisson's does.
    let _: () = conn.set("sem:a", 2).await.unwrap();
    let _: () = conn
        .zadd("{sem:a}:timeout", b"0123456789abcdef".to_vec(), 1)
        .await
        .unwrap();
    let three = b
        .semaphore("sem:a", 3)
        .permits(3)
        .try_acquire()
        .await
        .unwrap();
    assert!(three.is_some(), "the dead holder's permit came back");
    three.unwrap().release().await.unwrap();
}
