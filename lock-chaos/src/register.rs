//! The protected resources: an unfenced and a fenced register per lock, kept in a
//! redis-server of their own (never the lock's, never faulted).
//!
//! The fenced register claims on read: a read with token `t` is refused when a higher token
//! was seen, and otherwise records `t` as the highest seen; a write with `t` is applied only
//! if no higher token was seen since (compare-and-set on the token). "Reject a lower token,
//! else apply" alone lets two holders read the same value and both write (the older one
//! first): a lost update although every write passed the check.

use redis::aio::ConnectionManager;
use redis::Script;

/// A fenced read: `{1, value}`, or `{0, highest seen}` when the token is stale.
const FENCED_READ: &str = r"
local seen = tonumber(redis.call('HGET', KEYS[1], 'seen') or '0')
local token = tonumber(ARGV[1])
if token < seen then return {0, seen} end
redis.call('HSET', KEYS[1], 'seen', ARGV[1])
return {1, tonumber(redis.call('HGET', KEYS[1], 'value') or '0')}
";

/// A fenced write: `{1, previous value}`, or `{0, highest seen}` when a higher token read
/// since.
const FENCED_WRITE: &str = r"
local seen = tonumber(redis.call('HGET', KEYS[1], 'seen') or '0')
if tonumber(ARGV[1]) ~= seen then return {0, seen} end
local prev = tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
redis.call('HSET', KEYS[1], 'value', ARGV[2])
return {1, prev}
";

/// An unfenced write: sets the value, returns the previous one (so a lost update shows).
const UNFENCED_WRITE: &str = r"
local prev = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('SET', KEYS[1], ARGV[1])
return prev
";

/// What a fenced operation answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// Applied; the value read, or the value the write replaced.
    Ok(i64),
    /// Refused: the highest token the register had seen.
    Stale(u64),
}

/// A connection to the register store.
#[derive(Clone)]
pub struct Registers {
    conn: ConnectionManager,
    prefix: String,
    fenced_read: Script,
    fenced_write: Script,
    unfenced_write: Script,
}

impl Registers {
    /// Connects to the register store at `url`; keys start with `prefix`.
    pub async fn connect(url: &str, prefix: &str) -> anyhow::Result<Registers> {
        let client = redis::Client::open(url)?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(std::time::Duration::from_secs(2)))
            .set_connection_timeout(Some(std::time::Duration::from_secs(2)));
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(Registers {
            conn,
            prefix: prefix.to_owned(),
            fenced_read: Script::new(FENCED_READ),
            fenced_write: Script::new(FENCED_WRITE),
            unfenced_write: Script::new(UNFENCED_WRITE),
        })
    }

    fn unfenced_key(&self, name: &str) -> String {
        format!("{}u:{name}", self.prefix)
    }

    fn fenced_key(&self, name: &str) -> String {
        format!("{}f:{name}", self.prefix)
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

    /// Writes the unfenced register; returns the value it replaced.
    pub async fn unfenced_write(&self, name: &str, value: i64) -> redis::RedisResult<i64> {
        let mut conn = self.conn.clone();
        self.unfenced_write
            .key(self.unfenced_key(name))
            .arg(value)
            .invoke_async(&mut conn)
            .await
    }

    /// Reads the fenced register of lock `name` under `token`, claiming it.
    pub async fn fenced_read(&self, name: &str, token: u64) -> redis::RedisResult<Fenced> {
        let mut conn = self.conn.clone();
        let (ok, value): (i64, i64) = self
            .fenced_read
            .key(self.fenced_key(name))
            .arg(token)
            .invoke_async(&mut conn)
            .await?;
        Ok(fenced(ok, value))
    }

    /// Writes the fenced register under `token`; applied only if no higher token read since.
    pub async fn fenced_write(
        &self,
        name: &str,
        token: u64,
        value: i64,
    ) -> redis::RedisResult<Fenced> {
        let mut conn = self.conn.clone();
        let (ok, value): (i64, i64) = self
            .fenced_write
            .key(self.fenced_key(name))
            .arg(token)
            .arg(value)
            .invoke_async(&mut conn)
            .await?;
        Ok(fenced(ok, value))
    }
}

fn fenced(ok: i64, value: i64) -> Fenced {
    if ok == 1 {
        Fenced::Ok(value)
    } else {
        Fenced::Stale(u64::try_from(value).unwrap_or(0))
    }
}
