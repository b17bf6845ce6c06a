//! The gRPC flavour ([`Grpc`]): the building of the trailers-only response a
//! call gets when it did not get its lock (`ABORTED`, `RESOURCE_EXHAUSTED`,
//! `UNAVAILABLE`, ...).

use bytes::Bytes;
use distlock_core::{LockError, LockGuard};
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Request, Response};

use crate::body::ResponseBody;
use crate::flavour::{sealed, Exchange, Flavour, HttpFlavour};
use crate::status::{log_failure, message, reason, Failure, REASON_METADATA};

/// The gRPC flavour of [`LockLayer`](crate::LockLayer), made by
/// [`LockLayer::grpc`](crate::LockLayer::grpc), for tonic's
/// `Server::builder().layer(..)`.
///
/// When the lock is not taken the layer answers with a gRPC status whose
/// message names the lock; the codes are those of `grpc_code` (with the
/// `tonic` feature):
///
/// | lock error | status |
/// |---|---|
/// | held by another owner after the wait (`Busy`, `TimedOut`) | `ABORTED` (10) |
/// | [`concurrency_limit`](crate::LockLayer::concurrency_limit) mode: the limit was reached after the wait | `RESOURCE_EXHAUSTED` (8) |
/// | the backend did not answer or failed (`Backend`, `Connect`, ...), or the lock could not be kept (`LeaseLost`) | `UNAVAILABLE` (14) |
/// | invalid lock name from the extractor (`InvalidKey`), or one refused by [`validate_key`](crate::LockLayer::validate_key) | `INVALID_ARGUMENT` (3) |
/// | anything else | `INTERNAL` (13) |
///
/// `ABORTED` is what gRPC prescribes for concurrency conflicts that the
/// client should retry at a higher level (re-read, then retry);
/// `RESOURCE_EXHAUSTED` is its code for a quota or a limit that was reached,
/// kept apart from it so that a client can back off instead. gRPC has no
/// `Retry-After`: the message names the semaphore and its limit.
///
/// Every answer of the layer also carries the metadata
/// [`distlock-reason`](crate::REASON_METADATA) (`busy`, `limit`,
/// `backend-unavailable`, `lease-lost`, `shutting-down`, `missing-key`,
/// `invalid-key`, `internal`), so that a client tells the layer's
/// `RESOURCE_EXHAUSTED` from HTTP/2's, and a busy lock from a stale token,
/// without parsing the message.
#[derive(Clone, Debug)]
pub struct Grpc {
    pub(crate) exchange: Exchange,
}

impl sealed::Sealed for Grpc {}

impl HttpFlavour for Grpc {
    fn exchange_mut(&mut self) -> &mut Exchange {
        &mut self.exchange
    }
}

impl<B, ResBody, E> Flavour<Request<B>, Response<ResBody>, E> for Grpc {
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
        let key = error.key().unwrap_or("*");
        Ok(status_response(key, &error, failure))
    }
}

/// A trailers-only gRPC response: HTTP 200 whose headers carry the status,
/// and an empty body.
fn status_response<B>(key: &str, error: &LockError, failure: Failure) -> Response<ResponseBody<B>> {
    let code = failure.grpc_code();
    let mut response = Response::new(ResponseBody::rejection(Bytes::new()));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(code as u16));
    headers.insert(
        REASON_METADATA,
        HeaderValue::from_static(reason(error, failure)),
    );
    let encoded = percent_encode(&message(key, error, failure));
    if let Ok(value) = HeaderValue::from_str(&encoded) {
        headers.insert("grpc-message", value);
    }
    response
}

/// Percent-encodes a `grpc-message` as the gRPC spec asks: every byte
/// outside printable ASCII, and `%` itself.
pub(crate) fn percent_encode(message: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_message_is_percent_encoded() {
        assert_eq!(percent_encode("lock `a:1` is busy"), "lock `a:1` is busy");
        assert_eq!(percent_encode("100%\n"), "100%25%0A");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }

    #[test]
    fn busy_is_aborted_in_trailers_only_response() {
        let error = LockError::Busy {
            key: "order:1".into(),
        };
        let response: Response<ResponseBody<()>> =
            status_response("order:1", &error, Failure::of(&error));
        assert_eq!(response.status(), http::StatusCode::OK);
        let headers = response.headers();
        assert_eq!(headers["content-type"], "application/grpc");
        assert_eq!(headers["grpc-status"], "10");
        assert_eq!(headers["distlock-reason"], "busy");
        let message = headers["grpc-message"].to_str().unwrap();
        assert!(message.contains("order:1"), "{message}");
    }

    #[test]
    fn limit_reached_is_resource_exhausted() {
        let error = LockError::Busy {
            key: "exports:tenant:7".into(),
        };
        let failure = Failure::of_request(&error, Some(5));
        let response: Response<ResponseBody<()>> =
            status_response("exports:tenant:7", &error, failure);
        let headers = response.headers();
        assert_eq!(headers["grpc-status"], "8");
        assert_eq!(headers["distlock-reason"], "limit");
        let message = headers["grpc-message"].to_str().unwrap();
        assert!(message.contains("exports:tenant:7"), "{message}");
        assert!(message.contains("at most 5"), "{message}");
    }
}
