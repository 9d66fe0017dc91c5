-- Read lock: add a reader unless a writer or a writer's intent stands.
-- KEYS[1] writer key (a plain lock's string), KEYS[2] readers key (a sorted set
-- of reader tokens, each scored by its expiry in this node's milliseconds),
-- KEYS[3] writer-intent key, KEYS[4], KEYS[5] the lock's line (line.lua).
-- ARGV[1] token; ARGV[2] TTL in ms; a waiter adds ARGV[3] its id, ARGV[4] its
-- ticket, ARGV[5] its patience.
-- Returns OK when added; else the writer's, or the intent's, PTTL (-1: no
-- expiry), as acquire.lua answers (a waiter: {PTTL, waiters ahead}). While the writer key holds READERS_TURN
-- (a writer's release handed the lock to the readers in line) readers come
-- in; the turn ends when none is left in line (published on the writer key's
-- channel, to wake the writers waiting for it).
-- A reader lives while its score >= the node's time, as a key with a TTL lives
-- while its expiry >= the time; the readers key itself never expires before
-- its last reader.
local me = ARGV[3] and line_name('r', ARGV[3], ARGV[5])
local now = node_now()
local value = redis.pcall('GET', KEYS[1])
local turn = value == READERS_TURN
local pttl = -2
if value ~= false and not turn then
  pttl = redis.call('PTTL', KEYS[1])
else
  pttl = redis.call('PTTL', KEYS[3])
end
if pttl ~= -2 then
  if me then
    return line_wait(KEYS[4], KEYS[5], me, ARGV[4], ARGV[5], pttl, now)
  end
  return pttl
end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
-- The key expires just after its latest reader, on the clock of the scores
-- (PEXPIRE would count from the script's start, up to 1 ms earlier).
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], tonumber(last[2]) + 1)
if me then
  line_leave(KEYS[4], KEYS[5], me)
end
if turn then
  local waiting = redis.call('ZRANGEBYSCORE', KEYS[4], 0, '(' .. SERVED)
  local readers = false
  for _, who in ipairs(waiting) do
    if string.sub(who, 1, 1) == 'r' then
      readers = true
      break
    end
  end
  if not readers then
    -- The turn is over: writers waiting for it may try again.
    redis.call('DEL', KEYS[1])
    notify(KEYS[1], ARGV[1])
  end
end
return redis.status_reply('OK')
