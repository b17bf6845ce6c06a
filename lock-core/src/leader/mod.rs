//! Leader election: one leader per role, with a fenced term, that any
//! client can observe.
//!
//! A role's leadership is the plain lock `leader:<role>` of the client's
//! store, taken in watchdog mode (never kept hot): its lease, renewals,
//! [`lost`](Leadership::lost) by the local deadline, wake-ups and fencing
//! token are the lock's own. The **term** is that lock's fencing token, so
//! it strictly increases across every leader ever elected for the role and
//! is never issued twice (the token rules of the guarantees guide apply,
//! including after the store loses its data). Beside the lock, the leader
//! keeps a record (`<lock>:leader`, one small key per role) of its term,
//! since when it leads and the metadata it proclaimed, and announces each
//! change on the record's channel; observers read the record again on each
//! announcement (pushed, not polled), and at the end of the lease they last
//! saw, to notice a leader that died without resigning.
//!
//! The files: `leadership.rs` (a won campaign), `observe.rs` (watching who
//! leads), `run.rs` (the run loop); this file holds the [`Election`] a
//! client makes and what it reads. This room uses the public lock API and
//! the backend's three record operations; nothing below it knows of it.

mod leadership;
mod observe;
mod run;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use self::leadership::Leadership;
pub use self::observe::Observer;

use crate::backend::LeaderRecord;
use crate::client_core::ClientCore;
use crate::name::LockKey;
use crate::options::{LockOptions, Wait};
use crate::{LockClient, LockError};

/// The run loop's default pause between a lost or ended term and the next
/// campaign (see [`Election::backoff`]).
pub const DEFAULT_BACKOFF: Duration = Duration::from_millis(500);

/// The prefix of a role's lock name: the leadership of role `scheduler` is
/// the plain lock `leader:scheduler` (visible to `lockctl list`, `inspect`
/// and `force-release` as any lock).
pub const ROLE_LOCK_PREFIX: &str = "leader:";

impl LockClient {
    /// The leader election of `role` (e.g. `"scheduler"`), to campaign in,
    /// observe, or run a leader-only future with (see [`Election`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// use distlock_core::{LockClient, Wait};
    ///
    /// let client = LockClient::memory();
    /// let election = client.election("scheduler").metadata("http://10.0.0.7:8080");
    /// let leadership = election.campaign(Wait::Forever).await?;
    /// let leader = election.leader().await?.expect("a leader");
    /// assert_eq!(leader.term, leadership.term());
    /// assert_eq!(leader.metadata.as_deref(), Some("http://10.0.0.7:8080"));
    /// leadership.resign().await?;
    /// assert!(election.leader().await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn election(&self, role: impl Into<String>) -> Election {
        Election {
            core: self.core().clone(),
            role: role.into().into(),
            metadata: Arc::from(""),
            backoff: DEFAULT_BACKOFF,
        }
    }
}

/// The leader election of one role on one client: campaign for it
/// ([`campaign`](Election::campaign)), read and watch who leads
/// ([`leader`](Election::leader), [`observe`](Election::observe)), or run a
/// future only while this process leads ([`run`](Election::run)).
///
/// Made by [`LockClient::election`]; cheap to clone.
///
/// **What a term promises.** At most one campaign holds a role's lock at a
/// time, by the lock's own guarantees; its term is the lock's fencing token,
/// strictly greater than every earlier term of the role, never issued twice.
/// A leader that stops being one (its lease ran out on its local clock, a
/// force release, a resignation) learns it from
/// [`Leadership::lost`] by that local deadline, and [`run`](Election::run)
/// drops its future then. What a term does not promise without a check at
/// the resource: a paused process can resume and act before it looks at
/// its clock, so a leader's writes must carry its term to a store that
/// refuses a lower one (`distlock::fence`), as every lock's writes must.
///
/// **Backends.** One Redis node, Sentinel, Cluster and the in-memory store;
/// Redlock and clients in Redisson's layout are refused
/// ([`LockError::Unsupported`], naming why).
#[derive(Clone)]
pub struct Election {
    core: Arc<ClientCore>,
    role: Arc<str>,
    metadata: Arc<str>,
    backoff: Duration,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("role", &self.role)
            .field("metadata", &self.metadata)
            .field("backoff", &self.backoff)
            .finish()
    }
}

impl Election {
    /// What this process proclaims when it wins (its advertised address,
    /// say): followers read it in [`Leader::metadata`]. Empty by default.
    /// Any text; it is stored with the role's record.
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = metadata.into().into();
        self
    }

    /// How long [`run`](Election::run) pauses after a term ends (lost, or
    /// its future returned) before it campaigns again, and after a failed
    /// campaign; [`DEFAULT_BACKOFF`] by default. A pause of zero campaigns
    /// again at once; one too long for the clock waits as long as it takes.
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// The role's name.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The name of the role's lock: `leader:<role>`.
    pub fn lock_name(&self) -> String {
        format!("{ROLE_LOCK_PREFIX}{}", self.role)
    }

    /// The role's lock and record keys, or why the role or the backend
    /// cannot have them.
    fn keys(&self) -> Result<(LockKey, LockKey), LockError> {
        keys(&self.core, &self.role)
    }

    /// Campaigns for the role: waits as `wait` says (a [`Wait`] or a
    /// `Duration`; `Wait::Forever` until elected) for the role's lock, then
    /// proclaims this election's [`metadata`](Election::metadata). Returns
    /// the [`Leadership`], whose [`term`](Leadership::term) is new.
    ///
    /// Errors: as the lock's acquisition ([`LockError::Busy`] for a single
    /// try that found a leader, [`LockError::TimedOut`], [`LockError::ShuttingDown`],
    /// backend errors); [`LockError::InvalidConfig`] when the calling chain
    /// already leads this role (a second campaign would re-enter the same
    /// term); [`LockError::Unsupported`] on Redlock and in Redisson's layout;
    /// [`LockError::InvalidKey`] for an empty role. A proclamation that
    /// fails gives the lock back and returns its error.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped while waiting, it leaves the role's lock not
    /// held (as [`Lock::acquire`](crate::Lock::acquire)); dropped while
    /// proclaiming, the lock just won is given back in the background.
    pub async fn campaign(&self, wait: impl Into<Wait>) -> Result<Leadership, LockError> {
        let (role, record) = self.keys()?;
        if let Some(stack) = crate::current::stack() {
            if crate::current::holds(&stack, &self.core.id, role.id()) {
                return Err(LockError::InvalidConfig {
                    key: role.name.to_string(),
                    reason: "this call chain already leads the role: a second campaign would \
                             re-enter the same term (resign first, or campaign from another task)"
                        .into(),
                });
            }
        }
        let options = LockOptions::new().wait(wait).cold();
        let guard = LockClient::from_core(self.core.clone())
            .lock(role.name.to_string())
            .options(options)
            .acquire()
            .await?;
        Leadership::proclaimed(
            self.core.clone(),
            guard,
            role,
            record,
            self.role.clone(),
            &self.metadata,
        )
        .await
    }

    /// The role's leader now, read from the store: `None` when nobody holds
    /// the role's lock.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>, LockError> {
        let (role, record) = self.keys()?;
        let read = self.core.backend.leader_read(&role, &record).await?;
        Ok(read.map(|record| Leader::from_record(&self.role, record)))
    }

    /// Watches who leads the role: an [`Observer`] whose
    /// [`changed`](Observer::changed) gives each change, in term order,
    /// pushed by the store (see [`Observer`]). Starts reading at once on the
    /// current tokio runtime (or at the first `changed` outside one).
    pub fn observe(&self) -> Observer {
        Observer::new(
            self.core.clone(),
            self.role.clone(),
            keys(&self.core, &self.role),
        )
    }
}

/// The role's lock and record keys (see [`Election::keys`]).
fn keys(core: &ClientCore, role: &str) -> Result<(LockKey, LockKey), LockError> {
    if role.is_empty() {
        return Err(LockError::InvalidKey {
            key: String::new(),
            reason: "a role name must not be empty",
        });
    }
    let name = format!("{ROLE_LOCK_PREFIX}{role}");
    let key = core.key(&name)?;
    if key.layout == crate::name::Layout::Redisson {
        return Err(LockError::Unsupported {
            key: name,
            primitive: "leader election",
            backend: "a client in Redisson's layout",
            reason: "Redisson's lock hash keeps a hold count, not the fencing token a term is; \
                     elect leaders with a client in the native layout",
        });
    }
    if let Some(why) = core.backend.capabilities().leadership {
        return Err(LockError::Unsupported {
            key: name,
            primitive: "leader election",
            backend: why.backend,
            reason: why.reason,
        });
    }
    let record = key.leader_record();
    Ok((key, record))
}

/// Who leads a role, as the store records it: read by
/// [`Election::leader`] and pushed to an [`Observer`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The role.
    pub role: String,
    /// The leader's term: the fencing token of the role's lock.
    pub term: u64,
    /// The owner id holding the role's lock (`<client id>:<n>`).
    pub owner: String,
    /// The leader's client id (see [`LockClient::id`]).
    pub client_id: String,
    /// When this term's leader first proclaimed, by the store's clock;
    /// `None` in the moment between winning the lock and proclaiming.
    pub since: Option<SystemTime>,
    /// What the leader proclaimed (see [`Election::metadata`]); `None`
    /// before it proclaimed.
    pub metadata: Option<String>,
    /// What was left of the leader's lease when read.
    pub lease_left: Duration,
}

impl Leader {
    fn from_record(role: &str, record: LeaderRecord) -> Self {
        let client_id = record
            .owner
            .split_once(':')
            .map_or(record.owner.as_str(), |(client, _)| client)
            .to_owned();
        Leader {
            role: role.to_owned(),
            term: record.term,
            client_id,
            owner: record.owner,
            since: record
                .since_ms
                .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms))),
            metadata: record.metadata,
            lease_left: record.lease_left,
        }
    }

    /// Whether `other` is the same term with the same proclamation (the
    /// lease left aside, which changes at every read).
    fn same(&self, other: &Leader) -> bool {
        self.term == other.term
            && self.owner == other.owner
            && self.since == other.since
            && self.metadata == other.metadata
    }
}

/// The term a leader's future runs in (see [`Election::run`]): pass
/// [`token`](Term::token) with every write to a fenced store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    role: Arc<str>,
    token: u64,
}

impl Term {
    /// The term: the role lock's fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The role.
    pub fn role(&self) -> &str {
        &self.role
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} term {}", self.role, self.token)
    }
}
