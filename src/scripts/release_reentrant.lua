-- Release one hold of a reentrant lock: count - 1, and the key goes at zero.
-- KEYS[1] lock key; ARGV[1] owner. Returns 1 when a hold was released, 0 when
-- the owner holds nothing here.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', KEYS[1], ARGV[1])
end
return 1
