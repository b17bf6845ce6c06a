//! The lock's Lua scripts and the commands built from them.

use std::time::Duration;

use redis::{Cmd, Pipeline, Script};

use crate::lease;
use crate::name::LockKey;

/// Takes the lock when it is free (or already ours), bumping the fencing
/// counter of the lock's slot on a first acquisition. The hash field is the
/// owner, its value the fencing token. Replies `{1, token}` or `{0, pttl}`.
///
/// `PTTL` comes first: it tells a free lock (-2) from a held one and gives
/// the busy reply its TTL, so a free lock costs 4 calls and a busy one 2.
const ACQUIRE: &str = r"
local ttl = redis.call('pttl', KEYS[1])
if ttl == -2 then
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], token)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
local token = redis.call('hget', KEYS[1], ARGV[1])
if token then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(token)}
end
return {0, ttl}
";

/// Extends the lease only when ARGV[1] owns the lock.
const RENEW: &str = r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// Takes back ARGV[1]'s grant: deletes its field (the hash's only one, so
/// the lock), and wakes a waiter only when that freed the lock.
const ROLLBACK: &str = r"
if redis.call('hdel', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', KEYS[2], '1')
end
return 1
";

/// Deletes the lock whoever owns it (operator override), then wakes a waiter.
const FORCE_RELEASE: &str = r"
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
redis.call('publish', KEYS[2], '1')
return 1
";

/// Raises the fencing counter to at least ARGV[1] (Redlock: keeps a
/// majority of the masters' counters at or above the last token issued).
const FENCE_FLOOR: &str = r"
local current = tonumber(redis.call('get', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1])
end
return 1
";

/// The lock scripts of one backend, loaded once per node.
#[derive(Debug)]
pub(crate) struct Scripts {
    acquire: Script,
    renew: Script,
    rollback: Script,
    force_release: Script,
    fence_floor: Script,
    /// `PUBLISH`, or `SPUBLISH` on a cluster (sharded pub/sub).
    publish: &'static str,
}

impl Scripts {
    /// The scripts; `sharded` publishes wake-ups with `SPUBLISH` (cluster).
    pub(crate) fn new(sharded: bool) -> Self {
        let publishing = |script: &str| {
            if sharded {
                Script::new(&script.replace("'publish'", "'spublish'"))
            } else {
                Script::new(script)
            }
        };
        Scripts {
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            rollback: publishing(ROLLBACK),
            force_release: publishing(FORCE_RELEASE),
            fence_floor: Script::new(FENCE_FLOOR),
            publish: if sharded { "SPUBLISH" } else { "PUBLISH" },
        }
    }

    /// Every script, for `SCRIPT LOAD`.
    pub(crate) fn all(&self) -> [&Script; 5] {
        [
            &self.acquire,
            &self.renew,
            &self.rollback,
            &self.force_release,
            &self.fence_floor,
        ]
    }

    /// The acquisition of `key` for `owner`, as a pipeline of one.
    pub(crate) fn acquire(&self, key: &LockKey, owner: &str, lease: Duration) -> Pipeline {
        let mut cmd = evalsha(&self.acquire, &[&key.lock, &key.fence()]);
        cmd.arg(owner).arg(lease::millis(lease));
        one(cmd)
    }

    /// The renewal of one lock (to join a pipeline of renewals).
    pub(crate) fn renew(&self, key: &LockKey, owner: &str, lease_ms: u64) -> Cmd {
        let mut cmd = evalsha(&self.renew, &[&key.lock]);
        cmd.arg(owner).arg(lease_ms);
        cmd
    }

    /// The quiet rollback of `owner`'s grant, as a pipeline of one.
    pub(crate) fn rollback(&self, key: &LockKey, owner: &str) -> Pipeline {
        let mut cmd = evalsha(&self.rollback, &[&key.lock, &key.channel]);
        cmd.arg(owner);
        one(cmd)
    }

    /// The operator's override, as a pipeline of one.
    pub(crate) fn force_release(&self, key: &LockKey) -> Pipeline {
        one(evalsha(&self.force_release, &[&key.lock, &key.channel]))
    }

    /// Raises the fencing counter of `key`'s slot to `token`, as a pipeline of one.
    pub(crate) fn fence_floor(&self, key: &LockKey, token: u64) -> Pipeline {
        let mut cmd = evalsha(&self.fence_floor, &[&key.fence()]);
        cmd.arg(token);
        one(cmd)
    }

    /// The release: `HDEL` of the owner's field (the hash's only one, so an
    /// atomic compare-and-delete) and the wake-up (`PUBLISH`/`SPUBLISH`,
    /// reply ignored), pipelined. Its one reply is how many fields `HDEL`
    /// deleted.
    pub(crate) fn release(&self, key: &LockKey, owner: &str) -> Pipeline {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("HDEL")
            .arg(&*key.lock)
            .arg(owner)
            .cmd(self.publish)
            .arg(&*key.channel)
            .arg("1")
            .ignore();
        pipe
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

/// `EVALSHA` of `script` with `keys`, as one command; the caller appends the
/// arguments.
fn evalsha(script: &Script, keys: &[&str]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    cmd
}

/// A pipeline of one command whose error is its reply (not the pipeline's).
pub(crate) fn one(cmd: Cmd) -> Pipeline {
    let mut pipe = redis::pipe();
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
