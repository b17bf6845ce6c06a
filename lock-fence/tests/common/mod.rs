//! The interleaving of the workspace's `tests/fencing.rs`, for the fences of
//! this crate: two replicas reserve one unit of stock each under the same
//! lock; A reads, A's lock is force-released, B takes the lock and reads, A
//! writes, B writes. A fence with claim-on-read refuses A's write; a
//! write-only check accepts both writes and loses an update.
#![allow(dead_code)] // each test file uses part of it

use std::future::Future;
use std::pin::Pin;

use distlock_core::{LockClient, LockError};
use distlock_fence::FenceError;

/// A boxed future, for the object-safe [`Store`].
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The stock of one SKU, read and written with a fencing token.
pub trait Store: Sync {
    /// Sets the stock to `qty`, unfenced, with every fence reset.
    fn reset(&self, qty: i64) -> Fut<'_, ()>;
    /// A fenced read of the stock.
    fn read(&self, token: u64) -> Fut<'_, Result<i64, FenceError>>;
    /// A fenced write of the stock.
    fn write(&self, token: u64, qty: i64) -> Fut<'_, Result<(), FenceError>>;
    /// The stock now, unfenced.
    fn stock(&self) -> Fut<'_, i64>;
}

/// The lock both replicas take.
pub const SKU: &str = "sku:4";

/// What each replica's reservation came to.
#[derive(Debug)]
pub struct Outcome {
    pub a_reserved: bool,
    pub b_reserved: bool,
    /// A's refusal, if it was refused.
    pub a_refusal: Option<String>,
    pub stock: i64,
}

/// Runs the interleaving with real locks of `a` and `b` and an operator `op`.
pub async fn interleave(
    a: &LockClient,
    b: &LockClient,
    op: &LockClient,
    store: &dyn Store,
) -> Outcome {
    store.reset(300).await;
    let lock_a = a.lock(SKU).acquire().await.unwrap();
    let read_a = store.read(lock_a.fencing_token()).await;
    // A's lock is taken away (an operator, or A paused past its lease).
    assert!(op.admin().force_release(SKU).await.unwrap());
    let lock_b = b.lock(SKU).acquire().await.unwrap();
    assert!(lock_b.fencing_token() > lock_a.fencing_token());
    let read_b = store.read(lock_b.fencing_token()).await;
    // A, unaware, writes first; then B.
    let (a_reserved, a_refusal) = match read_a {
        Ok(qty) => match store.write(lock_a.fencing_token(), qty - 1).await {
            Ok(()) => (true, None),
            Err(error) => {
                assert!(error.is_stale(), "A refused for another reason: {error}");
                (false, Some(error.to_string()))
            }
        },
        Err(error) => panic!("A's read came before B's and must pass: {error}"),
    };
    let b_reserved = match read_b {
        Ok(qty) => store.write(lock_b.fencing_token(), qty - 1).await.is_ok(),
        Err(error) => panic!("B holds the newest token: {error}"),
    };
    lock_b.release().await.unwrap();
    assert!(matches!(
        lock_a.release().await,
        Err(LockError::LeaseLost { .. } | LockError::NotHeld { .. })
    ));
    Outcome {
        a_reserved,
        b_reserved,
        a_refusal,
        stock: store.stock().await,
    }
}

/// Every reservation answered "done" took one unit; A refused, B accepted.
pub fn assert_no_lost_update(outcome: &Outcome) {
    let reserved = i64::from(outcome.a_reserved) + i64::from(outcome.b_reserved);
    assert_eq!(
        300 - outcome.stock,
        reserved,
        "{outcome:?}: a reservation answered as done is missing from the stock"
    );
    assert!(
        !outcome.a_reserved,
        "{outcome:?}: the stale holder's write was accepted"
    );
    assert!(
        outcome.b_reserved,
        "{outcome:?}: the valid holder was refused"
    );
}

/// The check is able to fail: on a write-only store the interleaving
/// accepts both writes, stock down by one, and `assert_no_lost_update`
/// catches it.
pub fn assert_lost_update_caught(outcome: &Outcome) {
    assert!(outcome.a_reserved && outcome.b_reserved, "{outcome:?}");
    assert_eq!(outcome.stock, 299, "{outcome:?}");
    let checked = std::panic::catch_unwind(|| assert_no_lost_update(outcome));
    assert!(checked.is_err(), "the check must catch the lost update");
}

/// Three lock clients (A, B, an operator) on the Redis at `url`.
pub async fn redis_locks(url: &str) -> [LockClient; 3] {
    [
        LockClient::connect(url).await.unwrap(),
        LockClient::connect(url).await.unwrap(),
        LockClient::connect(url).await.unwrap(),
    ]
}
