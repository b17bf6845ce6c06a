//! The Redis wire protocol of the lock, shared by the standalone/Sentinel,
//! Cluster and Redlock backends: the scripts (`scripts.rs`, their Lua in
//! `lua/`, one file per script), the one path every command takes, with its
//! timeout and `NOSCRIPT` reload (`command.rs`), reply parsing and error
//! mapping (`reply.rs`), read-only inspection (`inspect.rs`), and the
//! records of leader election (`leader.rs`).
//!
//! These files depend on each other one way: `inspect` uses `reply`,
//! `command` and `scripts`; `leader` uses `command` and `reply`; `reply` uses `command` and `scripts`; `command`,
//! `scripts` and `version` use none of the others.

pub(crate) mod command;
pub(crate) mod inspect;
pub(crate) mod layouts;
pub(crate) mod leader;
pub(crate) mod listeners;
pub(crate) mod reply;
pub(crate) mod scripts;
pub(crate) mod version;

use std::time::Duration;

/// Connection settings of a Redis backend (already range-checked).
#[derive(Debug, Clone)]
pub(crate) struct RedisSettings {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// `WAIT` for this many replicas (with this timeout) after every write.
    pub(crate) sync_replicas: Option<(u32, Duration)>,
}

impl RedisSettings {
    /// The time allowed for one round trip that ends in `WAIT`, if any.
    pub(crate) fn write_timeout(&self) -> Duration {
        let wait = self.sync_replicas.map_or(Duration::ZERO, |(_, t)| t);
        self.response_timeout.saturating_add(wait)
    }
}

/// `host:port` of a client's server, never with credentials.
pub(crate) fn server_name(client: &::redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}
