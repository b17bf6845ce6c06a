//! The locks the current async call chain runs under: [`current`] and
//! [`current_all`], for code inside [`LockGuard::scope`](crate::LockGuard::scope)
//! (and so inside a `#[distributed_lock]` function body).

use std::fmt;
use std::sync::Arc;

use crate::held::HeldLock;

tokio::task_local! {
    static CURRENT: Arc<Frame>;
}

/// One entered lock, linked to the locks entered around it.
#[derive(Debug)]
pub(crate) struct Frame {
    lock: Arc<HeldLock>,
    /// The identity of the store the lock lives in (`ClientCore::store`).
    store: Arc<str>,
    parent: Option<Arc<Frame>>,
}

/// The frame chain of the running task with `locks` (of the store `store`)
/// entered on top of it.
pub(crate) fn enter(
    store: &Arc<str>,
    locks: impl IntoIterator<Item = Arc<HeldLock>>,
) -> Option<Arc<Frame>> {
    let mut frame = CURRENT.try_with(Arc::clone).ok();
    for lock in locks {
        frame = Some(Arc::new(Frame {
            lock,
            store: store.clone(),
            parent: frame,
        }));
    }
    frame
}

/// A lock of the current call chain that is a hold of the primitive whose
/// keys have the stem `stem` in `store` (any kind of it: a plain or fair
/// lock, a read or the write of a read-write lock, permits) and still held,
/// under an owner of another client than `client_id`: acquiring the
/// primitive through `client_id` would wait on itself.
pub(crate) fn held_by_other_client(
    store: &str,
    stem: &str,
    client_id: &str,
) -> Option<Arc<HeldLock>> {
    let mut frame = CURRENT.try_with(Arc::clone).ok();
    while let Some(f) = frame {
        let lock = &f.lock;
        let other_client = lock
            .owner
            .strip_prefix(client_id)
            .is_none_or(|rest| !rest.starts_with(':'));
        if &*f.store == store && &**lock.key.stem() == stem && other_client && lock.is_held() {
            return Some(lock.clone());
        }
        frame = f.parent.clone();
    }
    None
}

/// Runs `fut` with `frame` as the current lock chain.
pub(crate) async fn run<F: std::future::Future>(frame: Option<Arc<Frame>>, fut: F) -> F::Output {
    match frame {
        Some(frame) => CURRENT.scope(frame, fut).await,
        None => fut.await,
    }
}

/// Runs `f` with `frame` as the current lock chain.
pub(crate) fn run_sync<T>(frame: Option<Arc<Frame>>, f: impl FnOnce() -> T) -> T {
    match frame {
        Some(frame) => CURRENT.sync_scope(frame, f),
        None => f(),
    }
}

/// A lock the current call chain runs under, as seen from inside it.
///
/// Obtained from [`current`] or [`current_all`]; it reads the hold that the
/// enclosing [`LockGuard`](crate::LockGuard) owns, so it is cheap to clone and
/// never releases anything.
#[derive(Clone)]
pub struct CurrentLock {
    lock: Arc<HeldLock>,
}

impl CurrentLock {
    /// The lock name.
    pub fn key(&self) -> &str {
        &self.lock.key.name
    }

    /// The fencing token of the hold (see
    /// [`LockGuard::fencing_token`](crate::LockGuard::fencing_token)).
    pub fn fencing_token(&self) -> u64 {
        self.lock.token
    }

    /// The owner id the lock is held under.
    pub fn owner(&self) -> &str {
        &self.lock.owner
    }

    /// Whether the lock is still held (no loss detected, lease running).
    pub fn is_held(&self) -> bool {
        self.lock.is_held()
    }
}

impl fmt::Debug for CurrentLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CurrentLock")
            .field("key", &self.key())
            .field("fencing_token", &self.fencing_token())
            .field("held", &self.is_held())
            .finish()
    }
}

/// The innermost lock the current call chain runs under: inside a
/// `#[distributed_lock]` body, the lock that function took (with several
/// keys, the last in acquisition order; see [`current_all`]). `None` outside
/// any [`LockGuard::scope`](crate::LockGuard::scope).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::LockError> {
/// let client = distlock_core::LockClient::memory();
/// let guard = client.lock("order:42").acquire().await?;
/// let token = guard
///     .scope(async { distlock_core::current().map(|lock| lock.fencing_token()) })
///     .await;
/// assert_eq!(token, Some(guard.fencing_token()));
/// assert!(distlock_core::current().is_none());
/// # guard.release().await }
/// ```
pub fn current() -> Option<CurrentLock> {
    CURRENT
        .try_with(|frame| CurrentLock {
            lock: frame.lock.clone(),
        })
        .ok()
}

/// Every lock the current call chain runs under, innermost first (a lock
/// re-entered by a nested scope appears once per entry).
pub fn current_all() -> Vec<CurrentLock> {
    let mut locks = Vec::new();
    let mut frame = CURRENT.try_with(Arc::clone).ok();
    while let Some(f) = frame {
        locks.push(CurrentLock {
            lock: f.lock.clone(),
        });
        frame = f.parent.clone();
    }
    locks
}
