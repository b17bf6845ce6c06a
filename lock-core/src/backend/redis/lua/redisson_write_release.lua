-- Give back the write hold of Redisson's read-write lock (release and
-- rollback alike), as RedissonWriteLock.unlockInnerAsync does (without its
-- unlock latch).
--
-- KEYS[1]  the lock's hash (the name itself)
-- KEYS[2]  the wake-up channel, `redisson_rwlock:{..}`
-- ARGV[1]  the writer's field, `<owner>:write`
-- ARGV[2]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Deletes the hash when the writer's field was its last holder, else (the
-- writer's own read holds remain) turns it into a read lock. Publishes
-- Redisson's read-unlock message `1` (every waiter tries again) either way;
-- Redisson publishes only in the first case, so its waiting readers would
-- otherwise not hear of the second.
--
-- Returns 1 when the writer's hold was deleted, 0 when it had none.
if redis.call('hget', KEYS[1], 'mode') ~= 'write'
    or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call(ARGV[2], KEYS[2], '1')
return 1
