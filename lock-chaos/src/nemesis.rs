//! The faults and the schedule the nemesis injects them on.

use std::time::Duration;

use crate::topology::Backend;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `SIGSTOP` a lock holder's worker process past its lease, then `SIGCONT`.
    PauseHolder,
    /// `SIGKILL` a lock holder's worker process (a new worker replaces it).
    KillHolder,
    /// `SIGKILL` the Redis node and restart it from its append-only file (fsync always).
    RestartPersistent,
    /// `SIGKILL` the Redis node and restart it with its data deleted.
    RestartEmpty,
    /// `CLIENT KILL` every normal and pub/sub connection.
    ClientKill,
    /// `SCRIPT FLUSH` (the next calls get `NOSCRIPT`).
    ScriptFlush,
    /// Blackhole one worker's connections to every Redis server, then heal.
    Partition,
    /// Add latency to every chunk between one worker and Redis.
    Latency,
    /// Reset (RST) every connection between workers and Redis.
    ProxyReset,
    /// Kill the master of a lock and let a replica take over (Sentinel, Cluster).
    Failover,
    /// Kill 2 of 5 Redlock masters, restart them empty.
    StopMinority,
    /// Pause 3 of 5 Redlock masters, then resume them.
    StopMajority,
    /// Jump the wall clock of the aimed lock's master forward by the step's duration (with
    /// the clock library; emulated without it: every TTL of every data server cut by two
    /// leases at once). Held locks expire early; counters stay.
    ClockJumpForward,
    /// Jump that clock back by the step's duration (emulated: every TTL lengthened by two
    /// leases). TTLs only last longer; nothing is lost.
    ClockJumpBack,
    /// An operator's force release: the admin API deletes a held lock (a plain lock, or the
    /// family's fair lock, read-write lock or semaphore), as `lockctl` does, whoever holds
    /// it. Its holder is no longer protected: a waiter may take the lock at once, and the
    /// holder must learn of it through `lost()` within the usual bound.
    ForceRelease,
    /// Cluster: move the aimed lock's slot to another master in slow steps (`SETSLOT
    /// IMPORTING`/`MIGRATING`, one key `MIGRATE`d per step, then `SETSLOT NODE`), as a
    /// resharding does while services run. Held locks move with their TTL, the slot's fencing
    /// counter with them; waiters' sharded subscriptions must follow the slot.
    SlotMigration,
    /// PostgreSQL: `SIGSTOP` the server (the postmaster and every backend) for the duration,
    /// then `SIGCONT`: statements hang, leases run out on the server's clock meanwhile.
    PauseServer,
    /// PostgreSQL: `pg_terminate_backend` of every session of the holder's worker (its
    /// command and `LISTEN` connections, found by their `application_name`).
    TerminateBackends,
    /// PostgreSQL: a fast shutdown (`SIGINT`, checkpoint) and a start on the same data.
    /// Committed transactions survive whatever `synchronous_commit` says.
    RestartFast,
    /// PostgreSQL: `SIGKILL` of the postmaster and every backend, then a start (crash
    /// recovery). With `synchronous_commit = on` every acknowledged commit survives; with
    /// `off` the last ones (up to about three `wal_writer_delay`s) may be lost, lock rows
    /// and fence counters with them.
    RestartCrash,
}

impl Fault {
    /// Every fault (the checker looks faults up by name here: a fault missing from this
    /// list would touch no hold, so everything under it would count as a violation).
    pub const ALL: [Fault; 20] = [
        Fault::PauseHolder,
        Fault::KillHolder,
        Fault::RestartPersistent,
        Fault::RestartEmpty,
        Fault::ClientKill,
        Fault::ScriptFlush,
        Fault::Partition,
        Fault::Latency,
        Fault::ProxyReset,
        Fault::Failover,
        Fault::StopMinority,
        Fault::StopMajority,
        Fault::ClockJumpForward,
        Fault::ClockJumpBack,
        Fault::ForceRelease,
        Fault::SlotMigration,
        Fault::PauseServer,
        Fault::TerminateBackends,
        Fault::RestartFast,
        Fault::RestartCrash,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Fault::PauseHolder => "pause_holder",
            Fault::KillHolder => "kill_holder",
            Fault::RestartPersistent => "restart_persistent",
            Fault::RestartEmpty => "restart_empty",
            Fault::ClientKill => "client_kill",
            Fault::ScriptFlush => "script_flush",
            Fault::Partition => "partition",
            Fault::Latency => "latency",
            Fault::ProxyReset => "proxy_reset",
            Fault::Failover => "failover",
            Fault::StopMinority => "stop_minority",
            Fault::StopMajority => "stop_majority",
            Fault::ClockJumpForward => "clock_jump_forward",
            Fault::ClockJumpBack => "clock_jump_back",
            Fault::ForceRelease => "force_release",
            Fault::SlotMigration => "slot_migration",
            Fault::PauseServer => "pause_server",
            Fault::TerminateBackends => "terminate_backends",
            Fault::RestartFast => "restart_fast",
            Fault::RestartCrash => "restart_crash",
        }
    }

    /// The fault an older history's name stands for: the current names, and the names of
    /// earlier rounds (`clock_jump`: the one clock jump kind, emulated forward;
    /// `clock_jump_backward`: a backward jump with the clock library).
    pub fn from_name(name: &str) -> Option<Fault> {
        match name {
            "clock_jump" => Some(Fault::ClockJumpForward),
            "clock_jump_backward" => Some(Fault::ClockJumpBack),
            _ => Fault::ALL.iter().copied().find(|f| f.name() == name),
        }
    }

    /// Whether the fault can lose a lock's fence counter (tokens may then repeat or go
    /// back): an empty restart, or a failover that loses the last `INCR`.
    pub fn loses_counter(self) -> bool {
        matches!(self, Fault::RestartEmpty | Fault::Failover)
    }

    /// Whether the fault can make the lock's data disappear at the moment it starts, so the
    /// loss time is the fault's start.
    pub fn destroys_lock(self) -> bool {
        matches!(
            self,
            Fault::RestartEmpty | Fault::Failover | Fault::ClockJumpForward
        )
    }
}

/// The plan of one backend's run.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Fault-free time at the start.
    pub baseline: Duration,
    /// The faults in order; each is followed by `settle`.
    pub faults: Vec<Fault>,
    /// How long a fault stays active (pauses, partitions, latency, stopped masters).
    pub active: Duration,
    /// Quiet time after each fault is healed.
    pub settle: Duration,
}

impl Schedule {
    /// The schedule of `backend`: `quick` is the CI subset. `rounds` repeats the fault list.
    pub fn for_backend(backend: Backend, quick: bool, rounds: usize) -> Schedule {
        use Fault::*;
        let faults: Vec<Fault> = match (backend, quick) {
            (Backend::Memory, _) => Vec::new(),
            (Backend::Standalone, true) => {
                vec![
                    PauseHolder,
                    KillHolder,
                    Partition,
                    ScriptFlush,
                    ForceRelease,
                    RestartPersistent,
                ]
            }
            (Backend::Sentinel | Backend::Cluster, true) => vec![PauseHolder, ClientKill, Failover],
            (Backend::Redlock, true) => vec![PauseHolder, StopMinority],
            (Backend::Postgres, true) => {
                vec![PauseServer, KillHolder, TerminateBackends, RestartCrash]
            }
            (Backend::Postgres, false) => vec![
                PauseServer,
                KillHolder,
                TerminateBackends,
                RestartFast,
                RestartCrash,
            ],
            (Backend::Standalone, false) => vec![
                PauseHolder,
                KillHolder,
                ClientKill,
                ScriptFlush,
                Partition,
                Latency,
                ProxyReset,
                RestartPersistent,
                ClockJumpForward,
                ClockJumpBack,
                ForceRelease,
            ],
            (Backend::Sentinel, false) => {
                vec![
                    PauseHolder,
                    KillHolder,
                    ClientKill,
                    ScriptFlush,
                    ClockJumpForward,
                    ClockJumpBack,
                    ForceRelease,
                    Failover,
                ]
            }
            (Backend::Cluster, false) => {
                vec![
                    PauseHolder,
                    KillHolder,
                    ClientKill,
                    ScriptFlush,
                    ClockJumpForward,
                    ClockJumpBack,
                    ForceRelease,
                    Failover,
                    SlotMigration,
                ]
            }
            (Backend::Redlock, false) => vec![
                PauseHolder,
                KillHolder,
                ClientKill,
                ScriptFlush,
                Partition,
                Latency,
                ProxyReset,
                RestartPersistent,
                StopMinority,
                StopMajority,
                ForceRelease,
            ],
        };
        let mut all: Vec<Fault> = (0..rounds.max(1)).flat_map(|_| faults.clone()).collect();
        // Data loss resets the fence counters: it goes last, so the rest of the run is not
        // one long stale-token rejection.
        if backend == Backend::Standalone && !quick {
            all.push(RestartEmpty);
        }
        Schedule {
            baseline: if backend == Backend::Memory {
                Duration::from_secs(if quick { 10 } else { 30 })
            } else {
                Duration::from_secs(if quick { 6 } else { 10 })
            },
            faults: all,
            active: Duration::from_secs(3),
            settle: Duration::from_secs(4),
        }
    }
}
