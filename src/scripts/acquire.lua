-- Acquire: set the lock key to our token if it is free.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in ms.
-- Returns status OK when set, else the holder's PTTL (-1: the key has no expiry),
-- so a waiter knows how long it may sleep.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.status_reply('OK')
end
return redis.call('PTTL', KEYS[1])
