-- Prelude of the read-only inspection scripts (after now.lua).
--
-- KEYS[i]  a key of the primitive
-- ARGV[i]  the type KEYS[i] must have when it exists (`hash`, `zset`, ...)
--
-- Returns {0, KEYS[i]} when a key holds another type than ARGV[i]; else the
-- script it starts replies. Defines:
-- holder(key)         a hash lock's {owner, token, pttl, fields}, {} when free
-- live(key, permits)  the members of a sorted set whose score (a deadline in
--                     server ms) is still ahead, soonest first, as
--                     `owner, ms left, n` triples: `n` from the hash
--                     `permits` (members without one left out), 1 without it
for i = 1, #KEYS do
  local found = redis.call('type', KEYS[i])['ok']
  if found ~= 'none' and found ~= ARGV[i] then
    return {0, KEYS[i]}
  end
end
local function holder(key)
  local fields = redis.call('hgetall', key)
  if #fields == 0 then
    return {}
  end
  return {fields[1], fields[2], redis.call('pttl', key), #fields / 2}
end
local function live(key, permits)
  local out = {}
  local members = redis.call('zrangebyscore', key, now, '+inf', 'withscores')
  for i = 1, #members, 2 do
    local left = tonumber(members[i + 1]) - now
    local n = 1
    if permits then
      n = tonumber(redis.call('hget', permits, members[i]) or '')
    end
    if left > 0 and n then
      out[#out + 1] = members[i]
      out[#out + 1] = left
      out[#out + 1] = n
    end
  end
  return out
end
