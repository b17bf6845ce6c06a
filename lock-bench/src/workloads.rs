//! The workloads W1-W6, each generic over the contender.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::contenders::{Contender, LEASE};
use crate::machine::{live_heap_bytes, process_cpu_time};
use crate::report::{micros, millis, percentile, Metric};

/// A plain connection for measuring: command statistics, PING, flushing.
#[derive(Clone)]
pub(crate) struct Admin {
    conn: MultiplexedConnection,
}

impl Admin {
    pub(crate) async fn connect(url: &str) -> Result<Self> {
        let conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await
            .context("connect to Redis")?;
        Ok(Admin { conn })
    }

    pub(crate) async fn flush(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        let () = redis::cmd("FLUSHALL").query_async(&mut conn).await?;
        Ok(())
    }

    /// Resets `INFO commandstats` (and SLOWLOG).
    pub(crate) async fn reset_stats(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn)
            .await?;
        let () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Calls per command since the last reset, from `INFO commandstats`,
    /// without this tool's own measuring commands.
    pub(crate) async fn command_calls(&self) -> Result<HashMap<String, u64>> {
        let mut conn = self.conn.clone();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await?;
        Ok(info
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                if ["info", "config", "slowlog", "client", "flushall", "ping"]
                    .iter()
                    .any(|own| name == *own || name.starts_with(&format!("{own}|")))
                {
                    return None;
                }
                let calls = rest
                    .strip_prefix("calls=")?
                    .split(',')
                    .next()?
                    .parse()
                    .ok()?;
                Some((name.to_owned(), calls))
            })
            .collect())
    }

    pub(crate) async fn total_calls(&self) -> Result<u64> {
        Ok(self.command_calls().await?.values().sum())
    }

    /// CPU time the Redis server has used (user + system, all threads), from `INFO cpu`.
    pub(crate) async fn server_cpu(&self) -> Result<Duration> {
        let mut conn = self.conn.clone();
        let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
        let mut seconds = 0.0;
        for line in info.lines() {
            if let Some((name, value)) = line.split_once(':') {
                if name == "used_cpu_sys" || name == "used_cpu_user" {
                    seconds += value.trim().parse::<f64>().unwrap_or(0.0);
                }
            }
        }
        Ok(Duration::from_secs_f64(seconds))
    }

    /// The p50 of `n` sequential PINGs.
    pub(crate) async fn ping_rtt(&self, n: usize) -> Result<Duration> {
        let mut conn = self.conn.clone();
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            let () = redis::cmd("PING").query_async(&mut conn).await?;
            times.push(started.elapsed());
        }
        times.sort();
        Ok(percentile(&times, 0.5))
    }

    /// The p50 of `n` PINGs each sent after `idle` without traffic: the round
    /// trip a request pays when both cores have gone idle in between (as in
    /// W3, where everyone sleeps 1 ms between requests).
    pub(crate) async fn idle_ping_rtt(&self, n: usize, idle: Duration) -> Result<Duration> {
        let mut conn = self.conn.clone();
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            tokio::time::sleep(idle).await;
            let started = Instant::now();
            let () = redis::cmd("PING").query_async(&mut conn).await?;
            times.push(started.elapsed());
        }
        times.sort();
        Ok(percentile(&times, 0.5))
    }

    /// Connections that hold at least one (shard) channel subscription.
    pub(crate) async fn subscription_connections(&self) -> Result<usize> {
        let mut conn = self.conn.clone();
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut conn)
            .await?;
        Ok(list
            .lines()
            .filter(|line| {
                line.split_whitespace().any(|field| {
                    ["sub=", "psub=", "ssub="].iter().any(|prefix| {
                        field
                            .strip_prefix(prefix)
                            .and_then(|n| n.parse::<u64>().ok())
                            .is_some_and(|n| n > 0)
                    })
                })
            })
            .count())
    }

    /// The slowest commands Redis logged since the last reset (SLOWLOG GET).
    pub(crate) async fn slowlog(&self, n: usize) -> Result<Vec<String>> {
        let mut conn = self.conn.clone();
        let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(n)
            .query_async(&mut conn)
            .await?;
        Ok(entries
            .into_iter()
            .filter_map(|entry| match entry {
                redis::Value::Array(fields) if fields.len() >= 4 => {
                    let micros = match &fields[2] {
                        redis::Value::Int(n) => *n,
                        _ => 0,
                    };
                    let args: Vec<String> = match &fields[3] {
                        redis::Value::Array(args) => args
                            .iter()
                            .take(3)
                            .map(|arg| match arg {
                                redis::Value::BulkString(bytes) => {
                                    String::from_utf8_lossy(bytes).chars().take(24).collect()
                                }
                                other => format!("{other:?}"),
                            })
                            .collect(),
                        _ => Vec::new(),
                    };
                    Some(format!("{micros} us: {}", args.join(" ")))
                }
                _ => None,
            })
            .collect())
    }

    pub(crate) fn conn(&self) -> MultiplexedConnection {
        self.conn.clone()
    }
}

/// CPU used by this process and by the Redis server over a measurement.
struct CpuMeter {
    client: Duration,
    server: Duration,
}

impl CpuMeter {
    async fn start(admin: &Admin) -> Result<Self> {
        Ok(CpuMeter {
            server: admin.server_cpu().await?,
            client: process_cpu_time(),
        })
    }

    /// (client, server) CPU time since `start`.
    async fn stop(self, admin: &Admin) -> Result<(Duration, Duration)> {
        let client = process_cpu_time().saturating_sub(self.client);
        let server = admin.server_cpu().await?.saturating_sub(self.server);
        Ok((client, server))
    }
}

/// W1 measurements of one contender, accumulated over interleaved rounds
/// (so that drift on the machine hits every contender alike).
#[derive(Debug, Default)]
pub(crate) struct W1Sample {
    times: Vec<Duration>,
    elapsed: Duration,
    client_cpu: Duration,
    server_cpu: Duration,
}

impl W1Sample {
    /// Adds one round measured elsewhere (by the Redisson driver).
    pub(crate) fn add(
        &mut self,
        times: impl IntoIterator<Item = Duration>,
        elapsed: Duration,
        client_cpu: Duration,
        server_cpu: Duration,
    ) {
        self.times.extend(times);
        self.elapsed += elapsed;
        self.client_cpu += client_cpu;
        self.server_cpu += server_cpu;
    }

    pub(crate) fn metrics(mut self) -> Vec<Metric> {
        self.times.sort();
        let n = self.times.len().max(1) as f64;
        vec![
            Metric::higher("cycles/s", "1/s", n / self.elapsed.as_secs_f64()),
            Metric::lower("cycle p50", "us", micros(percentile(&self.times, 0.5))),
            Metric::lower("cycle p99", "us", micros(percentile(&self.times, 0.99))),
            Metric::lower("client CPU / cycle", "us", micros(self.client_cpu) / n),
            Metric::lower("Redis CPU / cycle", "us", micros(self.server_cpu) / n),
        ]
    }
}

/// W1, one round: one client, sequential acquire + release of one key.
pub(crate) async fn w1<C: Contender>(
    contender: &C,
    admin: &Admin,
    cycles: usize,
    warmup: usize,
    sample: &mut W1Sample,
) -> Result<()> {
    let key = "bench:w1";
    for _ in 0..warmup {
        let guard = contender.try_acquire(key).await?;
        contender.release(guard).await?;
    }
    let cpu = CpuMeter::start(admin).await?;
    let started = Instant::now();
    for _ in 0..cycles {
        let t = Instant::now();
        let guard = contender.try_acquire(key).await?;
        contender.release(guard).await?;
        sample.times.push(t.elapsed());
    }
    sample.elapsed += started.elapsed();
    let (client_cpu, server_cpu) = cpu.stop(admin).await?;
    sample.client_cpu += client_cpu;
    sample.server_cpu += server_cpu;
    Ok(())
}

/// W2: `tasks` tasks, each on its own key, acquire + release for `duration`.
pub(crate) async fn w2<C: Contender>(
    contender: &C,
    admin: &Admin,
    tasks: usize,
    duration: Duration,
) -> Result<Vec<Metric>> {
    // Warm up every key (and the connection) first.
    for i in 0..tasks {
        let guard = contender.try_acquire(&format!("bench:w2:{i}")).await?;
        contender.release(guard).await?;
    }
    let cpu = CpuMeter::start(admin).await?;
    let started = Instant::now();
    let deadline = started + duration;
    let mut handles = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let contender = contender.clone();
        handles.push(tokio::spawn(async move {
            let key = format!("bench:w2:{i}");
            let mut times = Vec::with_capacity(4096);
            while Instant::now() < deadline {
                let t = Instant::now();
                let guard = contender.try_acquire(&key).await?;
                contender.release(guard).await?;
                times.push(t.elapsed());
            }
            anyhow::Ok(times)
        }));
    }
    let mut times = Vec::new();
    for handle in handles {
        times.extend(handle.await??);
    }
    let elapsed = started.elapsed();
    let (client_cpu, server_cpu) = cpu.stop(admin).await?;
    Ok(w2_metrics(times, elapsed, client_cpu, server_cpu))
}

/// W2's figures from the cycle times of all tasks.
pub(crate) fn w2_metrics(
    mut times: Vec<Duration>,
    elapsed: Duration,
    client_cpu: Duration,
    server_cpu: Duration,
) -> Vec<Metric> {
    times.sort();
    let n = times.len() as f64;
    vec![
        Metric::higher("cycles/s", "1/s", n / elapsed.as_secs_f64()),
        Metric::lower("cycle p50", "us", micros(percentile(&times, 0.5))),
        Metric::lower("cycle p99", "us", micros(percentile(&times, 0.99))),
        Metric::lower("client CPU / cycle", "us", micros(client_cpu) / n),
        Metric::lower("Redis CPU / cycle", "us", micros(server_cpu) / n),
    ]
}

/// Settings of the contended workloads W3 and W4.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Contention {
    pub(crate) workers: usize,
    pub(crate) acquisitions: usize,
    pub(crate) hold: Duration,
    pub(crate) work: Duration,
    pub(crate) wait: Duration,
}

/// What the workers of W3/W4 record.
#[derive(Default)]
struct HandOffs {
    /// (worker, when its release was sent) of the last release.
    last_release: Mutex<Option<(usize, Instant)>>,
    hand_offs: Mutex<Vec<Duration>>,
    holds: Mutex<Vec<Duration>>,
}

/// W3 (and W4 with `counter`): `workers` workers on one key; each loop
/// acquires, holds, releases, then works outside the lock.
pub(crate) async fn w3<C: Contender>(
    contender: &C,
    admin: &Admin,
    settings: Contention,
    rtt: Duration,
    idle_rtt: Duration,
    counter: bool,
) -> Result<Vec<Metric>> {
    let key = if counter { "bench:w4" } else { "bench:w3" };
    let counter_key = "bench:w4:counter";
    let guard = contender.try_acquire(key).await?;
    contender.release(guard).await?;
    admin.reset_stats().await?;
    let tickets = Arc::new(AtomicUsize::new(0));
    let record = Arc::new(HandOffs::default());
    let started = Instant::now();
    let mut handles = Vec::with_capacity(settings.workers);
    for worker in 0..settings.workers {
        let contender = contender.clone();
        let tickets = tickets.clone();
        let record = record.clone();
        let mut conn = admin.conn();
        handles.push(tokio::spawn(async move {
            while tickets.fetch_add(1, Ordering::Relaxed) < settings.acquisitions {
                let guard = contender.acquire_wait(key, settings.wait).await?;
                let acquired = Instant::now();
                if let Some((previous, released)) = *record.last_release.lock().unwrap() {
                    if previous != worker {
                        record.hand_offs.lock().unwrap().push(acquired - released);
                    }
                }
                if counter {
                    // A read-modify-write that loses updates unless the lock
                    // excludes: read, hold, write back.
                    let value: Option<u64> = redis::cmd("GET")
                        .arg(counter_key)
                        .query_async(&mut conn)
                        .await?;
                    tokio::time::sleep(settings.hold).await;
                    let () = redis::cmd("SET")
                        .arg(counter_key)
                        .arg(value.unwrap_or(0) + 1)
                        .query_async(&mut conn)
                        .await?;
                } else {
                    tokio::time::sleep(settings.hold).await;
                }
                let released = Instant::now();
                record.holds.lock().unwrap().push(released - acquired);
                *record.last_release.lock().unwrap() = Some((worker, released));
                contender.release(guard).await?;
                tokio::time::sleep(settings.work).await;
            }
            anyhow::Ok(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    let elapsed = started.elapsed();
    let calls = admin.command_calls().await?;
    let n = settings.acquisitions as f64;
    if counter {
        let mut conn = admin.conn();
        let value: Option<u64> = redis::cmd("GET")
            .arg(counter_key)
            .query_async(&mut conn)
            .await?;
        let value = value.unwrap_or(0);
        return Ok(vec![
            Metric::info("counter", "count", value as f64),
            Metric::info("acquisitions", "count", n),
            Metric::info(
                "counter == acquisitions",
                "1=yes",
                f64::from(u8::from(value as usize == settings.acquisitions)),
            ),
            Metric::higher("acquisitions/s", "1/s", n / elapsed.as_secs_f64()),
        ]);
    }
    let hand_offs = record.hand_offs.lock().unwrap().clone();
    let holds = record.holds.lock().unwrap().clone();
    let commands: u64 = calls.values().sum();
    Ok(w3_metrics(
        settings.acquisitions,
        elapsed,
        hand_offs,
        &holds,
        commands,
        (rtt, idle_rtt),
    ))
}

/// W3's figures: `hand_offs` when the owner changed, `holds` of every
/// acquisition, `commands` Redis ran meanwhile; `(rtt, idle_rtt)` the
/// back-to-back and idle PING round trips.
pub(crate) fn w3_metrics(
    acquisitions: usize,
    elapsed: Duration,
    mut hand_offs: Vec<Duration>,
    holds: &[Duration],
    commands: u64,
    (rtt, idle_rtt): (Duration, Duration),
) -> Vec<Metric> {
    let n = acquisitions as f64;
    hand_offs.sort();
    let hold = holds.iter().sum::<Duration>() / holds.len().max(1) as u32;
    let ceiling = 1.0 / (hold + rtt).as_secs_f64();
    let rate = n / elapsed.as_secs_f64();
    vec![
        Metric::higher("acquisitions/s", "1/s", rate),
        Metric::higher("x ceiling 1/(hold+RTT)", "ratio", rate / ceiling),
        Metric::lower("hand-off p50", "us", micros(percentile(&hand_offs, 0.5))),
        Metric::lower("hand-off p99", "us", micros(percentile(&hand_offs, 0.99))),
        Metric::lower(
            "hand-off p50 in PING RTTs",
            "RTT",
            percentile(&hand_offs, 0.5).as_secs_f64() / rtt.as_secs_f64(),
        ),
        Metric::lower(
            "hand-off p50 in idle-PING RTTs",
            "RTT",
            percentile(&hand_offs, 0.5).as_secs_f64() / idle_rtt.as_secs_f64(),
        ),
        Metric::higher("owner changes", "count", hand_offs.len() as f64),
        Metric::lower("Redis commands / acquisition", "cmds", commands as f64 / n),
        Metric::info("measured hold", "us", micros(hold)),
    ]
}

/// W5: one client holds `locks` locks for `periods` renewal periods.
pub(crate) async fn w5<C: Contender>(
    url: &str,
    admin: &Admin,
    locks: usize,
    period: Duration,
    periods: u32,
) -> Result<Vec<Metric>> {
    // The lease is three periods, as the watchdog's lease/3 period.
    let contender = C::connect(url, period * 3).await?;
    let heap_before = live_heap_bytes();
    let mut guards = Vec::with_capacity(locks);
    for chunk in (0..locks).collect::<Vec<_>>().chunks(500) {
        let acquired = futures_util::future::join_all(
            chunk
                .iter()
                .map(|i| contender.try_acquire_owned(format!("bench:w5:{i}"))),
        )
        .await;
        for guard in acquired {
            guards.push(guard?);
        }
    }
    let heap_per_lock = (live_heap_bytes() - heap_before) as f64 / locks as f64;
    admin.reset_stats().await?;
    let cpu_before = process_cpu_time();
    let round_trips = contender.hold_for(&mut guards, period, periods).await?;
    let cpu = process_cpu_time() - cpu_before;
    let commands = admin.total_calls().await?;
    let p = f64::from(periods);
    while !guards.is_empty() {
        let chunk: Vec<C::Guard> = guards.drain(..guards.len().min(500)).collect();
        let releases = futures_util::future::join_all(
            chunk
                .into_iter()
                .map(|guard| contender.release_owned(guard)),
        )
        .await;
        for released in releases {
            released?;
        }
    }
    Ok(vec![
        Metric::lower(
            "renewal round trips / period",
            "count",
            round_trips as f64 / p,
        ),
        Metric::lower("client CPU / period", "ms", millis(cpu) / p),
        Metric::lower("Redis commands / period", "cmds", commands as f64 / p),
        Metric::lower("heap / held lock", "bytes", heap_per_lock),
    ])
}

/// Helpers that own their arguments, so that many can run at once.
pub(crate) trait OwnedOps: Contender {
    fn try_acquire_owned(
        &self,
        key: String,
    ) -> impl std::future::Future<Output = Result<Self::Guard>> + Send {
        let this = self.clone();
        async move { this.try_acquire(&key).await }
    }

    fn release_owned(
        &self,
        guard: Self::Guard,
    ) -> impl std::future::Future<Output = Result<()>> + Send {
        let this = self.clone();
        async move { this.release(guard).await }
    }
}

impl<C: Contender> OwnedOps for C {}

/// W6: `keys * per_key` waiters in one process (one client) on `keys` keys
/// held by another client; each waiter acquires once and releases at once.
/// Measures the wake-up time: previous holder's release sent -> this
/// waiter's acquire returned.
pub(crate) async fn w6<C: Contender>(
    url: &str,
    admin: &Admin,
    keys: usize,
    per_key: usize,
    settle: Duration,
    pace: Duration,
) -> Result<Vec<Metric>> {
    let holder = C::connect(url, LEASE).await?;
    let waiter = C::connect(url, LEASE).await?;
    let mut held = Vec::with_capacity(keys);
    for k in 0..keys {
        held.push(holder.try_acquire(&format!("bench:w6:{k}")).await?);
    }
    let last_release: Arc<Vec<Mutex<Instant>>> =
        Arc::new((0..keys).map(|_| Mutex::new(Instant::now())).collect());
    let wakes = Arc::new(Mutex::new(Vec::with_capacity(keys * per_key)));
    let done = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::with_capacity(keys * per_key);
    let heap_before = live_heap_bytes();
    for _ in 0..per_key {
        for k in 0..keys {
            let waiter = waiter.clone();
            let last_release = last_release.clone();
            let wakes = wakes.clone();
            let done = done.clone();
            handles.push(tokio::spawn(async move {
                let key = format!("bench:w6:{k}");
                let guard = waiter.acquire_wait(&key, Duration::from_secs(120)).await?;
                let acquired = Instant::now();
                let released = *last_release[k].lock().unwrap();
                wakes.lock().unwrap().push(acquired - released);
                *last_release[k].lock().unwrap() = Instant::now();
                waiter.release(guard).await?;
                done.fetch_add(1, Ordering::Relaxed);
                anyhow::Ok(())
            }));
        }
    }
    // Let every waiter make its first attempts and subscribe.
    tokio::time::sleep(settle).await;
    if done.load(Ordering::Relaxed) > 0 {
        bail!("a W6 waiter got a lock that was held");
    }
    // Everything the waiting takes: the waiting tasks (their futures) and
    // the client's state for them (registrations, subscriptions).
    let heap_per_waiter = (live_heap_bytes() - heap_before) as f64 / (keys * per_key) as f64;
    let subscriptions = admin.subscription_connections().await?;
    // The holder releases one key per `pace`: each release starts a chain
    // of `per_key` hand-offs while the other waiters keep waiting.
    let started = Instant::now();
    let releases = held.into_iter().enumerate().map(|(k, guard)| {
        let holder = holder.clone();
        let last_release = last_release.clone();
        async move {
            tokio::time::sleep_until(started + pace * k as u32).await;
            *last_release[k].lock().unwrap() = Instant::now();
            holder.release(guard).await
        }
    });
    for released in futures_util::future::join_all(releases).await {
        released?;
    }
    for handle in handles {
        handle.await??;
    }
    let elapsed = started.elapsed();
    let mut wakes = wakes.lock().unwrap().clone();
    wakes.sort();
    Ok(vec![
        Metric::lower("subscription connections", "count", subscriptions as f64),
        Metric::lower("heap / waiter", "bytes", heap_per_waiter),
        Metric::lower("wake-up p50", "ms", millis(percentile(&wakes, 0.5))),
        Metric::lower("wake-up p99", "ms", millis(percentile(&wakes, 0.99))),
        Metric::higher(
            "acquisitions/s",
            "1/s",
            (keys * per_key) as f64 / elapsed.as_secs_f64(),
        ),
    ])
}

/// The floor of W6: what a push wake-up cannot beat. One subscription
/// connection on `keys` channels; `keys` chains of `per_key` messages, each
/// published when the previous one of its channel arrived; the figure is
/// PUBLISH sent -> message received.
pub(crate) async fn w6_floor(
    url: &str,
    keys: usize,
    per_key: usize,
    pace: Duration,
) -> Result<Vec<Metric>> {
    let client = redis::Client::open(url)?;
    let mut publisher = client.get_multiplexed_async_connection().await?;
    let mut pubsub = client.get_async_pubsub().await?;
    let channels: Vec<String> = (0..keys)
        .map(|k| format!("bench:w6:{k}:released"))
        .collect();
    pubsub.subscribe(&channels).await?;
    let (_sink, mut stream) = pubsub.split();
    let index: HashMap<String, usize> = channels
        .iter()
        .enumerate()
        .map(|(k, c)| (c.clone(), k))
        .collect();
    let mut sent = vec![Instant::now(); keys];
    let mut count = vec![0usize; keys];
    let mut wakes = Vec::with_capacity(keys * per_key);
    let started = Instant::now();
    let mut next_chain = 0;
    while wakes.len() < keys * per_key {
        // Start one chain per `pace`, as the holder releases one key per pace.
        let message = if next_chain < keys {
            let due = started + pace * next_chain as u32;
            tokio::select! {
                message = stream.next() => message,
                _ = tokio::time::sleep_until(due) => {
                    sent[next_chain] = Instant::now();
                    publish(&mut publisher, &channels[next_chain]).await?;
                    next_chain += 1;
                    continue;
                }
            }
        } else {
            stream.next().await
        };
        let Some(message) = message else {
            bail!("floor W6: subscription closed");
        };
        let received = Instant::now();
        let k = index[message.get_channel_name()];
        wakes.push(received - sent[k]);
        count[k] += 1;
        if count[k] < per_key {
            sent[k] = Instant::now();
            let channel = channels[k].clone();
            let mut publisher = publisher.clone();
            tokio::spawn(async move { publish(&mut publisher, &channel).await });
        }
    }
    let elapsed = started.elapsed();
    wakes.sort();
    Ok(vec![
        Metric::lower("subscription connections", "count", 1.0),
        Metric::lower("wake-up p50", "ms", millis(percentile(&wakes, 0.5))),
        Metric::lower("wake-up p99", "ms", millis(percentile(&wakes, 0.99))),
        Metric::higher(
            "acquisitions/s",
            "1/s",
            (keys * per_key) as f64 / elapsed.as_secs_f64(),
        ),
    ])
}

async fn publish(conn: &mut MultiplexedConnection, channel: &str) -> Result<()> {
    let _: i64 = redis::cmd("PUBLISH")
        .arg(channel)
        .arg("1")
        .query_async(conn)
        .await?;
    Ok(())
}
