//! `lockctl leader` against a real `redis-server`: real `lockctl leader run`
//! processes running real shell commands that append `start`/`stop` lines
//! to one journal, `leader status`, `leader watch`, and leaders in `top`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

mod common;

use common::*;
use lock_test_support::{free_port, RedisCluster, RedisSentinels, RedisServer, ServerOptions};

/// The command every `leader run` of these tests runs. Before it says it
/// started, it looks for any command that started before it and is still
/// running, and writes `overlap` if it finds one: one command at a time is
/// checked from inside, at the moment it matters. On SIGTERM it waits
/// `$STOP_DELAY` seconds, writes `stop` and exits 0.
const COMMAND: &str = r#"
for p in $(awk '$1 == "start" { print $3 }' "$JOURNAL" 2>/dev/null); do
  if [ -e "/proc/$p/stat" ] && ! grep -q ') Z' "/proc/$p/stat" 2>/dev/null; then
    echo "overlap $LEADER_TERM $p" >> "$JOURNAL"
  fi
done
echo "start $LEADER_TERM $$ $PPID $LEADER_ROLE $LOCK_KEY $LOCK_FENCING_TOKEN" >> "$JOURNAL"
trap 'sleep "$STOP_DELAY"; echo "stop $LEADER_TERM $$" >> "$JOURNAL"; exit 0' TERM
while :; do sleep 0.1; done
"#;

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or_else(|| {
        panic!(
            "lockctl was killed: {:?}; stderr: {}",
            output.status,
            stderr(output)
        )
    })
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("lockctl-leader-test-")
        .tempdir()
        .unwrap()
}

#[allow(unsafe_code)]
fn signal(pid: u32, signo: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let sent = unsafe { libc::kill(pid as libc::pid_t, signo) };
    assert_eq!(sent, 0, "kill({pid}, {signo}) failed");
}

/// Whether process `pid` still exists (a zombie counts as gone).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// `lockctl leader run <role> <options> -- sh -c COMMAND`, its stderr to
/// `<journal>.<n>.err`.
fn leader_run(
    server: &RedisServer,
    journal: &Path,
    n: usize,
    role: &str,
    options: &[&str],
    stop_delay: &str,
) -> Child {
    let backend = ["--url".to_owned(), server.url()];
    leader_run_on(&backend, journal, n, role, options, stop_delay)
}

/// [`leader_run`] on the backend that the connection options `backend` name.
fn leader_run_on(
    backend: &[String],
    journal: &Path,
    n: usize,
    role: &str,
    options: &[&str],
    stop_delay: &str,
) -> Child {
    let err = File::create(journal.with_extension(format!("{n}.err"))).unwrap();
    bare_lockctl()
        .args(backend)
        .args(["leader", "run", role])
        .args(options)
        .args(["--", "sh", "-c", COMMAND])
        .env("JOURNAL", journal)
        .env("STOP_DELAY", stop_delay)
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap()
}

/// A journal line `start <term> <pid> <lockctl pid> <role> <LOCK_KEY> <LOCK_FENCING_TOKEN>`.
#[derive(Debug, Clone, PartialEq)]
struct Start {
    term: u64,
    pid: u32,
    lockctl: u32,
    env: Vec<String>,
}

fn read(path: &PathBuf) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn starts(journal: &PathBuf) -> Vec<Start> {
    read(journal)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (fields[0] == "start").then(|| Start {
                term: fields[1].parse().unwrap(),
                pid: fields[2].parse().unwrap(),
                lockctl: fields[3].parse().unwrap(),
                env: fields[4..].iter().map(|f| f.to_string()).collect(),
            })
        })
        .collect()
}

/// Waits until the journal has `n` starts; returns them and when the n-th was seen.
fn wait_for_starts(journal: &PathBuf, n: usize) -> (Vec<Start>, Instant) {
    wait_until(&format!("start number {n}"), || starts(journal).len() >= n);
    (starts(journal), Instant::now())
}

/// Checks the journal: no command ever found another running when it
/// started, every `stop` ends the command started just before it (the
/// SIGKILLed ones have no `stop`), and the terms strictly increase.
fn assert_one_at_a_time(journal: &PathBuf, killed: &[u32]) -> Vec<u64> {
    let text = read(journal);
    assert!(!text.contains("overlap"), "two commands at once:\n{text}");
    let mut running: Option<(u64, u32)> = None;
    let mut terms = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (term, pid): (u64, u32) = (fields[1].parse().unwrap(), fields[2].parse().unwrap());
        match fields[0] {
            "start" => {
                if let Some((_, before)) = running {
                    assert!(
                        killed.contains(&before),
                        "start before the stop of {before}:\n{text}"
                    );
                }
                running = Some((term, pid));
                terms.push(term);
            }
            "stop" => {
                assert_eq!(running, Some((term, pid)), "stop of another:\n{text}");
                running = None;
            }
            other => panic!("unexpected line {other}:\n{text}"),
        }
    }
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms must strictly increase: {terms:?}"
    );
    terms
}

/// The JSON lines `leader watch --json` wrote so far.
fn watch_lines(path: &PathBuf) -> Vec<serde_json::Value> {
    read(path)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// Three `lockctl leader run` processes for one role: exactly one command
/// runs at a time (checked from inside each command as it starts), the
/// terms rise, a SIGTERMed leader stops its command and resigns so the
/// next one leads within a fraction of the 20 s lease, and `leader watch`
/// prints every term in order.
#[test]
fn three_leader_runs_take_turns_and_hand_over_at_once_on_sigterm() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let journal = dir.path().join("journal");
    let watched = dir.path().join("watch.jsonl");
    let mut watch = lockctl(&server)
        .args(["leader", "watch", "turns", "--json"])
        .stdout(File::create(&watched).unwrap())
        .spawn()
        .unwrap();
    wait_until("watch to print that nobody leads", || {
        watch_lines(&watched)
            .first()
            .is_some_and(|l| l["led"] == false)
    });
    let lease = Duration::from_secs(20);
    let mut runs: Vec<Child> = (0..3)
        .map(|n| {
            leader_run(
                &server,
                &journal,
                n,
                "turns",
                &["--lease", "20s", "--backoff", "50ms", "--grace", "20s"],
                // Half a second between SIGTERM and the end: a lockctl that
                // resigned before its command ended would let the next
                // command start beside it.
                "0.5",
            )
        })
        .collect();
    let mut handovers = Vec::new();
    let mut resigned: Option<Instant> = None;
    for round in 1..=3 {
        let (started, seen) = wait_for_starts(&journal, round);
        let leader = started.last().unwrap().clone();
        assert_eq!(
            leader.env,
            [
                "turns".to_owned(),
                "leader:turns".to_owned(),
                leader.term.to_string()
            ],
            "LEADER_ROLE, LOCK_KEY, LOCK_FENCING_TOKEN"
        );
        if let Some(at) = resigned {
            handovers.push(seen.duration_since(at));
        }
        // The watcher sees this term before it ends.
        wait_until("watch to print the term", || {
            watch_lines(&watched)
                .iter()
                .any(|l| l["term"] == leader.term)
        });
        let at = runs
            .iter()
            .position(|run| run.id() == leader.lockctl)
            .expect("the command's parent is one of the lockctl processes");
        let run = runs.remove(at);
        signal(run.id(), libc::SIGTERM);
        resigned = Some(Instant::now());
        let output = finish(run, LONG);
        assert_eq!(
            code(&output),
            0,
            "the command's own code (its trap exits 0)"
        );
        assert!(!alive(leader.pid), "the command ended with its lockctl");
    }
    assert_eq!(handovers.len(), 2);
    for handover in &handovers {
        assert!(
            *handover < lease / 2,
            "a SIGTERMed leader resigns: the next leads long before its {lease:?} lease \
             ends, in {handover:?}"
        );
    }
    let terms = assert_one_at_a_time(&journal, &[]);
    assert_eq!(terms.len(), 3);

    wait_until("watch to print that nobody leads any more", || {
        watch_lines(&watched)
            .last()
            .is_some_and(|l| l["led"] == false)
    });
    signal(watch.id(), libc::SIGINT);
    let deadline = Instant::now() + LONG;
    let status = loop {
        if let Some(status) = watch.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "watch did not stop on SIGINT");
        sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(0), "watch ends with exit 0 on SIGINT");
    let seen: Vec<u64> = watch_lines(&watched)
        .iter()
        .filter_map(|l| l["term"].as_u64())
        .collect();
    assert_eq!(
        seen, terms,
        "watch prints every term once, in order (no leader between them or not)"
    );
    eprintln!("hand-overs after SIGTERM: {handovers:?}");
}

/// SIGKILL of the leading lockctl: its command dies with it (SIGKILL, even
/// a command slow to stop on SIGTERM), so it cannot outlive its term, and
/// the other `leader run` leads within about one lease.
#[test]
fn a_sigkilled_leader_is_replaced_within_a_lease_and_its_command_dies_with_it() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let journal = dir.path().join("journal");
    let lease = Duration::from_secs(3);
    let options = ["--lease", "3s", "--backoff", "50ms", "--grace", "1s"];
    // A command that takes 60 s to stop after SIGTERM: it would still run
    // when the next term begins.
    let mut runs: Vec<Child> = (0..2)
        .map(|n| leader_run(&server, &journal, n, "killed", &options, "60"))
        .collect();
    let (started, _) = wait_for_starts(&journal, 1);
    let first = started[0].clone();
    let at = runs.iter().position(|r| r.id() == first.lockctl).unwrap();
    let mut killed = runs.remove(at);
    signal(killed.id(), libc::SIGKILL);
    let kill_at = Instant::now();
    killed.wait().unwrap();
    let (started, seen) = wait_for_starts(&journal, 2);
    let takeover = seen.duration_since(kill_at);
    assert!(!alive(first.pid), "the command died with its lockctl");
    assert!(started[1].term > first.term);
    assert_one_at_a_time(&journal, &[first.pid]);
    assert!(
        takeover < lease + Duration::from_secs(5),
        "the follower leads about one {lease:?} lease after the kill, not {takeover:?}"
    );
    eprintln!("take-over after SIGKILL with a {lease:?} lease: {takeover:?}");
    for run in runs {
        signal(run.id(), libc::SIGKILL);
        let _ = finish(run, LONG);
    }
}

/// Leadership lost while the command runs (an operator's `release
/// --force` of the role's lock): lockctl sends the command SIGTERM,
/// SIGKILL after --grace (this command ignores SIGTERM for a minute), then
/// campaigns again and runs it in a new, higher term.
#[test]
fn a_lost_leadership_stops_the_command_and_campaigns_again() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let journal = dir.path().join("journal");
    let options = ["--lease", "3s", "--backoff", "50ms", "--grace", "1s"];
    let run = leader_run(&server, &journal, 0, "lost", &options, "60");
    let (started, _) = wait_for_starts(&journal, 1);
    let output = complete(lockctl(&server).args(["release", "--force", "leader:lost"]));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let (started_again, _) = wait_for_starts(&journal, 2);
    assert!(!alive(started[0].pid), "the first command was killed");
    assert!(started_again[1].term > started[0].term);
    assert_one_at_a_time(&journal, &[started[0].pid]);
    assert_eq!(started_again[1].lockctl, run.id(), "the same lockctl");
    signal(run.id(), libc::SIGKILL);
    let _ = finish(run, LONG);
    let err = read(&journal.with_extension("0.err"));
    assert!(err.contains("lost the leadership of role `lost`"), "{err}");
}

/// A SIGTERM that reaches lockctl while it stops the command of a lost
/// term (within --grace) ends lockctl (143) once the command is gone,
/// instead of a new campaign.
#[test]
fn a_signal_while_stopping_a_lost_term_ends_lockctl() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let journal = dir.path().join("journal");
    let options = ["--lease", "3s", "--backoff", "50ms", "--grace", "10s"];
    let run = leader_run(&server, &journal, 0, "lost-stop", &options, "60");
    wait_for_starts(&journal, 1);
    let output = complete(lockctl(&server).args(["release", "--force", "leader:lost-stop"]));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let err = journal.with_extension("0.err");
    wait_until("lockctl to see the loss", || {
        read(&err).contains("lost the leadership")
    });
    signal(run.id(), libc::SIGTERM);
    let output = finish(run, LONG);
    assert_eq!(code(&output), 143, "{}", read(&err));
    assert_eq!(starts(&journal).len(), 1, "no new term after the signal");
}

/// A command that exits by itself: without --once the role is resigned and
/// won again (a new term each time); with --once lockctl exits with the
/// command's code and the role is resigned at once (nobody leads, long
/// before the 30 s lease would end).
#[test]
fn a_command_that_exits_resigns_and_once_exits_with_its_code() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let journal = dir.path().join("terms");
    let again = lockctl(&server)
        .args(["leader", "run", "again", "--backoff", "10ms", "--"])
        .args(["sh", "-c", r#"echo "$LEADER_TERM" >> "$JOURNAL"; exit 3"#])
        .env("JOURNAL", &journal)
        .spawn()
        .unwrap();
    wait_until("three terms", || read(&journal).lines().count() >= 3);
    signal(again.id(), libc::SIGKILL);
    let output = finish(again, LONG);
    let terms: Vec<u64> = read(&journal).lines().map(|l| l.parse().unwrap()).collect();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
    assert!(
        stderr(&output).contains("exited with 3"),
        "{}",
        stderr(&output)
    );

    let started = Instant::now();
    let once = complete(lockctl(&server).args([
        "leader", "run", "once", "--once", "--", "sh", "-c", "exit 7",
    ]));
    assert_eq!(code(&once), 7, "{}", stderr(&once));
    let status = complete(lockctl(&server).args(["leader", "status", "once"]));
    assert_eq!(code(&status), 3, "resigned: nobody leads");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "not by the lease's end"
    );
}

/// `leader status` with and without a leader (its JSON fields, exit 0 and
/// 3), and the role's lock in `top` as a leader with its record.
#[test]
fn status_and_top_show_the_leader() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let journal = dir.path().join("journal");
    let options = [
        "--lease",
        "10s",
        "--metadata",
        "http://10.0.0.7:8080",
        "--grace",
        "20s",
    ];
    let run = leader_run(&server, &journal, 0, "sched", &options, "0");
    let (started, _) = wait_for_starts(&journal, 1);
    let term = started[0].term;

    let output = complete(lockctl(&server).args(["leader", "status", "sched", "--json"]));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["role"], "sched");
    assert_eq!(status["name"], "leader:sched");
    assert_eq!(status["server"], format!("127.0.0.1:{}", server.port()));
    assert_eq!(status["led"], true);
    assert_eq!(status["term"], term);
    assert_eq!(status["metadata"], "http://10.0.0.7:8080");
    let client = status["client_id"].as_str().unwrap();
    let owner = status["owner"].as_str().unwrap();
    assert!(owner.starts_with(&format!("{client}:")), "{owner}");
    let left = status["lease_left_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 10_000, "{left}");
    let since_ms = status["since_ms"].as_u64().unwrap();
    let since = status["since"].as_str().unwrap();
    let parsed = humantime_millis(since);
    assert_eq!(parsed, since_ms, "since and since_ms are the same instant");

    let text = complete(lockctl(&server).args(["leader", "status", "sched"]));
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains(&format!("term {term}")), "{text}");
    assert!(text.contains("\"http://10.0.0.7:8080\""), "{text}");

    let output = complete(lockctl(&server).args(["top", "--json"]));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let row = rows
        .iter()
        .find(|r| r["name"] == "leader:sched")
        .unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(row["kind"], "leader");
    assert_eq!(row["role"], "sched");
    assert_eq!(row["term"], term);
    assert_eq!(row["fencing_token"], term);
    assert_eq!(row["metadata"], "http://10.0.0.7:8080");
    assert_eq!(row["since"], since);
    let output = complete(lockctl(&server).args(["top", "--kind", "leader"]));
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("leader") && l.contains("leader:sched")),
        "{table}"
    );

    signal(run.id(), libc::SIGTERM);
    assert_eq!(code(&finish(run, LONG)), 0);
    let output = complete(lockctl(&server).args(["leader", "status", "sched", "--json"]));
    assert_eq!(code(&output), 3, "nobody leads: exit 3");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["led"], false);
    assert!(status["term"].is_null() && status["metadata"].is_null());
}

/// Milliseconds since the epoch of an RFC 3339 time `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn humantime_millis(text: &str) -> u64 {
    let output = std::process::Command::new("date")
        .args(["-u", "-d", text, "+%s%3N"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap()
}

/// Usage errors exit 64 before anything touches Redis (here a port nobody
/// listens on, which would exit 69), each on one line.
#[test]
fn usage_errors_exit_64_before_redis() {
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let cases: &[&[&str]] = &[
        &["leader", "run", "", "--", "true"],
        &["leader", "run", "r"],
        &["leader", "run", "r", "--lease", "1ms", "--", "true"],
        &["leader", "run", "r", "--backoff", "soon", "--", "true"],
        &["--redlock", &url, "leader", "run", "r", "--", "true"],
        &["--layout", "redisson", "leader", "status", "r"],
        &["--redlock", &url, "leader", "watch", "r"],
        &["leader", "status", ""],
        // An option lockctl does not know, before the command: never the command.
        &["leader", "run", "r", "--no-such-option", "1s", "--", "true"],
    ];
    for args in cases {
        let output = complete(bare_lockctl().arg("--url").arg(&url).args(*args));
        assert_eq!(code(&output), 64, "{args:?}: {}", stderr(&output));
        let text = stderr(&output);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.starts_with("lockctl: "), "{text}");
    }
    let output = complete(
        bare_lockctl()
            .arg("--url")
            .arg(&url)
            .args(["leader", "status", "r"]),
    );
    assert_eq!(code(&output), 69, "the same port, reached: unreachable");
}

/// The client guide's ACL rule for a lock client is enough for `leader
/// run`, `leader status` and `leader watch`.
#[test]
fn the_client_acl_rule_is_enough_for_leader_commands() {
    let rule = "on >pw ~lock:* ~distlock:layouts &lock:* -@all +evalsha +script|load \
                +subscribe +unsubscribe +hget +hkeys +pttl +incr +get +set +time +hset +pexpire \
                +hexists +hdel +del +publish";
    let mut options = ServerOptions::new().arg("--user").arg("locker");
    for part in rule.split_whitespace() {
        options = options.arg(part);
    }
    let server = RedisServer::start_with(options);
    let url = server.url_with_auth("locker", "pw");
    let dir = temp_dir();
    let journal = dir.path().join("journal");
    let watched = dir.path().join("watch.jsonl");
    let err = File::create(journal.with_extension("err")).unwrap();
    let run = bare_lockctl()
        .args([
            "--url", &url, "leader", "run", "acl", "--", "sh", "-c", COMMAND,
        ])
        .env("JOURNAL", &journal)
        .env("STOP_DELAY", "0")
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    let (started, _) = wait_for_starts(&journal, 1);
    let output =
        complete(bare_lockctl().args(["--url", &url, "leader", "status", "acl", "--json"]));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["term"], started[0].term);
    let watch = bare_lockctl()
        .args(["--url", &url, "leader", "watch", "acl", "--json"])
        .stdout(File::create(&watched).unwrap())
        .spawn()
        .unwrap();
    wait_until("watch to print the leader", || {
        watch_lines(&watched)
            .first()
            .is_some_and(|l| l["term"] == started[0].term)
    });
    signal(watch.id(), libc::SIGTERM);
    assert_eq!(code(&finish(watch, LONG)), 0);
    signal(run.id(), libc::SIGTERM);
    assert_eq!(code(&finish(run, LONG)), 0);
    let err = read(&journal.with_extension("err"));
    assert!(!err.contains("NOPERM"), "{err}");
}

/// On a cluster and on Sentinel: a SIGTERMed leader hands over to the
/// other `leader run` with a higher term, and `status`, `watch` and `top`
/// show the leader.
#[test]
fn leader_commands_on_cluster_and_sentinel() {
    let cluster = RedisCluster::start(3, 0);
    let sentinels = RedisSentinels::start("leadermaster");
    let backends = [
        vec!["--cluster".to_owned(), cluster.urls()[0].clone()],
        vec![
            "--sentinel".to_owned(),
            sentinels.sentinel_urls().join(","),
            "--master".to_owned(),
            "leadermaster".to_owned(),
        ],
    ];
    for backend in &backends {
        let dir = temp_dir();
        let journal = dir.path().join("journal");
        let watched = dir.path().join("watch.jsonl");
        let mut watch = bare_lockctl()
            .args(backend)
            .args(["leader", "watch", "ha", "--json"])
            .stdout(File::create(&watched).unwrap())
            .spawn()
            .unwrap();
        wait_until("watch to start", || !watch_lines(&watched).is_empty());
        let options = ["--lease", "20s", "--backoff", "50ms", "--metadata", "m"];
        let mut runs: Vec<Child> = (0..2)
            .map(|n| leader_run_on(backend, &journal, n, "ha", &options, "0"))
            .collect();
        let (started, _) = wait_for_starts(&journal, 1);
        let first = started[0].clone();

        let output = complete(
            bare_lockctl()
                .args(backend)
                .args(["leader", "status", "ha", "--json"]),
        );
        assert_eq!(code(&output), 0, "{backend:?}: {}", stderr(&output));
        let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(status["term"], first.term, "{backend:?}");
        assert_eq!(status["metadata"], "m", "{backend:?}");
        let output = complete(bare_lockctl().args(backend).args(["top", "--json"]));
        assert_eq!(code(&output), 0, "{backend:?}: {}", stderr(&output));
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
        assert!(
            rows.iter()
                .any(|r| r["kind"] == "leader" && r["role"] == "ha" && r["term"] == first.term),
            "{backend:?}: {rows:?}"
        );

        let at = runs.iter().position(|r| r.id() == first.lockctl).unwrap();
        let leader = runs.remove(at);
        signal(leader.id(), libc::SIGTERM);
        assert_eq!(code(&finish(leader, LONG)), 0, "{backend:?}");
        let (started, _) = wait_for_starts(&journal, 2);
        assert!(started[1].term > first.term, "{backend:?}");
        wait_until("watch to print the second term", || {
            watch_lines(&watched)
                .iter()
                .any(|l| l["term"] == started[1].term)
        });
        for run in runs {
            signal(run.id(), libc::SIGTERM);
            assert_eq!(code(&finish(run, LONG)), 0, "{backend:?}");
        }
        assert_one_at_a_time(&journal, &[]);
        let seen: Vec<u64> = watch_lines(&watched)
            .iter()
            .filter_map(|l| l["term"].as_u64())
            .collect();
        assert_eq!(seen[..2], [first.term, started[1].term], "{backend:?}");
        signal(watch.id(), libc::SIGTERM);
        let _ = watch.wait();
    }
}
