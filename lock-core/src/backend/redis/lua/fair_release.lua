-- Give the fair lock back and hand it straight to the head of the queue
-- (after now.lua and fair_purge.lua).
--
-- KEYS[1]  the lock's hash: field owner, value fencing token
-- KEYS[2]  the fencing counter of the lock's slot
-- KEYS[3]  the queue: owner -> arrival
-- KEYS[4]  the places' deadlines: owner -> server ms
-- KEYS[5]  the waiters' leases: owner -> ms
-- KEYS[6]  the lock's wake-up channel
-- ARGV[1]  owner (ignored by `force`)
-- ARGV[2]  `release`: ARGV[1]'s hold; `rollback`: ARGV[1]'s grant and its
--          place in the queue; `force`: whoever holds it
-- ARGV[3]  how long a place lasts, ms: the longest hand-over lease
-- ARGV[4]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- The head becomes the holder with a new token, and only it is told, by
-- `g <owner> <token>` on KEYS[6]. The hand-over lease is the head's own, but
-- at most ARGV[3] and at most what is left of the head's place: a head that
-- died while queued holds the lock no longer than its place would have
-- lasted (the purge left only live places); a live one extends it to its
-- lease at once. (The waiter counts the hand-over from its last attempt,
-- which set its place: never later than this.)
--
-- Returns whether a hold was deleted (1 or 0).
local deleted
if ARGV[2] == 'force' then
  deleted = redis.call('del', KEYS[1])
else
  deleted = redis.call('hdel', KEYS[1], ARGV[1])
  if ARGV[2] == 'rollback' and redis.call('zrem', KEYS[3], ARGV[1]) == 1 then
    redis.call('zrem', KEYS[4], ARGV[1])
    redis.call('hdel', KEYS[5], ARGV[1])
  end
end
if deleted == 0 and redis.call('exists', KEYS[1]) == 1 then
  return 0
end
while true do
  local head = redis.call('zrange', KEYS[3], 0, 0)[1]
  if head == nil then
    return deleted
  end
  local lease = redis.call('hget', KEYS[5], head)
  local place = tonumber(redis.call('zscore', KEYS[4], head) or '0') - now
  redis.call('zrem', KEYS[3], head)
  redis.call('zrem', KEYS[4], head)
  redis.call('hdel', KEYS[5], head)
  if lease then
    local token = next_token(KEYS[2])
    redis.call('hset', KEYS[1], head, token)
    redis.call('pexpire', KEYS[1], math.max(1, math.min(tonumber(lease), tonumber(ARGV[3]), place)))
    redis.call(ARGV[4], KEYS[6], 'g ' .. head .. ' ' .. string.format('%d', token))
    return deleted
  end
end
