//! The records of leader election (leadership, `leader/`) on Redis: what a
//! role's leader proclaims, read back with the holder of the role's lock,
//! and the end of a term. One script each (`lua/leader_*.lua`), sent on the
//! path every lock command takes (`command.rs`). The lock itself (campaign,
//! renewal, resignation) is the plain lock's.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::command::{self, Target};
use super::{reply, scripts};
use crate::backend::{LeaderRecord, LEADER_RECORD_TTL};
use crate::lease;
use crate::name::LockKey;
use crate::{BackendError, LockError};

/// Records a proclamation while its owner holds the role's lock.
static PROCLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/prelude/now.lua"),
        include_str!("lua/leader_proclaim.lua")
    ))
});

/// Reads the role's leader and its record.
static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("lua/prelude/now.lua"),
        include_str!("lua/leader_read.lua")
    ))
});

/// Ends a term's record and tells the observers.
static VACATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/leader_vacate.lua")));

/// The three scripts, loaded on a node that answers `NOSCRIPT`.
fn scripts() -> [&'static Script; 3] {
    [&*PROCLAIM, &*READ, &*VACATE]
}

/// A failure of `role`'s record at `server`, as a lock error naming the role.
fn failed<'a>(role: &'a LockKey, server: &'a str) -> impl Fn(BackendError) -> LockError + 'a {
    move |source| LockError::Backend {
        key: role.name.to_string(),
        server: server.to_owned(),
        source,
    }
}

/// Sends `cmd` (one script call, its error its reply, so that `NOSCRIPT`
/// loads the scripts) to `target` and returns its reply.
async fn send<T: Target>(
    target: &mut T,
    cmd: redis::Cmd,
    timeout: Duration,
) -> Result<Value, BackendError> {
    let replies = command::run(target, &scripts::one(cmd), 1, &scripts(), timeout).await?;
    reply::first(replies)
}

/// See `Backend::leader_proclaim`; `publish` is `PUBLISH` or `SPUBLISH`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn proclaim<T: Target>(
    target: &mut T,
    role: &LockKey,
    record: &LockKey,
    owner: &str,
    metadata: &str,
    publish: &str,
    timeout: Duration,
    server: &str,
) -> Result<Option<LeaderRecord>, LockError> {
    let mut cmd = scripts::evalsha(&PROCLAIM, &[&role.lock, &record.lock, &record.channel]);
    cmd.arg(owner)
        .arg(metadata)
        .arg(publish)
        .arg(lease::millis(LEADER_RECORD_TTL));
    let reply = send(target, cmd, timeout).await;
    reply.and_then(parse).map_err(failed(role, server))
}

/// See `Backend::leader_read`.
pub(crate) async fn read<T: Target>(
    target: &mut T,
    role: &LockKey,
    record: &LockKey,
    timeout: Duration,
    server: &str,
) -> Result<Option<LeaderRecord>, LockError> {
    let cmd = scripts::evalsha(&READ, &[&role.lock, &record.lock]);
    let reply = send(target, cmd, timeout).await;
    reply.and_then(parse).map_err(failed(role, server))
}

/// See `Backend::leader_vacate`; `publish` is `PUBLISH` or `SPUBLISH`.
pub(crate) async fn vacate<T: Target>(
    target: &mut T,
    role: &LockKey,
    record: &LockKey,
    term: u64,
    publish: &str,
    timeout: Duration,
    server: &str,
) -> Result<(), LockError> {
    let mut cmd = scripts::evalsha(&VACATE, &[&record.lock, &record.channel]);
    cmd.arg(term).arg(publish);
    send(target, cmd, timeout)
        .await
        .map(drop)
        .map_err(failed(role, server))
}

/// `{}` (nobody holds the lock) or `{term, owner, pttl, now, since,
/// metadata}`, since and metadata empty before the leader proclaimed.
fn parse(reply: Value) -> Result<Option<LeaderRecord>, BackendError> {
    let parts: Vec<Value> = reply::parse(reply)?;
    if parts.is_empty() {
        return Ok(None);
    }
    let [term, owner, pttl, now, since, metadata]: [Value; 6] = parts
        .try_into()
        .map_err(|_| BackendError::Protocol("a leader record of the wrong length".into()))?;
    let number = |value: Value| -> Result<u64, BackendError> {
        let text: String = reply::parse(value)?;
        text.parse()
            .map_err(|_| BackendError::Protocol(format!("not a number in a leader record: {text}")))
    };
    let term = number(term)?;
    let owner: String = reply::parse(owner)?;
    let pttl: i64 = reply::parse(pttl)?;
    let now_ms = number(now)?;
    let since: String = reply::parse(since)?;
    let metadata: String = reply::parse(metadata)?;
    let proclaimed = !since.is_empty();
    Ok(Some(LeaderRecord {
        term,
        owner,
        lease_left: Duration::from_millis(u64::try_from(pttl).unwrap_or(0)),
        now_ms,
        since_ms: if proclaimed { since.parse().ok() } else { None },
        metadata: proclaimed.then_some(metadata),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn records_parse_and_an_empty_reply_is_no_leader() {
        assert_eq!(parse(Value::Array(vec![])).unwrap(), None);
        let record = parse(Value::Array(vec![
            bulk("1764390000000001"),
            bulk("abc:1"),
            Value::Int(2500),
            bulk("1764390000123"),
            bulk("1764390000000"),
            bulk("http://10.0.0.7:8080"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(record.term, 1_764_390_000_000_001);
        assert_eq!(record.lease_left, Duration::from_millis(2500));
        assert_eq!(record.since_ms, Some(1_764_390_000_000));
        assert_eq!(record.metadata.as_deref(), Some("http://10.0.0.7:8080"));
        let unproclaimed = parse(Value::Array(vec![
            bulk("7"),
            bulk("abc:1"),
            Value::Int(10),
            bulk("5"),
            bulk(""),
            bulk(""),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(unproclaimed.since_ms, None);
        assert_eq!(unproclaimed.metadata, None);
        assert!(parse(Value::Array(vec![bulk("x")])).is_err());
    }
}
