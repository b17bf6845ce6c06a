//! [`LockLayer`]: the layer and its options, a builder of the services'
//! [`Config`]; also the service's constructor from a layer
//! ([`LockService::new`]), so that the service never imports the layer.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use distlock_core::{LockClient, LockOptions};
use http::{HeaderName, HeaderValue, StatusCode};
use tower_layer::Layer;

use crate::config::Config;
use crate::flavour::{Exchange, HttpFlavour};
use crate::grpc::Grpc;
use crate::http::Http;
use crate::mode::{ConcurrencyLimit, Exclusive, Fair, LockingMode, ReadWrite};
use crate::plain::Plain;
use crate::service::LockService;

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
///   error type is `From<LockError>`; the [`LockError`](distlock_core::LockError)
///   is the service's error.
///
/// # Modes
/// By default a request takes the plain lock of its name ([`Exclusive`]).
/// One of these, called on a layer in that default mode, picks another
/// primitive of the lock family instead (see [`mode`](crate::mode)):
///
/// - [`fair`](LockLayer::fair): the fair lock, granted in arrival order;
/// - [`read_write`](LockLayer::read_write): the read or the write lock of a
///   read-write lock, chosen per request (e.g. [`SafeMethods`](crate::SafeMethods):
///   `GET` reads, `POST` writes);
/// - [`concurrency_limit`](LockLayer::concurrency_limit): a permit of a
///   semaphore, so that at most `max` requests per name run at once, across
///   every replica; the others get `429 Too Many Requests` (gRPC
///   `RESOURCE_EXHAUSTED`).
///
/// The mode is a type parameter: the mode methods exist only in the default
/// mode, so two modes cannot be combined (`.fair().concurrency_limit(5)` is
/// a compile error, not a surprise at run time), and the options of the
/// busy and the over-the-limit answers exist only in the modes that give
/// them (busy options set before
/// [`concurrency_limit`](LockLayer::concurrency_limit) compile and stay
/// unused: set the mode first). The other options (wait, lease, key check,
/// token, flavour) apply in every mode, set before or after it.
///
/// ```no_run
/// use std::time::Duration;
/// use distlock_core::LockClient;
/// use distlock_tower::{LockLayer, PathTemplate};
///
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// let client = LockClient::connect("redis://127.0.0.1:6379/").await?;
/// let layer = LockLayer::new(client, PathTemplate::new("/orders/{id}/pay", "order:{id}"))
///     .wait(Duration::from_secs(5))
///     .fencing_token_header(http::HeaderName::from_static("x-fencing-token"));
/// // Router::new().route("/orders/{id}/pay", post(pay)).layer(layer)
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone)]
#[must_use]
pub struct LockLayer<K, P = Http, M = Exclusive> {
    pub(crate) config: Config<K, P, M>,
}

impl<K> LockLayer<K, Http> {
    /// A layer locking, on `client`, the name `extractor` gives each request;
    /// the HTTP flavour, trying each lock once (no wait), in watchdog mode,
    /// with the plain lock ([`Exclusive`]).
    pub fn new(client: LockClient, extractor: K) -> Self {
        LockLayer {
            config: Config {
                client,
                extractor,
                check: None,
                options: LockOptions::new(),
                abort_on_lost: false,
                flavour: Arc::new(Http::new()),
                mode: Exclusive,
            },
        }
    }
}

impl<K, P> LockLayer<K, P, Exclusive> {
    /// The fair mode: each request takes the fair lock of its name
    /// (`client.fair_lock(name)`) instead of the plain lock. Requests that
    /// wait are granted the lock in the order they asked for it, across
    /// every replica; a release hands it straight to the next in line.
    ///
    /// It matters for requests that [`wait`](LockLayer::wait): a single try
    /// (the default) never jumps the queue, so while requests wait it is
    /// answered as busy. The fair lock's keys are its own: a fair layer and a
    /// plain lock on the same name do not exclude each other. Not available
    /// on Redlock: each request is answered `500` (`INTERNAL`) with
    /// [`LockError::Unsupported`](distlock_core::LockError::Unsupported).
    ///
    /// ```
    /// use std::time::Duration;
    /// use distlock_core::LockClient;
    /// use distlock_tower::{LockLayer, PathTemplate};
    ///
    /// // Payouts of one account run one at a time, first come first served.
    /// let layer = LockLayer::new(LockClient::memory(), PathTemplate::new("/accounts/{id}/payouts", "payouts:{id}"))
    ///     .fair()
    ///     .wait(Duration::from_secs(30));
    /// # let _ = layer;
    /// ```
    pub fn fair(self) -> LockLayer<K, P, Fair> {
        self.with_mode(Fair)
    }

    /// The read-write mode: each request takes the read or the write lock of
    /// the read-write lock of its name (`client.read_write_lock(name)`), as
    /// `select` says for it: requests that read run together, one that
    /// writes runs alone. `select` is a [`SelectAccess`](crate::SelectAccess):
    /// [`SafeMethods`](crate::SafeMethods) (`GET`, `HEAD`, `OPTIONS`,
    /// `TRACE` read, other methods write), or a closure
    /// `Fn(&Request<B>) -> Access`.
    ///
    /// The lock is writers-first: once a writer waits, new readers wait
    /// behind it, so a stream of reads cannot starve writes. A handler may
    /// take the read lock of its name while the request holds the write lock
    /// (downgrade), not the other way round
    /// ([`LockError::UpgradeRefused`](distlock_core::LockError::UpgradeRefused),
    /// answered `500`). The read-write lock's keys are its own. Not
    /// available on Redlock
    /// ([`LockError::Unsupported`](distlock_core::LockError::Unsupported),
    /// answered `500`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use distlock_core::LockClient;
    /// use distlock_tower::{LockLayer, PathTemplate, SafeMethods};
    ///
    /// // GET /prices/{sku} runs alongside other GETs; PUT waits for them and runs alone.
    /// let layer = LockLayer::new(LockClient::memory(), PathTemplate::new("/prices/{sku}", "price:{sku}"))
    ///     .read_write(SafeMethods)
    ///     .wait(Duration::from_secs(5));
    /// # let _ = layer;
    /// ```
    pub fn read_write<A>(self, select: A) -> LockLayer<K, P, ReadWrite<A>> {
        self.with_mode(ReadWrite::new(select))
    }

    /// The concurrency-limit mode: each request takes one permit of the
    /// semaphore of its name (`client.semaphore(name, max)`), so that at
    /// most `max` requests per name run at once, across every replica that
    /// uses the same name and limit. Name the semaphore after what is
    /// limited, e.g. `exports:tenant:{id}` for a per-tenant limit.
    ///
    /// A request that finds the limit reached (after the
    /// [`wait`](LockLayer::wait), by default none) is answered
    /// `429 Too Many Requests` with `Retry-After: 1` (see
    /// [`limit_status`](LockLayer::limit_status) and
    /// [`limit_retry_after`](LockLayer::limit_retry_after)), `RESOURCE_EXHAUSTED`
    /// in the gRPC flavour, and `LockError::Busy` / `TimedOut` in the plain
    /// one. A crashed replica's permits come back after one lease.
    ///
    /// The permit is given back when the handler returns the response; a
    /// response body streamed from the limited work keeps it until its end
    /// with [`hold_until_body_end`](LockLayer::hold_until_body_end).
    ///
    /// Every replica must use the same `max` for a name (the total is not
    /// stored in Redis). `max` must be at least 1: a layer built with 0 logs
    /// an error now and answers every request `500` (`INTERNAL`) with
    /// distlock-core's
    /// [`LockError::InvalidConfig`](distlock_core::LockError::InvalidConfig).
    /// Not available on Redlock
    /// ([`LockError::Unsupported`](distlock_core::LockError::Unsupported),
    /// answered `500`).
    ///
    /// ```
    /// use distlock_core::LockClient;
    /// use distlock_tower::{HeaderKey, LockLayer};
    ///
    /// // At most 5 exports per tenant at once, fleet-wide; the sixth gets 429.
    /// let layer = LockLayer::new(LockClient::memory(), HeaderKey::new("x-tenant").prefix("exports:tenant:"))
    ///     .concurrency_limit(5);
    /// # let _ = layer;
    /// ```
    pub fn concurrency_limit(self, max: u32) -> LockLayer<K, P, ConcurrencyLimit> {
        if max == 0 {
            tracing::error!(
                "LockLayer::concurrency_limit(0): a limit of 0 admits no request; every request \
                 will be answered as an internal error (distlock-core refuses a semaphore without \
                 permits)"
            );
        }
        self.with_mode(ConcurrencyLimit::new(max))
    }
}

impl<K, M> LockLayer<K, Http, M> {
    /// The gRPC flavour: lock failures become gRPC statuses. The options set
    /// so far (wait, lease, mode, fencing token, body hold) are kept.
    pub fn grpc(self) -> LockLayer<K, Grpc, M> {
        let exchange = self.config.flavour.exchange.clone();
        self.with_flavour(Grpc { exchange })
    }

    /// The plain tower flavour, for services that are not HTTP: the
    /// [`LockError`](distlock_core::LockError) becomes the service's error
    /// (which must implement `From<LockError>`, as `tower::BoxError` does).
    /// The wait, lease and mode set so far are kept.
    pub fn plain(self) -> LockLayer<K, Plain, M> {
        self.with_flavour(Plain)
    }

    /// The status when the lock backend did not answer or failed, the lock
    /// could not be kept, or the lock client is shutting down
    /// (`LockError::ShuttingDown`; default `503 Service Unavailable`).
    pub fn unavailable_status(mut self, status: StatusCode) -> Self {
        self.http().unavailable.status = status;
        self
    }

    /// The body of a 503 answer (default: a `text/plain` message naming the
    /// lock). Its content type stays `text/plain; charset=utf-8` unless
    /// [`unavailable_content_type`](LockLayer::unavailable_content_type)
    /// changes it.
    pub fn unavailable_body(mut self, body: impl Into<Bytes>) -> Self {
        let body = body.into();
        self.http().unavailable.body = Some(body);
        self
    }

    /// The `Content-Type` of a 503 answer (default
    /// `text/plain; charset=utf-8`).
    pub fn unavailable_content_type(mut self, content_type: HeaderValue) -> Self {
        self.http().unavailable.content_type = content_type;
        self
    }

    /// The `Retry-After` of a 503 answer, in whole seconds rounded up
    /// (default 1 s); `None` leaves the header out.
    pub fn unavailable_retry_after(mut self, after: Option<Duration>) -> Self {
        self.http().unavailable.retry_after = after;
        self
    }

    /// The HTTP flavour's own options, to change.
    fn http(&mut self) -> &mut Http {
        Arc::make_mut(&mut self.config.flavour)
    }
}

/// The busy answer, in the modes that lock ([`Exclusive`], [`Fair`],
/// [`ReadWrite`]).
impl<K, M: LockingMode> LockLayer<K, Http, M> {
    /// The status of a busy lock, after the wait (default `409 Conflict`).
    pub fn busy_status(mut self, status: StatusCode) -> Self {
        self.http().busy.status = status;
        self
    }

    /// The body of a busy answer (default: a `text/plain` message naming the
    /// lock). Its content type stays `text/plain; charset=utf-8` unless
    /// [`busy_content_type`](LockLayer::busy_content_type) changes it.
    pub fn busy_body(mut self, body: impl Into<Bytes>) -> Self {
        let body = body.into();
        self.http().busy.body = Some(body);
        self
    }

    /// The `Content-Type` of a busy answer (default
    /// `text/plain; charset=utf-8`), for a [`busy_body`](LockLayer::busy_body)
    /// in another format:
    ///
    /// ```
    /// use http::HeaderValue;
    /// use distlock_core::LockClient;
    /// use distlock_tower::{LockLayer, PathTemplate};
    ///
    /// let layer = LockLayer::new(LockClient::memory(), PathTemplate::new("/items/{sku}", "item:{sku}"))
    ///     .busy_body(r#"{"error":"busy","retry":true}"#)
    ///     .busy_content_type(HeaderValue::from_static("application/json"));
    /// # let _ = layer;
    /// ```
    pub fn busy_content_type(mut self, content_type: HeaderValue) -> Self {
        self.http().busy.content_type = content_type;
        self
    }

    /// The `Retry-After` of a busy answer, in whole seconds rounded up
    /// (default 1 s); `None` leaves the header out.
    pub fn retry_after(mut self, after: Option<Duration>) -> Self {
        self.http().busy.retry_after = after;
        self
    }
}

/// The over-the-limit answer, in the [`ConcurrencyLimit`] mode.
impl<K> LockLayer<K, Http, ConcurrencyLimit> {
    /// The status of a request that found the concurrency limit reached,
    /// after the wait (default `429 Too Many Requests`; `503 Service
    /// Unavailable` is the other usual choice).
    pub fn limit_status(mut self, status: StatusCode) -> Self {
        self.http().limited.status = status;
        self
    }

    /// The body of an over-the-limit answer (default: a `text/plain` message
    /// naming the semaphore and its limit). Its content type stays
    /// `text/plain; charset=utf-8` unless
    /// [`limit_content_type`](LockLayer::limit_content_type) changes it.
    pub fn limit_body(mut self, body: impl Into<Bytes>) -> Self {
        let body = body.into();
        self.http().limited.body = Some(body);
        self
    }

    /// The `Content-Type` of an over-the-limit answer (default
    /// `text/plain; charset=utf-8`).
    pub fn limit_content_type(mut self, content_type: HeaderValue) -> Self {
        self.http().limited.content_type = content_type;
        self
    }

    /// The `Retry-After` of an over-the-limit answer, in whole seconds
    /// rounded up, never 0 (default 1 s); `None` leaves the header out.
    ///
    /// The layer does not guess when a permit comes back: a request holding
    /// one in watchdog mode keeps it as long as it runs. Set about the time
    /// a limited request usually takes, so that a client that retries then
    /// is likely to find a permit free.
    pub fn limit_retry_after(mut self, after: Option<Duration>) -> Self {
        self.http().limited.retry_after = after;
        self
    }
}

/// The options of the flavours that answer HTTP requests ([`Http`] and
/// [`Grpc`]).
impl<K, P: HttpFlavour, M> LockLayer<K, P, M> {
    /// Puts a [`FencingToken`](crate::FencingToken) (the lock name and
    /// token) in the extensions of each locked request, for the handler; in
    /// tonic, `Request::extensions()` hands it on (default: on).
    pub fn fencing_token_extension(mut self, enabled: bool) -> Self {
        self.exchange().token_extension = enabled;
        self
    }

    /// Adds the fencing token to each locked response, in header `name`
    /// (e.g. `x-fencing-token`; in gRPC, response metadata under `name`;
    /// default: none).
    pub fn fencing_token_header(mut self, name: HeaderName) -> Self {
        self.exchange().token_header = Some(name);
        self
    }

    /// Holds the lock until the response body (for a server-streaming gRPC
    /// call: the whole stream) has been sent in full (or has failed, or been
    /// dropped), instead of releasing it when the handler returns the
    /// response (default: off). For streaming bodies whose production must
    /// stay under the lock.
    pub fn hold_until_body_end(mut self, enabled: bool) -> Self {
        self.exchange().hold_until_body_end = enabled;
        self
    }

    fn exchange(&mut self) -> &mut Exchange {
        Arc::make_mut(&mut self.config.flavour).exchange_mut()
    }
}

impl<K, P, M> LockLayer<K, P, M> {
    fn with_flavour<Q>(self, flavour: Q) -> LockLayer<K, Q, M> {
        LockLayer {
            config: self.config.with_flavour(flavour),
        }
    }

    fn with_mode<N>(self, mode: N) -> LockLayer<K, P, N> {
        LockLayer {
            config: self.config.with_mode(mode),
        }
    }

    /// Waits up to `wait` for a busy lock (woken by the holder's release);
    /// `Duration::ZERO`, the default, tries once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.config.options = self.config.options.wait(wait);
        self
    }

    /// Waits as long as it takes for a busy lock. A request then waits until
    /// every request before it on the same lock is done, or until its client
    /// gives up; prefer a bounded [`wait`](LockLayer::wait).
    pub fn wait_forever(mut self) -> Self {
        self.config.options = self.config.options.wait_forever();
        self
    }

    /// A fixed lease: each lock expires `lease` after it was taken and is not
    /// renewed, however long the handler runs. Without it (the default) the
    /// lock is in watchdog mode: the client's lease, renewed while the
    /// request runs.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.options = self.config.options.lease(lease);
        self
    }

    /// What a request does when its lock is lost while its handler runs
    /// (the watchdog found the lock deleted or taken over, or the lease ran
    /// out on the local clock before a renewal, or, with a fixed
    /// [`lease`](LockLayer::lease), at all).
    ///
    /// - `false` (the default): the handler runs to the end and its own
    ///   response is handed on; the layer logs a warning (`a request
    ///   finished after its lock was lost`, target `distlock_tower`) when the
    ///   release finds the lock gone. A handler that does not fence its
    ///   writes then answers `200` to a request whose exclusion was broken.
    /// - `true`: as soon as the loss is seen, before the handler's response
    ///   is ready, the handler's future is dropped (its work is cancelled at
    ///   the `.await` it is waiting on, its destructors run) and the request
    ///   is answered as for
    ///   [`LockError::LeaseLost`](distlock_core::LockError::LeaseLost):
    ///   `503 Service Unavailable` with the
    ///   [`unavailable_status`](LockLayer::unavailable_status) answer's
    ///   options in the HTTP flavour, `UNAVAILABLE` in the gRPC one, the
    ///   `LeaseLost` error (converted into the service's error) in the plain
    ///   one. The `#[distributed_lock]` attribute's `abort_on_lost` does the
    ///   same for an annotated function.
    ///
    /// # Trade-off
    /// Dropping a handler mid-flight cancels it at whatever `.await` it has
    /// reached: turn it on only for handlers that are cancel safe, e.g. whose
    /// writes are one transaction that is rolled back when dropped before
    /// its commit, or that are idempotent. A handler that has written half of
    /// its changes outside a transaction leaves them half written. It does
    /// not make a lock safe: the loss is seen when the watchdog's next
    /// renewal (every third of the lease) finds the lock gone, or at the
    /// lease's local deadline, so a handler may have run without exclusion
    /// for up to that long, and a write already on its way still lands.
    /// Fencing ([`FencingToken`](crate::FencingToken)) stays the protection
    /// of the guarded resource; this option only keeps a request whose lock
    /// is known lost from going on and from answering success.
    ///
    /// # What it covers
    /// The time until the handler's response is ready (for HTTP, the
    /// response head). A response that is ready is handed on, also when the
    /// loss is seen in the same poll or when the release then finds the lock
    /// gone (warning as above): its work is done, and a `503` would invite a
    /// retry that does it again. With
    /// [`hold_until_body_end`](LockLayer::hold_until_body_end), a loss while
    /// the body streams is not covered: the body goes on to its end, and its
    /// release logs the warning. A body streamed from work that must stop
    /// with the lock checks for the loss itself, e.g.
    /// [`distlock_core::current`]`()`'s `is_held()` before each chunk (the
    /// body is polled in the lock's scope).
    ///
    /// ```
    /// use distlock_core::LockClient;
    /// use distlock_tower::{LockLayer, PathTemplate};
    ///
    /// // A payment handler that writes in one transaction: a lost lock rolls it back and answers 503.
    /// let layer = LockLayer::new(LockClient::memory(), PathTemplate::new("/orders/{id}/pay", "order:{id}"))
    ///     .abort_on_lost(true);
    /// # let _ = layer;
    /// ```
    pub fn abort_on_lost(mut self, enabled: bool) -> Self {
        self.config.abort_on_lost = enabled;
        self
    }

    /// Takes every lock option from `options` (wait, lease, minimum hold),
    /// replacing what [`wait`](LockLayer::wait),
    /// [`wait_forever`](LockLayer::wait_forever) and
    /// [`lease`](LockLayer::lease) set before: the same
    /// [`LockOptions`] value configures a lock taken by hand
    /// ([`Lock::options`](distlock_core::Lock::options)) and the layer's.
    ///
    /// A [minimum hold](LockOptions::hold_at_least) keeps each request's lock
    /// held that long after it was taken, even when the handler answers
    /// sooner (the release then cuts the lease to what is left).
    ///
    /// ```
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, LockOptions};
    /// use distlock_tower::{LockLayer, PathTemplate};
    ///
    /// let options = LockOptions::new()
    ///     .wait(Duration::from_secs(5))
    ///     .lease(Duration::from_secs(30));
    /// let layer = LockLayer::new(LockClient::memory(), PathTemplate::new("/orders/{id}/pay", "order:{id}"))
    ///     .options(options);
    /// # let _ = layer;
    /// ```
    pub fn options(mut self, options: LockOptions) -> Self {
        self.config.options = options;
        self
    }

    /// Checks every lock name the extractor gives before anything else
    /// happens: a name `check` refuses is not locked, the inner service is
    /// not called, and nothing is sent to the backend. The request is
    /// answered as for an invalid lock name: `400 Bad Request` (HTTP),
    /// `INVALID_ARGUMENT` (gRPC), or
    /// [`LockError::InvalidKey`](distlock_core::LockError::InvalidKey)
    /// (plain).
    ///
    /// The layer runs before the handler's extractors, so a request the
    /// handler would reject (a path parameter that does not parse, an
    /// unknown id) would otherwise take a lock first; a key built from
    /// client input is worth checking here, and cheaply (it runs on every
    /// request, synchronously).
    ///
    /// ```
    /// use distlock_core::LockClient;
    /// use distlock_tower::{LockLayer, PathTemplate};
    ///
    /// // SKUs are 3 to 12 ASCII letters and digits.
    /// let layer = LockLayer::new(LockClient::memory(), PathTemplate::new("/items/{sku}/reserve", "item:{sku}"))
    ///     .validate_key(|key: &str| {
    ///         let sku = key.strip_prefix("item:").unwrap_or_default();
    ///         (3..=12).contains(&sku.len()) && sku.bytes().all(|b| b.is_ascii_alphanumeric())
    ///     });
    /// # let _ = layer;
    /// ```
    pub fn validate_key<F>(mut self, check: F) -> Self
    where
        F: Fn(&str) -> bool + Send + Sync + 'static,
    {
        self.config.check = Some(Arc::new(check));
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

impl<S, K, P, M> Layer<S> for LockLayer<K, P, M>
where
    K: Clone,
    P: Clone,
    M: Clone,
{
    type Service = LockService<S, K, P, M>;

    fn layer(&self, inner: S) -> Self::Service {
        LockService::new(inner, self.clone())
    }
}

// The service's constructor from a layer lives with the layer, so that the
// service does not depend on the layer that builds it.
impl<S, K, P, M> LockService<S, K, P, M> {
    /// Wraps `inner` with the lock configured on `layer`.
    pub fn new(inner: S, layer: LockLayer<K, P, M>) -> Self {
        LockService::with_config(inner, Arc::new(layer.config))
    }
}

impl<K, P: fmt::Debug, M: fmt::Debug> fmt::Debug for LockLayer<K, P, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("LockLayer");
        self.config.debug_fields(&mut out);
        out.finish()
    }
}

#[cfg(test)]
mod tests {
    use distlock_core::LockError;

    use super::*;

    #[test]
    fn refused_names_are_shown_cut() {
        let layer = LockLayer::new(LockClient::memory(), |_: &()| None::<String>)
            .validate_key(|key: &str| key.starts_with("item:"));
        assert!(layer.config.check("item:1").is_ok());
        let long = "é".repeat(100);
        match layer.config.check(&long) {
            Err(LockError::InvalidKey { key, .. }) => {
                assert!(key.starts_with(&"é".repeat(32)), "{key}");
                assert!(key.ends_with("... (200 bytes)"), "{key}");
            }
            other => panic!("{other:?}"),
        }
    }
}
