//! The task that owns the Postgres backend's `LISTEN` connection: it
//! listens to the server channels of the lock channels that have waiters,
//! stops listening to those that lost them, hands every notification to the
//! waiters of the lock channel its payload names, and reconnects with
//! back-off (listening again and waking everyone, since notifications may
//! have been missed) when the connection drops.
//!
//! The connection is its own, never a pooled one: `LISTEN` belongs to a
//! session. Its state is the set of channels with waiters, kept in
//! [`Waiters`]: a task started again (after its runtime was dropped) listens
//! to all of them and goes on.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client, Config};

use super::connection::{bounded, runtime, PgSettings};
use super::schema::{self, Names};
use crate::supervised::Supervised;
use crate::waiters::Waiters;
use crate::wakeups::Subscription;
use crate::BackendError;

/// The first pause after a failed connect; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(20);
/// The longest pause between two connects.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The subscription of the backend's waiters: the task below, supervised.
#[derive(Debug)]
pub(crate) struct PgSubscription {
    config: Config,
    settings: PgSettings,
    names: Arc<Names>,
    server: String,
    waiters: Arc<Waiters>,
    task: Supervised,
}

impl PgSubscription {
    pub(super) fn new(
        config: Config,
        settings: PgSettings,
        names: Arc<Names>,
        server: String,
    ) -> Self {
        PgSubscription {
            config,
            settings,
            names,
            server,
            waiters: Waiters::subscribed(),
            task: Supervised::default(),
        }
    }

    /// The waiters it feeds.
    pub(super) fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }
}

impl Subscription for PgSubscription {
    fn ensure(&self) {
        self.task.ensure(|| {
            Subscriber {
                config: self.config.clone(),
                settings: self.settings.clone(),
                names: self.names.clone(),
                server: self.server.clone(),
                changes: self.waiters.follow(),
                waiters: Arc::downgrade(&self.waiters),
            }
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

/// The open `LISTEN` connection: its client, the notifications its driver
/// forwards, and the driver (aborted when this is dropped).
struct Listening {
    client: Client,
    notifications: mpsc::UnboundedReceiver<String>,
    driver: JoinHandle<()>,
    /// Server channel -> the lock channels listened to through it.
    channels: HashMap<String, HashSet<Arc<str>>>,
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

struct Subscriber {
    config: Config,
    settings: PgSettings,
    names: Arc<Names>,
    server: String,
    waiters: Weak<Waiters>,
    changes: mpsc::UnboundedReceiver<Arc<str>>,
}

impl Subscriber {
    async fn run(mut self) {
        let mut connection: Option<Listening> = None;
        let mut backoff = FIRST_BACKOFF;
        loop {
            let Some(waiters) = self.waiters.upgrade() else {
                return;
            };
            if connection.is_none() && !waiters.channels().is_empty() {
                match self.connect(&waiters).await {
                    Ok(listening) => {
                        connection = Some(listening);
                        backoff = FIRST_BACKOFF;
                        waiters.wake_all();
                    }
                    Err(err) => {
                        tracing::warn!(server = %self.server, error = %err, "lock wake-up LISTEN connection failed; retrying");
                        drop(waiters);
                        tokio::select! {
                            () = tokio::time::sleep(backoff) => {}
                            change = self.changes.recv() => if change.is_none() { return },
                        }
                        backoff = backoff.saturating_mul(2).min(MAX_BACKOFF);
                        continue;
                    }
                }
            }
            drop(waiters);
            let Some(listening) = connection.as_mut() else {
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
                    if let Err(err) = self.reconcile(listening, &waiters, changed).await {
                        tracing::warn!(server = %self.server, error = %err, "lock wake-up LISTEN connection lost; reconnecting");
                        connection = None;
                        waiters.set_all_unready();
                    }
                }
                notification = listening.notifications.recv() => match notification {
                    Some(payload) => {
                        if let (Some(waiters), Some((channel, message))) =
                            (self.waiters.upgrade(), schema::parse_payload(&payload))
                        {
                            waiters.message(channel, message.as_bytes());
                        }
                    }
                    None => {
                        tracing::debug!(server = %self.server, "lock wake-up LISTEN connection closed; reconnecting");
                        connection = None;
                        if let Some(waiters) = self.waiters.upgrade() {
                            waiters.set_all_unready();
                        }
                    }
                },
            }
        }
    }

    /// Opens the connection and listens to every channel that has waiters.
    async fn connect(&self, waiters: &Waiters) -> Result<Listening, BackendError> {
        let runtime = runtime()?;
        let config = super::tls::effective(&self.config, &self.settings.tls);
        let (client, mut connection) = bounded(
            self.settings.connect_timeout,
            config.connect(self.settings.tls.clone()),
        )
        .await?;
        let (tx, notifications) = mpsc::unbounded_channel();
        let driver = runtime.spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(note)) => {
                        if tx.send(note.payload().to_owned()).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(err) => {
                        tracing::debug!(error = %err, "lock wake-up LISTEN connection ended");
                        return;
                    }
                }
            }
        });
        let mut listening = Listening {
            client,
            notifications,
            driver,
            channels: HashMap::new(),
        };
        let channels = waiters.channels();
        let mut listen = Vec::new();
        for channel in &channels {
            let server = schema::server_channel(&self.names, channel);
            let entry = listening.channels.entry(server.clone()).or_default();
            if entry.is_empty() {
                listen.push(server);
            }
            entry.insert(channel.clone());
        }
        self.send(&listening.client, "LISTEN", &listen).await?;
        for channel in &channels {
            waiters.set_ready(channel, true);
        }
        Ok(listening)
    }

    /// Brings the server's `LISTEN`s in line with the channels that have waiters.
    async fn reconcile(
        &self,
        listening: &mut Listening,
        waiters: &Waiters,
        changed: Vec<Arc<str>>,
    ) -> Result<(), BackendError> {
        let mut listen = Vec::new();
        let mut unlisten = Vec::new();
        let mut ready = Vec::new();
        for channel in changed {
            let server = schema::server_channel(&self.names, &channel);
            let wanted = waiters.is_wanted(&channel);
            let entry = listening.channels.entry(server.clone()).or_default();
            let active = entry.contains(&channel);
            match (wanted, active) {
                (true, false) => {
                    if entry.is_empty() && !listen.contains(&server) {
                        listen.push(server);
                    }
                    entry.insert(channel.clone());
                    ready.push(channel);
                }
                (true, true) => waiters.set_ready(&channel, true),
                (false, true) => {
                    entry.remove(&channel);
                    if entry.is_empty() {
                        listening.channels.remove(&server);
                        if !unlisten.contains(&server) {
                            unlisten.push(server);
                        }
                    }
                }
                (false, false) => {
                    if entry.is_empty() {
                        listening.channels.remove(&server);
                    }
                }
            }
        }
        // A server channel both left and taken again in this batch stays.
        unlisten.retain(|server| !listening.channels.contains_key(server));
        self.send(&listening.client, "UNLISTEN", &unlisten).await?;
        self.send(&listening.client, "LISTEN", &listen).await?;
        for channel in ready {
            waiters.set_ready(&channel, true);
        }
        Ok(())
    }

    /// `LISTEN` or `UNLISTEN` of `channels`, as one simple query.
    async fn send(
        &self,
        client: &Client,
        verb: &str,
        channels: &[String],
    ) -> Result<(), BackendError> {
        if channels.is_empty() {
            return Ok(());
        }
        // The server channels are `dl_` and hex digits: nothing to quote.
        let sql: String = channels.iter().map(|c| format!("{verb} {c};")).collect();
        bounded(self.settings.response_timeout, client.batch_execute(&sql)).await
    }
}
