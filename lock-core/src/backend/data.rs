//! [`DataConnection`]: the connection for the user's own data that a lock
//! client hands out, routed by the backend that holds the locks (the same
//! node, the same Sentinel master, the same cluster), so that data written
//! under a lock goes where the lock lives and follows it across failovers.
//!
//! Each backend with a data store makes its route in its own folder
//! (`standalone/data.rs`, `cluster/data.rs`); the route decides where each
//! request goes, this file only turns it into a `redis::aio::ConnectionLike`.

use std::error::Error as _;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

use crate::BackendError;

/// Where one request of a [`DataConnection`] goes: implemented by each
/// backend that has a data store.
pub(crate) trait DataRoute: Send + Sync + fmt::Debug + 'static {
    /// Sends one command, bounded by `timeout`.
    fn command<'a>(
        &'a self,
        cmd: &'a Cmd,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Value, RedisError>>;

    /// Sends `pipeline`'s commands and keeps `count` replies from `offset`,
    /// bounded by `timeout`.
    fn pipeline<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Vec<Value>, RedisError>>;

    /// The server the next request goes to, for messages and tests:
    /// `host:port`, or the cluster's label.
    fn server(&self) -> String;

    /// The database the connection uses.
    fn db(&self) -> i64;
}

/// A connection for the data guarded by the locks of a
/// [`LockClient`](crate::LockClient), from
/// [`LockClient::data_connection`](crate::LockClient::data_connection): it
/// talks to the store the locks live in, as the lock client sees it now.
///
/// - **One Redis node**: the client's own auto-reconnecting connection.
/// - **Sentinel**: the master the client follows. It moves when the
///   sentinels announce a new master (`+switch-master`), not after an
///   error, and while the sentinels name a master this client cannot
///   reach, every request is refused with
///   [`BackendError::MasterUnreachable`] rather than sent to the old master
///   (which may still take writes it will lose when it is demoted).
/// - **Cluster**: the client's cluster connection; each request goes to the
///   master of its keys' slot (a pipeline: of its first keyed command).
///
/// It implements [`redis::aio::ConnectionLike`] and is cheap to clone (an
/// `Arc`), so a fence or any redis command runs on it:
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock_core::LockClient;
/// use distlock_core::redis::AsyncCommands;
///
/// let client = LockClient::sentinel(["redis://127.0.0.1:26379/"], "mymaster").await?;
/// let mut data = client.data_connection()?;
/// let stock: Option<i64> = data.get("stock:42").await?;
/// # let _ = stock; Ok(()) }
/// ```
///
/// No request is ever sent twice by this connection (a write whose answer was
/// lost may or may not have run; the caller decides whether to retry). Each
/// request is bounded by the client's response timeout, plus the timeout of
/// the `WAIT` commands it contains; a blocking command (`BLPOP`) that waits
/// longer fails with a timeout. An error of the lock backend (a timeout, a
/// deposed master) reaches the caller as a [`RedisError`] of kind
/// [`Io`](redis::ErrorKind::Io) whose source is the [`BackendError`]: see
/// [`DataConnection::backend_error`].
///
/// A data connection lives as long as its clones, whatever happens to the
/// lock client (after its shutdown it still reaches the store; Sentinel:
/// without the announcements, it moves only after an error).
///
/// # Cancel safety
///
/// Dropping a request's future drops it: a command already written to the
/// socket may still run on the server, as with any Redis connection.
#[derive(Clone)]
pub struct DataConnection {
    route: Arc<dyn DataRoute>,
    response_timeout: Duration,
}

impl fmt::Debug for DataConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataConnection")
            .field("route", &self.route)
            .field("response_timeout", &self.response_timeout)
            .finish()
    }
}

impl DataConnection {
    pub(crate) fn new(route: Arc<dyn DataRoute>, response_timeout: Duration) -> Self {
        DataConnection {
            route,
            response_timeout,
        }
    }

    /// The server the next request goes to: `host:port` of the node (with
    /// Sentinel, of the master the client follows now), or the cluster's
    /// seeds.
    pub fn server(&self) -> String {
        self.route.server()
    }

    /// The lock backend's error behind `err`, an error of a request on a
    /// data connection, when the backend refused or gave up on the request
    /// ([`BackendError::MasterUnreachable`]: the sentinels named a master
    /// this client cannot reach, and nothing was sent;
    /// [`BackendError::Timeout`]: no answer in time); `None` for the errors
    /// of Redis itself and of the connection.
    pub fn backend_error(err: &RedisError) -> Option<&BackendError> {
        // The redis crate keeps the io::Error behind an `Arc` and gives that
        // as the source.
        let source = err.source()?;
        let io = match source.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>() {
            Some(shared) => (**shared).downcast_ref::<io::Error>()?,
            None => source.downcast_ref::<io::Error>()?,
        };
        io.get_ref()?.downcast_ref::<BackendError>()
    }

    /// How long `extra` `WAIT` commands may make a request last, on top of
    /// the response timeout.
    fn timeout(&self, extra: Duration) -> Duration {
        self.response_timeout.saturating_add(extra)
    }
}

/// The error a request meets when the lock backend refuses or gives up on
/// it: a [`RedisError`] whose source is `source` (see
/// [`DataConnection::backend_error`]).
pub(crate) fn refused(source: BackendError) -> RedisError {
    let kind = match source {
        BackendError::Timeout(_) => io::ErrorKind::TimedOut,
        _ => io::ErrorKind::Other,
    };
    RedisError::from(io::Error::new(kind, source))
}

/// The timeout of `cmd` when it is `WAIT numreplicas timeout` (0, forever,
/// counts as the longest timeout the client allows), else zero.
fn wait_timeout(cmd: &Cmd) -> Duration {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let is_wait = args
        .next()
        .is_some_and(|name| name.eq_ignore_ascii_case(b"WAIT"));
    if !is_wait {
        return Duration::ZERO;
    }
    let millis = args
        .nth(1)
        .and_then(|ms| std::str::from_utf8(ms).ok())
        .and_then(|ms| ms.parse::<u64>().ok());
    match millis {
        Some(0) | None => crate::lease::MAX_TIMEOUT,
        Some(ms) => Duration::from_millis(ms),
    }
}

impl redis::aio::ConnectionLike for DataConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let timeout = self.timeout(wait_timeout(cmd));
        self.route.command(cmd, timeout)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let waits = pipeline
            .cmd_iter()
            .map(wait_timeout)
            .fold(Duration::ZERO, Duration::saturating_add);
        let timeout = self.timeout(waits);
        self.route.pipeline(pipeline, offset, count, timeout)
    }

    fn get_db(&self) -> i64 {
        self.route.db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_of_a_wait_is_read_from_its_arguments() {
        let mut wait = redis::cmd("wait");
        wait.arg(1).arg(250);
        assert_eq!(wait_timeout(&wait), Duration::from_millis(250));
        let mut forever = redis::cmd("WAIT");
        forever.arg(1).arg(0);
        assert_eq!(wait_timeout(&forever), crate::lease::MAX_TIMEOUT);
        assert_eq!(wait_timeout(redis::cmd("GET").arg("k")), Duration::ZERO);
    }

    #[test]
    fn a_refusal_keeps_the_backend_error() {
        let err = refused(BackendError::MasterUnreachable {
            server: "127.0.0.1:1".into(),
            reason: "refused".into(),
        });
        assert!(matches!(
            DataConnection::backend_error(&err),
            Some(BackendError::MasterUnreachable { .. })
        ));
        assert!(!err.is_connection_dropped());
        let timeout = refused(BackendError::Timeout(Duration::from_secs(1)));
        assert!(timeout.is_timeout());
        let plain = RedisError::from((redis::ErrorKind::Io, "x"));
        assert!(DataConnection::backend_error(&plain).is_none());
    }
}
