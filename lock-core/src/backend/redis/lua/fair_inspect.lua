-- Inspect a fair lock (or a plain lock, as a fair lock without a queue):
-- its holder and its queue, in order, without the waiters whose place ran
-- out. Read-only (after now.lua and prelude/inspect.lua).
--
-- KEYS[1]  the lock's hash: field owner, value fencing token
-- KEYS[2]  the fencing counter of the lock's slot
-- KEYS[3]  the queue: owner -> arrival
-- KEYS[4]  the places' deadlines: owner -> server ms
-- ARGV[1..4]  the types of KEYS[1..4]: hash, string, zset, zset
--
-- Returns {1, holder, {}, waiters, counter}, waiters as `owner, ms left, 0`
-- triples (or the prelude's {0, key}).
local queue = {}
for _, owner in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
  local deadline = tonumber(redis.call('zscore', KEYS[4], owner) or '')
  if deadline and deadline > now then
    queue[#queue + 1] = owner
    queue[#queue + 1] = deadline - now
    queue[#queue + 1] = 0
  end
end
return {1, holder(KEYS[1]), {}, queue, redis.call('get', KEYS[2])}
