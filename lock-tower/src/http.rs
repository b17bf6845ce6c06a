//! The HTTP flavour ([`Http`]): its configurable answers, and the building
//! of the response a request gets when it did not get its lock (409, 429 and
//! 503 with `Retry-After`, 400, 500), so the service stays infallible for
//! axum.

use std::time::Duration;

use bytes::Bytes;
use distlock_core::{LockError, LockGuard};
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Request, Response, StatusCode};

use crate::body::ResponseBody;
use crate::flavour::{sealed, Exchange, Flavour, HttpFlavour};
use crate::status::{log_failure, message, Failure};

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
#[derive(Clone, Debug)]
pub struct Http {
    pub(crate) exchange: Exchange,
    /// The answer to a busy lock.
    pub(crate) busy: Answer,
    /// The answer to a reached concurrency limit.
    pub(crate) limited: Answer,
    /// The answer to an unavailable backend.
    pub(crate) unavailable: Answer,
}

impl Http {
    /// The defaults: 409, 429 and 503, all with `Retry-After: 1`, the token
    /// extension on.
    pub(crate) fn new() -> Self {
        Http {
            exchange: Exchange::default(),
            busy: Answer::new(Failure::Busy.status()),
            limited: Answer::new(StatusCode::TOO_MANY_REQUESTS),
            unavailable: Answer::new(Failure::Unavailable.status()),
        }
    }

    /// The answer to a request whose lock was not taken, for `error` of
    /// class `failure`: the configured answer of its class, or the default
    /// status with a message naming the lock.
    fn rejection<B>(&self, error: &LockError, failure: Failure) -> Response<ResponseBody<B>> {
        let key = error.key().unwrap_or("*");
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

impl sealed::Sealed for Http {}

impl HttpFlavour for Http {
    fn exchange_mut(&mut self) -> &mut Exchange {
        &mut self.exchange
    }
}

impl<B, ResBody, E> Flavour<Request<B>, Response<ResBody>, E> for Http {
    type Response = Response<ResponseBody<ResBody>>;

    fn prepare(&self, request: &mut Request<B>, guard: &LockGuard) {
        self.exchange.prepare(request, guard);
    }

    fn hands_over(&self) -> bool {
        self.exchange.hold_until_body_end
    }

    fn respond(
        &self,
        response: Response<ResBody>,
        token: Option<u64>,
        guard: Option<LockGuard>,
    ) -> Self::Response {
        self.exchange.respond(response, token, guard)
    }

    fn reject(&self, error: LockError, failure: Failure) -> Result<Self::Response, E> {
        log_failure(&error, failure);
        Ok(self.rejection(&error, failure))
    }
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

pub(crate) const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

/// `Retry-After` is in whole seconds: round up, and never 0 (which would
/// invite an immediate retry storm).
pub(crate) fn retry_after_secs(after: Duration) -> u64 {
    let secs = after
        .as_secs()
        .saturating_add(u64::from(after.subsec_nanos() > 0));
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
        // Rounding up the longest duration saturates instead of overflowing.
        assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
    }
}
