-- Release one hold of a reentrant lock: forget the hold, count - 1, and the key
-- goes at zero. KEYS[1] lock key; ARGV[1] owner; ARGV[2] hold token.
-- Returns 1 when the hold was released, 0 when it is not counted here (never
-- taken, already released, or the key is gone): a hold is given back at most
-- once, however often its release arrives.
-- The deletion is published with the hold token, which is new for every hold,
-- so each final release wakes the waiters (see src/engine/wakeup.rs).
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return 0
end
if redis.call('HDEL', KEYS[1], '\255' .. ARGV[2]) == 0 then
  return 0
end
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('DEL', KEYS[1])
  notify(KEYS[1], ARGV[2])
end
return 1
