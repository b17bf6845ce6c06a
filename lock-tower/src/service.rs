//! [`LockService`]: the middleware service that wraps each request in a lock.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use distlock_core::{LockError, LockGuard};
use http::{Request, Response};
use tower_service::Service;

use crate::body::ResponseBody;
use crate::config::Config;
use crate::future::{Locked, Pending, PlainResponseFuture, ResponseFuture};
use crate::http::Responder;
use crate::mode::{Exclusive, LockMode};
use crate::status::Failure;
use crate::{Grpc, Http, KeyExtractor, LockLayer, Plain};

/// The service made by [`LockLayer`]: takes the lock its extractor names for
/// each request, then calls the inner service while holding it.
///
/// Readiness is the inner service's. A locked request takes the ready inner
/// service with it (a clone is left in its place, as tower's docs describe),
/// so whatever the inner service reserved in `poll_ready` stays reserved
/// while the request waits for its lock.
///
/// # Cancel safety
/// The response futures ([`ResponseFuture`], [`PlainResponseFuture`]) never
/// leave a lock held when they are dropped; see their docs.
pub struct LockService<S, K, P = Http, M = Exclusive> {
    inner: S,
    config: Arc<Config<K, P, M>>,
}

impl<S, K, P, M> LockService<S, K, P, M> {
    /// Wraps `inner` with the lock configured on `layer`.
    pub fn new(inner: S, layer: LockLayer<K, P, M>) -> Self {
        LockService {
            inner,
            config: Arc::new(layer.config),
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the middleware.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// Starts a request: `None` when its extractor gives no lock (the inner
    /// service is called at once), else the lock's acquisition and what to
    /// do after it.
    fn start<R>(
        &mut self,
        request: R,
        prepare: fn(&Responder, &mut R, &LockGuard),
        responder: Option<Arc<Responder>>,
    ) -> Locked<S, R>
    where
        S: Service<R> + Clone,
        K: KeyExtractor<R>,
        M: LockMode<R>,
    {
        let Some(key) = self.config.extractor.extract_key(&request) else {
            return Locked::unlocked(self.inner.call(request));
        };
        if let Err(error) = self.config.check(&key) {
            let failure = Failure::of(&error);
            return Locked::refused(error, failure);
        }
        let clone = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, clone);
        let limit = self.config.mode.limit();
        let acquire = Box::pin(self.config.lock(key, &request).acquire());
        let hand_over = responder
            .as_ref()
            .is_some_and(|responder| responder.hold_until_body_end);
        Locked::after(
            acquire,
            Pending {
                service,
                request,
                prepare,
                responder,
                limit,
            },
            hand_over,
        )
    }
}

impl<S: Clone, K, P, M> Clone for LockService<S, K, P, M> {
    fn clone(&self) -> Self {
        LockService {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: fmt::Debug, K, P: fmt::Debug, M: fmt::Debug> fmt::Debug for LockService<S, K, P, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("LockService");
        out.field("inner", &self.inner);
        self.config.debug_fields(&mut out);
        out.finish()
    }
}

fn prepare_http<B>(responder: &Responder, request: &mut Request<B>, guard: &LockGuard) {
    responder.prepare(request, guard);
}

/// The flavours that answer a request they cannot lock with a response
/// (HTTP statuses, gRPC statuses) built by their [`Responder`].
pub(crate) trait Answers {
    fn responder(&self) -> &Arc<Responder>;
}

impl Answers for Http {
    fn responder(&self) -> &Arc<Responder> {
        &self.0
    }
}

impl Answers for Grpc {
    fn responder(&self) -> &Arc<Responder> {
        &self.0
    }
}

/// The HTTP ([`Http`]) and gRPC ([`Grpc`]) flavours: infallible towards the
/// client, a request that cannot be locked is answered with a response.
impl<S, K, P, M, ReqBody, ResBody> Service<Request<ReqBody>> for LockService<S, K, P, M>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    K: KeyExtractor<Request<ReqBody>>,
    P: Answers,
    M: LockMode<Request<ReqBody>>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, Request<ReqBody>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    /// Starts the request (HTTP) or call (gRPC); the lock is taken when the
    /// returned future is polled.
    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let responder = self.config.protocol.responder().clone();
        let locked = self.start(request, prepare_http, Some(responder.clone()));
        ResponseFuture::new(locked, responder)
    }
}

fn prepare_nothing<R>(_: &Responder, _: &mut R, _: &LockGuard) {}

impl<S, K, M, R> Service<R> for LockService<S, K, Plain, M>
where
    S: Service<R> + Clone,
    S::Error: From<LockError>,
    K: KeyExtractor<R>,
    M: LockMode<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = PlainResponseFuture<S, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    /// Starts the request; the lock is taken when the returned future is
    /// polled.
    fn call(&mut self, request: R) -> Self::Future {
        PlainResponseFuture::new(self.start(request, prepare_nothing, None))
    }
}
