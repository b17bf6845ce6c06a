//! [`ResponseBody`]: the body of a response that passed through the layer.

use std::fmt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use distlock_core::LockGuard;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::release::{log_release, release, Release};

pin_project! {
    /// The response body of the HTTP and gRPC flavours of
    /// [`LockService`](crate::LockService): the inner service's body, or the
    /// layer's own answer when the lock was not taken (409, 503, a gRPC
    /// status).
    ///
    /// With [`hold_until_body_end`](crate::LockLayer::hold_until_body_end)
    /// it also holds the lock guard: after the inner body's last frame, the
    /// lock is released before the end of the body is reported, so a client
    /// that has read the whole response finds the lock free. A body that
    /// fails, or is dropped (the client went away), releases it in the
    /// background.
    ///
    /// # Cancel safety
    /// Dropping the body releases a lock it holds, in the background.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        // Declared after `kind` so the inner body is dropped first.
        guard: Option<LockGuard>,
        release: Option<(String, Release)>,
        finished: bool,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Rejection { data: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B, guard: Option<LockGuard>) -> Self {
        ResponseBody {
            kind: Kind::Inner { body },
            guard,
            release: None,
            finished: false,
        }
    }

    pub(crate) fn rejection(data: Bytes) -> Self {
        ResponseBody {
            kind: Kind::Rejection {
                data: (!data.is_empty()).then_some(data),
            },
            guard: None,
            release: None,
            finished: false,
        }
    }

    /// Whether this body holds a lock (it was built with
    /// `hold_until_body_end` and has not finished yet).
    pub fn holds_lock(&self) -> bool {
        self.guard.is_some() || self.release.is_some()
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if let Some((key, release)) = this.release.as_mut() {
            let released = ready!(release.as_mut().poll(cx));
            log_release(key, released);
            *this.release = None;
            *this.finished = true;
        }
        if *this.finished {
            return Poll::Ready(None);
        }
        match this.kind.project() {
            KindProj::Inner { body } => {
                let frame = match this.guard.as_ref() {
                    // Code that runs while the body streams is still inside
                    // the lock's scope (reentrant acquisitions).
                    Some(guard) => guard.in_scope(|| body.poll_frame(cx)),
                    None => body.poll_frame(cx),
                };
                match frame {
                    Poll::Ready(None) => {
                        *this.finished = true;
                        if let Some(guard) = this.guard.take() {
                            let key = guard.key().to_owned();
                            let mut releasing = release(guard);
                            match releasing.as_mut().poll(cx) {
                                Poll::Ready(released) => log_release(&key, released),
                                Poll::Pending => {
                                    *this.release = Some((key, releasing));
                                    return Poll::Pending;
                                }
                            }
                        }
                        Poll::Ready(None)
                    }
                    Poll::Ready(Some(Err(error))) => {
                        // Released in the background: the error goes out now.
                        this.guard.take();
                        Poll::Ready(Some(Err(error)))
                    }
                    frame => frame,
                }
            }
            KindProj::Rejection { data } => {
                Poll::Ready(data.take().map(|data| Ok(Frame::data(data.into()))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        if self.finished {
            return true;
        }
        match &self.kind {
            // While the lock is held, the end is reported by `poll_frame`,
            // once the lock is released.
            Kind::Inner { .. } if self.holds_lock() => false,
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Rejection { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Rejection { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |data| data.len() as u64))
            }
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Rejection { .. } => "rejection",
        };
        f.debug_struct("ResponseBody")
            .field("kind", &kind)
            .field("guard", &self.guard)
            .finish()
    }
}
