-- Give back a read hold of Redisson's read-write lock (release and rollback
-- alike), as RedissonReadLock.unlockInnerAsync does (without its unlock
-- latch, which only makes Redisson's own retried unlock idempotent).
--
-- KEYS[1]  the lock's hash (the name itself)
-- KEYS[2]  the wake-up channel, `redisson_rwlock:{..}`
-- KEYS[3]  this reader's timeout keys' prefix, `{name}:<owner>:rwlock_timeout`
-- KEYS[4]  every reader's timeout keys' stem, `{name}`
-- ARGV[1]  owner (the reader's field)
-- ARGV[2]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- When no other hold is left alive (by the readers' timeout keys), deletes
-- the hash and publishes Redisson's unlock message `0`; else the hash lives
-- as long as the longest remaining hold.
--
-- Returns 1 when the owner's hold was deleted, 0 when it had none.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local counter = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if counter <= 0 then
  redis.call('hdel', KEYS[1], ARGV[1])
end
redis.call('del', KEYS[3] .. ':' .. (counter + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local remaining = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local holds = tonumber(redis.call('hget', KEYS[1], field))
    if type(holds) == 'number' then
      for i = holds, 1, -1 do
        local ttl = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
        remaining = math.max(remaining, ttl)
      end
    end
  end
  if remaining > 0 then
    redis.call('pexpire', KEYS[1], remaining)
    return 1
  end
  if mode == 'write' then
    return 1
  end
end
redis.call('del', KEYS[1])
redis.call(ARGV[2], KEYS[2], '0')
return 1
