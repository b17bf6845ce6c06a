-- Acquire the write hold of a read-write lock, or re-enter it (after
-- now.lua).
--
-- KEYS[1]  the readers: owner -> expiry, server ms
-- KEYS[2]  the writer's hash: field owner, value fencing token
-- KEYS[3]  the fencing counter of the lock's slot
-- KEYS[4]  the waiting writers: owner -> place deadline, server ms
-- ARGV[1]  owner
-- ARGV[2]  lease, ms
-- ARGV[3]  `1` to record the intent (KEYS[4]) when busy, else `0`
-- ARGV[4]  how long the intent lasts, ms
--
-- Granted when nobody writes and nobody reads.
--
-- Returns {1, token} when held by ARGV[1], else {0, ms}: until the writer's
-- lease or the first reader's runs out.
local token = redis.call('hget', KEYS[2], ARGV[1])
if token then
  redis.call('pexpire', KEYS[2], ARGV[2])
  return {1, tonumber(token)}
end
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local ttl = redis.call('pttl', KEYS[2])
if ttl == -2 then
  local reader = redis.call('zrange', KEYS[1], 0, 0, 'withscores')
  if reader[1] == nil then
    redis.call('zrem', KEYS[4], ARGV[1])
    token = next_token(KEYS[3])
    redis.call('hset', KEYS[2], ARGV[1], token)
    redis.call('pexpire', KEYS[2], ARGV[2])
    return {1, token}
  end
  ttl = math.max(1, tonumber(reader[2]) - now)
end
if ARGV[3] == '1' then
  redis.call('zadd', KEYS[4], now + tonumber(ARGV[4]), ARGV[1])
  redis.call('pexpire', KEYS[4], ARGV[4])
end
return {0, ttl}
