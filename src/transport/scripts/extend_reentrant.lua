-- Extend a reentrant lock: push the expiry out to at least ARGV[2] ms if
-- ARGV[1] owns it. Never re-creates, never shortens. Returns 1 or 0.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local ttl = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
