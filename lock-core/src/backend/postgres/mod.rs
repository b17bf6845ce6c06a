//! The PostgreSQL backend (feature `postgres`): the plain lock in tables of
//! one database, with the same semantics as on Redis, through statements
//! that keep no state in a session, so that it works behind PgBouncer's
//! transaction pooling.
//!
//! # Design
//!
//! **Schema.** In a schema of the user's choice (default `public`), under a
//! table prefix (default `distlock_`; both `[a-z_][a-z0-9_]*`, checked when
//! the client is built), created by the client when it connects, in one
//! transaction (`CREATE TABLE IF NOT EXISTS`, `CREATE OR REPLACE FUNCTION`,
//! serialised among connecting clients by a transaction-scoped advisory
//! lock, which PgBouncer's transaction pooling keeps):
//!
//! ```sql
//! <p>locks   (key text PRIMARY KEY,        -- `<key prefix>{name}`, as on Redis
//!             fence text NOT NULL,         -- the key of its fencing counter
//!             owner text NOT NULL,         -- `<client id>:<scope>`
//!             token bigint NOT NULL,       -- its fencing token
//!             expires_at timestamptz NOT NULL)  -- by the server's clock
//! <p>locks_expires ON <p>locks (expires_at)
//! <p>fences  (key text PRIMARY KEY,        -- `<key prefix>fence:{<slot>}`
//!             token bigint NOT NULL)       -- the last token issued
//! <p>layouts (layout text PRIMARY KEY, seen_at timestamptz NOT NULL)
//! ```
//!
//! **One statement per operation.** Each operation is one call of a
//! PL/pgSQL function of the schema (`<p>acquire`, `<p>release`,
//! `<p>rollback`, `<p>force_release`, `<p>cut`, `<p>record_layout`) or one
//! plain statement (renewal of a batch, inspection, listing), sent as an
//! unnamed statement with typed parameters (`query_typed`: no named
//! prepared statement, no `SET`, no session advisory lock, no temporary
//! table), in its own implicit transaction. Any pooled connection can carry
//! any of them. Time is the server's: every statement reads
//! `clock_timestamp()` and compares `expires_at` with it; the client sends
//! durations only (leases in microseconds, so a sub-millisecond lease is not
//! truncated), never instants.
//!
//! **Acquire** (`<p>acquire(key, fence, owner, lease_us)`):
//! `INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE <row>.owner = owner OR
//! <row>.expires_at <= now`. The row lock that `ON CONFLICT` takes makes
//! concurrent attempts on one name queue on each other, and the `WHERE` is
//! evaluated on the latest committed row. The updated row keeps its token
//! when it was the same owner's live row (re-entry: the lease is extended,
//! the token is the same), and gets 0 otherwise (new or expired): then a
//! token is drawn from the fencing counter and written into the row, in the
//! same transaction. When the `WHERE` fails (another owner's live row) the
//! answer is busy with that row's remaining lease, read by the server's
//! clock. `now` is read once at the start: a statement that waited on the
//! row lock judges expiry by an earlier instant (a row that expired meanwhile
//! reads as live: busy, the safe side) and gives a lease that ends earlier
//! than the client's deadline (also the safe side).
//!
//! **Fencing tokens: strictly increasing per lock, and surviving restarts.**
//! A token is `greatest(counter + 1, clock_us)`, where `counter` is the row
//! of `<p>fences` of the lock's fence key (one per cluster slot of the key
//! prefix, as on Redis: at most 16384 rows per prefix, however many names are
//! used), updated by `INSERT ... ON CONFLICT DO UPDATE` in the transaction
//! that writes the lock's row, and `clock_us` the server's
//! `clock_timestamp()` in microseconds since the Unix epoch. Proof:
//!
//! 1. *While the counter row is kept* (the normal case, and every restart
//!    with `fsync = on` and `synchronous_commit = on`, PostgreSQL's
//!    defaults, and every failover to a synchronous standby): the row is
//!    locked from the update to the commit, so the updates of one counter
//!    are serialised, and each sets it to at least one more than the value
//!    committed before it. A token reaches its holder only with the lock row
//!    that carries it, written in the same transaction: a transaction that
//!    rolls back hands out nothing. So two holders of one lock (one fence
//!    key), in the order of their commits, hold strictly increasing tokens.
//! 2. *When the counter is lost or rolled back* (`synchronous_commit = off`
//!    and a crash, an asynchronous standby promoted, a restore from a
//!    backup, a dropped table): the next token is at least the server's
//!    clock in microseconds. Every token issued before the loss was at most
//!    the clock when it was issued plus the number of tokens of its counter
//!    issued within the same microsecond (the counter only runs ahead of the
//!    clock by issues faster than one per microsecond, which the row lock
//!    held until each commit rules out in practice). So the first token after
//!    the loss is above every earlier one, provided the server's clock (the
//!    new primary's) reads later than when the last lost token was issued:
//!    the same assumption, stated the same way, as the Redis scripts' clock
//!    floor (`prelude/token.lua`).
//! 3. *Uniqueness* (round 4): a token is never issued twice, because in (1)
//!    each committed counter value is written once and in (2) a token after
//!    the loss is above every token before it.
//!
//! Tokens stay below 2^53 (exact as JSON numbers) until the year 2255, as on
//! Redis. Gaps are fine: resources compare tokens, they do not count them.
//!
//! **Release, rollback, force-release, cut** each delete or update the row
//! only while it is live (and the owner's, but for force-release), and call
//! `pg_notify` in the same transaction when they freed (or shortened) a live
//! lock: `NOTIFY` is delivered at commit, never for a transaction that rolled
//! back. **Renewal** is one `UPDATE ... FROM unnest($keys, $owners)` for the
//! whole batch, `RETURNING` the rows it extended: one round trip per period,
//! however many locks.
//!
//! **Expired rows are cleaned.** Every acquisition that issues a new token
//! also deletes up to 2 expired rows (`FOR UPDATE SKIP LOCKED`, oldest
//! first, through the `expires_at` index): as on the in-memory store's
//! sweep, the table stays O(held locks) plus what expired since, whatever the
//! number of names ever used. An expired row that was not cleaned yet reads
//! as free to every statement. The fence rows are bounded by the slots.
//!
//! **Wake-ups: LISTEN/NOTIFY on one dedicated connection.** A lock's
//! channel (`key.channel`, up to some 3 KiB) is longer than PostgreSQL's
//! 63-byte identifiers, so the server channel is `dl_<16 hex digits>`, an
//! FNV-1a hash of the schema, the table prefix and the lock's channel; the
//! payload carries the lock's channel in full (`<byte length> <channel>`)
//! followed by the message (`0 <owner>` for a release, as on Redis), so a
//! hash collision costs a spurious wake-up (an attempt), never a missed one.
//! The subscriber (`subscriber.rs`) keeps one connection of its own (never a
//! pooled one: `LISTEN` is session state by nature, and it is the one
//! connection that must not go through a transaction-mode PgBouncer),
//! `LISTEN`s to the channels that have waiters and `UNLISTEN`s the ones that
//! lost them, and after a reconnect (with back-off) wakes every waiter
//! (`Waiters::wake_all`), since messages may have been missed. A lost
//! message costs latency, never liveness: waiters also wake at the holder's
//! remaining lease.
//!
//! **What maps and what is refused** ([`Capabilities`]): the plain lock
//! with its watchdog, re-entry, fencing, waiting, cancel safety, shutdown,
//! `inspect`/`list`/force-release, `hold_at_least` (`cut`), and the layout
//! registry. Refused for now, each with a typed error naming the reason: the
//! lock family (fair lock, read-write lock, semaphore), hot locks
//! (`keep_hot`: nobody answers a keeper's ask on this backend yet), Redisson's
//! layout (it is a Redis layout; refused when the client is built), and the
//! data connection (a Redis connection by type). Leader election
//! works: its records live in `<p>leaders`, written only while the role's
//! lock row is the owner's (`FOR SHARE`), with a `NOTIFY` on the record's
//! channel. `LockGuard::hold_in` confirms a hold inside the caller's own
//! transaction (`Backend::hold_check`).
//!
//! **A user's pool** (`pool.rs`): the command path is either a connection of
//! the backend's own or a [`PostgresPool`] that every statement borrows a
//! connection from for itself (nothing of a session is needed); the
//! subscriber keeps its own `LISTEN` connection either way. A statement that
//! may run twice and finds its connection gone is sent again until a
//! connection answers or the response timeout passed (a pool may hand out
//! several dead connections after a restart, dropping each as it fails).
//! `subscribers` answers 0 for every lock: PostgreSQL shows a session only its
//! own `LISTEN`s (`pg_listening_channels()`), so how many clients wait for a
//! lock cannot be read from the server.
//!
//! # Left for later, with what each needs
//!
//! - **The lock family**: a fair queue table (`<p>queue(key, owner,
//!   presence_expires_at, seq bigserial)`, head-of-queue grant in the
//!   release function with a `g <owner> <token>` NOTIFY), a read-write lock
//!   (readers as rows of a `<p>holders` table keyed by `(key, owner)`, the
//!   writer's intent as a row), a semaphore (permits as rows of the same
//!   table, counted under the key's row lock); `inspect_family`/`list_all`
//!   for them; then lift `Capabilities::family`.
//! - **Hot locks**: the acquire function must `pg_notify` a `w <field>` ask
//!   to a keeper whose owner ends in `~k`, as `ACQUIRE` does on Redis.
//! - **Schema versions**: a `<p>meta(version)` row, so that connecting
//!   clients skip the `CREATE OR REPLACE FUNCTION`s when the schema is
//!   current, and a migration the README gives for operators who do not let
//!   clients run DDL.
//! - **Waiters handed the lock inside the server**: waiters woken by
//!   `NOTIFY` try again (a hand-off costs a wake-up and an attempt; the
//!   advisory-lock peers hand over inside the server, see BENCHMARKS.md).

mod connection;
mod pool;
mod schema;
mod subscriber;
mod tls;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use tokio_postgres::types::Type;
use tokio_postgres::Config;

use self::connection::Connection;
pub(crate) use self::connection::{backend_error, PgSettings};
pub use self::pool::{PoolError, PooledClient, PostgresPool};
use self::schema::Names;
pub(crate) use self::schema::{DEFAULT_SCHEMA, DEFAULT_TABLE_PREFIX};
use self::subscriber::PgSubscription;
pub(crate) use self::tls::{PgTls, PgTlsMaterial};
use super::{
    Attempt, Backend, Capabilities, DataConnection, LeaderRecord, Released, RenewItem, Renewal,
    SqlCheck, Unsupported, LEADER_RECORD_TTL,
};
use crate::info::FamilyState;
use crate::name::{self, Kind, LockKey};
use crate::wakeups::Wakeups;
use crate::wire::RELEASE_PREFIX;
use crate::{BackendError, LockError, LockHolder, LockInfo};

/// The backend's name in refusals.
const BACKEND: &str = "PostgreSQL";

/// How long a layout's record counts as in use after the client that made
/// it connected (as the Redis registry's expiry).
const LAYOUT_IN_USE: Duration = Duration::from_secs(24 * 3600);

/// What this backend refuses, and why.
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    family: Some(Unsupported {
        backend: BACKEND,
        reason: "the PostgreSQL backend has the plain lock only so far; the fair lock, \
                 read-write lock and semaphore need Redis or the in-memory store",
    }),
    hot_locks: Some(Unsupported {
        backend: BACKEND,
        reason: "keep_hot is not available on PostgreSQL yet: its acquire statement does not \
                 ask a keeper to give a lock up",
    }),
    redisson_family: Some(Unsupported {
        backend: BACKEND,
        reason: "Redisson's layout is a Redis layout",
    }),
    leadership: None,
};

/// Where the backend's statements go.
pub(crate) enum Command {
    /// A connection of its own to this database.
    Connect(Config),
    /// Connections borrowed from a user's pool; `listen` is the `LISTEN`
    /// connection's database (the same one).
    Pool {
        /// The pool.
        pool: Arc<dyn PostgresPool>,
        /// The `LISTEN` connection's configuration.
        listen: Config,
    },
}

/// The plain lock in a PostgreSQL database (see the module's design note).
#[derive(Debug)]
pub(crate) struct PostgresBackend {
    conn: Connection,
    names: Arc<Names>,
    store: String,
    subscription: Arc<PgSubscription>,
    statements: Statements,
}

/// The statements, built once.
#[derive(Debug)]
struct Statements {
    acquire: String,
    release: String,
    rollback: String,
    force_release: String,
    cut: String,
    renew: String,
    inspect: String,
    list: String,
    record_layout: String,
    layouts: String,
    forget_layout: String,
    leader_proclaim: String,
    leader_read: String,
    leader_vacate: String,
    hold_check: Arc<SqlCheck>,
}

/// A duration in whole microseconds, as the statements take it (saturating:
/// leases are range-checked long before).
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// A non-negative count of microseconds from the server, as a duration.
fn from_micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// A token from the server (never negative: it is at least the clock).
fn token_of(token: i64) -> u64 {
    u64::try_from(token).unwrap_or(0)
}

impl PostgresBackend {
    /// Connects to `config` and creates the schema (one transaction, see
    /// the design note). Fails with [`LockError::Connect`] (or
    /// [`LockError::Authentication`]) when the server cannot be reached or
    /// the DDL fails.
    /// `listen` is the connection for `LISTEN` when it differs from
    /// `config` (the command path goes through a transaction-mode
    /// PgBouncer, which cannot carry a `LISTEN`).
    pub(crate) async fn connect(
        command: Command,
        listen: Option<Config>,
        settings: PgSettings,
        schema: &str,
        table_prefix: &str,
    ) -> Result<Self, LockError> {
        let names = Arc::new(Names::new(schema, table_prefix)?);
        let conn = match command {
            Command::Connect(config) => Connection::new(config, settings),
            Command::Pool {
                pool,
                listen: database,
            } => Connection::pooled(pool, database, settings),
        };
        let server = conn.server().to_owned();
        let failed = |source: BackendError| match &source {
            BackendError::Postgres {
                code: Some(code),
                message,
            } if code == "28P01" || code == "28000" => LockError::Authentication {
                server: server.clone(),
                message: format!("postgres error {code}: {message}"),
            },
            _ => LockError::Connect {
                server: server.clone(),
                source,
            },
        };
        conn.batch(&names.ddl()).await.map_err(failed)?;
        let separate = conn.is_pooled() || listen.is_some();
        let listen = listen.unwrap_or_else(|| conn.config().clone());
        if separate {
            // The LISTEN connection has an address of its own: a wrong one
            // would only show as wake-ups at the holders' leases.
            let listen_server = connection::server_name(&listen);
            connection::open(&listen, conn.settings())
                .await
                .map_err(|source| LockError::Connect {
                    server: format!("{listen_server} (the LISTEN connection)"),
                    source,
                })?;
        }
        let subscription = Arc::new(PgSubscription::new(
            listen,
            conn.settings().clone(),
            names.clone(),
            server.clone(),
        ));
        let dbname = conn.config().get_dbname().unwrap_or("postgres");
        let store = format!(
            "postgres://{server}/{dbname}#{}.{}",
            names.schema, names.prefix
        );
        let statements = Statements {
            acquire: names.acquire_sql(),
            release: names.release_sql(),
            rollback: names.rollback_sql(),
            force_release: names.force_release_sql(),
            cut: names.cut_sql(),
            renew: names.renew_sql(),
            inspect: names.inspect_sql(),
            list: names.list_sql(),
            record_layout: names.record_layout_sql(),
            layouts: names.layouts_sql(),
            forget_layout: names.forget_layout_sql(),
            leader_proclaim: names.leader_proclaim_sql(),
            leader_read: names.leader_read_sql(),
            leader_vacate: names.leader_vacate_sql(),
            hold_check: Arc::new(SqlCheck {
                sql: names.hold_check_sql(),
                server: server.clone(),
            }),
        };
        Ok(PostgresBackend {
            conn,
            names,
            store,
            subscription,
            statements,
        })
    }

    /// How a client of this backend hears its releases: the `LISTEN`
    /// connection's subscriber.
    pub(crate) fn wakeups(&self) -> Wakeups {
        Wakeups::subscribed(
            self.subscription.waiters().clone(),
            self.subscription.clone(),
        )
    }

    /// A backend error on `key`.
    fn error(&self, key: &str, source: BackendError) -> LockError {
        LockError::Backend {
            key: key.to_owned(),
            server: self.conn.server().to_owned(),
            source,
        }
    }

    /// The server channel of `key`'s wake-ups and the payload of `message`.
    fn wake(&self, key: &LockKey, message: &str) -> (String, String) {
        (
            schema::server_channel(&self.names, &key.channel),
            schema::payload(&key.channel, message),
        )
    }

    /// The release message of `owner`'s release (`0 <owner>`), or a bare
    /// `0` when nobody in particular released it.
    fn release_message(owner: Option<&str>) -> String {
        match owner {
            Some(owner) => format!("{RELEASE_PREFIX}{owner}"),
            None => "0".to_owned(),
        }
    }

    /// One boolean answer of a function call.
    async fn boolean(
        &self,
        key: &LockKey,
        sql: &str,
        params: &[(&(dyn tokio_postgres::types::ToSql + Sync), Type)],
    ) -> Result<bool, LockError> {
        let rows = self
            .conn
            .query_once(Some(&key.lock), sql, params)
            .await
            .map_err(|e| self.error(&key.name, e))?;
        let first = rows.first().ok_or_else(|| {
            self.error(
                &key.name,
                BackendError::Protocol("no row from the lock function".into()),
            )
        })?;
        first
            .try_get::<_, bool>(0)
            .map_err(|e| self.error(&key.name, connection::backend_error(&e)))
    }

    async fn acquire_now(
        &self,
        key: &LockKey,
        owner: &str,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        if key.lock.contains('\0') {
            return Err(LockError::InvalidKey {
                key: name::display_name(&key.name),
                reason: "a lock name on PostgreSQL must not contain a NUL character (text \
                         cannot hold one)",
            });
        }
        let lock: &str = &key.lock;
        let fence = key.fence();
        let lease_us = micros(lease);
        let rows = self
            .conn
            .query(
                Some(lock),
                &self.statements.acquire,
                &[
                    (&lock, Type::TEXT),
                    (&fence, Type::TEXT),
                    (&owner, Type::TEXT),
                    (&lease_us, Type::INT8),
                ],
            )
            .await
            .map_err(|e| self.error(&key.name, e))?;
        let parsed = rows.first().map(|row| {
            (
                row.try_get::<_, Option<i64>>(0),
                row.try_get::<_, Option<i64>>(1),
            )
        });
        match parsed {
            Some((Ok(Some(token)), _)) => Ok(Attempt::Acquired {
                token: token_of(token),
            }),
            Some((Ok(None), Ok(ttl))) => Ok(Attempt::busy(ttl.map(from_micros))),
            _ => Err(self.error(
                &key.name,
                BackendError::Protocol(format!("unexpected answer to acquire: {rows:?}")),
            )),
        }
    }

    async fn release_now(&self, key: &LockKey, owner: &str, sql: &str) -> Result<bool, LockError> {
        let lock: &str = &key.lock;
        let (channel, payload) = self.wake(key, &Self::release_message(Some(owner)));
        self.boolean(
            key,
            sql,
            &[
                (&lock, Type::TEXT),
                (&owner, Type::TEXT),
                (&channel, Type::TEXT),
                (&payload, Type::TEXT),
            ],
        )
        .await
    }

    async fn renew_now(&self, items: &[RenewItem], lease: Duration) -> Vec<Renewal> {
        if items.is_empty() {
            return Vec::new();
        }
        let keys: Vec<&str> = items.iter().map(|(key, _)| &*key.lock).collect();
        let owners: Vec<&str> = items.iter().map(|(_, owner)| &**owner).collect();
        let lease_us = micros(lease);
        let result = self
            .conn
            .query(
                None,
                &self.statements.renew,
                &[
                    (&keys, Type::TEXT_ARRAY),
                    (&owners, Type::TEXT_ARRAY),
                    (&lease_us, Type::INT8),
                ],
            )
            .await;
        match result {
            Ok(rows) => {
                let renewed: std::collections::HashSet<(String, String)> = rows
                    .iter()
                    .filter_map(|row| Some((row.try_get(0).ok()?, row.try_get(1).ok()?)))
                    .collect();
                items
                    .iter()
                    .map(|(key, owner)| {
                        if renewed.contains(&(key.lock.to_string(), owner.to_string())) {
                            Renewal::Renewed
                        } else {
                            Renewal::Gone
                        }
                    })
                    .collect()
            }
            Err(err) => {
                let message = err.to_string();
                items
                    .iter()
                    .map(|_| {
                        Renewal::Failed(match &err {
                            BackendError::Timeout(d) => BackendError::Timeout(*d),
                            BackendError::Postgres { code, message } => BackendError::Postgres {
                                code: code.clone(),
                                message: message.clone(),
                            },
                            _ => BackendError::Protocol(message.clone()),
                        })
                    })
                    .collect()
            }
        }
    }

    async fn inspect_now(&self, key: &LockKey) -> Result<LockInfo, LockError> {
        let lock: &str = &key.lock;
        let fence = key.fence();
        let rows = self
            .conn
            .query(
                None,
                &self.statements.inspect,
                &[(&lock, Type::TEXT), (&fence, Type::TEXT)],
            )
            .await
            .map_err(|e| self.error(&key.name, e))?;
        let row = rows.first().ok_or_else(|| {
            self.error(
                &key.name,
                BackendError::Protocol("no row from inspect".into()),
            )
        })?;
        let read = || -> Result<_, tokio_postgres::Error> {
            Ok((
                row.try_get::<_, Option<String>>(0)?,
                row.try_get::<_, Option<i64>>(1)?,
                row.try_get::<_, Option<i64>>(2)?,
                row.try_get::<_, Option<i64>>(3)?,
            ))
        };
        let (owner, token, ttl, last) =
            read().map_err(|e| self.error(&key.name, connection::backend_error(&e)))?;
        let holder = match (owner, token) {
            (Some(owner), Some(token)) => Some(LockHolder {
                owner,
                fencing_token: token_of(token),
                ttl: ttl.map(from_micros),
                holds: 1,
            }),
            _ => None,
        };
        Ok(LockInfo {
            name: key.name.to_string(),
            key: key.lock.to_string(),
            fence_key: fence,
            holder,
            last_fencing_token: last.map(token_of),
        })
    }

    async fn list_now(&self, prefix: &str, name_prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        let start = format!("{prefix}{{{}", name::escape(name_prefix));
        let pattern = format!("{}*", name::display_name(name_prefix));
        let rows = self
            .conn
            .query(None, &self.statements.list, &[(&start, Type::TEXT)])
            .await
            .map_err(|e| self.error(&pattern, e))?;
        let mut locks = Vec::with_capacity(rows.len());
        for row in &rows {
            let read = || -> Result<_, tokio_postgres::Error> {
                Ok((
                    row.try_get::<_, String>(0)?,
                    row.try_get::<_, String>(1)?,
                    row.try_get::<_, String>(2)?,
                    row.try_get::<_, i64>(3)?,
                    row.try_get::<_, i64>(4)?,
                    row.try_get::<_, Option<i64>>(5)?,
                ))
            };
            let (key, fence, owner, token, ttl, last) =
                read().map_err(|e| self.error(&pattern, connection::backend_error(&e)))?;
            let Some(name) = name::name_of(prefix, &key) else {
                continue;
            };
            locks.push(LockInfo {
                name,
                key,
                fence_key: fence,
                holder: Some(LockHolder {
                    owner,
                    fencing_token: token_of(token),
                    ttl: Some(from_micros(ttl)),
                    holds: 1,
                }),
                last_fencing_token: last.map(token_of),
            });
        }
        Ok(locks)
    }

    /// The layouts of `rows` (one text column).
    fn layout_rows(&self, rows: &[tokio_postgres::Row]) -> Result<Vec<String>, LockError> {
        rows.iter()
            .map(|row| row.try_get::<_, String>(0))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.error("*", connection::backend_error(&e)))
    }

    async fn record_layout_now(&self, mine: &str, mixed: bool) -> Result<Vec<String>, LockError> {
        let in_use = micros(LAYOUT_IN_USE);
        let rows = self
            .conn
            .query(
                None,
                &self.statements.record_layout,
                &[
                    (&mine, Type::TEXT),
                    (&mixed, Type::BOOL),
                    (&in_use, Type::INT8),
                ],
            )
            .await
            .map_err(|e| self.error("*", e))?;
        self.layout_rows(&rows)
    }

    /// See `Backend::leader_proclaim`.
    async fn leader_proclaim_now(
        &self,
        role: &LockKey,
        record: &LockKey,
        owner: &str,
        metadata: &str,
    ) -> Result<Option<LeaderRecord>, LockError> {
        if metadata.contains('\0') {
            return Err(LockError::InvalidConfig {
                key: name::display_name(&role.name),
                reason: "a leader's metadata on PostgreSQL must not contain a NUL character \
                         (text cannot hold one)"
                    .into(),
            });
        }
        let (lock, record_key): (&str, &str) = (&role.lock, &record.lock);
        let keep = micros(LEADER_RECORD_TTL);
        let (channel, payload) = self.wake(record, "");
        let rows = self
            .conn
            .query(
                None,
                &self.statements.leader_proclaim,
                &[
                    (&lock, Type::TEXT),
                    (&record_key, Type::TEXT),
                    (&owner, Type::TEXT),
                    (&metadata, Type::TEXT),
                    (&keep, Type::INT8),
                    (&channel, Type::TEXT),
                    (&payload, Type::TEXT),
                ],
            )
            .await
            .map_err(|e| self.error(&role.name, e))?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let read = || -> Result<_, tokio_postgres::Error> {
            Ok((
                row.try_get::<_, i64>(0)?,
                row.try_get::<_, i64>(1)?,
                row.try_get::<_, i64>(2)?,
                row.try_get::<_, i64>(3)?,
            ))
        };
        let (term, ttl, now_ms, since_ms) =
            read().map_err(|e| self.error(&role.name, connection::backend_error(&e)))?;
        Ok(Some(LeaderRecord {
            term: token_of(term),
            owner: owner.to_owned(),
            lease_left: from_micros(ttl),
            now_ms: token_of(now_ms),
            since_ms: Some(token_of(since_ms)),
            metadata: Some(metadata.to_owned()),
        }))
    }

    /// See `Backend::leader_read` (one read-only statement).
    async fn leader_read_now(
        &self,
        role: &LockKey,
        record: &LockKey,
    ) -> Result<Option<LeaderRecord>, LockError> {
        let (lock, record_key): (&str, &str) = (&role.lock, &record.lock);
        let rows = self
            .conn
            .query(
                None,
                &self.statements.leader_read,
                &[(&lock, Type::TEXT), (&record_key, Type::TEXT)],
            )
            .await
            .map_err(|e| self.error(&role.name, e))?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let read = || -> Result<_, tokio_postgres::Error> {
            Ok((
                row.try_get::<_, Option<String>>(0)?,
                row.try_get::<_, Option<i64>>(1)?,
                row.try_get::<_, Option<i64>>(2)?,
                row.try_get::<_, i64>(3)?,
                row.try_get::<_, Option<i64>>(4)?,
                row.try_get::<_, Option<String>>(5)?,
            ))
        };
        let (owner, term, ttl, now_ms, since_ms, metadata) =
            read().map_err(|e| self.error(&role.name, connection::backend_error(&e)))?;
        let (Some(owner), Some(term)) = (owner, term) else {
            return Ok(None);
        };
        Ok(Some(LeaderRecord {
            term: token_of(term),
            owner,
            lease_left: ttl.map(from_micros).unwrap_or_default(),
            now_ms: token_of(now_ms),
            since_ms: since_ms.map(token_of),
            metadata,
        }))
    }

    /// See `Backend::leader_vacate`.
    async fn leader_vacate_now(
        &self,
        role: &LockKey,
        record: &LockKey,
        term: u64,
    ) -> Result<(), LockError> {
        let record_key: &str = &record.lock;
        let term_sql = i64::try_from(term).unwrap_or(i64::MAX);
        let (channel, payload) = self.wake(record, &format!("v {term}"));
        self.boolean(
            role,
            &self.statements.leader_vacate,
            &[
                (&record_key, Type::TEXT),
                (&term_sql, Type::INT8),
                (&channel, Type::TEXT),
                (&payload, Type::TEXT),
            ],
        )
        .await
        .map(drop)
    }
}

impl Backend for PostgresBackend {
    fn server(&self) -> &str {
        self.conn.server()
    }

    /// The server, the database, the schema and the table prefix: clients
    /// share locks when all four (and the key prefix) are the same.
    fn store_id(&self) -> String {
        self.store.clone()
    }

    fn acquire<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Attempt, LockError>> {
        self.acquire_now(key, owner, lease).boxed()
    }

    fn release<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Released, LockError>> {
        async move {
            let deleted = self
                .release_now(key, owner, &self.statements.release)
                .await?;
            Ok(Released::deleted(deleted))
        }
        .boxed()
    }

    fn rollback<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        self.release_now(key, owner, &self.statements.rollback)
            .boxed()
    }

    fn force_release<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<bool, LockError>> {
        async move {
            let lock: &str = &key.lock;
            let (channel, payload) = self.wake(key, &Self::release_message(None));
            self.boolean(
                key,
                &self.statements.force_release,
                &[
                    (&lock, Type::TEXT),
                    (&channel, Type::TEXT),
                    (&payload, Type::TEXT),
                ],
            )
            .await
        }
        .boxed()
    }

    fn renew<'a>(&'a self, items: &'a [RenewItem], lease: Duration) -> BoxFuture<'a, Vec<Renewal>> {
        self.renew_now(items, lease).boxed()
    }

    fn cut<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        left: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        async move {
            let lock: &str = &key.lock;
            let left_us = micros(left);
            let (channel, payload) = self.wake(key, &Self::release_message(Some(owner)));
            self.boolean(
                key,
                &self.statements.cut,
                &[
                    (&lock, Type::TEXT),
                    (&owner, Type::TEXT),
                    (&left_us, Type::INT8),
                    (&channel, Type::TEXT),
                    (&payload, Type::TEXT),
                ],
            )
            .await
        }
        .boxed()
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn hold_check(&self) -> Option<Arc<SqlCheck>> {
        Some(self.statements.hold_check.clone())
    }

    fn data_connection(&self) -> Result<DataConnection, Unsupported> {
        Err(Unsupported {
            backend: BACKEND,
            reason: "the data connection is a Redis connection; on PostgreSQL, use your own \
                     connection or pool to the same database",
        })
    }

    fn inspect<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        self.inspect_now(key).boxed()
    }

    fn inspect_family<'a>(
        &'a self,
        key: &'a LockKey,
    ) -> BoxFuture<'a, Result<FamilyState, LockError>> {
        async move {
            if !matches!(key.kind, Kind::Exclusive) {
                // The family is refused (see `CAPABILITIES`): nothing is stored.
                return Ok(FamilyState::default());
            }
            let info = self.inspect_now(key).await?;
            Ok(FamilyState {
                holder: info.holder,
                ..FamilyState::default()
            })
        }
        .boxed()
    }

    /// 0 for every lock: PostgreSQL shows a session only its own `LISTEN`s
    /// (`pg_listening_channels()`), so the clients that wait for a lock
    /// cannot be counted from the server.
    fn subscribers<'a>(
        &'a self,
        keys: &'a [LockKey],
    ) -> BoxFuture<'a, Result<Vec<u64>, LockError>> {
        let counts = vec![0; keys.len()];
        async move { Ok(counts) }.boxed()
    }

    fn layouts<'a>(
        &'a self,
        mine: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        async move {
            if let Some(mine) = mine {
                return self.record_layout_now(mine, true).await;
            }
            let in_use = micros(LAYOUT_IN_USE);
            let rows = self
                .conn
                .query(None, &self.statements.layouts, &[(&in_use, Type::INT8)])
                .await
                .map_err(|e| self.error("*", e))?;
            self.layout_rows(&rows)
        }
        .boxed()
    }

    fn record_layout<'a>(
        &'a self,
        mine: &'a str,
        mixed: bool,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        self.record_layout_now(mine, mixed).boxed()
    }

    fn forget_layout<'a>(&'a self, layout: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        async move {
            let rows = self
                .conn
                .query(
                    None,
                    &self.statements.forget_layout,
                    &[(&layout, Type::TEXT)],
                )
                .await
                .map_err(|e| self.error("*", e))?;
            Ok(!rows.is_empty())
        }
        .boxed()
    }

    fn leader_proclaim<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
        owner: &'a str,
        metadata: &'a str,
    ) -> BoxFuture<'a, Result<Option<LeaderRecord>, LockError>> {
        self.leader_proclaim_now(role, record, owner, metadata)
            .boxed()
    }

    fn leader_read<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
    ) -> BoxFuture<'a, Result<Option<LeaderRecord>, LockError>> {
        self.leader_read_now(role, record).boxed()
    }

    fn leader_vacate<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
        term: u64,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        self.leader_vacate_now(role, record, term).boxed()
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, LockError>> {
        self.list_now(prefix, name_prefix).boxed()
    }
}
