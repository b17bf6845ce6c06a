//! Sharing locks with Redisson: a client in [`Layout::Redisson`] against a
//! peer that speaks Redisson's `RLock` protocol and that this project did not
//! write: the npm package `node-redisson` 1.0.4 (Redisson's lock scripts,
//! hash layout, channel and unlock message), run as separate Node.js
//! processes (tests/interop/redisson-driver.js) against the same
//! redis-server. `bash scripts/test.sh` installs it (`npm ci` of
//! tests/interop/package.json into target/interop-node) and names it in
//! `DISTLOCK_TEST_NODE_REDISSON`.
//!
//! The driver takes and gives back the lock with node-redisson's own
//! scripts (acquire, unlock, force-unlock, watchdog); it waits as Redisson
//! does (subscribe, then try again on a message or after the holder's
//! PTTL), because node-redisson's own waiting loses wake-ups (see the
//! README's "Sharing locks with Redisson").

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use distlock::{Layout, LockClient, LockError, ShardedPubSub};
use lock_test_support::{RedisCluster, RedisServer};
use redis::Commands;

/// Where node-redisson is installed, or `None` (with a note) outside CI.
fn node_modules() -> Option<PathBuf> {
    match std::env::var_os("DISTLOCK_TEST_NODE_REDISSON") {
        Some(dir) => Some(PathBuf::from(dir).join("node_modules")),
        None if std::env::var_os("CI").is_some() => panic!(
            "DISTLOCK_TEST_NODE_REDISSON is not set: run the tests with `bash scripts/test.sh`, \
             which installs node-redisson with npm"
        ),
        None => {
            eprintln!(
                "skipped: DISTLOCK_TEST_NODE_REDISSON is not set (`bash scripts/test.sh` installs \
                 node-redisson with npm and sets it)"
            );
            None
        }
    }
}

/// One node-redisson process holding one lock object (`getLock(name, id)`).
struct Peer {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<serde_json::Value>,
    /// Its hash field, `<uuid>:<client id>`.
    field: String,
}

impl Peer {
    fn start(modules: &PathBuf, server: &RedisServer, name: &str, id: u32) -> Peer {
        Self::start_with(
            modules,
            &["--port".into(), server.port().to_string()],
            name,
            id,
        )
    }

    /// A peer on a cluster, through these seed nodes (`host:port`).
    fn on_cluster(modules: &PathBuf, cluster: &RedisCluster, name: &str, id: u32) -> Peer {
        let seeds: Vec<String> = cluster
            .master_urls()
            .iter()
            .map(|url| {
                url.trim_start_matches("redis://")
                    .trim_end_matches('/')
                    .to_owned()
            })
            .collect();
        Self::start_with(modules, &["--cluster".into(), seeds.join(",")], name, id)
    }

    fn start_with(modules: &PathBuf, connection: &[String], name: &str, id: u32) -> Peer {
        let driver =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/redisson-driver.js");
        let mut child = Command::new("node")
            .arg(driver)
            .args(connection)
            .args(["--name", name])
            .args(["--client-id", &id.to_string(), "--watchdog-ms", "3000"])
            .env("NODE_PATH", modules)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start node (Node.js is needed for the Redisson interop tests)");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                match serde_json::from_str::<serde_json::Value>(&line) {
                    Ok(value) => {
                        if tx.send(value).is_err() {
                            return;
                        }
                    }
                    Err(_) => eprintln!("node: {line}"),
                }
            }
        });
        let ready = replies
            .recv_timeout(Duration::from_secs(30))
            .expect("the node-redisson driver did not start");
        assert_eq!(ready["event"], "ready", "{ready}");
        let field = ready["field"].as_str().unwrap().to_owned();
        Peer {
            child,
            stdin,
            replies,
            field,
        }
    }

    fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn reply(&self, within: Duration) -> serde_json::Value {
        self.replies
            .recv_timeout(within)
            .unwrap_or_else(|_| panic!("no reply from node-redisson within {within:?}"))
    }

    /// Sends `command` and returns its reply's `result` (panics on `ok: false`).
    fn call(&mut self, command: &str) -> serde_json::Value {
        self.send(command);
        let reply = self.reply(Duration::from_secs(60));
        assert_eq!(reply["ok"], true, "{command}: {reply}");
        reply["result"].clone()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn redisson_client(server: &RedisServer, lease: Duration) -> LockClient {
    LockClient::builder()
        .layout(Layout::Redisson)
        .lease(lease)
        .connect(&server.url())
        .await
        .unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_field_value_and_token_are_redissons() {
    let Some(modules) = node_modules() else {
        return;
    };
    let server = RedisServer::start();
    let mut conn = server.conn();
    let client = redisson_client(&server, Duration::from_secs(10)).await;
    let mut peer = Peer::start(&modules, &server, "interop:layout", 1);

    let guard = client.lock("interop:layout").acquire().await.unwrap();
    // The lock key is the name; one field `<uuid>:<n>` with the hold count 1.
    let kind: String = redis::cmd("TYPE")
        .arg("interop:layout")
        .query(&mut conn)
        .unwrap();
    assert_eq!(kind, "hash");
    let fields: Vec<(String, String)> = conn.hgetall("interop:layout").unwrap();
    assert_eq!(fields.len(), 1, "{fields:?}");
    let (field, count) = &fields[0];
    assert_eq!(field, guard.owner());
    assert_eq!(count, "1");
    let (uuid, thread) = field.rsplit_once(':').unwrap();
    assert!(thread.parse::<u64>().is_ok(), "{field}");
    let groups: Vec<usize> = uuid.split('-').map(str::len).collect();
    assert_eq!(groups, [8, 4, 4, 4, 12], "a Java UUID.toString(): {uuid}");
    assert_eq!(uuid.as_bytes()[14], b'4', "version 4: {uuid}");
    let ttl: i64 = conn.pttl("interop:layout").unwrap();
    assert!(ttl > 0 && ttl <= 10_000, "{ttl}");
    // RFencedLock's counter holds the token.
    let counter: u64 = conn.get("redisson_lock_token:{interop:layout}").unwrap();
    assert_eq!(counter, guard.fencing_token());

    // node-redisson sees it held, and we see its hold.
    assert_eq!(peer.call("trylock 0"), false);
    guard.release().await.unwrap();
    assert_eq!(peer.call("trylock 0 20000"), true);
    let info = peer.call("info");
    assert_eq!(info["hash"][&peer.field], "1", "{info}");
    assert!(client
        .lock("interop:layout")
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    let seen = client.admin().inspect("interop:layout").await.unwrap();
    let holder = seen.holder.as_ref().unwrap();
    assert_eq!(holder.owner, peer.field);
    // The hold count is Redisson's; node-redisson takes no token (a plain
    // RLock), so the holder's token is the name's last one, ours.
    assert_eq!(holder.holds, 1);
    assert_eq!(holder.fencing_token, counter);
    assert_eq!(seen.last_fencing_token, Some(counter));
    assert_eq!(
        peer.call("trylock 0 20000"),
        true,
        "a re-entry of node-redisson"
    );
    let seen = client.admin().inspect("interop:layout").await.unwrap();
    assert_eq!(seen.holder.unwrap().holds, 2);
    peer.call("unlock");
    peer.call("unlock");
    let next = client
        .lock("interop:layout")
        .try_acquire()
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > counter);
    next.release().await.unwrap();
}

/// The wake-up times and tokens of alternating rounds on `name`.
#[derive(Default)]
struct Rounds {
    /// Our release -> node-redisson's acquisition.
    node_woken: Vec<Duration>,
    /// node-redisson's unlock -> our acquisition.
    rust_woken: Vec<Duration>,
    /// Our tokens, in order.
    tokens: Vec<u64>,
}

/// One round on `name`: we hold and the peer waits, our release wakes it;
/// then the peer holds and we wait, its unlock wakes us. `inside` runs
/// while each side holds the lock.
async fn alternate(
    client: &LockClient,
    peer: &mut Peer,
    name: &'static str,
    rounds: &mut Rounds,
    mut inside: impl FnMut(),
) {
    let guard = client.lock(name).acquire().await.unwrap();
    rounds.tokens.push(guard.fencing_token());
    inside();
    peer.send("lock");
    tokio::time::sleep(Duration::from_millis(30)).await; // it subscribed and tried
    let released = Instant::now();
    guard.release().await.unwrap();
    let reply = peer.reply(Duration::from_secs(60));
    assert_eq!(reply["ok"], true, "{reply}");
    rounds.node_woken.push(released.elapsed());
    inside();

    let waiting = tokio::spawn({
        let client = client.clone();
        async move {
            let guard = client
                .lock(name)
                .wait(Duration::from_secs(60))
                .acquire()
                .await?;
            Ok::<_, LockError>((Instant::now(), guard))
        }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(
        !waiting.is_finished(),
        "we got the lock while node-redisson held it"
    );
    let unlocked = Instant::now();
    peer.send("unlock");
    let (acquired, guard) = waiting.await.unwrap().unwrap();
    let reply = peer.reply(Duration::from_secs(10));
    assert_eq!(reply["ok"], true, "{reply}");
    rounds.rust_woken.push(acquired.duration_since(unlocked));
    rounds.tokens.push(guard.fencing_token());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_alternate_without_overlap_and_each_side_wakes_the_other() {
    let Some(modules) = node_modules() else {
        return;
    };
    let server = RedisServer::start();
    let client = redisson_client(&server, Duration::from_secs(30)).await;
    let name = "interop:turns";
    let mut peer = Peer::start(&modules, &server, name, 1);
    const ROUNDS: usize = 40;
    let mut rounds = Rounds::default();
    let mut conn = server.conn();
    for _ in 0..ROUNDS {
        alternate(&client, &mut peer, name, &mut rounds, || {
            let _: i64 = conn.incr("interop:counter", 1).unwrap();
        })
        .await;
    }
    let Rounds {
        mut node_woken,
        mut rust_woken,
        tokens,
    } = rounds;
    let counter: usize = conn.get("interop:counter").unwrap();
    assert_eq!(counter, 2 * ROUNDS);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    node_woken.sort();
    rust_woken.sort();
    let (n50, n99) = (percentile(&node_woken, 0.5), percentile(&node_woken, 0.99));
    let (r50, r99) = (percentile(&rust_woken, 0.5), percentile(&rust_woken, 0.99));
    eprintln!(
        "cross wake-up over {ROUNDS} rounds: ours -> node-redisson p50 {n50:?} p99 {n99:?}; \
         node-redisson -> ours p50 {r50:?} p99 {r99:?}"
    );
    // Woken by the release message, not by the 30 s lease running out.
    assert!(n99 < Duration::from_secs(3), "{node_woken:?}");
    assert!(r99 < Duration::from_secs(3), "{rust_woken:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_holders_on_both_sides_never_overlap() {
    let Some(modules) = node_modules() else {
        return;
    };
    let server = RedisServer::start();
    let name = "interop:mutex";
    const TURNS: usize = 25;
    // Two node-redisson processes and two of our clients, all at once.
    let mut node_threads = Vec::new();
    for id in 1..=2 {
        let mut peer = Peer::start(&modules, &server, name, id);
        let mut conn = server.conn();
        node_threads.push(std::thread::spawn(move || {
            for _ in 0..TURNS {
                assert_eq!(peer.call("lock"), true);
                critical_section(&mut conn, &peer.field);
                peer.call("unlock");
            }
        }));
    }
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = redisson_client(&server, Duration::from_secs(30)).await;
        let url = server.url();
        tasks.push(tokio::spawn(async move {
            let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
            for _ in 0..TURNS {
                let guard = client
                    .lock(name)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                let owner = guard.owner().to_owned();
                tokio::task::block_in_place(|| critical_section(&mut conn, &owner));
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for thread in node_threads {
        thread.join().unwrap();
    }
    let mut conn = server.conn();
    let counter: usize = conn.get("interop:counter").unwrap();
    let overlaps: usize = conn.get("interop:overlaps").unwrap_or(0);
    eprintln!(
        "{} turns on both sides, counter {counter}, overlaps {overlaps}",
        4 * TURNS
    );
    assert_eq!(overlaps, 0);
    assert_eq!(counter, 4 * TURNS, "lost updates: two holders at once");
}

/// The guarded work of one turn: marks itself inside (counting an overlap
/// when someone else is), and increments the counter by a read and a
/// later write, which loses updates when two run at once.
fn critical_section(conn: &mut redis::Connection, who: &str) {
    let entered: bool = redis::cmd("SET")
        .arg("interop:inside")
        .arg(who)
        .arg("NX")
        .query::<Option<String>>(conn)
        .unwrap()
        .is_some();
    if !entered {
        let _: i64 = conn.incr("interop:overlaps", 1).unwrap();
    }
    let value: usize = conn.get("interop:counter").unwrap_or(0);
    std::thread::sleep(Duration::from_millis(2));
    let _: () = conn.set("interop:counter", value + 1).unwrap();
    if entered {
        let _: i64 = conn.del("interop:inside").unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_on_one_side_is_a_loss_on_the_other() {
    let Some(modules) = node_modules() else {
        return;
    };
    let server = RedisServer::start();
    let name = "interop:force";
    let client = redisson_client(&server, Duration::from_secs(3)).await;
    let mut peer = Peer::start(&modules, &server, name, 1);

    // node-redisson force-unlocks our lock: our watchdog finds it gone.
    let guard = client.lock(name).acquire().await.unwrap();
    assert_eq!(peer.call("forceunlock"), true);
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost() after node-redisson's forceUnlock");
    assert!(matches!(
        guard.release().await,
        Err(LockError::LeaseLost { .. })
    ));

    // We force-release its lock: its unlock is refused, and a waiter of ours
    // is woken by the force-release's message.
    assert_eq!(peer.call("trylock 0"), true);
    assert!(client.admin().force_release(name).await.unwrap());
    peer.send("unlock");
    let reply = peer.reply(Duration::from_secs(10));
    assert_eq!(
        reply["ok"], false,
        "its unlock after our force-release: {reply}"
    );
    assert_eq!(peer.call("trylock 0"), true);
    let waiting = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .lock(name)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let forced = Instant::now();
    assert_eq!(peer.call("forceunlock"), true);
    let guard = waiting.await.unwrap().unwrap();
    assert!(
        forced.elapsed() < Duration::from_secs(2),
        "{:?}",
        forced.elapsed()
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn redissons_other_locks_and_split_names_are_refused() {
    let server = RedisServer::start();
    let client = redisson_client(&server, Duration::from_secs(10)).await;
    let mut conn = server.conn();
    // A Redisson read-write lock holds the name: refused, not shared.
    let _: () = conn
        .hset_multiple("interop:rw", &[("mode", "read"), ("u:1", "1")])
        .unwrap();
    let _: () = conn.pexpire("interop:rw", 10_000).unwrap();
    match client.lock("interop:rw").try_acquire().await {
        Err(LockError::WrongType { redis_key, .. }) => assert_eq!(redis_key, "interop:rw"),
        other => panic!("expected WrongType, got {other:?}"),
    }
    match client.admin().inspect("interop:rw").await {
        Err(LockError::WrongType { redis_key, .. }) => assert_eq!(redis_key, "interop:rw"),
        other => panic!("inspect: expected WrongType, got {other:?}"),
    }
    // A Redisson fair lock's queue exists: refused too.
    let _: () = conn
        .rpush("redisson_lock_queue:{interop:fair}", "u:2")
        .unwrap();
    match client.lock("interop:fair").try_acquire().await {
        Err(LockError::WrongType { redis_key, .. }) => {
            assert_eq!(redis_key, "redisson_lock_queue:{interop:fair}")
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    // The same fair lock while it is held, with its waiter queued: still a fair
    // lock, refused at once, not a busy plain lock to wait for.
    let _: () = conn.hset("interop:fair", "u:1:1", "1").unwrap();
    let _: () = conn.pexpire("interop:fair", 10_000).unwrap();
    for wait in [Duration::ZERO, Duration::from_secs(5)] {
        let started = Instant::now();
        match client.lock("interop:fair").wait(wait).acquire().await {
            Err(LockError::WrongType { redis_key, .. }) => {
                assert_eq!(redis_key, "redisson_lock_queue:{interop:fair}")
            }
            other => panic!("held fair lock, wait {wait:?}: expected WrongType, got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    // Names whose keys would split across slots, and the lock family.
    for name in ["a{b", "a{}b", "{"] {
        assert!(
            matches!(
                client.lock(name).try_acquire().await,
                Err(LockError::InvalidKey { .. })
            ),
            "{name}"
        );
    }
    assert!(client
        .lock("{tag}:x")
        .try_acquire()
        .await
        .unwrap()
        .is_some());
    assert!(matches!(
        client.fair_lock("f").try_acquire().await,
        Err(LockError::Unsupported { .. })
    ));
    assert!(matches!(
        client.admin().list("").await,
        Err(LockError::Unsupported { .. })
    ));
    // A holder that set no expiry (PTTL -1): busy, and a wait times out
    // (polling), neither hangs nor takes it.
    let _: () = conn.hset("interop:forever", "other:1", "1").unwrap();
    assert!(client
        .lock("interop:forever")
        .try_acquire()
        .await
        .unwrap()
        .is_none());
    assert!(matches!(
        client
            .lock("interop:forever")
            .wait(Duration::from_millis(300))
            .acquire()
            .await,
        Err(LockError::TimedOut { .. })
    ));
    // Our client in the native layout does not see Redisson-layout locks:
    // different keys (which is why the layout is a client setting).
    // (Refused unless the mix is declared: see `LayoutConflict`.)
    let native = LockClient::builder()
        .allow_mixed_layouts(true)
        .connect(&server.url())
        .await
        .unwrap();
    let held = client.lock("interop:both").acquire().await.unwrap();
    let other = native.lock("interop:both").try_acquire().await.unwrap();
    assert!(
        other.is_some(),
        "the native layout uses lock:{{interop:both}}"
    );
    held.release().await.unwrap();
    // Redlock cannot use Redisson's layout.
    assert!(matches!(
        LockClient::builder()
            .layout(Layout::Redisson)
            .connect_redlock([server.url()])
            .await,
        Err(LockError::InvalidConfig { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_with_classic_pubsub_both_sides_take_turns_and_wake_each_other() {
    let Some(modules) = node_modules() else {
        return;
    };
    let cluster = RedisCluster::start(3, 0);
    // node-redisson's cluster mode has classic pub/sub only, as a Redisson
    // cluster client with shardedSubscriptionMode OFF.
    let client = LockClient::builder()
        .layout(Layout::Redisson)
        .cluster(cluster.master_urls())
        .sharded_pubsub(ShardedPubSub::Off)
        .connect()
        .await
        .unwrap();
    let mut rounds = Rounds::default();
    // Names in different slots, one with a hash tag.
    for name in [
        "interop:cluster:a",
        "{interop}:cluster:b",
        "interop:cluster:c",
    ] {
        let mut peer = Peer::on_cluster(&modules, &cluster, name, 1);
        for _ in 0..10 {
            alternate(&client, &mut peer, name, &mut rounds, || {}).await;
        }
    }
    let Rounds {
        node_woken: mut woken,
        rust_woken,
        tokens,
    } = rounds;
    woken.extend(rust_woken);
    woken.sort();
    let (p50, p99) = (percentile(&woken, 0.5), percentile(&woken, 0.99));
    eprintln!(
        "cluster, classic pub/sub: {} cross wake-ups, p50 {p50:?} p99 {p99:?}",
        woken.len()
    );
    assert!(p99 < Duration::from_secs(3), "{woken:?}");
    // Each name has its own RFencedLock counter: tokens rise per name.
    for per_name in tokens.chunks(20) {
        assert!(per_name.windows(2).all(|w| w[0] < w[1]), "{per_name:?}");
    }

    // The default (Auto) is sharded, as Redisson's AUTO on Redis 7: two of
    // our clients wake each other with SPUBLISH.
    let sharded = LockClient::builder()
        .layout(Layout::Redisson)
        .connect_cluster(cluster.master_urls())
        .await
        .unwrap();
    let guard = sharded.lock("interop:cluster:s").acquire().await.unwrap();
    let waiting = tokio::spawn({
        let sharded = sharded.clone();
        async move {
            sharded
                .lock("interop:cluster:s")
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
    assert!(released.elapsed() < Duration::from_secs(3));
    // Sharded pub/sub is for clusters only: on one node it does not compile
    // (tests/ui-client/fail/sharded_pubsub_on_one_node.rs).
}
