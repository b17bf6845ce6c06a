//! The lock family's handles: [`ReadWriteLock`] and [`Semaphore`]. Each
//! hands out [`Lock`]s, acquired and held like any other (watchdog, fencing
//! token, wake-up, cancel safety); the fair lock is a [`Lock`] made by
//! [`LockClient::fair_lock`](crate::LockClient::fair_lock).

use std::fmt;
use std::sync::Arc;

use crate::client_core::ClientCore;
use crate::name::Kind;
use crate::Lock;

/// A read-write lock: many readers, or one writer.
///
/// Made by [`LockClient::read_write_lock`](crate::LockClient::read_write_lock).
/// Both holds are reentrant per call chain and renewed by the watchdog;
/// every grant gets a fencing token (a writer's is the one a resource checks).
///
/// - **Writers first.** Once a writer waits, new readers wait behind it
///   (readers already holding finish), so a stream of readers never starves
///   writers. A waiting writer keeps that place for
///   [`QUEUE_PRESENCE`](crate::QUEUE_PRESENCE) at a time, refreshed while it
///   waits: a writer that died or gave up stops holding readers back within it.
/// - **Downgrade, not upgrade.** Code running in the write lock's
///   [`scope`](crate::LockGuard::scope) may take the read lock too, as the
///   writer's owner (then release the write lock and keep reading). Asking
///   for the write lock in the read lock's scope fails at once with
///   [`LockError::UpgradeRefused`](crate::LockError::UpgradeRefused) instead
///   of waiting on itself. Sibling branches (`join!`) are other owners: one
///   waits for the other's write lock (see
///   [`LockGuard::scope`](crate::LockGuard::scope)).
/// - **Crashed readers** each expire on their own lease: one dead reader
///   never keeps the lock read-held while the others renew.
///
/// ```no_run
/// # async fn demo(client: distlock_core::LockClient) -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// let prices = client.read_write_lock("prices");
/// let reading = prices.read().wait(Duration::from_secs(5)).acquire().await?;
/// // ... many readers at once ...
/// reading.release().await?;
/// let writing = prices.write().wait(Duration::from_secs(5)).acquire().await?;
/// let token = writing.fencing_token(); // pass it to the store you write
/// # let _ = token;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    core: Arc<ClientCore>,
    name: String,
}

impl fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.name)
            .finish()
    }
}

impl ReadWriteLock {
    pub(crate) fn new(core: Arc<ClientCore>, name: String) -> Self {
        ReadWriteLock { core, name }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The read lock, shared with other readers.
    pub fn read(&self) -> Lock {
        Lock::of_kind(self.core.clone(), self.name.clone(), Kind::Read)
    }

    /// The write lock, exclusive of readers and other writers.
    pub fn write(&self) -> Lock {
        Lock::of_kind(self.core.clone(), self.name.clone(), Kind::Write)
    }
}

/// A semaphore with expiring permits: at most `permits` in use at once
/// across every process that uses the name.
///
/// Made by [`LockClient::semaphore`](crate::LockClient::semaphore). A holder
/// takes one or more permits as a [`Lock`]: held while its guard lives,
/// renewed by the watchdog (or for a fixed lease), given back on release or
/// drop. Each holder's permits expire on their own lease, so a crashed
/// holder's permits come back after at most one lease: nothing leaks.
/// Waiters are woken when permits are given back.
///
/// The total is passed by every acquirer (not stored): every user of one
/// name must pass the same number. Code in the
/// [`scope`](crate::LockGuard::scope) of a guard of permits that asks again
/// re-enters its hold (it does not take more); sibling branches each take
/// their own.
///
/// ```no_run
/// # async fn demo(client: distlock_core::LockClient) -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// // At most 5 exports of tenant 7 at once, fleet-wide.
/// let exports = client.semaphore("exports:tenant:7", 5);
/// let permit = exports.permit().wait(Duration::from_secs(30)).acquire().await?;
/// // ... export ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    core: Arc<ClientCore>,
    name: String,
    permits: u32,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(core: Arc<ClientCore>, name: String, permits: u32) -> Self {
        Semaphore {
            core,
            name,
            permits,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits it has in all.
    pub fn total(&self) -> u32 {
        self.permits
    }

    /// One permit.
    pub fn permit(&self) -> Lock {
        self.permits(1)
    }

    /// `n` permits, taken together (all or none). Acquiring refuses `0`, and
    /// more than the total, with
    /// [`LockError::InvalidConfig`](crate::LockError::InvalidConfig).
    pub fn permits(&self, n: u32) -> Lock {
        Lock::of_kind(
            self.core.clone(),
            self.name.clone(),
            Kind::Permits {
                take: n,
                total: self.permits,
            },
        )
    }
}
