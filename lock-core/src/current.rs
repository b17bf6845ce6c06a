//! The locks the current async call chain runs under: [`current`] and
//! [`current_all`], for code inside [`LockGuard::scope`](crate::LockGuard::scope)
//! (and so inside a `#[distributed_lock]` function body); and, for the
//! client, which locks an acquisition may re-enter (those on this stack of
//! scopes, and no others) and which owner takes a new one.

use std::fmt;
use std::sync::Arc;

use crate::held::HeldLock;
use crate::scope::Scope;

tokio::task_local! {
    static CURRENT: Arc<Frame>;
}

/// One entered lock, linked to the locks entered around it. The frames are
/// the locks whose scope the code being polled runs in: a lock is
/// re-entered only through them, so a sibling future (polled by a `join!`
/// in the scope, not by the lock's scope) never re-enters another
/// sibling's lock.
#[derive(Debug)]
pub(crate) struct Frame {
    lock: Arc<HeldLock>,
    /// The owner the lock is held by (the guard's scope).
    scope: Arc<Scope>,
    /// The identity of the store the lock lives in (`ClientCore::store`).
    store: Arc<str>,
    parent: Option<Arc<Frame>>,
}

impl Frame {
    /// This frame and the frames around it, innermost first.
    fn chain(&self) -> impl Iterator<Item = &Frame> {
        std::iter::successors(Some(self), |frame| frame.parent.as_deref())
    }

    /// Whether `scope` is a scope of the client `client_id`.
    fn of_client(&self, client_id: &str) -> bool {
        self.scope.client_id() == client_id
    }
}

/// The frame chain of the running task with `locks` (each with the scope
/// that holds it, of the store `store`) entered on top of it.
pub(crate) fn enter(
    store: &Arc<str>,
    locks: impl IntoIterator<Item = (Arc<HeldLock>, Arc<Scope>)>,
) -> Option<Arc<Frame>> {
    let mut frame = stack();
    for (lock, scope) in locks {
        frame = Some(Arc::new(Frame {
            lock,
            scope,
            store: store.clone(),
            parent: frame,
        }));
    }
    frame
}

/// The innermost frame of the code being polled, if it runs in any lock's
/// scope.
pub(crate) fn stack() -> Option<Arc<Frame>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// Re-enters the lock known as `id` of client `client_id` when a frame on
/// `stack` holds it: adds a hold to it and returns it with its scope.
pub(crate) fn reenter(
    stack: &Frame,
    client_id: &str,
    id: &str,
) -> Option<(Arc<HeldLock>, Arc<Scope>)> {
    stack
        .chain()
        .filter(|f| **f.lock.key.id() == *id && f.of_client(client_id))
        .find(|f| f.scope.reenter(&f.lock))
        .map(|f| (f.lock.clone(), f.scope.clone()))
}

/// Whether a frame on `stack` holds the lock known as `id` of client
/// `client_id` (a hold not dropped yet).
pub(crate) fn holds(stack: &Frame, client_id: &str, id: &str) -> bool {
    stack.chain().any(|f| {
        **f.lock.key.id() == *id
            && f.of_client(client_id)
            && f.lock.holds.load(std::sync::atomic::Ordering::Acquire) > 0
    })
}

/// Whether `lock` is held by a frame on `stack`.
pub(crate) fn on_stack(stack: Option<&Frame>, lock: &HeldLock) -> bool {
    stack.is_some_and(|stack| stack.chain().any(|f| std::ptr::eq(&*f.lock, lock)))
}

/// The scope an acquisition of a primitive with the stem `stem` through
/// client `client_id` takes it in, when the code being polled runs in a
/// scope of that client: the scope of a frame holding another kind of
/// the primitive (a read asked for inside the write lock's scope is taken
/// by the writer's owner), else the innermost frame's scope.
pub(crate) fn scope_for(stack: &Frame, client_id: &str, stem: &str) -> Option<Arc<Scope>> {
    let family = stack.chain().find(|f| {
        **f.lock.key.stem() == *stem
            && f.of_client(client_id)
            && f.lock.holds.load(std::sync::atomic::Ordering::Acquire) > 0
    });
    match family {
        Some(f) => Some(f.scope.clone()),
        None => stack.of_client(client_id).then(|| stack.scope.clone()),
    }
}

/// A lock of the current call chain that is a hold of the primitive whose
/// keys have the stem `stem` in `store` (any kind of it: a plain or fair
/// lock, a read or the write of a read-write lock, permits) and still held,
/// under an owner of another client than `client_id`: acquiring the
/// primitive through `client_id` would wait on itself.
pub(crate) fn held_by_other_client(
    stack: Option<&Frame>,
    store: &str,
    stem: &str,
    client_id: &str,
) -> Option<Arc<HeldLock>> {
    stack?
        .chain()
        .find(|f| {
            let lock = &f.lock;
            let other_client = lock
                .owner
                .strip_prefix(client_id)
                .is_none_or(|rest| !rest.starts_with(':'));
            &*f.store == store && &**lock.key.stem() == stem && other_client && lock.is_held()
        })
        .map(|f| f.lock.clone())
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

    /// Confirms the hold inside the caller's transaction `tx` on the lock's
    /// PostgreSQL database and keeps the lock from changing hands until `tx`
    /// ends (feature `postgres`): what
    /// [`LockGuard::hold_in`](crate::LockGuard) does, from inside a
    /// `#[distributed_lock]` function, where the guard is the attribute's.
    ///
    /// # Cancel safety
    /// One statement in `tx`: dropped, `tx` decides.
    #[cfg(feature = "postgres")]
    pub async fn hold_in<C>(&self, tx: &C) -> Result<(), crate::LockError>
    where
        C: tokio_postgres::GenericClient + Sync,
    {
        self.lock.hold_in(tx).await
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
    let stack = stack();
    let chain = stack.iter().flat_map(|frame| frame.chain());
    chain
        .map(|f| CurrentLock {
            lock: f.lock.clone(),
        })
        .collect()
}
