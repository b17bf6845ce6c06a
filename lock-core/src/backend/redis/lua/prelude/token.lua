-- Prelude of the scripts that issue fencing tokens: defines
-- `next_token(counter)`, the next token of a fencing counter.
--
-- No KEYS, no ARGV, no reply: the script it starts has them.
--
-- A token is one more than the counter, and at least the server's clock in
-- microseconds (TIME); the counter is set to it. While the counter lives,
-- tokens rise by at least one per token. When Redis loses the counter (an
-- empty restart, FLUSHALL, an eviction, a failover that lost writes), the
-- next token still lies above every token issued before the loss, as long as
-- the server's clock reads later than when those were issued: the clock
-- floor, not the lost counter, carries the order across the loss (the proof
-- and its assumptions: the guarantees guide, "Fencing tokens").
--
-- Tokens stay below 2^53 until the year 2255: exact as Lua's numbers (the
-- counter is read and written as decimal text) and as JSON numbers. Put a
-- token into a string with string.format('%d', token): Lua's `..` writes
-- numbers of more than 14 digits in exponent notation.
--
-- Redis 7 replicates a script's effects, so TIME is allowed before writes;
-- Redis 6 needs to be told, before the script's first write.
if redis.replicate_commands then redis.replicate_commands() end
local function next_token(counter)
  local stored = redis.call('get', counter)
  local token = 1
  if stored then
    local n = tonumber(stored)
    if not n or not string.match(stored, '^-?%d+$') or n >= 9007199254740991 then
      -- Not a counter, or one set (by hand) beyond what Lua counts exactly.
      error({err = 'ERR the fencing counter ' .. counter .. ' holds ' .. stored
        .. ', not an integer below 2^53'})
    end
    token = n + 1
  end
  local clock = redis.call('time')
  local floor = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
  if token < floor then
    token = floor
  end
  redis.call('set', counter, string.format('%d', token))
  return token
end
