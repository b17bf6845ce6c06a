//! The connection to PostgreSQL (feature `postgres`): [`PostgresConnect`],
//! with the options of that backend only (the schema and table prefix of
//! its tables).

use std::str::FromStr;
use std::sync::Arc;

use super::builder::LockClientBuilder;
use super::LockClient;
use crate::backend::postgres::{
    Command, PgSettings, PgTls, PostgresBackend, PostgresPool, CAPABILITIES, DEFAULT_SCHEMA,
    DEFAULT_TABLE_PREFIX,
};
use crate::error::LockError;
use crate::name::Layout;

impl LockClientBuilder {
    /// A PostgreSQL database at `url` (see [`LockClient::postgres`] for the
    /// forms), with the options of that backend ([`PostgresConnect`]).
    pub fn postgres(self, url: &str) -> PostgresConnect {
        PostgresConnect {
            builder: self,
            url: url.to_owned(),
            pool: None,
            listen_url: None,
            schema: DEFAULT_SCHEMA.to_owned(),
            table_prefix: DEFAULT_TABLE_PREFIX.to_owned(),
        }
    }

    /// A PostgreSQL database reached through the service's own pool
    /// (feature `postgres`; `deadpool_postgres::Pool` with feature
    /// `deadpool-postgres`, `bb8::Pool<bb8_postgres::PostgresConnectionManager<_>>`
    /// with `bb8-postgres`, or any [`PostgresPool`]): each of the lock's
    /// statements borrows a connection for itself and gives it back.
    /// `listen_url` is the same database's URL (the forms of
    /// [`LockClient::postgres`]) for the one connection the client keeps
    /// of its own, the wake-ups' `LISTEN`: a pool's connections drop the
    /// notifications they receive. Behind PgBouncer in transaction mode,
    /// give the server's own address there.
    ///
    /// The watchdog's renewals wait for a free connection like any query
    /// of the service, for at most the connect timeout: size the pool so
    /// that the service's own work cannot hold every connection for longer
    /// than a third of a lease, or a held lock will be lost (`lost()`
    /// fires, and no other client enters before the lease ran out).
    ///
    /// ```no_run
    /// # #[cfg(feature = "deadpool-postgres")]
    /// # async fn demo(pool: deadpool_postgres::Pool) -> Result<(), distlock_core::LockError> {
    /// let url = "postgres://app@127.0.0.1:5432/app";
    /// let client = distlock_core::LockClient::builder()
    ///     .postgres_pool(pool.clone(), url)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn postgres_pool(self, pool: impl PostgresPool, listen_url: &str) -> PostgresConnect {
        PostgresConnect {
            pool: Some(Pool(Arc::new(pool))),
            ..self.postgres(listen_url)
        }
    }
}

/// A user's pool, in a `Debug` struct.
#[derive(Clone)]
struct Pool(Arc<dyn PostgresPool>);

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PostgresPool")
    }
}

impl LockClient {
    /// Connects to a PostgreSQL database with the default settings (feature
    /// `postgres`): `postgres://user:password@host:port/dbname`, or a libpq
    /// key-value string (`host=... port=... user=... dbname=...`), as
    /// tokio-postgres parses them. With `sslmode=require` every connection
    /// is TLS, the server verified against
    /// [`LockClientBuilder::tls_root_certificate`] (else the system's roots)
    /// and by name; otherwise connections are plain TCP. The client creates its tables in schema
    /// `public` under the prefix `distlock_` on first use; see
    /// [`LockClientBuilder::postgres`] for other names.
    ///
    /// The plain lock has the same semantics as on Redis (leases and the
    /// watchdog, re-entry, fencing tokens that strictly increase per lock and
    /// survive restarts, wake-ups by `LISTEN`/`NOTIFY`); every statement is
    /// one implicit transaction with nothing kept in the session, so the
    /// command connection may go through PgBouncer's transaction pooling.
    /// The lock family, hot locks and leader election are refused
    /// ([`LockError::Unsupported`], [`LockError::InvalidConfig`]).
    ///
    /// # Cancel safety
    /// Cancel safe: no lock is taken; a connection made so far is dropped.
    pub async fn postgres(url: &str) -> Result<Self, LockError> {
        Self::builder().postgres(url).connect().await
    }
}

/// A connection to a PostgreSQL database, made by
/// [`LockClientBuilder::postgres`].
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// let client = distlock_core::LockClient::builder()
///     .postgres("postgres://app@127.0.0.1:5432/app")
///     .schema("locks")
///     .table_prefix("svc_")
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a PostgresConnect does nothing until `connect` is awaited"]
pub struct PostgresConnect {
    builder: LockClientBuilder,
    url: String,
    /// The command path's pool (`url` is then the `LISTEN` connection's).
    pool: Option<Pool>,
    listen_url: Option<String>,
    schema: String,
    table_prefix: String,
}

impl PostgresConnect {
    /// The schema of the lock tables (default `public`; created if missing).
    /// A lower-case SQL identifier (`[a-z_][a-z0-9_]*`, at most 63 bytes),
    /// else [`LockError::InvalidConfig`] at [`connect`](Self::connect).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The prefix of the lock tables' and functions' names (default
    /// `distlock_`: `distlock_locks`, `distlock_fences`, ...). Empty or a
    /// lower-case SQL identifier of at most 40 bytes, else
    /// [`LockError::InvalidConfig`] at [`connect`](Self::connect). Clients
    /// share locks when they use the same database, schema, table prefix
    /// and key prefix.
    pub fn table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// The database for the wake-ups' `LISTEN` connection, when it is not
    /// `url`'s: give the server's own address here when `url` goes through
    /// PgBouncer in transaction pooling mode, which runs the lock's
    /// statements (each is a transaction of its own) but cannot keep a
    /// `LISTEN`, a session's state. It must reach the same database (the
    /// `NOTIFY`s of the lock's statements are delivered there). Without it,
    /// the `LISTEN` connection uses `url` (with
    /// [`postgres_pool`](LockClientBuilder::postgres_pool), its
    /// `listen_url`; this one replaces it). An address of its own is
    /// connected to once at [`connect`](Self::connect), which fails with
    /// [`LockError::Connect`] naming it when it cannot be reached.
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// Connects, and creates the tables and functions when they are missing
    /// (one transaction). Fails within the connect timeout with
    /// [`LockError::Connect`], [`LockError::Authentication`] when the server
    /// refuses the credentials, and [`LockError::InvalidConfig`] for a bad
    /// URL or setting (naming it and its value), for
    /// [Redisson's layout](Layout::Redisson) and for `keep_hot`.
    ///
    /// # Cancel safety
    /// Cancel safe: no lock is taken; a connection made so far is dropped.
    /// The schema's transaction, if it was on its way, commits or rolls
    /// back as a whole.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let builder = self.builder;
        builder.validate()?;
        if builder.layout_in_use() == Layout::Redisson {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: "the PostgreSQL backend cannot use Redisson's layout: it is a Redis \
                         layout"
                    .into(),
            });
        }
        if let Some(refused) = builder.hot_locks_refused(CAPABILITIES) {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: refused.reason.into(),
            });
        }
        let parse = |url: &str, what: &str| {
            tokio_postgres::Config::from_str(url).map_err(|err| LockError::InvalidConfig {
                key: "*".into(),
                reason: format!("invalid PostgreSQL {what}: {err}"),
            })
        };
        let config = parse(&self.url, "URL")?;
        let listen = match &self.listen_url {
            Some(url) => Some(parse(url, "listen URL")?),
            None => None,
        };
        let redis = builder.settings(None);
        let tls = if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            PgTls::new(&builder.tls_material()).map_err(|source| LockError::InvalidConfig {
                key: "*".into(),
                reason: format!("sslmode=require: {source}"),
            })?
        } else {
            PgTls::default()
        };
        let settings = PgSettings {
            connect_timeout: redis.connect_timeout,
            response_timeout: redis.response_timeout,
            tls,
        };
        let (command, listen) = match self.pool {
            Some(Pool(pool)) => (
                Command::Pool {
                    pool,
                    listen: listen.unwrap_or_else(|| config.clone()),
                },
                None,
            ),
            None => (Command::Connect(config), listen),
        };
        let backend =
            PostgresBackend::connect(command, listen, settings, &self.schema, &self.table_prefix)
                .await?;
        let wakeups = backend.wakeups();
        builder.connected_checked(backend, wakeups).await
    }
}
