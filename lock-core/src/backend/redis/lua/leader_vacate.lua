-- Term ARGV[1] of a role ended (its leader resigned): delete the role's
-- record if it is that term's, and tell the role's observers.
--
-- KEYS[1]  the role's record: "<term> <since ms> <owner>\n<metadata>"
-- KEYS[2]  the record's channel
-- ARGV[1]  the term that ended
-- ARGV[2]  the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
--
-- Returns 1 when it deleted the record, else 0.
local deleted = 0
local record = redis.call('get', KEYS[1])
if record and string.match(record, '^(%d+) ') == ARGV[1] then
  redis.call('del', KEYS[1])
  deleted = 1
end
redis.call(ARGV[2], KEYS[2], 'v ' .. ARGV[1])
return deleted
