//! `lockctl` as cron and its operators meet it: the at-least hold across
//! real `lockctl` processes, usage errors before anything touches Redis,
//! every exit code the lockctl guide documents, completions and man pages.

use std::io::ErrorKind;
use std::net::TcpListener;
use std::path::Path;
use std::process::Output;

mod common;

use common::*;
use lock_test_support::{RedisServer, ServerOptions};

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or_else(|| {
        panic!(
            "lockctl was killed: {:?}; stderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("lockctl-cron-")
        .tempdir()
        .unwrap()
}

/// The cron windows, and the hosts firing in each.
const WINDOWS: usize = 6;
const HOSTS: usize = 3;

/// Host `host`'s cron firing in window `window`: `lockctl run --on-busy skip`
/// of a job that only appends `<window> <host>` to `runs` (a job much shorter
/// than the gap between the hosts' timers).
fn fire(server: &RedisServer, runs: &Path, window: usize, host: usize, at_least: &[&str]) {
    let output = complete(
        lockctl(server)
            .args(["run", "--key", "report:nightly", "--on-busy", "skip"])
            .args(at_least)
            .args(["--", "sh", "-c"])
            .arg(format!("echo '{window} {host}' >> '{}'", runs.display())),
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

/// The runs of each window, from the lines the jobs appended.
fn runs_per_window(runs: &Path) -> Vec<Vec<usize>> {
    let mut per_window = vec![Vec::new(); WINDOWS];
    for line in std::fs::read_to_string(runs).unwrap_or_default().lines() {
        let (window, host) = line.split_once(' ').unwrap();
        per_window[window.parse::<usize>().unwrap()].push(host.parse().unwrap());
    }
    per_window
}

/// Three hosts fire the same cron entry in each window, one after the other
/// (the worst case: each host's timer fires after the previous host's short
/// job has finished and released the lock). `--on-busy skip` alone runs the
/// job on every host in every window; with `--at-least` the lock outlives
/// the job, so the later hosts find it busy: exactly one run per window, the
/// first host's.
#[test]
fn at_least_makes_one_run_per_window_across_three_processes() {
    let server = RedisServer::start();
    let dir = temp_dir();

    // Before: --on-busy skip alone.
    let naive = dir.path().join("naive");
    for window in 0..WINDOWS {
        for host in 0..HOSTS {
            fire(&server, &naive, window, host, &[]);
        }
    }
    let naive_runs: usize = runs_per_window(&naive).iter().map(Vec::len).sum();
    eprintln!("--on-busy skip alone: {naive_runs} runs in {WINDOWS} windows");
    assert!(
        naive_runs > WINDOWS,
        "without --at-least the windows ran more than once each: {:?}",
        runs_per_window(&naive)
    );

    // After: held at least 3 s, far longer than a lockctl start-up on a busy
    // machine, and the next window starts only once the hold has ended.
    let held = dir.path().join("held");
    for window in 0..WINDOWS {
        fire(&server, &held, window, 0, &["--at-least", "3s"]);
        // The job is done and lockctl has exited, yet the lock is still held.
        let ttl: i64 = redis::cmd("PTTL")
            .arg("lock:{report:nightly}")
            .query(&mut server.conn())
            .unwrap();
        assert!(ttl > 0, "window {window}: the lock was released ({ttl})");
        for host in 1..HOSTS {
            fire(&server, &held, window, host, &["--at-least", "3s"]);
        }
        wait_until("the at-least hold to end", || {
            !exists(&server, "lock:{report:nightly}")
        });
    }
    let per_window = runs_per_window(&held);
    eprintln!("with --at-least 3s: {per_window:?}");
    assert_eq!(
        per_window,
        vec![vec![0]; WINDOWS],
        "one run per window, the first host's"
    );
}

/// An option lockctl does not know, before the command, is exit 64 before
/// anything touches Redis. Before, it became the command: the lock was taken,
/// then running `--at-leest` failed with 127.
#[test]
fn an_unknown_option_is_a_usage_error_before_redis_is_touched() {
    // Nothing but a listening socket: lockctl must not even connect.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let output = complete(
        bare_lockctl()
            .arg("--url")
            .arg(format!("redis://127.0.0.1:{port}/"))
            .args(["run", "--key", "cron:probe", "--on-busy", "skip"])
            .args(["--at-leest", "900ms", "--", "true"]),
    );
    assert_eq!(code(&output), 64, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--at-leest"),
        "{}",
        stderr(&output)
    );
    match listener.accept() {
        Err(err) if err.kind() == ErrorKind::WouldBlock => {}
        other => panic!("lockctl connected to Redis: {other:?}"),
    }

    // A real server: no lock, no fence counter, no script, no command run.
    let server = RedisServer::start();
    let dir = temp_dir();
    let marker = dir.path().join("ran");
    server.reset_command_stats();
    for options in [&["--at-leest", "900ms"][..], &["--no-such-flag"], &["-Z"]] {
        let output = complete(
            lockctl(&server)
                .args(["run", "--key", "cron:probe"])
                .args(options)
                .args(["--", "touch"])
                .arg(&marker),
        );
        assert_eq!(code(&output), 64, "{options:?}: {}", stderr(&output));
    }
    assert!(!marker.exists(), "the command ran");
    assert_eq!(server.dbsize(), 0, "a key was written");
    assert_eq!(server.command_calls("evalsha"), 0);
    assert_eq!(server.command_calls("eval"), 0);
    assert_eq!(server.command_calls("hello"), 0, "lockctl connected");
}

/// Each row of the exit-code table of `src/guide/lockctl.md`, in its order.
/// (70, an internal error, needs a bug of lockctl to happen.)
#[test]
fn every_exit_code_the_guide_documents() {
    let server = RedisServer::start();
    let dir = temp_dir();
    let run = |options: &[&str], script: &str| {
        complete(
            lockctl(&server)
                .args(["run", "--key", "codes"])
                .args(options)
                .args(["--", "sh", "-c", script]),
        )
    };
    let is = |output: Output, expected: i32, what: &str| {
        assert_eq!(code(&output), expected, "{what}: {}", stderr(&output));
    };

    // 0: the command exited 0; a busy lock under --on-busy skip; the admin commands.
    is(run(&[], "exit 0"), 0, "command exited 0");
    is(
        complete(lockctl(&server).args(["status", "codes"])),
        0,
        "status",
    );
    is(complete(lockctl(&server).args(["list"])), 0, "list");
    is(complete(lockctl(&server).args(["top"])), 0, "top snapshot");
    is(
        complete(lockctl(&server).args(["release", "--force", "codes"])),
        0,
        "release --force",
    );
    // 1-255: the command's code; 128+N for signal N.
    is(run(&[], "exit 3"), 3, "command's code");
    is(run(&[], "kill -TERM $$"), 128 + libc::SIGTERM, "signal");

    // 64: a bad option or value, conflicting options, an unknown option before
    // the command, an invalid lock name, release without --force, the family on
    // Redlock.
    for (args, what) in [
        (
            &["run", "--key", "k", "--wait", "10x", "--", "true"][..],
            "bad value",
        ),
        (
            &["run", "--key", "k", "--at-least", "1x", "--", "true"],
            "bad --at-least",
        ),
        (
            &["run", "--key", "k", "--read", "--write", "--", "true"],
            "conflict",
        ),
        (
            &["run", "--key", "k", "--bogus", "--", "true"],
            "unknown option",
        ),
        (&["run", "--key", "", "--", "true"], "invalid lock name"),
        (&["release", "codes"], "release without --force"),
    ] {
        is(complete(lockctl(&server).args(args)), 64, what);
    }
    is(
        complete(bare_lockctl().args(["--redlock", &server.url(), "status", "k", "--fair"])),
        64,
        "the family on Redlock",
    );

    // 65: a key of the lock holds another type.
    let () = redis::cmd("SET")
        .arg("lock:{text}")
        .arg("x")
        .query(&mut server.conn())
        .unwrap();
    is(
        complete(lockctl(&server).args(["run", "--key", "text", "--", "true"])),
        65,
        "wrong type",
    );
    // 66: a TLS file cannot be read.
    is(
        complete(lockctl(&server).args(["--tls-ca-cert", "/nonexistent.pem", "status", "k"])),
        66,
        "TLS file",
    );
    // 69: Redis unreachable, or refusing the credentials.
    let nobody = TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("redis://127.0.0.1:{}/", nobody.local_addr().unwrap().port());
    drop(nobody);
    is(
        complete(bare_lockctl().args(["--url", &closed, "run", "--key", "k", "--", "true"])),
        69,
        "unreachable",
    );
    let acl = RedisServer::start_with(ServerOptions::new().acl_user("ops", "right"));
    is(
        complete(
            bare_lockctl()
                .arg("--url")
                .arg(acl.url_with_auth("ops", "wrong"))
                .args(["status", "k"]),
        ),
        69,
        "credentials refused",
    );
    // 73: man --dir cannot write its pages.
    is(
        complete(bare_lockctl().args(["man", "--dir", "/nonexistent/man1"])),
        73,
        "man --dir",
    );

    // 75: busy (and --conflict-exit-code); 80: the lease lost while it ran.
    let started = dir.path().join("started");
    let holder = lockctl(&server)
        .args(["run", "--key", "codes", "--lease", "1s", "--", "sh", "-c"])
        .arg(format!("touch '{}'; sleep 30", started.display()))
        .spawn()
        .unwrap();
    wait_until("the holder's command", || started.exists());
    is(run(&[], "true"), 75, "busy");
    is(
        run(&["--conflict-exit-code", "9"], "true"),
        9,
        "--conflict-exit-code",
    );
    is(
        complete(lockctl(&server).args(["release", "--force", "codes"])),
        0,
        "release --force of a held lock",
    );
    is(finish(holder, LONG), 80, "lease lost");

    // 126, 127: the command cannot be executed, or is not found.
    let not_executable = dir.path().join("job.sh");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    is(
        complete(
            lockctl(&server)
                .args(["run", "--key", "codes", "--"])
                .arg(&not_executable),
        ),
        126,
        "not executable",
    );
    is(
        complete(lockctl(&server).args(["run", "--key", "codes", "--", "/nonexistent/job"])),
        127,
        "not found",
    );
}

/// `lockctl completions SHELL` and `lockctl man` print what clap's own
/// generators make of the command line, with every command and option, and
/// touch no Redis.
#[test]
fn completions_and_man_pages_come_from_the_command_line() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!(
        "redis://127.0.0.1:{}/",
        listener.local_addr().unwrap().port()
    );
    let print = |args: &[&str]| {
        let output = complete(bare_lockctl().args(["--url", &url]).args(args));
        assert_eq!(code(&output), 0, "{args:?}: {}", stderr(&output));
        String::from_utf8(output.stdout).unwrap()
    };
    for (shell, marker) in [
        ("bash", "complete -F _lockctl"),
        ("zsh", "#compdef lockctl"),
        ("fish", "complete -c lockctl"),
        ("elvish", "edit:completion:arg-completer[lockctl]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let script = print(&["completions", shell]);
        assert!(script.contains(marker), "{shell}: {script}");
        for word in ["run", "status", "top", "at-least", "on-busy"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    // The bash script is valid shell.
    let script = print(&["completions", "bash"]);
    let check = std::process::Command::new("bash")
        .args(["-n", "-c", &script])
        .status()
        .unwrap();
    assert!(check.success(), "bash -n rejects the completion script");

    let page = print(&["man"]);
    assert!(page.contains(".TH lockctl 1"), "{page}");
    for word in ["completions", "Exit codes", "release"] {
        assert!(page.contains(word), "the man page lacks {word}");
    }
    let dir = temp_dir();
    print(&["man", "--dir", dir.path().to_str().unwrap()]);
    let run = std::fs::read_to_string(dir.path().join("lockctl-run.1")).unwrap();
    assert!(run.contains(".TH lockctl-run 1"), "{run}");
    assert!(run.contains("at\\-least"), "{run}");
    for command in [
        "status",
        "list",
        "release",
        "layouts",
        "top",
        "completions",
        "man",
    ] {
        assert!(
            dir.path().join(format!("lockctl-{command}.1")).exists(),
            "no page for {command}"
        );
    }
    match listener.accept() {
        Err(err) if err.kind() == ErrorKind::WouldBlock => {}
        other => panic!("lockctl connected to Redis: {other:?}"),
    }
}
