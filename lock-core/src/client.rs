//! [`LockClient`]: the connection to the lock backend, shared by every lock.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rand::RngCore;

use crate::backend::cluster::ClusterBackend;
use crate::backend::redis::{server_name, RedisBackend, RedisSettings};
use crate::backend::redlock::RedlockBackend;
use crate::backend::sentinel::Sentinel;
use crate::backend::{Backend, MemoryStore};
use crate::guard::HeldLock;
use crate::key::LockKey;
use crate::watchdog::WatchdogState;
use crate::{Lock, LockError, MultiLock};

/// The default lease of watchdog-mode locks (renewed every third of it).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The default time allowed for one Redis command to answer.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The default time allowed for connecting.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default prefix of the Redis keys of locks.
pub const DEFAULT_PREFIX: &str = "lock:";
/// The shortest watchdog lease accepted.
pub const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(30);

/// A handle on a lock backend: one Redis server or an in-memory store.
///
/// Cheap to clone (an `Arc`); clones share the connection, the watchdog and
/// the wake-up subscription. Every client has a random 128-bit id, the root
/// of the owner ids of its locks, so no other client can release or renew
/// them.
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// use lock_core::LockClient;
///
/// let client = LockClient::connect("redis://127.0.0.1:6379/").await?;
/// let guard = client.lock("order:42").wait(Duration::from_secs(10)).acquire().await?;
/// // ... work on order 42, passing guard.fencing_token() to the store ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) id: Arc<str>,
    pub(crate) prefix: String,
    /// The lease of watchdog-mode locks.
    pub(crate) lease: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) backend: Backend,
    pub(crate) runtime: Option<tokio::runtime::Handle>,
    pub(crate) next_scope: AtomicU64,
    next_lock: AtomicU64,
    pub(crate) watchdog: Mutex<WatchdogState>,
    /// The locks some scope of this client holds, by lock name: a waiter of
    /// this client knows such a lock is busy without asking the server.
    holders: Mutex<HashMap<Arc<str>, Weak<HeldLock>>>,
    pub(crate) stats: Stats,
}

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) renewal_rounds: AtomicU64,
}

impl ClientInner {
    pub(crate) fn next_lock_id(&self) -> u64 {
        self.next_lock.fetch_add(1, Ordering::Relaxed)
    }

    /// Records `lock` as held by a scope of this client.
    pub(crate) fn holder_insert(&self, lock: &Arc<HeldLock>) {
        self.holders
            .lock()
            .unwrap()
            .insert(lock.key.name.clone(), Arc::downgrade(lock));
    }

    /// Forgets `lock` as a holder (before its release is sent, so a waiter
    /// woken by that release asks the server).
    pub(crate) fn holder_remove(&self, lock: &HeldLock) {
        let mut holders = self.holders.lock().unwrap();
        // One lookup (this runs on every release).
        if let Entry::Occupied(entry) = holders.entry(lock.key.name.clone()) {
            if std::ptr::eq(entry.get().as_ptr(), lock) {
                entry.remove();
            }
        }
    }

    /// The lock named `name` when a scope of this client holds it (lease
    /// still running on the local clock) under another owner than `owner`.
    pub(crate) fn held_elsewhere(&self, name: &str, owner: &str) -> Option<Arc<HeldLock>> {
        let holder = self.holders.lock().unwrap().get(name)?.upgrade()?;
        (&*holder.owner != owner && holder.is_held()).then_some(holder)
    }

    /// Spawns background work on the current runtime, or the client's.
    pub(crate) fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.clone())
        {
            Some(runtime) => drop(runtime.spawn(fut)),
            None => tracing::warn!(
                "no tokio runtime to release a lock in the background; its lease will expire"
            ),
        }
    }
}

impl fmt::Debug for ClientInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.id)
            .field("server", &self.backend.server())
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .finish()
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
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
    /// for `master_name`, and follows it across failovers (the sentinels are
    /// asked again after an error that may mean one; scripts are loaded on
    /// the new master). The master is reached with the first sentinel URL's
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
        Self::builder()
            .memory(MemoryStore::new())
            .expect("the default settings are valid")
    }

    /// A lock on `name` (e.g. `"order:42"`), to configure and acquire.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.clone(), name.into())
    }

    /// Several locks to take together, all or nothing, in sorted order (so two
    /// callers naming the same locks in another order cannot deadlock).
    pub fn lock_all<I>(&self, names: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        MultiLock::new(self.clone(), names.into_iter().map(Into::into).collect())
    }

    /// Deletes the lock `name` whoever holds it and wakes a waiter: an
    /// operator's override for a lock known to be abandoned. Its holder is
    /// told at its next renewal (watchdog mode) or release. Returns whether a
    /// lock was held.
    pub async fn force_release(&self, name: &str) -> Result<bool, LockError> {
        let key = LockKey::new(&self.inner.prefix, name)?;
        self.inner.backend.force_release(&key).await
    }

    /// This client's random id (hex), the prefix of its owner ids.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The prefix of the Redis keys of this client's locks.
    pub fn key_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The lease of watchdog-mode locks.
    pub fn lease(&self) -> Duration {
        self.inner.lease
    }

    /// The server this client talks to (`host:port`, or `memory`).
    pub fn server(&self) -> &str {
        self.inner.backend.server()
    }

    /// Counters of this client.
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            renewal_rounds: self.inner.stats.renewal_rounds.load(Ordering::Relaxed),
            watched_locks: self.inner.watchdog.lock().unwrap().len(),
        }
    }
}

/// Settings of a [`LockClient`].
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// use std::time::Duration;
/// let client = lock_core::LockClient::builder()
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
    prefix: String,
    lease: Duration,
    response_timeout: Duration,
    connect_timeout: Duration,
    root_certificate: Option<Vec<u8>>,
    client_identity: Option<(Vec<u8>, Vec<u8>)>,
    sync_replicas: Option<(u32, Duration)>,
    node_timeout: Option<Duration>,
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            prefix: DEFAULT_PREFIX.to_owned(),
            lease: DEFAULT_LEASE,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            root_certificate: None,
            client_identity: None,
            sync_replicas: None,
            node_timeout: None,
        }
    }
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("prefix", &self.prefix)
            .field("lease", &self.lease)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("root_certificate", &self.root_certificate.is_some())
            .field("client_identity", &self.client_identity.is_some())
            .field("sync_replicas", &self.sync_replicas)
            .field("node_timeout", &self.node_timeout)
            .finish()
    }
}

impl LockClientBuilder {
    /// Prefix of the Redis keys (default `lock:`): lock `order:42` is stored
    /// as `<prefix>{order:42}`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lease of watchdog-mode locks (default 30 s, renewed every lease/3;
    /// at least 30 ms). A crashed holder's lock is free after at most this.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long one command may take to answer (default 2 s). A slower
    /// renewal is retried until the lease deadline, not taken as a loss.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long connecting may take (default 5 s).
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

    fn validate(&self) -> Result<(), LockError> {
        let invalid = |reason: String| {
            Err(LockError::InvalidConfig {
                key: "*".into(),
                reason,
            })
        };
        if self.lease < MIN_WATCHDOG_LEASE {
            return invalid(format!(
                "the watchdog lease must be at least {MIN_WATCHDOG_LEASE:?}, got {:?}",
                self.lease
            ));
        }
        if self.response_timeout.is_zero()
            || self.connect_timeout.is_zero()
            || self.node_timeout.is_some_and(|t| t.is_zero())
        {
            return invalid("timeouts must be greater than zero".into());
        }
        Ok(())
    }

    /// Connects to Redis (see [`LockClient::connect`] for the URL forms).
    pub async fn connect(self, url: &str) -> Result<LockClient, LockError> {
        self.validate()?;
        let client = self.redis_client(url)?;
        let backend = RedisBackend::connect(client, self.settings()).await?;
        tracing::debug!(server = backend.server(), "lock client connected");
        Ok(self.build(Backend::Redis(Box::new(backend))))
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
        let seeds: Vec<String> = urls
            .iter()
            .map(|url| server_name(&redis::Client::open(url.as_str()).expect("checked")))
            .collect();
        let certificates = self.tls_certificates();
        let make_builder: crate::backend::cluster::MakeBuilder = Arc::new(move || {
            let builder = redis::cluster::ClusterClientBuilder::new(urls.clone());
            match &certificates {
                Some(certificates) => builder.certs(certificates.clone()),
                None => builder,
            }
        });
        let backend = ClusterBackend::connect(make_builder, seeds, self.settings()).await?;
        tracing::debug!(server = backend.server(), "lock client connected");
        Ok(self.build(Backend::Cluster(Box::new(backend))))
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
        let sentinels = self
            .urls(sentinel_urls)?
            .iter()
            .map(|url| self.redis_client(url))
            .collect::<Result<Vec<_>, _>>()?;
        let sentinel = Sentinel::new(sentinels, master_name.to_owned());
        let backend = RedisBackend::connect_sentinel(sentinel, self.settings()).await?;
        tracing::debug!(server = backend.server(), "lock client connected");
        Ok(self.build(Backend::Redis(Box::new(backend))))
    }

    /// Connects to independent masters for Redlock (see
    /// [`LockClient::redlock`]).
    pub async fn connect_redlock<I>(self, urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.validate()?;
        let node_timeout = self.node_timeout.unwrap_or_else(|| {
            (self.lease / 100)
                .max(Duration::from_millis(50))
                .min(self.response_timeout)
        });
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
        tracing::debug!(server = backend.server(), "lock client connected");
        Ok(self.build(Backend::Redlock(Box::new(backend))))
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
        Ok(self.build(Backend::Memory(store)))
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

    fn build(self, backend: Backend) -> LockClient {
        let mut id = [0u8; 16];
        rand::rng().fill_bytes(&mut id);
        let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
        LockClient {
            inner: Arc::new(ClientInner {
                id: id.into(),
                prefix: self.prefix,
                lease: self.lease,
                response_timeout: self.response_timeout,
                backend,
                runtime: tokio::runtime::Handle::try_current().ok(),
                next_scope: AtomicU64::new(1),
                next_lock: AtomicU64::new(1),
                watchdog: Mutex::default(),
                holders: Mutex::default(),
                stats: Stats::default(),
            }),
        }
    }
}
