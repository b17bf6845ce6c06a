//! W13: leader election (distlock only).
//!
//! - **Fail-over**: two processes (this program started again in child
//!   mode) run `election.run(work)` on one role; the parent `SIGKILL`s the
//!   leader's process at a random moment and measures until the other's
//!   work future runs (its first statement takes the time). A new standby
//!   process is started after each run. The figure is bound by the lease:
//!   the dead leader's lock lives out what its last renewal gave it.
//! - **Hand-over**: the same with `SIGTERM`, on which the child shuts its
//!   client down (`LockClient::shutdown`), which drops the work and resigns
//!   first: the standby is woken by the release, not by the lease's end.
//! - **Observe**: 100 followers (each on a client of its own, in this
//!   process) watch the role with `observe()`; two other clients take the
//!   role in turn (`campaign(Wait::Once)`) and resign it. Measured: the
//!   change called (campaign or resign) -> the view of every one of the 100
//!   followers updated.
//!
//! Times across processes are read on the system clock, which the
//! processes of one machine share.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use distlock_core::{LockClient, Wait};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::report::{millis, percentile, Metric};
use crate::workloads::Admin;

/// The first argument that starts this program as a W13 child.
pub(crate) const CHILD_FLAG: &str = "--leader-child";

/// The role the processes campaign for.
const ROLE: &str = "bench:w13";
/// The role of the observe part.
const OBSERVED: &str = "bench:w13:observed";
/// The list each child's work appends `<pid> <term> <µs>` to when it starts.
const STARTS: &str = "bench:w13:starts";

/// W13's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// Kills, and as many terminations.
    pub(crate) runs: usize,
    /// The lease of every client.
    pub(crate) lease: Duration,
    /// Followers of the observe part.
    pub(crate) followers: usize,
    /// Elections (and as many resignations) of the observe part.
    pub(crate) changes: usize,
}

/// Microseconds of the system clock.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Child mode: `--leader-child <url> <lease ms>`: runs the role's run loop
/// until `SIGTERM`, then shuts the client down (which resigns).
pub(crate) fn child_main(args: &[String]) -> Result<()> {
    let [url, lease_ms] = args else {
        bail!("{CHILD_FLAG} takes: url lease_ms");
    };
    let lease = Duration::from_millis(lease_ms.parse()?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let client = LockClient::builder().lease(lease).connect(url).await?;
        let conn = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let pid = std::process::id();
        let election = client.election(ROLE);
        let runner = tokio::spawn(async move {
            election
                .run(|term| {
                    let mut conn = conn.clone();
                    async move {
                        let at = now_us();
                        let _: redis::RedisResult<i64> = redis::cmd("RPUSH")
                            .arg(STARTS)
                            .arg(format!("{pid} {} {at}", term.token()))
                            .query_async(&mut conn)
                            .await;
                        std::future::pending::<()>().await;
                    }
                })
                .await
        });
        println!("ready");
        terminate.recv().await;
        client.shutdown(Duration::from_secs(5)).await?;
        runner.await??;
        anyhow::Ok(())
    })
}

/// A start of a child's work: (pid, term, µs).
type Start = (u32, u64, u64);

/// The processes of the fail-over and hand-over parts.
struct Children {
    exe: std::path::PathBuf,
    url: String,
    lease: Duration,
    running: HashMap<u32, Child>,
}

impl Children {
    /// Starts a child and waits until it has started its run loop.
    async fn spawn(&mut self) -> Result<u32> {
        let mut child = tokio::process::Command::new(&self.exe)
            .arg(CHILD_FLAG)
            .arg(&self.url)
            .arg(self.lease.as_millis().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("start a W13 child")?;
        let stdout = child.stdout.take().context("child stdout")?;
        let ready = BufReader::new(stdout).lines().next_line().await?;
        if ready.as_deref() != Some("ready") {
            bail!("a W13 child did not start: {ready:?}");
        }
        let pid = child.id().context("a W13 child's pid")?;
        self.running.insert(pid, child);
        Ok(pid)
    }

    fn signal(&self, pid: u32, signal: libc::c_int) -> Result<()> {
        // SAFETY: kill(2) on a child of this process that is not reaped yet
        // (it is reaped only once removed from `running`).
        if unsafe { libc::kill(pid as libc::pid_t, signal) } != 0 {
            bail!("kill({pid}, {signal}): {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits for `pid` to exit; `Err` if it should have succeeded and did not.
    async fn reap(&mut self, pid: u32, success: bool) -> Result<()> {
        let mut child = self.running.remove(&pid).context("no such W13 child")?;
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .context("a W13 child did not exit")??;
        if success && !status.success() {
            bail!("a W13 child failed: {status}");
        }
        Ok(())
    }
}

/// The starts recorded so far.
async fn starts(admin: &Admin) -> Result<Vec<Start>> {
    let entries: Vec<String> = redis::cmd("LRANGE")
        .arg(STARTS)
        .arg(0)
        .arg(-1)
        .query_async(&mut admin.conn())
        .await?;
    entries
        .iter()
        .map(|entry| {
            let mut fields = entry.split(' ');
            let mut next = || fields.next().context("a W13 start");
            Ok((next()?.parse()?, next()?.parse()?, next()?.parse()?))
        })
        .collect()
}

/// Waits for start number `n` (0-based).
async fn start_number(admin: &Admin, n: usize) -> Result<Start> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(start) = starts(admin).await?.get(n) {
            return Ok(*start);
        }
        if Instant::now() > deadline {
            bail!("W13: no new leader within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A pause of `base` plus up to `spread`, drawn from the clock's nanoseconds.
fn jitter(base: Duration, spread: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let spread_ms = spread.as_millis().max(1) as u64;
    base + Duration::from_millis(u64::from(nanos) % spread_ms)
}

/// The fail-over (SIGKILL) and hand-over (SIGTERM) parts: `runs` of each.
/// Returns the latencies (kill, term), sorted.
async fn processes(
    url: &str,
    admin: &Admin,
    settings: Settings,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    let mut children = Children {
        exe: std::env::current_exe().context("the benchmark's own executable")?,
        url: url.to_owned(),
        lease: settings.lease,
        running: HashMap::new(),
    };
    let mut leader = children.spawn().await?;
    let first = start_number(admin, 0).await?;
    if first.0 != leader {
        bail!("W13: the first leader is not the first process");
    }
    let mut term = first.1;
    let mut standby = children.spawn().await?;
    let mut n = 1;
    let (mut kills, mut terms) = (Vec::new(), Vec::new());
    for signal in [libc::SIGKILL, libc::SIGTERM] {
        for _ in 0..settings.runs {
            // The standby campaigning (its wake-up subscription confirmed),
            // and a random moment against the leader's renewals (every
            // third of the lease).
            tokio::time::sleep(jitter(Duration::from_millis(200), settings.lease / 2)).await;
            let sent = now_us();
            children.signal(leader, signal)?;
            let next = start_number(admin, n).await?;
            if next.0 != standby || next.1 <= term {
                bail!("W13: start {next:?} after term {term}: not the standby's, or an old term");
            }
            let took = Duration::from_micros(next.2.saturating_sub(sent));
            if signal == libc::SIGKILL {
                kills.push(took);
            } else {
                terms.push(took);
            }
            children.reap(leader, signal == libc::SIGTERM).await?;
            (leader, term, n) = (standby, next.1, n + 1);
            standby = children.spawn().await?;
        }
    }
    for pid in [leader, standby] {
        children.signal(pid, libc::SIGTERM)?;
        children.reap(pid, true).await?;
    }
    kills.sort_unstable();
    terms.sort_unstable();
    Ok((kills, terms))
}

/// The observe part: per change, (the slowest follower's delay, every
/// follower's delays), for elections and for resignations.
async fn observe(url: &str, settings: Settings) -> Result<[(Vec<Duration>, Vec<Duration>); 2]> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Option<u64>, Instant)>();
    let mut tasks = Vec::new();
    let mut clients = Vec::new();
    for i in 0..settings.followers {
        let client = LockClient::builder()
            .lease(settings.lease)
            .connect(url)
            .await?;
        let mut observer = client.election(OBSERVED).observe();
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            while let Ok(view) = observer.changed().await {
                if tx.send((i, view.map(|l| l.term), Instant::now())).is_err() {
                    return;
                }
            }
        }));
        clients.push(client);
    }
    drop(tx);
    // Every follower's first view: nobody leads.
    let mut first = vec![false; settings.followers];
    while first.iter().any(|seen| !seen) {
        let (i, view, _) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .context("W13: the followers' first views")?
            .context("W13: a follower stopped")?;
        if view.is_none() {
            first[i] = true;
        }
    }
    let leaders = [
        LockClient::builder()
            .lease(settings.lease)
            .connect(url)
            .await?,
        LockClient::builder()
            .lease(settings.lease)
            .connect(url)
            .await?,
    ];
    let mut results: [(Vec<Duration>, Vec<Duration>); 2] = Default::default();
    for change in 0..settings.changes {
        let election = leaders[change % 2].election(OBSERVED);
        let called = Instant::now();
        let leadership = election.campaign(Wait::Once).await?;
        let term = leadership.term();
        wait_views(
            &mut rx,
            settings.followers,
            Some(term),
            called,
            &mut results[0],
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let called = Instant::now();
        leadership.resign().await?;
        wait_views(&mut rx, settings.followers, None, called, &mut results[1]).await?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for client in leaders.iter().chain(&clients) {
        client.shutdown(Duration::from_secs(5)).await?;
    }
    for task in tasks {
        task.await?;
    }
    for (all, each) in &mut results {
        all.sort_unstable();
        each.sort_unstable();
    }
    Ok(results)
}

/// Waits until each of `followers` has reported `view`; records the
/// slowest one's delay since `called` in `.0` and each one's in `.1`.
async fn wait_views(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, Option<u64>, Instant)>,
    followers: usize,
    view: Option<u64>,
    called: Instant,
    into: &mut (Vec<Duration>, Vec<Duration>),
) -> Result<()> {
    let mut seen = vec![None; followers];
    while seen.iter().any(Option::is_none) {
        let (i, got, at) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .with_context(|| format!("W13: not every follower saw {view:?} within 30 s"))?
            .context("W13: a follower stopped")?;
        if got == view && seen[i].is_none() {
            seen[i] = Some(at.saturating_duration_since(called));
        }
    }
    let delays: Vec<Duration> = seen.into_iter().flatten().collect();
    into.0
        .push(delays.iter().copied().max().unwrap_or_default());
    into.1.extend(delays);
    Ok(())
}

/// W13: every part, as figures, with ratios to the lease and to the PING
/// round trip `rtt`.
pub(crate) async fn w13(
    url: &str,
    admin: &Admin,
    settings: Settings,
    rtt: Duration,
) -> Result<Vec<Metric>> {
    admin.flush().await?;
    let (kills, terms) = processes(url, admin, settings).await?;
    admin.flush().await?;
    let [elections, resignations] = observe(url, settings).await?;
    let lease_ms = millis(settings.lease);
    let rtt_ms = millis(rtt).max(1e-6);
    let mut metrics = vec![Metric::info("lease", "ms", lease_ms)];
    let mut add = |name: &str, sorted: &[Duration], per_lease: bool| {
        for (p, label) in [(0.5, "p50"), (0.99, "p99")] {
            let value = millis(percentile(sorted, p));
            metrics.push(Metric::lower(format!("{name} {label}"), "ms", value));
            if per_lease {
                metrics.push(Metric::lower(
                    format!("{name} {label} / lease"),
                    "ratio",
                    value / lease_ms,
                ));
            } else {
                metrics.push(Metric::lower(
                    format!("{name} {label} in PING RTTs"),
                    "RTT",
                    value / rtt_ms,
                ));
                metrics.push(Metric::lower(
                    format!("{name} {label} / lease"),
                    "ratio",
                    value / lease_ms,
                ));
            }
        }
    };
    add("fail-over (SIGKILL)", &kills, true);
    add("hand-over (SIGTERM, resign)", &terms, false);
    add(
        &format!("observe, election -> all {}", settings.followers),
        &elections.0,
        false,
    );
    add(
        &format!("observe, resignation -> all {}", settings.followers),
        &resignations.0,
        false,
    );
    add("observe, election -> each follower", &elections.1, false);
    metrics.push(Metric::info(
        "fail-over (SIGKILL) min",
        "ms",
        millis(kills.first().copied().unwrap_or_default()),
    ));
    metrics.push(Metric::info(
        "fail-over (SIGKILL) max",
        "ms",
        millis(kills.last().copied().unwrap_or_default()),
    ));
    metrics.push(Metric::info("runs per signal", "count", kills.len() as f64));
    metrics.push(Metric::info(
        "observed changes",
        "count",
        (elections.0.len() + resignations.0.len()) as f64,
    ));
    Ok(metrics)
}
