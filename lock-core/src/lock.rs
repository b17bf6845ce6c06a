//! [`Lock`]: one lock's settings, to acquire.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::{self, Acquired};
use crate::client_core::ClientCore;
use crate::name::Kind;
use crate::options::{LockOptions, Wait};
use crate::{LockError, LockGuard};

/// A lock to acquire: its name, how long to wait and which lease to use.
///
/// Made by [`LockClient::lock`](crate::LockClient::lock), and for the rest of
/// the lock family by [`LockClient::fair_lock`](crate::LockClient::fair_lock),
/// [`ReadWriteLock::read`](crate::ReadWriteLock::read) /
/// [`write`](crate::ReadWriteLock::write) and
/// [`Semaphore::permits`](crate::Semaphore::permits). By default it tries
/// once (no waiting) and runs in watchdog mode (the client's lease, renewed
/// while the guard lives).
///
/// ```no_run
/// # async fn demo(client: distlock_core::LockClient) -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// let guard = client
///     .lock("account:7")
///     .wait(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// # Ok(()) }
/// ```
#[must_use = "a Lock does nothing until acquired"]
pub struct Lock {
    core: Arc<ClientCore>,
    name: String,
    kind: Kind,
    options: LockOptions,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("kind", &self.kind.describe())
            .field("wait", &self.options.wait_for())
            .field("lease", &self.options.fixed_lease())
            .field("hold_at_least", &self.options.min_hold())
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(core: Arc<ClientCore>, name: String) -> Self {
        Self::of_kind(core, name, Kind::Exclusive)
    }

    pub(crate) fn of_kind(core: Arc<ClientCore>, name: String, kind: Kind) -> Self {
        Lock {
            core,
            name,
            kind,
            options: LockOptions::new(),
        }
    }

    /// Waits up to `wait` for a busy lock (woken by the holder's release, not
    /// by polling). `Duration::ZERO` tries once, the default. A wait too long
    /// for the clock to represent (such as `Duration::MAX`) waits as long as
    /// it takes, as [`wait_forever`](Lock::wait_forever) does.
    /// A [`Wait`] is taken as well: `lock.wait(Wait::Forever)`.
    pub fn wait(mut self, wait: impl Into<Wait>) -> Self {
        self.options = self.options.wait(wait);
        self
    }

    /// Waits for as long as it takes.
    pub fn wait_forever(mut self) -> Self {
        self.options = self.options.wait_forever();
        self
    }

    /// Takes every option from `options` (wait, lease, minimum hold),
    /// replacing what was set before: one [`LockOptions`] value configures
    /// locks wherever they are taken.
    pub fn options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// A fixed lease: the lock expires `lease` after acquisition and is not
    /// renewed. Without it the lock is in watchdog mode. It must be between
    /// [`MIN_LEASE`](crate::MIN_LEASE) (10 ms) and
    /// [`MAX_LEASE`](crate::MAX_LEASE) (365 days); `acquire` refuses any
    /// other with [`LockError::InvalidConfig`] naming the lock and the value.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.options = self.options.lease(lease);
        self
    }

    /// Keeps the lock held at least `at_least` after it was acquired, even
    /// when it is released earlier: ShedLock's `lockAtLeastFor`, for
    /// scheduled jobs whose replicas fire a little apart (clock skew, timer
    /// jitter). A release before then does not delete the lock: it cuts its
    /// lease to what is left, so it expires at that moment and no other
    /// replica runs the same round meanwhile (the fixed
    /// [`lease`](Lock::lease) plays `lockAtMostFor`). The client's
    /// [`shutdown`](crate::LockClient::shutdown) keeps it too. Only the
    /// outermost hold counts; `Duration::ZERO` is no minimum. With a fixed
    /// lease it must not exceed that lease, and never [`MAX_LEASE`](crate::MAX_LEASE):
    /// `acquire` refuses either with [`LockError::InvalidConfig`].
    pub fn hold_at_least(mut self, at_least: Duration) -> Self {
        self.options = self.options.hold_at_least(at_least);
        self
    }

    /// Acquires the lock, waiting as configured.
    ///
    /// Errors: [`LockError::Busy`] when it is held and no wait was asked for,
    /// [`LockError::TimedOut`] after the wait, [`LockError::InvalidKey`] /
    /// [`LockError::InvalidConfig`] for a bad name or lease,
    /// [`LockError::WrongType`] when its Redis key holds something else,
    /// [`LockError::Backend`] when Redis fails or does not answer in time, and
    /// [`LockError::ShuttingDown`] once the client's
    /// [`shutdown`](crate::LockClient::shutdown) has begun (also for a wait
    /// under way then). For the lock family also:
    /// [`LockError::UpgradeRefused`] for a write lock asked for by a call
    /// chain that holds the read lock, [`LockError::Unsupported`] on Redlock,
    /// and [`LockError::InvalidConfig`] for a semaphore asked for no permits
    /// or more than it has.
    ///
    /// Inside the [`scope`](LockGuard::scope) of a guard of this client, the
    /// lock is acquired as that guard's owner: a lock whose scope the caller
    /// runs in is re-entered at no cost (for a semaphore: without taking more
    /// permits). A lock that a concurrently polled sibling branch holds or
    /// is acquiring is not: this acquisition is then another owner and waits
    /// for it (see [`LockGuard::scope`]).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future at any point leaves the lock not held
    /// by this caller. A grant that the server made for a request whose
    /// answer was never read is taken back in the background, and so is a
    /// place in a fair lock's queue or a waiting writer's intent.
    #[allow(clippy::manual_async_fn)] // on purpose: see the comment inside
    pub fn acquire(self) -> impl Future<Output = Result<LockGuard, LockError>> + Send + 'static {
        // An `async move` block rather than an `async fn`, which would keep
        // `self` twice in the future every waiter carries.
        async move {
            let Acquired { lock, scope } =
                acquire::acquire(&self.core, &self.name, self.kind, &self.options).await?;
            Ok(LockGuard::new(self.core, lock, scope))
        }
    }

    /// Like [`acquire`](Lock::acquire), but a lock that stays busy for the
    /// whole wait is `Ok(None)` instead of an error.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire`](Lock::acquire).
    pub async fn try_acquire(self) -> Result<Option<LockGuard>, LockError> {
        match self.acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Busy { .. } | LockError::TimedOut { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }
}
