//! The plain tower flavour ([`Plain`]): the lock error is the service error.

/// The plain flavour of [`LockLayer`](crate::LockLayer), made by
/// [`LockLayer::plain`](crate::LockLayer::plain), for services that are not
/// HTTP (a job runner, a message consumer).
///
/// The request type is anything the key extractor accepts; the inner
/// service's error type must implement `From<LockError>` (as
/// `tower::BoxError` does), and a request that did not get its lock fails
/// with that conversion of the [`LockError`](distlock_core::LockError)
/// (`Busy`, `TimedOut`, `Backend`, ...). The lock is held until the inner
/// future completes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Plain;
