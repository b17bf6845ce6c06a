//! W11: many held locks on a Redis Cluster. One client holds `locks` locks
//! (watchdog mode) on a 3-master cluster this run starts, for a few renewal
//! periods. Measured: renewal rounds per period (each is one pipeline per
//! master), renewals per period, Redis CPU per renewal (all masters), client
//! CPU per period, heap per held lock.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use distlock_core::{LockClient, LockGuard};
use lock_test_support::RedisCluster;

use crate::machine::{live_heap_bytes, process_cpu_time};
use crate::report::{micros, millis, Metric};
use crate::workloads::Admin;

/// W11 on a cluster of `masters` masters (no replicas).
pub(crate) async fn w11(locks: usize, period: Duration, periods: u32) -> Result<Vec<Metric>> {
    let masters = 3;
    let cluster = RedisCluster::start(masters, 0);
    let urls = cluster.master_urls();
    let mut admins = Vec::new();
    for url in &urls {
        admins.push(Admin::connect(url).await?);
    }
    let client = LockClient::builder()
        .lease(period * 3)
        .connect_cluster(urls.clone())
        .await?;
    let heap_before = live_heap_bytes();
    let acquiring = Instant::now();
    let mut guards: Vec<LockGuard> = Vec::with_capacity(locks);
    let names: Vec<String> = (0..locks).map(|i| format!("bench:w11:{i}")).collect();
    for chunk in names.chunks(1000) {
        let acquired = futures_util::future::join_all(
            chunk.iter().map(|name| client.lock(name).try_acquire()),
        )
        .await;
        for guard in acquired {
            match guard? {
                Some(guard) => guards.push(guard),
                None => bail!("a W11 lock was busy"),
            }
        }
    }
    let acquire_rate = locks as f64 / acquiring.elapsed().as_secs_f64();
    let heap_per_lock = (live_heap_bytes() - heap_before) as f64 / locks as f64;
    for admin in &admins {
        admin.reset_stats().await?;
    }
    let mut server_before = Duration::ZERO;
    for admin in &admins {
        server_before += admin.server_cpu().await?;
    }
    let rounds_before = client.stats().renewal_rounds;
    let cpu_before = process_cpu_time();
    tokio::time::sleep(period * periods + period / 10).await;
    let cpu = process_cpu_time() - cpu_before;
    let rounds = client.stats().renewal_rounds - rounds_before;
    let mut server = Duration::ZERO;
    let mut renewals = 0u64;
    for admin in &admins {
        server += admin.server_cpu().await?;
        renewals += admin
            .command_calls()
            .await?
            .iter()
            .filter(|(name, _)| name.starts_with("evalsha"))
            .map(|(_, calls)| calls)
            .sum::<u64>();
    }
    let server = server.saturating_sub(server_before);
    let lost = guards.iter().filter(|guard| !guard.is_held()).count();
    if lost > 0 {
        bail!("{lost} W11 locks lost during the hold");
    }
    while !guards.is_empty() {
        let chunk: Vec<LockGuard> = guards.drain(..guards.len().min(1000)).collect();
        for released in
            futures_util::future::join_all(chunk.into_iter().map(LockGuard::release)).await
        {
            released?;
        }
    }
    let p = f64::from(periods);
    Ok(vec![
        Metric::lower("renewal rounds / period", "count", rounds as f64 / p),
        Metric::info(
            "renewal pipelines / period (rounds x masters)",
            "count",
            rounds as f64 * masters as f64 / p,
        ),
        Metric::info("renewals / period", "count", renewals as f64 / p),
        Metric::lower(
            "Redis CPU / renewal (all masters)",
            "us",
            micros(server) / renewals.max(1) as f64,
        ),
        Metric::lower("client CPU / period", "ms", millis(cpu) / p),
        Metric::lower("heap / held lock", "bytes", heap_per_lock),
        Metric::info("acquisitions/s while taking them", "1/s", acquire_rate),
    ])
}
