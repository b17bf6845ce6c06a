//! How each [`LockError`] is answered: its class ([`Failure`]), the HTTP
//! status ([`http_status`]) and gRPC code (`grpc_code`, with the `tonic`
//! feature) of the class, the message the client reads and the line the log
//! gets. The functions are public so that a handler can answer a lock error
//! of its own the way the layer does.

use distlock_core::LockError;
use http::StatusCode;

/// The metadata key (an HTTP/2 header of the trailers-only answer) that
/// says why the gRPC flavour of the layer refused a call, for clients to
/// branch on without parsing messages. Its values:
///
/// | value | status | cause | retry? |
/// |---|---|---|---|
/// | `busy` | `ABORTED` | the lock is held by another call (after the wait) | yes, after a short back-off: the holder finishes |
/// | `limit` | `RESOURCE_EXHAUSTED` | [`concurrency_limit`](crate::LockLayer::concurrency_limit): as many calls of this key run already | yes, backing off |
/// | `backend-unavailable` | `UNAVAILABLE` | the lock backend did not answer or failed (Redis down, paused, failing over) | yes, backing off (an idempotent call) |
/// | `lease-lost` | `UNAVAILABLE` | the lock was lost while it was taken, or (with `abort_on_lost`) while the handler ran | yes: the call did not complete under its lock |
/// | `shutting-down` | `UNAVAILABLE` | the service's lock client is shutting down | yes, on another replica |
/// | `missing-key` | `INVALID_ARGUMENT` | the call lacks the metadata that names its lock ([`GrpcKey`](crate::GrpcKey)) | no: send the metadata |
/// | `invalid-key` | `INVALID_ARGUMENT` | the lock name is empty, too long, or refused by [`validate_key`](crate::LockLayer::validate_key) | no |
/// | `internal` | `INTERNAL` | a bug or misconfiguration of the service | no |
///
/// `distlock-fence`'s `FenceLayer` adds `stale-token` (`ABORTED`: a newer
/// holder has been seen; never retry with the same token), `bad-token` and
/// `fence-unavailable`. An answer without this key did not come from the
/// layers: `UNAVAILABLE` from the transport (the server is gone), or
/// `RESOURCE_EXHAUSTED` from HTTP/2 flow control after a paused server
/// resumes.
pub const REASON_METADATA: &str = "distlock-reason";

/// The reason of [`LockError::InvalidKey`] for a request that lacks its
/// lock name (see `KeyExtractor::missing_key`).
pub(crate) const MISSING_KEY: &str = "the request does not carry its lock name";

/// The value of [`REASON_METADATA`] for a failure of class `failure`.
pub(crate) fn reason(error: &LockError, failure: Failure) -> &'static str {
    match failure {
        Failure::Busy => "busy",
        Failure::Limited { .. } => "limit",
        Failure::Unavailable => match error {
            LockError::LeaseLost { .. } => "lease-lost",
            LockError::ShuttingDown { .. } => "shutting-down",
            _ => "backend-unavailable",
        },
        Failure::BadKey => match error {
            LockError::InvalidKey { reason, .. } if *reason == MISSING_KEY => "missing-key",
            _ => "invalid-key",
        },
        Failure::Internal => "internal",
    }
}

/// How the layer classifies a lock failure: one class per answer.
///
/// `pub` because the sealed [`Flavour`](crate::Flavour)'s hidden `reject`
/// takes it; this module is private, so no one outside the crate can name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Held by another owner (after the wait): the client may retry later.
    Busy,
    /// The concurrency limit of `limit` requests per name was reached (after
    /// the wait): the client may retry later.
    Limited { limit: u32 },
    /// The backend did not answer, failed, or the lock could not be kept.
    Unavailable,
    /// The lock name from the request is not acceptable.
    BadKey,
    /// A bug or a misconfiguration of the service.
    Internal,
}

/// gRPC status codes the layer answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GrpcCode {
    InvalidArgument = 3,
    ResourceExhausted = 8,
    Aborted = 10,
    Internal = 13,
    Unavailable = 14,
}

impl Failure {
    /// The class of `error`. Every variant of [`LockError`] is listed; a
    /// variant added later is `Unavailable` when
    /// [`is_backend`](LockError::is_backend) says so, else `Internal`.
    pub(crate) fn of(error: &LockError) -> Self {
        match error {
            LockError::Busy { .. } | LockError::TimedOut { .. } => Failure::Busy,
            LockError::InvalidKey { .. } => Failure::BadKey,
            LockError::Backend { .. }
            | LockError::QuorumNotReached { .. }
            | LockError::Connect { .. }
            | LockError::Authentication { .. }
            | LockError::LeaseLost { .. }
            | LockError::ShuttingDown { .. } => Failure::Unavailable,
            LockError::NotHeld { .. }
            | LockError::InvalidConfig { .. }
            | LockError::WrongType { .. }
            | LockError::HeldByOtherClient { .. }
            | LockError::UpgradeRefused { .. }
            | LockError::Unsupported { .. }
            | LockError::UnsupportedServer { .. } => Failure::Internal,
            error if error.is_backend() => Failure::Unavailable,
            _ => Failure::Internal,
        }
    }

    /// The class of `error` for a request of a layer whose concurrency limit
    /// is `limit` (`None` in the modes that lock): in that mode, a busy
    /// semaphore means the limit was reached.
    pub(crate) fn of_request(error: &LockError, limit: Option<u32>) -> Self {
        match (Failure::of(error), limit) {
            (Failure::Busy, Some(limit)) => Failure::Limited { limit },
            (failure, _) => failure,
        }
    }

    /// The default HTTP status of this class.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Failure::Busy => StatusCode::CONFLICT,
            Failure::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Failure::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Failure::BadKey => StatusCode::BAD_REQUEST,
            Failure::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The gRPC code of this class.
    pub(crate) fn grpc_code(self) -> GrpcCode {
        match self {
            Failure::Busy => GrpcCode::Aborted,
            Failure::Limited { .. } => GrpcCode::ResourceExhausted,
            Failure::Unavailable => GrpcCode::Unavailable,
            Failure::BadKey => GrpcCode::InvalidArgument,
            Failure::Internal => GrpcCode::Internal,
        }
    }
}

/// Logs a lock failure: busy is routine, the others are worth a look.
pub(crate) fn log_failure(error: &LockError, failure: Failure) {
    match failure {
        // A shutdown is routine too: the service is going away on purpose.
        _ if matches!(error, LockError::ShuttingDown { .. }) => {
            tracing::debug!(key = error.key(), error = %error, "request not locked: shutting down")
        }
        Failure::Busy | Failure::Limited { .. } | Failure::BadKey => {
            tracing::debug!(key = error.key(), error = %error, "request not locked")
        }
        Failure::Unavailable if matches!(error, LockError::LeaseLost { .. }) => {
            tracing::warn!(key = error.key(), error = %error, "request not served: its lock was lost")
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
        Failure::Limited { limit } => {
            format!("too many requests for `{key}` at once (at most {limit}); retry later")
        }
        Failure::Unavailable => match error {
            LockError::LeaseLost { .. } => {
                format!("lock `{key}` could not be kept; retry later")
            }
            LockError::ShuttingDown { .. } => {
                format!("lock `{key}` is unavailable: the service is shutting down")
            }
            _ => format!("lock `{key}` is unavailable: the lock backend did not answer or failed"),
        },
        Failure::BadKey => match error {
            LockError::InvalidKey { reason, .. } if *reason == MISSING_KEY => {
                format!("the request must carry its lock name: the {key}")
            }
            _ => error.to_string(),
        },
        Failure::Internal => format!("lock `{key}` could not be taken: internal error"),
    }
}

/// The HTTP status the layer answers `error` with by default, for handlers
/// that meet a [`LockError`] themselves (a domain function that takes
/// another lock) and should answer as the layer does.
///
/// | lock error | status |
/// |---|---|
/// | `Busy`, `TimedOut` (held by another owner, after the wait) | `409 Conflict` |
/// | `Backend`, `Connect`, `QuorumNotReached`, `Authentication` (the backend did not answer or failed) | `503 Service Unavailable` |
/// | `LeaseLost` (the lock could not be kept), `ShuttingDown` (the client is shutting down) | `503 Service Unavailable` |
/// | `InvalidKey` (the name from the request is not acceptable) | `400 Bad Request` |
/// | `NotHeld`, `InvalidConfig`, `WrongType`, `HeldByOtherClient` (a layer and a handler given different clients), `UpgradeRefused`, `Unsupported` | `500 Internal Server Error` |
/// | a variant added to `LockError` later (it is `#[non_exhaustive]`) | `503` when [`LockError::is_backend`] is true, else `500` |
///
/// The layer's own answers follow this table, except where
/// [`busy_status`](crate::LockLayer::busy_status) or
/// [`unavailable_status`](crate::LockLayer::unavailable_status) changed the
/// status of a class, and in the
/// [`concurrency_limit`](crate::LockLayer::concurrency_limit) mode, which
/// answers its semaphore's `Busy` and `TimedOut` with
/// `429 Too Many Requests` (or its [`limit_status`](crate::LockLayer::limit_status)):
/// the error alone does not tell a busy lock from a reached limit, so this
/// function, given one, says 409.
///
/// ```
/// use http::StatusCode;
/// use distlock_core::LockError;
///
/// let busy = LockError::Busy { key: "order:1".into() };
/// assert_eq!(distlock_tower::http_status(&busy), StatusCode::CONFLICT);
/// ```
pub fn http_status(error: &LockError) -> StatusCode {
    Failure::of(error).status()
}

/// The gRPC status code the layer's gRPC flavour answers `error` with:
/// the classes of [`http_status`], as `ABORTED` (busy), `UNAVAILABLE`
/// (backend, lease lost), `INVALID_ARGUMENT` (invalid name) and `INTERNAL`
/// (everything else, including a variant added later that is not
/// [`is_backend`](LockError::is_backend)). As for [`http_status`], the
/// `concurrency_limit` mode's `RESOURCE_EXHAUSTED` is not among them.
///
/// ```
/// use distlock_core::LockError;
///
/// let busy = LockError::Busy { key: "order:1".into() };
/// assert_eq!(distlock_tower::grpc_code(&busy), tonic::Code::Aborted);
/// ```
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub fn grpc_code(error: &LockError) -> tonic::Code {
    tonic::Code::from(Failure::of(error).grpc_code() as i32)
}

/// The status the layer's gRPC flavour answers `error` with: the code of
/// [`grpc_code`] and the layer's message, which names the lock and leaves
/// out a backend error's details (server address, cause), for a handler to
/// return as its `Err`.
///
/// ```
/// use distlock_core::LockError;
///
/// let busy = LockError::Busy { key: "order:1".into() };
/// let status = distlock_tower::grpc_status(&busy);
/// assert_eq!(status.code(), tonic::Code::Aborted);
/// assert!(status.message().contains("order:1"));
/// ```
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
pub fn grpc_status(error: &LockError) -> tonic::Status {
    let failure = Failure::of(error);
    let key = error.key().unwrap_or("*");
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert(
        REASON_METADATA,
        tonic::metadata::MetadataValue::from_static(reason(error, failure)),
    );
    tonic::Status::with_metadata(grpc_code(error), message(key, error, failure), metadata)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock_core::BackendError;

    use super::*;

    /// One error of each variant, with the status and gRPC code it gets.
    fn table() -> Vec<(LockError, StatusCode, u16)> {
        let key = || "order:1".to_owned();
        let server = || "127.0.0.1:1".to_owned();
        vec![
            (LockError::Busy { key: key() }, StatusCode::CONFLICT, 10),
            (
                LockError::TimedOut {
                    key: key(),
                    waited: Duration::from_secs(1),
                },
                StatusCode::CONFLICT,
                10,
            ),
            (
                LockError::LeaseLost {
                    key: key(),
                    reason: "expired",
                },
                StatusCode::SERVICE_UNAVAILABLE,
                14,
            ),
            (
                LockError::NotHeld { key: key() },
                StatusCode::INTERNAL_SERVER_ERROR,
                13,
            ),
            (
                LockError::InvalidKey {
                    key: String::new(),
                    reason: "empty",
                },
                StatusCode::BAD_REQUEST,
                3,
            ),
            (
                LockError::InvalidConfig {
                    key: key(),
                    reason: "zero lease".into(),
                },
                StatusCode::INTERNAL_SERVER_ERROR,
                13,
            ),
            (
                LockError::WrongType {
                    key: key(),
                    redis_key: "lock:{order:1}".into(),
                },
                StatusCode::INTERNAL_SERVER_ERROR,
                13,
            ),
            (
                LockError::ShuttingDown {
                    key: key(),
                    client: "a".into(),
                },
                StatusCode::SERVICE_UNAVAILABLE,
                14,
            ),
            (
                LockError::HeldByOtherClient {
                    key: key(),
                    holder_client: "a".into(),
                    holder: "a:1".into(),
                    client: "b".into(),
                },
                StatusCode::INTERNAL_SERVER_ERROR,
                13,
            ),
            (
                LockError::Backend {
                    key: key(),
                    server: server(),
                    source: BackendError::Timeout(Duration::from_millis(500)),
                },
                StatusCode::SERVICE_UNAVAILABLE,
                14,
            ),
            (
                LockError::QuorumNotReached {
                    key: key(),
                    granted: 1,
                    needed: 2,
                    answers: Vec::new(),
                },
                StatusCode::SERVICE_UNAVAILABLE,
                14,
            ),
            (
                LockError::Connect {
                    server: server(),
                    source: BackendError::Timeout(Duration::from_secs(5)),
                },
                StatusCode::SERVICE_UNAVAILABLE,
                14,
            ),
            (
                LockError::Authentication {
                    server: server(),
                    message: "WRONGPASS".into(),
                },
                StatusCode::SERVICE_UNAVAILABLE,
                14,
            ),
            (
                LockError::UnsupportedServer {
                    server: server(),
                    found: "Redis 6.2.14".into(),
                    needed: "Redis 7.0.0".into(),
                    backend: "the Cluster backend",
                    reason: "sharded pub/sub",
                },
                StatusCode::INTERNAL_SERVER_ERROR,
                13,
            ),
        ]
    }

    #[test]
    fn every_lock_error_has_its_http_status_and_grpc_code() {
        for (error, status, code) in table() {
            assert_eq!(http_status(&error), status, "{error:?}");
            let failure = Failure::of(&error);
            assert_eq!(failure.grpc_code() as u16, code, "{error:?}");
            // Busy answers are contention, nothing else is.
            assert_eq!(
                failure == Failure::Busy,
                matches!(error, LockError::Busy { .. } | LockError::TimedOut { .. }),
                "{error:?}"
            );
        }
    }

    #[test]
    fn a_busy_semaphore_under_a_limit_is_429_and_resource_exhausted() {
        let busy = LockError::Busy { key: "t:1".into() };
        let timed_out = LockError::TimedOut {
            key: "t:1".into(),
            waited: Duration::from_secs(1),
        };
        for error in [&busy, &timed_out] {
            let failure = Failure::of_request(error, Some(2));
            assert_eq!(failure, Failure::Limited { limit: 2 });
            assert_eq!(failure.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(failure.grpc_code() as u16, 8);
            // Without a limit (the modes that lock), busy stays busy.
            assert_eq!(Failure::of_request(error, None), Failure::Busy);
        }
        // Other failures keep their class under a limit.
        let config = LockError::InvalidConfig {
            key: "t:1".into(),
            reason: "a semaphore needs at least one permit, got 0".into(),
        };
        assert_eq!(Failure::of_request(&config, Some(0)), Failure::Internal);
    }

    #[test]
    fn every_failure_has_a_reason_for_machines() {
        let reasons: Vec<&str> = table()
            .iter()
            .map(|(error, _, _)| reason(error, Failure::of(error)))
            .collect();
        assert_eq!(
            reasons,
            [
                "busy",
                "busy",
                "lease-lost",
                "internal",
                "invalid-key",
                "internal",
                "internal",
                "shutting-down",
                "internal",
                "backend-unavailable",
                "backend-unavailable",
                "backend-unavailable",
                "backend-unavailable",
                "internal",
            ]
        );
        let busy = LockError::Busy { key: "t:1".into() };
        assert_eq!(reason(&busy, Failure::of_request(&busy, Some(2))), "limit");
        let missing = LockError::InvalidKey {
            key: "x-order-id metadata of /orders.v1.Orders/Pay".into(),
            reason: MISSING_KEY,
        };
        assert_eq!(reason(&missing, Failure::of(&missing)), "missing-key");
        let text = message(
            "x-order-id metadata of /o.v1.O/Pay",
            &missing,
            Failure::BadKey,
        );
        assert!(text.contains("x-order-id"), "{text}");
    }

    #[cfg(feature = "tonic")]
    #[test]
    fn tonic_codes_match_the_table() {
        for (error, _, code) in table() {
            assert_eq!(grpc_code(&error) as u16, code, "{error:?}");
            let status = grpc_status(&error);
            assert_eq!(status.code() as u16, code);
            let reason_sent = status.metadata().get(REASON_METADATA);
            assert_eq!(
                reason_sent.and_then(|v| v.to_str().ok()),
                Some(reason(&error, Failure::of(&error))),
                "{error:?}"
            );
            assert!(
                !status.message().contains("127.0.0.1"),
                "no server address: {status:?}"
            );
        }
    }
}
