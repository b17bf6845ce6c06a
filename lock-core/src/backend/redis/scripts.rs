//! The lock's Lua scripts and the commands built from them.

use std::time::Duration;

use redis::{Cmd, Pipeline, Script};

use crate::lease;
use crate::name::{Kind, Layout, LockKey};
use crate::wire::RELEASE_PREFIX;

/// A script's source: the files `lua/<part>.lua`, one after the other (a
/// script that needs the server's clock or a shared prelude starts with it).
/// Each file's header comment states its KEYS, ARGV and reply.
macro_rules! lua {
    ($($part:literal),+ $(,)?) => {
        concat!($(include_str!(concat!("lua/", $part, ".lua"))),+)
    };
}

/// Takes the plain lock, or asks a hot-lock keeper holding it to give it up.
const ACQUIRE: &str = lua!("prelude/token", "acquire");

/// Takes the plain lock in Redisson's layout, as Redisson's `RFencedLock` does.
const REDISSON_ACQUIRE: &str = lua!("prelude/token", "redisson_acquire");

/// Takes a read hold of Redisson's read-write lock.
const REDISSON_READ_ACQUIRE: &str = lua!("prelude/token", "redisson_read_acquire");

/// Takes the write hold of Redisson's read-write lock.
const REDISSON_WRITE_ACQUIRE: &str = lua!("prelude/token", "redisson_write_acquire");

/// Gives a read hold of Redisson's read-write lock back.
const REDISSON_READ_RELEASE: &str = lua!("redisson_read_release");

/// Gives the write hold of Redisson's read-write lock back.
const REDISSON_WRITE_RELEASE: &str = lua!("redisson_write_release");

/// Renews a read hold of Redisson's read-write lock.
const REDISSON_READ_RENEW: &str = lua!("redisson_read_renew");

/// Deletes Redisson's read-write lock whoever holds it.
const REDISSON_RW_FORCE_RELEASE: &str = lua!("redisson_rw_force_release");

/// Takes permits of Redisson's `RPermitExpirableSemaphore`.
const REDISSON_PERMITS_ACQUIRE: &str =
    lua!("prelude/now", "prelude/token", "redisson_permits_acquire");

/// Gives permits of Redisson's `RPermitExpirableSemaphore` back.
const REDISSON_PERMITS_RELEASE: &str = lua!("prelude/now", "redisson_permits_release");

/// Renews permits of Redisson's `RPermitExpirableSemaphore`.
const REDISSON_PERMITS_RENEW: &str = lua!("prelude/now", "redisson_permits_renew");

/// Gives every held permit of Redisson's `RPermitExpirableSemaphore` back.
const REDISSON_PERMITS_FORCE_RELEASE: &str = lua!("redisson_permits_force_release");

/// Redisson's deadline of a permit taken without a lease
/// (`RedissonPermitExpirableSemaphore.nonExpirableTimeout`).
const REDISSON_NO_LEASE: u64 = 922_337_203_685_477;

/// Extends a hash lock's lease when the owner holds it.
const RENEW: &str = lua!("renew");

/// Takes back the plain lock's grant, waking a waiter when that freed it.
const ROLLBACK: &str = lua!("rollback");

/// Deletes the plain lock whoever holds it, waking a waiter.
const FORCE_RELEASE: &str = lua!("force_release");

/// Raises a fencing counter to a floor (Redlock).
const FENCE_FLOOR: &str = lua!("fence_floor");

/// Takes the fair lock, or queues for it.
const FAIR_ACQUIRE: &str = lua!(
    "prelude/now",
    "prelude/token",
    "prelude/fair_purge",
    "fair_acquire"
);

/// Gives the fair lock back (release, rollback, force) and hands it to the head of its queue.
const FAIR_RELEASE: &str = lua!(
    "prelude/now",
    "prelude/token",
    "prelude/fair_purge",
    "fair_release"
);

/// Takes a read hold of a read-write lock.
const READ_ACQUIRE: &str = lua!("prelude/now", "prelude/token", "read_acquire");

/// Takes the write hold of a read-write lock, or records the intent.
const WRITE_ACQUIRE: &str = lua!("prelude/now", "prelude/token", "write_acquire");

/// Gives a read hold back.
const READ_RELEASE: &str = lua!("prelude/now", "read_release");

/// Takes back a writer's grant and its intent.
const WRITE_ROLLBACK: &str = lua!("write_rollback");

/// Takes permits of a semaphore.
const PERMITS_ACQUIRE: &str = lua!("prelude/now", "prelude/token", "permits_acquire");

/// Gives permits back.
const PERMITS_RELEASE: &str = lua!("prelude/now", "permits_release");

/// Renews a hold that expires inside a key (a read hold, permits).
const RENEW_MEMBER: &str = lua!("prelude/now", "renew_member");

/// Deletes every key of a read-write lock or a semaphore, waking the waiters.
const FAMILY_FORCE_RELEASE: &str = lua!("prelude/now", "family_force_release");

/// Reads a fair lock's (or a plain lock's) holder and queue.
const FAIR_INSPECT: &str = lua!("prelude/now", "prelude/inspect", "fair_inspect");

/// Reads a read-write lock's writer, readers and waiting writers.
const RW_INSPECT: &str = lua!("prelude/now", "prelude/inspect", "rw_inspect");

/// Reads a semaphore's holders and their permits.
const PERMITS_INSPECT: &str = lua!("prelude/now", "prelude/inspect", "permits_inspect");

/// The lock scripts of one backend, loaded once per node.
#[derive(Debug)]
pub(crate) struct Scripts {
    acquire: Script,
    renew: Script,
    rollback: Script,
    force_release: Script,
    fence_floor: Script,
    fair_acquire: Script,
    fair_release: Script,
    read_acquire: Script,
    write_acquire: Script,
    read_release: Script,
    write_rollback: Script,
    permits_acquire: Script,
    permits_release: Script,
    renew_member: Script,
    family_force_release: Script,
    fair_inspect: Script,
    rw_inspect: Script,
    permits_inspect: Script,
    redisson_acquire: Script,
    redisson_read_acquire: Script,
    redisson_write_acquire: Script,
    redisson_read_release: Script,
    redisson_write_release: Script,
    redisson_read_renew: Script,
    redisson_rw_force_release: Script,
    redisson_permits_acquire: Script,
    redisson_permits_release: Script,
    redisson_permits_renew: Script,
    redisson_permits_force_release: Script,
    /// `PUBLISH`, or `SPUBLISH` on a cluster (sharded pub/sub): an argument
    /// of every script that wakes waiters, and the plain release's command.
    publish: &'static str,
}

impl Scripts {
    /// The scripts; `sharded` publishes wake-ups with `SPUBLISH` (cluster).
    /// The scripts are the same either way: the publishing ones take the
    /// command as an argument.
    pub(crate) fn new(sharded: bool) -> Self {
        Scripts {
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            rollback: Script::new(ROLLBACK),
            force_release: Script::new(FORCE_RELEASE),
            fence_floor: Script::new(FENCE_FLOOR),
            fair_acquire: Script::new(FAIR_ACQUIRE),
            fair_release: Script::new(FAIR_RELEASE),
            read_acquire: Script::new(READ_ACQUIRE),
            write_acquire: Script::new(WRITE_ACQUIRE),
            read_release: Script::new(READ_RELEASE),
            write_rollback: Script::new(WRITE_ROLLBACK),
            permits_acquire: Script::new(PERMITS_ACQUIRE),
            permits_release: Script::new(PERMITS_RELEASE),
            renew_member: Script::new(RENEW_MEMBER),
            family_force_release: Script::new(FAMILY_FORCE_RELEASE),
            fair_inspect: Script::new(FAIR_INSPECT),
            rw_inspect: Script::new(RW_INSPECT),
            permits_inspect: Script::new(PERMITS_INSPECT),
            redisson_acquire: Script::new(REDISSON_ACQUIRE),
            redisson_read_acquire: Script::new(REDISSON_READ_ACQUIRE),
            redisson_write_acquire: Script::new(REDISSON_WRITE_ACQUIRE),
            redisson_read_release: Script::new(REDISSON_READ_RELEASE),
            redisson_write_release: Script::new(REDISSON_WRITE_RELEASE),
            redisson_read_renew: Script::new(REDISSON_READ_RENEW),
            redisson_rw_force_release: Script::new(REDISSON_RW_FORCE_RELEASE),
            redisson_permits_acquire: Script::new(REDISSON_PERMITS_ACQUIRE),
            redisson_permits_release: Script::new(REDISSON_PERMITS_RELEASE),
            redisson_permits_renew: Script::new(REDISSON_PERMITS_RENEW),
            redisson_permits_force_release: Script::new(REDISSON_PERMITS_FORCE_RELEASE),
            publish: if sharded { "SPUBLISH" } else { "PUBLISH" },
        }
    }

    /// Every script, for `SCRIPT LOAD`.
    /// The command that publishes wake-ups: `PUBLISH`, or `SPUBLISH`
    /// (sharded pub/sub, the cluster).
    pub(crate) fn publish(&self) -> &'static str {
        self.publish
    }

    pub(crate) fn all(&self) -> [&Script; 29] {
        [
            &self.acquire,
            &self.renew,
            &self.rollback,
            &self.force_release,
            &self.fence_floor,
            &self.fair_acquire,
            &self.fair_release,
            &self.read_acquire,
            &self.write_acquire,
            &self.read_release,
            &self.write_rollback,
            &self.permits_acquire,
            &self.permits_release,
            &self.renew_member,
            &self.family_force_release,
            &self.fair_inspect,
            &self.rw_inspect,
            &self.permits_inspect,
            &self.redisson_acquire,
            &self.redisson_read_acquire,
            &self.redisson_write_acquire,
            &self.redisson_read_release,
            &self.redisson_write_release,
            &self.redisson_read_renew,
            &self.redisson_rw_force_release,
            &self.redisson_permits_acquire,
            &self.redisson_permits_release,
            &self.redisson_permits_renew,
            &self.redisson_permits_force_release,
        ]
    }

    /// An acquisition attempt of `key` (any primitive) for `owner`, as a
    /// pipeline of one.
    pub(crate) fn acquire(&self, key: &LockKey, owner: &str, lease: Duration) -> Pipeline {
        let lease_ms = lease::millis(lease);
        let queue = if key.queue { "1" } else { "0" };
        let presence = lease::millis(lease::QUEUE_PRESENCE);
        let cmd = match key.kind {
            Kind::Exclusive if key.layout == Layout::Redisson => {
                let keys = [key.lock.to_string(), key.fence(), key.redisson_queue()];
                let mut cmd = evalsha(&self.redisson_acquire, &refs(&keys));
                cmd.arg(owner).arg(lease_ms);
                cmd
            }
            Kind::Read if key.layout == Layout::Redisson => {
                let keys = [
                    key.lock.to_string(),
                    key.redisson_read_timeouts(owner),
                    key.fence(),
                ];
                let mut cmd = evalsha(&self.redisson_read_acquire, &refs(&keys));
                cmd.arg(owner).arg(lease_ms).arg(redisson_writer(owner));
                cmd
            }
            Kind::Permits { take, total } if key.layout == Layout::Redisson => {
                let keys = [
                    key.lock.to_string(),
                    key.redisson_permit_timeouts(),
                    key.channel.to_string(),
                    key.fence(),
                ];
                let mut cmd = evalsha(&self.redisson_permits_acquire, &refs(&keys));
                cmd.arg(take)
                    .arg(lease_ms)
                    .arg(total)
                    .arg(self.publish)
                    .arg(REDISSON_NO_LEASE);
                for id in redisson_permit_ids(owner, take) {
                    cmd.arg(&id[..]);
                }
                cmd
            }
            Kind::Write if key.layout == Layout::Redisson => {
                let keys = [key.lock.to_string(), key.fence()];
                let mut cmd = evalsha(&self.redisson_write_acquire, &refs(&keys));
                cmd.arg(redisson_writer(owner)).arg(lease_ms);
                cmd
            }
            Kind::Exclusive => {
                let mut cmd = evalsha(&self.acquire, &[&key.lock, &key.fence(), &key.channel]);
                cmd.arg(owner).arg(lease_ms).arg(self.publish);
                cmd
            }
            Kind::Fair => {
                let keys = fair_keys(key);
                let mut cmd = evalsha(&self.fair_acquire, &refs(&keys[..5]));
                cmd.arg(owner).arg(lease_ms).arg(queue).arg(presence);
                cmd
            }
            Kind::Read | Kind::Write => {
                let keys = rw_keys(key);
                let script = if key.kind == Kind::Read {
                    &self.read_acquire
                } else {
                    &self.write_acquire
                };
                let mut cmd = evalsha(script, &refs(&keys[..4]));
                cmd.arg(owner).arg(lease_ms).arg(queue).arg(presence);
                cmd
            }
            Kind::Permits { take, total } => {
                let keys = [key.lock.to_string(), key.aux(":permits"), key.fence()];
                let mut cmd = evalsha(&self.permits_acquire, &refs(&keys));
                cmd.arg(owner).arg(lease_ms).arg(take).arg(total);
                cmd
            }
        };
        one(cmd)
    }

    /// The renewal of one hold (to join a pipeline of renewals).
    pub(crate) fn renew(&self, key: &LockKey, owner: &str, lease_ms: u64) -> Cmd {
        if key.layout == Layout::Redisson {
            let mut cmd = match key.kind {
                Kind::Read => {
                    let keys = [key.lock.to_string(), key.redisson_read_timeouts(owner)];
                    let mut cmd = evalsha(&self.redisson_read_renew, &refs(&keys));
                    cmd.arg(owner);
                    cmd
                }
                Kind::Write => {
                    let mut cmd = evalsha(&self.renew, &[&key.lock]);
                    cmd.arg(redisson_writer(owner));
                    cmd
                }
                Kind::Permits { take, .. } => {
                    let timeouts = key.redisson_permit_timeouts();
                    let mut cmd = evalsha(&self.redisson_permits_renew, &[&timeouts]);
                    cmd.arg(lease_ms);
                    for id in redisson_permit_ids(owner, take) {
                        cmd.arg(&id[..]);
                    }
                    return cmd;
                }
                _ => {
                    let mut cmd = evalsha(&self.renew, &[&key.lock]);
                    cmd.arg(owner);
                    cmd
                }
            };
            cmd.arg(lease_ms);
            return cmd;
        }
        let mut cmd = match key.kind {
            Kind::Exclusive | Kind::Fair | Kind::Write => evalsha(&self.renew, &[&key.lock]),
            Kind::Read => evalsha(&self.renew_member, &[&key.lock]),
            Kind::Permits { .. } => evalsha(&self.renew_member, &[&key.lock, &key.aux(":permits")]),
        };
        cmd.arg(owner).arg(lease_ms);
        cmd
    }

    /// The early release of a lock held at least until `left_ms` from now
    /// (see `Backend::cut`): the renewal script cuts `owner`'s lease to it
    /// (only while `owner` holds it; the first reply, 1 or 0), then `0` on
    /// the lock's channel wakes a waiter, as a release does (every waiter,
    /// Redisson's too, takes `0` for a release and asks again).
    pub(crate) fn cut(&self, key: &LockKey, owner: &str, left_ms: u64) -> Pipeline {
        let mut pipe = Pipeline::with_capacity(2);
        pipe.ignore_errors();
        pipe.add_command(self.renew(key, owner, left_ms));
        pipe.cmd(self.publish).arg(&*key.channel).arg("0");
        pipe
    }

    /// The release of `owner`'s hold of `key`, waking the next waiter (a
    /// fair lock: handing it to the head of its queue). Its first reply is
    /// whether it deleted the hold (see [`release_replies`](Scripts::release_replies)).
    pub(crate) fn release(&self, key: &LockKey, owner: &str) -> Pipeline {
        if let Some(pipe) = self.redisson_give_back(key, owner) {
            return pipe;
        }
        match key.kind {
            Kind::Exclusive | Kind::Write => self.plain_release(key, owner),
            Kind::Fair => self.fair(key, owner, "release"),
            Kind::Read | Kind::Permits { .. } => self.give_back(key, owner),
        }
    }

    /// The quiet rollback of `owner`'s grant (and of its place in a queue),
    /// as a pipeline of one.
    pub(crate) fn rollback(&self, key: &LockKey, owner: &str) -> Pipeline {
        if let Some(pipe) = self.redisson_give_back(key, owner) {
            return pipe;
        }
        match key.kind {
            Kind::Exclusive => {
                let mut cmd = evalsha(&self.rollback, &[&key.lock, &key.channel]);
                cmd.arg(owner).arg(self.publish);
                one(cmd)
            }
            Kind::Fair => self.fair(key, owner, "rollback"),
            Kind::Write => {
                let keys = [
                    key.lock.to_string(),
                    key.aux(":wait"),
                    key.channel.to_string(),
                ];
                let mut cmd = evalsha(&self.write_rollback, &refs(&keys));
                cmd.arg(owner).arg(self.publish);
                one(cmd)
            }
            Kind::Read | Kind::Permits { .. } => self.give_back(key, owner),
        }
    }

    /// The operator's override, as a pipeline of one.
    pub(crate) fn force_release(&self, key: &LockKey) -> Pipeline {
        // The family's script is also told whether its second key is a hold.
        let (mut cmd, second_key_holds) = match key.kind {
            Kind::Read | Kind::Write if key.layout == Layout::Redisson => (
                evalsha(&self.redisson_rw_force_release, &[&key.lock, &key.channel]),
                None,
            ),
            Kind::Permits { .. } if key.layout == Layout::Redisson => {
                let keys = [
                    key.lock.to_string(),
                    key.redisson_permit_timeouts(),
                    key.channel.to_string(),
                ];
                (
                    evalsha(&self.redisson_permits_force_release, &refs(&keys)),
                    None,
                )
            }
            Kind::Exclusive => (
                evalsha(&self.force_release, &[&key.lock, &key.channel]),
                None,
            ),
            Kind::Fair => return self.fair(key, "", "force"),
            Kind::Read | Kind::Write => {
                let keys = [
                    key.aux(":read"),
                    key.aux(":write"),
                    key.aux(":wait"),
                    key.channel.to_string(),
                ];
                // The writer's hash is a hold.
                (evalsha(&self.family_force_release, &refs(&keys)), Some("1"))
            }
            Kind::Permits { .. } => {
                // The permit counts are not: the holders' zset says who holds.
                let keys = permits_keys(key);
                (evalsha(&self.family_force_release, &refs(&keys)), Some("0"))
            }
        };
        cmd.arg(self.publish);
        if let Some(flag) = second_key_holds {
            cmd.arg(flag);
        }
        one(cmd)
    }

    /// The read-only inspection of the primitive of `key` (a plain lock: its
    /// holder, read as a fair lock without a queue), as a pipeline of one.
    /// Its reply: `{1, holder, shares, waiters, counter}`, or `{0, key}` when
    /// a key of the primitive holds another type.
    pub(crate) fn inspect(&self, key: &LockKey) -> Pipeline {
        let (script, keys, types): (&Script, Vec<String>, &[&str]) = match key.kind {
            Kind::Exclusive | Kind::Fair => {
                let keys = fair_keys(key);
                (
                    &self.fair_inspect,
                    keys[..4].to_vec(),
                    &["hash", "string", "zset", "zset"],
                )
            }
            Kind::Read | Kind::Write => (
                &self.rw_inspect,
                rw_keys(key).to_vec(),
                &["zset", "hash", "string", "zset"],
            ),
            Kind::Permits { .. } => (
                &self.permits_inspect,
                vec![key.lock.to_string(), key.aux(":permits"), key.fence()],
                &["zset", "hash", "string"],
            ),
        };
        let mut cmd = evalsha(script, &refs(&keys));
        for kind in types {
            cmd.arg(*kind);
        }
        one(cmd)
    }

    /// Redisson's read-write lock: the release (and rollback) of a read or
    /// the write hold; `None` for the other primitives.
    fn redisson_give_back(&self, key: &LockKey, owner: &str) -> Option<Pipeline> {
        if key.layout != Layout::Redisson {
            return None;
        }
        let mut cmd = match key.kind {
            Kind::Read => {
                let keys = [
                    key.lock.to_string(),
                    key.channel.to_string(),
                    key.redisson_read_timeouts(owner),
                    key.redisson_timeouts_stem(),
                ];
                let mut cmd = evalsha(&self.redisson_read_release, &refs(&keys));
                cmd.arg(owner);
                cmd
            }
            Kind::Write => {
                let mut cmd = evalsha(&self.redisson_write_release, &[&key.lock, &key.channel]);
                cmd.arg(redisson_writer(owner));
                cmd
            }
            Kind::Permits { take, .. } => {
                let keys = [
                    key.lock.to_string(),
                    key.redisson_permit_timeouts(),
                    key.channel.to_string(),
                ];
                let mut cmd = evalsha(&self.redisson_permits_release, &refs(&keys));
                cmd.arg(self.publish);
                for id in redisson_permit_ids(owner, take) {
                    cmd.arg(&id[..]);
                }
                return Some(one(cmd));
            }
            _ => return None,
        };
        cmd.arg(self.publish);
        Some(one(cmd))
    }

    /// `FAIR_RELEASE` in `mode` (`release`, `rollback` or `force`).
    fn fair(&self, key: &LockKey, owner: &str, mode: &str) -> Pipeline {
        let keys = fair_keys(key);
        let mut cmd = evalsha(&self.fair_release, &refs(&keys));
        cmd.arg(owner)
            .arg(mode)
            .arg(lease::millis(lease::QUEUE_PRESENCE))
            .arg(self.publish);
        one(cmd)
    }

    /// Gives back a read hold or permits.
    fn give_back(&self, key: &LockKey, owner: &str) -> Pipeline {
        let mut cmd = if key.kind == Kind::Read {
            evalsha(&self.read_release, &[&key.lock, &key.channel])
        } else {
            evalsha(&self.permits_release, &refs(&permits_keys(key)))
        };
        cmd.arg(owner).arg(self.publish);
        one(cmd)
    }

    /// Raises the fencing counter of `key`'s slot to `token` and records
    /// `token` as `owner`'s in the lock's hash, as a pipeline of one.
    pub(crate) fn fence_floor(&self, key: &LockKey, owner: &str, token: u64) -> Pipeline {
        let mut cmd = evalsha(&self.fence_floor, &[&key.fence(), &key.lock]);
        cmd.arg(token).arg(owner);
        one(cmd)
    }

    /// The release of a hash lock: `HDEL` of the owner's field (the hash's
    /// only one, so an atomic compare-and-delete) and the wake-up
    /// (`PUBLISH`/`SPUBLISH`), pipelined. Its replies are how many fields
    /// `HDEL` deleted and how many subscriptions the wake-up reached.
    fn plain_release(&self, key: &LockKey, owner: &str) -> Pipeline {
        // Sized up front: a release runs on every cycle, and growing the
        // buffers argument by argument cost five allocations more.
        let mut hdel = Cmd::with_capacity(3, 4 + key.lock.len() + owner.len());
        hdel.arg("HDEL").arg(&*key.lock).arg(owner);
        let mut publish = Cmd::with_capacity(
            3,
            self.publish.len() + key.channel.len() + RELEASE_PREFIX.len() + owner.len(),
        );
        publish.arg(self.publish).arg(&*key.channel);
        if key.kind == Kind::Exclusive && key.layout == Layout::Native {
            // `0 <owner>` (see `wire::RELEASE_PREFIX`), written straight into
            // the command's buffer.
            publish.arg(ReleaseMessage(owner));
        } else {
            // Redisson's message (see `lua/rollback.lua`); a write lock's
            // waiters ask the server on every message.
            publish.arg("0");
        }
        let mut pipe = Pipeline::with_capacity(2);
        pipe.ignore_errors();
        pipe.add_command(hdel).add_command(publish);
        pipe
    }

    /// How many replies [`release`](Scripts::release)'s pipeline has: the
    /// plain lock's second one is how many subscriptions its wake-up
    /// reached (see `Waiters::listeners`).
    pub(crate) fn release_replies(key: &LockKey) -> usize {
        if key.layout == Layout::Redisson && key.kind != Kind::Exclusive {
            return 1;
        }
        match key.kind {
            Kind::Exclusive | Kind::Write => 2,
            Kind::Fair | Kind::Read | Kind::Permits { .. } => 1,
        }
    }

    /// Takes back a grant without waking anyone (`HDEL` only): Redlock's
    /// rollback of a grant on a minority of masters. The lock was never
    /// held, so a wake-up would only send other waiters into failing
    /// attempts (and their rollbacks into waking them again).
    pub(crate) fn silent_rollback(&self, key: &LockKey, owner: &str) -> Pipeline {
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(&*key.lock).arg(owner);
        one(cmd)
    }
}

/// The field of `owner`'s write hold of Redisson's read-write lock,
/// `<owner>:write` (`RedissonWriteLock.getLockName`).
pub(crate) fn redisson_writer(owner: &str) -> String {
    let mut field = String::with_capacity(owner.len() + ":write".len());
    field.push_str(owner);
    field.push_str(":write");
    field
}

/// The ids of `owner`'s `take` permits of Redisson's
/// `RPermitExpirableSemaphore`: 16 bytes each, as Redisson's own (random
/// there), here derived from the owner (whose client id is random) and the
/// permit's number, so that a renewal and the release name the same ids
/// without keeping them.
pub(crate) fn redisson_permit_ids(owner: &str, take: u32) -> Vec<[u8; 16]> {
    let owner_hash = fnv1a(owner.as_bytes(), &[]);
    (0..take)
        .map(|n| {
            let permit = fnv1a(owner.as_bytes(), &n.to_be_bytes());
            (u128::from(owner_hash) << 64 | u128::from(permit)).to_be_bytes()
        })
        .collect()
}

/// 64-bit FNV-1a of `a` then `b`, with `b` marked by a separator byte.
fn fnv1a(a: &[u8], b: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |byte: u8| {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    };
    a.iter().copied().for_each(&mut eat);
    if !b.is_empty() {
        eat(0xff);
        b.iter().copied().for_each(&mut eat);
    }
    hash
}

/// The fair lock's keys: its hash, the fencing counter, the queue, the
/// places' deadlines, the waiters' leases, the channel.
fn fair_keys(key: &LockKey) -> [String; 6] {
    [
        key.lock.to_string(),
        key.fence(),
        key.aux(":queue"),
        key.aux(":timeout"),
        key.aux(":lease"),
        key.channel.to_string(),
    ]
}

/// A read-write lock's keys: the readers, the writer, the fencing counter,
/// the waiting writers.
fn rw_keys(key: &LockKey) -> [String; 4] {
    [
        key.aux(":read"),
        key.aux(":write"),
        key.fence(),
        key.aux(":wait"),
    ]
}

/// A semaphore's keys: its holders, their permits, the channel.
fn permits_keys(key: &LockKey) -> [String; 3] {
    [
        key.lock.to_string(),
        key.aux(":permits"),
        key.channel.to_string(),
    ]
}

fn refs(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

/// Bytes of an `EVALSHA`'s data besides its keys: the command, the script's
/// SHA-1 (40), the key count and room for the arguments the callers add
/// (an owner id of about 50 bytes, the lease, a publish command).
const EVALSHA_ARGS_ROOM: usize = 7 + 40 + 3 + 96;

/// `EVALSHA` of `script` with `keys`, as one command; the caller appends the
/// arguments.
pub(crate) fn evalsha(script: &Script, keys: &[&str]) -> Cmd {
    // Sized up front for the keys and the usual arguments (owner, lease and
    // a few more): no reallocation while the caller appends them.
    let data = keys.iter().map(|key| key.len()).sum::<usize>() + EVALSHA_ARGS_ROOM;
    let mut cmd = Cmd::with_capacity(keys.len() + 8, data);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    cmd
}

/// A pipeline of one command whose error is its reply (not the pipeline's).
pub(crate) fn one(cmd: Cmd) -> Pipeline {
    let mut pipe = Pipeline::with_capacity(1);
    pipe.ignore_errors();
    pipe.add_command(cmd);
    pipe
}

/// A pipeline of renewals (the caller adds them), errors kept per reply.
pub(crate) fn renewals() -> Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe
}

/// Appends `WAIT replicas timeout` (`sync_replicas`).
pub(crate) fn wait(pipe: &mut Pipeline, replicas: u32, timeout: Duration) {
    pipe.cmd("WAIT").arg(replicas).arg(lease::millis(timeout));
}

/// The plain lock's release message in this library's layout, `0 <owner>`
/// (see [`RELEASE_PREFIX`]), written as one argument without an allocation.
struct ReleaseMessage<'a>(&'a str);

impl redis::ToRedisArgs for ReleaseMessage<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        let mut arg = out.writer_for_next_arg();
        // Writing into a command's buffer cannot fail.
        let _ = arg.write_all(RELEASE_PREFIX.as_bytes());
        let _ = arg.write_all(self.0.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCES: [&str; 29] = [
        REDISSON_PERMITS_ACQUIRE,
        REDISSON_PERMITS_RELEASE,
        REDISSON_PERMITS_RENEW,
        REDISSON_PERMITS_FORCE_RELEASE,
        ACQUIRE,
        REDISSON_ACQUIRE,
        REDISSON_READ_ACQUIRE,
        REDISSON_WRITE_ACQUIRE,
        REDISSON_READ_RELEASE,
        REDISSON_WRITE_RELEASE,
        REDISSON_READ_RENEW,
        REDISSON_RW_FORCE_RELEASE,
        RENEW,
        ROLLBACK,
        FORCE_RELEASE,
        FENCE_FLOOR,
        FAIR_ACQUIRE,
        FAIR_RELEASE,
        READ_ACQUIRE,
        WRITE_ACQUIRE,
        READ_RELEASE,
        WRITE_ROLLBACK,
        PERMITS_ACQUIRE,
        PERMITS_RELEASE,
        RENEW_MEMBER,
        FAMILY_FORCE_RELEASE,
        FAIR_INSPECT,
        RW_INSPECT,
        PERMITS_INSPECT,
    ];

    /// A cluster's scripts are a standalone node's: the publish command is
    /// an argument, so one copy of each script serves both.
    #[test]
    fn sharded_and_classic_pub_sub_share_the_scripts() {
        let classic = Scripts::new(false);
        let sharded = Scripts::new(true);
        for (a, b) in classic.all().iter().zip(sharded.all()) {
            assert_eq!(a.get_hash(), b.get_hash());
        }
        assert_eq!((classic.publish, sharded.publish), ("PUBLISH", "SPUBLISH"));
    }

    /// A script that named `publish` itself would publish on the wrong kind
    /// of channel on a cluster, where waiters listen with `SSUBSCRIBE`.
    #[test]
    fn no_script_names_its_publish_command() {
        for source in SOURCES {
            let code: String = source
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
                .to_lowercase();
            assert!(!code.contains("publish'"), "{source}");
        }
    }

    /// Every script starts with its header comment, which states its KEYS
    /// and what it returns.
    #[test]
    fn scripts_start_with_their_header() {
        for source in SOURCES {
            assert!(source.starts_with("-- "), "{source}");
            assert!(source.contains("\n-- KEYS["), "{source}");
            assert!(source.contains("\n-- Returns "), "{source}");
        }
    }
}
