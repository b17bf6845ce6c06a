//! `lock-cost`: runs one lock scenario for a given number of cycles, for the
//! deterministic cost guard (`scripts/cost.sh`, which runs it under
//! callgrind and compares with `lock-cost/baseline.txt`).
//!
//! ```text
//! lock-cost <memory|redis|hot> [--url redis://127.0.0.1:PORT/] [--cycles N] [--warmup W]
//! ```
//!
//! - `memory`: acquire + release of one plain lock on the in-memory store.
//! - `redis`: the same against the Redis at `--url` (under callgrind only
//!   this process is counted: the client side of the cycle).
//! - `hot`: lock-bench's W1h cycle: the same with `keep_hot`, against the
//!   Redis at `--url`; the kept lock is reused, so a cycle asks the server
//!   nothing.
//!
//! Everything runs on one current-thread tokio runtime, so that the work of
//! a cycle (the client's background tasks included) is done on this thread
//! in the same order every run. After `W` warm-up cycles it runs `N`
//! measured cycles and prints the allocator calls and bytes of those `N`
//! (exact: a counting global allocator) as one line:
//! `scenario=memory cycles=N allocations=A bytes=B`. Instructions are
//! counted from outside: the driver runs two cycle counts under callgrind
//! and divides the difference of the totals by the difference of the
//! counts, which cancels start-up and shut-down.
#![deny(unreachable_pub)]

mod counting;

use std::error::Error;
use std::time::Duration;

use distlock_core::LockClient;

use counting::{AllocCount, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// A lease far longer than a run under callgrind (about 50 times slower
/// than native), so that no watchdog renewal of the hot lock falls inside
/// one and the count of a cycle does not depend on how long the run took.
const LEASE: Duration = Duration::from_secs(600);

/// The hot lock's linger: longer than any pause between two cycles.
const HOT_LINGER: Duration = Duration::from_secs(60);

/// The one lock name every cycle takes.
const NAME: &str = "cost:cycle";

/// What to run.
#[derive(Clone, Copy, Debug)]
enum Scenario {
    Memory,
    Redis,
    Hot,
}

impl Scenario {
    fn parse(name: &str) -> Option<Scenario> {
        match name {
            "memory" => Some(Scenario::Memory),
            "redis" => Some(Scenario::Redis),
            "hot" => Some(Scenario::Hot),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Scenario::Memory => "memory",
            Scenario::Redis => "redis",
            Scenario::Hot => "hot",
        }
    }
}

/// The command line.
#[derive(Debug)]
struct Args {
    scenario: Scenario,
    url: Option<String>,
    cycles: u64,
    warmup: u64,
}

const USAGE: &str =
    "usage: lock-cost <memory|redis|hot> [--url redis://HOST:PORT/] [--cycles N] [--warmup W]";

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let scenario = args.next().ok_or_else(|| USAGE.to_owned())?;
    let scenario = Scenario::parse(&scenario)
        .ok_or_else(|| format!("unknown scenario {scenario:?}\n{USAGE}"))?;
    let mut parsed = Args {
        scenario,
        url: None,
        cycles: 1000,
        warmup: 200,
    };
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|err| format!("{flag} {value:?}: {err}"))
        };
        match flag.as_str() {
            "--url" => parsed.url = Some(value.clone()),
            "--cycles" => parsed.cycles = number()?,
            "--warmup" => parsed.warmup = number()?,
            _ => return Err(format!("unknown option {flag:?}\n{USAGE}")),
        }
    }
    match (parsed.scenario, &parsed.url) {
        (Scenario::Memory, Some(_)) => Err("memory takes no --url".to_owned()),
        (Scenario::Redis | Scenario::Hot, None) => Err(format!(
            "{} needs --url (scripts/cost.sh starts a redis-server for it)",
            parsed.scenario.name()
        )),
        _ => Ok(parsed),
    }
}

/// The client of a scenario.
async fn client(args: &Args) -> Result<LockClient, Box<dyn Error>> {
    let builder = LockClient::builder().lease(LEASE);
    Ok(match (args.scenario, &args.url) {
        (Scenario::Memory, _) => builder.memory(distlock_core::MemoryStore::new())?,
        (Scenario::Redis, Some(url)) => builder.connect(url).await?,
        (Scenario::Hot, Some(url)) => builder.keep_hot(HOT_LINGER).connect(url).await?,
        (_, None) => return Err("no --url".into()),
    })
}

/// `n` sequential acquire + release cycles of one lock.
async fn cycles(client: &LockClient, n: u64) -> Result<(), Box<dyn Error>> {
    for _ in 0..n {
        let guard = client.lock(NAME).acquire().await?;
        guard.release().await?;
    }
    Ok(())
}

async fn run(args: &Args) -> Result<AllocCount, Box<dyn Error>> {
    let client = client(args).await?;
    cycles(&client, args.warmup).await?;
    let before = AllocCount::now();
    cycles(&client, args.cycles).await?;
    let spent = AllocCount::now().since(before);
    // The hot lock is given up here, not left to its lease.
    client.shutdown(Duration::from_secs(1)).await?;
    Ok(spent)
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(why) => {
            eprintln!("lock-cost: {why}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("lock-cost: no tokio runtime: {err}");
            std::process::exit(1);
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(spent) => println!(
            "scenario={} cycles={} allocations={} bytes={}",
            args.scenario.name(),
            args.cycles,
            spent.allocations,
            spent.bytes
        ),
        Err(err) => {
            eprintln!("lock-cost: {}: {err}", args.scenario.name());
            std::process::exit(1);
        }
    }
}
