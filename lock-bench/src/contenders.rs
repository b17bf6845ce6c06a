//! The three contenders, behind one small interface: this project, `rslock`
//! and the raw-client floor.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use distlock_core::{LockClient, LockGuard};
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// The lease every contender uses unless a workload sets another.
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// A lock implementation under test.
pub(crate) trait Contender: Clone + Send + Sync + 'static {
    /// Proof of holding a lock.
    type Guard: Send + 'static;

    /// Connects, with `lease` as the lock's lease (watchdog lease for ours).
    fn connect(url: &str, lease: Duration) -> impl Future<Output = Result<Self>> + Send;

    /// One attempt; an error when the lock is busy.
    fn try_acquire(&self, key: &str) -> impl Future<Output = Result<Self::Guard>> + Send;

    /// Waits up to `wait` for the lock, the contender's own way.
    fn acquire_wait(
        &self,
        key: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<Self::Guard>> + Send;

    /// Releases the lock.
    fn release(&self, guard: Self::Guard) -> impl Future<Output = Result<()>> + Send;

    /// Keeps `guards` held for `periods` renewal periods of `period` each, the
    /// way a user of the library keeps many locks alive; returns the round
    /// trips spent on renewal.
    fn hold_for(
        &self,
        guards: &mut Vec<Self::Guard>,
        period: Duration,
        periods: u32,
    ) -> impl Future<Output = Result<u64>> + Send;
}

/// This project, every feature on: watchdog mode (registration with the
/// renewal driver), reentrancy scopes, fencing tokens, pub/sub wake-up.
#[derive(Clone)]
pub(crate) struct Ours {
    pub(crate) client: LockClient,
}

impl Contender for Ours {
    type Guard = LockGuard;

    async fn connect(url: &str, lease: Duration) -> Result<Self> {
        let client = LockClient::builder().lease(lease).connect(url).await?;
        Ok(Ours { client })
    }

    async fn try_acquire(&self, key: &str) -> Result<LockGuard> {
        Ok(self.client.lock(key).acquire().await?)
    }

    async fn acquire_wait(&self, key: &str, wait: Duration) -> Result<LockGuard> {
        Ok(self.client.lock(key).wait(wait).acquire().await?)
    }

    async fn release(&self, guard: LockGuard) -> Result<()> {
        Ok(guard.release().await?)
    }

    async fn hold_for(
        &self,
        guards: &mut Vec<LockGuard>,
        period: Duration,
        periods: u32,
    ) -> Result<u64> {
        // The watchdog renews on its own: count its rounds (one pipelined
        // round trip per node each).
        let before = self.client.stats().renewal_rounds;
        tokio::time::sleep(period * periods + period / 10).await;
        let lost = guards.iter().filter(|guard| !guard.is_held()).count();
        if lost > 0 {
            bail!("{lost} locks lost during the hold");
        }
        Ok(self.client.stats().renewal_rounds - before)
    }
}

/// `rslock` at its defaults (retry count 3, retry delay up to 200 ms).
#[derive(Clone)]
pub(crate) struct Rslock {
    manager: rslock::LockManager,
    lease: Duration,
}

impl Contender for Rslock {
    type Guard = rslock::Lock;

    async fn connect(url: &str, lease: Duration) -> Result<Self> {
        let manager = rslock::LockManager::new(vec![url.to_owned()]);
        // Open its connection before measuring.
        let lock = manager
            .lock("bench:rslock:connect", lease)
            .await
            .map_err(|err| anyhow!("rslock: {err}"))?;
        manager.unlock(&lock).await;
        Ok(Rslock { manager, lease })
    }

    async fn try_acquire(&self, key: &str) -> Result<rslock::Lock> {
        // `lock` retries a busy lock up to its retry count; uncontended
        // workloads always get it at the first attempt.
        self.manager
            .lock(key, self.lease)
            .await
            .map_err(|err| anyhow!("rslock: {err}"))
    }

    async fn acquire_wait(&self, key: &str, wait: Duration) -> Result<rslock::Lock> {
        // `acquire` loops on `lock` (its documented way to wait).
        match tokio::time::timeout(wait, self.manager.acquire(key, self.lease)).await {
            Ok(Ok(guard)) => Ok(guard.lock),
            Ok(Err(err)) => Err(anyhow!("rslock: {err}")),
            Err(_) => bail!("rslock: timed out after {wait:?}"),
        }
    }

    async fn release(&self, lock: rslock::Lock) -> Result<()> {
        self.manager.unlock(&lock).await;
        Ok(())
    }

    async fn hold_for(
        &self,
        guards: &mut Vec<rslock::Lock>,
        period: Duration,
        periods: u32,
    ) -> Result<u64> {
        // rslock has no watchdog: a user extends each lock (`using` does the
        // same per lock, on its own timer).
        let mut round_trips = 0;
        for _ in 0..periods {
            tokio::time::sleep(period).await;
            let extended = futures_util::future::join_all(
                guards
                    .iter()
                    .map(|lock| self.manager.extend(lock, self.lease)),
            )
            .await;
            round_trips += guards.len() as u64;
            let mut renewed = Vec::with_capacity(guards.len());
            for lock in extended {
                renewed.push(lock.map_err(|err| anyhow!("rslock extend: {err}"))?);
            }
            *guards = renewed;
        }
        Ok(round_trips)
    }
}

/// The floor: the plain `redis` crate, `SET NX PX` to acquire and a
/// compare-and-delete `EVALSHA` to release, over one multiplexed connection.
/// Waiting is a tight poll (retry as soon as the busy answer is back).
#[derive(Clone)]
pub(crate) struct Floor {
    conn: MultiplexedConnection,
    unlock: Arc<redis::Script>,
    extend: Arc<redis::Script>,
    next_token: Arc<AtomicU64>,
    lease_ms: u64,
}

const UNLOCK: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
const EXTEND: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0";

/// A lock held by the floor contender: its key and owner token.
pub(crate) struct FloorGuard {
    key: String,
    token: u64,
}

impl Contender for Floor {
    type Guard = FloorGuard;

    async fn connect(url: &str, lease: Duration) -> Result<Self> {
        let mut conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await
            .context("floor: connect")?;
        let unlock = redis::Script::new(UNLOCK);
        let extend = redis::Script::new(EXTEND);
        let _: String = unlock.prepare_invoke().load_async(&mut conn).await?;
        let _: String = extend.prepare_invoke().load_async(&mut conn).await?;
        Ok(Floor {
            conn,
            unlock: Arc::new(unlock),
            extend: Arc::new(extend),
            next_token: Arc::new(AtomicU64::new(rand_seed())),
            lease_ms: lease.as_millis() as u64,
        })
    }

    async fn try_acquire(&self, key: &str) -> Result<FloorGuard> {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let mut conn = self.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(self.lease_ms)
            .query_async(&mut conn)
            .await?;
        match set {
            Some(_) => Ok(FloorGuard {
                key: key.to_owned(),
                token,
            }),
            None => bail!("floor: {key} is busy"),
        }
    }

    async fn acquire_wait(&self, key: &str, wait: Duration) -> Result<FloorGuard> {
        let deadline = Instant::now() + wait;
        loop {
            if let Ok(guard) = self.try_acquire(key).await {
                return Ok(guard);
            }
            if Instant::now() >= deadline {
                bail!("floor: timed out after {wait:?}");
            }
            tokio::task::yield_now().await;
        }
    }

    async fn release(&self, guard: FloorGuard) -> Result<()> {
        let mut conn = self.conn.clone();
        let deleted: i64 = self
            .unlock
            .key(&guard.key)
            .arg(guard.token)
            .invoke_async(&mut conn)
            .await?;
        if deleted != 1 {
            bail!("floor: {} was not held at release", guard.key);
        }
        Ok(())
    }

    async fn hold_for(
        &self,
        guards: &mut Vec<FloorGuard>,
        period: Duration,
        periods: u32,
    ) -> Result<u64> {
        // One pipeline of compare-and-pexpire per period: one round trip.
        let mut conn = self.conn.clone();
        for _ in 0..periods {
            tokio::time::sleep(period).await;
            let mut pipe = redis::pipe();
            for guard in guards.iter() {
                pipe.cmd("EVALSHA")
                    .arg(self.extend.get_hash())
                    .arg(1)
                    .arg(&guard.key)
                    .arg(guard.token)
                    .arg(self.lease_ms);
            }
            let renewed: Vec<i64> = pipe.query_async(&mut conn).await?;
            if renewed.iter().any(|&r| r != 1) {
                bail!("floor: a lock was lost during the hold");
            }
        }
        Ok(u64::from(periods))
    }
}

fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::process::id()) >> 1
}
