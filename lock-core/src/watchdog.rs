//! The watchdog: one driver per client that renews every watchdog-mode lock
//! of the client in one pipelined batch per node every lease/3.
//!
//! The driver is a [`Supervised`] task: it runs on the runtime of the code
//! that holds the locks, is started again there when its task is gone (a
//! dropped runtime, a panic), and stops when it has no lock left or the
//! client is gone (or shut down). The list of locks lives here, not in the
//! task, so a new driver picks them all up. A lock's loss does not wait for a renewal
//! round: `HeldLock::lost` fires at the local lease deadline by itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Backend, RenewItem, Renewal};
use crate::held::{HeldLock, HoldState};
use crate::metric_points;
use crate::supervised::Supervised;
use crate::sync::Mutex;

/// The renewal of one client's watchdog-mode locks.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    backend: Arc<dyn Backend>,
    lease: Duration,
    locks: Mutex<HashMap<u64, Weak<HeldLock>>>,
    driver: Supervised,
    rounds: AtomicU64,
}

impl Watchdog {
    /// A watchdog renewing with `lease` every lease/3.
    pub(crate) fn new(backend: Arc<dyn Backend>, lease: Duration) -> Self {
        Watchdog {
            shared: Arc::new(Shared {
                backend,
                lease,
                locks: Mutex::default(),
                driver: Supervised::default(),
                rounds: AtomicU64::new(0),
            }),
        }
    }

    /// Starts renewing `lock` (and the driver, when it is not running).
    pub(crate) fn track(&self, lock: &Arc<HeldLock>) {
        let mut locks = self.shared.locks.lock();
        locks.insert(lock.id, Arc::downgrade(lock));
        // Under the list's lock: a driver that is just ending (it found the
        // list empty under this lock) has already said so.
        self.start(&locks);
    }

    /// Makes sure a driver runs while there are locks to renew (its runtime
    /// may have gone since it was started).
    pub(crate) fn ensure_running(&self) {
        let locks = self.shared.locks.lock();
        if !locks.is_empty() {
            self.start(&locks);
        }
    }

    fn start(&self, _locks: &HashMap<u64, Weak<HeldLock>>) {
        let shared = Arc::downgrade(&self.shared);
        self.shared.driver.ensure(move || run(shared));
    }

    /// Stops renewing `lock`; returns whether it was being renewed. The
    /// uses of a kept lock are one hold with one id: forgetting a use that
    /// another use of the hold replaced (`track`) keeps renewing the hold.
    pub(crate) fn forget(&self, lock: &HeldLock) -> bool {
        let mut locks = self.shared.locks.lock();
        match locks.get(&lock.id) {
            Some(tracked) if std::ptr::eq(tracked.as_ptr(), lock) => {
                locks.remove(&lock.id);
                true
            }
            _ => false,
        }
    }

    /// Stops renewing for good (the client shut down): the driver ends and
    /// is never started again.
    pub(crate) fn stop(&self) {
        let mut locks = self.shared.locks.lock();
        locks.clear();
        self.shared.driver.stop();
    }

    /// How many locks are renewed.
    pub(crate) fn len(&self) -> usize {
        self.shared.locks.lock().len()
    }

    /// How many renewal rounds ran.
    pub(crate) fn rounds(&self) -> u64 {
        self.shared.rounds.load(Ordering::Relaxed)
    }
}

impl Shared {
    /// The locks to renew now; `None` (and the driver ends) when there are none.
    fn snapshot(&self) -> Option<Vec<Arc<HeldLock>>> {
        let mut locks = self.locks.lock();
        locks.retain(|_, lock| lock.strong_count() > 0);
        if locks.is_empty() {
            self.driver.finished();
            return None;
        }
        Some(
            locks
                .values()
                .filter_map(Weak::upgrade)
                .filter(|lock| lock.state() == HoldState::Held)
                .collect(),
        )
    }

    /// Renews `locks` once; returns the delay until the next round.
    async fn renew_round(&self, locks: &[Arc<HeldLock>]) -> Duration {
        let period = self.lease / 3;
        if locks.is_empty() {
            return period;
        }
        let items: Vec<RenewItem> = locks
            .iter()
            .map(|lock| (lock.key.clone(), lock.owner.clone()))
            .collect();
        let sent = Instant::now();
        let outcomes = self.backend.renew(&items, self.lease).await;
        metric_points::renewal_round(sent.elapsed());
        self.rounds.fetch_add(1, Ordering::Relaxed);
        let mut failed = false;
        for (lock, outcome) in locks.iter().zip(outcomes) {
            // (The lease left when this renewal was sent: before `renewed`.)
            let metered = |outcome| {
                if let Some(labels) = lock.meter.labels() {
                    labels.renewal(outcome, lock.valid_until().saturating_duration_since(sent));
                }
            };
            match outcome {
                Renewal::Renewed => {
                    metered("renewed");
                    lock.renewed(sent);
                }
                // A lock released while this round was in flight is gone
                // because of its release, not lost: only tracked holds count
                // (a kept lock's hold stays tracked from use to use).
                Renewal::Gone => {
                    if self.locks.lock().remove(&lock.id).is_some() {
                        metered("lost");
                        lock.mark_lost("the lock was deleted, expired or taken over");
                    }
                }
                Renewal::Failed(err) => {
                    metered("error");
                    failed = true;
                    tracing::warn!(key = %lock.key.name, error = %err, "lock renewal failed; retrying");
                }
            }
            if lock.check_deadline() {
                self.locks.lock().remove(&lock.id);
            }
        }
        if failed {
            // Retry soon: the lease deadline, not the period, is what counts now.
            (period / 4).max(Duration::from_millis(20))
        } else {
            // The next round a period after this one was sent, not after it
            // ended: a round of many locks takes a while (100,000 on a
            // cluster: about half a second), and counting the period from
            // its end stretched the cadence to 1.5 periods, eating into the
            // lease's slack as the locks grow.
            period.saturating_sub(sent.elapsed())
        }
    }
}

async fn run(shared: Weak<Shared>) {
    let mut delay = match shared.upgrade() {
        Some(shared) => shared.lease / 3,
        None => return,
    };
    loop {
        tokio::time::sleep(delay).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let Some(locks) = shared.snapshot() else {
            return;
        };
        delay = shared.renew_round(&locks).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryStore;
    use crate::held::Lease;
    use crate::name::LockKey;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    /// The driver started on a runtime that is then dropped: the next
    /// runtime's `ensure_running` starts one there, which keeps renewing.
    ///
    /// The second runtime's clock is paused (it jumps to each timer when
    /// nothing else runs), and the lease is long against a busy machine's
    /// delays: rounds are counted by causality, not raced against the wall.
    #[test]
    fn locks_are_renewed_after_the_drivers_runtime_is_gone() {
        let store = MemoryStore::new();
        let lease = Duration::from_secs(30);
        let watchdog = Watchdog::new(Arc::new(store.clone()), lease);
        let key = LockKey::new("lock:", "w").unwrap();
        let first = runtime();
        let lock = first.block_on(async {
            let sent = Instant::now();
            crate::backend::Backend::acquire(&store, &key, "c:1", lease)
                .await
                .unwrap();
            let lock = Arc::new(HeldLock::new(
                key.clone(),
                "c:1".into(),
                1,
                Lease::Watchdog(lease),
                sent,
            ));
            watchdog.track(&lock);
            assert!(watchdog.shared.driver.is_running());
            lock
        });
        drop(first); // the driver goes with it
        assert!(!watchdog.shared.driver.is_running());
        let rounds = watchdog.rounds();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(async {
                watchdog.ensure_running();
                // Three leases: without renewals the lock (and the store's
                // key) would have expired twice over.
                tokio::time::sleep(lease * 3).await;
                assert!(
                    watchdog.rounds() >= rounds + 8,
                    "{} rounds",
                    watchdog.rounds()
                );
                assert!(lock.is_held());
                assert_eq!(store.held(), 1);
            });
    }

    /// A round that takes half a period (many locks) must not push the next
    /// one back: rounds stay one period apart, counted from their sends.
    #[tokio::test(start_paused = true)]
    async fn slow_rounds_keep_the_period() {
        let store = MemoryStore::new();
        store.set_renew_delay(Duration::from_millis(500));
        let lease = Duration::from_secs(3);
        let watchdog = Watchdog::new(Arc::new(store.clone()), lease);
        let key = LockKey::new("lock:", "slow").unwrap();
        let sent = Instant::now();
        crate::backend::Backend::acquire(&store, &key, "c:1", lease)
            .await
            .unwrap();
        let lock = Arc::new(HeldLock::new(
            key,
            "c:1".into(),
            1,
            Lease::Watchdog(lease),
            sent,
        ));
        watchdog.track(&lock);
        tokio::time::sleep(Duration::from_millis(10_600)).await;
        // One round per second: 10 (counted from the end of the previous
        // round, rounds were 1.5 s apart: 7).
        assert!(watchdog.rounds() >= 10, "{} rounds", watchdog.rounds());
        assert!(lock.is_held());
    }
}
