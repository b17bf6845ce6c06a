//! [`LockClientBuilder`]: the settings every topology shares (key prefix,
//! layout, lease, timeouts, TLS, hot locks, metrics) and the making of a
//! client on a connected backend. The entry points to each topology's
//! connection, where the options of one topology only are set, are in
//! `connect.rs`.

use std::fmt;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use rand::RngCore;

use super::LockClient;
use crate::backend::redis::{server_name, RedisSettings};
use crate::backend::{Backend, Capabilities, MemoryStore, Unsupported};
use crate::client_core::ClientCore;
use crate::error::LockError;
use crate::lease::{self, DEFAULT_LEASE};
use crate::name::{self, Layout};
use crate::release;
use crate::wakeups::Wakeups;

/// The default time allowed for one Redis command to answer.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// The default time allowed for connecting.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default prefix of the Redis keys of locks.
pub const DEFAULT_PREFIX: &str = "lock:";

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
    lease: Duration,
    response_timeout: Duration,
    connect_timeout: Duration,
    root_certificate: Option<Vec<u8>>,
    client_identity: Option<(Vec<u8>, Vec<u8>)>,
    keep_hot: Option<Duration>,
    record_layout: bool,
    allow_mixed_layouts: bool,
    #[cfg(feature = "metrics")]
    metrics_names: crate::metrics::NameLabel,
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            prefix: None,
            layout: Layout::Native,
            lease: DEFAULT_LEASE,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            root_certificate: None,
            client_identity: None,
            keep_hot: None,
            record_layout: true,
            allow_mixed_layouts: false,
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
            .field("lease", &self.lease)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("root_certificate", &self.root_certificate.is_some())
            .field("client_identity", &self.client_identity.is_some())
            .field("keep_hot", &self.keep_hot)
            .field("record_layout", &self.record_layout)
            .field("allow_mixed_layouts", &self.allow_mixed_layouts);
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
    /// Redlock. See the guide's (`distlock::guide`) "Sharing locks with Redisson".
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Whether the client records its layout in the store's registry when
    /// it connects, and is refused when clients of another layout are
    /// recorded there (default `true`; see
    /// [`LockAdmin::layouts`](crate::LockAdmin::layouts) and
    /// [`allow_mixed_layouts`](Self::allow_mixed_layouts)). A tool that only
    /// looks at locks (an operator's inspection, a dashboard) passes
    /// `false`: it neither records its layout (looking at a store whose
    /// clients use Redisson's layout must not make every native client that
    /// connects after it refused) nor is refused. A client that takes locks
    /// should keep the default.
    pub fn record_layout(mut self, record: bool) -> Self {
        self.record_layout = record;
        self
    }

    /// Whether this client may use a store whose registry records clients
    /// of another [`Layout`] (default `false`).
    ///
    /// A lock name taken in two layouts is two locks that do not exclude
    /// each other, so by default a client that finds another layout
    /// recorded when it connects is refused with
    /// [`LockError::LayoutConflict`] (and records nothing). Pass `true` only
    /// for a window in which the mix is intended:
    ///
    /// - a **migration** from one layout to the other, while both services
    ///   run (each lock name taken in only one layout at a time, or the
    ///   work under it safe to run twice);
    /// - services that share a store but **never a lock name** (each
    ///   layout with its own names, or its own key prefix).
    ///
    /// The client then records its layout beside the other, and only logs a
    /// warning. Once the migration is over and no client of the old layout
    /// is left, remove its record with
    /// [`LockAdmin::forget_layout`](crate::LockAdmin::forget_layout) (or
    /// `lockctl layouts --forget LAYOUT`), and drop this option.
    ///
    /// Without effect with [`record_layout(false)`](Self::record_layout).
    pub fn allow_mixed_layouts(mut self, allow: bool) -> Self {
        self.allow_mixed_layouts = allow;
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
    /// - **Leases and `lost()` keep their meaning:** the client's keeper
    ///   renews a kept lock, in use with the full lease and idle with a
    ///   short one (the linger plus twice the response timeout, at most the
    ///   lease), so that a process that dies without closing its client
    ///   leaves an idle kept lock to others within about that; one lost
    ///   meanwhile is found at the next acquisition, which asks the store.
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

    /// The key prefix in effect: the one set, or the layout's default.
    pub(super) fn prefix(&self) -> &str {
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

    /// A PEM-free TLS configuration as the `redis` crate takes it (root
    /// certificate, client identity), for `rediss://` servers: the same as
    /// [`tls_root_certificate`](LockClientBuilder::tls_root_certificate) and
    /// [`tls_client_certificate`](LockClientBuilder::tls_client_certificate)
    /// together, for a program that already holds one.
    pub fn tls(mut self, certificates: redis::TlsCertificates) -> Self {
        self.root_certificate = certificates.root_cert;
        self.client_identity = certificates
            .client_tls
            .map(|tls| (tls.client_cert, tls.client_key));
        self
    }

    /// The TLS material: the PEM root certificate and client identity.
    #[cfg(feature = "postgres")]
    pub(super) fn tls_material(&self) -> crate::backend::postgres::PgTlsMaterial {
        crate::backend::postgres::PgTlsMaterial {
            root_pem: self.root_certificate.clone(),
            identity_pem: self.client_identity.clone(),
        }
    }

    /// The connection settings, with `sync_replicas` where the topology has it.
    pub(super) fn settings(&self, sync_replicas: Option<(u32, Duration)>) -> RedisSettings {
        RedisSettings {
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            sync_replicas,
        }
    }

    /// Checks every setting; a bad one is `InvalidConfig` naming it and its value.
    pub(super) fn validate(&self) -> Result<(), LockError> {
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
        Ok(())
    }

    /// Refuses an empty list of server URLs.
    pub(super) fn urls(&self, urls: Vec<String>) -> Result<Vec<String>, LockError> {
        if urls.is_empty() {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: "at least one server URL is needed".into(),
            });
        }
        Ok(urls)
    }

    pub(super) fn tls_certificates(&self) -> Option<redis::TlsCertificates> {
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
    ///
    /// A store whose other clients use another [`Layout`] refuses the
    /// client ([`LockError::LayoutConflict`]; see
    /// [`allow_mixed_layouts`](Self::allow_mixed_layouts)).
    pub fn memory(self, store: MemoryStore) -> Result<LockClient, LockError> {
        self.validate()?;
        if self.record_layout {
            let mine = self.layout.registry_name();
            let layouts = store.record_layout_now(mine, self.allow_mixed_layouts);
            self.check_layouts(Ok(layouts), "memory")?;
        }
        let wakeups = store.wakeups();
        self.connected(store, wakeups)
    }

    /// A client on `store` with settings that need no validation (the
    /// defaults: [`LockClient::memory`]).
    pub(super) fn build_memory(self, store: MemoryStore) -> LockClient {
        store.layouts_now(Some(self.layout.registry_name()));
        let wakeups = store.wakeups();
        self.build(Arc::new(store), wakeups)
    }

    /// The `redis::Client` of `url`, with this builder's TLS settings.
    pub(super) fn redis_client_of(&self, url: &str) -> Result<redis::Client, LockError> {
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
    pub(super) fn connected(
        self,
        backend: impl Backend,
        wakeups: Wakeups,
    ) -> Result<LockClient, LockError> {
        if let Some(Unsupported { reason, .. }) = self.hot_locks_refused(backend.capabilities()) {
            return Err(LockError::InvalidConfig {
                key: "*".into(),
                reason: reason.into(),
            });
        }
        tracing::debug!(server = backend.server(), "lock client connected");
        Ok(self.build(Arc::new(backend), wakeups))
    }

    /// The client on `backend` (see [`connected`](Self::connected)), once
    /// its layout is recorded in the store's registry: a store that clients
    /// of another layout use too refuses it ([`LockError::LayoutConflict`],
    /// nothing recorded), unless the mix is declared
    /// ([`allow_mixed_layouts`](Self::allow_mixed_layouts)): then a warning
    /// (a lock name taken in both layouts is two locks that do not exclude
    /// each other). See [`check_layouts`](Self::check_layouts) for a
    /// registry that cannot be read.
    pub(super) async fn connected_checked(
        self,
        backend: impl Backend,
        wakeups: Wakeups,
    ) -> Result<LockClient, LockError> {
        if self.record_layout {
            let mine = self.layout.registry_name();
            let layouts = backend.record_layout(mine, self.allow_mixed_layouts).await;
            self.check_layouts(layouts, backend.server())?;
        }
        self.connected(backend, wakeups)
    }

    /// Refuses the client when `layouts` (the store's registry, after this
    /// client's attempt to record itself) holds another layout than this
    /// client's and the mix is not declared; warns when it is declared.
    ///
    /// The registry is best effort: when it cannot be read or written the
    /// client connects without the check, and says so: at `debug` level for
    /// an ACL user without access to `distlock:layouts` (the operator's
    /// choice), at `warn` level otherwise (a timeout, an error). Refusing
    /// would turn a missing grant on a bookkeeping key, or one slow reply,
    /// into an outage of every client; the locks themselves do not depend
    /// on the registry.
    fn check_layouts(
        &self,
        layouts: Result<Vec<String>, LockError>,
        server: &str,
    ) -> Result<(), LockError> {
        let mine = self.layout.registry_name();
        let layouts = match layouts {
            Ok(layouts) => layouts,
            // An ACL user the operator gave no access to the registry: a
            // choice (the guide's rule without `~distlock:layouts`).
            Err(err) if no_permission(&err) => {
                tracing::debug!(
                    server,
                    layout = mine,
                    error = %err,
                    "no access to the registry of lock layouts: connecting without the check"
                );
                return Ok(());
            }
            Err(err) => {
                tracing::warn!(
                    server,
                    layout = mine,
                    error = %err,
                    "the registry of lock layouts cannot be read or written: this client \
                     connects without checking that the store's other clients use its layout"
                );
                return Ok(());
            }
        };
        let others: Vec<String> = layouts
            .into_iter()
            .filter(|layout| layout != mine)
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        if !self.allow_mixed_layouts {
            return Err(LockError::LayoutConflict {
                server: server.to_owned(),
                layout: self.layout,
                others,
            });
        }
        tracing::warn!(
            server,
            layout = mine,
            others = ?others,
            "clients of another lock layout use this store (allowed by allow_mixed_layouts): a \
             lock name taken in both layouts is two locks that do not exclude each other; once \
             no client of the other layout is left, forget it (lockctl layouts --forget) and \
             drop allow_mixed_layouts"
        );
        Ok(())
    }

    /// Why `keep_hot`, when asked for, is refused on a backend with `capabilities`.
    pub(super) fn hot_locks_refused(&self, capabilities: Capabilities) -> Option<Unsupported> {
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
        // The keeper of hot locks gives them up as background releases of
        // this client, which it refers to weakly.
        let core = Arc::new_cyclic(|core| {
            let core = ClientCore::new(
                id.into(),
                prefix,
                self.lease,
                self.response_timeout,
                backend,
                wakeups,
            )
            .with_layout(self.layout)
            .with_keeper(self.keep_hot, release::give_up_kept(core.clone()));
            #[cfg(feature = "metrics")]
            let core = core.with_meter_names(self.metrics_names);
            core
        });
        LockClient::from_core(core)
    }

    /// The layout the client lays its plain locks out in.
    pub(super) fn layout_in_use(&self) -> Layout {
        self.layout
    }

    /// The lease of watchdog-mode locks, and the response timeout.
    pub(super) fn timing(&self) -> (Duration, Duration) {
        (self.lease, self.response_timeout)
    }
}

/// Whether `err` is the server's refusal of a command or key to this ACL user.
fn no_permission(err: &LockError) -> bool {
    match err {
        LockError::Backend {
            source: crate::BackendError::Redis(err),
            ..
        } => err.code() == Some("NOPERM") || err.to_string().contains("NOPERM"),
        _ => false,
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
