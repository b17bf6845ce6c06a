//! Ownership scopes: which owner an acquisition takes a lock as.
//!
//! The outermost acquisition opens a [`Scope`] with a fresh owner id
//! (`<client-id>:<n>`); its guard's [`scope`](crate::LockGuard::scope)
//! runs code as that owner. Re-entry is decided by the call stack, not here
//! (`current.rs`: a lock is re-entered only inside the scope of a guard
//! that holds it). A lock taken for the first time inside a scope is taken
//! under the scope's owner, unless something else of the scope (a
//! concurrently polled sibling branch, a task that runs a guard of the scope)
//! holds or acquires a lock of the same primitive: then the acquisition
//! is another owner, with a scope of its own ([`Scope::claim`]), so that
//! neither the client nor the backend's reentrancy by owner merges the two.
//!
//! A scope also counts its acquisitions in flight per lock, so that the
//! rollback of an abandoned grant never deletes a grant that another
//! acquisition of the same scope is taking over.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crate::held::HeldLock;
use crate::name::{KeyStr, Kind, LockKey};
use crate::sync::Mutex;

#[derive(Debug)]
pub(crate) struct Scope {
    /// `<client-id>:<n>`: the owner id the scope's locks are held under,
    /// which also names the client (see [`client_id`](Scope::client_id)).
    pub(crate) owner: Arc<str>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The locks this scope holds or has a request in flight for, by lock
    /// name.
    locks: Locks,
    /// The acquisitions under way under this owner inside a scope (see
    /// [`Scope::claim`]; none, and 8 bytes, for an outermost acquisition,
    /// which opens a scope of its own).
    // Boxed on purpose: 8 bytes in every scope instead of a Vec's 24.
    #[allow(clippy::box_collection)]
    claims: Option<Box<Vec<Claimed>>>,
}

/// The locks of one scope: a list searched from the end, not a hash map.
/// Almost every scope holds one lock (an outermost acquisition opens a scope
/// of its own): that one is kept inline, allocating nothing (a list of one
/// cost a 40-byte allocation per held lock and per waiter; a map, 148
/// bytes and a SipHash per lookup). A scope that holds more keeps a list and
/// pays a linear search, as `taken_by_another` already did over every entry.
#[derive(Debug, Default)]
enum Locks {
    #[default]
    Empty,
    One((KeyStr, Entry)),
    Many(Vec<(KeyStr, Entry)>),
}

impl Locks {
    fn as_slice(&self) -> &[(KeyStr, Entry)] {
        match self {
            Locks::Empty => &[],
            Locks::One(one) => std::slice::from_ref(one),
            Locks::Many(many) => many,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [(KeyStr, Entry)] {
        match self {
            Locks::Empty => &mut [],
            Locks::One(one) => std::slice::from_mut(one),
            Locks::Many(many) => many,
        }
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.as_slice().iter().rposition(|(id, _)| &**id == name)
    }

    fn get(&self, name: &str) -> Option<&Entry> {
        self.position(name)
            .and_then(|at| self.as_slice().get(at))
            .map(|(_, entry)| entry)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Entry> {
        let at = self.position(name)?;
        self.as_mut_slice().get_mut(at).map(|(_, entry)| entry)
    }

    /// `name`'s entry, made empty when there is none (moved to the end of
    /// the list: the one the next lookups find first). Always `Some`.
    fn entry(&mut self, name: &KeyStr) -> Option<&mut Entry> {
        match self.position(name) {
            Some(at) => {
                let slice = self.as_mut_slice();
                let last = slice.len().saturating_sub(1);
                slice.swap(at, last);
            }
            None => match std::mem::take(self) {
                Locks::Empty => *self = Locks::One((name.clone(), Entry::default())),
                Locks::One(one) => {
                    *self = Locks::Many(vec![one, (name.clone(), Entry::default())]);
                }
                Locks::Many(mut many) => {
                    many.push((name.clone(), Entry::default()));
                    *self = Locks::Many(many);
                }
            },
        }
        self.as_mut_slice().last_mut().map(|(_, entry)| entry)
    }

    fn remove(&mut self, name: &str) {
        let Some(at) = self.position(name) else {
            return;
        };
        match self {
            Locks::Many(many) => {
                many.swap_remove(at);
            }
            _ => *self = Locks::Empty,
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&KeyStr, &Entry)> {
        self.as_slice().iter().map(|(id, entry)| (id, entry))
    }
}

#[derive(Debug, Default)]
struct Entry {
    held: Weak<HeldLock>,
    /// Requests in flight, which keep the rollback of an abandoned grant
    /// from deleting what one of them takes over.
    attempts: usize,
}

/// An acquisition under way: its lock's name and its primitive's stem
/// (`LockKey::stem`: a read and the write of one read-write lock share it).
#[derive(Debug)]
struct Claimed {
    id: KeyStr,
    stem: KeyStr,
}

fn live(entry: &Entry) -> Option<Arc<HeldLock>> {
    let lock = entry.held.upgrade()?;
    (lock.holds.load(Ordering::Acquire) > 0).then_some(lock)
}

impl State {
    fn claims(&self, name: &str) -> bool {
        self.locks
            .get(name)
            .is_some_and(|e| e.attempts > 0 || live(e).is_some())
    }

    /// Whether an acquisition of `key` under this scope's owner would share
    /// the owner with another holder or acquisition of the same primitive:
    /// a hold that is not `ours` (not on the caller's call stack), or an
    /// acquisition under way. Reads of one read lock share it harmlessly
    /// (they exclude nobody but writers).
    fn taken_by_another(&self, key: &LockKey, ours: impl Fn(&HeldLock) -> bool) -> bool {
        let other = |id: &str, stem: &str| {
            stem == &**key.stem() && !(key.kind == Kind::Read && id == &**key.id())
        };
        self.claims
            .iter()
            .flat_map(|claims| claims.iter())
            .any(|c| other(&c.id, &c.stem))
            || self.locks.iter().any(|(id, entry)| {
                live(entry).is_some_and(|lock| other(id, lock.key.stem()) && !ours(&lock))
            })
    }

    /// Forgets `name`'s entry once nothing holds it or has a request in
    /// flight for it.
    fn tidy(&mut self, name: &KeyStr) {
        let idle = self
            .locks
            .get(name)
            .is_some_and(|entry| entry.attempts == 0 && entry.held.strong_count() == 0);
        if idle {
            self.locks.remove(name);
        }
    }
}

impl Scope {
    /// A scope with owner id `owner` (`<client-id>:<n>`).
    pub(crate) fn new(owner: Arc<str>) -> Arc<Self> {
        Arc::new(Scope {
            owner,
            state: Mutex::default(),
        })
    }

    /// The id of the client whose locks this scope holds: its owner id
    /// without the `:<n>` that numbers the client's scopes (not stored
    /// apart: a scope is allocated per outermost acquisition).
    pub(crate) fn client_id(&self) -> &str {
        self.owner
            .rsplit_once(':')
            .map_or(&*self.owner, |(client, _)| client)
    }

    /// Adds a hold to `lock`, a lock of this scope, while it has one (a
    /// re-entry). Returns false once its last hold was dropped.
    pub(crate) fn reenter(&self, lock: &HeldLock) -> bool {
        // Under the scope's lock, where the last hold is decided.
        let _state = self.state.lock();
        lock.holds
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then(|| n.saturating_add(1))
            })
            .is_ok()
    }

    /// Claims an acquisition of `key` under this scope's owner, unless
    /// another holder or acquisition of the scope has its primitive (see
    /// `taken_by_another`; `ours` tells the holds on the caller's call
    /// stack): then `None`, and the acquisition must be another owner. The
    /// check and the claim are one step, so of two siblings that start at
    /// the same moment exactly one gets the owner. The claim lasts until the
    /// returned value is dropped.
    pub(crate) fn claim(
        self: &Arc<Self>,
        key: &LockKey,
        ours: impl Fn(&HeldLock) -> bool,
    ) -> Option<Acquiring> {
        let mut state = self.state.lock();
        if state.taken_by_another(key, ours) {
            return None;
        }
        state.claims.get_or_insert_with(Box::default).push(Claimed {
            id: key.id().clone(),
            stem: key.stem().clone(),
        });
        Some(Acquiring {
            scope: self.clone(),
            id: key.id().clone(),
        })
    }

    /// Counts a request for `key` in flight until the returned value is
    /// dropped.
    pub(crate) fn attempting<'a>(&'a self, key: &LockKey) -> Attempting<'a> {
        let mut state = self.state.lock();
        if let Some(entry) = state.locks.entry(key.id()) {
            entry.attempts += 1;
        }
        Attempting {
            scope: self,
            name: key.id().clone(),
        }
    }

    /// Records a lock just acquired under this scope's owner. Returns the
    /// lock the scope now holds and whether this was its first hold (decided
    /// under the scope's lock). Only reads of one read lock can meet here
    /// (other siblings are kept apart by [`claim`](Scope::claim)): the
    /// second gets a hold on the first's lock.
    /// A first hold is recorded only when `admit` (called under the scope's
    /// lock) accepts it; otherwise nothing is, and the result is `None`.
    pub(crate) fn insert(
        &self,
        lock: Arc<HeldLock>,
        admit: impl FnOnce(&Arc<HeldLock>) -> bool,
    ) -> Option<(Arc<HeldLock>, bool)> {
        let mut state = self.state.lock();
        if let Some(existing) = state.locks.get(lock.key.id()).and_then(live) {
            existing.holds.fetch_add(1, Ordering::AcqRel);
            return Some((existing, false));
        }
        if !admit(&lock) {
            return None;
        }
        if let Some(entry) = state.locks.entry(lock.key.id()) {
            entry.held = Arc::downgrade(&lock);
        }
        Some((lock, true))
    }

    /// Whether this scope holds `name` or has a request for it in flight: a
    /// grant to this scope's owner found in the backend may then be (or
    /// become) that hold, and must not be rolled back.
    #[cfg(test)]
    pub(crate) fn claims(&self, name: &str) -> bool {
        self.state.lock().claims(name)
    }

    /// Runs `f` under the scope's lock unless [`claims`](Scope::claims) is
    /// true (then `None`): nothing of the scope starts acquiring `name`
    /// while `f` runs.
    pub(crate) fn if_unclaimed<T>(&self, name: &str, f: impl FnOnce() -> T) -> Option<T> {
        let state = self.state.lock();
        if state.claims(name) {
            return None;
        }
        let out = f();
        drop(state);
        Some(out)
    }

    /// Drops one hold of `lock`; returns true when it was the last one (the
    /// lock then leaves the scope and must be released in the backend).
    pub(crate) fn drop_hold(&self, lock: &HeldLock) -> bool {
        let mut state = self.state.lock();
        let before = lock
            .holds
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .unwrap_or(0);
        if before != 1 {
            return false;
        }
        if let Some(entry) = state.locks.get_mut(lock.key.id()) {
            if std::ptr::eq(entry.held.as_ptr(), lock) {
                entry.held = Weak::new();
            }
        }
        state.tidy(lock.key.id());
        true
    }
}

/// An acquisition under way under a scope's owner (see [`Scope::claim`]).
#[derive(Debug)]
pub(crate) struct Acquiring {
    scope: Arc<Scope>,
    id: KeyStr,
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        let mut state = self.scope.state.lock();
        // Claims of one name are alike (reads): any one of them goes.
        if let Some(claims) = state.claims.as_mut() {
            if let Some(at) = claims.iter().position(|c| c.id == self.id) {
                claims.swap_remove(at);
            }
        }
    }
}

/// A request in flight (see [`Scope::attempting`]).
pub(crate) struct Attempting<'a> {
    scope: &'a Scope,
    name: KeyStr,
}

impl Drop for Attempting<'_> {
    fn drop(&mut self) {
        let mut state = self.scope.state.lock();
        if let Some(entry) = state.locks.get_mut(&self.name) {
            entry.attempts = entry.attempts.saturating_sub(1);
        }
        state.tidy(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::held::Lease;
    use crate::name::LockKey;

    /// One lock is kept inline; a second makes a list; entries are found,
    /// moved to the end and removed alike in both forms.
    #[test]
    fn the_lock_list_grows_from_one_inline_entry_and_shrinks_back() {
        let (a, b, c): (KeyStr, KeyStr, KeyStr) = ("a".into(), "b".into(), "c".into());
        let mut locks = Locks::default();
        assert!(locks.get("a").is_none());
        locks.entry(&a).unwrap().attempts = 1;
        assert!(matches!(locks, Locks::One(_)));
        assert_eq!(locks.get("a").map(|e| e.attempts), Some(1));
        locks.entry(&b).unwrap().attempts = 2;
        locks.entry(&c).unwrap().attempts = 3;
        assert!(matches!(&locks, Locks::Many(many) if many.len() == 3));
        // Entering an existing one moves it to the end.
        locks.entry(&a).unwrap().attempts += 10;
        let order: Vec<&str> = locks.iter().map(|(id, _)| &**id).collect();
        assert_eq!(order.last(), Some(&"a"));
        assert_eq!(locks.get("a").map(|e| e.attempts), Some(11));
        locks.remove("b");
        assert!(locks.get("b").is_none());
        assert_eq!(locks.get_mut("c").map(|e| e.attempts), Some(3));
        let mut one = Locks::default();
        one.entry(&a);
        one.remove("x");
        assert!(one.get("a").is_some());
        one.remove("a");
        assert!(matches!(one, Locks::Empty));
    }

    fn key(name: &str, kind: Kind) -> LockKey {
        LockKey::of_kind("lock:", name, kind).unwrap()
    }

    fn lock(name: &str) -> Arc<HeldLock> {
        held(key(name, Kind::Exclusive))
    }

    fn held(key: LockKey) -> Arc<HeldLock> {
        let lease = Lease::Watchdog(std::time::Duration::from_secs(1));
        Arc::new(HeldLock::new(key, "c:1".into(), 1, lease, Instant::now()))
    }

    #[tokio::test]
    async fn of_two_grants_of_one_read_lock_exactly_one_is_first() {
        let scope = Scope::new("c:1".into());
        let (a, first_a) = scope.insert(held(key("x", Kind::Read)), |_| true).unwrap();
        let (b, first_b) = scope.insert(held(key("x", Kind::Read)), |_| true).unwrap();
        assert!(first_a && !first_b);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.holds.load(Ordering::Acquire), 2);
        assert!(!scope.drop_hold(&a));
        assert!(scope.drop_hold(&a));
        assert!(!scope.claims(a.key.id()));
    }

    #[tokio::test]
    async fn a_refused_first_hold_is_not_recorded() {
        let scope = Scope::new("c:1".into());
        let x = lock("x");
        assert!(scope.insert(x.clone(), |_| false).is_none());
        assert!(!scope.claims(x.key.id()));
        assert!(scope.claim(&x.key, |_| false).is_some());
    }

    #[tokio::test]
    async fn a_request_in_flight_claims_its_lock() {
        let scope = Scope::new("c:1".into());
        let x = key("x", Kind::Exclusive);
        let attempt = scope.attempting(&x);
        assert!(scope.claims(x.id()));
        drop(attempt);
        assert!(!scope.claims(x.id()));
    }

    /// Of two acquisitions of one primitive under one owner, the second is
    /// refused the owner while the first is under way or holds the lock off
    /// the caller's stack; a hold on the caller's stack (a write lock, when
    /// its read lock is asked for) and reads of one read lock do not count.
    #[tokio::test]
    async fn an_owner_takes_one_acquisition_of_a_primitive_at_a_time() {
        let scope = Scope::new("c:1".into());
        let x = key("x", Kind::Exclusive);
        let first = scope.claim(&x, |_| false).expect("the scope is free");
        assert!(scope.claim(&x, |_| false).is_none(), "under way");
        assert!(scope.claim(&key("y", Kind::Exclusive), |_| false).is_some());
        let (x_held, _) = scope.insert(held(x.clone()), |_| true).unwrap();
        drop(first);
        assert!(scope.claim(&x, |_| false).is_none(), "held off the stack");
        assert!(scope.claim(&x, |_| true).is_some(), "held on the stack");
        assert!(scope.drop_hold(&x_held));
        assert!(scope.claim(&x, |_| false).is_some(), "released");

        let (write, read) = (key("rw", Kind::Write), key("rw", Kind::Read));
        let (w, _) = scope.insert(held(write.clone()), |_| true).unwrap();
        assert!(scope.claim(&read, |_| false).is_none(), "a sibling's write");
        let one = scope
            .claim(&read, |l| std::ptr::eq(l, &*w))
            .expect("our write");
        assert!(
            scope.claim(&read, |l| std::ptr::eq(l, &*w)).is_some(),
            "reads share"
        );
        assert!(
            scope.claim(&write, |l| std::ptr::eq(l, &*w)).is_none(),
            "a read under way"
        );
        drop(one);
    }
}
