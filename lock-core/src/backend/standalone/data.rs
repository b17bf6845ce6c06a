//! The data connection's route on one Redis master: the node the lock
//! commands go to (standalone: the one node's reconnecting connection;
//! Sentinel: the master the client follows, never one the sentinels
//! deposed).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisError, Value};

use super::node::{Heard, Node};
use super::sentinel::Follower;
use super::NodeCell;
use crate::backend::data::{refused, DataRoute};
use crate::BackendError;

/// Requests go to the node in `cell`; with Sentinel, through `follower`.
#[derive(Debug)]
pub(super) struct NodeRoute {
    pub(super) cell: Arc<NodeCell>,
    pub(super) follower: Option<Arc<Follower>>,
}

impl NodeRoute {
    /// The node the next request goes to: with Sentinel, never one the
    /// sentinels deposed ([`BackendError::MasterUnreachable`] instead).
    async fn node(&self) -> Result<Arc<Node>, RedisError> {
        match &self.follower {
            Some(follower) => follower.usable_node().await.map_err(refused),
            None => Ok(self.cell.get()),
        }
    }

    /// After `err` on `node`: with Sentinel, an error that may mean a
    /// failover (the node answers `READONLY`, or is gone) has the sentinels
    /// asked again, so that the next request goes to the master they name.
    /// The failed request is not sent again: it may have run.
    async fn after_error(&self, node: &Arc<Node>, err: &RedisError) {
        let Some(follower) = &self.follower else {
            return;
        };
        let moved = err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || matches!(err.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"));
        if moved {
            tracing::debug!(server = %node.server, error = %err, "data connection: asking the sentinels for the master");
            let _ = follower.follow_master(node).await;
        }
    }

    /// Runs `send` on the node's connection within `timeout`.
    async fn send<T, F, Fut>(&self, timeout: Duration, send: F) -> Result<T, RedisError>
    where
        F: FnOnce(redis::aio::ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = Result<T, RedisError>>,
    {
        let node = self.node().await?;
        let taken = node.conn.take(timeout).await.map_err(refused)?;
        let outcome = tokio::time::timeout(timeout, send(taken.conn.clone())).await;
        node.conn.settle(
            &taken,
            match &outcome {
                Ok(Ok(_)) => Heard::Answer,
                Ok(Err(err)) if err.code().is_some() => Heard::Answer,
                Ok(Err(_)) => Heard::Nothing,
                Err(_) => Heard::Silence,
            },
        );
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(_) => Err(refused(BackendError::Timeout(timeout))),
        };
        if let Err(err) = &outcome {
            self.after_error(&node, err).await;
        }
        outcome
    }
}

impl DataRoute for NodeRoute {
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
        self.cell.get().server.clone()
    }

    fn db(&self) -> i64 {
        self.cell.get().conn.current().get_db()
    }
}
