//! The keeper's task: gives up idle locks at the end of their linger and
//! kept locks other clients ask for, through the give-up callback its owner
//! passes (the client's background release), so that this folder needs
//! nothing of the client above it.

use std::sync::Arc;

use tokio::time::Instant;

use super::{GiveUp, Inner};

/// Runs until `give_up` says the client is gone (or the task is stopped).
pub(super) async fn run(keeper: Arc<Inner>, give_up: GiveUp) {
    // A task started again on another runtime (the first one's is gone)
    // gets the receiver once the first task was dropped with its runtime.
    let receiver = keeper.asked.clone();
    let mut asked = Some(receiver.lock_owned().await);
    loop {
        let tick = keeper.tick.notified();
        let (gone, next) = keeper.expired(Instant::now());
        if !gone.is_empty() {
            for lock in &gone {
                tracing::debug!(key = %lock.key.name, "kept lock given up after its linger");
            }
            if !give_up(gone) {
                return;
            }
        }
        let sleep = async {
            match next {
                Some(next) => tokio::time::sleep_until(next).await,
                None => std::future::pending().await,
            }
        };
        let request = async {
            match asked.as_mut() {
                Some(asked) => asked.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tick => {}
            () = sleep => {}
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
