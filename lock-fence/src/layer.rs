//! [`FenceLayer`]: a tower layer in front of a resource's service that
//! refuses requests of stale lock holders before the handler runs.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::error::FenceError;
use crate::store::FenceStore;

/// The request header that carries the fencing token by default:
/// `x-fencing-token`, the name the guide gives to `LockLayer`'s
/// `fencing_token_header`.
pub const TOKEN_HEADER: &str = "x-fencing-token";

/// The request header that names the fenced resource by default:
/// `x-fencing-key`.
pub const KEY_HEADER: &str = "x-fencing-key";

/// The request extension a [`FenceService`] gives the handler of an accepted
/// request: the resource key and the token that claimed it. Pass
/// [`token`](Fenced::token) on to the handler's own fenced writes (a
/// [`RedisFence`](crate::RedisFence) or [`PgFence`](crate::PgFence)), so
/// that a newer holder arriving while the handler runs stops it there too.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Fenced {
    /// The resource key.
    pub key: String,
    /// The accepted fencing token.
    pub token: u64,
}

impl Fenced {
    /// The resource `key`, claimed by `token`.
    pub fn new(key: impl Into<String>, token: u64) -> Self {
        Fenced {
            key: key.into(),
            token,
        }
    }
}

/// Names the resource a request acts on; `None` lets the request through
/// unchecked. Implemented for closures `Fn(&Request<B>) -> Option<String>`
/// and for [`HeaderKey`].
pub trait FenceKey<B> {
    /// The resource key of `request`, or `None` for a request that touches
    /// no fenced resource.
    fn key(&self, request: &Request<B>) -> Option<String>;
}

impl<B, F> FenceKey<B> for F
where
    F: Fn(&Request<B>) -> Option<String>,
{
    fn key(&self, request: &Request<B>) -> Option<String> {
        self(request)
    }
}

/// The resource key from a request header (by default [`KEY_HEADER`]); a
/// request without it (or with a value that is not text) is let through
/// unchecked.
#[derive(Clone, Debug)]
pub struct HeaderKey(pub HeaderName);

impl<B> FenceKey<B> for HeaderKey {
    fn key(&self, request: &Request<B>) -> Option<String> {
        let value = request.headers().get(&self.0)?;
        value.to_str().ok().map(str::to_owned)
    }
}

/// How a refusal is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Http,
    Grpc,
}

/// A tower layer for the service that owns a resource: each request names
/// a resource key (a [`FenceKey`]) and carries its holder's fencing token
/// in a header ([`TOKEN_HEADER`] by default); the layer claims the key with
/// the token in a [`FenceStore`], with claim-on-read semantics, before the
/// inner service runs.
///
/// | request | HTTP answer | gRPC status |
/// |---|---|---|
/// | token lower than the highest seen for the key ([`FenceError::Stale`]) | `409 Conflict` | `ABORTED` (10), `distlock-reason: stale-token` |
/// | token header missing or not a `u64` | `400 Bad Request` | `INVALID_ARGUMENT` (3), `distlock-reason: bad-token` |
/// | the store failed | `503 Service Unavailable` | `UNAVAILABLE` (14), `distlock-reason: fence-unavailable` |
/// | accepted | the inner service's, which gets a [`Fenced`] extension | |
/// | no key (the extractor gave `None`) | the inner service's, unchecked | |
///
/// The check runs before the handler: it refuses a holder whose successor
/// has already called, which is enough when each call is one step. When a
/// handler reads and later writes, or calls of several holders can overlap,
/// let the handler also fence its writes with [`Fenced::token`] in the
/// same store (a [`RedisFence`](crate::RedisFence) used as the store shares
/// its key fences with that `RedisFence`'s writes).
///
/// The upstream side sends the token it got from its lock: the `LockLayer`
/// handler's `FencingToken::token`, `distlock::current()`'s
/// `fencing_token()` in a `#[distributed_lock]` fn, `$LOCK_FENCING_TOKEN`
/// under `lockctl run`.
#[derive(Clone)]
pub struct FenceLayer<K = HeaderKey> {
    store: Arc<dyn FenceStore>,
    key: K,
    token_header: HeaderName,
    protocol: Protocol,
}

impl<K: fmt::Debug> fmt::Debug for FenceLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceLayer")
            .field("key", &self.key)
            .field("token_header", &self.token_header)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl FenceLayer<HeaderKey> {
    /// Checks tokens against `store`, the key from header [`KEY_HEADER`] and
    /// the token from header [`TOKEN_HEADER`], answering in HTTP.
    pub fn new(store: impl FenceStore) -> Self {
        FenceLayer {
            store: Arc::new(store),
            key: HeaderKey(HeaderName::from_static(KEY_HEADER)),
            token_header: HeaderName::from_static(TOKEN_HEADER),
            protocol: Protocol::Http,
        }
    }
}

impl<K> FenceLayer<K> {
    /// Names each request's resource with `key` (a closure
    /// `Fn(&Request<B>) -> Option<String>` or a [`HeaderKey`]).
    pub fn key<K2>(self, key: K2) -> FenceLayer<K2> {
        FenceLayer {
            store: self.store,
            key,
            token_header: self.token_header,
            protocol: self.protocol,
        }
    }

    /// Reads the token from header `name` instead of [`TOKEN_HEADER`].
    pub fn token_header(mut self, name: HeaderName) -> Self {
        self.token_header = name;
        self
    }

    /// Answers refusals as gRPC statuses (trailers-only responses), for
    /// tonic's `Server::builder().layer(..)`.
    pub fn grpc(mut self) -> Self {
        self.protocol = Protocol::Grpc;
        self
    }
}

impl<S, K: Clone> Layer<S> for FenceLayer<K> {
    type Service = FenceService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        FenceService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of a [`FenceLayer`].
///
/// # Cancel safety
/// Dropping the response future before the claim is answered leaves the
/// key claimed or not (see [`FenceStore::claim`]); after it, it drops the
/// inner service's future.
#[derive(Clone, Debug)]
pub struct FenceService<S, K = HeaderKey> {
    inner: S,
    layer: FenceLayer<K>,
}

/// The response future of a [`FenceService`].
pub type FenceFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, K, B, ResBody> Service<Request<B>> for FenceService<S, K>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    K: FenceKey<B>,
    B: Send + 'static,
    ResBody: 'static,
{
    type Response = Response<FenceBody<ResBody>>;
    type Error = S::Error;
    type Future = FenceFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        // The ready service is the one to call; a clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let protocol = self.layer.protocol;
        let Some(key) = self.layer.key.key(&request) else {
            return Box::pin(async move { Ok(inner.call(request).await?.map(FenceBody::inner)) });
        };
        let token = request
            .headers()
            .get(&self.layer.token_header)
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.trim().parse::<u64>().ok());
        let Some(token) = token else {
            let message = format!(
                "missing or invalid fencing token in header `{}` for `{key}`",
                self.layer.token_header
            );
            return Box::pin(async move { Ok(answer(protocol, Refusal::BadToken, &message)) });
        };
        let store = Arc::clone(&self.layer.store);
        Box::pin(async move {
            match store.claim(&key, token).await {
                Ok(()) => {
                    request.extensions_mut().insert(Fenced { key, token });
                    Ok(inner.call(request).await?.map(FenceBody::inner))
                }
                Err(error @ FenceError::Stale { .. }) => {
                    Ok(answer(protocol, Refusal::Stale, &error.to_string()))
                }
                Err(_) => {
                    let message =
                        format!("the fence store of `{key}` did not answer or failed; retry later");
                    Ok(answer(protocol, Refusal::Unavailable, &message))
                }
            }
        })
    }
}

/// Why a request was refused.
#[derive(Clone, Copy)]
enum Refusal {
    Stale,
    BadToken,
    Unavailable,
}

/// The layer's own answer: an HTTP status with a text body, or a
/// trailers-only gRPC status.
fn answer<B>(protocol: Protocol, refusal: Refusal, message: &str) -> Response<FenceBody<B>> {
    match protocol {
        Protocol::Http => {
            let status = match refusal {
                Refusal::Stale => StatusCode::CONFLICT,
                Refusal::BadToken => StatusCode::BAD_REQUEST,
                Refusal::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            };
            let mut response =
                Response::new(FenceBody::answer(Bytes::from(format!("{message}\n"))));
            *response.status_mut() = status;
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            response
        }
        Protocol::Grpc => {
            let code: u16 = match refusal {
                Refusal::Stale => 10,
                Refusal::BadToken => 3,
                Refusal::Unavailable => 14,
            };
            let mut response = Response::new(FenceBody::answer(Bytes::new()));
            let headers = response.headers_mut();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            headers.insert("grpc-status", HeaderValue::from(code));
            // As distlock-tower's `REASON_METADATA`: a machine-readable cause.
            let reason = match refusal {
                Refusal::Stale => "stale-token",
                Refusal::BadToken => "bad-token",
                Refusal::Unavailable => "fence-unavailable",
            };
            headers.insert("distlock-reason", HeaderValue::from_static(reason));
            if let Ok(value) = HeaderValue::from_str(&percent_encode(message)) {
                headers.insert("grpc-message", value);
            }
            response
        }
    }
}

/// Percent-encodes a `grpc-message`: every byte outside printable ASCII,
/// and `%` itself.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &byte in message.as_bytes() {
        if (0x20..0x7f).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

pin_project! {
    /// The response body of a [`FenceService`]: the inner service's, or
    /// the layer's own refusal.
    pub struct FenceBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Answer { data: Option<Bytes> },
    }
}

impl<B> FenceBody<B> {
    fn inner(body: B) -> Self {
        FenceBody {
            kind: Kind::Inner { body },
        }
    }

    fn answer(data: Bytes) -> Self {
        let data = (!data.is_empty()).then_some(data);
        FenceBody {
            kind: Kind::Answer { data },
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for FenceBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Inner { body } => f.debug_tuple("FenceBody::Inner").field(body).finish(),
            Kind::Answer { data } => f.debug_tuple("FenceBody::Answer").field(data).finish(),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for FenceBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Answer { data } => Poll::Ready(data.take().map(|data| Ok(Frame::data(data)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Answer { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Answer { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |data| data.len() as u64))
            }
        }
    }
}
