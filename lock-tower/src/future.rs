//! The response futures: they take the lock, call the inner service, and own
//! the guard until the response is ready.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use distlock_core::{LockError, LockGuard};
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::body::ResponseBody;
use crate::http::Responder;
use crate::release::{log_release, release, Release};
use crate::status::Failure;

pub(crate) type Acquire = Pin<Box<dyn Future<Output = Result<LockGuard, LockError>> + Send>>;
/// What the request does once it has the lock.
pub(crate) struct Pending<S, R> {
    pub(crate) service: S,
    pub(crate) request: R,
    /// Runs on the request before it is handed to the service.
    pub(crate) prepare: fn(&Responder, &mut R, &LockGuard),
    pub(crate) responder: Option<Arc<Responder>>,
    /// The layer's concurrency limit, in that mode: a busy permit means the
    /// limit was reached.
    pub(crate) limit: Option<u32>,
}

/// Why a locked request did not produce a response.
pub(crate) enum Failed<E> {
    /// The lock was not taken, and how to answer that.
    Lock(LockError, Failure),
    Service(E),
}

pin_project! {
    /// The part every flavour shares: acquire, then call the inner service
    /// inside the guard's scope, then hand back the guard with the response.
    pub(crate) struct Locked<S, R>
    where
        S: Service<R>,
    {
        // Field order is drop order: the handler's future goes before the
        // guard, so its destructors still run under the lock.
        #[pin]
        future: Option<S::Future>,
        guard: Option<LockGuard>,
        // The fencing token of the lock, once taken.
        token: Option<u64>,
        acquire: Option<Acquire>,
        pending: Option<Pending<S, R>>,
        // Hand the guard out with the response instead of releasing it first.
        hand_over: bool,
        // The request was refused before any lock was asked for.
        refused: Option<(LockError, Failure)>,
        release: Option<(String, Release)>,
        output: Option<Result<S::Response, S::Error>>,
    }
}

impl<S, R> Locked<S, R>
where
    S: Service<R>,
{
    /// A request that runs without a lock: the service was already called.
    pub(crate) fn unlocked(future: S::Future) -> Self {
        Locked {
            future: Some(future),
            guard: None,
            token: None,
            acquire: None,
            pending: None,
            hand_over: false,
            refused: None,
            release: None,
            output: None,
        }
    }

    /// A request refused before its lock was asked for (its key failed the
    /// layer's check): fails with `error`, the service is not called.
    pub(crate) fn refused(error: LockError, failure: Failure) -> Self {
        Locked {
            future: None,
            guard: None,
            token: None,
            acquire: None,
            pending: None,
            hand_over: false,
            refused: Some((error, failure)),
            release: None,
            output: None,
        }
    }

    /// A request that calls the service once `acquire` gives the guard. With
    /// `hand_over` the guard comes out with the response; otherwise the lock
    /// is released before the response is.
    pub(crate) fn after(acquire: Acquire, pending: Pending<S, R>, hand_over: bool) -> Self {
        Locked {
            future: None,
            guard: None,
            token: None,
            acquire: Some(acquire),
            pending: Some(pending),
            hand_over,
            refused: None,
            release: None,
            output: None,
        }
    }
}

/// A response, with the fencing token it was made under (none for an
/// unlocked request) and the guard when it is handed over.
pub(crate) struct Answered<T> {
    pub(crate) response: T,
    pub(crate) token: Option<u64>,
    pub(crate) guard: Option<LockGuard>,
}

type LockedOutput<S, R> =
    Result<Answered<<S as Service<R>>::Response>, Failed<<S as Service<R>>::Error>>;

impl<S, R> Future for Locked<S, R>
where
    S: Service<R>,
{
    type Output = LockedOutput<S, R>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some((error, failure)) = this.refused.take() {
            return Poll::Ready(Err(Failed::Lock(error, failure)));
        }
        if let Some(acquire) = this.acquire.as_mut() {
            let acquired = ready!(acquire.as_mut().poll(cx));
            *this.acquire = None;
            // Set with `acquire` and taken only here: present by construction.
            #[allow(clippy::expect_used)]
            let pending = this
                .pending
                .take()
                .expect("a locked request has its service and request");
            let guard = match acquired {
                Ok(guard) => guard,
                Err(error) => {
                    let failure = Failure::of_request(&error, pending.limit);
                    return Poll::Ready(Err(Failed::Lock(error, failure)));
                }
            };
            let Pending {
                mut service,
                mut request,
                prepare,
                responder,
                limit: _,
            } = pending;
            if let Some(responder) = &responder {
                prepare(responder, &mut request, &guard);
            }
            // Inside the guard's scope, the handler re-enters this lock
            // instead of waiting for itself.
            let future = guard.in_scope(|| service.call(request));
            this.future.set(Some(future));
            *this.token = Some(guard.fencing_token());
            *this.guard = Some(guard);
        }
        if let Some(future) = this.future.as_mut().as_pin_mut() {
            let output = match this.guard.as_ref() {
                Some(guard) => ready!(guard.in_scope(|| future.poll(cx))),
                None => ready!(future.poll(cx)),
            };
            this.future.set(None);
            match this.guard.take() {
                Some(guard) if *this.hand_over && output.is_ok() => {
                    *this.guard = Some(guard);
                }
                // Release before answering: a client that sends its next
                // request after reading this response must not find the lock
                // still held by this one.
                Some(guard) => *this.release = Some((guard.key().to_owned(), release(guard))),
                None => {}
            }
            *this.output = Some(output);
        }
        if let Some((key, release)) = this.release.as_mut() {
            let released = ready!(release.as_mut().poll(cx));
            log_release(key, released);
            *this.release = None;
        }
        // Polling a completed future breaks the `Future` contract; tower's
        // own response futures panic the same way.
        #[allow(clippy::expect_used)]
        let output = this
            .output
            .take()
            .expect("response future polled after completion");
        Poll::Ready(match output {
            Ok(response) => Ok(Answered {
                response,
                token: *this.token,
                guard: this.guard.take(),
            }),
            Err(error) => Err(Failed::Service(error)),
        })
    }
}

pin_project! {
    /// The response future of the HTTP and gRPC flavours of
    /// [`LockService`](crate::LockService).
    ///
    /// It waits for the lock (as configured on the layer), then runs the
    /// inner service inside the guard's scope while the client's watchdog
    /// renews the lease. When the inner service has answered, it releases the
    /// lock (one round trip) and then resolves to the response, so a client
    /// that reads the response finds the lock free; with
    /// `hold_until_body_end` the guard moves into the [`ResponseBody`]
    /// instead. When the lock was not taken it resolves to the layer's own
    /// answer. It only fails when the inner service fails.
    ///
    /// # Cancel safety
    /// Dropping it (a client that disconnected, a timeout layer above) never
    /// leaves the lock held: while waiting, the acquisition is abandoned (a
    /// grant already made by the server is released in the background); while
    /// the handler runs, the handler's future is dropped first and then the
    /// guard, which releases the lock in the background within a round trip.
    pub struct ResponseFuture<S, R>
    where
        S: Service<R>,
    {
        #[pin]
        locked: Locked<S, R>,
        responder: Arc<Responder>,
    }
}

impl<S, R> ResponseFuture<S, R>
where
    S: Service<R>,
{
    pub(crate) fn new(locked: Locked<S, R>, responder: Arc<Responder>) -> Self {
        ResponseFuture { locked, responder }
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, Request<ReqBody>>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        Poll::Ready(match ready!(this.locked.poll(cx)) {
            Ok(answer) => Ok(this.responder.respond(answer)),
            Err(Failed::Lock(error, failure)) => Ok(this.responder.reject(&error, failure)),
            Err(Failed::Service(error)) => Err(error),
        })
    }
}

impl<S, R> fmt::Debug for ResponseFuture<S, R>
where
    S: Service<R>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("acquiring", &self.locked.acquire.is_some())
            .field("guard", &self.locked.guard)
            .finish()
    }
}

pin_project! {
    /// The response future of the plain flavour of
    /// [`LockService`](crate::LockService): the inner response, or the
    /// [`LockError`] (converted into the service's error) when the lock was
    /// not taken. When the inner future completes, the lock is released
    /// before the result is handed on.
    ///
    /// # Cancel safety
    /// As [`ResponseFuture`]: dropping it never leaves the lock held.
    pub struct PlainResponseFuture<S, R>
    where
        S: Service<R>,
    {
        #[pin]
        locked: Locked<S, R>,
    }
}

impl<S, R> PlainResponseFuture<S, R>
where
    S: Service<R>,
{
    pub(crate) fn new(locked: Locked<S, R>) -> Self {
        PlainResponseFuture { locked }
    }
}

impl<S, R> Future for PlainResponseFuture<S, R>
where
    S: Service<R>,
    S::Error: From<LockError>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(match ready!(self.project().locked.poll(cx)) {
            Ok(answer) => Ok(answer.response),
            Err(Failed::Lock(error, _)) => Err(error.into()),
            Err(Failed::Service(error)) => Err(error),
        })
    }
}

impl<S, R> fmt::Debug for PlainResponseFuture<S, R>
where
    S: Service<R>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlainResponseFuture")
            .field("acquiring", &self.locked.acquire.is_some())
            .field("guard", &self.locked.guard)
            .finish()
    }
}
