//! [`Election::run`]: a future that runs only while this process leads.

use std::future::Future;

use tokio::time::Instant;

use super::{Election, Term};
use crate::options::Wait;
use crate::LockError;

/// How a term of the run loop ended.
enum Ended {
    /// Leadership was lost: the future was dropped.
    Lost,
    /// The future returned: the term is resigned.
    Returned,
    /// The client began shutting down: the future was dropped, the term resigned.
    ShutDown,
}

impl Election {
    /// Runs `work` only while this process leads the role, for as long as
    /// the client lives (Curator's `LeaderSelector` with re-queueing, etcd's
    /// campaign loop, client-go's `OnStartedLeading`/`OnStoppedLeading`):
    ///
    /// 1. campaigns, waiting as long as it takes;
    /// 2. once elected, calls `work` with the [`Term`] and polls its future
    ///    (and proclaims the metadata again every lease, so that a record lost
    ///    with a failover comes back);
    /// 3. when leadership is lost ([`Leadership::lost`](super::Leadership::lost):
    ///    by the lease's local deadline at the latest), **drops the future**
    ///    at once, without polling it again, and campaigns again after the
    ///    [`backoff`](Election::backoff);
    /// 4. when the future returns, resigns the term (a follower takes over
    ///    at once) and campaigns again after the back-off;
    /// 5. when the client begins its [`shutdown`](crate::LockClient::shutdown),
    ///    drops the future, resigns (a clean hand-over: a follower leads
    ///    within about a round trip, not after a lease) and returns `Ok(())`.
    ///
    /// Pass [`Term::token`] with every write the future makes to a fenced
    /// store: a write of a term that has ended is refused there, even from a
    /// process paused past its lease that has not yet looked at its clock.
    ///
    /// Errors (it otherwise runs until the shutdown): what no retry can
    /// change, [`LockError::Unsupported`] (Redlock, Redisson's layout),
    /// [`LockError::InvalidKey`], [`LockError::InvalidConfig`]. Failed
    /// campaigns (a store that cannot be reached) are logged and retried
    /// after the back-off.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// use std::time::Duration;
    /// use distlock_core::LockClient;
    ///
    /// let client = LockClient::memory();
    /// let election = client.election("outbox-relay");
    /// let runner = tokio::spawn({
    ///     let election = election.clone();
    ///     async move {
    ///         election
    ///             .run(|term| async move {
    ///                 // Leader-only work; every write carries term.token().
    ///                 println!("relaying as {term}");
    ///                 std::future::pending::<()>().await
    ///             })
    ///             .await
    ///     }
    /// });
    /// # tokio::time::sleep(Duration::from_millis(50)).await;
    /// // On SIGTERM: the shutdown drops the work and resigns first.
    /// client.shutdown(Duration::from_secs(5)).await?;
    /// runner.await.expect("the run loop")?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the returned future drops `work`'s future and
    /// resigns the term in the background (see [`Leadership`](super::Leadership)'s drop).
    pub async fn run<F, Fut>(&self, mut work: F) -> Result<(), LockError>
    where
        F: FnMut(Term) -> Fut,
        Fut: Future<Output = ()>,
    {
        let closing = &self.core.closing;
        loop {
            if self.core.is_closing() {
                return Ok(());
            }
            let campaign = tokio::select! {
                biased;
                () = closing.started() => return Ok(()),
                won = self.campaign(Wait::Forever) => won,
            };
            let leadership = match campaign {
                Ok(leadership) => leadership,
                Err(LockError::ShuttingDown { .. }) => return Ok(()),
                Err(
                    err @ (LockError::Unsupported { .. }
                    | LockError::InvalidKey { .. }
                    | LockError::InvalidConfig { .. }),
                ) => return Err(err),
                Err(err) => {
                    tracing::warn!(role = %self.role, error = %err, "campaign failed; campaigning again after the back-off");
                    if self.pause().await.is_err() {
                        return Ok(());
                    }
                    continue;
                }
            };
            let term = leadership.term_info();
            let ended = {
                // Polled in the role lock's scope: `distlock::current()` in the
                // work is the role's lock (its token the term), a leader-only
                // function it calls re-enters the term, and a campaign for the
                // role from inside it is refused rather than waiting on itself.
                let work = work(term.clone());
                let future = async {
                    match leadership.guard() {
                        Some(guard) => guard.scope(work).await,
                        None => work.await,
                    }
                };
                // A record lost with a failover (written after the lock, so
                // possibly not replicated when the lock was) comes back
                // within a lease: proclaimed again every lease, beside the
                // work, never in its way.
                let refresh = async {
                    let period = self.core.lease;
                    loop {
                        match Instant::now().checked_add(period) {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                        if let Err(err) = leadership.proclaim(&*self.metadata).await {
                            tracing::debug!(role = %self.role, error = %err, "proclaiming again failed");
                        }
                    }
                };
                // `biased`: after a pause (a stopped process, a stalled
                // runtime) the loss is seen before the future is polled again.
                tokio::select! {
                    biased;
                    () = closing.started() => Ended::ShutDown,
                    () = leadership.lost() => Ended::Lost,
                    () = future => Ended::Returned,
                    () = refresh => Ended::Returned,
                }
                // The future is dropped here, before anything else is awaited.
            };
            match ended {
                Ended::Lost => {
                    tracing::warn!(role = %self.role, term = term.token(), "leadership lost: the leader's work was dropped");
                    drop(leadership);
                }
                Ended::Returned => {
                    if let Err(err) = leadership.resign().await {
                        tracing::debug!(role = %self.role, term = term.token(), error = %err, "resigning after the work returned");
                    }
                }
                Ended::ShutDown => {
                    if let Err(err) = leadership.resign().await {
                        tracing::debug!(role = %self.role, term = term.token(), error = %err, "resigning at the shutdown");
                    }
                    return Ok(());
                }
            }
            if self.pause().await.is_err() {
                return Ok(());
            }
        }
    }

    /// The back-off between terms; `Err` when the client began shutting
    /// down meanwhile.
    async fn pause(&self) -> Result<(), ()> {
        let sleep = async {
            match Instant::now().checked_add(self.backoff) {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = self.core.closing.started() => Err(()),
            () = sleep => Ok(()),
        }
    }
}
