-- Acquire many plain locks (this library's layout) in one call: the group
-- commit of the acquisitions pending on one connection at the same moment.
-- Each lock is attempted exactly as acquire.lua attempts it, in order.
--
-- KEYS[3i-2]  lock i's hash (acquire.lua's KEYS[1])
-- KEYS[3i-1]  lock i's fencing counter (acquire.lua's KEYS[2])
-- KEYS[3i]    lock i's wake-up channel (acquire.lua's KEYS[3])
-- ARGV[1]     the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
-- ARGV[2i]    lock i's owner
-- ARGV[2i+1]  lock i's lease, ms
--
-- Returns one element per lock, in order: acquire.lua's reply for it
-- ({1, token}, {0, pttl} or {2, pttl}), or the error its commands met (a
-- key of another type): one lock's error never fails the others.
local function acquire(lock, fence, channel, owner, lease)
  local ttl = redis.call('pttl', lock)
  if ttl == -2 then
    local token = redis.call('incr', fence)
    redis.call('hset', lock, owner, token)
    redis.call('pexpire', lock, lease)
    return {1, token}
  end
  local holder = redis.call('hkeys', lock)[1]
  if holder == owner then
    redis.call('pexpire', lock, lease)
    return {1, tonumber(redis.call('hget', lock, owner))}
  end
  if holder and string.sub(holder, -2) == '~k' then
    redis.call(ARGV[1], channel, 'w ' .. holder)
    return {2, ttl}
  end
  return {0, ttl}
end

local replies = {}
for i = 1, #KEYS / 3 do
  local ok, reply = pcall(acquire, KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i],
    ARGV[2 * i], ARGV[2 * i + 1])
  if ok then
    replies[i] = reply
  elseif type(reply) == 'table' and reply.err then
    replies[i] = reply
  else
    replies[i] = redis.error_reply(tostring(reply))
  end
end
return replies
