-- Acquire the plain lock (this library's layout), or re-enter it.
--
-- KEYS[1]  the lock's hash: field owner, value fencing token
-- KEYS[2]  the fencing counter of the lock's slot
-- KEYS[3]  the lock's wake-up channel
-- ARGV[1]  owner
-- ARGV[2]  lease, ms
-- ARGV[3]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Takes the lock when it is free (or already ours), with the fencing
-- counter's next token (token.lua) on a first acquisition.
--
-- Returns {1, token} when held by ARGV[1], {0, pttl} when busy, and
-- {2, pttl} when a hot-lock keeper holds it (its field ends with `~k`),
-- after asking it to give the lock up: `w <field>` on KEYS[3].
--
-- PTTL comes first: it tells a free lock (-2) from a held one and gives the
-- busy reply its TTL, so a free lock costs 6 calls (3 of them the token's)
-- and a busy one 2.
local ttl = redis.call('pttl', KEYS[1])
if ttl == -2 then
  local token = next_token(KEYS[2])
  redis.call('hset', KEYS[1], ARGV[1], token)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, token}
end
local holder = redis.call('hkeys', KEYS[1])[1]
if holder == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('hget', KEYS[1], ARGV[1]))}
end
if holder and string.sub(holder, -2) == '~k' then
  redis.call(ARGV[3], KEYS[3], 'w ' .. holder)
  return {2, ttl}
end
return {0, ttl}
