-- Take back a writer's grant and its intent.
--
-- KEYS[1]  the writer's hash: field owner
-- KEYS[2]  the waiting writers: owner -> place deadline, server ms
-- KEYS[3]  the read-write lock's wake-up channel
-- ARGV[1]  owner
-- ARGV[2]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Wakes the waiters (message `1`) when that freed the lock or let readers
-- in.
--
-- Returns how many write holds were deleted (1 or 0).
local deleted = redis.call('hdel', KEYS[1], ARGV[1])
local left = redis.call('zrem', KEYS[2], ARGV[1])
if deleted + left > 0 then
  redis.call(ARGV[2], KEYS[3], '1')
end
return deleted
