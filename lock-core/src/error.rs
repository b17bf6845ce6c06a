//! The one error type of the crate, [`LockError`], and what it wraps.

use std::time::Duration;

/// Everything that can go wrong while taking, holding or releasing a lock.
///
/// Every variant that concerns a lock names it (`key` is the lock name the
/// caller passed to [`LockClient::lock`](crate::LockClient::lock), not the
/// Redis key it is stored under), so a message in a log says which lock.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is held by another owner and the caller asked not to wait.
    #[error("lock `{key}` is held by another owner")]
    Busy {
        /// The lock name.
        key: String,
    },
    /// The lock stayed busy for the whole wait: held by another owner as
    /// far as the caller's last look, at the deadline, could tell (the
    /// server answered that it is held, or another scope of this client
    /// held it). A wait that ends while the backend does not answer is
    /// [`Backend`](LockError::Backend), not this.
    #[error("timed out after {waited:?} waiting for lock `{key}`")]
    TimedOut {
        /// The lock name.
        key: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The lease ran out, or the lock was deleted or taken over, while the
    /// guard lived: mutual exclusion may have been broken.
    #[error("the lease of lock `{key}` was lost: {reason}")]
    LeaseLost {
        /// The lock name.
        key: String,
        /// Why the lease is considered lost.
        reason: &'static str,
    },
    /// At release the server no longer had the lock under this owner (it
    /// expired, and may have been taken by another owner); nothing was deleted.
    #[error("lock `{key}` was no longer held by this owner at release; nothing was deleted")]
    NotHeld {
        /// The lock name.
        key: String,
    },
    /// The client is shutting down (or has shut down, see
    /// [`LockClient::shutdown`](crate::LockClient::shutdown)): it takes no new
    /// locks. An acquisition that was waiting when the shutdown began gets
    /// this at once, not at the end of its wait. Not worth retrying on this
    /// client.
    #[error("lock `{key}` not taken: lock client {client} is shutting down")]
    ShuttingDown {
        /// The lock name.
        key: String,
        /// The id of the client (see [`LockClient::id`](crate::LockClient::id)).
        client: String,
    },
    /// The lock name is empty or too long.
    #[error("invalid lock name `{key}`: {reason}")]
    InvalidKey {
        /// The lock name (cut to its first 64 characters when longer).
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A setting of the lock or the client is out of range (a zero lease, say).
    #[error("invalid configuration for lock `{key}`: {reason}")]
    InvalidConfig {
        /// The lock name, or `*` for a client-wide setting.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A Redis key the lock uses holds a value of another type; the lock
    /// refuses to touch it.
    #[error("Redis key `{redis_key}` of lock `{key}` holds a value of another type")]
    WrongType {
        /// The lock name.
        key: String,
        /// The Redis key that has the wrong type.
        redis_key: String,
    },
    /// The backend failed while working on a lock (connection refused or
    /// dropped, no answer within the response timeout, a server error).
    #[error("backend error on lock `{key}` at {server}: {source}")]
    Backend {
        /// The lock name.
        key: String,
        /// The server, as `host:port`.
        server: String,
        /// What failed.
        #[source]
        source: BackendError,
    },
    /// Redlock: fewer than a majority of the masters granted the lock, and
    /// not because another owner holds it (nodes down, slow, or failing).
    #[error("no quorum for lock `{key}`: {granted} of {} masters granted it, {needed} needed ({})", answers.len(), NodeAnswer::list(answers))]
    QuorumNotReached {
        /// The lock name.
        key: String,
        /// How many masters granted the lock.
        granted: usize,
        /// How many grants a quorum needs (N/2 + 1).
        needed: usize,
        /// What each master answered.
        answers: Vec<NodeAnswer>,
    },
    /// The calling async call chain already holds the lock through another
    /// [`LockClient`](crate::LockClient) on the same store (a tower layer and
    /// a `#[distributed_lock]` function given different clients, say).
    /// Re-entry is counted per client, so waiting would wait on itself for the
    /// whole wait: an acquisition that would wait fails at once instead (a
    /// single try, without a wait, gets [`LockError::Busy`]). Use one client
    /// for both.
    #[error("lock `{key}` is already held by this call chain through client {holder_client} (owner {holder}); client {client} cannot re-enter it and would wait on itself: use one LockClient for both")]
    HeldByOtherClient {
        /// The lock name.
        key: String,
        /// The id of the client that holds it ([`LockClient::id`](crate::LockClient::id)).
        holder_client: String,
        /// The owner id it is held under.
        holder: String,
        /// The id of the client that tried to acquire it.
        client: String,
    },
    /// The calling async call chain holds the read lock of this read-write
    /// lock and asked for its write lock. Upgrading would wait for its own
    /// read hold to end (and two chains upgrading at once would wait for each
    /// other forever), so it is refused at once: release the read lock first,
    /// or take the write lock from the start (a writer may take the read
    /// lock: downgrading is allowed).
    #[error("lock `{key}`: this call chain holds its read lock and cannot upgrade to the write lock (release the read lock first, or take the write lock from the start)")]
    UpgradeRefused {
        /// The read-write lock's name.
        key: String,
    },
    /// The primitive is not available on this backend: the fair lock, the
    /// read-write lock and the semaphore need one store that orders their
    /// holders and waiters, which Redlock's independent masters are not.
    /// Also the answer of
    /// [`LockClient::data_connection`](crate::LockClient::data_connection)
    /// on a backend without a single data store (Redlock, the in-memory
    /// store), with `key` `*`.
    #[error("lock `{key}`: the {primitive} is not available on {backend}: {reason}")]
    Unsupported {
        /// The lock name (`*` for a feature of the client).
        key: String,
        /// The primitive asked for: `fair lock`, `read lock`, `write lock`,
        /// `semaphore`, or the feature: `data connection`.
        primitive: &'static str,
        /// The backend: `Redlock`.
        backend: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// Connecting to the server failed.
    #[error("cannot connect to {server}: {source}")]
    Connect {
        /// The server, as `host:port` (never with its password).
        server: String,
        /// What failed.
        #[source]
        source: BackendError,
    },
    /// The server refused the credentials of the URL.
    #[error("authentication failed at {server}: {message}")]
    Authentication {
        /// The server, as `host:port`.
        server: String,
        /// The server's answer.
        message: String,
    },
    /// The server is older than the backend needs (checked once when the
    /// client connects, from `INFO server`; see the guide's (`distlock::guide`) "Redis and
    /// Valkey versions").
    #[error("{server} runs {found}, but {backend} need {needed} or later: {reason}")]
    UnsupportedServer {
        /// The server, as `host:port` (or the cluster's seeds).
        server: String,
        /// What it runs, e.g. `Redis 6.2.14` or `Valkey 8.0.1 (Redis 7.2.4 compatible)`.
        found: String,
        /// The oldest version the backend works with, e.g. `Redis 7.0.0`.
        needed: String,
        /// The backend, e.g. `the Cluster backend`.
        backend: &'static str,
        /// What older servers lack.
        reason: &'static str,
    },
    /// Connecting was refused: the store's registry of layouts (see
    /// [`LockAdmin::layouts`](crate::LockAdmin::layouts)) records clients
    /// of another [`Layout`](crate::Layout) than this client's. A lock name
    /// taken in two layouts is two locks that do not exclude each other, so
    /// two services would each hold "the" lock. Give every client of one
    /// lock the same layout and key prefix; during a migration from one
    /// layout to the other, declare the window with
    /// [`allow_mixed_layouts`](crate::LockClientBuilder::allow_mixed_layouts);
    /// once no client of the other layout is left, remove its record with
    /// [`LockAdmin::forget_layout`](crate::LockAdmin::forget_layout)
    /// (`lockctl layouts --forget LAYOUT`).
    #[error(
        "{server} is used by clients of lock layout {} and this client's layout is {}: \
         a lock name taken in two layouts is two locks that do not exclude each other. Give \
         every client of one lock the same layout and key prefix; to migrate from one layout \
         to the other, declare the window with LockClientBuilder::allow_mixed_layouts(true) \
         (lockctl --allow-mixed-layouts); once no client of layout {} is left, forget it with \
         `lockctl layouts --forget {}` (LockAdmin::forget_layout)",
        others.join(", "),
        layout.registry_name(),
        others.join(", "),
        others.first().map_or("LAYOUT", String::as_str),
    )]
    LayoutConflict {
        /// The server, as `host:port` (`memory` for the in-memory store).
        server: String,
        /// This client's layout.
        layout: crate::layout::Layout,
        /// The other layouts the registry records, by their registry names
        /// (`native`, `redisson`; a name this version does not know is kept
        /// as it is).
        others: Vec<String>,
    },
}

impl LockError {
    /// The lock name the error concerns, when it concerns one.
    pub fn key(&self) -> Option<&str> {
        match self {
            LockError::Busy { key }
            | LockError::TimedOut { key, .. }
            | LockError::LeaseLost { key, .. }
            | LockError::NotHeld { key }
            | LockError::ShuttingDown { key, .. }
            | LockError::InvalidKey { key, .. }
            | LockError::InvalidConfig { key, .. }
            | LockError::WrongType { key, .. }
            | LockError::Backend { key, .. }
            | LockError::QuorumNotReached { key, .. }
            | LockError::HeldByOtherClient { key, .. }
            | LockError::UpgradeRefused { key }
            | LockError::Unsupported { key, .. } => Some(key),
            LockError::Connect { .. }
            | LockError::Authentication { .. }
            | LockError::UnsupportedServer { .. }
            | LockError::LayoutConflict { .. } => None,
        }
    }

    /// True for errors of the backend's reachability (connection, timeout),
    /// which a caller may retry later; false for answers about the lock.
    pub fn is_backend(&self) -> bool {
        matches!(
            self,
            LockError::Backend { .. }
                | LockError::QuorumNotReached { .. }
                | LockError::Connect { .. }
                | LockError::Authentication { .. }
        )
    }
}

/// For functions that return `std::io::Result` (such as a
/// `#[distributed_lock]` fn doing file or socket work): the lock error is
/// kept as the source, with a kind that says what happened.
impl From<LockError> for std::io::Error {
    fn from(err: LockError) -> Self {
        use std::io::ErrorKind;
        let kind = match &err {
            LockError::Busy { .. } => ErrorKind::WouldBlock,
            LockError::TimedOut { .. } => ErrorKind::TimedOut,
            LockError::InvalidKey { .. } | LockError::InvalidConfig { .. } => {
                ErrorKind::InvalidInput
            }
            LockError::Authentication { .. } => ErrorKind::PermissionDenied,
            LockError::UnsupportedServer { .. } => ErrorKind::Unsupported,
            LockError::LayoutConflict { .. } => ErrorKind::AlreadyExists,
            LockError::Connect { .. } => ErrorKind::ConnectionRefused,
            _ => ErrorKind::Other,
        };
        std::io::Error::new(kind, err)
    }
}

/// What one Redlock master answered to an acquisition, as listed by
/// [`LockError::QuorumNotReached`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeAnswer {
    /// The master, as `host:port`.
    pub server: String,
    /// `granted`, `busy` (held by another owner), or the error.
    pub answer: String,
}

impl NodeAnswer {
    pub(crate) fn new(server: impl Into<String>, answer: impl Into<String>) -> Self {
        NodeAnswer {
            server: server.into(),
            answer: answer.into(),
        }
    }

    fn list(answers: &[NodeAnswer]) -> String {
        answers
            .iter()
            .map(|a| format!("{}: {}", a.server, a.answer))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A failure of the storage behind the lock.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// An error reported by the Redis client or server.
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// An error reported by the PostgreSQL client or server (feature
    /// `postgres`): the server's SQLSTATE when it sent one (`57P01` for a
    /// terminated session, `40001` for a serialization failure, ...) and the
    /// message.
    #[error("postgres error{}: {message}", code.as_deref().map(|code| format!(" {code}")).unwrap_or_default())]
    Postgres {
        /// The SQLSTATE of a server error; `None` for the client's own
        /// errors (a closed connection, a type mismatch).
        code: Option<String>,
        /// The message.
        message: String,
    },
    /// No answer arrived within the response timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The server answered something the lock scripts never return.
    #[error("unexpected reply: {0}")]
    Protocol(String),
    /// The connection dropped while a release (or force-release) was on its
    /// way, the command was sent once more, and that second send found the
    /// lock no longer held under the owner: the first send may have deleted
    /// it, or the lock was lost before it. Which one is unknown; treat it as
    /// a loss (the work may not have finished under exclusion), as
    /// `LeaseLost` would be treated.
    #[error("the connection dropped during the release and the resent release found the lock gone: the first send may have released it, or it was lost before (unknown)")]
    Unconfirmed,
    /// `sync_replicas`: fewer replicas than required acknowledged a write
    /// within the timeout (`WAIT`).
    #[error("{acknowledged} of {required} replicas acknowledged the write in time")]
    NotReplicated {
        /// Replicas that acknowledged.
        acknowledged: u64,
        /// Replicas required.
        required: u64,
    },
    /// Sentinel: the sentinels named a new master (`+switch-master`, or an
    /// answer after an error) that this client cannot connect to. Commands
    /// are not sent to the old master meanwhile: it may still take writes
    /// until the sentinels demote it, while other clients lock on the new
    /// one. Every later command tries the new master again.
    #[error("the sentinels moved the master to {server}, which this client cannot reach ({reason}); commands are not sent to the old master")]
    MasterUnreachable {
        /// The new master's address.
        server: String,
        /// Why connecting to it failed.
        reason: String,
    },
}
