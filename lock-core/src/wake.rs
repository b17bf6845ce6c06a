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

#[derive(Debug)]
struct Entry {
    refs: usize,
    notify: Arc<Notify>,
    ready: watch::Sender<bool>,
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
            notify: Arc::new(Notify::new()),
            ready: watch::Sender::new(self.changes.is_none()),
        });
        entry.refs += 1;
        let first = entry.refs == 1;
        let handle = WakeHandle {
            waiters: self.clone(),
            channel: channel.clone(),
            notify: entry.notify.clone(),
            ready: entry.ready.subscribe(),
        };
        drop(map);
        if first {
            self.changed(channel);
        }
        handle
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
            entry.notify.notify_one();
        }
    }

    /// Wakes every waiter (after a reconnect, when messages may have been lost).
    pub(crate) fn wake_all(&self) {
        for entry in self.map.lock().unwrap().values() {
            entry.notify.notify_waiters();
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
    notify: Arc<Notify>,
    ready: watch::Receiver<bool>,
}

impl WakeHandle {
    /// Waits until the server confirmed the subscription, at most `timeout`.
    /// Returns whether it did; a waiter that goes on without confirmation
    /// only risks latency (its wait is bounded by the holder's TTL).
    pub(crate) async fn ready(&mut self, timeout: Duration) -> bool {
        matches!(
            tokio::time::timeout(timeout, self.ready.wait_for(|ready| *ready)).await,
            Ok(Ok(_))
        )
    }

    /// Resolves at the next wake-up of this channel.
    pub(crate) async fn notified(&self) {
        self.notify.notified().await
    }
}

impl Drop for WakeHandle {
    fn drop(&mut self) {
        self.waiters.unregister(&self.channel);
    }
}

/// The wake-up registrations of one waiting acquisition: one per node that
/// may publish the release (one, except for Redlock).
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

    /// Resolves at the next wake-up on any node.
    pub(crate) async fn notified(&self) {
        match self.handles.as_slice() {
            [one] => one.notified().await,
            handles => {
                let all = handles.iter().map(|h| Box::pin(h.notified()));
                futures_util::future::select_all(all).await;
            }
        }
    }
}
