//! The plain tower flavour ([`Plain`]): a request that did not get its lock
//! fails with the [`LockError`], converted into the service's error.

use distlock_core::{LockError, LockGuard};

use crate::flavour::{sealed, Flavour};
use crate::status::Failure;

/// The plain flavour of [`LockLayer`](crate::LockLayer), made by
/// [`LockLayer::plain`](crate::LockLayer::plain), for services that are not
/// HTTP (a job runner, a message consumer).
///
/// The request type is anything the key extractor accepts; the inner
/// service's error type must implement `From<LockError>` (as
/// `tower::BoxError` does), and a request that did not get its lock fails
/// with that conversion of the [`LockError`]
/// (`Busy`, `TimedOut`, `Backend`, ...). The lock is held until the inner
/// future completes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Plain;

impl sealed::Sealed for Plain {}

impl<R, T, E: From<LockError>> Flavour<R, T, E> for Plain {
    type Response = T;

    fn prepare(&self, _: &mut R, _: &LockGuard) {}

    /// Never: there is no body to hold the lock to the end of.
    fn hands_over(&self) -> bool {
        false
    }

    fn respond(&self, response: T, _: Option<u64>, _: Option<LockGuard>) -> T {
        response
    }

    fn reject(&self, error: LockError, _: Failure) -> Result<T, E> {
        Err(error.into())
    }
}
