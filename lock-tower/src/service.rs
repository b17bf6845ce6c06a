//! [`LockService`]: the middleware service; it names each request's lock,
//! checks the name, starts the acquisition and hands the rest to the
//! [`ResponseFuture`].

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use distlock_core::LockError;
use tower_service::Service;

use crate::config::Config;
use crate::extract::KeyExtractor;
use crate::flavour::Flavour;
use crate::future::ResponseFuture;
use crate::http::Http;
use crate::mode::{Exclusive, LockMode};
use crate::status::MISSING_KEY;

/// The service made by [`LockLayer`](crate::LockLayer): takes the lock its
/// extractor names for each request, then calls the inner service while
/// holding it.
///
/// What it answers depends on the layer's flavour `P` (see
/// [`Flavour`](crate::Flavour)): in the HTTP and gRPC flavours an
/// `http::Response<ResponseBody<_>>`, with the inner service's error type (a
/// request that cannot be locked is answered with a response); in the plain
/// flavour the inner service's response, and a request that cannot be locked
/// fails with the [`LockError`](distlock_core::LockError) converted into the
/// inner service's error.
///
/// Readiness is the inner service's. A locked request takes the ready inner
/// service with it (a clone is left in its place, as tower's docs describe),
/// so whatever the inner service reserved in `poll_ready` stays reserved
/// while the request waits for its lock.
///
/// # Cancel safety
/// The response future ([`ResponseFuture`]) never leaves a lock held when it
/// is dropped; see its docs.
pub struct LockService<S, K, P = Http, M = Exclusive> {
    inner: S,
    config: Arc<Config<K, P, M>>,
}

impl<S, K, P, M> LockService<S, K, P, M> {
    /// Wraps `inner` with the settings of a layer.
    pub(crate) fn with_config(inner: S, config: Arc<Config<K, P, M>>) -> Self {
        LockService { inner, config }
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

impl<S, K, P, M, R> Service<R> for LockService<S, K, P, M>
where
    S: Service<R> + Clone,
    K: KeyExtractor<R>,
    P: Flavour<R, S::Response, S::Error>,
    M: LockMode<R>,
{
    type Response = P::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S, R, P>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    /// Starts the request: a request its extractor gives no lock calls the
    /// inner service at once; a locked one takes its lock when the returned
    /// future is polled.
    fn call(&mut self, request: R) -> Self::Future {
        let flavour = self.config.flavour.clone();
        let Some(key) = self.config.extractor.extract_key(&request) else {
            // A request that should have named its lock is refused, never
            // run unlocked (a gRPC call without its key metadata).
            if let Some(missing) = self.config.extractor.missing_key(&request) {
                let error = LockError::InvalidKey {
                    key: missing,
                    reason: MISSING_KEY,
                };
                return ResponseFuture::refused(error, flavour);
            }
            return ResponseFuture::unlocked(self.inner.call(request), flavour);
        };
        if let Err(error) = self.config.check(&key) {
            return ResponseFuture::refused(error, flavour);
        }
        let clone = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, clone);
        let acquire = Box::pin(self.config.lock(key, &request).acquire());
        let limit = self.config.mode.limit();
        let abort_on_lost = self.config.abort_on_lost;
        ResponseFuture::acquiring(acquire, service, request, flavour, limit, abort_on_lost)
    }
}
