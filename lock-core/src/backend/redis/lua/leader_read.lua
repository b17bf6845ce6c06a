-- Read the leader of a role (leadership, `leader/`): the holder of the
-- role's lock and its term, with the term's record when it has one.
--
-- KEYS[1]  the role's lock (hash: field owner, value fencing token = term)
-- KEYS[2]  the role's record: "<term> <since ms> <owner>\n<metadata>"
--
-- Read-only. A record of another term or owner is stale (its leader is
-- gone) and is not shown.
--
-- Returns {} when nobody holds the lock; else {term, owner, pttl, now,
-- since, metadata}, with since and metadata '' before the leader proclaimed.
local ttl = redis.call('pttl', KEYS[1])
if ttl < 0 then
  return {}
end
local owner = redis.call('hkeys', KEYS[1])[1]
if not owner then
  return {}
end
local term = redis.call('hget', KEYS[1], owner)
local since, metadata = '', ''
local record = redis.call('get', KEYS[2])
if record then
  local r_term, r_since, r_owner, r_metadata = string.match(record, '^(%d+) (%d+) (%S+)\n(.*)$')
  if r_term == term and r_owner == owner then
    since, metadata = r_since, r_metadata
  end
end
return {term, owner, ttl, string.format('%.0f', now), since, metadata}
