-- Fenced acquire, phase 2: raise this node's counter to the token granted,
-- only while our lease is still here. KEYS[1] lock key; KEYS[2] fence counter;
-- ARGV[1] token; ARGV[2] the fencing token T. Returns 1, or 0 if the lease is
-- gone (then this node does not confirm T).
if not ours(redis.pcall('GET', KEYS[1]), ARGV[1]) then
  return 0
end
local t = tonumber(ARGV[2])
if (tonumber(redis.call('GET', KEYS[2])) or 0) < t then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
