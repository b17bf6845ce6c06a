//! `lockctl` as operators and shell jobs use it: real `lockctl` processes,
//! real commands under them, a real `redis-server` per test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::thread::sleep;
use std::time::{Duration, Instant};

mod common;

use common::*;
use lock_test_support::{free_port, RedisCluster, RedisMasters, RedisServer, ServerOptions};

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or_else(|| {
        panic!(
            "lockctl was killed: {:?}; stderr: {}",
            output.status,
            stderr(output)
        )
    })
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// lockctl's stderr is exactly one `lockctl: ...` line, without panics or backtraces.
fn one_error_line(output: &Output) -> String {
    let text = stderr(output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "not one line: {text:?}");
    assert!(lines[0].starts_with("lockctl: "), "{text}");
    assert!(
        !text.contains("panicked") && !text.contains("backtrace"),
        "{text}"
    );
    lines[0].to_owned()
}

/// Starts `lockctl run --key <key> ...` holding `key` with a command that
/// records its pid in `<dir>/<key>.pid` and then runs `script`; returns once
/// the command is running.
fn start_holder(
    server: &RedisServer,
    dir: &Path,
    key: &str,
    options: &[&str],
    script: &str,
) -> (Child, u32) {
    let pid_file = dir.join(format!("{}.pid", key.replace(':', "_")));
    let child = lockctl(server)
        .args(["run", "--key", key])
        .args(options)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "echo $$ > '{}.tmp' && mv '{0}.tmp' '{0}'; {script}",
            pid_file.display()
        ))
        .spawn()
        .unwrap();
    wait_until("the command to start", || pid_file.exists());
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (child, pid)
}

fn signal(pid: u32, signo: i32) {
    let sent = unsafe_kill(pid, signo);
    assert_eq!(sent, 0, "kill({pid}, {signo}) failed");
}

#[allow(unsafe_code)]
fn unsafe_kill(pid: u32, signo: i32) -> i32 {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, signo) }
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

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("lockctl-test-")
        .tempdir()
        .unwrap()
}

fn read(path: &PathBuf) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn json(output: &Output) -> serde_json::Value {
    assert_eq!(code(output), 0, "{}", stderr(output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}

/// 8 concurrent `lockctl run` processes append start/end lines to one file:
/// the pairs never interleave and their fencing tokens increase.
#[test]
fn eight_concurrent_runs_never_interleave() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let file = dir.path().join("journal");
    const RUNS: usize = 8;
    let children: Vec<Child> = (0..RUNS)
        .map(|i| {
            let mut cmd = bare_lockctl();
            // Half find the server through REDIS_URL, half through --url.
            if i % 2 == 0 {
                cmd.env("REDIS_URL", server.url());
            } else {
                cmd.arg("--url").arg(server.url());
            }
            cmd.args(["run", "--key", "journal", "--wait", "120s", "--"])
                .args(["sh", "-c"])
                .arg(
                    "echo \"start $LOCK_FENCING_TOKEN $LOCK_KEY\" >> \"$JOURNAL\"; sleep 0.1; \
                     echo \"end $LOCK_FENCING_TOKEN $LOCK_KEY\" >> \"$JOURNAL\"",
                )
                .env("JOURNAL", &file)
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let output = finish(child, Duration::from_secs(120));
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    let journal = read(&file);
    let lines: Vec<&str> = journal.lines().collect();
    assert_eq!(lines.len(), 2 * RUNS, "{journal}");
    let mut last_token = 0;
    for pair in lines.chunks(2) {
        let start: Vec<&str> = pair[0].split(' ').collect();
        let end: Vec<&str> = pair[1].split(' ').collect();
        assert_eq!(
            (start[0], end[0]),
            ("start", "end"),
            "interleaved:\n{journal}"
        );
        assert_eq!(start[1], end[1], "interleaved:\n{journal}");
        assert_eq!((start[2], end[2]), ("journal", "journal"));
        let token: u64 = start[1].parse().unwrap();
        assert!(token > last_token, "tokens not increasing:\n{journal}");
        last_token = token;
    }
    assert!(!exists(&server, "lock:{journal}"), "left held");
}

#[test]
fn exit_codes_for_success_child_failure_and_signals() {
    let server = RedisServer::start();
    let run = |script: &str| {
        complete(
            lockctl(&server)
                .args(["run", "--key", "codes", "--", "sh", "-c"])
                .arg(script),
        )
    };
    let ok = run("echo \"$LOCK_KEY $LOCK_FENCING_TOKEN\"");
    assert_eq!(code(&ok), 0, "{}", stderr(&ok));
    // The token: at least the server's clock in microseconds.
    let out = stdout(&ok);
    let first = out
        .strip_prefix("codes ")
        .and_then(|t| t.trim_end().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(first > 1_700_000_000_000_000, "{out}");
    assert_eq!(stderr(&ok), "");
    let failed = run("exit 3");
    assert_eq!(code(&failed), 3);
    assert_eq!(stderr(&failed), "");
    let killed = run("kill -KILL $$");
    assert_eq!(code(&killed), 128 + libc::SIGKILL);
    // Each run released the lock.
    assert!(!exists(&server, "lock:{codes}"));
    // Its fencing counter (the only one on this server) issued three tokens: it holds
    // the last, at least two above the first.
    let counters: Vec<String> = redis::cmd("KEYS")
        .arg("lock:fence:*")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(counters.len(), 1, "{counters:?}");
    let fence: u64 = redis::cmd("GET")
        .arg(&counters[0])
        .query(&mut server.conn())
        .unwrap();
    assert!(fence >= first + 2, "{fence} after {first}");

    let missing =
        complete(lockctl(&server).args(["run", "--key", "codes", "--", "/nonexistent/cmd"]));
    assert_eq!(code(&missing), 127);
    let line = one_error_line(&missing);
    assert!(
        line.contains("/nonexistent/cmd") && line.contains("`codes`"),
        "{line}"
    );
    assert!(!exists(&server, "lock:{codes}"));
}

#[test]
fn exit_codes_for_busy_and_skip() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let (mut holder, _) = start_holder(&server, dir.path(), "busy", &[], "sleep 60");
    let marker = dir.path().join("ran");
    let attempt = |options: &[&str]| {
        complete(
            lockctl(&server)
                .args(["run", "--key", "busy"])
                .args(options)
                .args(["--", "touch"])
                .arg(&marker),
        )
    };

    let busy = attempt(&[]);
    assert_eq!(code(&busy), 75);
    let line = one_error_line(&busy);
    assert!(line.contains("`busy`"), "{line}");
    assert!(
        line.contains(&format!("127.0.0.1:{}", server.port())),
        "{line}"
    );

    assert_eq!(code(&attempt(&["--conflict-exit-code", "9"])), 9);

    let started = Instant::now();
    let timed_out = attempt(&["--wait", "400ms"]);
    assert_eq!(code(&timed_out), 75);
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(one_error_line(&timed_out).contains("timed out"));

    let skipped = attempt(&["--on-busy", "skip"]);
    assert_eq!(code(&skipped), 0);
    assert_eq!(stderr(&skipped), "", "skip is silent");
    assert!(!marker.exists(), "a busy run ran its command");

    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// Deleting the lock under a running command: lockctl notices at the next
/// renewal, terminates the command and exits 80.
#[test]
fn lost_lease_terminates_the_command() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let log = dir.path().join("log");
    let (holder, pid) = start_holder(
        &server,
        dir.path(),
        "lost",
        &["--lease", "2s", "--kill-after", "20s"],
        &format!(
            // (stderr off: the shell reports the `sleep` that SIGTERM ends)
            "exec 2>/dev/null; trap 'echo terminated >> \"{}\"; exit 0' TERM; \
             while :; do sleep 0.05; done",
            log.display()
        ),
    );
    sleep(Duration::from_millis(2_500)); // renewals keep it alive past its lease
    assert!(exists(&server, "lock:{lost}"));
    let () = redis::cmd("DEL")
        .arg("lock:{lost}")
        .query(&mut server.conn())
        .unwrap();
    let output = finish(holder, LONG);
    assert_eq!(code(&output), 80, "{}", stderr(&output));
    let line = one_error_line(&output);
    assert!(
        line.contains("lost the lease") && line.contains("`lost`"),
        "{line}"
    );
    assert!(
        line.contains(&format!("127.0.0.1:{}", server.port())),
        "{line}"
    );
    assert_eq!(read(&log), "terminated\n");
    assert!(!alive(pid), "the command still runs");
}

/// A command that ignores SIGTERM is killed after --kill-after.
#[test]
fn lost_lease_kills_a_command_that_ignores_sigterm() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let (holder, pid) = start_holder(
        &server,
        dir.path(),
        "stubborn",
        &[
            "--lease",
            "900ms",
            "--kill-after",
            "500ms",
            "--lost-exit-code",
            "90",
        ],
        "trap '' TERM; while :; do sleep 0.05; done",
    );
    let () = redis::cmd("DEL")
        .arg("lock:{stubborn}")
        .query(&mut server.conn())
        .unwrap();
    let deleted = Instant::now();
    let output = finish(holder, LONG);
    assert_eq!(code(&output), 90, "{}", stderr(&output));
    assert!(deleted.elapsed() >= Duration::from_millis(500));
    assert!(!alive(pid), "the command survived SIGKILL");
}

/// SIGTERM, SIGINT and SIGHUP sent to lockctl reach the command, and the
/// lock is released when it exits.
#[test]
fn signals_are_forwarded_and_the_lock_released() {
    let server = RedisServer::start();
    let dir = temp_dir();
    for signo in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let (holder, pid) = start_holder(&server, dir.path(), "signal", &[], "exec sleep 60");
        signal(holder.id(), signo);
        let output = finish(holder, LONG);
        assert_eq!(code(&output), 128 + signo, "{}", stderr(&output));
        assert!(!alive(pid));
        assert!(!exists(&server, "lock:{signal}"), "not released");
        std::fs::remove_file(dir.path().join("signal.pid")).unwrap();
    }

    // A command that handles the signal exits with its own code; a waiter
    // gets the lock once it is released.
    let (holder, _) = start_holder(
        &server,
        dir.path(),
        "signal",
        &[],
        "trap 'exit 7' TERM; while :; do sleep 0.05; done",
    );
    let waiter = lockctl(&server)
        .args(["run", "--key", "signal", "--wait", "60s", "--", "true"])
        .spawn()
        .unwrap();
    sleep(Duration::from_millis(300));
    signal(holder.id(), libc::SIGTERM);
    let output = finish(holder, LONG);
    assert_eq!(code(&output), 7, "{}", stderr(&output));
    let output = finish(waiter, LONG);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

/// lockctl killed outright (no chance to forward anything): the command
/// gets SIGTERM from the kernel, and the lock expires after its lease.
#[test]
fn the_command_does_not_outlive_a_killed_lockctl() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let (mut holder, pid) = start_holder(
        &server,
        dir.path(),
        "orphan",
        &["--lease", "1s"],
        // Outlives the test's patience if the kernel does not end it.
        "exec sleep 300",
    );
    signal(holder.id(), libc::SIGKILL);
    holder.wait().unwrap();
    wait_until("the command to end", || !alive(pid));
    wait_until("the lock to expire", || !exists(&server, "lock:{orphan}"));
}

/// A signal while waiting for the lock ends the wait: no command runs.
#[test]
fn a_signal_while_waiting_ends_the_wait() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let (mut holder, _) = start_holder(&server, dir.path(), "queue", &[], "sleep 60");
    let marker = dir.path().join("ran");
    let waiter = lockctl(&server)
        .args(["run", "--key", "queue", "--wait", "forever", "--", "touch"])
        .arg(&marker)
        .spawn()
        .unwrap();
    sleep(Duration::from_millis(500));
    signal(waiter.id(), libc::SIGTERM);
    let output = finish(waiter, LONG);
    assert_eq!(code(&output), 128 + libc::SIGTERM);
    assert!(one_error_line(&output).contains("interrupted by SIGTERM"));
    assert!(!marker.exists());
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn status_and_list_show_what_is_held() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let token_of = |key: &str| -> u64 {
        read(&dir.path().join(format!("{key}.token")))
            .trim()
            .parse()
            .unwrap()
    };
    let mut holders = Vec::new();
    for key in ["report:a", "report:b", "other:c"] {
        let script = format!(
            "echo $LOCK_FENCING_TOKEN > '{}/{key}.token'; sleep 60",
            dir.path().display()
        );
        holders.push(start_holder(&server, dir.path(), key, &[], &script).0);
    }

    let status = json(&complete(
        lockctl(&server).args(["status", "report:a", "--json"]),
    ));
    assert_eq!(status["name"], "report:a");
    assert_eq!(status["key"], "lock:{report:a}");
    assert_eq!(status["held"], true);
    assert_eq!(status["holds"], 1);
    assert_eq!(status["fencing_token"], token_of("report:a"));
    assert_eq!(status["last_fencing_token"], token_of("report:a"));
    let owner = status["owner"].as_str().unwrap();
    let client_id = status["client_id"].as_str().unwrap();
    assert!(owner.starts_with(&format!("{client_id}:")), "{owner}");
    let ttl = status["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    assert_eq!(status["server"], format!("127.0.0.1:{}", server.port()));

    let text = complete(lockctl(&server).args(["status", "report:a"]));
    assert_eq!(code(&text), 0);
    let text = stdout(&text);
    assert!(text.contains("held") && text.contains(owner), "{text}");

    let names = |value: serde_json::Value| -> Vec<String> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|lock| lock["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let all = json(&complete(lockctl(&server).args(["list", "--json"])));
    assert_eq!(names(all.clone()), ["other:c", "report:a", "report:b"]);
    assert_eq!(all[1]["owner"], owner);
    let reports = json(&complete(
        lockctl(&server).args(["list", "--prefix", "report:", "--json"]),
    ));
    assert_eq!(names(reports), ["report:a", "report:b"]);
    let table = complete(lockctl(&server).arg("list"));
    let table = stdout(&table);
    assert!(table.starts_with("NAME"), "{table}");
    assert_eq!(table.lines().count(), 4, "{table}");
    assert!(table.contains("report:b"), "{table}");

    // Another key prefix sees none of them.
    let elsewhere = json(&complete(lockctl(&server).args([
        "--key-prefix",
        "jobs:",
        "list",
        "--json",
    ])));
    assert_eq!(names(elsewhere), Vec::<String>::new());

    for mut holder in holders {
        signal(holder.id(), libc::SIGTERM);
        holder.wait().unwrap();
    }
    let free = json(&complete(
        lockctl(&server).args(["status", "report:a", "--json"]),
    ));
    assert_eq!(free["held"], false);
    assert_eq!(free["holds"], 0);
    assert_eq!(free["owner"], serde_json::Value::Null);
    assert_eq!(free["last_fencing_token"], token_of("report:a"));
    let empty = complete(lockctl(&server).arg("list"));
    assert_eq!(code(&empty), 0);
    assert_eq!(stdout(&empty), "");
}

#[test]
fn key_prefix_option_and_environment() {
    let server = RedisServer::start();
    let ran = complete(
        lockctl(&server)
            .args([
                "--key-prefix",
                "jobs:",
                "run",
                "--key",
                "k",
                "--",
                "sh",
                "-c",
            ])
            .arg("redis-cli -p \"$PORT\" exists 'jobs:{k}'")
            .env("PORT", server.port().to_string()),
    );
    assert_eq!(code(&ran), 0, "{}", stderr(&ran));
    assert_eq!(stdout(&ran).trim(), "1");
    let ran = complete(
        lockctl(&server)
            .args(["run", "--key", "k", "--", "sh", "-c"])
            .arg("redis-cli -p \"$PORT\" exists 'env:{k}'")
            .env("PORT", server.port().to_string())
            .env("LOCK_KEY_PREFIX", "env:"),
    );
    assert_eq!(code(&ran), 0, "{}", stderr(&ran));
    assert_eq!(stdout(&ran).trim(), "1");
}

/// `release --force` deletes a held lock and wakes a waiter at once; without
/// --force it refuses. The old holder's run notices and exits 80.
#[test]
fn redisson_layout_shows_runs_and_releases_redissons_locks() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    // A Redisson RFencedLock holder: hash = name, field <uuid>:<thread>, count 1.
    let field = "0750326f-e9e0-4f20-982c-06fca8347b85:1";
    let _: () = redis::cmd("HSET")
        .arg("order:7")
        .arg(field)
        .arg(1)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("PEXPIRE")
        .arg("order:7")
        .arg(30_000)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("redisson_lock_token:{order:7}")
        .arg(41)
        .query(&mut conn)
        .unwrap();

    let status =
        complete(lockctl(&server).args(["--layout", "redisson", "status", "order:7", "--json"]));
    assert_eq!(code(&status), 0, "{}", stderr(&status));
    let status = json(&status);
    assert_eq!(status["owner"], field, "{status}");
    assert_eq!(status["holds"], 1, "{status}");
    assert_eq!(status["last_fencing_token"], 41, "{status}");

    // Busy while Redisson holds it; the layout's own keys, not lock:{order:7}.
    let busy = complete(lockctl(&server).args([
        "--layout", "redisson", "run", "--key", "order:7", "--", "true",
    ]));
    assert_eq!(code(&busy), 75, "{}", stderr(&busy));
    // (Two layouts on one store on purpose: the mix is declared.)
    let native = complete(lockctl(&server).args([
        "--allow-mixed-layouts",
        "run",
        "--key",
        "order:7",
        "--",
        "true",
    ]));
    assert_eq!(code(&native), 0, "{}", stderr(&native));

    let released =
        complete(lockctl(&server).args(["--layout", "redisson", "release", "--force", "order:7"]));
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    assert!(!exists(&server, "order:7"));
    // The next token of RFencedLock's counter (41, lifted to the server's clock in
    // microseconds: tokens never repeat after the counter is lost), in Redisson's hash
    // layout; the counter holds it.
    let run = complete(
        lockctl(&server)
            .args([
                "--layout",
                "redisson",
                "--allow-mixed-layouts",
                "run",
                "--key",
                "order:7",
                "--",
                "sh",
                "-c",
                "echo $LOCK_FENCING_TOKEN; redis-cli -p $PORT hvals order:7",
            ])
            .env("PORT", server.port().to_string()),
    );
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let out = stdout(&run);
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words.len(), 2, "{out}");
    assert_eq!(words[1], "1", "{out}");
    let token: u64 = words[0].parse().unwrap();
    assert!(token > 1_700_000_000_000_000, "{out}");
    let counter: u64 = redis::cmd("GET")
        .arg("redisson_lock_token:{order:7}")
        .query(&mut conn)
        .unwrap();
    assert_eq!(counter, token);

    // No list in this layout: a usage error, one line.
    let list = complete(lockctl(&server).args(["--layout", "redisson", "list"]));
    assert_eq!(code(&list), 64, "{}", stderr(&list));
    assert!(
        one_error_line(&list).contains("Redisson"),
        "{}",
        stderr(&list)
    );
}

#[test]
fn release_force_lets_a_waiter_in() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let (holder, holder_pid) = start_holder(&server, dir.path(), "stuck", &[], "sleep 60");
    let marker = dir.path().join("waiter-ran");
    let waiter = lockctl(&server)
        .args(["run", "--key", "stuck", "--wait", "60s", "--", "touch"])
        .arg(&marker)
        .spawn()
        .unwrap();
    sleep(Duration::from_millis(500));

    let refused = complete(lockctl(&server).args(["release", "stuck"]));
    assert_eq!(code(&refused), 64);
    assert!(one_error_line(&refused).contains("--force"));
    assert!(exists(&server, "lock:{stuck}"));

    let released_at = Instant::now();
    let released = complete(lockctl(&server).args(["release", "--force", "stuck"]));
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    assert!(
        stdout(&released).contains("released lock `stuck`"),
        "{}",
        stdout(&released)
    );
    let output = finish(waiter, LONG);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(marker.exists());
    // Woken by the release, not by the holder's 30 s lease running out.
    assert!(
        released_at.elapsed() < Duration::from_secs(15),
        "{:?}",
        released_at.elapsed()
    );

    // The old holder finds out at its next renewal (10 s with the default lease).
    let output = finish(holder, LONG);
    assert_eq!(code(&output), 80, "{}", stderr(&output));
    assert!(!alive(holder_pid));

    let again = output_of_release(&server);
    assert!(again.contains("was not held"), "{again}");
}

fn output_of_release(server: &RedisServer) -> String {
    stdout(&complete(
        lockctl(server).args(["release", "--force", "stuck"]),
    ))
}

#[test]
fn bad_input_is_one_line_and_no_panic() {
    let server = RedisServer::start();
    let usage = |args: &[&str]| {
        let output = complete(lockctl(&server).args(args));
        assert_eq!(code(&output), 64, "{args:?}: {}", stderr(&output));
        one_error_line(&output)
    };
    assert!(usage(&["run", "--key", "k", "--wait", "10x", "--", "true"]).contains("10x"));
    assert!(usage(&["run", "--key", "k", "--lease", "1ms", "--", "true"]).contains("lease"));
    assert!(usage(&["run", "--key", "k"]).contains("COMMAND"));
    assert!(usage(&["run", "--", "true"]).contains("--key"));
    assert!(usage(&["run", "--key", "", "--", "true"]).contains("invalid lock name"));
    assert!(usage(&["status", &"x".repeat(2000)]).contains("invalid lock name"));
    assert!(usage(&["frobnicate"]).contains("frobnicate"));
    let bad_url = complete(bare_lockctl().args(["--url", "not a url", "status", "k"]));
    assert_eq!(code(&bad_url), 64);
    assert!(one_error_line(&bad_url).contains("`k`"));

    // An unreachable server: named, with the lock, exit 69.
    let port = free_port();
    for args in [
        vec!["run", "--key", "k", "--", "true"],
        vec!["status", "k"],
        vec!["release", "--force", "k"],
    ] {
        let output = complete(
            bare_lockctl()
                .arg("--url")
                .arg(format!("redis://127.0.0.1:{port}/"))
                .args(&args),
        );
        assert_eq!(code(&output), 69, "{args:?}");
        let line = one_error_line(&output);
        assert!(line.contains("`k`"), "{line}");
        assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    }
    let output = complete(
        bare_lockctl()
            .arg("--url")
            .arg(format!("redis://127.0.0.1:{port}/"))
            .arg("list"),
    );
    assert_eq!(code(&output), 69);
    assert!(one_error_line(&output).contains(&format!("127.0.0.1:{port}")));

    // A missing TLS file.
    let output =
        complete(lockctl(&server).args(["--tls-ca-cert", "/nonexistent.pem", "status", "k"]));
    assert_eq!(code(&output), 66);
    assert!(one_error_line(&output).contains("/nonexistent.pem"));

    // A key of another type.
    let () = redis::cmd("SET")
        .arg("lock:{text}")
        .arg("x")
        .query(&mut server.conn())
        .unwrap();
    let output = complete(lockctl(&server).args(["status", "text"]));
    assert_eq!(code(&output), 65);
    assert!(one_error_line(&output).contains("`text`"));
    let output = complete(lockctl(&server).args(["run", "--key", "text", "--", "true"]));
    assert_eq!(code(&output), 65);
    one_error_line(&output);
}

#[test]
fn wrong_password_is_one_line_without_the_password() {
    let server = RedisServer::start_with(ServerOptions::new().acl_user("ops", "right"));
    let output = complete(
        bare_lockctl()
            .arg("--url")
            .arg(server.url_with_auth("ops", "wrong-secret"))
            .args(["status", "k"]),
    );
    assert_eq!(code(&output), 69);
    let line = one_error_line(&output);
    assert!(!line.contains("wrong-secret"), "{line}");
    assert!(line.contains("`k`"), "{line}");
}

#[test]
fn every_command_has_help_with_examples() {
    for command in [
        &[][..],
        &["run"],
        &["status"],
        &["list"],
        &["release"],
        &["top"],
    ] {
        let output = complete(bare_lockctl().args(command).arg("--help"));
        assert_eq!(code(&output), 0, "{command:?}");
        let help = stdout(&output);
        assert!(help.contains("Examples:"), "{command:?}: {help}");
        assert!(help.contains("lockctl"), "{command:?}: {help}");
    }
    let run = stdout(&complete(bare_lockctl().args(["run", "--help"])));
    for needle in [
        "Exit codes:",
        "75",
        "80",
        "--conflict-exit-code",
        "LOCK_FENCING_TOKEN",
    ] {
        assert!(run.contains(needle), "{needle}: {run}");
    }
    let bare = complete(&mut bare_lockctl());
    assert_eq!(code(&bare), 64);
}

/// The README's ACL rule for lockctl is enough for every command.
#[test]
fn the_readme_acl_rule_is_enough_for_lockctl() {
    let rule = "on >pw ~lock:* &lock:* -@all +evalsha +script|load \
                +subscribe +unsubscribe +hget +pttl +incr +get +set +time +hset +pexpire +hexists +hdel +del +publish \
                +scan +type +hgetall";
    let mut options = ServerOptions::new().arg("--user").arg("ops");
    for part in rule.split_whitespace() {
        options = options.arg(part);
    }
    let server = RedisServer::start_with(options);
    let url = server.url_with_auth("ops", "pw");
    let with_acl = |args: &[&str]| {
        let output = complete(bare_lockctl().arg("--url").arg(&url).args(args));
        assert_eq!(code(&output), 0, "{args:?}: {}", stderr(&output));
        stdout(&output)
    };
    let listed = with_acl(&[
        "run",
        "--key",
        "acl",
        "--",
        env!("CARGO_BIN_EXE_lockctl"),
        "--url",
        &url,
        "list",
    ]);
    assert!(listed.contains("acl"), "{listed}");
    assert!(with_acl(&["status", "acl"]).contains("free"));
    assert!(with_acl(&["release", "--force", "acl"]).contains("not held"));
}

#[test]
fn runs_on_redlock_and_cluster_backends() {
    // Redlock over 3 masters: the job runs under a lock held on a majority.
    let masters = RedisMasters::start(3);
    let urls = masters.urls().join(",");
    let out = complete(
        bare_lockctl()
            .args(["--redlock", &urls, "run", "--key", "job:rl", "--"])
            .args(["sh", "-c", "echo token=$LOCK_FENCING_TOKEN"]),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).starts_with("token="), "{}", stdout(&out));
    for server in masters.servers() {
        assert!(!exists(server, "lock:{job:rl}"), "left locked on a master");
    }
    // Busy when a majority is held by someone else.
    let holder = start_holder_with(bare_lockctl().args(["--redlock", &urls]), "job:rl");
    let busy =
        complete(bare_lockctl().args(["--redlock", &urls, "run", "--key", "job:rl", "--", "true"]));
    assert_eq!(code(&busy), 75, "{}", stderr(&busy));
    stop_holder(holder);

    // A cluster, through one seed node: status sees the holder.
    let cluster = RedisCluster::start(3, 0);
    let seed = cluster.urls()[0].clone();
    let holder = start_holder_with(bare_lockctl().args(["--cluster", &seed]), "job:cl");
    let status = complete(bare_lockctl().args(["--cluster", &seed, "status", "job:cl", "--json"]));
    assert_eq!(code(&status), 0, "{}", stderr(&status));
    assert_eq!(json(&status)["held"], true, "{}", stdout(&status));
    stop_holder(holder);
}

/// Starts `cmd run --key name -- sleep 60` and waits until it holds the lock
/// (its command has started).
fn start_holder_with(cmd: &mut Command, name: &str) -> (Child, tempfile::TempDir) {
    let dir = temp_dir();
    let marker = dir.path().join("started");
    let child = cmd
        .args(["run", "--key", name, "--", "sh", "-c"])
        .arg(format!("touch {}; sleep 60", marker.display()))
        .spawn()
        .unwrap();
    wait_until("the holder started its command", || marker.exists());
    (child, dir)
}

fn stop_holder((mut child, _dir): (Child, tempfile::TempDir)) {
    signal(child.id(), libc::SIGTERM);
    let _ = child.wait();
}

/// The sorted keys of a JSON object.
fn fields(value: &serde_json::Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

/// `lockctl status <args> --json`, parsed.
fn status_json(server: &RedisServer, args: &[&str]) -> serde_json::Value {
    json(&complete(
        lockctl(server).arg("status").args(args).arg("--json"),
    ))
}

/// Waits until `path` exists, failing early (with its output) if `child`
/// exited first.
fn wait_for_file(path: &Path, child: &mut Child) {
    let deadline = Instant::now() + LONG;
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(stderr) = child.stderr.as_mut() {
                let _ = std::io::Read::read_to_string(stderr, &mut err);
            }
            panic!(
                "lockctl exited ({status}) before {} appeared: {err}",
                path.display()
            );
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {}",
            path.display()
        );
        sleep(Duration::from_millis(20));
    }
}

/// `lockctl run --key <key> <options> -- sh -c <script>` with `D` = `dir`.
fn spawn_run(server: &RedisServer, dir: &Path, key: &str, options: &[&str], script: &str) -> Child {
    lockctl(server)
        .args(["run", "--key", key])
        .args(options)
        .args(["--", "sh", "-c", script])
        .env("D", dir)
        .spawn()
        .unwrap()
}

/// A script that records the start of `$0` (its name), waits for the file
/// `go`, and records its end.
const HOLD_UNTIL_GO: &str =
    "touch \"$D/$0.in\"; while [ ! -e \"$D/go\" ]; do sleep 0.05; done; touch \"$D/$0.out\"";

/// 4 concurrent `run --permits 2` processes: never more than 2 commands run
/// at once, and 2 do run together.
#[test]
fn run_permits_runs_at_most_n_commands_at_once() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let script = "touch \"$D/run.$$\"; ls \"$D\" | grep -c '^run\\.' >> \"$D/counts\"; \
                  sleep 2; rm \"$D/run.$$\"";
    let children: Vec<Child> = (0..4)
        .map(|_| {
            spawn_run(
                &server,
                dir.path(),
                "pool",
                &["--permits", "2", "--wait", "60s"],
                script,
            )
        })
        .collect();
    for child in children {
        let output = finish(child, LONG);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    let counts: Vec<u32> = read(&dir.path().join("counts"))
        .lines()
        .map(|n| n.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 4, "every command ran: {counts:?}");
    assert_eq!(
        counts.iter().max(),
        Some(&2),
        "at most 2 at once, and 2 together: {counts:?}"
    );
    // The permits were given back.
    let status = status_json(&server, &["pool", "--semaphore"]);
    assert_eq!(status["in_use"], 0);
}

/// Two `run --read` hold the read lock together; `run --write` waits for
/// both and keeps new readers out while it waits (writers first); `status
/// --read-write` shows the readers, the waiting writer, then the writer.
#[test]
fn run_read_shares_and_run_write_waits_for_the_readers() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let d = dir.path();
    let mut r1 = lockctl(&server)
        .args([
            "run",
            "--key",
            "prices",
            "--read",
            "--",
            "sh",
            "-c",
            HOLD_UNTIL_GO,
            "r1",
        ])
        .env("D", d)
        .spawn()
        .unwrap();
    wait_for_file(&d.join("r1.in"), &mut r1);
    // A second reader gets in at once, without waiting.
    let mut r2 = lockctl(&server)
        .args([
            "run",
            "--key",
            "prices",
            "--read",
            "--",
            "sh",
            "-c",
            HOLD_UNTIL_GO,
            "r2",
        ])
        .env("D", d)
        .spawn()
        .unwrap();
    wait_for_file(&d.join("r2.in"), &mut r2);

    let writer_script = "test -e \"$D/r1.out\" && test -e \"$D/r2.out\" || exit 9; \
                         echo $LOCK_FENCING_TOKEN > \"$D/w.token.tmp\"; mv \"$D/w.token.tmp\" \"$D/w.token\"; \
                         while [ ! -e \"$D/go2\" ]; do sleep 0.05; done";
    let mut writer = spawn_run(
        &server,
        d,
        "prices",
        &["--write", "--wait", "60s"],
        writer_script,
    );
    wait_until("the writer to wait", || {
        status_json(&server, &["prices", "--read-write"])["waiting_writers"]
            .as_array()
            .is_some_and(|w| w.len() == 1)
    });
    // Writers first: a new reader is busy while the writer waits.
    let late = complete(lockctl(&server).args(["run", "--key", "prices", "--read", "--", "true"]));
    assert_eq!(code(&late), 75, "{}", stderr(&late));
    assert!(one_error_line(&late).contains("1 writer waiting"));

    let status = status_json(&server, &["prices", "--read-write"]);
    assert_eq!(
        fields(&status),
        [
            "key",
            "kind",
            "last_fencing_token",
            "name",
            "readers",
            "server",
            "state",
            "waiting_writers",
            "writer"
        ]
    );
    assert_eq!(status["name"], "prices");
    assert_eq!(status["kind"], "read_write");
    assert_eq!(status["key"], "lock:{prices}:rw");
    assert_eq!(status["state"], "read");
    assert_eq!(status["writer"], serde_json::Value::Null);
    let readers = status["readers"].as_array().unwrap();
    assert_eq!(readers.len(), 2);
    for reader in readers {
        assert_eq!(fields(reader), ["client_id", "owner", "ttl_ms"]);
        let ttl = reader["ttl_ms"].as_u64().unwrap();
        assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    }
    assert_ne!(readers[0]["owner"], readers[1]["owner"]);
    let waiting = &status["waiting_writers"][0];
    assert_eq!(fields(waiting), ["client_id", "owner", "place_ttl_ms"]);
    let place = waiting["place_ttl_ms"].as_u64().unwrap();
    assert!(place > 0 && place <= 5_000, "{place}");
    let text = stdout(&complete(lockctl(&server).args([
        "status",
        "prices",
        "--read-write",
    ])));
    assert!(text.contains("read-held by 2 readers"), "{text}");
    assert!(text.contains("1 writer"), "{text}");
    assert!(
        text.contains(readers[0]["owner"].as_str().unwrap()),
        "{text}"
    );

    std::fs::write(d.join("go"), "").unwrap();
    for reader in [r1, r2] {
        let output = finish(reader, LONG);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    wait_for_file(&d.join("w.token"), &mut writer);
    let token: u64 = read(&d.join("w.token")).trim().parse().unwrap();
    let status = status_json(&server, &["prices", "--read-write"]);
    assert_eq!(status["state"], "write");
    assert_eq!(status["readers"], serde_json::json!([]));
    assert_eq!(status["waiting_writers"], serde_json::json!([]));
    let holder = &status["writer"];
    assert_eq!(
        fields(holder),
        ["client_id", "fencing_token", "owner", "ttl_ms"]
    );
    assert_eq!(holder["fencing_token"], token);
    std::fs::write(d.join("go2"), "").unwrap();
    let output = finish(writer, LONG);
    assert_eq!(
        code(&output),
        0,
        "the writer ran after both readers: {}",
        stderr(&output)
    );
    assert_eq!(
        status_json(&server, &["prices", "--read-write"])["state"],
        "free"
    );
}

/// `run --fair` waiters run in the order they asked; `status --fair` shows
/// the holder and the queue in that order; `release --force --fair` hands
/// the lock to the head of the queue.
#[test]
fn run_fair_goes_in_arrival_order_and_status_shows_the_queue() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let d = dir.path();
    let mut holder = lockctl(&server)
        .args([
            "run",
            "--key",
            "deploy",
            "--fair",
            "--lease",
            "3s",
            "--",
            "sh",
            "-c",
            HOLD_UNTIL_GO,
            "h",
        ])
        .env("D", d)
        .spawn()
        .unwrap();
    wait_for_file(&d.join("h.in"), &mut holder);
    let mut waiters = Vec::new();
    for i in 1..=3 {
        let script = format!("echo {i} >> \"$D/order\"; sleep 0.2");
        waiters.push(spawn_run(
            &server,
            d,
            "deploy",
            &["--fair", "--wait", "60s"],
            &script,
        ));
        wait_until("the waiter to queue", || {
            status_json(&server, &["deploy", "--fair"])["queue"]
                .as_array()
                .is_some_and(|q| q.len() == i)
        });
    }
    let status = status_json(&server, &["deploy", "--fair"]);
    assert_eq!(
        fields(&status),
        [
            "client_id",
            "fencing_token",
            "held",
            "holds",
            "key",
            "kind",
            "last_fencing_token",
            "name",
            "owner",
            "queue",
            "server",
            "ttl_ms"
        ]
    );
    assert_eq!(status["kind"], "fair");
    assert_eq!(status["key"], "lock:{deploy}:fair");
    assert_eq!(status["held"], true);
    assert_eq!(status["holds"], 1);
    let queue = status["queue"].as_array().unwrap();
    assert_eq!(queue.len(), 3);
    for waiter in queue {
        assert_eq!(fields(waiter), ["client_id", "owner", "place_ttl_ms"]);
        assert_ne!(waiter["owner"], status["owner"]);
    }
    let text = stdout(&complete(
        lockctl(&server).args(["status", "deploy", "--fair"]),
    ));
    assert!(text.contains("3 waiting"), "{text}");
    assert!(
        text.contains(&format!("1. {}", queue[0]["owner"].as_str().unwrap())),
        "{text}"
    );
    // The plain lock of the same name is another lock.
    assert_eq!(status_json(&server, &["deploy"])["held"], false);

    // An operator takes the lock from the stuck holder: the head gets it.
    let released = complete(lockctl(&server).args(["release", "--force", "deploy", "--fair"]));
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    let line = stdout(&released);
    assert!(line.contains("released fair lock `deploy`"), "{line}");
    assert!(line.contains("handed to the head of its queue"), "{line}");
    for waiter in waiters {
        let output = finish(waiter, LONG);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
    }
    assert_eq!(read(&d.join("order")), "1\n2\n3\n", "arrival order");
    // The old holder finds out at its next renewal.
    let output = finish(holder, LONG);
    assert_eq!(code(&output), 80, "{}", stderr(&output));
    let status = status_json(&server, &["deploy", "--fair"]);
    assert_eq!(status["held"], false);
    assert_eq!(status["queue"], serde_json::json!([]));
}

/// `status --semaphore` shows each holder's permits and the permits in use;
/// `release --force --semaphore` gives them all back.
#[test]
fn status_and_release_of_a_semaphore() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let d = dir.path();
    let mut holders = Vec::new();
    for (name, take) in [("two", "2"), ("one", "1")] {
        let mut holder = lockctl(&server)
            .args([
                "run",
                "--key",
                "exports",
                "--permits",
                "5",
                "--take",
                take,
                "--lease",
                "3s",
            ])
            .args(["--", "sh", "-c", HOLD_UNTIL_GO, name])
            .env("D", d)
            .spawn()
            .unwrap();
        wait_for_file(&d.join(format!("{name}.in")), &mut holder);
        holders.push(holder);
    }
    // 3 of 5 in use: 3 more do not fit.
    let busy = complete(lockctl(&server).args([
        "run",
        "--key",
        "exports",
        "--permits",
        "5",
        "--take",
        "3",
        "--",
        "true",
    ]));
    assert_eq!(code(&busy), 75);
    assert!(one_error_line(&busy).contains("3 of 5 permits in use by 2 holders"));

    let status = status_json(&server, &["exports", "--semaphore"]);
    assert_eq!(
        fields(&status),
        [
            "holders",
            "in_use",
            "key",
            "kind",
            "last_fencing_token",
            "name",
            "server"
        ]
    );
    assert_eq!(status["kind"], "semaphore");
    assert_eq!(status["key"], "lock:{exports}:sem");
    assert_eq!(status["in_use"], 3);
    let mut permits: Vec<u64> = status["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            assert_eq!(fields(h), ["client_id", "owner", "permits", "ttl_ms"]);
            assert!(h["ttl_ms"].as_u64().unwrap() <= 3_000);
            h["permits"].as_u64().unwrap()
        })
        .collect();
    permits.sort_unstable();
    assert_eq!(permits, [1, 2]);
    let text = stdout(&complete(lockctl(&server).args([
        "status",
        "exports",
        "--semaphore",
    ])));
    assert!(text.contains("3 permits by 2 holders"), "{text}");

    let released =
        complete(lockctl(&server).args(["release", "--force", "exports", "--semaphore"]));
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    let line = stdout(&released);
    assert!(
        line.contains("released semaphore `exports`")
            && line.contains("3 permits held by 2 holders"),
        "{line}"
    );
    assert_eq!(
        status_json(&server, &["exports", "--semaphore"])["in_use"],
        0
    );
    for holder in holders {
        let output = finish(holder, LONG);
        assert_eq!(code(&output), 80, "{}", stderr(&output));
    }
    let again = stdout(&complete(lockctl(&server).args([
        "release",
        "--force",
        "exports",
        "--semaphore",
    ])));
    assert!(
        again.contains("semaphore `exports`") && again.contains("was not held"),
        "{again}"
    );
    let again = stdout(&complete(lockctl(&server).args([
        "release",
        "--force",
        "exports",
        "--read-write",
    ])));
    assert!(
        again.contains("read-write lock `exports`") && again.contains("was not held"),
        "{again}"
    );
}

/// Conflicting or out-of-range lock options, and the family on Redlock, are
/// usage errors (64) on one line, before anything is taken.
#[test]
fn family_options_are_checked() {
    let server = RedisServer::start();
    let usage = |cmd: &mut Command| {
        let output = complete(cmd);
        assert_eq!(code(&output), 64, "{}", stderr(&output));
        one_error_line(&output)
    };
    let run = |options: &[&str]| {
        let mut cmd = lockctl(&server);
        cmd.args(["run", "--key", "k"])
            .args(options)
            .args(["--", "true"]);
        usage(&mut cmd)
    };
    assert!(run(&["--read", "--write"]).contains("--write"));
    assert!(run(&["--fair", "--permits", "2"]).contains("--permits"));
    assert!(run(&["--take", "2"]).contains("--permits"));
    assert!(run(&["--permits", "0"]).contains("--permits"));
    assert!(run(&["--permits", "2", "--take", "3"]).contains("at most --permits"));
    assert!(
        usage(lockctl(&server).args(["status", "k", "--fair", "--semaphore"]))
            .contains("--semaphore")
    );
    assert!(
        usage(lockctl(&server).args(["release", "--force", "k", "--read-write", "--fair"]))
            .contains("--fair")
    );
    for args in [
        &["run", "--key", "k", "--read", "--", "true"][..],
        &["status", "k", "--semaphore"],
        &["release", "--force", "k", "--fair"],
    ] {
        let line = usage(bare_lockctl().args(["--redlock", &server.url()]).args(args));
        assert!(line.contains("not available on Redlock"), "{line}");
    }
    assert!(!exists(&server, "lock:{k}:rw:read"));
    let help = stdout(&complete(bare_lockctl().args(["run", "--help"])));
    for needle in ["--read", "--write", "--fair", "--permits", "--take"] {
        assert!(help.contains(needle), "{needle}: {help}");
    }
}

/// The README's ACL rule for the lock family is enough for lockctl's
/// family options.
#[test]
fn the_readme_family_acl_rule_is_enough_for_lockctl() {
    let rule = "on >pw ~lock:* &lock:* -@all +evalsha +script|load \
                +subscribe +unsubscribe +hget +pttl +incr +get +set +time +hset +pexpire +hexists +hdel +del +publish \
                +exists +zadd +zrange +zrangebyscore +zrem +zremrangebyscore +zscore +zcard \
                +hkeys +hvals +pexpireat +type +hgetall";
    let mut options = ServerOptions::new().arg("--user").arg("ops");
    for part in rule.split_whitespace() {
        options = options.arg(part);
    }
    let server = RedisServer::start_with(options);
    let url = server.url_with_auth("ops", "pw");
    let with_acl = |args: &[&str]| {
        let output = complete(bare_lockctl().arg("--url").arg(&url).args(args));
        assert_eq!(code(&output), 0, "{args:?}: {}", stderr(&output));
        stdout(&output)
    };
    let me = env!("CARGO_BIN_EXE_lockctl");
    for (option, status) in [
        (&["--read"][..], &["--read-write"][..]),
        (&["--write"], &["--read-write"]),
        (&["--fair"], &["--fair"]),
        (&["--permits", "2", "--take", "2"], &["--semaphore"]),
    ] {
        let mut args = vec!["run", "--key", "acl"];
        args.extend_from_slice(option);
        args.extend_from_slice(&["--", me, "--url", &url, "status", "acl", "--json"]);
        args.extend_from_slice(status);
        let seen: serde_json::Value = serde_json::from_str(&with_acl(&args)).unwrap();
        let held = seen["held"] == true
            || seen["state"] != "free" && seen["state"].is_string()
            || seen["in_use"] == 2;
        assert!(held, "{option:?}: {seen}");
    }
    for family in ["--fair", "--read-write", "--semaphore"] {
        assert!(with_acl(&["release", "--force", "acl", family]).contains("was not held"));
    }
}

#[test]
fn layouts_lists_the_store_layouts_and_flags_two() {
    let server = RedisServer::start();
    let layouts = |args: &[&str]| complete(lockctl(&server).args(args).arg("layouts"));
    // Nothing recorded yet; looking (status, list, layouts) records nothing.
    let empty = layouts(&[]);
    assert_eq!(code(&empty), 0, "{}", stderr(&empty));
    assert_eq!(stdout(&empty), "");
    assert!(
        stderr(&empty).contains("no layout recorded"),
        "{}",
        stderr(&empty)
    );
    assert_eq!(code(&complete(lockctl(&server).args(["status", "a"]))), 0);
    assert_eq!(
        code(&complete(
            lockctl(&server).args(["--layout", "redisson", "status", "a"])
        )),
        0
    );
    assert_eq!(stdout(&layouts(&["--layout", "redisson"])), "");
    // `run` takes a lock in Redisson's layout: recorded; lockctl looking in the native
    // layout afterwards does not add it.
    let run = complete(
        lockctl(&server).args(["--layout", "redisson", "run", "--key", "r", "--", "true"]),
    );
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let one = layouts(&[]);
    assert_eq!(
        (code(&one), stdout(&one).as_str()),
        (0, "redisson\n"),
        "{}",
        stderr(&one)
    );
    let listed = complete(lockctl(&server).args(["layouts", "--json"]));
    assert_eq!(json(&listed), serde_json::json!(["redisson"]));
    // A native `run` is refused there, as a library client is: exit 65, the
    // command not run, nothing recorded.
    let refused = complete(lockctl(&server).args(["run", "--key", "n", "--", "echo", "ran"]));
    assert_eq!(code(&refused), 65, "{}", stderr(&refused));
    assert_eq!(stdout(&refused), "");
    for part in ["native", "redisson", "--allow-mixed-layouts", "--forget"] {
        assert!(stderr(&refused).contains(part), "{}", stderr(&refused));
    }
    assert_eq!(stdout(&layouts(&[])), "redisson\n");
    // With the mix declared it runs: two layouts, exit 65 and a warning.
    let run = complete(lockctl(&server).args([
        "--allow-mixed-layouts",
        "run",
        "--key",
        "n",
        "--",
        "true",
    ]));
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let two = layouts(&[]);
    assert_eq!(code(&two), 65, "{}", stderr(&two));
    assert_eq!(stdout(&two), "native\nredisson\n");
    assert!(
        stderr(&two).contains("do not exclude each other"),
        "{}",
        stderr(&two)
    );
    // The migration is over: forget the Redisson layout; a Redisson-layout
    // `run` is refused from then on, and forgetting it twice says so.
    let forgot = complete(lockctl(&server).args(["layouts", "--forget", "redisson"]));
    assert_eq!(
        (code(&forgot), stdout(&forgot).as_str()),
        (0, "native\n"),
        "{}",
        stderr(&forgot)
    );
    assert!(
        stderr(&forgot).contains("forgot layout redisson"),
        "{}",
        stderr(&forgot)
    );
    let again = complete(lockctl(&server).args(["layouts", "--forget", "redisson"]));
    assert!(
        stderr(&again).contains("no record of layout redisson"),
        "{}",
        stderr(&again)
    );
    let run = complete(
        lockctl(&server).args(["--layout", "redisson", "run", "--key", "r", "--", "true"]),
    );
    assert_eq!(code(&run), 65, "{}", stderr(&run));
}
