//! The one path every lock command takes to a Redis node: a pipeline sent
//! within a timeout, its replies kept one by one, and, when a script reply is
//! `NOSCRIPT` (a restarted or promoted node, `SCRIPT FLUSH`), the scripts
//! loaded on that node and the pipeline sent once more.
//!
//! On a cluster, a pipeline of several commands routed by their keys goes
//! out as its commands, each with its own redirections (see [`Routed`]),
//! and a command redirected until the cluster client gave up is sent again
//! within the timeout. The cluster client follows `ASK` for a pipeline
//! with one `ASKING` before the whole pipeline, which the importing master
//! applies to the first command only, and it sends the whole pipeline
//! again after any command's redirection, keeping only the last send's
//! replies. So a release (`HDEL`, then `SPUBLISH`)
//! whose lock had already been `MIGRATE`d to the importing master ran its
//! `HDEL` there while its `SPUBLISH` was answered `MOVED` (back to the old
//! owner, which answered `ASK` again), and once the redirections ran out
//! the release failed with that `MOVED` although the hold was deleted.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, Script, ServerErrorKind, Value};

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

    /// As [`send`](Self::send), but nothing of `pipe` is sent again by this
    /// side after the first poll (a redirection the cluster client gave up
    /// on stays in the replies): for [`run_once`].
    fn send_once<'a>(
        &'a mut self,
        pipe: &'a Pipeline,
        count: usize,
    ) -> impl Future<Output = RedisResult<Replies>> + Send + 'a {
        self.send(pipe, count)
    }
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
///
/// A pipeline of one command routed by its key is sent as it is (the
/// cluster client follows its redirections correctly); if it still ends
/// with `MOVED`, `ASK` or `TRYAGAIN` (the command never ran: a send that ran
/// it ends the redirections), it is sent again after a short pause, until
/// it has another reply or the command's timeout ([`run`]) ends the wait.
///
/// A pipeline of several commands routed by their keys (each names a key
/// or a shard channel of the one slot) goes out as its commands, each
/// routed by its own key, submitted at once and in order: while no slot
/// moves, they are queued in the pipeline's order on the client's
/// connection to the lock's master, in flight together. Each has its own
/// reply and its own redirections, which the cluster client follows:
/// `MOVED` (and reads the slot map again), `ASK` (`ASKING`, then the
/// command, on the importing master) and `TRYAGAIN` (after a pause). A
/// command still answered `MOVED`, `ASK` or `TRYAGAIN` when the client's
/// redirections ran out did not run: it is sent again, alone, as above.
/// While a slot moves, a redirected command can run after a later one that
/// was not redirected: a release's `HDEL` on the importing master after its
/// `SPUBLISH` on the old owner, which wakes waiters before the hold is
/// gone; their attempts meet `TRYAGAIN` until the move ends anyway, and the
/// subscriber wakes a waiter of each channel it subscribes again once the
/// slot changed owners (`cluster/subscriber.rs`).
///
/// A pipeline to one node is sent whole; when the client's redirections ran
/// out on it, its commands are sent one by one to that node as above (the
/// pipelines sent to a node, renewals and reads, are safe to repeat whole:
/// a repeat answers as the first send did). A pipeline with ignored
/// commands is sent whole, as before.
pub(crate) struct Routed {
    pub(crate) conn: ClusterConnection,
    /// `None`: routed by the commands' keys (all of one slot).
    pub(crate) node: Option<SingleNodeRoutingInfo>,
}

/// The first pause before a command answered `MOVED`, `ASK` or `TRYAGAIN`
/// is sent again; it doubles up to [`LAST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(10);

/// The longest pause between two sends of a command whose slot is moving.
const LAST_PAUSE: Duration = Duration::from_millis(200);

impl Target for Routed {
    async fn send<'a>(&'a mut self, pipe: &'a Pipeline, count: usize) -> RedisResult<Replies> {
        // A pipeline with ignored commands (whose replies cannot be told
        // from the kept ones by position) is sent whole.
        let each = count == pipe.len();
        let Some(node) = self.node.clone() else {
            if each && pipe.len() > 1 {
                return one_by_one(&self.conn, pipe, None).await;
            }
            // One command (or ignored ones): its redirections are followed
            // whole; the pipeline's error is the last redirection of a
            // command that never ran (a command that ran ends them).
            let mut pause = FIRST_PAUSE;
            loop {
                match pipe.query_async(&mut self.conn).await {
                    Err(err) if pipe.len() == 1 && is_moving(&err) => {
                        pause = moving_pause(pause, 1).await;
                    }
                    replies => return replies,
                }
            }
        };
        let values = match self
            .conn
            .route_pipeline(pipe.clone(), 0, count, node.clone())
            .await
        {
            Err(err) if each && is_moving(&err) => {
                return one_by_one(&self.conn, pipe, Some(&node)).await;
            }
            values => values?,
        };
        Ok(values.into_iter().map(reply).collect())
    }

    async fn send_once<'a>(&'a mut self, pipe: &'a Pipeline, count: usize) -> RedisResult<Replies> {
        match self.node.clone() {
            None => pipe.query_async(&mut self.conn).await,
            Some(node) => Ok(self
                .conn
                .route_pipeline(pipe.clone(), 0, count, node)
                .await?
                .into_iter()
                .map(reply)
                .collect()),
        }
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

/// Sends `pipe` to `target` once, within `timeout`: never again after the
/// first poll, which queues it on the connection. For the rollback of an
/// abandoned grant: the caller checks, at that first poll, that its scope
/// is not acquiring the lock, and a send made later could delete a hold
/// the scope took over meanwhile (a chaos run saw a resend after a dropped
/// connection do so on a Cluster). The caller sends again, checking first.
/// On a `NOSCRIPT` reply the scripts are loaded, and the reply returned as
/// an error, for the caller's next send.
pub(crate) async fn run_once<T: Target>(
    target: &mut T,
    pipe: &Pipeline,
    count: usize,
    scripts: &[&Script],
    timeout: Duration,
) -> Result<Replies, BackendError> {
    let replies = bounded(timeout, target.send_once(pipe, count)).await?;
    if let Some(Err(noscript)) = replies
        .iter()
        .find(|r| matches!(r, Err(e) if is_noscript(e)))
    {
        let noscript = BackendError::Redis(noscript.clone());
        bounded(timeout, target.load(scripts)).await?;
        return Err(noscript);
    }
    Ok(replies)
}

/// Sends the commands of `pipe` on `conn`, each alone (to `node`, or routed
/// by its own keys), all submitted at once and in order; a command answered
/// `MOVED`, `ASK` or `TRYAGAIN` (it did not run) is sent again after a pause
/// that grows from [`FIRST_PAUSE`] to [`LAST_PAUSE`], until each has another
/// reply. Ends only with the replies or an error of the connection (the
/// caller bounds it by the command's timeout).
async fn one_by_one(
    conn: &ClusterConnection,
    pipe: &Pipeline,
    node: Option<&SingleNodeRoutingInfo>,
) -> RedisResult<Replies> {
    let commands: Vec<&Cmd> = pipe.cmd_iter().collect();
    let mut replies: Replies = commands.iter().map(|_| Ok(Value::Nil)).collect();
    let mut pending: Vec<usize> = (0..commands.len()).collect();
    let mut pause = FIRST_PAUSE;
    loop {
        let answers = futures_util::future::join_all(
            pending
                .iter()
                .filter_map(|&index| commands.get(index).copied())
                .map(|cmd| {
                    let mut conn = conn.clone();
                    async move {
                        match node {
                            Some(node) => {
                                conn.route_command(
                                    cmd.clone(),
                                    RoutingInfo::SingleNode(node.clone()),
                                )
                                .await
                            }
                            None => conn.req_packed_command(cmd).await,
                        }
                    }
                }),
        )
        .await;
        let mut again = Vec::new();
        for (index, answer) in pending.into_iter().zip(answers) {
            let answer = match answer.and_then(reply) {
                // Not the server's answer: the connection failed.
                Err(err) if err.code().is_none() => return Err(err),
                answer => answer,
            };
            if matches!(&answer, Err(err) if is_moving(err)) {
                again.push(index);
            }
            if let Some(slot) = replies.get_mut(index) {
                *slot = answer;
            }
        }
        if again.is_empty() {
            return Ok(replies);
        }
        pause = moving_pause(pause, again.len()).await;
        pending = again;
    }
}

/// Waits `pause` before `commands` answered `MOVED`, `ASK` or `TRYAGAIN`
/// are sent again, and returns the next pause (doubled, at most
/// [`LAST_PAUSE`]).
async fn moving_pause(pause: Duration, commands: usize) -> Duration {
    tracing::debug!(commands, ?pause, "a slot is moving: sending again");
    tokio::time::sleep(pause).await;
    pause.saturating_mul(2).min(LAST_PAUSE)
}

/// A reply as the pipeline's callers take it: the server's error as `Err`.
fn reply(value: Value) -> RedisResult<Value> {
    match value {
        Value::ServerError(err) => Err(err.into()),
        value => Ok(value),
    }
}

/// Whether `err` says that the command did not run because its slot moved
/// or is moving: `MOVED`, `ASK`, or `TRYAGAIN` (a command of several keys
/// while some of them moved and others not yet).
fn is_moving(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved | ServerErrorKind::Ask | ServerErrorKind::TryAgain
        )
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A target that answers `NOSCRIPT` until its scripts are loaded, and
    /// counts what it was asked.
    #[derive(Default)]
    struct Flushed {
        loaded: bool,
        sends: usize,
        loads: usize,
    }

    impl Target for Flushed {
        async fn send<'a>(
            &'a mut self,
            _pipe: &'a Pipeline,
            _count: usize,
        ) -> RedisResult<Replies> {
            self.sends += 1;
            Ok(vec![if self.loaded {
                Ok(Value::Int(1))
            } else {
                Err(RedisError::from((
                    ErrorKind::Server(ServerErrorKind::NoScript),
                    "NOSCRIPT No matching script",
                )))
            }])
        }

        async fn load<'a>(&'a mut self, _scripts: &'a [&'a Script]) -> RedisResult<()> {
            self.loads += 1;
            self.loaded = true;
            Ok(())
        }
    }

    #[tokio::test]
    async fn run_sends_again_after_noscript_but_run_once_does_not() {
        let pipe = redis::pipe();
        let timeout = Duration::from_secs(1);
        let mut target = Flushed::default();
        let replies = run(&mut target, &pipe, 1, &[], timeout).await.unwrap();
        assert!(matches!(replies.as_slice(), [Ok(Value::Int(1))]));
        assert_eq!((target.sends, target.loads), (2, 1));

        let mut target = Flushed::default();
        let err = run_once(&mut target, &pipe, 1, &[], timeout)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, BackendError::Redis(e) if is_noscript(e)),
            "{err:?}"
        );
        // Loaded for the caller's next send, which finds the script.
        assert_eq!((target.sends, target.loads), (1, 1));
        let replies = run_once(&mut target, &pipe, 1, &[], timeout).await.unwrap();
        assert!(matches!(replies.as_slice(), [Ok(Value::Int(1))]));
    }
}
