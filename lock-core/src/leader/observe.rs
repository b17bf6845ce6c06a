//! [`Observer`]: who leads a role, pushed by the store.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Leader;
use crate::client_core::ClientCore;
use crate::name::LockKey;
use crate::LockError;

/// How long after the lease it last saw an observer reads again (a leader
/// that renewed meanwhile is seen again; one that died is seen gone).
const LEASE_MARGIN: Duration = Duration::from_millis(20);

/// The first and the longest pause between failed reads.
const RETRY: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));

/// What an observer's task publishes.
#[derive(Debug, Clone)]
enum View {
    /// Nothing read yet.
    Unknown,
    /// The role's leader (`None`: nobody leads), the `n`th change.
    Known(Option<Leader>, u64),
    /// The observer stopped for good (the client shut down, the backend
    /// refuses leadership, the role is invalid).
    Failed(Stopped),
}

/// Why an observer stopped for good: the errors it can give, kept in a form
/// that can be given to every call (a `LockError` is not `Clone`).
#[derive(Debug, Clone)]
enum Stopped {
    ShuttingDown {
        key: String,
        client: String,
    },
    InvalidKey {
        key: String,
        reason: &'static str,
    },
    Unsupported {
        key: String,
        primitive: &'static str,
        backend: &'static str,
        reason: &'static str,
    },
    Other {
        key: String,
        reason: String,
    },
}

impl Stopped {
    fn of(err: &LockError) -> Self {
        match err {
            LockError::ShuttingDown { key, client } => Stopped::ShuttingDown {
                key: key.clone(),
                client: client.clone(),
            },
            LockError::InvalidKey { key, reason } => Stopped::InvalidKey {
                key: key.clone(),
                reason,
            },
            LockError::Unsupported {
                key,
                primitive,
                backend,
                reason,
            } => Stopped::Unsupported {
                key: key.clone(),
                primitive,
                backend,
                reason,
            },
            other => Stopped::Other {
                key: String::new(),
                reason: other.to_string(),
            },
        }
    }

    fn error(&self) -> LockError {
        match self.clone() {
            Stopped::ShuttingDown { key, client } => LockError::ShuttingDown { key, client },
            Stopped::InvalidKey { key, reason } => LockError::InvalidKey { key, reason },
            Stopped::Unsupported {
                key,
                primitive,
                backend,
                reason,
            } => LockError::Unsupported {
                key,
                primitive,
                backend,
                reason,
            },
            Stopped::Other { key, reason } => LockError::InvalidConfig { key, reason },
        }
    }
}

/// Watches who leads a role: made by
/// [`Election::observe`](super::Election::observe), on any client, leader
/// or not.
///
/// **Pushed, in order.** A background task subscribes to the role's record
/// channel (the client's wake-up subscription), reads the leader once the
/// subscription is confirmed, and reads again on every announcement (a new
/// term, a proclamation, a resignation, a reconnect of the subscription)
/// and at the end of the lease it last saw (a leader that died without
/// resigning is then seen gone). A view never goes back: a term lower than
/// one already given, or a term already seen ended, is never given, so
/// observers see terms strictly in order. Changes that come faster than
/// they are read may be coalesced (the latest wins), as with
/// `tokio::sync::watch`.
///
/// The task stops when the observer is dropped or the client shuts down;
/// if its runtime goes away, the next [`changed`](Observer::changed)
/// starts it again on the caller's runtime.
pub struct Observer {
    core: Arc<ClientCore>,
    role: Arc<str>,
    keys: Result<(LockKey, LockKey), LockError>,
    rx: watch::Receiver<View>,
    task: Option<JoinHandle<()>>,
    /// The change last given by `changed`.
    seen: u64,
    /// What the last task had given (a restarted task starts from it).
    filter: Arc<crate::sync::Mutex<Filter>>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("role", &self.role)
            .field("leader", &self.leader())
            .finish()
    }
}

impl Observer {
    pub(super) fn new(
        core: Arc<ClientCore>,
        role: Arc<str>,
        keys: Result<(LockKey, LockKey), LockError>,
    ) -> Self {
        let (_, rx) = watch::channel(View::Unknown);
        let mut observer = Observer {
            core,
            role,
            keys,
            rx,
            task: None,
            seen: 0,
            filter: Arc::default(),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            observer.start();
        }
        // (Outside a runtime, the first `changed` starts it.)
        observer
    }

    /// The role.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The leader as last read (`None`: nobody leads, or nothing read yet).
    pub fn leader(&self) -> Option<Leader> {
        match &*self.rx.borrow() {
            View::Known(leader, _) => leader.clone(),
            _ => None,
        }
    }

    /// The next change of who leads (the first call: the leader as first
    /// read): `Some(leader)` with its term, metadata and start, or `None`
    /// when nobody leads (after a resignation, or once a dead leader's
    /// lease ended). Waits as long as nothing changes.
    ///
    /// Errors: [`LockError::ShuttingDown`] once the client shut down;
    /// [`LockError::Unsupported`] on Redlock and in Redisson's layout;
    /// [`LockError::InvalidKey`] for an invalid role. Failed reads are
    /// retried (the view stays as it was meanwhile), never returned.
    ///
    /// # Cancel safety
    /// Cancel safe: a change not returned yet is returned by the next call.
    pub async fn changed(&mut self) -> Result<Option<Leader>, LockError> {
        loop {
            let view = self.rx.borrow_and_update().clone();
            match view {
                View::Known(leader, n) if n != self.seen => {
                    self.seen = n;
                    return Ok(leader);
                }
                View::Failed(stopped) => return Err(stopped.error()),
                View::Known(..) | View::Unknown => {}
            }
            if self.task.as_ref().is_none_or(JoinHandle::is_finished) {
                if !self.start() {
                    return Err(LockError::InvalidConfig {
                        key: format!("{}{}", super::ROLE_LOCK_PREFIX, self.role),
                        reason: "Observer::changed must be awaited on a tokio runtime".into(),
                    });
                }
                continue;
            }
            if self.rx.changed().await.is_err() {
                // The task is gone (its runtime ended): start it again.
                self.start();
            }
        }
    }

    /// Starts (or restarts) the reading task on the current runtime; false
    /// when there is none (nothing can run it).
    fn start(&mut self) -> bool {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        let (tx, rx) = watch::channel(self.rx.borrow().clone());
        self.rx = rx;
        let keys = match &self.keys {
            Ok(keys) => keys.clone(),
            Err(err) => {
                tx.send_replace(View::Failed(Stopped::of(err)));
                return true;
            }
        };
        if self.core.is_closing() {
            tx.send_replace(View::Failed(Stopped::of(
                &self.core.shutting_down(&keys.0.name),
            )));
            return true;
        }
        let task = watch_role(
            self.core.clone(),
            self.role.clone(),
            keys,
            tx,
            self.filter.clone(),
        );
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.task = Some(runtime.spawn(task));
                true
            }
            Err(_) => false,
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Keeps views in term order (see [`Observer`]).
#[derive(Debug, Default)]
pub(super) struct Filter {
    /// The highest term given.
    term: u64,
    /// That term was seen ended (a view of nobody leading was given after it).
    ended: bool,
    /// The last view given, and how many were given.
    last: Option<Option<Leader>>,
    changes: u64,
}

impl Filter {
    /// The view to give for `read`, if it is a change that keeps order.
    pub(super) fn accept(&mut self, read: Option<Leader>) -> Option<(Option<Leader>, u64)> {
        match &read {
            None => {
                if matches!(self.last, Some(None)) {
                    return None;
                }
                self.ended = true;
            }
            Some(leader) => {
                if leader.term < self.term || (leader.term == self.term && self.ended) {
                    return None;
                }
                if let Some(Some(last)) = &self.last {
                    if last.same(leader) {
                        return None;
                    }
                }
                self.ended = false;
                self.term = leader.term;
            }
        }
        self.last = Some(read.clone());
        self.changes = self.changes.wrapping_add(1);
        Some((read, self.changes))
    }
}

/// The observer's task: subscribe, read, and read again on every
/// announcement and at the end of the lease last seen.
async fn watch_role(
    core: Arc<ClientCore>,
    role: Arc<str>,
    (key, record): (LockKey, LockKey),
    tx: watch::Sender<View>,
    filter: Arc<crate::sync::Mutex<Filter>>,
) {
    core.ensure_background();
    let mut waiter = core.wakeups.waiter(&record);
    // A read before the subscription is confirmed could miss an
    // announcement made between the two; the wait is bounded (a client
    // whose subscriber is down still reads at each lease's end).
    waiter.ready(core.response_timeout).await;
    let mut retry = RETRY.0;
    loop {
        waiter.seen();
        let next_read = match core.backend.leader_read(&key, &record).await {
            Ok(read) => {
                retry = RETRY.0;
                let leader = read.map(|record| Leader::from_record(&role, record));
                let lease_end = leader.as_ref().map(|leader| {
                    let left = leader.lease_left.saturating_add(LEASE_MARGIN);
                    Instant::now().checked_add(left)
                });
                if let Some((view, n)) = filter.lock().accept(leader) {
                    tx.send_replace(View::Known(view, n));
                }
                lease_end.flatten()
            }
            Err(err @ (LockError::Unsupported { .. } | LockError::InvalidKey { .. })) => {
                tx.send_replace(View::Failed(Stopped::of(&err)));
                return;
            }
            Err(err) => {
                tracing::debug!(role = %role, error = %err, "reading the leader failed; retrying");
                let at = Instant::now().checked_add(retry);
                retry = retry.saturating_mul(2).min(RETRY.1);
                at
            }
        };
        let lease_end = async {
            match next_read {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = waiter.released() => {}
            () = lease_end => {}
            () = core.closing.started() => {
                tx.send_replace(View::Failed(Stopped::of(&core.shutting_down(&key.name))));
                return;
            }
            () = tx.closed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(term: u64, metadata: &str) -> Option<Leader> {
        Some(Leader {
            role: "r".into(),
            term,
            owner: "c:1".into(),
            client_id: "c".into(),
            since: None,
            metadata: Some(metadata.into()),
            lease_left: Duration::from_secs(1),
        })
    }

    #[test]
    fn views_never_go_back_to_an_older_or_ended_term() {
        let mut filter = Filter::default();
        assert!(filter.accept(None).is_some(), "the first read is a view");
        assert!(filter.accept(None).is_none(), "no change");
        assert_eq!(filter.accept(leader(5, "a")).map(|v| v.1), Some(2));
        assert!(
            filter.accept(leader(5, "a")).is_none(),
            "same term, same record"
        );
        assert!(
            filter.accept(leader(5, "b")).is_some(),
            "a new proclamation"
        );
        assert!(filter.accept(leader(4, "x")).is_none(), "an older term");
        assert!(filter.accept(None).is_some(), "term 5 ended");
        assert!(filter.accept(leader(5, "b")).is_none(), "term 5 is over");
        assert!(filter.accept(leader(7, "c")).is_some());
        assert!(filter.accept(leader(6, "c")).is_none());
    }
}
