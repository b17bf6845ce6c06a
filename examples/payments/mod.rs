//! The orders' payments of the axum and tonic examples, fenced with
//! claim-on-read at the resource: in Redis with `distlock::fence`'s
//! [`RedisFence`] when the lock lives in Redis, otherwise in this process
//! (`ledger/mod.rs`, the same rule by hand).
//!
//! With Redis, order `id`'s amount is the key `paid:{id}` and its fence a
//! field of `fence:{paid:{id}}:paid:{id}`; every read and write is one
//! script that checks the token, records it and reads or writes, so a holder
//! paused past its lease is refused (`FenceError::Stale`) once its successor
//! has read the order.

#![allow(dead_code)] // each example uses part of it

use distlock::fence::{FenceError, RedisFence};
use redis::aio::ConnectionManager;

#[path = "../ledger/mod.rs"]
mod ledger;

/// Where the payments are kept.
#[derive(Clone)]
pub enum Payments {
    /// In the Redis of the lock, fenced by `RedisFence` (and the connection,
    /// for the unfenced display).
    Redis(RedisFence<ConnectionManager>, ConnectionManager),
    /// In this process, fenced by the hand-written ledger.
    Memory(ledger::Ledger<u64, u64>),
}

impl Payments {
    /// Payments in the Redis at `url`.
    pub async fn redis(url: &str) -> Result<Payments, redis::RedisError> {
        let conn = redis::Client::open(url)?.get_connection_manager().await?;
        Ok(Payments::Redis(RedisFence::new(conn.clone()), conn))
    }

    /// Payments in this process.
    pub fn memory() -> Payments {
        Payments::Memory(ledger::Ledger::default())
    }

    /// The amount paid for order `id` (0 when unpaid), read for the holder
    /// of `token`: from now on only `token` or a newer one may read or
    /// write it.
    pub async fn read(&self, id: u64, token: u64) -> Result<u64, FenceError> {
        match self {
            Payments::Redis(fence, _) => {
                let paid: Option<u64> = fence.read(&key(id), token).await?;
                Ok(paid.unwrap_or(0))
            }
            Payments::Memory(ledger) => ledger.read(&id, token).map_err(|s| stale(id, s)),
        }
    }

    /// Records `cents` paid for order `id` by the holder of `token`: refused
    /// when a newer token has read or written the order since.
    pub async fn write(&self, id: u64, token: u64, cents: u64) -> Result<(), FenceError> {
        match self {
            Payments::Redis(fence, _) => fence.write(&key(id), token, cents).await,
            Payments::Memory(ledger) => ledger.write(&id, token, cents).map_err(|s| stale(id, s)),
        }
    }

    /// The amount paid and the highest token that has claimed order `id`,
    /// without claiming it (for displays, not for a read-modify-write).
    pub async fn peek(&self, id: u64) -> Result<(u64, u64), FenceError> {
        match self {
            Payments::Redis(fence, conn) => {
                let key = key(id);
                let seen = fence.seen(&key).await?;
                // Not fenced: a display only.
                let mut conn = conn.clone();
                let paid: Option<u64> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .map_err(|source| FenceError::Redis { key, source })?;
                Ok((paid.unwrap_or(0), seen))
            }
            Payments::Memory(ledger) => Ok(ledger.peek(&id)),
        }
    }
}

fn key(id: u64) -> String {
    format!("paid:{id}")
}

fn stale(id: u64, stale: ledger::Stale) -> FenceError {
    FenceError::Stale {
        key: key(id),
        token: stale.token,
        seen: stale.newer,
    }
}
