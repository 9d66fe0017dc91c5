-- Extend a reader: if ARGV[1] is a live reader in KEYS[2], make it live at
-- least ARGV[2] ms from now (never shorter), and the readers key with it.
-- KEYS as acquire_read.lua. Returns 1 when extended, 0 when not a live reader
-- (never re-created).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local score = redis.pcall('ZSCORE', KEYS[2], ARGV[1])
if type(score) ~= 'string' or tonumber(score) < now then
  return 0
end
local ttl = tonumber(ARGV[2])
if tonumber(score) < now + ttl then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
end
-- As in acquire_read.lua: the key expires just after its latest reader.
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], tonumber(last[2]) + 1)
return 1
