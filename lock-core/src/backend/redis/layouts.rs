//! The registry of the layouts of the clients that use a Redis database
//! (`distlock:layouts`, a hash: layout -> `1`, the whole hash kept
//! [`IN_USE`] after the last client recorded itself), so that a client
//! connecting in one layout learns that clients of another use the same
//! database: a lock name taken in both layouts is two locks that do not
//! exclude each other. A client records itself only when no other layout is
//! recorded, or when it allows a mix (see `layouts_record.lua`); an entry
//! is removed by [`forget`] (an operator, once a migration is over).

use std::time::Duration;

use redis::{Script, Value};

use super::command::{self, Target};
use super::reply;
use super::scripts;
use crate::error::BackendError;

/// The registry's key (outside every lock prefix; an ACL user that cannot
/// write it only loses the check).
pub(crate) const KEY: &str = "distlock:layouts";

/// How long the registry is kept after the last client recorded itself.
pub(crate) const IN_USE: Duration = Duration::from_secs(24 * 3600);

/// Records `mine` unless another layout is recorded and `mixed` is false,
/// and returns the layouts recorded, in one round trip (two when the script
/// has to be loaded).
pub(crate) async fn record<T: Target>(
    target: &mut T,
    mine: &str,
    mixed: bool,
    timeout: Duration,
) -> Result<Vec<String>, BackendError> {
    let script = Script::new(include_str!("lua/layouts_record.lua"));
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash())
        .arg(1)
        .arg(KEY)
        .arg(mine)
        .arg(if mixed { "1" } else { "0" })
        .arg(u64::try_from(IN_USE.as_millis()).unwrap_or(u64::MAX));
    // Its error (NOSCRIPT) is its reply, which `run` reloads on.
    let pipe = scripts::one(cmd);
    let replies = command::run(target, &pipe, 1, &[&script], timeout).await?;
    let reply = replies
        .into_iter()
        .next()
        .ok_or_else(|| BackendError::Protocol("no reply to the layout registry".into()))??;
    parse(reply)
}

/// Reads the layouts recorded (nothing is recorded).
pub(crate) async fn read<T: Target>(
    target: &mut T,
    timeout: Duration,
) -> Result<Vec<String>, BackendError> {
    let mut pipe = redis::pipe();
    pipe.cmd("HKEYS").arg(KEY);
    let replies = command::run(target, &pipe, 1, &[], timeout).await?;
    let reply = replies
        .into_iter()
        .next()
        .ok_or_else(|| BackendError::Protocol("no reply to HKEYS".into()))??;
    parse(reply)
}

/// Removes `layout` from the registry; whether it was recorded.
pub(crate) async fn forget<T: Target>(
    target: &mut T,
    layout: &str,
    timeout: Duration,
) -> Result<bool, BackendError> {
    let mut pipe = redis::pipe();
    pipe.cmd("HDEL").arg(KEY).arg(layout);
    let replies = command::run(target, &pipe, 1, &[], timeout).await?;
    let reply = replies
        .into_iter()
        .next()
        .ok_or_else(|| BackendError::Protocol("no reply to HDEL".into()))??;
    let deleted: i64 = reply::parse(reply)?;
    Ok(deleted > 0)
}

fn parse(reply: Value) -> Result<Vec<String>, BackendError> {
    let mut layouts: Vec<String> = reply::parse(reply)?;
    layouts.sort();
    Ok(layouts)
}
