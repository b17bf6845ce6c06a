//! One Redis node: the lock scripts, the multiplexed command connection and
//! the subscription connection that wakes waiters.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink, PubSubStream};
use redis::{ErrorKind, RedisError, Script, ServerErrorKind};
use tokio::sync::mpsc;

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

#[derive(Debug)]
struct Scripts {
    acquire: Script,
    renew: Script,
    force_release: Script,
}

/// Connection settings of a Redis backend.
#[derive(Debug, Clone)]
pub(crate) struct RedisSettings {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

#[derive(Debug)]
pub(crate) struct RedisBackend {
    client: redis::Client,
    conn: ConnectionManager,
    server: String,
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
    pub(crate) async fn connect(
        client: redis::Client,
        settings: RedisSettings,
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
        let scripts = Scripts {
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            force_release: Script::new(FORCE_RELEASE),
        };
        // Load the scripts up front, in one round trip, so that the first
        // concurrent acquisitions do not each meet NOSCRIPT. (After a restart
        // or SCRIPT FLUSH they are reloaded on demand.)
        let mut load = redis::pipe();
        for script in [&scripts.acquire, &scripts.renew, &scripts.force_release] {
            load.load_script(script).ignore();
        }
        let mut loading = conn.clone();
        match bounded(settings.response_timeout, load.exec_async(&mut loading)).await {
            Ok(()) => {}
            Err(BackendError::Redis(err)) => return Err(connect_error(&server, err)),
            Err(source) => return Err(LockError::Connect { server, source }),
        }
        let (waiters, changes) = Waiters::subscribed();
        Ok(RedisBackend {
            client,
            conn,
            server,
            settings,
            scripts,
            waiters,
            changes: Mutex::new(Some(changes)),
        })
    }

    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// Runs `fut` within the response timeout.
    async fn bounded<T>(
        &self,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, BackendError> {
        bounded(self.settings.response_timeout, fut).await
    }

    /// Runs a script invocation; when the connection had dropped (killed,
    /// server restarted), runs it once more on the connection the manager
    /// re-established. Every lock script is safe to repeat: acquire is
    /// idempotent for its owner, release and renewal compare the owner.
    async fn run_script<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, BackendError> {
        let mut conn = self.conn.clone();
        match self.bounded(invocation.invoke_async(&mut conn)).await {
            Err(BackendError::Redis(err)) if err.is_connection_dropped() => {
                tracing::debug!(server = %self.server, error = %err, "connection dropped; retrying once");
                self.bounded(invocation.invoke_async(&mut conn)).await
            }
            other => other,
        }
    }

    /// Maps a failure of a script on `key` to the error the caller sees.
    async fn script_error(&self, key: &LockKey, err: BackendError) -> LockError {
        if let BackendError::Redis(e) = &err {
            if is_wrong_type(e) {
                // Find out which of the lock's keys is of the wrong kind.
                let mut conn = self.conn.clone();
                let kind: Result<String, _> = self
                    .bounded(redis::cmd("TYPE").arg(&*key.lock).query_async(&mut conn))
                    .await;
                let redis_key = match kind.as_deref() {
                    Ok("hash" | "none") => key.fence.to_string(),
                    _ => key.lock.to_string(),
                };
                return LockError::WrongType {
                    key: key.name.to_string(),
                    redis_key,
                };
            }
        }
        LockError::Backend {
            key: key.name.to_string(),
            server: self.server.clone(),
            source: err,
        }
    }

    pub(crate) async fn acquire(
        &self,
        key: &LockKey,
        owner: &str,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        let mut invocation = self.scripts.acquire.prepare_invoke();
        invocation
            .key(&*key.lock)
            .key(&*key.fence)
            .arg(owner)
            .arg(lease_millis(lease));
        let reply: Result<(i64, i64), _> = self.run_script(&invocation).await;
        match reply {
            Ok((1, token)) => Ok(Attempt::Acquired {
                token: token as u64,
            }),
            Ok((_, ttl)) => Ok(Attempt::Busy {
                ttl: u64::try_from(ttl).ok().map(Duration::from_millis),
            }),
            Err(err) => Err(self.script_error(key, err).await),
        }
    }

    /// Deletes the lock when `owner` holds it and wakes a waiter, in one
    /// pipelined round trip without a script: the hash's only field is its
    /// owner, so `HDEL` of that field checks the owner and deletes the key in
    /// one atomic command. The `PUBLISH` follows it unconditionally; a wake-up
    /// after a release that deleted nothing only costs a waiter one attempt.
    pub(crate) async fn release(&self, key: &LockKey, owner: &str) -> Result<bool, LockError> {
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL")
            .arg(&*key.lock)
            .arg(owner)
            .cmd("PUBLISH")
            .arg(&*key.channel)
            .arg("1")
            .ignore();
        let mut conn = self.conn.clone();
        let reply: Result<(i64,), BackendError> = match self
            .bounded(pipe.query_async(&mut conn))
            .await
        {
            // Repeating is safe: HDEL of a field that is gone deletes nothing.
            Err(BackendError::Redis(err)) if err.is_connection_dropped() => {
                tracing::debug!(server = %self.server, error = %err, "connection dropped; retrying once");
                self.bounded(pipe.query_async(&mut conn)).await
            }
            other => other,
        };
        match reply {
            Ok((deleted,)) => Ok(deleted == 1),
            Err(err) => Err(self.script_error(key, err).await),
        }
    }

    pub(crate) async fn force_release(&self, key: &LockKey) -> Result<bool, LockError> {
        let mut invocation = self.scripts.force_release.prepare_invoke();
        invocation.key(&*key.lock).key(&*key.channel);
        match self.run_script::<i64>(&invocation).await {
            Ok(deleted) => Ok(deleted == 1),
            Err(err) => Err(self.script_error(key, err).await),
        }
    }

    /// Renews all `items` in one pipelined round trip (two when the server
    /// lost its script cache and the script has to be loaded again).
    pub(crate) async fn renew(&self, items: &[RenewItem], lease: Duration) -> Vec<Renewal> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let lease = lease_millis(lease);
        for (key, owner) in items {
            pipe.cmd("EVALSHA")
                .arg(self.scripts.renew.get_hash())
                .arg(1)
                .arg(&*key.lock)
                .arg(&**owner)
                .arg(lease);
        }
        let mut conn = self.conn.clone();
        for _ in 0..2 {
            let replies: Vec<redis::RedisResult<i64>> =
                match self.bounded(pipe.query_async(&mut conn)).await {
                    Ok(replies) => replies,
                    Err(err) => return failed_all(items.len(), &err),
                };
            if replies
                .iter()
                .any(|r| matches!(r, Err(e) if is_noscript(e)))
            {
                if let Err(err) = self.bounded(self.scripts.renew.load_async(&mut conn)).await {
                    return failed_all(items.len(), &err);
                }
                continue;
            }
            return replies
                .into_iter()
                .map(|reply| match reply {
                    Ok(1) => Renewal::Renewed,
                    Ok(_) => Renewal::Gone,
                    // The lock key was overwritten with another type: not ours.
                    Err(e) if is_wrong_type(&e) => Renewal::Gone,
                    Err(e) => Renewal::Failed(e.into()),
                })
                .collect();
        }
        let err = BackendError::Protocol("NOSCRIPT after SCRIPT LOAD".into());
        failed_all(items.len(), &err)
    }

    /// Registers a waiter on `key`'s channel, starting the subscriber on first use.
    pub(crate) fn waiter(&self, key: &LockKey) -> WakeHandle {
        if let Some(changes) = self.changes.lock().unwrap().take() {
            let subscriber = Subscriber {
                client: self.client.clone(),
                settings: self.settings.clone(),
                waiters: Arc::downgrade(&self.waiters),
                changes,
                server: self.server.clone(),
            };
            tokio::spawn(subscriber.run());
        }
        self.waiters.register(&key.channel)
    }

    /// See [`Backend::expect_wake`](super::Backend::expect_wake).
    pub(crate) fn expect_wake(&self, key: &LockKey, expected: bool) {
        self.waiters.expect_wake(&key.channel, expected);
    }

    /// See [`Backend::wake_local`](super::Backend::wake_local).
    pub(crate) fn wake_local(&self, key: &LockKey) {
        self.waiters.wake_local(&key.channel);
    }

    /// Registers a waiter on `key`'s channel when it is already subscribed.
    pub(crate) fn waiter_if_subscribed(&self, key: &LockKey) -> Option<WakeHandle> {
        self.waiters.register_if_ready(&key.channel)
    }
}

fn failed_all(n: usize, err: &BackendError) -> Vec<Renewal> {
    (0..n)
        .map(|_| Renewal::Failed(BackendError::Protocol(err.to_string())))
        .collect()
}

fn lease_millis(lease: Duration) -> u64 {
    // Never truncate a sub-second lease to zero (or to whole seconds).
    lease.as_millis().clamp(1, u64::MAX as u128) as u64
}

fn is_noscript(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) || err.code() == Some("NOSCRIPT")
}

fn is_wrong_type(err: &RedisError) -> bool {
    let text = err.to_string();
    err.code() == Some("WRONGTYPE") || text.contains("WRONGTYPE") || text.contains("not an integer")
}

/// The task that owns the subscription connection: it subscribes to the
/// channels that have waiters, unsubscribes from those that lost them, wakes
/// a waiter per release message, and reconnects (resubscribing and waking
/// everyone, since messages may have been missed) when the connection drops.
struct Subscriber {
    client: redis::Client,
    settings: RedisSettings,
    waiters: Weak<Waiters>,
    changes: mpsc::UnboundedReceiver<Arc<str>>,
    server: String,
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
                        tracing::warn!(server = %self.server, error = %err, "lock wake-up subscription failed; retrying");
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
                        tracing::warn!(server = %self.server, error = %err, "lock wake-up subscription lost; reconnecting");
                        connection = None;
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
                        tracing::debug!(server = %self.server, "lock wake-up connection closed; reconnecting");
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
        let connecting = self.client.get_async_pubsub();
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
async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(BackendError::Timeout(timeout)),
    }
}
