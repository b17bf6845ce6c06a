//! The one path every lock command takes to a Redis node: a pipeline sent
//! within a timeout, its replies kept one by one, and, when a script reply is
//! `NOSCRIPT` (a restarted or promoted node, `SCRIPT FLUSH`), the scripts
//! loaded on that node and the pipeline sent once more.

use std::future::Future;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{ErrorKind, Pipeline, RedisError, RedisResult, Script, ServerErrorKind, Value};

use crate::BackendError;

/// One reply per command of a pipeline (ignored commands have none).
pub(crate) type Replies = Vec<RedisResult<Value>>;

/// Where a pipeline goes: one node's connection, or the cluster connection
/// (routed by the keys, or to one node).
pub(crate) trait Target: Send {
    /// Sends `pipe` (`count` commands whose replies are kept).
    fn send<'a>(
        &'a mut self,
        pipe: &'a Pipeline,
        count: usize,
    ) -> impl Future<Output = RedisResult<Replies>> + Send + 'a;

    /// Loads `scripts` where `send` sends.
    fn load<'a>(
        &'a mut self,
        scripts: &'a [&'a Script],
    ) -> impl Future<Output = RedisResult<()>> + Send + 'a;
}

impl Target for ConnectionManager {
    fn send<'a>(
        &'a mut self,
        pipe: &'a Pipeline,
        _count: usize,
    ) -> impl Future<Output = RedisResult<Replies>> + Send + 'a {
        pipe.query_async(self)
    }

    fn load<'a>(
        &'a mut self,
        scripts: &'a [&'a Script],
    ) -> impl Future<Output = RedisResult<()>> + Send + 'a {
        let mut load = redis::pipe();
        for script in scripts {
            load.load_script(script).ignore();
        }
        async move { load.exec_async(self).await }
    }
}

/// The cluster connection, with an optional fixed node.
pub(crate) struct Routed {
    pub(crate) conn: ClusterConnection,
    /// `None`: routed by the commands' keys (all of one slot).
    pub(crate) node: Option<SingleNodeRoutingInfo>,
}

impl Target for Routed {
    async fn send<'a>(&'a mut self, pipe: &'a Pipeline, count: usize) -> RedisResult<Replies> {
        let Some(node) = self.node.clone() else {
            return pipe.query_async(&mut self.conn).await;
        };
        let values = self
            .conn
            .route_pipeline(pipe.clone(), 0, count, node)
            .await?;
        Ok(values
            .into_iter()
            .map(|value| match value {
                Value::ServerError(err) => Err(err.into()),
                value => Ok(value),
            })
            .collect())
    }

    async fn load<'a>(&'a mut self, scripts: &'a [&'a Script]) -> RedisResult<()> {
        match self.node.clone() {
            // SCRIPT LOAD without a node goes to every node.
            None => {
                for script in scripts {
                    script.load_async(&mut self.conn).await?;
                }
            }
            Some(node) => {
                let mut load = redis::pipe();
                for script in scripts {
                    load.load_script(script);
                }
                self.conn
                    .route_pipeline(load, 0, scripts.len(), node)
                    .await?;
            }
        }
        Ok(())
    }
}

/// Sends `pipe` (`count` kept replies) to `target` within `timeout`; on a
/// `NOSCRIPT` reply, loads `scripts` there and sends it once more (every
/// lock command is safe to repeat: acquire is idempotent for its owner,
/// release, renewal and rollback compare the owner). A second `NOSCRIPT`
/// stays in its reply.
pub(crate) async fn run<T: Target>(
    target: &mut T,
    pipe: &Pipeline,
    count: usize,
    scripts: &[&Script],
    timeout: Duration,
) -> Result<Replies, BackendError> {
    let replies = bounded(timeout, target.send(pipe, count)).await?;
    if !replies
        .iter()
        .any(|r| matches!(r, Err(e) if is_noscript(e)))
    {
        return Ok(replies);
    }
    bounded(timeout, target.load(scripts)).await?;
    bounded(timeout, target.send(pipe, count)).await
}

/// Whether `err` is `NOSCRIPT`: the node does not have the script (it
/// restarted, was promoted, or its scripts were flushed).
fn is_noscript(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) || err.code() == Some("NOSCRIPT")
}

/// Runs `fut`, failing with [`BackendError::Timeout`] after `timeout`.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = RedisResult<T>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(BackendError::Timeout(timeout)),
    }
}
