//! Waiters of this process, per wake-up channel: who to wake when a lock is
//! released.
//!
//! Each channel has one entry, reference-counted by the waiters registered on
//! it. A release message wakes one local waiter (`Notify::notify_one`): the
//! others keep sleeping instead of racing for a lock only one can get, and the
//! woken waiter's next release wakes the next. A woken waiter that was
//! cancelled passes its wake-up on (tokio's `Notified` does that on drop).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::sync::Mutex;
use crate::wire::{ASK_PREFIX, GRANT_PREFIX, RELEASE_PREFIX};

/// How long a wake-up holds other waiters back at most: a woken waiter that
/// neither attempts nor leaves within it (a stalled task) stops blocking.
const HAND_OFF_GRACE: Duration = Duration::from_secs(1);

/// How many releases in a row may hand a lock to a waiter of this process
/// ahead of the others (the in-client hand-off, one round trip). The next
/// release wakes nobody early: its message reaches every process's waiters
/// at once, so waiters of other processes get their chance instead of
/// being starved by a process whose workers keep passing the lock among
/// themselves. Measured in lock-bench W10 (16 workers in 4 processes):
/// without the limit the least served process got 0.008 of its fair share;
/// with 1, 0.62 to 0.64, and single-process hand-off (W3) kept its rate.
const LOCAL_STREAK: u32 = 1;

/// How long this process's waiters hold back after a release that left the
/// lock to every process (see [`LOCAL_STREAK`]), when the release's wake-up
/// reached other processes too: their woken waiters take the lock first,
/// instead of racing one that is already running (this process's, woken by
/// the same message a moment sooner, or scheduled sooner on a loaded
/// machine). A waiter held back still attempts after it, so a lock nobody
/// else takes costs this once. Without it, 2 processes on a loaded 2-core
/// machine split 400 acquisitions 58 to 342; with it, see
/// `in_client_hand_offs_do_not_starve_another_process`.
const OPEN_ROUND_YIELD: Duration = Duration::from_millis(5);

#[derive(Debug)]
struct Entry {
    refs: usize,
    wake: Arc<Wake>,
    ready: watch::Sender<bool>,
}

/// The wake-up state of one channel, shared by its waiters.
#[derive(Debug, Default)]
struct Wake {
    notify: Notify,
    hand_off: Mutex<HandOff>,
    /// Counts the release messages: waiters of a primitive that many hold
    /// at once (reads, permits) all look at every release, and one that came
    /// between a waiter's attempt and its wait is not missed.
    releases: watch::Sender<u64>,
    /// In-client hand-offs since the last release that left the lock to
    /// every process's waiters (see [`LOCAL_STREAK`]).
    local_streak: AtomicU32,
    /// The last release's wake-up reached other processes' subscriptions
    /// too (see [`Waiters::listeners`]).
    others: AtomicBool,
}

#[derive(Debug, Default)]
struct HandOff {
    /// Until when other waiters hold back: a release is on its way or a
    /// woken waiter is taking the lock.
    until: Option<Instant>,
    /// A waiter was woken and has not reported its attempt.
    woken: bool,
    /// A release message that came while a woken waiter was taking the lock:
    /// delivered if that waiter fails, dropped if it gets the lock.
    held_message: bool,
    /// The next woken waiter holds back until then (see
    /// [`OPEN_ROUND_YIELD`]).
    yield_until: Option<Instant>,
    /// The owner whose release, queued by this process, woke the waiter
    /// now taking the lock (the in-client hand-off).
    releasing: Option<Arc<str>>,
    /// A release of this process whose lock its woken waiter already took,
    /// and until when its message may still come: that message (`0
    /// <owner>`) is old news and wakes nobody. Without this, every in-client
    /// hand-off whose message came after the hand-off ended woke a second
    /// waiter into a failed attempt (lock-bench W3: 0.48 of them per
    /// acquisition).
    stale: Option<(Arc<str>, Instant)>,
}

impl Wake {
    /// Wakes one waiter, which then takes the lock while the others hold back.
    fn wake(&self, hand_off: &mut HandOff) {
        hand_off.until = Instant::now().checked_add(HAND_OFF_GRACE);
        hand_off.woken = true;
        self.notify.notify_one();
    }

    /// A release that leaves the lock to the other processes: no in-client
    /// hand-off streak, and this process's next woken waiter holds back for
    /// [`OPEN_ROUND_YIELD`].
    fn open_round(&self) {
        self.local_streak.store(0, Ordering::Relaxed);
        self.hand_off.lock().yield_until = Instant::now().checked_add(OPEN_ROUND_YIELD);
    }

    /// A release message (of `owner`'s release, when it names one): wakes
    /// a waiter, unless one woken earlier (by this client's own release) is
    /// still taking the lock, or already took it after that very release.
    fn message(&self, owner: Option<&[u8]>) {
        self.releases.send_modify(|n| *n = n.wrapping_add(1));
        let mut hand_off = self.hand_off.lock();
        if let (Some(owner), Some((stale, until))) = (owner, &hand_off.stale) {
            if stale.as_bytes() == owner && Instant::now() < *until {
                hand_off.stale = None;
                return;
            }
        }
        if hand_off.woken && hand_off.until.is_some_and(|until| Instant::now() < until) {
            hand_off.held_message = true;
        } else {
            self.wake(&mut hand_off);
        }
    }

    /// The woken waiter made its attempt (`acquired`: and got the lock, or
    /// found it held by this client) or left (`None`).
    fn done(&self, acquired: Option<bool>) {
        let mut hand_off = self.hand_off.lock();
        let held = std::mem::take(&mut hand_off.held_message);
        let releasing = hand_off.releasing.take();
        *hand_off = HandOff::default();
        match acquired {
            // Woken by this process's own release, whose message has not
            // come yet: it is old news when it comes.
            Some(true) if !held => {
                hand_off.stale = releasing.zip(Instant::now().checked_add(HAND_OFF_GRACE));
            }
            Some(true) => {}
            // The lock may be free: let another waiter try.
            Some(false) if held => self.wake(&mut hand_off),
            Some(false) => {}
            None => self.wake(&mut hand_off),
        }
    }
}

/// The waiters of one client (Redis) or one in-memory store.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    map: Mutex<HashMap<Arc<str>, Entry>>,
    /// Whether a subscriber must confirm each channel before its waiters
    /// count on wake-ups (false for the in-memory store, which wakes directly).
    subscribed: bool,
    /// Told of every channel that gains its first or loses its last waiter,
    /// so the subscriber can reconcile its server-side subscriptions.
    changes: Mutex<Option<mpsc::UnboundedSender<Arc<str>>>>,
    /// Waiters queued on a fair lock, by channel and owner: a release hands
    /// the lock to one of them and tells only it, with the new token.
    grants: Mutex<HashMap<GrantKey, Arc<Grant>>>,
    /// The keepers of hot locks (one per client; an in-memory store's
    /// clients share its waiters), told of every request for a kept lock.
    keepers: Mutex<Vec<mpsc::UnboundedSender<Ask>>>,
}

/// A request for a hot lock: the lock's channel and the field it is kept
/// under.
pub(crate) type Ask = (Arc<str>, Arc<str>);

/// A queued waiter: its channel and its owner.
type GrantKey = (Arc<str>, Arc<str>);

/// Where a fair lock handed to a waiter of this process is announced.
#[derive(Debug, Default)]
pub(crate) struct Grant {
    token: Mutex<Option<u64>>,
    notify: Notify,
}

impl Waiters {
    /// Waiters that need no subscription (the in-memory store).
    pub(crate) fn local() -> Arc<Self> {
        Arc::new(Waiters::default())
    }

    /// Waiters whose channels a subscriber follows (see [`follow`](Waiters::follow)).
    pub(crate) fn subscribed() -> Arc<Self> {
        Arc::new(Waiters {
            subscribed: true,
            ..Waiters::default()
        })
    }

    /// Called by a (re)started subscriber: from now on it receives the
    /// changes. Every channel counts as unconfirmed until it subscribes again
    /// (a gone subscriber's subscriptions went with its connection).
    pub(crate) fn follow(&self) -> mpsc::UnboundedReceiver<Arc<str>> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.changes.lock() = Some(tx);
        self.set_all_unready();
        rx
    }

    /// Registers one waiter on `channel`.
    pub(crate) fn register(self: &Arc<Self>, channel: &Arc<str>) -> WakeHandle {
        let mut map = self.map.lock();
        let entry = map.entry(channel.clone()).or_insert_with(|| Entry {
            refs: 0,
            wake: Arc::default(),
            ready: watch::Sender::new(!self.subscribed),
        });
        entry.refs += 1;
        let first = entry.refs == 1;
        let handle = WakeHandle::new(self, channel, entry);
        drop(map);
        if first {
            self.changed(channel);
        }
        handle
    }

    /// Registers one waiter on `channel` only when the channel already has
    /// waiters and its subscription is confirmed, so that registering costs
    /// nothing and the caller's next attempt is covered by a wake-up.
    pub(crate) fn register_if_ready(self: &Arc<Self>, channel: &Arc<str>) -> Option<WakeHandle> {
        let mut map = self.map.lock();
        let entry = map.get_mut(channel)?;
        if !*entry.ready.borrow() {
            return None;
        }
        entry.refs += 1;
        Some(WakeHandle::new(self, channel, entry))
    }

    fn unregister(&self, channel: &Arc<str>) {
        let mut map = self.map.lock();
        let Some(entry) = map.get_mut(channel) else {
            return;
        };
        entry.refs = entry.refs.saturating_sub(1);
        if entry.refs == 0 {
            map.remove(channel);
            drop(map);
            self.changed(channel);
        }
    }

    fn changed(&self, channel: &Arc<str>) {
        if let Some(changes) = &*self.changes.lock() {
            let _ = changes.send(channel.clone());
        }
    }

    /// A keeper of hot locks: told of every request for a kept lock, until
    /// the receiver is dropped.
    pub(crate) fn keeper(&self) -> mpsc::UnboundedReceiver<Ask> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut keepers = self.keepers.lock();
        keepers.retain(|keeper| !keeper.is_closed());
        keepers.push(tx);
        rx
    }

    /// A message on `channel`: `g <owner> <token>` hands a fair lock to
    /// `owner` (only that waiter is told); `w <field>` asks the keeper of a
    /// hot lock to give it up (waiters are not woken: the lock is still
    /// taken); anything else is a release that wakes a waiter (see
    /// [`wake_one`](Waiters::wake_one)).
    pub(crate) fn message(&self, channel: &str, payload: &[u8]) {
        if let Some(field) = payload.strip_prefix(ASK_PREFIX.as_bytes()) {
            if let Ok(field) = std::str::from_utf8(field) {
                let ask: Ask = (channel.into(), field.into());
                for keeper in self.keepers.lock().iter() {
                    let _ = keeper.send(ask.clone());
                }
            }
            return;
        }
        if let Some(grant) = payload.strip_prefix(GRANT_PREFIX.as_bytes()) {
            let parsed = std::str::from_utf8(grant).ok().and_then(|grant| {
                let (owner, token) = grant.rsplit_once(' ')?;
                Some((owner, token.parse::<u64>().ok()?))
            });
            if let Some((owner, token)) = parsed {
                let key = (Arc::<str>::from(channel), Arc::<str>::from(owner));
                let grant = self.grants.lock().get(&key).cloned();
                if let Some(grant) = grant {
                    *grant.token.lock() = Some(token);
                    grant.notify.notify_one();
                }
                return;
            }
        }
        self.released(channel, payload.strip_prefix(RELEASE_PREFIX.as_bytes()));
    }

    /// A release message for `channel`: wakes one waiter of this process,
    /// if it has any (see [`Wake::message`]).
    pub(crate) fn wake_one(&self, channel: &str) {
        self.released(channel, None);
    }

    /// A release of `channel`, of `owner`'s lock when the message names it.
    fn released(&self, channel: &str, owner: Option<&[u8]>) {
        if let Some(entry) = self.map.lock().get(channel) {
            entry.wake.message(owner);
        }
    }

    /// A release of `channel` by this process is on its way (`true`): hold
    /// this process's waiters back until its wake-up has been taken and the
    /// woken waiter has made its attempt. `false`: that release deleted
    /// nothing after all.
    pub(crate) fn expect_wake(&self, channel: &str, expected: bool) {
        let Some(entry) = self.map.lock().get(channel).map(|e| e.wake.clone()) else {
            return;
        };
        let mut hand_off = entry.hand_off.lock();
        if expected {
            // A new release: an older one's message is no longer told apart.
            hand_off.stale = None;
            hand_off.until = Instant::now().checked_add(HAND_OFF_GRACE);
        } else if !hand_off.woken {
            let held = std::mem::take(&mut hand_off.held_message);
            hand_off.until = None;
            if held {
                entry.wake(&mut hand_off);
            }
        }
    }

    /// This process's own release of `channel` is queued on the command
    /// connection: wakes one waiter now, so that its attempt follows the
    /// release on the same connection and the lock changes hands in one round
    /// trip. The release's message, when it comes, is held until that waiter
    /// has made its attempt (dropped if it got the lock).
    ///
    /// Every [`LOCAL_STREAK`] + 1st release wakes nobody early, so that the
    /// waiters of other processes are not starved.
    /// When the previous release's wake-up reached other processes, this
    /// one also holds this process's waiters back for
    /// [`OPEN_ROUND_YIELD`], so that theirs go first.
    pub(crate) fn wake_local(&self, channel: &str, owner: &Arc<str>) {
        if let Some(entry) = self.map.lock().get(channel) {
            let streak = &entry.wake.local_streak;
            if streak.load(Ordering::Relaxed) >= LOCAL_STREAK {
                if entry.wake.others.load(Ordering::Relaxed) {
                    entry.wake.open_round();
                } else {
                    streak.store(0, Ordering::Relaxed);
                }
                return;
            }
            streak.fetch_add(1, Ordering::Relaxed);
            let mut hand_off = entry.wake.hand_off.lock();
            entry.wake.wake(&mut hand_off);
            hand_off.releasing = Some(owner.clone());
        }
    }

    /// This process's release of `channel` gives the lock up because
    /// another process asked for it (a hot lock): nobody here is woken
    /// early, and the waiter its message wakes holds back for
    /// [`OPEN_ROUND_YIELD`] first, so that the asker gets it.
    pub(crate) fn yield_round(&self, channel: &str) {
        if let Some(entry) = self.map.lock().get(channel) {
            entry.wake.open_round();
        }
    }

    /// A release of `channel` by this process reached `count` subscriptions
    /// (`PUBLISH`'s reply). With waiters here, one of them is this client's:
    /// more means that other processes wait for the lock too.
    pub(crate) fn listeners(&self, channel: &str, count: u64) {
        if let Some(entry) = self.map.lock().get(channel) {
            entry.wake.others.store(count > 1, Ordering::Relaxed);
        }
    }

    /// Wakes every waiter (after a reconnect, when messages may have been lost).
    pub(crate) fn wake_all(&self) {
        for entry in self.map.lock().values() {
            *entry.wake.hand_off.lock() = HandOff::default();
            entry.wake.notify.notify_waiters();
            entry.wake.releases.send_modify(|n| *n = n.wrapping_add(1));
        }
        for grant in self.grants.lock().values() {
            grant.notify.notify_one();
        }
    }

    /// How many waiters are registered on `channel`.
    pub(crate) fn waiting(&self, channel: &str) -> u64 {
        self.map
            .lock()
            .get(channel)
            .map_or(0, |entry| u64::try_from(entry.refs).unwrap_or(u64::MAX))
    }

    /// Whether `channel` has waiters.
    pub(crate) fn is_wanted(&self, channel: &str) -> bool {
        self.map.lock().contains_key(channel)
    }

    /// Every channel that has waiters.
    pub(crate) fn channels(&self) -> Vec<Arc<str>> {
        self.map.lock().keys().cloned().collect()
    }

    /// Marks the subscription of `channel` as confirmed (or not) by the server.
    pub(crate) fn set_ready(&self, channel: &str, ready: bool) {
        if let Some(entry) = self.map.lock().get(channel) {
            entry.ready.send_replace(ready);
        }
    }

    /// Marks every subscription unconfirmed (the connection is gone).
    pub(crate) fn set_all_unready(&self) {
        for entry in self.map.lock().values() {
            entry.ready.send_replace(false);
        }
    }
}

/// One registered waiter; unregisters on drop.
#[derive(Debug)]
pub(crate) struct WakeHandle {
    waiters: Arc<Waiters>,
    channel: Arc<str>,
    wake: Arc<Wake>,
    ready: watch::Receiver<bool>,
    /// This waiter took a wake-up and has not made its attempt yet.
    woken: bool,
    /// The channel's release count, as last seen.
    releases: watch::Receiver<u64>,
}

impl WakeHandle {
    fn new(waiters: &Arc<Waiters>, channel: &Arc<str>, entry: &Entry) -> Self {
        WakeHandle {
            waiters: waiters.clone(),
            channel: channel.clone(),
            wake: entry.wake.clone(),
            ready: entry.ready.subscribe(),
            woken: false,
            releases: entry.wake.releases.subscribe(),
        }
    }

    /// Marks every release so far as seen (before an attempt).
    pub(crate) fn seen(&mut self) {
        self.releases.borrow_and_update();
    }

    /// Until a release after the last [`seen`](WakeHandle::seen).
    pub(crate) async fn released(&mut self) {
        if self.releases.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Registers `owner` as queued on this channel's fair lock: a release
    /// that hands it the lock is announced to the returned slot only.
    pub(crate) fn expect_grant(&self, owner: &Arc<str>) -> GrantSlot {
        let key = (self.channel.clone(), owner.clone());
        let grant = self
            .waiters
            .grants
            .lock()
            .entry(key.clone())
            .or_default()
            .clone();
        GrantSlot {
            waiters: self.waiters.clone(),
            key,
            grant,
        }
    }

    /// Waits until the server confirmed the subscription, at most `timeout`.
    /// Returns whether it did; a waiter that goes on without confirmation
    /// only risks latency (its wait is bounded by the holder's TTL).
    pub(crate) async fn ready(&mut self, timeout: Duration) -> bool {
        matches!(
            tokio::time::timeout(timeout, self.ready.wait_for(|ready| *ready)).await,
            Ok(Ok(_))
        )
    }

    /// Resolves at the next wake-up of this channel. The caller then makes
    /// its attempt and reports it with [`attempted`](WakeHandle::attempted).
    ///
    /// After a release that left the lock to every process, the woken
    /// waiter first holds back a moment (see [`OPEN_ROUND_YIELD`]); other
    /// waiters of this process stay held back meanwhile. Cancel safe: a
    /// waiter dropped while holding back passes its wake-up on.
    pub(crate) async fn notified(&mut self) {
        self.wake.notify.notified().await;
        self.woken = true;
        let hold_back = self.wake.hand_off.lock().yield_until.take();
        if let Some(until) = hold_back.filter(|until| Instant::now() < *until) {
            tokio::time::sleep_until(until).await;
        }
    }

    /// Until when another waiter of this process, just woken, is taking the
    /// lock: this one should not race it to the server meanwhile.
    pub(crate) fn hand_off_elsewhere(&self) -> Option<Instant> {
        if self.woken {
            return None;
        }
        let until = self.wake.hand_off.lock().until?;
        (Instant::now() < until).then_some(until)
    }

    /// Reports that this waiter made its attempt: `acquired` when it got the
    /// lock (or found it held by this client, whose release will wake again).
    pub(crate) fn attempted(&mut self, acquired: bool) {
        if std::mem::take(&mut self.woken) {
            self.wake.done(Some(acquired));
        }
    }
}

impl Drop for WakeHandle {
    fn drop(&mut self) {
        if self.woken {
            // Woken but gone before its attempt (cancelled, or it failed):
            // pass the wake-up on so that the release is not lost.
            self.wake.done(None);
        }
        self.waiters.unregister(&self.channel);
    }
}

/// The wake-up registrations of one waiting acquisition: one per node that
/// may publish the release (one, except for Redlock).
/// A fair-lock waiter's registration for the grant (see
/// [`WakeHandle::expect_grant`]); gone on drop.
#[derive(Debug)]
pub(crate) struct GrantSlot {
    waiters: Arc<Waiters>,
    key: GrantKey,
    grant: Arc<Grant>,
}

impl GrantSlot {
    /// The token of a grant announced since the last call, if any.
    pub(crate) fn take(&self) -> Option<u64> {
        self.grant.token.lock().take()
    }

    /// Until a grant is announced (or the connection was lost, when it
    /// may have been missed).
    pub(crate) async fn announced(&self) {
        self.grant.notify.notified().await;
    }
}

impl Drop for GrantSlot {
    fn drop(&mut self) {
        let mut grants = self.waiters.grants.lock();
        if let Some(grant) = grants.get(&self.key) {
            if Arc::ptr_eq(grant, &self.grant) && Arc::strong_count(&self.grant) <= 2 {
                grants.remove(&self.key);
            }
        }
    }
}

#[derive(Debug)]
pub(crate) struct WaitSet {
    handles: Vec<WakeHandle>,
}

impl WaitSet {
    pub(crate) fn new(handles: Vec<WakeHandle>) -> Self {
        WaitSet { handles }
    }

    /// Waits until at least one subscription is confirmed, at most `timeout`
    /// (a release on any node wakes the waiter). Returns whether one was.
    pub(crate) async fn ready(&mut self, timeout: Duration) -> bool {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let mut pending: FuturesUnordered<_> =
            self.handles.iter_mut().map(|h| h.ready(timeout)).collect();
        while let Some(ready) = pending.next().await {
            if ready {
                return true;
            }
        }
        false
    }

    /// Resolves at the next wake-up on any node; the caller then reports its
    /// attempt with [`attempted`](WaitSet::attempted).
    pub(crate) async fn notified(&mut self) {
        match self.handles.as_mut_slice() {
            [one] => one.notified().await,
            handles => {
                let all = handles.iter_mut().map(|h| Box::pin(h.notified()));
                futures_util::future::select_all(all).await;
            }
        }
    }

    /// See [`WakeHandle::hand_off_elsewhere`]. Only for one channel: a
    /// Redlock waiter, woken by any of N masters, just attempts (the quorum
    /// decides), and a hand-off on one master must not hold it back.
    pub(crate) fn hand_off_elsewhere(&self) -> Option<Instant> {
        match self.handles.as_slice() {
            [one] => one.hand_off_elsewhere(),
            _ => None,
        }
    }

    /// See [`WakeHandle::attempted`].
    pub(crate) fn attempted(&mut self, acquired: bool) {
        for handle in &mut self.handles {
            handle.attempted(acquired);
        }
    }

    /// Marks every release so far as seen (see [`WakeHandle::seen`]).
    pub(crate) fn seen(&mut self) {
        for handle in &mut self.handles {
            handle.seen();
        }
    }

    /// Until a release after the last [`seen`](WaitSet::seen), on any channel.
    pub(crate) async fn released(&mut self) {
        match self.handles.as_mut_slice() {
            [] => std::future::pending().await,
            [one] => one.released().await,
            handles => {
                let all = handles.iter_mut().map(|h| Box::pin(h.released()));
                futures_util::future::select_all(all).await;
            }
        }
    }

    /// Registers `owner` for a fair lock's grant (see [`WakeHandle::expect_grant`]).
    pub(crate) fn expect_grant(&self, owner: &Arc<str>) -> Option<GrantSlot> {
        self.handles.first().map(|h| h.expect_grant(owner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel() -> Arc<str> {
        "lock:{t}:released".into()
    }

    /// Asserts that `waiter` is woken within a second.
    async fn woken(waiter: &mut WakeHandle, why: &str) {
        tokio::time::timeout(Duration::from_secs(1), waiter.notified())
            .await
            .unwrap_or_else(|_| panic!("not woken: {why}"));
    }

    /// Asserts that `waiter` is not woken within 50 ms.
    async fn not_woken(waiter: &mut WakeHandle, why: &str) {
        let woke = tokio::time::timeout(Duration::from_millis(50), waiter.notified()).await;
        assert!(woke.is_err(), "woken: {why}");
    }

    fn owner() -> Arc<str> {
        "client-a:1".into()
    }

    /// In-client hand-off: this process's release of `owner()` woke `first`
    /// early, and `first` took the lock before the release's message came.
    async fn handed_off_before_the_message(waiters: &Arc<Waiters>, first: &mut WakeHandle) {
        // (A release that wakes early: not the open one after a streak.)
        if let Some(entry) = waiters.map.lock().get(&channel()) {
            entry.wake.local_streak.store(0, Ordering::Relaxed);
        }
        waiters.wake_local(&channel(), &owner());
        first.notified().await;
        first.attempted(true);
    }

    #[tokio::test]
    async fn the_late_message_of_a_release_handed_off_here_wakes_nobody() {
        let waiters = Waiters::local();
        let mut first = waiters.register(&channel());
        let mut second = waiters.register(&channel());
        handed_off_before_the_message(&waiters, &mut first).await;
        waiters.message(&channel(), b"0 client-a:1");
        not_woken(
            &mut second,
            "no attempt against a lock this process's waiter just took",
        )
        .await;
        // Another release's message (or a bare `0`: a rollback, a force
        // release, an older client) wakes as ever.
        waiters.message(&channel(), b"0 client-b:7");
        woken(&mut second, "another release wakes a waiter").await;
        second.attempted(false);
        handed_off_before_the_message(&waiters, &mut first).await;
        waiters.message(&channel(), b"0");
        woken(&mut second, "a message naming no owner wakes a waiter").await;
    }

    #[tokio::test]
    async fn a_late_message_is_told_apart_once_and_only_until_the_next_release() {
        let waiters = Waiters::local();
        let mut first = waiters.register(&channel());
        let mut second = waiters.register(&channel());
        handed_off_before_the_message(&waiters, &mut first).await;
        // The same owner releases again (a scope that took the lock anew)
        // before the first message came: its message is news.
        waiters.expect_wake(&channel(), true);
        waiters.message(&channel(), b"0 client-a:1");
        woken(&mut second, "the next release's message wakes a waiter").await;
        second.attempted(false);
        // Told apart once: a second message of that owner wakes.
        handed_off_before_the_message(&waiters, &mut first).await;
        waiters.message(&channel(), b"0 client-a:1");
        waiters.message(&channel(), b"0 client-a:1");
        woken(&mut second, "only the one late message is dropped").await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_message_that_never_came_is_forgotten_after_the_grace() {
        let waiters = Waiters::local();
        let mut first = waiters.register(&channel());
        let mut second = waiters.register(&channel());
        handed_off_before_the_message(&waiters, &mut first).await;
        tokio::time::advance(HAND_OFF_GRACE).await;
        waiters.message(&channel(), b"0 client-a:1");
        woken(&mut second, "a message after the grace is news").await;
    }

    #[tokio::test]
    async fn a_wake_up_holds_other_waiters_back_until_its_attempt() {
        let waiters = Waiters::local();
        let mut first = waiters.register(&channel());
        let second = waiters.register(&channel());
        assert_eq!(second.hand_off_elsewhere(), None);
        waiters.wake_one(&channel());
        first.notified().await;
        assert_eq!(
            first.hand_off_elsewhere(),
            None,
            "the woken waiter attempts"
        );
        assert!(
            second.hand_off_elsewhere().is_some(),
            "the others hold back"
        );
        first.attempted(true);
        assert_eq!(second.hand_off_elsewhere(), None);
    }

    #[tokio::test]
    async fn a_message_during_a_local_hand_off_is_held_until_its_attempt() {
        let waiters = Waiters::local();
        let mut first = waiters.register(&channel());
        let mut second = waiters.register(&channel());
        // This process's release is queued: one waiter is woken early.
        waiters.wake_local(&channel(), &owner());
        first.notified().await;
        // Its release's message arrives before that waiter's answer: held.
        waiters.wake_one(&channel());
        not_woken(&mut second, "nobody else races the woken waiter").await;
        // The woken waiter lost (its attempt overtook the release): the held
        // message wakes the next one.
        first.attempted(false);
        woken(&mut second, "the held message was delivered").await;
        second.attempted(true);
    }

    #[tokio::test]
    async fn a_held_message_is_dropped_when_the_woken_waiter_got_the_lock() {
        let waiters = Waiters::local();
        let mut first = waiters.register(&channel());
        let mut second = waiters.register(&channel());
        waiters.wake_local(&channel(), &owner());
        first.notified().await;
        waiters.wake_one(&channel());
        first.attempted(true);
        not_woken(
            &mut second,
            "no attempt against a lock this process just took",
        )
        .await;
    }

    #[tokio::test]
    async fn a_release_on_its_way_holds_waiters_back_until_it_deleted_nothing() {
        let waiters = Waiters::local();
        let waiter = waiters.register(&channel());
        waiters.expect_wake(&channel(), true);
        assert!(waiter.hand_off_elsewhere().is_some());
        waiters.expect_wake(&channel(), false);
        assert_eq!(waiter.hand_off_elsewhere(), None);
    }

    #[tokio::test]
    async fn a_woken_waiter_that_leaves_before_its_attempt_passes_the_wake_up_on() {
        let waiters = Waiters::local();
        let mut first = waiters.register(&channel());
        let mut second = waiters.register(&channel());
        waiters.wake_one(&channel());
        first.notified().await;
        drop(first); // cancelled between its wake-up and its attempt
        woken(&mut second, "the wake-up was passed on").await;
    }

    /// The release that leaves the lock to every process (every
    /// `LOCAL_STREAK` + 1st) holds this process's woken waiter back when
    /// the previous release's wake-up reached another process.
    #[tokio::test(start_paused = true)]
    async fn an_open_release_lets_other_processes_go_first() {
        let waiters = Waiters::local();
        let mut waiter = waiters.register(&channel());
        waiters.listeners(&channel(), 2);
        for _ in 0..LOCAL_STREAK {
            waiters.wake_local(&channel(), &owner());
            waiter.notified().await;
            waiter.attempted(true);
        }
        waiters.wake_local(&channel(), &owner()); // the open release: nobody woken early
        let released = Instant::now();
        waiters.wake_one(&channel()); // its message
        waiter.notified().await;
        assert!(
            released.elapsed() >= OPEN_ROUND_YIELD,
            "woken after {:?}",
            released.elapsed()
        );
        waiter.attempted(false);
    }

    /// Without another process on the channel, the open release's message
    /// wakes this process's waiter at once.
    #[tokio::test(start_paused = true)]
    async fn an_open_release_without_other_processes_wakes_at_once() {
        let waiters = Waiters::local();
        let mut waiter = waiters.register(&channel());
        waiters.listeners(&channel(), 1); // this client's own subscription
        for _ in 0..LOCAL_STREAK {
            waiters.wake_local(&channel(), &owner());
            waiter.notified().await;
            waiter.attempted(true);
        }
        waiters.wake_local(&channel(), &owner());
        let released = Instant::now();
        waiters.wake_one(&channel());
        waiter.notified().await;
        assert_eq!(released.elapsed(), Duration::ZERO);
        waiter.attempted(true);
    }
}
