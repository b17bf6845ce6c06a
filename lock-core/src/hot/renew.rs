//! The renewal of kept locks, by the keeper's task: a round every third of
//! the short lease renews every kept lock (idle ones with the short lease,
//! ones in use with the full one), and a lock that goes idle while its lease
//! in the store may be the full one has it cut to the short one at once.
//! One round at a time, so that the store runs a lock's renewals in the
//! order they were decided (see `HeldLock::renewed_for`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Inner;
use crate::backend::{RenewItem, Renewal};
use crate::held::HeldLock;
use crate::metric_points;

/// The locks of one round, by the lease they are renewed with.
pub(super) struct Round {
    sent: Instant,
    /// Idle: renewed with the short lease.
    short: Vec<Arc<HeldLock>>,
    /// In use (or idle, where the short lease is the full one): renewed
    /// with the full lease.
    long: Vec<Arc<HeldLock>>,
}

impl Round {
    pub(super) fn is_empty(&self) -> bool {
        self.short.is_empty() && self.long.is_empty()
    }
}

impl Inner {
    /// How often the kept locks are renewed: a third of the short lease.
    pub(super) fn period(&self) -> Duration {
        self.short / 3
    }

    /// Whether any lock is kept (idle or in use).
    pub(super) fn is_keeping(&self) -> bool {
        !self.table.lock().is_empty()
    }

    /// The round to send now: every kept lock (`all`, the periodic round),
    /// or only the idle ones whose lease in the store may be the full one
    /// (a lock just kept). Each idle lock renewed with the short lease
    /// counts as running out at its short deadline from now on, before the
    /// command can reach the store; a use that takes it meanwhile starts
    /// with that deadline.
    pub(super) fn round(&self, all: bool) -> Round {
        let shortens = self.short < self.lease;
        let sent = Instant::now();
        let mut round = Round {
            sent,
            short: Vec::new(),
            long: Vec::new(),
        };
        let mut table = self.table.lock();
        for kept in table.values_mut() {
            if !kept.lock.is_held() {
                continue; // lost: the next acquisition or the linger forgets it
            }
            if kept.idle_since.is_some() {
                if !shortens {
                    // The short lease is the full one: nothing to cut.
                    kept.long = false;
                    if all {
                        round.long.push(kept.lock.clone());
                    }
                } else if all || kept.long {
                    kept.lock.shorten(self.short, sent);
                    kept.long = false;
                    round.short.push(kept.lock.clone());
                }
            } else if all {
                kept.long = shortens;
                round.long.push(kept.lock.clone());
            }
        }
        round
    }

    /// Whether `lock` is still the hold of a kept lock (not given up or
    /// forgotten since: a renewal that finds such a lock gone found its
    /// release, not a loss).
    fn keeps(&self, lock: &HeldLock) -> bool {
        self.table
            .lock()
            .get(&lock.key.channel)
            .is_some_and(|kept| kept.lock.id == lock.id)
    }
}

/// Sends `round`; returns whether a renewal failed (the next round is then
/// due soon: the lease deadline, not the period, is what counts).
pub(super) async fn send(inner: Arc<Inner>, round: Round) -> bool {
    let Round { sent, short, long } = round;
    let items = |locks: &[Arc<HeldLock>]| -> Vec<RenewItem> {
        locks
            .iter()
            .map(|lock| (lock.key.clone(), lock.owner.clone()))
            .collect()
    };
    let (short_items, long_items) = (items(&short), items(&long));
    // A round dropped unanswered (the task stopped, or its runtime went) may
    // have sent its cuts all the same.
    let mut unanswered = Unanswered(Some(&short));
    let (short_out, long_out) = futures_util::future::join(
        renew(&inner, &short_items, inner.short),
        renew(&inner, &long_items, inner.lease),
    )
    .await;
    unanswered.0 = None;
    metric_points::renewal_round(sent.elapsed());
    let mut failed = false;
    let answers = short
        .iter()
        .zip(short_out)
        .map(|(lock, outcome)| (lock, outcome, inner.short, true))
        .chain(
            long.iter()
                .zip(long_out)
                .map(|(lock, outcome)| (lock, outcome, inner.lease, false)),
        );
    for (lock, outcome, lease, is_short) in answers {
        // (The lease left when this renewal was sent: before `renewed_for`.)
        let metered = |outcome| {
            if let Some(labels) = lock.meter.labels() {
                labels.renewal(outcome, lock.valid_until().saturating_duration_since(sent));
            }
        };
        match outcome {
            Renewal::Renewed => {
                metered("renewed");
                lock.renewed_for(sent, lease);
            }
            Renewal::Gone => {
                if inner.keeps(lock) {
                    metered("lost");
                    lock.mark_lost("the lock was deleted, expired or taken over");
                }
            }
            Renewal::Failed(err) => {
                metered("error");
                failed = true;
                if is_short {
                    lock.short_unsure();
                }
                tracing::warn!(key = %lock.key.name, error = %err, "kept lock renewal failed; retrying");
            }
        }
        lock.check_deadline();
    }
    failed
}

/// Renews `items` with `lease` (nothing to send for none).
async fn renew(inner: &Inner, items: &[RenewItem], lease: Duration) -> Vec<Renewal> {
    if items.is_empty() {
        return Vec::new();
    }
    inner.backend.renew(items, lease).await
}

/// The idle locks of a round whose cuts were sent and not answered yet.
struct Unanswered<'a>(Option<&'a [Arc<HeldLock>]>);

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        for lock in self.0.into_iter().flatten() {
            lock.short_unsure();
        }
    }
}
