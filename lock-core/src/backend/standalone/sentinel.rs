//! Finding the master of a Sentinel-managed set: asked of the sentinels at
//! connect time, again after an error that may mean a failover, and told by
//! them: a background task follows their `+switch-master` announcements, so
//! commands move to the promoted replica when the failover ends, before the
//! old master can come back (restarted empty, still a master until the
//! sentinels demote it) and take commands at its old address.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use redis::{ConnectionAddr, ConnectionInfo};

use super::node::Node;
use super::NodeCell;
use crate::backend::redis::command::bounded;
use crate::backend::redis::scripts::Scripts;
use crate::backend::redis::{server_name, RedisSettings};
use crate::sync::Mutex;
use crate::{BackendError, LockError};

/// The channel on which sentinels announce a new master:
/// `<name> <old-ip> <old-port> <new-ip> <new-port>`.
const SWITCH_MASTER: &str = "+switch-master";

/// A master's address as one sentinel reports it, with the configuration
/// epoch of that report (raised by every failover).
#[derive(Debug)]
struct MasterAddr {
    host: String,
    port: u16,
    epoch: u64,
}

/// The sentinels of one master name.
#[derive(Debug)]
pub(crate) struct Sentinel {
    sentinels: Vec<redis::Client>,
    master_name: String,
}

impl Sentinel {
    /// `sentinels` are clients of the sentinel processes; the master is
    /// reached with the first one's credentials and TLS settings.
    pub(crate) fn new(sentinels: Vec<redis::Client>, master_name: String) -> Self {
        Sentinel {
            sentinels,
            master_name,
        }
    }

    /// For messages: `mymaster via host:port,host:port`.
    pub(crate) fn label(&self) -> String {
        let servers: Vec<String> = self.sentinels.iter().map(server_name).collect();
        format!("{} via sentinels {}", self.master_name, servers.join(","))
    }

    /// A client of the master the sentinels report. All of them are asked at
    /// once; once a majority has answered (or every sentinel that answers
    /// within the timeouts), the address with the highest configuration
    /// epoch wins: a sentinel that has not yet learned of a failover cannot
    /// send the client back to the old master.
    pub(crate) async fn resolve(
        &self,
        settings: &RedisSettings,
    ) -> Result<redis::Client, LockError> {
        let majority = self.sentinels.len() / 2 + 1;
        let mut asks: FuturesUnordered<_> = self
            .sentinels
            .iter()
            .map(|sentinel| async move { (sentinel, self.ask(sentinel, settings).await) })
            .collect();
        let deadline = tokio::time::sleep(
            settings
                .connect_timeout
                .saturating_add(settings.response_timeout),
        );
        tokio::pin!(deadline);
        let mut best: Option<(&redis::Client, MasterAddr)> = None;
        let mut answered = 0;
        let mut last_error = None;
        loop {
            tokio::select! {
                next = asks.next() => match next {
                    None => break,
                    Some((sentinel, Ok(addr))) => {
                        answered += 1;
                        if best.as_ref().is_none_or(|(_, best)| addr.epoch > best.epoch) {
                            best = Some((sentinel, addr));
                        }
                        if answered >= majority {
                            break;
                        }
                    }
                    Some((_, Err(err))) => last_error = Some(err),
                },
                () = &mut deadline => break,
            }
        }
        let found = best.map(|(sentinel, addr)| self.master_client(sentinel, addr.host, addr.port));
        match found {
            Some(Ok(client)) => Ok(client),
            Some(Err(err)) => Err(LockError::Connect {
                server: self.label(),
                source: err,
            }),
            None => Err(LockError::Connect {
                server: self.label(),
                source: last_error
                    .unwrap_or_else(|| BackendError::Protocol("no sentinel answered".into())),
            }),
        }
    }

    /// What `sentinel` knows of the master: `SENTINEL MASTER <name>`.
    async fn ask(
        &self,
        sentinel: &redis::Client,
        settings: &RedisSettings,
    ) -> Result<MasterAddr, BackendError> {
        let connecting = sentinel.get_multiplexed_async_connection();
        let mut conn = match tokio::time::timeout(settings.connect_timeout, connecting).await {
            Ok(conn) => conn?,
            Err(_) => return Err(BackendError::Timeout(settings.connect_timeout)),
        };
        let mut query = redis::cmd("SENTINEL");
        query.arg("master").arg(&self.master_name);
        let fields: HashMap<String, String> = bounded(
            settings.response_timeout,
            query.query_async::<HashMap<String, String>>(&mut conn),
        )
        .await?;
        let field = |name: &str| {
            fields.get(name).ok_or_else(|| {
                BackendError::Protocol(format!(
                    "sentinel reports master `{}` without `{name}`",
                    self.master_name
                ))
            })
        };
        let number = |name: &str| -> Result<u64, BackendError> {
            field(name)?.parse().map_err(|_| {
                BackendError::Protocol(format!(
                    "sentinel reports master `{}` with a bad `{name}`",
                    self.master_name
                ))
            })
        };
        Ok(MasterAddr {
            host: field("ip")?.clone(),
            port: u16::try_from(number("port")?)
                .map_err(|_| BackendError::Protocol("sentinel reports a bad port".into()))?,
            epoch: number("config-epoch")?,
        })
    }

    /// The new master's address in a `+switch-master` message, when the
    /// message is about this master name.
    fn switched_to(&self, payload: &str) -> Option<(String, u16)> {
        let mut parts = payload.split_whitespace();
        if parts.next()? != self.master_name {
            return None;
        }
        let (_old_host, _old_port) = (parts.next()?, parts.next()?);
        let host = parts.next()?.to_owned();
        let port = parts.next()?.parse().ok()?;
        Some((host, port))
    }

    /// A subscription to `+switch-master` on `sentinel`.
    async fn subscribe(
        sentinel: &redis::Client,
        settings: &RedisSettings,
    ) -> Result<redis::aio::PubSubStream, BackendError> {
        let subscribing = async {
            let mut pubsub = sentinel.get_async_pubsub().await?;
            pubsub.subscribe(SWITCH_MASTER).await?;
            Ok::<_, redis::RedisError>(pubsub.into_on_message())
        };
        match tokio::time::timeout(settings.connect_timeout, subscribing).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(err)) => Err(err.into()),
            Err(_) => Err(BackendError::Timeout(settings.connect_timeout)),
        }
    }

    fn master_client(
        &self,
        sentinel: &redis::Client,
        host: String,
        port: u16,
    ) -> Result<redis::Client, BackendError> {
        let template: &ConnectionInfo = sentinel.get_connection_info();
        let addr = match template.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        Ok(redis::Client::open(template.clone().set_addr(addr))?)
    }
}

/// A master the sentinels named that this client could not connect to.
#[derive(Debug, Clone)]
struct Unreached {
    client: redis::Client,
    server: String,
    reason: String,
}

impl Unreached {
    fn error(&self) -> BackendError {
        BackendError::MasterUnreachable {
            server: self.server.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// Keeps the node that commands go to on the master the sentinels name.
#[derive(Debug)]
pub(crate) struct Follower {
    sentinel: Sentinel,
    cell: Arc<NodeCell>,
    settings: RedisSettings,
    scripts: Arc<Scripts>,
    /// One move at a time.
    resolving: tokio::sync::Mutex<()>,
    /// The master the sentinels named last, when connecting to it failed:
    /// the current node is deposed, and no command may go to it (it may
    /// still be a master, taking locks that others take on the new one).
    /// Cleared by a move that succeeds, or when the sentinels name the
    /// current node again. Never held across an await.
    unreached: Mutex<Option<Unreached>>,
    /// Moves that failed so far: a caller that waited for `resolving` while
    /// another tried the same unreached master does not try again at once.
    failed_moves: AtomicU64,
}

impl Follower {
    pub(crate) fn new(
        sentinel: Sentinel,
        cell: Arc<NodeCell>,
        settings: RedisSettings,
        scripts: Arc<Scripts>,
    ) -> Self {
        Follower {
            sentinel,
            cell,
            settings,
            scripts,
            resolving: tokio::sync::Mutex::new(()),
            unreached: Mutex::new(None),
            failed_moves: AtomicU64::new(0),
        }
    }

    /// The node commands may go to: the current one, unless the sentinels
    /// named a master this client could not reach. Then it tries once more
    /// to move there (one move at a time, each bounded by the connect and
    /// response timeouts) and, when that fails too, returns
    /// [`BackendError::MasterUnreachable`] rather than the deposed node.
    pub(crate) async fn usable_node(&self) -> Result<Arc<Node>, BackendError> {
        if self.unreached.lock().is_none() {
            return Ok(self.cell.get());
        }
        let failed = self.failed_moves.load(Ordering::Acquire);
        let _one = self.resolving.lock().await;
        let Some(unreached) = self.unreached.lock().clone() else {
            return Ok(self.cell.get()); // another caller moved meanwhile
        };
        if self.failed_moves.load(Ordering::Acquire) != failed {
            return Err(unreached.error()); // another caller just tried
        }
        let node = self.move_to(self.cell.get(), unreached.client).await;
        self.checked(node)
    }

    /// `node`, unless the follower knows the master moved to a server it
    /// could not reach.
    fn checked(&self, node: Arc<Node>) -> Result<Arc<Node>, BackendError> {
        match &*self.unreached.lock() {
            Some(unreached) => Err(unreached.error()),
            None => Ok(node),
        }
    }

    /// Asks the sentinels for the master after a command failed on `failed`,
    /// and moves to it when it changed. Returns the node to retry on, or
    /// [`BackendError::MasterUnreachable`] when the sentinels name a master
    /// this client cannot reach.
    pub(crate) async fn follow_master(
        &self,
        failed: &Arc<Node>,
    ) -> Result<Arc<Node>, BackendError> {
        let _one = self.resolving.lock().await;
        let current = self.cell.get();
        if !Arc::ptr_eq(&current, failed) {
            return self.checked(current); // another caller moved already
        }
        let node = self.resolve_and_move(current).await;
        self.checked(node)
    }

    /// Asks the sentinels and moves when the master changed.
    async fn resolve_now(&self) {
        let _one = self.resolving.lock().await;
        self.resolve_and_move(self.cell.get()).await;
    }

    async fn resolve_and_move(&self, current: Arc<Node>) -> Arc<Node> {
        match self.sentinel.resolve(&self.settings).await {
            Ok(client) => self.move_to(current, client).await,
            Err(err) => {
                tracing::warn!(sentinels = %self.sentinel.label(), error = %err, "cannot resolve the master");
                current
            }
        }
    }

    /// Moves commands (and, told through the cell, the subscriber) to
    /// `client`'s server, unless they go there already. When it cannot
    /// connect there, the current node stays in the cell but is deposed:
    /// `client` is kept as the unreached master, and commands fail with
    /// [`BackendError::MasterUnreachable`] instead of going to the current
    /// node, until a move succeeds or the sentinels name the current node
    /// again. The caller holds `resolving`.
    async fn move_to(&self, current: Arc<Node>, client: redis::Client) -> Arc<Node> {
        let server = server_name(&client);
        if server == current.server {
            *self.unreached.lock() = None;
            return current;
        }
        // Deposed from now on: while the connection to the new master is being made
        // (up to the connect timeout), a command must not go to the old one, which may
        // still take locks (a client that was cut off from the new master, or from the
        // sentinels, when the failover happened). Commands wait for this move (they take
        // `resolving`, held by the caller) and then go to the new master, or fail.
        *self.unreached.lock() = Some(Unreached {
            client: client.clone(),
            server: server.clone(),
            reason: "the client is connecting to it".into(),
        });
        match Node::connect(client.clone(), &self.settings, &self.scripts).await {
            Ok(node) => {
                tracing::warn!(from = %current.server, to = %node.server, "lock backend follows the new master");
                let node = Arc::new(node);
                *self.cell.node.lock() = node.clone();
                *self.unreached.lock() = None;
                self.cell.changed.notify_waiters();
                node
            }
            Err(err) => {
                tracing::warn!(server = %err, old = %current.server, "cannot connect to the new master; no commands go to the old one");
                *self.unreached.lock() = Some(Unreached {
                    client,
                    server,
                    reason: err.to_string(),
                });
                self.failed_moves.fetch_add(1, Ordering::AcqRel);
                current
            }
        }
    }

    /// Follows the sentinels' `+switch-master` announcements (of every
    /// sentinel: one that has not learned of a failover yet says nothing) for
    /// as long as the backend lives (its `Supervised` handle aborts the
    /// task): moves to each announced master. The sentinels are asked once
    /// when the task starts (again after its runtime was gone) and after a
    /// lost subscription, for a switch announced while none listened.
    pub(crate) async fn watch(self: Arc<Self>) {
        self.resolve_now().await;
        let watchers = self
            .sentinel
            .sentinels
            .iter()
            .map(|sentinel| self.watch_one(sentinel));
        futures_util::future::join_all(watchers).await;
    }

    async fn watch_one(&self, sentinel: &redis::Client) {
        let mut backoff = Duration::from_millis(100);
        let mut first = true;
        loop {
            match Sentinel::subscribe(sentinel, &self.settings).await {
                Ok(mut stream) => {
                    backoff = Duration::from_millis(100);
                    if !std::mem::take(&mut first) {
                        self.resolve_now().await;
                    }
                    while let Some(message) = stream.next().await {
                        let Ok(payload) = message.get_payload::<String>() else {
                            continue;
                        };
                        let Some((host, port)) = self.sentinel.switched_to(&payload) else {
                            continue;
                        };
                        let failed = self.failed_moves.load(Ordering::Acquire);
                        let _one = self.resolving.lock().await;
                        match self.sentinel.master_client(sentinel, host, port) {
                            // The same announcement by another sentinel,
                            // while a move there failed: not tried again
                            // at once (commands try it themselves).
                            Ok(client)
                                if self.failed_moves.load(Ordering::Acquire) != failed
                                    && self.unreached.lock().as_ref().is_some_and(
                                        |unreached| unreached.server == server_name(&client),
                                    ) => {}
                            Ok(client) => {
                                self.move_to(self.cell.get(), client).await;
                            }
                            Err(err) => {
                                tracing::warn!(error = %err, "cannot follow the announced master");
                            }
                        }
                    }
                    tracing::debug!(sentinel = %server_name(sentinel), "sentinel subscription closed; subscribing again");
                }
                Err(err) => {
                    tracing::debug!(sentinel = %server_name(sentinel), error = %err, "cannot subscribe to the sentinel; retrying");
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2).min(Duration::from_secs(5));
        }
    }
}
