-- Record what the leader of a role proclaims (leadership, `leader/`), only
-- while ARGV[1] holds the role's lock, and tell the role's observers.
--
-- KEYS[1]  the role's lock (hash: field owner, value fencing token = term)
-- KEYS[2]  the role's record: "<term> <since ms> <owner>\n<metadata>"
-- KEYS[3]  the record's channel
-- ARGV[1]  owner
-- ARGV[2]  metadata
-- ARGV[3]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
-- ARGV[4]  how long the record outlives its last proclamation, ms
--
-- `since` is the term's first proclamation (the server's clock): kept when
-- the record is already this term's. The message is the term (observers
-- read the record again on any message).
--
-- Returns {term, owner, pttl, now, since, metadata} when recorded, {} when
-- ARGV[1] does not hold the lock.
local term = redis.call('hget', KEYS[1], ARGV[1])
if not term then
  return {}
end
local since = now
local old = redis.call('get', KEYS[2])
if old then
  local old_term, old_since, old_owner = string.match(old, '^(%d+) (%d+) (%S+)\n')
  if old_term == term and old_owner == ARGV[1] then
    since = tonumber(old_since)
  end
end
local stamp = string.format('%.0f', since)
redis.call('set', KEYS[2], term .. ' ' .. stamp .. ' ' .. ARGV[1] .. '\n' .. ARGV[2], 'px', ARGV[4])
redis.call(ARGV[3], KEYS[3], term)
return {term, ARGV[1], redis.call('pttl', KEYS[1]), string.format('%.0f', now), stamp, ARGV[2]}
