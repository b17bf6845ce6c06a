-- Give permits back, release and rollback alike (after now.lua).
--
-- KEYS[1]  the holders: owner -> expiry, server ms
-- KEYS[2]  their permits: owner -> count
-- KEYS[3]  the semaphore's wake-up channel
-- ARGV[1]  owner
-- ARGV[2]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Wakes the waiters (message `1`) when a hold was there.
--
-- Returns 1 when a live hold was deleted, 0 when there was none (an expired
-- hold was not held any more).
local expires = redis.call('zscore', KEYS[1], ARGV[1])
redis.call('hdel', KEYS[2], ARGV[1])
if not expires then
  return 0
end
redis.call('zrem', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[3], '1')
if tonumber(expires) <= now then
  return 0
end
return 1
