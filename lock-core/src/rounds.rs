//! Rounds of a scheduled job, from the wall clock: every replica agrees on
//! which round it is in, whenever it started.
//!
//! A job that every replica runs "every N" with `tokio::time::interval` fires
//! at each process's start time plus multiples of N: replicas started 0.7 s
//! apart on a 2 s period fire 0.7 s apart, and an at-least hold shorter than
//! that lets a round run twice. A [`Schedule`] takes its ticks from the Unix
//! clock instead: [`Schedule::every`] at whole multiples of the period since
//! the Unix epoch (every 10 minutes is :00, :10, :20, ... on every host), and
//! `Schedule::cron` (feature `cron`) at the times of a cron expression, in
//! UTC. Each tick is a [`Round`] with an id that is the same on every
//! replica, so it can name the round's lock:
//!
//! ```no_run
//! use std::time::Duration;
//! use distlock_core::rounds::Schedule;
//! use distlock_core::LockClient;
//!
//! # async fn run(client: LockClient) -> Result<(), Box<dyn std::error::Error>> {
//! let mut rounds = Schedule::every(Duration::from_secs(600))?.rounds();
//! loop {
//!     let round = rounds.next().await?;
//!     // One lock per round: `report:2900123`. The at-least hold covers the
//!     // clock skew between the hosts (NTP keeps it to milliseconds), not
//!     // their start times.
//!     let lock = client
//!         .lock(format!("report:{round}"))
//!         .hold_at_least(Duration::from_secs(30));
//!     // `None`: another replica runs this round.
//!     if let Some(guard) = lock.try_acquire().await? {
//!         // ... build the report ...
//!         guard.release().await?;
//!     }
//! }
//! # }
//! ```
//!
//! With the attribute of the `distlock` crate, `{round}` in the key reads
//! the argument (a [`Round`] displays as its id):
//!
//! ```text
//! #[distributed_lock(key = "report:{round}", lease = "5m", at_least = "30s", on_busy = skip)]
//! async fn build_report(round: Round) { /* ... */ }
//! ```
//!
//! The first round a [`Rounds`] yields is the first tick after it was made
//! (a replica started in the middle of a round waits for the next one), and
//! a round whose tick passed while the previous round's job still ran is
//! skipped on this replica (another replica runs it). The at-least hold then
//! only has to be longer than the skew between the hosts' clocks and their
//! timer jitter; with a key per round (`{round}` in the key) it may even be
//! longer than the period, as rounds do not share a lock.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest period of [`Schedule::every`]: 366 days. A longer schedule
/// is a cron expression.
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);

/// The shortest period of [`Schedule::every`]: 1 ms.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// When a scheduled job's rounds are: every period since the Unix epoch, or
/// at the times of a cron expression (UTC). Made by [`Schedule::every`] or
/// `Schedule::cron`; [`rounds`](Schedule::rounds) waits for them.
#[derive(Clone)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Every(Duration),
    #[cfg(feature = "cron")]
    Cron {
        expression: String,
        cron: Box<croner::Cron>,
    },
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Every(period) => f.debug_tuple("Schedule::every").field(period).finish(),
            #[cfg(feature = "cron")]
            Kind::Cron { expression, .. } => {
                f.debug_tuple("Schedule::cron").field(expression).finish()
            }
        }
    }
}

/// Why a [`Schedule`] cannot be made or cannot give its next round. Each
/// variant names the value at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The period of [`Schedule::every`] is zero, shorter than
    /// [`MIN_PERIOD`] or longer than [`MAX_PERIOD`].
    #[error("invalid schedule period {period:?}: {reason}")]
    InvalidPeriod {
        /// The period given.
        period: Duration,
        /// What is wrong with it.
        reason: String,
    },
    /// The cron expression does not parse.
    #[error("invalid cron expression `{expression}`: {reason}")]
    InvalidCron {
        /// The expression given.
        expression: String,
        /// The parser's complaint.
        reason: String,
    },
    /// The schedule has no tick after `after` (a cron expression that never
    /// matches, such as the 30th of February, or a tick beyond the range of
    /// the system clock).
    #[error("schedule {schedule} has no round after {after:?}")]
    NoNextRound {
        /// The schedule: its period or cron expression.
        schedule: String,
        /// The time after which no tick was found.
        after: SystemTime,
    },
    /// The system clock reads a time before the Unix epoch.
    #[error("the system clock reads {now:?}, before the Unix epoch")]
    ClockBeforeEpoch {
        /// What the clock read.
        now: SystemTime,
    },
}

/// One tick of a [`Schedule`]: the same on every replica that sees it.
///
/// Its id is the round's number since the Unix epoch for
/// [`Schedule::every`] (tick time / period), and the tick's Unix time in
/// seconds for `Schedule::cron`. It displays as its id, so `{round}` in a
/// `#[distributed_lock]` key names the round's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Round {
    id: u64,
    at: SystemTime,
}

impl Round {
    /// The round's id, the same on every replica (see [`Round`]).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The wall-clock time of the round's tick.
    pub fn at(&self) -> SystemTime {
        self.at
    }
}

impl fmt::Display for Round {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.id)
    }
}

impl Schedule {
    /// A tick at every whole multiple of `period` since the Unix epoch (UTC):
    /// `every(10 min)` ticks at :00, :10, :20, ... on every host, whenever it
    /// started. Round `n` is the tick at `n * period`.
    ///
    /// A period must be between [`MIN_PERIOD`] and [`MAX_PERIOD`]; any other
    /// (zero, `Duration::MAX`) is [`ScheduleError::InvalidPeriod`].
    pub fn every(period: Duration) -> Result<Self, ScheduleError> {
        let invalid = |reason: String| ScheduleError::InvalidPeriod { period, reason };
        if period < MIN_PERIOD {
            return Err(invalid(format!("must be at least {MIN_PERIOD:?}")));
        }
        if period > MAX_PERIOD {
            return Err(invalid(format!(
                "must be at most {} days (use a cron expression for longer schedules)",
                MAX_PERIOD.as_secs() / 86_400
            )));
        }
        Ok(Schedule {
            kind: Kind::Every(period),
        })
    }

    /// A tick at every time a cron expression matches, in UTC (so that hosts
    /// in different time zones agree, and no daylight-saving change repeats
    /// or skips a round): five fields (`min hour day month weekday`), or six
    /// with seconds first, and nicknames such as `@daily`. Parsed by the
    /// `croner` crate. Round ids are the ticks' Unix times in seconds.
    ///
    /// An expression that does not parse is [`ScheduleError::InvalidCron`].
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub fn cron(expression: &str) -> Result<Self, ScheduleError> {
        let cron =
            expression
                .parse::<croner::Cron>()
                .map_err(|err| ScheduleError::InvalidCron {
                    expression: expression.to_owned(),
                    reason: err.to_string(),
                })?;
        Ok(Schedule {
            kind: Kind::Cron {
                expression: expression.to_owned(),
                cron: Box::new(cron),
            },
        })
    }

    /// The round whose tick is the first strictly after `time`.
    pub fn round_after(&self, time: SystemTime) -> Result<Round, ScheduleError> {
        let since_epoch = time
            .duration_since(UNIX_EPOCH)
            .map_err(|_| ScheduleError::ClockBeforeEpoch { now: time })?;
        let none = || ScheduleError::NoNextRound {
            schedule: self.describe(),
            after: time,
        };
        match &self.kind {
            Kind::Every(period) => {
                // u128 nanoseconds: no overflow for any SystemTime and period.
                let id = (since_epoch.as_nanos() / period.as_nanos().max(1))
                    .checked_add(1)
                    .and_then(|id| u64::try_from(id).ok())
                    .ok_or_else(none)?;
                let offset = u32::try_from(id)
                    .ok()
                    .and_then(|n| period.checked_mul(n))
                    .or_else(|| {
                        let nanos = period.as_nanos().checked_mul(u128::from(id))?;
                        let secs = u64::try_from(nanos / 1_000_000_000).ok()?;
                        let sub = u32::try_from(nanos % 1_000_000_000).ok()?;
                        Some(Duration::new(secs, sub))
                    })
                    .ok_or_else(none)?;
                let at = UNIX_EPOCH.checked_add(offset).ok_or_else(none)?;
                Ok(Round { id, at })
            }
            #[cfg(feature = "cron")]
            Kind::Cron { cron, .. } => {
                let secs = i64::try_from(since_epoch.as_secs()).map_err(|_| none())?;
                let start = chrono::DateTime::<chrono::Utc>::from_timestamp(
                    secs,
                    since_epoch.subsec_nanos(),
                )
                .ok_or_else(none)?;
                let next = cron
                    .find_next_occurrence(&start, false)
                    .map_err(|_| none())?;
                let id = u64::try_from(next.timestamp()).map_err(|_| none())?;
                let nanos = next.timestamp_subsec_nanos();
                let at = UNIX_EPOCH
                    .checked_add(Duration::new(id, nanos))
                    .ok_or_else(none)?;
                if at <= time {
                    return Err(none());
                }
                Ok(Round { id, at })
            }
        }
    }

    /// The rounds from now on: the first is the first tick after this call.
    pub fn rounds(&self) -> Rounds {
        Rounds {
            schedule: self.clone(),
            after: None,
        }
    }

    /// The schedule, for messages: `every 1s` or `cron "0 3 * * *"`.
    fn describe(&self) -> String {
        match &self.kind {
            Kind::Every(period) => format!("every {period:?}"),
            #[cfg(feature = "cron")]
            Kind::Cron { expression, .. } => format!("cron \"{expression}\""),
        }
    }
}

/// The rounds of a [`Schedule`], one at a time: [`next`](Rounds::next)
/// waits for the next tick on the wall clock. Made by
/// [`Schedule::rounds`].
#[derive(Debug, Clone)]
pub struct Rounds {
    schedule: Schedule,
    /// The last round yielded (the next is after it and after now).
    after: Option<SystemTime>,
}

impl Rounds {
    /// Waits until the next round's tick on the wall clock and returns it:
    /// the first tick after both the previous round and now, so a round
    /// whose tick passed while the caller was busy is skipped, never run
    /// late. The wait is re-checked against the wall clock, so a clock set
    /// back does not fire a round early.
    ///
    /// # Cancel safety
    /// Cancel safe: it takes no lock, and a dropped call yields no round (the
    /// next call computes it again).
    pub async fn next(&mut self) -> Result<Round, ScheduleError> {
        let now = SystemTime::now();
        let after = match self.after {
            Some(last) if last > now => last,
            _ => now,
        };
        let round = self.schedule.round_after(after)?;
        loop {
            // Sleeps in slices of at most a minute: a wall clock stepped
            // forward (NTP, a resumed VM) is noticed within one.
            let left = round
                .at
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(Duration::from_secs(60))).await;
        }
        self.after = Some(round.at);
        Ok(round)
    }

    /// The schedule these rounds follow.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    #[test]
    fn every_ticks_on_multiples_of_the_period_since_the_epoch() {
        let schedule = Schedule::every(Duration::from_secs(2)).unwrap();
        // Any start time in a round gives the same next round.
        for start in [at(100, 0), at(100, 700), at(101, 999)] {
            let round = schedule.round_after(start).unwrap();
            assert_eq!(round.id(), 51);
            assert_eq!(round.at(), at(102, 0));
            assert_eq!(round.to_string(), "51");
        }
        // Strictly after: a start on a tick waits for the next one.
        assert_eq!(schedule.round_after(at(102, 0)).unwrap().id(), 52);
        let ms = Schedule::every(Duration::from_millis(250)).unwrap();
        assert_eq!(ms.round_after(at(1, 100)).unwrap().at(), at(1, 250));
    }

    #[test]
    fn extreme_periods_are_typed_errors() {
        for period in [
            Duration::ZERO,
            Duration::from_nanos(999_999),
            MAX_PERIOD + Duration::from_nanos(1),
            Duration::MAX,
        ] {
            match Schedule::every(period) {
                Err(ScheduleError::InvalidPeriod { period: p, reason }) => {
                    assert_eq!(p, period);
                    assert!(!reason.is_empty());
                }
                other => panic!("{period:?}: {other:?}"),
            }
        }
        // The extremes allowed, at the extremes of the clock: no panic.
        for period in [MIN_PERIOD, MAX_PERIOD] {
            let schedule = Schedule::every(period).unwrap();
            assert!(schedule.round_after(UNIX_EPOCH).is_ok());
            let far = UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX) * 1000);
            let _ = schedule.round_after(far);
        }
        let before = UNIX_EPOCH.checked_sub(Duration::from_secs(1)).unwrap();
        assert!(matches!(
            Schedule::every(MIN_PERIOD).unwrap().round_after(before),
            Err(ScheduleError::ClockBeforeEpoch { .. })
        ));
    }

    #[cfg(feature = "cron")]
    #[test]
    fn cron_ticks_in_utc_with_unix_seconds_as_ids() {
        let daily = Schedule::cron("30 2 * * *").unwrap();
        // 1970-01-01T02:30:00Z
        let round = daily.round_after(at(0, 0)).unwrap();
        assert_eq!(round.id(), 2 * 3600 + 30 * 60);
        assert_eq!(
            daily.round_after(round.at()).unwrap().id(),
            round.id() + 86_400
        );
        let seconds = Schedule::cron("*/5 * * * * *").unwrap();
        assert_eq!(seconds.round_after(at(7, 300)).unwrap().id(), 10);
        match Schedule::cron("61 * * * *") {
            Err(ScheduleError::InvalidCron { expression, .. }) => {
                assert_eq!(expression, "61 * * * *")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Schedule::cron("0 0 30 2 *").unwrap().round_after(at(0, 0)),
            Err(ScheduleError::NoNextRound { .. })
        ));
    }

    #[tokio::test]
    async fn rounds_wait_for_the_wall_clock_and_skip_passed_ticks() {
        let mut rounds = Schedule::every(Duration::from_millis(20)).unwrap().rounds();
        let first = rounds.next().await.unwrap();
        assert!(SystemTime::now() >= first.at());
        // Busy for three periods: the ticks in between are skipped.
        std::thread::sleep(Duration::from_millis(70));
        let next = rounds.next().await.unwrap();
        assert!(next.id() >= first.id() + 3, "{first:?} then {next:?}");
        assert!(SystemTime::now() >= next.at());
    }
}
