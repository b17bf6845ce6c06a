//! Read-only inspection of locks on one Redis node: one lock (`TYPE`,
//! `HGETALL`, `PTTL`, `GET` of its counter, pipelined), every lock of a
//! prefix (`SCAN`, never `KEYS`, in batches of a few hundred keys, each
//! batch read in one pipelined round trip), one primitive of the lock
//! family (one read-only script, which compares the deadlines inside its
//! keys with the server's `TIME`), or every lock of every kind of a prefix
//! (`SCAN`, then the plain locks' reads and the family's inspection scripts
//! pipelined, a few hundred locks per round trip).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use redis::{RedisResult, Value};

use super::command::{self, Target};
use super::reply::{self, is_wrong_type};
use super::scripts::{self, Scripts};
use crate::backend::listed_key;
use crate::info::{FamilyState, Found};
use crate::name::{self, Kind, Layout, LockKey};
use crate::{BackendError, LockError, LockHolder, LockInfo, PermitHolder, QueuedWaiter};

/// How many keys one `SCAN` step asks for (a hint to Redis, not a limit).
const SCAN_COUNT: usize = 500;

/// What `target` (the node `server`) knows about `key`.
pub(crate) async fn inspect<T: Target>(
    target: &mut T,
    key: &LockKey,
    timeout: Duration,
    server: &str,
) -> Result<LockInfo, LockError> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("TYPE").arg(&*key.lock);
    pipe.cmd("HGETALL").arg(&*key.lock);
    pipe.cmd("PTTL").arg(&*key.lock);
    let fence_key = key.fence();
    pipe.cmd("GET").arg(&fence_key);
    let backend_error = |source: BackendError| LockError::Backend {
        key: key.name.to_string(),
        server: server.to_owned(),
        source,
    };
    let replies = command::run(target, &pipe, 4, &[], timeout)
        .await
        .map_err(backend_error)?;
    let wrong_type = |redis_key: &str| LockError::WrongType {
        key: key.name.to_string(),
        redis_key: redis_key.to_owned(),
    };
    let [kind, fields, ttl, fence]: [RedisResult<Value>; 4] =
        replies.try_into().map_err(|replies: Vec<_>| {
            backend_error(BackendError::Protocol(format!(
                "{} replies to a pipeline of 4",
                replies.len()
            )))
        })?;
    let kind: String = from_reply(kind).map_err(backend_error)?;
    let holder = match kind.as_str() {
        "none" => None,
        "hash" => {
            let fields = fields.map_err(|e| backend_error(e.into()))?;
            let ttl = ttl.map_err(|e| backend_error(e.into()))?;
            if key.layout == Layout::Redisson && is_redisson_rw(&fields) {
                return Err(wrong_type(&key.lock));
            }
            holder_from(fields, ttl).map_err(backend_error)?
        }
        _ => return Err(wrong_type(&key.lock)),
    };
    let last_fencing_token = match fence {
        Ok(value) => fence_from(value).ok_or_else(|| wrong_type(&fence_key))?,
        Err(err) if is_wrong_type(&err) => return Err(wrong_type(&fence_key)),
        Err(err) => return Err(backend_error(err.into())),
    };
    // Redisson's layout keeps the hold count in the hash and no token per
    // holder: the holder's token is the name's last one (a fenced holder's;
    // a plain RLock holder took none).
    let holder = match (key.layout, holder) {
        (Layout::Redisson, Some(mut holder)) => {
            holder.holds = usize::try_from(holder.fencing_token).unwrap_or(usize::MAX);
            holder.fencing_token = last_fencing_token.unwrap_or(0);
            Some(holder)
        }
        (_, holder) => holder,
    };
    Ok(LockInfo {
        name: key.name.to_string(),
        key: key.lock.to_string(),
        fence_key,
        holder,
        last_fencing_token,
    })
}

/// Whether a lock hash has Redisson's read-write field `mode`.
fn is_redisson_rw(fields: &Value) -> bool {
    let is_mode = |v: &Value| matches!(v, Value::BulkString(b) if b.as_slice() == b"mode");
    match fields {
        Value::Map(pairs) => pairs.iter().any(|(k, _)| is_mode(k)),
        Value::Array(items) => items.iter().step_by(2).any(is_mode),
        _ => false,
    }
}

/// Every lock of `prefix` held on `target` (the node `server`) whose name
/// starts with `name_prefix`.
pub(crate) async fn list<T: Target>(
    target: &mut T,
    prefix: &str,
    name_prefix: &str,
    timeout: Duration,
    server: &str,
) -> Result<Vec<LockInfo>, LockError> {
    let backend_error = |source: BackendError| LockError::Backend {
        key: format!("{}*", name::display_name(name_prefix)),
        server: server.to_owned(),
        source,
    };
    let pattern = format!(
        "{}{{{}*}}",
        glob_escape(prefix),
        glob_escape(&name::escape(name_prefix))
    );
    let mut locks = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys) = scan_page(target, cursor, &pattern, Some("hash"), timeout)
            .await
            .map_err(backend_error)?;
        let keys: Vec<(LockKey, String)> = keys
            .into_iter()
            .filter_map(|k| {
                let name = name::name_of(prefix, &k)?;
                let key = LockKey::new(prefix, &name).ok()?;
                (*key.lock == *k).then_some((key, name))
            })
            .collect();
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for (key, _) in &keys {
                plain_reads(&mut pipe, key);
            }
            let replies = command::run(target, &pipe, keys.len() * 3, &[], timeout)
                .await
                .map_err(backend_error)?;
            let mut replies = replies.into_iter();
            for (key, name) in keys {
                let (Some(fields), Some(ttl), Some(fence)) =
                    (replies.next(), replies.next(), replies.next())
                else {
                    return Err(backend_error(BackendError::Protocol(
                        "too few replies to a pipeline".into(),
                    )));
                };
                if let Some(info) =
                    plain_info(name, &key, fields, ttl, fence).map_err(backend_error)?
                {
                    locks.push(info);
                }
            }
        }
        if next == 0 {
            return Ok(locks);
        }
        cursor = next;
    }
}

/// Every lock of `prefix` on `target` (the node `server`) whose name starts
/// with `name_prefix`: the plain locks held, and what the store records of
/// every primitive of the lock family it has keys of. One `SCAN` walk of
/// the prefix's keys (any type), then one pipelined round trip per
/// [`SCAN_COUNT`] locks: `HGETALL`, `PTTL`, `GET` for a plain lock, the
/// inspection script for a primitive (its keys share its slot, so its node).
pub(crate) async fn list_all<T: Target>(
    target: &mut T,
    prefix: &str,
    name_prefix: &str,
    scripts: &Scripts,
    timeout: Duration,
    server: &str,
) -> Result<Vec<Found>, LockError> {
    let backend_error = |source: BackendError| LockError::Backend {
        key: format!("{}*", name::display_name(name_prefix)),
        server: server.to_owned(),
        source,
    };
    let pattern = format!(
        "{}{{{}*}}*",
        glob_escape(prefix),
        glob_escape(&name::escape(name_prefix))
    );
    // The locks by kind then name: a primitive has several keys, and SCAN
    // may return a key twice.
    let mut seen: BTreeSet<(u8, String)> = BTreeSet::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys) = scan_page(target, cursor, &pattern, None, timeout)
            .await
            .map_err(backend_error)?;
        for key in keys {
            if let Some((name, kind)) = listed_key(prefix, &key) {
                if name.starts_with(name_prefix) {
                    seen.insert((rank(kind), name));
                }
            }
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let keys: Vec<LockKey> = seen
        .into_iter()
        .filter_map(|(rank, name)| LockKey::of_kind(prefix, &name, kind_of(rank)).ok())
        .collect();
    let mut found = Vec::with_capacity(keys.len());
    for batch in keys.chunks(SCAN_COUNT) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut count = 0;
        for key in batch {
            if key.kind == Kind::Exclusive {
                plain_reads(&mut pipe, key);
                count += 3;
            } else {
                for cmd in scripts.inspect(key).cmd_iter() {
                    pipe.add_command(cmd.clone());
                    count += 1;
                }
            }
        }
        let replies = command::run(target, &pipe, count, &scripts.all(), timeout)
            .await
            .map_err(backend_error)?;
        let mut replies = replies.into_iter();
        let too_few = || {
            backend_error(BackendError::Protocol(
                "too few replies to a pipeline".into(),
            ))
        };
        for key in batch {
            if key.kind != Kind::Exclusive {
                let reply = replies.next().ok_or_else(too_few)?;
                let reply = reply.map_err(|e| backend_error(e.into()))?;
                // A key of the name that holds another type is not ours.
                if let Ok(state) = family_from(reply, key).map_err(backend_error)? {
                    found.push(Found::Family(key.clone(), state));
                }
                continue;
            }
            let (Some(fields), Some(ttl), Some(fence)) =
                (replies.next(), replies.next(), replies.next())
            else {
                return Err(too_few());
            };
            if let Some(info) =
                plain_info(key.name.to_string(), key, fields, ttl, fence).map_err(backend_error)?
            {
                found.push(Found::Plain(info));
            }
        }
    }
    Ok(found)
}

/// One page of a `SCAN` walk from `cursor` over the keys matching `pattern`
/// (of `kind` only, when given): the next cursor (0: done) and the keys.
async fn scan_page<T: Target>(
    target: &mut T,
    cursor: u64,
    pattern: &str,
    kind: Option<&str>,
    timeout: Duration,
) -> Result<(u64, Vec<String>), BackendError> {
    let mut scan = redis::cmd("SCAN");
    scan.arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(SCAN_COUNT);
    if let Some(kind) = kind {
        scan.arg("TYPE").arg(kind);
    }
    let replies = command::run(target, &scripts::one(scan), 1, &[], timeout).await?;
    let (next, keys): (u64, Vec<Vec<u8>>) = replies
        .into_iter()
        .next()
        .map(from_reply)
        .unwrap_or_else(|| Err(BackendError::Protocol("no reply to SCAN".into())))?;
    let keys = keys
        .into_iter()
        .filter_map(|k| String::from_utf8(k).ok())
        .collect();
    Ok((next, keys))
}

/// The three reads of a plain lock in a listing: its hash, its TTL, its
/// fence counter (answered in that order, for [`plain_info`]).
fn plain_reads(pipe: &mut redis::Pipeline, key: &LockKey) {
    pipe.cmd("HGETALL").arg(&*key.lock);
    pipe.cmd("PTTL").arg(&*key.lock);
    pipe.cmd("GET").arg(key.fence());
}

/// The plain lock `name` from the answers to [`plain_reads`]; `None` when
/// it is free, gone or replaced by another type since SCAN saw it.
fn plain_info(
    name: String,
    key: &LockKey,
    fields: redis::RedisResult<Value>,
    ttl: redis::RedisResult<Value>,
    fence: redis::RedisResult<Value>,
) -> Result<Option<LockInfo>, BackendError> {
    let (Ok(fields), Ok(ttl)) = (fields, ttl) else {
        return Ok(None);
    };
    let Some(holder) = holder_from(fields, ttl)? else {
        return Ok(None);
    };
    Ok(Some(LockInfo {
        name,
        key: key.lock.to_string(),
        fence_key: key.fence(),
        holder: Some(holder),
        last_fencing_token: fence.ok().and_then(fence_from).flatten(),
    }))
}

/// The order of `kind` in a listing (the inverse of [`kind_of`]).
fn rank(kind: Kind) -> u8 {
    match kind {
        Kind::Exclusive => 0,
        Kind::Fair => 1,
        Kind::Read | Kind::Write => 2,
        Kind::Permits { .. } => 3,
    }
}

/// The kind of rank `rank` (see [`rank`]).
fn kind_of(rank: u8) -> Kind {
    match rank {
        0 => Kind::Exclusive,
        1 => Kind::Fair,
        2 => Kind::Write,
        _ => Kind::Permits { take: 1, total: 1 },
    }
}

/// What `target` (the node `server`) records of the family primitive of
/// `key`: one `EVALSHA` of its inspection script (loaded again on
/// `NOSCRIPT`), read at one instant.
pub(crate) async fn inspect_family<T: Target>(
    target: &mut T,
    key: &LockKey,
    scripts: &Scripts,
    timeout: Duration,
    server: &str,
) -> Result<FamilyState, LockError> {
    let backend_error = |source: BackendError| LockError::Backend {
        key: key.name.to_string(),
        server: server.to_owned(),
        source,
    };
    let replies = command::run(target, &scripts.inspect(key), 1, &scripts.all(), timeout)
        .await
        .map_err(backend_error)?;
    let reply = reply::first(replies).map_err(backend_error)?;
    match family_from(reply, key).map_err(backend_error)? {
        Ok(state) => Ok(state),
        Err(redis_key) => Err(LockError::WrongType {
            key: key.name.to_string(),
            redis_key,
        }),
    }
}

/// The inspection script's reply for `key`: `{1, holder, shares, waiters,
/// counter}`, or `{0, key}` (`Err(key)`) when that key holds another type
/// (as does the fencing counter when it is not a number).
fn family_from(reply: Value, key: &LockKey) -> Result<Result<FamilyState, String>, BackendError> {
    let parts: Vec<Value> = from_reply(Ok(reply))?;
    let mut parts = parts.into_iter();
    let mut next = || {
        parts
            .next()
            .ok_or_else(|| BackendError::Protocol("too few parts in an inspection reply".into()))
    };
    let status: i64 = from_reply(Ok(next()?))?;
    if status == 0 {
        return Ok(Err(from_reply(Ok(next()?))?));
    }
    let holder: Vec<Value> = from_reply(Ok(next()?))?;
    let holder = match <[Value; 4]>::try_from(holder) {
        Ok([owner, token, ttl, holds]) => Some(LockHolder {
            owner: from_reply(Ok(owner))?,
            fencing_token: from_reply(Ok(token))?,
            ttl: u64::try_from(from_reply::<i64>(Ok(ttl))?)
                .ok()
                .map(Duration::from_millis),
            holds: from_reply(Ok(holds))?,
        }),
        Err(empty) if empty.is_empty() => None,
        Err(other) => {
            return Err(BackendError::Protocol(format!(
                "a holder of {} parts",
                other.len()
            )))
        }
    };
    let shares = triples(next()?)?
        .into_iter()
        .map(|(owner, ttl, permits)| PermitHolder {
            owner,
            permits,
            ttl,
        })
        .collect();
    let waiters = triples(next()?)?
        .into_iter()
        .map(|(owner, place_ttl, _)| QueuedWaiter { owner, place_ttl })
        .collect();
    let Some(last_fencing_token) = fence_from(next()?) else {
        return Ok(Err(key.fence()));
    };
    Ok(Ok(FamilyState {
        holder,
        shares,
        waiters,
        last_fencing_token,
    }))
}

/// A flat `owner, ms, n` array of the inspection script.
fn triples(value: Value) -> Result<Vec<(String, Duration, u32)>, BackendError> {
    let flat: Vec<Value> = from_reply(Ok(value))?;
    let mut flat = flat.into_iter();
    let mut out = Vec::with_capacity(flat.len() / 3);
    while let Some(owner) = flat.next() {
        let (Some(ms), Some(n)) = (flat.next(), flat.next()) else {
            return Err(BackendError::Protocol(
                "an incomplete entry in an inspection reply".into(),
            ));
        };
        let ms: i64 = from_reply(Ok(ms))?;
        out.push((
            from_reply(Ok(owner))?,
            Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
            from_reply(Ok(n))?,
        ));
    }
    Ok(out)
}

/// Escapes the glob characters of `SCAN MATCH` so that `s` matches itself.
fn glob_escape(s: &str) -> String {
    let mut escaped = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The holder recorded in a lock hash (`HGETALL` reply) with its `PTTL`;
/// `None` for an empty (deleted) hash.
fn holder_from(fields: Value, ttl: Value) -> Result<Option<LockHolder>, BackendError> {
    // A map in RESP3, a flat array of pairs in RESP2; both parse into a map.
    let fields: BTreeMap<String, String> = from_reply(Ok(fields))?;
    let ttl: i64 = from_reply(Ok(ttl))?;
    let holds = fields.len();
    let Some((owner, token)) = fields.into_iter().next() else {
        return Ok(None);
    };
    let fencing_token = token
        .parse()
        .map_err(|_| BackendError::Protocol(format!("fencing token `{token}` is not a number")))?;
    Ok(Some(LockHolder {
        owner,
        fencing_token,
        ttl: u64::try_from(ttl).ok().map(Duration::from_millis),
        holds,
    }))
}

/// The fence counter from a `GET` reply: `Some(None)` when unset, `None`
/// when it is not a number.
fn fence_from(value: Value) -> Option<Option<u64>> {
    match value {
        Value::Nil => Some(None),
        value => redis::from_redis_value::<u64>(value).ok().map(Some),
    }
}

fn from_reply<T: redis::FromRedisValue>(reply: RedisResult<Value>) -> Result<T, BackendError> {
    redis::from_redis_value(reply?).map_err(|e| redis::RedisError::from(e).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert_eq!(glob_escape("lock:"), "lock:");
    }
}
