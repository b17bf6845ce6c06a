-- Raise a fencing counter to at least ARGV[1] (Redlock: keeps a majority of
-- the masters' counters at or above the last token issued).
--
-- KEYS[1]  the fencing counter
-- ARGV[1]  the floor
--
-- Returns 1.
local current = tonumber(redis.call('get', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1])
end
return 1
