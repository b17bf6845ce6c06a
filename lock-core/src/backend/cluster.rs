//! Redis Cluster: every key and the wake-up channel of a lock share one hash
//! tag, so each script runs on the one master that owns the lock's slot;
//! wake-ups use sharded pub/sub (`SPUBLISH`/`SSUBSCRIBE`) on that shard, and
//! renewals are pipelined per master.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, PushInfo, PushKind, Script, Value};
use tokio::sync::mpsc;

use super::redis::{
    bounded, command_error, failed_all, is_noscript, lease_millis, parse_acquire, RedisSettings,
    Scripts,
};
use super::{Attempt, RenewItem, Renewal};
use crate::key::LockKey;
use crate::wake::{Waiters, WakeHandle};
use crate::{BackendError, LockError};

/// Makes a client builder for the cluster's seed nodes, with the user's
/// TLS settings (the builder is not `Clone`).
pub(crate) type MakeBuilder = Arc<dyn Fn() -> ClusterClientBuilder + Send + Sync>;

/// A Redis Cluster, reached through any of its nodes.
pub(crate) struct ClusterBackend {
    conn: ClusterConnection,
    /// Builds the clients of the command and subscription connections.
    make_builder: MakeBuilder,
    label: String,
    settings: RedisSettings,
    scripts: Scripts,
    waiters: Arc<Waiters>,
    changes: Mutex<Option<mpsc::UnboundedReceiver<Arc<str>>>>,
    /// The masters of the slot ranges, as last read with `CLUSTER SLOTS`;
    /// read again after a renewal round in which a lock failed (its slot may
    /// have moved).
    slot_map: Mutex<Option<Arc<SlotMap>>>,
}

/// Slot ranges and the `host:port` of their masters.
type SlotMap = Vec<(u16, u16, String)>;

impl std::fmt::Debug for ClusterBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBackend")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl ClusterBackend {
    /// Connects to the cluster that `builder` (seeded with node URLs) reaches.
    pub(crate) async fn connect(
        make_builder: MakeBuilder,
        seeds: Vec<String>,
        settings: RedisSettings,
    ) -> Result<Self, LockError> {
        let label = format!("cluster {}", seeds.join(","));
        let client: ClusterClient = configure(make_builder(), &settings)
            .build()
            .map_err(|err| super::redis::connect_error(&label, err))?;
        let conn =
            match tokio::time::timeout(settings.connect_timeout, client.get_async_connection())
                .await
            {
                Ok(Ok(conn)) => conn,
                Ok(Err(err)) => return Err(super::redis::connect_error(&label, err)),
                Err(_) => {
                    return Err(LockError::Connect {
                        server: label,
                        source: BackendError::Timeout(settings.connect_timeout),
                    })
                }
            };
        let scripts = Scripts::new(true);
        // SCRIPT LOAD is routed to every node.
        let mut loading = conn.clone();
        for script in scripts.all() {
            if let Err(err) =
                bounded(settings.response_timeout, script.load_async(&mut loading)).await
            {
                return Err(match err {
                    BackendError::Redis(err) => super::redis::connect_error(&label, err),
                    source => LockError::Connect {
                        server: label,
                        source,
                    },
                });
            }
        }
        let (waiters, changes) = Waiters::subscribed();
        Ok(ClusterBackend {
            conn,
            make_builder,
            label,
            settings,
            scripts,
            waiters,
            changes: Mutex::new(Some(changes)),
            slot_map: Mutex::new(None),
        })
    }

    pub(crate) fn server(&self) -> &str {
        &self.label
    }

    /// This backend's local waiters (for hand-off bookkeeping).
    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        &self.waiters
    }

    /// The command connection, for read-only inspection (`inspect.rs`).
    pub(crate) fn command_connection(&self) -> ClusterConnection {
        self.conn.clone()
    }

    pub(crate) fn response_timeout(&self) -> Duration {
        self.settings.response_timeout
    }

    /// The masters serving slots, as `(host, port)`.
    pub(crate) async fn masters(&self) -> Result<Vec<(String, u16)>, BackendError> {
        let mut masters: Vec<(String, u16)> = self
            .slot_masters()
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

    /// Runs a script by `EVALSHA` (routed to the master of its keys' slot,
    /// following MOVED/ASK), loading it on `NOSCRIPT` (a promoted replica
    /// may not have it).
    async fn run_script<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        cmd: &Cmd,
    ) -> Result<T, BackendError> {
        let mut conn = self.conn.clone();
        for _ in 0..3 {
            match bounded(
                self.settings.response_timeout,
                cmd.query_async::<T>(&mut conn),
            )
            .await
            {
                Err(BackendError::Redis(err)) if is_noscript(&err) => {
                    bounded(self.settings.response_timeout, script.load_async(&mut conn)).await?;
                }
                Err(BackendError::Redis(err)) if err.is_connection_dropped() => {
                    tracing::debug!(cluster = %self.label, error = %err, "retrying after a dropped connection");
                }
                other => return other,
            }
        }
        Err(BackendError::Protocol(
            "the script could not be run after reloading".into(),
        ))
    }

    async fn script_error(&self, key: &LockKey, err: BackendError) -> LockError {
        let mut conn = self.conn.clone();
        command_error(
            &mut conn,
            self.settings.response_timeout,
            key,
            &self.label,
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
        match self
            .run_script::<(i64, i64)>(&self.scripts.acquire, &cmd)
            .await
        {
            Ok(reply) => Ok(parse_acquire(reply)),
            Err(err) => Err(self.script_error(key, err).await),
        }
    }

    /// `HDEL` of the owner's field (the hash's only one: an atomic
    /// compare-and-delete) and `SPUBLISH` of the wake-up, pipelined to the
    /// lock's master (both keys share its slot).
    pub(crate) async fn release(&self, key: &LockKey, owner: &str) -> Result<bool, LockError> {
        let pipe = self.scripts.release_pipeline(key, owner);
        let mut conn = self.conn.clone();
        let mut reply = Err(BackendError::Protocol("not sent".into()));
        for _ in 0..2 {
            reply = bounded(
                self.settings.response_timeout,
                pipe.query_async::<(i64,)>(&mut conn),
            )
            .await;
            match &reply {
                Err(BackendError::Redis(err)) if err.is_connection_dropped() => continue,
                _ => break,
            }
        }
        match reply {
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
            Ok(deleted) => Ok(deleted == 1),
            Err(err) => Err(self.script_error(key, err).await),
        }
    }

    /// The master (`host:port`) of every slot range, from `CLUSTER SLOTS`.
    async fn slot_masters(&self) -> Result<Vec<(u16, u16, String)>, BackendError> {
        let mut conn = self.conn.clone();
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
            masters.push((*start as u16, *end as u16, format!("{host}:{port}")));
        }
        Ok(masters)
    }

    /// Renews `items` with one pipeline per master (grouped by the current
    /// slot map; a lock whose slot moved meanwhile fails this round and is
    /// retried on the next, after the map is read again).
    pub(crate) async fn renew(&self, items: &[RenewItem], lease: Duration) -> Vec<Renewal> {
        let cached = self.slot_map.lock().unwrap().clone();
        let masters = match cached {
            Some(masters) => masters,
            None => match self.slot_masters().await {
                Ok(masters) => {
                    let masters = Arc::new(masters);
                    *self.slot_map.lock().unwrap() = Some(masters.clone());
                    masters
                }
                Err(err) => return failed_all(items.len(), &err),
            },
        };
        let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, (key, _)) in items.iter().enumerate() {
            let slot = key_slot(key.lock.as_bytes());
            let node = masters
                .iter()
                .find(|(start, end, _)| (*start..=*end).contains(&slot))
                .map_or_else(String::new, |(_, _, node)| node.clone());
            groups.entry(node).or_default().push(i);
        }
        let lease = lease_millis(lease);
        let rounds = groups.into_values().map(|indices| async move {
            let outcomes = self.renew_group(items, &indices, lease).await;
            (indices, outcomes)
        });
        let mut renewals: Vec<Option<Renewal>> = (0..items.len()).map(|_| None).collect();
        for (indices, outcomes) in futures_util::future::join_all(rounds).await {
            for (i, outcome) in indices.into_iter().zip(outcomes) {
                renewals[i] = Some(outcome);
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
            *self.slot_map.lock().unwrap() = None;
        }
        renewals
    }

    async fn renew_group(
        &self,
        items: &[RenewItem],
        indices: &[usize],
        lease: u64,
    ) -> Vec<Renewal> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &i in indices {
            let (key, owner) = &items[i];
            pipe.add_command(self.scripts.renew_cmd(key, owner, lease));
        }
        let first = &items[indices[0]].0;
        let route = SingleNodeRoutingInfo::SpecificNode(Route::new(
            key_slot(first.lock.as_bytes()),
            SlotAddr::Master,
        ));
        let mut conn = self.conn.clone();
        for _ in 0..2 {
            let sent = conn.route_pipeline(pipe.clone(), 0, indices.len(), route.clone());
            let replies = match bounded(self.settings.response_timeout, sent).await {
                Ok(replies) => replies,
                Err(err) => return failed_all(indices.len(), &err),
            };
            let noscript = replies
                .iter()
                .any(|r| matches!(r, Value::ServerError(e) if e.code() == "NOSCRIPT"));
            if noscript {
                let load = self.scripts.renew.load_async(&mut conn);
                if let Err(err) = bounded(self.settings.response_timeout, load).await {
                    return failed_all(indices.len(), &err);
                }
                continue;
            }
            return replies
                .into_iter()
                .map(|reply| match reply {
                    Value::ServerError(e) => super::redis::renewal(Err(e.into())),
                    other => super::redis::renewal(Ok(other)),
                })
                .collect();
        }
        failed_all(
            indices.len(),
            &BackendError::Protocol("NOSCRIPT after SCRIPT LOAD".into()),
        )
    }

    /// Registers a waiter on `key`'s sharded channel, starting the
    /// subscriber on first use.
    pub(crate) fn waiter(&self, key: &LockKey) -> WakeHandle {
        if let Some(changes) = self.changes.lock().unwrap().take() {
            let subscriber = ShardedSubscriber {
                make_builder: self.make_builder.clone(),
                settings: self.settings.clone(),
                waiters: Arc::downgrade(&self.waiters),
                changes,
                label: self.label.clone(),
            };
            tokio::spawn(subscriber.run());
        }
        self.waiters.register(&key.channel)
    }
}

/// The task that owns the cluster's sharded subscriptions: one RESP3
/// connection per master (the cluster client's), `SSUBSCRIBE`d to the
/// channels that have waiters. The client resubscribes after reconnects and
/// slot moves by itself; since messages may be lost meanwhile, a
/// disconnection wakes every waiter.
struct ShardedSubscriber {
    make_builder: MakeBuilder,
    settings: RedisSettings,
    waiters: Weak<Waiters>,
    changes: mpsc::UnboundedReceiver<Arc<str>>,
    label: String,
}

impl ShardedSubscriber {
    async fn run(mut self) {
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
            backoff = (backoff * 2).min(Duration::from_secs(1));
        };
        let mut subscribed: HashSet<Arc<str>> = HashSet::new();
        // Channels whose (un)subscription failed, retried on a timer.
        let mut pending: HashSet<Arc<str>> = HashSet::new();
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
                    if let Err(err) = self
                        .reconcile(&mut conn, &waiters, &mut subscribed, &channel)
                        .await
                    {
                        tracing::warn!(cluster = %self.label, channel = %channel, error = %err, "sharded subscription failed; retrying");
                        pending.insert(channel);
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
                                waiters.wake_one(&channel);
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
                bounded(timeout, conn.ssubscribe(&**channel)).await?;
                subscribed.insert(channel.clone());
                waiters.set_ready(channel, true);
            }
            (true, true) => waiters.set_ready(channel, true),
            (false, true) => {
                bounded(timeout, conn.sunsubscribe(&**channel)).await?;
                subscribed.remove(channel);
            }
            (false, false) => {}
        }
        Ok(())
    }
}

/// The timeouts and retries of every cluster connection.
fn configure(builder: ClusterClientBuilder, settings: &RedisSettings) -> ClusterClientBuilder {
    builder
        .connection_timeout(settings.connect_timeout)
        .response_timeout(settings.response_timeout)
        .retries(3)
}

fn channel_name(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

/// The cluster slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::key_slot;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"lock:{order:42}"), key_slot(b"order:42"));
        assert_eq!(key_slot(b"lock:{order:42}:fence"), key_slot(b"order:42"));
        assert_ne!(key_slot(b"{}x"), key_slot(b""));
    }
}
