//! The Redisson contenders: the Java driver in `lock-bench/redisson`
//! (Redisson's `RLock` and fair lock), built once with Maven and run as a
//! child process of this one, so that it runs on the client CPU this process
//! is pinned to (a child inherits the CPU affinity), against the same Redis,
//! in the same run as the Rust contenders.
//!
//! Two contenders: `redisson` (Redisson's defaults) and `redisson-fast`
//! (its documented speed settings); see the driver's class comment and
//! BENCHMARKS.md. Each has one long-lived driver process for W1, W2, W3 and
//! W7 (warmed up once, when it starts); W3h starts two more per contender.
//!
//! The driver measures on its side (cycle times, hand-offs, its own CPU
//! time) and prints the raw samples; this side measures Redis (CPU,
//! `INFO commandstats`) around the measured phase and turns the samples into
//! the same figures as for the Rust contenders, with the same code.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// The driver's Maven project.
fn project_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("redisson")
}

/// The built driver: its class path.
#[derive(Debug, Clone)]
pub(crate) struct Build {
    classpath: String,
    /// The Redisson version it was built with.
    pub(crate) version: String,
}

/// Whether `program` runs (`program arg` exits successfully).
fn runs(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The newest modification time of the driver's sources and its pom.
fn sources_modified(dir: &Path) -> Option<SystemTime> {
    let mut newest = modified(&dir.join("pom.xml"))?;
    let mut stack = vec![dir.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Some(time) = modified(&path) {
                newest = newest.max(time);
            }
        }
    }
    Some(newest)
}

/// Finds Java and Maven and builds the driver for Redisson `version`
/// (`mvn -q -B package dependency:copy-dependencies`) into
/// `<target dir>/<profile>/redisson-bench/<version>`, unless a build there is
/// newer than the sources. `Ok(None)`, after a loud message, when `java` or
/// `mvn` is missing: the Redisson contenders are then skipped. A failed build
/// is an error.
pub(crate) fn build(version: &str, netty: Option<&str>) -> Result<Option<Build>> {
    let missing: Vec<&str> = [("java", "-version"), ("mvn", "-v")]
        .into_iter()
        .filter(|(program, arg)| !runs(program, arg))
        .map(|(program, _)| program)
        .collect();
    if !missing.is_empty() {
        eprintln!("########################################################################");
        eprintln!(
            "# SKIPPED: the redisson contenders need Java 17+ and Maven; not found: {}",
            missing.join(", ")
        );
        eprintln!("# The run goes on without them.");
        eprintln!("########################################################################");
        return Ok(None);
    }
    let exe = std::env::current_exe().context("the benchmark's own executable")?;
    let out = exe
        .parent()
        .context("the executable's directory")?
        .join("redisson-bench")
        .join(version);
    let stamp = out.join("built.stamp");
    let project = project_dir();
    let fresh = match (modified(&stamp), sources_modified(&project)) {
        (Some(built), Some(sources)) => built >= sources,
        _ => false,
    };
    if !fresh {
        eprintln!(
            "# redisson: building the driver (Redisson {version}) with Maven into {} ...",
            out.display()
        );
        let mut mvn = Command::new("mvn");
        mvn.current_dir(&project)
            .arg("-q")
            .arg("-B")
            .arg(format!("-Dredisson.version={version}"))
            .arg(format!("-Dbench.out={}", out.display()));
        if let Some(netty) = netty {
            mvn.arg(format!("-Dnetty.version={netty}"));
        }
        let status = mvn
            .args([
                "-Dstyle.color=never",
                "package",
                "dependency:copy-dependencies",
            ])
            // Maven's output to stderr: stdout carries the results.
            .stdout(std::io::stderr())
            .stderr(Stdio::inherit())
            .status()
            .context("run mvn")?;
        if !status.success() {
            bail!("redisson: the driver's Maven build failed ({status})");
        }
        std::fs::write(&stamp, version)?;
    }
    Ok(Some(Build {
        classpath: format!(
            "{}:{}",
            out.join("redisson-bench.jar").display(),
            out.join("deps").join("*").display()
        ),
        version: version.to_owned(),
    }))
}

/// Which of the driver's two settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settings {
    Default,
    Fast,
}

impl Settings {
    fn arg(self) -> &'static str {
        match self {
            Settings::Default => "default",
            Settings::Fast => "fast",
        }
    }
}

/// Redisson's form of the URL (no trailing slash, no database path).
fn address(url: &str) -> String {
    url.trim_end_matches('/').to_owned()
}

impl Build {
    /// The driver's command line: `java` with JVM defaults (quiet logging)
    /// and `args` after the mode, URL, settings and warm-up.
    pub(crate) fn command(
        &self,
        mode: &str,
        url: &str,
        settings: Settings,
        warmup: usize,
    ) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("java");
        command
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("-cp")
            .arg(&self.classpath)
            .arg("bench.RedissonBench")
            .arg(mode)
            .arg(address(url))
            .arg(settings.arg())
            .arg(warmup.to_string());
        command
    }
}

/// One long-lived driver process (`server` mode).
pub(crate) struct Driver {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// The CPUs it may run on, from `/proc` (to report the pinning).
    pub(crate) cpus: String,
    /// Its process CPU-time clock (`clock_getcpuclockid`), when available.
    cpu_clock: Option<libc::clockid_t>,
}

/// The data lines of one command: name -> values.
pub(crate) struct Data(HashMap<String, Vec<u64>>);

impl Data {
    pub(crate) fn values(&self, name: &str) -> Result<&[u64]> {
        self.0
            .get(name)
            .map(Vec::as_slice)
            .with_context(|| format!("redisson driver: no {name:?} in its answer"))
    }

    pub(crate) fn durations(&self, name: &str) -> Result<Vec<Duration>> {
        Ok(self
            .values(name)?
            .iter()
            .map(|&ns| Duration::from_nanos(ns))
            .collect())
    }

    pub(crate) fn duration(&self, name: &str) -> Result<Duration> {
        Ok(Duration::from_nanos(self.one(name)?))
    }

    pub(crate) fn one(&self, name: &str) -> Result<u64> {
        self.values(name)?
            .first()
            .copied()
            .with_context(|| format!("redisson driver: {name:?} is empty"))
    }
}

impl Driver {
    /// Starts the driver and waits until it is connected and warmed up.
    pub(crate) async fn start(
        build: &Build,
        url: &str,
        settings: Settings,
        warmup: usize,
    ) -> Result<Driver> {
        let mut child = build
            .command("server", url, settings, warmup)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("start the redisson driver (java)")?;
        let stdin = child.stdin.take().context("driver stdin")?;
        let stdout = child.stdout.take().context("driver stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines.next_line().await?;
        if ready.as_deref() != Some("ready") {
            bail!("the redisson driver did not start: {ready:?}");
        }
        let cpus = child
            .id()
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .and_then(|status| {
                status.lines().find_map(|line| {
                    line.strip_prefix("Cpus_allowed_list:")
                        .map(|cpus| cpus.trim().to_owned())
                })
            })
            .unwrap_or_else(|| "?".into());
        let cpu_clock = child.id().and_then(|pid| {
            let mut clock: libc::clockid_t = 0;
            // SAFETY: `clock` is a valid, writable clockid_t.
            #[allow(unsafe_code)]
            let rc = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) };
            (rc == 0).then_some(clock)
        });
        Ok(Driver {
            child,
            stdin,
            lines,
            cpus,
            cpu_clock,
        })
    }

    /// CPU time (user + system, all threads: the JVM's JIT and GC threads
    /// included) the driver process has used, in nanoseconds, read here
    /// (the JVM's own figure counts in 10 ms ticks).
    fn cpu_time(&self) -> Option<Duration> {
        let clock = self.cpu_clock?;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
        (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    /// Runs the prepared command's measured phase, as [`Driver::go`], with
    /// the driver's CPU time over it (its own figure `cpu` when the clock
    /// cannot be read from here).
    async fn go_cpu(&mut self) -> Result<(Data, Duration)> {
        let before = self.cpu_time();
        let data = self.go().await?;
        let cpu = match (before, self.cpu_time()) {
            (Some(before), Some(after)) => after.saturating_sub(before),
            _ => data.duration("cpu")?,
        };
        Ok((data, cpu))
    }

    async fn send(&mut self, line: &str) -> Result<()> {
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.write_all(b"\n").await?;
        self.stdin.flush().await?;
        Ok(())
    }

    async fn line(&mut self) -> Result<String> {
        self.lines
            .next_line()
            .await?
            .context("the redisson driver exited")
    }

    /// Sends `command` and waits until the driver has prepared it (its
    /// warm-up cycles, the key's first acquisition); then [`Driver::go`].
    pub(crate) async fn prepare(&mut self, command: &str) -> Result<()> {
        self.send(command).await?;
        match self.line().await?.as_str() {
            "prepared" => Ok(()),
            other => bail!("redisson driver, {command}: {other}"),
        }
    }

    /// Runs the prepared command's measured phase; returns its data.
    pub(crate) async fn go(&mut self) -> Result<Data> {
        self.send("go").await?;
        let mut data = HashMap::new();
        loop {
            let line = self.line().await?;
            if line == "end" {
                return Ok(Data(data));
            }
            if let Some(error) = line.strip_prefix("error ") {
                bail!("redisson driver: {error}");
            }
            let mut words = line.split_ascii_whitespace();
            let name = words.next().unwrap_or_default().to_owned();
            let values = words
                .map(str::parse)
                .collect::<Result<Vec<u64>, _>>()
                .with_context(|| format!("redisson driver: bad line {name:?}"))?;
            data.insert(name, values);
        }
    }

    /// Asks the driver to exit.
    pub(crate) async fn quit(mut self) -> Result<()> {
        self.send("quit").await?;
        let status = self.child.wait().await?;
        if !status.success() {
            bail!("the redisson driver exited with {status}");
        }
        Ok(())
    }
}

/// The Redisson contenders of a run: the build and one driver per
/// contender asked for.
pub(crate) struct Drivers {
    pub(crate) build: Build,
    url: String,
    warmup: usize,
    default: Option<tokio::sync::Mutex<Driver>>,
    fast: Option<tokio::sync::Mutex<Driver>>,
}

impl Drivers {
    /// Starts (and warms up) the drivers of the settings in `which`.
    pub(crate) async fn start(
        build: Build,
        url: &str,
        warmup: usize,
        which: &[Settings],
    ) -> Result<Drivers> {
        let mut drivers = Drivers {
            build,
            url: url.to_owned(),
            warmup,
            default: None,
            fast: None,
        };
        for &settings in which {
            eprintln!(
                "# redisson: starting the {} driver ({warmup} warm-up cycles) ...",
                settings.arg()
            );
            let driver = Driver::start(&drivers.build, url, settings, warmup).await?;
            let slot = match settings {
                Settings::Default => &mut drivers.default,
                Settings::Fast => &mut drivers.fast,
            };
            *slot = Some(tokio::sync::Mutex::new(driver));
        }
        Ok(drivers)
    }

    /// The driver of `settings`.
    pub(crate) async fn get(
        &self,
        settings: Settings,
    ) -> Result<tokio::sync::MutexGuard<'_, Driver>> {
        let slot = match settings {
            Settings::Default => &self.default,
            Settings::Fast => &self.fast,
        };
        Ok(slot
            .as_ref()
            .with_context(|| format!("no redisson {} driver", settings.arg()))?
            .lock()
            .await)
    }

    /// Where each driver may run, for the report.
    pub(crate) async fn pinning(&self) -> String {
        let mut notes = Vec::new();
        for (name, slot) in [("redisson", &self.default), ("redisson-fast", &self.fast)] {
            if let Some(driver) = slot {
                notes.push(format!(
                    "{name} driver (Redisson {}) on cpu(s) {}",
                    self.build.version,
                    driver.lock().await.cpus
                ));
            }
        }
        notes.join("; ")
    }

    /// A W3h child (`w3h-child` mode) of `settings`.
    pub(crate) fn w3h_child(
        &self,
        settings: Settings,
        process: usize,
        workers: usize,
        contention: crate::workloads::Contention,
    ) -> tokio::process::Command {
        let mut command = self
            .build
            .command("w3h-child", &self.url, settings, self.warmup);
        command
            .arg(process.to_string())
            .arg(workers.to_string())
            .arg(contention.acquisitions.to_string())
            .arg(contention.hold.as_micros().to_string())
            .arg(contention.work.as_micros().to_string())
            .arg("bench:w3h:redisson");
        command
    }

    /// Asks every driver to exit.
    pub(crate) async fn quit(self) -> Result<()> {
        for driver in [self.default, self.fast].into_iter().flatten() {
            driver.into_inner().quit().await?;
        }
        Ok(())
    }
}

use crate::family::Contended;
use crate::report::Metric;
use crate::workloads::{Admin, Contention, W1Sample};

/// W1, one round, on the driver: `warmup` cycles, then `cycles` measured.
pub(crate) async fn w1(
    driver: &mut Driver,
    admin: &Admin,
    cycles: usize,
    warmup: usize,
    sample: &mut W1Sample,
) -> Result<()> {
    driver.prepare(&format!("w1 {cycles} {warmup}")).await?;
    let server = admin.server_cpu().await?;
    let (data, cpu) = driver.go_cpu().await?;
    let server = admin.server_cpu().await?.saturating_sub(server);
    sample.add(
        data.durations("times")?,
        data.duration("elapsed")?,
        cpu,
        server,
    );
    Ok(())
}

/// W2 on the driver: `tasks` chains of the async API (with `threads`:
/// `tasks` threads of the sync API), each on its own key.
pub(crate) async fn w2(
    driver: &mut Driver,
    admin: &Admin,
    tasks: usize,
    duration: Duration,
    threads: bool,
) -> Result<Vec<Metric>> {
    let api = if threads { "sync" } else { "async" };
    driver
        .prepare(&format!("w2 {tasks} {} {api}", duration.as_millis()))
        .await?;
    let server = admin.server_cpu().await?;
    let (data, cpu) = driver.go_cpu().await?;
    let server = admin.server_cpu().await?.saturating_sub(server);
    Ok(crate::workloads::w2_metrics(
        data.durations("times")?,
        data.duration("elapsed")?,
        cpu,
        server,
    ))
}

/// The W3 loop on the driver, on a `kind` ("plain" or "fair") lock `key`,
/// Redis statistics reset after the key's first acquisition.
async fn contended(
    driver: &mut Driver,
    admin: &Admin,
    kind: &str,
    key: &str,
    settings: Contention,
) -> Result<Contended> {
    driver
        .prepare(&format!(
            "contended {kind} {key} {} {} {} {}",
            settings.workers,
            settings.acquisitions,
            settings.hold.as_micros(),
            settings.work.as_micros()
        ))
        .await?;
    admin.reset_stats().await?;
    let data = driver.go().await?;
    let calls = admin.command_calls().await?;
    let scripts =
        calls.get("evalsha").copied().unwrap_or(0) + calls.get("eval").copied().unwrap_or(0);
    Ok(Contended::from_parts(
        settings.acquisitions,
        data.duration("elapsed")?,
        data.durations("hand_offs")?,
        &data.durations("holds")?,
        &data.durations("waits")?,
        data.one("max_inside")? as usize,
        (calls.values().sum(), scripts),
    ))
}

/// W3 on the driver: its plain lock (`RLock`), `settings.workers` threads.
pub(crate) async fn w3(
    driver: &mut Driver,
    admin: &Admin,
    settings: Contention,
    rtts: (Duration, Duration),
) -> Result<Vec<Metric>> {
    let run = contended(driver, admin, "plain", "bench:w3", settings).await?;
    Ok(run.w3_metrics(rtts))
}

/// W7 on the driver: its fair lock (`getFairLock`), then its plain lock,
/// each on a flushed Redis.
pub(crate) async fn w7(
    driver: &mut Driver,
    admin: &Admin,
    settings: Contention,
    rtt: Duration,
) -> Result<Vec<Metric>> {
    admin.flush().await?;
    let fair = contended(driver, admin, "fair", "bench:w7:fair", settings).await?;
    admin.flush().await?;
    let plain = contended(driver, admin, "plain", "bench:w7:plain", settings).await?;
    Ok(crate::family::w7_metrics(
        &fair,
        &plain,
        settings.workers,
        rtt,
    ))
}
