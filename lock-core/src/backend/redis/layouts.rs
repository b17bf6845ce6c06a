//! The registry of the layouts of the clients that use a Redis database
//! (`distlock:layouts`, a hash: layout -> when a client of it last
//! connected, server ms), so that a client connecting in one layout learns
//! that clients of another use the same database: a lock name taken in
//! both layouts is two locks that do not exclude each other.

use std::time::Duration;

use redis::Value;

use super::command::{self, Target};
use super::reply;
use crate::error::BackendError;

/// The registry's key (outside every lock prefix; an ACL user that cannot
/// write it only loses the check).
pub(crate) const KEY: &str = "distlock:layouts";

/// How long a layout counts as in use after a client of it connected.
pub(crate) const IN_USE: Duration = Duration::from_secs(24 * 3600);

/// Records `mine` (when given) and returns the layouts recorded, in one
/// round trip.
pub(crate) async fn exchange<T: Target>(
    target: &mut T,
    mine: Option<&str>,
    timeout: Duration,
) -> Result<Vec<String>, BackendError> {
    let mut pipe = redis::pipe();
    let mut count = 1;
    if let Some(mine) = mine {
        pipe.cmd("HSET").arg(KEY).arg(mine).arg(1).ignore();
        pipe.cmd("PEXPIRE")
            .arg(KEY)
            .arg(u64::try_from(IN_USE.as_millis()).unwrap_or(u64::MAX))
            .ignore();
        count = 3;
    }
    pipe.cmd("HKEYS").arg(KEY);
    let replies = command::run(target, &pipe, count, &[], timeout).await?;
    let reply = replies
        .into_iter()
        .last()
        .ok_or_else(|| BackendError::Protocol("no reply to HKEYS".into()))??;
    parse(reply)
}

fn parse(reply: Value) -> Result<Vec<String>, BackendError> {
    let mut layouts: Vec<String> = reply::parse(reply)?;
    layouts.sort();
    Ok(layouts)
}
