//! Sharing locks with real Redisson: a client in [`Layout::Redisson`] and
//! Java processes running Redisson's own `RFencedLock`
//! (interop/redisson-java, `interop.RedissonPeer`) on the same servers, for
//! each Redisson version of `DISTLOCK_REDISSON_VERSIONS` (default: the two
//! pinned in interop/redisson-java/pom.xml, the newest 3.x and the newest
//! 4.x), on one node and on a 3-master cluster with sharded pub/sub on and
//! off (on both sides).
//!
//! `bash scripts/test.sh` builds the Java peer once per version with Maven
//! (classes and dependency jars under `target/interop-java/<version>/`) and
//! names that directory in `DISTLOCK_TEST_REDISSON_JAVA`; the tests start
//! `java` directly. Without it they fail in CI and are skipped elsewhere,
//! saying why.
//!
//! The scenarios, per version and topology:
//!
//! - alternating turns (each side waits for the other's turn, then for the
//!   lock): both sides mark themselves inside, increment a counter by a read
//!   and a later write, and append their fencing token in lock order; no
//!   overlap, the counter exact, the tokens one strictly rising sequence; the
//!   wake-up time from one side's release to the other side's turn, both
//!   ways (p50/p99 printed; p99 under a second, where waiting out the lease
//!   would take 30 s);
//! - concurrent turns: two Java threads and two of our clients at once, the
//!   same checks, on a name with a hash tag (`{..}:concurrent`);
//! - Redisson's `forceUnlock` of our lock: our guard's `lost()` fires within
//!   a renewal period and its release answers `LeaseLost`;
//! - our `force_release` of Redisson's lock: Redisson's `unlock` is refused
//!   (`IllegalMonitorStateException`);
//! - a Redisson holder killed with SIGKILL: our waiter gets the lock once
//!   the lease its watchdog last set runs out, not before. The Java side's
//!   `lockWatchdogTimeout` is 3 s there (`REDISSON_WATCHDOG_MS`), instead of
//!   Redisson's 30 s, to keep the test short;
//! - Redisson's `RReadWriteLock` and our `read_write_lock` on one name: a
//!   Java reader and ours hold at once, and each side's reader keeps the
//!   other side's writer out; alternating turns of a writer on one side and
//!   a reader on the other, both ways round (the wake-up times each way);
//!   concurrent mixed turns (two Java threads, two of our clients, every
//!   third turn a write): no writer overlaps anyone, the counter exact, and
//!   readers of both sides were inside at once;
//! - Redisson's `RPermitExpirableSemaphore` and our `semaphore` on one name:
//!   alternating turns on one permit (the wake-up times each way), and
//!   concurrent turns on two permits (two Java threads, two of our
//!   clients): never more holders than permits, and holders of both sides
//!   inside at once.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use distlock::{Layout, LockClient, LockError, ShardedPubSub};
use lock_test_support::{RedisCluster, RedisServer};
use redis::aio::ConnectionLike;
use redis::AsyncCommands;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The Java side's `lockWatchdogTimeout` in the kill scenario.
const JAVA_WATCHDOG: Duration = Duration::from_secs(3);
/// Turns per side when alternating (each held 20 ms).
const ALTERNATE_TURNS: usize = 25;
/// Turns per thread or task in the concurrent scenario (2 + 2 of them).
const CONCURRENT_TURNS: usize = 20;

/// One scenario at a time: the wake-up times are the figures, and the
/// machine's cores are few.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The directory of the Java peer's builds, one per version, and the
/// versions; `None` (with a note) outside CI when it was not built.
fn java_builds() -> Option<(PathBuf, Vec<String>)> {
    let Some(dir) = std::env::var_os("DISTLOCK_TEST_REDISSON_JAVA") else {
        if std::env::var_os("CI").is_some() {
            panic!(
                "DISTLOCK_TEST_REDISSON_JAVA is not set: run the tests with `bash scripts/test.sh`, \
                 which builds the Java peer with Maven (Java 17 and Maven are needed, and Maven \
                 Central reachable)"
            );
        }
        eprintln!(
            "\n!!! SKIPPED: the real-Redisson tests: DISTLOCK_TEST_REDISSON_JAVA is not set \
             (`bash scripts/test.sh` builds interop/redisson-java with Maven and sets it)\n"
        );
        return None;
    };
    let dir = PathBuf::from(dir);
    let versions = versions();
    for version in &versions {
        let classes = dir.join(version).join("classes/interop/RedissonPeer.class");
        assert!(
            classes.exists(),
            "{} is missing: build the Java peer for Redisson {version} (scripts/test.sh does)",
            classes.display()
        );
    }
    Some((dir, versions))
}

/// `DISTLOCK_REDISSON_VERSIONS` (space separated), or the two pinned in
/// interop/redisson-java/pom.xml.
fn versions() -> Vec<String> {
    if let Ok(list) = std::env::var("DISTLOCK_REDISSON_VERSIONS") {
        let versions: Vec<String> = list.split_whitespace().map(str::to_owned).collect();
        if !versions.is_empty() {
            return versions;
        }
    }
    let pom = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop/redisson-java/pom.xml"),
    )
    .unwrap();
    ["redisson3.version", "redisson.version"]
        .iter()
        .map(|property| {
            let open = format!("<{property}>");
            let start = pom.find(&open).unwrap() + open.len();
            let end = start + pom[start..].find('<').unwrap();
            pom[start..end].trim().to_owned()
        })
        .collect()
}

/// Where the servers are, for both sides.
#[derive(Clone)]
enum Topology {
    One(String),
    Cluster(Vec<String>, ShardedPubSub),
}

impl Topology {
    fn describe(&self) -> String {
        match self {
            Topology::One(_) => "one node".into(),
            Topology::Cluster(_, ShardedPubSub::On) => "cluster, sharded pub/sub ON".into(),
            Topology::Cluster(_, _) => "cluster, sharded pub/sub OFF".into(),
        }
    }

    async fn client(&self, lease: Duration) -> LockClient {
        let builder = LockClient::builder().layout(Layout::Redisson).lease(lease);
        match self {
            Topology::One(url) => builder.connect(url).await.unwrap(),
            Topology::Cluster(urls, mode) => builder
                .cluster(urls)
                .sharded_pubsub(*mode)
                .connect()
                .await
                .unwrap(),
        }
    }

    async fn conn(&self) -> Conn {
        match self {
            Topology::One(url) => Conn::One(
                redis::Client::open(url.as_str())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap(),
            ),
            Topology::Cluster(urls, _) => Conn::Cluster(
                redis::cluster::ClusterClient::new(urls.clone())
                    .unwrap()
                    .get_async_connection()
                    .await
                    .unwrap(),
            ),
        }
    }

    /// The Java side's settings for the same topology.
    fn java_env(&self) -> Vec<(&'static str, String)> {
        match self {
            Topology::One(url) => vec![("REDIS_URL", url.clone())],
            Topology::Cluster(urls, mode) => vec![
                ("REDIS_CLUSTER", urls.join(",")),
                (
                    "SHARDED_SUBSCRIPTION_MODE",
                    match mode {
                        ShardedPubSub::On => "ON".into(),
                        _ => "OFF".into(),
                    },
                ),
            ],
        }
    }
}

/// A connection for the scenario's own keys, to one node or a cluster.
#[derive(Clone)]
enum Conn {
    One(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::One(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::One(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::One(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// One `java interop.RedissonPeer` process (killed when dropped).
struct Java {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Java {
    /// Starts it and waits for its `ready` (connected).
    async fn start(
        build: &Path,
        topology: &Topology,
        extra_env: &[(&str, &str)],
        args: &[&str],
    ) -> Java {
        let classpath = format!(
            "{}:{}",
            build.join("classes").display(),
            build.join("deps/*").display()
        );
        let mut command = Command::new("java");
        command
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .args(["-XX:TieredStopAtLevel=1", "-Xss512k", "-cp", &classpath])
            .arg("interop.RedissonPeer")
            .args(args)
            .envs(topology.java_env())
            .envs(extra_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .expect("start java (Java 17 is needed for the real-Redisson tests)");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut java = Java { child, lines };
        assert_eq!(java.line(Duration::from_secs(60)).await, "ready");
        java
    }

    /// Its next line of output.
    async fn line(&mut self, within: Duration) -> String {
        match tokio::time::timeout(within, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => panic!("the Java peer exited: {:?}", self.child.wait().await),
            Ok(Err(e)) => panic!("reading the Java peer's output: {e}"),
            Err(_) => panic!("no line from the Java peer within {within:?}"),
        }
    }

    /// Waits for it to exit, successfully.
    async fn finish(mut self, within: Duration) {
        while let Ok(Some(line)) = self.lines.next_line().await {
            eprintln!("Java peer: {line}");
        }
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .expect("the Java peer did not exit")
            .unwrap();
        assert!(status.success(), "the Java peer failed: {status}");
    }
}

/// The keys both sides' turns share (as interop.RedissonPeer names them).
struct Keys {
    inside: String,
    overlaps: String,
    counter: String,
    tokens: String,
    released: String,
}

impl Keys {
    fn new(name: &str) -> Keys {
        let key = |what: &str| format!("interop:{name}:{what}");
        Keys {
            inside: key("inside"),
            overlaps: key("overlaps"),
            counter: key("counter"),
            tokens: key("tokens"),
            released: key("released"),
        }
    }

    fn handoffs(name: &str, side: &str) -> String {
        format!("interop:{name}:handoffs:{side}")
    }
}

/// The server's clock in µs (one clock for both sides).
async fn server_micros(conn: &mut Conn) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    secs * 1_000_000 + micros
}

/// Our side's turns, as interop.RedissonPeer's `turns` takes them.
async fn rust_turns(
    client: LockClient,
    mut conn: Conn,
    name: String,
    turns: usize,
    alternate: bool,
) {
    let side = "rust";
    let keys = Keys::new(&name);
    for _ in 0..turns {
        // Alternating: wait for the other side's turn first.
        while alternate && last_turn_is(&mut conn, &keys, side).await {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let guard = client
            .lock(&name)
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        let now = server_micros(&mut conn).await;
        if let Some(previous) = conn.get::<_, Option<String>>(&keys.released).await.unwrap() {
            let (previous_side, at) = previous.split_once(' ').unwrap();
            if previous_side != side {
                let at: u64 = at.parse().unwrap();
                let _: () = conn
                    .rpush(Keys::handoffs(&name, side), now.saturating_sub(at))
                    .await
                    .unwrap();
            }
        }
        let entered: Option<String> = redis::cmd("SET")
            .arg(&keys.inside)
            .arg(guard.owner())
            .arg("NX")
            .query_async(&mut conn)
            .await
            .unwrap();
        if entered.is_none() {
            let _: () = conn.incr(&keys.overlaps, 1).await.unwrap();
        }
        let value: u64 = conn
            .get::<_, Option<u64>>(&keys.counter)
            .await
            .unwrap()
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _: () = conn.set(&keys.counter, value + 1).await.unwrap();
        let _: () = conn
            .rpush(&keys.tokens, format!("{side} {}", guard.fencing_token()))
            .await
            .unwrap();
        if alternate {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if entered.is_some() {
            let _: () = conn.del(&keys.inside).await.unwrap();
        }
        let at = server_micros(&mut conn).await;
        let _: () = conn
            .set(&keys.released, format!("{side} {at}"))
            .await
            .unwrap();
        guard.release().await.unwrap();
        if !alternate {
            // A pause of 0 to 8 ms between turns (as the Java side's), so
            // that the other side's waiters get the lock too, not mostly our
            // other task.
            tokio::time::sleep(Duration::from_millis(rand::random_range(0..9))).await;
        }
    }
}

/// Whether the last turn taken was `side`'s.
async fn last_turn_is(conn: &mut Conn, keys: &Keys, side: &str) -> bool {
    let last: Vec<String> = conn.lrange(&keys.tokens, -1, -1).await.unwrap();
    last.first()
        .is_some_and(|entry| entry.starts_with(&format!("{side} ")))
}

fn percentile(sorted: &[u64], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Duration::from_micros(sorted[at.min(sorted.len() - 1)])
}

/// Checks a turns scenario's keys: no overlap, the counter exact, the
/// tokens strictly rising across both sides; returns the last token.
async fn check_turns(conn: &mut Conn, name: &str, label: &str, expected: usize) -> u64 {
    let keys = Keys::new(name);
    let overlaps: u64 = conn
        .get::<_, Option<u64>>(&keys.overlaps)
        .await
        .unwrap()
        .unwrap_or(0);
    let counter: u64 = conn.get(&keys.counter).await.unwrap();
    let entries: Vec<String> = conn.lrange(&keys.tokens, 0, -1).await.unwrap();
    let tokens: Vec<u64> = entries
        .iter()
        .map(|e| e.split_once(' ').unwrap().1.parse().unwrap())
        .collect();
    let rising = tokens.windows(2).all(|w| w[0] < w[1]);
    let java = entries.iter().filter(|e| e.starts_with("java ")).count();
    // Hand-offs between the sides, in lock order.
    let switches = entries
        .windows(2)
        .filter(|w| w[0].starts_with("java ") != w[1].starts_with("java "))
        .count();
    eprintln!(
        "{label}: {} turns ({java} Java, {} ours, {switches} hand-offs between them), overlaps \
         {overlaps}, counter {counter}, tokens {}..={} strictly rising: {rising}",
        entries.len(),
        entries.len() - java,
        tokens.first().unwrap(),
        tokens.last().unwrap()
    );
    assert_eq!(overlaps, 0, "{label}: the locks overlapped");
    assert_eq!(counter as usize, expected, "{label}: lost updates");
    assert_eq!(entries.len(), expected, "{label}");
    assert!(rising, "{label}: tokens out of order: {entries:?}");
    *tokens.last().unwrap()
}

/// Turns per side in the read-write lock's alternating scenarios.
const RW_ALTERNATE_TURNS: usize = 10;
/// Turns per thread or task in the read-write lock's concurrent scenario.
const RW_CONCURRENT_TURNS: usize = 18;

/// Our side's read-write turns, as interop.RedissonPeer's `rw-turns`
/// takes them (`role`: `read`, `write`, `write-read` or `read-write` (half
/// and half), or `mixed`, every third a write).
/// Waits (up to 60 s) until the Java side has begun its turns of the
/// scenario whose keys are `keys` (a token of its side is listed), so that
/// the turns of a concurrent scenario really run at the same time: on a busy
/// machine the JVM's first turn could otherwise come after all of ours.
async fn java_has_begun(conn: &mut Conn, keys: &Keys) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let tokens: Vec<String> = conn.lrange(&keys.tokens, 0, -1).await.unwrap();
        if tokens.iter().any(|token| token.starts_with("java")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the Java side began no turn of {} within 60 s",
            keys.tokens
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The sides of a scenario's turns in the order they were listed, run-length
/// encoded (`rust x12, java x3, ...`), for a failure's message.
async fn sides_in_order(conn: &mut Conn, keys: &Keys) -> String {
    let tokens: Vec<String> = conn.lrange(&keys.tokens, 0, -1).await.unwrap_or_default();
    let mut runs: Vec<(String, usize)> = Vec::new();
    for token in tokens {
        let side = token.split(' ').next().unwrap_or_default().to_owned();
        match runs.last_mut() {
            Some((last, n)) if *last == side => *n += 1,
            _ => runs.push((side, 1)),
        }
    }
    runs.iter()
        .map(|(side, n)| format!("{side} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn rust_rw_turns(
    client: LockClient,
    mut conn: Conn,
    name: String,
    turns: usize,
    role: &'static str,
    alternate: bool,
) {
    let side = "rust";
    let key = |what: &str| format!("interop:{name}:{what}");
    let keys = Keys::new(&name);
    let rw = client.read_write_lock(&name);
    if !alternate {
        java_has_begun(&mut conn, &keys).await;
    }
    for i in 0..turns {
        let write = role == "write"
            || (role == "mixed" && i % 3 == 2)
            || (role == "write-read" && i < turns / 2)
            || (role == "read-write" && i >= turns / 2);
        let handoffs = format!(
            "{}:{}",
            Keys::handoffs(&name, side),
            if write { "write" } else { "read" }
        );
        while alternate && last_turn_is(&mut conn, &keys, side).await {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let lock = if write { rw.write() } else { rw.read() };
        let guard = lock.wait(Duration::from_secs(60)).acquire().await.unwrap();
        let now = server_micros(&mut conn).await;
        if let Some(previous) = conn.get::<_, Option<String>>(&keys.released).await.unwrap() {
            let (previous_side, at) = previous.split_once(' ').unwrap();
            if alternate && previous_side != side {
                let at: u64 = at.parse().unwrap();
                let _: () = conn.rpush(&handoffs, now.saturating_sub(at)).await.unwrap();
            }
        }
        if write {
            let writers: u64 = conn.incr(key("writers"), 1).await.unwrap();
            let readers: i64 = conn
                .get::<_, Option<i64>>(key("readers"))
                .await
                .unwrap()
                .unwrap_or(0);
            if writers != 1 || readers != 0 {
                let _: () = conn.incr(&keys.overlaps, 1).await.unwrap();
            }
            let value: u64 = conn
                .get::<_, Option<u64>>(&keys.counter)
                .await
                .unwrap()
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _: () = conn.set(&keys.counter, value + 1).await.unwrap();
            let _: () = conn.rpush(&keys.tokens, "rust write").await.unwrap();
            let pause = if alternate { 20 } else { 1 };
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let _: () = conn.decr(key("writers"), 1).await.unwrap();
        } else {
            let _: () = conn.incr(key("readers:rust"), 1).await.unwrap();
            let _: () = conn.incr(key("readers"), 1).await.unwrap();
            let writers: i64 = conn
                .get::<_, Option<i64>>(key("writers"))
                .await
                .unwrap()
                .unwrap_or(0);
            if writers != 0 {
                let _: () = conn.incr(&keys.overlaps, 1).await.unwrap();
            }
            let java: i64 = conn
                .get::<_, Option<i64>>(key("readers:java"))
                .await
                .unwrap()
                .unwrap_or(0);
            if java > 0 {
                let _: () = conn.incr(key("shared"), 1).await.unwrap();
            }
            let _: () = conn.rpush(&keys.tokens, "rust read").await.unwrap();
            let pause = if alternate { 20 } else { 8 };
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let _: () = conn.decr(key("readers"), 1).await.unwrap();
            let _: () = conn.decr(key("readers:rust"), 1).await.unwrap();
        }
        let at = server_micros(&mut conn).await;
        let _: () = conn
            .set(&keys.released, format!("{side} {at}"))
            .await
            .unwrap();
        guard.release().await.unwrap();
        if !alternate {
            tokio::time::sleep(Duration::from_millis(rand::random_range(0..5))).await;
        }
    }
}

/// Checks a read-write turns scenario's keys: no overlap with a writer,
/// the counter exact (the writes); returns how many reads found a reader
/// of the other side inside.
async fn check_rw_turns(
    conn: &mut Conn,
    name: &str,
    label: &str,
    expected: usize,
    writes: usize,
) -> u64 {
    let keys = Keys::new(name);
    let get = |v: Option<u64>| v.unwrap_or(0);
    let overlaps = get(conn.get(&keys.overlaps).await.unwrap());
    let counter = get(conn.get(&keys.counter).await.unwrap());
    let shared = get(conn.get(format!("interop:{name}:shared")).await.unwrap());
    let entries: Vec<String> = conn.lrange(&keys.tokens, 0, -1).await.unwrap();
    let java = entries.iter().filter(|e| e.starts_with("java ")).count();
    eprintln!(
        "{label}: {} turns ({java} Java, {} ours; {counter} writes), overlaps with a writer \
         {overlaps}, reads with the other side's reader inside {shared}",
        entries.len(),
        entries.len() - java,
    );
    assert_eq!(overlaps, 0, "{label}: a writer overlapped");
    assert_eq!(counter as usize, writes, "{label}: lost updates");
    assert_eq!(entries.len(), expected, "{label}");
    shared
}

/// The wake-up times of the read-write lock's alternating scenario, each
/// way and role: (p50, p99).
async fn wake_ups(conn: &mut Conn, name: &str, label: &str, turns: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (side, role) in [
        ("java", "read"),
        ("java", "write"),
        ("rust", "read"),
        ("rust", "write"),
    ] {
        let mut times: Vec<u64> = conn
            .lrange(format!("{}:{role}", Keys::handoffs(name, side)), 0, -1)
            .await
            .unwrap();
        times.sort_unstable();
        assert!(
            times.len() + 1 >= turns,
            "{label}: {side} {role} woken {} times",
            times.len()
        );
        let (p50, p99) = (percentile(&times, 0.5), percentile(&times, 0.99));
        let way = match (side, role) {
            ("java", "read") => "our writer's release -> Redisson's reader",
            ("java", _) => "our reader's release -> Redisson's writer",
            (_, "read") => "Redisson's writer's release -> our reader",
            _ => "Redisson's reader's release -> our writer",
        };
        out.push(format!(
            "{way}: p50 {p50:?} p99 {p99:?} ({} hand-offs)",
            times.len()
        ));
        assert!(
            p99 < Duration::from_secs(1),
            "{label}: wake-up {way} p99 {p99:?}"
        );
    }
    out
}

/// The read-write lock's scenarios for one version on one topology.
async fn rw_scenarios(build: &Path, version: &str, topology: &Topology, tag: &str, label: &str) {
    let mut conn = topology.conn().await;
    let started = Instant::now();
    let client = topology.client(Duration::from_secs(30)).await;

    // Readers of both sides at once; each side's reader keeps the other's
    // writer out.
    let name = format!("interop:{version}:{tag}:rw-share");
    let mut java = Java::start(build, topology, &[], &["rw-hold", &name, "read", "1500"]).await;
    assert_eq!(java.line(Duration::from_secs(30)).await, "held", "{label}");
    let rw = client.read_write_lock(&name);
    let read = rw.read().try_acquire().await.unwrap();
    assert!(read.is_some(), "{label}: our reader beside Redisson's");
    assert!(
        rw.write().try_acquire().await.unwrap().is_none(),
        "{label}: our writer while Redisson's reader holds"
    );
    // (Our reader keeping Redisson's writer out: the alternating turns below.)
    assert_eq!(
        java.line(Duration::from_secs(30)).await,
        "unlocked",
        "{label}"
    );
    java.finish(Duration::from_secs(30)).await;
    // Ours still reads (Redisson's unlock left the hash to our hold).
    let fields: Vec<String> = conn.hkeys(&name).await.unwrap();
    assert_eq!(fields.len(), 2, "{label}: {fields:?}");
    assert!(
        rw.write().try_acquire().await.unwrap().is_none(),
        "{label}: our writer while our reader holds"
    );
    read.unwrap().release().await.unwrap();
    let exists: bool = conn.exists(&name).await.unwrap();
    assert!(!exists, "{label}: the last reader deletes the hash");
    eprintln!(
        "{label}: read-write lock: a Redisson reader and ours held at once; Redisson's reader \
         kept our writer out, and so did ours after Redisson's left"
    );

    // Alternating turns, a writer on one side and a reader on the other:
    // Redisson writes while we read, then the other way round.
    let name = format!("interop:{version}:{tag}:rw-alternate");
    let turns = (2 * RW_ALTERNATE_TURNS).to_string();
    let java = Java::start(
        build,
        topology,
        &[],
        &[
            "rw-turns",
            &name,
            &turns,
            "java",
            "1",
            "write-read",
            "alternate",
        ],
    )
    .await;
    rust_rw_turns(
        client.clone(),
        conn.clone(),
        name.clone(),
        2 * RW_ALTERNATE_TURNS,
        "read-write",
        true,
    )
    .await;
    java.finish(Duration::from_secs(60)).await;
    let what = format!("{label}, read-write, alternating");
    check_rw_turns(
        &mut conn,
        &name,
        &what,
        4 * RW_ALTERNATE_TURNS,
        2 * RW_ALTERNATE_TURNS,
    )
    .await;
    for line in wake_ups(&mut conn, &name, &what, RW_ALTERNATE_TURNS).await {
        eprintln!("{what}: wake-up {line}");
    }

    // Concurrent mixed turns: two Java threads and two of our clients.
    let name = format!("{{interop:{version}:{tag}}}:rw-concurrent");
    let turns = RW_CONCURRENT_TURNS.to_string();
    let java = Java::start(
        build,
        topology,
        &[],
        &["rw-turns", &name, &turns, "java", "2", "mixed"],
    )
    .await;
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = topology.client(Duration::from_secs(30)).await;
        tasks.push(tokio::spawn(rust_rw_turns(
            client,
            conn.clone(),
            name.clone(),
            RW_CONCURRENT_TURNS,
            "mixed",
            false,
        )));
    }
    for task in tasks {
        task.await.unwrap();
    }
    java.finish(Duration::from_secs(60)).await;
    let writes = 4 * (RW_CONCURRENT_TURNS / 3);
    let shared = check_rw_turns(
        &mut conn,
        &name,
        &format!("{label}, read-write, concurrent"),
        4 * RW_CONCURRENT_TURNS,
        writes,
    )
    .await;
    assert!(
        shared > 0,
        "{label}: no reads of both sides at once; turns by side in order: {}",
        sides_in_order(&mut conn, &Keys::new(&name)).await
    );
    eprintln!("{label}: read-write scenarios in {:?}", started.elapsed());
}

/// Turns per side in the semaphore's alternating scenario (one permit).
const SEM_ALTERNATE_TURNS: usize = 10;
/// Turns per thread or task in the semaphore's concurrent scenario.
const SEM_CONCURRENT_TURNS: usize = 15;

/// Our side's semaphore turns, as interop.RedissonPeer's `sem-turns` takes
/// them: one permit of `permits` per turn.
async fn rust_sem_turns(
    client: LockClient,
    mut conn: Conn,
    name: String,
    turns: usize,
    permits: u32,
    alternate: bool,
) {
    let side = "rust";
    let key = |what: &str| format!("interop:{name}:{what}");
    let keys = Keys::new(&name);
    let semaphore = client.semaphore(&name, permits);
    if !alternate {
        java_has_begun(&mut conn, &keys).await;
    }
    for _ in 0..turns {
        while alternate && last_turn_is(&mut conn, &keys, side).await {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let guard = semaphore
            .permit()
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        let now = server_micros(&mut conn).await;
        if let Some(previous) = conn.get::<_, Option<String>>(&keys.released).await.unwrap() {
            let (previous_side, at) = previous.split_once(' ').unwrap();
            if alternate && previous_side != side {
                let at: u64 = at.parse().unwrap();
                let _: () = conn
                    .rpush(Keys::handoffs(&name, side), now.saturating_sub(at))
                    .await
                    .unwrap();
            }
        }
        let _: () = conn.incr(key("holders:rust"), 1).await.unwrap();
        let holders: u32 = conn.incr(key("holders"), 1).await.unwrap();
        if holders > permits {
            let _: () = conn.incr(&keys.overlaps, 1).await.unwrap();
        }
        let java: i64 = conn
            .get::<_, Option<i64>>(key("holders:java"))
            .await
            .unwrap()
            .unwrap_or(0);
        if java > 0 {
            let _: () = conn.incr(key("shared"), 1).await.unwrap();
        }
        let _: () = conn.rpush(&keys.tokens, "rust permit").await.unwrap();
        let pause = if alternate { 20 } else { 8 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let _: () = conn.decr(key("holders"), 1).await.unwrap();
        let _: () = conn.decr(key("holders:rust"), 1).await.unwrap();
        let at = server_micros(&mut conn).await;
        let _: () = conn
            .set(&keys.released, format!("{side} {at}"))
            .await
            .unwrap();
        guard.release().await.unwrap();
        if !alternate {
            tokio::time::sleep(Duration::from_millis(rand::random_range(0..5))).await;
        }
    }
}

/// The semaphore's scenarios for one version on one topology.
async fn sem_scenarios(build: &Path, version: &str, topology: &Topology, tag: &str, label: &str) {
    let mut conn = topology.conn().await;
    let started = Instant::now();
    let client = topology.client(Duration::from_secs(30)).await;
    let get = |v: Option<u64>| v.unwrap_or(0);

    // Alternating turns on one permit: every hand-off wakes a waiting side.
    let name = format!("interop:{version}:{tag}:sem-alternate");
    let turns = SEM_ALTERNATE_TURNS.to_string();
    let java = Java::start(
        build,
        topology,
        &[],
        &["sem-turns", &name, &turns, "java", "1", "1", "alternate"],
    )
    .await;
    rust_sem_turns(
        client.clone(),
        conn.clone(),
        name.clone(),
        SEM_ALTERNATE_TURNS,
        1,
        true,
    )
    .await;
    java.finish(Duration::from_secs(60)).await;
    let what = format!("{label}, semaphore of 1, alternating");
    let overlaps = get(conn.get(format!("interop:{name}:overlaps")).await.unwrap());
    let entries: u64 = conn.llen(format!("interop:{name}:tokens")).await.unwrap();
    eprintln!("{what}: {entries} turns, more holders than permits {overlaps}");
    assert_eq!(overlaps, 0, "{what}");
    assert_eq!(entries as usize, 2 * SEM_ALTERNATE_TURNS, "{what}");
    for side in ["java", "rust"] {
        let mut times: Vec<u64> = conn
            .lrange(Keys::handoffs(&name, side), 0, -1)
            .await
            .unwrap();
        times.sort_unstable();
        assert!(
            times.len() + 1 >= SEM_ALTERNATE_TURNS,
            "{what}: {side} woken {}",
            times.len()
        );
        let (p50, p99) = (percentile(&times, 0.5), percentile(&times, 0.99));
        let way = if side == "java" {
            "ours -> Redisson"
        } else {
            "Redisson -> ours"
        };
        eprintln!(
            "{what}: wake-up {way}: p50 {p50:?} p99 {p99:?} ({} hand-offs)",
            times.len()
        );
        assert!(
            p99 < Duration::from_secs(1),
            "{what}: wake-up {way} p99 {p99:?}"
        );
    }

    // Concurrent turns on two permits: two Java threads, two of our clients.
    let name = format!("{{interop:{version}:{tag}}}:sem-concurrent");
    let turns = SEM_CONCURRENT_TURNS.to_string();
    let java = Java::start(
        build,
        topology,
        &[],
        &["sem-turns", &name, &turns, "java", "2", "2"],
    )
    .await;
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = topology.client(Duration::from_secs(30)).await;
        tasks.push(tokio::spawn(rust_sem_turns(
            client,
            conn.clone(),
            name.clone(),
            SEM_CONCURRENT_TURNS,
            2,
            false,
        )));
    }
    for task in tasks {
        task.await.unwrap();
    }
    java.finish(Duration::from_secs(60)).await;
    let what = format!("{label}, semaphore of 2, concurrent");
    let overlaps = get(conn.get(format!("interop:{name}:overlaps")).await.unwrap());
    let shared = get(conn.get(format!("interop:{name}:shared")).await.unwrap());
    let entries: u64 = conn.llen(format!("interop:{name}:tokens")).await.unwrap();
    let available: u64 = conn.get(&name).await.unwrap();
    eprintln!(
        "{what}: {entries} turns, more holders than permits {overlaps}, turns with the other \
         side's holder inside {shared}, permits available after {available}"
    );
    assert_eq!(overlaps, 0, "{what}");
    assert_eq!(entries as usize, 4 * SEM_CONCURRENT_TURNS, "{what}");
    assert!(
        shared > 0,
        "{what}: no holders of both sides at once; turns by side in order: {}",
        sides_in_order(&mut conn, &Keys::new(&name)).await
    );
    assert_eq!(available, 2, "{what}: every permit given back");
    eprintln!("{label}: semaphore scenarios in {:?}", started.elapsed());
}

/// Every scenario for one version on one topology.
async fn scenarios(build: &Path, version: &str, topology: &Topology) {
    let label = format!("Redisson {version}, {}", topology.describe());
    let tag = match topology {
        Topology::One(_) => "one",
        Topology::Cluster(_, ShardedPubSub::On) => "sharded",
        Topology::Cluster(_, _) => "classic",
    };
    let mut conn = topology.conn().await;
    let started = Instant::now();

    // Alternating turns: every hand-off wakes a waiting side.
    let name = format!("interop:{version}:{tag}:alternate");
    let client = topology.client(Duration::from_secs(30)).await;
    let turns = ALTERNATE_TURNS.to_string();
    let java = Java::start(
        build,
        topology,
        &[],
        &["turns", &name, &turns, "java", "1", "alternate"],
    )
    .await;
    rust_turns(
        client.clone(),
        conn.clone(),
        name.clone(),
        ALTERNATE_TURNS,
        true,
    )
    .await;
    java.finish(Duration::from_secs(60)).await;
    let last = check_turns(
        &mut conn,
        &name,
        &format!("{label}, alternating"),
        2 * ALTERNATE_TURNS,
    )
    .await;
    let mut woken = Vec::new();
    for side in ["java", "rust"] {
        let mut times: Vec<u64> = conn
            .lrange(Keys::handoffs(&name, side), 0, -1)
            .await
            .unwrap();
        times.sort_unstable();
        assert!(
            times.len() >= ALTERNATE_TURNS - 1,
            "{label}: {side} woken {} times",
            times.len()
        );
        woken.push((
            side,
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            times.len(),
        ));
    }
    for (side, p50, p99, n) in &woken {
        let way = if *side == "java" {
            "ours -> Redisson"
        } else {
            "Redisson -> ours"
        };
        eprintln!("{label}: wake-up {way}: p50 {p50:?} p99 {p99:?} ({n} hand-offs)");
        // Woken by the release message, not by the 30 s lease running out.
        assert!(
            *p99 < Duration::from_secs(1),
            "{label}: wake-up {way} p99 {p99:?}"
        );
    }

    // Concurrent turns: two Java threads and two of our clients at once.
    // The name has a hash tag: Redisson then adds no braces of its own to
    // the channel and the token counter (`redisson_lock_token:{a}:b`), and
    // the shared token sequence checks that we do the same.
    let name = format!("{{interop:{version}:{tag}}}:concurrent");
    let turns = CONCURRENT_TURNS.to_string();
    let java = Java::start(build, topology, &[], &["turns", &name, &turns, "java", "2"]).await;
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = topology.client(Duration::from_secs(30)).await;
        tasks.push(tokio::spawn(rust_turns(
            client,
            conn.clone(),
            name.clone(),
            CONCURRENT_TURNS,
            false,
        )));
    }
    for task in tasks {
        task.await.unwrap();
    }
    java.finish(Duration::from_secs(60)).await;
    check_turns(
        &mut conn,
        &name,
        &format!("{label}, concurrent"),
        4 * CONCURRENT_TURNS,
    )
    .await;

    // The tokens of both sides are one sequence on one name, whatever the
    // scenario: continue on the alternating scenario's name.
    let name = format!("interop:{version}:{tag}:alternate");

    // Redisson force-unlocks our lock: our guard learns it at its next renewal.
    let lease = Duration::from_secs(3);
    let short = topology.client(lease).await;
    let guard = short.lock(&name).acquire().await.unwrap();
    assert!(
        guard.fencing_token() > last,
        "{label}: our token after the turns"
    );
    let mut java = Java::start(build, topology, &[], &["force", &name]).await;
    assert_eq!(
        java.line(Duration::from_secs(30)).await,
        "forced true",
        "{label}"
    );
    let forced = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .unwrap_or_else(|_| panic!("{label}: lost() did not fire after Redisson's forceUnlock"));
    let noticed = forced.elapsed();
    java.finish(Duration::from_secs(30)).await;
    let released = guard.release().await;
    eprintln!(
        "{label}: Redisson's forceUnlock: our lost() after {noticed:?}; release: {released:?}"
    );
    assert!(
        matches!(released, Err(LockError::LeaseLost { .. })),
        "{label}: {released:?}"
    );
    // Within a renewal period (lease/3), and some slack for the renewal's round trip.
    assert!(
        noticed < lease / 3 + Duration::from_millis(500),
        "{label}: {noticed:?}"
    );

    // We force-release Redisson's lock: its unlock is refused.
    let mut java = Java::start(build, topology, &[], &["hold", &name, "2000"]).await;
    let held = java.line(Duration::from_secs(30)).await;
    let java_token: u64 = held.strip_prefix("held ").unwrap().parse().unwrap();
    assert!(
        java_token > last + 1,
        "{label}: Redisson's token {java_token} after ours"
    );
    assert!(
        client.admin().force_release(&name).await.unwrap(),
        "{label}"
    );
    let unlock = java.line(Duration::from_secs(30)).await;
    eprintln!("{label}: our force_release: Redisson's unlock: {unlock}");
    assert!(unlock.starts_with("unlock refused"), "{label}: {unlock}");
    java.finish(Duration::from_secs(30)).await;

    // A Redisson holder killed: our waiter gets the lock once the lease
    // Redisson's watchdog last set runs out, and not before.
    let watchdog = JAVA_WATCHDOG.as_millis().to_string();
    let mut java = Java::start(
        build,
        topology,
        &[("REDISSON_WATCHDOG_MS", &watchdog)],
        &["hold-forever", &name],
    )
    .await;
    let held = java.line(Duration::from_secs(30)).await;
    let killed_token: u64 = held.strip_prefix("held ").unwrap().parse().unwrap();
    assert!(killed_token > java_token, "{label}");
    let waiting = tokio::spawn({
        let client = client.clone();
        let name = name.clone();
        async move {
            let guard = client
                .lock(&name)
                .wait(Duration::from_secs(30))
                .acquire()
                .await?;
            Ok::<_, LockError>((Instant::now(), guard))
        }
    });
    // Past a renewal of Redisson's watchdog (every lockWatchdogTimeout/3).
    tokio::time::sleep(JAVA_WATCHDOG / 2).await;
    assert!(
        !waiting.is_finished(),
        "{label}: we got the lock while Redisson held it"
    );
    java.child.start_kill().unwrap(); // SIGKILL
    java.child.wait().await.unwrap();
    let measured = Instant::now();
    let remaining: i64 = conn.pttl(&name).await.unwrap();
    assert!(
        remaining > 0,
        "{label}: the killed holder's lease: {remaining}"
    );
    let remaining = Duration::from_millis(remaining as u64);
    let (acquired, guard) = waiting.await.unwrap().unwrap();
    let after = acquired.duration_since(measured);
    eprintln!(
        "{label}: Redisson holder SIGKILLed with {remaining:?} of its lease left: our waiter got \
         the lock {after:?} later (token {})",
        guard.fencing_token()
    );
    assert!(
        after + Duration::from_millis(5) >= remaining,
        "{label}: before the lease ran out"
    );
    assert!(
        after < remaining + Duration::from_secs(2),
        "{label}: {after:?}"
    );
    assert!(guard.fencing_token() > killed_token, "{label}");
    guard.release().await.unwrap();
    // The lock family's scenarios on one node and on the cluster with sharded pub/sub; on
    // the classic pub/sub cluster only the plain lock's (the family's scripts and keys are
    // the same there, only the publish command differs, which the plain lock's wake-ups
    // cover): it keeps this file, the longest of CI, under three minutes.
    if !matches!(topology, Topology::Cluster(_, ShardedPubSub::Off)) {
        rw_scenarios(build, version, topology, tag, &label).await;
        sem_scenarios(build, version, topology, tag, &label).await;
    }
    eprintln!("{label}: all scenarios in {:?}", started.elapsed());
}

async fn run(topology: impl Fn() -> (Box<dyn std::any::Any>, Topology)) {
    let Some((dir, versions)) = java_builds() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let (_servers, topology) = topology();
    for version in versions {
        scenarios(&dir.join(&version), &version, &topology).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_redisson_on_one_node() {
    run(|| {
        let server = RedisServer::start();
        let url = server.url();
        (Box::new(server), Topology::One(url))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_redisson_on_a_cluster_with_sharded_pubsub() {
    run(|| {
        let cluster = RedisCluster::start(3, 0);
        let urls = cluster.master_urls();
        (
            Box::new(cluster),
            Topology::Cluster(urls, ShardedPubSub::On),
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_redisson_on_a_cluster_with_classic_pubsub() {
    run(|| {
        let cluster = RedisCluster::start(3, 0);
        let urls = cluster.master_urls();
        (
            Box::new(cluster),
            Topology::Cluster(urls, ShardedPubSub::Off),
        )
    })
    .await;
}
