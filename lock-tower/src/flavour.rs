//! [`Flavour`]: what differs between the layer's flavours ([`Http`](crate::Http),
//! [`Grpc`](crate::Grpc), [`Plain`](crate::Plain)), as one sealed trait, and
//! [`Exchange`], the fencing-token and body options the two HTTP flavours
//! share.
//!
//! Each flavour implements [`Flavour`] once, in its own file; the response
//! future is generic over it and never names a flavour.

use distlock_core::{LockError, LockGuard};
use http::{HeaderName, HeaderValue, Request, Response};

use crate::body::ResponseBody;
use crate::status::Failure;
use crate::token::FencingToken;

/// How a [`LockService`](crate::LockService) of one flavour answers: for
/// requests `R` to an inner service answering `Result<T, E>`, what it answers
/// with ([`Response`](Flavour::Response)), and how a request that did not
/// get its lock is answered.
///
/// | flavour | `R`, `T` | [`Response`](Flavour::Response) | a request without its lock gets |
/// |---|---|---|---|
/// | [`Http`](crate::Http) (default) | `http::Request<B>`, `http::Response<ResBody>` | `http::Response<ResponseBody<ResBody>>` | a response: 409, 429, 503, 400, 500 |
/// | [`Grpc`](crate::Grpc) | as `Http` | as `Http` | a trailers-only gRPC status |
/// | [`Plain`](crate::Plain) | any (`E: From<LockError>`) | `T` | `Err(E::from(lock_error))` |
///
/// Sealed: implemented by these three flavours only.
pub trait Flavour<R, T, E>: sealed::Sealed {
    /// What the service answers with.
    type Response;

    /// With the lock taken, before the inner service sees `request` (the
    /// HTTP flavours put the [`FencingToken`] in its extensions).
    #[doc(hidden)]
    fn prepare(&self, request: &mut R, guard: &LockGuard);

    /// Whether the guard goes out with a successful response, to be
    /// released at the end of its body, instead of before the response.
    #[doc(hidden)]
    fn hands_over(&self) -> bool;

    /// The inner service's `response` as this flavour answers it, with the
    /// fencing token it was made under (`None` when unlocked) and, when
    /// [`hands_over`](Flavour::hands_over), the guard.
    #[doc(hidden)]
    fn respond(&self, response: T, token: Option<u64>, guard: Option<LockGuard>) -> Self::Response;

    /// The answer to a request whose lock was not taken because of `error`,
    /// of class `failure`.
    #[doc(hidden)]
    fn reject(&self, error: LockError, failure: Failure) -> Result<Self::Response, E>;
}

/// The flavours whose services take `http::Request`s and answer with
/// `http::Response`s, [`Http`](crate::Http) and [`Grpc`](crate::Grpc): the
/// fencing-token and body-hold options of
/// [`LockLayer`](crate::LockLayer) exist only for them.
///
/// Sealed: implemented by these two flavours only.
pub trait HttpFlavour: sealed::Sealed + Clone {
    /// The options the HTTP flavours share.
    #[doc(hidden)]
    fn exchange_mut(&mut self) -> &mut Exchange;
}

/// What the HTTP flavours add to a locked exchange: the fencing token in the
/// request's extensions and in a response header, and the guard handed to
/// the response body. Written once, held by [`Http`](crate::Http) and
/// [`Grpc`](crate::Grpc) alike.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub(crate) token_extension: bool,
    pub(crate) token_header: Option<HeaderName>,
    pub(crate) hold_until_body_end: bool,
}

impl Default for Exchange {
    /// The token extension on, no token header, the lock released before the
    /// response.
    fn default() -> Self {
        Exchange {
            token_extension: true,
            token_header: None,
            hold_until_body_end: false,
        }
    }
}

impl Exchange {
    /// Puts the token in the request's extensions, when asked to.
    pub(crate) fn prepare<B>(&self, request: &mut Request<B>, guard: &LockGuard) {
        if self.token_extension {
            request
                .extensions_mut()
                .insert(FencingToken::new(guard.key(), guard.fencing_token()));
        }
    }

    /// The inner service's response, with the token header and the guard
    /// (handed over with `hold_until_body_end`) in its body.
    pub(crate) fn respond<B>(
        &self,
        response: Response<B>,
        token: Option<u64>,
        guard: Option<LockGuard>,
    ) -> Response<ResponseBody<B>> {
        let (mut parts, body) = response.into_parts();
        if let (Some(name), Some(token)) = (&self.token_header, token) {
            parts.headers.insert(name.clone(), HeaderValue::from(token));
        }
        Response::from_parts(parts, ResponseBody::inner(body, guard))
    }
}

// A public trait in a crate-private module: implementable only in this
// crate, which seals `Flavour` and `HttpFlavour`.
pub(crate) mod sealed {
    pub trait Sealed {}
}
