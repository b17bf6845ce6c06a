//! [`ResponseFuture`]: a request's way from its lock to its answer, as one
//! pin-projected enum of states (acquiring, calling, releasing), in every
//! flavour; the flavour builds the answer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use distlock_core::{LockError, LockGuard};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::flavour::Flavour;
use crate::http::Http;
use crate::plain::Plain;
use crate::release::{log_release, release, Release};
use crate::status::Failure;

/// A lock acquisition in progress.
pub(crate) type Acquire = Pin<Box<dyn Future<Output = Result<LockGuard, LockError>> + Send>>;

/// A watch on a held lock that resolves when its lease is lost.
type Lost = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The reason of the `LeaseLost` a request aborted by `abort_on_lost` is
/// answered for.
const ABORTED: &str = "lost while the request's handler ran; the handler was cancelled";

pin_project! {
    /// The response future of [`LockService`](crate::LockService), in each
    /// flavour `P` ([`Http`], [`Grpc`](crate::Grpc), [`Plain`]).
    ///
    /// It waits for the lock (as configured on the layer), then runs the
    /// inner service inside the guard's scope while the client's watchdog
    /// renews the lease. When the inner service has answered, it releases the
    /// lock (one round trip) and then resolves to the answer, so a client
    /// that reads it finds the lock free; with
    /// [`hold_until_body_end`](crate::LockLayer::hold_until_body_end) the
    /// guard moves into the [`ResponseBody`](crate::ResponseBody) instead.
    /// When the lock was not taken it resolves to the flavour's answer to
    /// that: the layer's own response in the HTTP and gRPC flavours (it then
    /// fails only when the inner service fails), the
    /// [`LockError`](distlock_core::LockError) converted into the service's
    /// error in the plain one. With
    /// [`abort_on_lost`](crate::LockLayer::abort_on_lost), a lock lost before
    /// the inner service has answered drops the inner service's future and
    /// resolves to the flavour's answer to
    /// [`LeaseLost`](distlock_core::LockError::LeaseLost).
    ///
    /// Polled again after it completed, it stays pending.
    ///
    /// # Cancel safety
    /// Dropping it (a client that disconnected, a timeout layer above) never
    /// leaves the lock held: while waiting, the acquisition is abandoned (a
    /// grant already made by the server is released in the background); while
    /// the handler runs, the handler's future is dropped first and then the
    /// guard, which releases the lock in the background within a round trip.
    pub struct ResponseFuture<S, R, P = Http>
    where
        S: Service<R>,
    {
        #[pin]
        state: State<S, R>,
        flavour: Arc<P>,
        // The layer's concurrency limit, in that mode: a busy permit means
        // the limit was reached.
        limit: Option<u32>,
        // The layer's `abort_on_lost`.
        abort_on_lost: bool,
    }
}

/// The response future of the plain flavour of
/// [`LockService`](crate::LockService): the inner response, or the
/// [`LockError`](distlock_core::LockError) (converted into the service's
/// error) when the lock was not taken. When the inner future completes, the
/// lock is released before the result is handed on.
///
/// # Cancel safety
/// As [`ResponseFuture`]: dropping it never leaves the lock held.
pub type PlainResponseFuture<S, R> = ResponseFuture<S, R, Plain>;

pin_project! {
    /// Where a request is on its way from its lock to its answer; each state
    /// owns what the next one needs.
    #[project = StateProj]
    #[project_replace = StateOwned]
    enum State<S: Service<R>, R> {
        // Refused before any lock was asked for: its key failed the layer's
        // check.
        Refused {
            error: LockError,
        },
        // Taking the lock; the ready inner service and the request wait for
        // it.
        Acquiring {
            acquire: Acquire,
            service: S,
            request: R,
        },
        // The inner service runs, inside the guard's scope when the request
        // is locked (`None`: it runs unlocked). The handler's future is
        // declared first, so it is dropped before the guard: its destructors
        // still run under the lock. The guard is shared with `lost`, the
        // watch for its loss (only with `abort_on_lost`), which needs an
        // owned handle on it; once the watch is dropped the guard is this
        // state's alone again.
        Calling {
            #[pin]
            future: S::Future,
            guard: Option<Arc<LockGuard>>,
            lost: Option<Lost>,
        },
        // The inner service answered; its lock is released before the answer
        // goes out.
        Releasing {
            release: Release,
            key: String,
            token: u64,
            output: Result<S::Response, S::Error>,
        },
        // The answer went out.
        Done,
    }
}

impl<S, R, P> ResponseFuture<S, R, P>
where
    S: Service<R>,
{
    /// A request that runs without a lock: the service was already called.
    pub(crate) fn unlocked(future: S::Future, flavour: Arc<P>) -> Self {
        ResponseFuture {
            state: State::Calling {
                future,
                guard: None,
                lost: None,
            },
            flavour,
            limit: None,
            abort_on_lost: false,
        }
    }

    /// A request refused before its lock was asked for (its key failed the
    /// layer's check): answered for `error`, the service is not called.
    pub(crate) fn refused(error: LockError, flavour: Arc<P>) -> Self {
        ResponseFuture {
            state: State::Refused { error },
            flavour,
            limit: None,
            abort_on_lost: false,
        }
    }

    /// A request that calls `service` once `acquire` gives it the lock; in
    /// a layer with a concurrency `limit`, a busy permit is answered as the
    /// limit reached; with `abort_on_lost`, a lock lost while `service`
    /// runs drops its future and answers as for `LeaseLost`.
    pub(crate) fn acquiring(
        acquire: Acquire,
        service: S,
        request: R,
        flavour: Arc<P>,
        limit: Option<u32>,
        abort_on_lost: bool,
    ) -> Self {
        ResponseFuture {
            state: State::Acquiring {
                acquire,
                service,
                request,
            },
            flavour,
            limit,
            abort_on_lost,
        }
    }
}

impl<S, R, P> Future for ResponseFuture<S, R, P>
where
    S: Service<R>,
    P: Flavour<R, S::Response, S::Error>,
{
    type Output = Result<P::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            // The handler's future is pinned: it is polled where it lies.
            if let StateProj::Calling {
                future,
                guard,
                lost,
            } = this.state.as_mut().project()
            {
                let polled = match guard.as_deref() {
                    // Inside the guard's scope, the handler re-enters this
                    // lock instead of waiting for itself.
                    Some(guard) => guard.in_scope(|| future.poll(cx)),
                    None => future.poll(cx),
                };
                // A response that is ready goes on even if the loss is seen
                // now: its work is done (see `LockLayer::abort_on_lost`).
                let Poll::Ready(output) = polled else {
                    let Some(watch) = lost.as_mut() else {
                        return Poll::Pending;
                    };
                    ready!(watch.as_mut().poll(cx));
                    let guard = guard.take();
                    lost.take();
                    // The handler's future is dropped here, before the guard:
                    // its destructors run while the guard still lives.
                    this.state.set(State::Done);
                    let key = guard.as_deref().map(|guard| guard.key().to_owned());
                    // Dropping the lost lock's guard releases it in the
                    // background (a no-op unless this owner still has it).
                    drop(guard);
                    let error = LockError::LeaseLost {
                        key: key.unwrap_or_default(),
                        reason: ABORTED,
                    };
                    return Poll::Ready(reject(this.flavour.as_ref(), error, *this.limit));
                };
                let guard = guard.take();
                // The watch's handle on the guard goes first, so the guard can
                // be taken back whole.
                lost.take();
                // The finished handler's future is dropped here, while the
                // lock is still held.
                this.state.set(State::Done);
                let Some(guard) = guard else {
                    return Poll::Ready(
                        output.map(|response| this.flavour.respond(response, None, None)),
                    );
                };
                let token = guard.fencing_token();
                let guard = match Arc::try_unwrap(guard) {
                    Ok(guard) => guard,
                    // Not reached: the only other handle, the watch's, was
                    // dropped above. Should one remain, the lock is released
                    // when it goes, and the response goes out now.
                    Err(shared) => {
                        drop(shared);
                        return Poll::Ready(
                            output
                                .map(|response| this.flavour.respond(response, Some(token), None)),
                        );
                    }
                };
                if output.is_ok() && this.flavour.hands_over() {
                    let answer = output
                        .map(|response| this.flavour.respond(response, Some(token), Some(guard)));
                    return Poll::Ready(answer);
                }
                // Release before answering: a client that sends its next
                // request after reading this answer must not find the lock
                // still held by this one.
                this.state.set(State::Releasing {
                    key: guard.key().to_owned(),
                    release: release(guard),
                    token,
                    output,
                });
                continue;
            }
            // The other states are taken out whole, and put back while they
            // wait.
            match this.state.as_mut().project_replace(State::Done) {
                StateOwned::Refused { error } => {
                    return Poll::Ready(reject(this.flavour.as_ref(), error, *this.limit));
                }
                StateOwned::Acquiring {
                    mut acquire,
                    mut service,
                    mut request,
                } => {
                    let Poll::Ready(acquired) = acquire.as_mut().poll(cx) else {
                        this.state.set(State::Acquiring {
                            acquire,
                            service,
                            request,
                        });
                        return Poll::Pending;
                    };
                    let guard = match acquired {
                        Ok(guard) => guard,
                        Err(error) => {
                            return Poll::Ready(reject(this.flavour.as_ref(), error, *this.limit));
                        }
                    };
                    this.flavour.prepare(&mut request, &guard);
                    let future = guard.in_scope(|| service.call(request));
                    let guard = Arc::new(guard);
                    let lost = (*this.abort_on_lost).then(|| watch_loss(guard.clone()));
                    this.state.set(State::Calling {
                        future,
                        guard: Some(guard),
                        lost,
                    });
                }
                StateOwned::Releasing {
                    mut release,
                    key,
                    token,
                    output,
                } => {
                    let Poll::Ready(released) = release.as_mut().poll(cx) else {
                        this.state.set(State::Releasing {
                            release,
                            key,
                            token,
                            output,
                        });
                        return Poll::Pending;
                    };
                    log_release(&key, released);
                    let answer =
                        output.map(|response| this.flavour.respond(response, Some(token), None));
                    return Poll::Ready(answer);
                }
                // `Calling` is polled in place above and never gets here.
                // `Done`: polled after completion, which the `Future`
                // contract leaves open; it stays pending.
                StateOwned::Calling { .. } | StateOwned::Done => return Poll::Pending,
            }
        }
    }
}

/// A watch that resolves when `guard`'s lease is lost.
fn watch_loss(guard: Arc<LockGuard>) -> Lost {
    Box::pin(async move { guard.lost().await })
}

/// The flavour's answer to a request whose lock was not taken: in a layer
/// with a concurrency `limit`, a busy permit is the limit reached.
fn reject<P, R, T, E>(flavour: &P, error: LockError, limit: Option<u32>) -> Result<P::Response, E>
where
    P: Flavour<R, T, E>,
{
    let failure = Failure::of_request(&error, limit);
    flavour.reject(error, failure)
}

impl<S, R, P> fmt::Debug for ResponseFuture<S, R, P>
where
    S: Service<R>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (state, guard) = match &self.state {
            State::Refused { .. } => ("refused", None),
            State::Acquiring { .. } => ("acquiring", None),
            State::Calling { guard, .. } => ("calling", guard.as_deref()),
            State::Releasing { .. } => ("releasing", None),
            State::Done => ("done", None),
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .field("guard", &guard)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::future::{ready, Ready};
    use std::task::Waker;

    use distlock_core::LockClient;

    use super::*;

    /// Doubles its request.
    struct Double;

    impl Service<u32> for Double {
        type Response = u32;
        type Error = LockError;
        type Future = Ready<Result<u32, LockError>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), LockError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, job: u32) -> Self::Future {
            ready(Ok(job * 2))
        }
    }

    #[tokio::test]
    async fn polled_after_completion_it_stays_pending() {
        let future = PlainResponseFuture::<Double, u32>::unlocked(Double.call(21), Arc::new(Plain));
        let mut future = std::pin::pin!(future);
        assert_eq!(future.as_mut().await.unwrap(), 42);
        assert_eq!(
            format!("{future:?}"),
            r#"ResponseFuture { state: "done", guard: None }"#
        );
        let mut cx = Context::from_waker(Waker::noop());
        assert!(future.as_mut().poll(&mut cx).is_pending());
    }

    #[tokio::test]
    async fn a_lock_error_is_the_flavours_answer() {
        let client = LockClient::memory();
        let held = client.lock("job:1").acquire().await.unwrap();
        let acquire = Box::pin(client.lock("job:1").acquire());
        let future =
            PlainResponseFuture::acquiring(acquire, Double, 21, Arc::new(Plain), None, false);
        assert_eq!(
            format!("{future:?}"),
            r#"ResponseFuture { state: "acquiring", guard: None }"#
        );
        let error = future.await.unwrap_err();
        assert!(matches!(error, LockError::Busy { .. }), "{error:?}");
        held.release().await.unwrap();

        // Free now: the service runs under the lock, which is released
        // before the answer.
        let acquire = Box::pin(client.lock("job:1").acquire());
        let future =
            PlainResponseFuture::acquiring(acquire, Double, 21, Arc::new(Plain), None, false);
        assert_eq!(future.await.unwrap(), 42);
        assert!(client.lock("job:1").try_acquire().await.unwrap().is_some());
    }
}
