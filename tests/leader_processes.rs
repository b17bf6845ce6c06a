//! Leader election with real processes, on one node, Sentinel and Cluster:
//! three worker processes (this test binary run again as
//! `leader_process`) each run `election.run(work)`, and a fourth follows
//! the role with `observe()`. The test kills (`SIGKILL`), pauses
//! (`SIGSTOP`/`SIGCONT`) and terminates (`SIGTERM`, on which a worker shuts
//! its client down, which resigns) the leader, and checks, on a separate
//! Redis that is not the lock's store (the *log*):
//!
//! - one leader at a time: each leader's work sets an inside-marker (outside
//!   the lock) when it starts, clears it when its future is dropped, and
//!   checks every 20 ms that the marker is still its own; a leader that
//!   finds another's marker when it enters (unless the test killed or paused
//!   that one) or loses its own while it runs records a violation;
//! - terms strictly increase, in the order the leaders' futures started, and
//!   in the log each leader appends to through `RedisFence` with its term;
//! - a `SIGKILL`ed leader is replaced within one lease (+ 2 s of slack);
//! - a leader paused past its lease is replaced; at `SIGCONT` its future is
//!   dropped without running again, and the fenced write it then tries with
//!   its old term is refused (the attempt and the refusal are recorded);
//! - a leader told to stop (`SIGTERM` -> `client.shutdown`) hands over in
//!   under 1 s (a resignation, not a lease);
//! - the follower sees every term, in order, and no leader after the last
//!   one resigned;
//! - the run loop campaigns again after a loss: the paused leader leads again.
//!
//! The three backends run one after the other (a mutex), so that their
//! processes do not compete for the CPU with each other's.

mod suite;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use distlock::{LockClient, Term};
use distlock_fence::{FenceError, RedisFence};
use lock_test_support::{RedisCluster, RedisSentinels, RedisServer};
use suite::Topology;

/// The lease of every worker's client: short, so that a dead leader is
/// replaced in seconds.
const LEASE: Duration = Duration::from_secs(2);
/// The run loop's pause between terms.
const BACKOFF: Duration = Duration::from_millis(200);
/// How often a leader's work checks that the inside-marker is its own.
const CHECK_EVERY: Duration = Duration::from_millis(20);
/// How long a leader's work takes to stop once its future is dropped
/// (before it leaves the inside-marker): a run loop that resigned before
/// the work was gone would let the next leader in while it is inside.
const STOPPING: Duration = Duration::from_millis(30);
const ROLE: &str = "processes:leader";

// The worker's environment (besides the topology's).
const MODE: &str = "LEADER_PROC_MODE";
const LOG_URL: &str = "LEADER_PROC_LOG_URL";

// Keys of the log Redis.
/// The list each leader appends `lead <pid> <term>` to, through the fence.
const LOG: &str = "log";
/// The inside-marker: `<pid> <term>` of the leader whose work runs.
const INSIDE: &str = "inside";
/// Markers (`<pid> <term>`) of leaders the test killed or paused: a new
/// leader may find one of these inside.
const EXCUSED: &str = "excused";
/// What the workers did, in order: `start`, `dropped`, `stale-*`, `exit`.
const EVENTS: &str = "events";
/// What the follower saw: `view <term | none> <ms>`.
const VIEWS: &str = "views";
/// Broken promises, in words.
const VIOLATIONS: &str = "violations";

static ONE_BACKEND_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Milliseconds of the system clock, which all processes here share.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[test]
fn standalone_leaders_in_processes() {
    let server = RedisServer::start();
    elect_in_processes("standalone", &Topology::Standalone(server.url()));
}

#[test]
fn sentinel_leaders_in_processes() {
    let set = RedisSentinels::start("locks");
    elect_in_processes(
        "sentinel",
        &Topology::Sentinel(set.sentinel_urls(), "locks".to_owned()),
    );
}

#[test]
fn cluster_leaders_in_processes() {
    let cluster = RedisCluster::start(3, 0);
    elect_in_processes("cluster", &Topology::Cluster(cluster.urls()));
}

/// A leader's start, as its work recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Start {
    pid: u32,
    term: u64,
    /// When its future started running (ms of the system clock).
    ms: u64,
}

impl Start {
    fn marker(&self) -> String {
        format!("{} {}", self.pid, self.term)
    }
}

/// The scenario, on one backend (see the file's documentation).
fn elect_in_processes(backend: &str, topology: &Topology) {
    let _one = ONE_BACKEND_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let log = RedisServer::start();
    let mut run = Run::new(backend, topology, &log);
    let lease_ms = LEASE.as_millis() as u64;
    let mut figures = Vec::new();

    // The follower first, so that it sees every leader.
    let follower = run.spawn("follower");
    run.wait_view(Duration::from_secs(30), |view| view.is_some());
    for _ in 0..3 {
        run.spawn("worker");
    }
    let first = run.next_leader(0, Duration::from_secs(30));

    // A SIGKILLed leader is replaced within one lease.
    std::thread::sleep(Duration::from_millis(300));
    run.excuse(&first);
    let killed = now_ms();
    run.kill(first.pid);
    let second = run.next_leader(first.term, LEASE * 10);
    let failover = second.ms.saturating_sub(killed);
    figures.push(format!(
        "SIGKILL -> next leader's future running: {failover} ms"
    ));
    assert!(
        failover < lease_ms + 2_000,
        "{backend}: a SIGKILLed leader was replaced after {failover} ms, more than the lease \
         ({lease_ms} ms) + 2 s"
    );
    assert_ne!(second.pid, first.pid);
    run.spawn("worker"); // three campaigning again

    // A leader paused past its lease is replaced; at SIGCONT its future is
    // dropped before it runs again, and its fenced write is refused.
    std::thread::sleep(Duration::from_millis(300));
    run.excuse(&second);
    let paused = second.pid;
    let stopped = now_ms();
    run.signal(paused, libc::SIGSTOP);
    let third = run.next_leader(second.term, LEASE * 10);
    assert_ne!(third.pid, paused);
    figures.push(format!(
        "SIGSTOP -> next leader's future running: {} ms",
        third.ms.saturating_sub(stopped)
    ));
    std::thread::sleep(Duration::from_millis(200));
    let resumed = now_ms();
    run.signal(paused, libc::SIGCONT);
    let dropped = run.wait_event(Duration::from_secs(10), "its future dropped", |e| {
        e.starts_with(&format!("dropped {} ", second.marker()))
    });
    let dropped_ms: u64 = field(&dropped, 3);
    assert!(
        dropped_ms >= resumed,
        "{backend}: the paused leader's future was dropped at {dropped_ms}, before SIGCONT at \
         {resumed}: it was not paused"
    );
    let attempt = format!("stale-attempt {}", second.marker());
    run.wait_event(Duration::from_secs(10), "its stale write attempted", |e| {
        e == attempt
    });
    let outcome = run.wait_event(Duration::from_secs(10), "its stale write's outcome", |e| {
        e.starts_with(&format!("stale-refused {} ", second.marker()))
            || e.starts_with(&format!("stale-accepted {}", second.marker()))
            || e.starts_with(&format!("stale-error {}", second.marker()))
    });
    assert!(
        outcome.starts_with("stale-refused"),
        "{backend}: the resumed leader's fenced write with its old term {} was not refused: \
         {outcome}",
        second.term
    );
    let seen: u64 = field(&outcome, 3);
    assert!(
        seen >= third.term,
        "{backend}: refused, but by term {seen}, not by the next leader's {}",
        third.term
    );
    figures.push(format!(
        "SIGCONT -> paused leader's future dropped: {} ms",
        dropped_ms.saturating_sub(resumed)
    ));

    // A leader told to stop resigns: the next one leads within a round trip
    // or so, not a lease. Every worker in turn, until none is left; the
    // leader paused past its lease must lead again on the way (the run loop
    // campaigns again after a loss).
    let mut last = third;
    let mut handovers = Vec::new();
    let mut led_again = None;
    loop {
        // Every other worker past its back-off, campaigning.
        std::thread::sleep(BACKOFF * 3);
        let terminated = now_ms();
        run.signal(last.pid, libc::SIGTERM);
        run.wait_exit(last.pid);
        if run.live_workers().is_empty() {
            break;
        }
        let next = run.next_leader(last.term, LEASE * 10);
        let handover = next.ms.saturating_sub(terminated);
        handovers.push(handover);
        assert!(
            handover < 1_000,
            "{backend}: a resigning leader was replaced after {handover} ms (lease {lease_ms} ms)"
        );
        if next.pid == paused {
            led_again = Some(next.term);
        }
        last = next;
    }
    figures.push(format!(
        "SIGTERM -> next leader's future running: {handovers:?} ms"
    ));
    assert!(
        led_again.is_some_and(|term| term > second.term),
        "{backend}: the leader paused past its lease (pid {paused}, term {}) never led again",
        second.term
    );
    // The last one resigned: the follower sees nobody leading.
    run.wait_view(Duration::from_secs(10), |view| {
        view.is_some_and(|v| v.starts_with("view none"))
    });
    run.signal(follower, libc::SIGTERM);
    run.wait_exit(follower);

    // One leader at a time, as the workers checked it.
    let violations: Vec<String> = run.lrange(VIOLATIONS);
    assert!(violations.is_empty(), "{backend}: {violations:#?}");
    // Terms strictly increase in the order the leaders started, the fenced
    // log holds exactly those starts in that order, and no stale write.
    let starts = run.starts();
    assert!(
        starts.windows(2).all(|w| w[0].term < w[1].term),
        "{backend}: terms out of order: {starts:?}"
    );
    let logged: Vec<String> = run.lrange(LOG);
    let expected: Vec<String> = starts
        .iter()
        .map(|s| format!("lead {}", s.marker()))
        .collect();
    assert_eq!(logged, expected, "{backend}: the fenced log");
    // The follower saw every term, in order, each soon after it started
    // (pushed: not at the end of a lease), and nobody after the last.
    let views: Vec<String> = run.lrange(VIEWS);
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let mut ended = 0;
    for view in &views {
        let at: u64 = field(view, 2);
        match view.split(' ').nth(1) {
            Some("none") => ended = seen.last().map_or(0, |s| s.0),
            Some(term) => {
                let term: u64 = term.parse().unwrap();
                let last = seen.last().map_or(0, |s| s.0);
                assert!(
                    term > ended && term >= last,
                    "{backend}: the follower went back: {views:#?}"
                );
                if term != last {
                    seen.push((term, at));
                }
            }
            None => panic!("{view}"),
        }
    }
    let started: Vec<u64> = starts.iter().map(|s| s.term).collect();
    let seen_terms: Vec<u64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(seen_terms, started, "{backend}: terms the follower saw");
    let delays: Vec<u64> = starts
        .iter()
        .zip(&seen)
        .map(|(start, (_, at))| at.saturating_sub(start.ms))
        .collect();
    figures.push(format!(
        "a term's start -> the follower's view: {delays:?} ms"
    ));
    assert!(
        delays.iter().all(|&d| d < 1_000),
        "{backend}: the follower saw terms late (ms after their start): {delays:?}"
    );
    eprintln!(
        "{backend}: lease {lease_ms} ms, terms {started:?}\n  {}",
        figures.join("\n  ")
    );
}

/// The processes of one scenario and the log Redis they write to.
struct Run {
    backend: String,
    env: Vec<(&'static str, String)>,
    log: redis::Connection,
    children: BTreeMap<u32, (Child, &'static str, PathBuf)>,
    dir: PathBuf,
}

impl Run {
    fn new(backend: &str, topology: &Topology, log: &RedisServer) -> Self {
        let mut env = topology.env();
        env.push((LOG_URL, log.url()));
        let dir = std::env::temp_dir().join(format!(
            "distlock-leader-processes-{}-{backend}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Run {
            backend: backend.to_owned(),
            env,
            log: log.conn(),
            children: BTreeMap::new(),
            dir,
        }
    }

    /// Starts a `worker` or the `follower`; its output goes to a file in
    /// this run's directory.
    fn spawn(&mut self, mode: &'static str) -> u32 {
        let path = self.dir.join(format!("{mode}-{}.log", self.children.len()));
        let file = std::fs::File::create(&path).unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "leader_process", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env(MODE, mode)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        self.children.insert(pid, (child, mode, path));
        pid
    }

    fn live_workers(&mut self) -> Vec<u32> {
        self.children
            .iter_mut()
            .filter_map(|(pid, (child, mode, _))| {
                (*mode == "worker" && matches!(child.try_wait(), Ok(None))).then_some(*pid)
            })
            .collect()
    }

    fn signal(&self, pid: u32, signal: libc::c_int) {
        // SAFETY: kill(2) on a child of this process, not yet reaped (a
        // reaped one's pid is never signalled: `wait_exit` removes it).
        let sent = unsafe { libc::kill(pid as libc::pid_t, signal) };
        assert_eq!(sent, 0, "kill({pid}, {signal})");
    }

    fn kill(&mut self, pid: u32) {
        let (mut child, _, _) = self.children.remove(&pid).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Waits for child `pid` to exit, and asserts it exited successfully.
    fn wait_exit(&mut self, pid: u32) {
        let (mut child, mode, path) = self.children.remove(&pid).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                self.fail(format!("{mode} {pid} did not exit"));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if !status.success() {
            let output = std::fs::read_to_string(&path).unwrap_or_default();
            self.fail(format!("{mode} {pid} failed ({status}): {output}"));
        }
    }

    /// Marks `leader`'s marker as one the test killed or paused.
    fn excuse(&mut self, leader: &Start) {
        let _: i64 = redis::cmd("SADD")
            .arg(EXCUSED)
            .arg(leader.marker())
            .query(&mut self.log)
            .unwrap();
    }

    fn lrange(&mut self, key: &str) -> Vec<String> {
        redis::cmd("LRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query(&mut self.log)
            .unwrap()
    }

    fn starts(&mut self) -> Vec<Start> {
        self.lrange(EVENTS)
            .iter()
            .filter(|e| e.starts_with("start "))
            .map(|e| Start {
                pid: field(e, 1),
                term: field(e, 2),
                ms: field(e, 3),
            })
            .collect()
    }

    /// The first leader whose term is above `after`, waiting up to `timeout`.
    fn next_leader(&mut self, after: u64, timeout: Duration) -> Start {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(start) = self.starts().into_iter().find(|s| s.term > after) {
                return start;
            }
            if Instant::now() > deadline {
                self.fail(format!("no leader after term {after} within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for an event that `matches`.
    fn wait_event(
        &mut self,
        timeout: Duration,
        what: &str,
        matches: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(event) = self.lrange(EVENTS).into_iter().find(|e| matches(e)) {
                return event;
            }
            if Instant::now() > deadline {
                self.fail(format!("{what}: no such event within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until the follower's last view satisfies `done`.
    fn wait_view(&mut self, timeout: Duration, done: impl Fn(Option<&str>) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            let views = self.lrange(VIEWS);
            if done(views.last().map(String::as_str)) {
                return;
            }
            if Instant::now() > deadline {
                self.fail(format!(
                    "the follower's view did not come within {timeout:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Fails the test with what the log Redis and the children's output say.
    fn fail(&mut self, what: String) -> ! {
        let dump = self.dump();
        panic!("{}: {what}\n{dump}", self.backend)
    }

    /// What the log Redis and the children's output say, for a failure.
    fn dump(&mut self) -> String {
        let mut out = String::new();
        for key in [EVENTS, VIEWS, VIOLATIONS, LOG] {
            let _ = writeln!(out, "{key}: {:#?}", self.lrange(key));
        }
        for (pid, (_, mode, path)) in &self.children {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            let _ = writeln!(out, "--- {mode} {pid} ({}):", path.display());
            for line in tail.into_iter().rev() {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        for (child, _, _) in self.children.values_mut() {
            // SIGCONT first: a stopped process dies of SIGKILL too, but
            // would not be reaped as promptly on every kernel.
            // SAFETY: kill(2) on our own, not yet reaped child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Field `n` (0-based, space separated) of an event, parsed.
fn field<T: std::str::FromStr>(event: &str, n: usize) -> T
where
    T::Err: std::fmt::Debug,
{
    event
        .split(' ')
        .nth(n)
        .unwrap_or_else(|| panic!("no field {n} in {event:?}"))
        .parse()
        .unwrap_or_else(|err| panic!("field {n} of {event:?}: {err:?}"))
}

/// A worker or the follower: runs only as a child of the tests above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in child processes by the *_leaders_in_processes tests"]
async fn leader_process() {
    let Some(topology) = Topology::from_env() else {
        eprintln!("this test only runs as a child of a *_leaders_in_processes test");
        return;
    };
    // Dies with the test thread that started it, whatever happens there.
    // SAFETY: prctl(2) with an integer argument.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
    let log = redis::Client::open(std::env::var(LOG_URL).unwrap()).unwrap();
    let client = topology.connect(LockClient::builder().lease(LEASE)).await;
    let conn = log.get_multiplexed_async_connection().await.unwrap();
    let pid = std::process::id();
    if std::env::var(MODE).unwrap() == "follower" {
        let mut observer = client.election(ROLE).observe();
        loop {
            tokio::select! {
                _ = terminate.recv() => break,
                view = observer.changed() => {
                    let view = match view.unwrap() {
                        Some(leader) => leader.term.to_string(),
                        None => "none".into(),
                    };
                    push(&conn, VIEWS, format!("view {view} {}", now_ms())).await;
                }
            }
        }
        client.shutdown(Duration::from_secs(5)).await.unwrap();
        return;
    }
    let worker = Worker {
        pid,
        conn: conn.clone(),
        sync: Arc::new(Mutex::new(log.get_connection().unwrap())),
        fence: RedisFence::new(conn.clone()),
        terminating: Arc::new(AtomicBool::new(false)),
    };
    let election = client.election(ROLE).backoff(BACKOFF);
    let mut runner = tokio::spawn({
        let worker = worker.clone();
        async move { election.run(|term| worker.clone().work(term)).await }
    });
    tokio::select! {
        _ = terminate.recv() => {
            worker.terminating.store(true, Ordering::SeqCst);
            client.shutdown(Duration::from_secs(10)).await.unwrap();
            let ran = runner.await.unwrap();
            push(&conn, EVENTS, format!("exit {pid} {ran:?}")).await;
            ran.unwrap();
        }
        ran = &mut runner => {
            push(&conn, VIOLATIONS, format!("{pid}: the run loop returned: {ran:?}")).await;
            panic!("the run loop returned: {ran:?}");
        }
    }
}

async fn push(conn: &redis::aio::MultiplexedConnection, key: &str, entry: String) {
    let _: i64 = redis::cmd("RPUSH")
        .arg(key)
        .arg(entry)
        .query_async(&mut conn.clone())
        .await
        .unwrap();
}

/// A worker process's side of the log.
#[derive(Clone)]
struct Worker {
    pid: u32,
    conn: redis::aio::MultiplexedConnection,
    /// For the drop of a leader's work (which cannot await).
    sync: Arc<Mutex<redis::Connection>>,
    fence: RedisFence<redis::aio::MultiplexedConnection>,
    /// SIGTERM came: a term ends by this process's own resignation.
    terminating: Arc<AtomicBool>,
}

impl Worker {
    /// The leader's work: a fenced append to the log, the inside-marker,
    /// then checking the marker until the future is dropped.
    async fn work(self, term: Term) {
        let entered = now_ms();
        let marker = format!("{} {}", self.pid, term.token());
        let _dropped = Dropped {
            worker: self.clone(),
            marker: marker.clone(),
            token: term.token(),
        };
        let appended = self
            .fence
            .run::<i64>(
                LOG,
                term.token(),
                redis::cmd("RPUSH").arg(LOG).arg(format!("lead {marker}")),
            )
            .await;
        if let Err(err) = appended {
            self.violation(format!("{marker}: a new term's fenced write failed: {err}"))
                .await;
        }
        let mut conn = self.conn.clone();
        let before: Option<String> = redis::cmd("SET")
            .arg(INSIDE)
            .arg(&marker)
            .arg("GET")
            .query_async(&mut conn)
            .await
            .unwrap();
        if let Some(before) = before {
            let excused: bool = redis::cmd("SISMEMBER")
                .arg(EXCUSED)
                .arg(&before)
                .query_async(&mut conn)
                .await
                .unwrap();
            if !excused {
                self.violation(format!(
                    "two leaders at once: {marker} started while {before} was inside"
                ))
                .await;
            }
        }
        push(&conn, EVENTS, format!("start {marker} {entered}")).await;
        loop {
            tokio::time::sleep(CHECK_EVERY).await;
            let inside: Option<String> = redis::cmd("GET")
                .arg(INSIDE)
                .query_async(&mut conn)
                .await
                .unwrap();
            if inside.as_deref() != Some(marker.as_str()) {
                self.violation(format!(
                    "two leaders at once: {marker} still ran as leader after {inside:?} entered"
                ))
                .await;
                std::future::pending::<()>().await;
            }
        }
    }

    async fn violation(&self, what: String) {
        push(&self.conn, VIOLATIONS, what).await;
    }
}

/// Dropped with a leader's work: stops (in [`STOPPING`]), leaves the
/// inside-marker (if still its own), records the drop, and, when the term
/// ended otherwise than by this process's shutdown, tries one fenced write
/// with the ended term and records what the fence said.
struct Dropped {
    worker: Worker,
    marker: String,
    token: u64,
}

impl Drop for Dropped {
    fn drop(&mut self) {
        let at = now_ms();
        std::thread::sleep(STOPPING);
        {
            let mut conn = self
                .worker
                .sync
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let _: redis::RedisResult<i64> = redis::Script::new(
                "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                 return redis.call('DEL', KEYS[1]) end return 0",
            )
            .key(INSIDE)
            .arg(&self.marker)
            .invoke(&mut *conn);
            let _: redis::RedisResult<i64> = redis::cmd("RPUSH")
                .arg(EVENTS)
                .arg(format!("dropped {} {at}", self.marker))
                .query(&mut *conn);
        }
        if self.worker.terminating.load(Ordering::SeqCst) {
            return;
        }
        let (worker, marker, token) = (self.worker.clone(), self.marker.clone(), self.token);
        tokio::spawn(async move {
            push(&worker.conn, EVENTS, format!("stale-attempt {marker}")).await;
            let written = worker
                .fence
                .run::<i64>(
                    LOG,
                    token,
                    redis::cmd("RPUSH").arg(LOG).arg(format!("stale {marker}")),
                )
                .await;
            let outcome = match written {
                Err(FenceError::Stale { seen, .. }) => format!("stale-refused {marker} {seen}"),
                Ok(_) => format!("stale-accepted {marker}"),
                Err(err) => format!("stale-error {marker} {err}"),
            };
            push(&worker.conn, EVENTS, outcome).await;
        });
    }
}
