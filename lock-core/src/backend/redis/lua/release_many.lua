-- Release many plain locks (this library's layout) in one call: the group
-- commit of the releases pending on one connection at the same moment.
-- Each lock is released as the single release's pipeline releases it: HDEL
-- of its owner's field (which deletes the hash, whose only field it is),
-- then the wake-up on its channel, `<prefix><owner>` (`0 <owner>`),
-- published whatever HDEL answered.
--
-- KEYS[2i-1]  lock i's hash
-- KEYS[2i]    lock i's wake-up channel
-- ARGV[1]     the publish command: PUBLISH, or SPUBLISH (sharded pub/sub)
-- ARGV[2]     the release message's prefix
-- ARGV[i+2]   lock i's owner
--
-- Returns one element per lock, in order: {deleted, listeners} (HDEL's
-- count, and the subscriptions the wake-up reached), or the error HDEL met
-- (a key of another type): one lock's error never fails the others.
local replies = {}
for i = 1, #KEYS / 2 do
  local owner = ARGV[i + 2]
  local deleted = redis.pcall('hdel', KEYS[2 * i - 1], owner)
  local listeners = redis.call(ARGV[1], KEYS[2 * i], ARGV[2] .. owner)
  if type(deleted) == 'table' and deleted.err then
    replies[i] = deleted
  else
    replies[i] = {deleted, listeners}
  end
end
return replies
