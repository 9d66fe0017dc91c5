-- Extend a permit: if the slot KEYS[1] holds ARGV[1], make it and its place
-- among the holders KEYS[2] (and the count KEYS[3] with them) live at least
-- ARGV[2] ms from now, never shorter, never re-created. KEYS as
-- acquire_permit.lua. Returns 1 or 0.
if not ours(redis.pcall('GET', KEYS[1]), ARGV[1]) then
  return 0
end
local ttl = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local score = tonumber(redis.pcall('ZSCORE', KEYS[2], ARGV[1])) or 0
if score < now + ttl then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], tonumber(last[2]) + 1)
redis.call('PEXPIREAT', KEYS[3], tonumber(last[2]) + 1)
return 1
