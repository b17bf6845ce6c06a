//! The command connection of the Postgres backend: one multiplexed
//! `tokio_postgres::Client` (concurrent statements pipeline on it), made
//! again on the current runtime when it closed (the server went away, or the
//! runtime that drove it was dropped), and the bounds on every statement.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Config, Row};

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

/// A reconnecting command connection.
#[derive(Debug)]
pub(crate) struct Connection {
    config: Config,
    settings: PgSettings,
    server: String,
    client: Mutex<Option<Arc<Client>>>,
    /// Serialises reconnects (held across the connect).
    connecting: tokio::sync::Mutex<()>,
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
    /// A connection to `config` (not opened yet: see [`client`](Self::client)).
    pub(crate) fn new(config: Config, settings: PgSettings) -> Self {
        Connection {
            server: server_name(&config),
            config,
            settings,
            client: Mutex::default(),
            connecting: tokio::sync::Mutex::new(()),
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

    /// The settings.
    pub(crate) fn settings(&self) -> &PgSettings {
        &self.settings
    }

    /// The open client, or a new one when it is closed or was never opened.
    pub(crate) async fn client(&self) -> Result<Arc<Client>, BackendError> {
        if let Some(client) = self.open_client() {
            return Ok(client);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(client) = self.open_client() {
            return Ok(client);
        }
        let client = Arc::new(open(&self.config, &self.settings).await?);
        *self.client.lock() = Some(client.clone());
        Ok(client)
    }

    fn open_client(&self) -> Option<Arc<Client>> {
        self.client
            .lock()
            .as_ref()
            .filter(|client| !client.is_closed())
            .cloned()
    }

    /// Runs `sql` with typed `params` (an unnamed statement: nothing kept in
    /// the session) within the response timeout; when the connection turns
    /// out to be gone (a session terminated by an operator or an idle
    /// timeout, a server restarted: the client had not noticed yet), once
    /// more on a new connection. Only for statements that may run twice:
    /// acquisitions by one owner, renewals, reads.
    pub(crate) async fn query(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, BackendError> {
        match self.send(sql, params).await {
            Err(Sent::Gone(_)) => self.query_once(sql, params).await,
            other => other.map_err(Sent::into_error),
        }
    }

    /// As [`query`](Self::query), never sent twice: for the statements whose
    /// second run would answer differently (a release, a cut).
    pub(crate) async fn query_once(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, BackendError> {
        self.send(sql, params).await.map_err(Sent::into_error)
    }

    /// One send of `sql` on the open connection (made when there is none),
    /// which is forgotten when the answer says it is gone.
    async fn send(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Sent> {
        let client = self.client().await.map_err(Sent::Failed)?;
        let answer = tokio::time::timeout(
            self.settings.response_timeout,
            client.query_typed(sql, params),
        )
        .await;
        match answer {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(err)) if connection_gone(&err) => {
                self.forget(&client);
                Err(Sent::Gone(backend_error(&err)))
            }
            Ok(Err(err)) => Err(Sent::Failed(backend_error(&err))),
            Err(_) => Err(Sent::Failed(BackendError::Timeout(
                self.settings.response_timeout,
            ))),
        }
    }

    /// Drops `client` as the open connection, if it still is (the next
    /// statement connects again).
    fn forget(&self, client: &Arc<Client>) {
        let mut open = self.client.lock();
        if open.as_ref().is_some_and(|c| Arc::ptr_eq(c, client)) {
            *open = None;
        }
    }

    /// Runs a script of statements (the DDL) within the connect timeout.
    pub(crate) async fn batch(&self, sql: &str) -> Result<(), BackendError> {
        let client = self.client().await?;
        bounded(self.settings.connect_timeout, client.batch_execute(sql)).await
    }
}
