-- Prelude of the fair lock's scripts (after now.lua): drops the waiters
-- whose place ran out.
--
-- KEYS[3]  the queue: owner -> arrival
-- KEYS[4]  the places' deadlines: owner -> server ms
-- KEYS[5]  the waiters' leases: owner -> ms
--
-- No reply: the script it starts has one.
local gone = redis.call('zrangebyscore', KEYS[4], '-inf', now)
if #gone > 0 then
  redis.call('zrem', KEYS[3], unpack(gone))
  redis.call('hdel', KEYS[5], unpack(gone))
  redis.call('zremrangebyscore', KEYS[4], '-inf', now)
end
