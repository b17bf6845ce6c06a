//! Waiters of this process, per wake-up channel: who to wake when a lock is
//! released.
//!
//! Each channel has one entry, reference-counted by the waiters registered on
//! it. A release message wakes one local waiter (`Notify::notify_one`): the
//! others keep sleeping instead of racing for a lock only one can get, and the
//! woken waiter's next release wakes the next. A woken waiter that was
//! cancelled passes its wake-up on (tokio's `Notified` does that on drop).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

/// How long a wake-up holds other waiters back at most: a woken waiter that
/// neither attempts nor leaves within it (a stalled task) stops blocking.
const HAND_OFF_GRACE: Duration = Duration::from_secs(1);

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
    /// Set by a wake-up, until the woken waiter has made its attempt.
    hand_off_until: Mutex<Option<Instant>>,
}

impl Wake {
    fn wake_one(&self) {
        *self.hand_off_until.lock().unwrap() = Some(Instant::now() + HAND_OFF_GRACE);
        self.notify.notify_one();
    }

    fn hand_off_done(&self) {
        *self.hand_off_until.lock().unwrap() = None;
    }
}

/// The waiters of one client (Redis) or one in-memory store.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    map: Mutex<HashMap<Arc<str>, Entry>>,
    /// Told of every channel that gains its first or loses its last waiter,
    /// so a subscriber can reconcile its server-side subscriptions.
    changes: Option<mpsc::UnboundedSender<Arc<str>>>,
}

impl Waiters {
    /// Waiters that need no subscription (the in-memory store).
    pub(crate) fn local() -> Arc<Self> {
        Arc::new(Waiters::default())
    }

    /// Waiters whose channels a subscriber follows; it receives the changes.
    pub(crate) fn subscribed() -> (Arc<Self>, mpsc::UnboundedReceiver<Arc<str>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let waiters = Waiters {
            map: Mutex::default(),
            changes: Some(tx),
        };
        (Arc::new(waiters), rx)
    }

    /// Registers one waiter on `channel`.
    pub(crate) fn register(self: &Arc<Self>, channel: &Arc<str>) -> WakeHandle {
        let mut map = self.map.lock().unwrap();
        let entry = map.entry(channel.clone()).or_insert_with(|| Entry {
            refs: 0,
            wake: Arc::default(),
            ready: watch::Sender::new(self.changes.is_none()),
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
        let mut map = self.map.lock().unwrap();
        let entry = map.get_mut(channel)?;
        if !*entry.ready.borrow() {
            return None;
        }
        entry.refs += 1;
        Some(WakeHandle::new(self, channel, entry))
    }

    fn unregister(&self, channel: &Arc<str>) {
        let mut map = self.map.lock().unwrap();
        let Some(entry) = map.get_mut(channel) else {
            return;
        };
        entry.refs -= 1;
        if entry.refs == 0 {
            map.remove(channel);
            drop(map);
            self.changed(channel);
        }
    }

    fn changed(&self, channel: &Arc<str>) {
        if let Some(changes) = &self.changes {
            let _ = changes.send(channel.clone());
        }
    }

    /// Wakes one waiter of `channel`, if this process has any.
    pub(crate) fn wake_one(&self, channel: &str) {
        if let Some(entry) = self.map.lock().unwrap().get(channel) {
            entry.wake.wake_one();
        }
    }

    /// A release of `channel` by this process is on its way (`true`): hold
    /// this process's waiters back until its wake-up has been taken and the
    /// woken waiter has made its attempt. `false`: that release deleted
    /// nothing, so no wake-up comes.
    pub(crate) fn expect_wake(&self, channel: &str, expected: bool) {
        if let Some(entry) = self.map.lock().unwrap().get(channel) {
            if expected {
                *entry.wake.hand_off_until.lock().unwrap() = Some(Instant::now() + HAND_OFF_GRACE);
            } else {
                entry.wake.hand_off_done();
            }
        }
    }

    /// Wakes every waiter (after a reconnect, when messages may have been lost).
    pub(crate) fn wake_all(&self) {
        for entry in self.map.lock().unwrap().values() {
            entry.wake.hand_off_done();
            entry.wake.notify.notify_waiters();
        }
    }

    /// Whether `channel` has waiters.
    pub(crate) fn is_wanted(&self, channel: &str) -> bool {
        self.map.lock().unwrap().contains_key(channel)
    }

    /// Every channel that has waiters.
    pub(crate) fn channels(&self) -> Vec<Arc<str>> {
        self.map.lock().unwrap().keys().cloned().collect()
    }

    /// Marks the subscription of `channel` as confirmed (or not) by the server.
    pub(crate) fn set_ready(&self, channel: &str, ready: bool) {
        if let Some(entry) = self.map.lock().unwrap().get(channel) {
            entry.ready.send_replace(ready);
        }
    }

    /// Marks every subscription unconfirmed (the connection is gone).
    pub(crate) fn set_all_unready(&self) {
        for entry in self.map.lock().unwrap().values() {
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
}

impl WakeHandle {
    fn new(waiters: &Arc<Waiters>, channel: &Arc<str>, entry: &Entry) -> Self {
        WakeHandle {
            waiters: waiters.clone(),
            channel: channel.clone(),
            wake: entry.wake.clone(),
            ready: entry.ready.subscribe(),
            woken: false,
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
    pub(crate) async fn notified(&mut self) {
        self.wake.notify.notified().await;
        self.woken = true;
    }

    /// Until when another waiter of this process, just woken, is taking the
    /// lock: this one should not race it to the server meanwhile.
    pub(crate) fn hand_off_elsewhere(&self) -> Option<Instant> {
        if self.woken {
            return None;
        }
        let until = (*self.wake.hand_off_until.lock().unwrap())?;
        (Instant::now() < until).then_some(until)
    }

    /// Reports that this waiter made its attempt (whatever its answer).
    pub(crate) fn attempted(&mut self) {
        if std::mem::take(&mut self.woken) {
            self.wake.hand_off_done();
        }
    }
}

impl Drop for WakeHandle {
    fn drop(&mut self) {
        if self.woken {
            // Woken but gone before its attempt (cancelled, or it failed):
            // pass the wake-up on so that the release is not lost.
            self.wake.hand_off_done();
            self.wake.notify.notify_one();
        }
        self.waiters.unregister(&self.channel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel() -> Arc<str> {
        "lock:{t}:released".into()
    }

    #[tokio::test]
    async fn a_wake_up_holds_other_waiters_back_until_its_attempt() {
        let waiters = Waiters::local();
        let mut first = waiters.register(&channel());
        let second = waiters.register(&channel());
        assert_eq!(second.hand_off_elsewhere(), None);
        waiters.wake_one(&channel());
        first.notified().await;
        assert_eq!(first.hand_off_elsewhere(), None, "the woken waiter attempts");
        assert!(second.hand_off_elsewhere().is_some(), "the others hold back");
        first.attempted();
        assert_eq!(second.hand_off_elsewhere(), None);
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
        assert_eq!(second.hand_off_elsewhere(), None);
        tokio::time::timeout(Duration::from_secs(1), second.notified())
            .await
            .expect("the wake-up was passed on");
    }
}
