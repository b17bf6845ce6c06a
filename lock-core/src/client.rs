//! [`LockClient`]: the connection to the lock backend, shared by every lock.

use std::fmt;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::RngCore;

use crate::backend::cluster::{ClusterBackend, MakeBuilder};
use crate::backend::redis::{server_name, RedisSettings};
use crate::backend::redlock::{self, RedlockBackend};
use crate::backend::standalone::sentinel::Sentinel;
use crate::backend::standalone::RedisBackend;
use crate::backend::{Backend, Capabilities, MemoryStore, Unsupported};
use crate::client_core::ClientCore;
use crate::info::FamilyState;
use crate::lease::{self, DEFAULT_LEASE};
use crate::name::LockKey;
use crate::name::{self, Kind, Layout};
use crate::shutdown;
use crate::wakeups::Wakeups;
use crate::{
    FairLockInfo, Lock, LockError, LockInfo, MultiLock, ReadWriteLock, ReadWriteLockInfo,
    Semaphore, SemaphoreInfo, ShutdownReport,
};

/// The default time allowed for one Redis command to answer.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The default time allowed for connecting.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default prefix of the Redis keys of locks.
pub const DEFAULT_PREFIX: &str = "lock:";

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
    /// [`LockClientBuilder::sync_replicas`] for `WAIT` after writes.
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
    /// master must be reachable at connect time. See the README's "Choosing
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
        // The default settings need no validation.
        let store = MemoryStore::new();
        let wakeups = store.wakeups();
        Self::builder().build(Arc::new(store), wakeups)
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
    /// different locks. Not available on Redlock
    /// ([`LockError::Unsupported`]).
    pub fn fair_lock(&self, name: impl Into<String>) -> Lock {
        Lock::of_kind(self.core.clone(), name.into(), Kind::Fair)
    }

    /// A read-write lock on `name` (see [`ReadWriteLock`]). Not available
    /// on Redlock ([`LockError::Unsupported`]).
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.core.clone(), name.into())
    }

    /// A semaphore of `permits` permits on `name` (see [`Semaphore`]). Not
    /// available on Redlock ([`LockError::Unsupported`]).
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

    /// Deletes the lock `name` whoever holds it and wakes a waiter: an
    /// operator's override for a lock known to be abandoned. Its holder is
    /// told at its next renewal (watchdog mode) or release. Returns whether a
    /// lock was held.
    pub async fn force_release(&self, name: &str) -> Result<bool, LockError> {
        let key = self.core.key(name)?;
        self.core.backend.force_release(&key).await
    }

    /// What the backend knows about lock `name`: its holder (owner, fencing
    /// token, remaining lease) or that it is free, and the value of the
    /// counter its fencing tokens come from.
    ///
    /// One round trip on Redis (`TYPE`, `HGETALL`, `PTTL`, `GET`, pipelined,
    /// not atomic). Reentrant holds are counted in the holder's process and
    /// do not show (see [`LockHolder`](crate::LockHolder)). On Redlock, the
    /// holder a majority of the masters record.
    ///
    /// Errors: [`LockError::InvalidKey`], [`LockError::WrongType`] when a key
    /// of the lock holds another type, [`LockError::Backend`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// let client = distlock_core::LockClient::memory();
    /// let guard = client.lock("order:42").acquire().await?;
    /// let info = client.inspect("order:42").await?;
    /// let holder = info.holder.expect("held");
    /// assert_eq!(holder.owner, guard.owner());
    /// assert_eq!(holder.fencing_token, guard.fencing_token());
    /// assert_eq!(info.last_fencing_token, Some(guard.fencing_token()));
    /// guard.release().await?;
    /// assert!(client.inspect("order:42").await?.holder.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let key = self.core.key(name)?;
        self.core.backend.inspect(&key).await
    }

    /// Every lock currently held whose name starts with `name_prefix` (`""`
    /// for all), sorted by name.
    ///
    /// On Redis this walks the keyspace with `SCAN` (never `KEYS`, so the
    /// server is not blocked), matching only this client's key prefix, in
    /// batches of a few hundred keys with one pipelined round trip per batch
    /// (`HGETALL`, `PTTL`, `GET`); on a cluster, every master. A lock taken
    /// or released during the walk may or may not be listed, as `SCAN`
    /// guarantees.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// let client = distlock_core::LockClient::memory();
    /// let _a = client.lock("job:a").acquire().await?;
    /// let _b = client.lock("job:b").acquire().await?;
    /// let _c = client.lock("order:1").acquire().await?;
    /// let jobs = client.list("job:").await?;
    /// let names: Vec<&str> = jobs.iter().map(|l| l.name.as_str()).collect();
    /// assert_eq!(names, ["job:a", "job:b"]);
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, name_prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        if self.core.layout == Layout::Redisson {
            return Err(LockError::Unsupported {
                key: "*".into(),
                primitive: "list of locks",
                backend: "a client in Redisson's layout",
                reason: "in Redisson's layout a lock's key is its bare name, which tells it \
                         from no other hash in the database; inspect a lock by its name",
            });
        }
        let mut locks = self
            .core
            .backend
            .list(&self.core.prefix, name_prefix)
            .await?;
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(locks)
    }

    /// What the backend records of fair lock `name`
    /// ([`fair_lock`](LockClient::fair_lock)): its holder, and the waiters
    /// queued for it in the order they will get it, each with how long it
    /// keeps its place without another attempt.
    ///
    /// Read-only, one round trip on Redis (one script, so the holder and
    /// the queue are read at one instant). Waiters whose place ran out by
    /// the server's clock (dead or hung processes) are not shown.
    ///
    /// Errors: [`LockError::InvalidKey`], [`LockError::WrongType`] when a key
    /// of the fair lock holds another type, [`LockError::Backend`], and
    /// [`LockError::Unsupported`] on Redlock (as acquiring it is).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// use std::time::Duration;
    /// let client = distlock_core::LockClient::memory();
    /// let turn = client.fair_lock("payout:batch").acquire().await?;
    /// let waiter = tokio::spawn({
    ///     let client = client.clone();
    ///     async move { client.fair_lock("payout:batch").wait(Duration::from_secs(5)).acquire().await }
    /// });
    /// tokio::time::sleep(Duration::from_millis(50)).await; // it queues
    /// let info = client.inspect_fair("payout:batch").await?;
    /// assert_eq!(info.holder.expect("held").owner, turn.owner());
    /// assert_eq!(info.queue.len(), 1);
    /// turn.release().await?; // handed to the head of the queue
    /// waiter.await.unwrap()?.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn inspect_fair(&self, name: &str) -> Result<FairLockInfo, LockError> {
        let (key, state) = self.inspect_family(name, Kind::Fair, "fair lock").await?;
        Ok(FairLockInfo {
            name: key.name.to_string(),
            key: key.lock.to_string(),
            fence_key: key.fence(),
            holder: state.holder,
            queue: state.waiters,
            last_fencing_token: state.last_fencing_token,
        })
    }

    /// What the backend records of read-write lock `name`
    /// ([`read_write_lock`](LockClient::read_write_lock)): its readers, its
    /// writer, and the writers waiting for it (which keep new readers out).
    ///
    /// Read-only, one round trip on Redis (one script, so everything is read
    /// at one instant). Readers whose lease and waiting writers whose place
    /// ran out by the server's clock are not shown.
    ///
    /// Errors: as [`inspect_fair`](LockClient::inspect_fair).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// let client = distlock_core::LockClient::memory();
    /// let prices = client.read_write_lock("prices");
    /// let a = prices.read().acquire().await?;
    /// let b = tokio::spawn({
    ///     let prices = prices.clone();
    ///     async move { prices.read().acquire().await } // another owner
    /// })
    /// .await
    /// .unwrap()?;
    /// let info = client.inspect_read_write("prices").await?;
    /// assert_eq!(info.readers.len(), 2);
    /// assert!(info.writer.is_none() && info.waiting_writers.is_empty());
    /// a.release().await?;
    /// b.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn inspect_read_write(&self, name: &str) -> Result<ReadWriteLockInfo, LockError> {
        let (key, state) = self
            .inspect_family(name, Kind::Write, "read-write lock")
            .await?;
        Ok(ReadWriteLockInfo {
            name: key.name.to_string(),
            key: key.stem().to_string(),
            fence_key: key.fence(),
            readers: state
                .shares
                .into_iter()
                .map(|share| crate::Reader {
                    owner: share.owner,
                    ttl: share.ttl,
                })
                .collect(),
            writer: state.holder,
            waiting_writers: state.waiters,
            last_fencing_token: state.last_fencing_token,
        })
    }

    /// What the backend records of semaphore `name`
    /// ([`semaphore`](LockClient::semaphore)): who holds how many permits,
    /// and how many are in use. The total is not stored (every acquirer
    /// passes it), so the free permits are the caller's total minus
    /// [`in_use`](SemaphoreInfo::in_use).
    ///
    /// Read-only, one round trip on Redis (one script, so everything is read
    /// at one instant). Holders whose lease ran out by the server's clock
    /// are not shown (their permits are free).
    ///
    /// Errors: as [`inspect_fair`](LockClient::inspect_fair).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// let client = distlock_core::LockClient::memory();
    /// let two = client.semaphore("exports", 5).permits(2).acquire().await?;
    /// let info = client.inspect_semaphore("exports").await?;
    /// assert_eq!(info.in_use, 2);
    /// assert_eq!(info.holders[0].owner, two.owner());
    /// assert_eq!(info.holders[0].permits, 2);
    /// two.release().await?;
    /// assert_eq!(client.inspect_semaphore("exports").await?.in_use, 0);
    /// # Ok(()) }
    /// ```
    pub async fn inspect_semaphore(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        let kind = Kind::Permits { take: 1, total: 1 }; // neither matters here
        let (key, state) = self.inspect_family(name, kind, "semaphore").await?;
        Ok(SemaphoreInfo {
            name: key.name.to_string(),
            key: key.lock.to_string(),
            fence_key: key.fence(),
            in_use: state
                .shares
                .iter()
                .fold(0u32, |sum, share| sum.saturating_add(share.permits)),
            holders: state.shares,
            last_fencing_token: state.last_fencing_token,
        })
    }

    /// Deletes the holder of fair lock `name` whoever it is, as an
    /// operator's override, and hands the lock to the head of its queue as
    /// a release does (the queue is kept). The holder is told at its next
    /// renewal or release. Returns whether it was held.
    ///
    /// Errors: [`LockError::InvalidKey`], [`LockError::WrongType`],
    /// [`LockError::Backend`], and [`LockError::Unsupported`] on Redlock.
    pub async fn force_release_fair(&self, name: &str) -> Result<bool, LockError> {
        let key = self.family_key(name, Kind::Fair, "fair lock")?;
        self.core.backend.force_release(&key).await
    }

    /// Deletes every hold of read-write lock `name` (the readers, the
    /// writer) and the waiting writers' places, as an operator's override,
    /// and wakes the waiters. The holders are told at their next renewal or
    /// release. Returns whether anything was deleted.
    ///
    /// Errors: as [`force_release_fair`](LockClient::force_release_fair).
    pub async fn force_release_read_write(&self, name: &str) -> Result<bool, LockError> {
        let key = self.family_key(name, Kind::Write, "read-write lock")?;
        self.core.backend.force_release(&key).await
    }

    /// Deletes every holder's permits of semaphore `name`, as an operator's
    /// override, and wakes the waiters. The holders are told at their next
    /// renewal or release. Returns whether anything was deleted.
    ///
    /// Errors: as [`force_release_fair`](LockClient::force_release_fair).
    pub async fn force_release_semaphore(&self, name: &str) -> Result<bool, LockError> {
        let kind = Kind::Permits { take: 1, total: 1 }; // neither matters here
        let key = self.family_key(name, kind, "semaphore")?;
        self.core.backend.force_release(&key).await
    }

    /// The keys of `kind` of the family named `name`, refused with
    /// `Unsupported` (naming `primitive`) where the family is not available.
    fn family_key(
        &self,
        name: &str,
        kind: Kind,
        primitive: &'static str,
    ) -> Result<LockKey, LockError> {
        let key = self.core.key_of(name, kind)?;
        match self.core.backend.capabilities().family {
            Some(Unsupported { backend, reason }) => Err(LockError::Unsupported {
                key: key.name.to_string(),
                primitive,
                backend,
                reason,
            }),
            None => Ok(key),
        }
    }

    /// The keys of `kind` of `name` and what the backend records of it.
    async fn inspect_family(
        &self,
        name: &str,
        kind: Kind,
        primitive: &'static str,
    ) -> Result<(LockKey, FamilyState), LockError> {
        let key = self.family_key(name, kind, primitive)?;
        let state = self.core.backend.inspect_family(&key).await?;
        Ok((key, state))
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
    /// Ctrl-C); see "Graceful shutdown" in the README.
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
}

/// Which pub/sub a Redis Cluster client's wake-ups use: Redisson's
/// `shardedSubscriptionMode`, with its values and its default (see
/// [`LockClientBuilder::sharded_pubsub`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ShardedPubSub {
    /// Sharded when the server has it, as Redisson's `AUTO` decides (its
    /// `PUBSUB SHARDNUMSUB` works from Redis 7.0 on, which the Cluster
    /// backend needs anyway): in effect, sharded.
    #[default]
    Auto,
    /// `SSUBSCRIBE` and `SPUBLISH`, in the lock's slot.
    On,
    /// Classic `SUBSCRIBE` and `PUBLISH`, which every node relays to the
    /// whole cluster.
    Off,
}

/// Settings of a [`LockClient`].
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// let client = distlock_core::LockClient::builder()
///     .key_prefix("billing:lock:")
///     .lease(Duration::from_secs(10))
///     .response_timeout(Duration::from_millis(500))
///     .connect("redis://127.0.0.1:6379/")
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use]
pub struct LockClientBuilder {
    /// The key prefix; `None`: the layout's default.
    prefix: Option<String>,
    layout: Layout,
    sharded_pubsub: ShardedPubSub,
    lease: Duration,
    response_timeout: Duration,
    connect_timeout: Duration,
    root_certificate: Option<Vec<u8>>,
    client_identity: Option<(Vec<u8>, Vec<u8>)>,
    sync_replicas: Option<(u32, Duration)>,
    node_timeout: Option<Duration>,
    keep_hot: Option<Duration>,
    #[cfg(feature = "metrics")]
    metrics_names: crate::metrics::NameLabel,
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            prefix: None,
            layout: Layout::Native,
            sharded_pubsub: ShardedPubSub::Auto,
            lease: DEFAULT_LEASE,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            root_certificate: None,
            client_identity: None,
            sync_replicas: None,
            node_timeout: None,
            keep_hot: None,
            #[cfg(feature = "metrics")]
            metrics_names: crate::metrics::NameLabel::Off,
        }
    }
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("LockClientBuilder");
        f.field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .field("sharded_pubsub", &self.sharded_pubsub)
            .field("lease", &self.lease)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("root_certificate", &self.root_certificate.is_some())
            .field("client_identity", &self.client_identity.is_some())
            .field("sync_replicas", &self.sync_replicas)
            .field("node_timeout", &self.node_timeout);
        #[cfg(feature = "metrics")]
        f.field("metrics_names", &self.metrics_names);
        f.finish()
    }
}

impl LockClientBuilder {
    /// Whether the client's per-lock metrics carry the lock's name as label
    /// `name` (feature `metrics`; default [`NameLabel::Off`](crate::metrics::NameLabel::Off):
    /// no name, so that the number of series does not grow with the names).
    /// See the [`metrics`](crate::metrics) module.
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_names(mut self, names: crate::metrics::NameLabel) -> Self {
        self.metrics_names = names;
        self
    }

    /// Prefix of the Redis keys (default `lock:`; empty in
    /// [Redisson's layout](Layout::Redisson)): lock `order:42` is stored as
    /// `<prefix>{order:42}` (Redisson's layout: `<prefix>order:42`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// How plain locks are laid out in Redis (default [`Layout::Native`]).
    /// With [`Layout::Redisson`] a lock of this client and a Redisson
    /// `RLock` or `RFencedLock` of the same name exclude each other, wake
    /// each other's waiters, and share `RFencedLock`'s fencing tokens; the
    /// lock family is refused ([`LockError::Unsupported`]), and so is
    /// Redlock. See the README's "Sharing locks with Redisson".
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Hot locks: a plain lock this client releases stays taken in its
    /// name for `linger`, so that taking it again in this client costs no
    /// round trip (as Chubby caches locks and the JVM biases monitors). Off
    /// by default; for locks one client takes over and over.
    ///
    /// - **Mutual exclusion is unchanged.** Every scope of the client takes
    ///   a kept lock through the client, one at a time; the store sees one
    ///   holder, this client.
    /// - **Another client asks for it and gets it.** Its attempt (any client
    ///   of this library, hot or not) asks the keeper through the lock's
    ///   channel: a lock kept idle is given up at once, one in use at the
    ///   end of that use. The asker is woken by that release as by any, and
    ///   asks again every 100 ms while it waits on a kept lock.
    /// - **Given up after `linger` without a use**, at
    ///   [`shutdown`](LockClient::shutdown), and (in the background) when
    ///   the client is dropped.
    /// - **Leases and `lost()` keep their meaning:** the watchdog renews a
    ///   kept lock between uses; one lost meanwhile is found at the next
    ///   acquisition, which asks the store.
    /// - **Fencing tokens:** every use of a kept lock has the token the
    ///   store gave when the client took it, until the client gives it up;
    ///   the next holder's token is higher. Tokens order holders across
    ///   clients, not the uses inside one client.
    /// - **Applies to** plain locks with the watchdog lease, without
    ///   [`hold_at_least`](crate::Lock::hold_at_least); not to fixed leases
    ///   or the lock family. One node, Sentinel, Cluster and the in-memory
    ///   store; refused with Redlock and in Redisson's layout (Redisson's
    ///   clients do not ask a keeper).
    ///
    /// A linger of zero or over an hour is [`LockError::InvalidConfig`].
    pub fn keep_hot(mut self, linger: Duration) -> Self {
        self.keep_hot = Some(linger);
        self
    }

    /// Whether a Redis Cluster client's wake-ups use sharded pub/sub
    /// (`SSUBSCRIBE`, `SPUBLISH`) or classic pub/sub, as Redisson's
    /// `shardedSubscriptionMode` decides it for its cluster clients (default
    /// [`ShardedPubSub::Auto`]). Match the Java side's setting when sharing
    /// locks with Redisson. One node, Sentinel and Redlock always use
    /// classic pub/sub (as Redisson does): `On` is refused there.
    pub fn sharded_pubsub(mut self, mode: ShardedPubSub) -> Self {
        self.sharded_pubsub = mode;
        self
    }

    /// The key prefix in effect: the one set, or the layout's default.
    fn prefix(&self) -> &str {
        match (&self.prefix, self.layout) {
            (Some(prefix), _) => prefix,
            (None, Layout::Redisson) => "",
            (None, _) => DEFAULT_PREFIX,
        }
    }

    /// The lease of watchdog-mode locks (default 30 s, renewed every lease/3;
    /// between [`MIN_WATCHDOG_LEASE`](crate::MIN_WATCHDOG_LEASE) (30 ms) and
    /// [`MAX_LEASE`](crate::MAX_LEASE)). A crashed holder's lock is free after
    /// at most this.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long one command may take to answer (default 2 s; between 1 ms
    /// and [`MAX_TIMEOUT`](crate::MAX_TIMEOUT)). A slower renewal is retried
    /// until the lease deadline, not taken as a loss; a guard's
    /// [`lost`](crate::LockGuard::lost) fires by that deadline whatever a
    /// renewal still in flight may bring.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long connecting may take (default 5 s; between 1 ms and
    /// [`MAX_TIMEOUT`](crate::MAX_TIMEOUT)).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// A PEM root certificate to verify a `rediss://` server with, instead of
    /// the system's roots (for a private CA).
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_certificate = Some(pem.into());
        self
    }

    /// A PEM certificate and key to present to a `rediss://` server that
    /// authenticates clients (mutual TLS).
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// After every acquisition, renewal and release, wait (Redis `WAIT`) up
    /// to `timeout` for `replicas` replicas to acknowledge the write, as
    /// Redisson's `syncSlaves` does. An acquisition that fewer replicas
    /// acknowledged is rolled back and fails with
    /// [`BackendError::NotReplicated`](crate::BackendError::NotReplicated);
    /// an unacknowledged renewal or release is logged. This narrows the
    /// window in which a failover loses a lock; it does not close it (Redis
    /// replication stays asynchronous). Off by default; for standalone and
    /// Sentinel backends.
    pub fn sync_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.sync_replicas = Some((replicas, timeout));
        self
    }

    /// Redlock: how long each master may take to answer one request
    /// (default: 1% of the lease, at least 50 ms and at most the response
    /// timeout). Keep it small against the lease: a slow or paused master
    /// then costs at most this per acquisition.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    fn settings(&self) -> RedisSettings {
        RedisSettings {
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            sync_replicas: self.sync_replicas,
        }
    }

    /// Checks every setting; a bad one is `InvalidConfig` naming it and its value.
    /// Refuses sharded pub/sub on a backend that is not a cluster.
    fn classic_only(&self) -> Result<(), LockError> {
        if self.sharded_pubsub == ShardedPubSub::On {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: "sharded pub/sub (ShardedPubSub::On) is for Redis Cluster clients only; \
                         one node, Sentinel and Redlock use classic pub/sub, as Redisson does"
                    .into(),
            });
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), LockError> {
        if let Some(linger) = self.keep_hot {
            let reason = if linger.is_zero() || linger > crate::hot::MAX_LINGER {
                Some(format!(
                    "keep_hot needs a linger from 1 ns to 1 hour, got {linger:?}"
                ))
            } else if self.layout == Layout::Redisson {
                Some(
                    "keep_hot cannot be used in Redisson's layout: Redisson's clients do not \
                     ask a keeper for a lock, so they would wait for every linger"
                        .to_owned(),
                )
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(LockError::InvalidConfig {
                    key: "*".into(),
                    reason,
                });
            }
        }
        name::check_prefix(self.prefix())?;
        lease::check_watchdog(self.lease)?;
        lease::check_timeout("the response timeout", self.response_timeout)?;
        lease::check_timeout("the connect timeout", self.connect_timeout)?;
        if let Some(timeout) = self.node_timeout {
            lease::check_timeout("the node timeout", timeout)?;
        }
        if let Some((_, timeout)) = self.sync_replicas {
            lease::check_timeout("the sync_replicas timeout", timeout)?;
        }
        Ok(())
    }

    /// Connects to Redis (see [`LockClient::connect`] for the URL forms).
    pub async fn connect(self, url: &str) -> Result<LockClient, LockError> {
        self.validate()?;
        self.classic_only()?;
        let client = self.redis_client(url)?;
        let backend = RedisBackend::connect(client, self.settings()).await?;
        let wakeups = backend.wakeups();
        self.connected(backend, wakeups)
    }

    /// Connects to a Redis Cluster through any of its nodes (see
    /// [`LockClient::cluster`]).
    pub async fn connect_cluster<I>(self, urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.validate()?;
        let urls = self.urls(urls)?;
        for url in &urls {
            self.redis_client(url)?; // checks each URL, installs TLS support
        }
        let seeds = urls
            .iter()
            .map(|url| self.redis_client(url).map(|client| server_name(&client)))
            .collect::<Result<Vec<String>, _>>()?;
        let certificates = self.tls_certificates();
        let make_builder: MakeBuilder = Arc::new(move || {
            let builder = redis::cluster::ClusterClientBuilder::new(urls.clone());
            match &certificates {
                Some(certificates) => builder.certs(certificates.clone()),
                None => builder,
            }
        });
        let sharded = self.sharded_pubsub != ShardedPubSub::Off;
        let backend =
            ClusterBackend::connect(make_builder, seeds, self.settings(), sharded).await?;
        let wakeups = backend.wakeups();
        self.connected(backend, wakeups)
    }

    /// Connects to the master that the sentinels at `sentinel_urls` report
    /// for `master_name` (see [`LockClient::sentinel`]).
    pub async fn connect_sentinel<I>(
        self,
        sentinel_urls: I,
        master_name: &str,
    ) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.validate()?;
        self.classic_only()?;
        let sentinels = self
            .urls(sentinel_urls)?
            .iter()
            .map(|url| self.redis_client(url))
            .collect::<Result<Vec<_>, _>>()?;
        let sentinel = Sentinel::new(sentinels, master_name.to_owned());
        let backend = RedisBackend::connect_sentinel(sentinel, self.settings()).await?;
        let wakeups = backend.wakeups();
        self.connected(backend, wakeups)
    }

    /// Connects to independent masters for Redlock (see
    /// [`LockClient::redlock`]).
    pub async fn connect_redlock<I>(self, urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.validate()?;
        self.classic_only()?;
        if let Some(Unsupported { reason, .. }) = self.hot_locks_refused(redlock::CAPABILITIES) {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: reason.into(),
            });
        }
        if self.layout == Layout::Redisson {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: "Redlock cannot use Redisson's layout: its tokens and quorum need \
                         this library's scripts on every master (Redisson's own RedissonRedLock \
                         is a different protocol)"
                    .into(),
            });
        }
        let node_timeout = self.node_timeout.unwrap_or_else(|| {
            (self.lease / 100)
                .max(Duration::from_millis(50))
                .min(self.response_timeout)
        });
        // A node timeout that leaves no validity makes every acquisition
        // that waits for a slow master fail: refused, not discovered later.
        if node_timeout.saturating_add(lease::drift(self.lease)) >= self.lease {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: format!(
                    "the Redlock node timeout ({node_timeout:?}) must be shorter than the lease \
                     ({:?}) minus the clock drift allowance",
                    self.lease
                ),
            });
        }
        let settings = RedisSettings {
            response_timeout: node_timeout,
            ..self.settings()
        };
        let clients = self
            .urls(urls)?
            .iter()
            .map(|url| self.redis_client(url))
            .collect::<Result<Vec<_>, _>>()?;
        let nodes = futures_util::future::join_all(
            clients
                .into_iter()
                .map(|client| RedisBackend::connect(client, settings.clone())),
        )
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        let backend = RedlockBackend::new(nodes, node_timeout);
        let wakeups = backend.wakeups();
        self.connected(backend, wakeups)
    }

    fn urls<I>(&self, urls: I) -> Result<Vec<String>, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        if urls.is_empty() {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: "at least one server URL is needed".into(),
            });
        }
        Ok(urls)
    }

    fn tls_certificates(&self) -> Option<redis::TlsCertificates> {
        if self.root_certificate.is_none() && self.client_identity.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self
                .client_identity
                .clone()
                .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }),
            root_cert: self.root_certificate.clone(),
        })
    }

    /// A client on `store`; clients on one store see each other's locks.
    pub fn memory(self, store: MemoryStore) -> Result<LockClient, LockError> {
        self.validate()?;
        let wakeups = store.wakeups();
        self.connected(store, wakeups)
    }

    fn redis_client(&self, url: &str) -> Result<redis::Client, LockError> {
        let invalid = |err: redis::RedisError| LockError::InvalidConfig {
            key: "*".into(),
            reason: format!("invalid Redis URL: {err}"),
        };
        if url.starts_with("rediss://") {
            // rustls needs a process-wide crypto provider; another part of the
            // program may have installed one already.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = match self.tls_certificates() {
            Some(certificates) if url.starts_with("rediss://") => {
                redis::Client::build_with_tls(url, certificates).map_err(invalid)?
            }
            _ => redis::Client::open(url).map_err(invalid)?,
        };
        tracing::trace!(server = %server_name(&client), "lock client configured");
        Ok(client)
    }

    /// The client on `backend`, once the settings it does not support are
    /// refused.
    fn connected(self, backend: impl Backend, wakeups: Wakeups) -> Result<LockClient, LockError> {
        if let Some(Unsupported { reason, .. }) = self.hot_locks_refused(backend.capabilities()) {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: reason.into(),
            });
        }
        tracing::debug!(server = backend.server(), "lock client connected");
        Ok(self.build(Arc::new(backend), wakeups))
    }

    /// Why `keep_hot`, when asked for, is refused on a backend with `capabilities`.
    fn hot_locks_refused(&self, capabilities: Capabilities) -> Option<Unsupported> {
        self.keep_hot.and(capabilities.hot_locks)
    }

    fn build(self, backend: Arc<dyn Backend>, wakeups: Wakeups) -> LockClient {
        let mut id = [0u8; 16];
        rand::rng().fill_bytes(&mut id);
        let id = match self.layout {
            // As Java's `UUID.randomUUID()` prints it (a version 4 UUID):
            // the id Redisson puts before `:<thread id>`.
            Layout::Redisson => uuid_v4(id),
            _ => id.iter().map(|b| format!("{b:02x}")).collect(),
        };
        let prefix = self.prefix().to_owned();
        let core = ClientCore::new(
            id.into(),
            prefix,
            self.lease,
            self.response_timeout,
            backend,
            wakeups,
        )
        .with_layout(self.layout)
        .with_keeper(self.keep_hot);
        #[cfg(feature = "metrics")]
        let core = core.with_meter_names(self.metrics_names);
        LockClient {
            core: Arc::new(core),
        }
    }
}

/// 16 random bytes as a version 4 UUID, `xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`.
fn uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut out = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push('-');
        }
        let _ = write!(out, "{b:02x}");
    }
    out
}
