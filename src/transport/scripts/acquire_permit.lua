-- A semaphore's permit: one of its slots, and the semaphore's permit count.
-- KEYS[1] the slot (a plain lock's key), KEYS[2] the holders (a sorted set of
-- the tokens holding a slot here, each scored by its expiry on this node's
-- clock), KEYS[3] the permit count the holders were granted under, KEYS[4],
-- KEYS[5] the semaphore's line (line.lua). ARGV[1] token; ARGV[2] TTL in ms;
-- ARGV[3] the permit count asked with; ARGV[4] the holder's label (ours.lua;
-- may be empty); a waiter adds ARGV[5] its id, ARGV[6] its ticket, ARGV[7]
-- its patience.
-- Returns OK when the slot was set; {'permits', n} when live holders were
-- granted under another count n (nothing changes); else the slot holder's
-- PTTL (-1: no expiry), or a waiter's {PTTL, waiters ahead} (line.lua), it
-- staying in line. A waiter another slot is
-- kept for is refused a free one, with the time the kept one is kept.
local me = ARGV[5] and line_name('w', ARGV[5], ARGV[7])
local now = node_now()
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now)
if redis.call('EXISTS', KEYS[2]) == 1 then
  local count = redis.pcall('GET', KEYS[3])
  if type(count) == 'string' and count ~= ARGV[3] then
    return {'permits', count}
  end
end
local value = redis.pcall('GET', KEYS[1])
-- A waiter a slot is being kept for takes that slot, no other: the kept one
-- would stand unused until its patience is over.
if value == false and me and tonumber(redis.call('ZSCORE', KEYS[4], me) or 0) >= tonumber(SERVED) then
  local until_ = tonumber(redis.call('ZSCORE', KEYS[5], me) or 0)
  if until_ >= now then
    return until_ - now
  end
end
if value ~= false and not (me and value == KEPT .. me) then
  local pttl = redis.call('PTTL', KEYS[1])
  if me then
    return line_wait(KEYS[4], KEYS[5], me, ARGV[6], ARGV[7], pttl, now)
  end
  return pttl
end
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], labeled(ARGV[1], ARGV[4]), 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
redis.call('SET', KEYS[3], ARGV[3])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], tonumber(last[2]) + 1)
redis.call('PEXPIREAT', KEYS[3], tonumber(last[2]) + 1)
if me then
  line_leave(KEYS[4], KEYS[5], me)
end
return redis.status_reply('OK')
