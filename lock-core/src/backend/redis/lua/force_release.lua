-- Delete the plain lock whoever owns it (operator override), then wake a
-- waiter.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  the lock's wake-up channel
-- ARGV[1]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Returns 1 when the lock was deleted, 0 when it was free. The message is
-- the plain lock's `0` (see rollback.lua).
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
redis.call(ARGV[1], KEYS[2], '0')
return 1
