//! The node commands go to: its client, its multiplexed connection, and its
//! address. The connection ([`NodeConnection`]) is replaced after a response
//! timeout the connection did not answer past.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError};

use crate::backend::redis::command::{bounded, Target};
use crate::backend::redis::scripts::Scripts;
use crate::backend::redis::version;
use crate::backend::redis::{server_name, RedisSettings};
use crate::sync::Mutex;
use crate::{BackendError, LockError};
use tokio::sync::watch;

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) client: redis::Client,
    pub(crate) conn: NodeConnection,
    pub(crate) server: String,
}

impl Node {
    /// Connects and loads the scripts, within the connect and response timeouts.
    pub(crate) async fn connect(
        client: redis::Client,
        settings: &RedisSettings,
        scripts: &Scripts,
    ) -> Result<Self, LockError> {
        let server = server_name(&client);
        let mut conn = match open(&client, settings.connect_timeout).await {
            Ok(conn) => conn,
            Err(BackendError::Redis(err)) => return Err(connect_error(&server, err)),
            Err(source) => return Err(LockError::Connect { server, source }),
        };
        // A server too old for the lock is refused now, naming its version.
        let mut info_cmd = redis::cmd("INFO");
        let info = info_cmd.arg("server").query_async::<String>(&mut conn);
        match bounded(settings.response_timeout, info).await {
            Ok(info) => version::NODE.check(&server, Ok(info))?,
            Err(BackendError::Redis(err)) => version::NODE.check(&server, Err(err))?,
            Err(source) => return Err(LockError::Connect { server, source }),
        }
        // Load the scripts up front, in one round trip, so that the first
        // concurrent acquisitions do not each meet NOSCRIPT. (After a restart,
        // a failover or SCRIPT FLUSH they are reloaded on demand.)
        match bounded(settings.response_timeout, conn.load(&scripts.all())).await {
            Ok(()) => {}
            Err(BackendError::Redis(err)) => return Err(connect_error(&server, err)),
            Err(source) => return Err(LockError::Connect { server, source }),
        }
        Ok(Node {
            conn: NodeConnection::new(client.clone(), conn, server.clone(), settings),
            client,
            server,
        })
    }
}

/// Opens a multiplexed connection that reconnects by itself after it
/// drops, within `connect_timeout`.
async fn open(
    client: &redis::Client,
    connect_timeout: Duration,
) -> Result<ConnectionManager, BackendError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        // Every call on this connection is bounded by `command::run`
        // (which also covers waiting for a reconnect): a per-request
        // timer of the connection itself would be a second timer per
        // command.
        .set_response_timeout(None)
        .set_number_of_retries(2)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500));
    let connecting = ConnectionManager::new_with_config(client.clone(), config);
    match tokio::time::timeout(connect_timeout, connecting).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(err)) => Err(BackendError::Redis(err)),
        Err(_) => Err(BackendError::Timeout(connect_timeout)),
    }
}

/// How often, at most, a new connection is tried while the current one is
/// dead and commands keep coming: an attempt made during a partition is
/// itself stuck in TCP's back-off after the heal, so a later command does
/// not wait for it alone.
const RETRY_GAP: Duration = Duration::from_millis(200);

/// A node's command connection: a multiplexed `ConnectionManager`, which
/// reconnects by itself when the connection drops, replaced by a new one
/// when it stops answering while it stays open.
///
/// A partition that drops packets silently (a blackhole) leaves the socket
/// open: nothing drops, so the manager never reconnects, and after the
/// partition heals every command still queues behind the bytes TCP keeps
/// retransmitting with exponential back-off (over a second after a few
/// seconds of partition). So:
///
/// - **Live -> dead.** A command that gets no answer within the response
///   timeout, on a connection that answered nothing since that command was
///   sent, marks the connection dead. One such timeout is enough: a
///   connection that answers anything is kept however slow one command is,
///   and a server that is merely slow costs one reconnect.
/// - **Dead.** A command that finds the connection dead is not sent on it:
///   it starts a new connection in the background (unless one was started
///   less than [`RETRY_GAP`] ago) and waits, within its response timeout,
///   for any attempt to succeed; if none does, it fails with
///   [`BackendError::Timeout`] without having been sent. Attempts run
///   within the connect timeout each, and a new one is started by a later
///   command while earlier ones may still hang in the partition, so that
///   the first command after the heal goes out on a connection opened after
///   it.
/// - **Dead -> live.** The first attempt that connects replaces the
///   connection: a new generation, so that an answer or a timeout of a
///   command sent on an older connection says nothing about the new one.
///
/// The commands sent on the old connection are not sent again: whether
/// they ran stays unknown to their callers (a timeout), as before.
#[derive(Debug)]
pub(crate) struct NodeConnection {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: redis::Client,
    server: String,
    connect_timeout: Duration,
    state: Mutex<State>,
    /// The generation in use, told to the commands that wait for a new one.
    replaced: watch::Sender<u64>,
}

#[derive(Debug)]
struct State {
    conn: ConnectionManager,
    generation: u64,
    /// When a command on this generation last got an answer (a reply or a
    /// server error).
    answered: Option<Instant>,
    /// Found silent: commands wait for a new connection.
    dead: bool,
    /// When the latest attempt at a new connection started.
    attempted: Option<Instant>,
}

/// The connection a command is sent on, with what its outcome is matched
/// against: the generation, and when it was taken (just before sending).
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    pub(crate) conn: ConnectionManager,
    generation: u64,
    sent: Instant,
}

impl NodeConnection {
    fn new(
        client: redis::Client,
        conn: ConnectionManager,
        server: String,
        settings: &RedisSettings,
    ) -> Self {
        let (replaced, _) = watch::channel(0);
        NodeConnection {
            inner: Arc::new(Inner {
                client,
                server,
                connect_timeout: settings.connect_timeout,
                state: Mutex::new(State {
                    conn,
                    generation: 0,
                    answered: None,
                    dead: false,
                    attempted: None,
                }),
                replaced,
            }),
        }
    }

    /// The connection as it is now, dead or not (the database number, an
    /// error's follow-up question).
    pub(crate) fn current(&self) -> ConnectionManager {
        self.inner.state.lock().conn.clone()
    }

    /// The connection the next command goes out on; when the current one was
    /// found dead, a new one, waited for within `timeout` (see the type's
    /// doc): [`BackendError::Timeout`] when none connected by then, the
    /// command not sent.
    ///
    /// # Cancel safety
    /// Cancel safe: an attempt at a new connection goes on in the background
    /// and replaces the dead one when it connects.
    pub(crate) async fn take(&self, timeout: Duration) -> Result<Taken, BackendError> {
        let mut replaced = self.inner.replaced.subscribe();
        {
            let mut state = self.inner.state.lock();
            if !state.dead {
                return Ok(state.taken());
            }
            let due = state.attempted.is_none_or(|at| at.elapsed() >= RETRY_GAP);
            if due {
                state.attempted = Some(Instant::now());
                self.attempt(state.generation);
            }
        }
        let waited = tokio::time::timeout(timeout, async {
            loop {
                {
                    let state = self.inner.state.lock();
                    if !state.dead {
                        return Ok(state.taken());
                    }
                }
                if replaced.changed().await.is_err() {
                    return Err(BackendError::Timeout(timeout));
                }
            }
        })
        .await;
        waited.unwrap_or(Err(BackendError::Timeout(timeout)))
    }

    /// Connects anew in the background; the connection replaces generation
    /// `dead` if that one is still in place (and dead) when it connects.
    fn attempt(&self, dead: u64) {
        let inner = Arc::downgrade(&self.inner);
        let (client, connect_timeout) = (self.inner.client.clone(), self.inner.connect_timeout);
        tokio::spawn(async move {
            let opened = open(&client, connect_timeout).await;
            let Some(inner) = inner.upgrade() else {
                return;
            };
            match opened {
                Ok(conn) => {
                    let generation = {
                        let mut state = inner.state.lock();
                        if !state.dead || state.generation != dead {
                            return;
                        }
                        state.conn = conn;
                        state.generation = state.generation.wrapping_add(1);
                        state.answered = None;
                        state.dead = false;
                        state.attempted = None;
                        state.generation
                    };
                    tracing::debug!(server = %inner.server, "command connection replaced");
                    inner.replaced.send_replace(generation);
                }
                Err(err) => {
                    tracing::debug!(server = %inner.server, error = %err, "a new command connection failed; the next command tries again");
                }
            }
        });
    }

    /// Records what a command sent on `taken` heard: an answer keeps the
    /// connection; silence (a response timeout) with no answer on the
    /// connection since the command was sent marks it dead.
    pub(crate) fn settle(&self, taken: &Taken, heard: Heard) {
        let mut state = self.inner.state.lock();
        if state.generation != taken.generation {
            return;
        }
        match heard {
            Heard::Answer => state.answered = Some(Instant::now()),
            Heard::Silence if !state.dead && state.answered.is_none_or(|at| at < taken.sent) => {
                tracing::warn!(
                    server = %self.inner.server,
                    "no answer on the command connection within the response timeout; the \
                     next command opens a new connection"
                );
                state.dead = true;
            }
            Heard::Silence | Heard::Nothing => {}
        }
    }
}

/// What a command heard from its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A reply, or an error reply of the server.
    Answer,
    /// Nothing within the response timeout.
    Silence,
    /// Neither: the connection dropped (the manager reconnects by itself),
    /// or the error is not about the connection.
    Nothing,
}

impl Heard {
    /// What the command whose outcome is `outcome` heard.
    pub(crate) fn of<T>(outcome: &Result<T, BackendError>) -> Heard {
        match outcome {
            Ok(_) => Heard::Answer,
            Err(err) => Heard::of_error(err),
        }
    }

    /// What a read whose outcome is `outcome` heard (its backend error
    /// keeps the command's [`BackendError`]).
    pub(crate) fn of_read<T>(outcome: &Result<T, LockError>) -> Heard {
        match outcome {
            Ok(_) => Heard::Answer,
            Err(LockError::Backend { source, .. }) => Heard::of_error(source),
            // A typed answer about the data (a wrong type, a bad name).
            Err(_) => Heard::Answer,
        }
    }

    fn of_error(err: &BackendError) -> Heard {
        match err {
            // Ours, or the client's own (a Cluster client's response
            // timeout).
            BackendError::Timeout(_) => Heard::Silence,
            BackendError::Redis(err) if err.is_timeout() => Heard::Silence,
            BackendError::Redis(err) if err.code().is_some() => Heard::Answer,
            BackendError::Protocol(_) => Heard::Answer,
            _ => Heard::Nothing,
        }
    }
}

impl State {
    fn taken(&self) -> Taken {
        Taken {
            conn: self.conn.clone(),
            generation: self.generation,
            sent: Instant::now(),
        }
    }
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
