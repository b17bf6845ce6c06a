//! Durations: the accepted ranges of leases, waits and timeouts, the clock
//! drift allowance, and deadline arithmetic that cannot overflow.
//!
//! Every duration a user passes is checked here once, at the edge, and
//! refused with [`LockError::InvalidConfig`] naming the value; past that
//! point the lock only does arithmetic that stays in range.

use std::time::Duration;

use tokio::time::Instant;

use crate::LockError;

/// The default lease of watchdog-mode locks (renewed every third of it).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The shortest watchdog lease accepted (it is renewed every third of it).
pub const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(30);
/// The shortest fixed lease accepted. A shorter one would be mostly spent by
/// the clock drift allowance (1 % + 2 ms) and the timer resolution (1 ms)
/// before the holder could use it.
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// The longest lease accepted, fixed or watchdog (365 days). A longer one is
/// almost always a mistake (`Duration::MAX` meant as "never expire"), and a
/// lock that never expires is not a lease lock.
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);
/// The longest response, connect, node or replication timeout accepted (one day).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// The shortest timeout accepted (Redis counts in milliseconds; `WAIT` with
/// 0 ms would block forever).
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// How long a waiter queued on a fair lock, or a writer waiting for a
/// read-write lock, keeps its place without showing that it is alive. A
/// waiting acquisition refreshes its place every third of it; a waiter whose
/// process died, hung or lost Redis leaves the queue after it, so it never
/// blocks the others for longer.
pub const QUEUE_PRESENCE: Duration = Duration::from_secs(5);

/// How often a queued waiter refreshes its place (a third of [`QUEUE_PRESENCE`]).
pub(crate) const QUEUE_REFRESH: Duration = Duration::from_millis(1666);

/// Checks a minimum hold (`Lock::hold_at_least`): at most [`MAX_LEASE`],
/// and with a fixed lease at most that lease (ShedLock's `lockAtLeastFor`
/// cannot exceed `lockAtMostFor`). Zero is no minimum.
pub(crate) fn check_at_least(
    name: &str,
    at_least: Option<Duration>,
    lease: Option<Duration>,
) -> Result<Option<Duration>, LockError> {
    let Some(at_least) = at_least.filter(|d| !d.is_zero()) else {
        return Ok(None);
    };
    let reason = match lease {
        Some(lease) if at_least > lease => format!(
            "a lock held at least {at_least:?} needs a fixed lease at least as long, got {lease:?} (leave the lease out for a watchdog-renewed lock)"
        ),
        _ if at_least > MAX_LEASE => format!(
            "a minimum hold must be at most {}s, got {at_least:?}",
            MAX_LEASE.as_secs()
        ),
        _ => return Ok(Some(at_least)),
    };
    Err(LockError::InvalidConfig {
        key: crate::name::display_name(name),
        reason,
    })
}

/// The clock drift allowed for on a lease (1 % + 2 ms, as Redlock does).
pub(crate) fn drift(lease: Duration) -> Duration {
    (lease / 100).saturating_add(Duration::from_millis(2))
}

/// Until when a lease granted for a request sent at `sent` is known to run on
/// the local clock: `sent + lease - drift`. Redis starts the TTL when it
/// receives the request, never earlier, so this never outlives the key.
pub(crate) fn valid_until(sent: Instant, lease: Duration) -> Instant {
    // Leases are at most MAX_LEASE, so this cannot overflow in practice; if
    // it could, the lease would count as already ended (the safe side).
    sent.checked_add(lease.saturating_sub(drift(lease)))
        .unwrap_or(sent)
}

/// `deadline`, or `now` plus `fallback` when there is none, capped so that a
/// timer can represent it.
pub(crate) fn nap_until(now: Instant, nap: Duration, deadline: Option<Instant>) -> Instant {
    let far = now.checked_add(MAX_TIMEOUT).unwrap_or(now);
    let wake = now.checked_add(nap).unwrap_or(far).min(far);
    match deadline {
        Some(deadline) => wake.min(deadline),
        None => wake,
    }
}

/// A lease in whole milliseconds for `PEXPIRE` (never rounded down to zero).
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Checks a fixed lease of lock `key`.
pub(crate) fn check_fixed(key: &str, lease: Duration) -> Result<Duration, LockError> {
    check_range(key, "a fixed lease", lease, MIN_LEASE, MAX_LEASE)
}

/// Checks the client-wide watchdog lease.
pub(crate) fn check_watchdog(lease: Duration) -> Result<Duration, LockError> {
    check_range(
        "*",
        "the watchdog lease",
        lease,
        MIN_WATCHDOG_LEASE,
        MAX_LEASE,
    )
}

/// Checks a timeout setting named `what`.
pub(crate) fn check_timeout(what: &str, timeout: Duration) -> Result<Duration, LockError> {
    check_range("*", what, timeout, MIN_TIMEOUT, MAX_TIMEOUT)
}

fn check_range(
    key: &str,
    what: &str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<Duration, LockError> {
    if (min..=max).contains(&value) {
        return Ok(value);
    }
    Err(LockError::InvalidConfig {
        key: key.to_owned(),
        reason: format!("{what} must be between {min:?} and {max:?}, got {value:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_durations_are_refused_with_their_value() {
        for lease in [Duration::ZERO, Duration::from_millis(9), Duration::MAX] {
            let err = check_fixed("order:1", lease).unwrap_err().to_string();
            assert!(
                err.contains("order:1") && err.contains(&format!("{lease:?}")),
                "{err}"
            );
        }
        assert!(check_fixed("k", MIN_LEASE).is_ok());
        assert!(check_fixed("k", MAX_LEASE).is_ok());
        assert!(check_watchdog(Duration::from_millis(29)).is_err());
        assert!(check_timeout("the response timeout", Duration::from_micros(500)).is_err());
        assert!(check_timeout("the response timeout", Duration::MAX).is_err());
    }

    #[test]
    fn deadlines_never_overflow() {
        let now = Instant::now();
        assert!(nap_until(now, Duration::MAX, None) > now);
        assert!(valid_until(now, MAX_LEASE) > now);
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }

    #[test]
    fn the_drift_allowance_never_exceeds_an_accepted_lease() {
        assert!(drift(MIN_LEASE) < MIN_LEASE);
        assert!(valid_until(Instant::now(), MIN_LEASE) > Instant::now());
    }
}
