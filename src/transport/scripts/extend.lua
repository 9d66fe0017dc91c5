-- Extend: push our key's expiry out to at least ARGV[2] ms from now.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in ms; ARGV[3], when given,
-- the holder's label, and the key is restored: absent, it is set again to
-- the token (and label) for the TTL, returning 2 (a node that lost it holds
-- it again; the client sends this only while its lock is valid, which makes
-- it as safe as an acquire: docs/design.md §4). Without ARGV[3] a vanished
-- key is never re-created. Never shortens an expiry (a failed extend must
-- not cut a lease that is still valid).
-- pcall: a key of another type is simply not ours.
local value = redis.pcall('GET', KEYS[1])
if value == false and ARGV[3] then
  redis.call('SET', KEYS[1], labeled(ARGV[1], ARGV[3]), 'PX', ARGV[2])
  return 2
end
if not ours(value, ARGV[1]) then
  return 0
end
local ttl = tonumber(ARGV[2])
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
