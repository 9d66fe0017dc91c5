-- Release: delete the lock key only if it still holds our token.
-- KEYS[1] lock key; ARGV[1] token. Returns 1 when deleted, 0 when not ours.
-- pcall: a key of another type is simply not ours.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
