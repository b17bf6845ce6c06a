//! The data connection's route on a cluster: the cluster connection the lock
//! commands take, made again when its runtime is gone. The cluster client
//! sends a command to the master of its keys' slot, and a pipeline to the
//! master of its first keyed command's slot (so a `WAIT` after a keyed
//! command runs where that command ran), following MOVED and ASK.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisError, Value};

use super::connection::CommandConnection;
use crate::backend::data::{refused, DataRoute};
use crate::BackendError;

/// Requests go out on the cluster connection in `conn`.
pub(super) struct ClusterRoute {
    pub(super) conn: Arc<CommandConnection>,
    pub(super) label: String,
}

impl std::fmt::Debug for ClusterRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterRoute")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl ClusterRoute {
    /// Runs `send` on a live cluster connection within `timeout`.
    async fn send<T, F, Fut>(&self, timeout: Duration, send: F) -> Result<T, RedisError>
    where
        F: FnOnce(redis::cluster_async::ClusterConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        let conn = match self.conn.get().await {
            Ok(conn) => conn,
            Err(BackendError::Redis(err)) => return Err(err),
            Err(other) => return Err(refused(other)),
        };
        match tokio::time::timeout(timeout, send(conn)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(refused(BackendError::Timeout(timeout))),
        }
    }
}

impl DataRoute for ClusterRoute {
    fn command<'a>(
        &'a self,
        cmd: &'a Cmd,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Value, RedisError>> {
        self.send(timeout, move |mut conn| async move {
            conn.req_packed_command(cmd).await
        })
        .boxed()
    }

    fn pipeline<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Vec<Value>, RedisError>> {
        self.send(timeout, move |mut conn| async move {
            conn.req_packed_commands(pipeline, offset, count).await
        })
        .boxed()
    }

    fn server(&self) -> String {
        self.label.clone()
    }

    fn db(&self) -> i64 {
        0
    }
}
