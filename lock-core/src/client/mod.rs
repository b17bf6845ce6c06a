//! The client, by role: [`LockClient`] (this file: the handle that takes
//! locks), [`LockClientBuilder`] (`builder.rs`: the settings every topology
//! shares), the per-topology connections (`connect.rs`: one Redis node,
//! Sentinel, Cluster, Redlock, each with the options that apply to it
//! only), and [`LockAdmin`] (`admin.rs`: the operator's inspection and
//! overrides).

mod admin;
mod builder;
mod connect;
#[cfg(feature = "postgres")]
mod postgres;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use self::admin::LockAdmin;
pub use self::builder::{
    LockClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX, DEFAULT_RESPONSE_TIMEOUT,
};
pub use self::connect::{
    ClusterConnect, RedisConnect, RedlockConnect, SentinelConnect, ShardedPubSub,
};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use self::postgres::PostgresConnect;
use crate::backend::{DataConnection, MemoryStore};
use crate::client_core::ClientCore;
use crate::error::LockError;
use crate::family::{ReadWriteLock, Semaphore};
use crate::lock::Lock;
use crate::multi::MultiLock;
use crate::name::Kind;
use crate::shutdown;
use crate::shutdown_state::ShutdownReport;

/// A handle on a lock backend: one Redis server or an in-memory store.
///
/// Cheap to clone (an `Arc`); clones share the connection, the watchdog and
/// the wake-up subscription. Every client has a random 128-bit id, the root
/// of the owner ids of its locks, so no other client can release or renew
/// them.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// use distlock_core::LockClient;
///
/// let client = LockClient::connect("redis://127.0.0.1:6379/").await?;
/// let guard = client.lock("order:42").wait(Duration::from_secs(10)).acquire().await?;
/// // ... work on order 42, passing guard.fencing_token() to the store ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    core: Arc<ClientCore>,
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.core.fmt(f)
    }
}

/// Counters of a client, for monitoring and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Renewal rounds the watchdog ran (one pipelined batch per node each).
    pub renewal_rounds: u64,
    /// Locks the watchdog currently renews.
    pub watched_locks: usize,
}

impl LockClient {
    /// Connects to Redis with the default settings.
    ///
    /// Accepts `redis://host:port/db`, `rediss://` for TLS (verified against
    /// the system's roots, see [`LockClientBuilder::tls_root_certificate`]),
    /// and ACL credentials as `redis://user:password@host/`. Fails within the
    /// connect timeout with [`LockError::Connect`], or
    /// [`LockError::Authentication`] when the server refuses the credentials.
    ///
    /// A `postgres://` (or `postgresql://`) URL connects to PostgreSQL
    /// instead, as `LockClient::postgres` does (feature `postgres`), so one
    /// setting (`DATABASE_URL`, `REDIS_URL`, lockctl's `--url`) can name
    /// either store.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    /// Connects to a Redis Cluster through any of its nodes (`urls` are seeds;
    /// the topology is discovered and followed across MOVED/ASK and
    /// failovers). Each lock lives on the master of its slot: its keys and
    /// wake-up channel share a hash tag, and wake-ups use sharded pub/sub
    /// (Redis 7 or newer).
    pub async fn cluster<I>(urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder().connect_cluster(urls).await
    }

    /// Connects to the master that the sentinels at `sentinel_urls` report
    /// for `master_name`, and follows it across failovers: a background task
    /// listens to every sentinel's `+switch-master` announcement, and after
    /// an error that may mean a failover all sentinels are asked again and
    /// the address with the highest configuration epoch wins (scripts are
    /// loaded on the new master). The master is reached with the first sentinel URL's
    /// credentials and TLS settings. See
    /// [`SentinelConnect::sync_replicas`] for `WAIT` after writes.
    pub async fn sentinel<I>(sentinel_urls: I, master_name: &str) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder()
            .connect_sentinel(sentinel_urls, master_name)
            .await
    }

    /// Connects to independent masters for Redlock: a lock is held when a
    /// majority (N/2 + 1) granted it within the lease minus the time spent
    /// and the clock drift allowance; renewals need a majority too. Every
    /// master must be reachable at connect time. See the guide's (`distlock::guide`) "Choosing
    /// a deployment" for what Redlock does and does not promise.
    pub async fn redlock<I>(urls: I) -> Result<Self, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::builder().connect_redlock(urls).await
    }

    /// A builder for the key prefix, default lease and timeouts.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// A client on a new, private in-memory store (same semantics as Redis,
    /// within this process). To share one store between several clients use
    /// [`LockClientBuilder::memory`].
    pub fn memory() -> Self {
        Self::builder().build_memory(MemoryStore::new())
    }

    /// A lock on `name` (e.g. `"order:42"`), to configure and acquire.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.core.clone(), name.into())
    }

    /// A fair lock on `name`: granted in arrival order across processes.
    ///
    /// A waiting acquisition queues; a release hands the lock straight to
    /// the head of the queue (its new holder, with a new fencing token) and
    /// tells only that waiter, which takes it without another round trip. A
    /// queued waiter that dies, hangs or gives up (timed out, cancelled)
    /// leaves the queue: at once when it can say so, else within
    /// [`QUEUE_PRESENCE`](crate::QUEUE_PRESENCE), so it never blocks the
    /// others for longer. A single try (no wait) never jumps the queue.
    /// Its keys are its own: `fair_lock("x")` and `lock("x")` are
    /// different locks. Not available on Redlock nor in
    /// [Redisson's layout](crate::Layout::Redisson) ([`LockError::Unsupported`]).
    pub fn fair_lock(&self, name: impl Into<String>) -> Lock {
        Lock::of_kind(self.core.clone(), name.into(), Kind::Fair)
    }

    /// A read-write lock on `name` (see [`ReadWriteLock`]). Not available
    /// on Redlock ([`LockError::Unsupported`]). In
    /// [Redisson's layout](crate::Layout::Redisson) it is Redisson's
    /// `RReadWriteLock` of the same name (not on the in-memory store); see
    /// the guide's "Sharing locks with Redisson" (`distlock::guide::redisson`).
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.core.clone(), name.into())
    }

    /// A semaphore of `permits` permits on `name` (see [`Semaphore`]). Not
    /// available on Redlock ([`LockError::Unsupported`]). In
    /// [Redisson's layout](crate::Layout::Redisson) it is Redisson's
    /// `RPermitExpirableSemaphore` of the same name (not on the in-memory
    /// store); see the guide's (`distlock::guide`) "Sharing locks with Redisson".
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(self.core.clone(), name.into(), permits)
    }

    /// Several locks to take together, all or nothing, in sorted order (so two
    /// callers naming the same locks in another order cannot deadlock).
    pub fn lock_all<I>(&self, names: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        MultiLock::new(
            self.core.clone(),
            names.into_iter().map(Into::into).collect(),
        )
    }

    /// The operator's handle on this client's backend: inspect a lock, list
    /// the held locks, count waiters, force a release (see [`LockAdmin`]).
    pub fn admin(&self) -> LockAdmin {
        LockAdmin::new(self.core.clone())
    }

    /// This client's random id (hex), the prefix of its owner ids.
    pub fn id(&self) -> &str {
        &self.core.id
    }

    /// The prefix of the Redis keys of this client's locks.
    pub fn key_prefix(&self) -> &str {
        &self.core.prefix
    }

    /// The lease of watchdog-mode locks.
    pub fn lease(&self) -> Duration {
        self.core.lease
    }

    /// The server this client talks to (`host:port`, or `memory`).
    pub fn server(&self) -> &str {
        self.core.backend.server()
    }

    /// A connection for the data these locks guard, to the store the locks
    /// live in and routed as the lock commands are: one Redis node, the
    /// master the client follows through Sentinel (moved by the sentinels'
    /// announcements, never to a master they deposed), or the cluster (each
    /// command to the master of its keys). Build a fence on it
    /// (`RedisFence::new(client.data_connection()?)` in distlock-fence), so
    /// that fenced data and the locks see the same failovers. Cheap: a
    /// handle on the client's own connection, clone it freely. See
    /// [`DataConnection`].
    ///
    /// Errors: [`LockError::Unsupported`] on a backend that has no single
    /// data store: Redlock (its masters are independent) and the in-memory
    /// store (it has no server).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock_core::LockError> {
    /// use distlock_core::LockClient;
    ///
    /// let client = LockClient::sentinel(["redis://127.0.0.1:26379/"], "mymaster").await?;
    /// let data = client.data_connection()?;
    /// println!("data goes to {}", data.server());
    /// # Ok(()) }
    /// ```
    pub fn data_connection(&self) -> Result<DataConnection, LockError> {
        self.core
            .backend
            .data_connection()
            .map_err(|unsupported| LockError::Unsupported {
                key: "*".to_owned(),
                primitive: "data connection",
                backend: unsupported.backend,
                reason: unsupported.reason,
            })
    }

    /// Counters of this client.
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            renewal_rounds: self.core.watchdog.rounds(),
            watched_locks: self.core.watchdog.len(),
        }
    }

    /// Shuts the client down gracefully, for a process that is about to
    /// exit: its locks are released now instead of staying in Redis for
    /// the rest of their lease, where they would hold up the other
    /// replicas. Call it after the work of the process has stopped (an axum
    /// or tonic server's graceful shutdown, a scheduler loop left on
    /// Ctrl-C); see `distlock::guide::shutdown`.
    ///
    /// Applies to this client and everything made from it (its clones,
    /// locks and guards share it). In order:
    ///
    /// 1. It takes no new locks from now on: every `acquire`,
    ///    `try_acquire` and `lock_all` fails at once with
    ///    [`LockError::ShuttingDown`], and an acquisition that is waiting
    ///    for a lock is woken and fails with it too (no one waits out a
    ///    `wait`). Re-entering a lock that the caller's
    ///    [`scope`](crate::LockGuard::scope) already holds still works, so
    ///    a body can finish.
    /// 2. Bodies that hold locks get `grace` to finish: a guard released or
    ///    dropped meanwhile releases its lock as usual, and the watchdog
    ///    keeps renewing. The grace period ends early when no lock is held
    ///    any more.
    /// 3. At the end of the grace period every lock a scope of this client
    ///    still holds is taken: its guard turns lost
    ///    ([`lost`](crate::LockGuard::lost) resolves,
    ///    [`is_held`](crate::LockGuard::is_held) is false, and its
    ///    [`release`](crate::LockGuard::release) returns
    ///    [`LockError::LeaseLost`]), and the lock is released in the
    ///    backend with the holder's own owner id, as a normal release is:
    ///    a lock that is no longer this client's (expired, taken over) is
    ///    never deleted.
    /// 4. Background releases of dropped guards and rollbacks of abandoned
    ///    grants get up to the response timeout to finish.
    /// 5. The watchdog and the wake-up subscribers stop for good: nothing is
    ///    renewed after this returns.
    ///
    /// Returns a [`ShutdownReport`] counting what happened to the locks
    /// held when the shutdown began; a release that failed is logged (warn
    /// level, target `distlock_core::shutdown`) and retried in the background
    /// while the process runs. `inspect`, `list` and `force_release` keep
    /// working afterwards.
    ///
    /// Idempotent: the first call begins the shutdown, and every call (from
    /// any clone, concurrently or later) waits for that same shutdown and
    /// returns its report. A call with a shorter `grace` than one under way
    /// brings its deadline forward. A `grace` too long for the clock (such
    /// as `Duration::MAX`) waits as long as the bodies take.
    ///
    /// The returned future does not borrow the client, so it can be spawned
    /// (`tokio::spawn(client.shutdown(grace))`) to begin the shutdown while
    /// something else is awaited. Nothing happens until it is polled.
    ///
    /// Errors: [`LockError::InvalidConfig`] when it is not awaited on a tokio
    /// runtime (nothing is done then).
    ///
    /// # Cancel safety
    /// Cancel safe: the shutdown runs in a task of its own on the current
    /// tokio runtime once the future has been polled, and dropping the
    /// future does not stop it (new locks stay refused, and the locks still
    /// held are released at the deadline). Call `shutdown` again to wait
    /// for it. If that runtime goes away before the shutdown is done, the
    /// next call (on another runtime) takes it up where it stopped; a
    /// release that was in flight then may not have been sent, and such a
    /// lock ends with its lease, since it is no longer renewed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, LockError};
    ///
    /// let client = LockClient::memory();
    /// let guard = client.lock("job:nightly").acquire().await?;
    /// let report = client.shutdown(Duration::from_millis(50)).await?;
    /// // The body did not finish within the grace period: its lock was taken.
    /// assert_eq!(report.released_at_deadline, 1);
    /// assert!(!guard.is_held());
    /// assert!(matches!(guard.release().await, Err(LockError::LeaseLost { .. })));
    /// // No new locks after a shutdown.
    /// let refused = client.lock("job:nightly").acquire().await;
    /// assert!(matches!(refused, Err(LockError::ShuttingDown { .. })));
    /// # Ok(()) }
    /// ```
    pub fn shutdown(
        &self,
        grace: Duration,
    ) -> impl Future<Output = Result<ShutdownReport, LockError>> + Send + 'static {
        shutdown::shutdown(self.core.clone(), grace)
    }

    /// Shuts the client down without a grace period: locks still held are
    /// taken and released at once. The same as
    /// [`shutdown(Duration::ZERO)`](LockClient::shutdown), which see.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`shutdown`](LockClient::shutdown).
    pub fn close(
        &self,
    ) -> impl Future<Output = Result<ShutdownReport, LockError>> + Send + 'static {
        self.shutdown(Duration::ZERO)
    }

    /// Whether [`shutdown`](LockClient::shutdown) has begun on this client
    /// (or one of its clones): it takes no new locks.
    pub fn is_shutting_down(&self) -> bool {
        self.core.is_closing()
    }

    /// The client's shared core.
    pub(crate) fn core(&self) -> &Arc<ClientCore> {
        &self.core
    }

    /// The client on `core`.
    pub(crate) fn from_core(core: Arc<ClientCore>) -> Self {
        LockClient { core }
    }
}
