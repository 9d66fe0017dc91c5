-- Extend: push our key's expiry out to at least ARGV[2] ms from now.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in ms.
-- Never re-creates a vanished key (that would be a new acquisition) and never
-- shortens an expiry (a failed extend must not cut a lease that is still valid).
-- pcall: a key of another type is simply not ours.
if not ours(redis.pcall('GET', KEYS[1]), ARGV[1]) then
  return 0
end
local ttl = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
