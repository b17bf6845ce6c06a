-- Acquire the fair lock, or re-enter it; queue when busy (after now.lua and
-- fair_purge.lua).
--
-- KEYS[1]  the lock's hash: field owner, value fencing token
-- KEYS[2]  the fencing counter of the lock's slot
-- KEYS[3]  the queue: owner -> arrival
-- KEYS[4]  the places' deadlines: owner -> server ms
-- KEYS[5]  the waiters' leases: owner -> ms
-- ARGV[1]  owner
-- ARGV[2]  lease, ms
-- ARGV[3]  `1` to queue (or refresh the place) when busy, else `0`
-- ARGV[4]  how long a place lasts, ms
--
-- Takes the lock when it is ours (handed to us by a release) or free with
-- nobody ahead of us.
--
-- Returns {1, token} when held by ARGV[1], else {0, ms, fence}: until the
-- holder's lease or the head's place runs out, and the fencing counter now
-- (a grant message with a token at or below it was made before this
-- attempt: the waiter must not take it for a hand-off after it).
local token = redis.call('hget', KEYS[1], ARGV[1])
if token then
  redis.call('pexpire', KEYS[1], ARGV[2])
  if redis.call('zrem', KEYS[3], ARGV[1]) == 1 then
    redis.call('zrem', KEYS[4], ARGV[1])
    redis.call('hdel', KEYS[5], ARGV[1])
  end
  return {1, tonumber(token)}
end
local ttl = redis.call('pttl', KEYS[1])
if ttl == -2 then
  local head = redis.call('zrange', KEYS[3], 0, 0)[1]
  if head == nil or head == ARGV[1] then
    token = next_token(KEYS[2])
    redis.call('hset', KEYS[1], ARGV[1], token)
    redis.call('pexpire', KEYS[1], ARGV[2])
    if head then
      redis.call('zrem', KEYS[3], ARGV[1])
      redis.call('zrem', KEYS[4], ARGV[1])
      redis.call('hdel', KEYS[5], ARGV[1])
    end
    return {1, token}
  end
  ttl = math.max(1, tonumber(redis.call('zscore', KEYS[4], head)) - now)
end
if ARGV[3] == '1' then
  if redis.call('zscore', KEYS[3], ARGV[1]) == false then
    redis.call('zadd', KEYS[3], redis.call('incr', KEYS[2]), ARGV[1])
  end
  redis.call('zadd', KEYS[4], now + tonumber(ARGV[4]), ARGV[1])
  redis.call('hset', KEYS[5], ARGV[1], ARGV[2])
  for i = 3, 5 do redis.call('pexpire', KEYS[i], ARGV[4]) end
end
return {0, ttl, tonumber(redis.call('get', KEYS[2]) or '0')}
