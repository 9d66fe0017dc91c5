-- Write lock: set the writer key KEYS[1] to ARGV[1] for ARGV[2] ms if neither a
-- writer nor a live reader stands, and clear the writer intent KEYS[3].
-- KEYS as acquire_read.lua. Returns OK when set. A writer standing: its PTTL
-- (-1: no expiry). Readers standing: the longest reader's time left, after
-- marking the writer's intent (which refuses new readers) with ARGV[1] for
-- that long plus the TTL, never shortening another writer's intent: the
-- readers drain, and the writer is not starved by new ones. The intent takes
-- the latest token, so that the writer's release (release_write.lua) clears
-- it where it was refused.
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
  return pttl
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if #last > 0 then
  local left = tonumber(last[2]) - now
  local keep = math.max(redis.call('PTTL', KEYS[3]), left + ttl)
  redis.call('SET', KEYS[3], ARGV[1], 'PX', keep)
  return left
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('DEL', KEYS[3])
return redis.status_reply('OK')
