-- Acquire a read hold of Redisson's read-write lock, as Redisson's
-- RReadWriteLock.readLock() takes it (RedissonReadLock.tryLockInnerAsync).
--
-- KEYS[1]  the lock's hash (the name itself): field `mode` (`read` or
--          `write`), one field per holder, value its hold count
-- KEYS[2]  this reader's timeout keys' prefix, `{name}:<owner>:rwlock_timeout`
--          (one key per hold, `:<n>` appended, each with the hold's lease)
-- KEYS[3]  the name's token counter, `redisson_lock_token:{..}` (ours only:
--          Redisson's read-write lock takes no tokens)
-- ARGV[1]  owner (the reader's field)
-- ARGV[2]  lease, ms
-- ARGV[3]  the owner's write field, `<owner>:write` (a writer may also read)
--
-- Granted while no one writes, or while the owner itself writes. A new
-- reader does not wait for waiting writers (Redisson records none).
--
-- Returns {1, token} when granted, {0, pttl} when a writer holds it. Refuses,
-- with a WRONGTYPE error, a hash without `mode` (a Redisson RLock's).
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  if redis.call('exists', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE REDISSON_LOCK the name is a Redisson lock')
  end
  local token = next_token(KEYS[3])
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[2])
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  -- A repeated attempt of a holder (its reply was lost) keeps its one hold.
  local token = next_token(KEYS[3])
  local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
  if holds == 0 then
    holds = redis.call('hincrby', KEYS[1], ARGV[1], 1)
  end
  redis.call('set', KEYS[2] .. ':' .. holds, 1, 'px', ARGV[2])
  local ttl = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(ttl, tonumber(ARGV[2])))
  return {1, token}
end
return {0, redis.call('pttl', KEYS[1])}
