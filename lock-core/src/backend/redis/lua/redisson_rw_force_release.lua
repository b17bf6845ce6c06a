-- Delete Redisson's read-write lock whoever holds it (readers or the
-- writer), as an operator's override, and wake every waiter.
--
-- KEYS[1]  the lock's hash (the name itself)
-- KEYS[2]  the wake-up channel, `redisson_rwlock:{..}`
-- ARGV[1]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Only a hash with Redisson's field `mode` is deleted. Publishes Redisson's
-- read-unlock message `1`, which wakes all of Redisson's waiters.
--
-- Returns 1 when it deleted the lock, 0 when there was none.
if redis.call('hexists', KEYS[1], 'mode') == 0 then
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[1], KEYS[2], '1')
return 1
