//! The cluster connection that commands go out on, made again on the
//! runtime in use once the runtime it was made on is gone.
//!
//! A cluster connection is a handle to a driver task, spawned on the runtime
//! that made the connection; the driver reconnects to nodes by itself, but
//! dies with its runtime, after which every call on the handle fails
//! ("broken pipe"). So the cell keeps the client, and beside each connection
//! a task spawned on the same runtime that never ends by itself: once that
//! task is finished, the runtime is gone, and the next caller makes a new
//! connection on its own runtime and swaps it in.
//!
//! States: *live* (the runtime of the connection runs; callers clone it) and
//! *dead* (its runtime is gone; the first caller to see it makes the next
//! one while later callers wait for that one instead of making their own).

use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tokio::task::JoinHandle;

use crate::backend::redis::command::bounded;
use crate::sync::Mutex;
use crate::BackendError;

/// The connection commands take: see the module's documentation.
pub(super) struct CommandConnection {
    client: ClusterClient,
    connect_timeout: Duration,
    current: Mutex<Arc<Made>>,
    /// Held while a dead connection is replaced, so that callers that find
    /// it dead at once make one new connection between them.
    remaking: tokio::sync::Mutex<()>,
}

/// One connection and the witness of its runtime.
struct Made {
    conn: ClusterConnection,
    /// A task on the connection's runtime that only ends with it (none when
    /// the connection was made outside a tokio runtime: then it is never
    /// made again).
    witness: Option<JoinHandle<()>>,
}

impl Made {
    fn new(conn: ClusterConnection) -> Self {
        let witness = tokio::runtime::Handle::try_current()
            .ok()
            .map(|runtime| runtime.spawn(std::future::pending::<()>()));
        Made { conn, witness }
    }

    /// Whether the runtime of the connection's driver still runs.
    fn is_live(&self) -> bool {
        self.witness
            .as_ref()
            .is_none_or(|witness| !witness.is_finished())
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        if let Some(witness) = &self.witness {
            witness.abort();
        }
    }
}

impl CommandConnection {
    /// The cell of `conn`, made by `client` on the current runtime.
    pub(super) fn new(
        client: ClusterClient,
        conn: ClusterConnection,
        connect_timeout: Duration,
    ) -> Self {
        CommandConnection {
            client,
            connect_timeout,
            current: Mutex::new(Arc::new(Made::new(conn))),
            remaking: tokio::sync::Mutex::new(()),
        }
    }

    /// The connection as it is, live or not (for a follow-up command whose
    /// failure only costs detail in an error).
    pub(super) fn current(&self) -> ClusterConnection {
        self.current.lock().conn.clone()
    }

    /// A live connection: the current one, or, when its runtime is gone, a
    /// new one made on the current runtime within the connect timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection being made when the future is dropped is
    /// dropped with it, and the current one stays.
    pub(super) async fn get(&self) -> Result<ClusterConnection, BackendError> {
        let made = self.current.lock().clone();
        if made.is_live() {
            return Ok(made.conn.clone());
        }
        let _turn = self.remaking.lock().await;
        let made = self.current.lock().clone();
        if made.is_live() {
            // Made again by the caller this one waited for.
            return Ok(made.conn.clone());
        }
        tracing::debug!("the cluster connection's runtime is gone: connecting again");
        let conn = bounded(self.connect_timeout, self.client.get_async_connection()).await?;
        let made = Arc::new(Made::new(conn));
        let gone = std::mem::replace(&mut *self.current.lock(), made.clone());
        drop(gone);
        Ok(made.conn.clone())
    }
}
