//! The HTTP flavour ([`Http`]): lock failures become responses (409 with
//! `Retry-After`, 503), so the service stays infallible for axum.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use lock_core::{LockError, LockGuard};

use crate::body::ResponseBody;
use crate::future::Answer;
use crate::grpc;
use crate::FencingToken;

/// The HTTP flavour of [`LockLayer`](crate::LockLayer), the default: when the
/// lock is not taken the layer answers itself, with a response, never an
/// error.
///
/// | lock error | response |
/// |---|---|
/// | busy after the wait (`Busy`, `TimedOut`) | `409 Conflict` with `Retry-After: 1` (configurable) |
/// | backend unreachable (`Backend`, `Connect`, ...) | `503 Service Unavailable` (configurable) |
/// | invalid lock name from the extractor (`InvalidKey`) | `400 Bad Request` |
/// | anything else (a bad lease, a Redis key of another type) | `500 Internal Server Error` |
///
/// The bodies are short `text/plain` messages naming the lock; a backend
/// error's details (server address, cause) go to the log, not to the client.
#[derive(Clone)]
pub struct Http(pub(crate) Arc<Responder>);

impl fmt::Debug for Http {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Http {
    /// The defaults: 409 with `Retry-After: 1`, 503, the token extension on.
    pub(crate) fn new() -> Self {
        Http(Arc::new(Responder {
            reject: Reject::Http(HttpRejection {
                busy_status: StatusCode::CONFLICT,
                busy_body: None,
                retry_after: Some(Duration::from_secs(1)),
                unavailable_status: StatusCode::SERVICE_UNAVAILABLE,
            }),
            token_extension: true,
            token_header: None,
            hold_until_body_end: false,
        }))
    }
}

/// What the HTTP and gRPC flavours do around the inner service.
#[derive(Clone, Debug)]
pub(crate) struct Responder {
    pub(crate) reject: Reject,
    pub(crate) token_extension: bool,
    pub(crate) token_header: Option<HeaderName>,
    pub(crate) hold_until_body_end: bool,
}

/// How a lock failure is answered.
#[derive(Clone, Debug)]
pub(crate) enum Reject {
    Http(HttpRejection),
    Grpc,
}

#[derive(Clone, Debug)]
pub(crate) struct HttpRejection {
    pub(crate) busy_status: StatusCode,
    pub(crate) busy_body: Option<Bytes>,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) unavailable_status: StatusCode,
}

/// How the layer classifies a lock failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    Busy,
    Unavailable,
    /// The lock client is shutting down: answered as unavailable.
    ShuttingDown,
    BadKey,
    Internal,
}

impl Failure {
    pub(crate) fn of(error: &LockError) -> Self {
        match error {
            LockError::Busy { .. } | LockError::TimedOut { .. } => Failure::Busy,
            LockError::ShuttingDown { .. } => Failure::ShuttingDown,
            LockError::InvalidKey { .. } => Failure::BadKey,
            error if error.is_backend() => Failure::Unavailable,
            _ => Failure::Internal,
        }
    }
}

/// Logs a lock failure: busy (and a shutdown) is routine, the others are
/// worth a look.
pub(crate) fn log_failure(error: &LockError, failure: Failure) {
    match failure {
        Failure::Busy | Failure::ShuttingDown | Failure::BadKey => {
            tracing::debug!(key = error.key(), error = %error, "request not locked")
        }
        Failure::Unavailable => {
            tracing::warn!(key = error.key(), error = %error, "lock backend unavailable")
        }
        Failure::Internal => tracing::error!(key = error.key(), error = %error, "lock failed"),
    }
}

/// The client-facing message for a failure on lock `key`.
pub(crate) fn message(key: &str, error: &LockError, failure: Failure) -> String {
    match failure {
        Failure::Busy => format!("lock `{key}` is held by another request; retry later"),
        Failure::Unavailable => {
            format!("lock `{key}` is unavailable: the lock backend cannot be reached")
        }
        Failure::ShuttingDown => {
            format!("lock `{key}` is unavailable: the service is shutting down")
        }
        Failure::BadKey => error.to_string(),
        Failure::Internal => format!("lock `{key}` could not be taken: internal error"),
    }
}

impl Responder {
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
    pub(crate) fn respond<B>(&self, answer: Answer<Response<B>>) -> Response<ResponseBody<B>> {
        let (mut parts, body) = answer.response.into_parts();
        if let (Some(name), Some(token)) = (&self.token_header, answer.token) {
            parts.headers.insert(name.clone(), HeaderValue::from(token));
        }
        Response::from_parts(parts, ResponseBody::inner(body, answer.guard))
    }

    /// The answer to a request whose lock was not taken.
    pub(crate) fn reject<B>(&self, error: &LockError) -> Response<ResponseBody<B>> {
        let failure = Failure::of(error);
        log_failure(error, failure);
        let key = error.key().unwrap_or("*");
        match &self.reject {
            Reject::Http(http) => http.response(key, error, failure),
            Reject::Grpc => grpc::status_response(key, error, failure),
        }
    }
}

impl HttpRejection {
    fn response<B>(
        &self,
        key: &str,
        error: &LockError,
        failure: Failure,
    ) -> Response<ResponseBody<B>> {
        let status = match failure {
            Failure::Busy => self.busy_status,
            Failure::Unavailable | Failure::ShuttingDown => self.unavailable_status,
            Failure::BadKey => StatusCode::BAD_REQUEST,
            Failure::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let body = match (&self.busy_body, failure) {
            (Some(body), Failure::Busy) => body.clone(),
            _ => Bytes::from(message(key, error, failure) + "\n"),
        };
        let mut response = Response::new(ResponseBody::rejection(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        if let (Some(after), Failure::Busy) = (self.retry_after, failure) {
            headers.insert(RETRY_AFTER, HeaderValue::from(retry_after_secs(after)));
        }
        response
    }
}

/// `Retry-After` is in whole seconds: round up, and never 0 (which would
/// invite an immediate retry storm).
fn retry_after_secs(after: Duration) -> u64 {
    let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn failures_are_classified() {
        let busy = LockError::Busy { key: "k".into() };
        let timed_out = LockError::TimedOut {
            key: "k".into(),
            waited: Duration::from_secs(1),
        };
        let bad = LockError::InvalidKey {
            key: String::new(),
            reason: "empty",
        };
        let config = LockError::InvalidConfig {
            key: "k".into(),
            reason: "zero lease".into(),
        };
        let closing = LockError::ShuttingDown {
            key: "k".into(),
            client: "c".into(),
        };
        assert_eq!(Failure::of(&closing), Failure::ShuttingDown);
        assert_eq!(Failure::of(&busy), Failure::Busy);
        assert_eq!(Failure::of(&timed_out), Failure::Busy);
        assert_eq!(Failure::of(&bad), Failure::BadKey);
        assert_eq!(Failure::of(&config), Failure::Internal);
    }
}
