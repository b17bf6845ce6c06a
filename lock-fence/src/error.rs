//! [`FenceError`]: why a fenced read or write did not happen.

/// Why a fenced read, write or check did not happen.
///
/// [`Stale`](FenceError::Stale) is the refusal the fence exists for: a newer
/// holder has read or written the resource, so this holder must stop, answer
/// "conflict" (HTTP 409, gRPC `ABORTED`) and not retry under the same token.
/// Every other variant is a failure to reach or understand the store, after
/// which the caller does not know whether a claim was recorded (a recorded
/// claim is harmless: it only raises the fence with the caller's own token).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The token is lower than the highest one that has read or written
    /// `key`: a newer holder has claimed it. Nothing was read or written.
    #[error("stale fencing token {token} for {key}: token {seen} has read or written it")]
    Stale {
        /// The resource: a Redis key, `key#field` for a hash field, or a
        /// PostgreSQL row's key as `table[key]`.
        key: String,
        /// The refused token.
        token: u64,
        /// The highest token that has claimed the resource.
        seen: u64,
    },
    /// The PostgreSQL row does not exist: a fenced read or write of a row
    /// needs the row (insert it first, with the fence column at 0 or at the
    /// inserting holder's token).
    #[error("no row {key}")]
    Missing {
        /// The row, as `table[key]`.
        key: String,
    },
    /// The token does not fit the store: PostgreSQL's `bigint` holds tokens
    /// up to `i64::MAX`.
    #[error("fencing token {token} for {key} is above {max}, the largest the store holds")]
    TokenOutOfRange {
        /// The resource.
        key: String,
        /// The token.
        token: u64,
        /// The largest token the store holds.
        max: u64,
    },
    /// A name given to the fence cannot be used: a key prefix with a `{` or
    /// `}` (it would move the fence to another cluster slot), an empty SQL
    /// identifier, or a command that cannot run in a script.
    #[error("invalid {what} {name:?}: {reason}")]
    Invalid {
        /// What the name is for (`"key prefix"`, `"column"`, ...).
        what: &'static str,
        /// The name.
        name: String,
        /// Why it cannot be used.
        reason: &'static str,
    },
    /// Fewer replicas than [`RedisFence::replicas`](crate::RedisFence::replicas)
    /// asks for acknowledged the fenced operation within its timeout. It ran
    /// on the master (a read claimed the resource, a write wrote it), but a
    /// failover now may lose it: the operation may or may not survive, so it
    /// must not be reported done. Retrying is safe for the same holder (its
    /// claim is its own token).
    #[error("fenced operation on {key} was acknowledged by {acknowledged} of {wanted} replicas in time: it ran on the master and may or may not survive a failover")]
    NotReplicated {
        /// The resource.
        key: String,
        /// The replicas asked for.
        wanted: u32,
        /// The replicas that acknowledged (`WAIT`'s answer).
        acknowledged: u64,
    },
    /// Redis answered with an error or could not be reached.
    #[error("redis, fencing {key}: {source}")]
    Redis {
        /// The resource.
        key: String,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
    /// PostgreSQL answered with an error or could not be reached.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    #[error("postgres, fencing {key}: {source}")]
    Postgres {
        /// The resource.
        key: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The store answered something the fence does not understand (for
    /// example a fence value that is not a `u64`, written by someone else).
    #[error("unexpected answer fencing {key}: {detail}")]
    Reply {
        /// The resource.
        key: String,
        /// What was wrong with the answer.
        detail: String,
    },
}

impl FenceError {
    /// Whether this is the refusal of a stale holder ([`FenceError::Stale`]).
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale { .. })
    }
}
