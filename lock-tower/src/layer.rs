//! [`LockLayer`]: the layer and its options.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, StatusCode};
use lock_core::{Lock, LockClient};
use tower_layer::Layer;

use crate::http::Reject;
use crate::{Grpc, Http, LockService, Plain};

/// How long a request waits for a busy lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    For(Duration),
    Forever,
}

/// What a [`LockService`] needs: the client, the extractor, the lock options
/// and the flavour.
#[derive(Clone)]
pub(crate) struct Config<K, P> {
    pub(crate) client: LockClient,
    pub(crate) extractor: K,
    pub(crate) wait: Wait,
    pub(crate) lease: Option<Duration>,
    pub(crate) protocol: P,
}

impl<K, P> Config<K, P> {
    /// The lock on `key`, with the layer's wait and lease.
    pub(crate) fn lock(&self, key: String) -> Lock {
        let lock = self.client.lock(key);
        let lock = match self.wait {
            Wait::For(wait) => lock.wait(wait),
            Wait::Forever => lock.wait_forever(),
        };
        match self.lease {
            Some(lease) => lock.lease(lease),
            None => lock,
        }
    }
}

/// A tower [`Layer`] that runs each request under a distributed lock chosen
/// by a [`KeyExtractor`](crate::KeyExtractor).
///
/// For a request whose extractor gives `Some(name)`, the service waits for
/// lock `name` as configured ([`wait`](LockLayer::wait), default: try once),
/// calls the inner service while holding it (the client's watchdog renews the
/// lease, unless a fixed [`lease`](LockLayer::lease) is set), and releases it
/// before handing the response on, or, with
/// [`hold_until_body_end`](LockLayer::hold_until_body_end), after the
/// response body has been sent. A request whose extractor gives `None` goes
/// straight through.
///
/// The inner service runs inside the guard's ownership scope, so it can
/// acquire the same lock again (for example in a domain function that locks
/// `order:{id}` itself) without waiting for its own request.
///
/// Three flavours decide what a request that did not get the lock sees:
///
/// - [`Http`] (default, from [`new`](LockLayer::new)): a response (409 with
///   `Retry-After`, 503, ...). The service's error type stays the inner
///   service's, so it is infallible for axum.
/// - [`Grpc`] ([`grpc`](LockLayer::grpc)): a gRPC status (`ABORTED`,
///   `UNAVAILABLE`), for tonic's `Server::builder().layer(..)`.
/// - [`Plain`] ([`plain`](LockLayer::plain)): for any tower service whose
///   error type is `From<LockError>`; the [`LockError`](lock_core::LockError)
///   is the service's error.
///
/// ```no_run
/// use std::time::Duration;
/// use lock_core::LockClient;
/// use lock_tower::{LockLayer, PathTemplate};
///
/// # async fn demo() -> Result<(), lock_core::LockError> {
/// let client = LockClient::connect("redis://127.0.0.1:6379/").await?;
/// let layer = LockLayer::new(client, PathTemplate::new("/orders/{id}/pay", "order:{id}"))
///     .wait(Duration::from_secs(5))
///     .fencing_token_header(http::HeaderName::from_static("x-fencing-token"));
/// // Router::new().route("/orders/{id}/pay", post(pay)).layer(layer)
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone)]
#[must_use]
pub struct LockLayer<K, P = Http> {
    pub(crate) config: Config<K, P>,
}

impl<K> LockLayer<K, Http> {
    /// A layer locking, on `client`, the name `extractor` gives each request;
    /// the HTTP flavour, trying each lock once (no wait), in watchdog mode.
    pub fn new(client: LockClient, extractor: K) -> Self {
        LockLayer {
            config: Config {
                client,
                extractor,
                wait: Wait::For(Duration::ZERO),
                lease: None,
                protocol: Http::new(),
            },
        }
    }

    /// The gRPC flavour: lock failures become gRPC statuses. The options set
    /// so far (wait, lease, fencing token, body hold) are kept.
    pub fn grpc(self) -> LockLayer<K, Grpc> {
        let protocol = Grpc::from_http(&self.config.protocol);
        self.with_protocol(protocol)
    }

    /// The plain tower flavour, for services that are not HTTP: the
    /// [`LockError`](lock_core::LockError) becomes the service's error
    /// (which must implement `From<LockError>`, as `tower::BoxError` does).
    /// The wait and lease set so far are kept.
    pub fn plain(self) -> LockLayer<K, Plain> {
        self.with_protocol(Plain)
    }

    /// The status of a busy lock, after the wait (default `409 Conflict`).
    pub fn busy_status(mut self, status: StatusCode) -> Self {
        self.http_rejection(|r| r.busy_status = status);
        self
    }

    /// The body of a busy answer (default: a `text/plain` message naming the
    /// lock).
    pub fn busy_body(mut self, body: impl Into<Bytes>) -> Self {
        let body = body.into();
        self.http_rejection(|r| r.busy_body = Some(body));
        self
    }

    /// The `Retry-After` of a busy answer, in whole seconds rounded up
    /// (default 1 s); `None` leaves the header out.
    pub fn retry_after(mut self, after: Option<Duration>) -> Self {
        self.http_rejection(|r| r.retry_after = after);
        self
    }

    /// The status when the lock backend cannot be reached, or the lock
    /// client is shutting down (`LockError::ShuttingDown`; default
    /// `503 Service Unavailable`).
    pub fn unavailable_status(mut self, status: StatusCode) -> Self {
        self.http_rejection(|r| r.unavailable_status = status);
        self
    }

    fn http_rejection(&mut self, change: impl FnOnce(&mut crate::http::HttpRejection)) {
        if let Reject::Http(rejection) = &mut Arc::make_mut(&mut self.config.protocol.0).reject {
            change(rejection);
        }
    }

    /// Puts a [`FencingToken`](crate::FencingToken) (the lock name and
    /// token) in the extensions of each locked request, for the handler
    /// (default: on).
    pub fn fencing_token_extension(mut self, enabled: bool) -> Self {
        Arc::make_mut(&mut self.config.protocol.0).token_extension = enabled;
        self
    }

    /// Adds the fencing token to each locked response, in header `name`
    /// (e.g. `x-fencing-token`; default: no header).
    pub fn fencing_token_header(mut self, name: HeaderName) -> Self {
        Arc::make_mut(&mut self.config.protocol.0).token_header = Some(name);
        self
    }

    /// Holds the lock until the response body has been sent in full (or has
    /// failed, or been dropped), instead of releasing it when the handler
    /// returns the response (default: off). For streaming bodies whose
    /// production must stay under the lock.
    pub fn hold_until_body_end(mut self, enabled: bool) -> Self {
        Arc::make_mut(&mut self.config.protocol.0).hold_until_body_end = enabled;
        self
    }
}

impl<K> LockLayer<K, Grpc> {
    /// Puts a [`FencingToken`](crate::FencingToken) in the extensions of each
    /// locked call, where tonic hands it on in `Request::extensions()`
    /// (default: on).
    pub fn fencing_token_extension(mut self, enabled: bool) -> Self {
        Arc::make_mut(&mut self.config.protocol.0).token_extension = enabled;
        self
    }

    /// Adds the fencing token to the response metadata of each locked call,
    /// under `name` (e.g. `x-fencing-token`; default: none).
    pub fn fencing_token_header(mut self, name: HeaderName) -> Self {
        Arc::make_mut(&mut self.config.protocol.0).token_header = Some(name);
        self
    }

    /// Holds the lock until the response body (for a server-streaming call:
    /// the whole stream) has been sent (default: off).
    pub fn hold_until_body_end(mut self, enabled: bool) -> Self {
        Arc::make_mut(&mut self.config.protocol.0).hold_until_body_end = enabled;
        self
    }
}

impl<K, P> LockLayer<K, P> {
    fn with_protocol<Q>(self, protocol: Q) -> LockLayer<K, Q> {
        let Config {
            client,
            extractor,
            wait,
            lease,
            protocol: _,
        } = self.config;
        LockLayer {
            config: Config {
                client,
                extractor,
                wait,
                lease,
                protocol,
            },
        }
    }

    /// Waits up to `wait` for a busy lock (woken by the holder's release);
    /// `Duration::ZERO`, the default, tries once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.config.wait = Wait::For(wait);
        self
    }

    /// Waits as long as it takes for a busy lock. A request then waits until
    /// every request before it on the same lock is done, or until its client
    /// gives up; prefer a bounded [`wait`](LockLayer::wait).
    pub fn wait_forever(mut self) -> Self {
        self.config.wait = Wait::Forever;
        self
    }

    /// A fixed lease: each lock expires `lease` after it was taken and is not
    /// renewed, however long the handler runs. Without it (the default) the
    /// lock is in watchdog mode: the client's lease, renewed while the
    /// request runs.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = Some(lease);
        self
    }

    /// The client the locks are taken on.
    pub fn client(&self) -> &LockClient {
        &self.config.client
    }

    /// The key extractor.
    pub fn extractor(&self) -> &K {
        &self.config.extractor
    }
}

impl<S, K, P> Layer<S> for LockLayer<K, P>
where
    K: Clone,
    P: Clone,
{
    type Service = LockService<S, K, P>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService::new(inner, self.clone())
    }
}

impl<K, P: fmt::Debug> fmt::Debug for LockLayer<K, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockLayer")
            .field("client", &self.config.client)
            .field("extractor", &std::any::type_name::<K>())
            .field("wait", &self.config.wait)
            .field("lease", &self.config.lease)
            .field("protocol", &self.config.protocol)
            .finish()
    }
}
