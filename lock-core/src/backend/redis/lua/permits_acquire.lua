-- Take permits of a semaphore, or renew ours (after now.lua).
--
-- KEYS[1]  the holders: owner -> expiry, server ms
-- KEYS[2]  their permits: owner -> count
-- KEYS[3]  the fencing counter of the semaphore's slot
-- ARGV[1]  owner
-- ARGV[2]  lease, ms
-- ARGV[3]  how many permits to take
-- ARGV[4]  how many permits there are
--
-- Holders whose lease ran out give their permits back first (a crashed
-- holder leaks nothing).
--
-- Returns {1, token} when granted, else {0, ms} until the first holder's
-- lease runs out ({0, -1} when no holder has a lease to wait for).
local gone = redis.call('zrangebyscore', KEYS[1], '-inf', now)
if #gone > 0 then
  redis.call('hdel', KEYS[2], unpack(gone))
  redis.call('zremrangebyscore', KEYS[1], '-inf', now)
end
local lease = tonumber(ARGV[2])
local expires = now + lease
local new = redis.call('hexists', KEYS[2], ARGV[1]) == 0
if new then
  local used = 0
  for _, n in ipairs(redis.call('hvals', KEYS[2])) do
    used = used + tonumber(n)
  end
  if used + tonumber(ARGV[3]) > tonumber(ARGV[4]) then
    local first = redis.call('zrange', KEYS[1], 0, 0, 'withscores')
    if first[1] then
      return {0, math.max(1, tonumber(first[2]) - now)}
    end
    return {0, -1}
  end
end
local token = next_token(KEYS[3])
if new then
  redis.call('hset', KEYS[2], ARGV[1], ARGV[3])
end
redis.call('zadd', KEYS[1], expires, ARGV[1])
for i = 1, 2 do
  if redis.call('pttl', KEYS[i]) < lease then
    redis.call('pexpireat', KEYS[i], expires)
  end
end
return {1, token}
