//! Redlock over N independent masters: every request goes to all of them in
//! parallel, each bounded by a per-node timeout small against the lease; a
//! lock is held when a majority (N/2 + 1) granted it and the time spent
//! acquiring left some validity.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::{join_all, BoxFuture, FutureExt};
use tokio::time::Instant;

use super::redis::reply;
use super::standalone::RedisBackend;
use super::DataConnection;
use super::{Attempt, Backend, Busy, Capabilities, Released, RenewItem, Renewal, Unsupported};
use crate::info::FamilyState;
use crate::lease::drift;
use crate::name::LockKey;
use crate::wakeups::Wakeups;
use crate::{BackendError, LockError, LockHolder, LockInfo, NodeAnswer};

/// What Redlock supports beyond the plain lock: neither the lock family nor
/// hot locks.
pub(crate) const CAPABILITIES: Capabilities = Capabilities {
    family: Some(Unsupported {
        backend: "Redlock",
        reason: "its masters are independent, so no one of them orders a queue, counts \
                 readers or permits for all; use a single node, Sentinel or Cluster for it",
    }),
    hot_locks: Some(Unsupported {
        backend: "Redlock",
        reason: "keep_hot is not offered with Redlock: a kept lock would have to be given up \
                 on a quorum of masters at once",
    }),
    redisson_family: Some(Unsupported {
        backend: "Redlock",
        reason: "Redlock cannot use Redisson's layout",
    }),
    leadership: Some(Unsupported {
        backend: "Redlock",
        reason: "a term must be one fencing token that every observer reads from one store, \
                 and Redlock's masters are independent (each issues its own tokens and keeps \
                 its own record), so no one of them orders the terms for all; use a single \
                 node, Sentinel or Cluster for leader election",
    }),
};

/// The random delay, in milliseconds, before a waiter tries again after a
/// vote that left the lock free with no release to come: a split vote (see
/// [`RedlockBackend::after_split`]) or a vote won too late (see
/// [`RedlockBackend::give_back`]). The Redlock algorithm's retry delay.
const RETRY_MS: std::ops::Range<u64> = 20..200;

/// A name no owner has (owners are `<client id>:<scope id>`): see
/// [`RedlockBackend::wake`].
const NO_OWNER: &str = "redlock:wake";

/// A random delay in [`RETRY_MS`].
fn retry_delay() -> Duration {
    Duration::from_millis(rand::random_range(RETRY_MS))
}

/// The masters of a Redlock.
#[derive(Debug)]
pub(crate) struct RedlockBackend {
    nodes: Vec<RedisBackend>,
    node_timeout: Duration,
    label: String,
}

impl RedlockBackend {
    pub(crate) fn new(nodes: Vec<RedisBackend>, node_timeout: Duration) -> Self {
        let servers: Vec<&str> = nodes.iter().map(Backend::server).collect();
        let label = format!("redlock {}", servers.join(","));
        RedlockBackend {
            nodes,
            node_timeout,
            label,
        }
    }

    /// How this client hears the masters' releases: one subscription per
    /// master, any of which wakes a waiter.
    pub(crate) fn wakeups(&self) -> Wakeups {
        Wakeups::quorum(self.nodes.iter().map(RedisBackend::wakeups))
    }

    /// A majority of the masters.
    fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Runs `op` on every master in parallel, each within the node timeout.
    async fn on_all<'a, T, F, Fut>(&'a self, op: F) -> Vec<Result<T, LockError>>
    where
        F: Fn(&'a RedisBackend) -> Fut,
        Fut: std::future::Future<Output = Result<T, LockError>> + 'a,
    {
        let timeout = self.node_timeout;
        join_all(self.nodes.iter().map(|node| {
            let call = op(node);
            async move {
                match tokio::time::timeout(timeout, call).await {
                    Ok(result) => result,
                    Err(_) => Err(LockError::Backend {
                        key: String::new(),
                        server: node.node_server(),
                        source: BackendError::Timeout(timeout),
                    }),
                }
            }
        }))
        .await
    }

    /// Acquires on a majority. On failure the grants are taken back on every
    /// master: quietly when they were a minority (see
    /// [`RedisBackend::silent_rollback`]), as a release when a majority
    /// granted too late (see [`give_back`](Self::give_back)). The answer is
    /// `Busy` when some master said another owner holds it (for how long,
    /// after a split vote: see [`after_split`](Self::after_split)) or when
    /// the vote was won too late (retry soon), otherwise
    /// [`LockError::QuorumNotReached`].
    async fn acquire(
        &self,
        key: &LockKey,
        owner: &str,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        let started = Instant::now();
        let replies = self.on_all(|node| node.acquire(key, owner, lease)).await;
        let mut tokens = Vec::new();
        let mut busy_ttl: Option<Option<Duration>> = None;
        let mut wrong_type = None;
        let mut answers = Vec::with_capacity(replies.len());
        for (node, reply) in self.nodes.iter().zip(replies) {
            let answer = match reply {
                Ok(Attempt::Acquired { token }) => {
                    tokens.push(token);
                    "granted".to_owned()
                }
                Ok(Attempt::Busy(Busy { ttl, .. })) => {
                    busy_ttl = Some(match (busy_ttl.flatten(), ttl) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    });
                    "busy".to_owned()
                }
                // A key of the wrong type is the caller's problem, not a quorum issue.
                Err(err @ LockError::WrongType { .. }) => {
                    wrong_type.get_or_insert(err);
                    "wrong type".to_owned()
                }
                Err(err) => error_answer(&err),
            };
            answers.push(NodeAnswer::new(node.node_server(), answer));
        }
        if let Some(err) = wrong_type {
            self.silent_rollback(key, owner).await;
            return Err(err);
        }
        let elapsed = started.elapsed();
        let valid = elapsed.saturating_add(drift(lease)) < lease;
        if tokens.len() >= self.quorum() && valid {
            // The strongest sound fencing token: the highest of the quorum's,
            // written back as a floor to the counters of a majority, so any
            // later quorum (which overlaps that majority) issues a higher one,
            // and as the holder's token on each master, so that inspect and a
            // re-entry read it from any majority.
            let token = tokens.iter().copied().max().unwrap_or(0);
            let floors = self
                .on_all(|node| node.fence_floor(key, owner, token))
                .await;
            if floors.iter().filter(|r| r.is_ok()).count() >= self.quorum() {
                return Ok(Attempt::Acquired { token });
            }
            for (answer, floor) in answers.iter_mut().zip(&floors) {
                if let Err(err) = floor {
                    answer.answer =
                        format!("granted, but fencing floor failed: {}", error_answer(err));
                }
            }
        }
        if tokens.len() >= self.quorum() {
            // Won, but too late or without its fencing floor: a lock held on
            // a majority, given back as a release is.
            self.give_back(key, owner).await;
            if !valid {
                let retry = retry_delay();
                tracing::debug!(key = %key.name, ?elapsed, ?retry, "redlock quorum reached too late; released, retrying");
                return Ok(Attempt::busy(Some(retry)));
            }
        } else {
            self.silent_rollback(key, owner).await;
        }
        if let Some(ttl) = busy_ttl {
            if tokens.is_empty() {
                return Ok(Attempt::busy(ttl));
            }
            return Ok(Attempt::busy(self.after_split(key, ttl).await));
        }
        Err(LockError::QuorumNotReached {
            key: key.name.to_string(),
            granted: tokens.len(),
            needed: self.quorum(),
            answers,
        })
    }

    /// How long to wait after losing a vote in which some masters granted
    /// the lock and others were `busy` (`ttl`: the shortest lease they
    /// showed). Those may be the grants of other contenders that lost too
    /// (waiters woken by the same release, splitting the masters between
    /// them): each gives its grants back without waking anyone, and then the
    /// lock is free with no release to come. So unless one owner holds a
    /// majority (whose release wakes the waiters), try again after a short
    /// random delay (so that the contenders do not collide again), as the
    /// Redlock algorithm prescribes.
    async fn after_split(&self, key: &LockKey, ttl: Option<Duration>) -> Option<Duration> {
        if let Ok(LockInfo {
            holder: Some(holder),
            ..
        }) = self.inspect(key).await
        {
            return holder.ttl.or(ttl);
        }
        let retry = retry_delay();
        tracing::debug!(key = %key.name, ?retry, "redlock vote split; retrying");
        Some(ttl.map_or(retry, |ttl| ttl.min(retry)))
    }

    /// Takes back `owner`'s grants on every master without waking anyone: a
    /// failed attempt's minority grants were never a lock.
    async fn silent_rollback(&self, key: &LockKey, owner: &str) {
        let _ = self.on_all(|node| node.silent_rollback(key, owner)).await;
    }

    /// Gives back a lock that a majority granted to `owner` but that is not
    /// kept (won too late, or abandoned): released on every master, with
    /// the release's wake-up. Taken back quietly, it would leave the lock
    /// free with no release to come, and the waiters (woken by a release
    /// one per master, the rest still asleep) would sleep out their wait.
    async fn give_back(&self, key: &LockKey, owner: &str) {
        let _ = self.on_all(|node| node.release(key, owner)).await;
    }

    /// Wakes the waiters of `key` on every master: the release of an owner
    /// that holds nothing anywhere (its `HDEL` deletes nothing, its
    /// `PUBLISH` goes out).
    async fn wake(&self, key: &LockKey) {
        let _ = self.on_all(|node| node.release(key, NO_OWNER)).await;
    }

    /// Releases on every master. Released when a majority had the lock;
    /// `NotHeld` (`Ok(false)`) when too few had it for it to have been ours;
    /// an error when failures leave that open.
    async fn release(&self, key: &LockKey, owner: &str) -> Result<bool, LockError> {
        let replies = self
            .on_all(|node| async move { node.release(key, owner).await.map(|r| r.deleted) })
            .await;
        let deleted = replies.iter().filter(|r| matches!(r, Ok(true))).count();
        let failed = replies.iter().filter(|r| r.is_err()).count();
        if deleted >= self.quorum() {
            Ok(true)
        } else if deleted + failed >= self.quorum() {
            match replies.into_iter().find_map(Result::err) {
                Some(err) => Err(with_key(err, key)),
                None => Ok(false),
            }
        } else {
            Ok(false)
        }
    }

    /// Deletes the lock on every master; true when any had it.
    async fn force_release(&self, key: &LockKey) -> Result<bool, LockError> {
        let replies = self.on_all(|node| node.force_release(key)).await;
        if replies.iter().any(|r| matches!(r, Ok(true))) {
            return Ok(true);
        }
        match replies.into_iter().find_map(Result::err) {
            Some(err) => Err(with_key(err, key)),
            None => Ok(false),
        }
    }

    /// Renews on every master (one pipelined batch each, in parallel): a
    /// lock is renewed when a majority renewed it, gone when so many masters
    /// no longer have it that no majority can, and failed otherwise.
    async fn renew(&self, items: &[RenewItem], lease: Duration) -> Vec<Renewal> {
        let timeout = self.node_timeout;
        let per_node: Vec<Vec<Renewal>> = join_all(self.nodes.iter().map(|node| async move {
            match tokio::time::timeout(timeout, node.renew(items, lease)).await {
                Ok(renewals) => renewals,
                Err(_) => reply::failed_all(items.len(), &BackendError::Timeout(timeout)),
            }
        }))
        .await;
        let quorum = self.quorum();
        let n = self.nodes.len();
        (0..items.len())
            .map(|i| {
                let count = |f: fn(&Renewal) -> bool| {
                    per_node.iter().filter(|r| r.get(i).is_some_and(f)).count()
                };
                let renewed = count(|r| matches!(r, Renewal::Renewed));
                let gone = count(|r| matches!(r, Renewal::Gone));
                if renewed >= quorum {
                    Renewal::Renewed
                } else if gone > n.saturating_sub(quorum) {
                    Renewal::Gone
                } else {
                    Renewal::Failed(BackendError::Protocol(format!(
                        "renewed on {renewed} of {n} masters, {quorum} needed"
                    )))
                }
            })
            .collect()
    }

    /// The answers of a majority of masters, or the first error when fewer
    /// answered.
    fn quorum_of<T>(
        &self,
        answers: Vec<Result<T, LockError>>,
        key: &str,
    ) -> Result<Vec<T>, LockError> {
        let ok = answers.iter().filter(|a| a.is_ok()).count();
        if ok < self.quorum() {
            return Err(answers
                .into_iter()
                .find_map(Result::err)
                .unwrap_or_else(|| LockError::Backend {
                    key: key.to_owned(),
                    server: self.label.clone(),
                    source: BackendError::Protocol("no master answered".into()),
                }));
        }
        Ok(answers.into_iter().filter_map(Result::ok).collect())
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo, LockError> {
        let answers = self.on_all(|node| node.inspect(key)).await;
        let infos = self.quorum_of(answers, &key.name)?;
        let holders: Vec<Option<&LockHolder>> =
            infos.iter().map(|info| info.holder.as_ref()).collect();
        Ok(LockInfo {
            name: key.name.to_string(),
            key: key.lock.to_string(),
            fence_key: key.fence(),
            holder: majority_holder(&holders, self.quorum()),
            last_fencing_token: infos.iter().filter_map(|i| i.last_fencing_token).max(),
        })
    }

    async fn list(&self, prefix: &str, name_prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        let answers = self.on_all(|node| node.list(prefix, name_prefix)).await;
        let per_node = self.quorum_of(answers, name_prefix)?;
        let mut by_name: BTreeMap<String, Vec<LockInfo>> = BTreeMap::new();
        for info in per_node.into_iter().flatten() {
            by_name.entry(info.name.clone()).or_default().push(info);
        }
        Ok(by_name
            .into_values()
            .filter_map(|infos| {
                let holders: Vec<Option<&LockHolder>> =
                    infos.iter().map(|info| info.holder.as_ref()).collect();
                let holder = majority_holder(&holders, self.quorum())?;
                let first = infos.first()?;
                Some(LockInfo {
                    name: first.name.clone(),
                    key: first.key.clone(),
                    fence_key: first.fence_key.clone(),
                    holder: Some(holder),
                    last_fencing_token: infos.iter().filter_map(|i| i.last_fencing_token).max(),
                })
            })
            .collect())
    }
}

impl Backend for RedlockBackend {
    fn server(&self) -> &str {
        &self.label
    }

    fn acquire<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Attempt, LockError>> {
        RedlockBackend::acquire(self, key, owner, lease).boxed()
    }

    fn release<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Released, LockError>> {
        RedlockBackend::release(self, key, owner)
            .map(|deleted| deleted.map(Released::deleted))
            .boxed()
    }

    /// Quiet on every master (waking on each would make the waiters of a
    /// lock held on a bare majority wake each other in a loop), unless it
    /// took back grants of a majority: that was a lock (a grant answered
    /// too late, an abandoned acquisition), and its waiters are woken as by
    /// its release.
    fn rollback<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        async move {
            let replies = self.on_all(|node| node.silent_rollback(key, owner)).await;
            let deleted = replies.iter().filter(|r| matches!(r, Ok(true))).count();
            if deleted >= self.quorum() {
                // Not a second release of `owner`: the scope may have taken
                // the lock again since the check that let this rollback run.
                self.wake(key).await;
            }
            Ok(deleted > 0)
        }
        .boxed()
    }

    fn force_release<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<bool, LockError>> {
        RedlockBackend::force_release(self, key).boxed()
    }

    fn renew<'a>(&'a self, items: &'a [RenewItem], lease: Duration) -> BoxFuture<'a, Vec<Renewal>> {
        RedlockBackend::renew(self, items, lease).boxed()
    }

    /// On every master; held when a majority still held it. Each master's
    /// wake-up wakes a waiter once (no loop: nothing is taken back).
    fn cut<'a>(
        &'a self,
        key: &'a LockKey,
        owner: &'a str,
        left: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        async move {
            let answers = self.on_all(|node| node.cut(key, owner, left)).await;
            let cut = self.quorum_of(answers, &key.name)?;
            Ok(cut.iter().filter(|held| **held).count() >= self.quorum())
        }
        .boxed()
    }

    fn shut_down(&self) {
        for node in &self.nodes {
            Backend::shut_down(node);
        }
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn data_connection(&self) -> Result<DataConnection, Unsupported> {
        Err(Unsupported {
            backend: "Redlock",
            reason: "Redlock has no single data store: its masters are independent, and data \
                     written to one of them is lost with it; keep the data in a store of its own \
                     (a fenced one, see distlock-fence)",
        })
    }

    fn inspect<'a>(&'a self, key: &'a LockKey) -> BoxFuture<'a, Result<LockInfo, LockError>> {
        RedlockBackend::inspect(self, key).boxed()
    }

    /// Removes `layout` from every master's registry; whether any recorded
    /// it. An error when a master did not answer (the operator runs it again).
    fn forget_layout<'a>(&'a self, layout: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        async move {
            let mut forgotten = false;
            for reply in self.on_all(|node| node.forget_layout(layout)).await {
                forgotten |= reply?;
            }
            Ok(forgotten)
        }
        .boxed()
    }

    /// Every layout any master that answered records; an error when none
    /// answered.
    fn layouts<'a>(
        &'a self,
        mine: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, LockError>> {
        async move {
            let replies = self.on_all(|node| node.layouts(mine)).await;
            let mut all: Option<Vec<String>> = None;
            let mut failure = None;
            for reply in replies {
                match reply {
                    Ok(layouts) => all.get_or_insert_with(Vec::new).extend(layouts),
                    Err(err) => failure = Some(err),
                }
            }
            match (all, failure) {
                (Some(mut all), _) => {
                    all.sort();
                    all.dedup();
                    Ok(all)
                }
                (None, Some(err)) => Err(err),
                (None, None) => Ok(Vec::new()),
            }
        }
        .boxed()
    }

    /// The most any master that answered counts (a client subscribes on
    /// every master); an error when none answered.
    fn subscribers<'a>(
        &'a self,
        keys: &'a [LockKey],
    ) -> BoxFuture<'a, Result<Vec<u64>, LockError>> {
        async move {
            let replies = self.on_all(|node| node.subscribers(keys)).await;
            let mut most: Option<Vec<u64>> = None;
            let mut failure = None;
            for reply in replies {
                match reply {
                    Ok(counts) => {
                        let most = most.get_or_insert_with(|| vec![0; keys.len()]);
                        for (m, c) in most.iter_mut().zip(counts) {
                            *m = (*m).max(c);
                        }
                    }
                    Err(err) => failure = Some(err),
                }
            }
            match (most, failure) {
                (Some(most), _) => Ok(most),
                (None, Some(err)) => Err(err),
                (None, None) => Ok(vec![0; keys.len()]),
            }
        }
        .boxed()
    }

    /// Refused, as acquisition is (`family_unsupported`): no one master
    /// knows the primitive's holders and waiters.
    fn inspect_family<'a>(
        &'a self,
        key: &'a LockKey,
    ) -> BoxFuture<'a, Result<FamilyState, LockError>> {
        let Unsupported { backend, reason } = self.capabilities().family.unwrap_or(Unsupported {
            backend: "Redlock",
            reason: "its masters are independent",
        });
        let err = LockError::Unsupported {
            key: key.name.to_string(),
            primitive: key.kind.describe(),
            backend,
            reason,
        };
        async move { Err(err) }.boxed()
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        name_prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LockInfo>, LockError>> {
        RedlockBackend::list(self, prefix, name_prefix).boxed()
    }
}

/// The holder that a majority of masters record (one entry per master,
/// `None` where it is free): its highest token and shortest lease.
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

fn error_answer(err: &LockError) -> String {
    match err {
        LockError::Backend { source, .. } => format!("error: {source}"),
        other => format!("error: {other}"),
    }
}

/// Names the lock in an error raised by a per-node timeout.
fn with_key(err: LockError, key: &LockKey) -> LockError {
    match err {
        LockError::Backend { server, source, .. } => LockError::Backend {
            key: key.name.to_string(),
            server,
            source,
        },
        other => other,
    }
}
