//! The semaphore: `total` permits shared by holders that each take some and
//! expire one by one, so a crashed holder's permits come back after its lease
//! (`PERMITS_ACQUIRE`, `PERMITS_RELEASE`).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::{after, next_token, until, MemoryStore, State};
use crate::backend::Attempt;
use crate::name::LockKey;

/// A semaphore's holders: owner -> the permits it took, until when.
#[derive(Debug, Default)]
pub(super) struct Permits {
    pub(super) holders: HashMap<Box<str>, Permit>,
}

#[derive(Debug)]
pub(super) struct Permit {
    pub(super) permits: u32,
    pub(super) expires_at: Instant,
}

impl Permits {
    /// Drops the holders whose lease ran out: their permits come back.
    pub(super) fn purge(&mut self, now: Instant) {
        self.holders.retain(|_, p| p.expires_at > now);
    }

    /// `PERMITS_ACQUIRE`: `take` of `total` permits.
    fn acquire(
        &mut self,
        owner: &str,
        lease: Duration,
        take: u32,
        total: u32,
        now: Instant,
        fence: &mut u64,
    ) -> Attempt {
        self.purge(now);
        let expires_at = after(now, lease);
        if let Some(held) = self.holders.get_mut(owner) {
            held.expires_at = expires_at; // keeps the permits it took
        } else {
            let used: u64 = self.holders.values().map(|p| u64::from(p.permits)).sum();
            if used.saturating_add(u64::from(take)) > u64::from(total) {
                let first = self.holders.values().map(|p| p.expires_at).min();
                return Attempt::busy(first.map(|first| until(first, now)));
            }
            self.holders.insert(
                owner.into(),
                Permit {
                    permits: take,
                    expires_at,
                },
            );
        }
        Attempt::Acquired {
            token: next_token(fence),
        }
    }
}

impl MemoryStore {
    pub(super) fn permits_acquire(
        &self,
        key: &LockKey,
        owner: &str,
        lease: Duration,
        take: u32,
        total: u32,
    ) -> Attempt {
        let now = Instant::now();
        let mut guard = self.inner.state.lock();
        if !guard.permits.contains_key(&*key.lock) {
            guard.sweep(now);
        }
        let State { permits, fence, .. } = &mut *guard;
        let semaphore = permits.entry(key.lock.clone()).or_default();
        let attempt = semaphore.acquire(owner, lease, take, total, now, fence);
        if semaphore.holders.is_empty() {
            permits.remove(&*key.lock);
        }
        attempt
    }

    /// `PERMITS_RELEASE` of `owner`'s permits, or (`None`) `FAMILY_FORCE`
    /// of every holder's. Wakes the waiters when permits came back.
    pub(super) fn permits_release(&self, key: &LockKey, owner: Option<&str>) -> bool {
        let now = Instant::now();
        let mut state = self.inner.state.lock();
        let Some(semaphore) = state.permits.get_mut(&*key.lock) else {
            return false;
        };
        semaphore.purge(now);
        let removed = match owner {
            Some(owner) => semaphore.holders.remove(owner).is_some(),
            None => {
                let any = !semaphore.holders.is_empty();
                semaphore.holders.clear();
                any
            }
        };
        if semaphore.holders.is_empty() {
            state.permits.remove(&*key.lock);
        }
        drop(state);
        if removed {
            self.inner.waiters.wake_one(&key.channel);
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{busy, granted, try_key, woken, LEASE};
    use super::*;
    use crate::name::Kind;

    /// The permits held (unexpired) of the semaphore `x`.
    fn permits_in_use(store: &MemoryStore, key: &LockKey) -> u32 {
        let now = Instant::now();
        let state = store.inner.state.lock();
        state.permits.get(&*key.lock).map_or(0, |s| {
            s.holders
                .values()
                .filter(|h| h.expires_at > now)
                .map(|h| h.permits)
                .sum()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn permits_never_exceed_the_total() {
        let store = MemoryStore::new();
        let (two, one) = (
            try_key(Kind::Permits { take: 2, total: 3 }),
            try_key(Kind::Permits { take: 1, total: 3 }),
        );
        let mut handle = store.inner.waiters.register(&two.channel);
        let a = granted(store.acquire_now(&two, "a:1", LEASE));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            busy(store.acquire_now(&two, "b:1", LEASE)),
            Some(LEASE - Duration::from_secs(1))
        );
        granted(store.acquire_now(&one, "c:1", LEASE));
        busy(store.acquire_now(&one, "d:1", LEASE));
        // A holder's next attempt renews its permits, taking no more.
        assert!(granted(store.acquire_now(&two, "a:1", LEASE)) > a);
        assert_eq!(permits_in_use(&store, &two), 3);
        assert!(store.release_now(&two, "a:1", false));
        assert!(woken(&mut handle).await);
        assert!(!store.release_now(&two, "a:1", true));
        granted(store.acquire_now(&two, "b:1", LEASE));
        busy(store.acquire_now(&one, "d:1", LEASE));
        assert!(store.force_now(&one));
        assert_eq!(store.entries(), 0);
        // More than the total is never granted (and has no holder to wait for).
        let too_many = try_key(Kind::Permits { take: 4, total: 3 });
        assert_eq!(busy(store.acquire_now(&too_many, "e:1", LEASE)), None);
        assert_eq!(store.entries(), 0);

        // Any mix of takes, leases and releases stays within the total.
        for i in 0u32..2_000 {
            let owner = format!("o{}:1", i % 7);
            let take = i * 7 % 3 + 1;
            let key = try_key(Kind::Permits { take, total: 4 });
            if i % 5 == 0 {
                store.release_now(&key, &owner, false);
            } else {
                let lease = Duration::from_millis(u64::from(i * 13 % 2_000 + 100));
                store.acquire_now(&key, &owner, lease);
            }
            assert!(permits_in_use(&store, &key) <= 4, "step {i}");
            tokio::time::advance(Duration::from_millis(u64::from(i % 300))).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_crashed_holders_permits_come_back_after_its_lease() {
        let store = MemoryStore::new();
        let all = try_key(Kind::Permits { take: 3, total: 3 });
        let one = try_key(Kind::Permits { take: 1, total: 3 });
        granted(store.acquire_now(&all, "a:1", Duration::from_secs(1)));
        assert_eq!(
            busy(store.acquire_now(&one, "b:1", LEASE)),
            Some(Duration::from_secs(1))
        );
        tokio::time::advance(Duration::from_secs(1)).await; // a crashed
        granted(store.acquire_now(&one, "b:1", LEASE));
        assert!(!store.release_now(&all, "a:1", false), "a's lease ran out");
        assert_eq!(store.held(), 1);
    }
}
