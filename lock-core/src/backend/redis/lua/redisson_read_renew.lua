-- Renew a read hold of Redisson's read-write lock, as Redisson's watchdog
-- does (renewal/ReadLockTask): the reader's timeout keys and the hash.
--
-- KEYS[1]  the lock's hash (the name itself)
-- KEYS[2]  this reader's timeout keys' prefix, `{name}:<owner>:rwlock_timeout`
-- ARGV[1]  owner (the reader's field)
-- ARGV[2]  lease, ms
--
-- The hash's expiry is never shortened (another holder's lease may be
-- longer than ours).
--
-- Returns 1 when renewed, 0 when ARGV[1] holds no live read hold.
local holds = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
if holds == nil or holds <= 0 then
  return 0
end
-- A hold whose timeout key ran out is not alive any more: a Redisson
-- reader's release would not count it.
if redis.call('pexpire', KEYS[2] .. ':' .. holds, ARGV[2]) == 0 then
  return 0
end
for i = holds - 1, 1, -1 do
  redis.call('pexpire', KEYS[2] .. ':' .. i, ARGV[2])
end
local ttl = redis.call('pttl', KEYS[1])
redis.call('pexpire', KEYS[1], math.max(ttl, tonumber(ARGV[2])))
return 1
