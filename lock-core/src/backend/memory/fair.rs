//! The fair lock: its holder and the waiters queued for it in arrival order,
//! with the lock handed directly to the head of the queue when it is
//! released (`FAIR_ACQUIRE`, `FAIR_RELEASE`).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::{after, next_token, until, Entry, MemoryStore, State};
use crate::backend::{Attempt, Busy};
use crate::lease::QUEUE_PRESENCE;
use crate::name::LockKey;

/// A fair lock: its holder and the waiters queued for it, in arrival order.
#[derive(Debug, Default)]
pub(super) struct Fair {
    pub(super) holder: Option<Entry>,
    pub(super) queue: VecDeque<Queued>,
}

/// A waiter queued on a fair lock.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) owner: Box<str>,
    /// Until when it keeps its place without another attempt.
    pub(super) place: Instant,
    /// The lease it gets when the lock is handed to it.
    lease: Duration,
}

impl Fair {
    /// Drops the waiters whose place ran out.
    pub(super) fn purge(&mut self, now: Instant) {
        self.queue.retain(|q| q.place > now);
    }

    /// The holder, while its lease runs.
    pub(super) fn live_holder(&self, now: Instant) -> Option<&Entry> {
        self.holder.as_ref().filter(|h| h.live(now))
    }

    /// Nobody holds it and nobody waits for it: the state can go.
    pub(super) fn idle(&self, now: Instant) -> bool {
        self.live_holder(now).is_none() && self.queue.iter().all(|q| q.place <= now)
    }

    /// `owner` leaves the queue (if it was in it).
    fn leave(&mut self, owner: &str) {
        self.queue.retain(|q| *q.owner != *owner);
    }

    /// Queues `owner` at the tail, or keeps its place, and refreshes its
    /// place's deadline and its lease.
    fn wait(&mut self, owner: &str, lease: Duration, now: Instant) {
        let place = after(now, QUEUE_PRESENCE);
        match self.queue.iter_mut().find(|q| *q.owner == *owner) {
            Some(queued) => {
                queued.place = place;
                queued.lease = lease;
            }
            None => self.queue.push_back(Queued {
                owner: owner.into(),
                place,
                lease,
            }),
        }
    }

    /// `FAIR_ACQUIRE` (after `FAIR_PURGE`).
    fn acquire(
        &mut self,
        owner: &str,
        lease: Duration,
        queue: bool,
        now: Instant,
        fence: &mut u64,
    ) -> Attempt {
        let ttl = match self.holder.as_mut().filter(|h| h.live(now)) {
            Some(holder) if *holder.owner == *owner => {
                holder.expires_at = after(now, lease);
                let token = holder.token;
                self.leave(owner);
                return Attempt::Acquired { token };
            }
            Some(holder) => holder.expires_at.saturating_duration_since(now),
            None => match self.queue.front() {
                Some(head) if *head.owner != *owner => until(head.place, now),
                _ => {
                    let token = next_token(fence);
                    self.holder = Some(Entry {
                        owner: owner.into(),
                        token,
                        expires_at: after(now, lease),
                    });
                    self.leave(owner);
                    return Attempt::Acquired { token };
                }
            },
        };
        if queue {
            self.wait(owner, lease, now);
        }
        // The counter now: a grant at or below it was made before this
        // attempt (see `Attempt::Busy`).
        Attempt::Busy(Busy {
            ttl: Some(ttl),
            fence: Some(*fence),
        })
    }

    /// Hands the (free) lock to the head of the queue: it becomes the holder
    /// with its own lease and a new token. Returns whom, with which token.
    fn hand_off(&mut self, now: Instant, fence: &mut u64) -> Option<(Box<str>, u64)> {
        // Purged: every waiter left has a live place.
        let head = self.queue.pop_front()?;
        let token = next_token(fence);
        self.holder = Some(Entry {
            owner: head.owner.clone(),
            token,
            // The hand-over lease (`FAIR_RELEASE`): the head's own, at most
            // a queue place's lifetime and at most what is left of the head's
            // place, so a head that died while queued holds it no longer than
            // its place would have lasted; a live one extends it at once.
            expires_at: after(now, head.lease.min(crate::lease::QUEUE_PRESENCE)).min(head.place),
        });
        Some((head.owner, token))
    }
}

impl MemoryStore {
    pub(super) fn fair_acquire(&self, key: &LockKey, owner: &str, lease: Duration) -> Attempt {
        let now = Instant::now();
        let mut guard = self.inner.state.lock();
        if !guard.fair.contains_key(&*key.lock) {
            guard.sweep(now);
        }
        let State { fair, fence, .. } = &mut *guard;
        let lock = fair.entry(key.lock.clone()).or_default();
        lock.purge(now);
        let attempt = lock.acquire(owner, lease, key.queue, now, fence);
        if lock.idle(now) {
            fair.remove(&*key.lock);
        }
        attempt
    }

    /// `FAIR_RELEASE`: deletes `owner`'s hold (`None`: whoever's; `rollback`:
    /// `owner` also leaves the queue), then, unless another owner still
    /// holds the lock, hands it to the head of the queue and tells only it.
    pub(super) fn fair_release(&self, key: &LockKey, owner: Option<&str>, rollback: bool) -> bool {
        let now = Instant::now();
        let mut guard = self.inner.state.lock();
        let State { fair, fence, .. } = &mut *guard;
        let Some(lock) = fair.get_mut(&*key.lock) else {
            return false;
        };
        lock.purge(now);
        let held = lock.live_holder(now).is_some();
        let deleted = lock
            .live_holder(now)
            .is_some_and(|h| owner.is_none_or(|o| *h.owner == *o));
        if deleted {
            lock.holder = None;
        }
        if rollback {
            if let Some(owner) = owner {
                lock.leave(owner);
            }
        }
        // Held by another owner: nothing to hand off.
        let handed = if held && !deleted {
            None
        } else {
            lock.hand_off(now, fence)
        };
        if lock.idle(now) {
            fair.remove(&*key.lock);
        }
        drop(guard);
        if let Some((head, token)) = handed {
            let grant = format!("{}{head} {token}", crate::wire::GRANT_PREFIX);
            self.inner.waiters.message(&key.channel, grant.as_bytes());
        }
        deleted
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::tests::{busy, granted, try_key, wait_key, woken, LEASE, MS};
    use super::*;
    use crate::name::Kind;

    #[tokio::test(start_paused = true)]
    async fn a_fair_lock_is_handed_to_the_head_of_its_queue_in_arrival_order() {
        let store = MemoryStore::new();
        let key = wait_key(Kind::Fair);
        let (b, c): (Arc<str>, Arc<str>) = ("b:1".into(), "c:1".into());
        let mut handle = store.inner.waiters.register(&key.channel);
        let slot_b = handle.expect_grant(&b);
        let slot_c = handle.expect_grant(&c);

        let a = granted(store.acquire_now(&key, "a:1", LEASE));
        assert_eq!(busy(store.acquire_now(&key, &b, LEASE)), Some(LEASE));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            busy(store.acquire_now(&key, &c, LEASE)),
            Some(LEASE - 1000 * MS)
        );
        // b's next attempt keeps its place ahead of c.
        busy(store.acquire_now(&key, &b, LEASE));
        // An attempt that does not wait takes no place.
        busy(store.acquire_now(&try_key(Kind::Fair), "d:1", LEASE));

        assert!(store.release_now(&key, "a:1", false));
        let tb = slot_b.take().expect("the head was handed the lock");
        assert!(tb > a, "{tb} > {a}");
        assert_eq!(slot_c.take(), None, "only the head is told");
        assert!(!woken(&mut handle).await, "a hand-off wakes nobody else");
        assert_eq!(store.held(), 1, "b holds it before its next attempt");
        busy(store.acquire_now(&try_key(Kind::Fair), "d:1", LEASE));
        busy(store.acquire_now(&key, &c, LEASE));
        assert_eq!(granted(store.acquire_now(&key, &b, LEASE)), tb);

        assert!(!store.release_now(&key, "a:1", false), "a holds it no more");
        assert_eq!(slot_c.take(), None, "a's late release handed nothing off");
        assert!(store.release_now(&key, &b, false));
        let tc = slot_c.take().expect("the next in line was handed the lock");
        assert!(tc > tb);
        assert_eq!(slot_b.take(), None);
        assert_eq!(granted(store.acquire_now(&key, &c, LEASE)), tc);

        // Nobody waits any more: free for anyone.
        assert!(store.release_now(&key, &c, false));
        assert_eq!(store.entries(), 0, "an empty fair lock is dropped");
        assert!(granted(store.acquire_now(&try_key(Kind::Fair), "d:1", LEASE)) > tc);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fair_lock_whose_holder_expired_waits_for_the_head_of_its_queue() {
        let store = MemoryStore::new();
        let key = wait_key(Kind::Fair);
        let (b, c): (Arc<str>, Arc<str>) = ("b:1".into(), "c:1".into());
        let handle = store.inner.waiters.register(&key.channel);
        let slot_b = handle.expect_grant(&b);

        granted(store.acquire_now(&key, "a:1", Duration::from_secs(1)));
        busy(store.acquire_now(&key, &b, LEASE));
        busy(store.acquire_now(&key, &c, LEASE));
        tokio::time::advance(Duration::from_secs(1)).await; // a crashed
                                                            // Free, but b is ahead: c waits at most until b's place runs out.
        assert_eq!(
            busy(store.acquire_now(&key, &c, LEASE)),
            Some(QUEUE_PRESENCE - Duration::from_secs(1))
        );
        busy(store.acquire_now(&try_key(Kind::Fair), "d:1", LEASE));
        // A release of the lapsed hold deletes nothing but hands it to b.
        assert!(!store.release_now(&key, "a:1", false));
        let tb = slot_b.take().expect("handed to the head");
        assert_eq!(granted(store.acquire_now(&key, &b, LEASE)), tb);

        // The head may also just take the free lock on its next attempt.
        assert!(store.force_now(&key), "force deletes b's hold...");
        assert!(granted(store.acquire_now(&key, &c, LEASE)) > tb, "...for c");
        assert!(store.force_now(&key));
        assert_eq!(store.entries(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_waiter_that_stops_attempting_loses_its_place() {
        let store = MemoryStore::new();
        let key = wait_key(Kind::Fair);
        let (b, c): (Arc<str>, Arc<str>) = ("b:1".into(), "c:1".into());
        let handle = store.inner.waiters.register(&key.channel);
        let slot_b = handle.expect_grant(&b);
        let slot_c = handle.expect_grant(&c);

        granted(store.acquire_now(&key, "a:1", Duration::from_secs(60)));
        busy(store.acquire_now(&key, &b, LEASE)); // b's process then hangs
        for _ in 0..3 {
            busy(store.acquire_now(&key, &c, LEASE)); // c keeps attempting
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        // b's place ran out at 5 s; c's lasts until 9 s.
        assert!(store.release_now(&key, "a:1", false));
        assert_eq!(slot_b.take(), None, "the stale waiter was skipped");
        let tc = slot_c.take().expect("handed to the live waiter");
        assert_eq!(granted(store.acquire_now(&key, &c, LEASE)), tc);
        // b comes back: at the tail, behind nobody but the holder.
        assert_eq!(busy(store.acquire_now(&key, &b, LEASE)), Some(LEASE));

        // A waiter that gives up (rollback) leaves the queue at once.
        busy(store.acquire_now(&key, "d:1", LEASE));
        assert!(!store.release_now(&key, &b, true), "b held nothing");
        assert!(store.release_now(&key, &c, false));
        assert_eq!(slot_b.take(), None, "b left the queue");
        assert!(slot_c.take().is_none());
        assert_eq!(store.held(), 1, "d was handed the lock");
        // Rolling a hand-off back passes the lock on.
        busy(store.acquire_now(&key, &b, LEASE));
        assert!(store.release_now(&key, "d:1", true));
        assert!(slot_b.take().is_some(), "the rollback handed it on to b");
    }
}
