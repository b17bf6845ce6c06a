//! Replays a saved history (`run --history DIR`) through the checker, without servers.
//!
//! A history directory holds one backend's event logs (`nemesis.jsonl`, `worker-N.jsonl`)
//! and, from runs that recorded it, `run.json` (the run's start and end and its lease).
//! Without it the run is taken to span its events, from the earliest to the latest time
//! recorded (the run's own start and end bracket every event, a few ms outside them).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::ValueEnum as _;
use serde::{Deserialize, Serialize};

use crate::checker::{self, BackendReport};
use crate::event::Event;
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
        | Event::ShutdownDone { t_start, t, .. } => ((*t_start).min(*t), (*t_start).max(*t)),
        Event::Hello { t, .. }
        | Event::Write { t, .. }
        | Event::Lost { t, .. }
        | Event::WriteIntent { t, .. }
        | Event::KeyGone { t, .. }
        | Event::Layouts { t, .. }
        | Event::ReleaseStarted { t, .. }
        | Event::Claim { t, .. }
        | Event::Fault { t, .. } => (*t, *t),
    }
}

/// The lease of a history that recorded none, and none was given: `run`'s default.
pub const DEFAULT_LEASE: Duration = Duration::from_millis(1500);

/// Checks the history in `dir` as `run` checks it at the end of a backend's run, with the
/// lease `lease`, else the one the run recorded, else [`DEFAULT_LEASE`] (no register-store
/// truth: the end-of-run check of the store's log is left out).
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
    Ok(checker::analyze(
        backend.name(),
        &events,
        None,
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
}
