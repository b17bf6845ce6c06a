//! Replays a saved history (`run --history DIR`) through the checker, without servers.
//!
//! A history directory holds one backend's event logs (`nemesis.jsonl`, `worker-N.jsonl`)
//! and, from runs that recorded it, `run.json` (the run's start and end and its lease).
//! Without it the run is taken to span its events, from the earliest to the latest time
//! recorded (the run's own start and end bracket every event, a few ms outside them).
//! From runs that recorded it, `registers.json` holds what the register store showed at the
//! end of the run (every register's final value and its log of applied writes), and the
//! replay checks it as the run did; without it that check is left out.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::ValueEnum as _;
use serde::{Deserialize, Serialize};

use crate::checker::{self, BackendReport};
use crate::event::Event;
use crate::register::RegisterTruth;
use crate::topology::Backend;

/// What `run` records of a backend's run beside its events.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RunBounds {
    /// When the run started ([`crate::clock::now_ns`]).
    pub run_start: u64,
    /// When the workers had stopped.
    pub run_end: u64,
    /// The workers' lease, ms.
    pub lease_ms: u64,
}

/// The file of [`RunBounds`] in a backend's history directory.
pub const RUN_FILE: &str = "run.json";

/// The file of the register store's end state ([`RegisterTruth`]s) in a history directory.
pub const REGISTERS_FILE: &str = "registers.json";

/// Writes the register store's end state into the history directory `dir`.
pub fn save_registers(dir: &Path, truth: &[RegisterTruth]) -> anyhow::Result<()> {
    std::fs::write(dir.join(REGISTERS_FILE), serde_json::to_vec(truth)?)?;
    Ok(())
}

/// The register store's end state saved in `dir`, if the run saved it.
pub fn load_registers(dir: &Path) -> anyhow::Result<Option<Vec<RegisterTruth>>> {
    match std::fs::read(dir.join(REGISTERS_FILE)) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes).context(REGISTERS_FILE)?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Writes `bounds` into the history directory `dir`.
pub fn save_bounds(dir: &Path, bounds: &RunBounds) -> anyhow::Result<()> {
    std::fs::write(dir.join(RUN_FILE), serde_json::to_vec(bounds)?)?;
    Ok(())
}

/// The directories to check under `dir`, with their backend: `dir` itself when it holds
/// event logs (its backend is `backend`, or its name), else each subdirectory named after
/// a backend (`run --history` writes one per backend), only `backend`'s when given.
pub fn backend_dirs(
    dir: &Path,
    backend: Option<Backend>,
) -> anyhow::Result<Vec<(Backend, PathBuf)>> {
    let named = |path: &Path| {
        let name = path.file_name()?.to_str()?;
        Backend::value_variants()
            .iter()
            .copied()
            .find(|b| b.name() == name)
    };
    if !logs(dir)?.is_empty() {
        let found = backend.or_else(|| named(dir)).with_context(|| {
            format!(
                "{}: which backend's history is this? (pass --backend)",
                dir.display()
            )
        })?;
        return Ok(vec![(found, dir.to_owned())]);
    }
    let mut found = Vec::new();
    for &b in Backend::value_variants() {
        let sub = dir.join(b.name());
        if backend.is_none_or(|want| want == b) && sub.is_dir() && !logs(&sub)?.is_empty() {
            found.push((b, sub));
        }
    }
    anyhow::ensure!(
        !found.is_empty(),
        "{}: no event logs (*.jsonl) here or in a backend's subdirectory",
        dir.display()
    );
    Ok(found)
}

/// The event logs in `dir`.
fn logs(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// The earliest and latest time an event records.
fn span(event: &Event) -> (u64, u64) {
    match event {
        Event::Acquired { t_start, t, .. }
        | Event::AcquireFailed { t_start, t, .. }
        | Event::Released { t_start, t, .. }
        | Event::Stall { t_start, t, .. }
        | Event::RuntimeStall { t_start, t, .. }
        | Event::ShutdownDone { t_start, t, .. }
        | Event::Harness { t_start, t, .. } => ((*t_start).min(*t), (*t_start).max(*t)),
        Event::Hello { t, .. }
        | Event::Write { t, .. }
        | Event::Lost { t, .. }
        | Event::WriteIntent { t, .. }
        | Event::KeyGone { t, .. }
        | Event::Layouts { t, .. }
        | Event::ReleaseStarted { t, .. }
        | Event::Claim { t, .. }
        | Event::Granted { t, .. }
        | Event::Observed { t, .. }
        | Event::Fault { t, .. } => (*t, *t),
    }
}

/// The lease of a history that recorded none, and none was given: `run`'s default.
pub const DEFAULT_LEASE: Duration = Duration::from_millis(1500);

/// Checks the history in `dir` as `run` checks it at the end of a backend's run, with the
/// lease `lease`, else the one the run recorded, else [`DEFAULT_LEASE`], with the register
/// store's end state the run saved (without it, the end-of-run check of the store's log is
/// left out).
pub fn check_dir(
    backend: Backend,
    dir: &Path,
    lease: Option<Duration>,
) -> anyhow::Result<BackendReport> {
    let mut events = Vec::new();
    for path in logs(dir)? {
        events.extend(crate::sink::read_events(&path)?);
    }
    let saved: Option<RunBounds> = match std::fs::read(dir.join(RUN_FILE)) {
        Ok(bytes) => Some(serde_json::from_slice(&bytes).context(RUN_FILE)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let (run_start, run_end, lease) = match saved {
        Some(b) => (
            b.run_start,
            b.run_end,
            lease.unwrap_or(Duration::from_millis(b.lease_ms)),
        ),
        None => {
            let (first, last) = events
                .iter()
                .map(span)
                .fold((u64::MAX, 0), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)));
            anyhow::ensure!(first <= last, "{}: no events", dir.display());
            (first, last, lease.unwrap_or(DEFAULT_LEASE))
        }
    };
    let truth = load_registers(dir)?;
    Ok(checker::analyze(
        backend.name(),
        &events,
        truth.as_deref(),
        lease,
        run_start,
        run_end,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_is_found_by_its_backends_name_or_under_it() {
        let root = std::env::temp_dir().join(format!("replay-test-{}", std::process::id()));
        let dir = root.join("standalone");
        std::fs::create_dir_all(&dir).unwrap();
        let hello = Event::Hello {
            t: 5_000,
            worker: 0,
            pid: 1,
            client_id: "c".into(),
        };
        let released = Event::Released {
            t_start: 7_000,
            t: 9_000,
            worker: 0,
            task: 0,
            hold: "w0-t0-0".into(),
            name: "chaos-0".into(),
            owner: "o".into(),
            token: 1,
            result: "ok".into(),
        };
        let lines: Vec<String> = [hello, released]
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        std::fs::write(dir.join("worker-0.jsonl"), lines.join("\n") + "\n{\"torn").unwrap();
        let under = backend_dirs(&root, None).unwrap();
        assert_eq!(under, [(Backend::Standalone, dir.clone())]);
        assert!(backend_dirs(&root, Some(Backend::Redlock)).is_err());
        assert_eq!(backend_dirs(&dir, None).unwrap(), under);
        let report = check_dir(Backend::Standalone, &dir, None).unwrap();
        // The run spans its events: 5 us to 9 us.
        assert!(
            (report.duration_s - 4e-6).abs() < 1e-12,
            "{}",
            report.duration_s
        );
        // A recorded run's bounds and lease win.
        save_bounds(
            &dir,
            &RunBounds {
                run_start: 1_000,
                run_end: 11_000,
                lease_ms: 800,
            },
        )
        .unwrap();
        let report = check_dir(Backend::Standalone, &dir, None).unwrap();
        assert!((report.duration_s - 1e-5).abs() < 1e-12);
        assert_eq!(report.lease_ms, 800.0);
        let given = Some(Duration::from_millis(1200));
        assert_eq!(
            check_dir(Backend::Standalone, &dir, given)
                .unwrap()
                .lease_ms,
            1200.0
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_register_store_saved_with_the_history_gives_the_runs_verdicts() {
        use crate::event::Register;
        use crate::register::LoggedWrite;
        let dir = std::env::temp_dir().join(format!("replay-reg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ms = 1_000_000;
        let acquired = |t: u64, worker: u32, hold: &str, token: u64| Event::Acquired {
            t_start: t * ms,
            t: t * ms,
            worker,
            task: 0,
            hold: hold.into(),
            mode: crate::event::TaskMode::GuardNaive,
            name: "chaos-0".into(),
            owner: format!("o{worker}"),
            token,
            kind: Default::default(),
            permits: 0,
            total: 0,
            min_hold_ms: 0,
        };
        let intent = |t: u64, worker: u32, hold: &str, token: u64| Event::WriteIntent {
            t: t * ms,
            worker,
            task: 0,
            hold: hold.into(),
            name: "chaos-0".into(),
            token,
            register: Register::Fenced,
            read: 0,
        };
        let released = |t: u64, worker: u32, hold: &str, token: u64| Event::Released {
            t_start: t * ms,
            t: t * ms,
            worker,
            task: 0,
            hold: hold.into(),
            name: "chaos-0".into(),
            owner: format!("o{worker}"),
            token,
            result: "ok".into(),
        };
        // Two writes applied from the same read: the second (token 6) overwrote the first
        // without having read it. Its worker never heard the answer: only the store's log
        // shows it.
        let events = [
            acquired(100, 0, "w0-t0-0", 5),
            intent(150, 0, "w0-t0-0", 5),
            released(170, 0, "w0-t0-0", 5),
            acquired(200, 1, "w1-t0-0", 6),
            intent(250, 1, "w1-t0-0", 6),
            released(260, 1, "w1-t0-0", 6),
        ];
        let lines: Vec<String> = events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        std::fs::write(dir.join("worker-0.jsonl"), lines.join("\n") + "\n").unwrap();
        let bounds = RunBounds {
            run_start: 0,
            run_end: 1_000 * ms,
            lease_ms: 1500,
        };
        save_bounds(&dir, &bounds).unwrap();
        let truth = vec![RegisterTruth {
            name: "chaos-0".into(),
            register: Register::Fenced,
            value: 1,
            log: ["w0-t0-0|5|0|0|1", "w1-t0-0|6|0|1|1", "torn"]
                .iter()
                .map(|e| LoggedWrite::parse(e))
                .collect(),
            in_lock_servers: false,
        }];
        let run = checker::analyze(
            "standalone",
            &events,
            Some(&truth),
            Duration::from_millis(1500),
            bounds.run_start,
            bounds.run_end,
        );
        let kinds = |r: &BackendReport| {
            let mut k: Vec<String> = r
                .violations
                .iter()
                .filter(|v| v.counts())
                .map(|v| v.kind.clone())
                .collect();
            k.sort();
            k
        };
        assert!(kinds(&run).contains(&"stale_write_accepted".to_owned()));
        // Without the saved store, the replay cannot see it.
        let blind = check_dir(Backend::Standalone, &dir, None).unwrap();
        assert!(!kinds(&blind).contains(&"stale_write_accepted".to_owned()));
        assert!(!blind.register.read);
        save_registers(&dir, &truth).unwrap();
        let replayed = check_dir(Backend::Standalone, &dir, None).unwrap();
        assert_eq!(kinds(&replayed), kinds(&run));
        assert!(replayed.register.read);
        assert_eq!(replayed.register.applied, run.register.applied);
        assert_eq!(replayed.register.inconsistent, run.register.inconsistent);
        assert_eq!(replayed.rows[0].stale_writes_accepted, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
