//! One Redis master, standalone or found through Sentinel: the multiplexed
//! command connection (`node.rs`), following the master across failovers
//! (`sentinel.rs`), the subscription connection that wakes waiters
//! (`subscriber.rs`), and the route of the user's data connection
//! (`data.rs`).

mod data;
pub(crate) mod node;
pub(crate) mod sentinel;
mod subscriber;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use redis::aio::ConnectionManager;
use tokio::sync::Notify;

use self::data::NodeRoute;
use self::node::{Heard, Node};
use self::sentinel::{Follower, Sentinel};
use self::subscriber::NodeSubscription;
use super::redis::command::{self, Replies};
use super::redis::reply::{self, command_error};
use super::redis::scripts::{self, Scripts};
use super::redis::{inspect, layouts, leader, listeners, RedisSettings};
use super::{
    names, Attempt, Backend, DataConnection, LeaderRecord, Released, RenewItem, Renewal,
    Unsupported,
};
use crate::info::{FamilyState, Found};
use crate::name::LockKey;
use crate::supervised::Supervised;
use crate::sync::Mutex;
use crate::wakeups::Wakeups;
use crate::{lease, BackendError, LockError, LockInfo};

/// The current node, swapped when Sentinel reports a new master.
#[derive(Debug)]
pub(crate) struct NodeCell {
    node: Mutex<Arc<Node>>,
    /// Told when the node changed, so the subscriber moves to it.
    pub(crate) changed: Notify,
}

impl NodeCell {
    pub(crate) fn get(&self) -> Arc<Node> {
        self.node.lock().clone()
    }
}

/// One Redis master: standalone, or found through Sentinel.
#[derive(Debug)]
pub(crate) struct RedisBackend {
    cell: Arc<NodeCell>,
    /// With Sentinel: what keeps `cell` on the current master.
    follower: Option<Arc<Follower>>,
    /// The task that follows the sentinels' announcements (with Sentinel).
    watcher: Supervised,
    label: String,
    settings: RedisSettings,
    scripts: Arc<Scripts>,
    /// The subscription that wakes this master's waiters (see `wakeups()`).
    subscription: Arc<NodeSubscription>,
}

impl RedisBackend {
    /// A standalone master.
    pub(crate) async fn connect(
        client: redis::Client,
        settings: RedisSettings,
    ) -> Result<Self, LockError> {
        let scripts = Scripts::new(false);
        let node = Node::connect(client, &settings, &scripts).await?;
        let label = node.server.clone();
        Ok(Self::with_node(node, None, label, settings, scripts))
    }

    /// The master that `sentinel` reports, followed across failovers.
    pub(crate) async fn connect_sentinel(
        sentinel: Sentinel,
        settings: RedisSettings,
    ) -> Result<Self, LockError> {
        let scripts = Scripts::new(false);
        let client = sentinel.resolve(&settings).await?;
        let node = Node::connect(client, &settings, &scripts).await?;
        let label = sentinel.label();
        Ok(Self::with_node(
            node,
            Some(sentinel),
            label,
            settings,
            scripts,
        ))
    }

    fn with_node(
        node: Node,
        sentinel: Option<Sentinel>,
        label: String,
        settings: RedisSettings,
        scripts: Scripts,
    ) -> Self {
        let cell = Arc::new(NodeCell {
            node: Mutex::new(Arc::new(node)),
            changed: Notify::new(),
        });
        let scripts = Arc::new(scripts);
        let follower = sentinel.map(|sentinel| {
            Arc::new(Follower::new(
                sentinel,
                cell.clone(),
                settings.clone(),
                scripts.clone(),
            ))
        });
        let subscription = Arc::new(NodeSubscription::new(cell.clone(), settings.clone()));
        let backend = RedisBackend {
            cell,
            follower,
            watcher: Supervised::default(),
            label,
            settings,
            scripts,
            subscription,
        };
        backend.ensure_watcher();
        backend
    }

    /// With Sentinel, (re)starts the task that follows the sentinels'
    /// announcements on the runtime in use (cheap while it runs).
    fn ensure_watcher(&self) {
        if let Some(follower) = &self.follower {
            self.watcher.ensure(|| follower.clone().watch());
        }
    }

    /// The address of the node commands go to now.
    pub(crate) fn node_server(&self) -> String {
        self.cell.get().server.clone()
    }

    /// Asks Sentinel for the master after an error that may mean a failover,
    /// and moves to it when it changed. Returns the node to retry on, or an
    /// error when the sentinels name a master this client cannot reach.
    async fn follow_master(&self, failed: &Arc<Node>) -> Result<Arc<Node>, BackendError> {
        match &self.follower {
            Some(follower) => follower.follow_master(failed).await,
            None => Ok(failed.clone()),
        }
    }

    /// The node commands go to now: with Sentinel, never one the sentinels
    /// deposed (see [`Follower::usable_node`]).
    async fn usable_node(&self) -> Result<Arc<Node>, BackendError> {
        match &self.follower {
            Some(follower) => follower.usable_node().await,
            None => Ok(self.cell.get()),
        }
    }

    /// Sends `pipe` (`count` kept replies) to the current node, with `WAIT`
    /// appended in `sync_replicas` mode when `write`; when the connection had
    /// dropped (killed, server restarted) or the node stopped being the
    /// master (failover), sends it once more to the node it reconnected or
    /// moved to. The flag says whether it was sent once more (the first
    /// send may have run without its answer arriving).
    async fn exec(
        &self,
        pipe: &redis::Pipeline,
        count: usize,
        write: bool,
    ) -> Result<(Replies, Arc<Node>, bool), BackendError> {
        self.exec_sending(pipe, count, write, false).await
    }

    /// [`exec`](Self::exec); `once`: never sent again, neither after a
    /// dropped connection nor after `NOSCRIPT` ([`command::run_once`]).
    async fn exec_sending(
        &self,
        pipe: &redis::Pipeline,
        count: usize,
        write: bool,
        once: bool,
    ) -> Result<(Replies, Arc<Node>, bool), BackendError> {
        let synced;
        let (pipe, count, timeout) = match self.settings.sync_replicas {
            Some((replicas, wait)) if write => {
                let mut with_wait = pipe.clone();
                scripts::wait(&mut with_wait, replicas, wait);
                synced = with_wait;
                (&synced, count + 1, self.settings.write_timeout())
            }
            _ => (pipe, count, self.settings.response_timeout),
        };
        let scripts = self.scripts.all();
        let node = self.usable_node().await?;
        if once {
            let mut taken = node.conn.take(timeout).await?;
            let outcome = command::run_once(&mut taken.conn, pipe, count, &scripts, timeout).await;
            node.conn.settle(&taken, Heard::of(&outcome));
            return outcome.map(|replies| (replies, node, false));
        }
        match Self::run_on(&node, pipe, count, &scripts, timeout).await {
            Err(err) if self.worth_retrying(&err) => {
                tracing::debug!(server = %node.server, error = %err, "retrying once");
                let node = self.follow_master(&node).await?;
                let replies = Self::run_on(&node, pipe, count, &scripts, timeout).await?;
                Ok((replies, node, true))
            }
            Err(err) => Err(err),
            Ok(replies) => Ok((replies, node, false)),
        }
    }

    /// [`command::run`] on `node`'s connection (a new one when the current
    /// one was found silent), its outcome recorded there.
    async fn run_on(
        node: &Node,
        pipe: &redis::Pipeline,
        count: usize,
        scripts: &[&redis::Script],
        timeout: Duration,
    ) -> Result<Replies, BackendError> {
        let mut taken = node.conn.take(timeout).await?;
        let outcome = command::run(&mut taken.conn, pipe, count, scripts, timeout).await;
        node.conn.settle(&taken, Heard::of(&outcome));
        outcome
    }

    /// Errors after which the command may succeed on a reconnected (or, with
    /// Sentinel, a newly elected) master.
    fn worth_retrying(&self, err: &BackendError) -> bool {
        match err {
            BackendError::Redis(err) => {
                err.is_connection_dropped()
                    || (self.follower.is_some()
                        && (err.is_io_error()
                            || err.is_connection_refusal()
                            || matches!(err.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))))
            }
            BackendError::Timeout(_) => self.follower.is_some(),
            _ => false,
        }
    }

    /// Maps a failure of a command on `key` to the error the caller sees.
    async fn error(&self, key: &LockKey, err: BackendError) -> LockError {
        let node = self.cell.get();
        let mut conn = node.conn.current();
        command_error(
            &mut conn,
            self.settings.response_timeout,
            key,
            &node.server,
            err,
        )
        .await
    }

    /// Runs the one-command write `pipe` on `key` and reads its integer reply.
    async fn exec_int(&self, key: &LockKey, pipe: &redis::Pipeline) -> Result<i64, LockError> {
        self.exec_int_sent(key, pipe).await.map(|(n, _)| n)
    }

    /// [`exec_int`](Self::exec_int), and whether the command was sent once
    /// more after the connection dropped.
    async fn exec_int_sent(
        &self,
        key: &LockKey,
        pipe: &redis::Pipeline,
    ) -> Result<(i64, bool), LockError> {
        self.exec_int_sending(key, pipe, false).await
    }

    /// [`exec_int`](Self::exec_int), sent once ([`command::run_once`]).
    async fn exec_int_once(&self, key: &LockKey, pipe: &redis::Pipeline) -> Result<i64, LockError> {
        self.exec_int_sending(key, pipe, true).await.map(|(n, _)| n)
    }

    /// [`exec_int_sent`](Self::exec_int_sent), or sent once.
    async fn exec_int_sending(
        &self,
        key: &LockKey,
        pipe: &redis::Pipeline,
        once: bool,
    ) -> Result<(i64, bool), LockError> {
        let outcome = match self.exec_sending(pipe, 1, true, once).await {
            Ok((replies, node, resent)) => {
                self.check_replicated(key, &replies, &node);
                reply::first(replies)
                    .and_then(reply::int)
                    .map(|n| (n, resent))
            }
            Err(err) => Err(err),
        };
        match outcome {
            Ok(sent) => Ok(sent),
            Err(err) => Err(self.error(key, err).await),
        }
    }

    /// The answer "nothing deleted" to a deletion that was sent twice: the
    /// first send, whose answer was lost with the connection, may have
    /// deleted it ([`BackendError::Unconfirmed`]).
    fn unconfirmed(&self, key: &LockKey) -> LockError {
        LockError::Backend {
            key: key.name.to_string(),
            server: self.cell.get().server.clone(),
            source: BackendError::Unconfirmed,
        }
    }

    /// A write that reached fewer replicas than `sync_replicas` asks is
    /// logged: a failover now could undo it.
    fn check_replicated(&self, key: &LockKey, replies: &Replies, node: &Node) {
        if let Some((required, _)) = self.settings.sync_replicas {
            let acked = reply::acknowledged(replies).unwrap_or(0);
            if acked < u64::from(required) {
                tracing::warn!(key = %key.name, server = %node.server, acked, required, "lock write not acknowledged by enough replicas");
            }
        }
    }

    pub(crate) async fn acquire(
        &self,
        key: &LockKey,
        owner: &str,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        let pipe = self.scripts.acquire(key, owner, lease);
        let (replies, node, _) = match self.exec(&pipe, 1, true).await {
            Ok(sent) => sent,
            Err(err) => return Err(self.error(key, err).await),
        };
        let acked = reply::acknowledged(&replies);
        let attempt = match reply::first(replies).and_then(reply::attempt) {
            Ok(attempt) => attempt,
            Err(err) => return Err(self.error(key, err).await),
        };
        if let (Attempt::Acquired { .. }, Some((required, _))) =
            (attempt, self.settings.sync_replicas)
        {
            let acked = acked.unwrap_or(0);
            if acked < u64::from(required) {
                // Not on enough replicas to survive a failover: give it back.
                let _ = self.rollback(key, owner).await;
                return Err(LockError::Backend {
                    key: key.name.to_string(),
                    server: node.server.clone(),
                    source: BackendError::NotReplicated {
                        acknowledged: acked,
                        required: u64::from(required),
                    },
                });
            }
        }
        Ok(attempt)
    }

    /// Deletes the lock when `owner` holds it and wakes a waiter, in one
    /// pipelined round trip without a script: the hash's only field is its
    /// owner, so `HDEL` of that field checks the owner and deletes the key in
    /// one atomic command. The `PUBLISH` follows it unconditionally; a wake-up
    /// after a release that deleted nothing only costs a waiter one attempt.
    pub(crate) async fn release(&self, key: &LockKey, owner: &str) -> Result<Released, LockError> {
        let pipe = self.scripts.release(key, owner);
        let outcome = match self.exec(&pipe, Scripts::release_replies(key), true).await {
            Ok((replies, node, resent)) => {
                self.check_replicated(key, &replies, &node);
                reply::release(replies).map(|released| (released, resent))
            }
            Err(err) => Err(err),
        };
        match outcome {
            // Sent twice, and the second send found nothing to delete: the
            // first may have deleted it. "Not held" would say it did not.
            Ok(((deleted, _), true)) if deleted != 1 => Err(self.unconfirmed(key)),
            Ok(((deleted, listeners), _)) => Ok(Released {
                deleted: deleted == 1,
                listeners,
            }),
            Err(err) => Err(self.error(key, err).await),
        }
    }

    /// See `Backend::cut`.
    pub(crate) async fn cut(
        &self,
        key: &LockKey,
        owner: &str,
        left: Duration,
    ) -> Result<bool, LockError> {
        let cut = self
            .exec_int(key, &self.scripts.cut(key, owner, lease::millis(left)))
            .await?;
        Ok(cut == 1)
    }

    /// Sent once, never again after a dropped connection (see
    /// [`command::run_once`]: the caller checks its scope and sends again).
    pub(crate) async fn rollback(&self, key: &LockKey, owner: &str) -> Result<bool, LockError> {
        let deleted = self
            .exec_int_once(key, &self.scripts.rollback(key, owner))
            .await?;
        Ok(deleted == 1)
    }

    /// See [`Scripts::silent_rollback`] (Redlock).
    pub(crate) async fn silent_rollback(
        &self,
        key: &LockKey,
        owner: &str,
    ) -> Result<bool, LockError> {
        let deleted = self
            .exec_int_once(key, &self.scripts.silent_rollback(key, owner))
            .await?;
        Ok(deleted == 1)
    }

    pub(crate) async fn force_release(&self, key: &LockKey) -> Result<bool, LockError> {
        match self
            .exec_int_sent(key, &self.scripts.force_release(key))
            .await?
        {
            (deleted, true) if deleted != 1 => Err(self.unconfirmed(key)),
            (deleted, _) => Ok(deleted == 1),
        }
    }

    /// Raises the fencing counter of `key`'s slot to at least `token` and
    /// records `token` as `owner`'s on this node (Redlock).
    pub(crate) async fn fence_floor(
        &self,
        key: &LockKey,
        owner: &str,
        token: u64,
    ) -> Result<(), LockError> {
        self.exec_int(key, &self.scripts.fence_floor(key, owner, token))
            .await
            .map(drop)
    }

    /// Renews all `items` in one pipelined round trip (two when the server
    /// lost its script cache and the script has to be loaded again).
    pub(crate) async fn renew(&self, items: &[RenewItem], lease: Duration) -> Vec<Renewal> {
        let lease = lease::millis(lease);
        let mut pipe = scripts::renewals();
        for (key, owner) in items {
            pipe.add_command(self.scripts.renew(key, owner, lease));
        }
        match self.exec(&pipe, items.len(), true).await {
            Ok((replies, node, _)) => {
                if let Some((key, _)) = items.first() {
                    self.check_replicated(key, &replies, &node);
                }
                let mut replies = replies.into_iter();
                (0..items.len())
                    .map(|_| match replies.next() {
                        Some(reply) => reply::renewal(reply),
                        None => Renewal::Failed(BackendError::Protocol("no reply".into())),
                    })
                    .collect()
            }
            Err(err) => reply::failed_all(items.len(), &err),
        }
    }

    /// How this client hears this master's releases: its subscription.
    pub(crate) fn wakeups(&self) -> Wakeups {
        let subscription = self.subscription.clone();
        Wakeups::subscribed(subscription.waiters().clone(), subscription)
    }

    /// Runs the read-only `read` on the current node's connection; when it
    /// fails with a backend error after which a command may succeed on a
    /// reconnected or newly elected master ([`worth_retrying`], the test
    /// [`exec`] applies to lock commands), runs it once more on the node the
    /// connection reconnected or moved to. A read changes nothing, so
    /// running it twice is always safe; a read of several round trips
    /// (`SCAN`) starts again from the beginning, on one node.
    ///
    /// With Sentinel, a node the sentinels deposed is not read: the error
    /// ([`BackendError::MasterUnreachable`]) names `key`, what is read.
    ///
    /// [`worth_retrying`]: Self::worth_retrying
    /// [`exec`]: Self::exec
    async fn read<T, F, Fut>(&self, key: &str, read: F) -> Result<T, LockError>
    where
        F: Fn(ConnectionManager, Arc<Node>) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        let node = match self.usable_node().await {
            Ok(node) => node,
            Err(source) => {
                return Err(LockError::Backend {
                    key: key.to_owned(),
                    server: self.cell.get().server.clone(),
                    source,
                })
            }
        };
        let timeout = self.settings.response_timeout;
        match Self::read_on(&node, key, timeout, &read).await {
            // The inner reads keep the command's `BackendError` as the
            // source: it is classified as `exec` classifies it.
            Err(LockError::Backend { source, .. }) if self.worth_retrying(&source) => {
                tracing::debug!(server = %node.server, error = %source, "retrying a read once");
                let node = match self.follow_master(&node).await {
                    Ok(node) => node,
                    Err(source) => {
                        return Err(LockError::Backend {
                            key: key.to_owned(),
                            server: node.server.clone(),
                            source,
                        })
                    }
                };
                Self::read_on(&node, key, timeout, &read).await
            }
            outcome => outcome,
        }
    }

    /// Runs `read` on `node`'s connection (a new one when the current one
    /// was found silent), its outcome recorded there.
    async fn read_on<T, F, Fut>(
        node: &Arc<Node>,
        key: &str,
        timeout: Duration,
        read: &F,
    ) -> Result<T, LockError>
    where
        F: Fn(ConnectionManager, Arc<Node>) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        let taken = match node.conn.take(timeout).await {
            Ok(taken) => taken,
            Err(source) => {
                return Err(LockError::Backend {
                    key: key.to_owned(),
                    server: node.server.clone(),
                    source,
                })
            }
        };
        let outcome = read(taken.conn.clone(), node.clone()).await;
        node.conn.settle(&taken, Heard::of_read(&outcome));
        outcome
    }

    pub(crate) async fn inspect(&self, key: &LockKey) -> Result<LockInfo, LockError> {
        let timeout = self.settings.response_timeout;
        self.read(&key.name, |mut conn, node| async move {
            inspect::inspect(&mut conn, key, timeout, &node.server).await
        })
        .await
    }

    /// See `Backend::leader_proclaim` (safe to send twice: the same owner
    /// proclaims the same record, its first time kept).
    pub(crate) async fn leader_proclaim(
        &self,
        role: &LockKey,
        record: &LockKey,
        owner: &str,
        metadata: &str,
    ) -> Result<Option<LeaderRecord>, LockError> {
        let (publish, timeout) = (self.scripts.publish(), self.settings.response_timeout);
        self.read(&role.name, |mut conn, node| async move {
            leader::proclaim(
                &mut conn,
                role,
                record,
                owner,
                metadata,
                publish,
                timeout,
                &node.server,
            )
            .await
        })
        .await
    }

    /// See `Backend::leader_read`.
    pub(crate) async fn leader_read(
        &self,
        role: &LockKey,
        record: &LockKey,
    ) -> Result<Option<LeaderRecord>, LockError> {
        let timeout = self.settings.response_timeout;
        self.read(&role.name, |mut conn, node| async move {
            leader::read(&mut conn, role, record, timeout, &node.server).await
        })
        .await
    }

    /// See `Backend::leader_vacate` (safe to send twice).
    pub(crate) async fn leader_vacate(
        &self,
        role: &LockKey,
        record: &LockKey,
        term: u64,
    ) -> Result<(), LockError> {
        let (publish, timeout) = (self.scripts.publish(), self.settings.response_timeout);
        self.read(&role.name, |mut conn, node| async move {
            leader::vacate(
                &mut conn,
                role,
                record,
                term,
                publish,
                timeout,
                &node.server,
            )
            .await
        })
        .await
    }

    pub(crate) async fn inspect_family(&self, key: &LockKey) -> Result<FamilyState, LockError> {
        let (scripts, timeout) = (&*self.scripts, self.settings.response_timeout);
        self.read(&key.name, |mut conn, node| async move {
            inspect::inspect_family(&mut conn, key, scripts, timeout, &node.server).await
        })
        .await
    }

    /// Records `mine` unconditionally when given (Redlock's masters each
    /// record it; safe to send twice) and reads the layouts recorded.
    pub(crate) async fn layouts(&self, mine: Option<&str>) -> Result<Vec<String>, LockError> {
        match mine {
            Some(mine) => self.record_layout(mine, true).await,
            None => {
                let timeout = self.settings.response_timeout;
                self.registry(|mut conn| async move { layouts::read(&mut conn, timeout).await })
                    .await
            }
        }
    }

    /// Records `mine` unless another layout is recorded and `mixed` is
    /// false (see `layouts_record.lua`: safe to send twice) and returns the
    /// layouts recorded.
    pub(crate) async fn record_layout(
        &self,
        mine: &str,
        mixed: bool,
    ) -> Result<Vec<String>, LockError> {
        let timeout = self.settings.response_timeout;
        self.registry(
            |mut conn| async move { layouts::record(&mut conn, mine, mixed, timeout).await },
        )
        .await
    }

    /// Removes `layout` from the registry (an `HDEL`, safe to send twice);
    /// whether it was recorded.
    pub(crate) async fn forget_layout(&self, layout: &str) -> Result<bool, LockError> {
        let timeout = self.settings.response_timeout;
        self.registry(|mut conn| async move { layouts::forget(&mut conn, layout, timeout).await })
            .await
    }

    /// Runs `op` on the registry of layouts, as a read (once more on a
    /// reconnected or newly elected master: every registry command is safe
    /// to repeat).
    async fn registry<T, F, Fut>(&self, op: F) -> Result<T, LockError>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        self.read(layouts::KEY, |conn, node| {
            let sent = op(conn);
            async move {
                sent.await.map_err(|source| LockError::Backend {
                    key: layouts::KEY.to_owned(),
                    server: node.server.clone(),
                    source,
                })
            }
        })
        .await
    }

    pub(crate) async fn subscribers(&self, keys: &[LockKey]) -> Result<Vec<u64>, LockError> {
        let channels: Vec<&str> = keys.iter().map(|key| &*key.channel).collect();
        let (channels, timeout) = (&channels, self.settings.response_timeout);
        self.read(&names(keys), |mut conn, node| async move {
            listeners::count(&mut conn, channels, false, timeout)
                .await
                .map_err(|source| LockError::Backend {
                    key: names(keys),
                    server: node.server.clone(),
                    source,
                })
        })
        .await
    }

    pub(crate) async fn list(
        &self,
        prefix: &str,
        name_prefix: &str,
    ) -> Result<Vec<LockInfo>, LockError> {
        let timeout = self.settings.response_timeout;
        let pattern = format!("{}*", crate::name::display_name(name_prefix));
        self.read(&pattern, |mut conn, node| async move {
            inspect::list(&mut conn, prefix, name_prefix, timeout, &node.server).await
        })
        .await
    }

    pub(crate) async fn list_all(
        &self,
        prefix: &str,
        name_prefix: &str,
    ) -> Result<Vec<Found>, LockError> {
        let (scripts, timeout) = (&*self.scripts, self.settings.response_timeout);
        let pattern = format!("{}*", crate::name::display_name(name_prefix));
        self.read(&pattern, |mut conn, node| async move {
            inspect::list_all(
                &mut conn,
                prefix,
                name_prefix,
                scripts,
                timeout,
                &node.server,
            )
            .await
        })
        .await
    }
}

impl Backend for RedisBackend {
    fn server(&self) -> &str {
        &self.label
    }

    fn acquire<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Attempt, LockError>> {
        RedisBackend::acquire(self, key, owner, lease).boxed()
    }

    fn release<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Released, LockError>> {
        RedisBackend::release(self, key, owner).boxed()
    }

    fn rollback<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        RedisBackend::rollback(self, key, owner).boxed()
    }

    fn force_release<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<bool, LockError>> {
        RedisBackend::force_release(self, key).boxed()
    }

    fn renew<'a>(&'a self, items: &'a [RenewItem], lease: Duration) -> BoxFuture<'a, Vec<Renewal>> {
        RedisBackend::renew(self, items, lease).boxed()
    }

    fn cut<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        left: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        RedisBackend::cut(self, key, owner, left).boxed()
    }

    fn ensure_running(&self) {
        self.ensure_watcher();
    }

    fn data_connection(&self) -> Result<DataConnection, Unsupported> {
        // With Sentinel, the connection moves with the watcher's announcements.
        self.ensure_watcher();
        let route = NodeRoute {
            cell: self.cell.clone(),
            follower: self.follower.clone(),
        };
        Ok(DataConnection::new(
            Arc::new(route),
            self.settings.response_timeout,
        ))
    }

    fn shut_down(&self) {
        self.watcher.stop();
    }

    fn inspect<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        RedisBackend::inspect(self, key).boxed()
    }

    fn subscribers<'a>(
        &'a self,
        keys: &'a [LockKey],
    ) -> BoxFuture<'a, Result<Vec<u64>, LockError>> {
        RedisBackend::subscribers(self, keys).boxed()
    }

    fn layouts<'a>(
        &'a self,
        mine: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        RedisBackend::layouts(self, mine).boxed()
    }

    fn record_layout<'a>(
        &'a self,
        mine: &'a str,
        mixed: bool,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        RedisBackend::record_layout(self, mine, mixed).boxed()
    }

    fn forget_layout<'a>(&'a self, layout: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        RedisBackend::forget_layout(self, layout).boxed()
    }

    fn inspect_family<'a>(
        &'a self,
        key: &'a LockKey,
    ) -> BoxFuture<'a, Result<FamilyState, LockError>> {
        RedisBackend::inspect_family(self, key).boxed()
    }

    fn leader_proclaim<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
        owner: &'a str,
        metadata: &'a str,
    ) -> BoxFuture<'a, Result<Option<LeaderRecord>, LockError>> {
        RedisBackend::leader_proclaim(self, role, record, owner, metadata).boxed()
    }

    fn leader_read<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
    ) -> BoxFuture<'a, Result<Option<LeaderRecord>, LockError>> {
        RedisBackend::leader_read(self, role, record).boxed()
    }

    fn leader_vacate<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
        term: u64,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        RedisBackend::leader_vacate(self, role, record, term).boxed()
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, LockError>> {
        RedisBackend::list(self, prefix, name_prefix).boxed()
    }

    fn list_all<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Found>, LockError>> {
        RedisBackend::list_all(self, prefix, name_prefix).boxed()
    }
}
