//! [`FenceStore`]: where a [`FenceLayer`](crate::FenceLayer) (or any other
//! check) keeps the highest token per key.

use std::future::Future;
use std::pin::Pin;

use crate::error::FenceError;
use crate::memory::MemoryFence;
use crate::redis_fence::RedisFence;

/// The future of [`FenceStore::claim`].
pub type Claim<'a> = Pin<Box<dyn Future<Output = Result<(), FenceError>> + Send + 'a>>;

/// A store of claim-on-read fences by key: [`MemoryFence`] (one process),
/// [`RedisFence`] (the key's own fence, so a service's fenced writes through
/// the same `RedisFence` share it) and, with the `postgres` feature,
/// `PgFenceStore`.
pub trait FenceStore: Send + Sync + 'static {
    /// Claims `key` for `token`: [`FenceError::Stale`] when a higher token
    /// has claimed it, else records `token` as the highest seen.
    ///
    /// # Cancel safety
    /// A claim is one atomic step of the store: dropped, it has happened in
    /// full or not at all, and a claim that happened only raises the fence
    /// with the caller's token.
    fn claim<'a>(&'a self, key: &'a str, token: u64) -> Claim<'a>;
}

impl FenceStore for MemoryFence {
    fn claim<'a>(&'a self, key: &'a str, token: u64) -> Claim<'a> {
        let claimed = MemoryFence::claim(self, key, token);
        Box::pin(async move { claimed })
    }
}

impl<C> FenceStore for RedisFence<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn claim<'a>(&'a self, key: &'a str, token: u64) -> Claim<'a> {
        Box::pin(self.check(key, token))
    }
}

#[cfg(feature = "postgres")]
impl<C> FenceStore for crate::pg::PgFenceStore<C>
where
    C: tokio_postgres::GenericClient + Send + Sync + 'static,
{
    fn claim<'a>(&'a self, key: &'a str, token: u64) -> Claim<'a> {
        Box::pin(crate::pg::PgFenceStore::claim(self, key, token))
    }
}
