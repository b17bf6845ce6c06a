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
//! | `distributed_lock_acquisitions_total` | counter | | `kind`, `outcome` | Acquisitions that ended, by how they ended: `acquired`, `busy` (a single try found the lock held), `timed_out` (a wait ran out), `error` (any other error, e.g. the backend failed or the client shuts down). Re-entering a lock the caller's scope holds is not an acquisition. |
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
//! `kind` is the primitive: `lock`, `fair`, `read`, `write` or `permits`.
//!
//! # Cardinality
//!
//! By default no label carries the lock's name: the number of series is
//! fixed, whatever the names. [`LockClientBuilder::metrics_names`]
//! (crate::LockClientBuilder::metrics_names) adds a `name` label to the
//! per-lock metrics (all but `distributed_lock_renewal_seconds`): the name
//! itself ([`NameLabel::Full`], for a small fixed set of names), or what a
//! function makes of it ([`NameLabel::Pattern`], e.g. `order:42` →
//! `order:*`).
//!
//! ```
//! use lock_core::metrics::NameLabel;
//! use lock_core::{LockClient, MemoryStore};
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
//! # Ok::<(), lock_core::LockError>(())
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
