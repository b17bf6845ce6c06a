//! The plain lock: one holder at a time, whose own next attempt extends its
//! lease; an attempt on a hot lock asks its keeper to give it up (as
//! `ACQUIRE` does on Redis); a release deletes it for its holder only, a
//! forced release for anyone.

use std::time::Duration;

use tokio::time::Instant;

use super::{Entry, MemoryStore, State};
use crate::backend::Attempt;
use crate::name::LockKey;

impl State {
    /// The entry of `lock` when its lease still runs.
    fn live(&mut self, lock: &str, now: Instant) -> Option<&mut Entry> {
        self.locks.get_mut(lock).filter(|e| e.expires_at > now)
    }
}

impl MemoryStore {
    pub(super) fn exclusive_acquire(&self, key: &LockKey, owner: &str, lease: Duration) -> Attempt {
        let now = Instant::now();
        // The lease was range-checked: this cannot overflow; if it could,
        // the entry would expire at once (the safe side).
        let expires_at = now.checked_add(lease).unwrap_or(now);
        let mut state = self.inner.state.lock();
        if let Some(entry) = state.live(&key.lock, now) {
            if &*entry.owner == owner {
                entry.expires_at = expires_at;
                return Attempt::Acquired { token: entry.token };
            }
            let ttl = entry.expires_at.saturating_duration_since(now);
            if !entry.owner.ends_with(crate::wire::KEEP_SUFFIX) {
                return Attempt::busy(Some(ttl));
            }
            // Held by a hot-lock keeper: ask it to give the lock up (as the
            // acquire script does), and look again soon.
            let ask = format!("{}{}", crate::wire::ASK_PREFIX, entry.owner);
            drop(state);
            self.inner.waiters.message(&key.channel, ask.as_bytes());
            return Attempt::busy(Some(ttl.min(crate::wire::ASK_AGAIN)));
        }
        state.sweep(now);
        let token = super::next_token(&mut state.fence);
        state.locks.insert(
            key.lock.clone(),
            Entry {
                owner: owner.into(),
                token,
                expires_at,
            },
        );
        Attempt::Acquired { token }
    }

    /// Deletes the lock when `owner` holds it (or unconditionally when `owner`
    /// is `None`) and wakes a waiter. Returns whether a lock was deleted.
    pub(super) fn delete(&self, key: &LockKey, owner: Option<&str>) -> bool {
        let now = Instant::now();
        let mut state = self.inner.state.lock();
        let ours = state
            .live(&key.lock, now)
            .is_some_and(|entry| owner.is_none_or(|o| *entry.owner == *o));
        if ours {
            state.locks.remove(&key.lock);
        }
        drop(state);
        if ours {
            self.inner.waiters.wake_one(&key.channel);
        }
        ours
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_swept_and_tokens_keep_growing() {
        let store = MemoryStore::new();
        let mut last = 0;
        for i in 0..10_000 {
            let key = LockKey::new("lock:", &format!("job:{i}")).unwrap();
            match store.acquire_now(&key, "a:1", Duration::from_millis(10)) {
                Attempt::Acquired { token } => {
                    assert!(token > last);
                    last = token;
                }
                other => panic!("{other:?}"),
            }
            tokio::time::advance(Duration::from_millis(20)).await; // expires unreleased
        }
        assert!(store.entries() <= 64, "{} entries kept", store.entries());
        let key = LockKey::new("lock:", "job:0").unwrap();
        assert!(matches!(
            store.acquire_now(&key, "b:1", Duration::from_millis(10)),
            Attempt::Acquired { token } if token > last
        ));
    }
}
