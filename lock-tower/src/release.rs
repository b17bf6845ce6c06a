//! Releasing a request's guard: the boxed release future the response future
//! and the response body poll, and the log line of a lock lost before its
//! release.

use std::future::Future;
use std::pin::Pin;

use distlock_core::{LockError, LockGuard};

/// A release in progress.
pub(crate) type Release = Pin<Box<dyn Future<Output = Result<(), LockError>> + Send>>;

/// Starts releasing `guard`; the release finishes in the background if the
/// future is dropped.
pub(crate) fn release(guard: LockGuard) -> Release {
    Box::pin(guard.release())
}

/// Logs a release that found the lock lost: the request's work may have
/// overlapped another holder's.
pub(crate) fn log_release(key: &str, result: Result<(), LockError>) {
    if let Err(error) = result {
        tracing::warn!(key, error = %error, "a request finished after its lock was lost");
    }
}
