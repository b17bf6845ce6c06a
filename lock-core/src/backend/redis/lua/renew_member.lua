-- Renew a hold that expires inside a key: a read hold, permits (after
-- now.lua).
--
-- KEYS[1]  the holders: owner -> expiry, server ms
-- KEYS[2]  (permits) the holders' permits, which expire with them
-- ARGV[1]  owner
-- ARGV[2]  lease, ms
--
-- Returns 1 when renewed, 0 when ARGV[1]'s hold is gone or ran out.
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then
  return 0
end
local lease = tonumber(ARGV[2])
expires = now + lease
redis.call('zadd', KEYS[1], expires, ARGV[1])
for i = 1, #KEYS do
  if redis.call('pttl', KEYS[i]) < lease then
    redis.call('pexpireat', KEYS[i], expires)
  end
end
return 1
