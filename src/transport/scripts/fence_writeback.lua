-- Fenced acquire, phase 2: raise this node's counter to the token granted,
-- only while our lease is still here, and store the token with the key
-- (after the label, behind a second NUL byte: `token \0 label \0 T`), so
-- that inspection reports the holder's own fence however the counters move
-- later. KEYS[1] lock key; KEYS[2] fence counter; ARGV[1] token; ARGV[2] the
-- fencing token T. Returns 1, or 0 if the lease is gone (then this node
-- does not confirm T).
local value = redis.pcall('GET', KEYS[1])
if not ours(value, ARGV[1]) then
  return 0
end
local t = tonumber(ARGV[2])
if (tonumber(redis.call('GET', KEYS[2])) or 0) < t then
  redis.call('SET', KEYS[2], ARGV[2])
end
local label_at = string.find(value, '\0', 1, true)
if not label_at then
  redis.call('SET', KEYS[1], value .. '\0\0' .. ARGV[2], 'KEEPTTL')
elseif not string.find(value, '\0', label_at + 1, true) then
  redis.call('SET', KEYS[1], value .. '\0' .. ARGV[2], 'KEEPTTL')
end
return 1
