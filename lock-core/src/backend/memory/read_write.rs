//! The write-preferring read-write lock: readers that share it, each
//! expiring on its own, a writer that excludes them, and the waiting writers
//! whose intent keeps new readers out (`READ_ACQUIRE`, `WRITE_ACQUIRE`,
//! `READ_RELEASE`, `WRITE_ROLLBACK`).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::{after, next_token, until, Entry, MemoryStore, State};
use crate::backend::Attempt;
use crate::lease::QUEUE_PRESENCE;
use crate::name::{KeyStr, Kind, LockKey};

/// A read-write lock: its readers (each expiring on its own), its writer,
/// and the writers waiting for it (whose intent keeps new readers out).
#[derive(Debug, Default)]
pub(super) struct ReadWrite {
    pub(super) readers: HashMap<Box<str>, Instant>,
    pub(super) writer: Option<Entry>,
    /// Waiting writers: owner -> until when its intent lasts.
    pub(super) intents: HashMap<Box<str>, Instant>,
}

impl ReadWrite {
    /// Drops the expired readers, writer and intents.
    pub(super) fn purge(&mut self, now: Instant) {
        self.readers.retain(|_, expires_at| *expires_at > now);
        self.intents.retain(|_, deadline| *deadline > now);
        if self.writer.as_ref().is_some_and(|w| !w.live(now)) {
            self.writer = None;
        }
    }

    /// Nothing live is left (after `purge`).
    pub(super) fn idle(&self) -> bool {
        self.readers.is_empty() && self.writer.is_none() && self.intents.is_empty()
    }

    /// `READ_ACQUIRE`.
    fn read(&mut self, owner: &str, lease: Duration, now: Instant, fence: &mut u64) -> Attempt {
        self.purge(now);
        match &self.writer {
            Some(writer) if *writer.owner != *owner => {
                return Attempt::busy(Some(writer.expires_at.saturating_duration_since(now)));
            }
            Some(_) => {} // the writer may read
            None if !self.readers.contains_key(owner) => {
                // A waiting writer keeps new readers out (not those in).
                if let Some(first) = self.intents.values().min() {
                    return Attempt::busy(Some(until(*first, now)));
                }
            }
            None => {}
        }
        self.readers.insert(owner.into(), after(now, lease));
        Attempt::Acquired {
            token: next_token(fence),
        }
    }

    /// `WRITE_ACQUIRE`.
    fn write(
        &mut self,
        owner: &str,
        lease: Duration,
        queue: bool,
        now: Instant,
        fence: &mut u64,
    ) -> Attempt {
        self.purge(now);
        let ttl = match &mut self.writer {
            Some(writer) if *writer.owner == *owner => {
                writer.expires_at = after(now, lease);
                return Attempt::Acquired {
                    token: writer.token,
                };
            }
            Some(writer) => writer.expires_at.saturating_duration_since(now),
            None => match self.readers.values().min() {
                Some(first) => until(*first, now),
                None => {
                    self.intents.remove(owner);
                    let token = next_token(fence);
                    self.writer = Some(Entry {
                        owner: owner.into(),
                        token,
                        expires_at: after(now, lease),
                    });
                    return Attempt::Acquired { token };
                }
            },
        };
        if queue {
            self.intents
                .insert(owner.into(), after(now, QUEUE_PRESENCE));
        }
        Attempt::busy(Some(ttl))
    }
}

/// The map key of a read-write lock's state: the stem shared by its read and
/// write keys.
pub(super) fn rw_stem(key: &LockKey) -> &KeyStr {
    key.stem()
}

impl MemoryStore {
    pub(super) fn rw_acquire(&self, key: &LockKey, owner: &str, lease: Duration) -> Attempt {
        let now = Instant::now();
        let stem = rw_stem(key).clone();
        let mut guard = self.inner.state.lock();
        if !guard.rw.contains_key(&stem) {
            guard.sweep(now);
        }
        let State { rw, fence, .. } = &mut *guard;
        let lock = rw.entry(stem.clone()).or_default();
        let attempt = if key.kind == Kind::Read {
            lock.read(owner, lease, now, fence)
        } else {
            lock.write(owner, lease, key.queue, now, fence)
        };
        if lock.idle() {
            rw.remove(&stem);
        }
        attempt
    }

    /// `READ_RELEASE`: deletes `owner`'s read hold; wakes the waiters when
    /// the last reader left.
    pub(super) fn read_release(&self, key: &LockKey, owner: &str) -> bool {
        let now = Instant::now();
        let stem = rw_stem(key).clone();
        let mut state = self.inner.state.lock();
        let Some(lock) = state.rw.get_mut(&stem) else {
            return false;
        };
        lock.purge(now);
        let removed = lock.readers.remove(owner).is_some();
        let last = removed && lock.readers.is_empty();
        if lock.idle() {
            state.rw.remove(&stem);
        }
        drop(state);
        if last {
            self.inner.waiters.wake_one(&key.channel);
        }
        removed
    }

    /// The write hold's release (deletes it when `owner` holds it) or
    /// `WRITE_ROLLBACK` (also withdraws `owner`'s intent). Wakes the waiters
    /// when that freed the lock or let readers in.
    pub(super) fn write_release(&self, key: &LockKey, owner: &str, rollback: bool) -> bool {
        let now = Instant::now();
        let stem = rw_stem(key).clone();
        let mut state = self.inner.state.lock();
        let Some(lock) = state.rw.get_mut(&stem) else {
            return false;
        };
        lock.purge(now);
        let deleted = lock.writer.as_ref().is_some_and(|w| *w.owner == *owner);
        if deleted {
            lock.writer = None;
        }
        let left = rollback && lock.intents.remove(owner).is_some();
        if lock.idle() {
            state.rw.remove(&stem);
        }
        drop(state);
        if deleted || left {
            self.inner.waiters.wake_one(&key.channel);
        }
        deleted
    }

    /// `FAMILY_FORCE` of a read-write lock: drops its whole state (the
    /// waiting writers' intents too), and answers whether it was held.
    pub(super) fn rw_force(&self, key: &LockKey) -> bool {
        let now = Instant::now();
        let mut state = self.inner.state.lock();
        let (held, existed) = match state.rw.remove(&**rw_stem(key)) {
            Some(mut lock) => {
                lock.purge(now);
                (
                    lock.writer.is_some() || !lock.readers.is_empty(),
                    !lock.idle(),
                )
            }
            None => (false, false),
        };
        drop(state);
        if existed {
            self.inner.waiters.wake_one(&key.channel);
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{busy, granted, try_key, wait_key, woken, LEASE, MS};
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn readers_share_and_a_writer_excludes_readers_and_writers() {
        let store = MemoryStore::new();
        let (read, write) = (try_key(Kind::Read), try_key(Kind::Write));
        let mut handle = store.inner.waiters.register(&read.channel);

        let r1 = granted(store.acquire_now(&read, "r1:1", LEASE));
        tokio::time::advance(Duration::from_secs(1)).await;
        let r2 = granted(store.acquire_now(&read, "r2:1", LEASE));
        assert!(r2 > r1);
        assert_eq!(store.held(), 2);
        // A writer waits for the reader that expires first.
        assert_eq!(
            busy(store.acquire_now(&write, "w1:1", LEASE)),
            Some(LEASE - Duration::from_secs(1))
        );
        assert!(store.release_now(&read, "r1:1", false));
        assert!(!woken(&mut handle).await, "a reader is left");
        assert!(!store.release_now(&read, "r1:1", false), "released once");
        busy(store.acquire_now(&write, "w1:1", LEASE));
        assert!(store.release_now(&read, "r2:1", true));
        assert!(woken(&mut handle).await, "the last reader left");

        let w = granted(store.acquire_now(&write, "w1:1", LEASE));
        assert!(w > r2);
        assert_eq!(granted(store.acquire_now(&write, "w1:1", LEASE)), w);
        assert_eq!(busy(store.acquire_now(&read, "r3:1", LEASE)), Some(LEASE));
        assert_eq!(busy(store.acquire_now(&write, "w2:1", LEASE)), Some(LEASE));
        // Another kind of the same name is another lock.
        granted(store.acquire_now(&try_key(Kind::Exclusive), "r3:1", LEASE));
        granted(store.acquire_now(&try_key(Kind::Fair), "r3:1", LEASE));

        assert!(!store.release_now(&write, "w2:1", false), "not w2's");
        assert!(!woken(&mut handle).await);
        assert!(store.release_now(&write, "w1:1", false));
        assert!(woken(&mut handle).await, "the writer left");
        assert!(granted(store.acquire_now(&read, "r3:1", LEASE)) > w);

        // Force drops every reader (and writer).
        granted(store.acquire_now(&read, "r4:1", LEASE));
        assert!(store.force_now(&write));
        assert!(woken(&mut handle).await);
        assert!(!store.force_now(&read), "nothing left");
        granted(store.acquire_now(&write, "w2:1", LEASE));
        assert!(store.force_now(&read));
    }

    #[tokio::test(start_paused = true)]
    async fn force_answers_whether_it_was_held_not_whether_a_writer_waited() {
        let store = MemoryStore::new();
        let read = try_key(Kind::Read);
        let mut handle = store.inner.waiters.register(&read.channel);

        // The holder's lease ran out while a writer waited: only the
        // waiting writer's intent is left, and an intent is not a hold.
        let short = Duration::from_secs(1); // shorter than the intent lasts
        granted(store.acquire_now(&read, "r1:1", short));
        busy(store.acquire_now(&wait_key(Kind::Write), "w:1", LEASE));
        tokio::time::advance(short).await;
        busy(store.acquire_now(&read, "r2:1", LEASE)); // the intent keeps r2 out
        assert!(!store.force_now(&read), "nothing was held");
        assert!(woken(&mut handle).await, "the intent's waiters are woken");
        granted(store.acquire_now(&read, "r2:1", LEASE)); // the intent went
        assert!(store.force_now(&read), "r2 held it");
        assert_eq!(store.entries(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_writer_keeps_new_readers_out_until_its_intent_expires() {
        let store = MemoryStore::new();
        let read = try_key(Kind::Read);
        let mut handle = store.inner.waiters.register(&read.channel);

        granted(store.acquire_now(&read, "r1:1", LEASE));
        // A writer that only tries records no intent.
        busy(store.acquire_now(&try_key(Kind::Write), "w:1", LEASE));
        granted(store.acquire_now(&read, "r2:1", LEASE));
        assert!(store.release_now(&read, "r2:1", false));

        // A waiting one does: new readers wait, those in stay in.
        busy(store.acquire_now(&wait_key(Kind::Write), "w:1", LEASE));
        assert_eq!(
            busy(store.acquire_now(&read, "r2:1", LEASE)),
            Some(QUEUE_PRESENCE)
        );
        granted(store.acquire_now(&read, "r1:1", LEASE));
        // Its intent expires when it stops attempting.
        tokio::time::advance(QUEUE_PRESENCE - MS).await;
        busy(store.acquire_now(&read, "r2:1", LEASE));
        tokio::time::advance(MS).await;
        granted(store.acquire_now(&read, "r2:1", LEASE));

        // A writer that gives up withdraws its intent and wakes the readers.
        busy(store.acquire_now(&wait_key(Kind::Write), "w:1", LEASE));
        busy(store.acquire_now(&read, "r3:1", LEASE));
        assert!(!store.release_now(&wait_key(Kind::Write), "w:1", true));
        assert!(woken(&mut handle).await, "the intent was withdrawn");
        granted(store.acquire_now(&read, "r3:1", LEASE));

        // Once the readers left, the waiting writer gets it and its intent
        // goes with the grant.
        busy(store.acquire_now(&wait_key(Kind::Write), "w:1", LEASE));
        for reader in ["r1:1", "r2:1", "r3:1"] {
            assert!(store.release_now(&read, reader, false));
        }
        granted(store.acquire_now(&wait_key(Kind::Write), "w:1", LEASE));
        assert!(store.release_now(&wait_key(Kind::Write), "w:1", false));
        granted(store.acquire_now(&read, "r4:1", LEASE));
        assert!(store.release_now(&read, "r4:1", false));
        assert_eq!(store.entries(), 0, "an empty read-write lock is dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn the_writer_may_take_the_read_lock() {
        let store = MemoryStore::new();
        let (read, write) = (try_key(Kind::Read), try_key(Kind::Write));
        let w = granted(store.acquire_now(&write, "w:1", LEASE));
        busy(store.acquire_now(&wait_key(Kind::Write), "w2:1", LEASE)); // an intent
        assert!(granted(store.acquire_now(&read, "w:1", LEASE)) > w);
        assert_eq!(busy(store.acquire_now(&read, "r:1", LEASE)), Some(LEASE));
        // Downgrade: the write hold goes, the read hold stays.
        assert!(store.release_now(&write, "w:1", false));
        assert_eq!(store.held(), 1);
        busy(store.acquire_now(&write, "w2:1", LEASE));
        assert_eq!(
            busy(store.acquire_now(&read, "r:1", LEASE)),
            Some(QUEUE_PRESENCE),
            "w2 waits"
        );
        granted(store.acquire_now(&read, "w:1", LEASE));
        tokio::time::advance(QUEUE_PRESENCE).await;
        granted(store.acquire_now(&read, "r:1", LEASE));
        assert_eq!(store.held(), 2);
    }
}
