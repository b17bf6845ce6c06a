//! The task that owns a standalone (or Sentinel) backend's subscription
//! connection: it subscribes to the channels that have waiters, unsubscribes
//! from those that lost them, wakes a waiter per release message, and
//! reconnects (resubscribing and waking everyone, since messages may have
//! been missed) when the connection drops or Sentinel moves the master.
//!
//! Its state is the set of channels with waiters, kept in [`Waiters`]: a
//! task started again (after its runtime was dropped) subscribes to all of
//! them and goes on.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::mpsc;

use super::NodeCell;
use crate::backend::redis::command::bounded;
use crate::backend::redis::RedisSettings;
use crate::supervised::Supervised;
use crate::waiters::Waiters;
use crate::wakeups::Subscription;
use crate::BackendError;

/// The subscription of one master's waiters: the task below, supervised.
#[derive(Debug)]
pub(crate) struct NodeSubscription {
    cell: Arc<NodeCell>,
    settings: RedisSettings,
    waiters: Arc<Waiters>,
    task: Supervised,
}

impl NodeSubscription {
    pub(super) fn new(cell: Arc<NodeCell>, settings: RedisSettings) -> Self {
        NodeSubscription {
            cell,
            settings,
            waiters: Waiters::subscribed(),
            task: Supervised::default(),
        }
    }

    /// The waiters it feeds.
    pub(super) fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }
}

impl Subscription for NodeSubscription {
    fn ensure(&self) {
        self.task.ensure(|| {
            Subscriber::new(self.cell.clone(), self.settings.clone(), &self.waiters).run()
        });
    }

    fn is_running(&self) -> bool {
        self.task.is_running()
    }

    fn stop(&self) {
        self.task.stop();
    }
}

pub(super) struct Subscriber {
    cell: Arc<NodeCell>,
    settings: RedisSettings,
    waiters: Weak<Waiters>,
    changes: mpsc::UnboundedReceiver<Arc<str>>,
}

impl Subscriber {
    /// A subscriber that from now on receives `waiters`' changes.
    pub(super) fn new(
        cell: Arc<NodeCell>,
        settings: RedisSettings,
        waiters: &Arc<Waiters>,
    ) -> Self {
        Subscriber {
            cell,
            settings,
            changes: waiters.follow(),
            waiters: Arc::downgrade(waiters),
        }
    }

    pub(super) async fn run(mut self) {
        let mut subscribed: HashSet<Arc<str>> = HashSet::new();
        let mut connection: Option<(PubSubSink, PubSubStream)> = None;
        let mut backoff = Duration::from_millis(20);
        loop {
            let Some(waiters) = self.waiters.upgrade() else {
                return;
            };
            if connection.is_none() && !waiters.channels().is_empty() {
                match self.connect(&waiters).await {
                    Ok((conn, channels)) => {
                        connection = Some(conn);
                        subscribed = channels;
                        backoff = Duration::from_millis(20);
                        waiters.wake_all();
                    }
                    Err(err) => {
                        tracing::warn!(server = %self.cell.get().server, error = %err, "lock wake-up subscription failed; retrying");
                        drop(waiters);
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            change = self.changes.recv() => if change.is_none() { return },
                        }
                        backoff = backoff.saturating_mul(2).min(Duration::from_secs(1));
                        continue;
                    }
                }
            }
            drop(waiters);
            let Some((sink, stream)) = connection.as_mut() else {
                match self.changes.recv().await {
                    Some(_) => continue,
                    None => return,
                }
            };
            tokio::select! {
                change = self.changes.recv() => {
                    let Some(first) = change else { return };
                    let mut changed = vec![first];
                    while let Ok(more) = self.changes.try_recv() {
                        changed.push(more);
                    }
                    let Some(waiters) = self.waiters.upgrade() else { return };
                    if let Err(err) = self.reconcile(sink, &waiters, &mut subscribed, changed).await {
                        tracing::warn!(server = %self.cell.get().server, error = %err, "lock wake-up subscription lost; reconnecting");
                        connection = None;
                        waiters.set_all_unready();
                    }
                }
                () = self.cell.changed.notified() => {
                    // Sentinel moved us to a new master: subscribe there.
                    connection = None;
                    if let Some(waiters) = self.waiters.upgrade() {
                        waiters.set_all_unready();
                    }
                }
                message = stream.next() => match message {
                    Some(message) => {
                        if let Some(waiters) = self.waiters.upgrade() {
                            waiters.message(message.get_channel_name(), message.get_payload_bytes());
                        }
                    }
                    None => {
                        tracing::debug!(server = %self.cell.get().server, "lock wake-up connection closed; reconnecting");
                        connection = None;
                        if let Some(waiters) = self.waiters.upgrade() {
                            waiters.set_all_unready();
                        }
                    }
                },
            }
        }
    }

    /// Opens the connection and subscribes to every channel that has waiters.
    async fn connect(
        &self,
        waiters: &Waiters,
    ) -> Result<((PubSubSink, PubSubStream), HashSet<Arc<str>>), BackendError> {
        let client = self.cell.get().client.clone();
        let connecting = client.get_async_pubsub();
        let pubsub = match tokio::time::timeout(self.settings.connect_timeout, connecting).await {
            Ok(result) => result?,
            Err(_) => return Err(BackendError::Timeout(self.settings.connect_timeout)),
        };
        let (mut sink, stream) = pubsub.split();
        let channels = waiters.channels();
        if !channels.is_empty() {
            let names: Vec<&str> = channels.iter().map(|c| &**c).collect();
            self.bounded(sink.subscribe(names)).await?;
        }
        for channel in &channels {
            waiters.set_ready(channel, true);
        }
        Ok(((sink, stream), channels.into_iter().collect()))
    }

    /// Brings the server's subscriptions in line with the channels that have waiters.
    async fn reconcile(
        &self,
        sink: &mut PubSubSink,
        waiters: &Waiters,
        subscribed: &mut HashSet<Arc<str>>,
        changed: Vec<Arc<str>>,
    ) -> Result<(), BackendError> {
        let mut to_subscribe = Vec::new();
        let mut to_unsubscribe = Vec::new();
        for channel in changed {
            let wanted = waiters.is_wanted(&channel);
            let active = subscribed.contains(&channel);
            match (wanted, active) {
                (true, false) if !to_subscribe.contains(&channel) => to_subscribe.push(channel),
                (true, true) => waiters.set_ready(&channel, true),
                (false, true) if !to_unsubscribe.contains(&channel) => to_unsubscribe.push(channel),
                _ => {}
            }
        }
        if !to_unsubscribe.is_empty() {
            let names: Vec<&str> = to_unsubscribe.iter().map(|c| &**c).collect();
            self.bounded(sink.unsubscribe(names)).await?;
            for channel in &to_unsubscribe {
                subscribed.remove(channel);
            }
        }
        if !to_subscribe.is_empty() {
            let names: Vec<&str> = to_subscribe.iter().map(|c| &**c).collect();
            self.bounded(sink.subscribe(names)).await?;
            for channel in to_subscribe {
                waiters.set_ready(&channel, true);
                subscribed.insert(channel);
            }
        }
        Ok(())
    }

    async fn bounded<T>(
        &self,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, BackendError> {
        bounded(self.settings.response_timeout, fut).await
    }
}
