-- Raise a fencing counter to at least ARGV[1] (Redlock: keeps a majority of
-- the masters' counters at or above the last token issued), and record that
-- token as the holder's on this master, so that every master of the
-- majority reports the token the holder was given (the highest of the
-- quorum's), not its own lower one.
--
-- KEYS[1]  the fencing counter
-- KEYS[2]  the lock's hash: field owner, value fencing token
-- ARGV[1]  the floor: the token issued
-- ARGV[2]  the owner it was issued to
--
-- Returns 1.
local floor = tonumber(ARGV[1])
local current = tonumber(redis.call('get', KEYS[1]) or '0')
if current < floor then
  redis.call('set', KEYS[1], ARGV[1])
end
local held = redis.call('hget', KEYS[2], ARGV[2])
if held and tonumber(held) < floor then
  redis.call('hset', KEYS[2], ARGV[2], ARGV[1])
end
return 1
