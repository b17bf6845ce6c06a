-- Renew a hash lock's lease (the plain lock, the fair lock, the write hold),
-- only when ARGV[1] owns it.
--
-- KEYS[1]  the lock's hash: field owner
-- ARGV[1]  owner
-- ARGV[2]  lease, ms
--
-- Returns 1 when renewed, 0 when ARGV[1] does not hold the lock.
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0
