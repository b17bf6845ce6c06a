-- Acquire the plain lock in Redisson's layout, as Redisson's RFencedLock
-- takes it, or re-enter it.
--
-- KEYS[1]  the lock's hash (the name itself): field owner, value hold count
-- KEYS[2]  the name's own fencing counter, `redisson_lock_token:{..}`
-- KEYS[3]  Redisson's fair-lock queue of the name, `redisson_lock_queue:{..}`
-- ARGV[1]  owner
-- ARGV[2]  lease, ms
--
-- A free lock gets the next token of the name's counter and the field
-- `owner = 1` (the hold count; re-entries are counted in the client).
--
-- Returns {1, token} when held by ARGV[1], {0, pttl} when busy. Refuses, with
-- a WRONGTYPE error, a name that Redisson uses as a fair lock (its queue
-- exists, whether the lock is free or held) or as a read-write lock (field
-- `mode`), whose scripts would not see this lock. The queue is looked at
-- first: a held fair lock with waiters queued is a fair lock, not a busy
-- plain one to wait for (its release would hand it to the queue's head, and
-- a plain acquisition after that would jump the queue).
if redis.call('exists', KEYS[3]) == 1 then
  return redis.error_reply('WRONGTYPE REDISSON_FAIRLOCK the name is a Redisson fair lock')
end
local ttl = redis.call('pttl', KEYS[1])
if ttl == -2 then
  local token = next_token(KEYS[2])
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
