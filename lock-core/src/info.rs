//! What inspection reports about a lock: [`LockInfo`] and [`LockHolder`];
//! about the lock family: [`FairLockInfo`] (with its [`QueuedWaiter`]s),
//! [`ReadWriteLockInfo`] (with its [`Reader`]s) and [`SemaphoreInfo`] (with
//! its [`PermitHolder`]s); every lock of every kind: [`ListedLock`].

use std::time::Duration;

/// What the backend knows about one lock, as returned by
/// [`LockAdmin::inspect`](crate::LockAdmin::inspect) and
/// [`LockAdmin::list`](crate::LockAdmin::list).
///
/// A snapshot taken in one round trip; the lock may change right after.
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, field for
/// field (the holder's `ttl` as `ttl_ms`, see [`LockHolder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name (`order:42`), without the key prefix.
    pub name: String,
    /// The backend's key of the lock (`lock:{order:42}` with the default
    /// prefix).
    pub key: String,
    /// The backend's key of the counter this lock's fencing tokens come from
    /// (`lock:fence:{<tag>}`, shared by the locks of one cluster slot). It
    /// holds the last token issued; a lost counter needs no operator: the
    /// next token is at least the server's clock in microseconds.
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
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, field for
/// field, except that `ttl` is written as `ttl_ms`: whole milliseconds (the
/// unit Redis reports it in), or `null` when the lock has no expiry:
/// `{"owner": "...", "fencing_token": 7, "ttl_ms": 29500, "holds": 1}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct LockHolder {
    /// The owner id, `<client-id>:<scope>`.
    pub owner: String,
    /// The fencing token this holder was given.
    pub fencing_token: u64,
    /// The remaining lease, or `None` when the lock has no expiry (which the
    /// lock itself never sets: someone wrote the key by hand).
    #[cfg_attr(feature = "serde", serde(rename = "ttl_ms", with = "ttl_millis"))]
    pub ttl: Option<Duration>,
    /// Holds as the backend records them: 1 per holding owner (so 1 for a
    /// healthy lock). Nested holds inside the owner are not counted here.
    pub holds: usize,
}

impl LockHolder {
    /// The id of the client holding the lock (the owner id up to its last `:`).
    pub fn client_id(&self) -> &str {
        client_of(&self.owner)
    }

    /// Whether this holder is a hot lock's keeper
    /// ([`keep_hot`](crate::LockClientBuilder::keep_hot)): the client
    /// [`client_id`](LockHolder::client_id) keeps the plain lock taken
    /// between its uses. Its owner id is a field of the keeper's own
    /// (`<client-id>:h<n>~k`), not a scope's, and its fencing token stays
    /// the same across the uses until the keeper gives the lock up; the
    /// uses are counted inside the keeper's process only, so the store
    /// cannot tell a lock kept idle from one in use.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, MemoryStore};
    /// let hot = LockClient::builder()
    ///     .keep_hot(Duration::from_secs(30))
    ///     .memory(MemoryStore::new())?;
    /// hot.lock("cache:refresh").acquire().await?.release().await?; // kept
    /// // A fixed lease is never kept.
    /// let plain = hot.lock("report").lease(Duration::from_secs(5)).acquire().await?;
    /// let kept = hot.admin().inspect("cache:refresh").await?.holder.expect("kept");
    /// assert!(kept.kept());
    /// assert_eq!(kept.client_id(), hot.id());
    /// let held = hot.admin().inspect("report").await?.holder.expect("held");
    /// assert!(!held.kept());
    /// # plain.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn kept(&self) -> bool {
        self.owner.ends_with(crate::wire::KEEP_SUFFIX)
    }
}

/// The client id in owner id `owner` (`<client-id>:<scope>`).
fn client_of(owner: &str) -> &str {
    owner.rsplit_once(':').map_or(owner, |(client, _)| client)
}

/// What the backend records of a fair lock, as returned by
/// [`LockAdmin::inspect_fair`](crate::LockAdmin::inspect_fair): its holder
/// and the waiters queued for it, in the order they will get it.
///
/// A snapshot read at one instant (one script on Redis); only live entries
/// are shown: a waiter whose place ran out by the server's clock (it died or
/// hung) is left out, although the store drops it only at its next write.
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, field for
/// field (durations as whole milliseconds, see [`LockHolder`] and
/// [`QueuedWaiter`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct FairLockInfo {
    /// The lock name (`payout:batch`), without the key prefix.
    pub name: String,
    /// The backend's key of the holder (`lock:{payout:batch}:fair` with the
    /// default prefix); the queue is in `<key>:queue` and `<key>:timeout`.
    pub key: String,
    /// The backend's key of the counter its fencing tokens come from, as
    /// [`LockInfo::fence_key`].
    pub fence_key: String,
    /// The current holder, or `None` when the lock is free. A waiter the
    /// lock was just handed to is its holder before its process took it up.
    pub holder: Option<LockHolder>,
    /// The waiters queued for it, the next holder first.
    pub queue: Vec<QueuedWaiter>,
    /// The value of the counter its fencing tokens come from, as
    /// [`LockInfo::last_fencing_token`].
    pub last_fencing_token: Option<u64>,
}

/// A waiter that holds a place: in a fair lock's queue, or as a waiting
/// writer of a read-write lock (which keeps new readers out).
///
/// A waiter refreshes its place with every attempt while it waits (every
/// 1.7 s at least); one that died or hung loses it after
/// [`QUEUE_PRESENCE`](crate::QUEUE_PRESENCE).
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, with
/// `place_ttl` written as `place_ttl_ms` (whole milliseconds):
/// `{"owner": "...", "place_ttl_ms": 4200}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// The owner id, `<client-id>:<scope>`.
    pub owner: String,
    /// How long the waiter keeps its place if it makes no further attempt.
    #[cfg_attr(feature = "serde", serde(rename = "place_ttl_ms", with = "millis"))]
    pub place_ttl: Duration,
}

impl QueuedWaiter {
    /// The id of the waiting client (the owner id up to its last `:`).
    pub fn client_id(&self) -> &str {
        client_of(&self.owner)
    }
}

/// What the backend records of a read-write lock, as returned by
/// [`LockAdmin::inspect_read_write`](crate::LockAdmin::inspect_read_write):
/// its readers, its writer and the writers waiting for it.
///
/// A snapshot read at one instant (one script on Redis); only live entries
/// are shown: readers whose lease and waiting writers whose place ran out by
/// the server's clock are left out, although the store drops them only at
/// its next write.
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, field for
/// field (durations as whole milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct ReadWriteLockInfo {
    /// The lock name (`prices`), without the key prefix.
    pub name: String,
    /// The stem of the backend's keys of the lock (`lock:{prices}:rw` with
    /// the default prefix): the readers are in `<key>:read`, the writer in
    /// `<key>:write`, the waiting writers in `<key>:wait`.
    pub key: String,
    /// The backend's key of the counter its fencing tokens come from, as
    /// [`LockInfo::fence_key`].
    pub fence_key: String,
    /// The readers, the one whose lease ends first first.
    pub readers: Vec<Reader>,
    /// The writer, or `None` when nobody writes. A writer that also took the
    /// read lock (a downgrade under way) is among the readers too.
    pub writer: Option<LockHolder>,
    /// The writers waiting for it, the one whose place ends first first.
    /// While any waits, new readers wait behind them (writers first).
    pub waiting_writers: Vec<QueuedWaiter>,
    /// The value of the counter its fencing tokens come from, as
    /// [`LockInfo::last_fencing_token`].
    pub last_fencing_token: Option<u64>,
}

/// A reader of a read-write lock.
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, with `ttl`
/// written as `ttl_ms` (whole milliseconds): `{"owner": "...", "ttl_ms": 29500}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Reader {
    /// The owner id, `<client-id>:<scope>`.
    pub owner: String,
    /// The remaining lease of its read hold.
    #[cfg_attr(feature = "serde", serde(rename = "ttl_ms", with = "millis"))]
    pub ttl: Duration,
}

impl Reader {
    /// The id of the reading client (the owner id up to its last `:`).
    pub fn client_id(&self) -> &str {
        client_of(&self.owner)
    }
}

/// What the backend records of a semaphore, as returned by
/// [`LockAdmin::inspect_semaphore`](crate::LockAdmin::inspect_semaphore):
/// who holds how many permits.
///
/// The total is not stored (every acquirer passes it), so it is not shown:
/// the free permits are the total minus [`in_use`](SemaphoreInfo::in_use).
/// Waiters are not queued and not shown.
///
/// A snapshot read at one instant (one script on Redis); only live holders
/// are shown: holders whose lease ran out by the server's clock are left
/// out (their permits are free), although the store drops them only at its
/// next write.
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, field for
/// field (durations as whole milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The semaphore's name (`exports:tenant:7`), without the key prefix.
    pub name: String,
    /// The backend's key of the holders (`lock:{exports:tenant:7}:sem` with
    /// the default prefix); their permits are in `<key>:permits`.
    pub key: String,
    /// The backend's key of the counter its fencing tokens come from, as
    /// [`LockInfo::fence_key`].
    pub fence_key: String,
    /// The holders, the one whose lease ends first first.
    pub holders: Vec<PermitHolder>,
    /// The permits in use: the sum of the holders' permits.
    pub in_use: u32,
    /// The value of the counter its fencing tokens come from, as
    /// [`LockInfo::last_fencing_token`].
    pub last_fencing_token: Option<u64>,
}

/// A holder of permits of a semaphore.
///
/// With the `serde` feature it is `Serialize` and `Deserialize`, with `ttl`
/// written as `ttl_ms` (whole milliseconds):
/// `{"owner": "...", "permits": 2, "ttl_ms": 29500}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct PermitHolder {
    /// The owner id, `<client-id>:<scope>`.
    pub owner: String,
    /// How many permits it holds.
    pub permits: u32,
    /// The remaining lease of its permits.
    #[cfg_attr(feature = "serde", serde(rename = "ttl_ms", with = "millis"))]
    pub ttl: Duration,
}

impl PermitHolder {
    /// The id of the holding client (the owner id up to its last `:`).
    pub fn client_id(&self) -> &str {
        client_of(&self.owner)
    }
}

/// One lock of any kind, as [`LockAdmin::list_all`](crate::LockAdmin::list_all)
/// lists it: a plain lock held (a hot lock's keeper among them, see
/// [`LockHolder::kept`]), or a primitive of the lock family in use.
///
/// With the `serde` feature it is `Serialize` and `Deserialize` as its
/// info with a `kind` field added: `"lock"`, `"fair"`, `"read_write"` or
/// `"semaphore"` (`{"kind": "fair", "name": "deploy", ...}`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "kind", rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum ListedLock {
    /// A plain lock ([`lock`](crate::LockClient::lock)) with its holder.
    #[cfg_attr(feature = "serde", serde(rename = "lock"))]
    Plain(LockInfo),
    /// A fair lock ([`fair_lock`](crate::LockClient::fair_lock)) held or
    /// with a queue.
    Fair(FairLockInfo),
    /// A read-write lock ([`read_write_lock`](crate::LockClient::read_write_lock))
    /// with readers, a writer or waiting writers.
    ReadWrite(ReadWriteLockInfo),
    /// A semaphore ([`semaphore`](crate::LockClient::semaphore)) with
    /// permits in use.
    Semaphore(SemaphoreInfo),
}

impl ListedLock {
    /// The lock's name, without the key prefix.
    pub fn name(&self) -> &str {
        match self {
            ListedLock::Plain(info) => &info.name,
            ListedLock::Fair(info) => &info.name,
            ListedLock::ReadWrite(info) => &info.name,
            ListedLock::Semaphore(info) => &info.name,
        }
    }

    /// The backend's key of the lock (of a read-write lock: the stem of its
    /// keys), as the info's `key`.
    pub fn key(&self) -> &str {
        match self {
            ListedLock::Plain(info) => &info.key,
            ListedLock::Fair(info) => &info.key,
            ListedLock::ReadWrite(info) => &info.key,
            ListedLock::Semaphore(info) => &info.key,
        }
    }

    /// The value of the counter its fencing tokens come from, as
    /// [`LockInfo::last_fencing_token`].
    pub fn last_fencing_token(&self) -> Option<u64> {
        match self {
            ListedLock::Plain(info) => info.last_fencing_token,
            ListedLock::Fair(info) => info.last_fencing_token,
            ListedLock::ReadWrite(info) => info.last_fencing_token,
            ListedLock::Semaphore(info) => info.last_fencing_token,
        }
    }

    /// The order of the kinds among locks of one name: plain, fair,
    /// read-write, semaphore.
    pub(crate) fn rank(&self) -> u8 {
        match self {
            ListedLock::Plain(_) => 0,
            ListedLock::Fair(_) => 1,
            ListedLock::ReadWrite(_) => 2,
            ListedLock::Semaphore(_) => 3,
        }
    }
}

/// What a backend found of one lock while listing every kind: a plain lock
/// held, or what it records of the primitive of a key of the family (turned
/// into a [`ListedLock`] by `client/admin.rs`).
#[derive(Debug)]
pub(crate) enum Found {
    /// A plain lock, as `list` returns it.
    Plain(LockInfo),
    /// The primitive of the key (its `kind`: `Fair`, `Write` or `Permits`)
    /// and what the backend records of it.
    Family(crate::name::LockKey, FamilyState),
}

/// What a backend records of one primitive of the lock family, live entries
/// only, read at one instant; `client.rs` turns it into the public type of
/// the primitive.
#[derive(Debug, Default)]
pub(crate) struct FamilyState {
    /// The one holder: of a fair (or plain) lock, or a read-write lock's writer.
    pub(crate) holder: Option<LockHolder>,
    /// The holders that share it: a read-write lock's readers (1 permit
    /// each) or a semaphore's holders, the soonest to expire first.
    pub(crate) shares: Vec<PermitHolder>,
    /// The waiters that keep a place: a fair lock's queue in its order, or
    /// a read-write lock's waiting writers, the soonest to expire first.
    pub(crate) waiters: Vec<QueuedWaiter>,
    /// The fencing counter.
    pub(crate) last_fencing_token: Option<u64>,
}

/// `LockHolder::ttl` as whole milliseconds.
#[cfg(feature = "serde")]
mod ttl_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        ttl: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        ttl.map(|ttl| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
            .serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(deserializer)?.map(Duration::from_millis))
    }
}

/// A `Duration` as whole milliseconds.
#[cfg(feature = "serde")]
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        duration: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        u64::try_from(duration.as_millis())
            .unwrap_or(u64::MAX)
            .serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(deserializer)?))
    }
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;

    #[test]
    fn serializes_with_the_ttl_in_milliseconds() {
        let info = LockInfo {
            name: "order:42".into(),
            key: "lock:{order:42}".into(),
            fence_key: "lock:fence:{a1}".into(),
            holder: Some(LockHolder {
                owner: "c1:7".into(),
                fencing_token: 12,
                ttl: Some(Duration::from_micros(29_500_400)),
                holds: 1,
            }),
            last_fencing_token: Some(12),
        };
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "name": "order:42",
                "key": "lock:{order:42}",
                "fence_key": "lock:fence:{a1}",
                "holder": {"owner": "c1:7", "fencing_token": 12, "ttl_ms": 29500, "holds": 1},
                "last_fencing_token": 12,
            })
        );
        let back: LockInfo = serde_json::from_value(json).unwrap();
        let ttl = back.holder.as_ref().and_then(|h| h.ttl);
        assert_eq!(ttl, Some(Duration::from_millis(29_500)));

        let free = serde_json::json!({
            "name": "a", "key": "lock:{a}", "fence_key": "lock:fence:{a}",
            "holder": {"owner": "c1:1", "fencing_token": 1, "ttl_ms": null, "holds": 1},
            "last_fencing_token": null,
        });
        let free: LockInfo = serde_json::from_value(free).unwrap();
        assert_eq!(free.holder.unwrap().ttl, None);
        assert_eq!(free.last_fencing_token, None);
    }
    #[test]
    fn the_family_serializes_with_durations_in_milliseconds() {
        let fair = FairLockInfo {
            name: "deploy".into(),
            key: "lock:{deploy}:fair".into(),
            fence_key: "lock:fence:{a1}".into(),
            holder: None,
            queue: vec![QueuedWaiter {
                owner: "c1:2".into(),
                place_ttl: Duration::from_micros(4_200_900),
            }],
            last_fencing_token: Some(3),
        };
        let json = serde_json::to_value(&fair).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "name": "deploy",
                "key": "lock:{deploy}:fair",
                "fence_key": "lock:fence:{a1}",
                "holder": null,
                "queue": [{"owner": "c1:2", "place_ttl_ms": 4200}],
                "last_fencing_token": 3,
            })
        );
        let back: FairLockInfo = serde_json::from_value(json).unwrap();
        assert_eq!(back.queue[0].place_ttl, Duration::from_millis(4200));

        let rw = ReadWriteLockInfo {
            name: "prices".into(),
            key: "lock:{prices}:rw".into(),
            fence_key: "lock:fence:{b2}".into(),
            readers: vec![Reader {
                owner: "c1:1".into(),
                ttl: Duration::from_millis(29_500),
            }],
            writer: None,
            waiting_writers: vec![],
            last_fencing_token: None,
        };
        let json = serde_json::to_value(&rw).unwrap();
        assert_eq!(
            json["readers"],
            serde_json::json!([{"owner": "c1:1", "ttl_ms": 29500}])
        );
        assert_eq!(json["waiting_writers"], serde_json::json!([]));
        assert_eq!(
            serde_json::from_value::<ReadWriteLockInfo>(json).unwrap(),
            rw
        );

        let semaphore = SemaphoreInfo {
            name: "exports".into(),
            key: "lock:{exports}:sem".into(),
            fence_key: "lock:fence:{c3}".into(),
            holders: vec![PermitHolder {
                owner: "c2:9".into(),
                permits: 2,
                ttl: Duration::from_millis(1_000),
            }],
            in_use: 2,
            last_fencing_token: Some(8),
        };
        let json = serde_json::to_value(&semaphore).unwrap();
        assert_eq!(
            json["holders"],
            serde_json::json!([{"owner": "c2:9", "permits": 2, "ttl_ms": 1000}])
        );
        assert_eq!(json["in_use"], 2);
        assert_eq!(
            serde_json::from_value::<SemaphoreInfo>(json).unwrap(),
            semaphore
        );
        assert_eq!(semaphore.holders[0].client_id(), "c2");
    }
}
