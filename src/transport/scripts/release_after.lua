-- Release after a time (LockOptions::hold_at_least): the holder is done,
-- but the lock stays until ARGV[2] ms from now, then expires by itself.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] ms. If the key holds our token,
-- its expiry becomes exactly ARGV[2] ms from now and 1 is returned; else 0.
-- Nothing is published: the lock is not free yet (waiters sleep until its
-- PTTL, and take it when it runs out).
local value = redis.pcall('GET', KEYS[1])
if not ours(value, ARGV[1]) then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
