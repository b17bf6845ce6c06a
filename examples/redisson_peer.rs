//! The Rust half of the Redisson interop scenario (interop/redisson-java
//! has the Java half, with real Redisson): take lock `NAME` in Redisson's
//! layout `TURNS` times, and inside each turn do what both halves do:
//!
//! - mark the turn inside (`SET interop:<NAME>:inside <who> NX`; a failure
//!   counts an overlap in `interop:<NAME>:overlaps`),
//! - increment `interop:<NAME>:counter` by a read and a later write (two
//!   holders at once lose an update),
//! - append `<side> <token>` to `interop:<NAME>:tokens`, in lock order,
//! - record how long after the previous holder's release the turn began,
//!   when the previous holder was the other side (`interop:<NAME>:released`
//!   holds `<side> <server µs>` at each release; the hand-offs to a side go
//!   to `interop:<NAME>:handoffs:<side>` in µs).
//!
//! Run both halves at once against one Redis, then `--report` with either:
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example redisson_peer -- interop:java 200
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example redisson_peer -- interop:java --report
//! ```
//!
//! On a cluster, set `REDIS_CLUSTER` to the seed URLs (comma separated)
//! instead of `REDIS_URL`, and `SHARDED_SUBSCRIPTION_MODE` to the Java
//! side's `shardedSubscriptionMode` (`AUTO`, `ON` or `OFF`).
//!
//! `--side NAME` names this half (default `rust`). `--report` prints the
//! turns, overlaps, whether the tokens rose strictly across both sides, and
//! the cross hand-off p50/p99 each way, and exits 1 when the locks overlapped, an
//! update was lost or a token went backwards. `--reset` deletes the
//! scenario's keys first.

use std::time::Duration;

use distlock::{Layout, LockClient, ShardedPubSub};
use redis::AsyncCommands;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // REDIS_CLUSTER (seed URLs, comma separated) for a cluster, with
    // SHARDED_SUBSCRIPTION_MODE as the Java side's (AUTO, ON or OFF).
    if let Ok(seeds) = std::env::var("REDIS_CLUSTER") {
        let seeds: Vec<String> = seeds.split(',').map(str::to_owned).collect();
        let conn = redis::cluster::ClusterClient::new(seeds.clone())?
            .get_async_connection()
            .await?;
        let mode = match std::env::var("SHARDED_SUBSCRIPTION_MODE").as_deref() {
            Ok("OFF") => ShardedPubSub::Off,
            Ok("ON") => ShardedPubSub::On,
            _ => ShardedPubSub::Auto,
        };
        let client = LockClient::builder()
            .layout(Layout::Redisson)
            .cluster(seeds)
            .sharded_pubsub(mode)
            .connect()
            .await?;
        return run(args, conn, client).await;
    }
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let client = LockClient::builder()
        .layout(Layout::Redisson)
        .connect(&url)
        .await?;
    run(args, conn, client).await
}

async fn run<C>(
    args: Vec<String>,
    mut conn: C,
    client: LockClient,
) -> Result<(), Box<dyn std::error::Error>>
where
    C: redis::aio::ConnectionLike + Send + Sync,
{
    let name = args
        .first()
        .cloned()
        .unwrap_or_else(|| "interop:java".into());
    let keys = Keys::new(&name);
    if args.iter().any(|a| a == "--reset") {
        // The hand-off lists of every side that took a turn, then the rest.
        let tokens: Vec<String> = conn.lrange(&keys.tokens, 0, -1).await?;
        let mut sides: Vec<&str> = tokens
            .iter()
            .filter_map(|entry| entry.split_once(' ').map(|(side, _)| side))
            .chain(["rust", "java"])
            .collect();
        sides.sort_unstable();
        sides.dedup();
        for side in sides {
            let _: () = conn.del(keys.handoffs(side)).await?;
        }
        for key in keys.all() {
            let _: () = conn.del(key).await?;
        }
    }
    if args.iter().any(|a| a == "--report") {
        return report(&mut conn, &keys).await;
    }
    let turns: usize = args
        .iter()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    // `--side NAME` (default `rust`) tells the halves apart in the report.
    let side = args
        .iter()
        .position(|a| a == "--side")
        .and_then(|at| args.get(at + 1))
        .cloned()
        .unwrap_or_else(|| "rust".into());
    for _ in 0..turns {
        let guard = client
            .lock(&name)
            .wait(Duration::from_secs(60))
            .acquire()
            .await?;
        let now = server_micros(&mut conn).await?;
        if let Some(previous) = conn.get::<_, Option<String>>(&keys.released).await? {
            if let Some((previous_side, at)) = previous.split_once(' ') {
                if previous_side != side {
                    if let Ok(at) = at.parse::<u64>() {
                        let _: () = conn
                            .rpush(keys.handoffs(&side), now.saturating_sub(at))
                            .await?;
                    }
                }
            }
        }
        let entered: Option<String> = redis::cmd("SET")
            .arg(&keys.inside)
            .arg(guard.owner())
            .arg("NX")
            .query_async(&mut conn)
            .await?;
        if entered.is_none() {
            let _: () = conn.incr(&keys.overlaps, 1).await?;
        }
        let value: u64 = conn
            .get::<_, Option<u64>>(&keys.counter)
            .await?
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _: () = conn.set(&keys.counter, value + 1).await?;
        let _: () = conn
            .rpush(&keys.tokens, format!("{side} {}", guard.fencing_token()))
            .await?;
        if entered.is_some() {
            let _: () = conn.del(&keys.inside).await?;
        }
        let at = server_micros(&mut conn).await?;
        let _: () = conn.set(&keys.released, format!("{side} {at}")).await?;
        guard.release().await?;
    }
    client.shutdown(Duration::from_secs(1)).await?;
    println!("{side}: {turns} turns on {name}");
    Ok(())
}

struct Keys {
    inside: String,
    overlaps: String,
    counter: String,
    tokens: String,
    released: String,
}

impl Keys {
    fn new(name: &str) -> Self {
        let key = |what: &str| format!("interop:{name}:{what}");
        Keys {
            inside: key("inside"),
            overlaps: key("overlaps"),
            counter: key("counter"),
            tokens: key("tokens"),
            released: key("released"),
        }
    }

    /// The hand-off times to `side` (from the other side's release), in µs.
    fn handoffs(&self, side: &str) -> String {
        format!("{}:handoffs:{side}", self.prefix())
    }

    fn prefix(&self) -> &str {
        self.inside.trim_end_matches(":inside")
    }

    fn all(&self) -> Vec<&String> {
        vec![
            &self.inside,
            &self.overlaps,
            &self.counter,
            &self.tokens,
            &self.released,
        ]
    }
}

/// The server's clock in µs (one clock for both sides).
async fn server_micros<C: redis::aio::ConnectionLike + Send>(
    conn: &mut C,
) -> Result<u64, redis::RedisError> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await?;
    Ok(secs.saturating_mul(1_000_000).saturating_add(micros))
}

async fn report<C: redis::aio::ConnectionLike + Send + Sync>(
    conn: &mut C,
    keys: &Keys,
) -> Result<(), Box<dyn std::error::Error>> {
    let tokens: Vec<String> = conn.lrange(&keys.tokens, 0, -1).await?;
    let counter: u64 = conn
        .get::<_, Option<u64>>(&keys.counter)
        .await?
        .unwrap_or(0);
    let overlaps: u64 = conn
        .get::<_, Option<u64>>(&keys.overlaps)
        .await?
        .unwrap_or(0);
    let mut per_side = std::collections::BTreeMap::<&str, usize>::new();
    let mut rising = true;
    let mut last = 0u64;
    for entry in &tokens {
        let (side, token) = entry.split_once(' ').unwrap_or((entry, "0"));
        *per_side.entry(side).or_default() += 1;
        let token: u64 = token.parse().unwrap_or(0);
        rising &= token > last;
        last = token;
    }
    let pct = |handoffs: &[u64], p: f64| {
        handoffs
            .get(((handoffs.len().max(1) - 1) as f64 * p).round() as usize)
            .map_or("-".to_owned(), |us| {
                format!("{:.2} ms", *us as f64 / 1000.0)
            })
    };
    println!("turns: {} {per_side:?}", tokens.len());
    println!(
        "counter: {counter} (lost updates: {})",
        tokens.len() as u64 - counter.min(tokens.len() as u64)
    );
    println!("overlaps: {overlaps}");
    println!("tokens strictly rising across both sides: {rising}");
    for side in per_side.keys() {
        let mut handoffs: Vec<u64> = conn.lrange(keys.handoffs(side), 0, -1).await?;
        handoffs.sort_unstable();
        println!(
            "hand-offs to {side}: {} (p50 {}, p99 {})",
            handoffs.len(),
            pct(&handoffs, 0.5),
            pct(&handoffs, 0.99)
        );
    }
    if overlaps > 0 || !rising || counter != tokens.len() as u64 {
        println!("FAILED: overlaps, lost updates or tokens out of order");
        std::process::exit(1);
    }
    Ok(())
}
