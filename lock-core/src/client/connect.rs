//! One connection type per topology, with the options that apply to it
//! only (as `redis::cluster::ClusterClientBuilder` stands beside
//! `redis::Client`): `WAIT` for replicas on one node and Sentinel, the
//! pub/sub mode on a cluster, the per-master timeout on Redlock. An option
//! that a topology does not have does not compile there.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::builder::LockClientBuilder;
use super::LockClient;
use crate::backend::cluster::{ClusterBackend, MakeBuilder};
use crate::backend::redis::{server_name, RedisSettings};
use crate::backend::redlock::{self, RedlockBackend};
use crate::backend::standalone::sentinel::Sentinel;
use crate::backend::standalone::RedisBackend;
use crate::backend::Unsupported;
use crate::error::LockError;
use crate::lease;
use crate::name::Layout;

/// Which pub/sub a Redis Cluster client's wake-ups use: Redisson's
/// `shardedSubscriptionMode`, with its values and its default (see
/// [`ClusterConnect::sharded_pubsub`]).
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

/// The entry points to each topology's connection.
impl LockClientBuilder {
    /// One Redis server at `url` (see [`LockClient::connect`] for the URL
    /// forms), with the options of that topology ([`RedisConnect`]).
    pub fn redis(self, url: &str) -> RedisConnect {
        RedisConnect::new(self, RedisSource::Url(url.to_owned()))
    }

    /// One Redis server reached through `client`, a `redis::Client` the
    /// program built already (its URL, credentials and TLS settings are
    /// used as they are; this builder's TLS settings do not apply).
    pub fn redis_client(self, client: redis::Client) -> RedisConnect {
        RedisConnect::new(self, RedisSource::Client(Box::new(client)))
    }

    /// The master that the sentinels at `sentinel_urls` report for
    /// `master_name` (see [`LockClient::sentinel`]), with the options of
    /// that topology ([`SentinelConnect`]).
    pub fn sentinel<I>(self, sentinel_urls: I, master_name: &str) -> SentinelConnect
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        SentinelConnect::new(self, strings(sentinel_urls), master_name.to_owned())
    }

    /// A Redis Cluster through any of its nodes (see [`LockClient::cluster`]),
    /// with the options of that topology ([`ClusterConnect`]).
    pub fn cluster<I>(self, urls: I) -> ClusterConnect
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        ClusterConnect::new(self, strings(urls))
    }

    /// Independent masters for Redlock (see [`LockClient::redlock`]), with
    /// the options of that topology ([`RedlockConnect`]).
    pub fn redlock<I>(self, urls: I) -> RedlockConnect
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        RedlockConnect::new(self, strings(urls))
    }

    /// Connects to Redis (see [`LockClient::connect`] for the URL forms):
    /// `self.redis(url).connect()`; or, for a `postgres://` or
    /// `postgresql://` URL, to PostgreSQL with the default schema and table
    /// prefix (feature `postgres`; without it such a URL is
    /// [`LockError::InvalidConfig`] naming the feature).
    pub async fn connect(self, url: &str) -> Result<LockClient, LockError> {
        if is_postgres_url(url) {
            #[cfg(feature = "postgres")]
            return self.postgres(url).connect().await;
            #[cfg(not(feature = "postgres"))]
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: "a postgres:// URL needs the `postgres` feature of distlock".into(),
            });
        }
        self.redis(url).connect().await
    }

    /// Connects to a Redis Cluster through any of its nodes (see
    /// [`LockClient::cluster`]): `self.cluster(urls).connect()`.
    pub async fn connect_cluster<I>(self, urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.cluster(urls).connect().await
    }

    /// Connects to the master that the sentinels at `sentinel_urls` report
    /// for `master_name` (see [`LockClient::sentinel`]):
    /// `self.sentinel(sentinel_urls, master_name).connect()`.
    pub async fn connect_sentinel<I>(
        self,
        sentinel_urls: I,
        master_name: &str,
    ) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.sentinel(sentinel_urls, master_name).connect().await
    }

    /// Connects to independent masters for Redlock (see
    /// [`LockClient::redlock`]): `self.redlock(urls).connect()`.
    pub async fn connect_redlock<I>(self, urls: I) -> Result<LockClient, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.redlock(urls).connect().await
    }
}

/// Each of `values` as a `String`.
fn strings<I>(values: I) -> Vec<String>
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    values.into_iter().map(|v| v.as_ref().to_owned()).collect()
}

/// Where a [`RedisConnect`] reaches its server.
pub(super) enum RedisSource {
    Url(String),
    Client(Box<redis::Client>),
}

/// Checks a `sync_replicas` setting.
fn check_sync(sync: Option<(u32, Duration)>) -> Result<(), LockError> {
    if let Some((_, timeout)) = sync {
        lease::check_timeout("the sync_replicas timeout", timeout)?;
    }
    Ok(())
}

/// A connection to one Redis server, made by
/// [`LockClientBuilder::redis`] or [`LockClientBuilder::redis_client`].
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// let client = distlock_core::LockClient::builder()
///     .key_prefix("billing:lock:")
///     .redis("redis://127.0.0.1:6379/")
///     .sync_replicas(1, Duration::from_millis(50))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "a RedisConnect does nothing until `connect` is awaited"]
pub struct RedisConnect {
    builder: LockClientBuilder,
    source: RedisSource,
    sync_replicas: Option<(u32, Duration)>,
}

impl fmt::Debug for RedisConnect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let server = match &self.source {
            RedisSource::Url(url) => url.clone(),
            RedisSource::Client(client) => server_name(client),
        };
        f.debug_struct("RedisConnect")
            .field("builder", &self.builder)
            .field("server", &server)
            .field("sync_replicas", &self.sync_replicas)
            .finish()
    }
}

impl RedisConnect {
    pub(super) fn new(builder: LockClientBuilder, source: RedisSource) -> Self {
        RedisConnect {
            builder,
            source,
            sync_replicas: None,
        }
    }

    /// After every acquisition, renewal and release, wait (Redis `WAIT`) up
    /// to `timeout` for `replicas` replicas to acknowledge the write, as
    /// Redisson's `syncSlaves` does. An acquisition that fewer replicas
    /// acknowledged is rolled back and fails with
    /// [`BackendError::NotReplicated`](crate::BackendError::NotReplicated);
    /// an unacknowledged renewal or release is logged. This narrows the
    /// window in which a failover loses a lock; it does not close it (Redis
    /// replication stays asynchronous). Off by default. The timeout must be
    /// between 1 ms and [`MAX_TIMEOUT`](crate::MAX_TIMEOUT).
    pub fn sync_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.sync_replicas = Some((replicas, timeout));
        self
    }

    /// Connects. Fails within the connect timeout with
    /// [`LockError::Connect`], [`LockError::Authentication`] when the server
    /// refuses the credentials, and [`LockError::InvalidConfig`] for a bad
    /// URL or setting (naming it and its value).
    ///
    /// # Cancel safety
    /// Cancel safe: no lock is taken; a connection made so far is dropped.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        self.builder.validate()?;
        check_sync(self.sync_replicas)?;
        let client = match self.source {
            RedisSource::Url(url) => self.builder.redis_client_of(&url)?,
            RedisSource::Client(client) => *client,
        };
        let settings = self.builder.settings(self.sync_replicas);
        let backend = RedisBackend::connect(client, settings).await?;
        let wakeups = backend.wakeups();
        self.builder.connected_checked(backend, wakeups).await
    }
}

/// A connection to the master that Sentinel reports, made by
/// [`LockClientBuilder::sentinel`].
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// let client = distlock_core::LockClient::builder()
///     .sentinel(["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/"], "locks")
///     .sync_replicas(1, Duration::from_millis(50))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a SentinelConnect does nothing until `connect` is awaited"]
pub struct SentinelConnect {
    builder: LockClientBuilder,
    sentinels: Vec<String>,
    master: String,
    sync_replicas: Option<(u32, Duration)>,
}

impl SentinelConnect {
    pub(super) fn new(builder: LockClientBuilder, sentinels: Vec<String>, master: String) -> Self {
        SentinelConnect {
            builder,
            sentinels,
            master,
            sync_replicas: None,
        }
    }

    /// `WAIT` for `replicas` replicas after every write, as
    /// [`RedisConnect::sync_replicas`] does.
    pub fn sync_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.sync_replicas = Some((replicas, timeout));
        self
    }

    /// Connects to the master the sentinels report (see
    /// [`LockClient::sentinel`]). Errors as [`RedisConnect::connect`].
    ///
    /// # Cancel safety
    /// Cancel safe: no lock is taken; a connection made so far is dropped.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        self.builder.validate()?;
        check_sync(self.sync_replicas)?;
        let sentinels = self
            .builder
            .urls(self.sentinels)?
            .iter()
            .map(|url| self.builder.redis_client_of(url))
            .collect::<Result<Vec<_>, _>>()?;
        let sentinel = Sentinel::new(sentinels, self.master);
        let settings = self.builder.settings(self.sync_replicas);
        let backend = RedisBackend::connect_sentinel(sentinel, settings).await?;
        let wakeups = backend.wakeups();
        self.builder.connected_checked(backend, wakeups).await
    }
}

/// A connection to a Redis Cluster, made by [`LockClientBuilder::cluster`].
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use distlock_core::{LockClient, ShardedPubSub};
/// let client = LockClient::builder()
///     .cluster(["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"])
///     .sharded_pubsub(ShardedPubSub::Off)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a ClusterConnect does nothing until `connect` is awaited"]
pub struct ClusterConnect {
    builder: LockClientBuilder,
    urls: Vec<String>,
    sharded_pubsub: ShardedPubSub,
}

impl ClusterConnect {
    pub(super) fn new(builder: LockClientBuilder, urls: Vec<String>) -> Self {
        ClusterConnect {
            builder,
            urls,
            sharded_pubsub: ShardedPubSub::Auto,
        }
    }

    /// Whether the wake-ups use sharded pub/sub (`SSUBSCRIBE`, `SPUBLISH`)
    /// or classic pub/sub, as Redisson's `shardedSubscriptionMode` decides
    /// it for its cluster clients (default [`ShardedPubSub::Auto`]). Match
    /// the Java side's setting when sharing locks with Redisson.
    pub fn sharded_pubsub(mut self, mode: ShardedPubSub) -> Self {
        self.sharded_pubsub = mode;
        self
    }

    /// Connects through any of the seed nodes (see [`LockClient::cluster`]).
    /// Errors as [`RedisConnect::connect`].
    ///
    /// # Cancel safety
    /// Cancel safe: no lock is taken; a connection made so far is dropped.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let builder = self.builder;
        builder.validate()?;
        let urls = builder.urls(self.urls)?;
        let seeds = urls
            .iter()
            .map(|url| {
                builder
                    .redis_client_of(url)
                    .map(|client| server_name(&client))
            })
            .collect::<Result<Vec<String>, _>>()?;
        let certificates = builder.tls_certificates();
        let make_builder: MakeBuilder = Arc::new(move || {
            let cluster = redis::cluster::ClusterClientBuilder::new(urls.clone());
            match &certificates {
                Some(certificates) => cluster.certs(certificates.clone()),
                None => cluster,
            }
        });
        let sharded = self.sharded_pubsub != ShardedPubSub::Off;
        let backend =
            ClusterBackend::connect(make_builder, seeds, builder.settings(None), sharded).await?;
        let wakeups = backend.wakeups();
        builder.connected_checked(backend, wakeups).await
    }
}

/// A connection to independent masters for Redlock, made by
/// [`LockClientBuilder::redlock`].
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// let client = distlock_core::LockClient::builder()
///     .redlock(["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"])
///     .node_timeout(Duration::from_millis(50))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a RedlockConnect does nothing until `connect` is awaited"]
pub struct RedlockConnect {
    builder: LockClientBuilder,
    urls: Vec<String>,
    node_timeout: Option<Duration>,
}

impl RedlockConnect {
    pub(super) fn new(builder: LockClientBuilder, urls: Vec<String>) -> Self {
        RedlockConnect {
            builder,
            urls,
            node_timeout: None,
        }
    }

    /// How long each master may take to answer one request (default: 1% of
    /// the lease, at least 50 ms and at most the response timeout). Keep it
    /// small against the lease: a slow or paused master then costs at most
    /// this per acquisition. Between 1 ms and
    /// [`MAX_TIMEOUT`](crate::MAX_TIMEOUT), and shorter than the lease minus
    /// the clock drift allowance.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Connects to every master (see [`LockClient::redlock`]); each must be
    /// reachable now. Errors as [`RedisConnect::connect`]; `keep_hot` and
    /// Redisson's layout are [`LockError::InvalidConfig`] here.
    ///
    /// # Cancel safety
    /// Cancel safe: no lock is taken; connections made so far are dropped.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let builder = self.builder;
        builder.validate()?;
        if let Some(timeout) = self.node_timeout {
            lease::check_timeout("the node timeout", timeout)?;
        }
        if let Some(Unsupported { reason, .. }) = builder.hot_locks_refused(redlock::CAPABILITIES) {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: reason.into(),
            });
        }
        if builder.layout_in_use() == Layout::Redisson {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: "Redlock cannot use Redisson's layout: its tokens and quorum need \
                         this library's scripts on every master (Redisson's own RedissonRedLock \
                         is a different protocol)"
                    .into(),
            });
        }
        let (lease, response_timeout) = builder.timing();
        let node_timeout = self.node_timeout.unwrap_or_else(|| {
            (lease / 100)
                .max(Duration::from_millis(50))
                .min(response_timeout)
        });
        // A node timeout that leaves no validity makes every acquisition
        // that waits for a slow master fail: refused, not discovered later.
        if node_timeout.saturating_add(lease::drift(lease)) >= lease {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: format!(
                    "the Redlock node timeout ({node_timeout:?}) must be shorter than the lease \
                     ({lease:?}) minus the clock drift allowance"
                ),
            });
        }
        let settings = RedisSettings {
            response_timeout: node_timeout,
            ..builder.settings(None)
        };
        let clients = builder
            .urls(self.urls)?
            .iter()
            .map(|url| builder.redis_client_of(url))
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
        builder.connected_checked(backend, wakeups).await
    }
}

/// Whether `url` names a PostgreSQL database (`postgres://`,
/// `postgresql://`, any case).
fn is_postgres_url(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
}
