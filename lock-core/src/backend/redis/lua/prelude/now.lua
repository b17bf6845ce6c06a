-- Prelude of the scripts that need the server's clock: defines `now`, the
-- server's time in ms, for the holders and waiters that expire one by one
-- inside a key (reads, permits, queued waiters).
--
-- No KEYS, no ARGV, no reply: the script it starts has them.
--
-- Redis 7 replicates a script's effects, not the script, so TIME is allowed
-- before writes; Redis 6 needs to be told.
if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
