//! The group commit of one node's plain-lock acquisitions and releases.
//!
//! An acquisition (a release) checks whether fewer than [`IN_FLIGHT`] sends
//! of its kind are in flight on the node; if so it claims one and is sent
//! alone, exactly as without batching (the check is two atomic operations:
//! no lock, no allocation). Otherwise it waits in the node's queue of its
//! kind, and when a send in flight returns, every request that piled up
//! meanwhile goes out together, from a task of its own, as one `EVALSHA` of
//! `acquire_many` (`release_many`), and each waiting caller gets its own
//! lock's answer. A batch keeps every semantic of the single path: the
//! scripts repeat the single commands per lock and answer per lock (an error
//! of one lock, a key of another type, is that lock's answer only),
//! `sync_replicas`' `WAIT` follows the batch, a `NOSCRIPT` reply loads the
//! scripts and sends it again, and a batch whose connection dropped is sent
//! once more (to the node it reconnected or, with Sentinel, moved to).
//!
//! Only the standalone and Sentinel backend (and Redlock, whose masters are
//! that backend's nodes) batch: on a cluster the keys of one script must
//! share a slot, and every lock has its own hash tag, so a batch there would
//! hold one lock.
//!
//! # Cancel safety
//!
//! A caller whose future is dropped while its request waits in the queue
//! closes its answer channel under the queue's lock, and a batch drops the
//! requests whose channel is closed under that same lock, just before the
//! first poll of its send, which queues the batch on the connection. So a
//! request whose caller left is either never sent, or was queued on the
//! connection before the caller's drop returned, that is before the
//! rollback of an abandoned grant (see `acquire.rs`) is queued behind it on
//! the same connection: the rollback finds the grant and takes it back, as
//! it does for a single request dropped in flight. A batch sent once more
//! (a `NOSCRIPT` reload, a dropped connection) drops the requests of the
//! callers that left meanwhile the same way, before it is sent again.

use std::future::{poll_fn, Future};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll};

use redis::{Cmd, RedisResult, Value};
use tokio::sync::oneshot;

use super::node::Node;
use super::Link;
use crate::backend::redis::command::{self, bounded, Replies, Target};
use crate::backend::redis::scripts::{self, Scripts};
use crate::name::LockKey;
use crate::sync::Mutex;
use crate::BackendError;

/// Sends of one kind (acquisitions, releases) in flight at once on a node
/// before requests wait for a batch. Measured on 64 tasks with their own
/// keys with 1, 2 and 4: 2 did best on average (by less than the noise of
/// a shared 2-core machine); a single task never has a second send in
/// flight, so it always goes alone.
pub(crate) const IN_FLIGHT: usize = 2;

/// The most requests one batch carries (the rest wait for the next one).
const MAX_BATCH: usize = 128;

/// One lock's answer from a batch.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The lock's element of the script's reply (an error element is the
    /// error its commands met).
    pub(crate) reply: RedisResult<Value>,
    /// How many replicas acknowledged the batch (`sync_replicas`' `WAIT`).
    pub(crate) acked: Option<u64>,
    /// The node that answered.
    pub(crate) node: Arc<Node>,
    /// Whether the batch was sent once more after its connection dropped
    /// (its first send may have run without its answer arriving).
    pub(crate) resent: bool,
}

/// What a waiting caller receives.
type Outcome = Result<Answer, BackendError>;

/// A plain lock's acquisition attempt, waiting for a batch.
#[derive(Debug)]
pub(crate) struct Acquire {
    pub(crate) key: LockKey,
    pub(crate) owner: String,
    pub(crate) lease_ms: u64,
}

/// A plain lock's release, waiting for a batch.
#[derive(Debug)]
pub(crate) struct Release {
    pub(crate) key: LockKey,
    pub(crate) owner: String,
}

/// A kind of request that batches.
pub(crate) trait Request: Sized + Send + 'static {
    /// The queue of this kind.
    fn lane(batches: &Batches) -> &Lane<Self>;

    /// The one command that carries `entries`.
    fn command(scripts: &Scripts, entries: &[Entry<Self>]) -> Cmd;
}

impl Request for Acquire {
    fn lane(batches: &Batches) -> &Lane<Self> {
        &batches.acquires
    }

    fn command(scripts: &Scripts, entries: &[Entry<Self>]) -> Cmd {
        scripts.acquire_many(entries.iter().map(|entry| {
            let request = &entry.request;
            (&request.key, &*request.owner, request.lease_ms)
        }))
    }
}

impl Request for Release {
    fn lane(batches: &Batches) -> &Lane<Self> {
        &batches.releases
    }

    fn command(scripts: &Scripts, entries: &[Entry<Self>]) -> Cmd {
        scripts.release_many(entries.iter().map(|entry| {
            let request = &entry.request;
            (&request.key, &*request.owner)
        }))
    }
}

/// A request in the queue, and where its answer goes.
#[derive(Debug)]
pub(crate) struct Entry<Q> {
    request: Q,
    answer: oneshot::Sender<Outcome>,
}

/// One kind's sends in flight and the requests waiting for a batch.
#[derive(Debug)]
pub(crate) struct Lane<Q> {
    in_flight: AtomicUsize,
    /// How many requests `queue` holds (read without its lock).
    queued: AtomicUsize,
    queue: Mutex<Vec<Entry<Q>>>,
}

impl<Q> Default for Lane<Q> {
    fn default() -> Self {
        Lane {
            in_flight: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            queue: Mutex::new(Vec::new()),
        }
    }
}

impl<Q> Lane<Q> {
    /// Claims a send in flight when fewer than [`IN_FLIGHT`] are.
    fn claim(&self) -> bool {
        let mut n = self.in_flight.load(SeqCst);
        while n < IN_FLIGHT {
            match self
                .in_flight
                .compare_exchange_weak(n, n + 1, SeqCst, SeqCst)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
        false
    }
}

/// A node's group commit: its connection and its two queues.
#[derive(Debug)]
pub(crate) struct Batches {
    pub(crate) link: Link,
    acquires: Lane<Acquire>,
    releases: Lane<Release>,
}

/// A send in flight claimed by a request sent alone: dropping it (when the
/// answer arrived, or the caller left) lets the requests that piled up
/// meanwhile go out.
pub(crate) struct Alone<'a, Q: Request> {
    batches: &'a Arc<Batches>,
    kind: PhantomData<Q>,
}

impl<Q: Request> Drop for Alone<'_, Q> {
    fn drop(&mut self) {
        self.batches.finished::<Q>();
    }
}

impl Batches {
    pub(crate) fn new(link: Link) -> Self {
        Batches {
            link,
            acquires: Lane::default(),
            releases: Lane::default(),
        }
    }

    /// A claim to send a request alone, when no request waits and fewer
    /// than [`IN_FLIGHT`] sends of its kind are in flight; else `None`: the
    /// request waits for a batch ([`wait`](Batches::wait)).
    pub(crate) fn alone<Q: Request>(self: &Arc<Self>) -> Option<Alone<'_, Q>> {
        let lane = Q::lane(self);
        if lane.queued.load(SeqCst) != 0 || !lane.claim() {
            return None;
        }
        Some(Alone {
            batches: self,
            kind: PhantomData,
        })
    }

    /// Queues `request` and waits for its answer from a batch.
    ///
    /// # Cancel safety
    ///
    /// Dropped while queued, the request is never sent; dropped once its
    /// batch went out, the batch was queued on the connection first (see
    /// the module's documentation).
    pub(crate) async fn wait<Q: Request>(self: &Arc<Self>, request: Q) -> Outcome {
        let lane = Q::lane(self);
        let (answer, rx) = oneshot::channel();
        {
            let mut queue = lane.queue.lock();
            queue.push(Entry { request, answer });
            lane.queued.fetch_add(1, SeqCst);
        }
        // A send that returned between the caller's check and the push saw
        // no request queued: start the batch here (`SeqCst` on both sides:
        // at least one of the two sees the other).
        if lane.in_flight.load(SeqCst) < IN_FLIGHT {
            self.start::<Q>();
        }
        Waiting {
            lane,
            rx,
            done: false,
        }
        .await
    }

    /// A send of kind `Q` ended: the requests queued meanwhile go out.
    fn finished<Q: Request>(self: &Arc<Self>) {
        let lane = Q::lane(self);
        lane.in_flight.fetch_sub(1, SeqCst);
        if lane.queued.load(SeqCst) != 0 {
            self.start::<Q>();
        }
    }

    /// Sends the queued requests of kind `Q` as a batch, from a task of its
    /// own, when a send can be claimed.
    fn start<Q: Request>(self: &Arc<Self>) {
        let lane = Q::lane(self);
        if !lane.claim() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let batches = self.clone();
                runtime.spawn(async move {
                    let _sent = Alone::<Q> {
                        batches: &batches,
                        kind: PhantomData,
                    };
                    batches.send::<Q>().await;
                });
            }
            // No runtime (it is shutting down): nothing can send the batch;
            // its callers are answered with an error (their answer channel
            // is dropped) instead of waiting forever.
            Err(_) => {
                let dropped = std::mem::take(&mut *lane.queue.lock());
                lane.queued.fetch_sub(dropped.len(), SeqCst);
                lane.in_flight.fetch_sub(1, SeqCst);
                drop(dropped);
            }
        }
    }

    /// Takes up to [`MAX_BATCH`] queued requests of kind `Q`, sends them as
    /// one script (once more after a `NOSCRIPT` reload, and once more after
    /// the connection dropped, as [`Link::exec`] does) and answers each.
    async fn send<Q: Request>(&self) {
        let lane = Q::lane(self);
        let link = &self.link;
        let mut node = match link.usable_node().await {
            Ok(node) => node,
            Err(err) => return fail(take(lane), &err),
        };
        let (count, timeout) = match link.settings.sync_replicas {
            Some(_) => (2, link.settings.write_timeout()),
            None => (1, link.settings.response_timeout),
        };
        let all = link.scripts.all();
        let (mut resent, mut reloaded) = (false, false);
        let mut entries: Vec<Entry<Q>> = Vec::new();
        let mut taken = false;
        loop {
            // Under the queue's lock: drop the requests whose callers left,
            // and queue the batch on the connection (its first poll).
            let sending = poll_fn(|cx| {
                let mut queue = lane.queue.lock();
                if !taken {
                    taken = true;
                    let n = queue.len().min(MAX_BATCH);
                    entries.extend(queue.drain(..n));
                    lane.queued.fetch_sub(n, SeqCst);
                }
                drop_left(&mut entries);
                if entries.is_empty() {
                    return Poll::Ready(None);
                }
                let mut pipe = scripts::one(Q::command(&link.scripts, &entries));
                if let Some((replicas, wait)) = link.settings.sync_replicas {
                    scripts::wait(&mut pipe, replicas, wait);
                }
                let mut conn = node.conn.clone();
                let mut sent =
                    Box::pin(async move { bounded(timeout, conn.send(&pipe, count)).await });
                let first = sent.as_mut().poll(cx);
                drop(queue);
                Poll::Ready(Some((sent, first)))
            })
            .await;
            let Some((sent, first)) = sending else {
                return;
            };
            let mut outcome = match first {
                Poll::Ready(outcome) => outcome,
                Poll::Pending => sent.await,
            };
            if !reloaded && matches!(&outcome, Ok(replies) if noscript(replies)) {
                reloaded = true;
                let mut conn = node.conn.clone();
                match bounded(timeout, conn.load(&all)).await {
                    Ok(()) => continue,
                    Err(err) => outcome = Err(err),
                }
            }
            match outcome {
                Err(err) if !resent && link.worth_retrying(&err) => {
                    tracing::debug!(server = %node.server, error = %err, "retrying a batch once");
                    (resent, reloaded) = (true, false);
                    node = match link.follow_master(&node).await {
                        Ok(node) => node,
                        Err(err) => return fail(entries, &err),
                    };
                }
                Err(err) => return fail(entries, &err),
                Ok(replies) => return deliver(entries, replies, &node, resent),
            }
        }
    }
}

/// Takes every queued request of `lane`.
fn take<Q>(lane: &Lane<Q>) -> Vec<Entry<Q>> {
    let taken = std::mem::take(&mut *lane.queue.lock());
    lane.queued.fetch_sub(taken.len(), SeqCst);
    taken
}

/// Drops the requests whose callers left (their answer channel closed).
fn drop_left<Q>(entries: &mut Vec<Entry<Q>>) {
    entries.retain(|entry| !entry.answer.is_closed());
}

/// Whether a reply is `NOSCRIPT`.
fn noscript(replies: &Replies) -> bool {
    replies
        .iter()
        .any(|reply| matches!(reply, Err(err) if command::is_noscript(err)))
}

/// Answers each of `entries` with `err`.
fn fail<Q>(entries: Vec<Entry<Q>>, err: &BackendError) {
    for entry in entries {
        let _ = entry.answer.send(Err(copy(err)));
    }
}

/// Answers each of `entries` with its element of the batch's reply.
fn deliver<Q>(entries: Vec<Entry<Q>>, replies: Replies, node: &Arc<Node>, resent: bool) {
    let acked = match replies.get(1) {
        Some(Ok(Value::Int(n))) => u64::try_from(*n).ok(),
        _ => None,
    };
    let answer = |reply| {
        Ok(Answer {
            reply,
            acked,
            node: node.clone(),
            resent,
        })
    };
    match replies.into_iter().next() {
        Some(Ok(Value::Array(items))) if items.len() == entries.len() => {
            for (entry, item) in entries.into_iter().zip(items) {
                let reply = match item {
                    Value::ServerError(err) => Err(err.into()),
                    value => Ok(value),
                };
                let _ = entry.answer.send(answer(reply));
            }
        }
        // The whole script failed (for example `NOSCRIPT` twice): each
        // lock's reply is that error, as a single command's would be.
        Some(Err(err)) => {
            for entry in entries {
                let _ = entry.answer.send(answer(Err(err.clone())));
            }
        }
        other => {
            let err = BackendError::Protocol(format!("batch reply {other:?}"));
            fail(entries, &err);
        }
    }
}

/// A second `BackendError` like `err`, for another caller of its batch.
fn copy(err: &BackendError) -> BackendError {
    match err {
        BackendError::Redis(err) => BackendError::Redis(err.clone()),
        BackendError::Timeout(timeout) => BackendError::Timeout(*timeout),
        BackendError::Protocol(text) => BackendError::Protocol(text.clone()),
        BackendError::Unconfirmed => BackendError::Unconfirmed,
        BackendError::NotReplicated {
            acknowledged,
            required,
        } => BackendError::NotReplicated {
            acknowledged: *acknowledged,
            required: *required,
        },
        BackendError::MasterUnreachable { server, reason } => BackendError::MasterUnreachable {
            server: server.clone(),
            reason: reason.clone(),
        },
    }
}

/// A caller waiting for its answer from a batch.
struct Waiting<'a, Q> {
    lane: &'a Lane<Q>,
    rx: oneshot::Receiver<Outcome>,
    done: bool,
}

impl<Q> Future for Waiting<'_, Q> {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let outcome = match Pin::new(&mut self.rx).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(outcome)) => outcome,
            Poll::Ready(Err(_)) => Err(BackendError::Protocol(
                "the request's batch was dropped unsent (the runtime is shutting down)".into(),
            )),
        };
        self.done = true;
        Poll::Ready(outcome)
    }
}

impl<Q> Drop for Waiting<'_, Q> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Under the queue's lock, so that a batch either dropped this
        // request before its first poll or had queued it on the connection
        // before this returns (see the module's documentation).
        let queue = self.lane.queue.lock();
        self.rx.close();
        drop(queue);
    }
}
