//! What inspection reports about a lock: [`LockInfo`] and [`LockHolder`].

use std::time::Duration;

/// What the backend knows about one lock, as returned by
/// [`LockClient::inspect`](crate::LockClient::inspect) and
/// [`LockClient::list`](crate::LockClient::list).
///
/// A snapshot taken in one round trip; the lock may change right after.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name (`order:42`), without the key prefix.
    pub name: String,
    /// The backend's key of the lock (`lock:{order:42}` with the default
    /// prefix).
    pub key: String,
    /// The backend's key of the counter this lock's fencing tokens come from
    /// (`lock:fence:{<tag>}`, shared by the locks of one cluster slot). After
    /// Redis lost its data, an operator sets it above the highest token the
    /// guarded resources have seen.
    pub fence_key: String,
    /// The current holder, or `None` when the lock is free.
    pub holder: Option<LockHolder>,
    /// The value of the counter this lock's fencing tokens come from, or
    /// `None` when it never issued one. The counter is shared by the locks
    /// whose names hash to the same cluster slot (so it is at least this
    /// lock's last token, and may be higher); the next holder of this lock
    /// gets a higher token. It survives the lock's expiry and release.
    pub last_fencing_token: Option<u64>,
}

/// The holder of a lock, as the backend records it.
///
/// The backend stores one entry per holding owner, not a hold count:
/// reentrant (nested) holds are counted inside the holder's process
/// ([`LockGuard::hold_count`](crate::LockGuard::hold_count)) and are not
/// visible here. [`LockHolder::holds`] is what the backend sees.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockHolder {
    /// The owner id, `<client-id>:<scope>`.
    pub owner: String,
    /// The fencing token this holder was given.
    pub fencing_token: u64,
    /// The remaining lease, or `None` when the lock has no expiry (which the
    /// lock itself never sets: someone wrote the key by hand).
    pub ttl: Option<Duration>,
    /// Holds as the backend records them: 1 per holding owner (so 1 for a
    /// healthy lock). Nested holds inside the owner are not counted here.
    pub holds: usize,
}

impl LockHolder {
    /// The id of the client holding the lock (the owner id up to its last `:`).
    pub fn client_id(&self) -> &str {
        self.owner
            .rsplit_once(':')
            .map_or(&*self.owner, |(client, _)| client)
    }
}
