//! Redlock locks held on a bare majority (3 of 5 masters), which the fixed schedule never
//! produced: every lock was held on all five (not wired into run.rs yet).
//!
//! [`acquire_on_bare_majority`] stops two masters (`SIGKILL`) while one client acquires and
//! starts them again after (from their own persistence, if any: they never saw the lock),
//! which is the README's "a lock held on a bare majority (normal while a minority is down)".
//! [`masters_holding`] checks which masters have the lock's key.
//!
//! Pausing the two masters (`SIGSTOP`) instead does *not* give a bare majority: the
//! client's request waits in the paused server's socket buffer, and the server runs it when
//! it is resumed, so the lock ends up on all five (`tests/bare_majority.rs` shows it). A
//! partition that drops packets has the same outcome once healed, as long as the client
//! keeps the connection: TCP retransmits the request and it lands late. Only a connection
//! that is gone (the server killed, or the connection reset before the heal) keeps the
//! lock off those masters.

// Integrated into run.rs later; until then only its tests use all of it.
#![allow(dead_code)]

use std::time::Duration;

use anyhow::Context as _;
use distlock::{LockClient, LockGuard};
use lock_test_support::{RedisMasters, RedisServer};

/// How long one direct check of a master may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// Acquires `name` with `client` (a Redlock client over `masters`) while the masters `away`
/// are stopped (`SIGKILL`), then starts them again: the lock is held on the other masters
/// only (3 of 5 with two away). The masters are restarted even if the acquisition fails.
/// Blocks the calling thread while servers stop and start (`block_in_place`: call it on a
/// multi-threaded runtime).
pub async fn acquire_on_bare_majority(
    masters: &mut RedisMasters,
    away: &[usize],
    client: &LockClient,
    name: &str,
) -> anyhow::Result<LockGuard> {
    anyhow::ensure!(
        away.len() * 2 < masters.count(),
        "stopping {} of {} masters leaves no majority",
        away.len(),
        masters.count()
    );
    tokio::task::block_in_place(|| {
        for &i in away {
            masters.server_mut(i).kill();
        }
    });
    let acquired = client.lock(name).acquire().await;
    tokio::task::block_in_place(|| {
        for &i in away {
            masters.server_mut(i).restart();
        }
    });
    acquired.with_context(|| format!("acquiring {name} with masters {away:?} stopped"))
}

/// The indices of the servers on which `key` exists (checked directly on each; a server
/// that does not answer counts as not holding it).
pub fn masters_holding(servers: &[RedisServer], key: &str) -> Vec<usize> {
    servers
        .iter()
        .enumerate()
        .filter(|(_, server)| {
            let Ok(mut conn) = server.client().get_connection_with_timeout(CHECK_TIMEOUT) else {
                return false;
            };
            let _ = conn.set_read_timeout(Some(CHECK_TIMEOUT));
            redis::cmd("EXISTS")
                .arg(key)
                .query::<u64>(&mut conn)
                .is_ok_and(|n| n == 1)
        })
        .map(|(i, _)| i)
        .collect()
}
