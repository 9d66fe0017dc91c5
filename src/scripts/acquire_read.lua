-- Read lock: add a reader unless a writer or a writer's intent stands.
-- KEYS[1] writer key (a plain lock's string), KEYS[2] readers key (a sorted set
-- of reader tokens, each scored by its expiry in this node's milliseconds),
-- KEYS[3] writer-intent key. ARGV[1] token; ARGV[2] TTL in ms.
-- Returns OK when added; else the writer's, or the intent's, PTTL (-1: no
-- expiry), as acquire.lua answers.
-- A reader lives while its score >= the node's time, as a key with a TTL lives
-- while its expiry >= the time; the readers key itself never expires before
-- its last reader.
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 then
  pttl = redis.call('PTTL', KEYS[3])
end
if pttl ~= -2 then
  return pttl
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
-- The key expires just after its latest reader, on the clock of the scores
-- (PEXPIRE would count from the script's start, up to 1 ms earlier).
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], tonumber(last[2]) + 1)
return redis.status_reply('OK')
