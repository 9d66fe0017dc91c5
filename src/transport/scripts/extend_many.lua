-- Extend several lock keys: only if every one of them still holds our token,
-- then push each expiry out to at least ARGV[2] ms (never shorter, never
-- re-created). KEYS: the lock keys; ARGV[1] token. Returns 1 or 0.
for _, key in ipairs(KEYS) do
  if not ours(redis.pcall('GET', key), ARGV[1]) then
    return 0
  end
end
local ttl = tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return 1
