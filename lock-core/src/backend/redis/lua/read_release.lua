-- Give a read hold back, release and rollback alike (after now.lua).
--
-- KEYS[1]  the readers: owner -> expiry, server ms
-- KEYS[2]  the read-write lock's wake-up channel
-- ARGV[1]  owner
-- ARGV[2]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Wakes the waiters (message `1`) when no live reader is left.
--
-- Returns 1 when a live hold was deleted, 0 when there was none (an expired
-- hold was not held any more).
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires then
  return 0
end
redis.call('zrem', KEYS[1], ARGV[1])
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zcard', KEYS[1]) == 0 then
  redis.call(ARGV[2], KEYS[2], '1')
end
if tonumber(expires) <= now then
  return 0
end
return 1
