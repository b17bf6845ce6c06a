//! The watchdog: one driver per client that renews every watchdog-mode lock
//! of the client in one pipelined batch per node every lease/3.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{RenewItem, Renewal};
use crate::client::ClientInner;
use crate::guard::{HeldLock, HoldState};

/// The locks a client's watchdog renews.
#[derive(Debug, Default)]
pub(crate) struct WatchdogState {
    locks: HashMap<u64, Weak<HeldLock>>,
    running: bool,
}

impl WatchdogState {
    /// How many locks are renewed.
    pub(crate) fn len(&self) -> usize {
        self.locks.len()
    }
}

impl ClientInner {
    /// Starts renewing `lock` (and the driver, when it is not running).
    pub(crate) fn watchdog_track(self: &Arc<Self>, lock: &Arc<HeldLock>) {
        let mut state = self.watchdog.lock().unwrap();
        state.locks.insert(lock.id, Arc::downgrade(lock));
        if !state.running {
            state.running = true;
            self.spawn(run(Arc::downgrade(self)));
        }
    }

    /// Stops renewing `lock`; returns whether it was being renewed.
    pub(crate) fn watchdog_forget(&self, lock: &HeldLock) -> bool {
        self.watchdog
            .lock()
            .unwrap()
            .locks
            .remove(&lock.id)
            .is_some()
    }

    /// The locks to renew now; stops the driver (returns `None`) when there are none.
    fn watchdog_snapshot(&self) -> Option<Vec<Arc<HeldLock>>> {
        let mut state = self.watchdog.lock().unwrap();
        state.locks.retain(|_, lock| lock.strong_count() > 0);
        if state.locks.is_empty() {
            state.running = false;
            return None;
        }
        Some(
            state
                .locks
                .values()
                .filter_map(Weak::upgrade)
                .filter(|lock| lock.state() == HoldState::Held)
                .collect(),
        )
    }
}

async fn run(client: Weak<ClientInner>) {
    let mut delay = match client.upgrade() {
        Some(client) => client.lease / 3,
        None => return,
    };
    loop {
        tokio::time::sleep(delay).await;
        let Some(client) = client.upgrade() else {
            return;
        };
        let Some(locks) = client.watchdog_snapshot() else {
            return;
        };
        delay = renew_round(&client, &locks).await;
    }
}

/// Renews `locks` once; returns the delay until the next round.
async fn renew_round(client: &ClientInner, locks: &[Arc<HeldLock>]) -> Duration {
    let period = client.lease / 3;
    if locks.is_empty() {
        return period;
    }
    let items: Vec<RenewItem> = locks
        .iter()
        .map(|lock| (lock.key.clone(), lock.owner.clone()))
        .collect();
    let sent = Instant::now();
    let outcomes = client.backend.renew(&items, client.lease).await;
    client.stats.renewal_rounds.fetch_add(1, Ordering::Relaxed);
    let mut failed = false;
    for (lock, outcome) in locks.iter().zip(outcomes) {
        match outcome {
            Renewal::Renewed => lock.renewed(sent, client.lease),
            // A lock released while this round was in flight is gone
            // because of its release, not lost: only tracked locks count.
            Renewal::Gone => {
                if client.watchdog_forget(lock) {
                    lock.mark_lost("the lock was deleted, expired or taken over");
                }
            }
            Renewal::Failed(err) => {
                failed = true;
                tracing::warn!(key = %lock.key.name, error = %err, "lock renewal failed; retrying");
                if Instant::now() >= lock.valid_until() && client.watchdog_forget(lock) {
                    lock.mark_lost("the lease could not be renewed before it ran out");
                }
            }
        }
    }
    if failed {
        // Retry soon: the lease deadline, not the period, is what counts now.
        (period / 4).max(Duration::from_millis(20))
    } else {
        period
    }
}
