//! [`LockAdmin`]: the operator's handle on a client's backend: what it
//! records of a lock (holder, queue, readers, permits, waiting clients),
//! every lock held (of every kind), and the overrides that delete a lock whoever holds it.
//! Kept apart from [`LockClient`](crate::LockClient), whose methods take
//! locks, so that an override is never one autocomplete away from `lock()`.

use std::fmt;
use std::sync::Arc;

use crate::backend::Unsupported;
use crate::client_core::ClientCore;
use crate::error::LockError;
use crate::info::{
    FairLockInfo, FamilyState, Found, ListedLock, LockInfo, ReadWriteLockInfo, Reader,
    SemaphoreInfo,
};
use crate::name::{Kind, Layout, LockKey};

/// The operator's handle on a client's backend (see
/// [`LockClient::admin`](crate::LockClient::admin)): inspection, listing,
/// waiter counts and forced releases. Cheap to clone; shares the client's
/// connections, key prefix and layout.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), distlock_core::LockError> {
/// let client = distlock_core::LockClient::memory();
/// let admin = client.admin();
/// let _guard = client.lock("job:a").acquire().await?;
/// assert_eq!(admin.list("job:").await?.len(), 1);
/// assert!(admin.force_release("job:a").await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockAdmin {
    core: Arc<ClientCore>,
}

impl fmt::Debug for LockAdmin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockAdmin")
            .field("client", &self.core.id)
            .field("server", &self.core.backend.server())
            .field("prefix", &self.core.prefix)
            .finish()
    }
}

impl LockAdmin {
    pub(crate) fn new(core: Arc<ClientCore>) -> Self {
        LockAdmin { core }
    }

    /// The layouts of the clients that used this store lately: each client
    /// records its [`Layout`] when it connects (Redis: the hash
    /// `distlock:layouts`, kept a day after the last client recorded
    /// itself; the in-memory store: its clients). Two layouts on one store
    /// are a hazard (a name taken in both is two locks that do not exclude
    /// each other): a client that finds another layout recorded is refused
    /// ([`LockError::LayoutConflict`]) unless it declares the mix
    /// ([`allow_mixed_layouts`](crate::LockClientBuilder::allow_mixed_layouts)).
    /// Redisson's own clients do not record themselves.
    ///
    /// Errors: [`LockError::Backend`] (an ACL user needs `+hkeys` on
    /// `distlock:layouts` to read it, and `+evalsha +hkeys +hset +pexpire`
    /// to record itself; without them clients connect unchecked).
    ///
    /// ```
    /// # fn main() -> Result<(), distlock_core::LockError> {
    /// use distlock_core::{Layout, LockClient, MemoryStore};
    /// let store = MemoryStore::new();
    /// let native = LockClient::builder().memory(store.clone())?;
    /// let _redisson = LockClient::builder()
    ///     .layout(Layout::Redisson)
    ///     .allow_mixed_layouts(true) // a migration window
    ///     .memory(store)?;
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// # rt.block_on(async {
    /// assert_eq!(native.admin().layouts().await?, [Layout::Native, Layout::Redisson]);
    /// # Ok::<(), distlock_core::LockError>(()) })?;
    /// # Ok(()) }
    /// ```
    pub async fn layouts(&self) -> Result<Vec<Layout>, LockError> {
        let names = self.core.backend.layouts(None).await?;
        Ok(names
            .iter()
            .filter_map(|name| Layout::from_registry_name(name))
            .collect())
    }

    /// Removes `layout` from the store's registry of layouts (see
    /// [`layouts`](Self::layouts)), once no client of it is left (a
    /// migration to the other layout is over): clients of the other layout
    /// are no longer refused. Returns whether it was recorded. A client of
    /// `layout` that connects later records it again. On Redlock, every
    /// master's registry. (`lockctl layouts --forget LAYOUT`.)
    ///
    /// The registry does not age out one entry at a time: it is kept a day
    /// after the last client of *any* layout recorded itself, so on a store
    /// in use a layout no client uses any more stays recorded until it is
    /// forgotten here.
    ///
    /// Errors: [`LockError::Backend`] (an ACL user needs `+hdel` on
    /// `distlock:layouts`).
    ///
    /// ```
    /// # fn main() -> Result<(), distlock_core::LockError> {
    /// use distlock_core::{Layout, LockClient, LockError, MemoryStore};
    /// let store = MemoryStore::new();
    /// let old = LockClient::builder().layout(Layout::Redisson).memory(store.clone())?;
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// # rt.block_on(async {
    /// // The migration is over: no client of Redisson's layout is left.
    /// assert!(old.admin().forget_layout(Layout::Redisson).await?);
    /// # Ok::<(), LockError>(()) })?;
    /// let _native = LockClient::builder().memory(store)?;
    /// # Ok(()) }
    /// ```
    pub async fn forget_layout(&self, layout: Layout) -> Result<bool, LockError> {
        self.core
            .backend
            .forget_layout(layout.registry_name())
            .await
    }

    /// How many clients wait for each of the locks `names` (in their
    /// order): on Redis, the subscriptions to each lock's wake-up channel
    /// (`PUBSUB NUMSUB`, on a cluster with sharded pub/sub `PUBSUB
    /// SHARDNUMSUB` on the lock's master, with classic pub/sub summed over
    /// the masters; on Redlock the most any master counts). A client counts
    /// once however many of its tasks wait, and a client that follows the
    /// channel for another reason (a hot lock's keeper) counts too. The
    /// in-memory store counts the waiting acquisitions of its clients.
    ///
    /// One round trip on one node (one per lock on a cluster with sharded
    /// pub/sub, one per master with classic pub/sub). Errors:
    /// [`LockError::InvalidKey`], [`LockError::Backend`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// use std::time::Duration;
    /// let client = distlock_core::LockClient::memory();
    /// let held = client.lock("order:1").acquire().await?;
    /// let waiter = tokio::spawn({
    ///     let client = client.clone();
    ///     async move { client.lock("order:1").wait(Duration::from_secs(5)).acquire().await }
    /// });
    /// tokio::time::sleep(Duration::from_millis(50)).await;
    /// assert_eq!(client.admin().waiters(["order:1", "order:2"]).await?, [1, 0]);
    /// held.release().await?;
    /// waiter.await.unwrap()?.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn waiters<I>(&self, names: I) -> Result<Vec<u64>, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let keys = names
            .into_iter()
            .map(|name| self.core.key(name.as_ref()))
            .collect::<Result<Vec<LockKey>, _>>()?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.core.backend.subscribers(&keys).await
    }

    /// Deletes the lock `name` whoever holds it and wakes a waiter: an
    /// operator's override for a lock known to be abandoned. Its holder is
    /// told at its next renewal (watchdog mode) or release. Returns whether a
    /// lock was held.
    pub async fn force_release(&self, name: &str) -> Result<bool, LockError> {
        let key = self.core.key(name)?;
        self.core.backend.force_release(&key).await
    }

    /// What the backend knows about lock `name`: its holder (owner, fencing
    /// token, remaining lease) or that it is free, and the value of the
    /// counter its fencing tokens come from.
    ///
    /// One round trip on Redis (`TYPE`, `HGETALL`, `PTTL`, `GET`, pipelined,
    /// not atomic). Reentrant holds are counted in the holder's process and
    /// do not show (see [`LockHolder`](crate::LockHolder)). On Redlock, the
    /// holder a majority of the masters record.
    ///
    /// Errors: [`LockError::InvalidKey`], [`LockError::WrongType`] when a key
    /// of the lock holds another type, [`LockError::Backend`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// let client = distlock_core::LockClient::memory();
    /// let guard = client.lock("order:42").acquire().await?;
    /// let info = client.admin().inspect("order:42").await?;
    /// let holder = info.holder.expect("held");
    /// assert_eq!(holder.owner, guard.owner());
    /// assert_eq!(holder.fencing_token, guard.fencing_token());
    /// assert_eq!(info.last_fencing_token, Some(guard.fencing_token()));
    /// guard.release().await?;
    /// assert!(client.admin().inspect("order:42").await?.holder.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let key = self.core.key(name)?;
        self.core.backend.inspect(&key).await
    }

    /// Every lock currently held whose name starts with `name_prefix` (`""`
    /// for all), sorted by name.
    ///
    /// On Redis this walks the keyspace with `SCAN` (never `KEYS`, so the
    /// server is not blocked), matching only this client's key prefix, in
    /// batches of a few hundred keys with one pipelined round trip per batch
    /// (`HGETALL`, `PTTL`, `GET`); on a cluster, every master. A lock taken
    /// or released during the walk may or may not be listed, as `SCAN`
    /// guarantees.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// let client = distlock_core::LockClient::memory();
    /// let _a = client.lock("job:a").acquire().await?;
    /// let _b = client.lock("job:b").acquire().await?;
    /// let _c = client.lock("order:1").acquire().await?;
    /// let jobs = client.admin().list("job:").await?;
    /// let names: Vec<&str> = jobs.iter().map(|l| l.name.as_str()).collect();
    /// assert_eq!(names, ["job:a", "job:b"]);
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, name_prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        self.listable()?;
        let mut locks = self
            .core
            .backend
            .list(&self.core.prefix, name_prefix)
            .await?;
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(locks)
    }

    /// Every lock of every kind in use whose name starts with `name_prefix`
    /// (`""` for all), sorted by name (a name's plain lock, fair lock,
    /// read-write lock and semaphore in that order): the plain locks held,
    /// as [`list`](LockAdmin::list) lists them (hot locks' keepers among
    /// them, see [`LockHolder::kept`](crate::LockHolder::kept)), the fair
    /// locks held or with a queue, the read-write locks with readers, a
    /// writer or waiting writers, and the semaphores with permits in use,
    /// each as its `inspect_*` method reports it (live entries only).
    ///
    /// On Redis one `SCAN` walk of this client's key prefix (never `KEYS`),
    /// then one pipelined round trip per few hundred locks (`HGETALL`,
    /// `PTTL`, `GET` of a plain lock, the read-only inspection script of a
    /// primitive of the family); on a cluster, every master. A lock taken or
    /// released during the walk may or may not be listed, as `SCAN`
    /// guarantees; each primitive is read at one instant. On Redlock, which
    /// has no lock family, the plain locks of [`list`](LockAdmin::list).
    ///
    /// Errors: [`LockError::Backend`], and [`LockError::Unsupported`] in
    /// Redisson's layout (as [`list`](LockAdmin::list)).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// use distlock_core::{ListedLock, LockClient};
    /// let client = LockClient::memory();
    /// let _job = client.lock("job:a").acquire().await?;
    /// let _turn = client.fair_lock("job:deploy").acquire().await?;
    /// let _read = client.read_write_lock("job:prices").read().acquire().await?;
    /// let _two = client.semaphore("job:exports", 5).permits(2).acquire().await?;
    /// let _other = client.lock("order:1").acquire().await?;
    ///
    /// let listed = client.admin().list_all("job:").await?;
    /// let names: Vec<&str> = listed.iter().map(|l| l.name()).collect();
    /// assert_eq!(names, ["job:a", "job:deploy", "job:exports", "job:prices"]);
    /// for lock in &listed {
    ///     match lock {
    ///         ListedLock::Plain(info) => assert!(info.holder.is_some()),
    ///         ListedLock::Fair(info) => assert!(info.queue.is_empty()),
    ///         ListedLock::ReadWrite(info) => assert_eq!(info.readers.len(), 1),
    ///         ListedLock::Semaphore(info) => assert_eq!(info.in_use, 2),
    ///         _ => unreachable!("a kind added later"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_all(&self, name_prefix: &str) -> Result<Vec<ListedLock>, LockError> {
        self.listable()?;
        let found = self
            .core
            .backend
            .list_all(&self.core.prefix, name_prefix)
            .await?;
        let mut locks: Vec<ListedLock> = found
            .into_iter()
            .filter_map(|found| match found {
                Found::Plain(info) => info.holder.is_some().then_some(ListedLock::Plain(info)),
                Found::Family(key, state) => {
                    let in_use = state.holder.is_some()
                        || !state.shares.is_empty()
                        || !state.waiters.is_empty();
                    in_use.then(|| match key.kind {
                        Kind::Fair => ListedLock::Fair(fair_info(&key, state)),
                        Kind::Read | Kind::Write => {
                            ListedLock::ReadWrite(read_write_info(&key, state))
                        }
                        Kind::Permits { .. } => ListedLock::Semaphore(semaphore_info(&key, state)),
                        // Backends report plain locks as `Found::Plain`.
                        Kind::Exclusive => ListedLock::Plain(LockInfo {
                            name: key.name.to_string(),
                            key: key.lock.to_string(),
                            fence_key: key.fence(),
                            holder: state.holder,
                            last_fencing_token: state.last_fencing_token,
                        }),
                    })
                }
            })
            .collect();
        locks.sort_by(|a, b| (a.name(), a.rank()).cmp(&(b.name(), b.rank())));
        Ok(locks)
    }

    /// How many clients wait for each of `locks` (in their order), as
    /// [`waiters`](LockAdmin::waiters) counts them for plain locks: the
    /// subscriptions to each lock's own wake-up channel (a fair lock's, a
    /// read-write lock's, a semaphore's), one round trip as `waiters`. The
    /// clients of a fair lock's queued waiters count here and are in its
    /// [`queue`](crate::FairLockInfo::queue); a read-write lock's count is of
    /// its waiting readers and writers alike (the writers are also in its
    /// [`waiting_writers`](crate::ReadWriteLockInfo::waiting_writers)); a
    /// semaphore's waiters are only here. A hot lock's keeper follows its
    /// lock's channel and counts too.
    ///
    /// Errors: [`LockError::Backend`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// use std::time::Duration;
    /// let client = distlock_core::LockClient::memory();
    /// let all = client.semaphore("exports", 1).permit().acquire().await?;
    /// let waiter = tokio::spawn({
    ///     let client = client.clone();
    ///     async move { client.semaphore("exports", 1).permit().wait(Duration::from_secs(5)).acquire().await }
    /// });
    /// tokio::time::sleep(Duration::from_millis(50)).await;
    /// let admin = client.admin();
    /// let listed = admin.list_all("").await?;
    /// assert_eq!(admin.waiters_of(&listed).await?, [1]);
    /// all.release().await?;
    /// waiter.await.unwrap()?.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn waiters_of(&self, locks: &[ListedLock]) -> Result<Vec<u64>, LockError> {
        let keys = locks
            .iter()
            .map(|lock| {
                let kind = match lock {
                    ListedLock::Plain(_) => Kind::Exclusive,
                    ListedLock::Fair(_) => Kind::Fair,
                    ListedLock::ReadWrite(_) => Kind::Write,
                    ListedLock::Semaphore(_) => Kind::Permits { take: 1, total: 1 },
                };
                self.core.key_of(lock.name(), kind)
            })
            .collect::<Result<Vec<LockKey>, _>>()?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.core.backend.subscribers(&keys).await
    }

    /// What the backend records of fair lock `name`
    /// ([`fair_lock`](crate::LockClient::fair_lock)): its holder, and the waiters
    /// queued for it in the order they will get it, each with how long it
    /// keeps its place without another attempt.
    ///
    /// Read-only, one round trip on Redis (one script, so the holder and
    /// the queue are read at one instant). Waiters whose place ran out by
    /// the server's clock (dead or hung processes) are not shown.
    ///
    /// Errors: [`LockError::InvalidKey`], [`LockError::WrongType`] when a key
    /// of the fair lock holds another type, [`LockError::Backend`], and
    /// [`LockError::Unsupported`] on Redlock (as acquiring it is).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// use std::time::Duration;
    /// let client = distlock_core::LockClient::memory();
    /// let turn = client.fair_lock("payout:batch").acquire().await?;
    /// let waiter = tokio::spawn({
    ///     let client = client.clone();
    ///     async move { client.fair_lock("payout:batch").wait(Duration::from_secs(5)).acquire().await }
    /// });
    /// tokio::time::sleep(Duration::from_millis(50)).await; // it queues
    /// let info = client.admin().inspect_fair("payout:batch").await?;
    /// assert_eq!(info.holder.expect("held").owner, turn.owner());
    /// assert_eq!(info.queue.len(), 1);
    /// turn.release().await?; // handed to the head of the queue
    /// waiter.await.unwrap()?.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn inspect_fair(&self, name: &str) -> Result<FairLockInfo, LockError> {
        let (key, state) = self.inspect_family(name, Kind::Fair, "fair lock").await?;
        Ok(fair_info(&key, state))
    }

    /// What the backend records of read-write lock `name`
    /// ([`read_write_lock`](crate::LockClient::read_write_lock)): its readers, its
    /// writer, and the writers waiting for it (which keep new readers out).
    ///
    /// Read-only, one round trip on Redis (one script, so everything is read
    /// at one instant). Readers whose lease and waiting writers whose place
    /// ran out by the server's clock are not shown.
    ///
    /// Errors: as [`inspect_fair`](LockAdmin::inspect_fair).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// let client = distlock_core::LockClient::memory();
    /// let prices = client.read_write_lock("prices");
    /// let a = prices.read().acquire().await?;
    /// let b = tokio::spawn({
    ///     let prices = prices.clone();
    ///     async move { prices.read().acquire().await } // another owner
    /// })
    /// .await
    /// .unwrap()?;
    /// let info = client.admin().inspect_read_write("prices").await?;
    /// assert_eq!(info.readers.len(), 2);
    /// assert!(info.writer.is_none() && info.waiting_writers.is_empty());
    /// a.release().await?;
    /// b.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn inspect_read_write(&self, name: &str) -> Result<ReadWriteLockInfo, LockError> {
        let (key, state) = self
            .inspect_family(name, Kind::Write, "read-write lock")
            .await?;
        Ok(read_write_info(&key, state))
    }

    /// What the backend records of semaphore `name`
    /// ([`semaphore`](crate::LockClient::semaphore)): who holds how many permits,
    /// and how many are in use. The total is not stored (every acquirer
    /// passes it), so the free permits are the caller's total minus
    /// [`in_use`](SemaphoreInfo::in_use).
    ///
    /// Read-only, one round trip on Redis (one script, so everything is read
    /// at one instant). Holders whose lease ran out by the server's clock
    /// are not shown (their permits are free).
    ///
    /// Errors: as [`inspect_fair`](LockAdmin::inspect_fair).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), distlock_core::LockError> {
    /// let client = distlock_core::LockClient::memory();
    /// let two = client.semaphore("exports", 5).permits(2).acquire().await?;
    /// let info = client.admin().inspect_semaphore("exports").await?;
    /// assert_eq!(info.in_use, 2);
    /// assert_eq!(info.holders[0].owner, two.owner());
    /// assert_eq!(info.holders[0].permits, 2);
    /// two.release().await?;
    /// assert_eq!(client.admin().inspect_semaphore("exports").await?.in_use, 0);
    /// # Ok(()) }
    /// ```
    pub async fn inspect_semaphore(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        let kind = Kind::Permits { take: 1, total: 1 }; // neither matters here
        let (key, state) = self.inspect_family(name, kind, "semaphore").await?;
        Ok(semaphore_info(&key, state))
    }

    /// Deletes the holder of fair lock `name` whoever it is, as an
    /// operator's override, and hands the lock to the head of its queue as
    /// a release does (the queue is kept). The holder is told at its next
    /// renewal or release. Returns whether it was held.
    ///
    /// Errors: [`LockError::InvalidKey`], [`LockError::WrongType`],
    /// [`LockError::Backend`], and [`LockError::Unsupported`] on Redlock.
    pub async fn force_release_fair(&self, name: &str) -> Result<bool, LockError> {
        let key = self.family_key(name, Kind::Fair, "fair lock")?;
        self.core.backend.force_release(&key).await
    }

    /// Deletes every hold of read-write lock `name` (the readers, the
    /// writer) and the waiting writers' places, as an operator's override,
    /// and wakes the waiters. The holders are told at their next renewal or
    /// release. Returns whether it was held: by a writer or by a reader
    /// whose lease had not run out (waiting writers' places and expired
    /// readers are deleted too, but they are not holds).
    ///
    /// Errors: as [`force_release_fair`](LockAdmin::force_release_fair).
    pub async fn force_release_read_write(&self, name: &str) -> Result<bool, LockError> {
        let key = self.family_key(name, Kind::Write, "read-write lock")?;
        self.core.backend.force_release(&key).await
    }

    /// Deletes every holder's permits of semaphore `name`, as an operator's
    /// override, and wakes the waiters. The holders are told at their next
    /// renewal or release. Returns whether any permit was held by a holder
    /// whose lease had not run out.
    ///
    /// Errors: as [`force_release_fair`](LockAdmin::force_release_fair).
    pub async fn force_release_semaphore(&self, name: &str) -> Result<bool, LockError> {
        let kind = Kind::Permits { take: 1, total: 1 }; // neither matters here
        let key = self.family_key(name, kind, "semaphore")?;
        self.core.backend.force_release(&key).await
    }

    /// The keys of `kind` of the family named `name`, refused with
    /// `Unsupported` (naming `primitive`) where the family is not available.
    fn family_key(
        &self,
        name: &str,
        kind: Kind,
        primitive: &'static str,
    ) -> Result<LockKey, LockError> {
        let key = self.core.key_of(name, kind)?;
        match self.core.backend.capabilities().family {
            Some(Unsupported { backend, reason }) => Err(LockError::Unsupported {
                key: key.name.to_string(),
                primitive,
                backend,
                reason,
            }),
            None => Ok(key),
        }
    }

    /// The keys of `kind` of `name` and what the backend records of it.
    async fn inspect_family(
        &self,
        name: &str,
        kind: Kind,
        primitive: &'static str,
    ) -> Result<(LockKey, FamilyState), LockError> {
        let key = self.family_key(name, kind, primitive)?;
        if key.layout == Layout::Redisson {
            return Err(LockError::Unsupported {
                key: key.name.to_string(),
                primitive,
                backend: "a client in Redisson's layout",
                reason: "inspecting Redisson's read-write lock and semaphore is not \
                         offered: their holders are the hash's fields besides `mode`, and the \
                         permit ids in `{name}:timeout`",
            });
        }
        let state = self.core.backend.inspect_family(&key).await?;
        Ok((key, state))
    }

    /// Refuses the listings in Redisson's layout, whose lock keys are bare
    /// names that SCAN cannot tell from other hashes.
    fn listable(&self) -> Result<(), LockError> {
        if self.core.layout == Layout::Redisson {
            return Err(LockError::Unsupported {
                key: "*".into(),
                primitive: "list of locks",
                backend: "a client in Redisson's layout",
                reason: "in Redisson's layout a lock's key is its bare name, which tells it \
                         from no other hash in the database; inspect a lock by its name",
            });
        }
        Ok(())
    }
}

/// A fair lock's info from what the backend records of `key`.
fn fair_info(key: &LockKey, state: FamilyState) -> FairLockInfo {
    FairLockInfo {
        name: key.name.to_string(),
        key: key.lock.to_string(),
        fence_key: key.fence(),
        holder: state.holder,
        queue: state.waiters,
        last_fencing_token: state.last_fencing_token,
    }
}

/// A read-write lock's info from what the backend records of `key`.
fn read_write_info(key: &LockKey, state: FamilyState) -> ReadWriteLockInfo {
    ReadWriteLockInfo {
        name: key.name.to_string(),
        key: key.stem().to_string(),
        fence_key: key.fence(),
        readers: state
            .shares
            .into_iter()
            .map(|share| Reader {
                owner: share.owner,
                ttl: share.ttl,
            })
            .collect(),
        writer: state.holder,
        waiting_writers: state.waiters,
        last_fencing_token: state.last_fencing_token,
    }
}

/// A semaphore's info from what the backend records of `key`.
fn semaphore_info(key: &LockKey, state: FamilyState) -> SemaphoreInfo {
    SemaphoreInfo {
        name: key.name.to_string(),
        key: key.lock.to_string(),
        fence_key: key.fence(),
        in_use: state
            .shares
            .iter()
            .fold(0u32, |sum, share| sum.saturating_add(share.permits)),
        holders: state.shares,
        last_fencing_token: state.last_fencing_token,
    }
}
