-- Delete every key of a read-write lock or a semaphore whoever holds it
-- (operator override), then wake the waiters.
--
-- KEYS[1..n-1]  the primitive's keys
-- KEYS[n]       its wake-up channel
-- ARGV[1]       the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Returns 1 when a key was deleted, 0 when there was none.
local n = 0
for i = 1, #KEYS - 1 do
  n = n + redis.call('del', KEYS[i])
end
if n == 0 then
  return 0
end
redis.call(ARGV[1], KEYS[#KEYS], '1')
return 1
