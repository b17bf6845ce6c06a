-- Take back ARGV[1]'s grant of the plain lock (both layouts): delete its
-- field (the hash's only one, so the lock), and wake a waiter only when that
-- freed the lock.
--
-- KEYS[1]  the lock's hash: field owner
-- KEYS[2]  the lock's wake-up channel
-- ARGV[1]  owner
-- ARGV[2]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Returns 1 when the grant was deleted, 0 when ARGV[1] held nothing.
--
-- The plain lock's wake-up message is `0` in both layouts: any message wakes
-- this library's waiters, and `0` is Redisson's UNLOCK_MESSAGE (its waiters
-- decode the message as a number).
if redis.call('hdel', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('exists', KEYS[1]) == 0 then
  redis.call(ARGV[2], KEYS[2], '0')
end
return 1
