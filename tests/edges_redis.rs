//! Edge cases found by a hostile user that need a real standalone Redis:
//! settings checked at `connect`, a client moved to another runtime, server
//! pauses (`SIGSTOP`) during renewals and acquisitions, the key layout of odd
//! names and the number of keys left behind. The behavioural edge cases that
//! hold on every backend are in `tests/suite/edges.rs`.

mod suite;

use std::time::Duration;

use distlock::{BackendError, LockClient, LockError};
use lock_test_support::RedisServer;
use tokio::time::Instant;

fn redis_key(escaped_name: &str) -> String {
    format!("lock:{{{escaped_name}}}")
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

fn exists(server: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

/// Client-wide settings out of range are `InvalidConfig { key: "*", .. }`
/// naming the value, from `LockClientBuilder::connect` (ranges: see
/// `suite::builder_setting_problems`); each topology's own options where
/// they apply: `sync_replicas`' timeout (1 ms ..= 1 day) on one node,
/// `node_timeout` on Redlock.
///
/// Old code: the lease (365 days + 1 s, `Duration::MAX`), the timeouts
/// (500 µs, 1 day + 1 s, `Duration::MAX`) and every `sync_replicas` timeout
/// are accepted, a zero timeout is rejected without naming its value, and
/// braces in the key prefix are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_redis_builder_settings_are_range_checked() {
    let server = RedisServer::start();
    let url = server.url();
    let mut problems = suite::builder_setting_problems(|builder| {
        let url = url.clone();
        async move { builder.connect(&url).await }
    })
    .await;
    const DAY: Duration = Duration::from_secs(24 * 3600);
    for value in [
        Duration::ZERO,
        Duration::from_micros(500),
        DAY + Duration::from_secs(1),
        Duration::MAX,
    ] {
        let shown = format!("{value:?}");
        match LockClient::builder()
            .redis(&url)
            .sync_replicas(1, value)
            .connect()
            .await
        {
            Err(LockError::InvalidConfig { key, reason })
                if key == "*" && reason.contains(&shown) => {}
            other => problems.push(format!(
                "sync_replicas(1, {shown}): expected InvalidConfig naming it, got {other:?}"
            )),
        }
    }
    for value in [Duration::from_millis(1), DAY] {
        if let Err(err @ LockError::InvalidConfig { .. }) = LockClient::builder()
            .redis(&url)
            .sync_replicas(1, value)
            .connect()
            .await
        {
            problems.push(format!(
                "sync_replicas(1, {value:?}) is in range but rejected: {err}"
            ));
        }
    }
    for value in [Duration::ZERO, Duration::MAX] {
        let shown = format!("{value:?}");
        match LockClient::builder()
            .redlock([url.as_str()])
            .node_timeout(value)
            .connect()
            .await
        {
            Err(LockError::InvalidConfig { key, reason }) if key == "*" && reason.contains(&shown) => {}
            other => problems.push(format!(
                "connect_redlock with node_timeout({shown}): expected InvalidConfig naming it, got {other:?}"
            )),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A Redis client built and used on one runtime keeps working on the next
/// (see `suite::client_keeps_working_on_a_second_runtime`); the lock's Redis
/// `PTTL` stays above zero while it is held on runtime B.
///
/// Old code: (a) fails: the watchdog driver died with runtime A while the
/// client still marks it as running, so no renewal round runs on B and the
/// 300 ms lease runs out. (The wake-up subscriber, started on A, is not
/// restarted either.)
#[test]
fn edges_redis_client_keeps_working_on_a_second_runtime() {
    let server = RedisServer::start();
    let url = server.url();
    suite::client_keeps_working_on_a_second_runtime(
        |builder| {
            let url = url.clone();
            async move { builder.connect(&url).await.unwrap() }
        },
        |name| Some(pttl(&server, &redis_key(name))),
    );
}

/// While a renewal hangs on a paused server (response timeout 20 s), the
/// guard's `lost()` still resolves by the local lease deadline (lease 1 s):
/// within 2.5 s of the pause, with `is_held()` false and `release()` then
/// reporting `LeaseLost`.
///
/// Old code: `lost()` waits for the hung renewal round, i.e. the 20 s
/// response timeout: it times out here after 2.5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_lost_fires_by_the_lease_deadline_while_a_renewal_hangs() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .lease(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(20))
        .connect(&server.url())
        .await
        .unwrap();
    let guard = client.lock("edges:hang").acquire().await.unwrap();
    let paused = server.paused();
    let since = Instant::now();
    let lost = tokio::time::timeout(Duration::from_millis(2500), guard.lost()).await;
    let elapsed = since.elapsed();
    assert!(
        lost.is_ok(),
        "lost() did not resolve within {elapsed:?} of the pause (lease 1 s, response timeout 20 s)"
    );
    assert!(!guard.is_held());
    paused.resume();
    match tokio::time::timeout(Duration::from_secs(5), guard.release()).await {
        Ok(Err(LockError::LeaseLost { key, .. })) => assert_eq!(key, "edges:hang"),
        other => panic!("release after lost(): expected LeaseLost, got {other:?}"),
    }
}

/// The rollback of an abandoned grant is exact: it never deletes a later
/// acquisition by the same owner.
///
/// In the scope of an outer guard, an acquisition of `b` times out on a
/// paused server (its request stays queued there). The server is resumed
/// before anything else runs (a current-thread runtime: background tasks run
/// only when this test awaits), so the queued request grants `b` to the
/// scope's owner. Acquiring `b` again in the same scope succeeds (re-entered
/// in Redis). Held for 4 s, longer than a cleanup retrying for the lease
/// (3 s): `b` must stay ours all along.
///
/// Old code: the background cleanup sends an owner-checked `HDEL` right
/// behind the re-acquisition and deletes it; another client then takes `b`.
#[tokio::test]
async fn edges_rollback_of_an_abandoned_grant_spares_the_scopes_reacquisition() {
    let server = RedisServer::start();
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(200))
        .lease(Duration::from_secs(3))
        .connect(&server.url())
        .await
        .unwrap();
    let other = LockClient::connect(&server.url()).await.unwrap();
    let outer = client
        .lock("edges:abandoned:outer")
        .acquire()
        .await
        .unwrap();
    let name = "edges:abandoned:b";
    let guard = outer
        .scope(async {
            let paused = server.paused();
            match client.lock(name).acquire().await {
                Err(LockError::Backend {
                    key,
                    source: BackendError::Timeout(_),
                    ..
                }) => assert_eq!(key, name),
                other => {
                    panic!("acquire on a paused server: expected a Backend timeout, got {other:?}")
                }
            }
            // No await in between: the queued acquisition runs first.
            paused.resume();
            client
                .lock(name)
                .acquire()
                .await
                .expect("the scope's owner acquires `b` again")
        })
        .await;
    assert_eq!(guard.owner(), outer.owner());
    for step in 1..=8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let at = format!("{} ms after re-acquiring", step * 500);
        let taken = other.lock(name).try_acquire().await.unwrap();
        assert!(taken.is_none(), "{at}: another client took `b`");
        let holder = other.admin().inspect(name).await.unwrap().holder;
        assert_eq!(
            holder.as_ref().map(|h| h.owner.as_str()),
            Some(guard.owner()),
            "{at}: `b` is not held by the scope's owner"
        );
        assert!(guard.is_held(), "{at}: the guard lost `b`");
    }
    guard.release().await.unwrap();
    outer.release().await.unwrap();
}

/// A cancelled or timed-out acquisition whose cleanup finds nothing to
/// delete (the lock was busy: never granted) sends no `PUBLISH`: nothing
/// was released, so no waiter is woken. Also, the holder's lock is left
/// alone.
///
/// Old code: every cleanup release sends `HDEL` + `PUBLISH`, whether or not
/// the `HDEL` deleted anything (a timed-out one retries for up to a lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_cancelled_acquire_cleanup_that_deletes_nothing_publishes_nothing() {
    let server = RedisServer::start();
    let holder = LockClient::connect(&server.url()).await.unwrap();
    let client = LockClient::builder()
        .response_timeout(Duration::from_millis(200))
        .lease(Duration::from_secs(3))
        .connect(&server.url())
        .await
        .unwrap();
    let name = "edges:quiet";
    let held = holder
        .lock(name)
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    server.reset_command_stats();
    {
        let _paused = server.paused();
        match client.lock(name).acquire().await {
            Err(err @ LockError::Backend { .. }) => assert_eq!(err.key(), Some(name)),
            other => panic!("acquire on a paused server: expected Backend, got {other:?}"),
        }
    }
    // Acquisitions dropped at many points in flight.
    for step in 0..20u64 {
        let _ = tokio::time::timeout(
            Duration::from_micros(step * 50),
            client.lock(name).acquire(),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await; // past every cleanup retry
    assert_eq!(
        server.command_calls("publish"),
        0,
        "cleanups that deleted nothing published wake-ups (HDEL calls: {})",
        server.command_calls("hdel")
    );
    assert!(held.is_held());
    assert_eq!(
        holder
            .admin()
            .inspect(name)
            .await
            .unwrap()
            .holder
            .map(|h| h.owner),
        Some(held.owner().to_owned())
    );
    held.release().await.unwrap();
}

/// Locks leave a bounded number of keys behind: after 20,000 distinct names
/// were acquired and released, `DBSIZE` is at most 16,384 (fence counters
/// are shared per cluster slot, not one per name). Fencing tokens still
/// strictly increase per lock: for a handful of names across the bulk
/// phase, and over 3 acquisitions each afterwards.
///
/// Old code: one `:fence` counter per name is kept forever: `DBSIZE` is
/// 20,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_fence_counters_stay_bounded_and_tokens_still_increase() {
    const NAMES: usize = 20_000;
    const TASKS: usize = 64;
    const TRACKED: usize = 5;
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut tracked = Vec::new();
            for i in (task..NAMES).step_by(TASKS) {
                let name = format!("edges:bulk:{i}");
                let guard = client.lock(name.clone()).acquire().await.unwrap();
                if i < TRACKED {
                    tracked.push((name, guard.fencing_token()));
                }
                guard.release().await.unwrap();
            }
            tracked
        }));
    }
    let mut tracked = Vec::new();
    for task in tasks {
        tracked.extend(task.await.unwrap());
    }
    let bulk = started.elapsed();
    let keys = server.dbsize();
    assert!(
        keys <= 16_384,
        "{keys} keys left after {NAMES} names were locked and released (in {bulk:?})"
    );
    assert_eq!(tracked.len(), TRACKED);
    for (name, mut last) in tracked {
        for round in 0..3 {
            let guard = client.lock(name.clone()).acquire().await.unwrap();
            assert!(
                guard.fencing_token() > last,
                "{name}, round {round}: token {} after {last}",
                guard.fencing_token()
            );
            last = guard.fencing_token();
            guard.release().await.unwrap();
        }
    }
}

/// Names with `{`, `}` or `%` are stored percent-escaped (`{` -> `%7B`,
/// `}` -> `%7D`, `%` -> `%25`) inside the hash tag, so the tag is the whole
/// escaped name; other names are stored as they are.
///
/// Old code: names are stored raw (`lock:{}x}`), so `}x` has an empty hash
/// tag and `%7D` and `}` could only be told apart by accident.
#[tokio::test]
async fn edges_odd_names_are_stored_percent_escaped() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).await.unwrap();
    for (name, escaped) in [
        ("}x", "%7Dx"),
        ("{", "%7B"),
        ("}", "%7D"),
        ("a}b{c", "a%7Db%7Bc"),
        ("%7D", "%257D"),
        ("50%", "50%25"),
        ("über 🔒", "über 🔒"),
        ("with space", "with space"),
    ] {
        let guard = client.lock(name).acquire().await.unwrap();
        assert!(
            exists(&server, &redis_key(escaped)),
            "{name:?} is not stored as {}",
            redis_key(escaped)
        );
        if escaped != name {
            assert!(
                !exists(&server, &redis_key(name)),
                "{name:?} is stored unescaped"
            );
        }
        guard.release().await.unwrap();
    }
}

/// Writes, with a connection of the test's own, a lock hash as the client
/// writes it (field: owner, value: fencing token; 30 s TTL) and the layout
/// registry, so that a read after a restart has something to find.
fn seed_lock(server: &redis::Client, name: &str, owner: &str, token: u64) {
    let mut conn = server.get_connection().unwrap();
    let () = redis::pipe()
        .cmd("HSET")
        .arg(redis_key(name))
        .arg(owner)
        .arg(token)
        .ignore()
        .cmd("PEXPIRE")
        .arg(redis_key(name))
        .arg(30_000)
        .ignore()
        .cmd("HSET")
        .arg("distlock:layouts")
        .arg("native")
        .arg(1)
        .ignore()
        .query(&mut conn)
        .unwrap();
}

/// Runs every admin read of `client` once, each as the first command after
/// `break_connection` broke the client's command connection, and asserts
/// that each answers (and reads the data `seed_lock` wrote): `inspect`,
/// `list`, `layouts`, `waiters` (`PUBSUB NUMSUB`) and `inspect_fair` (a
/// family primitive's script).
async fn assert_admin_reads_answer_first_try(
    server: &redis::Client,
    mut break_connection: impl FnMut() -> LockClient,
) {
    let name = "edges:admin:held";
    // Every read is tried, and every failure reported.
    let mut failed = Vec::new();
    let mut first_try = |what: &str, outcome: Result<String, LockError>, want: &str| match outcome {
        Ok(got) if got == want => {}
        Ok(got) => failed.push(format!("{what}: read {got}, expected {want}")),
        Err(err) => failed.push(format!("{what}: the first try failed: {err:?}")),
    };

    let client = break_connection();
    seed_lock(server, name, "someone:1", 7);
    let info = client.admin().inspect(name).await;
    let holder = info.map(|info| format!("{:?}", info.holder.map(|h| (h.owner, h.fencing_token))));
    first_try("inspect", holder, r#"Some(("someone:1", 7))"#);

    let client = break_connection();
    seed_lock(server, name, "someone:2", 8);
    let listed = client.admin().list("edges:admin:").await;
    let names =
        listed.map(|locks| format!("{:?}", locks.iter().map(|l| &l.name).collect::<Vec<_>>()));
    first_try("list", names, &format!("{:?}", [name]));

    let client = break_connection();
    seed_lock(server, name, "someone:3", 9);
    let layouts = client.admin().layouts().await.map(|l| format!("{l:?}"));
    first_try("layouts", layouts, "[Native]");

    let client = break_connection();
    let waiters = client
        .admin()
        .waiters([name])
        .await
        .map(|w| format!("{w:?}"));
    first_try("waiters", waiters, "[0]");

    let client = break_connection();
    let fair = client.admin().inspect_fair("edges:admin:fair").await;
    let fair = fair.map(|info| format!("{:?} {}", info.holder, info.queue.len()));
    first_try("inspect_fair", fair, "None 0");

    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// After the server restarted (same port, empty), every admin read answers
/// on its first try: it is sent once more on the reconnected connection, as
/// lock commands are.
///
/// Old code: the admin reads skipped that retry, so the first read after the
/// restart failed with `LockError::Backend` (a dropped connection: "broken
/// pipe") and only the second worked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_admin_reads_answer_first_try_after_a_restart() {
    let mut server = RedisServer::start();
    let seeding = server.client();
    // One client per read (a read that fails starts its client's reconnect,
    // which could let the next read in): each has carried a command before
    // the restarts, and its read is its first command after them.
    let mut clients = Vec::new();
    for _ in 0..5 {
        let client = LockClient::connect(&server.url()).await.unwrap();
        client.admin().inspect("edges:admin:warm").await.unwrap();
        clients.push(client);
    }
    let restart = || {
        server.restart();
        clients.pop().expect("a client per read")
    };
    assert_admin_reads_answer_first_try(&seeding, restart).await;
}

/// A client connected on one runtime, that runtime dropped (and with it the
/// driver of the client's connection): every admin read answers on its
/// first try on the next runtime, as lock commands do there
/// (`edges_redis_client_keeps_working_on_a_second_runtime`).
///
/// Old code: the first admin read on the second runtime failed with
/// `LockError::Backend` (the connection's driver is gone: "broken pipe").
#[test]
fn edges_admin_reads_answer_first_try_on_a_second_runtime() {
    let server = RedisServer::start();
    let url = server.url();
    let on_a_dropped_runtime = || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = runtime.block_on(async {
            let client = LockClient::connect(&url).await.unwrap();
            client.admin().inspect("edges:admin:warm").await.unwrap();
            client
        });
        drop(runtime);
        client
    };
    // One client per read, each the first command of its client on B.
    let mut clients: Vec<LockClient> = (0..5).map(|_| on_a_dropped_runtime()).collect();
    let runtime_b = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime_b.block_on(assert_admin_reads_answer_first_try(
        &server.client(),
        || clients.pop().expect("a client per read"),
    ));
}
