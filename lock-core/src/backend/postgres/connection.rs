//! The command connection of the Postgres backend: one multiplexed
//! `tokio_postgres::Client` (concurrent statements pipeline on it), made
//! again on the current runtime when it closed (the server went away, or the
//! runtime that drove it was dropped), or a user's pool that each statement
//! borrows a connection from; and the bounds on every statement.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{FutureExt, Shared};
use tokio::sync::oneshot;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, Row};

use super::pool::{PoolError, PooledClient, PostgresPool};
use super::tls::{self, PgTls};

use crate::sync::Mutex;
use crate::BackendError;

/// The settings of a Postgres backend's connections.
#[derive(Debug, Clone)]
pub(crate) struct PgSettings {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// TLS (`sslmode=require`), or plain TCP.
    pub(crate) tls: PgTls,
}

/// The command path: a reconnecting connection of the backend's own, or a
/// user's pool.
#[derive(Debug)]
pub(crate) struct Connection {
    /// The command connection's configuration; with a pool, the `LISTEN`
    /// connection's (the same database: names the server in messages).
    config: Config,
    settings: PgSettings,
    server: String,
    source: Source,
}

/// Where statements are sent.
enum Source {
    /// The backend's own connection.
    Own {
        client: Mutex<Option<Arc<Client>>>,
        /// Serialises reconnects (held across the connect).
        connecting: tokio::sync::Mutex<()>,
    },
    /// A connection borrowed from the user's pool per statement.
    Pool {
        pool: Arc<dyn PostgresPool>,
        /// The lock statements' order per key (see [`Turn`]).
        turns: Arc<Turns>,
    },
}

/// Per key, the last lock statement's end: the next one on the key waits
/// for it.
type Turns = Mutex<HashMap<String, Shared<oneshot::Receiver<()>>>>;

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Own { .. } => f.write_str("Own"),
            Source::Pool { .. } => f.write_str("Pool"),
        }
    }
}

/// `host:port` of `config` (its first host), for messages.
pub(crate) fn server_name(config: &Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// A Postgres error as a backend error: its SQLSTATE and message when the
/// server sent one.
pub(crate) fn backend_error(err: &tokio_postgres::Error) -> BackendError {
    match err.as_db_error() {
        Some(db) => BackendError::Postgres {
            code: Some(db.code().code().to_owned()),
            message: db.message().to_owned(),
        },
        None => BackendError::Postgres {
            code: None,
            message: err.to_string(),
        },
    }
}

/// A pool's error as a backend error: the server's error (its SQLSTATE)
/// when the pool's own connect failed on one, else the pool's message.
pub(crate) fn pool_error(err: &PoolError) -> BackendError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err.as_ref());
    while let Some(err) = source {
        if let Some(db) = err
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::as_db_error)
        {
            return BackendError::Postgres {
                code: Some(db.code().code().to_owned()),
                message: db.message().to_owned(),
            };
        }
        source = err.source();
    }
    // The whole chain: a pool's own message rarely includes its source's.
    let mut message = format!("the connection pool gave no connection: {err}");
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = cause.source();
    }
    BackendError::Postgres {
        code: None,
        message,
    }
}

/// The most sends of one statement that found their connection gone.
const MAX_SENDS: u32 = 64;

/// Why a send failed: the connection was gone (the statement may be sent
/// again on a new one), or anything else.
enum Sent {
    Gone(BackendError),
    Failed(BackendError),
}

impl Sent {
    fn into_error(self) -> BackendError {
        match self {
            Sent::Gone(err) | Sent::Failed(err) => err,
        }
    }
}

/// Whether `err` means the session is gone (closed, or ended by the server:
/// SQLSTATE class 08, connection exception, or 57P01-57P03, an
/// administrator's or a crash's shutdown), not that the statement failed.
fn connection_gone(err: &tokio_postgres::Error) -> bool {
    if err.is_closed() {
        return true;
    }
    match err.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
        }
        // An I/O error of the connection (reset, broken pipe).
        None => std::error::Error::source(err)
            .is_some_and(|source| source.downcast_ref::<std::io::Error>().is_some()),
    }
}

/// `fut` bounded by `timeout`, its error as a backend error.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result.map_err(|err| backend_error(&err)),
        Err(_) => Err(BackendError::Timeout(timeout)),
    }
}

/// The current tokio runtime, which drives the connections (an error, not
/// a panic, when polled elsewhere).
pub(crate) fn runtime() -> Result<tokio::runtime::Handle, BackendError> {
    tokio::runtime::Handle::try_current().map_err(|_| {
        BackendError::Protocol(
            "the Postgres backend needs a tokio runtime to drive its connections".into(),
        )
    })
}

/// Opens a connection to `config` within `timeout`, its driver spawned on
/// the current runtime (it ends when the client is dropped or the server
/// closes the connection).
pub(crate) async fn open(config: &Config, settings: &PgSettings) -> Result<Client, BackendError> {
    let runtime = runtime()?;
    let config = tls::effective(config, &settings.tls);
    let (client, connection) = bounded(
        settings.connect_timeout,
        config.connect(settings.tls.clone()),
    )
    .await?;
    runtime.spawn(async move {
        if let Err(err) = connection.await {
            tracing::debug!(error = %err, "lock postgres connection ended");
        }
    });
    Ok(client)
}

impl Connection {
    /// A connection to `config` (not opened yet: the first statement opens
    /// it).
    pub(crate) fn new(config: Config, settings: PgSettings) -> Self {
        Connection {
            server: server_name(&config),
            config,
            settings,
            source: Source::Own {
                client: Mutex::default(),
                connecting: tokio::sync::Mutex::new(()),
            },
        }
    }

    /// Statements on connections borrowed from `pool`; `config` is the
    /// `LISTEN` connection's (the same database).
    pub(crate) fn pooled(
        pool: Arc<dyn PostgresPool>,
        config: Config,
        settings: PgSettings,
    ) -> Self {
        Connection {
            server: server_name(&config),
            config,
            settings,
            source: Source::Pool {
                pool,
                turns: Arc::default(),
            },
        }
    }

    /// `host:port`, for messages.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// The configuration (for the subscriber's own connection).
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// Whether statements go to a user's pool.
    pub(crate) fn is_pooled(&self) -> bool {
        matches!(self.source, Source::Pool { .. })
    }

    /// The settings.
    pub(crate) fn settings(&self) -> &PgSettings {
        &self.settings
    }

    /// The open client of `client`, or a new one when it is closed or was
    /// never opened (`connecting` serialises the connects).
    async fn own_client(
        &self,
        client: &Mutex<Option<Arc<Client>>>,
        connecting: &tokio::sync::Mutex<()>,
    ) -> Result<Arc<Client>, BackendError> {
        let open_client = || {
            client
                .lock()
                .as_ref()
                .filter(|client| !client.is_closed())
                .cloned()
        };
        if let Some(open) = open_client() {
            return Ok(open);
        }
        let _connecting = connecting.lock().await;
        if let Some(open) = open_client() {
            return Ok(open);
        }
        let opened = Arc::new(open(&self.config, &self.settings).await?);
        *client.lock() = Some(opened.clone());
        Ok(opened)
    }

    /// Runs `sql` with typed `params` (an unnamed statement: nothing kept in
    /// the session) within the response timeout; when the connection turns
    /// out to be gone (a session terminated by an operator or an idle
    /// timeout, a server restarted: the client had not noticed yet), once
    /// more on a new connection (with a pool: on another of its connections,
    /// as long as the ones it gives are gone, up to the response timeout).
    /// Only for statements that may run twice:
    /// acquisitions by one owner, renewals, reads.
    ///
    /// `order`: the lock key of a statement that must run after the ones
    /// sent before it on that key (acquisitions, releases, rollbacks), as
    /// on one connection; see [`Turn`].
    pub(crate) async fn query(
        &self,
        order: Option<&str>,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, BackendError> {
        let start = tokio::time::Instant::now();
        let mut sends = 1;
        loop {
            match self.send(order, sql, params).await {
                // A pool may hold several connections the server ended (a
                // restart ends them all): each send finds one and the pool
                // drops it, until a live or new one answers, for at most
                // the response timeout.
                Err(Sent::Gone(err))
                    if start.elapsed() < self.settings.response_timeout && sends < MAX_SENDS =>
                {
                    tracing::debug!(error = %err, sends, "lock postgres connection gone: sent again");
                    sends += 1;
                }
                other => return other.map_err(Sent::into_error),
            }
        }
    }

    /// As [`query`](Self::query), never sent twice: for the statements whose
    /// second run would answer differently (a release, a cut).
    pub(crate) async fn query_once(
        &self,
        order: Option<&str>,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, BackendError> {
        self.send(order, sql, params)
            .await
            .map_err(Sent::into_error)
    }

    /// One send of `sql` on the open connection (made when there is none),
    /// which is forgotten when the answer says it is gone; or on a
    /// connection borrowed from the pool (which checks its connections
    /// when they come back), after the statements sent before it on
    /// `order`'s key.
    async fn send(
        &self,
        order: Option<&str>,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Sent> {
        let timeout = self.settings.response_timeout;
        match &self.source {
            Source::Own { client, connecting } => {
                let open = self
                    .own_client(client, connecting)
                    .await
                    .map_err(Sent::Failed)?;
                let answer = statement(&open, timeout, sql, params).await;
                if let Err(Sent::Gone(_)) = &answer {
                    // Forgotten, if it still is the open one (the next
                    // statement connects again).
                    let mut kept = client.lock();
                    if kept.as_ref().is_some_and(|c| Arc::ptr_eq(c, &open)) {
                        *kept = None;
                    }
                }
                answer
            }
            Source::Pool { pool, turns } => {
                // The place in the key's order is taken at the first poll,
                // before anything is awaited.
                let mut turn = order.map(|key| Turn::take(turns, key, timeout));
                if let Some(turn) = turn.as_mut() {
                    if let Some(before) = turn.before.clone() {
                        // The one before ends by its own timeout or its
                        // drain's. (Dropped while waiting, this turn ends
                        // only after it: see `Drop`.)
                        let _ = before.await;
                        turn.before = None;
                    }
                }
                let pooled = self.borrow(pool.as_ref()).await.map_err(Sent::Failed)?;
                let Some(turn) = turn.as_mut() else {
                    return statement(&pooled, timeout, sql, params).await;
                };
                let pooled = turn.in_flight.insert(pooled);
                let answer = statement(pooled, timeout, sql, params).await;
                if !matches!(answer, Err(Sent::Failed(BackendError::Timeout(_)))) {
                    // Answered (or the connection is gone): nothing of it is
                    // left on its way.
                    turn.in_flight = None;
                }
                answer
            }
        }
    }

    /// A connection from `pool` within the connect timeout.
    async fn borrow(&self, pool: &dyn PostgresPool) -> Result<PooledClient, BackendError> {
        let timeout = self.settings.connect_timeout;
        match tokio::time::timeout(timeout, pool.get()).await {
            Ok(Ok(pooled)) => Ok(pooled),
            Ok(Err(err)) => Err(pool_error(&err)),
            Err(_) => Err(BackendError::Timeout(timeout)),
        }
    }

    /// Runs a script of statements (the DDL) within the connect timeout.
    pub(crate) async fn batch(&self, sql: &str) -> Result<(), BackendError> {
        let timeout = self.settings.connect_timeout;
        match &self.source {
            Source::Own { client, connecting } => {
                let open = self.own_client(client, connecting).await?;
                bounded(timeout, open.batch_execute(sql)).await
            }
            Source::Pool { pool, .. } => {
                let pooled = self.borrow(pool.as_ref()).await?;
                bounded(timeout, pooled.batch_execute(sql)).await
            }
        }
    }
}

/// A lock statement's place in its key's order, on a pool: the statements
/// of one key run one after the other, as they do on one connection, which
/// the acquisition's cancel safety needs (a rollback of a grant whose
/// acquisition was dropped mid-statement must run after that statement, and
/// before the scope's next acquisition).
///
/// A statement waits for the one before it on the key; the next one waits
/// for it: until its answer was read, or, when it was dropped or timed out
/// with the statement on its way, until its connection answered an empty
/// statement sent after it (a task drains it; at most the response
/// timeout, then the connection is dropped).
struct Turn {
    turns: Arc<Turns>,
    key: String,
    /// This statement's end, as the map holds it.
    mine: Shared<oneshot::Receiver<()>>,
    /// Sent (dropped) when this statement is over.
    done: Option<oneshot::Sender<()>>,
    /// The end of the statement before this one on the key.
    before: Option<Shared<oneshot::Receiver<()>>>,
    /// The connection while a statement on it may be unanswered.
    in_flight: Option<PooledClient>,
    timeout: Duration,
}

impl Turn {
    /// The next place on `key`.
    fn take(turns: &Arc<Turns>, key: &str, timeout: Duration) -> Turn {
        let (done, end) = oneshot::channel();
        let mine = end.shared();
        let before = turns.lock().insert(key.to_owned(), mine.clone());
        Turn {
            turns: turns.clone(),
            key: key.to_owned(),
            mine,
            done: Some(done),
            before,
            in_flight: None,
            timeout,
        }
    }
}

/// Removes `mine` as `key`'s last statement, if it still is.
fn leave(turns: &Turns, key: &str, mine: &Shared<oneshot::Receiver<()>>) {
    let mut turns = turns.lock();
    if turns.get(key).is_some_and(|last| last.ptr_eq(mine)) {
        turns.remove(key);
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let done = self.done.take();
        let (turns, key, mine) = (self.turns.clone(), self.key.clone(), self.mine.clone());
        let before = self.before.take();
        let in_flight = self.in_flight.take();
        let runtime = match (&before, &in_flight) {
            (None, None) => None,
            _ => runtime().ok(),
        };
        let Some(runtime) = runtime else {
            leave(&turns, &key, &mine);
            drop(done);
            return;
        };
        let timeout = self.timeout;
        runtime.spawn(async move {
            // Dropped while waiting: this turn ends after the one before.
            if let Some(before) = before {
                let _ = before.await;
            }
            // Dropped (or timed out) with the statement on its way: an
            // empty statement on the same connection is answered after it.
            if let Some(client) = in_flight {
                let _ = tokio::time::timeout(timeout, client.simple_query("")).await;
            }
            leave(&turns, &key, &mine);
            drop(done);
        });
    }
}

/// One statement on `client` within `timeout`: its rows, or why not (the
/// connection gone, or anything else).
async fn statement(
    client: &Client,
    timeout: Duration,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<Row>, Sent> {
    match tokio::time::timeout(timeout, client.query_typed(sql, params)).await {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(err)) if connection_gone(&err) => Err(Sent::Gone(backend_error(&err))),
        Ok(Err(err)) => Err(Sent::Failed(backend_error(&err))),
        Err(_) => Err(Sent::Failed(BackendError::Timeout(timeout))),
    }
}
