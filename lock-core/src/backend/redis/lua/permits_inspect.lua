-- Inspect a semaphore: its live holders and their permits. Read-only (after
-- now.lua and prelude/inspect.lua).
--
-- KEYS[1]  the holders: owner -> expiry, server ms
-- KEYS[2]  their permits: owner -> count
-- KEYS[3]  the fencing counter of the semaphore's slot
-- ARGV[1..3]  the types of KEYS[1..3]: zset, hash, string
--
-- Returns {1, {}, holders, {}, counter} (or the prelude's {0, key}).
return {1, {}, live(KEYS[1], KEYS[2]), {}, redis.call('get', KEYS[3])}
