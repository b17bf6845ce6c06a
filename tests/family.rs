//! The lock family on one real Redis, across OS processes and with what
//! only the server shows: FIFO order of the fair lock across 3 processes,
//! external counts of permits and of readers and writers across 3
//! processes, the fair hand-over costing the new holder no round trip, a
//! dead queued waiter blocking nobody past its place, keys that go when the
//! holders do, and an operator's force release that answers whether the lock
//! was held.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use distlock::LockClient;
use lock_test_support::RedisServer;
use tokio::time::Instant;

const URL: &str = "FAMILY_WORKER_URL";
const INDEX: &str = "FAMILY_WORKER_INDEX";

fn spawn_worker(test: &str, url: &str, index: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(URL, url)
        .env(INDEX, index.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for(children: Vec<Child>) {
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "a worker process failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

fn family_keys(conn: &mut redis::Connection, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(conn).unwrap();
    keys.retain(|k| !k.starts_with("lock:fence:"));
    keys.sort();
    keys
}

/// The test holds a fair lock; 3 processes queue on it one after another
/// (each spawned once the previous one is in the queue, as the server
/// shows). After the release they get it in that order, never two at once,
/// and the lock's keys are gone after the last release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fair_lock_is_fifo_across_three_processes() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let guard = client.fair_lock("fifo").acquire().await.unwrap();
    let mut children = Vec::new();
    for index in 0..3 {
        children.push(spawn_worker("fifo_worker", &server.url(), index));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let queued: usize = redis::cmd("ZCARD")
                .arg("lock:{fifo}:fair:queue")
                .query(&mut conn)
                .unwrap();
            if queued == index + 1 {
                break;
            }
            assert!(Instant::now() < deadline, "worker {index} never queued");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    guard.release().await.unwrap();
    tokio::task::spawn_blocking(move || wait_for(children))
        .await
        .unwrap();
    let order: Vec<usize> = redis::cmd("LRANGE")
        .arg("fifo:order")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert_eq!(order, [0, 1, 2]);
    let overlaps: usize = redis::cmd("LLEN")
        .arg("fifo:overlaps")
        .query(&mut conn)
        .unwrap();
    assert_eq!(overlaps, 0, "two processes held the fair lock at once");
    assert_eq!(family_keys(&mut conn, "lock:*"), Vec::<String>::new());
}

/// One process of `the_fair_lock_is_fifo_across_three_processes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in child processes by the_fair_lock_is_fifo_across_three_processes"]
async fn fifo_worker() {
    let Ok(url) = std::env::var(URL) else { return };
    let index: usize = std::env::var(INDEX).unwrap().parse().unwrap();
    let client = LockClient::connect(&url).await.unwrap();
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let guard = client
        .fair_lock("fifo")
        .wait(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let first: bool = redis::cmd("SET")
        .arg("fifo:holder")
        .arg(index)
        .arg("NX")
        .query_async(&mut conn)
        .await
        .unwrap();
    if !first {
        let _: () = redis::cmd("RPUSH")
            .arg("fifo:overlaps")
            .arg(index)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("RPUSH")
        .arg("fifo:order")
        .arg(index)
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _: () = redis::cmd("DEL")
        .arg("fifo:holder")
        .query_async(&mut conn)
        .await
        .unwrap();
    guard.release().await.unwrap();
}

/// 3 processes x 4 tasks x 4 rounds use one semaphore of 2 permits and one
/// read-write lock, counting the holders in Redis outside the locks: never
/// more than 2 permits in use, never a reader with a writer or two writers.
#[test]
fn permits_and_readers_and_writers_are_counted_right_across_three_processes() {
    let server = RedisServer::start();
    let children = (0..3)
        .map(|index| spawn_worker("counting_worker", &server.url(), index))
        .collect();
    wait_for(children);
    let mut conn = server.conn();
    let get = |conn: &mut redis::Connection, key: &str| -> i64 {
        redis::cmd("GET")
            .arg(key)
            .query::<Option<i64>>(conn)
            .unwrap()
            .unwrap_or(0)
    };
    assert_eq!(get(&mut conn, "count:permits"), 3 * 4 * 4);
    assert_eq!(get(&mut conn, "count:rw"), 3 * 4 * 4);
    let violations: Vec<String> = redis::cmd("LRANGE")
        .arg("count:violations")
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert!(violations.is_empty(), "{violations:?}");
    let most: i64 = get(&mut conn, "count:most-permits");
    assert_eq!(most, 2, "the 2 permits were used together");
    assert_eq!(family_keys(&mut conn, "lock:*"), Vec::<String>::new());
}

/// Increments `key` and returns the new value (a holder coming in).
async fn enter(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("INCR").arg(key).query_async(conn).await.unwrap()
}

async fn leave(conn: &mut redis::aio::MultiplexedConnection, key: &str) {
    let _: i64 = redis::cmd("DECR").arg(key).query_async(conn).await.unwrap();
}

async fn violation(conn: &mut redis::aio::MultiplexedConnection, what: String) {
    let _: () = redis::cmd("RPUSH")
        .arg("count:violations")
        .arg(what)
        .query_async(conn)
        .await
        .unwrap();
}

/// One process of `permits_and_readers_and_writers_are_counted_right_across_three_processes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in child processes by permits_and_readers_and_writers_are_counted_right_across_three_processes"]
async fn counting_worker() {
    let Ok(url) = std::env::var(URL) else { return };
    let index: usize = std::env::var(INDEX).unwrap().parse().unwrap();
    let client = LockClient::connect(&url).await.unwrap();
    let redis = redis::Client::open(url.as_str()).unwrap();
    let mut tasks = Vec::new();
    for task in 0..4 {
        let client = client.clone();
        let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
        tasks.push(tokio::spawn(async move {
            let wait = Duration::from_secs(60);
            for round in 0..4 {
                let permit = client.semaphore("count:sem", 2).permit().wait(wait).acquire().await.unwrap();
                let in_use = enter(&mut conn, "count:in-use").await;
                let _: () = redis::cmd("EVAL")
                    .arg("if tonumber(redis.call('get', KEYS[1]) or '0') < tonumber(ARGV[1]) then redis.call('set', KEYS[1], ARGV[1]) end")
                    .arg(1)
                    .arg("count:most-permits")
                    .arg(in_use)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                if in_use > 2 {
                    violation(&mut conn, format!("{in_use} permits in use")).await;
                }
                tokio::time::sleep(Duration::from_millis(15)).await;
                leave(&mut conn, "count:in-use").await;
                let _: i64 = redis::cmd("INCR").arg("count:permits").query_async(&mut conn).await.unwrap();
                permit.release().await.unwrap();

                let rw = client.read_write_lock("count:rw");
                if (index + task + round).is_multiple_of(3) {
                    let guard = rw.write().wait(wait).acquire().await.unwrap();
                    let writers = enter(&mut conn, "count:writers").await;
                    let readers: i64 = redis::cmd("GET").arg("count:readers").query_async::<Option<i64>>(&mut conn).await.unwrap().unwrap_or(0);
                    if writers != 1 || readers != 0 {
                        violation(&mut conn, format!("writer with {writers} writers, {readers} readers")).await;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    leave(&mut conn, "count:writers").await;
                    guard.release().await.unwrap();
                } else {
                    let guard = rw.read().wait(wait).acquire().await.unwrap();
                    enter(&mut conn, "count:readers").await;
                    let writers: i64 = redis::cmd("GET").arg("count:writers").query_async::<Option<i64>>(&mut conn).await.unwrap().unwrap_or(0);
                    if writers != 0 {
                        violation(&mut conn, format!("reader with {writers} writers")).await;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    leave(&mut conn, "count:readers").await;
                    guard.release().await.unwrap();
                }
                let _: i64 = redis::cmd("INCR").arg("count:rw").query_async(&mut conn).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// The queued head takes a fair lock handed over by the release without an
/// acquisition of its own: after the release, the server sees no fair
/// acquire script (5 keys) from anyone, only the release (6 keys) and the
/// new holder's extension (1 key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_hand_over_costs_the_new_holder_no_round_trip() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let guard = holder.fair_lock("handover").acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .fair_lock("handover")
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap()
    });
    // Queued (its place refreshes every 1.7 s: release well before that).
    let mut conn = server.conn();
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis::cmd("ZCARD")
        .arg("lock:{handover}:fair:queue")
        .query::<usize>(&mut conn)
        .unwrap()
        == 0
    {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut monitor = Command::new("redis-cli")
        .args(["-p", &server.port().to_string(), "monitor"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    let got = waiting.await.unwrap();
    assert!(got.is_held());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = monitor.kill();
    let output = monitor.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stdout);
    let evals: Vec<&str> = log.lines().filter(|l| l.contains("\"EVALSHA\"")).collect();
    let numkeys = |line: &str| line.split("\" \"").nth(2).map(str::to_owned);
    let acquires = evals
        .iter()
        .filter(|l| numkeys(l).as_deref() == Some("5"))
        .count();
    let releases = evals
        .iter()
        .filter(|l| numkeys(l).as_deref() == Some("6"))
        .count();
    assert_eq!(releases, 1, "{log}");
    assert_eq!(acquires, 0, "the new holder asked again: {log}");
    // Still held past the claim lease of the hand-over (5 s)? The extension
    // gave it the full lease: the key's TTL says so.
    let ttl: i64 = redis::cmd("PTTL")
        .arg("lock:{handover}:fair")
        .query(&mut conn)
        .unwrap();
    assert!(
        ttl > 10_000,
        "the hand-over was not extended to the lease: {ttl} ms"
    );
    got.release().await.unwrap();
}

/// A waiter that died while queued (planted at the head of the queue, as a
/// crashed process leaves it) is handed the lock by the release, but with
/// the short claim lease: the live waiter behind it gets the lock within
/// the place's lifetime plus a refresh, not after a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_queued_waiter_blocks_nobody_past_its_place() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let guard = holder.fair_lock("dead").acquire().await.unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let now_ms = secs * 1000 + micros / 1000;
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg("lock:{dead}:fair:queue")
        .arg(0)
        .arg("dead-client:1")
        .ignore()
        .cmd("ZADD")
        .arg("lock:{dead}:fair:timeout")
        .arg(now_ms + 5000)
        .arg("dead-client:1")
        .ignore()
        .cmd("HSET")
        .arg("lock:{dead}:fair:lease")
        .arg("dead-client:1")
        .arg(30_000)
        .ignore()
        .query(&mut conn)
        .unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .fair_lock("dead")
            .wait(Duration::from_secs(40))
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let holder_now: std::collections::HashMap<String, u64> = redis::cmd("HGETALL")
        .arg("lock:{dead}:fair")
        .query(&mut conn)
        .unwrap();
    assert!(
        holder_now.contains_key("dead-client:1"),
        "handed to the head: {holder_now:?}"
    );
    let (got, guard) = waiting.await.unwrap();
    let blocked = got.saturating_duration_since(released);
    assert!(
        blocked < Duration::from_secs(12),
        "the dead waiter blocked the lock for {blocked:?} (its lease was 30 s)"
    );
    guard.release().await.unwrap();
}

/// A dead head whose place is about to run out (it last refreshed it most of
/// a place's lifetime ago, as a waiter killed then leaves it) is handed the
/// lock for no longer than its place would have lasted, not for a whole
/// hand-over lease (5 s) on top of it: the live waiter behind it gets the
/// lock about a second later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_head_is_handed_the_lock_no_longer_than_its_place_lasts() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let waiter = LockClient::connect(&server.url()).await.unwrap();
    let guard = holder.fair_lock("stale").acquire().await.unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let now_ms = secs * 1000 + micros / 1000;
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg("lock:{stale}:fair:queue")
        .arg(0)
        .arg("dead-client:1")
        .ignore()
        .cmd("ZADD")
        .arg("lock:{stale}:fair:timeout")
        .arg(now_ms + 1000)
        .arg("dead-client:1")
        .ignore()
        .cmd("HSET")
        .arg("lock:{stale}:fair:lease")
        .arg("dead-client:1")
        .arg(30_000)
        .ignore()
        .query(&mut conn)
        .unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .fair_lock("stale")
            .wait(Duration::from_secs(40))
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let ttl: i64 = redis::cmd("PTTL")
        .arg("lock:{stale}:fair")
        .query(&mut conn)
        .unwrap();
    assert!(
        (1..=1000).contains(&ttl),
        "handed to the dead head for {ttl} ms, past its place"
    );
    let (got, guard) = waiting.await.unwrap();
    let blocked = got.saturating_duration_since(released);
    assert!(
        blocked < Duration::from_millis(3500),
        "the dead head blocked the lock for {blocked:?} (its place had 0.8 s left)"
    );
    guard.release().await.unwrap();
}

/// An operator's force release answers whether the lock was held, not
/// whether it had keys: a waiting writer's place (planted, as a writer that
/// crashed while waiting leaves it) and a reader whose lease ran out are
/// deleted, and the answer is `false`; so for a semaphore holder whose lease
/// ran out. A live holder makes it `true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_answers_whether_the_family_lock_was_held() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let operator = LockClient::connect(&server.url()).await.unwrap();
    let admin = operator.admin();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let now_ms = secs * 1000 + micros / 1000;
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg("lock:{rw}:rw:wait")
        .arg(now_ms + 5000)
        .arg("dead-writer:1")
        .ignore()
        .cmd("ZADD")
        .arg("lock:{rw}:rw:read")
        .arg(now_ms - 1)
        .arg("expired-reader:1")
        .ignore()
        .cmd("ZADD")
        .arg("lock:{sem}:sem")
        .arg(now_ms - 1)
        .arg("expired-holder:1")
        .ignore()
        .cmd("HSET")
        .arg("lock:{sem}:sem:permits")
        .arg("expired-holder:1")
        .arg(2)
        .ignore()
        .query(&mut conn)
        .unwrap();
    // The planted place is a real one: it keeps a new reader out.
    let refused = operator.read_write_lock("rw").read().try_acquire().await;
    assert!(matches!(refused, Ok(None)), "{refused:?}");

    assert!(!admin.force_release_read_write("rw").await.unwrap());
    assert!(!admin.force_release_semaphore("sem").await.unwrap());
    assert!(
        family_keys(&mut conn, "lock:{*").is_empty(),
        "the place and the expired holders were deleted all the same"
    );
    let reader = operator.read_write_lock("rw").read().try_acquire().await;
    let reader = reader.unwrap().expect("the place went with the force");

    // Live holders: `true`.
    let permits = operator
        .semaphore("sem", 2)
        .permits(1)
        .acquire()
        .await
        .unwrap();
    assert!(admin.force_release_read_write("rw").await.unwrap());
    assert!(admin.force_release_semaphore("sem").await.unwrap());
    assert!(reader.release().await.is_err(), "the reader lost it");
    let writer = operator
        .read_write_lock("rw")
        .write()
        .acquire()
        .await
        .unwrap();
    assert!(admin.force_release_read_write("rw").await.unwrap());
    assert!(writer.release().await.is_err(), "the writer lost it");
    assert!(
        permits.release().await.is_err(),
        "the permits were taken back"
    );
}
