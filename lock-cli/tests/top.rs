//! `lockctl top` against a real `redis-server`: one snapshot when stdout is
//! a pipe, and the live view in a real terminal (tmux).

use std::process::{Child, Command};
use std::thread::sleep;
use std::time::{Duration, Instant};

mod common;

use common::*;
use lock_test_support::{RedisCluster, RedisMasters, RedisSentinels, RedisServer, ServerOptions};

fn subscribers(server: &RedisServer, channel: &str) -> u64 {
    let pairs: Vec<(String, u64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut server.conn())
        .unwrap();
    pairs[0].1
}

/// A `lockctl run --key <name>` holding `name` (its command sleeps), once
/// the lock is taken.
fn hold(server: &RedisServer, name: &str) -> Child {
    let child = lockctl(server)
        .args(["run", "--key", name, "--", "sleep", "120"])
        .spawn()
        .unwrap();
    wait_until("the lock to be taken", || {
        exists(server, &format!("lock:{{{name}}}"))
    });
    child
}

/// A `lockctl run --key <name> --wait 2m` waiting for `name`, once it is
/// subscribed to the lock's wake-up channel.
fn wait_for(server: &RedisServer, name: &str) -> Child {
    let channel = format!("lock:{{{name}}}:released");
    let before = subscribers(server, &channel);
    let child = lockctl(server)
        .args(["run", "--key", name, "--wait", "2m", "--", "true"])
        .spawn()
        .unwrap();
    wait_until("the waiter to subscribe", || {
        subscribers(server, &channel) > before
    });
    child
}

/// Ends a `lockctl run` with SIGTERM (it releases the lock) and reaps it.
fn stop(mut child: Child) {
    #[allow(unsafe_code)]
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + LONG;
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "lockctl run did not stop");
        sleep(Duration::from_millis(10));
    }
}

fn token(server: &RedisServer, name: &str) -> u64 {
    let out = complete(lockctl(server).args(["status", name, "--json"]));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    status["fencing_token"].as_u64().expect("held")
}

/// The line of `text` about lock `name` (the header: `NAME`), split into
/// its columns from KIND on (a selected row's `>` left out): KIND NAME
/// HOLDER TOKEN [BAR] TTL HOLD WAITERS for a plain lock.
fn columns<'a>(text: &'a str, name: &str) -> Option<Vec<&'a str>> {
    text.lines()
        .map(|line| {
            let mut cols: Vec<&str> = line.split_whitespace().collect();
            if cols.first() == Some(&">") {
                cols.remove(0);
            }
            cols
        })
        .find(|cols| cols.get(1) == Some(&name))
}

/// The index of the line of `text` about lock `name`.
fn line_of(text: &str, name: &str) -> Option<usize> {
    text.lines().position(|line| columns(line, name).is_some())
}

/// Without a terminal, `lockctl top` prints one snapshot (a table, or JSON)
/// and exits 0: each held lock with its holder, token and lease, and the one
/// client waiting for `top:a`.
#[test]
fn without_a_terminal_top_prints_one_snapshot() {
    let server = RedisServer::start();
    let a = hold(&server, "top:a");
    let b = hold(&server, "top:b");
    let waiter = wait_for(&server, "top:a");
    let (token_a, token_b) = (token(&server, "top:a"), token(&server, "top:b"));

    server.reset_command_stats();
    let out = complete(lockctl(&server).arg("top"));
    // SCAN, never KEYS; the waiters of every lock in one PUBSUB NUMSUB.
    assert_eq!(server.command_calls("keys"), 0);
    assert!(server.command_calls("scan") > 0);
    assert_eq!(server.command_calls("pubsub|numsub"), 1);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("2 lock(s) in use"), "{text}");
    let header = columns(&text, "NAME").expect("a header");
    assert_eq!(header.last(), Some(&"WAITERS"), "{text}");
    let row_a = columns(&text, "top:a").unwrap_or_else(|| panic!("no top:a: {text}"));
    let row_b = columns(&text, "top:b").unwrap_or_else(|| panic!("no top:b: {text}"));
    // KIND NAME HOLDER TOKEN [BAR] TTL HOLD WAITERS
    assert_eq!(row_a[0], "lock", "{text}");
    assert_eq!(row_a[3], token_a.to_string(), "{text}");
    assert_eq!(row_b[3], token_b.to_string(), "{text}");
    assert!(row_a[4].starts_with("[#"), "{text}");
    assert_eq!(row_a.last(), Some(&"1"), "one waiter on top:a: {text}");
    assert_eq!(row_b.last(), Some(&"0"), "{text}");

    let out = complete(lockctl(&server).args(["top", "--json", "--prefix", "top:"]));
    assert_eq!(out.status.code(), Some(0));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["name"], "top:a");
    assert_eq!(rows[0]["kind"], "lock");
    assert_eq!(rows[0]["fencing_token"], token_a);
    assert_eq!(rows[0]["waiters"], 1);
    assert_eq!(rows[1]["waiters"], 0);
    assert!(rows[0]["owner"].as_str().is_some_and(|o| !o.is_empty()));
    assert!(rows[0]["ttl_ms"].as_u64().is_some_and(|t| t > 0));

    // The prefix filters.
    let out = complete(lockctl(&server).args(["top", "--prefix", "top:b"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(columns(&text, "top:a").is_none(), "{text}");
    assert!(columns(&text, "top:b").is_some(), "{text}");

    stop(a);
    stop(b);
    stop(waiter);
}

/// `lockctl <backend> top --json`: the rows.
fn top_json(backend: &[String]) -> Vec<serde_json::Value> {
    let out = complete(bare_lockctl().args(backend).args(["top", "--json"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    rows.as_array().unwrap().clone()
}

fn waiters_of(rows: &[serde_json::Value], name: &str) -> Option<u64> {
    rows.iter()
        .find(|row| row["name"] == name)
        .and_then(|row| row["waiters"].as_u64())
}

/// The waiters are counted on Redlock (the masters), on a cluster
/// (`SHARDNUMSUB` on the master of each lock's slot) and on Sentinel (the
/// master the sentinels name), per lock.
#[test]
fn top_counts_waiters_on_redlock_cluster_and_sentinel() {
    let masters = RedisMasters::start(3);
    let cluster = RedisCluster::start(3, 0);
    let sentinels = RedisSentinels::start("topmaster");
    let backends = [
        vec!["--redlock".to_owned(), masters.urls().join(",")],
        vec!["--cluster".to_owned(), cluster.urls()[0].clone()],
        vec![
            "--sentinel".to_owned(),
            sentinels.sentinel_urls().join(","),
            "--master".to_owned(),
            "topmaster".to_owned(),
        ],
    ];
    for backend in &backends {
        check_waiters_counted(backend);
    }
}

/// Over TLS with `--tls-ca-cert`: the waiter connections trust the CA too.
#[test]
fn top_counts_waiters_over_tls() {
    let server = RedisServer::start_with(ServerOptions::new().tls());
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, server.ca_cert_pem().unwrap()).unwrap();
    check_waiters_counted(&[
        "--url".to_owned(),
        server.url(),
        "--tls-ca-cert".to_owned(),
        ca.display().to_string(),
    ]);
}

/// Two locks held through `backend`, a client waiting for one of them:
/// every snapshot counts 1 waiter for it and none for the other.
fn check_waiters_counted(backend: &[String]) {
    let run = |name: &str, extra: &[&str]| {
        bare_lockctl()
            .args(backend)
            .args(["run", "--key", name])
            .args(extra)
            .spawn()
            .unwrap()
    };
    // Two locks in different cluster slots.
    let x = run("top:x", &["--", "sleep", "120"]);
    let y = run("top:y", &["--", "sleep", "120"]);
    wait_until("both locks listed", || {
        let rows = top_json(backend);
        waiters_of(&rows, "top:x") == Some(0) && waiters_of(&rows, "top:y") == Some(0)
    });
    let waiter = run("top:x", &["--wait", "2m", "--", "true"]);
    wait_until("the waiter counted", || {
        let rows = top_json(backend);
        waiters_of(&rows, "top:x") == Some(1) && waiters_of(&rows, "top:y") == Some(0)
    });
    // Every snapshot counts it (not one that asked the right node by chance).
    for _ in 0..6 {
        assert_eq!(
            waiters_of(&top_json(backend), "top:x"),
            Some(1),
            "{backend:?}"
        );
    }
    stop(waiter);
    stop(x);
    stop(y);
}

/// tmux on its own socket, removed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null")
            .args(args)
            .output()
            .expect("tmux runs");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn pane(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// Waits until the pane satisfies `check`, failing with the pane.
    fn wait_for(&self, what: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + LONG;
        loop {
            let pane = self.pane();
            if check(&pane) {
                return pane;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the pane:\n{pane}"
            );
            sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

fn tmux_available() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|out| out.status.success())
}

/// The live view in a real terminal: rows appear as locks are taken and
/// disappear as they are released, the waiter is counted, sort keys and the
/// filter work, `q` and Ctrl-C quit and give the shell its screen back.
#[test]
fn the_live_view_in_a_real_terminal() {
    if !tmux_available() {
        eprintln!("SKIPPED the_live_view_in_a_real_terminal: tmux is not installed");
        return;
    }
    let mut server = RedisServer::start();
    let tmux = Tmux {
        socket: format!("lockctl-top-{}", std::process::id()),
    };
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "160",
        "-y",
        "40",
        "env",
        "-i",
        "PATH=/usr/bin:/bin",
        "TERM=screen",
        "PS1=shell$ ",
        "sh",
    ]);
    let top = format!(
        "{} --url {} top --interval 300ms; echo TOP-EXITED-$?",
        env!("CARGO_BIN_EXE_lockctl"),
        server.url()
    );
    tmux.wait_for("the shell", |pane| pane.contains("shell$"));
    tmux.keys(&[&top, "Enter"]);
    tmux.wait_for("the view", |pane| {
        pane.contains("lockctl top")
            && pane.contains("WAITERS")
            && pane.contains("(no locks in use)")
    });

    let a = hold(&server, "top:a");
    let pane = tmux.wait_for("top:a", |pane| columns(pane, "top:a").is_some());
    let row = columns(&pane, "top:a").unwrap();
    assert_eq!(row[3], token(&server, "top:a").to_string(), "{pane}");
    assert_eq!(row.last(), Some(&"0"), "{pane}");

    let waiter = wait_for(&server, "top:a");
    tmux.wait_for("the waiter", |pane| {
        columns(pane, "top:a").is_some_and(|row| row.last() == Some(&"1"))
    });
    let b = hold(&server, "top:b");
    tmux.wait_for("top:b", |pane| columns(pane, "top:b").is_some());

    // Sorted by name: a above b; `n` again reverses; `s` goes to the next column.
    let pane = tmux.pane();
    assert!(line_of(&pane, "top:a") < line_of(&pane, "top:b"), "{pane}");
    tmux.keys(&["n"]);
    tmux.wait_for("the reversed sort", |pane| {
        pane.contains("sort name (reversed)")
            && line_of(pane, "top:b").is_some()
            && line_of(pane, "top:b") < line_of(pane, "top:a")
    });
    tmux.keys(&["s"]);
    tmux.wait_for("sort by owner", |pane| pane.contains("sort owner"));

    // The filter: only top:b.
    tmux.keys(&["/", "top:b", "Enter"]);
    tmux.wait_for("the filter", |pane| {
        pane.contains("prefix `top:b`")
            && columns(pane, "top:b").is_some()
            && columns(pane, "top:a").is_none()
    });
    tmux.keys(&[
        "/", "BSpace", "BSpace", "BSpace", "BSpace", "BSpace", "Enter",
    ]);
    tmux.wait_for("no filter", |pane| {
        pane.contains("prefix ``") && columns(pane, "top:a").is_some()
    });

    // Released: the row goes. top:a goes to its waiter, which exits at once.
    stop(b);
    tmux.wait_for("top:b to go", |pane| {
        columns(pane, "top:b").is_none() && columns(pane, "top:a").is_some()
    });
    stop(a);
    tmux.wait_for("top:a to go", |pane| pane.contains("(no locks in use)"));
    stop(waiter);

    // A Redis outage: an error line, and the view keeps retrying.
    server.kill();
    tmux.wait_for("the error line", |pane| {
        pane.lines()
            .any(|l| l.starts_with("error: ") && l.contains("retrying"))
    });
    server.restart();
    let c = hold(&server, "top:c");
    tmux.wait_for("the view to recover", |pane| {
        !pane.contains("error: ") && columns(pane, "top:c").is_some()
    });

    // `q` quits and the shell has its screen back.
    tmux.keys(&["q"]);
    let pane = tmux.wait_for("lockctl to exit", |pane| pane.contains("TOP-EXITED-0"));
    assert!(!pane.contains("WAITERS"), "the view is gone: {pane}");
    assert!(pane.contains(&top), "the shell's screen is back: {pane}");

    // Ctrl-C quits too, restoring the terminal.
    tmux.keys(&["clear", "Enter"]);
    tmux.keys(&[&top, "Enter"]);
    tmux.wait_for("the view again", |pane| pane.contains("WAITERS"));
    tmux.keys(&["C-c"]);
    let pane = tmux.wait_for("lockctl to exit", |pane| pane.contains("TOP-EXITED-0"));
    assert!(!pane.contains("WAITERS"), "{pane}");
    // The terminal is out of raw mode: a typed line runs.
    tmux.keys(&["echo typed-$((40+2))", "Enter"]);
    tmux.wait_for("the shell to run a line", |pane| pane.contains("typed-42"));
    stop(c);
}

/// A client of `server` that keeps plain lock `name` hot (taken once and
/// released: kept), on a thread of its own until `stop` is sent; gives its
/// client id.
fn keep_hot(
    server: &RedisServer,
    name: &str,
) -> (
    String,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (url, name) = (server.url(), name.to_owned());
    let (id_tx, id_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let client = distlock_core::LockClient::builder()
                .keep_hot(Duration::from_secs(120))
                .connect(&url)
                .await
                .unwrap();
            let used = client.lock(&name).acquire().await.unwrap();
            used.release().await.unwrap(); // kept
            id_tx.send(client.id().to_owned()).unwrap();
            // The keeper renews it while this runtime runs.
            while stop_rx.try_recv().is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            client.shutdown(Duration::from_secs(5)).await.unwrap();
        });
    });
    (id_rx.recv_timeout(LONG).unwrap(), stop_tx, thread)
}

/// The live view shows every kind, each with its figures: a fair lock held
/// with one waiter queued, a read-write lock read by two with a writer
/// waiting, a semaphore with 2
/// of its 5 permits taken, a hot lock kept by a client; moving the
/// selection shows each one's details (the queue, the readers, the permit
/// holders, the keeper).
#[test]
fn the_live_view_shows_the_lock_family_and_hot_locks() {
    if !tmux_available() {
        eprintln!("SKIPPED the_live_view_shows_the_lock_family_and_hot_locks: no tmux");
        return;
    }
    let started = Instant::now();
    let server = RedisServer::start();
    let run = |args: &[&str]| lockctl(&server).arg("run").args(args).spawn().unwrap();
    let fair = run(&["--fair", "--key", "fam:fair", "--", "sleep", "120"]);
    wait_until("the fair lock held", || {
        exists(&server, "lock:{fam:fair}:fair")
    });
    let queued = run(&["--fair", "--key", "fam:fair", "--wait", "2m", "--", "true"]);
    let reader_1 = run(&["--read", "--key", "fam:rw", "--", "sleep", "120"]);
    let reader_2 = run(&["--read", "--key", "fam:rw", "--", "sleep", "120"]);
    wait_until("two readers", || {
        redis::cmd("ZCARD")
            .arg("lock:{fam:rw}:rw:read")
            .query::<u64>(&mut server.conn())
            .unwrap()
            == 2
    });
    let writer = run(&["--write", "--key", "fam:rw", "--wait", "2m", "--", "true"]);
    let permits = run(&[
        "--permits",
        "5",
        "--take",
        "2",
        "--key",
        "fam:sem",
        "--",
        "sleep",
        "120",
    ]);
    let (keeper, stop_keeper, keeper_thread) = keep_hot(&server, "fam:hot");

    let tmux = Tmux {
        socket: format!("lockctl-family-{}", std::process::id()),
    };
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "160",
        "-y",
        "40",
        "env",
        "-i",
        "PATH=/usr/bin:/bin",
        "TERM=screen",
        "PS1=shell$ ",
        "sh",
    ]);
    tmux.wait_for("the shell", |pane| pane.contains("shell$"));
    let top = format!(
        "{} --url {} top --interval 300ms --prefix fam:",
        env!("CARGO_BIN_EXE_lockctl"),
        server.url()
    );
    tmux.keys(&[&top, "Enter"]);
    let pane = tmux.wait_for("every kind with its figures", |pane| {
        let row = |name| columns(pane, name).unwrap_or_default();
        row("fam:fair").last() == Some(&"1")
            && row("fam:rw").get(2..4) == Some(&["2", "readers"][..])
            && row("fam:rw").last() == Some(&"1")
            && row("fam:sem").get(2..4) == Some(&["2", "permits"][..])
            && row("fam:hot").get(2..4) == Some(&[keeper.as_str(), "(kept)"][..])
    });
    let kind = |name| columns(&pane, name).unwrap()[0];
    assert_eq!(
        ["fair", "hot", "rw", "sem"],
        ["fam:fair", "fam:hot", "fam:rw", "fam:sem"].map(kind),
        "{pane}"
    );
    // Sorted by name; the first row selected, its details below.
    assert!(
        pane.lines().any(|l| l.starts_with("> fair  fam:fair")),
        "{pane}"
    );
    assert!(pane.contains(" fair fam:fair ─"), "{pane}");
    assert!(
        pane.contains("queue    1 waiter, the next holder first"),
        "{pane}"
    );
    assert!(pane.contains("  1. "), "{pane}");

    tmux.keys(&["Down"]);
    let pane = tmux.wait_for("the hot lock's details", |pane| {
        pane.contains(&format!("keeper   client {keeper} keeps it"))
    });
    assert!(pane.contains("token    "), "{pane}");
    tmux.keys(&["Down"]);
    let pane = tmux.wait_for("the readers", |pane| pane.contains("readers  2"));
    assert!(pane.contains("writer   none"), "{pane}");
    assert!(
        pane.contains("waiting  1 writer (new readers wait behind them)"),
        "{pane}"
    );
    tmux.keys(&["Down"]);
    let pane = tmux.wait_for("the permit holders", |pane| {
        pane.contains("permits  2 in use by 1 holder")
    });
    assert!(pane.contains("  2 permits  lease left"), "{pane}");

    // The kind filter: f cycles lock, hot, ...
    tmux.keys(&["f", "f"]);
    tmux.wait_for("only the hot lock", |pane| {
        pane.contains("kind hot")
            && columns(pane, "fam:hot").is_some()
            && columns(pane, "fam:fair").is_none()
    });

    tmux.keys(&["q"]);
    tmux.wait_for("lockctl to exit", |pane| !pane.contains("WAITERS"));

    // The snapshot: --kind, and each kind's details in the JSON.
    let json = |kind: &str| {
        let out =
            complete(lockctl(&server).args(["top", "--json", "--prefix", "fam:", "--kind", kind]));
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows = rows.as_array().unwrap().clone();
        assert_eq!(rows.len(), 1, "{kind}: {rows:?}");
        assert_eq!(rows[0]["kind"], kind);
        rows[0].clone()
    };
    assert_eq!(json("fair")["queue"].as_array().map(Vec::len), Some(1));
    assert_eq!(json("fair")["waiters"], 1);
    assert_eq!(json("rw")["readers"].as_array().map(Vec::len), Some(2));
    assert_eq!(json("rw")["owner"], serde_json::Value::Null);
    assert_eq!(
        json("rw")["waiting_writers"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(json("rw")["waiters"], 1, "the waiting writer counted once");
    let semaphore = json("sem");
    assert_eq!(semaphore["in_use"], 2);
    assert_eq!(semaphore["holders"][0]["permits"], 2);
    let hot = json("hot");
    assert_eq!(hot["keeper"], keeper.as_str());
    assert!(
        hot["owner"].as_str().is_some_and(|o| o.ends_with("~k")),
        "{hot}"
    );
    stop_keeper.send(()).unwrap();
    keeper_thread.join().unwrap();
    for child in [fair, queued, writer, reader_1, reader_2, permits] {
        stop(child);
    }
    eprintln!("the family view test took {:?}", started.elapsed());
}

/// The README's ACL rule for `top`: the `status` rule counts no waiters (`?`,
/// and a line on stderr, exit 0); with `+pubsub|numsub` it does.
#[test]
fn the_readme_acl_rule_is_enough_for_top() {
    let status_rule = "on >pw ~lock:* &lock:* -@all +evalsha +script|load \
                       +subscribe +unsubscribe +hget +pttl +incr +get +set +time +hset +pexpire +hexists +hdel +del +publish \
                       +scan +type +hgetall";
    for (extra, counted) in [("", false), (" +pubsub|numsub", true)] {
        let rule = format!("{status_rule}{extra}");
        let mut options = ServerOptions::new().arg("--user").arg("ops");
        for part in rule.split_whitespace() {
            options = options.arg(part);
        }
        let server = RedisServer::start_with(options);
        let backend = ["--url".to_owned(), server.url_with_auth("ops", "pw")];
        let holder = bare_lockctl()
            .args(&backend)
            .args(["run", "--key", "acl", "--", "sleep", "120"])
            .spawn()
            .unwrap();
        wait_until("the lock listed", || {
            top_json(&backend).iter().any(|row| row["name"] == "acl")
        });
        let out = complete(bare_lockctl().args(&backend).arg("top"));
        let text = String::from_utf8_lossy(&out.stdout);
        let errors = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{rule}: {errors}");
        let row = columns(&text, "acl").unwrap_or_else(|| panic!("{text}"));
        if counted {
            assert_eq!(row.last(), Some(&"0"), "{rule}: {text} {errors}");
            assert!(errors.is_empty(), "{errors}");
        } else {
            assert_eq!(row.last(), Some(&"?"), "{rule}: {text}");
            assert!(errors.contains("cannot count the waiters"), "{errors}");
        }
        stop(holder);
    }
}

/// The guide's rule for `top` over the lock family: the family's rule plus
/// `+scan` and `+pubsub|numsub` lists every kind and counts its waiters.
#[test]
fn the_family_acl_rule_with_scan_and_numsub_is_enough_for_top() {
    let rule = "on >pw ~lock:* &lock:* -@all +evalsha +script|load \
                +subscribe +unsubscribe +hget +hkeys +pttl +incr +get +set +time +hset +pexpire +hexists +hdel +del +publish \
                +exists +zadd +zrange +zrangebyscore +zrem +zremrangebyscore +zscore +zcard \
                +hvals +pexpireat +type +hgetall +get +scan +pubsub|numsub";
    let mut options = ServerOptions::new().arg("--user").arg("ops");
    for part in rule.split_whitespace() {
        options = options.arg(part);
    }
    let server = RedisServer::start_with(options);
    let backend = ["--url".to_owned(), server.url_with_auth("ops", "pw")];
    let run = |args: &[&str]| {
        bare_lockctl()
            .args(&backend)
            .arg("run")
            .args(args)
            .args(["--", "sleep", "120"])
            .spawn()
            .unwrap()
    };
    let holders = [
        run(&["--key", "acl:plain"]),
        run(&["--fair", "--key", "acl:fair"]),
        run(&["--read", "--key", "acl:rw"]),
        run(&["--permits", "3", "--key", "acl:sem"]),
    ];
    wait_until("every kind listed", || top_json(&backend).len() == 4);
    let out = complete(bare_lockctl().args(&backend).args(["top", "--json"]));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<(&str, u64)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["kind"].as_str().unwrap(),
                row["waiters"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(kinds, [("fair", 0), ("lock", 0), ("rw", 0), ("sem", 0)]);
    for holder in holders {
        stop(holder);
    }
}
