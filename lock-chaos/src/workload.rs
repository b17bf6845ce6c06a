//! The workloads beside the plain lock: which exist, their lock names and settings, and
//! where each runs.

use std::time::Duration;

/// A workload beside the plain lock: each runs on names of its own, so the checker knows
/// the rule of a name from its hold's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Fair lock `fair-0`, two tasks per worker: FIFO among waiters.
    Fair,
    /// Read-write lock `rw-0`, two tasks per worker, one round in three a write.
    Rw,
    /// Semaphore `sem-0` of [`SEM_TOTAL`] permits, two tasks per worker.
    Sem,
    /// `lock_all` of two of `multi-0..2`.
    Multi,
    /// Plain lock `atleast-0` with `hold_at_least(`[`MIN_HOLD`]`)`.
    AtLeast,
    /// Plain locks `hot-0`, `hot-1` through a client built with `keep_hot`.
    Hot,
    /// `LockLayer` over HTTP: requests to another worker's server lock `layer-0`.
    Layer,
    /// A fresh client takes `shut-0` and is shut down while it holds it.
    Shutdown,
    /// A client in Redisson's layout beside the native one, on `rdsn-0`.
    Redisson,
    /// Two branches polled together (`join!`) inside the scope of a lock of their task,
    /// each taking `sib-0`: sibling futures are different owners.
    Siblings,
    /// Leader election of role [`LEADER_ROLE`] (lock `leader:lead-0`), two tasks per
    /// worker: one runs `Election::run`, one campaigns and resigns itself; every worker
    /// also observes the role (see `leader.rs`).
    Leader,
}

/// The role the leader workload elects a leader of.
pub const LEADER_ROLE: &str = "lead-0";

/// Permits of the semaphore workload.
pub const SEM_TOTAL: u32 = 2;
/// The minimum hold of the `hold_at_least` workload.
pub const MIN_HOLD: Duration = Duration::from_millis(400);
/// The linger of the hot client.
pub(crate) const HOT_LINGER: Duration = Duration::from_millis(100);
/// The shutdown workload's grace period.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_millis(50);

impl Workload {
    /// The `--quick` subset.
    pub const QUICK: [Workload; 11] = Workload::ALL;

    /// Every workload.
    pub const ALL: [Workload; 11] = [
        Workload::Fair,
        Workload::Rw,
        Workload::Sem,
        Workload::Multi,
        Workload::AtLeast,
        Workload::Hot,
        Workload::Layer,
        Workload::Shutdown,
        Workload::Redisson,
        Workload::Siblings,
        Workload::Leader,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Fair => "fair",
            Workload::Rw => "rw",
            Workload::Sem => "sem",
            Workload::Multi => "multi",
            Workload::AtLeast => "at-least",
            Workload::Hot => "hot",
            Workload::Layer => "layer",
            Workload::Shutdown => "shutdown",
            Workload::Redisson => "redisson",
            Workload::Siblings => "siblings",
            Workload::Leader => "leader",
        }
    }

    /// Tasks per worker.
    pub(crate) fn tasks(self) -> u32 {
        match self {
            Workload::Fair | Workload::Rw | Workload::Sem | Workload::Leader => 2,
            _ => 1,
        }
    }

    /// The lock names it uses.
    pub fn names(self) -> Vec<String> {
        let names: &[&str] = match self {
            Workload::Fair => &["fair-0"],
            Workload::Rw => &["rw-0"],
            Workload::Sem => &["sem-0"],
            Workload::Multi => &["multi-0", "multi-1", "multi-2"],
            Workload::AtLeast => &["atleast-0"],
            Workload::Hot => &["hot-0", "hot-1"],
            Workload::Layer => &["layer-0"],
            Workload::Shutdown => &["shut-0"],
            Workload::Redisson => &["rdsn-0"],
            Workload::Siblings => &["sib-0"],
            Workload::Leader => &["leader:lead-0"],
        };
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    /// Why `backend` cannot run it (`None`: it can). Redlock refuses the lock family, hot
    /// locks, Redisson's layout and leader election; PostgreSQL has the plain lock
    /// (`lock_all`, `hold_at_least`, the tower layer, shutdown and sibling futures are
    /// plain locks) and leader election.
    pub fn unsupported(self, backend: crate::topology::Backend) -> Option<&'static str> {
        use crate::topology::Backend;
        let plain = matches!(
            self,
            Workload::Multi
                | Workload::AtLeast
                | Workload::Layer
                | Workload::Shutdown
                | Workload::Siblings
        );
        match backend {
            _ if plain => None,
            Backend::Postgres if self == Workload::Leader => None,
            Backend::Redlock => Some("Redlock refuses it (LockError::Unsupported)"),
            Backend::Postgres => Some(match self {
                Workload::Fair | Workload::Rw | Workload::Sem => {
                    "the PostgreSQL backend has the plain lock only (the lock family is refused)"
                }
                Workload::Hot => "keep_hot is refused on PostgreSQL",
                _ => "Redisson's layout is a Redis layout",
            }),
            _ => None,
        }
    }
}

/// The names whose registers a run writes (for the end-of-run check of the store).
pub fn register_names(names: &[String], workloads: &[Workload]) -> Vec<String> {
    let mut out = names.to_vec();
    for w in workloads {
        if !matches!(w, Workload::Sem) {
            out.extend(w.names());
        }
    }
    out
}
