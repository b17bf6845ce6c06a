//! The task that owns the cluster's wake-up subscriptions: one RESP3
//! connection per master (the cluster client's), `SSUBSCRIBE`d to the
//! channels that have waiters (or, with classic pub/sub, `SUBSCRIBE`d on
//! one node, which hears every node's `PUBLISH`). The client resubscribes after reconnects by
//! itself; since messages may be lost meanwhile, a disconnection wakes every waiter. A slot
//! that moves to another master (resharding) loses its shard channels' subscriptions on the
//! old owner, which says so with an unasked `SUNSUBSCRIBE`: the task subscribes again (routed
//! to the new owner) and then wakes one waiter of the channel, since a release may have been
//! published on the new owner meanwhile. Its state (the channels with waiters)
//! lives in [`Waiters`], so a task started again subscribes to all of them.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::{configure, MakeBuilder};
use crate::backend::redis::command::bounded;
use crate::backend::redis::RedisSettings;
use crate::supervised::Supervised;
use crate::waiters::Waiters;
use crate::wakeups::Subscription;
use crate::BackendError;

/// The subscription of the cluster's waiters: the task below, supervised.
pub(crate) struct ClusterSubscription {
    make_builder: MakeBuilder,
    settings: RedisSettings,
    label: String,
    sharded: bool,
    waiters: Arc<Waiters>,
    task: Supervised,
}

impl std::fmt::Debug for ClusterSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSubscription")
            .field("label", &self.label)
            .field("sharded", &self.sharded)
            .finish_non_exhaustive()
    }
}

impl ClusterSubscription {
    pub(super) fn new(
        make_builder: MakeBuilder,
        settings: RedisSettings,
        label: String,
        sharded: bool,
    ) -> Self {
        ClusterSubscription {
            make_builder,
            settings,
            label,
            sharded,
            waiters: Waiters::subscribed(),
            task: Supervised::default(),
        }
    }

    /// The waiters it feeds.
    pub(super) fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }

    /// Whether it uses sharded pub/sub.
    pub(super) fn is_sharded(&self) -> bool {
        self.sharded
    }
}

impl Subscription for ClusterSubscription {
    fn ensure(&self) {
        self.task.ensure(|| {
            ShardedSubscriber::new(
                self.make_builder.clone(),
                self.settings.clone(),
                &self.waiters,
                self.label.clone(),
                self.sharded,
            )
            .run()
        });
    }

    fn is_running(&self) -> bool {
        self.task.is_running()
    }

    fn stop(&self) {
        self.task.stop();
    }
}

pub(super) struct ShardedSubscriber {
    make_builder: MakeBuilder,
    settings: RedisSettings,
    waiters: Weak<Waiters>,
    changes: mpsc::UnboundedReceiver<Arc<str>>,
    label: String,
    sharded: bool,
}

impl ShardedSubscriber {
    /// A subscriber that from now on receives `waiters`' changes.
    pub(super) fn new(
        make_builder: MakeBuilder,
        settings: RedisSettings,
        waiters: &Arc<Waiters>,
        label: String,
        sharded: bool,
    ) -> Self {
        ShardedSubscriber {
            make_builder,
            settings,
            changes: waiters.follow(),
            waiters: Arc::downgrade(waiters),
            label,
            sharded,
        }
    }

    pub(super) async fn run(mut self) {
        let (push_tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
        let mut backoff = Duration::from_millis(50);
        let mut conn = loop {
            let connecting = async {
                let client = configure((self.make_builder)(), &self.settings)
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(push_tx.clone())
                    .build()?;
                client.get_async_connection().await
            };
            match tokio::time::timeout(self.settings.connect_timeout, connecting).await {
                Ok(Ok(conn)) => break conn,
                Ok(Err(err)) => {
                    tracing::warn!(cluster = %self.label, error = %err, "lock wake-up subscription failed; retrying")
                }
                Err(_) => {
                    tracing::warn!(cluster = %self.label, "lock wake-up subscription timed out; retrying")
                }
            }
            if self.waiters.strong_count() == 0 {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2).min(Duration::from_secs(1));
        };
        let mut subscribed: HashSet<Arc<str>> = HashSet::new();
        // Channels whose (un)subscription failed, retried on a timer.
        let mut pending: HashSet<Arc<str>> = HashSet::new();
        // Channels the server unsubscribed (their slot moved to another
        // master): once subscribed again, one of their waiters is woken, since
        // a release may have been published on the new owner meanwhile.
        let mut moved: HashSet<Arc<str>> = HashSet::new();
        if let Some(waiters) = self.waiters.upgrade() {
            pending.extend(waiters.channels());
        }
        loop {
            if !pending.is_empty() {
                let Some(waiters) = self.waiters.upgrade() else {
                    return;
                };
                let changed: Vec<Arc<str>> = pending.drain().collect();
                for channel in changed {
                    match self
                        .reconcile(&mut conn, &waiters, &mut subscribed, &channel)
                        .await
                    {
                        Ok(()) => {
                            if moved.remove(&channel) && subscribed.contains(&channel) {
                                tracing::debug!(cluster = %self.label, channel = %channel, "subscribed again on the slot's new owner");
                                waiters.wake_one(&channel);
                            }
                        }
                        Err(err) => {
                            tracing::warn!(cluster = %self.label, channel = %channel, error = %err, "sharded subscription failed; retrying");
                            pending.insert(channel);
                        }
                    }
                }
            }
            let retry = tokio::time::sleep(if pending.is_empty() {
                Duration::from_secs(3600)
            } else {
                Duration::from_millis(200)
            });
            tokio::select! {
                change = self.changes.recv() => {
                    let Some(channel) = change else { return };
                    pending.insert(channel);
                    while let Ok(more) = self.changes.try_recv() {
                        pending.insert(more);
                    }
                }
                push = pushes.recv() => {
                    let Some(push) = push else { return };
                    let Some(waiters) = self.waiters.upgrade() else { return };
                    match push.kind {
                        PushKind::SMessage | PushKind::Message => {
                            if let Some(channel) = push.data.first().and_then(channel_name) {
                                let payload = match push.data.get(1) {
                                    Some(Value::BulkString(bytes)) => bytes.as_slice(),
                                    _ => b"",
                                };
                                waiters.message(&channel, payload);
                            }
                        }
                        // The server drops the shard channels of a slot that
                        // moved to another master (`SUNSUBSCRIBE` pushed
                        // unasked): subscribe again, routed to the new owner.
                        PushKind::SUnsubscribe | PushKind::Unsubscribe => {
                            let channel = push.data.first().and_then(channel_name);
                            let channel = channel.and_then(|name| subscribed.take(name.as_str()));
                            if let Some(channel) = channel {
                                if waiters.is_wanted(&channel) {
                                    tracing::debug!(cluster = %self.label, channel = %channel, "the server dropped a subscription (slot moved); subscribing again");
                                    waiters.set_ready(&channel, false);
                                    moved.insert(channel.clone());
                                    pending.insert(channel);
                                } else {
                                    subscribed.insert(channel);
                                }
                            }
                        }
                        PushKind::Disconnection => waiters.wake_all(),
                        _ => {}
                    }
                }
                () = retry => {}
            }
        }
    }

    async fn reconcile(
        &self,
        conn: &mut ClusterConnection,
        waiters: &Waiters,
        subscribed: &mut HashSet<Arc<str>>,
        channel: &Arc<str>,
    ) -> Result<(), BackendError> {
        let timeout = self.settings.response_timeout;
        match (waiters.is_wanted(channel), subscribed.contains(channel)) {
            (true, false) => {
                if self.sharded {
                    bounded(timeout, conn.ssubscribe(&**channel)).await?;
                } else {
                    bounded(timeout, conn.subscribe(&**channel)).await?;
                }
                subscribed.insert(channel.clone());
                waiters.set_ready(channel, true);
            }
            (true, true) => waiters.set_ready(channel, true),
            (false, true) => {
                if self.sharded {
                    bounded(timeout, conn.sunsubscribe(&**channel)).await?;
                } else {
                    bounded(timeout, conn.unsubscribe(&**channel)).await?;
                }
                subscribed.remove(channel);
            }
            (false, false) => {}
        }
        Ok(())
    }
}

fn channel_name(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}
