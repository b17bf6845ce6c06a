-- Renew permits of Redisson's RPermitExpirableSemaphore, as its
-- updateLeaseTime(permitId, ..) does for each id (after now.lua).
--
-- KEYS[1]  the permits' deadlines, `{name}:timeout`: permit id -> ms
-- ARGV[1]  lease, ms
-- ARGV[2..] the permit ids
--
-- Returns 1 when renewed, 0 when a permit is gone or its deadline passed
-- (the next acquisition on either side gives it back to the count).
local deadline = now + tonumber(ARGV[1])
for i = 2, #ARGV do
  local score = redis.call('zscore', KEYS[1], ARGV[i])
  if not score or tonumber(score) <= now then
    return 0
  end
end
for i = 2, #ARGV do
  redis.call('zadd', KEYS[1], deadline, ARGV[i])
end
return 1
