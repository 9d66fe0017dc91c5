-- Release: delete the lock key only if it still holds our token.
-- KEYS[1] lock key; ARGV[1] token. Returns 1 when deleted, 0 when not ours.
-- pcall: a key of another type is simply not ours.
-- A deletion is published on the channel named after the key, with the token,
-- to wake waiters (see src/wakeup.rs); pcall: a user not allowed to publish
-- still releases.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', KEYS[1], ARGV[1])
  return 1
end
return 0
