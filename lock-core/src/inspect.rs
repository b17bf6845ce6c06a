//! Read-only inspection of locks ([`LockClient::inspect`], [`LockClient::list`]),
//! for operators' tools and monitoring; the same on every backend.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;

use crate::backend::redis::{bounded, is_wrong_type};
use crate::backend::Backend;
use crate::key::LockKey;
use crate::{BackendError, LockClient, LockError};

/// How many keys one `SCAN` step asks for (a hint to Redis, not a limit).
const SCAN_COUNT: usize = 500;

/// What the backend knows about one lock, as returned by
/// [`LockClient::inspect`] and [`LockClient::list`].
///
/// A snapshot taken in one round trip; the lock may change right after.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name (`order:42`), without the key prefix.
    pub name: String,
    /// The backend's key of the lock (`lock:{order:42}` with the default
    /// prefix).
    pub key: String,
    /// The current holder, or `None` when the lock is free.
    pub holder: Option<LockHolder>,
    /// The last fencing token issued for this lock (its counter), or `None`
    /// when none was ever issued. It survives the lock's expiry and release.
    pub last_fencing_token: Option<u64>,
}

/// The holder of a lock, as the backend records it.
///
/// The backend stores one entry per holding owner, not a hold count:
/// reentrant (nested) holds are counted inside the holder's process
/// ([`LockGuard::hold_count`](crate::LockGuard::hold_count)) and are not
/// visible here. [`LockHolder::holds`] is what the backend sees.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// The owner id, `<client-id>:<scope>`.
    pub owner: String,
    /// The fencing token this holder was given.
    pub fencing_token: u64,
    /// The remaining lease, or `None` when the lock has no expiry (which the
    /// lock itself never sets: someone wrote the key by hand).
    pub ttl: Option<Duration>,
    /// Holds as the backend records them: 1 per holding owner (so 1 for a
    /// healthy lock). Nested holds inside the owner are not counted here.
    pub holds: usize,
}

impl LockHolder {
    /// The id of the client holding the lock (the owner id up to its last `:`).
    pub fn client_id(&self) -> &str {
        self.owner
            .rsplit_once(':')
            .map_or(&*self.owner, |(client, _)| client)
    }
}

impl LockClient {
    /// What the backend knows about lock `name`: its holder (owner, fencing
    /// token, remaining lease) or that it is free, and the last fencing token
    /// issued for it.
    ///
    /// One round trip on Redis (`TYPE`, `HGETALL`, `PTTL`, `GET`, pipelined,
    /// not atomic). Reentrant holds are counted in the holder's process and
    /// do not show (see [`LockHolder`]).
    ///
    /// Errors: [`LockError::InvalidKey`], [`LockError::WrongType`] when a key
    /// of the lock holds another type, [`LockError::Backend`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let client = lock_core::LockClient::memory();
    /// let guard = client.lock("order:42").acquire().await?;
    /// let info = client.inspect("order:42").await?;
    /// let holder = info.holder.expect("held");
    /// assert_eq!(holder.owner, guard.owner());
    /// assert_eq!(holder.fencing_token, guard.fencing_token());
    /// assert_eq!(info.last_fencing_token, Some(guard.fencing_token()));
    /// guard.release().await?;
    /// assert!(client.inspect("order:42").await?.holder.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let key = LockKey::new(&self.inner.prefix, name)?;
        match &self.inner.backend {
            Backend::Redis(redis) => {
                let mut target = Target::Conn(redis.command_connection());
                inspect_node(
                    &mut target,
                    &key,
                    redis.response_timeout(),
                    &redis.node_server(),
                )
                .await
            }
            Backend::Cluster(cluster) => {
                // The lock's keys share a slot: the pipeline goes to its master.
                let mut target = Target::Cluster(cluster.command_connection());
                inspect_node(
                    &mut target,
                    &key,
                    cluster.response_timeout(),
                    cluster.server(),
                )
                .await
            }
            Backend::Redlock(redlock) => {
                let nodes = redlock.nodes();
                let answers = futures_util::future::join_all(nodes.iter().map(|node| async {
                    let mut target = Target::Conn(node.command_connection());
                    inspect_node(
                        &mut target,
                        &key,
                        node.response_timeout(),
                        &node.node_server(),
                    )
                    .await
                }))
                .await;
                let infos = quorum_of(answers, redlock.quorum())?;
                let holders: Vec<Option<&LockHolder>> =
                    infos.iter().map(|info| info.holder.as_ref()).collect();
                Ok(LockInfo {
                    name: key.name.to_string(),
                    key: key.lock.to_string(),
                    holder: majority_holder(&holders, redlock.quorum()),
                    last_fencing_token: infos.iter().filter_map(|i| i.last_fencing_token).max(),
                })
            }
            Backend::Memory(store) => {
                let (holder, last_fencing_token) = store.inspect(&key);
                Ok(LockInfo {
                    name: key.name.to_string(),
                    key: key.lock.to_string(),
                    holder: holder.map(|h| LockHolder {
                        owner: h.owner,
                        fencing_token: h.token,
                        ttl: Some(h.ttl),
                        holds: 1,
                    }),
                    last_fencing_token,
                })
            }
        }
    }

    /// Every lock currently held whose name starts with `name_prefix` (`""`
    /// for all), sorted by name.
    ///
    /// On Redis this walks the keyspace with `SCAN` (never `KEYS`, so the
    /// server is not blocked), matching only this client's key prefix, in
    /// batches of a few hundred keys with one pipelined round trip per batch
    /// (`HGETALL`, `PTTL`, `GET`). A lock taken or released during the walk
    /// may or may not be listed, as `SCAN` guarantees.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lock_core::LockError> {
    /// let client = lock_core::LockClient::memory();
    /// let _a = client.lock("job:a").acquire().await?;
    /// let _b = client.lock("job:b").acquire().await?;
    /// let _c = client.lock("order:1").acquire().await?;
    /// let jobs = client.list("job:").await?;
    /// let names: Vec<&str> = jobs.iter().map(|l| l.name.as_str()).collect();
    /// assert_eq!(names, ["job:a", "job:b"]);
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, name_prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        let prefix = &self.inner.prefix;
        let mut locks = match &self.inner.backend {
            Backend::Redis(redis) => {
                let mut target = Target::Conn(redis.command_connection());
                let server = redis.node_server();
                list_node(
                    &mut target,
                    prefix,
                    name_prefix,
                    redis.response_timeout(),
                    &server,
                )
                .await?
            }
            Backend::Cluster(cluster) => {
                // SCAN walks one node: ask every master.
                let masters = cluster
                    .masters()
                    .await
                    .map_err(|source| LockError::Backend {
                        key: format!("{name_prefix}*"),
                        server: cluster.server().to_owned(),
                        source,
                    })?;
                let mut locks = Vec::new();
                for (host, port) in masters {
                    let server = format!("{host}:{port}");
                    let mut target = Target::ClusterNode(cluster.command_connection(), host, port);
                    let timeout = cluster.response_timeout();
                    locks.extend(
                        list_node(&mut target, prefix, name_prefix, timeout, &server).await?,
                    );
                }
                locks
            }
            Backend::Redlock(redlock) => {
                let nodes = redlock.nodes();
                let answers = futures_util::future::join_all(nodes.iter().map(|node| async {
                    let mut target = Target::Conn(node.command_connection());
                    let server = node.node_server();
                    list_node(
                        &mut target,
                        prefix,
                        name_prefix,
                        node.response_timeout(),
                        &server,
                    )
                    .await
                }))
                .await;
                let per_node = quorum_of(answers, redlock.quorum())?;
                let mut by_name: BTreeMap<String, Vec<LockInfo>> = BTreeMap::new();
                for info in per_node.into_iter().flatten() {
                    by_name.entry(info.name.clone()).or_default().push(info);
                }
                by_name
                    .into_values()
                    .filter_map(|infos| {
                        let holders: Vec<Option<&LockHolder>> =
                            infos.iter().map(|info| info.holder.as_ref()).collect();
                        let holder = majority_holder(&holders, redlock.quorum())?;
                        Some(LockInfo {
                            name: infos[0].name.clone(),
                            key: infos[0].key.clone(),
                            holder: Some(holder),
                            last_fencing_token: infos
                                .iter()
                                .filter_map(|i| i.last_fencing_token)
                                .max(),
                        })
                    })
                    .collect()
            }
            Backend::Memory(store) => store
                .held_locks()
                .into_iter()
                .filter_map(|(lock, h, last)| {
                    let name = name_of(prefix, &lock)?;
                    name.starts_with(name_prefix).then(|| LockInfo {
                        name: name.to_owned(),
                        holder: Some(LockHolder {
                            owner: h.owner,
                            fencing_token: h.token,
                            ttl: Some(h.ttl),
                            holds: 1,
                        }),
                        key: lock.to_string(),
                        last_fencing_token: last,
                    })
                })
                .collect(),
        };
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(locks)
    }
}

/// Where inspection commands go.
enum Target {
    /// One node's connection (standalone, Sentinel's master, a Redlock master).
    Conn(ConnectionManager),
    /// The cluster connection, routing by key (all keys of one lock share a slot).
    Cluster(ClusterConnection),
    /// One cluster master, for `SCAN` and the pipelines on what it found.
    ClusterNode(ClusterConnection, String, u16),
}

impl Target {
    async fn pipeline(
        &mut self,
        pipe: redis::Pipeline,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<redis::RedisResult<Value>>, BackendError> {
        match self {
            Target::Conn(conn) => bounded(timeout, pipe.query_async(conn)).await,
            Target::Cluster(conn) => bounded(timeout, pipe.query_async(conn)).await,
            Target::ClusterNode(conn, host, port) => {
                let route = SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                };
                let values = bounded(timeout, conn.route_pipeline(pipe, 0, count, route)).await?;
                Ok(values
                    .into_iter()
                    .map(|value| match value {
                        Value::ServerError(err) => Err(err.into()),
                        value => Ok(value),
                    })
                    .collect())
            }
        }
    }

    async fn scan(
        &mut self,
        cmd: redis::Cmd,
        timeout: Duration,
    ) -> Result<(u64, Vec<Vec<u8>>), BackendError> {
        match self {
            Target::Conn(conn) => bounded(timeout, cmd.query_async(conn)).await,
            Target::Cluster(conn) => bounded(timeout, cmd.query_async(conn)).await,
            Target::ClusterNode(conn, host, port) => {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                let value = bounded(timeout, conn.route_command(cmd, route)).await?;
                from_reply(Ok(value))
            }
        }
    }
}

/// The answers of a majority of Redlock masters, or the first error when
/// fewer answered.
fn quorum_of<T>(answers: Vec<Result<T, LockError>>, quorum: usize) -> Result<Vec<T>, LockError> {
    let ok = answers.iter().filter(|a| a.is_ok()).count();
    if ok < quorum {
        return Err(answers
            .into_iter()
            .find_map(Result::err)
            .expect("fewer answers than masters"));
    }
    Ok(answers.into_iter().filter_map(Result::ok).collect())
}

/// The holder that a majority of Redlock masters record (one entry per
/// master, `None` where it is free): its highest token and shortest lease.
fn majority_holder(holders: &[Option<&LockHolder>], quorum: usize) -> Option<LockHolder> {
    let owners: Vec<&str> = holders.iter().flatten().map(|h| h.owner.as_str()).collect();
    let owner = owners
        .iter()
        .find(|owner| owners.iter().filter(|o| o == owner).count() >= quorum)?;
    let same: Vec<&LockHolder> = holders
        .iter()
        .flatten()
        .filter(|h| h.owner == *owner)
        .copied()
        .collect();
    Some(LockHolder {
        owner: owner.to_string(),
        fencing_token: same.iter().map(|h| h.fencing_token).max().unwrap_or(0),
        ttl: same.iter().filter_map(|h| h.ttl).min(),
        holds: 1,
    })
}

/// [`LockClient::inspect`] on one node.
async fn inspect_node(
    target: &mut Target,
    key: &LockKey,
    timeout: Duration,
    server: &str,
) -> Result<LockInfo, LockError> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("TYPE").arg(&*key.lock);
    pipe.cmd("HGETALL").arg(&*key.lock);
    pipe.cmd("PTTL").arg(&*key.lock);
    pipe.cmd("GET").arg(&*key.fence);
    let backend_error = |source: BackendError| LockError::Backend {
        key: key.name.to_string(),
        server: server.to_owned(),
        source,
    };
    let replies = target
        .pipeline(pipe, 4, timeout)
        .await
        .map_err(backend_error)?;
    let wrong_type = |redis_key: &str| LockError::WrongType {
        key: key.name.to_string(),
        redis_key: redis_key.to_owned(),
    };
    let [kind, fields, ttl, fence]: [redis::RedisResult<Value>; 4] =
        replies.try_into().map_err(|replies: Vec<_>| {
            backend_error(BackendError::Protocol(format!(
                "{} replies to a pipeline of 4",
                replies.len()
            )))
        })?;
    let kind: String = from_reply(kind).map_err(backend_error)?;
    let holder = match kind.as_str() {
        "none" => None,
        "hash" => {
            let fields = fields.map_err(|e| backend_error(e.into()))?;
            let ttl = ttl.map_err(|e| backend_error(e.into()))?;
            holder_from(fields, ttl).map_err(backend_error)?
        }
        _ => return Err(wrong_type(&key.lock)),
    };
    let last_fencing_token = match fence {
        Ok(value) => fence_from(value).ok_or_else(|| wrong_type(&key.fence))?,
        Err(err) if is_wrong_type(&err) => return Err(wrong_type(&key.fence)),
        Err(err) => return Err(backend_error(err.into())),
    };
    Ok(LockInfo {
        name: key.name.to_string(),
        key: key.lock.to_string(),
        holder,
        last_fencing_token,
    })
}

/// [`LockClient::list`] on one node.
async fn list_node(
    target: &mut Target,
    prefix: &str,
    name_prefix: &str,
    timeout: Duration,
    server: &str,
) -> Result<Vec<LockInfo>, LockError> {
    let backend_error = |source: BackendError| LockError::Backend {
        key: format!("{name_prefix}*"),
        server: server.to_owned(),
        source,
    };
    let pattern = format!("{}{{{}*}}", glob_escape(prefix), glob_escape(name_prefix));
    let mut locks = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let scan = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .arg("TYPE")
            .arg("hash")
            .to_owned();
        let (next, keys) = target.scan(scan, timeout).await.map_err(backend_error)?;
        let keys: Vec<String> = keys
            .into_iter()
            .filter_map(|k| String::from_utf8(k).ok())
            .filter(|k| name_of(prefix, k).is_some())
            .collect();
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for lock in &keys {
                pipe.cmd("HGETALL").arg(lock);
                pipe.cmd("PTTL").arg(lock);
                pipe.cmd("GET").arg(format!("{lock}:fence"));
            }
            let replies = target
                .pipeline(pipe, keys.len() * 3, timeout)
                .await
                .map_err(backend_error)?;
            let mut replies = replies.into_iter();
            for lock in keys {
                let (Some(fields), Some(ttl), Some(fence)) =
                    (replies.next(), replies.next(), replies.next())
                else {
                    return Err(backend_error(BackendError::Protocol(
                        "too few replies to a pipeline".into(),
                    )));
                };
                // Replaced by another type, or gone, since SCAN saw it.
                let (Ok(fields), Ok(ttl)) = (fields, ttl) else {
                    continue;
                };
                let Some(holder) = holder_from(fields, ttl).map_err(backend_error)? else {
                    continue;
                };
                let name = name_of(prefix, &lock).unwrap_or_default().to_owned();
                locks.push(LockInfo {
                    name,
                    key: lock,
                    holder: Some(holder),
                    last_fencing_token: fence.ok().and_then(fence_from).flatten(),
                });
            }
        }
        if next == 0 {
            return Ok(locks);
        }
        cursor = next;
    }
}

/// The lock name stored under `key`, when `key` is a lock key of `prefix`
/// (`<prefix>{name}`; the fence counters end in `:fence`, not `}`).
fn name_of<'a>(prefix: &str, key: &'a str) -> Option<&'a str> {
    key.strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')
        .filter(|name| !name.is_empty())
}

/// Escapes the glob characters of `SCAN MATCH` so that `s` matches itself.
fn glob_escape(s: &str) -> String {
    let mut escaped = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The holder recorded in a lock hash (`HGETALL` reply) with its `PTTL`;
/// `None` for an empty (deleted) hash.
fn holder_from(fields: Value, ttl: Value) -> Result<Option<LockHolder>, BackendError> {
    // A map in RESP3, a flat array of pairs in RESP2; both parse into a map.
    let fields: BTreeMap<String, String> = from_reply(Ok(fields))?;
    let ttl: i64 = from_reply(Ok(ttl))?;
    let holds = fields.len();
    let Some((owner, token)) = fields.into_iter().next() else {
        return Ok(None);
    };
    let fencing_token = token
        .parse()
        .map_err(|_| BackendError::Protocol(format!("fencing token `{token}` is not a number")))?;
    Ok(Some(LockHolder {
        owner,
        fencing_token,
        ttl: u64::try_from(ttl).ok().map(Duration::from_millis),
        holds,
    }))
}

/// The fence counter from a `GET` reply: `Some(None)` when unset, `None`
/// when it is not a number.
fn fence_from(value: Value) -> Option<Option<u64>> {
    match value {
        Value::Nil => Some(None),
        value => redis::from_redis_value::<u64>(value).ok().map(Some),
    }
}

fn from_reply<T: redis::FromRedisValue>(
    reply: redis::RedisResult<Value>,
) -> Result<T, BackendError> {
    redis::from_redis_value(reply?).map_err(|e| redis::RedisError::from(e).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_are_recognised_by_their_key_shape() {
        assert_eq!(name_of("lock:", "lock:{order:42}"), Some("order:42"));
        assert_eq!(name_of("lock:", "lock:{order:42}:fence"), None);
        assert_eq!(name_of("lock:", "lock:{}"), None);
        assert_eq!(name_of("lock:", "other:{a}"), None);
        assert_eq!(name_of("", "{a}}"), Some("a}"));
    }

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert_eq!(glob_escape("lock:"), "lock:");
    }
}
