//! The lock's Lua scripts and the commands built from them.

use std::time::Duration;

use redis::{Cmd, Pipeline, Script};

use crate::lease;
use crate::name::{Kind, Layout, LockKey};

/// Takes the lock when it is free (or already ours), bumping the fencing
/// counter of the lock's slot on a first acquisition. The hash field is the
/// owner, its value the fencing token. Replies `{1, token}` or `{0, pttl}`;
/// `{2, pttl}` when a hot-lock keeper holds it (its field ends with `~k`),
/// after asking it to give the lock up: `w <field>` on the lock's channel
/// (KEYS[3], with the `PUBLISH` or `SPUBLISH` of ARGV[3]).
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
local holder = redis.call('hkeys', KEYS[1])[1]
if holder == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('hget', KEYS[1], ARGV[1]))}
end
if holder and string.sub(holder, -2) == '~k' then
  redis.call(ARGV[3], KEYS[3], 'w ' .. holder)
  return {2, ttl}
end
return {0, ttl}
";

/// The plain lock in Redisson's layout, taken as Redisson's `RFencedLock`
/// takes it: a free lock gets the next token of the name's own counter and
/// the hash field `owner = 1` (the hold count; re-entries are counted in
/// the client). KEYS: the lock hash, `redisson_lock_token:{..}`, Redisson's
/// fair-lock queue `redisson_lock_queue:{..}`. ARGV: owner, lease ms.
/// Replies `{1, token}` or `{0, pttl}`; refuses a name that Redisson uses as
/// a fair lock (its queue exists) or a read-write lock (field `mode`),
/// whose scripts would not see this lock.
const REDISSON_ACQUIRE: &str = r"
local ttl = redis.call('pttl', KEYS[1])
if ttl == -2 then
  if redis.call('exists', KEYS[3]) == 1 then
    return redis.error_reply('WRONGTYPE REDISSON_FAIRLOCK the name is a Redisson fair lock')
  end
  local token = redis.call('incr', KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('get', KEYS[2]) or '0')}
end
if redis.call('hexists', KEYS[1], 'mode') == 1 then
  return redis.error_reply('WRONGTYPE REDISSON_RWLOCK the name is a Redisson read-write lock')
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
/// the lock), and wakes a waiter only when that freed the lock. The plain
/// lock's wake-up message is `0` in both layouts: any message wakes this
/// library's waiters, and `0` is Redisson's `UNLOCK_MESSAGE` (its waiters
/// decode the message as a number).
const ROLLBACK: &str = r"
if redis.call('hdel', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', KEYS[2], '0')
end
return 1
";

/// Deletes the lock whoever owns it (operator override), then wakes a waiter.
const FORCE_RELEASE: &str = r"
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
redis.call('publish', KEYS[2], '0')
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

/// The server's clock in milliseconds, for the holders and waiters that
/// expire one by one inside a key (reads, permits, queued waiters). Redis 7
/// replicates a script's effects, not the script, so `TIME` is allowed
/// before writes; Redis 6 needs to be told.
const NOW: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
";

/// Drops the fair lock's waiters whose place ran out (KEYS[3] the queue,
/// KEYS[4] the places' deadlines, KEYS[5] the waiters' leases).
const FAIR_PURGE: &str = r"
local gone = redis.call('zrangebyscore', KEYS[4], '-inf', now)
if #gone > 0 then
  redis.call('zrem', KEYS[3], unpack(gone))
  redis.call('hdel', KEYS[5], unpack(gone))
  redis.call('zremrangebyscore', KEYS[4], '-inf', now)
end
";

/// The fair lock. KEYS: the lock's hash (field owner, value token), the
/// fencing counter, the queue (owner -> arrival), the places' deadlines
/// (owner -> server ms), the waiters' leases (owner -> ms). ARGV: owner,
/// lease ms, whether to queue when busy, how long a place lasts.
///
/// Takes the lock when it is ours (handed to us by a release) or free with
/// nobody ahead of us; else queues us (or refreshes our place) and replies
/// `{0, ms}` until the holder's lease or the head's place runs out.
const FAIR_ACQUIRE: &str = r"
local token = redis.call('hget', KEYS[1], ARGV[1])
if token then
  redis.call('pexpire', KEYS[1], ARGV[2])
  if redis.call('zrem', KEYS[3], ARGV[1]) == 1 then
    redis.call('zrem', KEYS[4], ARGV[1])
    redis.call('hdel', KEYS[5], ARGV[1])
  end
  return {1, tonumber(token)}
end
local ttl = redis.call('pttl', KEYS[1])
if ttl == -2 then
  local head = redis.call('zrange', KEYS[3], 0, 0)[1]
  if head == nil or head == ARGV[1] then
    token = redis.call('incr', KEYS[2])
    redis.call('hset', KEYS[1], ARGV[1], token)
    redis.call('pexpire', KEYS[1], ARGV[2])
    if head then
      redis.call('zrem', KEYS[3], ARGV[1])
      redis.call('zrem', KEYS[4], ARGV[1])
      redis.call('hdel', KEYS[5], ARGV[1])
    end
    return {1, token}
  end
  ttl = math.max(1, tonumber(redis.call('zscore', KEYS[4], head)) - now)
end
if ARGV[3] == '1' then
  if redis.call('zscore', KEYS[3], ARGV[1]) == false then
    redis.call('zadd', KEYS[3], redis.call('incr', KEYS[2]), ARGV[1])
  end
  redis.call('zadd', KEYS[4], now + tonumber(ARGV[4]), ARGV[1])
  redis.call('hset', KEYS[5], ARGV[1], ARGV[2])
  for i = 3, 5 do redis.call('pexpire', KEYS[i], ARGV[4]) end
end
return {0, ttl}
";

/// Gives the fair lock back (ARGV[2] `release`: ARGV[1]'s hold; `rollback`:
/// ARGV[1]'s grant and its place in the queue; `force`: whoever holds it)
/// and hands it straight to the head of the queue: the head becomes the
/// holder with a new token, and only it is told, by `g <owner> <token>` on
/// the channel. The hand-over lease is the head's own, but at most ARGV[3]
/// (the place's lifetime): a head that died while queued holds the lock no
/// longer than that; a live one extends it to its lease at once. KEYS: as `FAIR_ACQUIRE`, plus the
/// channel. Replies whether a hold was deleted.
const FAIR_RELEASE: &str = r"
local deleted
if ARGV[2] == 'force' then
  deleted = redis.call('del', KEYS[1])
else
  deleted = redis.call('hdel', KEYS[1], ARGV[1])
  if ARGV[2] == 'rollback' and redis.call('zrem', KEYS[3], ARGV[1]) == 1 then
    redis.call('zrem', KEYS[4], ARGV[1])
    redis.call('hdel', KEYS[5], ARGV[1])
  end
end
if deleted == 0 and redis.call('exists', KEYS[1]) == 1 then
  return 0
end
while true do
  local head = redis.call('zrange', KEYS[3], 0, 0)[1]
  if head == nil then
    return deleted
  end
  local lease = redis.call('hget', KEYS[5], head)
  redis.call('zrem', KEYS[3], head)
  redis.call('zrem', KEYS[4], head)
  redis.call('hdel', KEYS[5], head)
  if lease then
    local token = redis.call('incr', KEYS[2])
    redis.call('hset', KEYS[1], head, token)
    redis.call('pexpire', KEYS[1], math.min(tonumber(lease), tonumber(ARGV[3])))
    redis.call('publish', KEYS[6], 'g ' .. head .. ' ' .. token)
    return deleted
  end
end
";

/// A read hold. KEYS: the readers (owner -> expiry, server ms), the
/// writer's hash, the fencing counter, the waiting writers (owner -> place
/// deadline). ARGV: owner, lease ms. Refused while another owner writes, and
/// to a new reader while a writer waits (writers are not starved).
const READ_ACQUIRE: &str = r"
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local writer = redis.call('hkeys', KEYS[2])[1]
if writer and writer ~= ARGV[1] then
  return {0, redis.call('pttl', KEYS[2])}
end
if not writer and redis.call('zscore', KEYS[1], ARGV[1]) == false then
  redis.call('zremrangebyscore', KEYS[4], '-inf', now)
  local first = redis.call('zrange', KEYS[4], 0, 0, 'withscores')
  if first[1] then
    return {0, math.max(1, tonumber(first[2]) - now)}
  end
end
local expires = now + tonumber(ARGV[2])
redis.call('zadd', KEYS[1], expires, ARGV[1])
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('pexpireat', KEYS[1], expires)
end
return {1, redis.call('incr', KEYS[3])}
";

/// The write hold. KEYS: as `READ_ACQUIRE`. ARGV: owner, lease ms, whether
/// to record the intent when busy, how long the intent lasts. Granted when
/// nobody writes and nobody reads.
const WRITE_ACQUIRE: &str = r"
local token = redis.call('hget', KEYS[2], ARGV[1])
if token then
  redis.call('pexpire', KEYS[2], ARGV[2])
  return {1, tonumber(token)}
end
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local ttl = redis.call('pttl', KEYS[2])
if ttl == -2 then
  local reader = redis.call('zrange', KEYS[1], 0, 0, 'withscores')
  if reader[1] == nil then
    redis.call('zrem', KEYS[4], ARGV[1])
    token = redis.call('incr', KEYS[3])
    redis.call('hset', KEYS[2], ARGV[1], token)
    redis.call('pexpire', KEYS[2], ARGV[2])
    return {1, token}
  end
  ttl = math.max(1, tonumber(reader[2]) - now)
end
if ARGV[3] == '1' then
  redis.call('zadd', KEYS[4], now + tonumber(ARGV[4]), ARGV[1])
  redis.call('pexpire', KEYS[4], ARGV[4])
end
return {0, ttl}
";

/// Gives a read hold back (release and rollback alike). KEYS: the readers,
/// the channel. Replies whether a live hold was deleted (an expired one was
/// not held any more); wakes the waiters when no live reader is left.
const READ_RELEASE: &str = r"
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires then
  return 0
end
redis.call('zrem', KEYS[1], ARGV[1])
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zcard', KEYS[1]) == 0 then
  redis.call('publish', KEYS[2], '1')
end
if tonumber(expires) <= now then
  return 0
end
return 1
";

/// Takes back a writer's grant and its intent. KEYS: the writer's hash, the
/// waiting writers, the channel. Wakes the waiters when that freed the lock
/// or let readers in.
const WRITE_ROLLBACK: &str = r"
local deleted = redis.call('hdel', KEYS[1], ARGV[1])
local left = redis.call('zrem', KEYS[2], ARGV[1])
if deleted + left > 0 then
  redis.call('publish', KEYS[3], '1')
end
return deleted
";

/// `take` permits of a semaphore. KEYS: the holders (owner -> expiry,
/// server ms), their permits (owner -> count), the fencing counter. ARGV:
/// owner, lease ms, take, total. Holders whose lease ran out give their
/// permits back first (a crashed holder leaks nothing).
const PERMITS_ACQUIRE: &str = r"
local gone = redis.call('zrangebyscore', KEYS[1], '-inf', now)
if #gone > 0 then
  redis.call('hdel', KEYS[2], unpack(gone))
  redis.call('zremrangebyscore', KEYS[1], '-inf', now)
end
local lease = tonumber(ARGV[2])
local expires = now + lease
if redis.call('hexists', KEYS[2], ARGV[1]) == 0 then
  local used = 0
  for _, n in ipairs(redis.call('hvals', KEYS[2])) do
    used = used + tonumber(n)
  end
  if used + tonumber(ARGV[3]) > tonumber(ARGV[4]) then
    local first = redis.call('zrange', KEYS[1], 0, 0, 'withscores')
    if first[1] then
      return {0, math.max(1, tonumber(first[2]) - now)}
    end
    return {0, -1}
  end
  redis.call('hset', KEYS[2], ARGV[1], ARGV[3])
end
redis.call('zadd', KEYS[1], expires, ARGV[1])
for i = 1, 2 do
  if redis.call('pttl', KEYS[i]) < lease then
    redis.call('pexpireat', KEYS[i], expires)
  end
end
return {1, redis.call('incr', KEYS[3])}
";

/// Gives permits back (release and rollback alike). KEYS: the holders,
/// their permits, the channel. Replies whether a live hold was deleted (an
/// expired one was not held any more); wakes the waiters.
const PERMITS_RELEASE: &str = r"
local expires = redis.call('zscore', KEYS[1], ARGV[1])
redis.call('hdel', KEYS[2], ARGV[1])
if not expires then
  return 0
end
redis.call('zrem', KEYS[1], ARGV[1])
redis.call('publish', KEYS[3], '1')
if tonumber(expires) <= now then
  return 0
end
return 1
";

/// Renews a hold that expires inside a key (a read, permits): KEYS[1] the
/// holders (owner -> expiry), the other KEYS expire with it. ARGV: owner,
/// lease ms.
const RENEW_MEMBER: &str = r"
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then
  return 0
end
local lease = tonumber(ARGV[2])
expires = now + lease
redis.call('zadd', KEYS[1], expires, ARGV[1])
for i = 1, #KEYS do
  if redis.call('pttl', KEYS[i]) < lease then
    redis.call('pexpireat', KEYS[i], expires)
  end
end
return 1
";

/// Deletes every key of a primitive whoever holds it (operator override;
/// KEYS: the keys, then the channel), then wakes the waiters.
const FAMILY_FORCE: &str = r"
local n = 0
for i = 1, #KEYS - 1 do
  n = n + redis.call('del', KEYS[i])
end
if n == 0 then
  return 0
end
redis.call('publish', KEYS[#KEYS], '1')
return 1
";

/// The start of the read-only inspection scripts (after `NOW`): refuses
/// (`{0, key}`) when a key (KEYS[i]) holds another type than ARGV[i], and
/// defines `holder(key)`, a hash lock's `{owner, token, pttl, fields}` (`{}`
/// when free), and `live(key, permits)`, the members of a sorted set whose
/// score (a deadline in server ms) is still ahead, soonest first, as
/// `owner, ms left, n` triples: `n` from the hash `permits` (members without
/// one left out), 1 without it.
const INSPECT_PRELUDE: &str = r"
for i = 1, #KEYS do
  local found = redis.call('type', KEYS[i])['ok']
  if found ~= 'none' and found ~= ARGV[i] then
    return {0, KEYS[i]}
  end
end
local function holder(key)
  local fields = redis.call('hgetall', key)
  if #fields == 0 then
    return {}
  end
  return {fields[1], fields[2], redis.call('pttl', key), #fields / 2}
end
local function live(key, permits)
  local out = {}
  local members = redis.call('zrangebyscore', key, now, '+inf', 'withscores')
  for i = 1, #members, 2 do
    local left = tonumber(members[i + 1]) - now
    local n = 1
    if permits then
      n = tonumber(redis.call('hget', permits, members[i]) or '')
    end
    if left > 0 and n then
      out[#out + 1] = members[i]
      out[#out + 1] = left
      out[#out + 1] = n
    end
  end
  return out
end
";

/// A fair lock's holder and its queue, in order, without the waiters whose
/// place ran out. KEYS: the lock's hash, the fencing counter, the queue, the
/// places' deadlines. Replies `{1, holder, {}, waiters, counter}`.
const FAIR_INSPECT: &str = r"
local queue = {}
for _, owner in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
  local deadline = tonumber(redis.call('zscore', KEYS[4], owner) or '')
  if deadline and deadline > now then
    queue[#queue + 1] = owner
    queue[#queue + 1] = deadline - now
    queue[#queue + 1] = 0
  end
end
return {1, holder(KEYS[1]), {}, queue, redis.call('get', KEYS[2])}
";

/// A read-write lock's writer, live readers and live waiting writers. KEYS:
/// as `READ_ACQUIRE`. Replies `{1, writer, readers, waiting, counter}`.
const RW_INSPECT: &str = r"
return {1, holder(KEYS[2]), live(KEYS[1]), live(KEYS[4]), redis.call('get', KEYS[3])}
";

/// A semaphore's live holders and their permits. KEYS: as
/// `PERMITS_ACQUIRE`. Replies `{1, {}, holders, {}, counter}`.
const PERMITS_INSPECT: &str = r"
return {1, {}, live(KEYS[1], KEYS[2]), {}, redis.call('get', KEYS[3])}
";

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
    family_force: Script,
    fair_inspect: Script,
    rw_inspect: Script,
    permits_inspect: Script,
    redisson_acquire: Script,
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
        let timed = |script: &str| publishing(&format!("{NOW}{script}"));
        Scripts {
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            rollback: publishing(ROLLBACK),
            force_release: publishing(FORCE_RELEASE),
            fence_floor: Script::new(FENCE_FLOOR),
            fair_acquire: timed(&format!("{FAIR_PURGE}{FAIR_ACQUIRE}")),
            fair_release: timed(&format!("{FAIR_PURGE}{FAIR_RELEASE}")),
            read_acquire: timed(READ_ACQUIRE),
            write_acquire: timed(WRITE_ACQUIRE),
            read_release: timed(READ_RELEASE),
            write_rollback: publishing(WRITE_ROLLBACK),
            permits_acquire: timed(PERMITS_ACQUIRE),
            permits_release: timed(PERMITS_RELEASE),
            renew_member: timed(RENEW_MEMBER),
            family_force: publishing(FAMILY_FORCE),
            fair_inspect: Script::new(&format!("{NOW}{INSPECT_PRELUDE}{FAIR_INSPECT}")),
            rw_inspect: Script::new(&format!("{NOW}{INSPECT_PRELUDE}{RW_INSPECT}")),
            permits_inspect: Script::new(&format!("{NOW}{INSPECT_PRELUDE}{PERMITS_INSPECT}")),
            redisson_acquire: Script::new(REDISSON_ACQUIRE),
            publish: if sharded { "SPUBLISH" } else { "PUBLISH" },
        }
    }

    /// Every script, for `SCRIPT LOAD`.
    pub(crate) fn all(&self) -> [&Script; 19] {
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
            &self.family_force,
            &self.fair_inspect,
            &self.rw_inspect,
            &self.permits_inspect,
            &self.redisson_acquire,
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
        let mut cmd = match key.kind {
            Kind::Exclusive | Kind::Fair | Kind::Write => evalsha(&self.renew, &[&key.lock]),
            Kind::Read => evalsha(&self.renew_member, &[&key.lock]),
            Kind::Permits { .. } => evalsha(&self.renew_member, &[&key.lock, &key.aux(":permits")]),
        };
        cmd.arg(owner).arg(lease_ms);
        cmd
    }

    /// The release of `owner`'s hold of `key`, waking the next waiter (a
    /// fair lock: handing it to the head of its queue). Its first reply is
    /// whether it deleted the hold (see [`release_replies`](Scripts::release_replies)).
    pub(crate) fn release(&self, key: &LockKey, owner: &str) -> Pipeline {
        match key.kind {
            Kind::Exclusive | Kind::Write => self.plain_release(key, owner),
            Kind::Fair => self.fair(key, owner, "release"),
            Kind::Read | Kind::Permits { .. } => self.give_back(key, owner),
        }
    }

    /// The quiet rollback of `owner`'s grant (and of its place in a queue),
    /// as a pipeline of one.
    pub(crate) fn rollback(&self, key: &LockKey, owner: &str) -> Pipeline {
        match key.kind {
            Kind::Exclusive => {
                let mut cmd = evalsha(&self.rollback, &[&key.lock, &key.channel]);
                cmd.arg(owner);
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
                cmd.arg(owner);
                one(cmd)
            }
            Kind::Read | Kind::Permits { .. } => self.give_back(key, owner),
        }
    }

    /// The operator's override, as a pipeline of one.
    pub(crate) fn force_release(&self, key: &LockKey) -> Pipeline {
        match key.kind {
            Kind::Exclusive => one(evalsha(&self.force_release, &[&key.lock, &key.channel])),
            Kind::Fair => self.fair(key, "", "force"),
            Kind::Read | Kind::Write => {
                let keys = [
                    key.aux(":read"),
                    key.aux(":write"),
                    key.aux(":wait"),
                    key.channel.to_string(),
                ];
                one(evalsha(&self.family_force, &refs(&keys)))
            }
            Kind::Permits { .. } => one(evalsha(&self.family_force, &refs(&permits_keys(key)))),
        }
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

    /// `FAIR_RELEASE` in `mode`.
    fn fair(&self, key: &LockKey, owner: &str, mode: &str) -> Pipeline {
        let keys = fair_keys(key);
        let mut cmd = evalsha(&self.fair_release, &refs(&keys));
        cmd.arg(owner)
            .arg(mode)
            .arg(lease::millis(lease::QUEUE_PRESENCE));
        one(cmd)
    }

    /// Gives back a read hold or permits.
    fn give_back(&self, key: &LockKey, owner: &str) -> Pipeline {
        let cmd = if key.kind == Kind::Read {
            let mut cmd = evalsha(&self.read_release, &[&key.lock, &key.channel]);
            cmd.arg(owner);
            cmd
        } else {
            let mut cmd = evalsha(&self.permits_release, &refs(&permits_keys(key)));
            cmd.arg(owner);
            cmd
        };
        one(cmd)
    }

    /// Raises the fencing counter of `key`'s slot to `token`, as a pipeline of one.
    pub(crate) fn fence_floor(&self, key: &LockKey, token: u64) -> Pipeline {
        let mut cmd = evalsha(&self.fence_floor, &[&key.fence()]);
        cmd.arg(token);
        one(cmd)
    }

    /// The release of a hash lock: `HDEL` of the owner's field (the hash's
    /// only one, so an atomic compare-and-delete) and the wake-up
    /// (`PUBLISH`/`SPUBLISH`), pipelined. Its replies are how many fields
    /// `HDEL` deleted and how many subscriptions the wake-up reached.
    fn plain_release(&self, key: &LockKey, owner: &str) -> Pipeline {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("HDEL")
            .arg(&*key.lock)
            .arg(owner)
            .cmd(self.publish)
            .arg(&*key.channel)
            // The plain lock's message (see `ROLLBACK`).
            .arg("0");
        pipe
    }

    /// How many replies [`release`](Scripts::release)'s pipeline has: the
    /// plain lock's second one is how many subscriptions its wake-up
    /// reached (see `Waiters::listeners`).
    pub(crate) fn release_replies(key: &LockKey) -> usize {
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
