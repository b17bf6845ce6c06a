-- Give permits of Redisson's RPermitExpirableSemaphore back (release and
-- rollback alike), as its tryRelease(permitIds) does (after now.lua).
--
-- KEYS[1]  the semaphore's count of available permits (the name itself)
-- KEYS[2]  the permits' deadlines, `{name}:timeout`: permit id -> ms
-- KEYS[3]  the wake-up channel, `redisson_sc:{name}`
-- ARGV[1]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
-- ARGV[2..] the permit ids
--
-- Publishes the count of available permits, Redisson's message (its
-- waiters wake as many of themselves).
--
-- Returns 1 when live permits were given back, 0 when none was held (or
-- their deadline had passed: not held any more, though given back).
local live = false
local removed = 0
for i = 2, #ARGV do
  local deadline = redis.call('zscore', KEYS[2], ARGV[i])
  if deadline then
    removed = removed + redis.call('zrem', KEYS[2], ARGV[i])
    if tonumber(deadline) > now then
      live = true
    end
  end
end
if removed == 0 then
  return 0
end
local value = redis.call('incrby', KEYS[1], removed)
redis.call(ARGV[1], KEYS[3], value)
if live then
  return 1
end
return 0
