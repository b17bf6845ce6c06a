//! The protected resources: an unfenced and a fenced register per lock. The unfenced one,
//! and by default the fenced one, live in stores of their own (never the lock's servers,
//! never faulted); with `--fence-store lock-redis` the fenced one lives in the lock's
//! servers themselves, and meets every fault the locks meet (see below).
//!
//! The unfenced register is a plain key of a redis-server, written by a script of its own:
//! it is unfenced by design, to show that the harness sees lost updates.
//!
//! The fenced register is what a user of lock-fence would build, claim-on-read: the read is
//! a fenced read that records the token, and the write is refused when a higher token has
//! read or written the register since (lock-fence's rule: refused when `token < seen`). In
//! the register store's redis-server (`--fence-store redis`, the default) it is
//! `RedisFence`: the read is `RedisFence::read`, the write `RedisFence::run_all` of
//! `SET ... GET` and the `RPUSH` of the log entry, one script. In PostgreSQL
//! (`--fence-store postgres`) it is `PgFence` on a row of [`PG_REGISTERS`]: the read is
//! `PgFence::read` in autocommit, the write a transaction that locks the row, reads the
//! value it replaces, does `PgFence::write` and inserts the log row into [`PG_LOG`].
//!
//! Every applied write also appends to the register's log in the same atomic step, so the
//! end of a run knows every write the store accepted, including those whose answer never
//! reached the worker (aborted, killed, timed out): `hold|token|read|prev|new` for the
//! unfenced register (`{prefix}log:u:{name}`), `hold|token|read|new` for the fenced one in
//! Redis (`{prefix}log:f:{{name}}`: the commands under the fence are fixed before the script
//! runs, so the entry cannot quote the value `SET` replaced; the log's order is the store's,
//! so that value is the previous entry's `new`), and a row with `prev` in PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use distlock::fence::{FenceError, PgFence, RedisFence};
use distlock::DataConnection;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::Script;
use tokio_postgres::NoTls;

use crate::event::Register;

/// An unfenced write: sets the value, returns the previous one (so a lost update shows).
/// ARGV: new value, hold id, the value the holder read, its token. `KEYS[2]`: the log.
const UNFENCED_WRITE: &str = r"
local prev = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2] .. '|' .. ARGV[4] .. '|' .. ARGV[3] .. '|' .. prev .. '|' .. ARGV[1])
return prev
";

/// The PostgreSQL table of fenced registers (one row per name, fence column by `PgFence`).
pub const PG_REGISTERS: &str = "chaos_registers";

/// The PostgreSQL log of applied fenced writes, in commit order per name (`seq`).
pub const PG_LOG: &str = "chaos_register_log";

/// How long one PostgreSQL operation of a worker may take before it counts as an error (the
/// store is never faulted; a worker paused inside a write holds its row lock this long).
const PG_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the fenced register lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum FenceStore {
    /// lock-fence's `RedisFence`, in the register store's redis-server.
    #[default]
    Redis,
    /// lock-fence's `PgFence`, in a PostgreSQL of its own.
    Postgres,
    /// lock-fence's `RedisFence` on the lock client's data connection: in the lock's own
    /// servers, through every fault (Sentinel, Cluster, standalone; not Redlock or memory).
    LockRedis,
}

impl FenceStore {
    /// The name used on the command line and in output.
    pub fn name(self) -> &'static str {
        match self {
            FenceStore::Redis => "redis",
            FenceStore::Postgres => "postgres",
            FenceStore::LockRedis => "lock-redis",
        }
    }
}

/// One applied write, as the register's log recorded it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoggedWrite {
    /// The writer's hold id.
    pub hold: String,
    /// The writer's token.
    pub token: u64,
    /// The value the writer had read.
    pub read: i64,
    /// The value the write replaced, when the log records it (the fenced register in Redis
    /// does not: it is the previous entry's `new`, see the module docs).
    pub prev: Option<i64>,
    /// The value written.
    pub new: i64,
}

impl LoggedWrite {
    /// Parses `hold|token|read|prev|new`, or `hold|token|read|new` (no `prev`).
    pub fn parse(entry: &str) -> Option<LoggedWrite> {
        let parts: Vec<&str> = entry.split('|').collect();
        let (hold, token, read, prev, new) = match parts[..] {
            [hold, token, read, prev, new] => (hold, token, read, Some(prev), new),
            [hold, token, read, new] => (hold, token, read, None, new),
            _ => return None,
        };
        Some(LoggedWrite {
            hold: hold.to_owned(),
            token: token.parse().ok()?,
            read: read.parse().ok()?,
            prev: match prev {
                Some(prev) => Some(prev.parse().ok()?),
                None => None,
            },
            new: new.parse().ok()?,
        })
    }
}

/// The end state of one register: its final value and its log (`None` for an entry that
/// did not parse, which the checker reports). Saved with a run's history (see
/// `replay.rs`), so that a replay checks the register store as the run did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RegisterTruth {
    /// Lock name.
    pub name: String,
    /// Which register.
    pub register: Register,
    /// The value at the end of the run (0 when never written).
    pub value: i64,
    /// Every applied write, in order.
    pub log: Vec<Option<LoggedWrite>>,
    /// The register and its log were read from the lock's servers (`--fence-store
    /// lock-redis`), where a fault can lose them together: the log then lists the writes
    /// that survived, not every write applied. False in histories of earlier rounds.
    #[serde(default)]
    pub in_lock_servers: bool,
}

/// What a fenced operation answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// Applied; the value read, or the value the write replaced.
    Ok(i64),
    /// Refused: the highest token the register had seen.
    Stale(u64),
    /// Ran on the master, but fewer replicas than asked acknowledged it in time
    /// (`FenceError::NotReplicated`): it may or may not survive a failover, an unknown
    /// outcome like a timeout.
    NotReplicated,
}

/// The fenced registers' store.
#[derive(Clone)]
enum FencedStore {
    Redis(RedisFence<ConnectionManager>),
    Postgres(Arc<PgRegisters>),
    /// In the lock's servers, through the lock client's data connection.
    LockRedis(RedisFence<DataConnection>),
}

/// The connections to the register stores.
#[derive(Clone)]
pub struct Registers {
    conn: ConnectionManager,
    prefix: String,
    unfenced_write: Script,
    fenced: FencedStore,
}

impl Registers {
    /// Connects to the register store at `url` (keys start with `prefix`), with the fenced
    /// registers there, or in the PostgreSQL at `postgres` (a libpq connection string) when
    /// given.
    pub async fn connect(
        url: &str,
        prefix: &str,
        postgres: Option<&str>,
    ) -> anyhow::Result<Registers> {
        let client = redis::Client::open(url)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_connection_timeout(Some(Duration::from_secs(2)));
        let conn = ConnectionManager::new_with_config(client, config).await?;
        let fenced = match postgres {
            None => FencedStore::Redis(RedisFence::new(conn.clone())),
            Some(config) => FencedStore::Postgres(Arc::new(PgRegisters::new(config)?)),
        };
        Ok(Registers {
            conn,
            prefix: prefix.to_owned(),
            unfenced_write: Script::new(UNFENCED_WRITE),
            fenced,
        })
    }

    /// Keeps the fenced registers in the lock's servers, behind `fence` (built on the lock
    /// client's data connection), instead of the store chosen at [`Registers::connect`].
    pub fn with_lock_fence(mut self, fence: RedisFence<DataConnection>) -> Registers {
        self.fenced = FencedStore::LockRedis(fence);
        self
    }

    /// Creates the PostgreSQL tables of the fenced registers and a row (value 0, fence 0)
    /// for each of `names`, which `PgFence` needs before the first read.
    pub async fn prepare_postgres(config: &str, names: &[String]) -> anyhow::Result<()> {
        let pg = PgRegisters::new(config)?;
        let client = pg.client().await?;
        client
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {PG_REGISTERS} (name text PRIMARY KEY, value bigint NOT NULL DEFAULT 0);
                 {};
                 CREATE TABLE IF NOT EXISTS {PG_LOG} (seq bigserial PRIMARY KEY, name text NOT NULL,
                   hold text NOT NULL, token bigint NOT NULL, read bigint NOT NULL,
                   prev bigint NOT NULL, new bigint NOT NULL)",
                pg.fence.migration()
            ))
            .await
            .context("creating the register tables")?;
        for name in names {
            client
                .execute(
                    &format!(
                        "INSERT INTO {PG_REGISTERS} (name) VALUES ($1) ON CONFLICT DO NOTHING"
                    ),
                    &[name],
                )
                .await
                .context("inserting a register row")?;
        }
        Ok(())
    }

    fn unfenced_key(&self, name: &str) -> String {
        format!("{}u:{name}", self.prefix)
    }

    /// The fenced register's key in Redis; its hash tag keeps its log and fence in its
    /// cluster slot.
    fn fenced_key(&self, name: &str) -> String {
        format!("{}f:{{{name}}}", self.prefix)
    }

    fn log_key(&self, register: Register, name: &str) -> String {
        match register {
            Register::Fenced => format!("{}log:f:{{{name}}}", self.prefix),
            Register::Unfenced => format!("{}log:u:{name}", self.prefix),
        }
    }

    /// The final values and logs of both registers of every lock in `names` (read at the
    /// end of a run, once no worker writes). With `lock_servers` (`--fence-store
    /// lock-redis`), the fenced registers are read through it: a connection to the lock
    /// topology's current master(s) that the caller found by asking the sentinels or the
    /// cluster, not through the library under test.
    pub async fn truth<C: ConnectionLike + Send>(
        &self,
        names: &[String],
        mut lock_servers: Option<C>,
    ) -> anyhow::Result<Vec<RegisterTruth>> {
        let mut conn = self.conn.clone();
        let mut out = Vec::new();
        for name in names {
            let value: Option<i64> = redis::cmd("GET")
                .arg(self.unfenced_key(name))
                .query_async(&mut conn)
                .await?;
            let entries = self.redis_log(Register::Unfenced, name).await?;
            out.push(RegisterTruth {
                name: name.clone(),
                register: Register::Unfenced,
                value: value.unwrap_or(0),
                log: entries.iter().map(|e| LoggedWrite::parse(e)).collect(),
                in_lock_servers: false,
            });
            let (value, log) = match (&self.fenced, lock_servers.as_mut()) {
                (_, Some(servers)) => self.fenced_truth(servers, name).await?,
                (FencedStore::Postgres(pg), None) => pg.truth(name).await?,
                (FencedStore::Redis(_), None) => self.fenced_truth(&mut conn, name).await?,
                (FencedStore::LockRedis(_), None) => {
                    anyhow::bail!("the fenced registers are in the lock's servers: read them there")
                }
            };
            out.push(RegisterTruth {
                name: name.clone(),
                register: Register::Fenced,
                value,
                log,
                in_lock_servers: lock_servers.is_some(),
            });
        }
        Ok(out)
    }

    /// The fenced register of `name` and its log, as `conn` has them.
    async fn fenced_truth<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
    ) -> anyhow::Result<(i64, Vec<Option<LoggedWrite>>)> {
        let value: Option<i64> = redis::cmd("GET")
            .arg(self.fenced_key(name))
            .query_async(conn)
            .await?;
        let entries: Vec<String> = redis::cmd("LRANGE")
            .arg(self.log_key(Register::Fenced, name))
            .arg(0)
            .arg(-1)
            .query_async(conn)
            .await?;
        let log = entries.iter().map(|e| LoggedWrite::parse(e)).collect();
        Ok((value.unwrap_or(0), log))
    }

    async fn redis_log(&self, register: Register, name: &str) -> redis::RedisResult<Vec<String>> {
        let mut conn = self.conn.clone();
        redis::cmd("LRANGE")
            .arg(self.log_key(register, name))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
    }

    /// Reads the unfenced register of lock `name`.
    pub async fn unfenced_read(&self, name: &str) -> redis::RedisResult<i64> {
        let mut conn = self.conn.clone();
        let value: Option<i64> = redis::cmd("GET")
            .arg(self.unfenced_key(name))
            .query_async(&mut conn)
            .await?;
        Ok(value.unwrap_or(0))
    }

    /// Writes `read + 1` to the unfenced register for hold `hold`; returns the value it
    /// replaced.
    pub async fn unfenced_write(
        &self,
        name: &str,
        hold: &str,
        token: u64,
        read: i64,
    ) -> redis::RedisResult<i64> {
        let mut conn = self.conn.clone();
        self.unfenced_write
            .key(self.unfenced_key(name))
            .key(self.log_key(Register::Unfenced, name))
            .arg(read + 1)
            .arg(hold)
            .arg(read)
            .arg(token)
            .invoke_async(&mut conn)
            .await
    }

    /// Reads the fenced register of lock `name` under `token`, claiming it.
    pub async fn fenced_read(&self, name: &str, token: u64) -> anyhow::Result<Fenced> {
        match &self.fenced {
            FencedStore::Redis(fence) => {
                redis_fenced_read(fence, &self.fenced_key(name), token).await
            }
            FencedStore::LockRedis(fence) => {
                redis_fenced_read(fence, &self.fenced_key(name), token).await
            }
            FencedStore::Postgres(pg) => pg.read(name, token).await,
        }
    }

    /// Writes `read + 1` to the fenced register under `token` for hold `hold`, and logs it
    /// in the same atomic step; refused when a higher token has read or written since.
    pub async fn fenced_write(
        &self,
        name: &str,
        hold: &str,
        token: u64,
        read: i64,
    ) -> anyhow::Result<Fenced> {
        let new = read + 1;
        let (key, log) = (self.fenced_key(name), self.log_key(Register::Fenced, name));
        let entry = format!("{hold}|{token}|{read}|{new}");
        match &self.fenced {
            FencedStore::Redis(fence) => {
                redis_fenced_write(fence, &key, &log, &entry, token, new).await
            }
            FencedStore::LockRedis(fence) => {
                redis_fenced_write(fence, &key, &log, &entry, token, new).await
            }
            FencedStore::Postgres(pg) => pg.write(name, hold, token, read, new).await,
        }
    }
}

/// `RedisFence::read` of `key` under `token`.
async fn redis_fenced_read<C>(
    fence: &RedisFence<C>,
    key: &str,
    token: u64,
) -> anyhow::Result<Fenced>
where
    C: ConnectionLike + Clone + Send + Sync,
{
    let value = fence.read::<Option<i64>>(key, token).await;
    fenced(value.map(Option::unwrap_or_default))
}

/// `RedisFence::run_all` of `SET key new GET` and the `RPUSH` of the log entry, one script.
async fn redis_fenced_write<C>(
    fence: &RedisFence<C>,
    key: &str,
    log: &str,
    entry: &str,
    token: u64,
    new: i64,
) -> anyhow::Result<Fenced>
where
    C: ConnectionLike + Clone + Send + Sync,
{
    let replies = fence
        .run_all::<(Option<i64>, i64)>(
            key,
            token,
            &[log],
            &[
                redis::cmd("SET").arg(key).arg(new).arg("GET").clone(),
                redis::cmd("RPUSH").arg(log).arg(entry).clone(),
            ],
        )
        .await;
    fenced(replies.map(|(prev, _)| prev.unwrap_or_default()))
}

/// A fenced answer: applied, refused as stale, not replicated (unknown outcome), or an
/// error.
fn fenced(result: Result<i64, FenceError>) -> anyhow::Result<Fenced> {
    match result {
        Ok(value) => Ok(Fenced::Ok(value)),
        Err(FenceError::Stale { seen, .. }) => Ok(Fenced::Stale(seen)),
        Err(FenceError::NotReplicated { .. }) => Ok(Fenced::NotReplicated),
        Err(other) => Err(other.into()),
    }
}

/// The fenced registers in PostgreSQL: `PgFence` on [`PG_REGISTERS`], a small pool of
/// connections (each task's operation takes one; a transaction needs one of its own).
struct PgRegisters {
    config: String,
    fence: PgFence,
    idle: tokio::sync::Mutex<Vec<tokio_postgres::Client>>,
}

impl PgRegisters {
    fn new(config: &str) -> anyhow::Result<PgRegisters> {
        Ok(PgRegisters {
            config: config.to_owned(),
            fence: PgFence::new(PG_REGISTERS, "name", "fence")?,
            idle: tokio::sync::Mutex::new(Vec::new()),
        })
    }

    /// An idle connection, or a new one.
    async fn client(&self) -> anyhow::Result<tokio_postgres::Client> {
        if let Some(client) = self.idle.lock().await.pop() {
            if !client.is_closed() {
                return Ok(client);
            }
        }
        let (client, connection) =
            tokio::time::timeout(PG_TIMEOUT, tokio_postgres::connect(&self.config, NoTls))
                .await
                .context("connecting to postgres timed out")?
                .context("connecting to postgres")?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// Puts a connection back for the next operation (one that failed is dropped instead).
    async fn give_back(&self, client: tokio_postgres::Client) {
        if !client.is_closed() {
            self.idle.lock().await.push(client);
        }
    }

    async fn read(&self, name: &str, token: u64) -> anyhow::Result<Fenced> {
        let client = self.client().await?;
        let row = tokio::time::timeout(
            PG_TIMEOUT,
            self.fence.read(&client, &name, token, &["value"]),
        )
        .await
        .context("postgres read timed out")?;
        let answer = match row {
            Ok(row) => Fenced::Ok(row.try_get(0)?),
            Err(FenceError::Stale { seen, .. }) => Fenced::Stale(seen),
            Err(other) => return Err(other.into()),
        };
        self.give_back(client).await;
        Ok(answer)
    }

    async fn write(
        &self,
        name: &str,
        hold: &str,
        token: u64,
        read: i64,
        new: i64,
    ) -> anyhow::Result<Fenced> {
        let mut client = self.client().await?;
        let answer = tokio::time::timeout(PG_TIMEOUT, async {
            let tx = client.transaction().await?;
            // The row lock, taken first, makes `prev` the value this write replaces and
            // orders the log rows of one name as the writes.
            let prev: i64 = tx
                .query_one(
                    &format!("SELECT value FROM {PG_REGISTERS} WHERE name = $1 FOR UPDATE"),
                    &[&name],
                )
                .await?
                .try_get(0)?;
            match self.fence.write(&tx, &name, token, &[("value", &new)]).await {
                Ok(()) => {}
                Err(FenceError::Stale { seen, .. }) => {
                    tx.rollback().await?;
                    return Ok(Fenced::Stale(seen));
                }
                Err(other) => return Err(anyhow::Error::from(other)),
            }
            tx.execute(
                &format!(
                    "INSERT INTO {PG_LOG} (name, hold, token, read, prev, new) VALUES ($1, $2, $3, $4, $5, $6)"
                ),
                &[&name, &hold, &i64::try_from(token)?, &read, &prev, &new],
            )
            .await?;
            tx.commit().await?;
            anyhow::Ok(Fenced::Ok(prev))
        })
        .await
        .context("postgres write timed out")??;
        self.give_back(client).await;
        Ok(answer)
    }

    /// The final value of register `name` and its log, in commit order.
    async fn truth(&self, name: &str) -> anyhow::Result<(i64, Vec<Option<LoggedWrite>>)> {
        let client = self.client().await?;
        let value: Option<i64> = client
            .query_opt(
                &format!("SELECT value FROM {PG_REGISTERS} WHERE name = $1"),
                &[&name],
            )
            .await?
            .map(|row| row.try_get(0))
            .transpose()?;
        let rows = client
            .query(
                &format!(
                    "SELECT hold, token, read, prev, new FROM {PG_LOG} WHERE name = $1 ORDER BY seq"
                ),
                &[&name],
            )
            .await?;
        let log = rows
            .iter()
            .map(|row| {
                Some(LoggedWrite {
                    hold: row.try_get(0).ok()?,
                    token: u64::try_from(row.try_get::<_, i64>(1).ok()?).ok()?,
                    read: row.try_get(2).ok()?,
                    prev: Some(row.try_get(3).ok()?),
                    new: row.try_get(4).ok()?,
                })
            })
            .collect();
        self.give_back(client).await;
        Ok((value.unwrap_or(0), log))
    }
}
