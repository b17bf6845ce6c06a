//! `wait`, `lease`, `at_least`, `permits` and `take` from runtime values:
//! fn arguments, fields of `self`, configuration, calls; evaluated at each
//! call in the function's scope, as the key templates are. Generated locals
//! do not clash with arguments named like them.
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError};

struct Settings {
    lease_secs: u64,
    exports: u32,
}

struct LockConfig {
    lock_wait: Duration,
}

const MIN_RUN: Duration = Duration::from_millis(20);

fn config() -> LockConfig {
    LockConfig { lock_wait: Duration::from_millis(100) }
}

#[distributed_lock(
    key = "order:{id}",
    wait = cfg.lock_wait,
    lease = Duration::from_secs(settings.lease_secs),
    at_least = MIN_RUN,
    client = client
)]
async fn pay(
    client: &LockClient,
    cfg: &LockConfig,
    settings: &Settings,
    id: u64,
) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock(key = "export:{tenant}", permits = settings.exports, take = n, wait = config().lock_wait, client = client)]
async fn export(client: &LockClient, settings: &Settings, tenant: u32, n: u32) -> Result<u32, LockError> {
    Ok(n)
}

#[distributed_lock(keys = ["account:{from}", "account:{to}"], wait = cfg.lock_wait, lease = cfg.lock_wait * 10, client = client)]
async fn transfer(client: &LockClient, cfg: LockConfig, from: u32, to: u32) -> Result<Duration, LockError> {
    Ok(cfg.lock_wait)
}

#[distributed_lock(key = "job:{__lock_guard}", wait = __lock_wait, client = client)]
async fn clashing_names(client: &LockClient, __lock_guard: u8, __lock_wait: Duration) -> Result<u8, LockError> {
    Ok(__lock_guard)
}

struct Jobs {
    locks: LockClient,
    wait: Duration,
    lease: Duration,
    limit: u32,
    runs: u32,
}

impl Jobs {
    #[distributed_lock(key = "job:{name}", wait = self.wait, lease = self.lease, client = self.locks)]
    async fn run(&self, name: &str) -> Result<Duration, LockError> {
        Ok(self.wait)
    }

    #[distributed_lock(key = "job:{name}", permits = self.limit, at_least = self.lease / 2, client = self.locks)]
    async fn run_mut(&mut self, name: &str) -> Result<u32, LockError> {
        self.runs += 1;
        Ok(self.runs)
    }

    #[distributed_lock(key = "job:{name}", read, wait = Self::default_wait(), client = self.locks)]
    async fn read(&self, name: &str) -> Result<(), LockError> {
        Ok(())
    }

    fn default_wait() -> Duration {
        Duration::from_secs(1)
    }
}

#[async_trait::async_trait]
trait Scheduled {
    async fn tick(&self, round: u64) -> Result<u64, LockError>;
}

#[async_trait::async_trait]
impl Scheduled for Jobs {
    #[distributed_lock(key = "tick:{round}", fair, wait = self.wait, lease = self.lease, client = self.locks)]
    async fn tick(&self, round: u64) -> Result<u64, LockError> {
        Ok(round)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let client = LockClient::memory();
    let settings = Settings { lease_secs: 30, exports: 3 };
    assert_eq!(pay(&client, &config(), &settings, 9).await.unwrap(), 9);
    assert_eq!(export(&client, &settings, 1, 2).await.unwrap(), 2);
    assert_eq!(clashing_names(&client, 4, Duration::ZERO).await.unwrap(), 4);
    assert_eq!(transfer(&client, config(), 1, 2).await.unwrap(), Duration::from_millis(100));
    let mut jobs = Jobs {
        locks: client,
        wait: Duration::from_millis(50),
        lease: Duration::from_secs(10),
        limit: 2,
        runs: 0,
    };
    assert_eq!(jobs.run("a").await.unwrap(), Duration::from_millis(50));
    assert_eq!(jobs.run_mut("b").await.unwrap(), 1);
    jobs.read("c").await.unwrap();
    assert_eq!(jobs.tick(5).await.unwrap(), 5);
}
