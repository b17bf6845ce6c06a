//! W10: W3's loop across processes. The workers of W3 are spread over
//! several processes (this program started again in child mode), each with
//! its own `LockClient`, so that the in-client hand-off (a release wakes a
//! waiter of its own client first) competes with the other processes'
//! waiters. Measured: acquisitions per process against the fair share, the
//! longest wait of each process against the mean wait, and how often the
//! lock changed process.
//!
//! The processes draw tickets from one Redis counter (so the acquisitions
//! add up to the total however they are shared) and start together when
//! the parent sets a start key. Each reports its acquisitions as (fencing
//! token, wait) on one JSON line; the tokens give the global order of the
//! acquisitions, from which the owner changes between processes are counted.
//! With `W10_DEBUG` set, it also prints (to stderr) how often the lock moved
//! into each process and the runs of acquisitions each process had in a row.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use distlock_core::LockClient;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::contenders::LEASE;
use crate::report::Metric;
use crate::workloads::{Admin, Contention};

const KEY: &str = "bench:w10";
const TICKETS: &str = "bench:w10:tickets";
const GO: &str = "bench:w10:go";

/// The first argument that starts this program as a W10 child.
pub(crate) const CHILD_FLAG: &str = "--w10-child";

/// One child's report.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct ChildReport {
    pub(crate) process: usize,
    /// Per acquisition: fencing token, wait (µs), when the acquire returned
    /// and when the release was sent (µs of the system clock, which all the
    /// processes of this machine share).
    pub(crate) acquisitions: Vec<(u64, u64, u64, u64)>,
}

/// Microseconds of the system clock.
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Child mode: `--w10-child <url> <process> <workers> <acquisitions> <hold µs> <work µs> <hot linger µs, 0: off>`.
pub(crate) fn child_main(args: &[String]) -> Result<()> {
    let [url, process, workers, total, hold, work, hot] = args else {
        bail!("{CHILD_FLAG} takes: url process workers acquisitions hold_us work_us hot_linger_us");
    };
    let hot: u64 = hot.parse()?;
    let process: usize = process.parse()?;
    let workers: usize = workers.parse()?;
    let total: u64 = total.parse()?;
    let hold = Duration::from_micros(hold.parse()?);
    let work = Duration::from_micros(work.parse()?);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut builder = LockClient::builder().lease(LEASE);
        if hot > 0 {
            builder = builder.keep_hot(Duration::from_micros(hot));
        }
        let client = builder.connect(url).await?;
        let mut conn = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        println!("ready");
        // Start with the others.
        loop {
            let go: bool = redis::cmd("EXISTS").arg(GO).query_async(&mut conn).await?;
            if go {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut handles = Vec::new();
        for _ in 0..workers {
            let client = client.clone();
            let mut conn = conn.clone();
            handles.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let ticket: u64 = redis::cmd("INCR")
                        .arg(TICKETS)
                        .query_async(&mut conn)
                        .await?;
                    if ticket > total {
                        break;
                    }
                    let asked = Instant::now();
                    let guard = client
                        .lock(KEY)
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await?;
                    let waited = asked.elapsed();
                    let acquired = now_us();
                    let token = guard.fencing_token();
                    tokio::time::sleep(hold).await;
                    let released = now_us();
                    guard.release().await?;
                    mine.push((token, waited.as_micros() as u64, acquired, released));
                    tokio::time::sleep(work).await;
                }
                anyhow::Ok(mine)
            }));
        }
        let mut acquisitions = Vec::new();
        for handle in handles {
            acquisitions.extend(handle.await??);
        }
        // Give back what the client still keeps (a hot lock kept for its
        // linger) before the process exits: without it, the other processes'
        // last waiters waited out the kept lock's 30 s lease (W3h at 13
        // acquisitions/s in about one run of four).
        client.close().await?;
        let report = ChildReport {
            process,
            acquisitions,
        };
        println!("{}", serde_json::to_string(&report)?);
        anyhow::Ok(())
    })
}

/// W10: `processes` processes share `settings.workers` workers; with
/// `hot`, their clients keep hot locks for that linger (W3h). `rtt`: the
/// PING round trip, the unit of the hand-off between processes.
pub(crate) async fn w10(
    url: &str,
    admin: &Admin,
    settings: Contention,
    processes: usize,
    hot: Option<Duration>,
    rtt: Duration,
) -> Result<Vec<Metric>> {
    let exe = std::env::current_exe().context("the benchmark's own executable")?;
    across(admin, settings, processes, rtt, |process, per_process| {
        let mut command = tokio::process::Command::new(&exe);
        command
            .arg(CHILD_FLAG)
            .arg(url)
            .arg(process.to_string())
            .arg(per_process.to_string())
            .arg(settings.acquisitions.to_string())
            .arg(settings.hold.as_micros().to_string())
            .arg(settings.work.as_micros().to_string())
            .arg(hot.map_or(0, |h| h.as_micros().max(1)).to_string());
        command
    })
    .await
}

/// Runs W10's measurement with the children `child(process, workers)`
/// makes: each must print `ready` once it may be measured, wait for the
/// start key, draw its tickets from the ticket counter and print its
/// [`ChildReport`] as one JSON line (lock-bench itself in child mode, or
/// the Redisson driver's `w3h-child` mode).
pub(crate) async fn across<F>(
    admin: &Admin,
    settings: Contention,
    processes: usize,
    rtt: Duration,
    child: F,
) -> Result<Vec<Metric>>
where
    F: Fn(usize, usize) -> tokio::process::Command,
{
    let processes = processes.max(1);
    let per_process = settings.workers.div_ceil(processes).max(1);
    let mut children = Vec::new();
    for process in 0..processes {
        let mut child = child(process, per_process)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("start a W10 child")?;
        let stdout = child.stdout.take().context("child stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines.next_line().await?;
        if ready.as_deref() != Some("ready") {
            bail!("W10 child {process} did not start: {ready:?}");
        }
        children.push((child, lines));
    }
    admin.reset_stats().await?;
    let mut conn = admin.conn();
    let started = Instant::now();
    let () = redis::cmd("SET")
        .arg(GO)
        .arg(1)
        .query_async(&mut conn)
        .await?;
    let mut reports = Vec::new();
    for (mut child, mut lines) in children {
        let line = lines.next_line().await?.context("a W10 child's report")?;
        reports.push(serde_json::from_str::<ChildReport>(&line)?);
        let status = child.wait().await?;
        if !status.success() {
            bail!("a W10 child failed: {status}");
        }
    }
    let elapsed = started.elapsed();
    Ok(figures(reports, processes, elapsed, rtt, "PING RTTs"))
}

/// W10's figures from the children's reports: `rtt` is the round trip the
/// hand-off is also given in, `rtt_name` its name in the figure.
pub(crate) fn figures(
    mut reports: Vec<ChildReport>,
    processes: usize,
    elapsed: Duration,
    rtt: Duration,
    rtt_name: &str,
) -> Vec<Metric> {
    // Global order: owner changes between processes. (Uses of a kept hot
    // lock share its token: ordered by when they were acquired.)
    let mut all: Vec<(u64, usize, u64, u64, u64)> = reports
        .iter()
        .flat_map(|r| {
            r.acquisitions
                .iter()
                .map(|&(t, w, a, rel)| (t, r.process, w, a, rel))
        })
        .collect();
    all.sort_unstable_by_key(|a| (a.0, a.3));
    let total = all.len();
    let changes = all.windows(2).filter(|w| w[0].1 != w[1].1).count();
    // Hand-off between processes: the previous holder's release sent -> the
    // next holder's acquire returned.
    let mut hand_offs: Vec<u64> = all
        .windows(2)
        .filter(|w| w[0].1 != w[1].1)
        .map(|w| w[1].3.saturating_sub(w[0].4))
        .collect();
    hand_offs.sort_unstable();
    let hand_off_p50 = hand_offs.get(hand_offs.len() / 2).copied().unwrap_or(0) as f64;
    if std::env::var_os("W10_DEBUG").is_some() {
        let mut into = vec![0usize; processes];
        let mut runs: Vec<Vec<usize>> = vec![Vec::new(); processes];
        let mut run = 1;
        for w in all.windows(2) {
            if w[0].1 != w[1].1 {
                into[w[1].1] += 1;
                runs[w[0].1].push(run);
                run = 1;
            } else {
                run += 1;
            }
        }
        eprintln!("W10 changes into each process: {into:?}");
        for (p, r) in runs.iter().enumerate() {
            let mean = r.iter().sum::<usize>() as f64 / r.len().max(1) as f64;
            eprintln!(
                "W10 process {p}: {} runs, mean run {mean:.1}, max {:?}",
                r.len(),
                r.iter().max()
            );
        }
    }
    let mean_wait = all.iter().map(|a| a.2).sum::<u64>() as f64 / total.max(1) as f64;
    let mean_hold =
        all.iter().map(|a| a.4.saturating_sub(a.3)).sum::<u64>() as f64 / total.max(1) as f64;
    let fair = total as f64 / processes as f64;
    let mut metrics = vec![
        Metric::higher(
            "acquisitions/s",
            "1/s",
            total as f64 / elapsed.as_secs_f64(),
        ),
        Metric::higher(
            "process changes / acquisition",
            "ratio",
            changes as f64 / (total.max(2) - 1) as f64,
        ),
        Metric::info("mean wait", "us", mean_wait),
        Metric::lower("hand-off between processes p50", "us", hand_off_p50),
        Metric::lower(
            format!("hand-off between processes p50 in {rtt_name}"),
            "RTT",
            hand_off_p50 / (rtt.as_secs_f64() * 1e6).max(1e-3),
        ),
        Metric::info("measured hold", "us", mean_hold),
    ];
    let mut min_share = f64::INFINITY;
    let mut max_ratio: f64 = 0.0;
    reports.sort_by_key(|r| r.process);
    for report in &reports {
        let count = report.acquisitions.len();
        let longest = report.acquisitions.iter().map(|a| a.1).max().unwrap_or(0);
        min_share = min_share.min(count as f64 / fair);
        max_ratio = max_ratio.max(longest as f64 / mean_wait.max(1.0));
        metrics.push(Metric::info(
            format!("process {} acquisitions", report.process),
            "count",
            count as f64,
        ));
        metrics.push(Metric::info(
            format!("process {} longest wait", report.process),
            "us",
            longest as f64,
        ));
    }
    metrics.push(Metric::higher(
        "least share / fair share",
        "ratio",
        min_share,
    ));
    metrics.push(Metric::lower(
        "longest wait / mean wait",
        "ratio",
        max_ratio,
    ));
    metrics
}
