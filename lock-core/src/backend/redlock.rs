//! Redlock over N independent masters: every request goes to all of them in
//! parallel, each bounded by a per-node timeout small against the lease; a
//! lock is held when a majority (N/2 + 1) granted it and the time spent
//! acquiring left some validity.

use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use super::redis::RedisBackend;
use super::{Attempt, RenewItem, Renewal};
use crate::guard::drift;
use crate::key::LockKey;
use crate::wake::WakeHandle;
use crate::{BackendError, LockError, NodeAnswer};

/// The masters of a Redlock.
#[derive(Debug)]
pub(crate) struct RedlockBackend {
    nodes: Vec<RedisBackend>,
    node_timeout: Duration,
    label: String,
}

impl RedlockBackend {
    pub(crate) fn new(nodes: Vec<RedisBackend>, node_timeout: Duration) -> Self {
        let servers: Vec<&str> = nodes.iter().map(RedisBackend::server).collect();
        let label = format!("redlock {}", servers.join(","));
        RedlockBackend {
            nodes,
            node_timeout,
            label,
        }
    }

    pub(crate) fn server(&self) -> &str {
        &self.label
    }

    /// The masters.
    pub(crate) fn nodes(&self) -> &[RedisBackend] {
        &self.nodes
    }

    /// A majority of the masters.
    pub(crate) fn quorum(&self) -> usize {
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

    /// Acquires on a majority. On failure the lock is released on every
    /// master (a grant on a minority must not linger), and the answer is
    /// `Busy` when some master said another owner holds it, otherwise
    /// [`LockError::QuorumNotReached`].
    pub(crate) async fn acquire(
        &self,
        key: &LockKey,
        owner: &str,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        let started = Instant::now();
        let replies = self.on_all(|node| node.acquire(key, owner, lease)).await;
        let mut tokens = Vec::new();
        let mut busy_ttl: Option<Option<Duration>> = None;
        let mut answers = Vec::with_capacity(replies.len());
        for (node, reply) in self.nodes.iter().zip(&replies) {
            let answer = match reply {
                Ok(Attempt::Acquired { token }) => {
                    tokens.push(*token);
                    "granted".to_owned()
                }
                Ok(Attempt::Busy { ttl }) => {
                    busy_ttl = Some(match (busy_ttl.flatten(), *ttl) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    });
                    "busy".to_owned()
                }
                Err(LockError::WrongType { .. }) => {
                    // A key of the wrong type is the caller's problem, not a quorum issue.
                    let err = replies
                        .into_iter()
                        .find_map(|r| match r {
                            Err(e @ LockError::WrongType { .. }) => Some(e),
                            _ => None,
                        })
                        .expect("found above");
                    self.release_everywhere(key, owner).await;
                    return Err(err);
                }
                Err(err) => error_answer(err),
            };
            answers.push(NodeAnswer::new(node.node_server(), answer));
        }
        let elapsed = started.elapsed();
        let valid = elapsed + drift(lease) < lease;
        if tokens.len() >= self.quorum() && valid {
            // The strongest sound fencing token: the highest of the quorum's,
            // written back as a floor to the counters of a majority, so any
            // later quorum (which overlaps that majority) issues a higher one.
            let token = tokens.iter().copied().max().unwrap_or(0);
            let floors = self.on_all(|node| node.fence_floor(key, token)).await;
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
        self.release_everywhere(key, owner).await;
        if let Some(ttl) = busy_ttl {
            return Ok(Attempt::Busy { ttl });
        }
        if tokens.len() >= self.quorum() && !valid {
            tracing::debug!(key = %key.name, ?elapsed, "redlock quorum reached too late; released");
            return Ok(Attempt::Busy { ttl: None });
        }
        Err(LockError::QuorumNotReached {
            key: key.name.to_string(),
            granted: tokens.len(),
            needed: self.quorum(),
            answers,
        })
    }

    /// Takes back a failed attempt's grants on every master, quietly (see
    /// [`RedisBackend::rollback`]).
    async fn release_everywhere(&self, key: &LockKey, owner: &str) {
        let _ = self.on_all(|node| node.rollback(key, owner)).await;
    }

    /// Releases on every master. Released when a majority had the lock;
    /// `NotHeld` (`Ok(false)`) when too few had it for it to have been ours;
    /// an error when failures leave that open.
    pub(crate) async fn release(&self, key: &LockKey, owner: &str) -> Result<bool, LockError> {
        let replies = self.on_all(|node| node.release(key, owner)).await;
        let deleted = replies.iter().filter(|r| matches!(r, Ok(true))).count();
        let failed = replies.iter().filter(|r| r.is_err()).count();
        if deleted >= self.quorum() {
            Ok(true)
        } else if deleted + failed >= self.quorum() {
            let err = replies
                .into_iter()
                .find_map(Result::err)
                .expect("failed > 0");
            Err(with_key(err, key))
        } else {
            Ok(false)
        }
    }

    /// Deletes the lock on every master; true when any had it.
    pub(crate) async fn force_release(&self, key: &LockKey) -> Result<bool, LockError> {
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
    pub(crate) async fn renew(&self, items: &[RenewItem], lease: Duration) -> Vec<Renewal> {
        let timeout = self.node_timeout;
        let per_node: Vec<Vec<Renewal>> = join_all(self.nodes.iter().map(|node| async move {
            match tokio::time::timeout(timeout, node.renew(items, lease)).await {
                Ok(renewals) => renewals,
                Err(_) => super::redis::failed_all(items.len(), &BackendError::Timeout(timeout)),
            }
        }))
        .await;
        let quorum = self.quorum();
        let n = self.nodes.len();
        (0..items.len())
            .map(|i| {
                let renewed = per_node
                    .iter()
                    .filter(|r| matches!(r[i], Renewal::Renewed))
                    .count();
                let gone = per_node
                    .iter()
                    .filter(|r| matches!(r[i], Renewal::Gone))
                    .count();
                if renewed >= quorum {
                    Renewal::Renewed
                } else if gone > n - quorum {
                    Renewal::Gone
                } else {
                    Renewal::Failed(BackendError::Protocol(format!(
                        "renewed on {renewed} of {n} masters, {quorum} needed"
                    )))
                }
            })
            .collect()
    }

    /// A waiter woken by a release on any master.
    pub(crate) fn waiters(&self, key: &LockKey) -> Vec<WakeHandle> {
        self.nodes.iter().map(|node| node.waiter(key)).collect()
    }
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
