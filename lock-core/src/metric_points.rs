//! The points where the library reports to the `metrics` facade (see the
//! public [`metrics`](crate::metrics) module for what is reported). Without
//! the `metrics` feature every type here is empty and every call does
//! nothing.

#[cfg(feature = "metrics")]
pub(crate) use on::*;

#[cfg(not(feature = "metrics"))]
pub(crate) use off::*;

#[cfg(feature = "metrics")]
mod on {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use metrics::{Label, SharedString};
    use tokio::time::Instant;

    use crate::metrics::{
        NameLabel, ACQUISITIONS, HAND_OFFS, HELD, HOLD_SECONDS, IS_LEADER, LEADERSHIP_ENDED,
        LEADERSHIP_GAINED, LEADER_SECONDS, LEADER_TERM, LEASE_SLACK_SECONDS, LOST, RENEWALS,
        RENEWAL_SECONDS, WAITERS, WAIT_SECONDS,
    };
    use crate::name::{Kind, LockKey};
    use crate::LockError;

    /// The client's choice of `name` label.
    pub(crate) type Names = NameLabel;

    fn kind_label(kind: Kind) -> &'static str {
        match kind {
            Kind::Exclusive => "lock",
            Kind::Fair => "fair",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Permits { .. } => "permits",
        }
    }

    /// The labels of one lock's metrics.
    #[derive(Debug, Clone)]
    pub(crate) struct Labels {
        kind: &'static str,
        name: Option<SharedString>,
    }

    impl Labels {
        pub(crate) fn new(names: &Names, key: &LockKey) -> Self {
            Labels {
                kind: kind_label(key.kind),
                name: names
                    .label(&key.name)
                    .map(|name| SharedString::from(Arc::<str>::from(name))),
            }
        }

        fn with(&self, outcome: Option<&'static str>) -> Vec<Label> {
            let mut labels = Vec::with_capacity(3);
            labels.push(Label::from_static_parts("kind", self.kind));
            if let Some(outcome) = outcome {
                labels.push(Label::from_static_parts("outcome", outcome));
            }
            if let Some(name) = &self.name {
                labels.push(Label::new("name", name.clone()));
            }
            labels
        }

        /// An acquisition ended with `outcome` after `waited`.
        pub(crate) fn acquisition<T>(&self, outcome: &Result<T, LockError>, waited: Duration) {
            let outcome = match outcome {
                Ok(_) => {
                    metrics::histogram!(WAIT_SECONDS, self.with(None)).record(waited.as_secs_f64());
                    "acquired"
                }
                Err(LockError::Busy { .. }) => "busy",
                Err(LockError::TimedOut { .. }) => "timed_out",
                Err(_) => "error",
            };
            metrics::counter!(ACQUISITIONS, self.with(Some(outcome))).increment(1);
        }

        /// A fair lock was handed to a waiting acquisition.
        pub(crate) fn hand_off(&self) {
            metrics::counter!(HAND_OFFS, self.with(None)).increment(1);
        }

        /// An acquisition waits, until the returned value is dropped.
        pub(crate) fn waiting(&self) -> Waiting {
            let gauge = metrics::gauge!(WAITERS, self.with(None));
            gauge.increment(1.0);
            Waiting { gauge }
        }

        /// A watchdog renewal of one lock ended with `outcome`; `slack` is
        /// how much of its lease was left when it was sent.
        pub(crate) fn renewal(&self, outcome: &'static str, slack: Duration) {
            metrics::counter!(RENEWALS, self.with(Some(outcome))).increment(1);
            metrics::histogram!(LEASE_SLACK_SECONDS, self.with(None)).record(slack.as_secs_f64());
        }
    }

    /// A waiting acquisition (counted in `distributed_lock_waiters`).
    pub(crate) struct Waiting {
        gauge: metrics::Gauge,
    }

    impl Drop for Waiting {
        fn drop(&mut self) {
            self.gauge.decrement(1.0);
        }
    }

    /// One watchdog round took `elapsed`.
    pub(crate) fn renewal_round(elapsed: Duration) {
        metrics::histogram!(RENEWAL_SECONDS).record(elapsed.as_secs_f64());
    }

    /// This process won `role` with `term`.
    pub(crate) fn leadership_gained(role: &str, term: u64) {
        let role = Label::new("role", role.to_owned());
        metrics::counter!(LEADERSHIP_GAINED, vec![role.clone()]).increment(1);
        metrics::gauge!(IS_LEADER, vec![role.clone()]).set(1.0);
        #[allow(clippy::cast_precision_loss)] // terms stay below 2^53 (microseconds)
        metrics::gauge!(LEADER_TERM, vec![role]).set(term as f64);
    }

    /// This process's term of `role` ended (`outcome`) after `lasted`.
    pub(crate) fn leadership_ended(role: &str, outcome: &'static str, lasted: Duration) {
        let role = Label::new("role", role.to_owned());
        let labels = vec![role.clone(), Label::from_static_parts("outcome", outcome)];
        metrics::counter!(LEADERSHIP_ENDED, labels).increment(1);
        metrics::histogram!(LEADER_SECONDS, vec![role.clone()]).record(lasted.as_secs_f64());
        metrics::gauge!(IS_LEADER, vec![role.clone()]).set(0.0);
        metrics::gauge!(LEADER_TERM, vec![role]).set(0.0);
    }

    /// The metrics of one held lock: counted in `distributed_lock_held`
    /// from [`entered`](HoldMeter::entered) until it is released or lost.
    #[derive(Debug)]
    pub(crate) struct HoldMeter {
        labels: Option<Labels>,
        granted: Instant,
        counted: AtomicBool,
    }

    impl HoldMeter {
        /// Reports nothing.
        pub(crate) fn none() -> Self {
            HoldMeter {
                labels: None,
                granted: Instant::now(),
                counted: AtomicBool::new(false),
            }
        }

        pub(crate) fn new(labels: Labels) -> Self {
            HoldMeter {
                labels: Some(labels),
                ..HoldMeter::none()
            }
        }

        pub(crate) fn labels(&self) -> Option<&Labels> {
            self.labels.as_ref()
        }

        /// The lock is held by a scope (its first hold).
        pub(crate) fn entered(&self) {
            let Some(labels) = &self.labels else { return };
            if !self.counted.swap(true, Ordering::AcqRel) {
                metrics::gauge!(HELD, labels.with(None)).increment(1.0);
            }
        }

        /// The lock is no longer held: released, or `lost`.
        pub(crate) fn left(&self, lost: bool) {
            let Some(labels) = &self.labels else { return };
            if lost {
                metrics::counter!(LOST, labels.with(None)).increment(1);
            }
            if self.counted.swap(false, Ordering::AcqRel) {
                metrics::gauge!(HELD, labels.with(None)).decrement(1.0);
                metrics::histogram!(HOLD_SECONDS, labels.with(None))
                    .record(self.granted.elapsed().as_secs_f64());
            }
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod off {
    use std::time::Duration;

    use crate::name::LockKey;
    use crate::LockError;

    /// Nothing to choose without the feature.
    pub(crate) type Names = ();

    #[derive(Debug, Clone)]
    pub(crate) struct Labels;

    impl Labels {
        #[inline]
        pub(crate) fn new(_names: &Names, _key: &LockKey) -> Self {
            Labels
        }
        #[inline]
        pub(crate) fn acquisition<T>(&self, _outcome: &Result<T, LockError>, _waited: Duration) {}
        #[inline]
        pub(crate) fn hand_off(&self) {}
        #[inline]
        pub(crate) fn waiting(&self) -> Waiting {
            Waiting
        }
        #[inline]
        pub(crate) fn renewal(&self, _outcome: &'static str, _slack: Duration) {}
    }

    pub(crate) struct Waiting;

    #[inline]
    pub(crate) fn renewal_round(_elapsed: Duration) {}

    #[inline]
    pub(crate) fn leadership_gained(_role: &str, _term: u64) {}

    #[inline]
    pub(crate) fn leadership_ended(_role: &str, _outcome: &'static str, _lasted: Duration) {}

    #[derive(Debug)]
    pub(crate) struct HoldMeter;

    impl HoldMeter {
        #[inline]
        pub(crate) fn none() -> Self {
            HoldMeter
        }
        #[inline]
        pub(crate) fn new(_labels: Labels) -> Self {
            HoldMeter
        }
        #[inline]
        pub(crate) fn labels(&self) -> Option<&Labels> {
            None
        }
        #[inline]
        pub(crate) fn entered(&self) {}
        #[inline]
        pub(crate) fn left(&self, _lost: bool) {}
    }
}
