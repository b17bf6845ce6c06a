//! The keeper's task: renews the kept locks (`renew.rs`), and gives up idle
//! locks at the end of their linger and kept locks other clients ask for,
//! through the give-up callback its owner passes (the client's background
//! release), so that this folder needs nothing of the client above it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::{renew, GiveUp, Inner};

/// Runs until `give_up` says the client is gone (or the task is stopped).
pub(super) async fn run(keeper: Arc<Inner>, give_up: GiveUp) {
    // A task started again on another runtime (the first one's is gone)
    // gets the receiver once the first task was dropped with its runtime.
    let receiver = keeper.asked.clone();
    let mut asked = Some(receiver.lock_owned().await);
    let period = keeper.period();
    // When the next round renews every kept lock (while locks are kept).
    let mut next_round: Option<Instant> = None;
    // The round in flight: one at a time (see `renew.rs`).
    let mut renewing: Option<BoxFuture<'static, bool>> = None;
    loop {
        let tick = keeper.tick.notified();
        let now = Instant::now();
        let (gone, next) = keeper.expired(now);
        if !gone.is_empty() {
            for lock in &gone {
                tracing::debug!(key = %lock.key.name, "kept lock given up after its linger");
            }
            if !give_up(gone) {
                return;
            }
        }
        if renewing.is_none() {
            if keeper.is_keeping() {
                let due = *next_round.get_or_insert_with(|| later(now, period));
                let all = due <= now;
                // A lock just kept: its lease is cut now, not at the next round.
                let shorten = keeper.shorten.swap(false, Ordering::AcqRel);
                if all || shorten {
                    let round = keeper.round(all);
                    if all {
                        next_round = Some(later(now, period));
                    }
                    if !round.is_empty() {
                        renewing = Some(Box::pin(renew::send(keeper.clone(), round)));
                    }
                }
            } else {
                next_round = None;
            }
        }
        let wake = match (next, next_round.filter(|_| renewing.is_none())) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let sleep = async {
            match wake {
                Some(wake) => tokio::time::sleep_until(wake).await,
                None => std::future::pending().await,
            }
        };
        let request = async {
            match asked.as_mut() {
                Some(asked) => asked.recv().await,
                None => std::future::pending().await,
            }
        };
        let renewed = async {
            match renewing.as_mut() {
                Some(round) => round.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tick => {}
            () = sleep => {}
            failed = renewed => {
                renewing = None;
                if failed {
                    // Retry soon: the lease deadline, not the period, counts now.
                    next_round = Some(later(Instant::now(), (period / 4).max(Duration::from_millis(20))));
                }
            }
            ask = request => {
                let Some(ask) = ask else {
                    asked = None; // the client's waiters are gone
                    continue;
                };
                if let Some(lock) = keeper.asked_for(&ask) {
                    tracing::debug!(key = %lock.key.name, "kept lock given up: another client asked for it");
                    if !give_up(vec![lock]) {
                        return;
                    }
                }
            }
        }
        if !give_up(Vec::new()) {
            return;
        }
    }
}

/// `now + delay`, or `now` where the clock cannot count that far.
fn later(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay).unwrap_or(now)
}
