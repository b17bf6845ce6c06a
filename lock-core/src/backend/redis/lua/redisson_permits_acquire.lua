-- Acquire permits of Redisson's RPermitExpirableSemaphore, as its
-- tryAcquire(permits, leaseTime) does (after now.lua: the clock is the
-- server's; Redisson's clients pass their own).
--
-- KEYS[1]  the semaphore's count of available permits (the name itself)
-- KEYS[2]  the permits' deadlines, `{name}:timeout`: permit id -> ms
-- KEYS[3]  the wake-up channel, `redisson_sc:{name}`
-- KEYS[4]  the name's token counter, `redisson_lock_token:{..}` (ours only)
-- ARGV[1]  how many permits (as many ids follow)
-- ARGV[2]  lease, ms
-- ARGV[3]  the semaphore's permits when it has none yet (trySetPermits)
-- ARGV[4]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
-- ARGV[5]  Redisson's deadline of a permit without a lease
-- ARGV[6..] the permit ids (16 bytes each, as Redisson's)
--
-- Gives the permits whose deadline passed back to the count first (and
-- tells the waiters), as Redisson does.
--
-- Returns {1, token} when granted (or when the ids are already held: a
-- repeated attempt), {0, ms} when too few permits are available: until the
-- nearest deadline (-1 when every holder holds without a lease).
if redis.call('get', KEYS[1]) == false then
  redis.call('set', KEYS[1], ARGV[3])
  redis.call(ARGV[4], KEYS[3], ARGV[3])
end
local expired = redis.call('zrangebyscore', KEYS[2], 0, now)
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local value = redis.call('incrby', KEYS[1], #expired)
  if value > 0 then
    redis.call(ARGV[4], KEYS[3], value)
  end
end
local deadline = now + tonumber(ARGV[2])
if redis.call('zscore', KEYS[2], ARGV[6]) then
  for i = 6, #ARGV do
    redis.call('zadd', KEYS[2], deadline, ARGV[i])
  end
  return {1, tonumber(redis.call('get', KEYS[4]) or '0')}
end
local available = tonumber(redis.call('get', KEYS[1]))
if available ~= nil and available >= tonumber(ARGV[1]) then
  local token = next_token(KEYS[4])
  redis.call('decrby', KEYS[1], ARGV[1])
  for i = 6, #ARGV do
    redis.call('zadd', KEYS[2], deadline, ARGV[i])
  end
  return {1, token}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[1] and first[2] ~= ARGV[5] then
  return {0, math.max(1, tonumber(first[2]) - now)}
end
return {0, -1}
