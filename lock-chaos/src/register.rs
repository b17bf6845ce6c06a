//! The protected resources: an unfenced and a fenced register per lock, kept in a
//! redis-server of their own (never the lock's, never faulted).
//!
//! The fenced register claims on read: a read with token `t` is refused when a higher token
//! was seen, and otherwise records `t` as the highest seen; a write with `t` is applied only
//! if no higher token was seen since (compare-and-set on the token). "Reject a lower token,
//! else apply" alone lets two holders read the same value and both write (the older one
//! first): a lost update although every write passed the check.
//!
//! Every applied write also appends `hold|token|read|prev|new` to the register's log
//! (`{prefix}log:f:{name}`, `{prefix}log:u:{name}`) in the same script, so the end of a run
//! knows every write the store accepted, including those whose answer never reached the
//! worker (aborted, killed, timed out).

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
/// since. ARGV: token, new value, hold id, the value the holder read. `KEYS[2]`: the log.
const FENCED_WRITE: &str = r"
local seen = tonumber(redis.call('HGET', KEYS[1], 'seen') or '0')
if tonumber(ARGV[1]) ~= seen then return {0, seen} end
local prev = tonumber(redis.call('HGET', KEYS[1], 'value') or '0')
redis.call('HSET', KEYS[1], 'value', ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[3] .. '|' .. ARGV[1] .. '|' .. ARGV[4] .. '|' .. prev .. '|' .. ARGV[2])
return {1, prev}
";

/// An unfenced write: sets the value, returns the previous one (so a lost update shows).
/// ARGV: new value, hold id, the value the holder read, its token. `KEYS[2]`: the log.
const UNFENCED_WRITE: &str = r"
local prev = tonumber(redis.call('GET', KEYS[1]) or '0')
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2] .. '|' .. ARGV[4] .. '|' .. ARGV[3] .. '|' .. prev .. '|' .. ARGV[1])
return prev
";

/// One applied write, as the register's log recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedWrite {
    /// The writer's hold id.
    pub hold: String,
    /// The writer's token.
    pub token: u64,
    /// The value the writer had read.
    pub read: i64,
    /// The value the write replaced.
    pub prev: i64,
    /// The value written.
    pub new: i64,
}

impl LoggedWrite {
    /// Parses `hold|token|read|prev|new`.
    pub fn parse(entry: &str) -> Option<LoggedWrite> {
        let mut parts = entry.split('|');
        let write = LoggedWrite {
            hold: parts.next()?.to_owned(),
            token: parts.next()?.parse().ok()?,
            read: parts.next()?.parse().ok()?,
            prev: parts.next()?.parse().ok()?,
            new: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(write)
    }
}

/// The end state of one register: its final value and its log (`None` for an entry that
/// did not parse, which the checker reports).
#[derive(Debug, Clone)]
pub struct RegisterTruth {
    /// Lock name.
    pub name: String,
    /// Which register.
    pub register: crate::event::Register,
    /// The value at the end of the run (0 when never written).
    pub value: i64,
    /// Every applied write, in order.
    pub log: Vec<Option<LoggedWrite>>,
}

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

    fn log_key(&self, register: crate::event::Register, name: &str) -> String {
        match register {
            crate::event::Register::Fenced => format!("{}log:f:{name}", self.prefix),
            crate::event::Register::Unfenced => format!("{}log:u:{name}", self.prefix),
        }
    }

    /// The final values and logs of both registers of every lock in `names` (read at the
    /// end of a run, once no worker writes).
    pub async fn truth(&self, names: &[String]) -> redis::RedisResult<Vec<RegisterTruth>> {
        use crate::event::Register;
        let mut conn = self.conn.clone();
        let mut out = Vec::new();
        for name in names {
            for register in [Register::Unfenced, Register::Fenced] {
                let value: Option<i64> = match register {
                    Register::Unfenced => {
                        redis::cmd("GET")
                            .arg(self.unfenced_key(name))
                            .query_async(&mut conn)
                            .await?
                    }
                    Register::Fenced => {
                        redis::cmd("HGET")
                            .arg(self.fenced_key(name))
                            .arg("value")
                            .query_async(&mut conn)
                            .await?
                    }
                };
                let entries: Vec<String> = redis::cmd("LRANGE")
                    .arg(self.log_key(register, name))
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut conn)
                    .await?;
                out.push(RegisterTruth {
                    name: name.clone(),
                    register,
                    value: value.unwrap_or(0),
                    log: entries.iter().map(|e| LoggedWrite::parse(e)).collect(),
                });
            }
        }
        Ok(out)
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
            .key(self.log_key(crate::event::Register::Unfenced, name))
            .arg(read + 1)
            .arg(hold)
            .arg(read)
            .arg(token)
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

    /// Writes `read + 1` to the fenced register under `token` for hold `hold`; applied
    /// only if no higher token read since.
    pub async fn fenced_write(
        &self,
        name: &str,
        hold: &str,
        token: u64,
        read: i64,
    ) -> redis::RedisResult<Fenced> {
        let mut conn = self.conn.clone();
        let (ok, value): (i64, i64) = self
            .fenced_write
            .key(self.fenced_key(name))
            .key(self.log_key(crate::event::Register::Fenced, name))
            .arg(token)
            .arg(read + 1)
            .arg(hold)
            .arg(read)
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
