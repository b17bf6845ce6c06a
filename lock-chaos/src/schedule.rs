//! A seeded, randomized, composable fault schedule.
//!
//! [`generate`] turns a [`ScheduleConfig`] (seed, backend, fault kinds, run length, lease)
//! into [`Step`]s: when each fault starts, for how long (drawn in 0.3 to 2.0 times the
//! lease), and which target the harness should pick. Steps may overlap (a partition during
//! a pause), up to `max_concurrent` at once; faults that change the servers' topology
//! ([`FaultKind::exclusive`]) never overlap one another. The same configuration always gives
//! the same schedule: print the seed, and a failing run can be replayed.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

use crate::nemesis::Fault;
use crate::topology::Backend;

/// Faults that the nemesis of `nemesis.rs` does not know (they need the network lab of
/// `netns.rs` or server-side actions of their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NetFault {
    /// A worker cut off from every server, both ways (network namespaces).
    PartitionBoth,
    /// Only the worker's packets to the servers are dropped.
    PartitionToServer,
    /// Only the servers' packets to the worker are dropped (its commands run; it never hears).
    PartitionFromServer,
    /// A worker cut off from one master only (Redlock: one of five; Cluster: its lock's
    /// shard; Sentinel: the master while the sentinels still see it).
    PartitionOneMaster,
    /// Redlock: the holder acquires while two masters are unreachable for it, so its lock
    /// is held on exactly three of five (see `bare_majority.rs`).
    BareMajority,
    /// Sentinel, Cluster: `SIGSTOP` the lock's master for longer than
    /// `down-after-milliseconds` / `cluster-node-timeout` (a failover starts while it is
    /// stopped), then `SIGCONT` (the old master comes back and is demoted).
    PauseMasterPastDownAfter,
    /// Sentinel (`SENTINEL FAILOVER`), Cluster (`CLUSTER FAILOVER` on the replica): a
    /// failover without a crash, under load.
    ManualFailover,
    /// Sentinel, Cluster: `SIGSTOP` the replica for the duration, so acknowledged writes
    /// pile up unreplicated (a failover during it loses them).
    ReplicationLag,
    /// Sentinel: the master cut off from its replica and the sentinels (the workers still
    /// reach it) until the sentinels promoted the replica, and for the duration after: two
    /// masters, unless `min-replicas-to-write` stops the old one.
    SplitBrain,
}

impl NetFault {
    /// Every kind.
    pub const ALL: [NetFault; 9] = [
        NetFault::PartitionBoth,
        NetFault::PartitionToServer,
        NetFault::PartitionFromServer,
        NetFault::PartitionOneMaster,
        NetFault::BareMajority,
        NetFault::PauseMasterPastDownAfter,
        NetFault::ManualFailover,
        NetFault::ReplicationLag,
        NetFault::SplitBrain,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            NetFault::PartitionBoth => "partition_both",
            NetFault::PartitionToServer => "partition_to_server",
            NetFault::PartitionFromServer => "partition_from_server",
            NetFault::PartitionOneMaster => "partition_one_master",
            NetFault::BareMajority => "bare_majority",
            NetFault::PauseMasterPastDownAfter => "pause_master_past_down_after",
            NetFault::ManualFailover => "manual_failover",
            NetFault::ReplicationLag => "replication_lag",
            NetFault::SplitBrain => "split_brain",
        }
    }

    /// The kinds that make sense on `backend`.
    pub fn for_backend(backend: Backend) -> Vec<NetFault> {
        use NetFault::*;
        match backend {
            Backend::Memory | Backend::Postgres => Vec::new(),
            Backend::Standalone => vec![PartitionBoth, PartitionToServer, PartitionFromServer],
            Backend::Sentinel => vec![
                PartitionBoth,
                PartitionToServer,
                PartitionFromServer,
                PartitionOneMaster,
                PauseMasterPastDownAfter,
                ManualFailover,
                ReplicationLag,
                SplitBrain,
            ],
            Backend::Cluster => vec![
                PartitionBoth,
                PartitionToServer,
                PartitionFromServer,
                PartitionOneMaster,
                PauseMasterPastDownAfter,
                ManualFailover,
                ReplicationLag,
            ],
            Backend::Redlock => vec![
                PartitionBoth,
                PartitionToServer,
                PartitionFromServer,
                PartitionOneMaster,
                BareMajority,
            ],
        }
    }
}

/// A fault of either list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// One of `nemesis.rs`'s faults.
    Classic(Fault),
    /// One of the faults above.
    Net(NetFault),
}

impl FaultKind {
    /// Every kind of either list.
    pub fn all() -> Vec<FaultKind> {
        Fault::ALL
            .iter()
            .map(|&f| FaultKind::Classic(f))
            .chain(NetFault::ALL.iter().map(|&f| FaultKind::Net(f)))
            .collect()
    }

    /// The kinds named in `list` (names as in the tables, comma-separated); an error naming
    /// an unknown one and listing the valid names.
    pub fn parse_list(list: &str) -> Result<Vec<FaultKind>, String> {
        let all = FaultKind::all();
        let mut kinds = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let kind = all
                .iter()
                .copied()
                .find(|k| k.name() == name)
                .ok_or_else(|| {
                    let valid: Vec<&str> = all.iter().map(|k| k.name()).collect();
                    format!(
                        "unknown fault kind `{name}`; valid kinds: {}",
                        valid.join(", ")
                    )
                })?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if kinds.is_empty() {
            return Err("no fault kind named".to_owned());
        }
        Ok(kinds)
    }

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Classic(f) => f.name(),
            FaultKind::Net(f) => f.name(),
        }
    }

    /// Faults that change which servers run or lead: at most one at a time, whatever the
    /// concurrency cap (two failovers at once test the harness, not the library).
    pub fn exclusive(self) -> bool {
        match self {
            FaultKind::Classic(f) => matches!(
                f,
                Fault::RestartPersistent
                    | Fault::RestartEmpty
                    | Fault::Failover
                    | Fault::SlotMigration
                    | Fault::StopMinority
                    | Fault::StopMajority
                    | Fault::ClockJumpForward
                    | Fault::ClockJumpBack
                    | Fault::PauseServer
                    | Fault::RestartFast
                    | Fault::RestartCrash
            ),
            FaultKind::Net(f) => matches!(
                f,
                NetFault::PauseMasterPastDownAfter
                    | NetFault::ManualFailover
                    | NetFault::ReplicationLag
                    | NetFault::BareMajority
                    | NetFault::SplitBrain
            ),
        }
    }

    /// Whether the fault should wait for a long hold with a waiter (state-triggered, see
    /// `trigger.rs`) before it starts.
    pub fn triggered(self) -> bool {
        !matches!(
            self,
            FaultKind::Classic(Fault::ScriptFlush | Fault::ClientKill | Fault::ProxyReset)
        )
    }

    /// What the harness should aim the fault at.
    pub fn default_target(self) -> TargetSelector {
        match self {
            FaultKind::Classic(f) => match f {
                Fault::PauseHolder
                | Fault::KillHolder
                | Fault::Partition
                | Fault::Latency
                | Fault::TerminateBackends => TargetSelector::Holder,
                Fault::RestartPersistent
                | Fault::RestartEmpty
                | Fault::PauseServer
                | Fault::RestartFast
                | Fault::RestartCrash => TargetSelector::LockMaster,
                Fault::Failover | Fault::SlotMigration => TargetSelector::LockMaster,
                Fault::StopMinority => TargetSelector::Masters(2),
                Fault::StopMajority => TargetSelector::Masters(3),
                Fault::ForceRelease => TargetSelector::Lock,
                Fault::ClientKill
                | Fault::ScriptFlush
                | Fault::ClockJumpForward
                | Fault::ClockJumpBack
                | Fault::ProxyReset => TargetSelector::AllServers,
            },
            FaultKind::Net(f) => match f {
                NetFault::PartitionBoth
                | NetFault::PartitionToServer
                | NetFault::PartitionFromServer
                | NetFault::PartitionOneMaster
                | NetFault::BareMajority => TargetSelector::Holder,
                NetFault::PauseMasterPastDownAfter
                | NetFault::ManualFailover
                | NetFault::SplitBrain => TargetSelector::LockMaster,
                NetFault::ReplicationLag => TargetSelector::LockReplica,
            },
        }
    }
}

/// Which process or server a step is aimed at; the harness resolves it when the step starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetSelector {
    /// The worker holding the triggered lock (a long hold with a waiter).
    Holder,
    /// The master serving the triggered lock (Redlock: a master chosen by `pick`).
    LockMaster,
    /// The replica of that master.
    LockReplica,
    /// This many masters (Redlock), starting at the step's `pick` modulo the count.
    Masters(usize),
    /// Every data server.
    AllServers,
    /// The triggered lock itself, through the admin API (an operator's action on it).
    Lock,
}

/// What [`generate`] needs.
#[derive(Debug, Clone)]
pub struct ScheduleConfig {
    /// The seed (print it: the same seed gives the same schedule).
    pub seed: u64,
    /// The kinds to draw from.
    pub kinds: Vec<FaultKind>,
    /// The whole run, baseline included.
    pub run: Duration,
    /// Fault-free time at the start.
    pub baseline: Duration,
    /// The workers' lease: durations are drawn in `0.3..=2.0` times it.
    pub lease: Duration,
    /// The mean time between two starts.
    pub mean_gap: Duration,
    /// At most this many faults active at once.
    pub max_concurrent: usize,
    /// Floor of [`NetFault::PauseMasterPastDownAfter`]'s duration: it must outlast the
    /// failure detector (Sentinel `down-after-milliseconds`, `cluster-node-timeout`).
    pub down_after: Duration,
}

impl ScheduleConfig {
    /// Defaults for `backend`: every classic fault of `nemesis.rs`'s full list for it plus
    /// [`NetFault::for_backend`], a baseline of 10 s, a start every lease on average, at
    /// most 2 faults at once, a failure detector of 1 s (the test support's settings).
    pub fn new(backend: Backend, seed: u64, run: Duration, lease: Duration) -> ScheduleConfig {
        let mut kinds: Vec<FaultKind> = crate::nemesis::Schedule::for_backend(backend, false, 1)
            .faults
            .into_iter()
            .map(FaultKind::Classic)
            .collect();
        kinds.dedup();
        kinds.extend(
            NetFault::for_backend(backend)
                .into_iter()
                .map(FaultKind::Net),
        );
        ScheduleConfig {
            seed,
            kinds,
            run,
            baseline: Duration::from_secs(10),
            lease,
            mean_gap: lease,
            max_concurrent: 2,
            down_after: Duration::from_secs(1),
        }
    }

    /// The run length at which each kind is drawn about `per_kind` times.
    pub fn run_for(&self, per_kind: usize) -> Duration {
        self.baseline
            + self
                .mean_gap
                .saturating_mul((per_kind * self.kinds.len()) as u32)
            + self.lease.saturating_mul(3)
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// When it starts, from the start of the run (a triggered step may start later: its
    /// trigger waits for a long hold).
    pub at: Duration,
    /// Which fault.
    pub kind: FaultKind,
    /// How long it stays active (instant faults: how long before the next exclusive one).
    pub duration: Duration,
    /// What to aim it at.
    pub target: TargetSelector,
    /// A random number for the harness's choices within the target (which master, which
    /// worker when there is no holder), so that those are seeded too.
    pub pick: u64,
}

impl Step {
    /// When it is healed.
    pub fn end(&self) -> Duration {
        self.at + self.duration
    }
}

/// A seed from the clock, for runs without `--seed` (print it).
pub fn fresh_seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32)
}

/// The schedule of `config` (empty when it has no kinds), ordered by start.
pub fn generate(config: &ScheduleConfig) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut steps: Vec<Step> = Vec::new();
    if config.kinds.is_empty() {
        return steps;
    }
    let cap = config.max_concurrent.max(1);
    let lease = config.lease.as_secs_f64();
    let gap = config.mean_gap.as_secs_f64();
    let mut counts = vec![0usize; config.kinds.len()];
    let mut t = config.baseline.as_secs_f64();
    let end = config.run.as_secs_f64() - 2.0 * lease;
    loop {
        t += gap * rng.random_range(0.2..1.8);
        // Least-drawn kinds first half the time, so every kind gets its share over a run.
        let index = if rng.random_bool(0.5) {
            let least = *counts.iter().min().unwrap_or(&0);
            let candidates: Vec<usize> =
                (0..counts.len()).filter(|&i| counts[i] == least).collect();
            candidates[rng.random_range(0..candidates.len())]
        } else {
            rng.random_range(0..config.kinds.len())
        };
        let kind = config.kinds[index];
        let mut duration = lease * rng.random_range(0.3..=2.0);
        if kind == FaultKind::Net(NetFault::PauseMasterPastDownAfter) {
            duration = duration.max(config.down_after.as_secs_f64() * 1.5);
        }
        // Respect the cap and exclusivity: start when enough of the active ones ended.
        loop {
            let active: Vec<&Step> = steps
                .iter()
                .filter(|s| s.at.as_secs_f64() <= t && s.end().as_secs_f64() > t)
                .collect();
            let blocking_end = active
                .iter()
                .filter(|s| kind.exclusive() && s.kind.exclusive())
                .map(|s| s.end().as_secs_f64())
                .fold(None, |a: Option<f64>, e| Some(a.map_or(e, |a| a.max(e))));
            if let Some(e) = blocking_end {
                t = e;
                continue;
            }
            if active.len() >= cap {
                t = active
                    .iter()
                    .map(|s| s.end().as_secs_f64())
                    .fold(f64::INFINITY, f64::min);
                continue;
            }
            break;
        }
        if t >= end {
            break;
        }
        counts[index] += 1;
        steps.push(Step {
            at: Duration::from_secs_f64(t),
            kind,
            duration: Duration::from_secs_f64(duration),
            target: kind.default_target(),
            pick: rng.random(),
        });
    }
    steps
}

/// One line per step, for the log of a run (with the seed first).
#[allow(dead_code)]
pub fn describe(config: &ScheduleConfig, steps: &[Step]) -> String {
    let mut out = format!("schedule seed {} ({} steps)\n", config.seed, steps.len());
    for s in steps {
        out.push_str(&format!(
            "  +{:>8.3} s  {:<30} {:>6} ms  {:?}\n",
            s.at.as_secs_f64(),
            s.kind.name(),
            s.duration.as_millis(),
            s.target
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(1500);

    fn config(backend: Backend, seed: u64, run: Duration) -> ScheduleConfig {
        ScheduleConfig::new(backend, seed, run, LEASE)
    }

    #[test]
    fn same_seed_same_schedule_other_seed_other_schedule() {
        let a = generate(&config(Backend::Redlock, 42, Duration::from_secs(600)));
        let b = generate(&config(Backend::Redlock, 42, Duration::from_secs(600)));
        let c = generate(&config(Backend::Redlock, 43, Duration::from_secs(600)));
        assert!(!a.is_empty());
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn durations_within_bounds_and_starts_ordered() {
        for backend in [
            Backend::Standalone,
            Backend::Sentinel,
            Backend::Cluster,
            Backend::Redlock,
        ] {
            let cfg = config(backend, 7, Duration::from_secs(1800));
            let steps = generate(&cfg);
            for s in &steps {
                let ratio = s.duration.as_secs_f64() / LEASE.as_secs_f64();
                if s.kind == FaultKind::Net(NetFault::PauseMasterPastDownAfter) {
                    assert!(s.duration >= cfg.down_after, "{s:?}");
                    assert!(ratio <= 2.0 + 1e-9, "{s:?}");
                } else {
                    assert!((0.3 - 1e-9..=2.0 + 1e-9).contains(&ratio), "{s:?}");
                }
                assert!(s.at >= cfg.baseline);
                assert!(s.end() <= cfg.run, "{s:?} ends after the run");
            }
            assert!(steps.windows(2).all(|w| w[0].at <= w[1].at));
        }
    }

    #[test]
    fn every_kind_often_enough_for_50_effective_injections() {
        for backend in [
            Backend::Standalone,
            Backend::Sentinel,
            Backend::Cluster,
            Backend::Redlock,
        ] {
            let mut cfg = config(backend, 99, Duration::ZERO);
            cfg.run = cfg.run_for(80);
            let steps = generate(&cfg);
            for &kind in &cfg.kinds {
                let n = steps.iter().filter(|s| s.kind == kind).count();
                assert!(
                    n >= 60,
                    "{}: {} drawn {n} times",
                    backend.name(),
                    kind.name()
                );
            }
        }
    }

    #[test]
    fn overlaps_occur_within_the_cap_and_exclusive_faults_never_overlap() {
        let cfg = config(Backend::Sentinel, 5, Duration::from_secs(3600));
        let steps = generate(&cfg);
        let mut overlaps = 0;
        for (i, s) in steps.iter().enumerate() {
            let active: Vec<&Step> = steps[..i].iter().filter(|p| p.end() > s.at).collect();
            assert!(active.len() < cfg.max_concurrent, "cap exceeded at {s:?}");
            if !active.is_empty() {
                overlaps += 1;
            }
            if s.kind.exclusive() {
                assert!(
                    active.iter().all(|p| !p.kind.exclusive()),
                    "two exclusive faults at once: {s:?} {active:?}"
                );
            }
        }
        assert!(
            overlaps >= steps.len() / 10,
            "{overlaps} overlaps in {}",
            steps.len()
        );
        assert!(describe(&cfg, &steps).starts_with("schedule seed 5"));
    }

    #[test]
    fn each_clock_jump_direction_is_a_kind_drawn_per_kind_times() {
        for backend in [Backend::Standalone, Backend::Sentinel, Backend::Cluster] {
            let mut cfg = config(backend, 11, Duration::ZERO);
            cfg.run = cfg.run_for(80);
            let steps = generate(&cfg);
            for kind in [Fault::ClockJumpForward, Fault::ClockJumpBack] {
                let n = steps
                    .iter()
                    .filter(|s| s.kind == FaultKind::Classic(kind))
                    .count();
                assert!(
                    n >= 60,
                    "{}: {} drawn {n} times",
                    backend.name(),
                    kind.name()
                );
            }
        }
    }

    #[test]
    fn a_fault_list_names_kinds_as_the_tables_do() {
        let kinds = FaultKind::parse_list("clock_jump_forward, clock_jump_back").unwrap();
        assert_eq!(
            kinds,
            vec![
                FaultKind::Classic(Fault::ClockJumpForward),
                FaultKind::Classic(Fault::ClockJumpBack)
            ]
        );
        assert_eq!(
            FaultKind::parse_list("manual_failover").unwrap(),
            vec![FaultKind::Net(NetFault::ManualFailover)]
        );
        let err = FaultKind::parse_list("clock_jump_forward,clock_jmp").unwrap_err();
        assert!(err.contains("`clock_jmp`"), "{err}");
        assert!(
            err.contains("split_brain") && err.contains("pause_holder"),
            "{err}"
        );
        assert!(FaultKind::parse_list(" , ").is_err());
        for kind in FaultKind::all() {
            assert_eq!(FaultKind::parse_list(kind.name()).unwrap(), vec![kind]);
        }
    }

    #[test]
    fn no_kinds_no_steps() {
        let mut cfg = config(Backend::Memory, 1, Duration::from_secs(60));
        cfg.kinds.clear();
        assert!(generate(&cfg).is_empty());
    }
}
