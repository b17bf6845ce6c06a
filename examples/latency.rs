//! Uncontended acquire + release latency against a Redis server, next to the
//! PING round trip, and the Redis commands one cycle costs.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release --example latency
//! ```
//!
//! The full side-by-side benchmark against peers is separate work; this is
//! the quick check of the cost model (two round trips per cycle).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use distributed_lock::{redis, LockClient};

const CYCLES: usize = 3000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// `cmdstat_<name>` -> calls, from `INFO commandstats`.
async fn command_calls(conn: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").map_err(|_| "set REDIS_URL=redis://host:port/")?;
    let client = LockClient::connect(&url).await?;
    let mut conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;

    let mut pings = Vec::with_capacity(CYCLES);
    for _ in 0..CYCLES {
        let started = Instant::now();
        let () = redis::cmd("PING").query_async(&mut conn).await?;
        pings.push(started.elapsed());
    }
    // The floor any Redis lock pays: SET NX PX, then compare-and-delete.
    let unlock = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
    );
    let mut floor = Vec::with_capacity(CYCLES);
    for _ in 0..CYCLES {
        let started = Instant::now();
        let ok: Option<String> = redis::cmd("SET")
            .arg("floor")
            .arg("owner")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut conn)
            .await?;
        assert!(ok.is_some());
        let _: i64 = unlock
            .key("floor")
            .arg("owner")
            .invoke_async(&mut conn)
            .await?;
        floor.push(started.elapsed());
    }
    for _ in 0..300 {
        client.lock("latency").acquire().await?.release().await?;
    }
    let before = command_calls(&mut conn).await;
    let mut cycles = Vec::with_capacity(CYCLES);
    for _ in 0..CYCLES {
        let started = Instant::now();
        let guard = client.lock("latency").acquire().await?;
        guard.release().await?;
        cycles.push(started.elapsed());
    }
    let after = command_calls(&mut conn).await;
    pings.sort();
    cycles.sort();
    floor.sort();
    let ping = percentile(&pings, 0.5);
    let p50 = percentile(&cycles, 0.5);
    println!("PING round trip      p50 {ping:>10.1?}");
    println!(
        "acquire + release    p50 {p50:>10.1?}  p99 {:>10.1?}  ({:.2} PING round trips)",
        percentile(&cycles, 0.99),
        p50.as_secs_f64() / ping.as_secs_f64()
    );
    println!(
        "raw SET NX PX + EVALSHA del p50 {:>10.1?}  (this lock: {:.2}x the floor's cycles/s)",
        percentile(&floor, 0.5),
        percentile(&floor, 0.5).as_secs_f64() / p50.as_secs_f64()
    );
    println!("Redis commands per cycle (INFO commandstats, {CYCLES} cycles; the INFO call itself excluded):");
    for (name, calls) in &after {
        let delta = calls - before.get(name).copied().unwrap_or(0);
        let delta = if name == "info" { delta - 1 } else { delta };
        if delta > 0 {
            println!("  {name:<12} {:.2}", delta as f64 / CYCLES as f64);
        }
    }
    Ok(())
}
