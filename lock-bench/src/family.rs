//! The lock family's workloads W7-W9: the fair lock, the read-write lock and
//! the semaphore. rslock and the floor have no such primitives, so these run
//! for distlock only; where a figure needs a reference (the plain
//! lock, a ceiling), that reference is measured in the same run and reported
//! as a figure of its own, with the ratio as another figure.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use distlock_core::{Lock, LockClient};
use tokio::time::{Instant, MissedTickBehavior};

use crate::report::{micros, millis, percentile, Metric};
use crate::workloads::{Admin, Contention};

/// How long every acquisition of W7-W9 may wait.
const WAIT: Duration = Duration::from_secs(30);

/// What every family workload works with.
pub(crate) struct Bench<'a> {
    /// The one shared client (distlock's contender).
    pub(crate) client: &'a LockClient,
    pub(crate) admin: &'a Admin,
    /// Back-to-back PING round trip p50.
    pub(crate) rtt: Duration,
    /// Print `INFO commandstats` and the SLOWLOG after each part.
    pub(crate) server_stats: bool,
}

impl Bench<'_> {
    /// A part of a workload begins: a flushed Redis, statistics reset.
    async fn begin(&self) -> Result<()> {
        self.admin.flush().await?;
        self.admin.reset_stats().await?;
        Ok(())
    }

    /// A part of a workload ended: the Redis commands it sent, Lua-internal
    /// calls included, and how many of them were scripts (`EVALSHA`, one
    /// round trip each); prints them per command when asked to.
    async fn end(&self, id: &str, part: &str) -> Result<(u64, u64)> {
        if self.server_stats {
            crate::server_stats(self.admin, id, part).await?;
        }
        let calls = self.admin.command_calls().await?;
        let scripts = calls.get("evalsha").copied().unwrap_or(0);
        Ok((calls.values().sum(), scripts))
    }
}

/// What one run of the W3-style loop measured.
pub(crate) struct Contended {
    acquisitions: usize,
    elapsed: Duration,
    /// Previous holder's release sent -> next holder's acquire returned,
    /// when the owner changed; sorted.
    hand_offs: Vec<Duration>,
    /// Acquire called -> acquire returned, the longest.
    longest_wait: Duration,
    /// Mean time from acquire returned to release sent.
    hold: Duration,
    /// Largest number of workers seen inside their hold at once.
    max_inside: usize,
    /// Redis commands (`INFO commandstats`) during the run.
    commands: u64,
    /// Of which scripts (`EVALSHA`).
    scripts: u64,
}

/// What the workers of [`contended`] record.
#[derive(Default)]
struct Record {
    /// (worker, when its release was sent) of the last release.
    last_release: Mutex<Option<(usize, Instant)>>,
    hand_offs: Mutex<Vec<Duration>>,
    holds: Mutex<Vec<Duration>>,
    waits: Mutex<Vec<Duration>>,
    inside: AtomicUsize,
    max_inside: AtomicUsize,
}

/// The W3 loop on locks made by `make`: `settings.workers` workers, each
/// acquires (waiting up to 30 s), holds, releases, works, until
/// `acquisitions` acquisitions were made in all. A lock that admits several
/// holders (a semaphore) works too: `max_inside` then counts them.
async fn contended<F>(
    bench: &Bench<'_>,
    (id, part): (&str, &str),
    settings: Contention,
    acquisitions: usize,
    make: F,
) -> Result<Contended>
where
    F: Fn() -> Lock + Send + Sync + 'static,
{
    let make = Arc::new(make);
    bench.begin().await?;
    // Warm up the key and the scripts.
    make().wait(WAIT).acquire().await?.release().await?;
    bench.admin.reset_stats().await?;
    let tickets = Arc::new(AtomicUsize::new(0));
    let record = Arc::new(Record::default());
    let started = Instant::now();
    let mut handles = Vec::with_capacity(settings.workers);
    for worker in 0..settings.workers {
        let make = make.clone();
        let tickets = tickets.clone();
        let record = record.clone();
        handles.push(tokio::spawn(async move {
            while tickets.fetch_add(1, Ordering::Relaxed) < acquisitions {
                let lock = make().wait(WAIT);
                let asked = Instant::now();
                let guard = lock.acquire().await?;
                let acquired = Instant::now();
                let inside = record.inside.fetch_add(1, Ordering::SeqCst) + 1;
                record.max_inside.fetch_max(inside, Ordering::SeqCst);
                record.waits.lock().unwrap().push(acquired - asked);
                if let Some((previous, released)) = *record.last_release.lock().unwrap() {
                    if previous != worker {
                        record.hand_offs.lock().unwrap().push(acquired - released);
                    }
                }
                tokio::time::sleep(settings.hold).await;
                // Out of the count before the release is sent: the count
                // never includes a holder whose permit may be free already.
                record.inside.fetch_sub(1, Ordering::SeqCst);
                let released = Instant::now();
                record.holds.lock().unwrap().push(released - acquired);
                *record.last_release.lock().unwrap() = Some((worker, released));
                guard.release().await?;
                tokio::time::sleep(settings.work).await;
            }
            anyhow::Ok(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    let elapsed = started.elapsed();
    let (commands, scripts) = bench.end(id, part).await?;
    let mut hand_offs = record.hand_offs.lock().unwrap().clone();
    hand_offs.sort();
    let holds = record.holds.lock().unwrap().clone();
    let hold = holds.iter().sum::<Duration>() / holds.len().max(1) as u32;
    let longest_wait = record
        .waits
        .lock()
        .unwrap()
        .iter()
        .copied()
        .max()
        .unwrap_or_default();
    Ok(Contended {
        acquisitions,
        elapsed,
        hand_offs,
        longest_wait,
        hold,
        max_inside: record.max_inside.load(Ordering::SeqCst),
        commands,
        scripts,
    })
}

impl Contended {
    /// A run measured elsewhere (by the Redisson driver): `hand_offs`
    /// when the owner changed, `holds` and `waits` of every acquisition.
    pub(crate) fn from_parts(
        acquisitions: usize,
        elapsed: Duration,
        mut hand_offs: Vec<Duration>,
        holds: &[Duration],
        waits: &[Duration],
        max_inside: usize,
        (commands, scripts): (u64, u64),
    ) -> Self {
        hand_offs.sort();
        Contended {
            acquisitions,
            elapsed,
            hand_offs,
            longest_wait: waits.iter().copied().max().unwrap_or_default(),
            hold: holds.iter().sum::<Duration>() / holds.len().max(1) as u32,
            max_inside,
            commands,
            scripts,
        }
    }

    /// W3's figures for this run; `rtts`: back-to-back and idle PING.
    pub(crate) fn w3_metrics(&self, rtts: (Duration, Duration)) -> Vec<Metric> {
        crate::workloads::w3_metrics(
            self.acquisitions,
            self.elapsed,
            self.hand_offs.clone(),
            &[self.hold],
            self.commands,
            rtts,
        )
    }

    fn rate(&self) -> f64 {
        self.acquisitions as f64 / self.elapsed.as_secs_f64()
    }

    fn hand_off_p50(&self) -> Duration {
        percentile(&self.hand_offs, 0.5)
    }

    /// The longest a waiter should wait in a FIFO queue of `workers`: every
    /// other worker ahead of it, each holding and handing over once.
    fn fifo_bound(&self, workers: usize) -> Duration {
        (self.hold + self.hand_off_p50()) * workers as u32
    }

    /// W7's figures for one lock, each name prefixed with `which`.
    fn w7_metrics(&self, which: &str, workers: usize, rtt: Duration) -> Vec<Metric> {
        let n = self.acquisitions as f64;
        let changes = self.hand_offs.len() as f64;
        let bound = self.fifo_bound(workers);
        vec![
            Metric::higher(format!("{which}: acquisitions/s"), "1/s", self.rate()),
            Metric::info(format!("{which}: acquisitions"), "count", n),
            Metric::higher(format!("{which}: owner changes"), "count", changes),
            Metric::higher(
                format!("{which}: owner changes / (acq. - 1)"),
                "ratio",
                changes / (n - 1.0).max(1.0),
            ),
            Metric::lower(
                format!("{which}: longest acquire wait"),
                "ms",
                millis(self.longest_wait),
            ),
            Metric::info(
                format!("{which}: FIFO bound {workers} x (hold + p50)"),
                "ms",
                millis(bound),
            ),
            Metric::lower(
                format!("{which}: longest wait / FIFO bound"),
                "ratio",
                self.longest_wait.as_secs_f64() / bound.as_secs_f64(),
            ),
            Metric::lower(
                format!("{which}: hand-off p50"),
                "us",
                micros(self.hand_off_p50()),
            ),
            Metric::lower(
                format!("{which}: hand-off p99"),
                "us",
                micros(percentile(&self.hand_offs, 0.99)),
            ),
            Metric::lower(
                format!("{which}: hand-off p50 in PING RTTs"),
                "RTT",
                self.hand_off_p50().as_secs_f64() / rtt.as_secs_f64(),
            ),
            Metric::lower(
                format!("{which}: Redis commands / acquisition"),
                "cmds",
                self.commands as f64 / n,
            ),
            Metric::lower(
                format!("{which}: of which EVALSHA / acquisition"),
                "cmds",
                self.scripts as f64 / n,
            ),
            Metric::info(format!("{which}: measured hold"), "us", micros(self.hold)),
        ]
    }
}

/// W7: the W3 loop on one fair lock, then on one plain lock, one shared
/// client; the same figures for both and their ratios.
pub(crate) async fn w7(bench: &Bench<'_>, settings: Contention) -> Result<Vec<Metric>> {
    let c = bench.client.clone();
    let fair = contended(
        bench,
        ("W7", "fair"),
        settings,
        settings.acquisitions,
        move || c.fair_lock("bench:w7:fair"),
    )
    .await?;
    let c = bench.client.clone();
    let plain = contended(
        bench,
        ("W7", "plain"),
        settings,
        settings.acquisitions,
        move || c.lock("bench:w7:plain"),
    )
    .await?;
    Ok(w7_metrics(&fair, &plain, settings.workers, bench.rtt))
}

/// W7's figures from a run on the fair lock and one on the plain lock.
pub(crate) fn w7_metrics(
    fair: &Contended,
    plain: &Contended,
    workers: usize,
    rtt: Duration,
) -> Vec<Metric> {
    let mut metrics = fair.w7_metrics("fair", workers, rtt);
    metrics.extend(plain.w7_metrics("plain", workers, rtt));
    metrics.push(Metric::higher(
        "fair / plain: acquisitions/s",
        "ratio",
        fair.rate() / plain.rate(),
    ));
    metrics.push(Metric::lower(
        "fair / plain: hand-off p50",
        "ratio",
        fair.hand_off_p50().as_secs_f64() / plain.hand_off_p50().as_secs_f64(),
    ));
    metrics
}

/// W8 settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadWrite {
    /// (a): tasks acquiring at once.
    pub(crate) tasks: usize,
    /// (a): per configuration; (b): the whole run.
    pub(crate) duration: Duration,
    /// (b): reader tasks.
    pub(crate) readers: usize,
    /// (b): time between the writer's requests.
    pub(crate) writer_every: Duration,
    /// (b): how long readers and the writer hold.
    pub(crate) hold: Duration,
}

/// Acquisitions per second of `tasks` tasks, each acquiring the lock made by
/// `make(task)` and releasing it at once, for `duration`.
/// Returns (acquisitions/s, Redis commands per acquisition).
async fn throughput<F>(
    bench: &Bench<'_>,
    part: &str,
    tasks: usize,
    duration: Duration,
    make: F,
) -> Result<(f64, f64)>
where
    F: Fn(usize) -> Lock + Send + Sync + 'static,
{
    let make = Arc::new(make);
    bench.begin().await?;
    for task in 0..tasks {
        make(task).wait(WAIT).acquire().await?.release().await?;
    }
    bench.admin.reset_stats().await?;
    let started = Instant::now();
    let deadline = started + duration;
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let make = make.clone();
        handles.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                make(task).wait(WAIT).acquire().await?.release().await?;
                n += 1;
            }
            anyhow::Ok(n)
        }));
    }
    let mut n = 0;
    for handle in handles {
        n += handle.await??;
    }
    let elapsed = started.elapsed();
    let (commands, _) = bench.end("W8a", part).await?;
    Ok((
        n as f64 / elapsed.as_secs_f64(),
        commands as f64 / n.max(1) as f64,
    ))
}

/// W8 (a): read-only throughput of one read-write lock against the plain
/// lock on distinct keys (the uncontended ceiling) and on one key.
pub(crate) async fn w8_reads(bench: &Bench<'_>, settings: ReadWrite) -> Result<Vec<Metric>> {
    let (tasks, duration) = (settings.tasks, settings.duration);
    let c = bench.client.clone();
    let (read, read_cmds) = throughput(bench, "read lock", tasks, duration, move |_| {
        c.read_write_lock("bench:w8:rw").read()
    })
    .await?;
    let c = bench.client.clone();
    let (distinct, distinct_cmds) = throughput(
        bench,
        "plain, distinct keys",
        tasks,
        duration,
        move |task| c.lock(format!("bench:w8:plain:{task}")),
    )
    .await?;
    let c = bench.client.clone();
    let (one, one_cmds) = throughput(bench, "plain, one key", tasks, duration, move |_| {
        c.lock("bench:w8:plain")
    })
    .await?;
    Ok(vec![
        Metric::higher("read lock, 1 key: acquisitions/s", "1/s", read),
        Metric::higher(
            format!("plain lock, {tasks} keys: acquisitions/s"),
            "1/s",
            distinct,
        ),
        Metric::higher("plain lock, 1 key: acquisitions/s", "1/s", one),
        Metric::higher(
            format!("read lock / plain on {tasks} keys"),
            "ratio",
            read / distinct,
        ),
        Metric::higher("read lock / plain on 1 key", "ratio", read / one),
        Metric::lower("read lock: Redis cmds / acquisition", "cmds", read_cmds),
        Metric::lower(
            format!("plain, {tasks} keys: Redis cmds / acq."),
            "cmds",
            distinct_cmds,
        ),
        Metric::lower("plain, 1 key: Redis cmds / acq.", "cmds", one_cmds),
    ])
}

/// W8 (b): `readers` readers loop read / hold / release without pause; one
/// writer asks for the write lock every `writer_every`; the writer's waits.
pub(crate) async fn w8_writer(bench: &Bench<'_>, settings: ReadWrite) -> Result<Vec<Metric>> {
    let rw = bench.client.read_write_lock("bench:w8:writer");
    bench.begin().await?;
    rw.write().acquire().await?.release().await?;
    bench.admin.reset_stats().await?;
    let stop = Arc::new(AtomicBool::new(false));
    // Readers inside their hold, the writer inside its hold, and the times
    // one saw the other there (an external check of the exclusion).
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writer_in = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut handles = Vec::with_capacity(settings.readers);
    for _ in 0..settings.readers {
        let rw = rw.clone();
        let stop = stop.clone();
        let readers_in = readers_in.clone();
        let writer_in = writer_in.clone();
        let overlaps = overlaps.clone();
        handles.push(tokio::spawn(async move {
            let mut holds = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let guard = rw.read().wait(WAIT).acquire().await?;
                let acquired = Instant::now();
                readers_in.fetch_add(1, Ordering::SeqCst);
                if writer_in.load(Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(settings.hold).await;
                readers_in.fetch_sub(1, Ordering::SeqCst);
                holds.push(acquired.elapsed());
                guard.release().await?;
            }
            anyhow::Ok(holds)
        }));
    }
    let mut waits = Vec::new();
    let mut ticks =
        tokio::time::interval_at(started + settings.writer_every, settings.writer_every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let deadline = started + settings.duration;
    loop {
        ticks.tick().await;
        if Instant::now() >= deadline {
            break;
        }
        let lock = rw.write().wait(WAIT);
        let asked = Instant::now();
        let guard = lock.acquire().await?;
        waits.push(asked.elapsed());
        writer_in.store(true, Ordering::SeqCst);
        if readers_in.load(Ordering::SeqCst) > 0 {
            overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(settings.hold).await;
        writer_in.store(false, Ordering::SeqCst);
        guard.release().await?;
    }
    stop.store(true, Ordering::Relaxed);
    let mut holds = Vec::new();
    for handle in handles {
        holds.extend(handle.await??);
    }
    let elapsed = started.elapsed();
    let (commands, _) = bench.end("W8b", "read-write").await?;
    waits.sort();
    let hold = holds.iter().sum::<Duration>() / holds.len().max(1) as u32;
    let longest = waits.last().copied().unwrap_or_default();
    let reads = holds.len() as f64;
    Ok(vec![
        Metric::info("writes", "count", waits.len() as f64),
        Metric::lower("writer wait p50", "ms", millis(percentile(&waits, 0.5))),
        Metric::lower("writer wait p99", "ms", millis(percentile(&waits, 0.99))),
        Metric::lower("writer wait max", "ms", millis(longest)),
        Metric::info("measured read hold", "us", micros(hold)),
        Metric::lower(
            "writer wait max / read hold",
            "ratio",
            longest.as_secs_f64() / hold.as_secs_f64(),
        ),
        Metric::higher("reads/s", "1/s", reads / elapsed.as_secs_f64()),
        Metric::lower(
            "Redis commands / (read or write)",
            "cmds",
            commands as f64 / (reads + waits.len() as f64),
        ),
        Metric::lower(
            "reader-writer overlaps seen",
            "count",
            overlaps.load(Ordering::SeqCst) as f64,
        ),
    ])
}

/// W9: the W3 loop on one semaphore of `permits` permits, `acquisitions`
/// acquisitions of one permit each, with the holders counted outside it.
pub(crate) async fn w9(
    bench: &Bench<'_>,
    settings: Contention,
    acquisitions: usize,
    permits: u32,
) -> Result<Vec<Metric>> {
    let c = bench.client.clone();
    let run = contended(
        bench,
        ("W9", "semaphore"),
        settings,
        acquisitions,
        move || c.semaphore("bench:w9", permits).permit(),
    )
    .await?;
    let ceiling = f64::from(permits) / (run.hold + bench.rtt).as_secs_f64();
    let rate = run.rate();
    Ok(vec![
        Metric::info("max permits in use", "count", run.max_inside as f64),
        Metric::info(
            format!("max in use <= {permits}"),
            "1=yes",
            f64::from(u8::from(run.max_inside <= permits as usize)),
        ),
        Metric::info("acquisitions", "count", run.acquisitions as f64),
        Metric::higher("acquisitions/s", "1/s", rate),
        Metric::info("measured hold", "us", micros(run.hold)),
        Metric::info(format!("ceiling {permits} / (hold + RTT)"), "1/s", ceiling),
        Metric::higher("x ceiling", "ratio", rate / ceiling),
        Metric::lower("longest acquire wait", "ms", millis(run.longest_wait)),
        Metric::lower(
            "Redis commands / acquisition",
            "cmds",
            run.commands as f64 / run.acquisitions as f64,
        ),
        Metric::lower(
            "of which EVALSHA / acquisition",
            "cmds",
            run.scripts as f64 / run.acquisitions as f64,
        ),
    ])
}
