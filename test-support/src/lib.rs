//! Test harness for the distlock workspace: real `redis-server` (and PostgreSQL) processes.
//!
//! [`RedisServer`] starts a genuine `redis-server` (never a mock) on a free loopback port,
//! waits until it answers `PING`, and lets a test kill, pause (`SIGSTOP`), resume (`SIGCONT`)
//! and restart it. Every server gets its own temporary directory (its `--dir`, its log file
//! and, for TLS servers, its generated certificates); dropping the [`RedisServer`] kills the
//! process, reaps it and removes that directory.
//!
//! Servers are started with `--save "" --appendonly no --bind 127.0.0.1 --daemonize no`, so
//! nothing is persisted and a restarted server always comes back empty. Port 6379 is never
//! used implicitly: every server listens on a port picked by [`free_port`].
//!
//! If `redis-server` is not on `PATH`, every constructor panics with the command that
//! installs it; tests are never skipped silently.
//!
//! ```no_run
//! use lock_test_support::{RedisServer, ServerOptions};
//!
//! let mut server = RedisServer::start();
//! let mut conn = server.conn();
//! let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut conn).unwrap();
//! server.restart(); // same port, empty data
//!
//! let tls = RedisServer::start_with(ServerOptions::new().tls().acl_user("app", "secret"));
//! let url = tls.url_with_auth("app", "secret"); // rediss://app:secret@127.0.0.1:PORT/
//! # let _ = url;
//! ```
//!
//! # Topologies
//!
//! Three types own groups of servers and clean them all up on drop:
//!
//! * [`RedisMasters`]: N independent plain masters (e.g. for Redlock-style quorums);
//! * [`RedisCluster`]: a Redis Cluster (masters with replicas, formed with
//!   `redis-cli --cluster create`), with slot helpers ([`key_slot`]) and
//!   [`RedisCluster::kill_master_and_wait_for_failover`];
//! * [`RedisSentinels`]: one master, one replica and three sentinels, with
//!   [`RedisSentinels::kill_master_and_wait_for_failover`].
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_test_support::RedisCluster;
//!
//! let mut cluster = RedisCluster::start(3, 1);
//! let owner = cluster.master_of_slot(cluster.slot_of("lock:{order-42}"));
//! let promoted = cluster.kill_master_and_wait_for_failover(owner, Duration::from_secs(15));
//! assert_eq!(cluster.master_of_slot(cluster.slot_of("lock:{order-42}")), promoted);
//! ```
//!
//! # PostgreSQL
//!
//! [`PostgresServer`] runs `initdb` and `postgres` (from the newest `/usr/lib/postgresql/*/bin`)
//! into a temporary directory on a free loopback port, as an unprivileged user when the test
//! runs as root, and stops and removes it on drop; a test can stop, start again, restart,
//! pause (`SIGSTOP` of every server process) and resume it. [`PgBouncer`] puts a real
//! PgBouncer in transaction pooling mode in front of one.
//!
//! Own each server in the test that uses it (or in a fixture that is dropped): a server kept in
//! a `static` is never dropped. As a safety net, servers are spawned with
//! `PR_SET_PDEATHSIG(SIGKILL)` from a dedicated long-lived thread, so the kernel kills them when
//! the test process exits, even after an abort.
#![warn(missing_docs)]

mod cluster;
mod masters;
mod options;
mod pgbouncer;
mod poll;
mod postgres;
mod sentinel;
mod server;
mod slot;
mod spawn;
mod tls;

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;

pub use cluster::{RedisCluster, ShardLayout};
pub use masters::RedisMasters;
pub use options::ServerOptions;
pub use pgbouncer::{pgbouncer_path, PgBouncer, REQUIRE_PGBOUNCER};
pub use postgres::{postgres_bin_dir, PostgresServer};
pub use sentinel::RedisSentinels;
pub use server::{PausedServer, RedisServer};
pub use slot::{key_slot, CLUSTER_SLOTS};

/// The message every constructor panics with when `redis-server` cannot be found on `PATH`.
const NOT_FOUND: &str = "redis-server not found on PATH: install it with \
     `apt-get update && apt-get install -y redis-server redis-tools` (the tests need a real Redis)";

/// The message [`redis_cli_path`] panics with when `redis-cli` cannot be found.
const CLI_NOT_FOUND: &str = "redis-cli not found next to redis-server or on PATH: install it with \
     `apt-get update && apt-get install -y redis-tools` (needed to form a Redis Cluster)";

/// The port a default Redis listens on; never handed out by [`free_port`].
const DEFAULT_REDIS_PORT: u16 = 6379;

/// A cluster node's bus port is its client port plus this offset.
const CLUSTER_BUS_OFFSET: u16 = 10000;

/// Returns the path of the `redis-server` executable found on `PATH`.
///
/// # Panics
///
/// Panics with a message naming the install command
/// (`apt-get update && apt-get install -y redis-server redis-tools`) when no executable
/// `redis-server` is on `PATH`. The harness never skips tests silently.
pub fn redis_server_path() -> PathBuf {
    find_on_path("redis-server").unwrap_or_else(|| panic!("{NOT_FOUND}"))
}

/// Returns a loopback TCP port that was free a moment ago.
///
/// The port is found by binding `127.0.0.1:0`, reading the port the kernel assigned and
/// dropping the listener, so another process may take it before it is used; the harness
/// retries with another port when a server fails to bind. Never returns 6379.
///
/// # Panics
///
/// Panics if no loopback socket can be bound at all.
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("cannot bind a loopback socket to find a free port: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("cannot read the address of a loopback socket: {e}"))
            .port();
        drop(listener);
        if port != 0 && port != DEFAULT_REDIS_PORT {
            return port;
        }
    }
}

/// Returns the path of the `redis-cli` executable: the one next to `redis-server` if there is
/// one, else the first on `PATH`.
///
/// # Panics
///
/// Panics if `redis-server` is missing (see [`redis_server_path`]), or with a message naming
/// the install command (`apt-get update && apt-get install -y redis-tools`) when no executable
/// `redis-cli` is found.
pub fn redis_cli_path() -> PathBuf {
    let server = redis_server_path();
    server
        .parent()
        .map(|dir| dir.join("redis-cli"))
        .filter(|candidate| is_executable(candidate))
        .or_else(|| find_on_path("redis-cli"))
        .unwrap_or_else(|| panic!("{CLI_NOT_FOUND}"))
}

/// Returns a loopback port for a cluster node: the port and its cluster bus port
/// (port + 10000) were both free a moment ago.
///
/// Like [`free_port`], another process may take either port before it is used (the harness
/// retries with another port then). Never returns 6379.
///
/// # Panics
///
/// Panics if no loopback socket can be bound at all.
pub fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        let Some(bus) = port.checked_add(CLUSTER_BUS_OFFSET) else {
            continue;
        };
        if TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok()
            && TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
        {
            return port;
        }
    }
}

/// Whether `path` is an executable regular file.
fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;

    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Looks `name` up in the directories of `PATH`, returning the first executable regular file.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}
