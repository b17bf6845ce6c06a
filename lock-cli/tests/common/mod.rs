//! What the `lockctl` test binaries share: the binary with a clean
//! environment, running it to completion, and waiting on Redis state.

#![allow(dead_code)] // each test binary uses part of it

use std::process::{Child, Command, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use lock_test_support::RedisServer;

/// Generous: the machine running the tests may be busy.
pub const LONG: Duration = Duration::from_secs(60);

/// `lockctl --url <server>` with a clean environment for the lock settings.
pub fn lockctl(server: &RedisServer) -> Command {
    let mut cmd = bare_lockctl();
    cmd.arg("--url").arg(server.url());
    cmd
}

/// `lockctl` without a URL, with a clean environment for the lock settings.
pub fn bare_lockctl() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    cmd.env_remove("REDIS_URL")
        .env_remove("LOCK_KEY_PREFIX")
        .env_remove("LOCK_CLUSTER")
        .env_remove("LOCK_SENTINEL")
        .env_remove("LOCK_SENTINEL_MASTER")
        .env_remove("LOCK_REDLOCK")
        .env_remove("LOCK_LAYOUT")
        .env_remove("LOCK_SHARDED_PUBSUB")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `cmd` to completion (at most [`LONG`]).
pub fn complete(cmd: &mut Command) -> Output {
    finish(cmd.spawn().expect("lockctl starts"), LONG)
}

/// Waits for `child` for at most `limit` (killing it and failing after), and
/// collects its output.
pub fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            panic!(
                "lockctl did not finish within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

/// Whether `key` exists on `server`.
pub fn exists(server: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut server.conn())
        .unwrap()
        == 1
}

/// Polls `done` until it is true, failing after [`LONG`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LONG;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(20));
    }
}
