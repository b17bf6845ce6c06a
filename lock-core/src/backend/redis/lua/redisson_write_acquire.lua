-- Acquire the write hold of Redisson's read-write lock, as Redisson's
-- RReadWriteLock.writeLock() takes it (RedissonWriteLock.tryLockInnerAsync).
--
-- KEYS[1]  the lock's hash (the name itself): field `mode`, the writer's
--          field `<owner>:write`, value its hold count
-- KEYS[2]  the name's token counter, `redisson_lock_token:{..}` (ours only)
-- ARGV[1]  the writer's field, `<owner>:write`
-- ARGV[2]  lease, ms
--
-- Returns {1, token} when granted, {0, pttl} when held by others (readers,
-- or another writer). Refuses, with a WRONGTYPE error, a hash without `mode`
-- (a Redisson RLock's).
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  if redis.call('exists', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE REDISSON_LOCK the name is a Redisson lock')
  end
  local token = next_token(KEYS[2])
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  -- A repeated attempt of the holder (its reply was lost).
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('get', KEYS[2]) or '0')}
end
return {0, redis.call('pttl', KEYS[1])}
