-- Fenced acquire, phase 1: take the lease and draw a fencing counter.
-- KEYS[1] lock key; KEYS[2] fence counter (no TTL); ARGV[1] token; ARGV[2] TTL ms.
-- Free: INCR the counter, SET the lease, return {1, counter}.
-- Held: return {0, PTTL} (-1: no expiry); nothing changes.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local counter = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, counter}
