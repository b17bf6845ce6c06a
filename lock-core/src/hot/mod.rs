//! Hot locks (`LockClientBuilder::keep_hot`): a plain lock this client
//! releases stays taken in the store, in the client's name, so that its next
//! acquisition in this client costs no round trip (as Chubby caches locks
//! and the JVM biases monitors).
//!
//! - **Taken from the store** with a field of its own (`<client>:h<n>~k`, not
//!   a scope's owner), so that no scope of the client can take it in the
//!   store while another scope of the same client uses it: every scope goes
//!   through this table first.
//! - **Kept** at the release of its last hold, unless someone asked for it or
//!   it was lost: the release then costs nothing, and the next acquisition in
//!   this client takes it at once, with the same fencing token.
//! - **Given up** (deleted in the store, waking its waiters) after `linger`
//!   without a use, at once when another client asks for it while it is kept
//!   idle, and at the release of the use that holds it when one asked
//!   meanwhile. Another client asks by trying the lock: the acquire script,
//!   finding it held by a kept field (`~k`), publishes `w <field>` on the
//!   lock's channel, which every keeper follows while it keeps the lock.
//! - **Renewed** by the keeper's task while kept, idle or in use (not by the
//!   client's watchdog, but as it does: every third of the lease it renews
//!   with, `renew.rs`): a lease lost while kept idle is found at the next
//!   acquisition, which then asks the store.
//! - **Short-leased while idle.** An idle kept lock's key expires
//!   [`short_lease`] (the linger plus twice the response timeout, at most
//!   the lease) after its last renewal, so that a keeper that dies without
//!   giving it up (SIGKILL, a crash) holds up the others that long, not a
//!   whole lease. The release that makes a lock idle costs no round trip:
//!   the keeper's task cuts its lease in the background, and the lock counts
//!   as running out at the short deadline from the moment that command is
//!   sent. A use that takes an idle lock starts with that short deadline,
//!   which the store backs; the task's next round (within a third of the
//!   short lease, so answered before it runs out when the store answers
//!   within the response timeout) extends it to the full lease while it is
//!   in use. No use sends anything.
//!
//! This folder holds the table of kept locks ([`Keeper`]), the keeper's
//! task (`task.rs`) and its renewal rounds (`renew.rs`); the acquisition
//! and the release consult the table through it, and hand the task a
//! give-up callback, so the folder depends on nothing above the held-lock
//! state, the waiters and the backend.

mod renew;
mod task;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::backend::Backend;
use crate::held::HeldLock;
use crate::lease::MIN_WATCHDOG_LEASE;
use crate::supervised::Supervised;
use crate::sync::Mutex;
use crate::waiters::{Ask, WaitSet};

pub(crate) use crate::wire::KEEP_SUFFIX;

/// Gives up kept locks (releases them in the store, in the background);
/// returns false once the client is gone, which ends the keeper's task.
/// Called with no locks to ask only that.
pub(crate) type GiveUp = Arc<dyn Fn(Vec<Arc<HeldLock>>) -> bool + Send + Sync>;

/// The longest linger accepted.
pub(crate) const MAX_LINGER: Duration = Duration::from_secs(3600);

/// The lease of an idle kept lock in the store: the linger, plus twice the
/// response timeout (a renewal round, every third of this lease, answered
/// within the response timeout, reaches a use that starts on it before it
/// runs out), at least the shortest watchdog lease and at most `lease` (a
/// linger that long keeps the lock for the lease, as without this).
pub(crate) fn short_lease(
    linger: Duration,
    lease: Duration,
    response_timeout: Duration,
) -> Duration {
    linger
        .saturating_add(response_timeout.saturating_mul(2))
        .max(MIN_WATCHDOG_LEASE)
        .min(lease)
}

/// The kept locks of one client.
pub(crate) struct Keeper {
    inner: Arc<Inner>,
    task: Supervised,
    /// How the keeper gives locks up (the client's background release).
    give_up: GiveUp,
}

impl std::ops::Deref for Keeper {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.inner
    }
}

/// The keeper's state, shared with its task.
pub(crate) struct Inner {
    pub(crate) linger: Duration,
    /// The full lease: of a kept lock in use.
    lease: Duration,
    /// The lease of an idle kept lock ([`short_lease`]).
    short: Duration,
    /// Renews the kept locks.
    backend: Arc<dyn Backend>,
    /// A kept lock went idle whose lease in the store may be the full one:
    /// the task cuts it now.
    shorten: AtomicBool,
    /// By the lock's channel, on which other clients ask for it.
    table: Mutex<HashMap<Arc<str>, Kept>>,
    next: AtomicU64,
    /// Wakes the keeper's task: a lock was kept (its linger starts).
    pub(crate) tick: Notify,
    /// Requests for kept locks, from the wake-up channels:
    /// locked by the running task, and left here when its runtime goes, for
    /// the task started on the next one.
    pub(crate) asked: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Ask>>>,
}

struct Kept {
    /// The hold the watchdog renews: the use's lock, or between uses the
    /// idle lock that succeeded it.
    lock: Arc<HeldLock>,
    /// Since when it is kept without a use (`None`: in use).
    idle_since: Option<Instant>,
    /// Another client asked for it during the current use.
    wanted: bool,
    /// The lease in the store may be longer than the short one (taken from
    /// the store, or renewed while in use, since the last short renewal).
    long: bool,
    /// Follows the lock's channel, where other clients ask for it.
    _listen: WaitSet,
}

/// What became of a hot lock at the end of a use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Kept idle.
    Kept,
    /// Another client asked for it: release it, and let the asker go first.
    Asked,
    /// Not kept (lost, not a kept lock): release it.
    No,
}

/// What the table says about a lock before an acquisition asks the store.
pub(crate) enum Take {
    /// Kept idle: now in use by the caller, who succeeds this idle lock.
    Idle(Arc<HeldLock>),
    /// In use by another scope of this client, for about this long at most.
    InUse(Duration),
    /// Not kept: ask the store.
    Absent,
}

impl Keeper {
    /// A keeper of locks idle for up to `linger`, renewed through
    /// `backend` with `lease` in use and [`short_lease`] idle.
    pub(crate) fn new(
        linger: Duration,
        (lease, response_timeout): (Duration, Duration),
        backend: Arc<dyn Backend>,
        asked: mpsc::UnboundedReceiver<Ask>,
        give_up: GiveUp,
    ) -> Self {
        Keeper {
            inner: Arc::new(Inner {
                linger,
                lease,
                short: short_lease(linger, lease, response_timeout),
                backend,
                shorten: AtomicBool::new(false),
                table: Mutex::default(),
                next: AtomicU64::new(1),
                tick: Notify::new(),
                asked: Arc::new(tokio::sync::Mutex::new(asked)),
            }),
            task: Supervised::default(),
            give_up,
        }
    }

    /// Makes sure the keeper's task runs on the current runtime.
    pub(crate) fn ensure_running(&self) {
        let inner = self.inner.clone();
        let give_up = self.give_up.clone();
        self.task.ensure(move || task::run(inner, give_up));
    }

    /// Gives `lock` up now (a kept lock that is not handed out after all).
    pub(crate) fn give_up(&self, lock: Arc<HeldLock>) {
        (self.give_up)(vec![lock]);
    }

    /// Stops the task for good (the client shut down).
    pub(crate) fn stop(&self) {
        self.task.stop();
    }
}

impl Inner {
    /// A new field for a lock taken from the store.
    pub(crate) fn field(&self, client: &str) -> Arc<str> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut field = String::with_capacity(client.len() + 24);
        field.push_str(client);
        let _ = write!(field, ":h{n}{KEEP_SUFFIX}");
        Arc::from(field)
    }

    /// Takes the kept lock of `channel` for a use, if it is kept idle and held.
    pub(crate) fn take(&self, channel: &str) -> Take {
        let mut table = self.table.lock();
        let Some(kept) = table.get_mut(channel) else {
            return Take::Absent;
        };
        if kept.idle_since.is_none() {
            let left = kept
                .lock
                .valid_until()
                .saturating_duration_since(Instant::now());
            return if kept.lock.is_held() {
                Take::InUse(left)
            } else {
                Take::Absent
            };
        }
        if !kept.lock.is_held() {
            // Lost while kept (expired, deleted): forgotten; the store decides.
            table.remove(channel);
            return Take::Absent;
        }
        kept.idle_since = None;
        kept.wanted = false;
        Take::Idle(kept.lock.clone())
    }

    /// `lock`, taken from the store or succeeding the idle lock, is the
    /// hold of the current use of its entry (a new entry following the
    /// lock's channel with `listen`, when it came from the store).
    pub(crate) fn in_use(&self, lock: &Arc<HeldLock>, listen: Option<WaitSet>) {
        let mut table = self.table.lock();
        if let Some(kept) = table.get_mut(&lock.key.channel) {
            kept.lock = lock.clone();
            kept.idle_since = None;
            return;
        }
        if let Some(listen) = listen {
            table.insert(
                lock.key.channel.clone(),
                Kept {
                    lock: lock.clone(),
                    idle_since: None,
                    wanted: false,
                    // Taken with the full lease.
                    long: true,
                    _listen: listen,
                },
            );
        }
    }

    /// The use holding `lock` ended: keeps it idle as `idle` (a lock the
    /// caller made to succeed it, which the watchdog renews from now on),
    /// unless another client asked for it meanwhile or it is not held any
    /// more (then it is forgotten: release it).
    pub(crate) fn keep(&self, lock: &HeldLock, idle: impl FnOnce() -> Arc<HeldLock>) -> Outcome {
        let mut table = self.table.lock();
        let Some(kept) = table.get_mut(&lock.key.channel) else {
            return Outcome::No;
        };
        if !std::ptr::eq(Arc::as_ptr(&kept.lock), lock) {
            return Outcome::No;
        }
        if kept.wanted || !lock.is_held() {
            let wanted = kept.wanted;
            table.remove(&lock.key.channel);
            return if wanted { Outcome::Asked } else { Outcome::No };
        }
        kept.lock = idle();
        kept.idle_since = Some(Instant::now());
        if kept.long {
            self.shorten.store(true, Ordering::Release);
        }
        drop(table);
        self.tick.notify_one();
        Outcome::Kept
    }

    /// Forgets `lock`'s entry (its use ends without keeping it).
    pub(crate) fn forget(&self, lock: &HeldLock) {
        let mut table = self.table.lock();
        if table
            .get(&lock.key.channel)
            .is_some_and(|kept| std::ptr::eq(Arc::as_ptr(&kept.lock), lock))
        {
            table.remove(&lock.key.channel);
        }
    }

    /// Another client asked for the lock of `channel` kept with `field`: an idle one is
    /// returned (forgotten: the caller gives it up now), one in use is given
    /// up at the end of its use.
    pub(crate) fn asked_for(&self, (channel, field): &Ask) -> Option<Arc<HeldLock>> {
        let mut table = self.table.lock();
        let kept = table.get_mut(channel)?;
        if *kept.lock.owner != **field {
            return None; // another client's, or an earlier hold of this one
        }
        if kept.idle_since.is_none() {
            kept.wanted = true;
            return None;
        }
        table.remove(channel).map(|kept| kept.lock)
    }

    /// Forgets the idle locks whose linger ended by `now`; returns them and
    /// the end of the next linger.
    pub(crate) fn expired(&self, now: Instant) -> (Vec<Arc<HeldLock>>, Option<Instant>) {
        let mut table = self.table.lock();
        if table.is_empty() {
            return (Vec::new(), None);
        }
        let mut gone = Vec::new();
        let mut next: Option<Instant> = None;
        table.retain(|_, kept| {
            let Some(since) = kept.idle_since else {
                return true;
            };
            // A linger beyond the clock's range never ends by itself.
            let Some(end) = since.checked_add(self.linger) else {
                return true;
            };
            if end <= now {
                gone.push(kept.lock.clone());
                return false;
            }
            next = Some(next.map_or(end, |n| n.min(end)));
            true
        });
        (gone, next)
    }

    /// Forgets every idle lock (the client shuts down) and returns them.
    pub(crate) fn drain_idle(&self) -> Vec<Arc<HeldLock>> {
        let mut table = self.table.lock();
        let mut idle = Vec::new();
        table.retain(|_, kept| {
            if kept.idle_since.is_some() {
                idle.push(kept.lock.clone());
                false
            } else {
                true
            }
        });
        idle
    }
}
