//! What the store shows of its locks without changing them: the holds
//! counted, one lock's holder (`inspect`), one primitive's live entries in
//! their order (`inspect_family`), the plain locks held (`list`), and every
//! lock of every kind in use (`list_all`).

use std::collections::HashMap;

use tokio::time::Instant;

use super::read_write::rw_stem;
use super::{Entry, MemoryStore, State};
use crate::backend::listed_key;
use crate::info::{FamilyState, Found};
use crate::name::{self, Kind, LockKey};
use crate::{LockHolder, LockInfo, PermitHolder, QueuedWaiter};

impl MemoryStore {
    /// The number of holds currently live (unexpired): each plain or fair
    /// lock held, each writer, each reader and each semaphore holder counts
    /// one.
    pub fn held(&self) -> usize {
        let now = Instant::now();
        let state = self.inner.state.lock();
        let locks = state.locks.values().filter(|e| e.live(now)).count();
        let fair = state
            .fair
            .values()
            .filter(|f| f.live_holder(now).is_some())
            .count();
        let rw: usize = state
            .rw
            .values()
            .map(|rw| {
                let writer = rw.writer.as_ref().is_some_and(|w| w.live(now));
                let readers = rw.readers.values().filter(|e| **e > now).count();
                usize::from(writer) + readers
            })
            .sum();
        let permits: usize = state
            .permits
            .values()
            .map(|p| p.holders.values().filter(|h| h.expires_at > now).count())
            .sum();
        locks + fair + rw + permits
    }

    /// What the store knows of the lock `key` now (`Backend::inspect`).
    pub(super) fn inspect_now(&self, key: &LockKey) -> LockInfo {
        let now = Instant::now();
        let state = self.inner.state.lock();
        // The holder of a plain or fair lock or of a write hold; reads
        // and permits have many holders, not shown here.
        let entry = match key.kind {
            Kind::Exclusive => state.locks.get(&*key.lock),
            Kind::Fair => state.fair.get(&*key.lock).and_then(|f| f.holder.as_ref()),
            Kind::Write => state
                .rw
                .get(&**rw_stem(key))
                .and_then(|rw| rw.writer.as_ref()),
            Kind::Read | Kind::Permits { .. } => None,
        };
        let entry = entry.filter(|e| e.live(now));
        info(key, entry, state.fence, now)
    }

    /// The plain locks of `prefix` held now whose name starts with
    /// `name_prefix` (`Backend::list`).
    pub(super) fn list_now(&self, prefix: &str, name_prefix: &str) -> Vec<LockInfo> {
        let now = Instant::now();
        let state = self.inner.state.lock();
        state
            .locks
            .iter()
            .filter(|(_, e)| e.expires_at > now)
            .filter_map(|(lock, e)| {
                let name = name::name_of(prefix, lock)?;
                let key = LockKey::new(prefix, &name).ok()?;
                name.starts_with(name_prefix)
                    .then(|| info(&key, Some(e), state.fence, now))
            })
            .collect()
    }

    /// The plain locks of `prefix` held now and the live entries of the
    /// primitives of the lock family the store has, whose name starts with
    /// `name_prefix` (`Backend::list_all`).
    pub(super) fn list_all_now(&self, prefix: &str, name_prefix: &str) -> Vec<Found> {
        let mut found: Vec<Found> = self
            .list_now(prefix, name_prefix)
            .into_iter()
            .map(Found::Plain)
            .collect();
        let now = Instant::now();
        let state = self.inner.state.lock();
        let family = state
            .fair
            .keys()
            .chain(state.rw.keys())
            .chain(state.permits.keys());
        for stored in family {
            let Some((name, kind)) = listed_key(prefix, stored) else {
                continue;
            };
            if kind == Kind::Exclusive || !name.starts_with(name_prefix) {
                continue;
            }
            let Ok(key) = LockKey::of_kind(prefix, &name, kind) else {
                continue;
            };
            let live = state.family(&key, now);
            found.push(Found::Family(key, live));
        }
        found
    }
}

impl State {
    /// What the store records of the primitive of `key` at `now`, live
    /// entries only (as `FAIR_INSPECT`, `RW_INSPECT` and `PERMITS_INSPECT`
    /// read them on Redis, in their order).
    pub(super) fn family(&self, key: &LockKey, now: Instant) -> FamilyState {
        let remaining = |at: Instant| at.saturating_duration_since(now);
        let holder = |entry: &Entry| LockHolder {
            owner: entry.owner.to_string(),
            fencing_token: entry.token,
            ttl: Some(remaining(entry.expires_at)),
            holds: 1,
        };
        let mut state = match key.kind {
            Kind::Exclusive => FamilyState {
                holder: self
                    .locks
                    .get(&*key.lock)
                    .filter(|e| e.live(now))
                    .map(holder),
                ..FamilyState::default()
            },
            Kind::Fair => self
                .fair
                .get(&*key.lock)
                .map(|fair| FamilyState {
                    holder: fair.live_holder(now).map(holder),
                    waiters: fair
                        .queue
                        .iter()
                        .filter(|q| q.place > now)
                        .map(|q| QueuedWaiter {
                            owner: q.owner.to_string(),
                            place_ttl: remaining(q.place),
                        })
                        .collect(),
                    ..FamilyState::default()
                })
                .unwrap_or_default(),
            Kind::Read | Kind::Write => self
                .rw
                .get(&**rw_stem(key))
                .map(|rw| {
                    let live = |map| live_by_deadline(map, now);
                    FamilyState {
                        holder: rw.writer.as_ref().filter(|w| w.live(now)).map(holder),
                        shares: live(&rw.readers)
                            .into_iter()
                            .map(|(at, owner)| PermitHolder {
                                owner: owner.to_owned(),
                                permits: 1,
                                ttl: remaining(at),
                            })
                            .collect(),
                        waiters: live(&rw.intents)
                            .into_iter()
                            .map(|(at, owner)| QueuedWaiter {
                                owner: owner.to_owned(),
                                place_ttl: remaining(at),
                            })
                            .collect(),
                        ..FamilyState::default()
                    }
                })
                .unwrap_or_default(),
            Kind::Permits { .. } => self
                .permits
                .get(&*key.lock)
                .map(|semaphore| {
                    let mut entries: Vec<(Instant, &str, u32)> = semaphore
                        .holders
                        .iter()
                        .filter(|(_, p)| p.expires_at > now)
                        .map(|(owner, p)| (p.expires_at, &**owner, p.permits))
                        .collect();
                    entries.sort_unstable();
                    FamilyState {
                        shares: entries
                            .into_iter()
                            .map(|(at, owner, permits)| PermitHolder {
                                owner: owner.to_owned(),
                                permits,
                                ttl: remaining(at),
                            })
                            .collect(),
                        ..FamilyState::default()
                    }
                })
                .unwrap_or_default(),
        };
        state.last_fencing_token = (self.fence > 0).then_some(self.fence);
        state
    }
}

/// The owners in `map` whose deadline is after `now`, the soonest first,
/// then by owner (as a sorted set orders ties).
fn live_by_deadline(map: &HashMap<Box<str>, Instant>, now: Instant) -> Vec<(Instant, &str)> {
    let mut entries: Vec<(Instant, &str)> = map
        .iter()
        .filter(|(_, at)| **at > now)
        .map(|(owner, at)| (*at, &**owner))
        .collect();
    entries.sort_unstable();
    entries
}

/// What the store knows of the lock `key` (`entry`, when held).
fn info(key: &LockKey, entry: Option<&Entry>, fence: u64, now: Instant) -> LockInfo {
    LockInfo {
        name: key.name.to_string(),
        key: key.lock.to_string(),
        fence_key: key.fence(),
        holder: entry.map(|e| LockHolder {
            owner: e.owner.to_string(),
            fencing_token: e.token,
            ttl: Some(e.expires_at.saturating_duration_since(now)),
            holds: 1,
        }),
        last_fencing_token: (fence > 0).then_some(fence),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{busy, granted, try_key, wait_key, LEASE};
    use super::*;
    use crate::backend::Backend;
    use crate::lease::QUEUE_PRESENCE;

    /// The owners of `entries`, in order.
    fn owners<'a>(entries: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        entries.into_iter().collect()
    }

    #[tokio::test(start_paused = true)]
    async fn family_inspection_shows_live_entries_only_in_their_order() {
        let store = MemoryStore::new();
        let inspect = |kind| {
            store
                .inner
                .state
                .lock()
                .family(&try_key(kind), Instant::now())
        };

        // A fair lock: the holder, then the queue in arrival order.
        let fair = wait_key(Kind::Fair);
        let a = granted(store.acquire_now(&fair, "a:1", LEASE));
        busy(store.acquire_now(&fair, "b:1", LEASE));
        tokio::time::advance(Duration::from_secs(1)).await;
        busy(store.acquire_now(&fair, "c:1", LEASE));
        let state = inspect(Kind::Fair);
        let holder = state.holder.expect("held");
        assert_eq!((holder.owner.as_str(), holder.fencing_token), ("a:1", a));
        assert_eq!(holder.ttl, Some(LEASE - Duration::from_secs(1)));
        let queue = &state.waiters;
        assert_eq!(owners(queue.iter().map(|q| &*q.owner)), ["b:1", "c:1"]);
        assert_eq!(queue[0].place_ttl, QUEUE_PRESENCE - Duration::from_secs(1));
        assert_eq!(queue[1].place_ttl, QUEUE_PRESENCE);
        // b stops attempting: its place runs out and it is not shown,
        // although nothing purged it yet.
        tokio::time::advance(QUEUE_PRESENCE - Duration::from_secs(1)).await;
        let state = inspect(Kind::Fair);
        assert_eq!(owners(state.waiters.iter().map(|q| &*q.owner)), ["c:1"]);
        assert_eq!(
            store
                .inner
                .state
                .lock()
                .fair
                .values()
                .next()
                .map(|f| f.queue.len()),
            Some(2)
        );
        // Nor is an expired holder.
        tokio::time::advance(LEASE).await;
        let state = inspect(Kind::Fair);
        assert!(state.holder.is_none() && state.waiters.is_empty());
        assert_eq!(state.last_fencing_token, Some(a));

        // A read-write lock: readers by expiry, the waiting writers, the writer.
        let (read, write) = (try_key(Kind::Read), wait_key(Kind::Write));
        granted(store.acquire_now(&read, "r2:1", LEASE));
        granted(store.acquire_now(&read, "r1:1", Duration::from_secs(1)));
        busy(store.acquire_now(&write, "w:1", LEASE));
        let state = inspect(Kind::Write);
        assert!(state.holder.is_none());
        let readers = &state.shares;
        assert_eq!(owners(readers.iter().map(|r| &*r.owner)), ["r1:1", "r2:1"]);
        assert_eq!(readers[0].ttl, Duration::from_secs(1));
        assert_eq!(owners(state.waiters.iter().map(|w| &*w.owner)), ["w:1"]);
        assert_eq!(state.waiters[0].place_ttl, QUEUE_PRESENCE);
        tokio::time::advance(Duration::from_secs(1)).await; // r1 expired
        let state = inspect(Kind::Read);
        assert_eq!(owners(state.shares.iter().map(|r| &*r.owner)), ["r2:1"]);
        assert!(store.release_now(&read, "r2:1", false));
        let token = granted(store.acquire_now(&write, "w:1", LEASE));
        let state = inspect(Kind::Read);
        let writer = state.holder.expect("written");
        assert_eq!(
            (writer.owner.as_str(), writer.fencing_token),
            ("w:1", token)
        );
        assert!(state.shares.is_empty() && state.waiters.is_empty());

        // A semaphore: each holder's permits, by expiry; expired ones left out.
        let take = |n| try_key(Kind::Permits { take: n, total: 5 });
        granted(store.acquire_now(&take(2), "p2:1", LEASE));
        granted(store.acquire_now(&take(1), "p1:1", Duration::from_secs(1)));
        granted(store.acquire_now(&take(1), "p0:1", Duration::from_secs(1)));
        let state = inspect(Kind::Permits { take: 1, total: 1 });
        let holders: Vec<(&str, u32)> = state
            .shares
            .iter()
            .map(|p| (&*p.owner, p.permits))
            .collect();
        assert_eq!(holders, [("p0:1", 1), ("p1:1", 1), ("p2:1", 2)]);
        tokio::time::advance(Duration::from_secs(1)).await;
        let state = inspect(Kind::Permits { take: 3, total: 9 });
        assert_eq!(owners(state.shares.iter().map(|p| &*p.owner)), ["p2:1"]);
        assert_eq!(state.shares[0].ttl, LEASE - Duration::from_secs(1));

        // Never used: nothing, and the store's counter.
        let state = store.inner.state.lock().family(
            &LockKey::of_kind("lock:", "y", Kind::Fair).unwrap(),
            Instant::now(),
        );
        assert!(state.holder.is_none() && state.waiters.is_empty() && state.shares.is_empty());
        assert!(state.last_fencing_token.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn inspect_shows_the_holder_of_a_fair_or_write_lock() {
        let store = MemoryStore::new();
        for kind in [Kind::Fair, Kind::Write, Kind::Read] {
            let key = try_key(kind);
            granted(store.acquire_now(&key, "a:1", LEASE));
            let info = store.inspect(&key).await.unwrap();
            let owner = info.holder.map(|h| h.owner);
            let expected = (kind != Kind::Read).then(|| "a:1".to_owned());
            assert_eq!(owner, expected, "{kind:?}");
            store.release_now(&key, "a:1", false);
        }
    }
}
