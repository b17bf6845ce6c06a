//! How many subscriptions follow locks' wake-up channels (`PUBSUB NUMSUB`,
//! or `PUBSUB SHARDNUMSUB` for sharded pub/sub), for an operator's count of
//! the clients waiting for a lock.

use std::time::Duration;

use redis::Value;

use super::command::{self, Target};
use super::reply;
use crate::error::BackendError;

/// The subscriptions of each of `channels` where `target` sends (one
/// command, one round trip), in their order.
pub(crate) async fn count<T: Target>(
    target: &mut T,
    channels: &[&str],
    sharded: bool,
    timeout: Duration,
) -> Result<Vec<u64>, BackendError> {
    count_at(target, None, channels, sharded, timeout).await
}

/// [`count`], on the node that serves `key` (a cluster routes the pipeline
/// by it: a slot that moved is followed by its `MOVED`, where a command
/// routed by the client's own slot map would ask the old owner, which has no
/// subscriber of the moved slot's channels any more).
pub(crate) async fn count_at<T: Target>(
    target: &mut T,
    key: Option<&str>,
    channels: &[&str],
    sharded: bool,
    timeout: Duration,
) -> Result<Vec<u64>, BackendError> {
    let mut pipe = redis::pipe();
    if let Some(key) = key {
        pipe.cmd("PTTL").arg(key).ignore();
    }
    pipe.cmd("PUBSUB")
        .arg(if sharded { "SHARDNUMSUB" } else { "NUMSUB" })
        .arg(channels);
    let reply = command::run(target, &pipe, 1, &[], timeout)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| BackendError::Protocol("no reply to PUBSUB".into()))??;
    parse(reply, channels)
}

/// `[channel, count, ...]` (or a map of them) in the order of `channels`.
fn parse(reply: Value, channels: &[&str]) -> Result<Vec<u64>, BackendError> {
    let pairs: Vec<(String, u64)> = reply::parse(reply)?;
    Ok(channels
        .iter()
        .map(|channel| {
            pairs
                .iter()
                .find(|(name, _)| name == channel)
                .map_or(0, |(_, n)| *n)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_back_in_the_order_asked() {
        let reply = Value::Array(vec![
            Value::BulkString(b"b".to_vec()),
            Value::Int(2),
            Value::BulkString(b"a".to_vec()),
            Value::Int(0),
        ]);
        assert_eq!(parse(reply, &["a", "b", "c"]).unwrap(), [0, 2, 0]);
    }
}
