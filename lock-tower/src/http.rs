//! The HTTP flavour ([`Http`]): lock failures become responses (409, 429 and
//! 503 with `Retry-After`, 400, 500), so the service stays infallible for
//! axum.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use distlock_core::{LockError, LockGuard};
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};

use crate::body::ResponseBody;
use crate::future::Answered;
use crate::grpc;
use crate::status::{log_failure, message, Failure};
use crate::FencingToken;

/// The HTTP flavour of [`LockLayer`](crate::LockLayer), the default: when the
/// lock is not taken the layer answers itself, with a response, never an
/// error. The statuses are those of [`http_status`](crate::http_status):
///
/// | lock error | response |
/// |---|---|
/// | held by another owner after the wait (`Busy`, `TimedOut`) | `409 Conflict` with `Retry-After: 1` (configurable) |
/// | [`concurrency_limit`](crate::LockLayer::concurrency_limit) mode: the limit was reached after the wait (its semaphore's `Busy`, `TimedOut`) | `429 Too Many Requests` with `Retry-After: 1` (configurable, e.g. to 503) |
/// | the backend did not answer or failed (`Backend`, `Connect`, ...), or the lock could not be kept (`LeaseLost`) | `503 Service Unavailable` with `Retry-After: 1` (configurable) |
/// | invalid lock name from the extractor (`InvalidKey`), or one refused by [`validate_key`](crate::LockLayer::validate_key) | `400 Bad Request` |
/// | anything else (a bad lease, a Redis key of another type) | `500 Internal Server Error` |
///
/// A wait that ends while the backend does not answer is a 503, not a 409:
/// the last look at the lock, at the end of the wait, is the request's own
/// attempt, so 409 means the lock was seen held by another owner.
///
/// The bodies are short `text/plain` messages naming the lock (the busy and
/// the 503 answer's body and content type can be set); a backend error's
/// details (server address, cause) go to the log, not to the client.
#[derive(Clone)]
pub struct Http(pub(crate) Arc<Responder>);

impl fmt::Debug for Http {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Http {
    /// The defaults: 409, 429 and 503, all with `Retry-After: 1`, the token
    /// extension on.
    pub(crate) fn new() -> Self {
        Http(Arc::new(Responder {
            reject: Reject::Http(Box::new(HttpRejection {
                busy: Answer::new(Failure::Busy.status()),
                limited: Answer::new(StatusCode::TOO_MANY_REQUESTS),
                unavailable: Answer::new(Failure::Unavailable.status()),
            })),
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
    // Boxed: three configurable answers make it large, and `Grpc` is empty.
    Http(Box<HttpRejection>),
    Grpc,
}

/// The configurable HTTP answers: to a busy lock, to a reached concurrency
/// limit and to an unavailable backend.
#[derive(Clone, Debug)]
pub(crate) struct HttpRejection {
    pub(crate) busy: Answer,
    pub(crate) limited: Answer,
    pub(crate) unavailable: Answer,
}

/// One configurable answer.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    /// `None`: a `text/plain` message naming the lock.
    pub(crate) body: Option<Bytes>,
    pub(crate) content_type: HeaderValue,
    pub(crate) retry_after: Option<Duration>,
}

impl Answer {
    fn new(status: StatusCode) -> Self {
        Answer {
            status,
            body: None,
            content_type: HeaderValue::from_static(TEXT_PLAIN),
            retry_after: Some(Duration::from_secs(1)),
        }
    }
}

const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

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
    pub(crate) fn respond<B>(&self, answer: Answered<Response<B>>) -> Response<ResponseBody<B>> {
        let (mut parts, body) = answer.response.into_parts();
        if let (Some(name), Some(token)) = (&self.token_header, answer.token) {
            parts.headers.insert(name.clone(), HeaderValue::from(token));
        }
        Response::from_parts(parts, ResponseBody::inner(body, answer.guard))
    }

    /// The answer to a request whose lock was not taken, for `error` of
    /// class `failure`.
    pub(crate) fn reject<B>(
        &self,
        error: &LockError,
        failure: Failure,
    ) -> Response<ResponseBody<B>> {
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
        let configured = match failure {
            Failure::Busy => Some(&self.busy),
            Failure::Limited { .. } => Some(&self.limited),
            Failure::Unavailable => Some(&self.unavailable),
            Failure::BadKey | Failure::Internal => None,
        };
        let status = configured.map_or_else(|| failure.status(), |answer| answer.status);
        let body = match configured.and_then(|answer| answer.body.clone()) {
            Some(body) => body,
            None => Bytes::from(message(key, error, failure) + "\n"),
        };
        let mut response = Response::new(ResponseBody::rejection(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        let content_type = configured.map_or_else(
            || HeaderValue::from_static(TEXT_PLAIN),
            |answer| answer.content_type.clone(),
        );
        headers.insert(CONTENT_TYPE, content_type);
        if let Some(after) = configured.and_then(|answer| answer.retry_after) {
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
}
