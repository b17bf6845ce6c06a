//! Reading the lock commands' replies, and mapping failures to the errors a
//! caller sees.

use std::time::Duration;

use redis::{RedisError, RedisResult, Value};

use super::command::{self, Replies, Target};
use super::scripts;
use crate::backend::{Attempt, Busy, Renewal};
use crate::name::LockKey;
use crate::{BackendError, LockError};

/// The first reply of a pipeline.
pub(crate) fn first(replies: Replies) -> Result<Value, BackendError> {
    match replies.into_iter().next() {
        Some(reply) => Ok(reply?),
        None => Err(BackendError::Protocol("no reply to a command".into())),
    }
}

/// A release's replies (see `Scripts::release_replies`): how many holds it
/// deleted, and how many subscriptions its wake-up reached when it has that
/// reply (an error there, such as a refused `PUBLISH`, only loses the count).
pub(crate) fn release(replies: Replies) -> Result<(i64, Option<u64>), BackendError> {
    let mut replies = replies.into_iter();
    let deleted = match replies.next() {
        Some(reply) => int(reply?)?,
        None => return Err(BackendError::Protocol("no reply to a release".into())),
    };
    let listeners = match replies.next() {
        Some(Ok(Value::Int(n))) => u64::try_from(n).ok(),
        _ => None,
    };
    Ok((deleted, listeners))
}

/// The acquire script's reply: `{1, token}`, or `{0, pttl}` (the fair lock:
/// `{0, pttl, fence}`, the fencing counter when the attempt was answered).
pub(crate) fn attempt(reply: Value) -> Result<Attempt, BackendError> {
    let values: Vec<i64> = parse(reply)?;
    let (granted, value, fence) = match values.as_slice() {
        [granted, value] => (*granted, *value, None),
        [granted, value, fence] => (*granted, *value, u64::try_from(*fence).ok()),
        other => return Err(BackendError::Protocol(format!("acquire reply {other:?}"))),
    };
    Ok(match granted {
        1 => Attempt::Acquired {
            token: u64::try_from(value)
                .map_err(|_| BackendError::Protocol(format!("fencing token {value}")))?,
        },
        // Held by a hot-lock keeper, which was asked to give it up: look
        // again soon even if the request is missed.
        2 => Attempt::busy(Some(
            u64::try_from(value)
                .map_or(crate::wire::ASK_AGAIN, Duration::from_millis)
                .min(crate::wire::ASK_AGAIN),
        )),
        _ => Attempt::Busy(Busy {
            ttl: u64::try_from(value).ok().map(Duration::from_millis),
            fence,
        }),
    })
}

/// An integer reply (`HDEL`'s count, a script's 0 or 1).
pub(crate) fn int(reply: Value) -> Result<i64, BackendError> {
    parse(reply)
}

/// `WAIT`'s reply: the replicas that acknowledged.
pub(crate) fn acknowledged(replies: &Replies) -> Option<u64> {
    match replies.last() {
        Some(Ok(Value::Int(n))) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// The outcome of one renewal reply.
pub(crate) fn renewal(reply: RedisResult<Value>) -> Renewal {
    match reply {
        Ok(Value::Int(1)) => Renewal::Renewed,
        Ok(Value::Int(_)) => Renewal::Gone,
        Ok(other) => Renewal::Failed(BackendError::Protocol(format!("{other:?}"))),
        // The lock key was overwritten with another type: not ours.
        Err(e) if is_wrong_type(&e) => Renewal::Gone,
        Err(e) => Renewal::Failed(e.into()),
    }
}

/// `n` failed renewals for one failure.
pub(crate) fn failed_all(n: usize, err: &BackendError) -> Vec<Renewal> {
    (0..n)
        .map(|_| Renewal::Failed(BackendError::Protocol(err.to_string())))
        .collect()
}

pub(crate) fn parse<T: redis::FromRedisValue>(reply: Value) -> Result<T, BackendError> {
    redis::from_redis_value(reply).map_err(|e| BackendError::Redis(e.into()))
}

/// Whether `err` says a key holds another type than the command expects.
pub(crate) fn is_wrong_type(err: &RedisError) -> bool {
    let text = err.to_string();
    err.code() == Some("WRONGTYPE") || text.contains("WRONGTYPE") || text.contains("not an integer")
}

/// Maps a failure of a command on `key` (answered by `server` through
/// `target`) to the error the caller sees: `WrongType` naming the key of the
/// wrong type (found with `TYPE`), else `Backend`.
pub(crate) async fn command_error<T: Target>(
    target: &mut T,
    timeout: Duration,
    key: &LockKey,
    server: &str,
    err: BackendError,
) -> LockError {
    if let BackendError::Redis(e) = &err {
        // Redisson's layout: the name is one of Redisson's other locks.
        let text = e.to_string();
        // (The read-write lock's scripts: the name is Redisson's plain lock.)
        if text.contains("REDISSON_RWLOCK") || text.contains("REDISSON_LOCK") {
            return LockError::WrongType {
                key: key.name.to_string(),
                redis_key: key.lock.to_string(),
            };
        }
        if text.contains("REDISSON_FAIRLOCK") {
            return LockError::WrongType {
                key: key.name.to_string(),
                redis_key: key.redisson_queue(),
            };
        }
    }
    if matches!(&err, BackendError::Redis(e) if is_wrong_type(e)) {
        let mut cmd = redis::cmd("TYPE");
        cmd.arg(&*key.lock);
        let kind = command::run(target, &scripts::one(cmd), 1, &[], timeout)
            .await
            .and_then(first)
            .and_then(parse::<String>);
        return wrong_type(key, kind.as_deref().ok());
    }
    LockError::Backend {
        key: key.name.to_string(),
        server: server.to_owned(),
        source: err,
    }
}

/// `WrongType` for `key`, given the `TYPE` of its lock key.
pub(crate) fn wrong_type(key: &LockKey, lock_type: Option<&str>) -> LockError {
    let redis_key = match lock_type {
        Some("hash" | "none") => key.fence(),
        _ => key.lock.to_string(),
    };
    LockError::WrongType {
        key: key.name.to_string(),
        redis_key,
    }
}
