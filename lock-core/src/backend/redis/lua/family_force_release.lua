-- Delete every key of a read-write lock or a semaphore whoever holds it
-- (operator override), then wake the waiters (after now.lua).
--
-- KEYS[1]       the holders: owner -> expiry, server ms (the readers, or
--               the semaphore's holders)
-- KEYS[2..n-1]  the primitive's other keys (the writer's hash and the
--               waiting writers, or the permits)
-- KEYS[n]       its wake-up channel
-- ARGV[1]       the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
-- ARGV[2]       `1` when KEYS[2] is a hold (the writer's hash), else `0`
--
-- Returns 1 when a live hold was deleted, 0 when nothing was held. Waiting
-- writers' places and holders whose lease ran out are deleted all the same,
-- but they are not holds: an operator is told the lock was not held.
local held = redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf', 'limit', 0, 1)[1] ~= nil
if ARGV[2] == '1' and redis.call('exists', KEYS[2]) == 1 then
  held = true
end
local n = 0
for i = 1, #KEYS - 1 do
  n = n + redis.call('del', KEYS[i])
end
if n > 0 then
  redis.call(ARGV[1], KEYS[#KEYS], '1')
end
if held then
  return 1
end
return 0
