-- Give every held permit of Redisson's RPermitExpirableSemaphore back,
-- whoever holds it, as an operator's override, and wake the waiters.
--
-- KEYS[1]  the semaphore's count of available permits (the name itself)
-- KEYS[2]  the permits' deadlines, `{name}:timeout`: permit id -> ms
-- KEYS[3]  the wake-up channel, `redisson_sc:{name}`
-- ARGV[1]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Returns 1 when permits were held, 0 when none was.
local held = redis.call('zcard', KEYS[2])
if held == 0 then
  return 0
end
redis.call('del', KEYS[2])
local value = redis.call('incrby', KEYS[1], held)
redis.call(ARGV[1], KEYS[3], value)
return 1
