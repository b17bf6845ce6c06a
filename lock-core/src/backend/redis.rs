//! One Redis master (standalone, or found through Sentinel): the lock
//! scripts, the multiplexed command connection and the subscription
//! connection that wakes waiters.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink, PubSubStream};
use redis::{Cmd, ErrorKind, RedisError, Script, ServerErrorKind};
use tokio::sync::{mpsc, Notify};

use super::sentinel::Sentinel;
use super::{Attempt, RenewItem, Renewal};
use crate::key::LockKey;
use crate::wake::{Waiters, WakeHandle};
use crate::{BackendError, LockError};

/// Takes the lock when it is free (or already ours), bumping the fencing
/// counter on a first acquisition. The hash field is the owner, its value the
/// fencing token. Replies `{1, token}` or `{0, pttl}`.
///
/// `PTTL` comes first: it tells a free lock (-2) from a held one and gives
/// the busy reply its TTL, so a free lock costs 4 calls and a busy one 2.
const ACQUIRE: &str = r"
local ttl = redis.call('pttl', KEYS[1])
if ttl == -2 then
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], token)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
local token = redis.call('hget', KEYS[1], ARGV[1])
if token then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(token)}
end
return {0, ttl}
";

/// Extends the lease only when ARGV[1] owns the lock.
const RENEW: &str = r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// Deletes the lock whoever owns it (operator override), then wakes a waiter.
const FORCE_RELEASE: &str = r"
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
redis.call('publish', KEYS[2], '1')
return 1
";

/// The lock scripts, loaded once per node.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) renew: Script,
    pub(crate) force_release: Script,
    pub(crate) fence_floor: Script,
    /// `PUBLISH`, or `SPUBLISH` on a cluster (sharded pub/sub).
    pub(crate) publish: &'static str,
}

/// Raises the fencing counter to at least ARGV[1] (Redlock: keeps a
/// majority of the masters' counters at or above the last token issued).
const FENCE_FLOOR: &str = r"
local current = tonumber(redis.call('get', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1])
end
return 1
";

impl Scripts {
    /// The scripts; `sharded` publishes wake-ups with `SPUBLISH` (cluster).
    pub(crate) fn new(sharded: bool) -> Self {
        let publish = |script: &str| {
            if sharded {
                Script::new(&script.replace("'publish'", "'spublish'"))
            } else {
                Script::new(script)
            }
        };
        Scripts {
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            force_release: publish(FORCE_RELEASE),
            fence_floor: Script::new(FENCE_FLOOR),
            publish: if sharded { "SPUBLISH" } else { "PUBLISH" },
        }
    }

    pub(crate) fn all(&self) -> [&Script; 4] {
        [
            &self.acquire,
            &self.renew,
            &self.force_release,
            &self.fence_floor,
        ]
    }

    /// `EVALSHA` of the acquire script for `owner` with `lease`.
    pub(crate) fn acquire_cmd(&self, key: &LockKey, owner: &str, lease: Duration) -> Cmd {
        let mut cmd = evalsha(&self.acquire, &[&key.lock, &key.fence]);
        cmd.arg(owner).arg(lease_millis(lease));
        cmd
    }

    /// `EVALSHA` of the renew script for `owner` with `lease` (in ms).
    pub(crate) fn renew_cmd(&self, key: &LockKey, owner: &str, lease_ms: u64) -> Cmd {
        let mut cmd = evalsha(&self.renew, &[&key.lock]);
        cmd.arg(owner).arg(lease_ms);
        cmd
    }

    /// `EVALSHA` of the force-release script.
    pub(crate) fn force_release_cmd(&self, key: &LockKey) -> Cmd {
        evalsha(&self.force_release, &[&key.lock, &key.channel])
    }

    /// The release: `HDEL` of the owner's field (the hash's only one, so an
    /// atomic compare-and-delete) and the wake-up (`PUBLISH`/`SPUBLISH`,
    /// reply ignored), pipelined. Its one reply is how many fields `HDEL`
    /// deleted.
    pub(crate) fn release_pipeline(&self, key: &LockKey, owner: &str) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL")
            .arg(&*key.lock)
            .arg(owner)
            .cmd(self.publish)
            .arg(&*key.channel)
            .arg("1")
            .ignore();
        pipe
    }

    /// A pipeline that loads every script.
    pub(crate) fn load_pipeline(&self) -> redis::Pipeline {
        let mut load = redis::pipe();
        for script in self.all() {
            load.load_script(script).ignore();
        }
        load
    }
}

/// `EVALSHA` of `script` with `keys`, as one command (so that it can join a
/// pipeline); the caller appends the arguments.
pub(crate) fn evalsha(script: &Script, keys: &[&str]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    cmd
}

/// Connection settings of a Redis backend.
#[derive(Debug, Clone)]
pub(crate) struct RedisSettings {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// `WAIT` for this many replicas (with this timeout) after every write.
    pub(crate) sync_replicas: Option<(u32, Duration)>,
}

/// The node commands go to: its client, connection and address.
#[derive(Debug)]
struct Node {
    client: redis::Client,
    conn: ConnectionManager,
    server: String,
}

impl Node {
    async fn connect(
        client: redis::Client,
        settings: &RedisSettings,
        scripts: &Scripts,
    ) -> Result<Self, LockError> {
        let server = server_name(&client);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            // Every call on this connection is bounded by `bounded` (which
            // also covers waiting for a reconnect): a per-request timer of
            // the connection itself would be a second timer per command.
            .set_response_timeout(None)
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));
        let connecting = ConnectionManager::new_with_config(client.clone(), config);
        let conn = match tokio::time::timeout(settings.connect_timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) => return Err(connect_error(&server, err)),
            Err(_) => {
                return Err(LockError::Connect {
                    server,
                    source: BackendError::Timeout(settings.connect_timeout),
                })
            }
        };
        // Load the scripts up front, in one round trip, so that the first
        // concurrent acquisitions do not each meet NOSCRIPT. (After a restart,
        // a failover or SCRIPT FLUSH they are reloaded on demand.)
        let mut loading = conn.clone();
        let load = scripts.load_pipeline();
        match bounded(settings.response_timeout, load.exec_async(&mut loading)).await {
            Ok(()) => {}
            Err(BackendError::Redis(err)) => return Err(connect_error(&server, err)),
            Err(source) => return Err(LockError::Connect { server, source }),
        }
        Ok(Node {
            client,
            conn,
            server,
        })
    }
}

/// The current node, swapped when Sentinel reports a new master.
#[derive(Debug)]
struct NodeCell {
    node: RwLock<Arc<Node>>,
    /// Told when the node changed, so the subscriber moves to it.
    changed: Notify,
}

impl NodeCell {
    fn get(&self) -> Arc<Node> {
        self.node.read().unwrap().clone()
    }
}

/// One Redis master: standalone, or found through Sentinel.
#[derive(Debug)]
pub(crate) struct RedisBackend {
    cell: Arc<NodeCell>,
    sentinel: Option<Sentinel>,
    /// One re-resolution of the master at a time.
    resolving: tokio::sync::Mutex<()>,
    label: String,
    settings: RedisSettings,
    scripts: Scripts,
    waiters: Arc<Waiters>,
    /// Taken by the subscriber task when the first waiter registers.
    changes: Mutex<Option<mpsc::UnboundedReceiver<Arc<str>>>>,
}

/// `host:port` of a client's server, never with credentials.
pub(crate) fn server_name(client: &redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

/// Turns an error met while connecting into the client's error.
pub(crate) fn connect_error(server: &str, err: RedisError) -> LockError {
    let auth = err.kind() == ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"));
    if auth {
        LockError::Authentication {
            server: server.to_owned(),
            message: err.to_string(),
        }
    } else {
        LockError::Connect {
            server: server.to_owned(),
            source: err.into(),
        }
    }
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
        let (waiters, changes) = Waiters::subscribed();
        RedisBackend {
            cell: Arc::new(NodeCell {
                node: RwLock::new(Arc::new(node)),
                changed: Notify::new(),
            }),
            sentinel,
            resolving: tokio::sync::Mutex::new(()),
            label,
            settings,
            scripts,
            waiters,
            changes: Mutex::new(Some(changes)),
        }
    }

    /// What this backend talks to: `host:port`, or the Sentinel set.
    pub(crate) fn server(&self) -> &str {
        &self.label
    }

    /// The address of the node commands go to now.
    pub(crate) fn node_server(&self) -> String {
        self.cell.get().server.clone()
    }

    /// The current node's multiplexed command connection, for read-only
    /// inspection (`inspect.rs`).
    pub(crate) fn command_connection(&self) -> ConnectionManager {
        self.cell.get().conn.clone()
    }

    pub(crate) fn response_timeout(&self) -> Duration {
        self.settings.response_timeout
    }

    /// Runs `fut` within the response timeout.
    async fn bounded<T>(
        &self,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, BackendError> {
        bounded(self.settings.response_timeout, fut).await
    }

    /// Asks Sentinel for the master after an error that may mean a failover,
    /// and moves to it when it changed. Returns the node to retry on.
    async fn follow_master(&self, failed: &Arc<Node>) -> Arc<Node> {
        let Some(sentinel) = &self.sentinel else {
            return failed.clone();
        };
        let _one = self.resolving.lock().await;
        let current = self.cell.get();
        if !Arc::ptr_eq(&current, failed) {
            return current; // another caller moved already
        }
        let client = match sentinel.resolve(&self.settings).await {
            Ok(client) => client,
            Err(err) => {
                tracing::warn!(sentinels = %self.label, error = %err, "cannot resolve the master");
                return current;
            }
        };
        if server_name(&client) == current.server {
            return current;
        }
        match Node::connect(client, &self.settings, &self.scripts).await {
            Ok(node) => {
                tracing::warn!(from = %current.server, to = %node.server, "lock backend follows the new master");
                let node = Arc::new(node);
                *self.cell.node.write().unwrap() = node.clone();
                self.cell.changed.notify_waiters();
                node
            }
            Err(err) => {
                tracing::warn!(server = %err, "cannot connect to the new master");
                current
            }
        }
    }

    /// Runs one `EVALSHA` (and `WAIT` in `sync_replicas` mode) on the
    /// current node, loading the script on `NOSCRIPT`.
    async fn eval<T: redis::FromRedisValue>(
        &self,
        node: &Node,
        script: &Script,
        cmd: &Cmd,
    ) -> Result<(T, Option<u64>), BackendError> {
        let mut conn = node.conn.clone();
        for _ in 0..2 {
            let reply = match self.settings.sync_replicas {
                None => self
                    .bounded(cmd.query_async::<T>(&mut conn))
                    .await
                    .map(|value| (value, None)),
                Some((replicas, timeout)) => {
                    let mut pipe = redis::pipe();
                    pipe.add_command(cmd.clone());
                    pipe.cmd("WAIT")
                        .arg(replicas)
                        .arg(timeout.as_millis() as u64);
                    let wait = bounded(
                        self.settings.response_timeout + timeout,
                        pipe.query_async::<(T, u64)>(&mut conn),
                    );
                    wait.await.map(|(value, acked)| (value, Some(acked)))
                }
            };
            match reply {
                Err(BackendError::Redis(err)) if is_noscript(&err) => {
                    self.bounded(script.load_async(&mut conn)).await?;
                }
                other => return other,
            }
        }
        Err(BackendError::Protocol("NOSCRIPT after SCRIPT LOAD".into()))
    }

    /// Runs a script; when the connection had dropped (killed, server
    /// restarted) or the node stopped being the master (failover), runs it
    /// once more on the node it reconnected or moved to. Every lock script is
    /// safe to repeat: acquire is idempotent for its owner, release and
    /// renewal compare the owner.
    async fn run_script<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        cmd: &Cmd,
    ) -> Result<(T, Option<u64>, Arc<Node>), BackendError> {
        let node = self.cell.get();
        match self.eval(&node, script, cmd).await {
            Err(err) if self.worth_retrying(&err) => {
                tracing::debug!(server = %node.server, error = %err, "retrying once");
                let node = self.follow_master(&node).await;
                let (value, acked) = self.eval(&node, script, cmd).await?;
                Ok((value, acked, node))
            }
            Err(err) => Err(err),
            Ok((value, acked)) => Ok((value, acked, node)),
        }
    }

    /// Runs a pipeline whose first reply is an integer (the release), with
    /// `WAIT` appended in `sync_replicas` mode, retrying once as
    /// [`run_script`](Self::run_script) does (repeating is safe: `HDEL` of a
    /// field that is gone deletes nothing).
    async fn run_pipeline(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<(i64, Option<u64>, Arc<Node>), BackendError> {
        let mut pipe = pipe.clone();
        let mut timeout = self.settings.response_timeout;
        if let Some((replicas, wait)) = self.settings.sync_replicas {
            pipe.cmd("WAIT").arg(replicas).arg(wait.as_millis() as u64);
            timeout += wait;
        }
        let sync = self.settings.sync_replicas.is_some();
        let query = |node: Arc<Node>| {
            let pipe = &pipe;
            async move {
                let mut conn = node.conn.clone();
                let reply = if sync {
                    bounded(timeout, pipe.query_async::<(i64, u64)>(&mut conn))
                        .await
                        .map(|(value, acked)| (value, Some(acked)))
                } else {
                    bounded(timeout, pipe.query_async::<(i64,)>(&mut conn))
                        .await
                        .map(|(value,)| (value, None))
                };
                reply.map(|(value, acked)| (value, acked, node))
            }
        };
        let node = self.cell.get();
        match query(node.clone()).await {
            Err(err) if self.worth_retrying(&err) => {
                tracing::debug!(server = %node.server, error = %err, "retrying once");
                query(self.follow_master(&node).await).await
            }
            other => other,
        }
    }

    /// Errors after which the command may succeed on a reconnected (or, with
    /// Sentinel, a newly elected) master.
    fn worth_retrying(&self, err: &BackendError) -> bool {
        match err {
            BackendError::Redis(err) => {
                err.is_connection_dropped()
                    || (self.sentinel.is_some()
                        && (err.is_io_error()
                            || err.is_connection_refusal()
                            || matches!(err.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))))
            }
            BackendError::Timeout(_) => self.sentinel.is_some(),
            _ => false,
        }
    }

    /// Maps a failure of a command on `key` to the error the caller sees.
    async fn script_error(&self, key: &LockKey, err: BackendError) -> LockError {
        let node = self.cell.get();
        let mut conn = node.conn.clone();
        command_error(
            &mut conn,
            self.settings.response_timeout,
            key,
            &node.server,
            err,
        )
        .await
    }

    pub(crate) async fn acquire(
        &self,
        key: &LockKey,
        owner: &str,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        let cmd = self.scripts.acquire_cmd(key, owner, lease);
        let (reply, acked, node) = match self
            .run_script::<(i64, i64)>(&self.scripts.acquire, &cmd)
            .await
        {
            Ok(reply) => reply,
            Err(err) => return Err(self.script_error(key, err).await),
        };
        let attempt = parse_acquire(reply);
        if let (Attempt::Acquired { .. }, Some((required, _)), Some(acked)) =
            (attempt, self.settings.sync_replicas, acked)
        {
            if acked < u64::from(required) {
                // Not on enough replicas to survive a failover: give it back.
                let _ = self.release(key, owner).await;
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
    pub(crate) async fn release(&self, key: &LockKey, owner: &str) -> Result<bool, LockError> {
        let pipe = self.scripts.release_pipeline(key, owner);
        match self.run_pipeline(&pipe).await {
            Ok((deleted, acked, node)) => {
                self.check_replicated(key, acked, &node);
                Ok(deleted == 1)
            }
            Err(err) => Err(self.script_error(key, err).await),
        }
    }

    /// Takes back a grant without waking anyone (`HDEL` only): Redlock's
    /// rollback of a grant on a minority of masters. The lock was never held,
    /// so a wake-up would only send other waiters into failing attempts (and
    /// their rollbacks into waking them again).
    pub(crate) async fn rollback(&self, key: &LockKey, owner: &str) -> Result<bool, LockError> {
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL").arg(&*key.lock).arg(owner);
        let node = self.cell.get();
        let mut conn = node.conn.clone();
        match bounded(
            self.settings.response_timeout,
            pipe.query_async::<(i64,)>(&mut conn),
        )
        .await
        {
            Ok((deleted,)) => Ok(deleted == 1),
            Err(err) => Err(self.script_error(key, err).await),
        }
    }

    pub(crate) async fn force_release(&self, key: &LockKey) -> Result<bool, LockError> {
        let cmd = self.scripts.force_release_cmd(key);
        match self
            .run_script::<i64>(&self.scripts.force_release, &cmd)
            .await
        {
            Ok((deleted, acked, node)) => {
                self.check_replicated(key, acked, &node);
                Ok(deleted == 1)
            }
            Err(err) => Err(self.script_error(key, err).await),
        }
    }

    /// Raises the fencing counter of `key` to at least `token` (Redlock).
    pub(crate) async fn fence_floor(&self, key: &LockKey, token: u64) -> Result<(), LockError> {
        let script = &self.scripts.fence_floor;
        let cmd = {
            let mut cmd = evalsha(script, &[&key.fence]);
            cmd.arg(token);
            cmd
        };
        match self.run_script::<i64>(script, &cmd).await {
            Ok(_) => Ok(()),
            Err(err) => Err(self.script_error(key, err).await),
        }
    }

    /// A write that reached fewer replicas than `sync_replicas` asks is
    /// logged: a failover now could undo it.
    fn check_replicated(&self, key: &LockKey, acked: Option<u64>, node: &Node) {
        if let (Some((required, _)), Some(acked)) = (self.settings.sync_replicas, acked) {
            if acked < u64::from(required) {
                tracing::warn!(key = %key.name, server = %node.server, acked, required, "lock write not acknowledged by enough replicas");
            }
        }
    }

    /// Renews all `items` in one pipelined round trip (two when the server
    /// lost its script cache and the script has to be loaded again).
    pub(crate) async fn renew(&self, items: &[RenewItem], lease: Duration) -> Vec<Renewal> {
        let node = self.cell.get();
        match self.renew_on(&node, items, lease).await {
            Err(err) if self.worth_retrying(&err) => {
                let node = self.follow_master(&node).await;
                self.renew_on(&node, items, lease)
                    .await
                    .unwrap_or_else(|err| failed_all(items.len(), &err))
            }
            Err(err) => failed_all(items.len(), &err),
            Ok(renewals) => renewals,
        }
    }

    async fn renew_on(
        &self,
        node: &Node,
        items: &[RenewItem],
        lease: Duration,
    ) -> Result<Vec<Renewal>, BackendError> {
        let mut pipe = redis::pipe();
        let lease = lease_millis(lease);
        for (key, owner) in items {
            pipe.add_command(self.scripts.renew_cmd(key, owner, lease));
        }
        if let Some((replicas, timeout)) = self.settings.sync_replicas {
            pipe.cmd("WAIT")
                .arg(replicas)
                .arg(timeout.as_millis() as u64);
        }
        let mut conn = node.conn.clone();
        renew_pipeline(
            &mut conn,
            pipe,
            &self.scripts.renew,
            items.len(),
            self.settings.response_timeout
                + self
                    .settings
                    .sync_replicas
                    .map_or(Duration::ZERO, |(_, t)| t),
        )
        .await
    }

    /// Registers a waiter on `key`'s channel, starting the subscriber on first use.
    pub(crate) fn waiter(&self, key: &LockKey) -> WakeHandle {
        if let Some(changes) = self.changes.lock().unwrap().take() {
            let subscriber = Subscriber {
                cell: self.cell.clone(),
                settings: self.settings.clone(),
                waiters: Arc::downgrade(&self.waiters),
                changes,
            };
            tokio::spawn(subscriber.run());
        }
        self.waiters.register(&key.channel)
    }

    /// This backend's local waiters (for hand-off bookkeeping).
    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }
}

/// Sends a pipeline of renewal `EVALSHA`s (maybe followed by `WAIT`), loads
/// the script and resends once on `NOSCRIPT`, and reads one outcome per lock.
pub(crate) async fn renew_pipeline<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    mut pipe: redis::Pipeline,
    script: &Script,
    count: usize,
    timeout: Duration,
) -> Result<Vec<Renewal>, BackendError> {
    pipe.ignore_errors();
    for _ in 0..2 {
        let replies: Vec<redis::RedisResult<redis::Value>> =
            bounded(timeout, pipe.query_async(conn)).await?;
        if replies
            .iter()
            .take(count)
            .any(|r| matches!(r, Err(e) if is_noscript(e)))
        {
            bounded(timeout, script.load_async(conn)).await?;
            continue;
        }
        return Ok(replies.into_iter().take(count).map(renewal).collect());
    }
    Err(BackendError::Protocol("NOSCRIPT after SCRIPT LOAD".into()))
}

/// The outcome of one renewal reply.
pub(crate) fn renewal(reply: redis::RedisResult<redis::Value>) -> Renewal {
    match reply {
        Ok(redis::Value::Int(1)) => Renewal::Renewed,
        Ok(redis::Value::Int(_)) => Renewal::Gone,
        Ok(other) => Renewal::Failed(BackendError::Protocol(format!("{other:?}"))),
        // The lock key was overwritten with another type: not ours.
        Err(e) if is_wrong_type(&e) => Renewal::Gone,
        Err(e) => Renewal::Failed(e.into()),
    }
}

/// The acquire script's reply: `{1, token}` or `{0, pttl}`.
pub(crate) fn parse_acquire(reply: (i64, i64)) -> Attempt {
    match reply {
        (1, token) => Attempt::Acquired {
            token: token as u64,
        },
        (_, ttl) => Attempt::Busy {
            ttl: u64::try_from(ttl).ok().map(Duration::from_millis),
        },
    }
}

/// Maps a failure of a command on `key` (answered by `server` through
/// `conn`) to the error the caller sees: `WrongType` naming the key of the
/// wrong type (found with `TYPE`), else `Backend`.
pub(crate) async fn command_error<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    timeout: Duration,
    key: &LockKey,
    server: &str,
    err: BackendError,
) -> LockError {
    if matches!(&err, BackendError::Redis(e) if is_wrong_type(e)) {
        let kind: Result<String, _> = bounded(
            timeout,
            redis::cmd("TYPE").arg(&*key.lock).query_async(conn),
        )
        .await;
        return wrong_type(key, kind.as_deref().ok());
    }
    LockError::Backend {
        key: key.name.to_string(),
        server: server.to_owned(),
        source: err,
    }
}

/// `WrongType` for `key`, given the `TYPE` of its lock key.
pub(crate) fn wrong_type(key: &LockKey, lock_type: Option<&str>) -> LockError {
    let redis_key = match lock_type {
        Some("hash" | "none") => key.fence.to_string(),
        _ => key.lock.to_string(),
    };
    LockError::WrongType {
        key: key.name.to_string(),
        redis_key,
    }
}

pub(crate) fn failed_all(n: usize, err: &BackendError) -> Vec<Renewal> {
    (0..n)
        .map(|_| Renewal::Failed(BackendError::Protocol(err.to_string())))
        .collect()
}

pub(crate) fn lease_millis(lease: Duration) -> u64 {
    // Never truncate a sub-second lease to zero (or to whole seconds).
    lease.as_millis().clamp(1, u64::MAX as u128) as u64
}

pub(crate) fn is_noscript(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) || err.code() == Some("NOSCRIPT")
}

pub(crate) fn is_wrong_type(err: &RedisError) -> bool {
    let text = err.to_string();
    err.code() == Some("WRONGTYPE") || text.contains("WRONGTYPE") || text.contains("not an integer")
}

/// The task that owns the subscription connection: it subscribes to the
/// channels that have waiters, unsubscribes from those that lost them, wakes
/// a waiter per release message, and reconnects (resubscribing and waking
/// everyone, since messages may have been missed) when the connection drops.
struct Subscriber {
    cell: Arc<NodeCell>,
    settings: RedisSettings,
    waiters: Weak<Waiters>,
    changes: mpsc::UnboundedReceiver<Arc<str>>,
}

impl Subscriber {
    async fn run(mut self) {
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
                        backoff = (backoff * 2).min(Duration::from_secs(1));
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
                            waiters.wake_one(message.get_channel_name());
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

/// Runs `fut`, failing with [`BackendError::Timeout`] after `timeout`.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(BackendError::Timeout(timeout)),
    }
}
