//! Redis Cluster: every key and the wake-up channel of a lock share one hash
//! tag, so each command runs on the one master that owns the lock's slot;
//! wake-ups use sharded pub/sub (`SPUBLISH`/`SSUBSCRIBE`, `subscriber.rs`)
//! on that shard, and renewals are pipelined per master. Commands go out
//! on one cluster connection (`connection.rs`), made again when the runtime
//! it was made on is gone, and are sent again after errors that mean a
//! connection was gone ([`connection_gone`]): lock commands through
//! [`exec`](ClusterBackend::exec), admin reads through
//! [`read`](ClusterBackend::read). The user's data connection takes the same
//! cluster connection (`data.rs`).

mod connection;
mod data;
mod subscriber;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{ErrorKind, ServerErrorKind, Value};

use self::connection::CommandConnection;
use self::data::ClusterRoute;
use self::subscriber::ClusterSubscription;
use super::redis::command::{self, bounded, Replies, Routed};
use super::redis::reply::{self, command_error};
use super::redis::scripts::{self, Scripts};
use super::redis::{inspect, layouts, leader, listeners, version, RedisSettings};
use super::standalone::node::{connect_error, Heard};
use super::{
    names, Attempt, Backend, DataConnection, LeaderRecord, Released, RenewItem, Renewal,
    Unsupported,
};
use crate::info::{FamilyState, Found};
use crate::name::LockKey;
use crate::sync::Mutex;
use crate::wakeups::Wakeups;
use crate::{lease, BackendError, LockError, LockInfo};

/// Makes a client builder for the cluster's seed nodes, with the user's
/// TLS settings (the builder is not `Clone`).
pub(crate) type MakeBuilder = Arc<dyn Fn() -> ClusterClientBuilder + Send + Sync>;

/// Slot ranges and the `host:port` of their masters.
type SlotMap = Vec<(u16, u16, String)>;

/// How many times a command is sent in all when its connection was gone
/// ([`connection_gone`]).
const TRIES: u32 = 3;

/// A Redis Cluster, reached through any of its nodes.
pub(crate) struct ClusterBackend {
    conn: Arc<CommandConnection>,
    label: String,
    settings: RedisSettings,
    scripts: Scripts,
    /// The subscription that wakes the cluster's waiters (see `wakeups()`).
    subscription: Arc<ClusterSubscription>,
    /// The masters of the slot ranges, as last read with `CLUSTER SLOTS`;
    /// read again after a renewal round in which a lock failed (its slot may
    /// have moved).
    slot_map: Mutex<Option<Arc<SlotMap>>>,
}

impl std::fmt::Debug for ClusterBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBackend")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// The timeouts and retries of every cluster connection.
pub(crate) fn configure(
    builder: ClusterClientBuilder,
    settings: &RedisSettings,
) -> ClusterClientBuilder {
    builder
        .connection_timeout(settings.connect_timeout)
        .response_timeout(settings.response_timeout)
        .retries(3)
}

impl ClusterBackend {
    /// How this client hears the cluster's releases: its subscription.
    pub(crate) fn wakeups(&self) -> Wakeups {
        let subscription = self.subscription.clone();
        Wakeups::subscribed(subscription.waiters().clone(), subscription)
    }

    /// Connects to the cluster that `make_builder` (seeded with node URLs) reaches.
    pub(crate) async fn connect(
        make_builder: MakeBuilder,
        seeds: Vec<String>,
        settings: RedisSettings,
        sharded: bool,
    ) -> Result<Self, LockError> {
        let label = format!("cluster {}", seeds.join(","));
        let client: ClusterClient = configure(make_builder(), &settings)
            .build()
            .map_err(|err| connect_error(&label, err))?;
        let conn =
            match tokio::time::timeout(settings.connect_timeout, client.get_async_connection())
                .await
            {
                Ok(Ok(conn)) => conn,
                Ok(Err(err)) => return Err(connect_error(&label, err)),
                Err(_) => {
                    return Err(LockError::Connect {
                        server: label,
                        source: BackendError::Timeout(settings.connect_timeout),
                    })
                }
            };
        // A cluster too old for sharded pub/sub is refused now, naming its
        // version (asked of one master: a cluster runs one version, but
        // during a rolling upgrade).
        let mut info_conn = conn.clone();
        let info = info_conn.route_command(
            redis::cmd("INFO").arg("server").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
        );
        match bounded(settings.response_timeout, info).await {
            Ok(Value::BulkString(bytes)) => {
                version::CLUSTER.check(&label, Ok(String::from_utf8_lossy(&bytes).into_owned()))?
            }
            Ok(Value::VerbatimString { text, .. }) => version::CLUSTER.check(&label, Ok(text))?,
            Ok(other) => {
                tracing::debug!(server = %label, reply = ?other, "unexpected INFO reply: the server's version is not checked")
            }
            Err(BackendError::Redis(err)) => version::CLUSTER.check(&label, Err(err))?,
            Err(source) => {
                return Err(LockError::Connect {
                    server: label,
                    source,
                })
            }
        }
        let scripts = Scripts::new(sharded);
        // SCRIPT LOAD without a node goes to every node.
        let mut loading = Routed {
            conn: conn.clone(),
            node: None,
        };
        if let Err(err) = bounded(
            settings.response_timeout,
            command::Target::load(&mut loading, &scripts.all()),
        )
        .await
        {
            return Err(match err {
                BackendError::Redis(err) => connect_error(&label, err),
                source => LockError::Connect {
                    server: label,
                    source,
                },
            });
        }
        // Wake-ups by sharded pub/sub (`SSUBSCRIBE`, `SPUBLISH`), else classic.
        let subscription = Arc::new(ClusterSubscription::new(
            make_builder,
            settings.clone(),
            label.clone(),
            sharded,
        ));
        let conn = Arc::new(CommandConnection::new(
            client,
            conn,
            settings.connect_timeout,
        ));
        Ok(ClusterBackend {
            conn,
            label,
            settings,
            scripts,
            subscription,
            slot_map: Mutex::new(None),
        })
    }

    /// The target of commands sent to `node`, or (`None`) routed by their
    /// keys (all of one slot), on a live connection.
    async fn target(&self, node: Option<SingleNodeRoutingInfo>) -> Result<Routed, BackendError> {
        Ok(Routed {
            conn: self.conn.get().await?,
            node,
        })
    }

    /// Runs `attempt` and, while it fails with an error whose backend error
    /// ([`backend_error`](Retried::backend_error)) means that a connection was gone
    /// ([`connection_gone`]), again, [`TRIES`] times in all; each attempt
    /// takes a live connection ([`CommandConnection::get`]), made again if
    /// its runtime is gone. Returns the last outcome, and whether `attempt`
    /// ran more than once (so a write may have run twice: its first send
    /// may have been carried out with its answer lost).
    async fn retrying<T, E, F, Fut>(&self, mut attempt: F) -> (Result<T, E>, bool)
    where
        E: Retried,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut tries = 1;
        loop {
            match attempt().await {
                Err(err) if tries < TRIES && err.backend_error().is_some_and(connection_gone) => {
                    tracing::debug!(cluster = %self.label, error = ?err.backend_error(), "sending again after a dropped connection");
                    // The cluster client reconnects in the background: give
                    // it a moment before the next try.
                    tokio::time::sleep(Duration::from_millis(
                        20u64.saturating_mul(u64::from(tries)),
                    ))
                    .await;
                    tries += 1;
                }
                outcome => return (outcome, tries > 1),
            }
        }
    }

    /// Sends `pipe` (`count` kept replies) to the master of the keys in it,
    /// again after a dropped connection ([`retrying`](Self::retrying); MOVED,
    /// ASK and TRYAGAIN are followed command by command, see [`Routed`]).
    /// The flag says whether it was sent more than once.
    async fn exec(
        &self,
        pipe: &redis::Pipeline,
        count: usize,
    ) -> Result<(Replies, bool), BackendError> {
        let (outcome, resent) = self.retrying(|| self.send(pipe, count, false)).await;
        outcome.map(|replies| (replies, resent))
    }

    /// Sends `pipe` once on a live connection, with [`command::run`], or
    /// with [`command::run_once`] when `once`, and tells the connection what
    /// it heard.
    async fn send(
        &self,
        pipe: &redis::Pipeline,
        count: usize,
        once: bool,
    ) -> Result<Replies, BackendError> {
        let scripts = self.scripts.all();
        let timeout = self.settings.response_timeout;
        let taken = self.conn.take().await?;
        let mut target = Routed {
            conn: taken.conn.clone(),
            node: None,
        };
        let outcome = if once {
            command::run_once(&mut target, pipe, count, &scripts, timeout).await
        } else {
            command::run(&mut target, pipe, count, &scripts, timeout).await
        };
        self.conn.heard(&taken, Heard::of(&outcome));
        outcome
    }

    /// Sends `pipe` once ([`command::run_once`]): never again after a
    /// dropped connection or a redirection (the caller sends again, see
    /// there). For rollbacks.
    async fn exec_once(&self, key: &LockKey, pipe: &redis::Pipeline) -> Result<i64, LockError> {
        let outcome = self.send(pipe, 1, true).await;
        match outcome.and_then(|replies| reply::int(reply::first(replies)?)) {
            Ok(n) => Ok(n),
            Err(err) => Err(self.error(key, err).await),
        }
    }

    /// Runs the read-only `read` on a live connection, again after a dropped
    /// connection ([`retrying`](Self::retrying), which lock commands take
    /// too): a read changes nothing, so running it again is always safe; a
    /// read of several round trips (`CLUSTER SLOTS`, then `SCAN` on every
    /// master) starts again from the beginning. `key` names what is read in
    /// the error of a connection that could not be made.
    async fn read<T, K, F, Fut>(&self, key: K, read: F) -> Result<T, LockError>
    where
        K: Fn() -> String,
        F: Fn(ClusterConnection) -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        let (outcome, _) = self
            .retrying(|| async {
                // The inner reads keep the command's `BackendError` as the
                // source: it is classified as `exec` classifies it.
                let taken = self
                    .conn
                    .take()
                    .await
                    .map_err(|source| LockError::Backend {
                        key: key(),
                        server: self.label.clone(),
                        source,
                    })?;
                let outcome = read(taken.conn.clone()).await;
                self.conn.heard(&taken, Heard::of_read(&outcome));
                outcome
            })
            .await;
        outcome
    }

    /// Runs `op` on the registry of layouts (routed by its key), as a read:
    /// once more after an error worth retrying (every registry command is
    /// safe to repeat).
    async fn registry<T, F, Fut>(&self, op: F) -> Result<T, LockError>
    where
        F: Fn(Routed) -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        self.read(
            || layouts::KEY.to_owned(),
            |conn| {
                let sent = op(Routed { conn, node: None });
                async move {
                    sent.await.map_err(|source| LockError::Backend {
                        key: layouts::KEY.to_owned(),
                        server: self.label.clone(),
                        source,
                    })
                }
            },
        )
        .await
    }

    /// Runs the one-command `pipe` on `key` and reads its integer reply,
    /// and whether it was sent more than once.
    async fn exec_int(
        &self,
        key: &LockKey,
        pipe: &redis::Pipeline,
    ) -> Result<(i64, bool), LockError> {
        let outcome = self
            .exec(pipe, 1)
            .await
            .and_then(|(replies, resent)| Ok((reply::int(reply::first(replies)?)?, resent)));
        match outcome {
            Ok(sent) => Ok(sent),
            Err(err) => Err(self.error(key, err).await),
        }
    }

    /// The answer "nothing deleted" to a deletion that was sent more than
    /// once: a send whose answer was lost with its connection may have
    /// deleted it ([`BackendError::Unconfirmed`]).
    fn unconfirmed(&self, key: &LockKey) -> LockError {
        LockError::Backend {
            key: key.name.to_string(),
            server: self.label.clone(),
            source: BackendError::Unconfirmed,
        }
    }

    async fn error(&self, key: &LockKey, err: BackendError) -> LockError {
        // (`TYPE` after a wrong-type reply: the connection just answered.)
        let mut target = Routed {
            conn: self.conn.current(),
            node: None,
        };
        command_error(
            &mut target,
            self.settings.response_timeout,
            key,
            &self.label,
            err,
        )
        .await
    }

    /// The master (`host:port`) of every slot range, from `CLUSTER SLOTS`.
    async fn slot_masters(&self) -> Result<SlotMap, BackendError> {
        let conn = self.conn.get().await?;
        self.slot_masters_on(conn).await
    }

    /// [`slot_masters`](Self::slot_masters), asked on `conn`.
    async fn slot_masters_on(&self, mut conn: ClusterConnection) -> Result<SlotMap, BackendError> {
        let reply = bounded(
            self.settings.response_timeout,
            conn.route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
            ),
        )
        .await?;
        let Value::Array(ranges) = reply else {
            return Err(BackendError::Protocol(format!("CLUSTER SLOTS: {reply:?}")));
        };
        let mut masters = Vec::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                continue;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                continue;
            };
            let host = match node.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => continue,
            };
            let Some(Value::Int(port)) = node.get(1) else {
                continue;
            };
            let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) else {
                continue;
            };
            masters.push((start, end, format!("{host}:{port}")));
        }
        Ok(masters)
    }

    /// The masters serving slots, as `(host, port)`, asked on `conn`.
    async fn masters(&self, conn: ClusterConnection) -> Result<Vec<(String, u16)>, BackendError> {
        let mut masters: Vec<(String, u16)> = self
            .slot_masters_on(conn)
            .await?
            .into_iter()
            .filter_map(|(_, _, node)| {
                let (host, port) = node.rsplit_once(':')?;
                Some((host.to_owned(), port.parse().ok()?))
            })
            .collect();
        masters.sort();
        masters.dedup();
        Ok(masters)
    }

    /// Renews `items` with one pipeline per master (grouped by the current
    /// slot map; a lock whose slot moved meanwhile fails this round and is
    /// retried on the next, after the map is read again).
    async fn renew(&self, items: &[RenewItem], lease: Duration) -> Vec<Renewal> {
        let cached = self.slot_map.lock().clone();
        let masters = match cached {
            Some(masters) => masters,
            None => match self.slot_masters().await {
                Ok(masters) => {
                    let masters = Arc::new(masters);
                    *self.slot_map.lock() = Some(masters.clone());
                    masters
                }
                Err(err) => return reply::failed_all(items.len(), &err),
            },
        };
        let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, (key, _)) in items.iter().enumerate() {
            let node = masters
                .iter()
                .find(|(start, end, _)| (*start..=*end).contains(&key.slot))
                .map_or("", |(_, _, node)| node.as_str());
            groups.entry(node).or_default().push(i);
        }
        let lease = lease::millis(lease);
        let rounds = groups.into_values().map(|indices| async move {
            let outcomes = self.renew_group(items, &indices, lease).await;
            (indices, outcomes)
        });
        let mut renewals: Vec<Option<Renewal>> = (0..items.len()).map(|_| None).collect();
        for (indices, outcomes) in futures_util::future::join_all(rounds).await {
            for (i, outcome) in indices.into_iter().zip(outcomes) {
                if let Some(slot) = renewals.get_mut(i) {
                    *slot = Some(outcome);
                }
            }
        }
        let renewals: Vec<Renewal> = renewals
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Renewal::Failed(BackendError::Protocol("no reply".into())))
            })
            .collect();
        if renewals.iter().any(|r| matches!(r, Renewal::Failed(_))) {
            // A slot may have moved (failover, resharding): read the map
            // again before the retry.
            *self.slot_map.lock() = None;
        }
        renewals
    }

    /// Renews the locks at `indices` (all on one master) in one pipeline.
    async fn renew_group(
        &self,
        items: &[RenewItem],
        indices: &[usize],
        lease: u64,
    ) -> Vec<Renewal> {
        let mut pipe = scripts::renewals();
        let mut slot = None;
        for (key, owner) in indices.iter().filter_map(|&i| items.get(i)) {
            slot.get_or_insert(key.slot);
            pipe.add_command(self.scripts.renew(key, owner, lease));
        }
        let Some(slot) = slot.and_then(Slot::new) else {
            return Vec::new();
        };
        // Not sent again here: a failed renewal is retried on the next round.
        let node = SingleNodeRoutingInfo::SpecificNode(Route::with_slot(slot, SlotAddr::Master));
        let mut target = match self.target(Some(node)).await {
            Ok(target) => target,
            Err(err) => return reply::failed_all(indices.len(), &err),
        };
        let scripts = self.scripts.all();
        match command::run(
            &mut target,
            &pipe,
            indices.len(),
            &scripts,
            self.settings.response_timeout,
        )
        .await
        {
            Ok(replies) => {
                let mut replies = replies.into_iter();
                indices
                    .iter()
                    .map(|_| match replies.next() {
                        Some(reply) => reply::renewal(reply),
                        None => Renewal::Failed(BackendError::Protocol("no reply".into())),
                    })
                    .collect()
            }
            Err(err) => reply::failed_all(indices.len(), &err),
        }
    }

    /// Sharded pub/sub: `PUBSUB SHARDNUMSUB` of each channel on its
    /// master. Classic: `PUBSUB NUMSUB` on every master, summed (a classic
    /// subscription lives on the one node its client subscribed on).
    async fn subscribers(&self, keys: &[LockKey]) -> Result<Vec<u64>, LockError> {
        let backend_error = |source| LockError::Backend {
            key: names(keys),
            server: self.label.clone(),
            source,
        };
        let timeout = self.settings.response_timeout;
        let sharded = self.subscription.is_sharded();
        let channels: Vec<&str> = keys.iter().map(|key| &*key.channel).collect();
        let channels = &channels;
        self.read(
            || names(keys),
            |conn| async move {
                if sharded {
                    // One command per lock on its master, all in flight at once
                    // on the multiplexed connection.
                    // Routed by the lock's key, so that a slot that moved is
                    // counted on its new master (see `listeners::count_at`).
                    let counts = futures_util::future::join_all(keys.iter().map(|key| {
                        let mut target = Routed {
                            conn: conn.clone(),
                            node: None,
                        };
                        async move {
                            listeners::count_at(
                                &mut target,
                                Some(&key.lock),
                                &[&key.channel],
                                true,
                                timeout,
                            )
                            .await
                        }
                    }))
                    .await;
                    return counts
                        .into_iter()
                        .map(|count| {
                            Ok(count.map_err(backend_error)?.first().copied().unwrap_or(0))
                        })
                        .collect();
                }
                let mut sums = vec![0u64; keys.len()];
                for (host, port) in self.masters(conn.clone()).await.map_err(backend_error)? {
                    let mut target = Routed {
                        conn: conn.clone(),
                        node: Some(SingleNodeRoutingInfo::ByAddress { host, port }),
                    };
                    let counts = listeners::count(&mut target, channels, false, timeout)
                        .await
                        .map_err(backend_error)?;
                    for (sum, count) in sums.iter_mut().zip(counts) {
                        *sum = sum.saturating_add(count);
                    }
                }
                Ok(sums)
            },
        )
        .await
    }

    async fn list(&self, prefix: &str, name_prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        let key = || format!("{}*", crate::name::display_name(name_prefix));
        let timeout = self.settings.response_timeout;
        self.read(key, |conn| async move {
            // SCAN walks one node: ask every master.
            let masters =
                self.masters(conn.clone())
                    .await
                    .map_err(|source| LockError::Backend {
                        key: key(),
                        server: self.label.clone(),
                        source,
                    })?;
            let mut locks = Vec::new();
            for (host, port) in masters {
                let server = format!("{host}:{port}");
                let mut target = Routed {
                    conn: conn.clone(),
                    node: Some(SingleNodeRoutingInfo::ByAddress { host, port }),
                };
                locks.extend(
                    inspect::list(&mut target, prefix, name_prefix, timeout, &server).await?,
                );
            }
            Ok(locks)
        })
        .await
    }

    /// As `list`, every kind: `SCAN` and the reads on every master (a
    /// primitive's keys share a slot, so a master).
    async fn list_all(&self, prefix: &str, name_prefix: &str) -> Result<Vec<Found>, LockError> {
        let key = || format!("{}*", crate::name::display_name(name_prefix));
        let timeout = self.settings.response_timeout;
        self.read(key, |conn| async move {
            let masters =
                self.masters(conn.clone())
                    .await
                    .map_err(|source| LockError::Backend {
                        key: key(),
                        server: self.label.clone(),
                        source,
                    })?;
            let mut found = Vec::new();
            for (host, port) in masters {
                let server = format!("{host}:{port}");
                let mut target = Routed {
                    conn: conn.clone(),
                    node: Some(SingleNodeRoutingInfo::ByAddress { host, port }),
                };
                found.extend(
                    inspect::list_all(
                        &mut target,
                        prefix,
                        name_prefix,
                        &self.scripts,
                        timeout,
                        &server,
                    )
                    .await?,
                );
            }
            Ok(found)
        })
        .await
    }
}

/// Whether `err` means that the connection a command went out on was gone,
/// so that sending it again (on the connection the cluster client made
/// again, or [`CommandConnection`] made again) may succeed: the connection
/// was dropped or broken (`CLIENT KILL`, a restarted node, the connection's
/// driver gone with its runtime: "broken pipe"), any other I/O error, or no
/// connection to the node at all (`ClusterConnectionNotFound`, while the
/// cluster client reconnects). Also a redirection that reached us (`MOVED`,
/// `ASK`, `TRYAGAIN`: not run), which the cluster client follows by itself
/// unless its own retries were spent on a reconnect, as right after the
/// connections to every master were killed. Lock commands and admin reads
/// both ask this.
fn connection_gone(err: &BackendError) -> bool {
    match err {
        BackendError::Redis(err) => {
            // A command that timed out is not a dropped connection: it had
            // its response timeout, and the master may be hung (another send
            // would wait as long again).
            !err.is_timeout()
                && (err.is_connection_dropped()
                    || err.is_io_error()
                    || matches!(
                        err.kind(),
                        ErrorKind::ClusterConnectionNotFound
                            | ErrorKind::Server(
                                ServerErrorKind::Moved
                                    | ServerErrorKind::Ask
                                    | ServerErrorKind::TryAgain
                            )
                    ))
        }
        _ => false,
    }
}

/// An error that [`ClusterBackend::retrying`] classifies by its backend error.
trait Retried: std::fmt::Debug {
    /// The backend error it carries, if any.
    fn backend_error(&self) -> Option<&BackendError>;
}

impl Retried for BackendError {
    fn backend_error(&self) -> Option<&BackendError> {
        Some(self)
    }
}

impl Retried for LockError {
    fn backend_error(&self) -> Option<&BackendError> {
        match self {
            LockError::Backend { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Backend for ClusterBackend {
    fn server(&self) -> &str {
        &self.label
    }

    fn data_connection(&self) -> Result<DataConnection, Unsupported> {
        let route = ClusterRoute {
            conn: self.conn.clone(),
            label: self.label.clone(),
        };
        Ok(DataConnection::new(
            Arc::new(route),
            self.settings.response_timeout,
        ))
    }

    fn acquire<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Attempt, LockError>> {
        async move {
            let pipe = self.scripts.acquire(key, owner, lease);
            match self
                .exec(&pipe, 1)
                .await
                .and_then(|(replies, _)| reply::first(replies))
                .and_then(reply::attempt)
            {
                Ok(attempt) => Ok(attempt),
                Err(err) => Err(self.error(key, err).await),
            }
        }
        .boxed()
    }

    /// `HDEL` of the owner's field (the hash's only one: an atomic
    /// compare-and-delete) and `SPUBLISH` of the wake-up, pipelined to the
    /// lock's master (both keys share its slot). Sent more than once (a
    /// dropped connection) and the last send deleted nothing: an earlier
    /// one may have, so that is [`BackendError::Unconfirmed`], not "not held".
    fn release<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Released, LockError>> {
        async move {
            let pipe = self.scripts.release(key, owner);
            match self
                .exec(&pipe, Scripts::release_replies(key))
                .await
                .and_then(|(replies, resent)| Ok((reply::release(replies)?, resent)))
            {
                Ok(((deleted, _), true)) if deleted != 1 => Err(self.unconfirmed(key)),
                Ok(((deleted, listeners), _)) => Ok(Released {
                    deleted: deleted == 1,
                    listeners,
                }),
                Err(err) => Err(self.error(key, err).await),
            }
        }
        .boxed()
    }

    fn rollback<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        async move {
            // Sent once: see `command::run_once`.
            let deleted = self
                .exec_once(key, &self.scripts.rollback(key, owner))
                .await?;
            Ok(deleted == 1)
        }
        .boxed()
    }

    /// As [`release`](Self::release): a resent deletion that deleted
    /// nothing is [`BackendError::Unconfirmed`].
    fn force_release<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<bool, LockError>> {
        async move {
            match self.exec_int(key, &self.scripts.force_release(key)).await? {
                (deleted, true) if deleted != 1 => Err(self.unconfirmed(key)),
                (deleted, _) => Ok(deleted == 1),
            }
        }
        .boxed()
    }

    fn renew<'a>(&'a self, items: &'a [RenewItem], lease: Duration) -> BoxFuture<'a, Vec<Renewal>> {
        ClusterBackend::renew(self, items, lease).boxed()
    }

    fn cut<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        left: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        async move {
            let pipe = self.scripts.cut(key, owner, lease::millis(left));
            let (cut, _) = self.exec_int(key, &pipe).await?;
            Ok(cut == 1)
        }
        .boxed()
    }

    fn leader_proclaim<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
        owner: &'a str,
        metadata: &'a str,
    ) -> BoxFuture<'a, Result<Option<LeaderRecord>, LockError>> {
        let (publish, timeout) = (self.scripts.publish(), self.settings.response_timeout);
        // The role's lock, record and channel share a slot: the script goes
        // to its master. Safe to send twice (the same record, its first time kept).
        self.read(
            || role.name.to_string(),
            move |conn| async move {
                let mut target = Routed { conn, node: None };
                leader::proclaim(
                    &mut target,
                    role,
                    record,
                    owner,
                    metadata,
                    publish,
                    timeout,
                    &self.label,
                )
                .await
            },
        )
        .boxed()
    }

    fn leader_read<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
    ) -> BoxFuture<'a, Result<Option<LeaderRecord>, LockError>> {
        let timeout = self.settings.response_timeout;
        self.read(
            || role.name.to_string(),
            move |conn| async move {
                let mut target = Routed { conn, node: None };
                leader::read(&mut target, role, record, timeout, &self.label).await
            },
        )
        .boxed()
    }

    fn leader_vacate<'a>(
        &'a self,
        role: &'a LockKey,
        record: &'a LockKey,
        term: u64,
    ) -> BoxFuture<'a, Result<(), LockError>> {
        let (publish, timeout) = (self.scripts.publish(), self.settings.response_timeout);
        self.read(
            || role.name.to_string(),
            move |conn| async move {
                let mut target = Routed { conn, node: None };
                leader::vacate(
                    &mut target,
                    role,
                    record,
                    term,
                    publish,
                    timeout,
                    &self.label,
                )
                .await
            },
        )
        .boxed()
    }

    fn inspect<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        let timeout = self.settings.response_timeout;
        // The lock's keys share a slot: the pipeline goes to its master.
        self.read(
            || key.name.to_string(),
            move |conn| async move {
                let mut target = Routed { conn, node: None };
                inspect::inspect(&mut target, key, timeout, &self.label).await
            },
        )
        .boxed()
    }

    fn inspect_family<'a>(
        &'a self,
        key: &'a LockKey,
    ) -> BoxFuture<'a, Result<FamilyState, LockError>> {
        let timeout = self.settings.response_timeout;
        // The primitive's keys share a slot: the script goes to its master.
        self.read(
            || key.name.to_string(),
            move |conn| async move {
                let mut target = Routed { conn, node: None };
                inspect::inspect_family(&mut target, key, &self.scripts, timeout, &self.label).await
            },
        )
        .boxed()
    }

    fn subscribers<'a>(
        &'a self,
        keys: &'a [LockKey],
    ) -> BoxFuture<'a, Result<Vec<u64>, LockError>> {
        ClusterBackend::subscribers(self, keys).boxed()
    }

    fn layouts<'a>(
        &'a self,
        mine: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        let timeout = self.settings.response_timeout;
        // Reads the layouts recorded; records `mine` unconditionally when
        // given (safe to send twice).
        self.registry(move |mut target| async move {
            match mine {
                Some(mine) => layouts::record(&mut target, mine, true, timeout).await,
                None => layouts::read(&mut target, timeout).await,
            }
        })
        .boxed()
    }

    fn record_layout<'a>(
        &'a self,
        mine: &'a str,
        mixed: bool,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        let timeout = self.settings.response_timeout;
        // The script is safe to send twice.
        self.registry(move |mut target| async move {
            layouts::record(&mut target, mine, mixed, timeout).await
        })
        .boxed()
    }

    fn forget_layout<'a>(&'a self, layout: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        let timeout = self.settings.response_timeout;
        // An `HDEL`, safe to send twice.
        self.registry(move |mut target| async move {
            layouts::forget(&mut target, layout, timeout).await
        })
        .boxed()
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, LockError>> {
        ClusterBackend::list(self, prefix, name_prefix).boxed()
    }

    fn list_all<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Found>, LockError>> {
        ClusterBackend::list_all(self, prefix, name_prefix).boxed()
    }
}
