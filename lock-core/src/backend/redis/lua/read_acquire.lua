-- Acquire a read hold of a read-write lock, or renew ours (after now.lua).
--
-- KEYS[1]  the readers: owner -> expiry, server ms
-- KEYS[2]  the writer's hash: field owner, value fencing token
-- KEYS[3]  the fencing counter of the lock's slot
-- KEYS[4]  the waiting writers: owner -> place deadline, server ms
-- ARGV[1]  owner
-- ARGV[2]  lease, ms
--
-- Refused while another owner writes, and to a new reader while a writer
-- waits (writers are not starved).
--
-- Returns {1, token} when granted, else {0, ms}: until the writer's lease or
-- the first waiting writer's place runs out.
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local writer = redis.call('hkeys', KEYS[2])[1]
if writer and writer ~= ARGV[1] then
  return {0, redis.call('pttl', KEYS[2])}
end
if not writer and redis.call('zscore', KEYS[1], ARGV[1]) == false then
  redis.call('zremrangebyscore', KEYS[4], '-inf', now)
  local first = redis.call('zrange', KEYS[4], 0, 0, 'withscores')
  if first[1] then
    return {0, math.max(1, tonumber(first[2]) - now)}
  end
end
local token = next_token(KEYS[3])
local expires = now + tonumber(ARGV[2])
redis.call('zadd', KEYS[1], expires, ARGV[1])
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('pexpireat', KEYS[1], expires)
end
return {1, token}
