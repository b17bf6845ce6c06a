-- Record a client's layout in the registry of layouts, unless clients of
-- another layout are recorded there and the client does not allow a mix:
-- one atomic step, so that a client that is refused records nothing (it
-- would refuse the other layout's clients in turn) and two clients of two
-- layouts connecting at once cannot both miss each other.
--
-- KEYS[1]  the registry: hash layout -> 1
-- ARGV[1]  the client's layout (`native`, `redisson`)
-- ARGV[2]  `1`: record even when another layout is recorded (a migration)
-- ARGV[3]  how long the registry lives after the last record, ms
--
-- Returns the layouts recorded (ARGV[1] among them when it was recorded).
local layouts = redis.call('hkeys', KEYS[1])
if ARGV[2] ~= '1' then
  for _, layout in ipairs(layouts) do
    if layout ~= ARGV[1] then
      return layouts
    end
  end
end
redis.call('hset', KEYS[1], ARGV[1], 1)
redis.call('pexpire', KEYS[1], ARGV[3])
return redis.call('hkeys', KEYS[1])
