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
//!
//! A connection is also dead once it is *silent*: a lock command or read
//! that got no answer within the response timeout, on a connection that
//! answered nothing since that command was sent, marks it so (as a node's
//! connection on one node). The driver reconnects to a node only after an
//! error it sees; a chaos run found a client whose every command timed out
//! for 90 s after a failover and a round of killed connections, while new
//! clients on the same servers got answers at once. One such timeout is
//! enough: a connection that answers anything (another shard's reply) is
//! kept however slow one command is, and a master that merely hangs costs
//! one reconnect.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tokio::task::JoinHandle;

use crate::backend::redis::command::bounded;
use crate::backend::standalone::node::Heard;
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
    /// When a command on it last got an answer.
    answered: Mutex<Option<Instant>>,
    /// Found silent: made again by the next caller.
    silent: AtomicBool,
}

impl Made {
    fn new(conn: ClusterConnection) -> Self {
        let witness = tokio::runtime::Handle::try_current()
            .ok()
            .map(|runtime| runtime.spawn(std::future::pending::<()>()));
        Made {
            conn,
            witness,
            answered: Mutex::new(None),
            silent: AtomicBool::new(false),
        }
    }

    /// Whether the runtime of the connection's driver still runs.
    fn is_live(&self) -> bool {
        self.witness
            .as_ref()
            .is_none_or(|witness| !witness.is_finished())
    }

    /// Whether commands may go out on it: live and not found silent.
    fn is_usable(&self) -> bool {
        self.is_live() && !self.silent.load(Ordering::Acquire)
    }
}

/// A connection taken for one command, with what its outcome is matched
/// against ([`CommandConnection::heard`]).
pub(super) struct Taken {
    /// The connection.
    pub(super) conn: ClusterConnection,
    made: Arc<Made>,
    /// Just before the command was sent.
    sent: Instant,
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

    /// A live connection: the current one, or, when its runtime is gone (or
    /// it was found silent), a new one made on the current runtime within
    /// the connect timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection being made when the future is dropped is
    /// dropped with it, and the current one stays.
    pub(super) async fn get(&self) -> Result<ClusterConnection, BackendError> {
        Ok(self.take().await?.conn)
    }

    /// As [`get`](Self::get), for a command whose outcome is told to
    /// [`heard`](Self::heard).
    ///
    /// # Cancel safety
    ///
    /// As [`get`](Self::get).
    pub(super) async fn take(&self) -> Result<Taken, BackendError> {
        let made = self.current.lock().clone();
        if made.is_usable() {
            return Ok(Taken {
                conn: made.conn.clone(),
                made,
                sent: Instant::now(),
            });
        }
        let _turn = self.remaking.lock().await;
        let made = self.current.lock().clone();
        if made.is_usable() {
            // Made again by the caller this one waited for.
            return Ok(Taken {
                conn: made.conn.clone(),
                made,
                sent: Instant::now(),
            });
        }
        if made.is_live() {
            tracing::debug!("the cluster connection answered nothing: connecting again");
        } else {
            tracing::debug!("the cluster connection's runtime is gone: connecting again");
        }
        let conn = bounded(self.connect_timeout, self.client.get_async_connection()).await?;
        let made = Arc::new(Made::new(conn));
        let gone = std::mem::replace(&mut *self.current.lock(), made.clone());
        drop(gone);
        Ok(Taken {
            conn: made.conn.clone(),
            made,
            sent: Instant::now(),
        })
    }

    /// What the command sent on `taken` heard: an answer, or silence (a
    /// timeout), which marks its connection silent when it answered nothing
    /// since the command was sent.
    pub(super) fn heard(&self, taken: &Taken, heard: Heard) {
        match heard {
            Heard::Silence => {
                let answered = *taken.made.answered.lock();
                if answered.is_none_or(|at| at < taken.sent)
                    && !taken.made.silent.swap(true, Ordering::AcqRel)
                {
                    tracing::debug!("the cluster connection answered nothing within the response timeout: it will be made again");
                }
            }
            Heard::Answer => {
                let mut answered = taken.made.answered.lock();
                let now = Instant::now();
                if answered.is_none_or(|at| at < now) {
                    *answered = Some(now);
                }
            }
            Heard::Nothing => {}
        }
    }
}
