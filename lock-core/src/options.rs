//! The request vocabulary shared by every way of taking a lock: how long to
//! wait ([`Wait`]) and the options of one acquisition ([`LockOptions`]).
//! [`Lock`](crate::Lock), [`MultiLock`](crate::MultiLock), the lock family,
//! the tower layer, the attribute and `lockctl` all speak it.

use std::time::Duration;

use tokio::time::Instant;

/// How long an acquisition waits for a busy lock.
///
/// A waiter is woken by the holder's release (pub/sub), not by polling.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::Wait;
///
/// assert_eq!(Wait::from(Duration::ZERO), Wait::Once);
/// assert_eq!(Wait::from(Duration::from_secs(5)), Wait::For(Duration::from_secs(5)));
/// assert_eq!(Wait::default(), Wait::Once);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Wait {
    /// Try once; a busy lock is [`LockError::Busy`](crate::LockError::Busy).
    #[default]
    Once,
    /// Up to this long, then [`LockError::TimedOut`](crate::LockError::TimedOut).
    /// A wait too long for the clock to represent (such as `Duration::MAX`)
    /// has no deadline, as [`Wait::Forever`].
    For(Duration),
    /// As long as it takes (must be asked for explicitly).
    Forever,
}

impl From<Duration> for Wait {
    /// `Duration::ZERO` tries once; any other duration waits up to it.
    fn from(wait: Duration) -> Self {
        if wait.is_zero() {
            Wait::Once
        } else {
            Wait::For(wait)
        }
    }
}

impl Wait {
    /// When waiting ends, counted from `started`; `None` for never.
    pub(crate) fn deadline(self, started: Instant) -> Option<Instant> {
        match self {
            Wait::Once => Some(started),
            Wait::For(wait) => started.checked_add(wait),
            Wait::Forever => None,
        }
    }

    /// `For(ZERO)` is a single try, as `From<Duration>` makes it.
    pub(crate) fn normalized(self) -> Self {
        match self {
            Wait::For(wait) => Wait::from(wait),
            other => other,
        }
    }
}

/// The options of one acquisition: how long to wait, the lease, and a
/// minimum hold. One value for every way of taking a lock: give it to
/// [`Lock::options`](crate::Lock::options),
/// [`MultiLock::options`](crate::MultiLock::options), or to the tower
/// layer's and `lockctl`'s settings, which hold one.
///
/// The default tries once, in watchdog mode (the client's lease, renewed
/// while the guard lives), with no minimum hold.
///
/// ```
/// use std::time::Duration;
/// use distlock_core::{LockOptions, Wait};
///
/// let options = LockOptions::new()
///     .wait(Duration::from_secs(10))
///     .lease(Duration::from_secs(60));
/// assert_eq!(options.wait_for(), Wait::For(Duration::from_secs(10)));
/// assert_eq!(options.fixed_lease(), Some(Duration::from_secs(60)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[must_use]
pub struct LockOptions {
    wait: Wait,
    lease: Option<Duration>,
    at_least: Option<Duration>,
    /// Never kept hot (`keep_hot`): a role's lock (leadership) must change
    /// hands at its release, not stay with the client.
    cold: bool,
}

impl LockOptions {
    /// Try once, watchdog mode, no minimum hold.
    pub const fn new() -> Self {
        LockOptions {
            wait: Wait::Once,
            lease: None,
            at_least: None,
            cold: false,
        }
    }

    /// Waits as `wait` says: a [`Wait`], or a `Duration` (`ZERO` tries once).
    pub fn wait(mut self, wait: impl Into<Wait>) -> Self {
        self.wait = wait.into();
        self
    }

    /// Waits for as long as it takes.
    pub fn wait_forever(mut self) -> Self {
        self.wait = Wait::Forever;
        self
    }

    /// A fixed lease: the lock expires `lease` after acquisition and is not
    /// renewed (see [`Lock::lease`](crate::Lock::lease)).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Back to watchdog mode (the client's lease, renewed while held).
    pub fn watchdog(mut self) -> Self {
        self.lease = None;
        self
    }

    /// Held at least this long after acquisition (see
    /// [`Lock::hold_at_least`](crate::Lock::hold_at_least)).
    pub fn hold_at_least(mut self, at_least: Duration) -> Self {
        self.at_least = Some(at_least);
        self
    }

    /// How long an acquisition waits.
    pub fn wait_for(&self) -> Wait {
        self.wait
    }

    /// The fixed lease, or `None` for watchdog mode.
    pub fn fixed_lease(&self) -> Option<Duration> {
        self.lease
    }

    /// The minimum hold, if any.
    pub fn min_hold(&self) -> Option<Duration> {
        self.at_least
    }

    /// Never kept hot, whatever the client's `keep_hot` (a role's lock).
    pub(crate) fn cold(mut self) -> Self {
        self.cold = true;
        self
    }

    /// Whether the lock is never kept hot.
    pub(crate) fn is_cold(&self) -> bool {
        self.cold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_never_overflow() {
        let now = Instant::now();
        assert_eq!(Wait::from(Duration::ZERO), Wait::Once);
        assert_eq!(Wait::For(Duration::ZERO).normalized(), Wait::Once);
        // Far past what the clock holds: no deadline rather than a panic.
        assert_eq!(Wait::For(Duration::MAX).deadline(now), None);
        assert_eq!(Wait::Forever.deadline(now), None);
        assert_eq!(Wait::Once.deadline(now), Some(now));
    }

    #[test]
    fn options_build_as_asked() {
        let options = LockOptions::new()
            .wait_forever()
            .lease(Duration::from_secs(1))
            .watchdog()
            .hold_at_least(Duration::from_millis(5));
        assert_eq!(options.wait_for(), Wait::Forever);
        assert_eq!(options.fixed_lease(), None);
        assert_eq!(options.min_hold(), Some(Duration::from_millis(5)));
        assert_eq!(LockOptions::default(), LockOptions::new());
    }
}
