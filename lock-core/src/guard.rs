//! [`LockGuard`]: proof of holding a lock.

use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::Instrument;

use crate::client_core::ClientCore;
use crate::held::HeldLock;
use crate::release;
use crate::scope::Scope;
use crate::LockError;

/// Proof that the current owner holds a lock.
///
/// While the guard lives the lock is held, and in watchdog mode (the
/// default) its lease is renewed every lease/3 by the client's watchdog.
/// [`release`](LockGuard::release) gives it back and says whether mutual
/// exclusion held to the end; dropping the guard releases it in the
/// background (also when the holder panics), so the next waiter gets the
/// lock within a round trip, not after the lease.
///
/// Reentrant holds (the same lock acquired again inside
/// [`scope`](LockGuard::scope)) share one lock in Redis: it is released when
/// the last of their guards is.
pub struct LockGuard {
    core: Arc<ClientCore>,
    lock: Arc<HeldLock>,
    scope: Arc<Scope>,
    done: bool,
    /// The runtime the lock was acquired on, where a guard dropped on a
    /// thread without one releases it.
    runtime: Option<tokio::runtime::Handle>,
}

impl LockGuard {
    pub(crate) fn new(core: Arc<ClientCore>, lock: Arc<HeldLock>, scope: Arc<Scope>) -> Self {
        LockGuard {
            core,
            lock,
            scope,
            done: false,
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// The lock name.
    pub fn key(&self) -> &str {
        &self.lock.key.name
    }

    /// The fencing token of this hold: it strictly increases from one holder
    /// of the lock to the next (and is the same for reentrant holds of one
    /// owner). Pass it with every read and write of the guarded resource,
    /// which refuses a token lower than the highest that has read or written
    /// it, so a holder whose lease ran out while it was paused can neither
    /// overwrite its successor's work nor write from a value its successor
    /// has read too (see `distlock::guide::fencing`).
    pub fn fencing_token(&self) -> u64 {
        self.lock.token
    }

    /// When this lock was granted: the moment the answer that granted it
    /// arrived (for a re-entry, the first grant; for a use of a kept hot
    /// lock, the moment the use began). With [`std::time::Instant::elapsed`]
    /// it tells how long the lock has been held; a
    /// [`MultiLock`](crate::MultiLock)'s guards tell when each of its locks
    /// was taken.
    pub fn acquired_at(&self) -> std::time::Instant {
        self.lock.granted.into_std()
    }

    /// The owner id this lock is held under (`<client-id>:<scope>`).
    pub fn owner(&self) -> &str {
        &self.lock.owner
    }

    /// Confirms, inside the caller's transaction `tx` on the lock's own
    /// PostgreSQL database (feature `postgres`), that this guard still
    /// holds its lock by the server's clock, and keeps the lock's row locked
    /// (`FOR SHARE`) until `tx` commits or rolls back.
    ///
    /// What that buys, beyond a fencing token: the writes `tx` makes after
    /// this call commit only if no other owner could take the lock first.
    /// Another client's acquisition (even of a lease that has expired
    /// meanwhile) waits on the row until `tx` ends, and a release or a lease
    /// lost before this call fails it. The rows need no fence column, and
    /// a holder paused past its lease cannot write: one database, one
    /// commit. Keep such transactions short: while `tx` is open, the lock
    /// cannot change hands, and other clients' statements on it wait (each
    /// up to its response timeout, then it tries again).
    ///
    /// Fails with [`LockError::LeaseLost`] when the lock is no longer
    /// held by this guard's owner with this guard's token (`tx` should then
    /// roll back), [`LockError::Unsupported`] when the client's backend is
    /// not PostgreSQL, and [`LockError::Backend`] when the statement fails.
    ///
    /// ```no_run
    /// # async fn demo(
    /// #     client: distlock_core::LockClient,
    /// #     db: &mut tokio_postgres::Client,
    /// # ) -> Result<(), Box<dyn std::error::Error>> {
    /// let guard = client.lock("order:42").acquire().await?;
    /// let tx = db.transaction().await?;
    /// guard.hold_in(&tx).await?; // the lock is ours until the commit
    /// tx.execute("UPDATE orders SET state = 'paid' WHERE id = 42", &[]).await?;
    /// tx.commit().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// One statement in `tx`: dropped, `tx` decides (its row lock, if taken,
    /// ends with it). The lock itself is not touched.
    #[cfg(feature = "postgres")]
    pub async fn hold_in<C>(&self, tx: &C) -> Result<(), LockError>
    where
        C: tokio_postgres::GenericClient + Sync,
    {
        self.lock.hold_in(tx).await
    }

    /// Whether the lock is still held: no loss detected and the lease known to
    /// run on the local clock.
    pub fn is_held(&self) -> bool {
        // Also restarts renewals whose runtime has gone (cheap when running).
        self.core.ensure_background();
        self.lock.is_held()
    }

    /// How many guards hold this lock in its owner's scope (1 unless reentered).
    pub fn hold_count(&self) -> usize {
        self.lock.holds.load(Ordering::Acquire)
    }

    /// Resolves when the lease is lost: the watchdog found the lock deleted or
    /// taken over, the lease ran out on the local clock before a renewal
    /// (or, with a fixed lease, at all), or the client's
    /// [`shutdown`](crate::LockClient::shutdown) took the lock at the end of
    /// its grace period. It fires by that local deadline
    /// even while a renewal is still in flight (a server that hangs). Use it to stop work that must not outlive the
    /// lock, e.g. in a `tokio::select!` next to the work.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes the guard.
    pub async fn lost(&self) {
        // The watchdog's driver may have gone with its runtime: this restarts it.
        self.core.ensure_background();
        self.lock.lost().await
    }

    /// Runs `fut` inside this guard's ownership scope: acquisitions of this
    /// lock inside it are reentrant (counted in the client, no round trip),
    /// and other locks taken inside it belong to the same owner. The
    /// `#[distributed_lock]` attribute wraps the function body in this.
    ///
    /// Inside, [`current`](crate::current) returns this lock.
    ///
    /// # Re-entry and concurrent branches
    /// A lock is re-entered only by code that runs inside the scope of a
    /// guard holding it, on the same call stack: `fut` itself and what it
    /// awaits. Branches that `fut` polls concurrently (`join!`, `select!`,
    /// `FuturesUnordered`) re-enter this lock and the locks of the scopes
    /// around it, but a lock one branch takes itself is that branch's: a
    /// sibling branch asking for it is another owner and waits for it, as a
    /// spawned task does. So `join!(pay(1), pay(1))` inside a locked body,
    /// with `pay` annotated with `key = "order:{id}"`, runs the two calls one
    /// after the other. A guard held without entering its scope is not
    /// re-entered: acquiring its lock again waits for it (wrap the code that
    /// needs re-entry in `guard.scope(..)`).
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        let frame = (self.lock.clone(), self.scope.clone());
        let store = self.core.store.clone();
        let span = self.lock.span().clone();
        async move {
            let frame = crate::current::enter(&store, [frame]);
            crate::current::run(frame, fut).await
        }
        .instrument(span)
    }

    /// The lock's `lock_hold` [tracing span](tracing::Span) (fields `key`,
    /// `kind`, `owner`, `token`), open from the grant until the lock is
    /// released or its last guard dropped. [`scope`](LockGuard::scope),
    /// [`in_scope`](LockGuard::in_scope) and the `#[distributed_lock]`
    /// attribute run their body in it; other work can enter it with
    /// `.instrument(guard.span().clone())`.
    pub fn span(&self) -> &tracing::Span {
        self.lock.span()
    }

    /// Runs `fut` in this guard's [`scope`](LockGuard::scope) unless the
    /// lease is lost first: then `fut` is dropped (cancelled at its current
    /// `.await`) and [`LockError::LeaseLost`] returned.
    ///
    /// # Cancel safety
    /// Cancel safe as far as the lock goes (the guard is untouched); `fut`
    /// is dropped with it.
    pub async fn scope_or_lost<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        tokio::select! {
            biased;
            output = self.scope(fut) => Ok(output),
            () = self.lost() => Err(self.lost_reason()),
        }
    }

    /// The error for a lost lease (also when called a little early).
    pub(crate) fn lost_reason(&self) -> LockError {
        self.lock
            .lost_error()
            .unwrap_or_else(|| LockError::LeaseLost {
                key: self.key().to_owned(),
                reason: "the lease ran out",
            })
    }

    pub(crate) fn held(&self) -> &Arc<HeldLock> {
        &self.lock
    }

    /// The identity of the store the lock lives in.
    pub(crate) fn store(&self) -> &Arc<str> {
        &self.core.store
    }

    pub(crate) fn owner_scope(&self) -> &Arc<Scope> {
        &self.scope
    }

    /// Runs the closure `f` inside this guard's ownership scope, as
    /// [`scope`](LockGuard::scope) does for a future (so
    /// [`current`](crate::current) returns this lock in it). For
    /// hand-written futures that poll an inner future and cannot wrap it:
    /// call this around each poll.
    pub fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        let frame =
            crate::current::enter(&self.core.store, [(self.lock.clone(), self.scope.clone())]);
        let _entered = self.lock.span().enter();
        crate::current::run_sync(frame, f)
    }

    /// Releases the lock (for a reentrant hold: drops one hold; the lock is
    /// released with the last).
    ///
    /// Returns [`LockError::LeaseLost`] when the lease was lost while the
    /// guard lived (also when the client's
    /// [`shutdown`](crate::LockClient::shutdown) took the lock at the end of
    /// its grace period) and [`LockError::NotHeld`] when the server no longer
    /// had the lock under this owner; in both cases mutual exclusion may have
    /// been broken and nothing of another owner was deleted. On a backend error the
    /// release is retried in the background until the lease would expire.
    ///
    /// # Cancel safety
    /// Cancel safe: once called, the release completes in the background when
    /// the future is dropped.
    pub async fn release(mut self) -> Result<(), LockError> {
        self.done = true;
        let lock = self.lock.clone();
        if !self.scope.drop_hold(&lock) {
            return lock.lost_error().map_or(Ok(()), Err);
        }
        if lock.is_surrendered() {
            // The client's shutdown took the lock at the end of its grace
            // period and gives it back itself.
            return Err(self.lost_reason());
        }
        // Dropping this future half way finishes the release in the
        // background (no task per release on the normal path).
        let mut unfinished = UnfinishedRelease(Some((self.core.clone(), lock.clone())));
        let result = release::release_last(&self.core, &lock, false).await;
        unfinished.0 = None;
        if matches!(result, Err(LockError::Backend { .. })) {
            // The request may have been executed without an answer.
            release::release_in_background(&self.core, lock, true);
        }
        result
    }
}

/// A release whose future was dropped before its answer: sent again in the
/// background (harmless when the first one went through).
struct UnfinishedRelease(Option<(Arc<ClientCore>, Arc<HeldLock>)>);

impl Drop for UnfinishedRelease {
    fn drop(&mut self) {
        if let Some((core, lock)) = self.0.take() {
            release::release_in_background(&core, lock, true);
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done || !self.scope.drop_hold(&self.lock) {
            return;
        }
        // `release_last` stops the renewals first. Dropped on a thread
        // without a runtime (a `std::thread`, a rayon pool), the release runs
        // on the runtime the lock was acquired on; where that one has shut
        // down, it waits for the next runtime the client is used on.
        let _entered = match (tokio::runtime::Handle::try_current(), &self.runtime) {
            (Err(_), Some(runtime)) => Some(runtime.enter()),
            _ => None,
        };
        release::release_in_background(&self.core, self.lock.clone(), false);
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key())
            .field("owner", &self.owner())
            .field("fencing_token", &self.fencing_token())
            .field("held", &self.is_held())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tracing::Span;

    use crate::{LockClient, MemoryStore};

    fn current_span_name() -> Option<&'static str> {
        Span::current().metadata().map(|meta| meta.name())
    }

    /// Every waiter of the process carries its acquire future: it keeps
    /// the acquisition's arguments once (no `async fn` that copies them
    /// into its body) and holds one span.
    #[test]
    fn a_waiting_acquire_future_stays_small() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = runtime.enter();
        let client = LockClient::builder()
            .lease(Duration::from_secs(5))
            .memory(MemoryStore::new())
            .unwrap();
        let future = client.lock("sized").wait(Duration::from_secs(1)).acquire();
        let size = std::mem::size_of_val(&future);
        eprintln!("acquire future: {size} bytes");
        // With rustc 1.95: 1,160 bytes for this crate alone, 1,216 with the
        // features the workspace's tests unify (`cargo test --workspace`);
        // 1,560 and more with `async fn`s that copied their arguments, a
        // cloned span, the family's wait inline, the options copied and an
        // attempt's answer kept across a retry's sleep. The bound leaves a
        // little room for another compiler's layout.
        assert!(size <= 1_300, "the acquire future is {size} bytes");
    }

    #[test]
    fn scope_and_in_scope_run_in_the_lock_hold_span() {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            // A callsite first met by another test thread while no
            // subscriber was set can keep "never" as its cached interest
            // (this test failed so once in about four runs).
            tracing::callsite::rebuild_interest_cache();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let client = LockClient::builder()
                    .lease(Duration::from_secs(5))
                    .memory(MemoryStore::new())
                    .unwrap();
                let guard = client.lock("spanned").acquire().await.unwrap();
                assert_eq!(guard.span().metadata().map(|m| m.name()), Some("lock_hold"));
                assert_eq!(current_span_name(), None);
                let inside = guard.scope(async { current_span_name() }).await;
                assert_eq!(inside, Some("lock_hold"));
                assert_eq!(guard.in_scope(current_span_name), Some("lock_hold"));
                guard.release().await.unwrap();
            });
        });
    }

    /// A guard dropped on a thread without a runtime (a `std::thread`, a
    /// rayon pool) is released at once on the runtime it was acquired on,
    /// not at the next use of the client or the end of its lease; one
    /// dropped after that runtime shut down is released on the next one the
    /// client is used on, without a panic.
    #[test]
    fn a_guard_dropped_on_a_thread_without_a_runtime_is_released_at_once() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store = MemoryStore::new();
        let client = LockClient::builder().memory(store.clone()).unwrap();
        let guard = runtime.block_on(client.lock("x").acquire()).unwrap();
        std::thread::spawn(move || drop(guard)).join().unwrap();
        // "At once": well within the 30 s lease (1 s was not always enough
        // on a busy machine); nothing else would release it before then.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.held() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the dropped guard's lock is still held"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // Its runtime gone: nothing panics, and the next runtime releases it.
        let guard = runtime.block_on(client.lock("y").acquire()).unwrap();
        drop(runtime);
        std::thread::spawn(move || drop(guard)).join().unwrap();
        let next = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        next.block_on(async {
            let other = client.lock("z").acquire().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(store.held(), 1, "only z is held");
            other.release().await.unwrap();
        });
    }
}
