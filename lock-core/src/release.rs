//! Release: the last hold of a lock gives it back in the backend (waking
//! the next waiter, in one round trip when it is a waiter of this client),
//! and a release that could not finish (a dropped guard, a dropped release
//! future, a backend error) is finished in the background. A lock that the
//! client's shutdown took from its holder is given back by the shutdown.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::backend::Released;
use crate::client_core::ClientCore;
use crate::held::HeldLock;
use crate::hot::{GiveUp, Outcome, KEEP_SUFFIX};
use crate::name::Kind;
use crate::{BackendError, LockError};

/// Releases `lock` in the backend after its last hold was dropped.
/// `resent`: an earlier release of it may have gone through already, so
/// finding it gone is expected, not worth a warning.
pub(crate) async fn release_last(
    core: &ClientCore,
    lock: &HeldLock,
    resent: bool,
) -> Result<(), LockError> {
    // A lease that ran out on the local clock unnoticed (a fixed lease
    // nobody watched with `lost()`) is a loss, not a release.
    lock.check_deadline();
    let lost = lock.lost_error();
    let result = give_back(core, lock).await;
    lock.mark_released();
    match result {
        Ok(true) => {
            tracing::debug!(key = %lock.key.name, token = lock.token, "lock released");
            lost.map_or(Ok(()), Err)
        }
        Ok(false) if resent => {
            tracing::debug!(key = %lock.key.name, token = lock.token, "lock already released");
            lost.map_or(Ok(()), Err)
        }
        Ok(false) => {
            tracing::warn!(key = %lock.key.name, token = lock.token, "lock was not held at release");
            Err(lost.unwrap_or_else(|| LockError::NotHeld {
                key: lock.key.name.to_string(),
            }))
        }
        // The release was sent twice and the second send found it gone: a
        // loss known before the release is the answer; in the background
        // (`resent`: an earlier release may have gone through) it is done.
        Err(LockError::Backend {
            source: BackendError::Unconfirmed,
            ..
        }) if lost.is_some() || resent => {
            tracing::debug!(key = %lock.key.name, token = lock.token, "release resent; lock already gone");
            lost.map_or(Ok(()), Err)
        }
        Err(err) => Err(err),
    }
}

/// Gives `lock` back in the backend: stops renewing it, forgets it as a
/// holder, and deletes it when its owner still holds it (waking the next
/// waiter). Returns whether it deleted it.
pub(crate) async fn give_back(core: &ClientCore, lock: &HeldLock) -> Result<bool, LockError> {
    let asked = match keep(core, lock) {
        Outcome::Kept => return Ok(true),
        Outcome::Asked => true,
        Outcome::No => false,
    };
    // Counted from before the holder is forgotten until the answer (or
    // until this future is dropped): a shutdown waits for it.
    let _releasing = core.releasing();
    core.watchdog.forget(lock);
    if let Some(left) = lock.hold_left() {
        return keep_until_at_least(core, lock, left).await;
    }
    // (The lock family's waiters ask the server on every release message.)
    let exclusive = lock.key.kind == Kind::Exclusive;
    // Waiters of this client wait for this release's wake-up instead of
    // racing to the server when the holder is forgotten.
    if exclusive {
        core.wakeups.expect_wake(&lock.key, true);
    }
    core.holder_remove(lock);
    let mut release = std::pin::pin!(core.backend.release(&lock.key, &lock.owner));
    let mut first_poll = true;
    let result = std::future::poll_fn(|cx| {
        let poll = release.as_mut().poll(cx);
        if std::mem::take(&mut first_poll) && poll.is_pending() && exclusive {
            // The release is queued on the multiplexed connection: a waiter
            // of this client woken now queues its attempt behind it, so the
            // lock changes hands in one round trip instead of release,
            // message, attempt. (Should the attempt overtake the release
            // after all, it is only a failed attempt.)
            if asked {
                core.wakeups.yield_local(&lock.key);
            } else {
                core.wakeups.wake_local(&lock.key, &lock.owner);
            }
        }
        poll
    })
    .await;
    if let Ok(Released {
        listeners: Some(count),
        ..
    }) = result
    {
        core.wakeups.listeners(&lock.key, count);
    }
    let deleted = result.map(|released| released.deleted);
    if exclusive && !matches!(deleted, Ok(true)) {
        core.wakeups.expect_wake(&lock.key, false);
    }
    deleted
}

/// Keeps the hot lock `lock` taken (see `hot/`) instead of releasing it,
/// unless another client asked for it, it was lost or the client shuts
/// down: the idle lock that succeeds it is renewed from now on, and one
/// waiter of this client is woken to take it.
fn keep(core: &ClientCore, lock: &HeldLock) -> Outcome {
    let Some(keeper) = &core.keeper else {
        return Outcome::No;
    };
    if !lock.owner.ends_with(KEEP_SUFFIX) {
        return Outcome::No;
    }
    if core.is_closing() {
        keeper.forget(lock);
        return Outcome::No;
    }
    // The same hold in the store, idle: the keeper renews it (with a short
    // lease, see `hot/`), not the watchdog.
    let kept = keeper.keep(lock, || Arc::new(lock.next_use()));
    if kept != Outcome::Kept {
        return kept;
    }
    core.watchdog.forget(lock);
    core.holder_remove(lock);
    core.wakeups.wake_kept(&lock.key);
    tracing::debug!(key = %lock.key.name, token = lock.token, "lock kept");
    kept
}

/// The release of a lock held at least until a moment still `left` away
/// (ShedLock's `lockAtLeastFor`): instead of deleting it, its lease is cut
/// to `left` (only while its owner holds it) and it expires then. The cut
/// wakes a waiter, as a release does: a waiter that saw the longer lease
/// asks again and sleeps until the new end instead of the old one (which
/// left the lock free while wanted for up to a lease). Returns whether it
/// was ours.
async fn keep_until_at_least(
    core: &ClientCore,
    lock: &HeldLock,
    left: Duration,
) -> Result<bool, LockError> {
    core.holder_remove(lock);
    let cut = core.backend.cut(&lock.key, &lock.owner, left).await?;
    if cut {
        tracing::debug!(key = %lock.key.name, left = ?left, "lock kept until its at-least hold ends");
    }
    Ok(cut)
}

/// Finishes the release of `lock` in the background (a janitor job),
/// retrying transient errors until the lease would have run out anyway.
/// Nothing to do for a lock the client's shutdown took over.
pub(crate) fn release_in_background(core: &Arc<ClientCore>, lock: Arc<HeldLock>, resent: bool) {
    if lock.is_surrendered() {
        return;
    }
    retry_in_background(core, lock, resent);
}

/// Releases `lock` in the background, retrying transient errors until the
/// lease would have run out anyway.
pub(crate) fn retry_in_background(core: &Arc<ClientCore>, lock: Arc<HeldLock>, resent: bool) {
    let job_core = core.clone();
    core.janitor.spawn(Box::new(move || {
        let (core, lock) = (job_core.clone(), lock.clone());
        async move { retry_release(&core, &lock, resent).await }.boxed()
    }));
}

async fn retry_release(core: &ClientCore, lock: &HeldLock, mut resent: bool) {
    let mut delay = Duration::from_millis(50);
    loop {
        match release_last(core, lock, resent).await {
            Err(err @ LockError::Backend { .. }) => {
                let next = Instant::now().checked_add(delay);
                if next.is_none_or(|next| next >= lock.valid_until()) {
                    tracing::warn!(key = %lock.key.name, error = %err, "giving up releasing lock; its lease will expire");
                    return;
                }
                tracing::debug!(key = %lock.key.name, error = %err, "release failed; retrying");
                tokio::time::sleep(delay).await;
                delay = delay.saturating_mul(2).min(Duration::from_secs(1));
                // The failed request may have been executed without an answer.
                resent = true;
            }
            _ => return,
        }
    }
}

/// How `core`'s hot-lock keeper gives locks up (see `hot/`): as background
/// releases of the client, while the client lives.
pub(crate) fn give_up_kept(core: Weak<ClientCore>) -> GiveUp {
    Arc::new(move |locks: Vec<Arc<HeldLock>>| {
        let Some(core) = core.upgrade() else {
            return false;
        };
        for lock in locks {
            release_in_background(&core, lock, false);
        }
        true
    })
}
