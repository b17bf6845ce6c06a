//! [`Leadership`]: a won campaign, holding the role's lock.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::Term;
use crate::client_core::ClientCore;
use crate::metric_points;
use crate::name::LockKey;
use crate::{LockError, LockGuard};

/// Leadership of a role, won by [`Election::campaign`](super::Election::campaign):
/// the role's lock, held in watchdog mode, and the term it was won with.
///
/// It stays the leader's until [`resign`](Leadership::resign), until it is
/// dropped (which resigns in the background), or until it is lost
/// ([`lost`](Leadership::lost) resolves by the lease's local deadline).
#[must_use = "dropping a Leadership resigns it"]
pub struct Leadership {
    core: Arc<ClientCore>,
    guard: Option<LockGuard>,
    role: Arc<str>,
    key: LockKey,
    record: LockKey,
    term: u64,
    since: Option<SystemTime>,
    won_at: Instant,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("role", &self.role)
            .field("term", &self.term)
            .field("is_leader", &self.is_leader())
            .finish()
    }
}

impl Leadership {
    /// Proclaims `metadata` for the lock `guard` just won; gives the lock
    /// back when that fails.
    pub(super) async fn proclaimed(
        core: Arc<ClientCore>,
        guard: LockGuard,
        key: LockKey,
        record: LockKey,
        role: Arc<str>,
        metadata: &str,
    ) -> Result<Self, LockError> {
        let term = guard.fencing_token();
        let proclaimed = core
            .backend
            .leader_proclaim(&key, &record, guard.owner(), metadata)
            .await;
        let since = match proclaimed {
            Ok(Some(proclaimed)) => proclaimed
                .since_ms
                .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms))),
            Ok(None) => {
                let _ = guard.release().await;
                return Err(LockError::LeaseLost {
                    key: key.name.to_string(),
                    reason: "the role's lock was lost before the leader proclaimed",
                });
            }
            Err(err) => {
                let _ = guard.release().await;
                return Err(err);
            }
        };
        tracing::info!(role = %role, term, "leadership gained");
        metric_points::leadership_gained(&role, term);
        Ok(Leadership {
            core,
            guard: Some(guard),
            role,
            key,
            record,
            term,
            since,
            won_at: Instant::now(),
        })
    }

    /// The term: the role lock's fencing token, strictly greater than every
    /// earlier leader's of the role. Pass it with every write to a fenced
    /// store (`distlock::fence`).
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The term with its role, as [`Election::run`](super::Election::run)
    /// hands it to its future.
    pub fn term_info(&self) -> Term {
        Term {
            role: self.role.clone(),
            token: self.term,
        }
    }

    /// The role.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// When this term's leader first proclaimed, by the store's clock.
    pub fn since(&self) -> Option<SystemTime> {
        self.since
    }

    /// Whether the role's lock is still held (by the local lease deadline).
    pub fn is_leader(&self) -> bool {
        self.guard.as_ref().is_some_and(LockGuard::is_held)
    }

    /// The role's lock guard (its owner, its span, `scope`).
    pub fn guard(&self) -> Option<&LockGuard> {
        self.guard.as_ref()
    }

    /// Resolves when leadership is lost: the role's lock was found deleted
    /// or taken, its lease ran out on the local clock before a renewal, or
    /// the client's shutdown took it (see [`LockGuard::lost`]). Stop the
    /// leader's work then; [`Election::run`](super::Election::run) drops
    /// its future.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        if let Some(guard) = &self.guard {
            guard.lost().await;
        }
    }

    /// Publishes new `metadata` for this term (etcd's `Proclaim`): observers
    /// see the change; the term and its start stay.
    ///
    /// Errors: [`LockError::LeaseLost`] when leadership was lost meanwhile;
    /// backend errors.
    ///
    /// # Cancel safety
    /// Cancel safe: the proclamation is one script, sent or not.
    pub async fn proclaim(&self, metadata: impl Into<String>) -> Result<(), LockError> {
        let lost = || LockError::LeaseLost {
            key: self.key.name.to_string(),
            reason: "leadership was lost before the proclamation",
        };
        let guard = self.guard.as_ref().ok_or_else(lost)?;
        let metadata = metadata.into();
        match self
            .core
            .backend
            .leader_proclaim(&self.key, &self.record, guard.owner(), &metadata)
            .await?
        {
            Some(_) => Ok(()),
            None => Err(lost()),
        }
    }

    /// Gives leadership up: releases the role's lock (a waiting campaign
    /// is woken and wins within about a round trip) and ends the term's
    /// record (observers see no leader, or the next one).
    ///
    /// Errors: as [`LockGuard::release`] ([`LockError::LeaseLost`] when
    /// leadership was already lost; the record is ended anyway).
    ///
    /// # Cancel safety
    /// Cancel safe: dropped midway, the rest is done in the background (as
    /// dropping the `Leadership`).
    pub async fn resign(mut self) -> Result<(), LockError> {
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        let ending = Ending::new(&self);
        let released = guard.release().await;
        ending.finish("resigned").await;
        released
    }
}

/// What ends a term once its lock is given back: the record and the metrics.
struct Ending {
    core: Arc<ClientCore>,
    role: Arc<str>,
    key: LockKey,
    record: LockKey,
    term: u64,
    won_at: Instant,
}

impl Ending {
    fn new(leadership: &Leadership) -> Self {
        Ending {
            core: leadership.core.clone(),
            role: leadership.role.clone(),
            key: leadership.key.clone(),
            record: leadership.record.clone(),
            term: leadership.term,
            won_at: leadership.won_at,
        }
    }

    async fn finish(self, how: &'static str) {
        let vacated = self
            .core
            .backend
            .leader_vacate(&self.key, &self.record, self.term)
            .await;
        if let Err(err) = vacated {
            tracing::debug!(role = %self.role, term = self.term, error = %err, "the term's record was not ended; observers see the next leader or the lease's end");
        }
        tracing::info!(role = %self.role, term = self.term, how, "leadership ended");
        metric_points::leadership_ended(&self.role, how, self.won_at.elapsed());
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let how = if guard.is_held() { "dropped" } else { "lost" };
        let ending = Ending::new(self);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if how == "dropped" {
                        let _ = guard.release().await;
                    } else {
                        drop(guard);
                    }
                    ending.finish(how).await;
                });
            }
            // No runtime: the guard's own drop gives the lock back as it can.
            Err(_) => drop(guard),
        }
    }
}
