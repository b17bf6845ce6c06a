//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (cargo
//! feature `metrics`): install any `metrics` recorder (the Prometheus
//! exporter `metrics-exporter-prometheus`, an OpenTelemetry bridge, ...) and
//! every [`LockClient`](crate::LockClient) of the process reports to it.
//! Without a recorder the calls do nothing; without the feature they are
//! not compiled in.
//!
//! # What is reported
//!
//! | Name | Type | Unit | Labels | What |
//! |------|------|------|--------|------|
//! | `distributed_lock_acquisitions_total` | counter | | `kind`, `outcome` | Acquisitions that ended, by how they ended: `acquired`, `busy` (a single try found the lock held), `timed_out` (a wait ran out), `error` (any other error, e.g. the backend failed or the client shuts down). Not counted: re-entering a lock the caller's scope holds, and requests refused before any attempt (bad input, a client already shutting down, a wait on a lock another client of this process holds). |
//! | `distributed_lock_wait_seconds` | histogram | seconds | `kind` | From the call to the grant, for acquisitions that got the lock. |
//! | `distributed_lock_hold_seconds` | histogram | seconds | `kind` | From the grant until the lock was released or lost. |
//! | `distributed_lock_held` | gauge | | `kind` | Locks this process holds now (re-entries count once). |
//! | `distributed_lock_waiters` | gauge | | `kind` | Acquisitions of this process waiting now for a busy lock. |
//! | `distributed_lock_hand_offs_total` | counter | | `kind` | Fair locks handed to a waiting acquisition by the release before it (no new round trip). |
//! | `distributed_lock_renewals_total` | counter | | `kind`, `outcome` | Watchdog renewals of one lock: `renewed`, `lost` (the lock was gone or taken over), `error` (no answer; retried). |
//! | `distributed_lock_renewal_seconds` | histogram | seconds | | One renewal round of a client's watchdog (all its locks in one request per node). |
//! | `distributed_lock_lease_slack_seconds` | histogram | seconds | `kind` | How much of the lease was left, on the local clock, when a renewal was sent: near zero means locks come close to being lost. |
//! | `distributed_lock_lost_total` | counter | | `kind` | Locks lost while held: their lease ran out, the lock was deleted or taken over, or the client's shutdown took them. |
//!
//! | `distributed_lock_leadership_gained_total` | counter | | `role` | Campaigns this process won (leader election, [`Election`](crate::Election)). |
//! | `distributed_lock_leadership_ended_total` | counter | | `role`, `outcome` | Terms of this process that ended: `resigned`, `lost` (the lease ran out or the lock was taken or deleted), `dropped` (the `Leadership` was dropped: resigned in the background). |
//! | `distributed_lock_leader_seconds` | histogram | seconds | `role` | How long each term of this process lasted. |
//! | `distributed_lock_is_leader` | gauge | | `role` | 1 while this process leads the role, else 0. |
//! | `distributed_lock_leader_term` | gauge | | `role` | The term this process leads with (0 when it does not lead). |
//!
//! `kind` is the primitive: `lock`, `fair`, `read`, `write` or `permits`.
//! `role` is the role of a leader election: roles are a program's
//! configuration, so their number is fixed.
//!
//! # Cardinality
//!
//! By default no label carries the lock's name: the number of series is
//! fixed, whatever the names.
//! [`LockClientBuilder::metrics_names`](crate::LockClientBuilder::metrics_names)
//! adds a `name` label to the per-lock metrics (all but `distributed_lock_renewal_seconds`): the name
//! itself ([`NameLabel::Full`], for a small fixed set of names), or what a
//! function makes of it ([`NameLabel::Pattern`], e.g. `order:42` →
//! `order:*`).
//!
//! ```
//! use distlock_core::metrics::NameLabel;
//! use distlock_core::{LockClient, MemoryStore};
//!
//! fn pattern(name: &str) -> String {
//!     match name.split_once(':') {
//!         Some((family, _)) => format!("{family}:*"),
//!         None => name.to_owned(),
//!     }
//! }
//!
//! let client = LockClient::builder()
//!     .metrics_names(NameLabel::Pattern(pattern))
//!     .memory(MemoryStore::new())?;
//! # Ok::<(), distlock_core::LockError>(())
//! ```

use std::fmt;

/// `distributed_lock_acquisitions_total`: counter, labels `kind`, `outcome`.
pub const ACQUISITIONS: &str = "distributed_lock_acquisitions_total";
/// `distributed_lock_wait_seconds`: histogram, label `kind`.
pub const WAIT_SECONDS: &str = "distributed_lock_wait_seconds";
/// `distributed_lock_hold_seconds`: histogram, label `kind`.
pub const HOLD_SECONDS: &str = "distributed_lock_hold_seconds";
/// `distributed_lock_held`: gauge, label `kind`.
pub const HELD: &str = "distributed_lock_held";
/// `distributed_lock_waiters`: gauge, label `kind`.
pub const WAITERS: &str = "distributed_lock_waiters";
/// `distributed_lock_hand_offs_total`: counter, label `kind`.
pub const HAND_OFFS: &str = "distributed_lock_hand_offs_total";
/// `distributed_lock_renewals_total`: counter, labels `kind`, `outcome`.
pub const RENEWALS: &str = "distributed_lock_renewals_total";
/// `distributed_lock_renewal_seconds`: histogram, no labels.
pub const RENEWAL_SECONDS: &str = "distributed_lock_renewal_seconds";
/// `distributed_lock_lease_slack_seconds`: histogram, label `kind`.
pub const LEASE_SLACK_SECONDS: &str = "distributed_lock_lease_slack_seconds";
/// `distributed_lock_lost_total`: counter, label `kind`.
pub const LOST: &str = "distributed_lock_lost_total";

/// `distributed_lock_leadership_gained_total`: counter, label `role`.
pub const LEADERSHIP_GAINED: &str = "distributed_lock_leadership_gained_total";
/// `distributed_lock_leadership_ended_total`: counter, labels `role`, `outcome`.
pub const LEADERSHIP_ENDED: &str = "distributed_lock_leadership_ended_total";
/// `distributed_lock_leader_seconds`: histogram, label `role`.
pub const LEADER_SECONDS: &str = "distributed_lock_leader_seconds";
/// `distributed_lock_is_leader`: gauge, label `role`.
pub const IS_LEADER: &str = "distributed_lock_is_leader";
/// `distributed_lock_leader_term`: gauge, label `role`.
pub const LEADER_TERM: &str = "distributed_lock_leader_term";

/// Whether, and how, the per-lock metrics carry the lock's name as label
/// `name` (see [`LockClientBuilder::metrics_names`](crate::LockClientBuilder::metrics_names)).
#[derive(Clone, Copy, Default)]
pub enum NameLabel {
    /// No `name` label (the default): a fixed number of series.
    #[default]
    Off,
    /// The lock's name as given: only for a small, fixed set of names.
    Full,
    /// What the function makes of the name (e.g. `order:42` → `order:*`):
    /// it should map the names onto a small set.
    Pattern(fn(&str) -> String),
}

impl NameLabel {
    /// The `name` label of lock `name`, if any.
    pub(crate) fn label(&self, name: &str) -> Option<String> {
        match self {
            NameLabel::Off => None,
            NameLabel::Full => Some(name.to_owned()),
            NameLabel::Pattern(pattern) => Some(pattern(name)),
        }
    }
}

impl fmt::Debug for NameLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameLabel::Off => "Off",
            NameLabel::Full => "Full",
            NameLabel::Pattern(_) => "Pattern(..)",
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use std::cell::RefCell;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use metrics_util::CompositeKey;

    use super::*;
    use crate::{LockClient, MemoryStore};

    /// What the recorder saw: its snapshots drain it (counters and gauges
    /// start at 0 again, histograms empty), so every snapshot is kept, and
    /// the values of a series over all snapshots add up.
    struct Snap {
        snapshotter: Snapshotter,
        seen: RefCell<Vec<(CompositeKey, Value)>>,
    }

    #[derive(Debug, Clone)]
    enum Value {
        Counter(u64),
        Gauge(f64),
        Histogram(Vec<f64>),
    }

    impl From<DebugValue> for Value {
        fn from(value: DebugValue) -> Self {
            match value {
                DebugValue::Counter(n) => Value::Counter(n),
                DebugValue::Gauge(x) => Value::Gauge(x.into_inner()),
                DebugValue::Histogram(xs) => {
                    Value::Histogram(xs.into_iter().map(|x| x.into_inner()).collect())
                }
            }
        }
    }

    /// The values of metric `name` whose labels include all of `labels`.
    fn values(snap: &Snap, name: &str, labels: &[(&str, &str)]) -> Vec<Value> {
        let mut seen = snap.seen.borrow_mut();
        seen.extend(
            snap.snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .map(|(key, _, _, value)| (key, value.into())),
        );
        seen.iter()
            .filter(|(key, _)| {
                key.key().name() == name
                    && labels.iter().all(|(k, v)| {
                        key.key()
                            .labels()
                            .any(|label| label.key() == *k && label.value() == *v)
                    })
            })
            .map(|(_, value)| value.clone())
            .collect()
    }

    fn counter(snap: &Snap, name: &str, labels: &[(&str, &str)]) -> u64 {
        values(snap, name, labels)
            .into_iter()
            .map(|value| match value {
                Value::Counter(n) => n,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    fn gauge(snap: &Snap, name: &str, labels: &[(&str, &str)]) -> f64 {
        values(snap, name, labels)
            .into_iter()
            .map(|value| match value {
                Value::Gauge(n) => n,
                other => panic!("{name} is not a gauge: {other:?}"),
            })
            .sum()
    }

    fn histogram(snap: &Snap, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        values(snap, name, labels)
            .into_iter()
            .flat_map(|value| match value {
                Value::Histogram(v) => v,
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .collect()
    }

    /// Runs `test` on a paused current-thread runtime with a local
    /// debugging recorder (so that tests running at once do not mix).
    fn with_recorder<F: std::future::Future<Output = ()>>(test: impl FnOnce(Snap) -> F) {
        let recorder = DebuggingRecorder::new();
        let snapshotter = Snap {
            snapshotter: recorder.snapshotter(),
            seen: RefCell::default(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        metrics::with_local_recorder(&recorder, || runtime.block_on(test(snapshotter)));
    }

    #[test]
    fn acquisitions_waits_holds_and_renewals_are_counted() {
        with_recorder(|snap| async move {
            let client = LockClient::builder()
                .lease(Duration::from_secs(3))
                .memory(MemoryStore::new())
                .unwrap();
            let guard = client.lock("a").acquire().await.unwrap();
            assert_eq!(gauge(&snap, HELD, &[("kind", "lock")]), 1.0);

            // Busy: one try. Timed out: a wait in another scope.
            assert!(client.lock("a").try_acquire().await.unwrap().is_none());
            let waiting = tokio::spawn(client.lock("a").wait(Duration::from_millis(500)).acquire());
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(gauge(&snap, WAITERS, &[("kind", "lock")]), 1.0);
            assert!(matches!(
                waiting.await.unwrap(),
                Err(crate::LockError::TimedOut { .. })
            ));
            assert_eq!(gauge(&snap, WAITERS, &[("kind", "lock")]), 0.0);

            // Renewals every lease/3.
            tokio::time::sleep(Duration::from_millis(2500)).await;
            assert!(counter(&snap, RENEWALS, &[("outcome", "renewed")]) >= 2);
            let slack = histogram(&snap, LEASE_SLACK_SECONDS, &[("kind", "lock")]);
            assert!(
                !slack.is_empty() && slack.iter().all(|s| *s > 0.0 && *s <= 3.0),
                "{slack:?}"
            );
            assert!(!histogram(&snap, RENEWAL_SECONDS, &[]).is_empty());

            guard.release().await.unwrap();
            assert_eq!(gauge(&snap, HELD, &[("kind", "lock")]), 0.0);
            let holds = histogram(&snap, HOLD_SECONDS, &[("kind", "lock")]);
            assert_eq!(holds.len(), 1);
            assert!(holds[0] >= 2.5, "{holds:?}");

            let acquisitions = |outcome| {
                counter(
                    &snap,
                    ACQUISITIONS,
                    &[("kind", "lock"), ("outcome", outcome)],
                )
            };
            assert_eq!(acquisitions("acquired"), 1);
            assert_eq!(acquisitions("busy"), 1);
            assert_eq!(acquisitions("timed_out"), 1);
            assert_eq!(acquisitions("error"), 0);
            assert_eq!(histogram(&snap, WAIT_SECONDS, &[("kind", "lock")]).len(), 1);
            // No name label unless asked for.
            assert!(values(&snap, ACQUISITIONS, &[("name", "a")]).is_empty());
        });
    }

    #[test]
    fn a_loss_is_counted_with_the_name_when_asked() {
        fn pattern(name: &str) -> String {
            name.split_once(':')
                .map_or(name, |(family, _)| family)
                .to_owned()
                + ":*"
        }
        with_recorder(|snap| async move {
            let client = LockClient::builder()
                .lease(Duration::from_secs(3))
                .metrics_names(NameLabel::Pattern(pattern))
                .memory(MemoryStore::new())
                .unwrap();
            let guard = client.lock("order:1").acquire().await.unwrap();
            assert!(client.admin().force_release("order:1").await.unwrap());
            tokio::time::sleep(Duration::from_millis(1500)).await;
            assert!(!guard.is_held());
            let labels = [("kind", "lock"), ("name", "order:*")];
            assert_eq!(counter(&snap, LOST, &labels), 1);
            assert_eq!(
                counter(&snap, RENEWALS, &[("outcome", "lost"), ("name", "order:*")]),
                1
            );
            assert_eq!(gauge(&snap, HELD, &labels), 0.0);
            assert_eq!(histogram(&snap, HOLD_SECONDS, &labels).len(), 1);
            drop(guard);
            assert_eq!(
                counter(
                    &snap,
                    ACQUISITIONS,
                    &[("outcome", "acquired"), ("name", "order:*")]
                ),
                1
            );
        });
    }

    #[test]
    fn a_fixed_lease_that_ran_out_unwatched_is_a_loss_not_a_release() {
        with_recorder(|snap| async move {
            let client = LockClient::builder().memory(MemoryStore::new()).unwrap();
            let guard = client
                .lock("f")
                .lease(Duration::from_millis(200))
                .acquire()
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert!(matches!(
                guard.release().await,
                Err(crate::LockError::LeaseLost { .. })
            ));
            assert_eq!(counter(&snap, LOST, &[("kind", "lock")]), 1);
            assert_eq!(gauge(&snap, HELD, &[("kind", "lock")]), 0.0);
        });
    }

    #[test]
    fn a_fair_lock_handed_over_is_counted() {
        with_recorder(|snap| async move {
            let client = LockClient::builder()
                .metrics_names(NameLabel::Full)
                .memory(MemoryStore::new())
                .unwrap();
            let guard = client.fair_lock("f").acquire().await.unwrap();
            let waiting =
                tokio::spawn(client.fair_lock("f").wait(Duration::from_secs(5)).acquire());
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(
                gauge(&snap, WAITERS, &[("kind", "fair"), ("name", "f")]),
                1.0
            );
            guard.release().await.unwrap();
            let next = waiting.await.unwrap().unwrap();
            assert_eq!(
                counter(&snap, HAND_OFFS, &[("kind", "fair"), ("name", "f")]),
                1
            );
            assert_eq!(gauge(&snap, WAITERS, &[("kind", "fair")]), 0.0);
            assert_eq!(gauge(&snap, HELD, &[("kind", "fair")]), 1.0);
            next.release().await.unwrap();
            assert_eq!(
                counter(
                    &snap,
                    ACQUISITIONS,
                    &[("kind", "fair"), ("outcome", "acquired")]
                ),
                2
            );
        });
    }
}
